#!/usr/bin/python3
"""cpu target, passes/opt/fuse.c: a model compiled with its Conv -> Add -> Relu/Clip chains
fused into the Conv (the default; and 1x1 expansions into the depthwise Conv reading
them) and with --no-fuse gives bitwise equal outputs (the fused code computes what the
separate nodes compute, in the same order), and the fused build really fused something:
at least one chain, and at least --expansions expansion pairs.

    fuse_equal.py --pipecc build/pipecc --model resnet18.onnx --shape input:2x3x224x224 \\
                  --work /tmp/w [-g 2] [--expansions N]

Exit status 0 when every check passes, 1 otherwise.
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import pipecc_test as pt  # noqa: E402


def main():
    ap = pt.model_args()
    ap.add_argument("-g", type=int, default=2)
    ap.add_argument("--expansions", type=int, default=0)
    a = ap.parse_args()
    name, work = pt.model_work(a)
    xin, yref = os.path.join(work, "x.npz"), os.path.join(work, "y.npz")
    if not pt.ort_reference(name, a.model, a.shape, None, xin, yref, 1):
        return 1
    outs = {}
    for tag, post in (("fused", ["--time-passes"]), ("unfused", ["--no-fuse"])):
        d = os.path.join(work, tag)
        r = pt.run_pipecc(pt.pipecc_cmd(a.pipecc, a.model, a.g, 2, d, 2, a.shape, post=post), f"{name} {tag}")
        if r is None:
            return 1
        if tag == "fused":
            chains = pt.fused_chains(r.stderr)
            if chains <= 0:
                print(f"FAIL {name}: nothing fused")
                return 1
            pairs = pt.fused_expansions(r.stderr)
            if pairs < a.expansions:
                print(f"FAIL {name}: {pairs} expansions fused into a depthwise Conv, expected {a.expansions}+")
                return 1
            print(f"{name}: {chains} chains fused, {max(pairs, 0)} expansions into a depthwise Conv")
        outs[tag], _ = pt.run_pipeline(d, xin, f"{name} {tag}")
        if outs[tag] is None:
            return 1
    ok = True
    for k, v in outs["unfused"].items():
        if k not in outs["fused"] or outs["fused"][k].tobytes() != v.tobytes():
            print(f"FAIL {name}: output {k} differs between the fused and the unfused build")
            ok = False
    good, worst = pt.compare(outs["fused"], dict(np.load(yref)), 1e-4, name)
    print(f"{name}: fused == unfused bitwise: {ok}; against onnxruntime rel-L2 {worst:.3g}")
    pt.done_with(work, ok and good)
    return 0 if ok and good else 1


if __name__ == "__main__":
    sys.exit(main())
