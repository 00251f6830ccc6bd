#!/usr/bin/python3
"""Signal-processing models (passes/lower/lower_signal.c: DFT, STFT, the window functions and
MelWeightMatrix written as constants, Gather and MatMul with constant cos / sin
matrices) against onnxruntime running the same model; each compiled with -g 1 and -g 2
(default micro-batches, so a batch of 4 runs in slices) and run.

The PyTorch here (1.13) does not export aten::stft or aten::fft_rfft to ONNX (at opset 17
it stops with "not supported"), so the models are built with onnx.helper, as an
exporter that knows these ops writes them (torch.stft(..., return_complex=False) ->
STFT [B, frames, bins, 2]; torch.view_as_real(torch.fft.rfft(x)) -> Unsqueeze + DFT
onesided):

  log_mel        audio frontend: signal [4, 400] -> Unsqueeze -> STFT (HannWindow 64,
                 hop 16, onesided) -> re^2 + im^2 -> MatMul MelWeightMatrix (16 bands,
                 16 kHz) -> Log -> a linear layer per frame
  rfft           rfft over the last axis of [4, 3, 32] (DFT-17, axis 2, onesided), and
                 the same along axis 1 at opset 20 (axis and dft_length 40 as inputs:
                 zero-padded), both outputs
  fft_filter     a low-pass filter: DFT-20 of [4, 48, 1] (real, full), times a constant
                 gain per bin, inverse DFT (complex), real part; plus a BlackmanWindow
                 symmetric window (float64 -> Cast) on the input first
  stft_complex   STFT of a complex signal [4, 100, 2], frame_length 20, step 6, a
                 HammingWindow, two-sided

Tolerance: rel-L2 1e-5. A DFT by matrix product (twiddles computed in double, rounded
once to float) sums n float32 products per bin: a relative rms error of about
eps * sqrt(n) (eps = 6e-8, n <= 64: under 5e-7; measured against a float64 numpy
reference: 1e-7 to 2e-7). onnxruntime's own float32 error is larger where n is not a
power of two (measured against float64: 2.4e-6 for stft_complex, n = 20; 1.9e-6 for
fft_filter, n = 48), and the two differ by about that much. 1e-5 leaves a margin of 4
over it while catching any wrong bin, sign, scale or frame (errors of order 1).

    signal_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]"""

import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402

F32 = TensorProto.FLOAT


def c64(v):
    return np.array(v, np.int64)


def build(nodes, x_shape, x_type, outputs, inits, opset):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                          [helper.make_tensor_value_info(n, F32, None) for n in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)


def case(name):
    """(model, input array)"""
    rng = np.random.default_rng(11)
    if name == "log_mel":
        # onesided written out: onnx's shape inference takes STFT's default as 0
        nodes = [helper.make_node("Unsqueeze", ["x", "ax2"], ["s"]),
                 helper.make_node("HannWindow", ["nfft"], ["w"]),
                 helper.make_node("STFT", ["s", "hop", "w"], ["z"], onesided=1),
                 helper.make_node("Mul", ["z", "z"], ["z2"]),
                 helper.make_node("ReduceSum", ["z2", "last"], ["p"], keepdims=0),
                 helper.make_node("MelWeightMatrix", ["bands", "nfft", "rate", "lo", "hi"], ["mw"]),
                 helper.make_node("MatMul", ["p", "mw"], ["mel"]),
                 helper.make_node("Add", ["mel", "eps"], ["me"]),
                 helper.make_node("Log", ["me"], ["lm"]),
                 helper.make_node("MatMul", ["lm", "fc"], ["y"])]
        inits = {"ax2": c64([2]), "nfft": c64(64), "hop": c64(16), "last": c64([-1]), "bands": c64(16),
                 "rate": c64(16000), "lo": np.array(30, np.float32), "hi": np.array(7000, np.float32),
                 "eps": np.array(1e-3, np.float32), "fc": (rng.standard_normal((16, 5)) * 0.3).astype(np.float32)}
        return build(nodes, [4, 400], F32, ["y"], inits, 17), rng.standard_normal((4, 400)).astype(np.float32)
    if name == "rfft":
        nodes = [helper.make_node("Unsqueeze", ["x", "ax3"], ["s"]),
                 helper.make_node("DFT", ["s"], ["y"], axis=2, onesided=1)]
        m17 = build(nodes, [4, 3, 32], F32, ["y"], {"ax3": c64([3])}, 17)
        nodes20 = [helper.make_node("Unsqueeze", ["x", "ax3"], ["s"]),
                   helper.make_node("DFT", ["s", "n", "a"], ["y"], onesided=1)]
        # the same rfft at opset 20 along axis 1 (3 -> 40 points): a second model, one output each
        m20 = build(nodes20, [4, 3, 32], F32, ["y"], {"ax3": c64([3]), "n": c64(40), "a": c64(1)}, 20)
        return (m17, m20), rng.standard_normal((4, 3, 32)).astype(np.float32)
    if name == "fft_filter":
        gain = np.where(np.minimum(np.arange(48), 48 - np.arange(48)) <= 8, 1.0, 0.1).astype(np.float32)
        nodes = [helper.make_node("BlackmanWindow", ["len"], ["wd"], periodic=0, output_datatype=TensorProto.DOUBLE),
                 helper.make_node("Cast", ["wd"], ["w"], to=F32),
                 helper.make_node("Reshape", ["w", "wshape"], ["w2"]),
                 helper.make_node("Mul", ["x", "w2"], ["xw"]),
                 helper.make_node("DFT", ["xw", "", "a"], ["f"]),
                 helper.make_node("Mul", ["f", "gain"], ["fg"]),
                 helper.make_node("DFT", ["fg", "", "a"], ["t"], inverse=1),
                 helper.make_node("Slice", ["t", "z0", "z1", "last"], ["y"])]
        inits = {"len": c64(48), "wshape": c64([48, 1]), "a": c64(1), "gain": gain.reshape(48, 1),
                 "z0": c64([0]), "z1": c64([1]), "last": c64([-1])}
        return build(nodes, [4, 48, 1], F32, ["y"], inits, 20), rng.standard_normal((4, 48, 1)).astype(np.float32)
    assert name == "stft_complex"
    nodes = [helper.make_node("HammingWindow", ["fl"], ["w"], periodic=1),
             helper.make_node("STFT", ["x", "step", "w", "fl"], ["y"], onesided=0)]
    inits = {"fl": c64(20), "step": c64(6)}
    return build(nodes, [4, 100, 2], F32, ["y"], inits, 17), rng.standard_normal((4, 100, 2)).astype(np.float32)


def main():
    a = pt.case_args(1e-5)
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name in ("log_mel", "rfft", "fft_filter", "stft_complex"):
        if a.k and not re.search(a.k, name):
            continue
        models, x = case(name)
        models = models if isinstance(models, tuple) else (models,)
        for k, m in enumerate(models):
            label = name if len(models) == 1 else f"{name}_{k}"
            d = pt.case_dir(a.work, label)
            path = os.path.join(d, "model.onnx")
            onnx.save(m, path)
            print(f"     {label}: ops {', '.join(sorted({n.op_type for n in m.graph.node}))} (opset "
                  f"{m.opset_import[0].version})")
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            ref = {"y": ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]}
            xin = os.path.join(d, "x.npz")
            save_npz(xin, {"x": x})
            good = True
            for g in (1, 2):
                out = os.path.join(d, f"g{g}")
                cmd, env = pt.sim_target([a.pipecc, path, "-g", str(g), "-o", out, "-j", "1"], pt.split_env(),
                                         a.target, a.sim_lib)
                good &= pt.build_run_rel_l2(cmd, env, out, xin, ref, a.tol, f"{label} -g {g} vs onnxruntime")
            ok &= good
            pt.done_with(d, good)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
