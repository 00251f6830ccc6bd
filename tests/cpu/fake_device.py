#!/usr/bin/python3
"""The runtime's device mode on real models without a GPU: a cpu build run on the fake
asynchronous device (PIPERT_FAKE_DEVICE=1, runtime/rt_fakedev.c: the stages' work queued
on stream threads with random delays, sets in "device memory", handed over by events,
graph inputs on an upload stream, outputs downloaded a micro-batch late) must give the
host run's bits, for g stages sharing the device, one batch and a stream of batches.

    fake_device.py --pipecc build/pipecc --model gpt.onnx --shape input_ids:4x64 \\
                   --work /tmp/w [--stages 1,4] [-m 4] [--int-high 512]

Exit status 0 when every check passes, 1 otherwise.
"""

import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import pipecc_test as pt  # noqa: E402


def main():
    ap = pt.model_args()
    ap.add_argument("--stages", default="1,4")
    ap.add_argument("-m", type=int, default=4, help="micro-batches")
    ap.add_argument("--int-high", type=int, default=None, help="integer inputs (token ids) below this")
    a = ap.parse_args()
    name, work = pt.model_work(a)
    xin, yref = os.path.join(work, "x.npz"), os.path.join(work, "y.npz")
    if not pt.ort_reference(name, a.model, a.shape, a.int_high, xin, yref, 1):
        return 1
    ok = True
    for g in [int(v) for v in a.stages.split(",")]:
        d = os.path.join(work, f"g{g}")
        if pt.run_pipecc(pt.pipecc_cmd(a.pipecc, a.model, g, a.m, d, 2, a.shape), f"{name} g={g}") is None:
            return 1
        host, _ = pt.run_pipeline(d, xin, f"{name} g={g} host")
        if host is None:
            return 1
        for how, extra in (("one batch", []), ("5 batches streamed", ["--bench", "5", "--stream"])):
            env = {"PIPERT_FAKE_DEVICE": "1", "FAKE_DEV_STATS": "1"}
            out = os.path.join(d, "y_fake.npz")
            r = subprocess.run([os.path.join(d, "pipeline"), "--input", xin, "--output", out] + extra,
                               capture_output=True, text=True, env=dict(os.environ, **env))
            if r.returncode:
                print(r.stderr[-3000:])
                print(f"FAIL {name} g={g} fake device, {how}: exit {r.returncode}")
                ok = False
                continue
            got = dict(np.load(out))
            same = sorted(got) == sorted(host) and all(got[k].tobytes() == host[k].tobytes() for k in host)
            st = re.findall(r"^fake device: stage \d+: (\d+) parts queued ahead, (\d+) uploads queued ahead", r.stderr,
                            re.M)
            parts, ups = sum(int(p) for p, _ in st), sum(int(u) for _, u in st)
            if not st or parts < g * a.m or ups < a.m:
                print(f"FAIL {name} g={g} {how}: {parts} parts, {ups} uploads queued ahead (device mode not async?)")
                ok = False
            print(f"{name} g={g} {how}: fake device {'bitwise equal to' if same else 'DIFFERENT from'} the host run "
                  f"({parts} parts, {ups} uploads queued ahead)")
            ok &= same
    good, worst = pt.compare(host, dict(np.load(yref)), 1e-4, name)
    print(f"{name}: host run against onnxruntime rel-L2 {worst:.3g}")
    print(("PASS " if ok and good else "FAIL ") + name)
    return 0 if ok and good else 1


if __name__ == "__main__":
    sys.exit(main())
