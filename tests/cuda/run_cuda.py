#!/usr/bin/python3
"""cuda target tests for one model.

    run_cuda.py build --pipecc build/pipecc --model resnet18.onnx --shape input:2x3x224x224 \\
                      --stages 2 --work /tmp/w
        Emits with --target cuda (PIPECC_SPLIT=even: exactly g contiguous stages) and
        builds through nvcc for sm_80 and sm_90 (compile and link only: no GPU needed).
        Checks: pipecc exits 0, DIR/pipeline exists, nvcc/cc print no warnings, and a
        second --emit-only run gives byte-identical sources (deterministic output).

    run_cuda.py run --pipecc ... --model ... --shape ... --stages 1,2,4 --work /tmp/w \\
                    [--int-high 512] [--train]
        Needs a GPU (exit 77 = skipped when /dev/nvidia0 is missing or nvidia-smi fails):
        builds for every g (all stages share the one GPU), runs DIR/pipeline on random
        inputs and compares with onnxruntime (tools/ort_ref.py): rel-L2 <= 1e-3 with TF32
        (the default), and for g=1 again with --no-tf32 at rel-L2 <= 1e-4.

Prints one line per build with its wall time. Exit 0 pass, 1 fail, 77 skipped.
"""

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77


def have_gpu():
    if not os.path.exists("/dev/nvidia0"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def pipecc_cmd(a, g, d, extra=()):
    cmd = [a.pipecc, a.model, "--target", "cuda", "-g", str(g), "-m", str(a.microbatches), "-o", d,
           "-j", str(a.jobs)]
    for s in a.shape:
        cmd += ["--shape", s]
    return cmd + list(extra)


def build(a, g, d, extra=()):
    """pipecc --target cuda into d; returns (ok, seconds)."""
    shutil.rmtree(d, ignore_errors=True)
    env = dict(os.environ, PIPECC_SPLIT="even")
    t = time.time()
    r = subprocess.run(pipecc_cmd(a, g, d, extra), capture_output=True, text=True, env=env)
    dt = time.time() - t
    name = os.path.basename(a.model)
    if r.returncode or not os.path.exists(os.path.join(d, "pipeline")):
        print(r.stdout[-4000:], r.stderr[-12000:])
        print(f"FAIL {name} g={g}: pipecc --target cuda exited with {r.returncode}")
        return False, dt
    warn = [l for l in r.stderr.splitlines()
            if re.search(r"(\.cu|\.c|\.h)(:\d+:\d+:|\(\d+\)).*warning|^nvcc warning", l)]
    if warn:
        print("\n".join(warn[:20]))
        print(f"FAIL {name} g={g}: the emitted code compiles with warnings")
        return False, dt
    return True, dt


def same_sources(a, g, d, d2):
    """A second --emit-only run must write byte-identical sources."""
    shutil.rmtree(d2, ignore_errors=True)
    env = dict(os.environ, PIPECC_SPLIT="even", SOURCE_DATE_EPOCH="0")
    r = subprocess.run(pipecc_cmd(a, g, d2, ["--emit-only"]), capture_output=True, text=True, env=env)
    if r.returncode:
        print(r.stderr[-4000:])
        return False
    ok = True
    for f in sorted(os.listdir(d2)):
        if f in ("plan.json", "report.html", "Makefile") or f.endswith(".bin"):
            continue  # plan.json/report.html: planner's; Makefile: has the -o DIR command line
        if not filecmp.cmp(os.path.join(d, f), os.path.join(d2, f), shallow=False):
            # the header has the command line (different -o); compare without it
            x = open(os.path.join(d, f), "rb").read().split(b"\n", 4)[-1]
            y = open(os.path.join(d2, f), "rb").read().split(b"\n", 4)[-1]
            if x != y:
                print(f"FAIL: {f} differs between two runs")
                ok = False
    shutil.rmtree(d2, ignore_errors=True)
    return ok


def no_device_error(a, d, work):
    """Without a GPU the built pipeline must fail cleanly: exit 1, a line naming the stage."""
    import numpy as np
    files = []
    for s in a.shape:
        name, dims = s.rsplit(":", 1)
        shape = [int(v) for v in dims.replace(",", "x").split("x")]
        f = os.path.join(work, f"zeros_{len(files)}.npy")
        np.save(f, np.zeros(shape, dtype=np.int64 if a.int_high else np.float32))
        files += ["--input", f"{name}={f}"]
    r = subprocess.run([os.path.join(d, "pipeline")] + files + ["--output", os.path.join(work, "y.npz")],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 1 or not re.search(r"^pipeline: stage \d+: no CUDA device", r.stderr, re.M):
        print(r.stdout[-2000:], r.stderr[-2000:])
        print(f"FAIL: without a GPU the pipeline should exit 1 naming the stage (got {r.returncode})")
        return False
    print("no GPU: " + r.stderr.splitlines()[0])
    return True


def rel_l2(x, y):
    import numpy as np
    x = x.astype(np.float64).ravel()
    y = y.astype(np.float64).ravel()
    n = np.linalg.norm(y)
    d = np.linalg.norm(x - y)
    return d / n if n > 0 else d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["build", "run"])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--stages", default="2")
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--work", required=True)
    ap.add_argument("--int-high", type=int, default=None, help="integer inputs (token ids) below this")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the build directories")
    a = ap.parse_args()
    name = os.path.splitext(os.path.basename(a.model))[0]
    work = os.path.join(a.work, name)
    os.makedirs(work, exist_ok=True)
    stages = [int(x) for x in a.stages.split(",")]

    if a.mode == "build":
        ok = True
        for g in stages:
            d = os.path.join(work, f"build_g{g}")
            good, dt = build(a, g, d)
            print(f"{name} g={g}: emit + nvcc build {dt:.1f} s")
            if good and not same_sources(a, g, d, d + "_again"):
                good = False
            if good and not have_gpu() and not no_device_error(a, d, work):
                good = False
            ok &= good
            if good and not a.keep:
                shutil.rmtree(d, ignore_errors=True)
        print(("PASS " if ok else "FAIL ") + name)
        return 0 if ok else 1

    if not have_gpu():
        print(f"SKIP {name}: no GPU (/dev/nvidia0 missing or nvidia-smi failed)")
        return SKIP
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "tests", "cpu"))
    xin = os.path.join(work, "x.npz")
    yref = os.path.join(work, "y.npz")
    cmd = [sys.executable, os.path.join(ROOT, "tools", "ort_ref.py"), a.model, "--inputs-out", xin,
           "--outputs-out", yref, "--threads", "4", "--seed", "0"]
    for s in a.shape:
        cmd += ["--shape", s]
    if a.int_high:
        cmd += ["--int-high", str(a.int_high)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(r.stdout, r.stderr)
        print(f"FAIL {name}: ort_ref.py failed")
        return 1
    ref = dict(np.load(yref))
    if a.train:
        from run_model import ort_micro  # onnxruntime per micro-batch (batch statistics)
        ref = ort_micro(a.model, dict(np.load(xin)), a.microbatches)
    runs = [(g, [], 1e-3, "tf32") for g in stages] + [(1, ["--no-tf32"], 1e-4, "fp32")]
    ok = True
    for g, extra, tol, tag in runs:
        d = os.path.join(work, f"run_g{g}_{tag}")
        good, dt = build(a, g, d, extra)
        if not good:
            ok = False
            continue
        out = os.path.join(d, "y.npz")
        t = time.time()
        r = subprocess.run([os.path.join(d, "pipeline"), "--input", xin, "--output", out], capture_output=True,
                           text=True)
        tr = time.time() - t
        if r.returncode:
            print(r.stdout[-4000:], r.stderr[-4000:])
            print(f"FAIL {name} g={g} {tag}: pipeline exited with {r.returncode}")
            ok = False
            continue
        got = dict(np.load(out))
        worst = 0.0
        for k, v in ref.items():
            if k not in got or got[k].shape != v.shape or got[k].dtype != v.dtype:
                print(f"FAIL {name} g={g} {tag}: output {k} missing or of another shape/dtype")
                ok = False
                continue
            e = rel_l2(got[k], v)
            worst = max(worst, e)
            if not e <= tol:
                print(f"FAIL {name} g={g} {tag}: output {k}: rel-L2 {e:.3g} > {tol:g}")
                ok = False
        print(f"{name} g={g} {tag}: build {dt:.1f} s, run {tr:.2f} s, max rel-L2 {worst:.3g} (tolerance {tol:g})")
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    print(("PASS " if ok else "FAIL ") + name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
