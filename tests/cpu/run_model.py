#!/usr/bin/python3
"""cpu target, real-model test: compile MODEL at several stage counts, run DIR/pipeline
on random inputs, compare with onnxruntime (rel-L2) and check the outputs are bitwise
identical across stage counts.

    run_model.py --pipecc build/pipecc --model resnet18.onnx --shape input:2x3x224x224 \\
                 --stages 1,2,4 --microbatches 2 --work /tmp/w [--int-high 512] [--train]

Stages are forced with PIPECC_SPLIT=even (exactly g contiguous stages). With --train
(models exported in training mode: BatchNormalization uses the statistics of its batch,
which for the pipeline is one micro-batch) the oracle runs onnxruntime on every
micro-batch separately, with Dropout switched to inference.
Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def rel_l2(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    d = np.linalg.norm(a - b)
    n = np.linalg.norm(b)
    return d / n if n > 0 else d


def ort_micro(model, inputs, M):
    """onnxruntime per micro-batch (training-mode exports), Dropout forced to inference."""
    import onnx
    import onnxruntime as ort
    m = onnx.load(model)
    for n in m.graph.node:
        if n.op_type == "Dropout" and len(n.input) >= 3 and n.input[2]:
            name = n.input[2]
            for c in m.graph.node:
                if c.op_type == "Constant" and c.output[0] == name:
                    c.attribute[0].t.raw_data = b"\x00"
            for init in m.graph.initializer:
                if init.name == name:
                    init.raw_data = b"\x00"
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outs = {k: [] for k in names}
    B = next(iter(inputs.values())).shape[0]
    b = B // M
    for i in range(M):
        feed = {k: v[i * b:(i + 1) * b] for k, v in inputs.items()}
        for k, v in zip(names, sess.run(None, feed)):
            outs[k].append(v)
    return {k: np.concatenate(v) for k, v in outs.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--stages", default="1,2")
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--work", required=True)
    ap.add_argument("--int-high", type=int, default=None)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the build directories")
    a = ap.parse_args()

    name = os.path.splitext(os.path.basename(a.model))[0]
    work = os.path.join(a.work, name)
    os.makedirs(work, exist_ok=True)
    xin = os.path.join(work, "x.npz")
    yref = os.path.join(work, "y.npz")
    cmd = [sys.executable, os.path.join(ROOT, "tools", "ort_ref.py"), a.model, "--inputs-out", xin,
           "--outputs-out", yref, "--threads", "1", "--seed", "0"]
    for s in a.shape:
        cmd += ["--shape", s]
    if a.int_high:
        cmd += ["--int-high", str(a.int_high)]
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(r.stdout, r.stderr)
        print(f"FAIL {name}: ort_ref.py failed")
        return 1
    inputs = dict(np.load(xin))
    ref = dict(np.load(yref))
    if a.train:
        ref = ort_micro(a.model, inputs, a.microbatches)
    print(f"{name}: onnxruntime {time.time() - t:.1f} s")

    ok = True
    first = None
    for g in [int(x) for x in a.stages.split(",")]:
        d = os.path.join(work, f"g{g}")
        shutil.rmtree(d, ignore_errors=True)
        cmd = [a.pipecc, a.model, "-g", str(g), "-m", str(a.microbatches), "-o", d, "-j", str(a.jobs)]
        for s in a.shape:
            cmd += ["--shape", s]
        env = dict(os.environ, PIPECC_SPLIT="even")
        t = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        tc = time.time() - t
        if r.returncode:
            print(r.stdout[-4000:], r.stderr[-8000:])
            print(f"FAIL {name} g={g}: pipecc exited with {r.returncode}")
            ok = False
            continue
        warn = [l for l in r.stderr.splitlines() if re.search(r"\.c:\d+:\d+: warning:", l)]
        if warn:
            print("\n".join(warn[:20]))
            print(f"FAIL {name} g={g}: the emitted code compiles with warnings")
            ok = False
        out = os.path.join(d, "y.npz")
        t = time.time()
        r = subprocess.run([os.path.join(d, "pipeline"), "--input", xin, "--output", out], capture_output=True, text=True)
        tr = time.time() - t
        if r.returncode:
            print(r.stdout[-4000:], r.stderr[-4000:])
            print(f"FAIL {name} g={g}: pipeline exited with {r.returncode}")
            ok = False
            continue
        got = dict(np.load(out))
        worst = 0.0
        for k, v in ref.items():
            if k not in got:
                print(f"FAIL {name} g={g}: output {k} missing")
                ok = False
                continue
            if got[k].shape != v.shape or got[k].dtype != v.dtype:
                print(f"FAIL {name} g={g}: output {k}: {got[k].dtype}{got[k].shape} vs {v.dtype}{v.shape}")
                ok = False
                continue
            e = rel_l2(got[k], v)
            worst = max(worst, e)
            if not e <= a.tol:
                print(f"FAIL {name} g={g}: output {k}: rel-L2 {e:.3g} > {a.tol:g}")
                ok = False
        same = ""
        if first is None:
            first = got
        else:
            for k in first:
                if k in got and first[k].tobytes() != got[k].tobytes():
                    print(f"FAIL {name} g={g}: output {k} differs bitwise from the first stage count")
                    ok = False
                    same = " NOT bitwise equal"
            same = same or " bitwise equal"
        print(f"{name} g={g}: build {tc:.1f} s, run {tr:.2f} s, max rel-L2 {worst:.3g}{same}")
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    print(("PASS " if ok else "FAIL ") + name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
