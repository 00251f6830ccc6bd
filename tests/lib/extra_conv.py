"""Extra models for depthwise Convs (the cpu target's direct loop, codegen/c/ops_nn.c:
one input and one output channel per group, 1-D and 2-D), beyond the ONNX node tests:
3x3 with bias and a fused Relu6 (MobileNet's), stride 2 without bias on odd sizes, 5x5
dilated with asymmetric pads and strides (2, 1), 1-D with a fused residual Add and
Relu, a kernel larger than the image (no column has its whole window inside),
SAME_UPPER with stride 2, and a channel multiplier of 2 (two outputs per group: the
GEMM path). Expected outputs come from onnxruntime (tests/lib/extra_models.py)."""
import numpy as np
from onnx import TensorProto, helper


def models(model, rng):
    f32, f64 = TensorProto.FLOAT, TensorProto.DOUBLE  # (onnxruntime has no float64 Conv)
    out = []

    def dw(name, xshape, k, dt=f32, bias=True, after=(), extra_in=(), consts=(), mult=1, **attrs):
        npdt = np.float64 if dt == f64 else np.float32
        C = xshape[1]
        x = rng.standard_normal(xshape).astype(npdt)
        w = rng.standard_normal((C * mult, 1, *k)).astype(npdt)
        ins = ["x", "w"] + (["b"] if bias else [])
        inits = [("w", w)] + ([("b", rng.standard_normal(C * mult).astype(npdt))] if bias else []) + list(consts)
        nodes = [helper.make_node("Conv", ins, ["c" if after else "y"], group=C, kernel_shape=list(k), **attrs)]
        nodes += list(after)
        feeds = {"x": x}
        inputs = [("x", dt, x.shape)]
        for n, shape in extra_in:
            feeds[n] = rng.standard_normal(shape).astype(npdt)
            inputs.append((n, dt, shape))
        out.append((name, model("g", nodes, inputs, [("y", dt)], inits), feeds))

    # Clip's bounds constants: passes/opt/fuse.c folds it into the Conv
    dw("extra_dwconv_3x3_relu6", (2, 8, 9, 11), (3, 3), pads=[1, 1, 1, 1],
       after=[helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
       consts=[("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32))])
    dw("extra_dwconv_stride2_nobias", (1, 4, 10, 7), (3, 3), bias=False, strides=[2, 2], pads=[1, 1, 1, 1])
    dw("extra_dwconv_5x5_dilated", (2, 3, 13, 12), (5, 5), strides=[2, 1], dilations=[2, 2], pads=[0, 3, 1, 2])
    dw("extra_dwconv_1d_residual", (2, 6, 15), (3,), pads=[1, 1],
       after=[helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
       extra_in=[("r", (2, 6, 15))])
    dw("extra_dwconv_kernel_over_image", (1, 2, 3, 3), (5, 5), pads=[2, 2, 2, 2])
    dw("extra_dwconv_same_upper", (1, 5, 8, 9), (3, 3), strides=[2, 2], auto_pad="SAME_UPPER")
    dw("extra_dwconv_multiplier2", (1, 3, 7, 7), (3, 3), mult=2, pads=[1, 1, 1, 1])
    return out
