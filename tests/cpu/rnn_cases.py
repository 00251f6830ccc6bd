#!/usr/bin/python3
"""RNN, GRU and LSTM attribute cases the ONNX node tests leave out (bidirectional and
reverse directions, layout 1, clip, input_forget, peepholes with Y_c, sequence_lens
shorter than the sequence, initial states, linear_before_reset 0 and 1, non-default
activations with alpha), each a one-node model built here, compiled by pipecc (one stage,
one micro-batch) and compared with onnxruntime (rel-L2 <= --tol per output). Also checks
that an activation pipecc does not support fails with one line naming the node, exit 2.
(Training through these ops: tests/train/rnn_grads.py.)

    rnn_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB]
                 [-k PATTERN] [--tol T]

--target cuda builds with nvcc = tests/cuda/sim/nvcc (CUDASIM_LIB=LIB) and runs on the CPU
CUDA simulator, exact float32 (--no-tf32)."""

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

S, B, I = 5, 3, 4


def case(op, H, direction="forward", layout=0, bias=True, seq=None, h0=False, c0=False, peep=False,
         outs=("Y", "Y_h", "Y_c"), dtype=np.float32, **attrs):
    """(model, X, the same model in layout 0, X for it, outputs of that model -> this one's):
    onnxruntime runs only layout 0, so a layout-1 case is checked against its layout-0 twin."""
    D = 2 if direction == "bidirectional" else 1
    G = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    rng = np.random.default_rng(len(op) * 100 + H * 10 + D + layout)
    elem = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    data = {}

    def init(name, shape, scale=0.5):
        data[name] = (rng.standard_normal(shape) * scale).astype(dtype)
        return name

    ins = ["X", init("W", (D, G * H, I)), init("R", (D, G * H, H))]
    ins.append(init("Bi", (D, 2 * G * H)) if bias else "")
    if seq is not None:
        data["seq"] = np.array(seq, np.int32)
    ins.append("seq" if seq is not None else "")
    ins.append(init("h0", (D, B, H)) if h0 else "")
    if op == "LSTM":
        ins.append(init("c0", (D, B, H)) if c0 else "")
        ins.append(init("P", (D, 3 * H)) if peep else "")
    while ins[-1] == "":
        ins.pop()
    nout = 3 if op == "LSTM" else 2
    names = ["Y", "Y_h", "Y_c"][:nout]
    node_outs = [n if n in outs else "" for n in names]
    x0 = rng.standard_normal((S, B, I)).astype(dtype)

    def build(lay, f32=False):
        el = TensorProto.FLOAT if f32 else elem

        def conv(k, v):  # layout-0 data to layout lay
            v = v.astype(np.float32) if f32 and v.dtype == np.float64 else v
            return v.transpose(1, 0, 2) if lay and k in ("h0", "c0") else v
        inits = [numpy_helper.from_array(conv(k, v), k) for k, v in data.items()]
        hs = (B, D, H) if lay else (D, B, H)
        ys = {"Y": (B, S, D, H) if lay else (S, D, B, H), "Y_h": hs, "Y_c": hs}
        node = helper.make_node(op, ins, node_outs, name="rec", hidden_size=H, direction=direction,
                                **({"layout": lay} if lay else {}), **attrs)
        xs = (B, S, I) if lay else (S, B, I)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", el, xs)],
                                  [helper.make_tensor_value_info(n, el, ys[n]) for n in names if n in outs],
                                  initializer=inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
        m.ir_version = 8
        return m

    def to_layout(outs0):
        if not layout:
            return outs0
        return {k: v.transpose(2, 0, 1, 3) if k == "Y" else v.transpose(1, 0, 2) for k, v in outs0.items()}

    x = x0.transpose(1, 0, 2).copy() if layout else x0
    # onnxruntime has no float64 LSTM: a float64 case is checked against float32 (tolerance 1e-5)
    return build(layout), x, build(0, dtype == np.float64), x0.astype(np.float32), to_layout


CASES = {
    "lstm_bi_layout1_peep_seq": lambda: case("LSTM", 6, "bidirectional", 1, seq=[5, 2, 4], h0=True, c0=True, peep=True),
    "lstm_clip_forget_noY": lambda: case("LSTM", 5, clip=0.7, input_forget=1, h0=True, outs=("Y_h", "Y_c")),
    "lstm_reverse_acts": lambda: case("LSTM", 4, "reverse", bias=False, activations=["Sigmoid", "Relu", "Tanh"]),
    "lstm_hardsigmoid_alpha": lambda: case("LSTM", 4, activations=["HardSigmoid", "Tanh", "Softsign"],
                                           activation_alpha=[0.3], activation_beta=[0.4]),
    "lstm_double": lambda: case("LSTM", 3, "bidirectional", seq=[1, 5, 3], dtype=np.float64),
    "gru_bi_lbr0_seq": lambda: case("GRU", 5, "bidirectional", seq=[3, 5, 1], h0=True),
    "gru_rev_lbr1_layout1_clip": lambda: case("GRU", 6, "reverse", 1, linear_before_reset=1, clip=1.5, h0=True),
    "gru_lbr1_onlyY": lambda: case("GRU", 4, linear_before_reset=1, outs=("Y",)),
    "rnn_bi_leaky": lambda: case("RNN", 5, "bidirectional", h0=True, activations=["Tanh", "LeakyRelu"],
                                 activation_alpha=[0.1]),
    "rnn_layout1_seq_relu": lambda: case("RNN", 4, layout=1, seq=[2, 5, 3], activations=["Relu"]),
}


def compile_cmd(a, model, d, x):
    cmd = [a.pipecc, model, "-g", "1", "-m", "1", "-o", d, "-j", "1",
           "--shape", "X:" + "x".join(str(s) for s in x.shape)]
    return pt.sim_target(cmd, dict(os.environ), a.target, a.sim_lib)


def main():
    a = pt.case_args(1e-5)
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name, make in CASES.items():
        if a.k and not re.search(a.k, name):
            continue
        m, x, m0, x0, to_layout = make()
        d = pt.case_dir(a.work, name)
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        path0 = os.path.join(d, "model_layout0.onnx")
        onnx.save(m0, path0)
        sess = ort.InferenceSession(path0, providers=["CPUExecutionProvider"])
        ref = to_layout(dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"X": x0}))))
        save_npz(os.path.join(d, "x.npz"), {"X": x})
        cmd, env = compile_cmd(a, path, os.path.join(d, "build"), x)
        ok &= pt.build_run_rel_l2(cmd, env, os.path.join(d, "build"), os.path.join(d, "x.npz"), ref, a.tol, name)

    if a.target == "cpu" and not a.k:
        # an activation pipecc does not support: one line naming the node, exit 2
        m, x = case("RNN", 3, activations=["Gelu"])[:2]
        path = os.path.join(a.work, "bad_act.onnx")
        onnx.save(m, path, )
        cmd, env = compile_cmd(a, path, os.path.join(a.work, "bad_act"), x)
        ok &= pt.one_error_line(cmd, "unsupported activation", "node 0 'rec' (RNN", "activation 'Gelu' is not supported",
                                env=env)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
