#!/usr/bin/python3
"""Tests of pipecc's fold pass against onnxruntime.

What it does
    Builds small ONNX models with onnx.helper (one per case below: shape arithmetic
    chains, every folded op on int64/int32/float32/float64/bool, Slice with negative
    steps, integer division and Mod by negatives, Cast edge cases, ConstantOfShape,
    Range, Where, Identity chains ending at graph outputs, Dropout with its mask used,
    and cases that must NOT fold), then for each model:
      1. pipecc MODEL --emit=ir-json -d batch=2: the live nodes left must be exactly the
         expected op types (folded nodes are gone), and every graph output's dtype and
         shape must equal onnxruntime's;
      2. fold_dump MODEL -d batch=2 (bind+fold+shape, then every graph output with its
         values if it is a constant): the outputs listed as folded must be constants,
         and every constant output must equal onnxruntime's output bit for bit
         (NaN matches NaN, and the sign of zero must agree);
      3. where a case expects a warning, pipecc's stderr must contain it.
    onnxruntime runs on CPU with graph optimisations off (its raw kernels are the oracle).

How to run
    ctest --test-dir build -R fold          (registered by tests/fold/CMakeLists.txt)
    /usr/bin/python3 tests/fold/test_fold.py --pipecc build/pipecc \\
        --fold-dump build/tests/fold/fold_dump --work /tmp/foldwork [-k NAME]
Exit status 0 when every case passes, 1 otherwise (each failure is printed).
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

I64, I32, F32, F64, BOOL = TP.INT64, TP.INT32, TP.FLOAT, TP.DOUBLE, TP.BOOL
NP = {I64: np.int64, I32: np.int32, F32: np.float32, F64: np.float64, BOOL: np.bool_,
      TP.INT8: np.int8, TP.UINT8: np.uint8, TP.INT16: np.int16, TP.UINT16: np.uint16,
      TP.UINT32: np.uint32, TP.FLOAT16: np.float16}
INT64_MAX, INT64_MIN = 2**63 - 1, -2**63


def C(name, arr, dtype):
    return nh.from_array(np.array(arr, dtype=NP[dtype]), name)


def N(op, ins, outs, **attrs):
    return h.make_node(op, ins, outs, **attrs)


def vi(name, dtype, shape=None):
    return h.make_tensor_value_info(name, dtype, shape)


class Case:
    def __init__(self, name, nodes, inputs, outputs, inits=(), opset=13, remaining=(),
                 folded=None, ort=True, warn=None, training=False):
        """outputs: [(name, dtype)]; remaining: op types that stay after fold (a
        multiset); folded: outputs that must be constants (default: all outputs that
        no remaining node produces, i.e. all when remaining is empty)."""
        self.name = name
        g = h.make_graph(nodes, name, inputs, [vi(n, t) for n, t in outputs],
                         initializer=list(inits))
        self.model = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
        self.model.ir_version = 8
        self.remaining = sorted(remaining)
        prod = {o for n in nodes for o in n.output if n.op_type in remaining}
        self.folded = set(folded) if folded is not None else \
            {n for n, _ in outputs if n not in prod}
        self.ort = ort and not training
        self.warn = warn
        self.training = training  # fold_dump --training; nodes checked on its output


X3 = vi("X", F32, ["batch", 3, 4])
X2 = vi("X", F32, ["batch", 6])


def cases():
    cs = []
    # ---- shape arithmetic chains (PyTorch export style) ----
    cs.append(Case("shape_chain_13", [
        N("Shape", ["X"], ["s"]),
        N("Gather", ["s", "i0"], ["b"], axis=0),
        N("Unsqueeze", ["b", "ax0"], ["bu"]),
        N("Concat", ["bu", "m1"], ["shp"], axis=0),
        N("Reshape", ["X", "shp"], ["Y"]),
        N("Gather", ["s", "i12"], ["g12"], axis=0),
        N("ReduceProd", ["g12"], ["p"], keepdims=0),
        N("Unsqueeze", ["p", "ax0"], ["pu"]),
        N("Concat", ["bu", "pu"], ["shp2"], axis=0),
        N("Reshape", ["X", "shp2"], ["Y2"]),
    ], [X3], [("Y", F32), ("Y2", F32), ("shp", I64), ("shp2", I64)],
        [C("i0", 0, I64), C("ax0", [0], I64), C("m1", [-1], I64), C("i12", [1, 2], I64)],
        remaining=["Reshape", "Reshape"]))
    cs.append(Case("shape_chain_11_heads", [
        N("Shape", ["X"], ["s"]),
        N("Gather", ["s", "i0"], ["b"]),
        N("Gather", ["s", "i2"], ["d"]),
        N("Div", ["d", "two"], ["dh"]),
        N("Unsqueeze", ["b"], ["bu"], axes=[0]),
        N("Unsqueeze", ["dh"], ["du"], axes=[0]),
        N("Concat", ["bu", "three", "two1", "du"], ["shp"], axis=0),
        N("Reshape", ["X", "shp"], ["Y"]),
        N("Cast", ["d"], ["df"], to=F32),
        N("Sqrt", ["df"], ["scale"]),
    ], [X3], [("Y", F32), ("shp", I64), ("scale", F32)],
        [C("i0", 0, I64), C("i2", 2, I64), C("two", 2, I64), C("three", [3], I64),
         C("two1", [2], I64)], opset=11, remaining=["Reshape"]))
    cs.append(Case("shape_start_end_size", [
        N("Shape", ["X"], ["s1"], start=1),
        N("Shape", ["X"], ["s2"], start=-2, end=-1),
        N("Shape", ["X"], ["s3"], start=5),
        N("Size", ["X"], ["n"]),
    ], [X3], [("s1", I64), ("s2", I64), ("s3", I64), ("n", I64)], opset=15))

    # ---- Gather ----
    rng = np.random.default_rng(0)
    cs.append(Case("gather", [
        N("Gather", ["D", "I"], ["g1"], axis=1),
        N("Gather", ["Di", "m1"], ["g2"], axis=0),
        N("Gather", ["Db", "z"], ["g3"], axis=-1),
        N("Gather", ["D", "I32"], ["g4"], axis=0),
    ], [], [("g1", F32), ("g2", I32), ("g3", BOOL), ("g4", F32)],
        [C("D", rng.standard_normal((3, 4)), F32), C("I", [[0, -1], [2, 1]], I64),
         C("Di", [[1, 2], [3, 4], [5, 6]], I32), C("m1", -1, I64),
         C("Db", [[True, False], [False, True]], BOOL), C("z", [1, 0, 1], I64),
         C("I32", [2, -3], I32)]))

    # ---- arithmetic with broadcasting, per dtype ----
    for dt in (I64, I32, F32, F64):
        s = {I64: "i64", I32: "i32", F32: "f32", F64: "f64"}[dt]
        a = [[7, -7, 7], [-7, 0, 5]]
        b = [2, -2, 3]
        nodes = [N("Add", ["A", "B"], ["add"]), N("Sub", ["A", "B"], ["sub"]),
                 N("Mul", ["A", "B"], ["mul"]), N("Div", ["A", "B"], ["div"]),
                 N("Mod", ["A", "B"], ["fmod"], fmod=1),
                 N("Pow", ["A", "E"], ["pow"]), N("Max", ["A", "B"], ["max"]),
                 N("Min", ["A", "B"], ["min"])]
        outs = [("add", dt), ("sub", dt), ("mul", dt), ("div", dt), ("fmod", dt),
                ("pow", dt), ("max", dt), ("min", dt)]
        if dt in (I64, I32):
            nodes.append(N("Mod", ["A", "B"], ["mod"]))
            outs.append(("mod", dt))
            e = [2, 3, 0]
        else:
            e = [2.0, 0.5, -1.0]
        cs.append(Case("arith_" + s, nodes, [], outs,
                       [C("A", a, dt), C("B", b, dt), C("E", e, dt)]))
    cs.append(Case("arith_float_special", [
        N("Div", ["A", "Z"], ["div0"]),
        N("Div", ["O", "T"], ["third"]),
        N("Mul", ["O", "T"], ["prod"]),
        N("Pow", ["T", "I"], ["powi"]),
        N("Sub", ["Zn", "Zp"], ["negzero"]),
    ], [], [("div0", F32), ("third", F32), ("prod", F32), ("powi", F32), ("negzero", F32)],
        [C("A", [1.0, -1.0, 0.0], F32), C("Z", [0.0], F32), C("O", [1.0, 0.1, 1e30], F32),
         C("T", [3.0, 3.0, 1e10], F32), C("I", [2, 2, 2], I64),
         C("Zn", [-0.0], F32), C("Zp", [0.0], F32)]))
    cs.append(Case("int_div_mod_negative", [
        N("Div", ["A", "B"], ["div"]), N("Mod", ["A", "B"], ["mod"]),
        N("Mod", ["A", "B"], ["fmod"], fmod=1),
        N("Div", ["Big", "M1"], ["bigdiv"]),
    ], [], [("div", I64), ("mod", I64), ("fmod", I64), ("bigdiv", I32)],
        [C("A", [-7, 7, -7, 7, -1, 1, 0, -9], I64), C("B", [2, -2, -2, 3, 5, -5, -3, 3], I64),
         C("Big", [2**31 - 1, -5], I32), C("M1", [-1], I32)]))

    # ---- comparisons, logic, Where ----
    nan = float("nan")
    cs.append(Case("compare_logic_where", [
        N("Equal", ["A", "B"], ["eq"]), N("Less", ["A", "B"], ["lt"]),
        N("Greater", ["A", "B"], ["gt"]), N("LessOrEqual", ["A", "B"], ["le"]),
        N("GreaterOrEqual", ["A", "B"], ["ge"]),
        N("Equal", ["F", "G"], ["feq"]), N("Less", ["F", "G"], ["flt"]),
        N("Greater", ["F", "G"], ["fgt"]),
        N("Not", ["P"], ["not"]), N("And", ["P", "Q"], ["and"]),
        N("Or", ["P", "Q"], ["or"]), N("Xor", ["P", "Q"], ["xor"]),
        N("Equal", ["P", "Q"], ["beq"]),
        N("Where", ["P", "A", "B"], ["where"]),
        N("Where", ["Pc", "F", "G"], ["fwhere"]),
    ], [], [(n, BOOL) for n in ["eq", "lt", "gt", "le", "ge", "feq", "flt", "fgt", "not",
                                 "and", "or", "xor", "beq"]] + [("where", I64), ("fwhere", F64)],
        [C("A", [[1, 5, -3, 4]], I64), C("B", [[1], [4]], I64),
         C("F", [nan, 1.0, 0.0, 2.0], F64), C("G", [nan, 2.0, 0.5, 1.0], F64),
         C("P", [[True, False, True, False]], BOOL), C("Q", [True, True, False, False], BOOL),
         C("Pc", [[True], [False]], BOOL)]))

    # ---- Cast ----
    cs.append(Case("cast", [
        N("Cast", ["F"], ["f2i32"], to=I32), N("Cast", ["F"], ["f2i64"], to=I64),
        N("Cast", ["F"], ["f2i8"], to=TP.INT8), N("Cast", ["F"], ["f2b"], to=BOOL),
        N("Cast", ["F"], ["f2d"], to=F64), N("Cast", ["L"], ["l2f"], to=F32),
        N("Cast", ["L"], ["l2d"], to=F64), N("Cast", ["L"], ["l2b"], to=BOOL),
        N("Cast", ["W"], ["w2i8"], to=TP.INT8), N("Cast", ["W"], ["w2u8"], to=TP.UINT8),
        N("Cast", ["W"], ["w2i16"], to=TP.INT16), N("Cast", ["Bo"], ["b2f"], to=F32),
        N("Cast", ["Bo"], ["b2l"], to=I64), N("Cast", ["D"], ["d2f"], to=F32),
        N("Cast", ["Fp"], ["fp2u8"], to=TP.UINT8), N("Cast", ["L"], ["l2u32"], to=TP.UINT32),
    ], [], [("f2i32", I32), ("f2i64", I64), ("f2i8", TP.INT8), ("f2b", BOOL), ("f2d", F64),
            ("l2f", F32), ("l2d", F64), ("l2b", BOOL), ("w2i8", TP.INT8), ("w2u8", TP.UINT8),
            ("w2i16", TP.INT16), ("b2f", F32), ("b2l", I64), ("d2f", F32), ("fp2u8", TP.UINT8),
            ("l2u32", TP.UINT32)],
        [C("F", [-2.5, -1.5, -0.5, 0.0, 0.5, 1.7, 100.9, -0.0], F32),
         C("L", [2**53 + 1, -(2**40) - 3, 0, 1, -1, 16777217], I64),
         C("W", [300, -300, 127, -129, 255, 70000], I32),
         C("Bo", [True, False], BOOL), C("D", [0.1, 1e300, -1e-300, 3.4028235677973366e38], F64),
         C("Fp", [0.5, 1.9, 254.99], F32)]))
    cs.append(Case("cast_not_folded", [
        N("Cast", ["F"], ["f2u8"], to=TP.UINT8), N("Cast", ["Nf"], ["n2i"], to=I32),
    ], [], [("f2u8", TP.UINT8), ("n2i", I32)],
        [C("F", [-1.5, 3.0], F32), C("Nf", [nan, 1e20], F32)],
        remaining=["Cast", "Cast"], ort=False))

    # ---- Slice ----
    arr = np.arange(24).reshape(2, 3, 4)
    cs.append(Case("slice", [
        N("Slice", ["T", "s1", "e1", "a1", "p1"], ["rev"]),
        N("Slice", ["T", "s2", "e2", "a2", "p2"], ["mix"]),
        N("Slice", ["T", "s3", "e3"], ["plain"]),
        N("Slice", ["T", "s4", "e4", "a4", "p4"], ["empty"]),
        N("Slice", ["Tf", "s5", "e5", "a5", "p5"], ["fstep"]),
    ], [], [("rev", I64), ("mix", I64), ("plain", I64), ("empty", I64), ("fstep", F32)],
        [C("T", arr, I64), C("Tf", arr.astype(np.float32) / 7, F32),
         C("s1", [-1], I64), C("e1", [INT64_MIN], I64), C("a1", [2], I64), C("p1", [-1], I64),
         C("s2", [0, 3], I64), C("e2", [INT64_MAX, -100], I64), C("a2", [0, -1], I64),
         C("p2", [1, -2], I64),
         C("s3", [1, -2], I32), C("e3", [2, 1000], I32),
         C("s4", [2], I64), C("e4", [1], I64), C("a4", [1], I64), C("p4", [1], I64),
         C("s5", [0, 5], I64), C("e5", [3, -5], I64), C("a5", [1, 2], I64),
         C("p5", [2, -3], I64)]))
    cs.append(Case("slice_opset9", [
        N("Slice", ["T"], ["o"], starts=[1, -3], ends=[1000, -1], axes=[1, 2]),
    ], [], [("o", I64)], [C("T", arr, I64)], opset=9))

    # ---- ConstantOfShape, Range ----
    cs.append(Case("constant_of_shape", [
        N("Shape", ["X"], ["s"]),
        N("ConstantOfShape", ["s"], ["c7"], value=h.make_tensor("v", I64, [1], [7])),
        N("ConstantOfShape", ["S"], ["cz"]),
        N("ConstantOfShape", ["S"], ["cb"], value=h.make_tensor("v", BOOL, [1], [True])),
        N("ConstantOfShape", ["S"], ["cf"], value=h.make_tensor("v", F32, [1], [-1.5])),
        N("ConstantOfShape", ["E"], ["cs"], value=h.make_tensor("v", I32, [1], [3])),
    ], [X3], [("c7", I64), ("cz", F32), ("cb", BOOL), ("cf", F32), ("cs", I32)],
        [C("S", [2, 3], I64), C("E", np.zeros(0), I64)]))
    cs.append(Case("range", [
        N("Range", ["a0", "a10", "a3"], ["r1"]),
        N("Range", ["a10", "a4", "am2"], ["r2"]),
        N("Range", ["b5", "bm5", "bm3"], ["r3"]),
        N("Range", ["f0", "f2", "fq"], ["r4"]),
        N("Range", ["d1", "d0", "dm"], ["r5"]),
        N("Range", ["a10", "a0", "a3"], ["r6"]),
    ], [], [("r1", I64), ("r2", I64), ("r3", I32), ("r4", F32), ("r5", F64), ("r6", I64)],
        [C("a0", 0, I64), C("a10", 10, I64), C("a3", 3, I64), C("a4", 4, I64),
         C("am2", -2, I64), C("b5", 5, I32), C("bm5", -5, I32), C("bm3", -3, I32),
         C("f0", 0.0, F32), C("f2", 2.0, F32), C("fq", 0.25, F32),
         C("d1", 1.0, F64), C("d0", -1.0, F64), C("dm", -0.5, F64)]))
    # the (possibly) inexact float Range: folded only if accumulation and start+i*delta agree
    cs.append(Case("range_float_inexact", [
        N("Range", ["f0", "f1", "fd"], ["r"]),
    ], [], [("r", F32)], [C("f0", 0.0, F32), C("f1", 1.0, F32), C("fd", 0.1, F32)],
        remaining=["Range"], folded=[]))

    # ---- data movement ----
    t = rng.standard_normal((2, 3, 4)).astype(np.float32)
    cs.append(Case("movement", [
        N("Expand", ["E", "es"], ["expand"]),
        N("Tile", ["M", "reps"], ["tile"]),
        N("Transpose", ["T"], ["tp"], perm=[2, 0, 1]),
        N("Transpose", ["T"], ["tdef"]),
        N("Flatten", ["T"], ["fl2"], axis=2),
        N("Flatten", ["T"], ["fl0"], axis=0),
        N("Flatten", ["T"], ["flm"], axis=-1),
        N("Squeeze", ["Q", "sq_ax"], ["sq1"]),
        N("Squeeze", ["Q"], ["sqall"]),
        N("Unsqueeze", ["M", "usq_ax"], ["usq"]),
        N("Concat", ["c1", "c2", "c3"], ["cat"], axis=-1),
        N("Identity", ["M"], ["ident"]),
        N("Reshape", ["T", "rs"], ["resh"]),
    ], [], [("expand", I64), ("tile", F32), ("tp", F32), ("tdef", F32), ("fl2", F32),
            ("fl0", F32), ("flm", F32), ("sq1", I32), ("sqall", I32), ("usq", F32),
            ("cat", I32), ("ident", F32), ("resh", F32)],
        [C("E", [[1], [2], [3]], I64), C("es", [2, 1, 4], I64),
         C("M", [[1.5, 2.5, 3.5], [4.5, 5.5, 6.5]], F32), C("reps", [2, 1], I64),
         C("T", t, F32), C("Q", np.arange(3).reshape(1, 3, 1), I32), C("sq_ax", [-1], I64),
         C("usq_ax", [-1, 0], I64), C("c1", [[1], [2]], I32), C("c2", [[3, 4], [5, 6]], I32),
         C("c3", np.zeros((2, 0)), I32), C("rs", [0, -1, 2], I64)]))

    # ---- reductions, variadic, unary ----
    ia = np.arange(1, 25).reshape(2, 3, 4) % 7 - 3
    cs.append(Case("reduce", [
        N("ReduceSum", ["A", "ax1"], ["rsum"], keepdims=0),
        N("ReduceProd", ["A"], ["rprod"], axes=[0, 2]),
        N("ReduceMax", ["A"], ["rmax"], keepdims=0),
        N("ReduceMin", ["F"], ["rminf"], axes=[-1]),
        N("ReduceMax", ["F"], ["rmaxf"], axes=[0], keepdims=0),
        N("ReduceSum", ["A", "noax"], ["rsumall"]),
        N("ReduceSum", ["F", "ax1"], ["fsum"]),
    ], [], [("rsum", I64), ("rprod", I64), ("rmax", I64), ("rminf", F32), ("rmaxf", F32),
            ("rsumall", I64), ("fsum", F32)],
        [C("A", ia, I64), C("F", t, F32), C("ax1", [1], I64), C("noax", np.zeros(0), I64)],
        remaining=["ReduceSum"]))
    cs.append(Case("variadic_unary", [
        N("Max", ["A", "B", "Cc"], ["max3"]), N("Min", ["A", "B", "Cc"], ["min3"]),
        N("Min", ["A"], ["min1"]),
        N("Sum", ["F", "G"], ["fsum2"]),
        N("Neg", ["A"], ["neg"]), N("Abs", ["A"], ["abs"]),
        N("Neg", ["F"], ["fneg"]), N("Abs", ["F"], ["fabs"]),
        N("Sqrt", ["G"], ["sqrt"]), N("Floor", ["F"], ["floor"]), N("Ceil", ["F"], ["ceil"]),
        N("Reciprocal", ["G"], ["recip"]), N("Sqrt", ["Gd"], ["dsqrt"]),
        N("Neg", ["I32"], ["neg32"]),
    ], [], [("max3", I64), ("min3", I64), ("min1", I64), ("fsum2", F32),
            ("neg", I64), ("abs", I64), ("fneg", F32), ("fabs", F32), ("sqrt", F32),
            ("floor", F32), ("ceil", F32), ("recip", F32), ("dsqrt", F64), ("neg32", I32)],
        [C("A", [[1, -5, 3]], I64), C("B", [[2], [-7]], I64), C("Cc", [0], I64),
         C("F", [-1.5, 2.5, -0.0, 7.0], F32), C("G", [2.0, 3.0, 0.1, 1e-3], F32),
         C("Gd", [2.0, 3.0, 0.1, 1e-3], F64), C("I32", [-(2**31), 5], I32)]))

    # ---- float16 and bfloat16: each result rounded to its type once, as the kernels do.
    # The float16 operands are initializers: onnxruntime computes float16 ops in float
    # between inserted Casts and drops a Cast pair float -> float16 -> float, so a Cast
    # from float feeding them would skip a rounding the model asks for.
    F16 = TP.FLOAT16
    cs.append(Case("half_arith", [
        N("Add", ["h", "k"], ["add"]), N("Sub", ["h", "k"], ["sub"]), N("Mul", ["h", "k"], ["mul"]),
        N("Div", ["h", "k"], ["div"]), N("Neg", ["h"], ["neg"]), N("Cast", ["h"], ["wide"], to=F32),
        N("CastLike", ["A", "h"], ["castlike_i"]), N("CastLike", ["Ninf", "h"], ["castlike_inf"]),
        N("Cast", ["F"], ["narrowed"], to=F16), N("Less", ["h", "k"], ["less"]),
    ], [], [("add", F16), ("sub", F16), ("mul", F16), ("div", F16), ("neg", F16), ("wide", F32),
            ("castlike_i", F16), ("castlike_inf", F16), ("narrowed", F16), ("less", BOOL)],
        [C("h", [1.0, 0.1, 65504.0, 3.3333, -2.5e-7], F16), C("k", [3.0, 0.2, 65504.0, 1e-3, 7.0], F16),
         C("F", [0.1, 3.3333, 1e5, -2.5e-7, 0.2998779296875], F32),
         C("A", [1, 2049, 70000, -3, 0], I64), C("Ninf", [-np.inf], F32)], opset=19))
    cs.append(Case("bfloat16_fold", [
        N("Cast", ["F"], ["h"], to=TP.BFLOAT16), N("Cast", ["G"], ["k"], to=TP.BFLOAT16),
        N("Mul", ["h", "k"], ["mul"]), N("CastLike", ["Ninf", "h"], ["castlike_inf"]),
        N("Cast", ["mul"], ["back"], to=F32),
    ], [], [("back", F32), ("castlike_inf", TP.BFLOAT16)],
        [C("F", [1.0, 0.1, 3.3333, 1e30], F32), C("G", [3.0, 0.2, 1e-3, 1e10], F32), C("Ninf", [-np.inf], F32)],
        opset=19, ort=False))

    # ---- the element-wise ops of every kind through the one driver ----
    cs.append(Case("eltwise_generic", [
        N("Clip", ["F", "lo", "hi"], ["clip"]),
        N("Clip", ["A", "zero"], ["clip_min"]),
        N("Clip", ["A", "", "one"], ["clip_max"]),
        N("CastLike", ["A", "F"], ["castlike"]),
        N("CastLike", ["F", "A"], ["castlike_i"]),
        N("Sign", ["F"], ["sign"]), N("Sign", ["A"], ["isign"]),
        N("Round", ["R"], ["round"]),
        N("IsNaN", ["Fn"], ["isnan"]), N("IsInf", ["Fn"], ["isinf"]),
        N("IsInf", ["Fn"], ["isinf_pos"], detect_negative=0),
        N("BitwiseAnd", ["A", "Bm"], ["band"]), N("BitwiseOr", ["A", "Bm"], ["bor"]),
        N("BitwiseXor", ["A", "Bm"], ["bxor"]), N("BitwiseNot", ["A"], ["bnot"]),
        N("BitShift", ["U", "sh"], ["shl"], direction="LEFT"),
        N("BitShift", ["U", "sh"], ["shr"], direction="RIGHT"),
        N("LeakyRelu", ["G"], ["leaky"], alpha=0.1),
        N("PRelu", ["G", "slope"], ["prelu"]),
        N("ThresholdedRelu", ["F"], ["thr"], alpha=1.0),
        N("Shrink", ["F"], ["shrink"], lambd=1.0, bias=0.5),
    ], [], [("clip", F32), ("clip_min", I64), ("clip_max", I64), ("castlike", F32),
            ("castlike_i", I64), ("sign", F32), ("isign", I64), ("round", F32),
            ("isnan", BOOL), ("isinf", BOOL), ("isinf_pos", BOOL), ("band", I64), ("bor", I64),
            ("bxor", I64), ("bnot", I64), ("shl", TP.UINT8), ("shr", TP.UINT8), ("leaky", F32),
            ("prelu", F32), ("thr", F32), ("shrink", F32)],
        [C("F", [-1.5, 2.5, 0.25, 7.0], F32), C("lo", -1.0, F32), C("hi", 2.0, F32),
         C("A", [[1, -5, 3]], I64), C("zero", 0, I64), C("one", 1, I64),
         C("R", [0.5, 1.5, 2.5, -0.5, -2.5, 3.7], F32),
         C("Fn", [np.inf, -np.inf, np.nan, 1.0], F32), C("Bm", [6], I64),
         C("U", [1, 3, 255], TP.UINT8), C("sh", [1, 2, 3], TP.UINT8),
         C("G", [-2.0, -0.3, 1.5, 3.0], F32), C("slope", [0.25, 0.5, 1.0, 2.0], F32)], opset=18))
    # opset 10: Clip's bounds as attributes; min > max is left to the runtime
    cs.append(Case("clip_attrs", [
        N("Clip", ["F"], ["clip"], min=-1.0, max=2.0),
        N("Clip", ["F"], ["clip_lo"], min=0.5),
    ], [], [("clip", F32), ("clip_lo", F32)], [C("F", [-1.5, 2.5, 0.25, 7.0], F32)], opset=10))
    cs.append(Case("clip_not_folded", [
        N("Clip", ["F", "hi", "lo"], ["crossed"]),
        N("Clip", ["Fz", "lo0"], ["negzero"]),
    ], [], [("crossed", F32), ("negzero", F32)],
        [C("F", [-1.5, 2.5], F32), C("lo", -1.0, F32), C("hi", 2.0, F32),
         C("Fz", [-0.0, 1.0], F32), C("lo0", 0.0, F32)],
        remaining=["Clip", "Clip"], ort=False))
    # timm's "same" padding at a dynamic batch: Shape, Sub, Clip(min=0), Concat, Pad
    cs.append(Case("same_pad_clip", [
        N("Shape", ["Xi"], ["s"]),
        N("Slice", ["s", "two", "four"], ["hw"]),
        N("Sub", ["need", "hw"], ["d"]),
        N("Clip", ["d", "zero"], ["p"]),
        N("Div", ["p", "two"], ["p0"]),
        N("Sub", ["p", "p0"], ["p1"]),
        N("Concat", ["z2", "p0", "z2", "p1"], ["pads"], axis=0),
        N("Pad", ["Xi", "pads"], ["Y"]),
    ], [vi("Xi", F32, ["batch", 3, 5, 6])], [("Y", F32), ("pads", I64)],
        [C("two", [2], I64), C("four", [4], I64), C("need", [7, 5], I64), C("zero", 0, I64),
         C("z2", [0, 0], I64)],
        remaining=["Pad"]))
    # dynamo with optimize=False: torch.arange's start and step as CastLike
    cs.append(Case("castlike_range", [
        N("CastLike", ["start", "lim"], ["s"]),
        N("CastLike", ["step", "lim"], ["st"]),
        N("Range", ["s", "lim", "st"], ["r"]),
        N("Cast", ["r"], ["rf"], to=F32),
    ], [], [("r", I64), ("rf", F32)],
        [C("start", 1.0, F32), C("lim", 9, I64), C("step", 2.0, F32)], opset=15))

    # ---- index and layout ops, their output allocated at the inferred shape ----
    cs.append(Case("index_ops", [
        N("Pad", ["M", "pads", "pv"], ["pad_c"]),
        N("Pad", ["M", "pads"], ["pad_e"], mode="edge"),
        N("Pad", ["M", "pads"], ["pad_r"], mode="reflect"),
        N("Pad", ["M", "crop"], ["pad_crop"]),
        N("GatherElements", ["M", "ge"], ["gel"], axis=1),
        N("GatherND", ["M", "gnd"], ["gnd_o"]),
        N("GatherND", ["M", "gnd_b"], ["gnd_bo"], batch_dims=1),
        N("ScatterND", ["M", "snd", "snd_u"], ["snd_o"]),
        N("ScatterElements", ["M", "ge1", "se_u"], ["se_o"], axis=1),
        N("Trilu", ["M", "k1"], ["triu"]), N("Trilu", ["M"], ["tril"], upper=0),
        N("ArgMax", ["M"], ["amax"], axis=1), N("ArgMin", ["M"], ["amin"], axis=0, keepdims=0),
        N("ArgMax", ["T"], ["amax_last"], axis=0, select_last_index=1),
        N("CumSum", ["Mi", "ax1"], ["cs"]), N("CumSum", ["Mi", "ax1"], ["cs_er"], exclusive=1, reverse=1),
        N("OneHot", ["oh_i", "oh_d", "oh_v"], ["oh"]),
        N("Compress", ["M", "cond"], ["comp"], axis=1),
        N("Compress", ["M", "cond"], ["comp_flat"]),
    ], [], [("pad_c", F32), ("pad_e", F32), ("pad_r", F32), ("pad_crop", F32), ("gel", F32),
            ("gnd_o", F32), ("gnd_bo", F32), ("snd_o", F32), ("se_o", F32), ("triu", F32),
            ("tril", F32), ("amax", I64), ("amin", I64), ("amax_last", I64), ("cs", I64),
            ("cs_er", I64), ("oh", F32), ("comp", F32), ("comp_flat", F32)],
        [C("M", rng.standard_normal((3, 4)), F32), C("pads", [1, 2, 0, 1], I64), C("pv", 1.5, F32),
         C("crop", [0, -1, -1, 0], I64),
         C("ge", [[0, 3], [1, -1], [2, 2]], I64), C("gnd", [[0, 1], [2, 3]], I64),
         C("gnd_b", [[1], [3], [0]], I64), C("snd", [[1], [0]], I64),
         C("snd_u", rng.standard_normal((2, 4)), F32), C("ge1", [[0], [3], [1]], I64),
         C("se_u", [[9.0], [8.0], [7.0]], F32), C("k1", 1, I64),
         C("T", [2.0, 5.0, 5.0, 1.0], F32), C("Mi", [[1, -2, 3, 4], [5, 6, -7, 8]], I64),
         C("ax1", 1, I64), C("oh_i", [0, 2, -1], I64), C("oh_d", 4, I64),
         C("oh_v", [0.0, 3.0], F32), C("cond", [True, False, True], BOOL)], opset=18))
    cs.append(Case("scatter_duplicate_not_folded", [
        N("ScatterND", ["M", "dup", "u"], ["o"]),
    ], [], [("o", F32)],
        [C("M", [1.0, 2.0, 3.0], F32), C("dup", [[1], [1]], I64), C("u", [5.0, 6.0], F32)],
        remaining=["ScatterND"], ort=False, opset=18))

    # ---- Identity ----
    cs.append(Case("identity_chains", [
        N("Relu", ["X"], ["r"]),
        N("Mul", ["r", "r"], ["M"]),
        N("Identity", ["r"], ["i1"]),
        N("Identity", ["i1"], ["Y"]),
        N("Identity", ["W"], ["w1"]),
        N("Identity", ["w1"], ["w2"]),
        N("Add", ["X", "w2"], ["Z"]),
        N("Identity", ["X"], ["XC"]),
        N("Identity", ["W"], ["K"]),
        N("Identity", ["Y"], ["Y2"]),
    ], [X2], [("Y", F32), ("M", F32), ("Z", F32), ("XC", F32), ("K", F32), ("Y2", F32)],
        [C("W", rng.standard_normal(6), F32)],
        remaining=["Relu", "Mul", "Add", "Identity", "Identity"]))

    # ---- Dropout ----
    cs.append(Case("dropout_mask", [
        N("Dropout", ["X", "ratio"], ["Y", "mask"]),
        N("Cast", ["mask"], ["mf"], to=F32),
        N("Mul", ["Y", "mf"], ["Z"]),
        N("Identity", ["mask"], ["Mout"]),
        N("Dropout", ["X"], ["Y2"]),
    ], [X2], [("Z", F32), ("Mout", BOOL), ("Y2", F32)], [C("ratio", 0.5, F32)],
        remaining=["Mul", "Identity"], folded=["Mout"]))  # Y2 copies a graph input: an Identity
    cs.append(Case("dropout_opset10", [
        N("Dropout", ["X"], ["Y", "mask"], ratio=0.3),
        N("Relu", ["Y"], ["Z"]),
    ], [X2], [("Z", F32), ("mask", BOOL)], opset=10, remaining=["Relu"]))
    cs.append(Case("dropout_training_mode", [
        N("Dropout", ["X", "ratio", "tm"], ["Y"]),
        N("Relu", ["Y"], ["Z"]),
    ], [X2], [("Z", F32)], [C("ratio", 0.5, F32), C("tm", True, BOOL)],
        remaining=["Relu"], ort=False, warn="training_mode"))

    # ---- what must not fold, and weight preprocessing that must ----
    cs.append(Case("not_folded", [
        N("Div", ["A", "Z"], ["idiv0"]),
        N("Exp", ["F"], ["exp"]),
        N("Sum", ["F", "F", "F"], ["fsum3"]),
        N("Shape", ["S"], ["big_shape"]),
        N("ConstantOfShape", ["big_shape"], ["big"]),
        N("Pow", ["F", "three"], ["cube"]),
        N("Where", ["P", "Nz", "F"], ["wnegzero"]),
    ], [], [("idiv0", I64), ("exp", F32), ("fsum3", F32), ("big", F32), ("cube", F32),
            ("wnegzero", F32)],
        [C("A", [1, 2], I64), C("Z", [0, 1], I64), C("F", [0.1, 0.7], F32),
         C("S", np.zeros((1100, 1000), np.int8), TP.INT8), C("three", 3.0, F32),
         C("P", [True, False], BOOL), C("Nz", [-0.0, 1.0], F32)],
        remaining=["Div", "Exp", "Sum", "ConstantOfShape", "Pow", "Where"], ort=False))
    cs.append(Case("weight_transpose", [
        N("Transpose", ["W"], ["Wt"]),
        N("MatMul", ["X", "Wt"], ["Y"]),
    ], [X2], [("Y", F32), ("Wt", F32)], [C("W", rng.standard_normal((4, 6)), F32)],
        remaining=["MatMul"]))

    # ---- training: trainable weights are never folded, Dropout with training_mode stays ----
    cs.append(Case("training", [
        N("Transpose", ["W"], ["Wt"]),
        N("MatMul", ["X", "Wt"], ["Y"]),
        N("Identity", ["B"], ["b1"]),
        N("Add", ["Y", "b1"], ["Yb"]),
        N("Dropout", ["Yb", "ratio", "tm"], ["D"]),
        N("Dropout", ["D"], ["D2"]),
        N("Shape", ["X"], ["s"]),
        N("Gather", ["s", "i0"], ["b"]),
        N("Unsqueeze", ["b", "ax0"], ["bu"]),
        N("Concat", ["bu", "m1"], ["shp"], axis=0),
        N("Reshape", ["D2", "shp"], ["Z"]),
        N("Cast", ["Ki"], ["Kf"], to=F32),
        N("Mul", ["Z", "Kf"], ["Out"]),
    ], [X2], [("Out", F32)],
        [C("W", rng.standard_normal((4, 6)), F32), C("B", rng.standard_normal(4), F32),
         C("ratio", 0.5, F32), C("tm", True, BOOL), C("i0", 0, I64), C("ax0", [0], I64),
         C("m1", [-1], I64), C("Ki", [2], I64)],
        remaining=["Transpose", "MatMul", "Add", "Dropout", "Reshape", "Mul"], training=True))
    return cs


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def same(a, b):
    """Bit-for-bit equality of two arrays of the same dtype (NaN == NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if not np.array_equal(nan_a, nan_b):
            return False
        ok = ~nan_a
        return np.array_equal(a[ok], b[ok]) and np.array_equal(np.signbit(a[ok]), np.signbit(b[ok]))
    return np.array_equal(a, b)


def to_array(vals, dtype, shape):
    conv = [float(v) if isinstance(v, str) else v for v in vals]
    return np.array(conv, dtype=np.float64 if dtype.kind == "f" else np.int64).astype(dtype).reshape(shape)


def check(case, args):
    errs = []
    path = os.path.join(args.work, case.name + ".onnx")
    onnx.save(case.model, path)
    binding = ["-d", "batch=2"] if case.model.graph.input else []
    if case.training:
        rc, out, err = run([args.fold_dump, path, "--training"] + binding)
        if rc != 0:
            return [f"fold_dump exited {rc}: {err.strip()[-2000:]}"]
        left = sorted(json.loads(out)["nodes"])
        if left != case.remaining:
            errs.append(f"nodes left after fold (training): {left}, expected {case.remaining}")
        if case.warn and case.warn not in err:
            errs.append(f"expected a warning containing '{case.warn}' on stderr, got: {err.strip()}")
        return errs
    rc, out, err = run([args.pipecc, path, "--emit=ir-json"] + binding)
    if rc != 0:
        return [f"pipecc exited {rc}: {err.strip()[-2000:]}"]
    ir = json.loads(out)
    left = sorted(n["op"] for n in ir["nodes"])
    if left != case.remaining:
        errs.append(f"nodes left after fold: {left}, expected {case.remaining}")
    if case.warn and case.warn not in err:
        errs.append(f"expected a warning containing '{case.warn}' on stderr, got: {err.strip()}")
    rc, out, err2 = run([args.fold_dump, path] + binding)
    if rc != 0:
        return errs + [f"fold_dump exited {rc}: {err2.strip()[-2000:]}"]
    fd = json.loads(out)["outputs"]
    for name in sorted(case.folded):
        if fd.get(name, {}).get("kind") != "constant":
            errs.append(f"output '{name}' is not folded to a constant: {fd.get(name)}")
    if not case.ort:
        return errs
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        shape = [2 if not isinstance(d, int) else d for d in i.shape]
        feeds[i.name] = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    names = [o.name for o in sess.get_outputs()]
    res = dict(zip(names, sess.run(None, feeds)))
    if ir["outputs"] != names:
        errs.append(f"graph outputs {ir['outputs']} != onnxruntime's {names}")
    for name in names:
        ref = np.asarray(res[name])
        v = ir["values"].get(name)
        if v is None:
            errs.append(f"output '{name}' missing from pipecc's values")
            continue
        if v["dtype"] != str(ref.dtype) or v["shape"] != list(ref.shape):
            errs.append(f"output '{name}': pipecc {v['dtype']} {v['shape']}, "
                        f"onnxruntime {ref.dtype} {list(ref.shape)}")
        d = fd.get(name)
        if d and d["kind"] == "constant":
            try:
                got = to_array(d["values"], ref.dtype, d["shape"])
            except (ValueError, OverflowError) as e:
                errs.append(f"output '{name}': cannot read folded values ({e})")
                continue
            if not same(got, ref):
                errs.append(f"output '{name}': folded {got.ravel().tolist()[:32]} != "
                            f"onnxruntime {ref.ravel().tolist()[:32]}")
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--fold-dump", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("-k", default=None, help="run only cases whose name contains this")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    failed = 0
    n = 0
    for case in cases():
        if args.k and args.k not in case.name:
            continue
        n += 1
        try:
            errs = check(case, args)
        except Exception as e:  # a crash in one case must not hide the others
            errs = [f"{type(e).__name__}: {e}"]
        if errs:
            failed += 1
            print(f"FAIL {case.name}")
            for e in errs:
                print(f"    {e}")
        else:
            print(f"ok   {case.name}")
    print(f"{n - failed}/{n} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
