#!/usr/bin/python3
"""Samples/s of the asynchronous schedules against synchronous 1F1B (docs/training.md,
"Asynchronous schedules"), at the same micro-batch size, on 2 stages.

An MLP (Linear layers of --width, ReLU between, cross-entropy, SGD with momentum) is
compiled with PIPECC_SPLIT=even at -g 2 for: 1f1b with -m 2 (batches of 2b), pipedream,
async and spectrain (batches of b: one micro-batch each), 2bw with -m 2 (batches of 2b).
Each build trains --steps mini-batches (the same number of samples for every build:
pipedream/async/spectrain run twice the steps); rounds are interleaved and the figure is
the median over rounds of each build's samples/s (the last line of `pipeline train`) over
1f1b's of the same round. User CPU seconds of each run are reported beside (median).

With --pipecc-base B the asynchronous modes are also built with the pipecc B (another
revision) and run interleaved with the first: the median over rounds of each mode's
samples/s over the B build's of the same round, and their user CPU.

    /usr/bin/python3 tools/async_throughput.py --pipecc build/pipecc --work /tmp/at --rounds 5
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import async_ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--micro", type=int, default=32, help="samples per micro-batch")
    ap.add_argument("--steps", type=int, default=300, help="steps of the 2-micro-batch builds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pipecc-base", default="", help="also the asynchronous modes built with this pipecc")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    dims = [a.width] * a.layers + [10]
    b = a.micro
    model = async_ref.mlp_model(dims, seed=0)
    paths = {}
    for batch in (b, 2 * b):
        paths[batch] = os.path.join(a.work, "mlp_%d.onnx" % batch)
        torch.onnx.export(model, torch.zeros(batch, dims[0]), paths[batch], input_names=["input"],
                          output_names=["output"], opset_version=13)
    n = 2 * b * a.steps
    rng = np.random.default_rng(0)
    np.save(os.path.join(a.work, "X.npy"), rng.standard_normal((n, dims[0])).astype(np.float32))
    np.save(os.path.join(a.work, "Y.npy"), rng.integers(0, 10, size=n).astype(np.int64))
    builds = [("1f1b", 2 * b, 2, a.steps), ("pipedream", b, 1, 2 * a.steps), ("async", b, 1, 2 * a.steps),
              ("spectrain", b, 1, 2 * a.steps), ("2bw", 2 * b, 2, a.steps)]
    env = dict(os.environ, PIPECC_SPLIT="even")
    if a.pipecc_base:
        builds += [(s + "@base", bt, m, st) for s, bt, m, st in builds if s != "1f1b"]
    for sched, batch, m, _ in builds:
        out = os.path.join(a.work, sched)
        mode, base = sched.split("@")[0], sched.endswith("@base")
        mopt = ["-m", str(m)] if mode in ("1f1b", "2bw") else []  # -m does not apply to the others
        r = subprocess.run([a.pipecc_base if base else a.pipecc, paths[batch], "--train", "-g", "2", "--no-replicate",
                            "--schedule", mode] + mopt + ["--lr", "0.01", "--momentum", "0.9", "-o", out, "-q"],
                           capture_output=True, text=True, env=env)
        if r.returncode:
            sys.exit("pipecc %s: %s" % (sched, r.stderr))
    sps = {s: [] for s, _, _, _ in builds}
    cpu = {s: [] for s, _, _, _ in builds}
    for rnd in range(a.rounds):
        for sched, batch, m, steps in builds:
            u0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
            r2 = subprocess.run([os.path.join(a.work, sched, "pipeline"), "train", "--data",
                                 os.path.join(a.work, "X.npy"), "--labels", os.path.join(a.work, "Y.npy"), "--steps",
                                 str(steps), "--no-shuffle"], capture_output=True, text=True)
            cpu[sched].append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - u0)
            if r2.returncode:
                sys.exit("pipeline %s: %s" % (sched, r2.stderr))
            f = re.search(r"; ([\d.]+) samples/s", r2.stdout)
            if not f:
                sys.exit("no samples/s from %s: %s" % (sched, r2.stdout[-500:]))
            sps[sched].append(float(f.group(1)))
    print("2 stages, micro-batches of %d, MLP %s, %d rounds (samples/s; ratio to 1f1b: median over rounds)" %
          (b, "x".join(map(str, dims)), a.rounds))
    for sched, _, _, _ in builds:
        ratios = [x / y for x, y in zip(sps[sched], sps["1f1b"])]
        print("  %-14s median %.1f samples/s  ratio %.3f (%.3f..%.3f)  user CPU %.3f s" %
              (sched, statistics.median(sps[sched]), statistics.median(ratios), min(ratios), max(ratios),
               statistics.median(cpu[sched])))
    if a.pipecc_base:
        print("against the --pipecc-base builds (samples/s ratio: median over rounds, min..max; user CPU medians)")
        for sched, _, _, _ in builds:
            if sched == "1f1b" or sched.endswith("@base"):
                continue
            ratios = [x / y for x, y in zip(sps[sched], sps[sched + "@base"])]
            print("  %-9s %.3f (%.3f..%.3f)  user CPU %.3f s vs %.3f s" %
                  (sched, statistics.median(ratios), min(ratios), max(ratios), statistics.median(cpu[sched]),
                   statistics.median(cpu[sched + "@base"])))


if __name__ == "__main__":
    main()
