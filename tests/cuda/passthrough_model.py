#!/usr/bin/python3
"""Graph outputs that no node computes: writes WORK/passthrough.onnx, whose outputs are a
node chain's result y, a graph input m and a constant k, then runs
`run_cuda.py run --model WORK/passthrough.onnx ARGS...` on it (g = 1, 2, 4 against
onnxruntime; one micro-batch, as k does not depend on the batch). The last stage copies m
(routed to it by the pipeline) and k (from its weights) to its outputs.

    passthrough_model.py --work DIR -- run_cuda.py arguments (--pipecc, --sim, ...)
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def model():
    f32 = TensorProto.FLOAT
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Tanh", ["b"], ["c"]), helper.make_node("MatMul", ["c", "w"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    g = helper.make_graph(
        nodes, "passthrough",
        [helper.make_tensor_value_info("x", f32, (4, 8)), helper.make_tensor_value_info("m", f32, (4, 3))],
        [helper.make_tensor_value_info(n, f32, None) for n in ("y", "m", "k")],
        [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
         numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8  # what the onnxruntime beside this onnx package reads
    return m


def main():
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[0] != "--work" or argv[2] != "--":
        sys.exit(__doc__)
    work = os.path.abspath(argv[1])
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "passthrough.onnx")
    onnx.save(model(), path)
    cmd = [sys.executable, os.path.join(HERE, "run_cuda.py"), "run", "--model", path, "--shape", "x:4x8",
           "--shape", "m:4x3", "--microbatches", "1", "--work", work] + argv[3:]
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
