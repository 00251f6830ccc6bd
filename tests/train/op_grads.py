#!/usr/bin/env python3
"""Per-op gradients of pipecc's autodiff against torch autograd.

Every case is a small ONNX graph made with onnx.helper:
    Xw = X * W0            (W0 an initializer of X's shape: its gradient is the op's dX)
    Y  = OP(Xw, weights...) [-> more nodes]
compiled with `pipecc --train --loss mse --optimizer sgd -g 1` and run on random data;
the loss and the gradient of every float initializer must be within rel-L2 1e-4 of the
same function written with torch ops.

  op_grads.py --pipecc build/pipecc --work /tmp/og [-k NAME_SUBSTRING]
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools"))
from npzio import save_npz  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import pipecc_test as pt  # noqa: E402

R = np.random.default_rng(7)


def rn(*s, lo=None):
    a = R.standard_normal(s).astype(np.float32)
    return np.abs(a) + lo if lo is not None else a


def i64(*v):
    return np.array(v, np.int64)


class Case:
    def __init__(self, name, x, nodes, weights, fn, opset=17, ints=None, extra_opsets=()):
        self.name, self.x, self.nodes, self.weights, self.fn, self.opset = name, x, nodes, weights, fn, opset
        self.extra_opsets = extra_opsets  # (domain, version) besides the default domain's
        self.ints = ints or {}  # constants (Constant nodes: not trained): shapes, axes, indices


def N(op, ins, outs=("Y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def cases():
    cs = []
    # ---- convolution / pooling ----
    x = rn(2, 3, 9, 8)
    cs.append(Case("conv_stride_asympad_dilation", x,
                   [N("Conv", ["Xw", "W", "B"], strides=[2, 3], pads=[1, 0, 2, 1], dilations=[1, 2])],
                   {"W": rn(4, 3, 3, 2), "B": rn(4)},
                   lambda t: F.conv2d(F.pad(t["Xw"], (0, 1, 1, 2)), t["W"], t["B"], stride=(2, 3), dilation=(1, 2))))
    cs.append(Case("conv_same_upper", rn(2, 3, 7, 6),
                   [N("Conv", ["Xw", "W"], strides=[2, 2], auto_pad="SAME_UPPER")], {"W": rn(5, 3, 3, 3)},
                   lambda t: F.conv2d(F.pad(t["Xw"], (0, 1, 1, 1)), t["W"], stride=2)))
    cs.append(Case("conv_depthwise", rn(2, 4, 7, 7),
                   [N("Conv", ["Xw", "W", "B"], group=4, pads=[1, 1, 1, 1], strides=[2, 2])],
                   {"W": rn(4, 1, 3, 3), "B": rn(4)},
                   lambda t: F.conv2d(t["Xw"], t["W"], t["B"], stride=2, padding=1, groups=4)))
    # weight gradients of depthwise Convs on larger maps: a Conv of a small output and a large
    # kernel (codegen/c/ops_nn.c's emit_conv_smallout), stride 1 and 2
    cs.append(Case("conv_depthwise_big", rn(2, 4, 24, 24),
                   [N("Conv", ["Xw", "W", "B"], group=4, pads=[1, 1, 1, 1])],
                   {"W": rn(4, 1, 3, 3), "B": rn(4)},
                   lambda t: F.conv2d(t["Xw"], t["W"], t["B"], padding=1, groups=4)))
    cs.append(Case("conv_depthwise_big_s2", rn(2, 4, 25, 25),
                   [N("Conv", ["Xw", "W"], group=4, pads=[1, 1, 1, 1], strides=[2, 2])],
                   {"W": rn(4, 1, 3, 3)},
                   lambda t: F.conv2d(t["Xw"], t["W"], stride=2, padding=1, groups=4)))
    cs.append(Case("conv_grouped", rn(2, 6, 7, 6),
                   [N("Conv", ["Xw", "W", "B"], group=3, pads=[1, 0, 1, 2], strides=[2, 1], dilations=[1, 2])],
                   {"W": rn(6, 2, 3, 2), "B": rn(6)},
                   lambda t: F.conv2d(F.pad(t["Xw"], (0, 2, 1, 1)), t["W"], t["B"], stride=(2, 1), dilation=(1, 2),
                                      groups=3)))
    cs.append(Case("conv1d_grouped_wide", rn(3, 4, 9), [N("Conv", ["Xw", "W"], group=2, strides=[2])],
                   {"W": rn(6, 2, 3)}, lambda t: F.conv1d(t["Xw"], t["W"], stride=2, groups=2)))
    cs.append(Case("conv1d", rn(2, 3, 10), [N("Conv", ["Xw", "W"], strides=[2])], {"W": rn(5, 3, 3)},
                   lambda t: F.conv1d(t["Xw"], t["W"], stride=2)))
    cs.append(Case("maxpool_ceil_pad", rn(2, 3, 8, 7),
                   [N("MaxPool", ["Xw"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)], {},
                   lambda t: F.max_pool2d(t["Xw"], 3, 2, 1, ceil_mode=True)))
    cs.append(Case("maxpool_2x2", rn(2, 3, 6, 6), [N("MaxPool", ["Xw"], kernel_shape=[2, 2], strides=[2, 2])], {},
                   lambda t: F.max_pool2d(t["Xw"], 2, 2)))
    cs.append(Case("avgpool_pad_include", rn(2, 3, 7, 7),
                   [N("AveragePool", ["Xw"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                      count_include_pad=1)], {},
                   lambda t: F.avg_pool2d(t["Xw"], 3, 2, 1, count_include_pad=True)))
    cs.append(Case("globalavgpool", rn(2, 3, 5, 4), [N("GlobalAveragePool", ["Xw"])], {},
                   lambda t: t["Xw"].mean(dim=(2, 3), keepdim=True)))
    # ---- dense ----
    cs.append(Case("gemm_trans_alpha_beta", rn(5, 4),
                   [N("Gemm", ["Xw", "W", "C"], transA=1, transB=1, alpha=0.5, beta=2.0)],
                   {"W": rn(6, 5), "C": rn(1, 6)},
                   lambda t: 0.5 * t["Xw"].T @ t["W"].T + 2.0 * t["C"]))
    cs.append(Case("matmul_broadcast", rn(2, 3, 4, 5), [N("MatMul", ["Xw", "W"])], {"W": rn(5, 6)},
                   lambda t: t["Xw"] @ t["W"]))
    cs.append(Case("matmul_batch_bcast", rn(2, 1, 4, 5), [N("MatMul", ["Xw", "W"])], {"W": rn(3, 5, 2)},
                   lambda t: t["Xw"] @ t["W"]))
    # ---- normalisation ----
    cs.append(Case("batchnorm_training", rn(4, 3, 5, 5),
                   [N("BatchNormalization", ["Xw", "S", "B", "M", "V"], ["Y"], training_mode=1, epsilon=1e-3)],
                   {"S": rn(3), "B": rn(3), "M": rn(3), "V": rn(3, lo=0.5)},
                   lambda t: F.batch_norm(t["Xw"], None, None, t["S"], t["B"], training=True, eps=1e-3), opset=15))
    cs.append(Case("batchnorm_eval", rn(4, 3, 5),
                   [N("BatchNormalization", ["Xw", "S", "B", "M", "V"])],
                   {"S": rn(3), "B": rn(3), "M": rn(3), "V": rn(3, lo=0.5)},
                   lambda t: F.batch_norm(t["Xw"], t["M"].detach(), t["V"].detach(), t["S"], t["B"], training=False),
                   opset=15))
    cs.append(Case("layernorm_last", rn(3, 4, 8), [N("LayerNormalization", ["Xw", "S", "B"], epsilon=1e-5)],
                   {"S": rn(8), "B": rn(8)}, lambda t: F.layer_norm(t["Xw"], (8,), t["S"], t["B"])))
    cs.append(Case("layernorm_axis1", rn(3, 4, 5), [N("LayerNormalization", ["Xw", "S"], axis=1)],
                   {"S": rn(4, 5)}, lambda t: F.layer_norm(t["Xw"], (4, 5), t["S"])))
    cs.append(Case("softmax_axis1", rn(3, 6, 4), [N("Softmax", ["Xw"], axis=1)], {},
                   lambda t: torch.softmax(t["Xw"], 1)))
    cs.append(Case("logsoftmax", rn(3, 6), [N("LogSoftmax", ["Xw"])], {}, lambda t: torch.log_softmax(t["Xw"], -1)))
    # ---- element-wise ----
    un = {"Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Erf": torch.erf, "Exp": torch.exp,
          "Neg": torch.neg, "Abs": torch.abs, "Softplus": F.softplus, "Identity": lambda v: v}
    for op, f in un.items():
        cs.append(Case("unary_" + op, rn(3, 5), [N(op, ["Xw"])], {}, lambda t, f=f: f(t["Xw"])))
    cs.append(Case("unary_Log", rn(3, 5, lo=0.5), [N("Log", ["Xw"])], {}, lambda t: torch.log(t["Xw"])))
    cs.append(Case("unary_Sqrt", rn(3, 5, lo=0.5), [N("Sqrt", ["Xw"])], {}, lambda t: torch.sqrt(t["Xw"])))
    cs.append(Case("unary_Reciprocal", rn(3, 5, lo=0.5), [N("Reciprocal", ["Xw"])], {}, lambda t: 1 / t["Xw"]))
    cs.append(Case("leakyrelu", rn(3, 5), [N("LeakyRelu", ["Xw"], alpha=0.2)], {},
                   lambda t: F.leaky_relu(t["Xw"], 0.2)))
    bins = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}
    for op, f in bins.items():
        cs.append(Case("bcast_" + op, rn(2, 3, 4), [N(op, ["Xw", "W"])], {"W": rn(3, 1, lo=0.5)},
                       lambda t, f=f: f(t["Xw"], t["W"])))
        cs.append(Case("bcast_rev_" + op, rn(3, 1), [N(op, ["W", "Xw"])], {"W": rn(2, 3, 4)},
                       lambda t, f=f: f(t["W"], t["Xw"])) if op != "Div" else
                  Case("bcast_rev_Div", rn(3, 1, lo=0.5), [N(op, ["W", "Xw"])], {"W": rn(2, 3, 4)},
                       lambda t: t["W"] / t["Xw"]))
    cs.append(Case("pow3", rn(3, 4), [N("Pow", ["Xw", "E"])], {}, lambda t: t["Xw"] ** 3,
                   ints={"E": np.array(3.0, np.float32)}))
    cs.append(Case("pow2", rn(3, 4), [N("Pow", ["Xw", "E"])], {}, lambda t: t["Xw"] ** 2,
                   ints={"E": np.array(2.0, np.float32)}))
    cs.append(Case("pow_trained_exponent", rn(3, 4, lo=0.5), [N("Pow", ["Xw", "E"])], {"E": rn(4)},
                   lambda t: t["Xw"] ** t["E"]))
    cs.append(Case("gelu_erf_chain", rn(3, 4),
                   [N("Div", ["Xw", "S2"], ["a"]), N("Erf", ["a"], ["b"]), N("Add", ["b", "One"], ["c"]),
                    N("Mul", ["Xw", "c"], ["d"]), N("Mul", ["d", "Half"])], {},
                   lambda t: F.gelu(t["Xw"]),
                   ints={"S2": np.array(2 ** 0.5, np.float32), "One": np.array(1.0, np.float32),
                         "Half": np.array(0.5, np.float32)}))
    cs.append(Case("where", rn(3, 4), [N("Greater", ["Xw", "Z"], ["c"]), N("Where", ["c", "Xw", "W"])],
                   {"W": rn(4)}, lambda t: torch.where(t["Xw"] > 0, t["Xw"], t["W"]),
                   ints={"Z": np.array(0.0, np.float32)}))
    # ---- reductions ----
    cs.append(Case("reducesum_axis1", rn(2, 3, 4), [N("ReduceSum", ["Xw", "ax"], keepdims=0)], {},
                   lambda t: t["Xw"].sum(1), ints={"ax": i64(1)}))
    cs.append(Case("reducemean_02_keep", rn(2, 3, 4), [N("ReduceMean", ["Xw"], axes=[0, 2], keepdims=1)], {},
                   lambda t: t["Xw"].mean((0, 2), keepdim=True)))
    cs.append(Case("reducesum_all", rn(2, 3), [N("ReduceSum", ["Xw"], keepdims=1)], {},
                   lambda t: t["Xw"].sum().reshape(1, 1)))
    cs.append(Case("reducesumsquare", rn(2, 3, 4), [N("ReduceSumSquare", ["Xw"], axes=[1], keepdims=0)], {},
                   lambda t: (t["Xw"] ** 2).sum(1)))
    cs.append(Case("reducel2", rn(2, 3, 4), [N("ReduceL2", ["Xw"], axes=[2], keepdims=1)], {},
                   lambda t: t["Xw"].norm(dim=2, keepdim=True)))
    cs.append(Case("reducelogsumexp", rn(2, 3, 4), [N("ReduceLogSumExp", ["Xw"], axes=[0, 2], keepdims=0)], {},
                   lambda t: torch.logsumexp(t["Xw"], (0, 2))))
    cs.append(Case("reducemax", rn(2, 3, 4), [N("ReduceMax", ["Xw"], axes=[1], keepdims=0)], {},
                   lambda t: t["Xw"].amax(1)))
    cs.append(Case("reducemin_all", rn(2, 3), [N("ReduceMin", ["Xw"], keepdims=1)], {},
                   lambda t: t["Xw"].amin((0, 1), keepdim=True)))
    cs.append(Case("sin_cos", rn(3, 4), [N("Sin", ["Xw"], ["a"]), N("Cos", ["a"])], {},
                   lambda t: torch.cos(torch.sin(t["Xw"]))))
    cs.append(Case("gather_elements", rn(3, 4), [N("GatherElements", ["Xw", "idx"], axis=1)], {},
                   lambda t: torch.gather(t["Xw"], 1, torch.tensor([[0, 0], [3, 1], [2, 2]])),
                   ints={"idx": i64(0, 0, 3, 1, 2, 2).reshape(3, 2)}))
    # ---- data movement ----
    cs.append(Case("concat_axis1", rn(2, 3, 2), [N("Concat", ["Xw", "W", "Xw"], axis=1)], {"W": rn(2, 4, 2)},
                   lambda t: torch.cat([t["Xw"], t["W"], t["Xw"]], 1)))
    cs.append(Case("split_unused_output", rn(2, 5), [N("Split", ["Xw", "sp"], ["a", "b"], axis=1),
                                                     N("Mul", ["b", "b"])], {},
                   lambda t: t["Xw"][:, 2:] * t["Xw"][:, 2:], ints={"sp": i64(2, 3)}))
    cs.append(Case("slice_neg", rn(4, 6), [N("Slice", ["Xw", "st", "en", "ax"])], {},
                   lambda t: t["Xw"][1:3, -4:-1], ints={"st": i64(1, -4), "en": i64(3, -1), "ax": i64(0, 1)}))
    cs.append(Case("slice_steps", rn(2, 7, 8, 3), [N("Slice", ["Xw", "st", "en", "ax", "sp"])], {},
                   lambda t: t["Xw"][:, 0::2, 1::3, :],
                   ints={"st": i64(0, 1), "en": i64(7, 8), "ax": i64(1, 2), "sp": i64(2, 3)}))
    cs.append(Case("slice_negative_steps", rn(3, 9, 4), [N("Slice", ["Xw", "st", "en", "ax", "sp"])], {},
                   lambda t: t["Xw"].flip(1)[:, 1:8:3].flip(2)[..., 0:3],
                   ints={"st": i64(-2, 9), "en": i64(-9, -4), "ax": i64(1, 2), "sp": i64(-3, -1)}))
    cs.append(Case("reshape_transpose", rn(2, 3, 4),
                   [N("Reshape", ["Xw", "sh"], ["a"]), N("Transpose", ["a"], perm=[2, 0, 1])], {},
                   lambda t: t["Xw"].reshape(4, 6, 1).permute(2, 0, 1), ints={"sh": i64(4, 6, 1)}))
    cs.append(Case("squeeze_unsqueeze_flatten", rn(2, 1, 3),
                   [N("Squeeze", ["Xw", "a1"], ["a"]), N("Unsqueeze", ["a", "a0"], ["b"]), N("Flatten", ["b"], axis=2)],
                   {}, lambda t: t["Xw"].reshape(2, 3),
                   ints={"a1": i64(1), "a0": i64(0)}))
    cs.append(Case("gather_axis0_weight", rn(2, 3), [N("Gather", ["E", "idx"], ["e"]), N("Mul", ["e", "Xw"])],
                   {"E": rn(5, 3)}, lambda t: t["E"][torch.tensor([[1, 4], [1, 0]])] * t["Xw"],
                   ints={"idx": i64(1, 4, 1, 0).reshape(2, 2)}))
    cs.append(Case("gather_axis1", rn(3, 5, 2), [N("Gather", ["Xw", "idx"], axis=1)], {},
                   lambda t: t["Xw"][:, torch.tensor([[4, 0], [4, 2]])], ints={"idx": i64(4, 0, 4, 2).reshape(2, 2)}))
    cs.append(Case("gather_scalar", rn(3, 5), [N("Gather", ["Xw", "idx"], axis=1)], {},
                   lambda t: t["Xw"][:, 3], ints={"idx": np.array(3, np.int64)}))
    cs.append(Case("expand", rn(3, 1), [N("Expand", ["Xw", "sh"])], {}, lambda t: t["Xw"].expand(2, 3, 4),
                   ints={"sh": i64(2, 3, 4)}))
    cs.append(Case("pad", rn(2, 3), [N("Pad", ["Xw", "p"])], {}, lambda t: F.pad(t["Xw"], (2, 0, 1, 1)),
                   ints={"p": i64(1, 2, 1, 0)}))
    # ---- more activations and ops ----
    cs.append(Case("clip_relu6", rn(3, 5) * 4, [N("Clip", ["Xw", "lo", "hi"])], {}, lambda t: F.relu6(t["Xw"]),
                   ints={"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}))
    cs.append(Case("gelu_op", rn(3, 5), [N("Gelu", ["Xw"])], {}, lambda t: F.gelu(t["Xw"]), opset=20))
    cs.append(Case("elu", rn(3, 5), [N("Elu", ["Xw"], alpha=0.7)], {}, lambda t: F.elu(t["Xw"], 0.7)))
    cs.append(Case("selu", rn(3, 5), [N("Selu", ["Xw"])], {}, lambda t: F.selu(t["Xw"])))
    cs.append(Case("hardsigmoid", rn(3, 5) * 4, [N("HardSigmoid", ["Xw"], alpha=1 / 6, beta=0.5)], {},
                   lambda t: F.hardsigmoid(t["Xw"])))
    cs.append(Case("hardswish", rn(3, 5) * 4, [N("HardSwish", ["Xw"])], {}, lambda t: F.hardswish(t["Xw"])))
    cs.append(Case("prelu", rn(2, 3, 4), [N("PRelu", ["Xw", "W"])], {"W": rn(3, 1, lo=0.1)},
                   lambda t: torch.where(t["Xw"] > 0, t["Xw"], t["Xw"] * t["W"])))
    cs.append(Case("sum_mean_variadic", rn(2, 3), [N("Sum", ["Xw", "W", "Xw"], ["a"]), N("Mean", ["a", "W"])],
                   {"W": rn(3)}, lambda t: (t["Xw"] + t["W"] + t["Xw"] + t["W"]) / 2))
    cs.append(Case("cumsum_reverse", rn(3, 4), [N("CumSum", ["Xw", "ax"], reverse=1)], {},
                   lambda t: t["Xw"].flip(1).cumsum(1).flip(1), ints={"ax": np.array(1, np.int64)}))
    cs.append(Case("tile", rn(2, 3), [N("Tile", ["Xw", "r"])], {}, lambda t: t["Xw"].repeat(2, 3),
                   ints={"r": i64(2, 3)}))
    cs.append(Case("instancenorm", rn(2, 3, 4, 5), [N("InstanceNormalization", ["Xw", "S", "B"])],
                   {"S": rn(3), "B": rn(3)}, lambda t: F.instance_norm(t["Xw"], weight=t["S"], bias=t["B"])))
    cs.append(Case("convtranspose", rn(2, 3, 5, 4),
                   [N("ConvTranspose", ["Xw", "W", "B"], strides=[2, 2], pads=[1, 0, 1, 1], output_padding=[1, 0],
                      dilations=[1, 2])], {"W": rn(3, 4, 3, 3), "B": rn(4)},
                   lambda t: F.conv_transpose2d(t["Xw"], t["W"], t["B"], stride=2, output_padding=(1, 0),
                                                dilation=(1, 2))[:, :, 1:-1, 0:-1]))
    cs.append(Case("dropout_training_ratio0", rn(3, 4),
                   [N("Dropout", ["Xw", "r", "tm"], ["Y", "mask"])], {}, lambda t: t["Xw"],
                   ints={"r": np.array(0.0, np.float32), "tm": np.array(True)}))
    cs.append(Case("lpnorm2", rn(3, 4, 5), [N("LpNormalization", ["Xw"], axis=1, p=2)], {},
                   lambda t: F.normalize(t["Xw"], p=2.0, dim=1, eps=0.0), opset=22))
    cs.append(Case("lpnorm1", rn(3, 4), [N("LpNormalization", ["Xw"], p=1)], {},
                   lambda t: F.normalize(t["Xw"], p=1.0, dim=-1, eps=0.0)))
    # ---- opsets 23 and 24: written in other ops (passes/lower/lower_llm.c) ----
    cs.append(Case("rmsnorm", rn(3, 4, 5), [N("RMSNormalization", ["Xw", "S"], epsilon=1e-5)], {"S": rn(5)},
                   lambda t: t["Xw"] / torch.sqrt((t["Xw"] * t["Xw"]).mean(-1, keepdim=True) + 1e-5) * t["S"],
                   opset=23))
    cs.append(Case("swish", rn(3, 4), [N("Swish", ["Xw"], alpha=1.5)], {},
                   lambda t: t["Xw"] * torch.sigmoid(1.5 * t["Xw"]), opset=24))
    ang = np.outer(np.arange(6), [1.0, 0.1]).astype(np.float32)
    pos = i64(4, 0, 2, 1, 5, 3).reshape(2, 3)

    def rope(t):  # [B, H, S, D] in halves, the caches at pos
        x = t["Xw"]
        c = torch.tensor(np.cos(ang)[pos])[:, None]
        s_ = torch.tensor(np.sin(ang)[pos])[:, None]
        x1, x2 = x[..., :2], x[..., 2:]
        return torch.cat([c * x1 - s_ * x2, s_ * x1 + c * x2], -1)
    def sdpa_causal(t):  # Attention-23 on [B, H, S, D], Q = K = V, causal
        x = t["Xw"]
        sc = x @ x.transpose(-1, -2) / np.sqrt(x.shape[-1])
        allowed = torch.tril(torch.ones(sc.shape[-2:], dtype=torch.bool))
        return torch.softmax(sc.masked_fill(~allowed, float("-inf")), -1) @ x
    cs.append(Case("attention_causal", rn(2, 2, 4, 3), [N("Attention", ["Xw", "Xw", "Xw"], is_causal=1)], {},
                   sdpa_causal, opset=23))

    def gqa_softcap(t):  # 3D GQA (4 query heads, 2 key/value heads), softcap, K and V trained
        q = t["Xw"].reshape(2, 3, 4, 2).transpose(1, 2)
        k = (t["Xw"][..., :4] @ t["Wk"]).reshape(2, 3, 2, 2).transpose(1, 2).repeat_interleave(2, 1)
        v = (t["Xw"][..., :4] @ t["Wv"]).reshape(2, 3, 2, 2).transpose(1, 2).repeat_interleave(2, 1)
        sc = q @ k.transpose(-1, -2) * 0.5
        sc = 3.0 * torch.tanh(sc / 3.0)
        return (torch.softmax(sc, -1) @ v).transpose(1, 2).reshape(2, 3, 8)
    cs.append(Case("attention_gqa_softcap", rn(2, 3, 8),
                   [N("Slice", ["Xw", "z", "f", "two"], ["x4"]), N("MatMul", ["x4", "Wk"], ["k"]),
                    N("MatMul", ["x4", "Wv"], ["v"]),
                    N("Attention", ["Xw", "k", "v"], q_num_heads=4, kv_num_heads=2, scale=0.5, softcap=3.0)],
                   {"Wk": rn(4, 4), "Wv": rn(4, 4)}, gqa_softcap, opset=23,
                   ints={"z": i64(0), "f": i64(4), "two": i64(2)}))
    cs.append(Case("rotary_embedding", rn(2, 2, 3, 4), [N("RotaryEmbedding", ["Xw", "cos", "sin", "pos"])], {},
                   rope, opset=23, ints={"cos": np.cos(ang), "sin": np.sin(ang), "pos": pos}))
    # ---- opsets 24 to 28: written in other ops (passes/lower/lower_llm_state.c) ----
    cs.append(Case("swiglu", rn(3, 6), [N("Mul", ["Xw", "Wb"], ["b"]), N("SwiGLU", ["Xw", "b"], alpha=1.702)],
                   {"Wb": rn(3, 6)}, lambda t: t["Xw"] * torch.sigmoid(1.702 * t["Xw"]) * (t["Xw"] * t["Wb"]),
                   opset=28))

    def causal_conv(t):  # past state before X, depthwise, SiLU
        y = F.conv1d(torch.cat([t["P"], t["Xw"]], 2), t["W"], t["B"], groups=3)
        return y * torch.sigmoid(y)
    cs.append(Case("causal_conv_with_state", rn(2, 3, 5),
                   [N("CausalConvWithState", ["Xw", "W", "B", "P"], ["Y", "st"], activation="silu")],
                   {"W": rn(3, 1, 3), "B": rn(3), "P": rn(2, 3, 2)}, causal_conv, opset=27))
    wi = i64(1, 3)

    def tensor_scatter(t):  # circular, the update written from wi[b] on
        rows = []
        for b in range(2):
            pos_ = [(int(wi[b]) + s_) % 4 for s_ in range(2)]
            rows.append(torch.stack([t["U"][b, :, pos_.index(m)] if m in pos_ else t["Xw"][b, :, m]
                                     for m in range(4)], 1))
        return torch.stack(rows)
    cs.append(Case("tensor_scatter", rn(2, 3, 4, 2), [N("TensorScatter", ["Xw", "U", "wi"], mode="circular")],
                   {"U": rn(2, 3, 2, 2)}, tensor_scatter, opset=24, ints={"wi": wi}))

    def linear_attention(t):  # gated_delta, 2 query heads on 1 key/value head, T = 3
        q = t["Xw"].reshape(2, 3, 2, 4)
        k = (t["Xw"][..., :4] * t["Wk"])
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True))
        v = t["Xw"][..., 4:] * t["Wv"]
        st = torch.zeros(2, 4, 4)
        ys = []
        for i in range(3):
            st = st * torch.exp(t["G"][:, i, 0])[:, None, None]
            u = t["Be"][:, i, :1] * (v[:, i] - torch.einsum("bkv,bk->bv", st, k[:, i]))
            st = st + k[:, i][:, :, None] * u[:, None, :]
            ys.append(torch.einsum("bhk,bkv->bhv", q[:, i], st) * 0.5)
        return torch.stack(ys, 1).reshape(2, 3, 8)
    cs.append(Case("linear_attention", rn(2, 3, 8),
                   [N("Slice", ["Xw", "z", "f", "two"], ["x4"]), N("Slice", ["Xw", "f", "e", "two"], ["x5"]),
                    N("Mul", ["x4", "Wk"], ["k0"]), N("Mul", ["k0", "k0"], ["kk"]),
                    N("ReduceSum", ["kk", "two"], ["ks"], keepdims=1), N("Sqrt", ["ks"], ["kn"]),
                    N("Div", ["k0", "kn"], ["k"]), N("Mul", ["x5", "Wv"], ["v"]),
                    N("LinearAttention", ["Xw", "k", "v", "", "G", "Be"], ["Y", "st"], q_num_heads=2,
                      kv_num_heads=1)],
                   {"Wk": rn(2, 3, 4), "Wv": rn(2, 3, 4), "G": -rn(2, 3, 1, lo=0.05) * 0.3,
                    "Be": rn(2, 3, 1, lo=0.2) * 0.5}, linear_attention, opset=27,
                   ints={"z": i64(0), "f": i64(4), "e": i64(8), "two": i64(2)}))

    def flex(t):  # FlexAttention (ai.onnx.preview): GQA, a softcap score_mod, K and V trained
        q = t["Xw"]
        k = t["Xw"][:, :2] * t["Wk"]
        v = t["Xw"][:, :2] * t["Wv"]
        k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
        sc = (q * np.sqrt(np.float32(0.4))) @ (k * np.sqrt(np.float32(0.4))).transpose(-1, -2)
        return torch.softmax(2.0 * torch.tanh(sc / 2.0), -1) @ v
    cap = helper.make_tensor("cap", TensorProto.FLOAT, [], [2.0])
    fvi = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    smod = helper.make_graph([N("Div", ["s", "cap"], ["d"]), N("Tanh", ["d"], ["th"]), N("Mul", ["th", "cap"], ["so"])],
                             "score_mod", [fvi("s")], [fvi("so")], [cap])
    cs.append(Case("flex_attention", rn(2, 4, 3, 4),
                   [N("Slice", ["Xw", "z", "two", "one"], ["x2"]), N("Mul", ["x2", "Wk"], ["k"]),
                    N("Mul", ["x2", "Wv"], ["v"]),
                    helper.make_node("FlexAttention", ["Xw", "k", "v"], ["Y"], domain="ai.onnx.preview", scale=0.4,
                                     score_mod=smod)],
                   {"Wk": rn(2, 2, 3, 4), "Wv": rn(2, 2, 3, 4)}, flex, opset=27,
                   ints={"z": i64(0), "two": i64(2), "one": i64(1)}, extra_opsets=[("ai.onnx.preview", 1)]))
    return cs


def build(c, path):
    w0 = (1 + 0.1 * R.standard_normal(c.x.shape)).astype(np.float32)
    weights = {"W0": w0, **c.weights}
    nodes = [N("Constant", [], [k], value=numpy_helper.from_array(v, k)) for k, v in c.ints.items()]
    nodes += [N("Mul", ["X", "W0"], ["Xw"])] + c.nodes
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    g = helper.make_graph(nodes, c.name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, c.x.shape)],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", c.opset)] +
                          [helper.make_opsetid(d, v) for d, v in c.extra_opsets])
    m.ir_version = 8
    onnx.save(m, path)
    return weights


def ref(c, weights, target):
    t = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    x = torch.tensor(c.x)
    t["Xw"] = x * t["W0"]
    y = c.fn(t)
    loss = F.mse_loss(y, torch.tensor(target))
    loss.backward()
    return float(loss), {k: t[k].grad.numpy() for k in weights if t[k].grad is not None}, y.detach().numpy()


def named_loss_cases(a):
    """A loss already in the graph, named with --loss NAME: SoftmaxCrossEntropyLoss and
    LogSoftmax + NegativeLogLikelihoodLoss (lowered by pipecc), and an MSE written as ops."""
    bad = []
    x = rn(6, 5)
    w, b = rn(4, 5), rn(4)
    lab = R.integers(0, 4, size=(6,)).astype(np.int64)
    graphs = {
        "named_sce_mean": ([N("Gemm", ["X", "W", "B"], ["s"], transB=1),
                            N("SoftmaxCrossEntropyLoss", ["s", "labels"], ["L"])], True),
        "named_nll_sum": ([N("Gemm", ["X", "W", "B"], ["s"], transB=1), N("LogSoftmax", ["s"], ["ls"], axis=1),
                           N("NegativeLogLikelihoodLoss", ["ls", "labels"], ["L"], reduction="sum")], True),
        "named_scalar_ops": ([N("Gemm", ["X", "W", "B"], ["s"], transB=1), N("Mul", ["s", "s"], ["q"]),
                              N("ReduceMean", ["q"], ["L"], keepdims=0)], False),
    }
    for name, (nodes, with_labels) in graphs.items():
        if a.k not in name:
            continue
        d = os.path.join(a.work, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        ins = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)]
        if with_labels:
            ins.append(helper.make_tensor_value_info("labels", TensorProto.INT64, lab.shape))
        g = helper.make_graph(nodes, name, ins, [helper.make_tensor_value_info("L", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        path = os.path.join(d, "m.onnx")
        onnx.save(m, path)
        tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
        sc = torch.tensor(x) @ tw.T + tb
        if name == "named_sce_mean":
            loss = F.cross_entropy(sc, torch.tensor(lab))
        elif name == "named_nll_sum":
            loss = F.nll_loss(torch.log_softmax(sc, 1), torch.tensor(lab), reduction="sum")
        else:
            loss = (sc * sc).mean()
        loss.backward()
        out = os.path.join(d, "g1")
        r = subprocess.run([a.pipecc, path, "-g", "1", "-o", out, "-j", "2", "--train-step", "--loss", "L", "--lr", "0.1"],
                           capture_output=True, text=True)
        feeds = {"X": x, "labels": lab} if with_labels else {"X": x}
        save_npz(os.path.join(d, "in.npz"), feeds)
        if not r.returncode:
            r = subprocess.run([os.path.join(out, "pipeline"), "--input", os.path.join(d, "in.npz"), "--output",
                                os.path.join(d, "out.npz")], capture_output=True, text=True)
        if r.returncode:
            print(r.stderr[-3000:])
            print(f"FAIL {name}")
            bad.append(name)
            continue
        res = dict(np.load(os.path.join(d, "out.npz")))
        lk = [k for k in res if not k.startswith(("grad/", "new/"))][0]
        errs = {"loss": pt.rel_l2(res[lk], float(loss)), "W": pt.rel_l2(res["grad/W"], tw.grad.numpy()),
                "B": pt.rel_l2(res["grad/B"], tb.grad.numpy())}
        worst = max(errs.values())
        ok = worst <= a.tol
        if not ok:
            bad.append(name)
        print(f"{'ok  ' if ok else 'FAIL'} {name:32s} max rel-L2 {worst:.2e}" + ("" if ok else f"  {errs}"))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("-k", default="")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    bad = []
    for c in cases():
        if a.k not in c.name:
            continue
        d = os.path.join(a.work, c.name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        path = os.path.join(d, "m.onnx")
        weights = build(c, path)
        # the target has the output's shape: take it from torch
        t = {k: torch.tensor(v) for k, v in weights.items()}
        t["Xw"] = torch.tensor(c.x) * t["W0"]
        yshape = tuple(c.fn(t).shape)
        target = R.standard_normal(yshape).astype(np.float32)
        loss, grads, _ = ref(c, weights, target)
        res = pt.train_step(a.pipecc, path, d, {"X": c.x, "labels": target}, c.name)
        if res is None:
            bad.append(c.name)
            continue
        errs = {"loss": pt.rel_l2(res["loss"], loss)}
        for k, gref in grads.items():
            if f"grad/{k}" not in res:
                errs[k] = float("inf")
                continue
            errs[k] = pt.rel_l2(res[f"grad/{k}"], gref)
        worst = max(errs.values())
        ok = worst <= a.tol
        if not ok:
            bad.append(c.name)
        print(f"{'ok  ' if ok else 'FAIL'} {c.name:32s} max rel-L2 {worst:.2e}" +
              ("" if ok else "  " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items())))
    bad += named_loss_cases(a)
    if bad:
        print("FAILED:", ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
