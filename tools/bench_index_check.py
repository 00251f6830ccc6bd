#!/usr/bin/env python3
"""tools/bench_index_check.py - what the run-time index checks of Gather and kin cost
(pipecc checks every index a model reads at run time, codegen/c cg_index_check): the
GPT-style model (token ids into a 512-row embedding) built twice for the cpu target,
with the checks and with PIPECC_INDEX_CHECKS=0 (no test at all), then ROUNDS
interleaved rounds of `pipeline --bench N` on core 0 (the order swapped every round),
samples/s of each, and the median ratio checked / unchecked.

  /usr/bin/python3 tools/bench_index_check.py [--batch B] [--bench N] [--rounds R] [--work DIR]

Prints the CPU model, the figures and the median ratio; exit 1 when the two builds'
outputs differ. A benchmark, not a test."""
import argparse
import os
import re
import statistics
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipecc", default=os.path.join(ROOT, "build", "pipecc"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--bench", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench_index_check"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    models = os.path.join(a.work, "models")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "export_models.py"), "--out", models, "--models",
                    "gpt"], check=True, stdout=subprocess.DEVNULL)
    model = os.path.join(models, "gpt.onnx")
    builds = {}
    for label, env in (("checked", {}), ("unchecked", {"PIPECC_INDEX_CHECKS": "0"})):
        out = os.path.join(a.work, label)
        e = dict(os.environ, **env)
        subprocess.run([a.pipecc, model, "-d", "batch=%d" % a.batch, "-m", "1", "-o", out], check=True, env=e,
                       stderr=subprocess.DEVNULL)
        builds[label] = os.path.join(out, "pipeline")
    n_checks = open(os.path.join(a.work, "checked", "stage_0.c")).read().count("pipert_bad_input(")
    ids = np.random.RandomState(0).randint(0, 512, (a.batch, 64)).astype(np.int64)
    x = os.path.join(a.work, "ids.npy")
    np.save(x, ids)
    outs = {}
    for label, exe in builds.items():
        outs[label] = os.path.join(a.work, label + ".npy")
        subprocess.run([exe, "--input", x, "--output", outs[label]], check=True)
    same = np.array_equal(np.load(outs["checked"]), np.load(outs["unchecked"]))
    sps = {k: [] for k in builds}
    for r in range(a.rounds):
        order = list(builds) if r % 2 == 0 else list(reversed(list(builds)))
        for label in order:
            p = subprocess.run(["taskset", "-c", "0", builds[label], "--input", x, "--bench", str(a.bench)],
                               capture_output=True, text=True, check=True)
            sps[label].append(float(re.search(r"throughput: ([0-9.]+) samples/s", p.stdout + p.stderr).group(1)))
    ratios = [c / u for c, u in zip(sps["checked"], sps["unchecked"])]
    print("bench_index_check: %s, GPT-style model, batch %d as one micro-batch, g=1, one core, %d rounds of --bench %d"
          % (cpu_model(), a.batch, a.rounds, a.bench))
    print("  run-time index checks in the checked build: %d" % n_checks)
    for label in builds:
        print("  %-9s samples/s: median %.1f (%s)" % (label, statistics.median(sps[label]),
                                                      " ".join("%.1f" % v for v in sps[label])))
    print("  checked / unchecked: median %.4f (range %.4f..%.4f)" % (statistics.median(ratios), min(ratios), max(ratios)))
    print("  outputs %s" % ("bitwise equal" if same else "DIFFER"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
