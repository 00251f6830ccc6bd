#!/usr/bin/python3
"""Models of default-domain opsets 1 to 6 (frontend/onnx_legacy.h), built here, compiled by
pipecc (one stage and one micro-batch; two stages and two micro-batches) and compared with
onnxruntime on the same model written at opset 13 (onnxruntime reads opset 7 and later
only): rel-L2 <= --tol per output.

    legacy_opset.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]

Cases: an opset 6 CNN (Conv, Mul and Add broadcasting a constant from axis 1, Gemm with
broadcast=1, BatchNormalization and Dropout with is_test=1 and without, Softmax); and an
opset 1 model of the forms opset 7 changed: Sub broadcasting a computed tensor from
axis 0, Selu-1's defaults, Pad-1 paddings, Upsample-1 scales, GlobalLpPool-1 float p,
Split-1 lengths as an input, Concat-1 without axis, Reshape-1 shape attribute, Tile-1
tiles and axis inputs, Cast-1 type names, consumed_inputs.
--target cuda builds with nvcc = tests/cuda/sim/nvcc (CUDASIM_LIB=LIB) and runs on the CPU
CUDA simulator, exact float32 (--no-tf32)."""

import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402


def vi(name, shape, dt=T.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def build(nodes, x_shape, outs, inits, opset):
    """A model; at opset < 7 of IR version 3, which lists the initializers as inputs."""
    ins = [vi("x", x_shape)]
    if opset < 7:
        ins += [vi(t.name, list(t.dims), t.data_type) for t in inits]
    g = helper.make_graph(nodes, "g", ins, [vi(n, s) for n, s in outs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="pipecc-tests")
    m.ir_version = 3 if opset < 7 else 8
    return m


def cnn(legacy):
    rng = np.random.default_rng(6)
    C = 4

    def arr(name, shape, dt=np.float32):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(dt), name)
    inits = [arr("W", (C, 3, 3, 3)), arr("Wb", (C,)), arr("scale", (C,)), arr("shift", (C,)),
             arr("bn_s", (C,)), arr("bn_b", (C,)), arr("bn_m", (C,)),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, C).astype(np.float32), "bn_v"),
             arr("G", (5, C * 4 * 4)), arr("Gc", (5,))]
    if legacy:  # B broadcast from axis 1
        bc = dict(broadcast=1, axis=1)
        scale, shift = "scale", "shift"
        pre = []
    else:  # the numpy form: [C, 1, 1]
        bc = {}
        scale, shift = "scale3", "shift3"
        inits.append(numpy_helper.from_array(np.array([C, 1, 1], np.int64), "c11"))
        pre = [helper.make_node("Reshape", ["scale", "c11"], ["scale3"]),
               helper.make_node("Reshape", ["shift", "c11"], ["shift3"])]
    test1 = dict(is_test=1) if legacy else {}
    nodes = pre + [
        helper.make_node("Conv", ["x", "W", "Wb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", scale], ["cs"], name="scale", **bc),
        helper.make_node("Add", ["cs", shift], ["ca"], name="shift", **bc),
        helper.make_node("BatchNormalization", ["ca", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], name="bn", **test1),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Dropout", ["f"], ["fd"], name="drop"),
        helper.make_node("Gemm", ["fd", "G", "Gc"], ["gm"], name="fc", transB=1, **(dict(broadcast=1) if legacy else {})),
        helper.make_node("Softmax", ["gm"], ["y"], name="softmax")]
    return build(nodes, [2, 3, 8, 8], [("y", [2, 5])], inits, 6 if legacy else 13)


def forms(legacy):
    """x [2, 4, 4, 4]; one output per legacy form."""
    N, C, H = 2, 4, 4
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def node(op, ins, outs, legacy_attrs=None, attrs=None, **both):
        a = dict(both, **((legacy_attrs or {}) if legacy else (attrs or {})))
        nodes.append(helper.make_node(op, ins, outs if isinstance(outs, list) else [outs], name=op.lower() + str(len(nodes)),
                                      **a))
    # Sub of a computed [N, C] from axis 0 (not a constant: the reshape stays a node)
    node("ReduceMean", ["x"], "m", axes=[2, 3], keepdims=0)
    if legacy:
        node("Sub", ["x", "m"], "centred", dict(broadcast=1, axis=0, consumed_inputs=[0, 0]))
    else:
        node("Unsqueeze", ["m", const("ax23", np.array([2, 3], np.int64))], "m4")
        node("Sub", ["x", "m4"], "centred")
    # Mul by a [C, H, H] constant with broadcast and no axis: suffix matching
    node("Mul", ["centred", const("k", np.linspace(0.5, 2, C * H * H, dtype=np.float32).reshape(C, H, H))], "ck",
         dict(broadcast=1))
    node("Selu", ["ck"], "o_selu", {}, dict(alpha=1.6732, gamma=1.0507))
    pads = [0, 0, 1, 2, 0, 0, 2, 1]
    if legacy:
        node("Pad", ["ck"], "o_pad", dict(paddings=pads), mode="constant", value=0.5)
    else:
        node("Pad", ["ck", const("pads", np.array(pads, np.int64)), const("pv", np.array(0.5, np.float32))], "o_pad",
             mode="constant")
    if legacy:
        node("Upsample", ["ck"], "o_up", dict(height_scale=2.0, width_scale=3.0))
    else:
        node("Resize", ["ck", "", const("sc", np.array([1, 1, 2, 3], np.float32))], "o_up",
             mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    node("GlobalLpPool", ["ck"], "o_lp", dict(p=2.0), dict(p=2))
    if legacy:  # Split-1's lengths are of the input's type
        node("Split", ["ck", const("lens", np.array([1, 3], np.float32))], ["s1", "s3"], axis=1)
        node("Concat", ["s3", "s1"], "o_cat")
        node("Reshape", ["o_cat"], "o_rs", dict(shape=[N, -1]))
        node("Tile", ["ck", const("tiles", np.array([2], np.float32)), const("tax", np.array([2], np.float32))], "o_tile")
        node("Cast", ["ck"], "cd", dict(to="DOUBLE"))
        node("Cast", ["cd"], "o_cast", dict(to="FLOAT"))
    else:
        node("Split", ["ck", const("lens", np.array([1, 3], np.int64))], ["s1", "s3"], axis=1)
        node("Concat", ["s3", "s1"], "o_cat", axis=1)
        node("Reshape", ["o_cat", const("shape", np.array([N, -1], np.int64))], "o_rs")
        node("Tile", ["ck", const("reps", np.array([1, 1, 2, 1], np.int64))], "o_tile")
        node("Cast", ["ck"], "cd", to=T.DOUBLE)
        node("Cast", ["cd"], "o_cast", to=T.FLOAT)
    outs = [("o_selu", [N, C, H, H]), ("o_pad", [N, C, H + 3, H + 3]), ("o_up", [N, C, 2 * H, 3 * H]),
            ("o_lp", [N, C, 1, 1]), ("o_rs", [N, C * H * H]), ("o_tile", [N, C, 2 * H, H]), ("o_cast", [N, C, H, H])]
    return build(nodes, [N, C, H, H], outs, inits, 1 if legacy else 13)


CASES = {"opset6_cnn": cnn, "opset1_forms": forms}


def main():
    a = pt.case_args(1e-5)
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name, make in CASES.items():
        if a.k and not re.search(a.k, name):
            continue
        d = pt.case_dir(a.work, name)
        legacy, twin = make(True), make(False)
        onnx.checker.check_model(legacy)
        onnx.checker.check_model(twin)
        path = os.path.join(d, "model.onnx")
        onnx.save(legacy, path)
        shape = [x.dim_value for x in legacy.graph.input[0].type.tensor_type.shape.dim]
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        sess = ort.InferenceSession(twin.SerializeToString(), providers=["CPUExecutionProvider"])
        ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))
        save_npz(os.path.join(d, "x.npz"), {"x": x})
        good = True
        for g in (1, 2):  # g stages, g micro-batches
            label = f"{name} -g {g} -m {g}"
            out = os.path.join(d, f"g{g}")
            cmd, env = pt.sim_target([a.pipecc, path, "-g", str(g), "-m", str(g), "-o", out, "-j", "1"],
                                     pt.split_env(), a.target, a.sim_lib)  # exactly g stages
            good &= pt.build_run_rel_l2(cmd, env, out, os.path.join(d, "x.npz"), ref, a.tol, label)
        ok &= good
        pt.done_with(d, good)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
