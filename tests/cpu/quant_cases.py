#!/usr/bin/python3
"""Quantized models (passes/lower/quant.c: QuantizeLinear, DequantizeLinear, QLinearConv,
QLinearMatMul, ConvInteger, MatMulInteger and DynamicQuantizeLinear written in ordinary
ops) as onnxruntime's quantization tool makes them from PyTorch exports, against
onnxruntime running the same quantized model; each compiled with -g 1 and -g 2 (default
micro-batches) and run. The integer arithmetic is exact (products and sums in float64),
so the outputs must equal onnxruntime's bit for bit unless --tol allows more.

  qdq_cnn         quantize_static, QDQ format, int8 activations and weights per tensor
  qdq_cnn_perch   the same with uint8 activations and weights per output channel
  qop_convmatmul  quantize_static, QOperator format: QLinearConv and QLinearMatMul
  dynamic_mlp     quantize_dynamic: DynamicQuantizeLinear and MatMulInteger (a
                  quantization over the whole batch: one micro-batch, with a note)

    quant_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]"""

import os
import re
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402

X_SHAPE = {"cnn": (4, 3, 8, 8), "convmatmul": (4, 3, 8, 8), "mlp": (4, 6, 16)}


def module(kind):
    import torch
    torch.manual_seed(0)
    if kind == "cnn":
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.Conv2d(8, 8, 3, padding=1, stride=2), torch.nn.ReLU(),
                                   torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10))

    class ConvMatMul(torch.nn.Module):  # MatMul, not Linear: QOperator writes Gemm as com.microsoft QGemm
        def __init__(s):
            super().__init__()
            s.c = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
            s.w = torch.nn.Parameter(torch.randn(16, 10) * 0.2)

        def forward(s, x):
            return torch.relu(s.c(x)).flatten(2) @ s.w

    class MLP(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.w1, s.w2 = torch.nn.Parameter(torch.randn(16, 32) * 0.3), torch.nn.Parameter(torch.randn(32, 8) * 0.3)

        def forward(s, x):
            return torch.relu(x @ s.w1) @ s.w2

    return ConvMatMul() if kind == "convmatmul" else MLP()


def quantized(name, d):
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    kind = name.split("_", 1)[1].replace("_perch", "")
    f32 = os.path.join(d, "f32.onnx")
    torch.onnx.export(module(kind).eval(), (torch.zeros(X_SHAPE[kind]),), f32, input_names=["x"], output_names=["y"],
                      opset_version=17)
    path = os.path.join(d, "model.onnx")

    class Calib(CalibrationDataReader):
        def __init__(s):
            s.it = iter([{"x": np.random.default_rng(100 + i).standard_normal(X_SHAPE[kind]).astype(np.float32)}
                         for i in range(8)])

        def get_next(s):
            return next(s.it, None)

    if name.startswith("dynamic"):
        quantize_dynamic(f32, path, weight_type=QuantType.QInt8)
    else:
        perch = name.endswith("perch")
        quantize_static(f32, path, Calib(), quant_format=QuantFormat.QDQ if name.startswith("qdq") else QuantFormat.QOperator,
                        activation_type=QuantType.QUInt8 if perch else QuantType.QInt8, weight_type=QuantType.QInt8,
                        per_channel=perch)
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    return path, kind, ops


def ort_exact_ints(ort, path):
    """An onnxruntime session whose integer GEMMs keep exact int32 sums where it can:
    without VNNI its AVX2 u8s8 kernels add pairs of products in int16 with saturation
    (qdq_cnn off by rel-L2 3e-2 on an AMD EPYC with AVX2 only) unless asked to widen
    first; the widened kernels lack some type pairs (QLinearMatMul of int8 by uint8),
    where the default session is the reference."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.x64quantprecision", "1")
    try:
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's NotImplemented has no public class
        if "NOT_IMPLEMENTED" not in str(e):
            raise
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def main():
    a = pt.case_args(0.0)
    import logging
    logging.getLogger().setLevel(logging.ERROR)  # the quantization tool's advice
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name in ("qdq_cnn", "qdq_cnn_perch", "qop_convmatmul", "dynamic_mlp"):
        if a.k and not re.search(a.k, name):
            continue
        d = pt.case_dir(a.work, name)
        path, kind, ops = quantized(name, d)
        print(f"     {name}: ops {', '.join(ops)}")
        x = np.random.default_rng(7).standard_normal(X_SHAPE[kind]).astype(np.float32)
        ref = {"y": ort_exact_ints(ort, path).run(None, {"x": x})[0]}
        xin = os.path.join(d, "x.npz")
        save_npz(xin, {"x": x})
        good = True
        for g in (1, 2):
            out = os.path.join(d, f"g{g}")
            cmd, env = pt.sim_target([a.pipecc, path, "-g", str(g), "-o", out, "-j", "1"], pt.split_env(), a.target,
                                     a.sim_lib)
            good &= pt.build_run_rel_l2(cmd, env, out, xin, ref, a.tol, f"{name} -g {g} vs onnxruntime")
        ok &= good
        pt.done_with(d, good)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
