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

import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import pipecc_test as pt  # noqa: E402


def main():
    ap = pt.model_args()
    ap.add_argument("--stages", default="1,2")
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--int-high", type=int, default=None)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the build directories")
    a = ap.parse_args()

    name, work = pt.model_work(a, fresh=False)
    xin = os.path.join(work, "x.npz")
    yref = os.path.join(work, "y.npz")
    t = time.time()
    if not pt.ort_reference(name, a.model, a.shape, a.int_high, xin, yref, 1):
        return 1
    inputs = dict(np.load(xin))
    ref = dict(np.load(yref))
    if a.train:
        ref = pt.ort_micro(a.model, inputs, a.microbatches)
    print(f"{name}: onnxruntime {time.time() - t:.1f} s")

    ok = True
    first = None
    for g in [int(x) for x in a.stages.split(",")]:
        d = os.path.join(work, f"g{g}")
        shutil.rmtree(d, ignore_errors=True)
        cmd = pt.pipecc_cmd(a.pipecc, a.model, g, a.microbatches, d, a.jobs, a.shape)
        t = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True, env=pt.split_env())
        tc = time.time() - t
        if r.returncode:
            print(r.stdout[-4000:], r.stderr[-8000:])
            print(f"FAIL {name} g={g}: pipecc exited with {r.returncode}")
            ok = False
            continue
        warn = pt.cc_warnings(r.stderr)
        if warn:
            print("\n".join(warn[:20]))
            print(f"FAIL {name} g={g}: the emitted code compiles with warnings")
            ok = False
        got, tr = pt.run_pipeline(d, xin, f"{name} g={g}")
        if got is None:
            ok = False
            continue
        good, worst = pt.compare(got, ref, a.tol, f"{name} g={g}")
        ok &= good
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
