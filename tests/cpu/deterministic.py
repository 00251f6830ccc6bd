#!/usr/bin/python3
"""cpu target: the same pipecc command twice must give a byte-identical build directory
(sources, weights, Makefile; the binary and objects are the compiler's business).

    deterministic.py --pipecc build/pipecc --model gpt.onnx --shape input_ids:2x64 -g 4 --work /tmp/w
"""
import argparse
import filecmp
import os
import shutil
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("-g", default="4")
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    out = os.path.join(a.work, "build")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    cmd = [a.pipecc, a.model, "-g", a.g, "-m", "2", "-o", out, "--emit-only"]
    for s in a.shape:
        cmd += ["--shape", s]
    env = dict(os.environ, PIPECC_SPLIT="even")
    snaps = []
    for k in range(2):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode:
            print(r.stderr)
            print("FAIL: pipecc failed")
            return 1
        snap = os.path.join(a.work, f"run{k}")
        shutil.copytree(out, snap)
        snaps.append(snap)
        shutil.rmtree(out)
    files = sorted(f for f in os.listdir(snaps[0])
                   if f.startswith(("stage_", "weights_")) or f in ("pipeline_main.c", "Makefile"))
    if not files or not any(f.startswith("stage_") for f in files):
        print("FAIL: no stage files emitted")
        return 1
    if sorted(os.listdir(snaps[0])) != sorted(os.listdir(snaps[1])):
        print("FAIL: the two runs wrote different file sets")
        return 1
    bad = [f for f in files if not filecmp.cmp(os.path.join(snaps[0], f), os.path.join(snaps[1], f), shallow=False)]
    for f in bad:
        print(f"FAIL: {f} differs between two identical runs")
    print(f"{len(files)} files compared, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
