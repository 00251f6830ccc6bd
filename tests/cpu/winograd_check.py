#!/usr/bin/python3
"""cpu target, passes/opt/winograd.c + codegen/c/winograd.c: 3x3 stride-1 Convs by Winograd
F(m x m, 3x3) against onnxruntime, on a model built here whose Convs cover the cases the
tiles must get right: map sizes that are not multiples of m (partial tiles), symmetric,
asymmetric and SAME_UPPER pads, no pads, with and without bias, a fused residual Add +
Relu epilogue, channel counts that are not multiples of anything, and two Convs that must
stay on im2col (group 2, stride 2). At the micro-batch of 1 that the checks compile for,
auto takes m = 4 on the three large maps (42 tiles of 4x4 each), m = 2 on one (30 tiles
of 4x4, 120 of 2x2) and leaves two to im2col (under 32 tiles of either size).

For --winograd 0, 2, 4 and auto: the pass prepares exactly the expected Convs (from
--time-passes), the stage code says which F(m x m) it emits for each, the outputs match
onnxruntime within rel-L2 1e-4 (and are printed); auto on 1, 2 and 3 stages gives
bitwise equal outputs, and a fused and a --no-fuse build of the same tiles too.

    winograd_check.py --pipecc build/pipecc --work /tmp/w

Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import pipecc_test as pt  # noqa: E402

PREPARED = 6  # convs a, b, c, e, f, h below
AUTO = {"4x4": 3, "2x2": 1}  # a, b, c; e (f and h: im2col)


def build_model(path):
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def w(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name))
        return name

    def conv(name, x, y, cin, cout, k=3, bias=True, **attrs):
        ins = [x, w(name + ".w", cout, cin // attrs.get("group", 1), k, k)]
        if bias:
            ins.append(w(name + ".b", cout))
        nodes.append(helper.make_node("Conv", ins, [y], name=name, **attrs))

    # X [2, 8, 26, 22]
    conv("a", "X", "ya", 8, 12, pads=[1, 1, 1, 1])                        # 26x22, partial tiles
    nodes.append(helper.make_node("Relu", ["ya"], ["ra"], name="relu_a"))
    conv("b", "ra", "yb", 12, 12, bias=False, pads=[0, 1, 1, 0])         # 25x21, asymmetric pads
    conv("c", "yb", "yc", 12, 16, auto_pad="SAME_UPPER")                 # 25x21
    conv("d", "yb", "yd", 12, 16, k=1)                                    # 1x1: im2col/direct
    nodes.append(helper.make_node("Add", ["yc", "yd"], ["sc"], name="add_c"))
    nodes.append(helper.make_node("Relu", ["sc"], ["rc"], name="relu_c"))  # fused into c
    conv("e", "rc", "ye", 16, 9)                                          # no pads: 23x19
    nodes.append(helper.make_node("MaxPool", ["ye"], ["pe"], name="pool", kernel_shape=[2, 2], strides=[2, 2]))
    conv("f", "pe", "yf", 9, 10, pads=[0, 0, 0, 0])                       # 11x9 -> 9x7
    conv("g", "ye", "yg", 9, 10, strides=[2, 2], pads=[1, 1, 1, 1])       # stride 2: not prepared
    conv("g2", "yg", "yg2", 10, 10, group=2, pads=[1, 1, 1, 1])           # group 2: not prepared
    conv("h", "yg2", "yh", 10, 11, pads=[1, 1, 1, 1], dilations=[1, 1], strides=[1, 1])  # 12x10
    graph = helper.make_graph(
        nodes, "winograd_cases",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 8, 26, 22])],
        [helper.make_tensor_value_info("yf", TensorProto.FLOAT, [2, 10, 9, 7]),
         helper.make_tensor_value_info("yh", TensorProto.FLOAT, [2, 11, 12, 10]),
         helper.make_tensor_value_info("rc", TensorProto.FLOAT, [2, 16, 25, 21])],
        inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="winograd_check")
    m.ir_version = 8  # what onnxruntime reads (onnx 1.23's default, 14, is newer)
    onnx.checker.check_model(m)
    onnx.save(m, path)


def compile_run(a, model, xin, d, g, post):
    r = subprocess.run(pt.pipecc_cmd(a.pipecc, model, g, 2, d, 2, [], post=["--time-passes"] + post),
                       capture_output=True, text=True, env=pt.split_env())
    if r.returncode:
        print(r.stderr[-4000:])
        print(f"FAIL {d}: pipecc exited with {r.returncode}")
        return None, None
    m = re.search(r"pass winograd .*\((\d+) convs\)", r.stderr)
    prepared = int(m.group(1)) if m else 0
    outs, _ = pt.run_pipeline(d, xin, d)
    return outs, prepared


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = os.path.join(a.work, "winograd")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(work, "cases.onnx")
    build_model(model)
    xin, yref = os.path.join(work, "x.npz"), os.path.join(work, "y.npz")
    if not pt.ort_reference("winograd", model, [], None, xin, yref, 1):
        return 1
    ref = dict(np.load(yref))
    ok = True
    outs = {}
    for mode in ("0", "2", "4", "auto"):
        d = os.path.join(work, "m" + mode)
        got, prepared = compile_run(a, model, xin, d, 1, ["--winograd", mode])
        if got is None:
            return 1
        outs[mode] = got
        want = 0 if mode == "0" else sum(AUTO.values()) if mode == "auto" else PREPARED
        if prepared != want:
            print(f"FAIL --winograd {mode}: {prepared} Convs prepared, expected {want}")
            ok = False
        code = "".join(open(f).read() for f in glob.glob(os.path.join(d, "stage_*.c")))
        found = re.findall(r"Winograd F\((\dx\d), 3x3\)", code)
        tiles = {t: found.count(t) for t in sorted(set(found))}
        want_tiles = {"0": {}, "2": {"2x2": PREPARED}, "4": {"4x4": PREPARED}, "auto": AUTO}[mode]
        if tiles != want_tiles:
            print(f"FAIL --winograd {mode}: the stage code emits F({tiles}), expected F({want_tiles})")
            ok = False
        good, worst = pt.compare(got, ref, 1e-4, f"--winograd {mode}")
        print(f"--winograd {mode}: {prepared} Convs prepared, tiles {tiles}, rel-L2 against onnxruntime {worst:.3g}")
        ok &= good
    # the same bits on 2 and 3 stages, and without the fused epilogue
    for tag, g, post in (("between 1 and 2 stages", 2, []), ("between 1 and 3 stages", 3, []),
                         ("between the fused and the --no-fuse build", 1, ["--no-fuse"])):
        d = os.path.join(work, f"auto_g{g}" + ("_nofuse" if post else ""))
        got, _ = compile_run(a, model, xin, d, g, ["--winograd", "auto"] + post)
        if got is None:
            return 1
        for k, v in outs["auto"].items():
            if got[k].tobytes() != v.tobytes():
                print(f"FAIL --winograd auto: output {k} differs {tag}")
                ok = False
    print("winograd: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
