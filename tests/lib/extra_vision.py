"""Models of our own for RoiAlign and DeformConv (codegen/{c,cuda}/ops_vision.c) beyond the
ONNX node tests (one image, one channel, sampling_ratio 2, spatial_scale 1, 2x2 kernels
without strides or groups): expected outputs from onnxruntime (tests/lib/extra_models.py)."""

import numpy as np
from onnx import TensorProto, helper


def _rois(rng, k, size, dtype):
    """k boxes (x1, y1, x2, y2) with x1 < x2, y1 < y2, some reaching past the image."""
    lo = rng.uniform(-0.3 * size, 0.8 * size, (k, 2))
    wh = rng.uniform(0.5, 0.9 * size, (k, 2))
    return np.concatenate([lo, lo + wh], axis=1).astype(dtype)


def models(model, rng):
    f32, f64, i64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
    out = []
    # RoiAlign: two images, several channels, boxes in image coordinates (spatial_scale
    # 0.25 of a 32 x 40 image on an 8 x 10 map), some past the edge
    x = rng.standard_normal((2, 3, 8, 10)).astype(np.float32)
    rois = _rois(rng, 5, 36, np.float32)
    bi = np.array([0, 1, 1, 0, 1], np.int64)
    feeds = {"x": x, "rois": rois, "bi": bi}
    ins = [("x", f32, x.shape), ("rois", f32, rois.shape), ("bi", i64, bi.shape)]
    # opset 10: no coordinate_transformation_mode (output_half_pixel); adaptive sampling
    out.append(("extra_roialign10_adaptive", model("g", [
        helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=3, output_width=4, spatial_scale=0.25)],
        ins, [("y", f32)], opset=10), feeds))
    # opset 16: half_pixel (the default), adaptive sampling, avg and max
    for mode in ("avg", "max"):
        out.append((f"extra_roialign16_half_pixel_{mode}", model("g", [
            helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=2, output_width=3, spatial_scale=0.25,
                             mode=mode)],
            ins, [("y", f32)], opset=16), feeds))
    # sampling_ratio 3, output_half_pixel, in double
    xd = rng.standard_normal((2, 2, 6, 7))
    rd = _rois(rng, 3, 7, np.float64)
    out.append(("extra_roialign16_double_sr3", model("g", [
        helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=4, output_width=2, sampling_ratio=3,
                         coordinate_transformation_mode="output_half_pixel")],
        [("x", f64, xd.shape), ("rois", f64, rd.shape), ("bi", i64, (3,))], [("y", f64)], opset=16),
        {"x": xd, "rois": rd, "bi": np.array([1, 0, 1], np.int64)}))

    # DeformConv: two images, group 2, offset_group 2, strides, dilations, asymmetric pads,
    # bias and mask; offsets large enough to sample outside the input
    x = rng.standard_normal((2, 4, 7, 8)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    # oH = (7 + 1 + 2 - 3) // 2 + 1 = 4, oW = (8 + 0 + 1 - 3) // 1 + 1 = 7
    off = (rng.standard_normal((2, 2 * 2 * 6, 4, 7)) * 2).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    mask = rng.random((2, 2 * 6, 4, 7)).astype(np.float32)
    attrs = dict(group=2, offset_group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 2, 1])
    ins = [("x", f32, x.shape), ("w", f32, w.shape), ("off", f32, off.shape)]
    out.append(("extra_deform_conv_group_mask_bias", model("g", [
        helper.make_node("DeformConv", ["x", "w", "off", "b", "mask"], ["y"], kernel_shape=[3, 2], **attrs)],
        ins + [("b", f32, b.shape), ("mask", f32, mask.shape)], [("y", f32)], opset=19),
        {"x": x, "w": w, "off": off, "b": b, "mask": mask}))
    # no bias, mask only (B left out by an empty name), one offset group over 4 channels
    off1 = (rng.standard_normal((2, 2 * 6, 4, 7)) * 1.5).astype(np.float32)
    mask1 = rng.random((2, 6, 4, 7)).astype(np.float32)
    out.append(("extra_deform_conv_mask_no_bias", model("g", [
        helper.make_node("DeformConv", ["x", "w", "off", "", "mask"], ["y"], group=2, strides=[2, 1], dilations=[1, 2],
                         pads=[1, 0, 2, 1])],
        [("x", f32, x.shape), ("w", f32, w.shape), ("off", f32, off1.shape), ("mask", f32, mask1.shape)],
        [("y", f32)], opset=19), {"x": x, "w": w, "off": off1, "mask": mask1}))
    # double, 3x3 with pads 1 (the DCN layer's usual form), bias, no mask
    xd = rng.standard_normal((1, 3, 5, 6))
    wd = rng.standard_normal((4, 3, 3, 3))
    od = rng.standard_normal((1, 18, 5, 6)) * 1.5
    bd = rng.standard_normal(4)
    out.append(("extra_deform_conv_double", model("g", [
        helper.make_node("DeformConv", ["x", "w", "off", "b"], ["y"], pads=[1, 1, 1, 1])],
        [("x", f64, xd.shape), ("w", f64, wd.shape), ("off", f64, od.shape), ("b", f64, bd.shape)], [("y", f64)],
        opset=19), {"x": xd, "w": wd, "off": od, "b": bd}))
    # float16 (computed in float, passes/opt/widen.c), mask without bias
    f16 = TensorProto.FLOAT16
    xh = rng.standard_normal((1, 3, 5, 6)).astype(np.float16)
    wh = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float16)
    oh = (rng.standard_normal((1, 18, 5, 6)) * 1.5).astype(np.float16)
    mh = rng.random((1, 9, 5, 6)).astype(np.float16)
    out.append(("extra_deform_conv_float16", model("g", [
        helper.make_node("DeformConv", ["x", "w", "off", "", "mask"], ["y"], pads=[1, 1, 1, 1])],
        [("x", f16, xh.shape), ("w", f16, wh.shape), ("off", f16, oh.shape), ("mask", f16, mh.shape)], [("y", f16)],
        opset=19), {"x": xh, "w": wh, "off": oh, "mask": mh}))
    return out
