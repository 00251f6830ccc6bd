"""float32 ONNX models written in float16 or bfloat16, and their per-node-rounding twins.

narrow(model, dt): the same model with every float32 tensor in dt (dt: TensorProto.FLOAT16
or BFLOAT16): initializers, graph inputs and outputs, Constant values, Cast targets
(value_info dropped). What `model.half()` before torch.onnx.export gives, for ops that
PyTorch cannot run in float16 on a CPU.

rounded(model, dt): the float32 model that computes what pipecc computes for narrow(model,
dt) (passes/opt/widen.c): initializers rounded to dt, and every float32 node output (and
graph input) rounded to dt and back (Cast, Cast) before anything reads it. onnxruntime runs
it in float32, so it is a reference for pipecc's rounding that onnxruntime's own float16
kernels (some compute in float16, some skip roundings between nodes) are not.

to_bits / from_bits: bfloat16 arrays as uint16 bit patterns (numpy has no bfloat16), as
onnx.numpy_helper and pipecc's runtime hold them."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def to_bits(x, dt):
    """float32 array -> dt (float16 array, or bfloat16 bit patterns as uint16), rounded to
    nearest even."""
    x = np.asarray(x, np.float32)
    if dt == TensorProto.FLOAT16:
        return x.astype(np.float16)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def from_bits(x, dt):
    if dt == TensorProto.FLOAT16:
        return np.asarray(x).astype(np.float32)
    return (np.asarray(x, np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(x, dt):
    return from_bits(to_bits(x, dt), dt)


def _tensor(arr, name, dt):
    if dt == TensorProto.FLOAT16:
        return numpy_helper.from_array(arr.astype(np.float16), name)
    t = helper.make_tensor(name, TensorProto.BFLOAT16, arr.shape, to_bits(arr, dt).tobytes(), raw=True)
    return t


def narrow(model, dt):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(_tensor(numpy_helper.to_array(t), t.name, dt))
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = dt
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(_tensor(numpy_helper.to_array(a.t), a.t.name, dt))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = dt
    del g.value_info[:]
    return m


def rounded(model, dt):
    m = onnx.shape_inference.infer_shapes(model)
    g = m.graph
    is_float = {v.name for v in list(g.value_info) + list(g.input) + list(g.output)
                if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(round_to(numpy_helper.to_array(t), dt), t.name))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(round_to(numpy_helper.to_array(a.t), dt), a.t.name))
    inits = {t.name for t in g.initializer}
    outs = {v.name for v in g.output}
    ins = {v.name for v in g.input if v.name in is_float and v.name not in inits}
    # a float value v is made as raw(v) and read as v rounded, named v when v is a graph
    # output (the rounded one is the output), else v__r
    raw = lambda v: v + "__raw" if v in outs and v not in ins else v  # noqa: E731
    rnd = lambda v: v if v in outs and v not in ins else v + "__r"  # noqa: E731
    def rounding(v):
        return [helper.make_node("Cast", [raw(v)], [v + "__n"], to=dt),
                helper.make_node("Cast", [v + "__n"], [rnd(v)], to=TensorProto.FLOAT)]
    made = set(ins) | {o for n in g.node for o in n.output if o in is_float}
    nodes = [c for v in sorted(ins) for c in rounding(v)]
    for n in g.node:
        n2 = onnx.NodeProto()
        n2.CopyFrom(n)
        for k, x in enumerate(n2.input):
            if x in made:
                n2.input[k] = rnd(x)
        for k, o in enumerate(n2.output):
            if o in made:
                n2.output[k] = raw(o)
        nodes.append(n2)
        nodes += [c for o in n.output if o in made for c in rounding(o)]
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return m
