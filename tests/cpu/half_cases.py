#!/usr/bin/python3
"""float16 and bfloat16 models (passes/opt/widen.c: stored as bit patterns, computed in float,
rounded once per node) against two references, each compiled with -g 1 and -g 2 and run:

  rounded  onnxruntime running the float32 model with pipecc's roundings written in
           (tests/lib/onnx_narrow.py rounded()): rel-L2 <= --tol (default 1e-4: an
           element differs by one float16 step where float32 sums in another order land
           on either side of a rounding boundary)
  ort      onnxruntime's own float16 kernels on the float16 model (not bfloat16: it has
           none on the CPU): rel-L2 <= 2e-3, four float16 unit roundoffs (2^-11 each),
           since its kernels round at other places
  float32  the float32 model, for the record (printed, not checked)

The float16 models are PyTorch exports (float32, then narrowed: PyTorch has no CPU
float16 convolution) of a small CNN and a transformer block; bfloat16 an MLP; 'moves' is
data movement on float16 (Transpose, Slice, Concat, Gather, Expand, Tile, Where, Split,
DepthToSpace, Reshape), which must equal onnxruntime's bit for bit. On the cpu target
the -g 1 and -g 2 outputs must be identical.

    half_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]"""

import io
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import onnx_narrow as nw  # noqa: E402
import pipecc_test as pt  # noqa: E402

F16, BF16 = TensorProto.FLOAT16, TensorProto.BFLOAT16
ORT_TOL = 2e-3


def export(module, x):
    import torch
    torch.manual_seed(0)
    f = io.BytesIO()
    torch.onnx.export(module.eval(), (torch.tensor(x),), f, input_names=["x"], output_names=["y"], opset_version=17)
    return onnx.load_from_string(f.getvalue())


def cnn():
    import torch

    class M(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.c = torch.nn.Conv2d(3, 8, 3, padding=1)
            s.bn = torch.nn.BatchNorm2d(8)
            s.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2)
            s.fc = torch.nn.Linear(8 * 4 * 4, 10)

        def forward(s, x):
            y = torch.relu(s.bn(s.c(x)))
            y = torch.nn.functional.max_pool2d(y + torch.sigmoid(s.c2(y)), 2)
            return torch.softmax(s.fc(y.flatten(1)), -1)

    torch.manual_seed(1)
    m = M()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    x = np.random.default_rng(1).standard_normal((4, 3, 8, 8)).astype(np.float32)
    return export(m, x), x


def block():
    import torch

    class M(torch.nn.Module):
        def __init__(s, d=16, h=2):
            super().__init__()
            s.h, s.ln, s.ln2 = h, torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            s.qkv, s.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            s.f1, s.f2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(s, x):
            b, t, d = x.shape
            q, k, v = s.qkv(s.ln(x)).split(d, -1)
            sh = lambda z: z.reshape(b, t, s.h, d // s.h).transpose(1, 2)  # noqa: E731
            a = torch.softmax(sh(q) @ sh(k).transpose(-1, -2) / (d // s.h) ** 0.5, -1) @ sh(v)
            x = x + s.o(a.transpose(1, 2).reshape(b, t, d))
            return x + s.f2(torch.nn.functional.gelu(s.f1(s.ln2(x))))

    torch.manual_seed(2)
    x = np.random.default_rng(2).standard_normal((4, 6, 16)).astype(np.float32)
    return export(M(), x), x


def mlp():
    import torch
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5), torch.nn.Tanh())
    x = np.random.default_rng(3).standard_normal((4, 12)).astype(np.float32)
    return export(m, x), x


def moves():
    """float32 model of data movement only (narrowed like the others)."""
    i64 = lambda n, v: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),                  # (4, 6, 8, 8)
        helper.make_node("Slice", ["t", "s0", "s1", "s2", "s3"], ["s"]),                 # (4, 6, 3, 8)
        helper.make_node("Concat", ["s", "s"], ["c"], axis=2),                           # (4, 6, 6, 8)
        helper.make_node("Gather", ["c", "gi"], ["ga"], axis=3),                         # (4, 6, 6, 3)
        helper.make_node("Tile", ["ga", "rep"], ["ti"]),                                 # (4, 6, 6, 6)
        helper.make_node("Expand", ["row", "es"], ["ex"]),                               # (4, 6, 6, 6)
        helper.make_node("Greater", ["ti", "zero"], ["m"]),
        helper.make_node("Where", ["m", "ti", "ex"], ["w"]),
        helper.make_node("Split", ["w", "sp"], ["w0", "w1"], axis=3),                    # (4, 6, 6, 2), (4, 6, 6, 4)
        helper.make_node("DepthToSpace", ["x"], ["d2s"], blocksize=2),                   # (4, 2, 12, 16)
        helper.make_node("Reshape", ["d2s", "shp"], ["y1"]),
        helper.make_node("Transpose", ["w1"], ["y2"], perm=[0, 3, 1, 2]),
    ]
    inits = [i64("s0", [1]), i64("s1", [6]), i64("s2", [2]), i64("s3", [2]), i64("gi", [5, 0, 7]),
             i64("rep", [1, 1, 1, 2]), i64("es", [4, 6, 6, 6]), i64("sp", [2, 4]), i64("shp", [4, -1]),
             numpy_helper.from_array(np.array(0.25, np.float32), "zero"),
             numpy_helper.from_array(np.linspace(-3, 3, 6).astype(np.float32), "row")]
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    g = helper.make_graph(nodes, "moves", [vi("x", (4, 8, 6, 8))], [vi("y1", (4, 384)), vi("y2", (4, 4, 6, 6)),
                                                                      vi("w0", (4, 6, 6, 2))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="pipecc-tests")
    m.ir_version = 8
    x = np.random.default_rng(4).standard_normal((4, 8, 6, 8)).astype(np.float32)
    return m, x


# name: (float32 model maker, narrow type, exact against onnxruntime's float16 model)
CASES = {"cnn": (cnn, F16, False), "block": (block, F16, False), "mlp_bf16": (mlp, BF16, False),
         "moves": (moves, F16, True)}


def ort_run(model, feeds, all_opt=True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    if not all_opt:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def check(name, label, got, ref, tol, dt, exact=False):
    errs, fine = [], True
    for k, v in ref.items():
        g = got.get(k)
        want_dt = np.uint16 if dt == BF16 else np.float16
        if g is None or g.shape != v.shape or g.dtype != want_dt:
            errs.append(f"{k}: missing, or shape/dtype {None if g is None else (g.shape, g.dtype)}")
            fine = False
            continue
        if exact:
            same = np.array_equal(g.view(np.uint16), np.asarray(v, np.float16).view(np.uint16))
            errs.append(f"{k} {'bitwise equal' if same else 'differs'}")
            fine &= same
            continue
        e = pt.rel_l2(nw.from_bits(g, dt), np.asarray(v, np.float32), 1e-30)
        errs.append(f"{k} {e:.2e}" + (" (over the bound)" if tol is not None and not e <= tol else ""))
        fine &= tol is None or bool(e <= tol)
    print(("ok   " if fine else "FAIL ") + f"{name} -g {label}: " + ", ".join(errs))
    return fine


def main():
    a = pt.case_args(1e-4)
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name, (make, dt, exact) in CASES.items():
        if a.k and not re.search(a.k, name):
            continue
        d = pt.case_dir(a.work, name)
        m32, x = make()
        m = nw.narrow(m32, dt)
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        xn = nw.to_bits(x, dt)
        xin = os.path.join(d, "x.npz")
        save_npz(xin, {"x": xn})
        xr = nw.from_bits(xn, dt)
        refs = {"rounded": ort_run(nw.rounded(m32, dt), {"x": xr}, all_opt=False), "float32": ort_run(m32, {"x": x})}
        if dt == F16:
            refs["ort"] = ort_run(m, {"x": xn})
        outs, good = {}, True
        for g in (1, 2):
            out = os.path.join(d, f"g{g}")
            cmd, env = pt.sim_target([a.pipecc, path, "-g", str(g), "-o", out, "-j", "1"], pt.split_env(), a.target,
                                     a.sim_lib)
            got = pt.build_run(cmd, env, out, xin, f"{name} -g {g}")
            if got is None:
                good = False
                continue
            outs[g] = got
            if exact:
                good &= check(name, f"{g} vs onnxruntime float16", got, refs["ort"], None, dt, exact=True)
                continue
            good &= check(name, f"{g} vs rounded float32", got, refs["rounded"], a.tol, dt)
            if "ort" in refs:
                good &= check(name, f"{g} vs onnxruntime float16", got, refs["ort"], ORT_TOL, dt)
            check(name, f"{g} vs float32 (not checked)", got, refs["float32"], None, dt)
        if a.target == "cpu" and len(outs) == 2:
            same = all(np.array_equal(outs[1][k].view(np.uint16), outs[2][k].view(np.uint16)) for k in outs[1])
            print(("ok   " if same else "FAIL ") + f"{name}: -g 1 and -g 2 outputs {'identical' if same else 'differ'}")
            good &= same
        ok &= good
        pt.done_with(d, good)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
