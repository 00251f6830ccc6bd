#!/usr/bin/python3
"""Generate the malformed-model corpus for pipecc's error tests (tests only).

    /usr/bin/python3 tests/errors/make_corpus.py --out DIR     # write DIR/CASE/... + DIR/manifest.json
    /usr/bin/python3 tests/errors/make_corpus.py --list        # case names, one a line (needs no onnx)

Every case lives in its own folder DIR/CASE/ (external-data cases need one) and its
model is DIR/CASE/CASE.onnx, so the file name in a message identifies the case.
Nothing here is committed as a binary: the files are made with onnx.helper and raw
protobuf byte surgery each time the tests run.

A case's entry in manifest.json (read by run_case.py):
    model      path of the model, relative to DIR
    args       extra pipecc arguments
    status     expected exit status (2 for every malformed file, 0 for the positive cases)
    expect     regular expression (case-insensitive) the stderr must match (errors)
    node       node name the message must quote as 'NAME' (or null)
    one_line   stderr must be exactly one line
    max_s      wall-time bound (generous; the time is printed)
    pending    why a case may still fail today (work in passes/ not landed); informative
"""

import argparse
import json
import os
import shutil
import struct
import sys

try:  # --list must work without onnx
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # pragma: no cover
    onnx = None

CASES = []


def case(name, expect=None, node=None, status=2, one_line=True, args=(), max_s=20.0, pending=None):
    def deco(fn):
        CASES.append(dict(name=name, fn=fn, expect=expect, node=node, status=status, one_line=one_line,
                          args=list(args), max_s=max_s, pending=pending))
        return fn
    return deco


def ok(name, **kw):
    return case(name, status=0, one_line=False, **kw)


# ---------------------------------------------------------------- helpers

OPSET = 13
F = None  # TensorProto.FLOAT, set in main


def vi(name, shape, dt=None):
    return helper.make_tensor_value_info(name, F if dt is None else dt, shape)


def model(nodes, inputs, outputs, inits=(), opset=OPSET, ir=8, functions=(), extra_opsets=(), name="g"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=ops, functions=list(functions), producer_name="pipecc-tests")
    m.ir_version = ir
    return m


def relu_model():
    """x[2,3] -> Relu 'relu1' -> y"""
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu1")], [vi("x", [2, 3])], [vi("y", [2, 3])])


def matmul_model(w_tensor):
    """x[1,4] @ W[4,4] -> 'mm' -> y, W an initializer (given)."""
    return model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], [vi("x", [1, 4])], [vi("y", [1, 4])],
                 inits=[w_tensor])


def w_raw(name="W", shape=(4, 4)):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return numpy_helper.from_array(a, name)


def ext_tensor(name, shape, location, offset=None, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = F
    t.dims.extend(shape)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def save(m, d, name):
    p = os.path.join(d, name + ".onnx")
    with open(p, "wb") as f:
        f.write(m.SerializeToString() if not isinstance(m, (bytes, bytearray)) else m)
    return p


# raw protobuf encoding, for what onnx.helper refuses to write
def pb_varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def pb_key(num, wt):
    return pb_varint((num << 3) | wt)


def pb_ld(num, payload):
    return pb_key(num, 2) + pb_varint(len(payload)) + payload


def pb_vi(num, v):
    return pb_key(num, 0) + pb_varint(v)


# ModelProto fields: ir_version 1, opset_import 8, graph 7. GraphProto: node 1, name 2,
# initializer 5, input 11, output 12. ValueInfoProto: name 1, type 2. TypeProto:
# tensor_type 1, sequence_type 4; Sequence: elem_type 1.
def raw_model(graph_bytes, ir=8, opset=OPSET):
    return pb_vi(1, ir) + pb_ld(8, pb_ld(1, b"") + pb_vi(2, opset)) + pb_ld(7, graph_bytes)


# ---------------------------------------------------------------- not a model / wire level


@case("empty_file", r"empty file")
def _(d, n):
    return save(b"", d, n)


@case("missing_model", r"cannot open: No such file")
def _(d, n):
    return os.path.join(d, n + ".onnx")  # never written


@case("model_is_directory", r"not a regular file")
def _(d, n):
    p = os.path.join(d, n + ".onnx")
    os.makedirs(p)
    return p


@case("model_is_fifo", r"not a regular file", max_s=10)
def _(d, n):  # opening a FIFO for reading waits for a writer unless done with care
    p = os.path.join(d, n + ".onnx")
    os.mkfifo(p)
    return p


@case("not_a_model_text", r"not (a valid )?(an )?onnx model")
def _(d, n):
    return save(b"This is a text file, not an ONNX model.\n" * 3, d, n)


@case("not_a_model_png", r"not (a valid )?(an )?onnx model")
def _(d, n):
    return save(b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64)), d, n)


@case("not_a_model_zeros", r"not (a valid )?(an )?onnx model")
def _(d, n):
    return save(bytes(4096), d, n)


@case("not_a_model_valid_pb", r"not an onnx model \(no ir_version\)")
def _(d, n):  # a well-formed protobuf whose fields mean nothing to ModelProto
    return save(pb_ld(100, b"hello") + pb_vi(101, 5), d, n)


@case("truncated_half", r"truncated")
def _(d, n):
    b = matmul_model(w_raw()).SerializeToString()
    return save(b[: len(b) // 2], d, n)


@case("truncated_in_raw_data", r"truncated")
def _(d, n):
    b = matmul_model(w_raw("W", (4, 4))).SerializeToString()
    i = b.find(np.arange(16, dtype=np.float32).tobytes())
    assert i > 0
    return save(b[: i + 10], d, n)


@case("truncated_varint", r"truncated")
def _(d, n):
    return save(pb_vi(1, 8) + b"\x08\xff\xff", d, n)  # ir_version then a varint that never ends


@case("wrong_wire_type", r"wrong wire type")
def _(d, n):  # ModelProto.graph (a message) sent as a varint
    return save(pb_vi(1, 8) + pb_vi(7, 5), d, n)


@case("wrong_wire_type_nested", r"wrong wire type")
def _(d, n):  # NodeProto.input (string) sent as a 32-bit field, deep inside the graph
    node = pb_ld(1, b"x") + pb_key(1, 5) + b"\x01\x02\x03\x04" + pb_ld(2, b"y") + pb_ld(4, b"Relu")
    return save(raw_model(pb_ld(1, node)), d, n)


@case("group_wire_type", r"wire type")
def _(d, n):
    return save(pb_vi(1, 8) + pb_key(7, 3) + pb_key(7, 4), d, n)


@case("bad_field_number", r"field number")
def _(d, n):
    return save(pb_vi(1, 8) + pb_key(0, 0) + b"\x00", d, n)


@case("deep_nesting", r"nested too deeply")
def _(d, n):  # TypeProto.sequence_type.elem_type... 10,000 levels: a stack-overflow attempt
    t = pb_ld(1, pb_vi(1, 1))  # innermost: tensor_type{elem_type: FLOAT}
    for _ in range(10000):
        t = pb_ld(4, pb_ld(1, t))
    g = pb_ld(11, pb_ld(1, b"x") + pb_ld(2, t))
    return save(raw_model(g), d, n)


@case("two_graphs", r"more than one graph")
def _(d, n):
    b = relu_model().SerializeToString()
    g = relu_model().graph.SerializeToString()
    return save(b + pb_ld(7, g), d, n)


# ---------------------------------------------------------------- model header


@case("no_graph", r"no graph")
def _(d, n):
    return save(pb_vi(1, 8) + pb_ld(8, pb_ld(1, b"") + pb_vi(2, 13)), d, n)


@case("ir_version_too_new", r"IR version 99")
def _(d, n):
    m = relu_model()
    m.ir_version = 99
    return save(m, d, n)


@case("opset_too_old", r"opset 0 \(pipecc reads opsets 1 to 28\)")
def _(d, n):
    m = relu_model()
    m.opset_import[0].version = 0
    return save(m, d, n)


@case("opset_too_new", r"opset 29 \(pipecc reads opsets 1 to 28\)")
def _(d, n):
    m = relu_model()
    m.opset_import[0].version = 29
    return save(m, d, n)


# Opsets 22 to 28: a form that changed more than its types is read only where it keeps its
# earlier meaning (frontend/onnx_forms.c)
@case("form_space_to_depth_mode", r"SpaceToDepth-28 with mode='RCD' is not supported", node="s2d")
def _(d, n):
    nodes = [helper.make_node("SpaceToDepth", ["x"], ["y"], name="s2d", blocksize=2, mode="RCD")]
    return save(model(nodes, [vi("x", [1, 4, 2, 2])], [vi("y", [1, 16, 1, 1])], opset=28, ir=10), d, n)


@case("form_quantize_precision", r"QuantizeLinear-23 with precision=1 is not supported", node="q")
def _(d, n):
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["y"], name="q", precision=1)]
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3], TensorProto.UINT8)], inits=inits, opset=23, ir=10),
                d, n)


@case("cast_to_invalid_type", r"attribute 'to' is 40, not a valid data type", node="c")
def _(d, n):
    nodes = [helper.make_node("Cast", ["x"], ["y"], name="c", to=40)]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], opset=23, ir=10), d, n)


@case("bitcast_width", r"bitcast from float32 to int64: the widths differ", node="bc")
def _(d, n):
    nodes = [helper.make_node("BitCast", ["x"], ["y"], name="bc", to=TensorProto.INT64)]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3], TensorProto.INT64)], opset=26, ir=10), d, n)


@case("tensor_scatter_axis0", r"axis 0 is the batch axis", node="ts")
def _(d, n):
    nodes = [helper.make_node("TensorScatter", ["c", "u"], ["y"], name="ts", axis=0)]
    return save(model(nodes, [vi("c", [4, 3]), vi("u", [2, 3])], [vi("y", [4, 3])], opset=24, ir=10), d, n)


@case("linear_attention_no_decay", r"update_rule 'gated' needs the decay input", node="la")
def _(d, n):
    nodes = [helper.make_node("LinearAttention", ["q", "k", "v"], ["y"], name="la", update_rule="gated",
                              q_num_heads=2, kv_num_heads=2)]
    return save(model(nodes, [vi("q", [1, 3, 8]), vi("k", [1, 3, 8]), vi("v", [1, 3, 8])], [vi("y", [1, 3, 8])],
                      opset=27, ir=10), d, n)


@case("no_default_opset", r"no default-domain opset")
def _(d, n):
    m = relu_model()
    m.opset_import[0].domain = "com.example"
    return save(m, d, n)


# Opsets 1 to 6 are read in their opset 7 form (frontend/onnx_legacy.h); what that form
# cannot say is refused, one line naming the node.
@ok("ok_opset6_legacy")
def _(d, n):  # legacy broadcast with axis, Gemm broadcast, is_test=1 and absent, consumed_inputs
    w = numpy_helper.from_array(np.ones([4, 3, 3, 3], np.float32), "W")
    b = numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")
    bn = [numpy_helper.from_array(np.full([4], v, np.float32), k) for k, v in (("s", 1), ("o", 0), ("mu", 0), ("var", 1))]
    g = numpy_helper.from_array(np.ones([5, 16], np.float32), "G")
    c = numpy_helper.from_array(np.zeros([5], np.float32), "C")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv"),
             helper.make_node("Add", ["c", "b"], ["cb"], name="bias", broadcast=1, axis=1),
             helper.make_node("BatchNormalization", ["cb", "s", "o", "mu", "var"], ["bn"], name="bn", is_test=1),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Dropout", ["f"], ["fd"], name="drop"),
             helper.make_node("Gemm", ["fd", "G", "C"], ["gm"], name="fc", transB=1, broadcast=1),
             helper.make_node("Softmax", ["gm"], ["y"], name="sm")]
    inits = [w, b, g, c] + bn  # IR 3: initializers are graph inputs too
    ins = [vi("x", [2, 3, 4, 4])] + [vi(t.name, list(t.dims)) for t in inits]
    m = model(nodes, ins, [vi("y", [2, 5])], inits=inits, opset=6, ir=3)
    onnx.checker.check_model(m)
    return save(m, d, n)


def legacy_model(nodes, opset, inputs=None, inits=(), out_shape=(2, 3)):
    return model(nodes, inputs or [vi("x", [2, 3])], [vi("y", list(out_shape))], inits=inits, opset=opset, ir=3)


@case("legacy_bn_is_test0", r"is_test=0 \(the training mode of opset < 7\) is not supported", node="bn0")
def _(d, n):
    p = [numpy_helper.from_array(np.ones([3], np.float32), k) for k in ("s", "o", "mu", "var")]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "o", "mu", "var"], ["y"], name="bn0", is_test=0)]
    return save(legacy_model(nodes, 6, [vi("x", [2, 3, 2, 2])], p, (2, 3, 2, 2)), d, n)


@case("legacy_dropout_is_test0", r"is_test=0", node="drop0")
def _(d, n):
    return save(legacy_model([helper.make_node("Dropout", ["x"], ["y"], name="drop0", is_test=0)], 6), d, n)


@case("legacy_split1_no_axis", r"Split-1 without attribute 'axis'", node="split1")
def _(d, n):
    nodes = [helper.make_node("Split", ["x"], ["y", "z"], name="split1", split=[1, 1])]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [1, 3]), vi("z", [1, 3])], opset=1, ir=3), d, n)


@case("legacy_split1_input_not_const", r"Split-1 input 'split' must be a constant", node="split1")
def _(d, n):
    nodes = [helper.make_node("Split", ["x", "lens"], ["y", "z"], name="split1", axis=0)]
    return save(model(nodes, [vi("x", [2, 3]), vi("lens", [2])], [vi("y", [1, 3]), vi("z", [1, 3])], opset=1, ir=3), d, n)


@case("legacy_tile1_not_const", r"Tile-1 inputs 'tiles' and 'axis' must be constants", node="tile1")
def _(d, n):
    ax = numpy_helper.from_array(np.array([0], np.float32), "ax")
    nodes = [helper.make_node("Tile", ["x", "t", "ax"], ["y"], name="tile1")]
    return save(legacy_model(nodes, 5, [vi("x", [2, 3]), vi("t", [1])], [ax], (4, 3)), d, n)


@case("legacy_reshape1_no_shape", r"Reshape-1 needs attribute 'shape'", node="rs1")
def _(d, n):
    return save(legacy_model([helper.make_node("Reshape", ["x"], ["y"], name="rs1")], 4), d, n)


@case("legacy_cast1_unknown_type", r"attribute 'to' is 'FLOAT7', which names no data type", node="cast1")
def _(d, n):
    return save(legacy_model([helper.make_node("Cast", ["x"], ["y"], name="cast1", to="FLOAT7")], 1), d, n)


@case("legacy_lppool1_fractional_p", r"attribute 'p' is 2.5: pipecc supports whole-number p only", node="lp1")
def _(d, n):
    nodes = [helper.make_node("GlobalLpPool", ["x"], ["y"], name="lp1", p=2.5)]
    return save(legacy_model(nodes, 1, [vi("x", [1, 2, 3, 3])], (), (1, 2, 1, 1)), d, n)


@case("legacy_upsample1_no_scales", r"Upsample-1 needs float attributes 'height_scale' and 'width_scale'", node="up1")
def _(d, n):
    nodes = [helper.make_node("Upsample", ["x"], ["y"], name="up1", height_scale=2.0)]
    return save(legacy_model(nodes, 6, [vi("x", [1, 1, 2, 2])], (), (1, 1, 4, 2)), d, n)


# ---------------------------------------------------------------- graph structure


@case("cycle", r"cycle", node="cyc_a")
def _(d, n):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="cyc_a"),
             helper.make_node("Relu", ["a"], ["b"], name="cyc_b"),
             helper.make_node("Relu", ["b"], ["y"], name="after_cycle")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("self_loop", r"cycle", node="selfie")
def _(d, n):
    nodes = [helper.make_node("Add", ["x", "s"], ["s"], name="selfie"),
             helper.make_node("Relu", ["s"], ["y"], name="r")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("dangling_input", r"input 'ghost' is not produced", node="dangler")
def _(d, n):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="dangler")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("dangling_output", r"graph output 'nowhere' is not produced")
def _(d, n):
    m = relu_model()
    m.graph.output[0].name = "nowhere"
    return save(m, d, n)


@case("duplicate_producer", r"output 'y' is already produced", node="second")
def _(d, n):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="first"),
             helper.make_node("Neg", ["x"], ["y"], name="second")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("output_shadows_input", r"output 'x' is already produced", node="shadow")
def _(d, n):
    nodes = [helper.make_node("Relu", ["x"], ["x"], name="shadow"), helper.make_node("Relu", ["x"], ["y"], name="r")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("duplicate_initializer", r"'W' is defined twice")
def _(d, n):
    return save(matmul_model_two_w(), d, n)


def matmul_model_two_w():
    m = matmul_model(w_raw())
    m.graph.initializer.append(w_raw())
    return m


@case("duplicate_graph_input", r"graph input 'x' is defined twice")
def _(d, n):
    m = relu_model()
    m.graph.input.append(vi("x", [2, 3]))
    return save(m, d, n)


@case("no_outputs", r"no outputs")
def _(d, n):
    m = relu_model()
    del m.graph.output[:]
    return save(m, d, n)


@case("input_not_tensor", r"graph input 'x' is not a tensor, a sequence of tensors or an optional of one")
def _(d, n):
    m = relu_model()
    m.graph.input[0].CopyFrom(helper.make_value_info("x", helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(F, [2, 3]))))
    return save(m, d, n)


# sequences: lists of tensors known at compile time (passes/lower/sequence.c); a sequence
# input's length comes from --seq

@case("seq_not_sequence", r"--seq names 'x', which is not a sequence graph input", args=["--seq", "x=2"])
def _(d, n):
    return save(relu_model(), d, n)


@case("seq_into_tensor_op", r"input 0 'xs' is a sequence; Relu takes tensors", node="r", args=["--seq", "xs=2"])
def _(d, n):
    return save(model([helper.make_node("Relu", ["xs"], ["y"], name="r")],
                      [helper.make_tensor_sequence_value_info("xs", F, [2, 3])], [vi("y", [2, 3])]), d, n)


@case("seq_map_empty_input", r"input 1 is empty", node="m", args=["--seq", "xs=2"])
def _(d, n):  # an omitted input of SequenceMap's body
    body = helper.make_graph([helper.make_node("Add", ["a", "b"], ["o"])], "body", [vi("a", [2]), vi("b", [2])],
                             [vi("o", [2])])
    return save(model([helper.make_node("SequenceMap", ["xs", ""], ["ys"], body=body, name="m"),
                       helper.make_node("ConcatFromSequence", ["ys"], ["y"], axis=0, name="cat")],
                      [helper.make_tensor_sequence_value_info("xs", F, [2])], [vi("y", [4])]), d, n)


@ok("ok_seq_input", args=["--seq", "xs=3"])
def _(d, n):  # inputs xs.0 ... xs.2, concatenated
    return save(model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0, name="cat")],
                      [helper.make_tensor_sequence_value_info("xs", F, [2, 3])], [vi("y", [6, 3])]), d, n)


# optionals: known at compile time; an empty one (IR_VAL_NONE) only feeds optional ops

def opt_vi(name, shape):
    return helper.make_value_info(name, helper.make_optional_type_proto(helper.make_tensor_type_proto(F, shape)))


def opt_relu_model(nodes, out="y"):
    """graph input x [2, 3] (optional), the nodes given, output `out`"""
    return model(nodes, [opt_vi("x", [2, 3])], [vi(out, [2, 3])], opset=18)


@case("opt_none_not_optional", r"--none names 'x', which is not an optional graph input", args=["--none", "x"])
def _(d, n):
    return save(relu_model(), d, n)


@case("opt_get_empty", r"input 'e' is an optional without a value", node="get")
def _(d, n):
    return save(opt_relu_model([helper.make_node("Optional", [], ["e"], type=helper.make_tensor_type_proto(F, [2, 3])),
                                helper.make_node("OptionalGetElement", ["e"], ["y"], name="get")]), d, n)


@case("opt_none_into_tensor_op", r"input 0 'x' is an optional without a value; Relu takes tensors", node="r",
      args=["--none", "x"])
def _(d, n):
    return save(opt_relu_model([helper.make_node("Relu", ["x"], ["y"], name="r")]), d, n)


@case("opt_output_empty", r"graph output 'y' is an optional without a value", args=["--none", "x"])
def _(d, n):
    m = opt_relu_model([helper.make_node("Identity", ["x"], ["y"])])
    m.graph.output[0].CopyFrom(opt_vi("y", [2, 3]))
    return save(m, d, n)


@case("opt_type_attr_elsewhere", r"attribute 'type' holds a type, which Relu does not take", node="r")
def _(d, n):
    nd = helper.make_node("Relu", ["x"], ["y"], name="r")
    nd.attribute.append(helper.make_attribute("type", helper.make_tensor_type_proto(F, [2, 3])))
    return save(model([nd], [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("opt_carried_masked", r"carried value 0 is a sequence or an optional and the condition is computed at run time",
      node="lp")
def _(d, n):  # a loop that stops on the data (masked iterations) carrying an empty Optional along
    # (one that holds a tensor from the start is that tensor, which the masking keeps)
    body = helper.make_graph([helper.make_node("ReduceSum", ["v"], ["s"], keepdims=0),
                              helper.make_node("Less", ["s", "lim"], ["c1"]), helper.make_node("Relu", ["v"], ["v1"]),
                              helper.make_node("Identity", ["o"], ["o1"])],
                             "body", [vi("i", [], TensorProto.INT64), vi("c", [], TensorProto.BOOL), opt_vi("o", [2, 3]),
                                      vi("v", [2, 3])],
                             [vi("c1", [], TensorProto.BOOL), opt_vi("o1", [2, 3]), vi("v1", [2, 3])],
                             [helper.make_tensor("lim", F, [], [100.0])])
    return save(model([helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(F, [2, 3])),
                       helper.make_node("Loop", ["m", "", "none", "x"], ["oy", "y"], name="lp", body=body)],
                      [vi("x", [2, 3])], [vi("y", [2, 3])],
                      [helper.make_tensor("m", TensorProto.INT64, [], [4])], opset=18), d, n)


@ok("ok_opt_input")
def _(d, n):  # holds its value without --none
    return save(opt_relu_model([helper.make_node("OptionalGetElement", ["x"], ["v"]),
                                helper.make_node("Relu", ["v"], ["y"])]), d, n)


@case("arity", r"expects 1 input, has 2", node="relu2in")
def _(d, n):
    nodes = [helper.make_node("Relu", ["x", "x"], ["y"], name="relu2in")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("required_input_empty", r"required input 1 is empty", node="half_add")
def _(d, n):
    nodes = [helper.make_node("Add", ["x", ""], ["y"], name="half_add")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("newline_in_name", r"\\x0a", node=None)
def _(d, n):  # a name with a newline must not split the message
    nodes = [helper.make_node("Add", ["x", "gh\nost"], ["y"], name="evil\nname")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("huge_name_in_error", r"\.\.\.'.*is not produced")
def _(d, n):  # the 1 MB name must be cut in the message
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="N" * (1 << 20))]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("many_errors", r"too many errors, the rest are not shown", one_line=False)
def _(d, n):  # 5,000 dangling inputs: the first 20 are shown, then one line says so
    nodes = [helper.make_node("Add", ["x", "ghost%d" % i], ["t%d" % i], name="n%d" % i) for i in range(5000)]
    nodes.append(helper.make_node("Sum", ["t%d" % i for i in range(5000)], ["y"], name="sum"))
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


# ---------------------------------------------------------------- tensors and dims


@case("negative_dim_initializer", r"negative dimension -4")
def _(d, n):
    t = w_raw()
    del t.dims[:]
    t.dims.extend([4, -4])
    return save(matmul_model(t), d, n)


@case("negative_dim_input", r"graph input 'x' has a negative dimension -3")
def _(d, n):
    m = relu_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -3
    return save(m, d, n)


@case("huge_dims_overflow", r"overflows")
def _(d, n):
    t = w_raw()
    del t.dims[:]
    t.dims.extend([1 << 40, 1 << 40])
    return save(matmul_model(t), d, n)


@case("huge_bytes_overflow", r"byte size overflows")
def _(d, n):  # 2^62 elements fit int64, 2^62 * 4 bytes do not
    t = w_raw()
    del t.dims[:]
    t.dims.extend([1 << 31, 1 << 31])
    return save(matmul_model(t), d, n)


@case("huge_input_dims", r"overflows")
def _(d, n):
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")],
              [vi("x", [1 << 40, 1 << 40])], [vi("y", [1 << 40, 1 << 40])])
    return save(m, d, n)


@case("rank_too_big", r"rank 9")
def _(d, n):
    t = numpy_helper.from_array(np.zeros([1] * 9, np.float32), "W")
    return save(matmul_model(t), d, n)


@case("raw_data_size_mismatch", r"raw_data has 60 bytes, its shape and type need 64")
def _(d, n):
    t = w_raw()
    t.raw_data = t.raw_data[:60]
    return save(matmul_model(t), d, n)


@case("typed_data_count_mismatch", r"holds 3 values, its shape needs 16")
def _(d, n):
    t = helper.make_tensor("W", F, [4, 4], [1.0] * 16)
    del t.float_data[3:]
    return save(matmul_model(t), d, n)


@case("bad_data_type", r"data type 99")
def _(d, n):
    t = w_raw()
    t.data_type = 99
    return save(matmul_model(t), d, n)


@case("string_initializer", r"data type 8")
def _(d, n):
    t = helper.make_tensor("W", TensorProto.STRING, [1], [b"hi"])
    return save(matmul_model(t), d, n)


@case("sparse_initializer", r"sparse initializers are not supported")
def _(d, n):
    m = relu_model()
    vals = helper.make_tensor("sv", F, [1], [1.0])
    idx = helper.make_tensor("si", TensorProto.INT64, [1], [0])
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(vals, idx, [4]))
    return save(m, d, n)


# ---------------------------------------------------------------- external data


def ext_case(d, n, t, files=()):
    for rel, data in files:
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    return save(matmul_model(t), d, n)


W64 = bytes(64)


@case("ext_absolute_path", r"must be a relative path")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "/etc/passwd"))


@case("ext_dotdot", r"escapes the model's folder")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "sub/../../secret.bin"), [("sub/x.bin", W64)])


@case("ext_dotdot_plain", r"escapes the model's folder")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "../w.bin"))


@case("ext_symlink_out", r"resolves outside the model's folder")
def _(d, n):
    outside = os.path.join(os.path.dirname(d), "ext_symlink_out_target.bin")
    with open(outside, "wb") as f:
        f.write(W64)
    os.symlink(outside, os.path.join(d, "w.bin"))
    return ext_case(d, n, ext_tensor("W", [4, 4], "w.bin"))


@case("ext_symlink_dir_out", r"resolves outside the model's folder")
def _(d, n):
    outside = os.path.join(os.path.dirname(d), "ext_symlink_dir_out_target")
    os.makedirs(outside, exist_ok=True)
    with open(os.path.join(outside, "w.bin"), "wb") as f:
        f.write(W64)
    os.symlink(outside, os.path.join(d, "data"))
    return ext_case(d, n, ext_tensor("W", [4, 4], "data/w.bin"))


@case("ext_missing_file", r"external data file 'missing\.bin' not found")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "missing.bin"))


@case("ext_directory", r"not a readable regular file")
def _(d, n):
    os.makedirs(os.path.join(d, "adir"), exist_ok=True)
    return ext_case(d, n, ext_tensor("W", [4, 4], "adir"))


@case("ext_fifo", r"not a readable regular file", max_s=10)
def _(d, n):  # opening a FIFO for reading blocks forever unless done with care
    os.mkfifo(os.path.join(d, "w.fifo"))
    return ext_case(d, n, ext_tensor("W", [4, 4], "w.fifo"))


@case("ext_offset_past_end", r"runs past the end")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "w.bin", offset=1000), [("w.bin", W64)])


@case("ext_length_past_end", r"runs past the end")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "w.bin", offset=32, length=64), [("w.bin", W64)])


@case("ext_offset_huge", r"runs past the end")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "w.bin", offset=(1 << 64) - 8, length=64), [("w.bin", W64)])


@case("ext_length_mismatch", r"length 32 does not match its shape \(64 bytes\)")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "w.bin", length=32), [("w.bin", W64)])


@case("ext_offset_not_number", r"offset '-1' is not a number")
def _(d, n):
    return ext_case(d, n, ext_tensor("W", [4, 4], "w.bin", offset=-1), [("w.bin", W64)])


@case("ext_no_location", r"external data without a location")
def _(d, n):
    t = ext_tensor("W", [4, 4], "w.bin")
    del t.external_data[0]
    return ext_case(d, n, t, [("w.bin", W64)])


# ---------------------------------------------------------------- ops, domains, functions


@case("unsupported_ops",
      r"3 unsupported ops \(2 types\): .*NonMaxSuppression \(opset 13\): node 1 'nms'.*"
      r"Unique \(opset 13\): node 0 'uniq_a', node 2 'uniq_b'")
def _(d, n):  # all unsupported ops in one message, with node names and opset
    nodes = [helper.make_node("Unique", ["x"], ["u"], name="uniq_a"),
             helper.make_node("NonMaxSuppression", ["x", "x"], ["s"], name="nms"),
             helper.make_node("Unique", ["u"], ["y"], name="uniq_b")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("unsupported_many_types", r"unsupported ops \(40 types\).* more")
def _(d, n):  # a long list is cut, still one line
    nodes, prev = [], "x"
    for i in range(40):
        nodes.append(helper.make_node("FakeOp%02d" % i, [prev], ["t%d" % i], name="fake%d" % i))
        prev = "t%d" % i
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="last"))
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("unknown_domain", r"Frobnicate \(domain com\.example\.unknown, not in opset_import\): node 0 'frob'")
def _(d, n):
    nodes = [helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example.unknown")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("custom_domain_op", r"FusedMatMul \(domain com\.microsoft, opset 1\): node 0 'fmm'")
def _(d, n):
    nodes = [helper.make_node("FusedMatMul", ["x", "x"], ["y"], name="fmm", domain="com.microsoft")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], extra_opsets=[("com.microsoft", 1)]), d, n)


# If/Loop/Scan (passes/lower/control.c): what cannot be expanded, or is malformed

def if_model(then_nodes, else_nodes, else_branch=True):
    then_g = helper.make_graph(then_nodes, "then", [], [vi("t", [2, 3])])
    else_g = helper.make_graph(else_nodes, "else", [], [vi("e", [2, 3])])
    kw = dict(then_branch=then_g, else_branch=else_g) if else_branch else dict(then_branch=then_g)
    return model([helper.make_node("If", ["c"], ["y"], name="branch", **kw)],
                 [vi("c", [], TensorProto.BOOL), vi("x", [2, 3])], [vi("y", [2, 3])])


def loop_model(body_inputs, trip=3):
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c1"]), helper.make_node("Relu", ["v"], ["v1"])],
                             "body", body_inputs, [vi("c1", [], TensorProto.BOOL), vi("v1", [2, 3])])
    return model([helper.make_node("Loop", ["m", "", "x"], ["y"], name="lp", body=body)], [vi("x", [2, 3])],
                 [vi("y", [2, 3])], [helper.make_tensor("m", TensorProto.INT64, [], [trip])])


@case("body_unsupported_op", r"Unique \(opset 13\): node 0 'uq' \(in then_branch 'then' of If node 0 'branch'\)")
def _(d, n):  # an unsupported op inside a branch: named with the branch and its If
    return save(if_model([helper.make_node("Unique", ["x"], ["t"], name="uq")],
                         [helper.make_node("Neg", ["x"], ["e"])]), d, n)


@case("body_dangling_name", r"input 'q' is not produced by any node, graph input or initializer", node="branch")
def _(d, n):  # a name the body reads that no graph defines: reported on the If, which captures it
    return save(if_model([helper.make_node("Relu", ["x"], ["t"])], [helper.make_node("Neg", ["q"], ["e"])]), d, n)


@case("if_without_else", r"needs both then_branch and else_branch", node="branch")
def _(d, n):
    return save(if_model([helper.make_node("Relu", ["x"], ["t"])], [], else_branch=False), d, n)


@case("loop_body_map", r"body input 'v' is not a tensor, a sequence or an optional .*\(in body 'body' of Loop node 0 'lp'\)")
def _(d, n):
    return save(loop_model([vi("i", [], TensorProto.INT64), vi("c", [], TensorProto.BOOL),
                            helper.make_value_info("v", helper.make_map_type_proto(
                                TensorProto.INT64, helper.make_tensor_type_proto(F, None)))]), d, n)


@case("loop_body_arity", r"its body takes 2 inputs; the Loop gives 3", node="lp")
def _(d, n):  # the iteration number left out of the body's inputs
    return save(loop_model([vi("c", [], TensorProto.BOOL), vi("v", [2, 3])]), d, n)


@case("loop_unroll_budget", r"would unroll more than 100000 iterations \(trip count 1000000000", node="lp")
def _(d, n):  # unrolled until the limit, then one line (a fraction of a second)
    return save(loop_model([vi("i", [], TensorProto.INT64), vi("c", [], TensorProto.BOOL), vi("v", [2, 3])],
                           trip=10**9), d, n)


@case("loop_empty_carried", r"input 2 \(carried value 0\) is empty; it must name a value", node="lp")
def _(d, n):  # the carried value's initial value left out (found by the fuzzer: a name of NUL bytes reads as empty)
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c1"]), helper.make_node("Relu", ["v"], ["v1"])],
                             "body", [vi("i", [], TensorProto.INT64), vi("c", [], TensorProto.BOOL), vi("v", [2, 3])],
                             [vi("c1", [], TensorProto.BOOL), vi("v1", [2, 3])])
    return save(model([helper.make_node("Loop", ["m", "", ""], ["y"], name="lp", body=body)], [vi("x", [2, 3])],
                      [vi("y", [2, 3])], [helper.make_tensor("m", TensorProto.INT64, [], [3])]), d, n)


@case("scan_empty_state", r"input 0 \(state 0\) is empty; it must name a value", node="sc")
def _(d, n):  # Scan's state left out
    body = helper.make_graph([helper.make_node("Add", ["s", "e"], ["s1"]), helper.make_node("Identity", ["e"], ["o"])],
                             "body", [vi("s", [3]), vi("e", [3])], [vi("s1", [3]), vi("o", [3])])
    return save(model([helper.make_node("Scan", ["", "x"], ["y", "z"], name="sc", body=body, num_scan_inputs=1)],
                      [vi("x", [2, 3])], [vi("y", [3]), vi("z", [2, 3])]), d, n)


# --const NAME=V,...: a graph input compiled as a constant (passes/bind.c)

@case("const_not_input", r"--const names 'nope', which is not a graph input", args=["--const", "nope=1"])
def _(d, n):
    return save(relu_model(), d, n)


@case("const_count", r"--const x gives 2 values; graph input 'x' \[2, 3\] holds 6", args=["--const", "x=1,2"])
def _(d, n):
    return save(relu_model(), d, n)


@case("const_not_integer", r"--const n: 1.5 is not a value of type int64", args=["--const", "n=1.5"])
def _(d, n):
    return save(model([helper.make_node("Neg", ["n"], ["y"], name="neg")], [vi("n", [], TensorProto.INT64)],
                      [vi("y", [], TensorProto.INT64)]), d, n)


@ok("ok_const_picks_branch", args=["--const", "c=1"])
def _(d, n):  # branches of different shapes: refused with c given at run time, fine with c fixed
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", [2, 3])])
    else_g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e"], keepdims=1)], "else", [], [vi("e", [1, 1])])
    return save(model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)],
                      [vi("c", [], TensorProto.BOOL), vi("x", [2, 3])], [vi("y", None)]), d, n)


@case("function_recursive", r"function 'Loopy' calls itself")
def _(d, n):
    fn = helper.make_function("local", "Loopy", ["a"], ["b"],
                              [helper.make_node("Loopy", ["a"], ["t"], domain="local"),
                               helper.make_node("Loopy", ["t"], ["b"], domain="local")],
                              [helper.make_opsetid("", OPSET), helper.make_opsetid("local", 1)])
    nodes = [helper.make_node("Loopy", ["x"], ["y"], name="call", domain="local")]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], functions=[fn], extra_opsets=[("local", 1)])
    return save(m, d, n)


@case("function_exponential", r"inlin", max_s=20)
def _(d, n):  # F0 calls F1 four times, ... F12: 4^12 nodes if fully inlined (a billion laughs)
    fns = []
    for k in range(13):
        if k == 12:
            body = [helper.make_node("Relu", ["a"], ["b"])]
        else:
            body = [helper.make_node("F%d" % (k + 1), ["a" if i == 0 else "t%d" % (i - 1)],
                                     ["b" if i == 3 else "t%d" % i], domain="local") for i in range(4)]
        fns.append(helper.make_function("local", "F%d" % k, ["a"], ["b"], body,
                                        [helper.make_opsetid("", OPSET), helper.make_opsetid("local", 1)]))
    nodes = [helper.make_node("F0", ["x"], ["y"], name="bomb", domain="local")]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], functions=fns, extra_opsets=[("local", 1)])
    return save(m, d, n)


@case("attr_ref_outside_function", r"refers to 'alpha' outside a function", node="lr")
def _(d, n):
    nodes = [helper.make_node("LeakyRelu", ["x"], ["y"], name="lr")]
    a = nodes[0].attribute.add()
    a.name, a.ref_attr_name, a.type = "alpha", "alpha", onnx.AttributeProto.FLOAT
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


# ---------------------------------------------------------------- Constant nodes


@case("constant_no_attr", r"needs exactly one attribute", node="c0")
def _(d, n):
    nodes = [helper.make_node("Constant", [], ["c"], name="c0"), helper.make_node("Add", ["x", "c"], ["y"], name="a")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("constant_string", r"value_string.*not supported", node="cs")
def _(d, n):
    nodes = [helper.make_node("Constant", [], ["c"], name="cs", value_string="hello"),
             helper.make_node("Add", ["x", "c"], ["y"], name="a")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("constant_sparse", r"sparse_value.*not supported", node="csp")
def _(d, n):
    vals = helper.make_tensor("sv", F, [1], [1.0])
    idx = helper.make_tensor("si", TensorProto.INT64, [1], [0])
    nodes = [helper.make_node("Constant", [], ["c"], name="csp", sparse_value=helper.make_sparse_tensor(vals, idx, [3])),
             helper.make_node("Add", ["x", "c"], ["y"], name="a")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("constant_bad_tensor", r"raw_data has 3 bytes", node="cbad")
def _(d, n):
    t = helper.make_tensor("v", F, [3], [1.0, 2.0, 3.0])
    t.ClearField("float_data")
    t.raw_data = b"abc"
    nodes = [helper.make_node("Constant", [], ["c"], name="cbad", value=t),
             helper.make_node("Add", ["x", "c"], ["y"], name="a")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


# ---------------------------------------------------------------- attributes (checked by passes/)


@case("attr_bad_type", r"attribute 'alpha' has unsupported type", node="lr")
def _(d, n):
    nodes = [helper.make_node("LeakyRelu", ["x"], ["y"], name="lr")]
    a = nodes[0].attribute.add()
    a.name, a.type = "alpha", onnx.AttributeProto.SPARSE_TENSOR
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@case("attr_transpose_bad_perm", r"perm", node="tp", pending="shape pass (passes/)")
def _(d, n):
    nodes = [helper.make_node("Transpose", ["x"], ["y"], name="tp", perm=[0, 5])]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [3, 2])]), d, n)


@case("attr_wrong_kind", r"attribute 'perm' must be ints, it is floats", node="tpf")
def _(d, n):  # perm given as floats: taken for absent, it would silently mean "reverse"
    nodes = [helper.make_node("Transpose", ["x"], ["y"], name="tpf", perm=[1.0, 0.0])]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [3, 2])]), d, n)


@case("attr_int_for_ints", r"attribute 'strides' must be ints, it is an int", node="convs")
def _(d, n):
    w = numpy_helper.from_array(np.zeros([4, 3, 3, 3], np.float32), "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], name="convs", strides=2)]
    return save(model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 3, 3])], inits=[w]), d, n)


@case("attr_concat_axis", r"axis", node="cat", pending="shape pass (passes/)")
def _(d, n):
    nodes = [helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=7)]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [4, 3])]), d, n)


@case("attr_conv_kernel", r"kernel|weight|W|shape", node="conv", pending="shape pass (passes/)")
def _(d, n):
    w = numpy_helper.from_array(np.zeros([4, 3, 3, 3], np.float32), "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], name="conv", kernel_shape=[5, 5], strides=[1, 1])]
    return save(model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 4, 4])], inits=[w]), d, n)


@case("shape_matmul_mismatch", r"MatMul|dimension|shape|incompatib|mismatch", node="mmx",
      pending="shape pass (passes/)")
def _(d, n):
    w = numpy_helper.from_array(np.zeros([5, 2], np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"], name="mmx")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 2])], inits=[w]), d, n)


@case("shape_reshape_bad", r"reshape|element|shape", node="rs", pending="fold/shape pass (passes/)")
def _(d, n):
    s = numpy_helper.from_array(np.array([4, 4], np.int64), "s")
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [4, 4])], inits=[s]), d, n)


# ---------------------------------------------------------------- micro-batches (passes/batch.h)
# Compiled for 2 stages and 2 micro-batches of the batch of 4 (run_case.py plans into a
# temporary folder when the args hold --plan-only): dim 0 of x is split in 2.

MB = ("-g", "2", "-m", "2", "--plan-only")
BATCH_FIX = r"-m 1"


def batch_model(nodes, out_shape, inits=(), opset=OPSET, ir=8):
    return model(nodes, [vi("x", [4, 6])], [vi("y", out_shape)], inits=inits, opset=opset, ir=ir)


@case("batch_softmax_axis0", BATCH_FIX + r".*", node="sm", args=MB)
def _(d, n):  # softmax over the samples: each micro-batch would normalise over half of them
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)]
    return save(batch_model(nodes, [4, 6]), d, n)


@case("batch_cumsum_axis0", r"sums along the batch axis.*-m 1", node="cs", args=MB)
def _(d, n):
    a = numpy_helper.from_array(np.array(0, np.int64), "a")
    nodes = [helper.make_node("CumSum", ["x", "a"], ["y"], name="cs")]
    return save(batch_model(nodes, [4, 6], inits=[a]), d, n)


@case("batch_cumprod_axis0", r"multiplies along the batch axis.*-m 1", node="cp", args=MB)
def _(d, n):
    a = numpy_helper.from_array(np.array(0, np.int64), "a")
    nodes = [helper.make_node("CumProd", ["x", "a"], ["y"], name="cp")]
    return save(batch_model(nodes, [4, 6], inits=[a], opset=26, ir=10), d, n)


@case("batch_lpnorm_axis0", r"normalises along axis 0, which carries the batch.*-m 1 \(the batch", node="lp", args=MB)
def _(d, n):
    nodes = [helper.make_node("LpNormalization", ["x"], ["y"], name="lp", axis=0)]
    return save(batch_model(nodes, [4, 6]), d, n)


@case("batch_concat_axis0", r"concatenates along the batch axis.*-m 1", node="cat", args=MB)
def _(d, n):  # [x; 2x]: the micro-batches' outputs would interleave
    nodes = [helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=0)]
    return save(batch_model(nodes, [8, 6]), d, n)


@case("batch_reduce_axis0", r"does not change with the batch size.*-m 1", node="mean", args=MB)
def _(d, n):  # x - mean over the batch
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[0], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["y"], name="sub")]
    return save(batch_model(nodes, [4, 6]), d, n)


@case("batch_reverse_slice", r"slices the batch axis.*-m 1", node="rev", args=MB)
def _(d, n):  # x[::-1]: same shapes, samples in another order
    c = [numpy_helper.from_array(np.array(v, np.int64), k)
         for k, v in (("st", [-1]), ("en", [-(1 << 62)]), ("ax", [0]), ("sp", [-1]))]
    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="rev")]
    return save(batch_model(nodes, [4, 6], inits=c), d, n)


@case("batch_output_axis1", r"graph output 'y'.*another axis.*-m 1", args=MB)
def _(d, n):  # the batch on axis 1 of the output: micro-batches are joined on axis 0
    nodes = [helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[1, 0])]
    return save(batch_model(nodes, [6, 4]), d, n)


@case("scalar_input", r"graph input 'b' is a scalar: training splits.*rank >= 1",
      args=("-g", "1", "--train", "--loss", "mse", "--plan-only"))
def _(d, n):  # x * b with b a rank-0 input: training splits every graph input along dim 0
    nodes = [helper.make_node("Mul", ["x", "b"], ["y"], name="mul")]
    return save(model(nodes, [vi("x", [4, 6]), vi("b", [])], [vi("y", [4, 6])]), d, n)


@case("dequantize_scale_shape", r"scale of shape \[3\] must be a scalar or 1-D of x's dim 1 \(4\)", node="dq")
def _(d, n):  # per-axis scale of the wrong length
    nodes = [helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dq", axis=1)]
    inits = [numpy_helper.from_array(np.ones(3, np.float32), "s")]
    return save(model(nodes, [vi("x", [2, 4], TensorProto.INT8)], [vi("y", [2, 4])], inits, opset=13), d, n)


@case("quantize_to_float", r"quantizing to float32 is not supported \(int8, uint8, int16, uint16, int4, uint4, int2, uint2, float8, "
      r"float4e2m1, float6\)", node="q")
def _(d, n):  # output_dtype FLOAT (opset 21): not a quantized type
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["y"], name="q", output_dtype=TensorProto.FLOAT)]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s")]
    return save(model(nodes, [vi("x", [2, 4])], [vi("y", [2, 4])], inits, opset=21), d, n)


@case("train_float16_output", r"--loss mse: the model has no float32 or float64 output.*float16/bfloat16/float8 outputs.*"
      r"export the float32 model", args=("-g", "1", "--train", "--loss", "mse", "--plan-only"))
def _(d, n):  # float16 inference compiles (computed in float); training it would need loss scaling
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu1")]
    return save(model(nodes, [vi("x", [4, 6], TensorProto.FLOAT16)], [vi("y", [4, 6], TensorProto.FLOAT16)]), d, n)


@ok("float16_inference", args=("-g", "2", "--plan-only"))
def _(d, n):  # the same model for inference
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu1")]
    return save(model(nodes, [vi("x", [4, 6], TensorProto.FLOAT16)], [vi("y", [4, 6], TensorProto.FLOAT16)]), d, n)


@ok("scalar_input_inference", args=("-g", "2", "-m", "2", "--plan-only"))
def _(d, n):  # inference: the same b for every micro-batch
    nodes = [helper.make_node("Mul", ["x", "b"], ["y"], name="mul")]
    return save(model(nodes, [vi("x", [4, 6]), vi("b", [])], [vi("y", [4, 6])]), d, n)


@case("scalar_output", r"graph output 'z' is a scalar.*along dim 0.*compile with -m 1", args=MB)
def _(d, n):  # the sum of everything: micro-batches' outputs are joined along dim 0
    nodes = [helper.make_node("ReduceSum", ["x"], ["z"], name="sum", keepdims=0)]
    return save(model(nodes, [vi("x", [4, 6])], [vi("z", [])]), d, n)


@ok("scalar_output_one_microbatch", args=("-g", "1", "-m", "1", "--plan-only"))
def _(d, n):  # one value per run
    nodes = [helper.make_node("ReduceSum", ["x"], ["z"], name="sum", keepdims=0)]
    return save(model(nodes, [vi("x", [4, 6])], [vi("z", [])]), d, n)


@case("batch_reshape_fixed", r"no axis of its target shape \[3, 8\].*whole batch passes here.*-m 1", node="rs",
      args=MB)
def _(d, n):  # [4, 6] -> [3, 8] mixes the samples: no axis of the target can hold a micro-batch
    s = numpy_helper.from_array(np.array([3, 8], np.int64), "s")
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    return save(batch_model(nodes, [3, 8], inits=[s]), d, n)


@case("batch_rnn_seq_first", r"recurrence along the batch axis.*-m 1", node="rec", args=MB)
def _(d, n):  # X [seq 4, batch 2, 3] (layout 0): splitting dim 0 would cut the sequence
    w = numpy_helper.from_array(np.full([1, 5, 3], 0.1, np.float32), "W")
    r = numpy_helper.from_array(np.full([1, 5, 5], 0.1, np.float32), "R")
    nodes = [helper.make_node("RNN", ["x", "W", "R"], ["y"], name="rec", hidden_size=5)]
    return save(model(nodes, [vi("x", [4, 2, 3])], [vi("y", [4, 1, 2, 5])], inits=[w, r], opset=14), d, n)


def rnn_state_model(h0):  # X [batch 4, seq 3, 3] (layout 1) with a constant initial state [4, 1, 5]
    w = numpy_helper.from_array(np.full([1, 5, 3], 0.1, np.float32), "W")
    r = numpy_helper.from_array(np.full([1, 5, 5], 0.1, np.float32), "R")
    h = numpy_helper.from_array(h0.astype(np.float32), "h0")
    nodes = [helper.make_node("RNN", ["x", "W", "R", "", "", "h0"], ["y"], name="rec", hidden_size=5, layout=1)]
    return model(nodes, [vi("x", [4, 3, 3])], [vi("y", [4, 3, 1, 5])], inits=[w, r, h], opset=14)


@case("batch_rnn_state_per_sample", r"initial_h.*whole batch passes here.*-m 1", node="rec", args=MB)
def _(d, n):  # a different initial state per sample, fixed for the batch of 4: no micro-batch can use it
    return save(rnn_state_model(np.arange(20).reshape(4, 1, 5) / 20.0), d, n)


@ok("ok_batch_rnn_state_shared", args=MB)
def _(d, n):  # the same state for every sample (as PyTorch exports zeros): cut to the micro-batch
    return save(rnn_state_model(np.ones([4, 1, 5]) * 0.5), d, n)


@case("batch_const_per_sample", r"whole batch passes here.*-m 1", node="add", args=MB)
def _(d, n):  # x + c with c [4, 6] holding a different row per sample: no micro-batch can use it
    c = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(4, 6), "c")
    nodes = [helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return save(batch_model(nodes, [4, 6], inits=[c]), d, n)


@ok("ok_batch_const_shared", args=MB)
def _(d, n):  # a token expanded for the batch of 4 at export, concatenated before every sample
    c = numpy_helper.from_array(np.tile(np.arange(6, dtype=np.float32), (4, 1, 1)), "tok")
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["x3"], name="unsq"),
             helper.make_node("Concat", ["tok", "x3"], ["y"], name="cat", axis=1)]
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax")
    return save(batch_model(nodes, [4, 2, 6], inits=[c, ax]), d, n)


@ok("ok_batch_expand_fixed", args=MB)
def _(d, n):  # x[:, None, :].expand(4, 3, 6) traced with the batch as a number: expanded per micro-batch
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax")
    s = numpy_helper.from_array(np.array([4, 3, 6], np.int64), "s")
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["x3"], name="unsq"),
             helper.make_node("Expand", ["x3", "s"], ["y"], name="exp")]
    return save(batch_model(nodes, [4, 3, 6], inits=[ax, s]), d, n)


@ok("ok_batch_reshape_fixed", args=MB)
def _(d, n):  # [4, -1] and [4, 3, 2] written for the whole batch: rewritten for a micro-batch
    s1 = numpy_helper.from_array(np.array([4, -1], np.int64), "s1")
    s2 = numpy_helper.from_array(np.array([4, 3, 2], np.int64), "s2")
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["t"], name="rs1"),
             helper.make_node("Reshape", ["t", "s2"], ["y"], name="rs2")]
    return save(batch_model(nodes, [4, 3, 2], inits=[s1, s2]), d, n)


# With no -m, pipecc picks the micro-batch count; a model that does not split into it is
# compiled for one micro-batch, with a note that says why (explicit -m: the errors above).
DEFAULT_MB = ("-g", "2", "--plan-only")


@ok("ok_default_mb_softmax_axis0", expect=r"note: the default 4 micro-batches would not add up.*-m 1", args=DEFAULT_MB)
def _(d, n):
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)]
    return save(batch_model(nodes, [4, 6]), d, n)


@ok("ok_default_mb_reshape_fixed", expect=r"note: the model does not compile at a micro-batch.*-m 1",
    args=DEFAULT_MB)
def _(d, n):  # [4, 6] -> [3, 8]: no micro-batch has 24 elements
    s = numpy_helper.from_array(np.array([3, 8], np.int64), "s")
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    return save(batch_model(nodes, [3, 8], inits=[s]), d, n)


@ok("ok_default_mb_scalar_output", expect=r"note: graph output 'z' is a scalar.*-m 1", args=DEFAULT_MB)
def _(d, n):
    nodes = [helper.make_node("ReduceSum", ["x"], ["z"], name="sum", keepdims=0)]
    return save(model(nodes, [vi("x", [4, 6])], [vi("z", None)]), d, n)


# cuda searches the counts that divide the batch (up to 4*g) and keeps the one the cost
# model predicts fastest: a count that does not compile is reported and left out, and
# where only 1 compiles the note is the cpu target's
DEFAULT_MB_CUDA = DEFAULT_MB + ("--target", "cuda")


@ok("ok_default_mb_cuda_search", expect=r"pipecc: 4 micro-batches \(predicted [0-9.]+ ms a batch; 2: [0-9.]+, "
                                        r"1: no plan \(-m 1 shows why\); -m M sets it\)",
    args=DEFAULT_MB_CUDA + ("--memory-limit", "2M"))
def _(d, n):  # 4 MB in, 4 MB out: one micro-batch of 4 samples does not fit in 2 MB a device
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="r1"), helper.make_node("Sigmoid", ["t"], ["y"], name="s1")]
    return save(model(nodes, [vi("x", [4, 1024, 256])], [vi("y", [4, 1024, 256])]), d, n)


@ok("ok_default_mb_cuda_scalar_output", expect=r"note: graph output 'z' is a scalar.*-m 1", args=DEFAULT_MB_CUDA)
def _(d, n):
    nodes = [helper.make_node("ReduceSum", ["x"], ["z"], name="sum", keepdims=0)]
    return save(model(nodes, [vi("x", [4, 6])], [vi("z", None)]), d, n)


@ok("ok_default_mb_cuda_softmax_axis0", expect=r"note: the default 4 micro-batches would not add up.*-m 1",
    args=DEFAULT_MB_CUDA)
def _(d, n):
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)]
    return save(batch_model(nodes, [4, 6]), d, n)


@ok("ok_outputs_all_constant", args=DEFAULT_MB)
def _(d, n):  # Shape of a static input folds away: no node is left, one Identity copies it out
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape")]
    return save(model(nodes, [vi("x", [4, 6])], [vi("s", [2], TensorProto.INT64)]), d, n)


# ---------------------------------------------------------------- positive cases: must succeed


@ok("ok_long_node_name", max_s=10)
def _(d, n):  # a 1 MB node name is not an error
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="L" * (1 << 20))]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


@ok("ok_chain_100k", max_s=10)
def _(d, n):  # 100,000 nodes: must finish in well under 2 s (bound 10 s against CI noise)
    c = numpy_helper.from_array(np.ones([1, 8], np.float32), "c")
    nodes, prev = [], "x"
    N = 100000
    for i in range(N):
        out = "y" if i == N - 1 else "t%d" % i
        if i % 2 == 0:
            nodes.append(helper.make_node("Relu", [prev], [out], name="relu%d" % i))
        else:
            nodes.append(helper.make_node("Add", [prev, "c"], [out], name="add%d" % i))
        prev = out
    return save(model(nodes, [vi("x", [1, 8])], [vi("y", [1, 8])], inits=[c]), d, n)


@ok("ok_wide_fan_in", max_s=10)
def _(d, n):  # one Sum over 50,000 node outputs: the graph passes must stay linear
    N = 50000
    nodes = [helper.make_node("Relu", ["x"], ["r%d" % i], name="relu%d" % i) for i in range(N)]
    nodes.append(helper.make_node("Sum", ["r%d" % i for i in range(N)], ["y"], name="sum"))
    return save(model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])]), d, n)


@ok("ok_many_name_clashes", max_s=10)
def _(d, n):  # 20,000 unnamed ConstantOfShape nodes: their value tensors all want the name '/value'
    shp = numpy_helper.from_array(np.array([1, 4], np.int64), "shp")
    nodes, prev = [], "x"
    for i in range(20000):
        nodes.append(helper.make_node("ConstantOfShape", ["shp"], ["k%d" % i],
                                      value=helper.make_tensor("value", F, [1], [1.0])))
        nodes.append(helper.make_node("Add", [prev, "k%d" % i], ["y" if i == 19999 else "a%d" % i]))
        prev = "a%d" % i
    return save(model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], inits=[shp]), d, n)


@ok("ok_external_data_subfolder")
def _(d, n):
    os.makedirs(os.path.join(d, "weights"), exist_ok=True)
    a = np.arange(16, dtype=np.float32)
    with open(os.path.join(d, "weights", "w.bin"), "wb") as f:
        f.write(b"\0" * 16 + a.tobytes() + b"\0" * 8)  # with an offset and trailing bytes
    b = np.ones([4], np.float32)
    with open(os.path.join(d, "weights", "b.bin"), "wb") as f:
        f.write(b.tobytes())
    t = ext_tensor("W", [4, 4], "weights/w.bin", offset=16, length=64)
    tb = ext_tensor("B", [4], "weights/./b.bin")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"), helper.make_node("Add", ["t", "B"], ["y"], name="add")]
    return save(model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], inits=[t, tb]), d, n)


@ok("ok_local_function")
def _(d, n):  # Swish(x) = x * Sigmoid(x * beta), beta an attribute reference; inlined twice
    beta = helper.make_node("Constant", [], ["beta"], value_float=1.0)
    fn = helper.make_function("local", "Swish", ["a"], ["b"],
                              [helper.make_node("Constant", [], ["k"], value_float=1.0),
                               helper.make_node("Mul", ["a", "k"], ["ak"]),
                               helper.make_node("Sigmoid", ["ak"], ["s"]),
                               helper.make_node("Mul", ["a", "s"], ["b"])],
                              [helper.make_opsetid("", OPSET)])
    nodes = [beta,
             helper.make_node("Swish", ["x"], ["h"], name="swish1", domain="local"),
             helper.make_node("Swish", ["h"], ["y"], name="swish2", domain="local")]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], functions=[fn], extra_opsets=[("local", 1)])
    return save(m, d, n)


@ok("ok_constants_all_kinds")
def _(d, n):
    T = TensorProto
    raw = numpy_helper.from_array(np.full([2, 3], 0.5, np.float32), "raw")
    typed = helper.make_tensor("typed", T.FLOAT, [2, 3], [1, 2, 3, 4, 5, 6])
    i64 = helper.make_tensor("i64", T.INT64, [2], [3, 2])
    f16 = helper.make_tensor("f16", T.FLOAT16, [3], np.array([1, 2, 3], np.float16).view(np.uint16).tolist())
    bl = helper.make_tensor("bl", T.BOOL, [2, 3], [1, 0, 1, 0, 1, 0])
    i8 = helper.make_tensor("i8", T.INT8, [3], [-1, 2, -3])
    dbl = helper.make_tensor("dbl", T.DOUBLE, [1], [2.0])
    nodes = [
        helper.make_node("Constant", [], ["c_raw"], name="c_raw", value=raw),
        helper.make_node("Constant", [], ["c_typed"], name="c_typed", value=typed),
        helper.make_node("Constant", [], ["c_i64"], name="c_i64", value=i64),
        helper.make_node("Constant", [], ["c_f16"], name="c_f16", value=f16),
        helper.make_node("Constant", [], ["c_bool"], name="c_bool", value=bl),
        helper.make_node("Constant", [], ["c_i8"], name="c_i8", value=i8),
        helper.make_node("Constant", [], ["c_dbl"], name="c_dbl", value=dbl),
        helper.make_node("Constant", [], ["c_float"], name="c_float", value_float=2.0),
        helper.make_node("Constant", [], ["c_floats"], name="c_floats", value_floats=[1.0, 2.0, 3.0]),
        helper.make_node("Constant", [], ["c_int"], name="c_int", value_int=1),
        helper.make_node("Constant", [], ["c_ints"], name="c_ints", value_ints=[3, 2]),
        helper.make_node("Add", ["x", "c_raw"], ["a1"], name="a1"),
        helper.make_node("Mul", ["a1", "c_typed"], ["a2"], name="a2"),
        helper.make_node("Add", ["a2", "c_float"], ["a3"], name="a3"),
        helper.make_node("Add", ["a3", "c_floats"], ["a4"], name="a4"),
        helper.make_node("Cast", ["c_f16"], ["f16f"], name="castf16", to=T.FLOAT),
        helper.make_node("Add", ["a4", "f16f"], ["a5"], name="a5"),
        helper.make_node("Cast", ["c_i8"], ["i8f"], name="casti8", to=T.FLOAT),
        helper.make_node("Add", ["a5", "i8f"], ["a6"], name="a6"),
        helper.make_node("Cast", ["c_dbl"], ["dblf"], name="castdbl", to=T.FLOAT),
        helper.make_node("Add", ["a6", "dblf"], ["a7"], name="a7"),
        helper.make_node("Where", ["c_bool", "a7", "x"], ["a8"], name="where"),
        helper.make_node("Reshape", ["a8", "c_ints"], ["y"], name="reshape"),
        helper.make_node("Add", ["c_i64", "c_int"], ["z"], name="int_add"),
    ]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [3, 2]), vi("z", [2], T.INT64)])
    return save(m, d, n)


@ok("ok_ir3_initializers_as_inputs")
def _(d, n):
    W = numpy_helper.from_array(np.ones([4, 3], np.float32), "W")
    B = numpy_helper.from_array(np.zeros([3], np.float32), "B")
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["y"], name="fc")]
    m = model(nodes, [vi("x", [2, 4]), vi("W", [4, 3]), vi("B", [3])], [vi("y", [2, 3])], inits=[W, B], opset=8, ir=3)
    return save(m, d, n)


@ok("ok_unnamed_nodes")
def _(d, n):  # nodes without names are fine
    nodes = [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["y"])]
    return save(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])]), d, n)


# ---------------------------------------------------------------- main


CHECKED_OK = {"ok_long_node_name", "ok_wide_fan_in", "ok_many_name_clashes", "ok_external_data_subfolder", "ok_local_function", "ok_constants_all_kinds",
              "ok_ir3_initializers_as_inputs", "ok_unnamed_nodes"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="corpus folder (recreated)")
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    ap.add_argument("--only", help="comma-separated case names")
    args = ap.parse_args()
    if args.list:
        for c in CASES:
            print(c["name"])
        return 0
    if not args.out:
        ap.error("--out or --list")
    if onnx is None:
        sys.exit("make_corpus.py: needs onnx and numpy (/usr/bin/python3)")
    global F
    F = TensorProto.FLOAT
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    only = set(args.only.split(",")) if args.only else None
    manifest = {}
    for c in CASES:
        if only and c["name"] not in only:
            continue
        d = os.path.join(args.out, c["name"])
        os.makedirs(d)
        p = c["fn"](d, c["name"])
        if c["name"] in CHECKED_OK:  # the positive models must be valid ONNX
            onnx.checker.check_model(p)
        manifest[c["name"]] = dict(model=os.path.relpath(p, args.out), args=c["args"], status=c["status"],
                                   expect=c["expect"], node=c["node"], one_line=c["one_line"], max_s=c["max_s"],
                                   pending=c["pending"])
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print("make_corpus.py: %d cases in %s" % (len(manifest), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
