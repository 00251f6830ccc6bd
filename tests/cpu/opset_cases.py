#!/usr/bin/python3
"""Models of default-domain opsets 22 to 28 (frontend/onnx_forms.c, passes/lower/lower_llm.c),
built here, compiled by pipecc at g = 1 (one micro-batch) and g = 2 (two stages, two
micro-batches) and compared with a reference; the two builds must agree bitwise.

    opset_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]

Cases:
  opset22_cnn   Conv, Elu, HardSwish, Softplus, MaxPool, InstanceNormalization,
                GlobalAveragePool, Flatten, Gemm at opset 22 (their bfloat16 forms);
                onnxruntime the reference.
  llm24         RMSNormalization (last axis; last two axes), RotaryEmbedding ([B, H, S, D]
                with position_ids in halves; [B, S, H*D] with num_heads, interleaved,
                half the head size rotated, caches per sample), Swish with alpha, at
                opset 24; onnxruntime the reference.
  forms28       Mod-28 of floats with fmod=0 (signed zeros, infinities, NaN) and BitShift-28
                of signed integers (arithmetic right shifts, left shifts into the sign,
                shifts by negative or too large amounts), SpaceToDepth-28 in both modes,
                at opset 28, which onnxruntime
                does not read: numpy the reference, bitwise (signs of zero too).
  types25       the types of IR 11 and later (float4e2m1, float6e2m3, float6e3m2, float8e8m0,
                int2, uint2) at opset 25: Cast to each from float32 (rounding, saturation,
                NaN, signed zeros; float8e8m0's three round_modes with and without
                saturate) and back, int2/uint2 from float32 (truncated, then the low bits)
                and from int32 (the low bits), QuantizeLinear/DequantizeLinear to and from
                int2 and float4e2m1 with zero points, packed initializers of int2,
                float4e2m1 and float6e3m2; numpy the reference (independent tables),
                bitwise.
  attention23   Attention-23: MHA causal prefill, GQA with a boolean mask, softcap and
                scale, a decode step with the past and a float mask, MQA with a fully
                masked row; every output (present key/value, the qk output's four
                modes); onnxruntime the reference. The forms without the qk output run
                as the targets' fused kernels.
  state28       CumProd (exclusive and reverse; int32), BitCast (float to int32, int32 to
                float), TensorScatter (circular and linear, write indices per sample),
                SwiGLU with alpha, CausalConvWithState (bias, past state, SiLU; present
                state), LinearAttention (gated_delta with GQA, a past state, per-head
                decay and beta; linear), at opset 28: numpy the reference (bitwise for
                the integers and BitCast).
  flex_preview  FlexAttention of ai.onnx.preview: GQA with a softcap score_mod and a
                scaling prob_mod (bodies with constants of their own), and MHA with
                scale and no bodies; numpy the reference.
  attention24   Attention-24's nonpad_kv_seqlen, fused (causal; a boolean mask) and written
                in other ops (with the qk output); onnxruntime the reference.
  attention25   Attention-25's sliding windows (with is_causal and nonpad_kv_seqlen), fused
                and written in other ops, which onnxruntime does not read: numpy the
                reference.
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

B = 4


def model(nodes, ins, outs, inits, opset):
    g = helper.make_graph(nodes, "g", ins, outs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="pipecc-tests")
    m.ir_version = 10
    return m


def vi(name, shape, dt=T.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def opset22_cnn(rng):
    C = 4
    w = lambda name, shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.4).astype(np.float32), name)
    inits = [w("W", (C, 3, 3, 3)), w("Wb", (C,)), w("s", (C,)), w("b", (C,)), w("G", (5, C)), w("Gb", (5,))]
    n = helper.make_node
    nodes = [n("Conv", ["x", "W", "Wb"], ["c"], pads=[1, 1, 1, 1]), n("Elu", ["c"], ["e"], alpha=0.7),
             n("HardSwish", ["e"], ["h"]), n("Softplus", ["h"], ["sp"]),
             n("MaxPool", ["sp"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
             n("InstanceNormalization", ["mp", "s", "b"], ["inorm"], epsilon=1e-5),
             n("GlobalAveragePool", ["inorm"], ["gap"]), n("Flatten", ["gap"], ["f"]),
             n("Gemm", ["f", "G", "Gb"], ["y"], transB=1)]
    m = model(nodes, [vi("x", ["batch", 3, 8, 8])], [vi("y", ["batch", 5])], inits, 22)
    return m, {"x": rng.standard_normal((B, 3, 8, 8)).astype(np.float32)}, None


def llm24(rng):
    H, S, D, P = 2, 6, 8, 16
    f = lambda name, a: numpy_helper.from_array(a.astype(np.float32), name)
    ang = np.outer(np.arange(P), 1.0 / 10000 ** (np.arange(D // 2) * 2 / D))
    ang4 = np.outer(np.arange(P), 1.0 / 10000 ** (np.arange(D // 4) * 4 / D))
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
    inits = [f("g", 1 + 0.1 * rng.standard_normal(D)), f("g2", 1 + 0.1 * rng.standard_normal((H, D))),
             f("cos", np.cos(ang)), f("sin", np.sin(ang)), i64("z0", [0]), i64("two", [2]), i64("hd", [H * D]),
             i64("to4d", [0, 0, H, D])]
    n = helper.make_node
    nodes = [n("RMSNormalization", ["x", "g"], ["rn"], epsilon=1e-6),
             n("RotaryEmbedding", ["rn", "cos", "sin", "pos"], ["r1"]),
             n("Swish", ["r1"], ["y1"], alpha=1.5),
             n("Transpose", ["x"], ["xt"], perm=[0, 2, 1, 3]),  # [B, S, H, D]
             n("Shape", ["xt"], ["shp"]), n("Slice", ["shp", "z0", "two"], ["bs"]),
             n("Concat", ["bs", "hd"], ["to3d"], axis=0),
             n("Reshape", ["xt", "to3d"], ["x3"]),  # [B, S, H*D]
             n("RotaryEmbedding", ["x3", "c3", "s3"], ["r3"], num_heads=H, interleaved=1,
               rotary_embedding_dim=D // 2),
             n("Reshape", ["r3", "to4d"], ["r3b"]),
             n("RMSNormalization", ["r3b", "g2"], ["y2"], axis=-2, epsilon=1e-5)]
    ins = [vi("x", ["batch", H, S, D]), vi("pos", ["batch", S], T.INT64), vi("c3", ["batch", S, D // 4]),
           vi("s3", ["batch", S, D // 4])]
    outs = [vi("y1", ["batch", H, S, D]), vi("y2", ["batch", S, H, D])]
    m = model(nodes, ins, outs, inits, 24)
    pos = np.stack([rng.permutation(P)[:S] for _ in range(B)]).astype(np.int64)
    pa = ang4[pos] + rng.standard_normal((B, S, D // 4)) * 0.1
    xin = {"x": rng.standard_normal((B, H, S, D)).astype(np.float32), "pos": pos,
           "c3": np.cos(pa).astype(np.float32), "s3": np.sin(pa).astype(np.float32)}
    return m, xin, None


def forms28(rng):
    special = np.array([0.0, -0.0, 5.5, -5.5, np.inf, -np.inf, np.nan, 3.0, -3.0, 7.25, 1e-30, -2.5], np.float32)
    a = np.stack([np.roll(special, k) for k in range(B)]).astype(np.float32)
    b = np.stack([np.roll(special[::-1], 2 * k + 1) for k in range(B)]).astype(np.float32)
    xi = rng.integers(-2 ** 31, 2 ** 31, (B, 12)).astype(np.int32)
    xi[:, :3] = [-1, -2 ** 31, 2 ** 31 - 1]
    sh = np.array([0, 1, 3, 31, 32, 33, -1, -40, 5, 16, 2, 30], np.int32)
    shifts = np.stack([np.roll(sh, k) for k in range(B)])
    x8 = rng.integers(-128, 128, (B, 12)).astype(np.int8)
    n = helper.make_node
    nodes = [n("Mod", ["a", "b"], ["m0"], fmod=0), n("Mod", ["a", "b"], ["m1"], fmod=1),
             n("BitShift", ["xi", "si"], ["r32"], direction="RIGHT"),
             n("BitShift", ["xi", "si"], ["l32"], direction="LEFT"),
             n("Cast", ["si"], ["s8"], to=T.INT8),
             n("BitShift", ["x8", "s8"], ["r8"], direction="RIGHT"),
             n("BitShift", ["x8", "s8"], ["l8"], direction="LEFT"),
             n("SpaceToDepth", ["sd"], ["crd"], blocksize=2, mode="CRD"),
             n("SpaceToDepth", ["sd"], ["dcr"], blocksize=2)]
    ins = [vi("a", ["batch", 12]), vi("b", ["batch", 12]), vi("xi", ["batch", 12], T.INT32),
           vi("si", ["batch", 12], T.INT32), vi("x8", ["batch", 12], T.INT8), vi("sd", ["batch", 3, 4, 6])]
    outs = [vi("m0", ["batch", 12]), vi("m1", ["batch", 12]), vi("r32", ["batch", 12], T.INT32),
            vi("l32", ["batch", 12], T.INT32), vi("r8", ["batch", 12], T.INT8), vi("l8", ["batch", 12], T.INT8),
            vi("crd", ["batch", 12, 2, 3]), vi("dcr", ["batch", 12, 2, 3])]
    m = model(nodes, ins, outs, [], 28)
    with np.errstate(all="ignore"):
        m0 = np.mod(a, b)  # A - floor(A / B) * B with the sign of B; numpy's specials are ONNX's
        m1 = np.fmod(a, b)

    def shift(x, s, right):
        bits = x.dtype.itemsize * 8
        out = np.zeros_like(x)
        ok = (s >= 0) & (s < bits)
        u = x.astype(np.int64)
        if right:
            out[ok] = (u[ok] >> s[ok]).astype(x.dtype)
            out[~ok] = np.where(x[~ok] < 0, -1, 0).astype(x.dtype)
        else:
            wide = (u[ok].astype(np.uint64) << s[ok].astype(np.uint64)) & np.uint64(2 ** bits - 1)
            out[ok] = wide.astype(np.uint64).astype({8: np.uint8, 32: np.uint32}[bits]).view(x.dtype)
        return out
    ref = {"m0": m0, "m1": m1, "r32": shift(xi, shifts, True), "l32": shift(xi, shifts, False),
           "r8": shift(x8, shifts, True), "l8": shift(x8, shifts, False)}
    sd = rng.standard_normal((B, 3, 4, 6)).astype(np.float32)
    blocks = sd.reshape(B, 3, 2, 2, 3, 2)  # [n, c, h, i, w, j]
    ref["crd"] = blocks.transpose(0, 1, 3, 5, 2, 4).reshape(B, 12, 2, 3)  # channel c * 4 + i * 2 + j
    ref["dcr"] = blocks.transpose(0, 3, 5, 1, 2, 4).reshape(B, 12, 2, 3)  # channel (i * 2 + j) * 3 + c
    return m, {"a": a, "b": b, "xi": xi, "si": shifts.astype(np.int32), "x8": x8, "sd": sd}, ref


# the types of IR 11 and later, float: (TensorProto code, exponent bits, mantissa bits)
MX = {"f4": (23, 2, 1), "f6a": (27, 2, 3), "f6b": (28, 3, 2)}


def mx_values(E, M):
    """The values of the positive codes 0 .. 2^(E+M) - 1 of an OCP MX float (bias
    2^(E-1) - 1, no infinities, no NaN)."""
    bias = 2 ** (E - 1) - 1
    c = np.arange(2 ** (E + M))
    e, m = c >> M, c & (2 ** M - 1)
    return np.where(e == 0, m * 2.0 ** (1 - bias - M), (2 ** M + m) * 2.0 ** (e - bias - M))


def mx_round(x, E, M):
    """x's code: to nearest, ties to the even code; past the largest value (infinities too)
    the largest of its sign; NaN the zero of the other sign (onnx 1.23's reference)."""
    v = mx_values(E, M)
    sign = np.signbit(x).astype(np.int64) << (E + M)
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(v, np.where(np.isnan(a), 0, a)), 0, len(v) - 1)
    lo = np.clip(hi - 1, 0, len(v) - 1)
    dl, dh = a - v[lo], v[hi] - a
    code = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= v[-1], len(v) - 1, code)
    code = np.where(np.isnan(x), 0, code) | np.where(np.isnan(x), sign ^ (1 << (E + M)), sign)
    return code.astype(np.uint8)


def mx_decode(b, E, M):
    v = mx_values(E, M)[b & (2 ** (E + M) - 1)]
    return np.where(b >> (E + M), -v, v).astype(np.float32)


def e8m0_round(x, saturate, mode):
    """Cast-24 to float8e8m0 (onnx.numpy_helper.to_float8e8m0): the float's exponent byte,
    rounded by round_mode; NaN and infinities 0xff."""
    f = x.astype(np.float32).view(np.uint32).astype(np.int64)
    e = (f >> 23) & 0xFF
    if mode == "up":
        up = (f & 0x7FFFFF) != 0
    elif mode == "nearest":
        up = ((f & 0x400000) != 0) & (((f & 0x3FFFFF) != 0) | (e > 0))
    else:
        up = np.zeros(f.shape, bool)
    if saturate:
        up &= e != 0xFE
    return np.where(e == 0xFF, 0xFF, e + up).astype(np.uint8)


def e8m0_decode(b):
    return np.where(b == 0xFF, np.nan, 2.0 ** (b.astype(np.float64) - 127)).astype(np.float32)


def pack(codes, bits):
    """codes (ints below 2^bits) packed low bits first, as ONNX files hold them"""
    v = np.asarray(codes, np.int64).reshape(-1) & (2 ** bits - 1)
    b = ((v[:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1)
    return np.packbits(b, bitorder="little").tobytes()


def raw_tensor(name, code, dims, data):
    """A TensorProto of any element type (onnx.helper of 1.16 knows none after 22)"""
    return T(name=name, data_type=code, dims=dims, raw_data=data)


def types25(rng):
    special = np.array([0.0, -0.0, 0.25, 0.26, 0.75, 1.25, 2.5, 5.0, 5.5, 7.0, 100.0, np.inf, -np.inf, np.nan, -3.0,
                        1e-7, 3.0, 1.5, -1.75, 0.125, 6.5, 28.0, 40.0, -0.3, 1e30, 3e-39, 2.0 ** 127, 1.7e38],
                       np.float32)
    W = len(special)
    x = np.stack([np.roll(special, k) for k in range(B)]).astype(np.float32)
    x[1:] *= rng.uniform(0.5, 2.0, (B - 1, W)).astype(np.float32)
    xi = rng.integers(-9, 9, (B, W)).astype(np.int32)
    n = helper.make_node
    nodes, outs, ref = [], [], {}
    for k, (code, E, M) in MX.items():
        nodes += [n("Cast", ["x"], [f"{k}_bits"], to=code), n("Cast", [f"{k}_bits"], [f"{k}_back"], to=T.FLOAT)]
        outs += [vi(f"{k}_bits", ["batch", W], code), vi(f"{k}_back", ["batch", W])]
        ref[f"{k}_bits"] = mx_round(x, E, M)
        ref[f"{k}_back"] = mx_decode(ref[f"{k}_bits"], E, M)
    for sat in (0, 1):
        for mode in ("up", "down", "nearest"):
            k = f"e8m0_{mode}_{sat}"
            nodes += [n("Cast", ["x"], [k], to=24, saturate=sat, round_mode=mode)]
            outs += [vi(k, ["batch", W], 24)]
            ref[k] = e8m0_round(x, sat, mode)
    nodes += [n("Cast", ["e8m0_up_1"], ["e8m0_back"], to=T.FLOAT)]
    outs += [vi("e8m0_back", ["batch", W])]
    ref["e8m0_back"] = e8m0_decode(ref["e8m0_up_1"])
    with np.errstate(invalid="ignore"):
        t = np.trunc(x)
    for k, code, lo, hi in (("i2", 26, -2, 1), ("u2", 25, 0, 3)):
        # from float: truncated, then the low bits (NaN and past int64's range: 0); from
        # int32: the low bits
        nodes += [n("Cast", ["x"], [f"{k}_f"], to=code), n("Cast", ["xi"], [f"{k}_i"], to=code),
                  n("Cast", [f"{k}_i"], [f"{k}_back"], to=T.INT32)]
        outs += [vi(f"{k}_f", ["batch", W], code), vi(f"{k}_i", ["batch", W], code),
                 vi(f"{k}_back", ["batch", W], T.INT32)]
        dt = np.int8 if lo else np.uint8
        ti = np.where(np.isfinite(t) & (np.abs(t) < 9.2e18), np.nan_to_num(t), 0).astype(np.int64) & 3
        ref[f"{k}_f"] = (np.where(ti >= 2, ti - 4, ti) if lo else ti).astype(dt)
        low = xi & 3
        ref[f"{k}_i"] = (np.where(low >= 2, low - 4, low) if lo else low).astype(dt)
        ref[f"{k}_back"] = ref[f"{k}_i"].astype(np.int32)
    # QuantizeLinear / DequantizeLinear to and from int2 and float4e2m1 (a zero point of
    # each), and packed initializers of each type read from the file
    zi2 = raw_tensor("zi2", 26, [], pack([-1], 2))
    zf4 = raw_tensor("zf4", 23, [], pack([0], 4))
    sc = numpy_helper.from_array(np.array(0.5, np.float32), "sc")
    ci2 = rng.integers(-2, 2, 7)
    cf4 = rng.integers(0, 16, 7)
    cf6 = rng.integers(0, 64, 7)
    inits = [zi2, zf4, sc, raw_tensor("ci2", 26, [7], pack(ci2, 2)), raw_tensor("cf4", 23, [7], pack(cf4, 4)),
             raw_tensor("cf6", 28, [7], pack(cf6, 6))]
    xq = np.clip(np.nan_to_num(x, posinf=1e4, neginf=-1e4), -1e4, 1e4).astype(np.float32)
    nodes += [n("QuantizeLinear", ["xq0", "sc", "zi2"], ["qi2"]),
              n("DequantizeLinear", ["qi2", "sc", "zi2"], ["dqi2"]),
              n("QuantizeLinear", ["xq0", "sc", "zf4"], ["qf4"]),
              n("DequantizeLinear", ["qf4", "sc"], ["dqf4"]),
              n("Cast", ["ci2"], ["ci2_c"], to=T.FLOAT), n("Cast", ["cf4"], ["cf4_c"], to=T.FLOAT),
              n("Cast", ["cf6"], ["cf6_c"], to=T.FLOAT)]
    nodes += [n("Mul", [f"{k}_c", "ones"], [f"{k}_f"]) for k in ("ci2", "cf4", "cf6")]  # per sample, exact
    outs += [vi("qi2", ["batch", W], 26), vi("dqi2", ["batch", W]), vi("qf4", ["batch", W], 23),
             vi("dqf4", ["batch", W]), vi("ci2_f", ["batch", 7]), vi("cf4_f", ["batch", 7]),
             vi("cf6_f", ["batch", 7])]
    q = np.clip(np.rint(xq / np.float32(0.5)) - 1, -2, 1)
    ref["qi2"] = q.astype(np.int8)
    ref["dqi2"] = ((q + 1) * np.float32(0.5)).astype(np.float32)
    ref["qf4"] = mx_round((xq / np.float32(0.5) + np.float32(0)).astype(np.float32), 2, 1)
    ref["dqf4"] = (mx_decode(ref["qf4"], 2, 1) * np.float32(0.5)).astype(np.float32)
    ref["ci2_f"] = np.tile(ci2.astype(np.float32), (B, 1))
    ref["cf4_f"] = np.tile(mx_decode(cf4.astype(np.uint8), 2, 1), (B, 1))
    ref["cf6_f"] = np.tile(mx_decode(cf6.astype(np.uint8), 3, 2), (B, 1))
    ins = [vi("x", ["batch", W]), vi("xi", ["batch", W], T.INT32), vi("xq0", ["batch", W]), vi("ones", ["batch", 7])]
    m = model(nodes, ins, outs, inits, 25)
    m.ir_version = 11
    return m, {"x": x, "xi": xi, "xq0": xq, "ones": np.ones((B, 7), np.float32)}, ref


def attention23(rng):
    """Attention-23 in its forms: 4D MHA causal prefill; 3D GQA with a boolean mask, softcap
    and scale (qk output mode 0); a decode step with the past (present_key/value out), a
    float mask, causal, mode 3; MQA with a row of the boolean mask all false (a zero row,
    in Y and in mode 3's output); a float mask, mode 2 (the masked scores of a boolean
    mask or is_causal are -inf as the operator's text says, where onnxruntime writes the
    lowest float, so mode 2 is compared on a float mask). The same forms without the qk
    output, and a causal and a masked one of 300 queries and keys (several blocks of each), run
    fused."""
    H, S, D, P, L = 4, 5, 8, 6, 300  # L: several query and key blocks
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    n = helper.make_node
    m2 = rng.random((S, S)) > 0.3
    m2[:, 0] = True
    m4 = np.ones((B, 1, S, S), bool)
    m4[:, :, 2, :] = False
    nodes = [n("Attention", ["q1", "k1", "v1"], ["y1"], is_causal=1),
             n("Attention", ["q2", "k2", "v2", "m2"], ["y2", "", "", "qk2"], q_num_heads=4, kv_num_heads=2,
               softcap=2.0, scale=0.3),
             n("Attention", ["q3", "k3", "v3", "m3", "pk", "pv"], ["y3", "pk3", "pv3", "qk3"], is_causal=1,
               qk_matmul_output_mode=3),
             n("Attention", ["q1", "k4", "v4", "m4"], ["y4", "", "", "qk4"], qk_matmul_output_mode=3),
             n("Attention", ["q1", "k1", "v1", "m5"], ["y5", "", "", "qk5"], qk_matmul_output_mode=2),
             # without the qk output: the fused kernels (the forms above are written in other ops)
             n("Attention", ["q2", "k2", "v2", "m2"], ["y2f"], q_num_heads=4, kv_num_heads=2, softcap=2.0, scale=0.3),
             n("Attention", ["q3", "k3", "v3", "m3", "pk", "pv"], ["y3f", "pk3f", "pv3f"], is_causal=1),
             n("Attention", ["q1", "k4", "v4", "m4"], ["y4f"]),
             n("Attention", ["q1", "k1", "v1", "m5"], ["y5f"], is_causal=1),
             n("Attention", ["ql", "kl", "vl"], ["ylf"], is_causal=1),
             n("Attention", ["ql", "kl", "vl", "ml"], ["ylm"])]
    inits = [numpy_helper.from_array(m2, "m2"), numpy_helper.from_array(f(L, L), "ml")]
    ins = [vi("q1", ["batch", H, S, D]), vi("k1", ["batch", H, S, D]), vi("v1", ["batch", H, S, D]),
           vi("q2", ["batch", S, 4 * D]), vi("k2", ["batch", S, 2 * D]), vi("v2", ["batch", S, 12]),
           vi("q3", ["batch", H, 1, D]), vi("k3", ["batch", 2, 1, D]), vi("v3", ["batch", 2, 1, D]),
           vi("m3", ["batch", 1, 1, P + 1]), vi("pk", ["batch", 2, P, D]), vi("pv", ["batch", 2, P, D]),
           vi("k4", ["batch", 1, S, D]), vi("v4", ["batch", 1, S, D]), vi("m4", ["batch", 1, S, S], T.BOOL),
           vi("m5", ["batch", H, S, S]), vi("ql", ["batch", 1, L, 16]), vi("kl", ["batch", 1, L, 16]),
           vi("vl", ["batch", 1, L, 16])]
    outs = [vi(k, None) for k in ("y1", "y2", "qk2", "y3", "pk3", "pv3", "qk3", "y4", "qk4", "y5", "qk5", "y2f", "y3f",
                                  "pk3f", "pv3f", "y4f", "y5f", "ylf", "ylm")]
    xin = {"q1": f(B, H, S, D), "k1": f(B, H, S, D), "v1": f(B, H, S, D), "q2": f(B, S, 4 * D), "k2": f(B, S, 2 * D),
           "v2": f(B, S, 12), "q3": f(B, H, 1, D), "k3": f(B, 2, 1, D), "v3": f(B, 2, 1, D), "m3": f(B, 1, 1, P + 1),
           "pk": f(B, 2, P, D), "pv": f(B, 2, P, D), "k4": f(B, 1, S, D), "v4": f(B, 1, S, D), "m4": m4,
           "m5": f(B, H, S, S), "ql": f(B, 1, L, 16), "kl": f(B, 1, L, 16), "vl": f(B, 1, L, 16)}
    return model(nodes, ins, outs, inits, 23), xin, None


def state28(rng):
    """The ops of opsets 24 to 28 for gated and recurrent blocks, each against a numpy
    reference written from the operator's text."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    n = helper.make_node
    C, L, K = 3, 7, 4  # CausalConvWithState: channels, length, kernel
    Hq, Hkv, T_, dk, dv = 4, 2, 3, 4, 5  # LinearAttention
    w, cb = f(C, 1, K), f(C)
    inits = [numpy_helper.from_array(np.array(1, np.int64), "ax1"), numpy_helper.from_array(w, "cw"),
             numpy_helper.from_array(cb, "cb")]
    nodes = [n("CumProd", ["x", "ax1"], ["cp"], exclusive=1, reverse=1),
             n("CumProd", ["xi", "ax1"], ["cpi"]),
             n("BitCast", ["x"], ["bc"], to=T.INT32), n("BitCast", ["xi"], ["bcf"], to=T.FLOAT),
             n("TensorScatter", ["past", "upd", "wi"], ["tsc"], mode="circular", axis=2),
             n("TensorScatter", ["past", "upd", "wl"], ["tsl"], axis=-2),
             n("SwiGLU", ["ga", "gb"], ["sw"], alpha=1.702),
             n("CausalConvWithState", ["cx", "cw", "cb", "cs"], ["cy", "cst"], activation="silu"),
             n("LinearAttention", ["lq", "lk", "lv", "ls", "ld", "lb"], ["ly", "lst"], q_num_heads=Hq,
               kv_num_heads=Hkv),
             n("LinearAttention", ["lq", "lk", "lv"], ["ly2", "lst2"], q_num_heads=Hq, kv_num_heads=Hkv,
               update_rule="linear", scale=0.3)]
    x = f(B, 5) + 0.5
    xi = rng.integers(-3, 4, (B, 5)).astype(np.int32)
    past, upd = f(B, 2, 6, 3), f(B, 2, 3, 3)
    wi, wl = np.array([0, 2, 4, 5], np.int64), np.array([0, 1, 3, 2], np.int64)
    ga, gb = f(B, 6), f(B, 6)
    cx, cs = f(B, C, L), f(B, C, K - 1)
    lk = f(B, T_, Hkv * dk).reshape(B, T_, Hkv, dk)
    lk = (lk / np.linalg.norm(lk, axis=-1, keepdims=True)).reshape(B, T_, Hkv * dk).astype(np.float32)
    xin = {"x": x, "xi": xi, "past": past, "upd": upd, "wi": wi, "wl": wl, "ga": ga, "gb": gb, "cx": cx, "cs": cs,
           "lq": f(B, T_, Hq * dk), "lk": lk, "lv": f(B, T_, Hkv * dv), "ls": f(B, Hkv, dk, dv) * 0.3,
           "ld": -np.abs(f(B, T_, Hkv)) * 0.2, "lb": (1 / (1 + np.exp(-f(B, T_, Hkv)))).astype(np.float32)}
    ins = [vi(k, ["batch"] + list(v.shape[1:]), {np.dtype(np.float32): T.FLOAT, np.dtype(np.int32): T.INT32,
                                                   np.dtype(np.int64): T.INT64}[v.dtype]) for k, v in xin.items()]
    outs = [vi(k, None) for k in ("cp", "cpi", "bc", "bcf", "tsc", "tsl", "sw", "cy", "cst", "ly", "lst", "ly2",
                                  "lst2")]
    ref = {}
    # CumProd: exclusive reverse along 1 (the product of the elements after each), inclusive
    cp = np.ones_like(x)
    for j in range(3, -1, -1):
        cp[:, j] = cp[:, j + 1] * x[:, j + 1]
    ref["cp"] = cp
    ref["cpi"] = np.cumprod(xi, axis=1, dtype=np.int32)
    ref["bc"], ref["bcf"] = x.view(np.int32), xi.view(np.float32)
    for name, idx, circ in (("tsc", wi, True), ("tsl", wl, False)):
        out = past.copy()
        for b in range(B):
            for s_ in range(upd.shape[2]):
                m_ = idx[b] + s_
                out[b, :, m_ % 6 if circ else m_, :] = upd[b, :, s_, :]
        ref[name] = out
    ref["sw"] = ga / (1 + np.exp(-1.702 * ga)) * gb
    pad = np.concatenate([cs, cx], axis=2)
    conv = np.stack([sum(pad[:, :, t + j] * w[None, :, 0, j] for j in range(K)) for t in range(L)], -1) + cb[:, None]
    ref["cy"], ref["cst"] = (conv / (1 + np.exp(-conv))).astype(np.float32), pad[:, :, -(K - 1):]

    def lin_att(q, k, v, st, dec, beta, scale):
        q = q.reshape(B, T_, Hq, dk).astype(np.float64)
        k = k.reshape(B, T_, Hkv, dk).astype(np.float64)
        v = v.reshape(B, T_, Hkv, dv).astype(np.float64)
        st = np.zeros((B, Hkv, dk, dv)) if st is None else st.astype(np.float64)
        y = np.zeros((B, T_, Hq, dv))
        for t in range(T_):
            if dec is not None:
                st = st * np.exp(dec[:, t])[:, :, None, None]
            u = v[:, t]
            if beta is not None:
                u = beta[:, t][:, :, None] * (u - np.einsum("bhkv,bhk->bhv", st, k[:, t]))
            st = st + k[:, t][..., :, None] * u[..., None, :]
            for h in range(Hq):
                y[:, t, h] = scale * np.einsum("bk,bkv->bv", q[:, t, h], st[:, h // (Hq // Hkv)])
        return y.reshape(B, T_, Hq * dv).astype(np.float32), st.astype(np.float32)
    ref["ly"], ref["lst"] = lin_att(xin["lq"], lk, xin["lv"], xin["ls"], xin["ld"], xin["lb"], 1 / np.sqrt(dk))
    ref["ly2"], ref["lst2"] = lin_att(xin["lq"], lk, xin["lv"], None, None, None, 0.3)
    return model(nodes, ins, outs, inits, 28), xin, ref


def flex_preview(rng):
    """FlexAttention (domain ai.onnx.preview, version 1) with and without its bodies."""
    Hq, Hkv, L, S, E, Ev = 4, 2, 3, 5, 8, 6
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    n = helper.make_node
    sc = lambda name, v: helper.make_tensor(name, T.FLOAT, [], [v])
    bvi = lambda name: helper.make_tensor_value_info(name, T.FLOAT, None)
    score_mod = helper.make_graph([n("Div", ["s", "cap"], ["d"]), n("Tanh", ["d"], ["t"]),
                                   n("Mul", ["t", "cap"], ["so"])], "score_mod", [bvi("s")], [bvi("so")],
                                  [sc("cap", 1.5)])
    prob_mod = helper.make_graph([n("Mul", ["p", "w"], ["po"])], "prob_mod", [bvi("p")], [bvi("po")], [sc("w", 0.9)])
    nodes = [n("FlexAttention", ["q", "k", "v"], ["y1"], domain="ai.onnx.preview", score_mod=score_mod,
               prob_mod=prob_mod),
             n("FlexAttention", ["q", "q", "q"], ["y2"], domain="ai.onnx.preview", scale=0.2)]
    xin = {"q": f(B, Hq, L, E), "k": f(B, Hkv, S, E), "v": f(B, Hkv, S, Ev)}
    ins = [vi(k, ["batch"] + list(v.shape[1:])) for k, v in xin.items()]
    g = helper.make_graph(nodes, "g", ins, [vi("y1", None), vi("y2", None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 28), helper.make_opsetid("ai.onnx.preview", 1)],
                          producer_name="pipecc-tests")
    m.ir_version = 10

    def attn(q, k, v, scale, cap=None, w=None):
        k = np.repeat(k, q.shape[1] // k.shape[1], 1).astype(np.float64)
        v = np.repeat(v, q.shape[1] // v.shape[1], 1).astype(np.float64)
        s_ = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) * scale
        if cap:
            s_ = np.tanh(s_ / cap) * cap
        p = np.exp(s_ - s_.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True) * (w or 1.0)
        return (p @ v).astype(np.float32)
    ref = {"y1": attn(xin["q"], xin["k"], xin["v"], 1 / np.sqrt(E), 1.5, 0.9),
           "y2": attn(xin["q"], xin["q"], xin["q"], 0.2)}
    return m, xin, ref


def attention24(rng):
    """Attention-24's nonpad_kv_seqlen (a static cache: keys from nonpad[b] on are padding,
    the causal frontier at nonpad[b] - Sq), fused and causal; fused with a boolean mask;
    written in other ops (the qk output, mode 0) and causal."""
    H, S, C, D = 2, 3, 9, 4
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    n = helper.make_node
    mb = rng.random((S, C)) > 0.3
    mb[:, 0] = True
    nodes = [n("Attention", ["q", "k", "v", "", "", "", "np"], ["y1"], is_causal=1),
             n("Attention", ["q", "k", "v", "mb", "", "", "np"], ["y2"]),
             n("Attention", ["q", "k", "v", "", "", "", "np"], ["y3", "", "", "qk3"], is_causal=1)]
    ins = [vi("q", ["batch", H, S, D]), vi("k", ["batch", H, C, D]), vi("v", ["batch", H, C, D]),
           vi("np", ["batch"], T.INT64)]
    outs = [vi(k, None) for k in ("y1", "y2", "y3", "qk3")]
    xin = {"q": f(B, H, S, D), "k": f(B, H, C, D), "v": f(B, H, C, D), "np": np.array([5, C, 4, 7], np.int64)}
    return model(nodes, ins, outs, [numpy_helper.from_array(mb, "mb")], 24), xin, None


def attention_np(q, k, v, left=-1, right=-1, causal=False, nonpad=None):
    """numpy Attention of 4D inputs (one head per key/value head), the scores -inf outside
    the windows around the query's position i + offset (offset nonpad[b] - Sq, else 0),
    past the causal frontier and from nonpad[b] on; a row with no key gives zeros"""
    Bq, Hq, Sq, Dq = q.shape
    Tk = k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(Dq)
    off = (nonpad - Sq if nonpad is not None else np.zeros(Bq, np.int64)).reshape(Bq, 1, 1, 1)
    pos = np.arange(Sq).reshape(1, 1, Sq, 1) + off
    j = np.arange(Tk).reshape(1, 1, 1, Tk)
    ok = np.ones((Bq, 1, Sq, Tk), bool)
    if left >= 0:
        ok &= pos - j <= left
    if right >= 0:
        ok &= j - pos <= right
    if causal:
        ok &= j <= pos
    if nonpad is not None:
        ok &= j < nonpad.reshape(Bq, 1, 1, 1)
    s = np.where(ok, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    e = np.where(ok, np.exp(s - np.where(np.isfinite(mx), mx, 0)), 0)
    den = e.sum(-1, keepdims=True)
    p = np.where(den > 0, e / np.where(den > 0, den, 1), 0)
    return np.einsum("bhij,bhjd->bhid", p, v.astype(np.float64)).astype(np.float32)


def attention25(rng):
    """Attention-25's sliding windows, which onnxruntime does not read: a numpy reference
    (attention_np). Fused: left and right windows over 300 keys (several key blocks, the
    blocks outside the window skipped), a left window with is_causal and
    nonpad_kv_seqlen; written in other ops (with the qk output) the same windows."""
    H, S, L, D = 2, 5, 300, 8
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    n = helper.make_node
    npad = np.array([7, 9, 6, 8], np.int64)
    nodes = [n("Attention", ["ql", "kl", "vl"], ["y1"], left_window_size=200, right_window_size=3),
             n("Attention", ["q", "k", "v", "", "", "", "np"], ["y2"], left_window_size=2, is_causal=1),
             n("Attention", ["q", "k", "v", "", "", "", "np"], ["y3", "", "", "qk3"], left_window_size=2,
               is_causal=1)]
    ins = [vi("ql", ["batch", 1, L, D]), vi("kl", ["batch", 1, L, D]), vi("vl", ["batch", 1, L, D]),
           vi("q", ["batch", H, S, D]), vi("k", ["batch", H, 9, D]), vi("v", ["batch", H, 9, D]),
           vi("np", ["batch"], T.INT64)]
    outs = [vi(k, None) for k in ("y1", "y2", "y3")]
    xin = {"ql": f(B, 1, L, D), "kl": f(B, 1, L, D), "vl": f(B, 1, L, D), "q": f(B, H, S, D), "k": f(B, H, 9, D),
           "v": f(B, H, 9, D), "np": npad}
    y2 = attention_np(xin["q"], xin["k"], xin["v"], left=2, causal=True, nonpad=npad)
    ref = {"y1": attention_np(xin["ql"], xin["kl"], xin["vl"], left=200, right=3), "y2": y2, "y3": y2}
    m = model(nodes, ins, outs, [], 25)
    m.ir_version = 11
    return m, xin, ref


def close(got, ref, tol):
    """rel-L2 over the finite entries, the infinities and NaNs where the reference has them"""
    fin = np.isfinite(ref)
    if not np.array_equal(fin, np.isfinite(got)) or not np.array_equal(ref[~fin], got[~fin], equal_nan=True):
        return float("inf")
    return pt.rel_l2(got[fin], ref[fin], 1e-30) if fin.any() else 0.0


CASES = {"opset22_cnn": opset22_cnn, "llm24": llm24, "forms28": forms28, "attention23": attention23,
         "state28": state28, "flex_preview": flex_preview, "attention24": attention24,
         "attention25": attention25, "types25": types25}
BITWISE = ("forms28", "types25")  # numpy references, compared bit for bit


def same_bits(x, y):
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def main():
    a = pt.case_args(1e-5)
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name, make in CASES.items():
        if a.k and not re.search(a.k, name):
            continue
        d = pt.case_dir(a.work, name)
        m, xin, ref = make(np.random.default_rng(23))
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        if ref is None:
            import onnxruntime as ort
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, xin)))
        save_npz(os.path.join(d, "x.npz"), xin)
        good, runs = True, []
        for g in (1, 2):  # g stages, g micro-batches
            label = f"{name} -g {g} -m {g}"
            out = os.path.join(d, f"g{g}")
            cmd, env = pt.sim_target([a.pipecc, path, "-d", f"batch={B}", "-g", str(g), "-m", str(g), "-o", out,
                                      "-j", "1"], pt.split_env(), a.target, a.sim_lib)
            got = pt.build_run(cmd, env, out, os.path.join(d, "x.npz"), label)
            if got is None:
                good = False
                continue
            runs.append(got)
            errs = []
            for k, v in ref.items():
                if k not in got or got[k].shape != v.shape:
                    errs.append(f"{k}: missing or of another shape")
                elif v.dtype.kind == "f" and name not in BITWISE and k != "bcf":
                    e = close(got[k], v, a.tol)
                    if not e <= a.tol:
                        errs.append(f"{k}: rel-L2 {e:.2e} over {a.tol:g}")
                elif not same_bits(got[k].astype(v.dtype), v):
                    bad = np.argwhere(got[k].astype(v.dtype).view(np.uint8) != v.view(np.uint8))[:3].tolist()
                    errs.append(f"{k}: not bitwise the reference (bytes {bad})")
            print(("ok   " if not errs else "FAIL ") + label + (": " + "; ".join(errs) if errs else ""))
            good &= not errs
        if len(runs) == 2:
            diff = [k for k in runs[0] if not same_bits(runs[0][k], runs[1][k])]
            print(("ok   " if not diff else "FAIL ") + f"{name}: g = 1 and g = 2 bitwise equal" +
                  (f" except {diff}" if diff else ""))
            good &= not diff
        ok &= good
        pt.done_with(d, good)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
