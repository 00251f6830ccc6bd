#!/usr/bin/python3
"""Scalar (rank-0) graph inputs and outputs of an inference pipeline, against onnxruntime.

A scalar input is the same for every micro-batch and every streamed batch: the runtime
takes it as a scalar and repeats it (runtime/rt_main.c, rt_load_inputs). A scalar
output is one value per run, so it needs one micro-batch and one batch per run.

    scalar_io.py --pipecc build/pipecc --work DIR [--target cpu|cuda] [--sim LIBCUDASIM] [--mpirun MPIRUN]

Checks, on the cpu target (or cuda through the simulator, --sim):
  scalar_in   y = Relu(x * s + b) chained through 6 nodes, s a float32 scalar input and
              k an int64 one (Where(x > k, ...)): -m 4 at g = 1, 2, 4 match onnxruntime
              (cpu: bitwise equal across g); 3 batches in one input (12 micro-batches)
              give onnxruntime's three results (with --mpirun: the MPI transport, 2
              ranks, bitwise equal to threads); s given as shape (1,) is one clear line
              naming it (exit 2).
  scalar_out  outputs y [B, 6], z = ReduceMean(x) and w = s * s (scalars) at -m 1,
              g = 1, 2: match onnxruntime; two batches in one input is one line naming
              z (exit 2); -g 2 -m 2 is one line naming z at compile time (exit 2); -g 2
              without -m compiles (one micro-batch by default).
  across      y = Softmax(x, axis 0) (across the batch) and n = Shape(x): -g 2 without -m
              compiles for one micro-batch with a note and matches onnxruntime; -m 2 is
              one error line; a model whose only output is Shape(x) (no node left after
              folding) runs and gives x's shape.
Exit 0 pass, 1 fail.
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import pipecc_test as pt  # noqa: E402
from npzio import save_npz  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
B = 8
MPI_ENV = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def save(m, path):
    m = helper.make_model(m, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8  # what the onnxruntime beside this onnx package reads
    onnx.save(m, path)
    return path


def scalar_in_model(path):
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Mul", ["x", "s"], ["a"]), helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["d"]), helper.make_node("MatMul", ["d", "w"], ["e"]),
             helper.make_node("Cast", ["k"], ["kf"], to=F32), helper.make_node("Greater", ["e", "kf"], ["gt"]),
             helper.make_node("Where", ["gt", "e", "kf"], ["y"])]
    g = helper.make_graph(nodes, "scalar_in",
                          [helper.make_tensor_value_info("x", F32, (B, 6)), helper.make_tensor_value_info("s", F32, ()),
                           helper.make_tensor_value_info("k", I64, ())],
                          [helper.make_tensor_value_info("y", F32, None)],
                          [numpy_helper.from_array(rng.standard_normal((6,)).astype(np.float32), "b"),
                           numpy_helper.from_array(rng.standard_normal((6, 6)).astype(np.float32), "w")])
    return save(g, path)


def scalar_out_model(path):
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"]), helper.make_node("Tanh", ["a"], ["y"]),
             helper.make_node("ReduceMean", ["y"], ["z"], keepdims=0), helper.make_node("Mul", ["s", "s"], ["w"])]
    g = helper.make_graph(nodes, "scalar_out",
                          [helper.make_tensor_value_info("x", F32, (B, 6)), helper.make_tensor_value_info("s", F32, ())],
                          [helper.make_tensor_value_info(n, F32, None) for n in ("y", "z", "w")])
    return save(g, path)


def across_model(path):
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0), helper.make_node("Shape", ["x"], ["n"])]
    g = helper.make_graph(nodes, "across", [helper.make_tensor_value_info("x", F32, (B, 6))],
                          [helper.make_tensor_value_info("y", F32, None), helper.make_tensor_value_info("n", I64, None)])
    return save(g, path)


def shape_only_model(path):
    g = helper.make_graph([helper.make_node("Shape", ["x"], ["n"])], "shape_only",
                          [helper.make_tensor_value_info("x", F32, (B, 6))], [helper.make_tensor_value_info("n", I64, None)])
    return save(g, path)


def ort(path, feeds):
    import onnxruntime as rt
    so = rt.SessionOptions()
    so.intra_op_num_threads = 1
    sess = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


class Checker:
    def __init__(self, a):
        self.a, self.bad = a, 0

    def fail(self, msg):
        print("FAIL " + msg)
        self.bad += 1

    def one_line(self, r, label, expect_error):
        """r (a finished command) exited 2 with one stderr line matching expect_error."""
        lines = [ln for ln in r.stderr.strip().splitlines() if ln]
        if r.returncode != 2 or len(lines) != 1 or not re.search(expect_error, lines[0]):
            self.fail(f"{label}: expected exit 2 and one line matching '{expect_error}', got {r.returncode}: "
                      f"{r.stderr[-600:]}")
        else:
            print(f"ok   {label}: {lines[0]}")

    def build(self, model, d, g, m, label, expect_error=None, expect_note=None):
        cmd = [self.a.pipecc, model, "-g", str(g), "-o", d, "-j", "2", "--target", self.a.target]
        if m:
            cmd += ["-m", str(m)]
        if self.a.target == "cuda":
            cmd += ["--no-tf32"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=pt.split_env())
        if expect_error:
            self.one_line(r, label, expect_error)
            return False
        if r.returncode:
            self.fail(f"{label}: pipecc exited with {r.returncode}: {r.stderr[-2000:]}")
            return False
        if expect_note:
            if not re.search(r"\.onnx: note: " + expect_note, r.stderr):
                self.fail(f"{label}: no note matching '{expect_note}' in: {r.stderr[-600:]}")
                return False
            print(f"ok   {label}: " + next(ln for ln in r.stderr.splitlines() if ": note: " in ln))
        return True

    def run(self, d, feeds, label, expect_error=None, pre=()):
        xin = os.path.join(d, "x.npz")
        save_npz(xin, feeds)
        out = os.path.join(d, "y.npz")
        if os.path.exists(out):
            os.remove(out)
        r = subprocess.run(list(pre) + [os.path.join(d, "pipeline"), "--input", xin, "--output", out],
                           capture_output=True, text=True, timeout=600, env=dict(os.environ, **MPI_ENV))
        if expect_error:
            self.one_line(r, label, expect_error)
            return None
        if r.returncode:
            self.fail(f"{label}: pipeline exited with {r.returncode}: {r.stderr[-2000:]}")
            return None
        return dict(np.load(out))

    def compare(self, got, ref, label):
        tol = 1e-6 if self.a.target == "cpu" else 1e-5
        for k, v in ref.items():
            g = got.get(k)
            if g is None or g.shape != v.shape or g.dtype != v.dtype:
                self.fail(f"{label}: output {k}: {None if g is None else (g.shape, g.dtype)}, expected {v.shape} "
                          f"{v.dtype}")
                continue
            e = pt.rel_l2(g, v)
            if e > tol:
                self.fail(f"{label}: output {k}: rel-L2 {e:.3g} > {tol}")
        print(f"ok   {label}: " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in ref.items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--sim", default=None, help="cuda: build with the CUDA simulator (tests/cuda/sim), this library")
    ap.add_argument("--mpirun", default=None, help="cpu: also run the 3 batches through the MPI transport (2 ranks)")
    a = ap.parse_args()
    if a.target == "cuda":
        if not a.sim:
            sys.exit("scalar_io.py: --target cuda needs --sim LIBCUDASIM")
        os.environ["NVCC"] = os.path.join(ROOT, "tests", "cuda", "sim", "nvcc")
        os.environ["CUDASIM_LIB"] = os.path.abspath(a.sim)
    work = os.path.abspath(os.path.join(a.work, a.target))
    os.makedirs(work, exist_ok=True)
    c = Checker(a)
    rng = np.random.default_rng(5)

    # scalar inputs, 4 micro-batches
    model = scalar_in_model(os.path.join(work, "scalar_in.onnx"))
    feeds = {"x": rng.standard_normal((B, 6)).astype(np.float32), "s": np.array(1.75, np.float32),
             "k": np.array(0, np.int64)}
    ref = ort(model, feeds)
    outs = {}
    for g in (1, 2, 4):
        d = os.path.join(work, f"in_g{g}")
        if c.build(model, d, g, 4, f"scalar_in g={g}") and (got := c.run(d, feeds, f"scalar_in g={g}")):
            c.compare(got, ref, f"scalar_in g={g} -m 4")
            outs[g] = got
    if a.target == "cpu":
        for g in outs:
            if outs[g]["y"].tobytes() != outs[1]["y"].tobytes():
                c.fail(f"scalar_in: g={g} differs bitwise from g=1")
    if 2 in outs:
        d = os.path.join(work, "in_g2")
        big = {"x": rng.standard_normal((3 * B, 6)).astype(np.float32), "s": np.array(-0.5, np.float32),
               "k": np.array(-1, np.int64)}
        got = c.run(d, big, "scalar_in 3 batches")
        if got:
            want = {"y": np.concatenate([ort(model, dict(big, x=big["x"][i * B:(i + 1) * B]))["y"] for i in range(3)])}
            c.compare(got, want, "scalar_in g=2, 3 batches in one input (12 micro-batches)")
        if got and a.mpirun:  # the MPI transport: rank 0 sends every micro-batch its copy
            mpi = c.run(d, big, "scalar_in 3 batches, MPI", pre=[a.mpirun, "--oversubscribe", "--allow-run-as-root",
                                                               "-np", "2"])
            if mpi is not None and mpi["y"].tobytes() != got["y"].tobytes():
                c.fail("scalar_in 3 batches: MPI (2 ranks) differs bitwise from threads")
            elif mpi is not None:
                print("ok   scalar_in g=2, 3 batches, MPI transport (2 ranks): bitwise equal to threads")
        c.run(d, dict(feeds, s=np.array([1.75], np.float32)), "scalar_in s given as (1,)",
              expect_error=r"input 's'.*expected a scalar")

    # scalar outputs, one micro-batch
    model = scalar_out_model(os.path.join(work, "scalar_out.onnx"))
    feeds = {"x": rng.standard_normal((B, 6)).astype(np.float32), "s": np.array(3.0, np.float32)}
    ref = ort(model, feeds)
    for g in (1, 2):
        d = os.path.join(work, f"out_g{g}")
        if c.build(model, d, g, 1, f"scalar_out g={g}") and (got := c.run(d, feeds, f"scalar_out g={g}")):
            c.compare(got, ref, f"scalar_out g={g} -m 1")
            if g == 2:
                c.run(d, dict(feeds, x=np.concatenate([feeds["x"]] * 2)), "scalar_out 2 batches",
                      expect_error=r"graph output 'z' is a scalar.*2 micro-batches")
    c.build(model, os.path.join(work, "out_m2"), 2, 2, "scalar_out -m 2",
            expect_error=r"scalar_out\.onnx: graph output 'z' is a scalar.*-m 1")
    d = os.path.join(work, "out_default")
    if c.build(model, d, 2, 0, "scalar_out -g 2 (default micro-batches)") and (got := c.run(d, feeds, "default")):
        c.compare(got, ref, "scalar_out -g 2, default -m")

    # across the batch: the default micro-batch count falls back to one
    model = across_model(os.path.join(work, "across.onnx"))
    feeds = {"x": rng.standard_normal((B, 6)).astype(np.float32)}
    ref = ort(model, feeds)
    d = os.path.join(work, "across_default")
    if c.build(model, d, 2, 0, "across -g 2 (default micro-batches)",
               expect_note=r"the default \d+ micro-batches would not add up.*one micro-batch") and \
            (got := c.run(d, feeds, "across default")):
        c.compare(got, ref, "across -g 2, default -m (one micro-batch)")
    c.build(model, os.path.join(work, "across_m2"), 2, 2, "across -m 2",
            expect_error=r"across\.onnx: node .*'sm'.*-m 1")
    model = shape_only_model(os.path.join(work, "shape_only.onnx"))
    d = os.path.join(work, "shape_only")
    if c.build(model, d, 1, 0, "shape only") and (got := c.run(d, feeds, "shape only")):
        c.compare(got, ort(model, feeds), "shape only (no node left after folding)")

    print(f"scalar_io ({a.target}): {'PASS' if not c.bad else f'{c.bad} FAILED'}")
    pt.done_with(work, not c.bad)
    return 1 if c.bad else 0


if __name__ == "__main__":
    sys.exit(main())
