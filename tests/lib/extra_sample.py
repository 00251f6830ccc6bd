"""GridSample and Det beyond the ONNX node tests (expected outputs from onnxruntime).

GridSample: every padding mode with grid points far outside [-1, 1] (several reflections;
cubic with some coordinates outside, where border clamps every coordinate first), both
align_corners, nearest on exact half-pixel ties (rounded half to even), 5-D linear and
nearest in every padding mode, double and float16 (widened to float), several images
and channels. Det (onnxruntime has float only; tests/cpu/sample_cases.py
checks double against numpy): batches of matrices that need row swaps, singular
ones (0), 1 x 1."""
import numpy as np
from onnx import TensorProto, helper


def models(model, rng):
    f32, f64, f16 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16
    npt = {f32: np.float32, f64: np.float64, f16: np.float16}
    out = []

    def gs(name, xs, gshape, lo, hi, opset, dt=f32, **attrs):
        x = rng.standard_normal(xs).astype(npt[dt])
        g = rng.uniform(lo, hi, gshape).astype(npt[dt])
        out.append((name, model("g", [helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)],
                                [("x", dt, x.shape), ("grid", dt, g.shape)], [("y", dt)], opset=opset),
                    {"x": x, "grid": g}))

    # opset 16 (4-D) and 20 (N-D) spellings of the modes
    for opset, lin, cub in ((16, "bilinear", "bicubic"), (20, "linear", "cubic")):
        for mode in (lin, "nearest", cub):
            for pad in ("zeros", "border", "reflection"):
                for ac in (0, 1):
                    gs(f"extra_gridsample{opset}_{mode}_{pad}_ac{ac}", (2, 3, 5, 7), (2, 4, 6, 2), -1.7, 1.7, opset,
                       mode=mode, padding_mode=pad, align_corners=ac)
    # far outside: reflected several times
    for mode in ("linear", "cubic", "nearest"):
        for ac in (0, 1):
            gs(f"extra_gridsample_far_reflection_{mode}_ac{ac}", (1, 2, 4, 3), (1, 5, 5, 2), -6.0, 6.0, 20, mode=mode,
               padding_mode="reflection", align_corners=ac)
    # a one-pixel-wide input (reflection over an empty range with align_corners 1)
    for pad in ("border", "reflection", "zeros"):
        gs(f"extra_gridsample_width1_{pad}", (1, 2, 4, 1), (1, 3, 3, 2), -2.0, 2.0, 20, mode="cubic", padding_mode=pad,
           align_corners=1)
    # 5-D: linear and nearest in every padding mode
    for mode in ("linear", "nearest"):
        for pad in ("zeros", "border", "reflection"):
            for ac in (0, 1):
                gs(f"extra_gridsample5d_{mode}_{pad}_ac{ac}", (2, 2, 3, 4, 5), (2, 2, 3, 4, 3), -1.4, 1.4, 20,
                   mode=mode, padding_mode=pad, align_corners=ac)
    # double; float16 (computed in float)
    gs("extra_gridsample_double_cubic", (1, 2, 6, 5), (1, 4, 4, 2), -1.3, 1.3, 20, f64, mode="cubic",
       padding_mode="reflection")
    gs("extra_gridsample_double_5d_linear", (1, 2, 3, 4, 5), (1, 2, 2, 3, 3), -1.3, 1.3, 20, f64)
    gs("extra_gridsample_float16_linear", (1, 2, 6, 5), (1, 4, 4, 2), -1.3, 1.3, 20, f16, padding_mode="border")
    # nearest on exact ties: W = H = 4, align_corners 0: x = (4 g + 3) / 2, so g = -1, -0.5, 0, 0.5, 1
    # fall on -0.5, 0.5, 1.5, 2.5, 3.5 (rounded half to even: 0, 0, 2, 2, 4 = outside)
    xt = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    gv = np.arange(-1, 1.01, 0.25)
    gt = np.stack(np.meshgrid(gv, gv[::-1]), -1)[None].astype(np.float32)
    out.append(("extra_gridsample_nearest_ties", model("g", [
        helper.make_node("GridSample", ["x", "grid"], ["y"], mode="nearest")],
        [("x", f32, xt.shape), ("grid", f32, gt.shape)], [("y", f32)], opset=20), {"x": xt, "grid": gt}))

    # Det
    def det(name, xs, dt, fix=None):
        x = rng.standard_normal(xs).astype(npt[dt])
        if fix:
            fix(x)
        out.append((name, model("g", [helper.make_node("Det", ["x"], ["y"])], [("x", dt, x.shape)], [("y", dt)]),
                    {"x": x}))

    def swaps(x):  # zeros on the diagonal: every column needs a row swap
        x[..., range(x.shape[-1]), range(x.shape[-1])] = 0

    def singular(x):  # the last row a copy of the first; one matrix all zero
        x[..., -1, :] = x[..., 0, :]
        x[0] = 0

    det("extra_det_batch_float", (2, 3, 4, 4), f32)
    det("extra_det_pivot_float", (3, 5, 5), f32, swaps)
    det("extra_det_singular_float", (3, 3, 3), f32, singular)
    det("extra_det_6x6", (6, 6), f32)
    det("extra_det_1x1", (4, 1, 1), f32)
    return out
