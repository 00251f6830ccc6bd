#!/usr/bin/python3
"""DIR/pipeline --info, pipecc's summary and plan.json say what a pipeline takes and
gives; --bench without --input runs on generated data; --help goes to stdout.

usage: info_test.py --pipecc BUILD/pipecc --work DIR [--target cpu|cuda] [--sim LIBCUDASIM]

A two-input model (x float32 [batch, 4], ids int64 [batch, 3] into a Gather) compiled
for 2 stages and 4 micro-batches of a batch of 8: every input and output must appear
with its dtype, whole-batch and micro-batch shape in all three places, and the
generated ids must be valid indices (zeros). Then the folder: objects only in obj/, and a
rebuild for one stage removes what the second stage left."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--sim", default=None)
    a = ap.parse_args()
    if a.sim:
        os.environ["NVCC"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cuda", "sim", "nvcc")
        os.environ["CUDASIM_LIB"] = os.path.abspath(a.sim)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    import onnx
    from onnx import TensorProto as T, helper, numpy_helper
    rs = np.random.RandomState(0)
    inits = [numpy_helper.from_array(rs.randn(4, 6).astype(np.float32), "W"),
             numpy_helper.from_array(rs.randn(10, 6).astype(np.float32), "E")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Gather", ["E", "ids"], ["e"], name="embed", axis=0),
             helper.make_node("ReduceSum", ["e"], ["s"], name="sum", axes=[1], keepdims=0),
             helper.make_node("Add", ["h", "s"], ["y"], name="add")]
    g = helper.make_graph(nodes, "info", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 4]),
                                          helper.make_tensor_value_info("ids", T.INT64, ["batch", 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["batch", 6])], inits)
    model = os.path.join(a.work, "info.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), model)
    out = os.path.join(a.work, "out")
    r = subprocess.run([a.pipecc, model, "-d", "batch=8", "-g", "2", "-m", "4", "--no-replicate", "--target", a.target,
                        "-o", out, "-j", "2"], capture_output=True, text=True)
    if r.returncode:
        fail("pipecc: " + r.stderr)
    want = [("input", "x", "float32", [8, 4], [2, 4]), ("input", "ids", "int64", [8, 3], [2, 3]),
            ("output", "y", "float32", [8, 6], [2, 6])]
    for side, name, dt, whole, mb in want:
        pat = r"^  %s +%s +%s +\[%s\] \(micro-batch \[%s\]\)$" % (side, name, dt, ", ".join(map(str, whole)),
                                                               ", ".join(map(str, mb)))
        if not re.search(pat, r.stderr, re.M):
            fail("pipecc's summary lacks %r:\n%s" % (pat, r.stderr))
    plan = json.load(open(os.path.join(out, "plan.json")))
    if plan.get("target") != a.target or not plan.get("pipecc_version"):
        fail("plan.json: target %r, pipecc_version %r" % (plan.get("target"), plan.get("pipecc_version")))
    got = [(("input", "output")[k], e["name"], e["dtype"], e["shape"], e["microbatch_shape"])
           for k, key in enumerate(("inputs", "outputs")) for e in plan[key]]
    if got != want:
        fail("plan.json's inputs and outputs: %r, expected %r" % (got, want))
    exe = os.path.join(out, "pipeline")
    r = subprocess.run([exe, "--info"], capture_output=True, text=True)
    if r.returncode or r.stderr:
        fail("--info: exit %d, stderr %r" % (r.returncode, r.stderr))
    if "for the %s target" % a.target not in r.stdout or "plan: 2 stages" not in r.stdout:
        fail("--info:\n" + r.stdout)
    for side, name, dt, whole, mb in want:
        pat = r"^  %s +%s +batch \(%s\), micro-batch \(%s\)$" % (name, dt, ", ".join(map(str, whole)),
                                                             ", ".join(map(str, mb)))
        if not re.search(pat, r.stdout, re.M):
            fail("--info lacks %r:\n%s" % (pat, r.stdout))
    r = subprocess.run([exe, "--bench", "2"], capture_output=True, text=True)
    if r.returncode or not re.search(r"throughput: [0-9.]+ samples/s", r.stdout + r.stderr):
        fail("--bench on generated data: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    if "generated inputs (one batch of 4 micro-batches)" not in r.stderr:
        fail("--bench did not say it runs on generated data:\n" + r.stderr)
    r = subprocess.run([exe, "--help"], capture_output=True, text=True)
    if r.returncode or "usage:" not in r.stdout or r.stderr:
        fail("--help: exit %d, stdout %r, stderr %r" % (r.returncode, r.stdout[:80], r.stderr))
    if (a.target == "cpu") == ("PIPECC_CUDA_DEVICE" in r.stdout):
        fail("--help lists the CUDA variables %s" % ("for a cpu build" if a.target == "cpu" else "not"))
    # the folder belongs to pipecc: objects in obj/, and a rebuild with fewer stages
    # leaves nothing of the stage it no longer has
    top = sorted(os.listdir(out))
    objs = sorted(os.listdir(os.path.join(out, "obj")))
    if any(f.endswith(".o") for f in top):
        fail("objects outside obj/: %r" % top)
    want_objs = ["pipeline_main.o", "stage_0.o", "stage_1.o"] + (["pipecc_cuda_rt.o"] if a.target == "cuda" else [])
    if objs != sorted(want_objs):
        fail("obj/ holds %r, expected %r" % (objs, sorted(want_objs)))
    open(os.path.join(out, "stage_1.o"), "w").close()  # an object where an older layout put it
    r = subprocess.run([a.pipecc, model, "-d", "batch=8", "-g", "1", "--target", a.target, "-o", out, "-j", "2", "-q"],
                       capture_output=True, text=True)
    if r.returncode or r.stderr:
        fail("the rebuild for one stage: exit %d\n%s" % (r.returncode, r.stderr))
    left = [f for f in os.listdir(out) if "_1." in f or f.endswith(".o")]
    left += ["obj/" + f for f in os.listdir(os.path.join(out, "obj")) if f.startswith("stage_1")]
    if left:
        fail("the rebuild for one stage left %r" % left)
    r = subprocess.run([exe, "--info"], capture_output=True, text=True)
    if r.returncode or "plan: 1 stage" not in r.stdout:
        fail("--info after the rebuild: exit %d\n%s" % (r.returncode, r.stdout))
    print("PASS: --info, the summary and plan.json agree (%s target); --bench on generated data; --help; "
          "objects in obj/, no stale stage after a rebuild" % a.target)
    shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
