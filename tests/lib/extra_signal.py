"""Extra models for the signal ops passes/lower/lower_signal.c writes in other ops, beyond the
ONNX node tests: DFT complex along a middle axis with zero-padding (opset 20, axis an
input), cut to an odd length and onesided in double, inverse along a negative axis, a
rank-2 signal (axis 0), float16; STFT of a complex signal two-sided, with a window fed at
run time, with a constant Hamming window and an odd step; the window functions in
double, float16 and int32 (Cast truncates) and symmetric of size 1 (NaN, as the ONNX
function body gives); MelWeightMatrix in double; and a log-mel spectrogram (HannWindow ->
STFT -> power -> MatMul with MelWeightMatrix). Expected outputs come from onnxruntime
(tests/lib/extra_models.py).

DFT sizes stay at or below 40 points with inputs of unit scale, so the float32 roundoff
of a DFT by matrix product (about sqrt(n) * 6e-8 * |X|) stays well inside the node tests'
tolerance (rtol 1e-4, atol 1e-5). STFT's onesided is written out: onnx's shape inference
(which gives the models their output shapes) takes its default as 0, the spec and
onnxruntime as 1."""
import numpy as np
from onnx import TensorProto, helper


def models(model, rng):
    f32, f16, f64, i64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT64
    out = []

    def c64(v):
        return np.array(v, np.int64)

    # DFT-20, complex [2, 12, 3, 2] along axis 1 (an input), zero-padded to 16: the axis moved
    # next to (re, im) and back
    x = rng.standard_normal((2, 12, 3, 2)).astype(np.float32)
    out.append(("extra_dft_complex_axis_pad", model("g", [
        helper.make_node("DFT", ["x", "n", "a"], ["y"])],
        [("x", f32, x.shape)], [("y", f32)], [("n", c64(16)), ("a", c64(1))], opset=20), {"x": x}))
    # DFT-17 in double, real, cut from 20 to 15 points, onesided (8 bins)
    x = rng.standard_normal((3, 20, 1))
    out.append(("extra_dft_double_cut_onesided", model("g", [
        helper.make_node("DFT", ["x", "n"], ["y"], axis=1, onesided=1)],
        [("x", f64, x.shape)], [("y", f64)], [("n", c64(15))], opset=17), {"x": x}))
    # DFT-20 inverse, complex, axis -3 of rank 4 (axis 1), default length
    x = rng.standard_normal((2, 10, 4, 2)).astype(np.float32)
    out.append(("extra_dft_inverse_negative_axis", model("g", [
        helper.make_node("DFT", ["x", "", "a"], ["y"], inverse=1)],
        [("x", f32, x.shape)], [("y", f32)], [("a", c64(-3))], opset=20), {"x": x}))
    # DFT-17 of a rank-2 complex signal [9, 2], axis 0: a vector times the matrix
    x = rng.standard_normal((9, 2)).astype(np.float32)
    out.append(("extra_dft_rank2", model("g", [
        helper.make_node("DFT", ["x"], ["y"], axis=0)],
        [("x", f32, x.shape)], [("y", f32)], opset=17), {"x": x}))
    # DFT-17 of a float16 signal with small integers (exact in float16 at every step)
    x = rng.integers(-3, 4, (2, 8, 1)).astype(np.float16)
    out.append(("extra_dft_float16", model("g", [
        helper.make_node("DFT", ["x"], ["y"], axis=1)],
        [("x", f16, x.shape)], [("y", f16)], opset=17), {"x": x}))

    # STFT, complex signal, two-sided, frame_length 16, step 4, no window
    s = rng.standard_normal((2, 40, 2)).astype(np.float32)
    out.append(("extra_stft_complex_twosided", model("g", [
        helper.make_node("STFT", ["s", "st", "", "fl"], ["y"], onesided=0)],
        [("s", f32, s.shape)], [("y", f32)], [("st", c64(4)), ("fl", c64(16))], opset=17), {"s": s}))
    # STFT with the window a graph input (multiplied at run time), step 5 (the last
    # samples in no frame)
    s = rng.standard_normal((3, 64, 1)).astype(np.float32)
    w = rng.uniform(0, 1, 12).astype(np.float32)
    out.append(("extra_stft_window_input", model("g", [
        helper.make_node("STFT", ["s", "st", "w"], ["y"], onesided=1)],
        [("s", f32, s.shape), ("w", f32, w.shape)], [("y", f32)], [("st", c64(5))], opset=17), {"s": s, "w": w}))
    # STFT with a constant Hamming window (folded into the DFT matrix) and frame_length
    # given too, odd frame length 15, step 7, in double
    s = rng.standard_normal((2, 50, 1))
    out.append(("extra_stft_const_window_double", model("g", [
        helper.make_node("STFT", ["s", "st", "w", "fl"], ["y"], onesided=1)],
        [("s", f64, s.shape)], [("y", f64)], [("st", c64(7)), ("w", np.hamming(15)), ("fl", c64(15))], opset=17),
        {"s": s}))

    # window functions: double symmetric, float16 periodic, int32 (truncated), size 1 symmetric (NaN)
    for op, kw, dt, n in (("BlackmanWindow", dict(periodic=0, output_datatype=f64), f64, 9),
                          ("HammingWindow", dict(output_datatype=f16), f16, 11),
                          ("HannWindow", dict(output_datatype=TensorProto.INT32), TensorProto.INT32, 4),
                          ("HannWindow", dict(periodic=0), f32, 1)):
        name = f"extra_{op.lower()}_{TensorProto.DataType.Name(dt).lower()}_{n}"
        x = rng.standard_normal((2,)).astype(np.float32)
        out.append((name, model("g", [
            helper.make_node(op, ["n"], ["w"], **kw),
            helper.make_node("Identity", ["x"], ["y"])],
            [("x", f32, x.shape)], [("w", dt), ("y", f32)], [("n", c64(n))], opset=17), {"x": x}))

    # MelWeightMatrix in double: 20 bands over 20 Hz .. 7600 Hz of a 512-point DFT at 16 kHz
    x = rng.standard_normal((2,)).astype(np.float32)
    out.append(("extra_melweightmatrix_double", model("g", [
        helper.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["w"], output_datatype=f64),
        helper.make_node("Identity", ["x"], ["y"])],
        [("x", f32, x.shape)], [("w", f64), ("y", f32)],
        [("m", np.array(20, np.int32)), ("d", np.array(512, np.int32)), ("r", np.array(16000, np.int32)),
         ("lo", np.array(20, np.float32)), ("hi", np.array(7600, np.float32))], opset=17), {"x": x}))

    # log-mel spectrogram: Hann window (an op) -> STFT (32-point frames, step 8) -> re^2 + im^2
    # -> MatMul with an 8-band MelWeightMatrix -> Log(+1e-3)
    s = rng.standard_normal((2, 96, 1)).astype(np.float32)
    out.append(("extra_log_mel_spectrogram", model("g", [
        helper.make_node("HannWindow", ["fl"], ["w"]),
        helper.make_node("STFT", ["s", "st", "w"], ["z"], onesided=1),
        helper.make_node("Mul", ["z", "z"], ["z2"]),
        helper.make_node("ReduceSum", ["z2", "last"], ["p"], keepdims=0),
        helper.make_node("MelWeightMatrix", ["m", "fl", "r", "lo", "hi"], ["mw"]),
        helper.make_node("MatMul", ["p", "mw"], ["mel"]),
        helper.make_node("Add", ["mel", "eps"], ["me"]),
        helper.make_node("Log", ["me"], ["y"])],
        [("s", f32, s.shape)], [("y", f32)],
        [("fl", c64(32)), ("st", c64(8)), ("last", c64([-1])), ("m", c64(8)), ("r", c64(8000)),
         ("lo", np.array(0, np.float32)), ("hi", np.array(4000, np.float32)), ("eps", np.array(1e-3, np.float32))],
        opset=17), {"s": s}))
    return out
