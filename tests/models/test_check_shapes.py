#!/usr/bin/python3
"""Unit test of check_shapes.py against a fake pipecc (no real pipecc, no torch needed).

What it does
    Builds a tiny ONNX model with onnx.helper (x:float32[batch,8] -> y = Relu(x W):
    float32[batch,4] and n = Shape(x W):int64[2]), writes a fake pipecc script that
    prints the ir-json that a correct pipecc would print, and checks that check_shapes.py
    passes on it and fails (non-zero, with a diff naming the problem) when the fake is told
    to lie about a shape, a dtype, a missing/extra/reordered output, to print bad JSON or
    to crash; also that bad arguments exit 2.

How to run (ctest runs it as models.checker_selftest):
    /usr/bin/python3 tests/models/test_check_shapes.py
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_shapes.py")

FAKE_PIPECC = r'''
import json, os, sys
args = sys.argv[1:]
mode = os.environ.get("FAKE_PIPECC_MODE", "ok")
assert args[1] == "--emit=ir-json", args
batch = None
for i, a in enumerate(args):
    if a == "--shape":
        name, dims = args[i + 1].split(":")
        if name == "x":
            batch = int(dims.split("x")[0])
    if a == "-d" and args[i + 1].startswith("batch="):
        batch = int(args[i + 1].split("=")[1])
if mode == "crash":
    print("pipecc: model.onnx: node 0 'mm' (MatMul, opset 13): boom", file=sys.stderr)
    sys.exit(2)
if mode == "badjson":
    print("not json")
    sys.exit(0)
values = {"x": {"dtype": "float32", "shape": [batch, 8]},
          "y": {"dtype": "float32", "shape": [batch, 4]},
          "n": {"dtype": "int64", "shape": [2]}}
outputs = ["y", "n"]
if mode == "shape":
    values["y"]["shape"] = [batch, 5]
elif mode == "dtype":
    values["n"]["dtype"] = "int32"
elif mode == "missing":
    outputs = ["y"]
elif mode == "novalue":
    del values["n"]
elif mode == "extra":
    outputs = ["y", "n", "x"]
elif mode == "order":
    outputs = ["n", "y"]
elif mode == "strshape":
    values["y"]["shape"] = [str(batch), 4]
print(json.dumps({"outputs": outputs, "values": values, "nodes": []}))
'''


def make_model(path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
             helper.make_node("Relu", ["xw"], ["y"], name="relu"),
             helper.make_node("Shape", ["xw"], ["n"], name="shape")]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [2])],
        [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def run(args, mode="ok"):
    env = dict(os.environ, FAKE_PIPECC_MODE=mode)
    p = subprocess.run([sys.executable, CHECK] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env, timeout=120)
    return p.returncode, p.stdout.decode() + p.stderr.decode()


def main():
    failures = []

    def expect(label, got_rc, text, want_rc, *needles):
        ok = got_rc == want_rc and all(n in text for n in needles)
        print(f"{'ok  ' if ok else 'FAIL'} {label}: rc={got_rc} (want {want_rc})")
        if not ok:
            failures.append(label)
            print("    missing text: " + repr([n for n in needles if n not in text]))
            print("    output:\n" + "\n".join("      " + l for l in text.splitlines()))

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny.onnx")
        make_model(model)
        fake = os.path.join(tmp, "fake_pipecc.py")
        with open(fake, "w") as f:
            f.write(FAKE_PIPECC)
        base = ["--pipecc", fake, "--model", model, "--shape", "x:2x8"]

        rc, out = run(base, "ok")
        expect("agreeing pipecc passes", rc, out, 0, "ok (2 output(s))")
        rc, out = run(base[:4] + ["-d", "batch=3"], "ok")
        expect("-d binding is passed to both tools", rc, out, 0, "float32[3,4]")
        for mode, needles in [
            ("shape", ["'y'", "shape differ", "float32[2,5]", "float32[2,4]"]),
            ("dtype", ["'n'", "dtype differ", "int32[2]", "int64[2]"]),
            ("missing", ["missing from pipecc", "'n'"]),
            ("novalue", ["'n'", "no entry in pipecc's 'values'"]),
            ("extra", ["onnxruntime does not have", "'x'"]),
            ("order", ["order differs"]),
            ("strshape", ["shape differ"]),
            ("badjson", ["no valid JSON", "not json"]),
            ("crash", ["exited with status 2", "boom"]),
        ]:
            rc, out = run(base, mode)
            expect(f"pipecc mode '{mode}' is caught", rc, out, 1, *needles)

        rc, out = run(["--pipecc", fake, "--model", model])
        expect("no binding is a usage error", rc, out, 2, "binding")
        rc, out = run(["--pipecc", os.path.join(tmp, "nope"), "--model", model,
                       "--shape", "x:2x8"])
        expect("missing pipecc is a usage error", rc, out, 2, "no such file")
        rc, out = run(base[:4] + ["--shape", "x-2x8"])
        expect("malformed --shape is a usage error", rc, out, 2, "NAME:DIMS")
        rc, out = run(base[:4] + ["--shape", "q:2x8"])
        expect("ort_ref.py rejecting a binding fails the check", rc, out, 1,
               "ort_ref.py exited with status 2", "unknown input")

    if failures:
        print(f"test_check_shapes.py: {len(failures)} failure(s): {failures}")
        return 1
    print("test_check_shapes.py: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
