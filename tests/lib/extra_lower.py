"""Extra models for the ops passes/lower/lower_ops.c writes in other ops, beyond the ONNX node
tests: CenterCropPad in float16 over some axes, MaxUnpool after MaxPool (with and
without output_shape, two samples), ReverseSequence time-first with the lengths as a
graph input, Col2Im with strides, dilations, pads and a stride that does not divide
evenly, Compress without axis (condition shorter than the input), AffineGrid 3-D (both
align_corners) and 2-D in double, and Scatter-10 (ScatterElements' old name).
Expected outputs come from onnxruntime (tests/lib/extra_models.py)."""
import numpy as np
from onnx import TensorProto, helper


def models(model, rng):
    f32, f16, f64, i64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT64
    out = []

    # CenterCropPad, float16: axis 1 cropped (7 -> 4, odd difference), axis 2 padded (3 -> 6)
    x = rng.standard_normal((2, 7, 3)).astype(np.float16)
    out.append(("extra_center_crop_pad_float16", model("g", [
        helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[-2, 2])],
        [("x", f16, x.shape)], [("y", f16)], [("s", np.array([4, 6], np.int64))]), {"x": x}))

    # MaxPool -> MaxUnpool back to the pooled input's size: 5x5 pooled 2x2 by 2 gives 2x2,
    # whose default unpooled size is 4x4, so output_shape says 5x5; two samples, so the
    # indices count over the whole tensor
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    out.append(("extra_maxunpool_output_shape", model("g", [
        helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxUnpool", ["p", "i", "s"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [("x", f32, x.shape)], [("y", f32)], [("s", np.array([2, 3, 5, 5], np.int64))]), {"x": x}))
    # the same with padding and overlapping windows, the default output size
    x = rng.standard_normal((2, 2, 5, 7)).astype(np.float32)
    out.append(("extra_maxunpool_pads", model("g", [
        helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
        [("x", f32, x.shape)], [("y", f32)]), {"x": x}))

    # ReverseSequence, time-first (batch_axis 1), lengths a graph input (data, not a constant)
    x = rng.standard_normal((5, 3, 2)).astype(np.float32)
    out.append(("extra_reversesequence_lens_input", model("g", [
        helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=1, time_axis=0)],
        [("x", f32, x.shape), ("l", i64, (3,))], [("y", f32)]), {"x": x, "l": np.array([5, 0, 3], np.int64)}))

    # Col2Im: strides, dilations, asymmetric pads; the second, a stride that leaves a
    # remainder (the last image row gets nothing)
    def col2im(name, img, blk, C, N=2, **at):
        sp = len(img)
        st, dl = at.get("strides", [1] * sp), at.get("dilations", [1] * sp)
        pd = at.get("pads", [0] * (2 * sp))
        L = 1
        for d in range(sp):
            L *= (img[d] + pd[d] + pd[sp + d] - (blk[d] - 1) * dl[d] - 1) // st[d] + 1
        x = rng.standard_normal((N, C * int(np.prod(blk)), L)).astype(np.float32)
        out.append((name, model("g", [helper.make_node("Col2Im", ["x", "i", "b"], ["y"], **at)],
                                [("x", f32, x.shape)], [("y", f32)],
                                [("i", np.array(img, np.int64)), ("b", np.array(blk, np.int64))]), {"x": x}))
    col2im("extra_col2im_strides_dilations_pads", [6, 7], [2, 3], 2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 1])
    col2im("extra_col2im_remainder", [6, 5], [2, 2], 3, strides=[3, 2])

    # Compress without axis: the flattened input, a condition shorter than it
    x = rng.standard_normal((3, 4)).astype(np.float32)
    cond = np.array([1, 0, 0, 1, 1, 0, 1, 0, 1], bool)
    out.append(("extra_compress_flat", model("g", [helper.make_node("Compress", ["x", "c"], ["y"])],
                                             [("x", f32, x.shape)], [("y", f32)], [("c", cond)]), {"x": x}))

    # AffineGrid 3-D, both align_corners; 2-D in double
    for ac in (0, 1):
        t = rng.standard_normal((2, 3, 4)).astype(np.float32)
        out.append((f"extra_affine_grid_3d_align{ac}", model("g", [
            helper.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=ac)],
            [("t", f32, t.shape)], [("y", f32)], [("s", np.array([2, 1, 3, 4, 5], np.int64))], opset=20), {"t": t}))
    t = rng.standard_normal((3, 2, 3))
    out.append(("extra_affine_grid_2d_double", model("g", [
        helper.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=1)],
        [("t", f64, t.shape)], [("y", f64)], [("s", np.array([3, 2, 4, 6], np.int64))], opset=20), {"t": t}))

    # Scatter-10 (renamed ScatterElements in 11) on axis 0
    x = rng.standard_normal((4, 3)).astype(np.float32)
    u = rng.standard_normal((2, 3)).astype(np.float32)
    out.append(("extra_scatter10_axis0", model("g", [helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=0)],
                                               [("x", f32, x.shape), ("u", f32, u.shape)], [("y", f32)],
                                               [("i", np.array([[3, 0, 1], [1, 2, 3]], np.int64))], opset=10),
                {"x": x, "u": u}))
    return out
