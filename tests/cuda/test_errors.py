#!/usr/bin/python3
"""cuda target: model errors need no nvcc and no GPU.

    test_errors.py --pipecc build/pipecc --work DIR

A model with two nodes the cuda target does not support (Softmax and ReduceMean on
float64: its kernels for those are float32 only) must make `pipecc --target cuda` exit 2
with one line per unsupported node, both reported at once (file: node ... (Op, opset N):
cuda target: ...), and write no stage sources.
A supported model emitted twice with --emit-only must give identical stage sources.
Exit 0 pass, 1 fail."""

import argparse
import os
import shutil
import subprocess
import sys

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np


def model_unsupported(path):
    nodes = [
        helper.make_node("Softmax", ["x"], ["y"], name="softmax64", axis=1),
        helper.make_node("GlobalAveragePool", ["y"], ["z"], name="pool64"),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 4, 5, 5])],
                          [helper.make_tensor_value_info("z", TensorProto.DOUBLE, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def model_supported(path):
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.ones((4,), np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[0, 0, 1, 1]),  # asymmetric pads
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Transpose", ["r"], ["t"], name="tr", perm=[0, 2, 3, 1]),
        helper.make_node("Softmax", ["t"], ["y"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    ok = True

    bad = os.path.join(a.work, "unsupported.onnx")
    model_unsupported(bad)
    d = os.path.join(a.work, "unsupported")
    shutil.rmtree(d, ignore_errors=True)
    r = subprocess.run([a.pipecc, bad, "--target", "cuda", "-o", d], capture_output=True, text=True)
    lines = [l for l in r.stderr.splitlines() if "cuda target" in l]
    if r.returncode != 2:
        print(f"FAIL: unsupported ops: exit {r.returncode}, expected 2\n{r.stderr}")
        ok = False
    for op, name in (("Softmax", "softmax64"), ("GlobalAveragePool", "pool64")):
        hit = [l for l in lines if f"'{name}' ({op}" in l and l.startswith(bad)]
        if len(hit) != 1:
            print(f"FAIL: expected one error line for {name} ({op}), got {hit}\n{r.stderr}")
            ok = False
    if os.path.exists(os.path.join(d, "stage_0.cu")):
        print("FAIL: stage sources written despite errors")
        ok = False

    good = os.path.join(a.work, "supported.onnx")
    model_supported(good)
    outs = []
    for k in range(2):
        d = os.path.join(a.work, f"supported{k}")
        shutil.rmtree(d, ignore_errors=True)
        r = subprocess.run([a.pipecc, good, "--target", "cuda", "-g", "2", "-o", d, "--emit-only"], capture_output=True,
                           text=True, env=dict(os.environ, PIPECC_SPLIT="even"))
        if r.returncode:
            print(f"FAIL: supported model: exit {r.returncode}\n{r.stderr}")
            ok = False
            break
        srcs = sorted(f for f in os.listdir(d) if f.endswith((".cu", ".h")) or f == "pipeline_main.c")
        outs.append({f: open(os.path.join(d, f), "rb").read().split(b"\n", 4)[-1] for f in srcs})
    if ok and outs[0] != outs[1]:
        print("FAIL: two emits differ")
        ok = False
    if ok and not any(b"pk_conv(" in v for v in outs[0].values()):
        print("FAIL: no cuDNN convolution call emitted")
        ok = False
    if ok and not any(b"SCRATCH_OFF" in v and b"pk_copy(" in v for v in outs[0].values()):
        print("FAIL: asymmetric pads were not pre-padded")
        ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
