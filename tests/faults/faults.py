#!/usr/bin/python3
"""Fault tests of pipecc-built pipelines: hostile input files, inputs outside the model's
range, full disks, kills during writes, runs and recompiles side by side.

usage: faults.py CASE --pipecc BUILD/pipecc --work DIR [--sim LIBCUDASIM]

Every failure must be one clear line on stderr (naming the file, or the stage, node and
index), a documented exit status (2: bad input or an unusable path) and nothing partial
under a final name: no crash, no hang, no half-written output. The models are made here
with onnx.helper (no export needed). Exit status 0: passed; 1: failed; 77: skipped
(said why; ctest reports it as skipped).

Cases:
  npy_headers      .npy headers that claim more than the file holds, overflow, or are
                   negative: refused before anything is allocated (peak memory bounded)
  npz_entries      a zip64 end record claiming 2^40 entries, and other lying zips
  gather_range     Gather, GatherElements, GatherND and ScatterElements indices outside
                   their axis at run time (exit 2, one line); constant ones at compile time
  gather_range_cuda  the same on the cuda target (--sim: through the CUDA simulator): the
                   kernels record the index, the stage reads it once its work is done
  labels_range     cross-entropy labels outside [0, C) (exit 2 before the first step)
  full_disk        --output (.npy, .npz, DIR), --save, --export-onnx and checkpoints on a
                   full tmpfs: exit 2 with the reason, no file under the final name
  bad_paths        an unusable --checkpoint folder or --save path fails before the first
                   step; a weights path that is a folder; a NaN loss exits 2
  kill_writes      kill -9 during output, --save, checkpoint and weights writes: every file
                   under its final name is whole
  concurrent       two trainings sharing a checkpoint folder; a recompile into DIR while
                   DIR/pipeline runs
"""
import argparse
import glob
import io
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile

import numpy as np

A = None
SKIP = 77


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(cmd, timeout=120, env=None, **kw):
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e, **kw)
    r.elapsed = time.monotonic() - t0
    return r


def one_line_error(r, status, pattern, what):
    """r failed with exit status `status` and said so in one stderr line matching pattern."""
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == status, "%s: exit status %d, expected %d; stderr:\n%s" % (what, r.returncode, status, r.stderr))
    check(len(lines) == 1, "%s: %d lines on stderr, expected one:\n%s" % (what, len(lines), r.stderr))
    check(re.search(pattern, lines[0]), "%s: the line does not match %r:\n%s" % (what, pattern, lines[0]))
    print("ok: %s: %s" % (what, lines[0]))


def no_leftovers(folder, what):
    """No temporary files of an atomic write left in folder."""
    left = [f for f in os.listdir(folder) if ".tmp" in f]
    check(not left, "%s: temporary files left: %s" % (what, left))


# ---- models (onnx.helper) ----------------------------------------------------------------


def save_model(nodes, inputs, outputs, inits, name, opset=13):
    import onnx
    from onnx import helper
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="faults.py")
    path = os.path.join(A.work, name + ".onnx")
    onnx.save(m, path)
    return path


def tensor(name, arr):
    from onnx import numpy_helper
    return numpy_helper.from_array(np.asarray(arr), name)


def vi(name, elem, shape):
    from onnx import helper
    return helper.make_tensor_value_info(name, elem, shape)


def embed_model():
    """ids int64 [batch, 8] -> Gather from a [16, 4] table -> Relu: out [batch, 8, 4]."""
    from onnx import TensorProto as T, helper
    table = np.random.RandomState(0).randn(16, 4).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed", axis=0),
             helper.make_node("Relu", ["e"], ["out"], name="relu")]
    return save_model(nodes, [vi("ids", T.INT64, ["batch", 8])], [vi("out", T.FLOAT, ["batch", 8, 4])],
                      [tensor("table", table)], "embed"), table


def index_ops_model():
    """x [batch, 6] float, i [batch, 3] int64, j [batch, 3] int64, n [batch, 1] int64:
    GatherElements(x, i, axis 1), ScatterElements(x, j, x[:, :3], axis 1), GatherND(x, n,
    batch_dims 1)."""
    from onnx import TensorProto as T, helper
    nodes = [helper.make_node("GatherElements", ["x", "i"], ["ge"], name="ge", axis=1),
             helper.make_node("Slice", ["x", "s0", "s1", "ax"], ["u"], name="slice"),
             helper.make_node("ScatterElements", ["x", "j", "u"], ["se"], name="se", axis=1),
             helper.make_node("GatherND", ["x", "n"], ["gn"], name="gn", batch_dims=1)]
    inits = [tensor("s0", np.array([0], np.int64)), tensor("s1", np.array([3], np.int64)),
             tensor("ax", np.array([1], np.int64))]
    return save_model(nodes, [vi("x", T.FLOAT, ["batch", 6]), vi("i", T.INT64, ["batch", 3]),
                              vi("j", T.INT64, ["batch", 3]), vi("n", T.INT64, ["batch", 1])],
                      [vi("ge", T.FLOAT, ["batch", 3]), vi("se", T.FLOAT, ["batch", 6]), vi("gn", T.FLOAT, ["batch"])],
                      inits, "index_ops")


def const_index_model():
    """Gather from a [16, 4] table at constant indices, one of them 16."""
    from onnx import TensorProto as T, helper
    nodes = [helper.make_node("Gather", ["table", "idx"], ["g"], name="const_gather", axis=0),
             helper.make_node("Add", ["g", "x"], ["out"], name="add")]
    inits = [tensor("table", np.ones((16, 4), np.float32)), tensor("idx", np.array([[1, 16]], np.int64))]
    return save_model(nodes, [vi("x", T.FLOAT, ["batch", 2, 4])], [vi("out", T.FLOAT, ["batch", 2, 4])], inits,
                      "const_index")


def mlp_model():
    """x [batch, 4] -> Gemm(W [4, 16]) -> Relu -> Gemm(W2 [16, 10]): logits [batch, 10]."""
    from onnx import TensorProto as T, helper
    rs = np.random.RandomState(1)
    inits = [tensor("W1", (rs.randn(4, 16) * 0.5).astype(np.float32)), tensor("b1", np.zeros(16, np.float32)),
             tensor("W2", (rs.randn(16, 10) * 0.5).astype(np.float32)), tensor("b2", np.zeros(10, np.float32))]
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "W2", "b2"], ["logits"], name="fc2")]
    return save_model(nodes, [vi("x", T.FLOAT, ["batch", 4])], [vi("logits", T.FLOAT, ["batch", 10])], inits, "mlp")


def big_model():
    """x [batch, 64] -> Gemm(W [64, 4096]) -> Relu: a 1 MiB weights file and big outputs."""
    from onnx import TensorProto as T, helper
    rs = np.random.RandomState(2)
    nodes = [helper.make_node("Gemm", ["x", "W"], ["h"], name="fc"), helper.make_node("Relu", ["h"], ["y"], name="relu")]
    return save_model(nodes, [vi("x", T.FLOAT, ["batch", 64])], [vi("y", T.FLOAT, ["batch", 4096])],
                      [tensor("W", rs.randn(64, 4096).astype(np.float32) * 0.1)], "big")


def build(model, out, args, what):
    r = run([A.pipecc, model, "-o", out, "-j", "2"] + args, timeout=600)
    check(r.returncode == 0, "%s: pipecc failed:\n%s" % (what, r.stderr))
    return os.path.join(out, "pipeline")


def npy(path, arr):
    np.save(path, arr)
    return path


# ---- cases ------------------------------------------------------------------------------


def npy_file(shape_text, payload=64, descr="<f4"):
    d = ("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)).encode()
    d += b" " * (63 - (10 + len(d)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d + b"\0" * payload


def case_npy_headers():
    exe = build(embed_model()[0], os.path.join(A.work, "embed"), ["-d", "batch=2"], "embed")
    out = os.path.join(A.work, "o.npy")
    hostile = {
        "huge": npy_file("(1000000000000,)", descr="<i8"),
        "overflow": npy_file("(576460752303423488, 3, 224, 224)", descr="<i8"),
        "negative": npy_file("(-2, 8)", descr="<i8"),
        "claim_1.2GB": npy_file("(2, 75000000)", payload=600 << 10, descr="<i8"),
        "claim_20GB": npy_file("(2, 1250000000)", payload=600 << 10, descr="<i8"),
        "rank9": npy_file("(1, 1, 1, 1, 1, 1, 1, 1, 1)", descr="<i8"),
    }
    for name, data in hostile.items():
        path = os.path.join(A.work, name + ".npy")
        with open(path, "wb") as f:
            f.write(data)
        r = run([exe, "--input", path, "--output", out], timeout=30)
        one_line_error(r, 2, r"^pipeline: .*%s\.npy: (truncated \.npy file|malformed shape|more than 8 dim)" %
                       re.escape(name), "npy header " + name)
        check(r.elapsed < 10, "npy header %s: %.1f s" % (name, r.elapsed))
        check(not os.path.exists(out), "npy header %s: an output was written" % name)
    # the 1.2 GB claim on its own: peak memory of the refusing process stays small
    path = os.path.join(A.work, "claim_1.2GB.npy")
    code = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    r = run([sys.executable, "-c", code, exe, "--input", path, "--output", out])
    rss_mib = int(r.stdout.split()[-1]) / 1024.0
    check(rss_mib < 200, "a 1.2 GB header claim for a 600 KB file took %.0f MiB" % rss_mib)
    print("ok: the 1.2 GB claim peaked at %.0f MiB" % rss_mib)
    # a valid file still runs, and a file that is a folder is named as such
    ids = np.random.RandomState(0).randint(0, 16, (2, 8)).astype(np.int64)
    r = run([exe, "--input", npy(os.path.join(A.work, "ids.npy"), ids), "--output", out])
    check(r.returncode == 0, "valid ids: " + r.stderr)
    os.makedirs(os.path.join(A.work, "dir.npy"), exist_ok=True)
    r = run([exe, "--input", os.path.join(A.work, "dir.npy"), "--output", out + "2"])
    one_line_error(r, 2, r"dir\.npy: is a directory", "input that is a folder")


def zip_bytes(arrays, zip64=False):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, x in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=zip64) as f:
                np.save(f, x)
    return b.getvalue()


def case_npz_entries():
    exe = build(embed_model()[0], os.path.join(A.work, "embed"), ["-d", "batch=2"], "embed")
    out = os.path.join(A.work, "o.npy")
    ids = np.zeros((2, 8), np.int64)
    good = zip_bytes({"ids": ids}, zip64=True)
    z64eocd = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 1 << 40, 1 << 40, 0, 0)
    loc = struct.pack("<IIQI", 0x07064B50, 0, 0, 1)
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    # a valid file whose zip64 end record claims 2^40 entries before its one real entry
    cd_size, cd_off = struct.unpack("<II", good[-22 + 12:-22 + 20])
    z64 = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 1 << 40, 1 << 40, cd_size, cd_off)
    loc64 = struct.pack("<IIQI", 0x07064B50, 0, len(good) - 22, 1)
    eocd64 = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, cd_size, 0xFFFFFFFF, 0)
    cases = {
        "entries_2e40_real_entry": good[:-22] + z64 + loc64 + eocd64,
        "entries_2e40": z64eocd + loc + eocd,
        "entries_past_end": good[:-22] + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 60000, 60000, 100, 0, 0),
        "cd_offset_past_end": good[:-22] + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, 46, 0xFFFFFF00, 0),
        "truncated": good[: len(good) // 2],
    }
    for name, data in cases.items():
        path = os.path.join(A.work, name + ".npz")
        with open(path, "wb") as f:
            f.write(data)
        r = run([exe, "--input", path, "--output", out], timeout=30)
        one_line_error(r, 2, r"^pipeline: .*%s\.npz: (corrupt or truncated|not a zip)" % name, "npz " + name)
        check(not os.path.exists(out), "npz %s: an output was written" % name)
    path = os.path.join(A.work, "good.npz")
    with open(path, "wb") as f:
        f.write(good)
    r = run([exe, "--input", path, "--output", out])
    check(r.returncode == 0, "a valid zip64 npz: " + r.stderr)


def case_gather_range():
    model, table = embed_model()
    exe = build(model, os.path.join(A.work, "embed"), ["-d", "batch=4", "-g", "2", "-m", "2"], "embed")
    out = os.path.join(A.work, "o.npy")
    rs = np.random.RandomState(0)
    ids = rs.randint(-16, 16, (4, 8)).astype(np.int64)  # negative indices count from the end
    r = run([exe, "--input", npy(os.path.join(A.work, "ids.npy"), ids), "--output", out])
    check(r.returncode == 0, "in-range ids: " + r.stderr)
    want = np.maximum(table[np.where(ids < 0, ids + 16, ids)], 0)
    check(np.array_equal(np.load(out), want), "in-range ids: wrong output")
    os.remove(out)
    for bad in (16, -17, 1 << 40, -(1 << 62)):
        x = ids.copy()
        x[3, 5] = bad
        r = run([exe, "--input", npy(os.path.join(A.work, "bad.npy"), x), "--output", out])
        one_line_error(r, 2, r"^pipeline: stage \d.*: micro-batch 1: node \d+ 'embed' \(Gather\): index %d is out of "
                       r"range for axis 0 of size 16$" % bad, "Gather index %d" % bad)
        check(not os.path.exists(out), "Gather index %d: an output was written" % bad)
    # the other index ops
    exe = build(index_ops_model(), os.path.join(A.work, "index_ops"), ["-d", "batch=2"], "index_ops")
    x = rs.randn(2, 6).astype(np.float32)
    good = {"i": np.array([[0, 5, -6], [1, -1, 2]], np.int64), "j": np.array([[0, 2, 4], [5, -1, 1]], np.int64),
            "n": np.array([[3], [-2]], np.int64)}
    io_dir = os.path.join(A.work, "io")

    def run_ops(idx):
        shutil.rmtree(io_dir, ignore_errors=True)
        args = [exe, "--input", "x=" + npy(os.path.join(A.work, "x.npy"), x), "--output", io_dir]
        for k, v in idx.items():
            args += ["--input", "%s=%s" % (k, npy(os.path.join(A.work, k + ".npy"), v))]
        return run(args)
    r = run_ops(good)
    check(r.returncode == 0, "in-range index ops: " + r.stderr)
    wrap = lambda v: np.where(v < 0, v + 6, v)
    check(np.array_equal(np.load(os.path.join(io_dir, "ge.npy")), np.take_along_axis(x, wrap(good["i"]), 1)),
          "GatherElements: wrong output")
    check(np.array_equal(np.load(os.path.join(io_dir, "gn.npy")), x[np.arange(2), wrap(good["n"][:, 0])]),
          "GatherND: wrong output")
    for name, op, at, bad in (("ge", "GatherElements", ("i", 0, 1), 6), ("se", "ScatterElements", ("j", 1, 2), -7),
                              ("gn", "GatherND", ("n", 1, 0), 6)):
        idx = {k: v.copy() for k, v in good.items()}
        idx[at[0]][at[1], at[2]] = bad
        r = run_ops(idx)
        one_line_error(r, 2, r"node \d+ '%s' \(%s\): index %d is out of range for axis 1 of size 6$" % (name, op, bad),
                       "%s index %d" % (op, bad))
        check(not os.path.exists(io_dir), "%s: outputs written" % op)
    # constant indices: refused when compiling, naming the node
    r = run([A.pipecc, const_index_model(), "-d", "batch=2", "-o", os.path.join(A.work, "const")])
    one_line_error(r, 2, r"node \d+ 'const_gather' \(Gather.*index 16 .*out of range for axis 0 of size 16",
                   "constant Gather index")


def case_gather_range_cuda():
    if A.sim:
        os.environ["NVCC"] = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda", "sim",
                                          "nvcc")
        os.environ["CUDASIM_LIB"] = os.path.abspath(A.sim)
    elif not shutil.which("nvidia-smi") or run(["nvidia-smi", "-L"]).returncode != 0:
        print("SKIP: no GPU and no --sim")
        sys.exit(SKIP)
    model, table = embed_model()
    exe = build(model, os.path.join(A.work, "embed_cuda"), ["-d", "batch=4", "-g", "2", "-m", "2", "--target", "cuda"],
                "embed cuda")
    exe_ops = build(index_ops_model(), os.path.join(A.work, "index_ops_cuda"), ["-d", "batch=2", "--target", "cuda"],
                    "index_ops cuda")
    out = os.path.join(A.work, "o.npy")
    rs = np.random.RandomState(0)
    ids = rs.randint(-16, 16, (4, 8)).astype(np.int64)
    for mode, env in (("hand-over by events", {}), ("synchronous", {"PIPERT_SYNC_SETS": "1"})):
        r = run([exe, "--input", npy(os.path.join(A.work, "ids.npy"), ids), "--output", out], env=env)
        check(r.returncode == 0, "cuda, %s, in-range ids: %s" % (mode, r.stderr))
        check(np.array_equal(np.load(out), np.maximum(table[np.where(ids < 0, ids + 16, ids)], 0)),
              "cuda, %s: wrong output" % mode)
        os.remove(out)
        for bad in (16, -17):
            x = ids.copy()
            x[3, 5] = bad
            r = run([exe, "--input", npy(os.path.join(A.work, "bad.npy"), x), "--output", out], env=env)
            one_line_error(r, 2, r"^pipeline: stage \d.*: node \d+ 'embed' \(Gather\): index %d is out of range for "
                           r"axis 0 of size 16$" % bad, "cuda, %s, Gather index %d" % (mode, bad))
            check(not os.path.exists(out), "cuda Gather index %d: an output was written" % bad)
    x = rs.randn(2, 6).astype(np.float32)
    good = {"i": np.array([[0, 5, -6], [1, -1, 2]], np.int64), "j": np.array([[0, 2, 4], [5, -1, 1]], np.int64),
            "n": np.array([[3], [-2]], np.int64)}
    io_dir = os.path.join(A.work, "io")
    for name, op, at, bad in ((None, None, None, None), ("ge", "GatherElements", ("i", 0, 1), 6),
                              ("se", "ScatterElements", ("j", 1, 2), -7), ("gn", "GatherND", ("n", 1, 0), 6)):
        idx = {k: v.copy() for k, v in good.items()}
        if at:
            idx[at[0]][at[1], at[2]] = bad
        shutil.rmtree(io_dir, ignore_errors=True)
        args = [exe_ops, "--input", "x=" + npy(os.path.join(A.work, "x.npy"), x), "--output", io_dir]
        for k, v in idx.items():
            args += ["--input", "%s=%s" % (k, npy(os.path.join(A.work, k + ".npy"), v))]
        r = run(args)
        if not at:
            check(r.returncode == 0, "cuda, in-range index ops: " + r.stderr)
            continue
        one_line_error(r, 2, r"node \d+ '%s' \(%s\): index %d is out of range for axis 1 of size 6$" % (name, op, bad),
                       "cuda %s index %d" % (op, bad))


def train_build(name, args=()):
    return build(mlp_model(), os.path.join(A.work, name), ["-d", "batch=8", "--train", "--lr", "0.1", "-g", "2"] +
                 list(args), name)


def train_data(n=32, classes=10):
    rs = np.random.RandomState(3)
    x = rs.randn(n, 4).astype(np.float32)
    y = rs.randint(0, classes, n).astype(np.int64)
    return npy(os.path.join(A.work, "tx.npy"), x), y


def case_labels_range():
    exe = train_build("mlp")
    xp, y = train_data()
    for bad in (10, -1, 10 ** 9):
        z = y.copy()
        z[17] = bad
        r = run([exe, "train", "--data", xp, "--labels", npy(os.path.join(A.work, "ty.npy"), z), "--steps", "3"])
        one_line_error(r, 2, r"^pipeline: train: .*ty\.npy: label %d \(element 17\) is out of range for 10 classes" % bad,
                       "label %d" % bad)
        check("step" not in r.stdout, "label %d: training started" % bad)
    r = run([exe, "train", "--data", xp, "--labels", npy(os.path.join(A.work, "ty.npy"), y), "--steps", "3"])
    check(r.returncode == 0, "valid labels: " + r.stderr)
    z = y.astype(np.int32)
    z[0] = 10
    r = run([exe, "train", "--data", xp, "--labels", npy(os.path.join(A.work, "ty32.npy"), z), "--steps", "1"])
    one_line_error(r, 2, r"label 10 \(element 0\) is out of range", "int32 label 10")


def tmpfs(size_kib):
    """A small tmpfs under the work folder, or None where it cannot be mounted (not root,
    no permission in this container)."""
    d = os.path.join(A.work, "full")
    os.makedirs(d, exist_ok=True)
    subprocess.run(["umount", d], capture_output=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk" % size_kib, "tmpfs", d], capture_output=True,
                       text=True)
    return d if r.returncode == 0 else None


def fill(d, leave):
    """Fills tmpfs d up to `leave` bytes free."""
    st = os.statvfs(d)
    free = st.f_bavail * st.f_frsize
    with open(os.path.join(d, "filler"), "wb") as f:
        f.write(b"\0" * max(free - leave, 0))


def case_full_disk():
    d = tmpfs(2048)
    if not d:
        print("SKIP: cannot mount a tmpfs here (needs root and mount permission)")
        sys.exit(SKIP)
    try:
        exe = build(big_model(), os.path.join(A.work, "big"), ["-d", "batch=8"], "big")
        x = npy(os.path.join(A.work, "bx.npy"), np.random.RandomState(0).randn(8, 64).astype(np.float32))
        fill(d, 64 << 10)  # 64 KiB free; the output is 128 KiB
        for out in ("y.npy", "y.npz", "ydir"):
            r = run([exe, "--input", x, "--output", os.path.join(d, out)])
            one_line_error(r, 2, r"No space left on device", "--output %s on a full disk" % out)
            final = os.path.join(d, out)
            check(not os.path.isfile(final) and not glob.glob(os.path.join(final, "*.npy")),
                  "--output %s: a file under the final name" % out)
            no_leftovers(d, "--output " + out)
            if os.path.isdir(final):
                no_leftovers(final, "--output " + out)
        # training: --save, --export-onnx and the checkpoint on the full disk
        os.remove(os.path.join(d, "filler"))
        exe = build(big_model(), os.path.join(A.work, "bigtrain"), ["-d", "batch=8", "--train", "--loss", "mse"],
                    "bigtrain")
        y = npy(os.path.join(A.work, "by.npy"), np.zeros((32, 4096), np.float32))
        x = npy(os.path.join(A.work, "bx32.npy"), np.random.RandomState(0).randn(32, 64).astype(np.float32))
        for opt, arg in (("--save", "w.npz"), ("--export-onnx", "m.onnx"), ("--checkpoint", "ck")):
            fill(d, 256 << 10)  # room for the check's probe, not for the 1 MiB of weights
            r = run([exe, "train", "--data", x, "--labels", y, "--steps", "2", opt, os.path.join(d, arg)])
            one_line_error(r, 2, r"No space left on device", "%s on a full disk" % opt)
            check(not os.path.isfile(os.path.join(d, arg)) and not os.path.isfile(os.path.join(d, arg, "checkpoint.npz")),
                  "%s: a file under the final name" % opt)
            no_leftovers(d, opt)
            if os.path.isdir(os.path.join(d, arg)):
                no_leftovers(os.path.join(d, arg), opt)
            os.remove(os.path.join(d, "filler"))
    finally:
        subprocess.run(["umount", d], capture_output=True)


def case_bad_paths():
    exe = train_build("mlp")
    xp, y = train_data()
    yp = npy(os.path.join(A.work, "ty.npy"), y)
    afile = os.path.join(A.work, "a_file")
    open(afile, "w").close()
    for opt, path in (("--checkpoint", os.path.join(afile, "ck")), ("--save", os.path.join(afile, "w.npz")),
                      ("--save", A.work), ("--export-onnx", os.path.join(A.work, "nodir", "m.onnx")),
                      ("--save-grads", "/proc/no/g.npz")):
        r = run([exe, "train", "--data", xp, "--labels", yp, "--steps", "100000", opt, path], timeout=30)
        one_line_error(r, 2, r"^pipeline: train: %s " % opt, "%s %s" % (opt, path))
        check(r.elapsed < 10 and "step" not in r.stdout, "%s %s: found after training started" % (opt, path))
    # a NaN loss: exit 2, like every other bad run
    r = run([exe, "train", "--data", xp, "--labels", yp, "--steps", "50", "--lr", "1e30"])
    one_line_error(r, 2, r"the loss is (NaN|infinite)", "a NaN loss")
    # weights path that is a folder
    exe = build(embed_model()[0], os.path.join(A.work, "embed"), ["-d", "batch=2"], "embed")
    wd = os.path.join(A.work, "wdir")
    os.makedirs(os.path.join(wd, "weights_0.bin"), exist_ok=True)
    ids = npy(os.path.join(A.work, "ids.npy"), np.zeros((2, 8), np.int64))
    r = run([exe, "--input", ids, "--output", os.path.join(A.work, "o.npy"), "--weights-dir", wd])
    one_line_error(r, 2, r"weights_0\.bin: is a directory", "weights path that is a folder")


def whole_npy_or_absent(path, want, what):
    if not os.path.exists(path):
        return 0
    got = np.load(path)
    check(got.shape == want.shape and np.array_equal(got, want), "%s: %s is partial or wrong" % (what, path))
    return 1


def kill_at(cmd, delay):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.wait()
    return p.returncode


def case_kill_writes():
    exe = build(big_model(), os.path.join(A.work, "big"), ["-d", "batch=256"], "big")
    x = np.random.RandomState(0).randn(2048, 64).astype(np.float32)
    xp = npy(os.path.join(A.work, "bx.npy"), x)
    ref = os.path.join(A.work, "ref.npy")
    r = run([exe, "--input", xp, "--output", ref])
    check(r.returncode == 0, "reference run: " + r.stderr)
    want = np.load(ref)
    t = r.elapsed
    whole = 0
    rs = random.Random(0)
    for k in range(12):  # kills spread over the run and its write; some runs finish
        out = os.path.join(A.work, "k%d.npy" % k)
        kill_at([exe, "--input", xp, "--output", out], t * rs.uniform(0.5, 2.0))
        whole += whole_npy_or_absent(out, want, "kill -9 during --output")
    print("ok: 12 kills during --output: %d whole outputs, no partial one" % whole)
    # --save and checkpoints of a training run
    texe = build(big_model(), os.path.join(A.work, "bigtrain"), ["-d", "batch=8", "--train", "--loss", "mse"],
                 "bigtrain")
    y = npy(os.path.join(A.work, "by.npy"), np.zeros((64, 4096), np.float32))
    x = npy(os.path.join(A.work, "bx64.npy"), np.random.RandomState(0).randn(64, 64).astype(np.float32))
    ck = os.path.join(A.work, "ck")
    args = [texe, "train", "--data", x, "--labels", y, "--steps", "40", "--checkpoint", ck, "--checkpoint-every", "1",
            "--save", os.path.join(A.work, "w.npz"), "--quiet"]
    r = run(args)
    check(r.returncode == 0, "training reference: " + r.stderr)
    t = r.elapsed
    for k in range(8):
        shutil.rmtree(ck, ignore_errors=True)
        if os.path.exists(os.path.join(A.work, "w.npz")):
            os.remove(os.path.join(A.work, "w.npz"))
        kill_at(args, t * rs.uniform(0.2, 1.1))
        for f in (os.path.join(ck, "checkpoint.npz"), os.path.join(A.work, "w.npz")):
            if os.path.exists(f):
                with np.load(f) as z:  # a whole zip whose every entry reads
                    for n in z.files:
                        z[n]
        if os.path.isdir(ck):
            r = run(args[:-3] + ["--resume", ck, "--quiet"])
            check(r.returncode == 0 or "is at step" in r.stderr, "resume after kill -9: " + r.stderr)
    print("ok: 8 kills during training: every checkpoint and --save whole, every checkpoint resumes")
    # pipecc killed while it writes the weights: a weights file under its name is whole
    model = big_model()
    out = os.path.join(A.work, "emit")
    r = run([A.pipecc, model, "-d", "batch=8", "-o", out, "--emit-only"])
    check(r.returncode == 0, "emit: " + r.stderr)
    with open(os.path.join(out, "weights_0.bin"), "rb") as f:
        want_w = f.read()
    t = r.elapsed
    for k in range(6):
        shutil.rmtree(out, ignore_errors=True)
        kill_at([A.pipecc, model, "-d", "batch=8", "-o", out, "--emit-only"], t * rs.uniform(0.2, 1.1))
        w = os.path.join(out, "weights_0.bin")
        if os.path.exists(w):
            with open(w, "rb") as f:
                check(f.read() == want_w, "kill -9 during pipecc: a partial weights file under its name")
    print("ok: 6 kills during pipecc: no partial weights file under its name")


def case_concurrent():
    # two trainings sharing one checkpoint folder
    exe = train_build("mlp")
    xp, y = train_data(256)
    yp = npy(os.path.join(A.work, "ty.npy"), y)
    ck = os.path.join(A.work, "shared_ck")
    shutil.rmtree(ck, ignore_errors=True)
    cmd = [exe, "train", "--data", xp, "--labels", yp, "--steps", "60", "--checkpoint", ck, "--checkpoint-every", "1",
           "--quiet"]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in ps:
        out, err = p.communicate(timeout=300)
        check(p.returncode == 0, "a training sharing its checkpoint folder failed: " + err)
    with np.load(os.path.join(ck, "checkpoint.npz")) as z:
        check(int(z["pipecc/step"][0]) == 60, "shared checkpoint: not at step 60")
    no_leftovers(ck, "two trainings sharing a checkpoint folder")
    print("ok: two trainings sharing a checkpoint folder: both exit 0, the checkpoint whole")
    # a recompile into DIR while DIR/pipeline runs
    model = big_model()
    out = os.path.join(A.work, "live")
    exe = build(model, out, ["-d", "batch=8"], "live")
    x = np.random.RandomState(0).randn(8, 64).astype(np.float32)
    xp = npy(os.path.join(A.work, "lx.npy"), x)
    ref = os.path.join(A.work, "lref.npy")
    check(run([exe, "--input", xp, "--output", ref]).returncode == 0, "live: reference run")
    ino = os.stat(os.path.join(out, "weights_0.bin")).st_ino
    p = subprocess.Popen([exe, "--input", xp, "--output", os.path.join(A.work, "lout.npy"), "--bench", "400"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    for _ in range(2):
        r = run([A.pipecc, model, "-d", "batch=8", "-o", out, "--emit-only"])
        check(r.returncode == 0, "recompile while running: " + r.stderr)
    o, e = p.communicate(timeout=300)
    check(p.returncode == 0, "the running pipeline failed after a recompile into its folder (%d): %s" % (p.returncode, e))
    check(np.array_equal(np.load(os.path.join(A.work, "lout.npy")), np.load(ref)), "the running pipeline's output changed")
    check(os.stat(os.path.join(out, "weights_0.bin")).st_ino != ino, "the recompile rewrote the weights in place")
    no_leftovers(out, "recompile")
    print("ok: a recompile into DIR while DIR/pipeline ran: the run exit 0 with its outputs; weights are new files")


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--sim", default=None, metavar="LIBCUDASIM", help="the cuda cases through the CUDA simulator")
    A = ap.parse_args()
    fn = globals().get("case_" + A.case)
    if not fn:
        fail("no case " + A.case)
    shutil.rmtree(A.work, ignore_errors=True)
    os.makedirs(A.work)
    fn()
    print("PASS: faults." + A.case)
    shutil.rmtree(A.work, ignore_errors=True)


if __name__ == "__main__":
    main()
