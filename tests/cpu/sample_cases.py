#!/usr/bin/python3
"""GridSample and Det models, each compiled with -g 1 and -g 2 (default micro-batches) and
run, against onnxruntime on the same model, or (what onnxruntime does not run) against a
float64 numpy implementation written here from the operator spec, itself first checked
against onnxruntime where both run:

  torch_grid_modes   torch.nn.functional.grid_sample exported by PyTorch (GridSample-16):
                     bilinear, nearest, bicubic x zeros, border, reflection x align_corners
  torch_stn          a spatial transformer: a small CNN predicts the 2 x 3 affine matrices,
                     the sampling grid is their product with the base grid (MatMul, not
                     AffineGrid), grid_sample, then a CNN head
  torch_det          torch.linalg.det of matrices a Linear layer makes (Det-11)
  numpy_cubic5d      GridSample-20 cubic on 5-D inputs and linear on 3-D (one spatial dim),
                     which onnxruntime refuses (cubic: 4-D only; 4-D and 5-D only)
  numpy_det_double   Det on double matrices (onnxruntime: float only)
  errors             one error line, exit 2: a grid whose batch differs from X's, Det of
                     non-square matrices, GridSample-16 on 5-D, training through GridSample
                     (no gradient), micro-batches that would sample across the batch

    sample_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]"""

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
import pipecc_test as pt  # noqa: E402

B = 4  # batch: two micro-batches of 2 at -g 2


# ---- torch exports ------------------------------------------------------------------------

def torch_model(name, d):
    """(model path, feeds)"""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    path = os.path.join(d, "model.onnx")
    if name == "torch_grid_modes":
        combos = [(m, p, ac) for m in ("bilinear", "nearest", "bicubic") for p in ("zeros", "border", "reflection")
                  for ac in (False, True)]

        class Modes(torch.nn.Module):
            def forward(s, x, grid):
                return tuple(F.grid_sample(x, grid, mode=m, padding_mode=p, align_corners=ac) for m, p, ac in combos)

        feeds = {"x": rng.standard_normal((B, 3, 7, 9)).astype(np.float32),
                 "grid": rng.uniform(-1.5, 1.5, (B, 5, 6, 2)).astype(np.float32)}
        torch.onnx.export(Modes().eval(), (torch.from_numpy(feeds["x"]), torch.from_numpy(feeds["grid"])), path,
                          input_names=["x", "grid"], output_names=[f"y{i}" for i in range(len(combos))], opset_version=16)
        return path, feeds
    if name == "torch_stn":
        H, W = 12, 12

        class STN(torch.nn.Module):
            def __init__(s):
                super().__init__()
                s.loc = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                            torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 6))
                with torch.no_grad():  # near the identity, a little rotated and shifted
                    s.loc[-1].weight.mul_(0.05)
                    s.loc[-1].bias.copy_(torch.tensor([0.9, 0.2, 0.1, -0.15, 1.1, -0.05]))
                ys, xs = torch.meshgrid(torch.linspace(-1, 1, H), torch.linspace(-1, 1, W), indexing="ij")
                s.register_buffer("base", torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(H * W, 3))
                s.head = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                             torch.nn.Linear(4 * H * W, 5))

            def forward(s, x):
                theta = s.loc(x).view(-1, 2, 3)
                grid = torch.matmul(s.base, theta.transpose(1, 2)).view(-1, H, W, 2)
                return s.head(F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False))

        feeds = {"x": rng.standard_normal((B, 3, H, W)).astype(np.float32)}
        torch.onnx.export(STN().eval(), (torch.from_numpy(feeds["x"]),), path, input_names=["x"], output_names=["y"],
                          opset_version=16)
        return path, feeds
    if name == "torch_det":
        class Dets(torch.nn.Module):
            def __init__(s):
                super().__init__()
                s.lin = torch.nn.Linear(6, 16)

            def forward(s, x):
                return torch.linalg.det(s.lin(x).view(-1, 3, 4, 4))

        feeds = {"x": rng.standard_normal((B, 3, 6)).astype(np.float32)}
        torch.onnx.export(Dets().eval(), (torch.from_numpy(feeds["x"]),), path, input_names=["x"], output_names=["y"],
                          opset_version=16)
        return path, feeds
    raise ValueError(name)


# ---- the numpy reference (GridSample-20 and Det, from the spec) -----------------------------

def _cubic_w(t):
    a = -0.75
    d = np.array([1 + t, t, 1 - t, 2 - t])
    return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a)


def _reflect(v, lo, hi):
    if hi == lo:
        return lo
    while v < lo or v > hi:  # by the near border, then the far one, ...
        v = 2 * lo - v if v < lo else 2 * hi - v
    return v


def grid_sample_ref(x, grid, mode="linear", padding_mode="zeros", align_corners=0):
    """float64 GridSample-20 on N-D x [N, C, d1..dr], grid [N, D1..Dr, r]: cubic taps
    clamped or reflected one by one in border / reflection mode (onnxruntime's 4-D
    behaviour); coordinates clamped (border, not cubic) or reflected when any is outside."""
    x = x.astype(np.float64)
    grid = grid.astype(np.float64)
    N, C = x.shape[:2]
    S = x.shape[2:]
    r = len(S)
    out_sp = grid.shape[1:-1]
    y = np.zeros((N, C) + out_sp)
    for n in range(N):
        for o in np.ndindex(*out_sp):
            g = grid[(n,) + o][::-1]  # component 0 is the last dim
            c = [(g[d] + 1) / 2 * (S[d] - 1) if align_corners else ((g[d] + 1) * S[d] - 1) / 2 for d in range(r)]
            if mode == "nearest":
                c = [float(np.rint(v)) for v in c]
            lo = [0.0 if align_corners else -0.5] * r
            hi = [S[d] - 1.0 if align_corners else S[d] - 0.5 for d in range(r)]
            if any(c[d] < lo[d] or c[d] > hi[d] for d in range(r)):
                if padding_mode == "border" and mode != "cubic":
                    c = [min(max(c[d], 0.0), S[d] - 1.0) for d in range(r)]
                elif padding_mode == "reflection":
                    c = [_reflect(c[d], lo[d], hi[d]) for d in range(r)]
            taps = []
            for d in range(r):
                if mode == "nearest":
                    taps.append([(int(c[d]), 1.0)])
                elif mode == "linear":
                    f = int(np.floor(c[d]))
                    taps.append([(f, f + 1 - c[d]), (f + 1, c[d] - f)])
                else:
                    f = int(np.floor(c[d]))
                    taps.append(list(zip(range(f - 1, f + 3), _cubic_w(c[d] - f))))
            acc = np.zeros(C)
            for combo in np.ndindex(*[len(t) for t in taps]):
                idx, w = [], 1.0
                for d, k in enumerate(combo):
                    i, wd = taps[d][k]
                    w *= wd
                    if padding_mode == "zeros":
                        if i < 0 or i >= S[d]:
                            idx = None
                            break
                    elif padding_mode == "border":
                        i = min(max(i, 0), S[d] - 1)
                    else:
                        i = min(max(int(_reflect(float(i), lo[d], hi[d])), 0), S[d] - 1)
                    if idx is not None:
                        idx.append(i)
                if idx is not None:
                    acc += w * x[(n, slice(None)) + tuple(idx)]
            y[(n, slice(None)) + o] = acc
    return y


def gs_model(xs, gs, dt, opset, **attrs):
    g = helper.make_graph([helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", dt, xs), helper.make_tensor_value_info("grid", dt, gs)],
                          [helper.make_tensor_value_info("y", dt, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def check_reference():
    """The numpy reference against onnxruntime on 4-D and 5-D cases both run."""
    import onnxruntime as ort
    rng = np.random.default_rng(11)
    worst = 0.0
    for xs, gs, modes in (((2, 2, 4, 5), (2, 3, 4, 2), ("linear", "nearest", "cubic")),
                          ((1, 2, 3, 4, 5), (1, 2, 3, 2, 3), ("linear", "nearest"))):
        for mode in modes:
            for pad in ("zeros", "border", "reflection"):
                for ac in (0, 1):
                    x = rng.standard_normal(xs).astype(np.float32)
                    g = rng.uniform(-2.5, 2.5, gs).astype(np.float32)
                    m = gs_model(xs, gs, TensorProto.FLOAT, 20, mode=mode, padding_mode=pad, align_corners=ac)
                    o = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                        None, {"x": x, "grid": g})[0]
                    worst = max(worst, pt.rel_l2(grid_sample_ref(x, g, mode, pad, ac), o))
    ok = worst <= 1e-5
    print(("ok   " if ok else "FAIL ") + f"numpy reference vs onnxruntime (4-D, 5-D): worst rel-L2 {worst:.2e}")
    return ok


def numpy_model(name, d):
    """(model path, feeds, reference outputs)"""
    rng = np.random.default_rng(5)
    path = os.path.join(d, "model.onnx")
    if name == "numpy_cubic5d":
        nodes, ins, outs, feeds, ref = [], [], [], {}, {}
        cases = [("c5", (B, 2, 3, 4, 5), (B, 2, 3, 4, 3), dict(mode="cubic", padding_mode=p, align_corners=ac))
                 for p in ("zeros", "border", "reflection") for ac in (0, 1)]
        cases += [("l3", (B, 3, 6), (B, 5, 1), dict(mode=m, padding_mode=p, align_corners=1))
                  for m in ("linear", "cubic", "nearest") for p in ("zeros", "reflection")]
        for k, (tag, xs, gs, attrs) in enumerate(cases):
            xn, gn, yn = f"x{k}", f"g{k}", f"y{k}_{tag}_{attrs['mode']}_{attrs['padding_mode']}_{attrs['align_corners']}"
            x = rng.standard_normal(xs).astype(np.float32)
            g = rng.uniform(-1.6, 1.6, gs).astype(np.float32)
            nodes.append(helper.make_node("GridSample", [xn, gn], [yn], **attrs))
            ins += [helper.make_tensor_value_info(xn, TensorProto.FLOAT, xs),
                    helper.make_tensor_value_info(gn, TensorProto.FLOAT, gs)]
            outs.append(helper.make_tensor_value_info(yn, TensorProto.FLOAT, None))
            feeds[xn], feeds[gn] = x, g
            ref[yn] = grid_sample_ref(x, g, **attrs).astype(np.float32)
        m = helper.make_model(helper.make_graph(nodes, "g", ins, outs), opset_imports=[helper.make_opsetid("", 20)],
                              ir_version=8)
    else:  # numpy_det_double: random, pivoting (zero diagonal), singular
        x = rng.standard_normal((B, 3, 5, 5))
        x[:, 1, range(5), range(5)] = 0
        x[:, 2, 4] = x[:, 2, 1] * 2
        m = helper.make_model(helper.make_graph(
            [helper.make_node("Det", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)]), opset_imports=[helper.make_opsetid("", 11)],
            ir_version=8)
        feeds, ref = {"x": x}, {"y": np.linalg.det(x)}
    onnx.save(m, path)
    return path, feeds, ref


def compare_abs(got, ref, label, atol):
    """Element-wise |got - ref| <= atol + 1e-5 |ref| (singular matrices: rel-L2 means nothing at 0)."""
    ok = True
    for k, v in ref.items():
        if k not in got or got[k].shape != v.shape:
            print(f"FAIL {label}: output {k} missing or of shape {got[k].shape if k in got else None}")
            return False
        e = np.abs(got[k].astype(np.float64) - v)
        if not np.all(e <= atol + 1e-5 * np.abs(v)):
            print(f"FAIL {label}: output {k}: max abs error {e.max():.3g}")
            ok = False
    if ok:
        print(f"ok   {label}: within {atol:g} + 1e-5 |ref|")
    return ok


# ---- errors ---------------------------------------------------------------------------------

def error_cases(a, d):
    def save(m, name):
        p = os.path.join(d, name + ".onnx")
        onnx.save(m, p)
        return p

    f = TensorProto.FLOAT
    ok = True
    env = pt.split_env()
    cmd = lambda p, *more: pt.sim_target([a.pipecc, p, "-o", os.path.join(d, "out"), "--emit-only"] + list(more),  # noqa: E731
                                         dict(env), a.target, a.sim_lib)
    c, e = cmd(save(gs_model((2, 3, 4, 4), (3, 5, 5, 2), f, 16), "gs_batch"))
    ok &= pt.one_error_line(c, "grid batch differs", "GridSample", "input 'grid' is [3, 5, 5, 2]", env=e)
    c, e = cmd(save(gs_model((2, 3, 4, 4, 4), (2, 5, 5, 5, 3), f, 16), "gs16_5d"))
    ok &= pt.one_error_line(c, "GridSample-16 on 5-D", "GridSample", "need opset 20", env=e)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", f, (2, 3, 4))],
        [helper.make_tensor_value_info("y", f, None)]), opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    c, e = cmd(save(m, "det_nonsquare"))
    ok &= pt.one_error_line(c, "Det of non-square matrices", "Det", "square matrices", env=e)
    # training through GridSample: a Conv weight before it
    w = numpy_helper.from_array(np.full((3, 3, 1, 1), 0.5, np.float32), "w")
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["h"]), helper.make_node("GridSample", ["h", "grid"], ["y"])], "g",
        [helper.make_tensor_value_info("x", f, (2, 3, 4, 4)), helper.make_tensor_value_info("grid", f, (2, 3, 3, 2))],
        [helper.make_tensor_value_info("y", f, None)], [w]), opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    c, e = cmd(save(m, "gs_train"), "--train-step", "--loss", "mse")
    ok &= pt.one_error_line(c, "training through GridSample", "no gradient for GridSample", env=e)
    # X [1, C, batch, W] (a spatial axis) and grid [1, batch, W_out, 2]: sampling across the batch at -m 2
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]), helper.make_node("Unsqueeze", ["xt", "ax"], ["xu"]),
         helper.make_node("Unsqueeze", ["gs", "ax"], ["grid"]), helper.make_node("GridSample", ["xu", "grid"], ["y"])],
        "g", [helper.make_tensor_value_info("x", f, (4, 6, 5)), helper.make_tensor_value_info("gs", f, (4, 3, 2))],
        [helper.make_tensor_value_info("y", f, None)], [numpy_helper.from_array(np.array([0], np.int64), "ax")]),
        opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    c, e = cmd(save(m, "gs_across"), "-g", "2", "-m", "2")
    ok &= pt.one_error_line(c, "micro-batches across a GridSample", "GridSample", "samples X across the batch axis", env=e)
    return ok


def main():
    a = pt.case_args(1e-5)
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    ok = True
    names = ["torch_grid_modes", "torch_stn", "torch_det", "numpy_cubic5d", "numpy_det_double", "errors"]
    for name in names:
        if a.k and not re.search(a.k, name):
            continue
        d = pt.case_dir(a.work, name)
        if name == "errors":
            good = error_cases(a, d)
            ok &= good
            pt.done_with(d, good)
            continue
        if name.startswith("torch"):
            path, feeds = torch_model(name, d)
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            ops = sorted({n.op_type for n in onnx.load(path).graph.node})
            print(f"     {name}: ops {', '.join(ops)}")
            good = True
        else:
            good = check_reference() if name == "numpy_cubic5d" else True
            path, feeds, ref = numpy_model(name, d)
        xin = os.path.join(d, "x.npz")
        save_npz(xin, feeds)
        for g in (1, 2):
            out = os.path.join(d, f"g{g}")
            cmd, env = pt.sim_target([a.pipecc, path, "-g", str(g), "-o", out, "-j", "1"], pt.split_env(), a.target,
                                     a.sim_lib)
            label = f"{name} -g {g} vs {'onnxruntime' if name.startswith('torch') else 'numpy'}"
            if name == "numpy_det_double":  # determinants of singular matrices are rounding noise around 0
                got = pt.build_run(cmd, env, out, xin, label)
                good &= got is not None and compare_abs(got, ref, label, 1e-10)
            else:
                good &= pt.build_run_rel_l2(cmd, env, out, xin, ref, a.tol, label)
        ok &= good
        pt.done_with(d, good)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
