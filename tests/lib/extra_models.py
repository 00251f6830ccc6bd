"""Models of our own in the ONNX backend node-test layout (model.onnx plus
test_data_set_0/{input,output}_K.pb, expected outputs from onnxruntime), for what the node
tests leave out: autodiff's MaxPool gradient (ScatterElements add on the pool's Indices),
scatters large enough for the multi-pass sort, ScatterND add with repeated rows, scatters
of a single update, a grouped ConvTranspose with asymmetric pads, a wide TopK with ties,
Range too large to be folded, integer and byte reductions, int8 max pooling,
GroupNormalization-18 and float16, MeanVarianceNormalization's axes, EyeLike in int32.

Both targets' node-test drivers run them: tests/cpu/node_tests.py and
tests/cuda/node_tests_cuda.py.

    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    import extra_models
    for name, folder in extra_models.write_extra(work): ...
"""

import os

import numpy as np
import onnx


def extra_models():
    """[(name, model, feeds)]: the EXTRA models (see the docstring)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64

    def model(name, nodes, inputs, outputs, inits=(), opset=18):
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits])
        # IR version 8 (opset 18's): a newer onnx package writes a newer one by default,
        # which the onnxruntime beside it may not read yet (onnx 1.23 vs onnxruntime 1.30)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        return onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)  # outputs get their shapes

    def c64(*v):
        return np.array(v, np.int64)

    out = []
    # autodiff's MaxPool gradient: ScatterElements(zeros [1, X], Indices [1, Y], dY [1, Y], axis 1, add)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    x[0, 0, :2, :2] = 1.0  # ties: the first index wins, as MaxPool's reference
    dy = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    out.append(("extra_maxpool_grad", model("g", [
        helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["i", "s1"], ["fi"]),
        helper.make_node("Reshape", ["dy", "s1"], ["fd"]),
        helper.make_node("ScatterElements", ["z", "fi", "fd"], ["sc"], axis=1, reduction="add"),
        helper.make_node("Reshape", ["sc", "s2"], ["dx"])],
        [("x", f32, x.shape), ("dy", f32, dy.shape)], [("y", f32), ("dx", f32)],
        [("s1", c64(1, 150)), ("s2", c64(2, 3, 9, 9)), ("z", np.zeros((1, 486), np.float32))]), {"x": x, "dy": dy}))
    # scatters over 2048 units: the sort's global passes; repeated targets
    data = rng.standard_normal((4, 1000)).astype(np.float32)
    idx = rng.integers(-1000, 1000, (4, 3000)).astype(np.int64)
    upd = rng.standard_normal((4, 3000)).astype(np.float32)
    for red in ("add", "max"):
        out.append((f"extra_scatter_elements_{red}_large", model("g", [
            helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction=red)],
            [("d", f32, data.shape), ("i", i64, idx.shape), ("u", f32, upd.shape)], [("y", f32)]),
            {"d": data, "i": idx, "u": upd}))
    emb = np.zeros((50, 16), np.float32)
    rows = rng.integers(0, 50, (3000, 1)).astype(np.int64)
    vals = rng.standard_normal((3000, 16)).astype(np.float32)
    out.append(("extra_scatternd_add_rows", model("g", [
        helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction="add")],
        [("d", f32, emb.shape), ("i", i64, rows.shape), ("u", f32, vals.shape)], [("y", f32)]),
        {"d": emb, "i": rows, "u": vals}))
    # a single update (zero bits of unit number in the sort key): the gradient of ViT's
    # class-token Gather x[:, 0] is ScatterND(zeros, [[0]], dy[1, ...], add)
    tok = rng.standard_normal((17, 32)).astype(np.float32)
    one = rng.standard_normal((1, 32)).astype(np.float32)
    out.append(("extra_scatternd_one_update", model("g", [
        helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction="add")],
        [("d", f32, tok.shape), ("u", f32, one.shape)], [("y", f32)], [("i", c64(0).reshape(1, 1))]),
        {"d": tok, "u": one}))
    out.append(("extra_scatter_elements_one_update", model("g", [
        helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1)],
        [("d", f32, tok.shape), ("u", f32, (1, 1))], [("y", f32)], [("i", c64(5).reshape(1, 1))]),
        {"d": tok, "u": one[:, :1].copy()}))
    # reductions of at most 32 inputs per output (one thread each) and of more (a warp each):
    # a MatMul weight gradient summed over broadcast batch rows, and the other kinds
    xr4 = rng.standard_normal((2, 2, 8, 48)).astype(np.float32)
    reds = [("ReduceSum", (0, 1)), ("ReduceMean", (3,)), ("ReduceMax", (1, 2)), ("ReduceMin", (0, 3)),
            ("ReduceProd", (2,)), ("ReduceL1", (0, 2)), ("ReduceL2", (1,)), ("ReduceSumSquare", (3,)),
            ("ReduceLogSumExp", (2, 3)), ("ReduceLogSumExp", (0,))]
    out.append(("extra_reduce_small_counts", model("g", [
        helper.make_node(op, ["x", f"a{k}"], [f"y{k}"], keepdims=k % 2)
        for k, (op, _) in enumerate(reds)],
        [("x", f32, xr4.shape)], [(f"y{k}", f32) for k in range(len(reds))],
        [(f"a{k}", c64(*ax)) for k, (_, ax) in enumerate(reds)]), {"x": xr4}))
    # integer and byte reductions (reduced in double, truncated toward zero as onnxruntime
    # does: negative means; a warp per output over 40 inputs, a thread per output over 3)
    xi = rng.integers(-50, 50, (2, 3, 40)).astype(np.int64)
    ireds = [("ReduceSum", (2,)), ("ReduceMean", (1,)), ("ReduceMean", (2,)), ("ReduceMax", (0, 2)),
             ("ReduceMin", (1,)), ("ReduceProd", (1,)), ("ReduceL1", (2,)), ("ReduceSumSquare", (0, 1))]
    for tname, T, npt in (("int64", i64, np.int64), ("int32", TensorProto.INT32, np.int32)):
        out.append((f"extra_reduce_{tname}", model("g", [
            helper.make_node(op, ["x", f"a{k}"], [f"y{k}"], keepdims=k % 2)
            for k, (op, _) in enumerate(ireds)],
            [("x", T, xi.shape)], [(f"y{k}", T) for k in range(len(ireds))],
            [(f"a{k}", c64(*ax)) for k, (_, ax) in enumerate(ireds)]), {"x": xi.astype(npt)}))
    xu = rng.integers(0, 256, (3, 50)).astype(np.uint8)
    out.append(("extra_reduce_uint8", model("g", [
        helper.make_node("ReduceMax", ["x", "a"], ["y0"], keepdims=0),
        helper.make_node("ReduceMin", ["x", "a"], ["y1"], keepdims=1)],
        [("x", TensorProto.UINT8, xu.shape)], [("y0", TensorProto.UINT8), ("y1", TensorProto.UINT8)],
        [("a", c64(1))]), {"x": xu}))
    # int8 max pooling (negative values, padded windows), the node tests have uint8 only
    xp8 = rng.integers(-128, 128, (2, 3, 7, 6)).astype(np.int8)
    out.append(("extra_maxpool_int8", model("g", [
        helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0])],
        [("x", TensorProto.INT8, xp8.shape)], [("y", TensorProto.INT8)]), {"x": xp8}))
    # grouped ConvTranspose, asymmetric pads, output padding, dilation, bias: cropped from scratch
    xc = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal((6,)).astype(np.float32)
    out.append(("extra_convtranspose_group_asym", model("g", [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 3], dilations=[1, 2],
                         pads=[1, 0, 0, 2], output_padding=[1, 2])],
        [("x", f32, xc.shape)], [("y", f32)], [("w", w), ("b", b)]), {"x": xc}))
    # wide TopK with ties, largest and smallest
    xt = np.round(rng.standard_normal((3, 1000)) * 4).astype(np.float32)
    for largest in (1, 0):
        out.append((f"extra_topk_wide_{'largest' if largest else 'smallest'}", model("g", [
            helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)],
            [("x", f32, xt.shape)], [("v", f32), ("i", i64)], [("k", c64(7))]), {"x": xt}))
    # Range above the folder's size limit (and a trivial node for the pipeline's input)
    xr = rng.standard_normal((4,)).astype(np.float32)
    out.append(("extra_range_large", model("g", [
        helper.make_node("Range", ["s", "l", "d"], ["r"]),
        helper.make_node("Range", ["si", "li", "di"], ["ri"]),
        helper.make_node("Relu", ["x"], ["y"])],
        [("x", f32, xr.shape)], [("r", f32), ("ri", i64), ("y", f32)],
        [("s", np.array(0.5, np.float32)), ("l", np.array(300000.5, np.float32)), ("d", np.array(0.25, np.float32)),
         ("si", np.array(10, np.int64)), ("li", np.array(-4000000, np.int64)), ("di", np.array(-3, np.int64))]),
        {"x": xr}))
    # lowered ops (passes/lower/lower_ops.c) beyond the node tests: GroupNormalization-18 (scale
    # and bias per group), -21 in float16, MeanVarianceNormalization over other axes,
    # EyeLike below the diagonal in int32
    xg = rng.standard_normal((2, 6, 3, 4)).astype(np.float32)
    out.append(("extra_groupnorm18_per_group", model("g", [
        helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-3)],
        [("x", f32, xg.shape)], [("y", f32)],
        [("s", rng.standard_normal(3).astype(np.float32)), ("b", rng.standard_normal(3).astype(np.float32))]),
        {"x": xg}))
    f16 = TensorProto.FLOAT16
    out.append(("extra_groupnorm21_float16", model("g", [
        helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
        [("x", f16, xg.shape)], [("y", f16)],
        [("s", rng.standard_normal(6).astype(np.float16)), ("b", rng.standard_normal(6).astype(np.float16))], opset=21),
        {"x": xg.astype(np.float16)}))
    out.append(("extra_mvn_axes", model("g", [
        helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[1, 3])],
        [("x", f32, xg.shape)], [("y", f32)]), {"x": xg}))
    out.append(("extra_eyelike_int32", model("g", [
        helper.make_node("EyeLike", ["x"], ["e"], k=-1, dtype=TensorProto.INT32),
        helper.make_node("Relu", ["x"], ["y"])],
        [("x", f32, (4, 6))], [("e", TensorProto.INT32), ("y", f32)]), {"x": rng.standard_normal((4, 6)).astype(np.float32)}))
    # int4 weights, blocked (opset 21): the weight-only quantization of LLM exports, a
    # DequantizeLinear of packed int4 (and uint4 with zero points) feeding MatMul
    wq = rng.integers(-8, 8, (64, 24))
    ws = (rng.random((2, 24)) * 0.1 + 0.01).astype(np.float32)
    uq, uz = rng.integers(0, 16, (64, 24)), rng.integers(0, 16, (2, 24))
    xi = rng.standard_normal((5, 64)).astype(np.float32)
    i4 = onnx.helper.make_model(onnx.helper.make_graph([
        helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=0, block_size=32),
        helper.make_node("DequantizeLinear", ["uq", "ws", "uz"], ["u"], axis=0, block_size=32),
        helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("MatMul", ["x", "u"], ["z"])], "g",
        [helper.make_tensor_value_info("x", f32, xi.shape)],
        [helper.make_tensor_value_info("y", f32, None), helper.make_tensor_value_info("z", f32, None)],
        [helper.make_tensor("wq", TensorProto.INT4, wq.shape, wq.ravel().tolist()), numpy_helper.from_array(ws, "ws"),
         helper.make_tensor("uq", TensorProto.UINT4, uq.shape, uq.ravel().tolist()),
         helper.make_tensor("uz", TensorProto.UINT4, uz.shape, uz.ravel().tolist())]),
        opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    out.append(("extra_int4_blocked_weights", i4, {"x": xi}))
    # more, one module per family of ops, each with models(model, rng) -> [(name, model, feeds)]
    import importlib
    for mod in EXTRA_MODULES:
        out += importlib.import_module(mod).models(model, rng)
    return out


# one module per family of ops: extra_signal (DFT, STFT, windows, MelWeightMatrix),
# extra_sample (GridSample, Det), extra_vision (RoiAlign, DeformConv), extra_lower (the
# ops passes/lower/lower_ops.c writes in others), extra_conv (depthwise Convs)
EXTRA_MODULES = ["extra_signal", "extra_sample", "extra_vision", "extra_lower", "extra_conv"]


def write_extra(work):
    """The EXTRA models as node-test folders (expected outputs from onnxruntime): [(name, dir)]."""
    import onnxruntime as ort
    from onnx import numpy_helper
    res = []
    for name, m, feeds in extra_models():
        d = os.path.join(work, "extra", name)
        ds = os.path.join(d, "test_data_set_0")
        os.makedirs(ds, exist_ok=True)
        onnx.save(m, os.path.join(d, "model.onnx"))
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        outs = sess.run(None, feeds)
        for k, (n, v) in enumerate(feeds.items()):
            with open(os.path.join(ds, f"input_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())
        for k, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
            with open(os.path.join(ds, f"output_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, o.name).SerializeToString())
        res.append((name, d))
    return res
