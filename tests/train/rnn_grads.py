#!/usr/bin/env python3
"""Training through RNN, GRU and LSTM (passes/train/rnn_unroll.c): gradients against torch autograd.

Every case is a one-node ONNX model in float64,
    Xw = X * W0;  Y, Y_h[, Y_c] = OP(Xw, W, R, B, , initial_h[, initial_c, P]);
    out = Concat(Y, Y_h, Y_c flattened)
compiled with `pipecc --train-step --loss mse` (one stage), run once; the loss and the
gradient of every initializer (W0 carries dX; W, R, B, the initial states and the
peepholes their own) must be within rel-L2 --tol (1e-9, float64) of torch autograd on
`ref`, a step-by-step torch transcription of the ONNX operator. `ref` is itself checked
first against onnxruntime (the same model in float32, layout 0: onnxruntime has neither
float64 recurrent ops nor layout 1), rel-L2 <= 1e-5, so the gradients are those of the
operator's ONNX meaning, not of a shared misreading.

The cases cover what the unrolling writes differently: both directions and reverse,
layout 1, clip, input_forget, peepholes, linear_before_reset 0 and 1, initial states,
non-default activations (with alpha/beta), a missing B, only some outputs, 70 steps. Also checked:
the same model with sequence_lens stops with one line naming the node (exit 2), and the
pipelined program (--train, 2 micro-batches, g = 1 and 2) trains the bidirectional LSTM
case with the same bits at both stage counts.

  rnn_grads.py --pipecc build/pipecc --work DIR [-k PATTERN] [--tol T]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import zlib

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import pipecc_test as pt  # noqa: E402

S, B, I = 4, 3, 5
G = {"RNN": 1, "GRU": 3, "LSTM": 4}
NA = {"RNN": 1, "GRU": 2, "LSTM": 3}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
# name -> (uses alpha, uses beta, default alpha, default beta): onnxruntime's defaults
ACTS = {"sigmoid": (0, 0, 0, 0), "tanh": (0, 0, 0, 0), "relu": (0, 0, 0, 0), "leakyrelu": (1, 0, 0.01, 0),
        "thresholdedrelu": (1, 0, 1.0, 0), "hardsigmoid": (1, 1, 0.2, 0.5), "affine": (1, 1, 1.0, 0.0),
        "scaledtanh": (1, 1, 1.0, 1.0), "elu": (1, 0, 1.0, 0), "softsign": (0, 0, 0, 0), "softplus": (0, 0, 0, 0)}


def act_fn(name, al, be):
    n = name.lower()
    return {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu,
            "leakyrelu": lambda x: torch.where(x >= 0, x, al * x),
            "thresholdedrelu": lambda x: torch.where(x > al, x, torch.zeros_like(x)),
            "hardsigmoid": lambda x: torch.clamp(al * x + be, 0, 1),
            "affine": lambda x: al * x + be,
            "scaledtanh": lambda x: al * torch.tanh(be * x),
            "elu": lambda x: torch.where(x >= 0, x, al * (torch.exp(x) - 1)),
            "softsign": lambda x: x / (1 + torch.abs(x)),
            "softplus": torch.nn.functional.softplus}[n]


def acts_of(op, D, attrs):
    """[D][NA] activation functions, alpha/beta consumed in the order of the activations
    that take them (as onnxruntime and pipecc read them)."""
    names = attrs.get("activations", DEFAULT_ACTS[op])
    # float attributes are float32 in the model
    al = [float(np.float32(v)) for v in attrs.get("activation_alpha", [])]
    be = [float(np.float32(v)) for v in attrs.get("activation_beta", [])]
    out = []
    for d in range(D):
        row = []
        for k in range(NA[op]):
            nm = names[k if len(names) == NA[op] else d * NA[op] + k]
            ua, ub, da, db = ACTS[nm.lower()]
            a = al.pop(0) if ua and al else da
            b = be.pop(0) if ub and be else db
            row.append(act_fn(nm, a, b))
        out.append(row)
    return out


def ref(op, direction, attrs, x, W, R, Bi, h0, c0, P):
    """ONNX op on layout-0 tensors (torch, differentiable) -> Y [S, D, B, H], Y_h, Y_c [D, B, H]"""
    D, H = W.shape[0], R.shape[2]
    gh = G[op] * H
    fs = acts_of(op, D, attrs)
    clip = float(np.float32(attrs["clip"])) if "clip" in attrs else None

    def cl(v):
        return torch.clamp(v, -clip, clip) if clip is not None else v
    ys, hs, cs = [], [], []
    for d in range(D):
        f = fs[d][0]
        g = fs[d][1] if NA[op] > 1 else None
        hh = fs[d][2] if NA[op] > 2 else None
        rev = direction == "reverse" or d == 1
        h = h0[d] if h0 is not None else torch.zeros(x.shape[1], H, dtype=x.dtype)
        c = c0[d] if c0 is not None else torch.zeros(x.shape[1], H, dtype=x.dtype)
        wb = Bi[d, :gh] if Bi is not None else torch.zeros(gh, dtype=x.dtype)
        rb = Bi[d, gh:] if Bi is not None else torch.zeros(gh, dtype=x.dtype)
        Y = [None] * x.shape[0]
        for t in (reversed(range(x.shape[0])) if rev else range(x.shape[0])):
            xw = x[t] @ W[d].T + wb
            if op == "RNN":
                h = f(cl(xw + h @ R[d].T + rb))
            elif op == "GRU":
                Rz, Rr, Rh = R[d][:H], R[d][H:2 * H], R[d][2 * H:]
                z = f(cl(xw[:, :H] + h @ Rz.T + rb[:H]))
                r = f(cl(xw[:, H:2 * H] + h @ Rr.T + rb[H:2 * H]))
                if attrs.get("linear_before_reset", 0):
                    ht = g(cl(xw[:, 2 * H:] + r * (h @ Rh.T + rb[2 * H:])))
                else:
                    ht = g(cl(xw[:, 2 * H:] + (r * h) @ Rh.T + rb[2 * H:]))
                h = (1 - z) * ht + z * h
            else:
                pre = xw + h @ R[d].T + rb
                pi, po, pf, pc = pre[:, :H], pre[:, H:2 * H], pre[:, 2 * H:3 * H], pre[:, 3 * H:]
                if P is not None:
                    pi = pi + P[d][:H] * c
                    pf = pf + P[d][2 * H:] * c
                i = f(cl(pi))
                fg = 1 - i if attrs.get("input_forget", 0) else f(cl(pf))
                c = fg * c + i * g(cl(pc))
                if P is not None:
                    po = po + P[d][H:2 * H] * c
                h = f(cl(po)) * hh(c)
            Y[t] = h
        ys.append(torch.stack(Y))
        hs.append(h)
        cs.append(c)
    return torch.stack(ys, 1), torch.stack(hs), torch.stack(cs)


class Case:
    def __init__(self, name, op, H, direction="forward", layout=0, bias=True, h0=False, c0=False, peep=False,
                 outs=("Y", "Y_h", "Y_c"), seq=False, steps=S, **attrs):
        self.name, self.op, self.H, self.direction, self.layout = name, op, H, direction, layout
        self.bias, self.h0, self.c0, self.peep, self.seq, self.attrs = bias, h0, c0, peep, seq, attrs
        self.outs = [o for o in outs if o != "Y_c" or op == "LSTM"]
        self.D = 2 if direction == "bidirectional" else 1
        rng = np.random.default_rng(zlib.crc32(name.encode()))  # the same data every run
        D, gh = self.D, G[op] * H
        self.w = {"W0": 1 + 0.1 * rng.standard_normal((steps, B, I)),  # layout 0; transposed for layout 1
                  "W": 0.5 * rng.standard_normal((D, gh, I)), "R": 0.5 * rng.standard_normal((D, gh, H))}
        if bias:
            self.w["Bi"] = 0.5 * rng.standard_normal((D, 2 * gh))
        if h0:
            self.w["h0"] = 0.5 * rng.standard_normal((D, B, H))
        if c0:
            self.w["c0"] = 0.5 * rng.standard_normal((D, B, H))
        if peep:
            self.w["P"] = 0.5 * rng.standard_normal((D, 3 * H))
        self.x = rng.standard_normal((steps, B, I))

    def lay(self, k, v):
        """a layout-0 array in the model's layout"""
        if not self.layout:
            return v
        return v.transpose(1, 0, 2) if k in ("X", "W0", "h0", "c0") else v

    def model(self, lay=None, f32=False, with_seq=False, flat=True):
        lay = self.layout if lay is None else lay
        el = TensorProto.FLOAT if f32 else TensorProto.DOUBLE
        dt = np.float32 if f32 else np.float64
        conv = (lambda k, v: v) if not lay else self.lay
        inits = [numpy_helper.from_array(conv(k, v).astype(dt), k) for k, v in self.w.items()]
        ins = ["Xw", "W", "R", "Bi" if self.bias else "", "seq" if with_seq else "", "h0" if self.h0 else ""]
        if self.op == "LSTM":
            ins += ["c0" if self.c0 else "", "P" if self.peep else ""]
        while ins[-1] == "":
            ins.pop()
        if with_seq:
            inits.append(numpy_helper.from_array(np.array([len(self.x), 2, 3], np.int32), "seq"))
        names = ["Y", "Y_h", "Y_c"][:3 if self.op == "LSTM" else 2]
        nodes = [helper.make_node("Mul", ["X", "W0"], ["Xw"]),
                 helper.make_node(self.op, ins, [n if n in self.outs else "" for n in names], name="rec",
                                  hidden_size=self.H, direction=self.direction, **({"layout": lay} if lay else {}),
                                  **self.attrs)]
        if flat:  # out = all outputs flattened into one row
            inits.append(numpy_helper.from_array(np.array([1, -1], np.int64), "flat"))
            for n in self.outs:
                nodes.append(helper.make_node("Reshape", [n, "flat"], [n + "_f"]))
            nodes.append(helper.make_node("Concat", [n + "_f" for n in self.outs], ["out"], axis=1))
        xs = tuple(self.lay("X", self.x).shape) if lay else self.x.shape
        g = helper.make_graph(nodes, self.name, [helper.make_tensor_value_info("X", el, xs)],
                              [helper.make_tensor_value_info("out" if flat else self.outs[0], el, None)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
        m.ir_version = 8
        return m

    def forward(self, t, lay=None):
        """the model's `out` (in layout lay, default the model's) from torch tensors t (layout 0)"""
        Y, Yh, Yc = ref(self.op, self.direction, self.attrs, torch.tensor(self.x) * t["W0"], t["W"], t["R"],
                        t.get("Bi"), t.get("h0"), t.get("c0"), t.get("P"))
        if self.layout if lay is None else lay:
            Y, Yh, Yc = Y.permute(2, 0, 1, 3), Yh.transpose(0, 1), Yc.transpose(0, 1)
        parts = {"Y": Y, "Y_h": Yh, "Y_c": Yc}
        return torch.cat([parts[n].reshape(1, -1) for n in self.outs], 1)


CASES = [
    Case("lstm_bi_layout1_peep_states", "LSTM", 4, "bidirectional", 1, h0=True, c0=True, peep=True),
    Case("lstm_clip_forget_states", "LSTM", 5, clip=0.7, input_forget=1, h0=True, c0=True, outs=("Y_h", "Y_c")),
    Case("lstm_reverse_acts_nobias", "LSTM", 3, "reverse", bias=False, activations=["Sigmoid", "Relu", "Tanh"]),
    Case("lstm_hardsigmoid_alpha", "LSTM", 4, activations=["HardSigmoid", "Tanh", "Softsign"],
         activation_alpha=[0.3], activation_beta=[0.4]),
    Case("gru_bi_lbr0_h0", "GRU", 4, "bidirectional", h0=True),
    Case("gru_rev_lbr1_layout1_clip", "GRU", 5, "reverse", 1, linear_before_reset=1, clip=1.5, h0=True),
    Case("gru_lbr1_onlyY", "GRU", 3, linear_before_reset=1, outs=("Y",)),
    Case("gru_acts_bi", "GRU", 3, "bidirectional", activations=["HardSigmoid", "Elu", "Sigmoid", "Softplus"],
         activation_alpha=[0.25, 0.8, 0.3], activation_beta=[0.45, 0.55]),
    Case("rnn_bi_leaky_h0", "RNN", 4, "bidirectional", h0=True, activations=["Tanh", "LeakyRelu"],
         activation_alpha=[0.1]),
    Case("rnn_layout1_scaledtanh", "RNN", 3, layout=1, activations=["ScaledTanh"], activation_alpha=[1.3],
         activation_beta=[0.7]),
    Case("rnn_affine_only_yh", "RNN", 3, activations=["Affine"], activation_alpha=[0.9], activation_beta=[0.1],
         outs=("Y_h",)),
    Case("rnn_thresholded", "RNN", 4, activations=["ThresholdedRelu"], activation_alpha=[0.2]),
    # 70 steps: the projection's Split and Y's Concat become trees (at most 8 outputs, 64
    # inputs), R's 70 gradient terms more than one element-wise unit (an RNN: the
    # sanitizer build compiles and runs every step's code too)
    Case("rnn_70_steps", "RNN", 3, h0=True, steps=70),
]


def check_ref(c, d):
    """torch's `ref` vs onnxruntime on the float32 layout-0 twin"""
    import onnxruntime as ort
    path = os.path.join(d, "ort.onnx")
    onnx.save(c.model(lay=0, f32=True), path)
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = s.run(None, {"X": c.x.astype(np.float32)})[0]
    with torch.no_grad():
        want = c.forward({k: torch.tensor(v) for k, v in c.w.items()}, lay=0).numpy()
    return pt.rel_l2(want, got)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("-k", default=None)
    ap.add_argument("--tol", type=float, default=1e-9)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    bad = []
    for c in CASES:
        if a.k and not re.search(a.k, c.name):
            continue
        d = os.path.join(a.work, c.name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        e_ref = check_ref(c, d)
        t = {k: torch.tensor(v, requires_grad=True) for k, v in c.w.items()}
        y = c.forward(t)
        target = np.random.default_rng(3).standard_normal(tuple(y.shape))
        loss = torch.nn.functional.mse_loss(y, torch.tensor(target))
        loss.backward()
        path = os.path.join(d, "m.onnx")
        onnx.save(c.model(), path)
        res = pt.train_step(a.pipecc, path, d, {"X": c.lay("X", c.x), "labels": target}, c.name)
        if res is None:
            bad.append(c.name)
            continue
        errs = {"loss": pt.rel_l2(res["loss"], float(loss))}
        for k, v in t.items():
            got = res.get(f"grad/{k}")
            errs[k] = pt.rel_l2(got, c.lay(k, v.grad.numpy())) if got is not None else float("inf")
        worst = max(errs.values())
        ok = worst <= a.tol and e_ref <= 1e-5
        if not ok:
            bad.append(c.name)
        print(f"{'ok  ' if ok else 'FAIL'} {c.name:30s} torch ref vs onnxruntime {e_ref:.1e}; "
              f"pipecc vs autograd max rel-L2 {worst:.1e} (" + ", ".join(f"{k} {v:.0e}" for k, v in errs.items()) + ")")

    if not a.k:
        # sequence_lens: one line naming the node, exit 2
        c = CASES[0]
        path = os.path.join(a.work, "seq.onnx")
        onnx.save(c.model(with_seq=True), path)
        r = run([a.pipecc, path, "-g", "1", "-o", os.path.join(a.work, "seq"), "--train", "--loss", "mse"])
        lines = r.stderr.strip().splitlines()
        good = (r.returncode == 2 and len(lines) == 1 and "'rec' (LSTM" in lines[0]
                and "sequence_lens is not supported" in lines[0])
        print(("ok   " if good else "FAIL ") + f"sequence_lens in training: exit {r.returncode}: {r.stderr.strip()}")
        if not good:
            bad.append("seq")
        # the pipelined program (layout 1: the batch leads), 2 micro-batches of 2,
        # g = 1 and 2: the same bits
        c = Case("pipe", "LSTM", 4, "bidirectional", layout=1, peep=True, outs=("Y",))
        c.x = np.random.default_rng(5).standard_normal((S, 4, I))
        c.w["W0"] = np.ones((S, 4, I))
        x = c.lay("X", c.x)
        path = os.path.join(a.work, "pipe.onnx")
        onnx.save(c.model(flat=False), path)
        bits = {}
        for g in (1, 2):
            o = os.path.join(a.work, f"pipe_g{g}")
            r = run([a.pipecc, path, "-g", str(g), "-m", "2", "-o", o, "--train", "--loss", "mse", "--lr", "0.1"],
                    env=dict(os.environ, PIPECC_SPLIT="even"))
            if r.returncode:
                print(r.stderr[-2000:])
                bits[g] = None
                continue
            np.save(os.path.join(a.work, "px.npy"), x)
            np.save(os.path.join(a.work, "py.npy"), np.random.default_rng(6).standard_normal((4, S, 2, 4)))
            r = run([os.path.join(o, "pipeline"), "train", "--data", os.path.join(a.work, "px.npy"), "--labels",
                     os.path.join(a.work, "py.npy"), "--steps", "2", "--no-shuffle", "--quiet", "--save",
                     os.path.join(o, "w.npz")])
            if r.returncode:
                print(r.stdout[-1000:], r.stderr[-2000:])
                bits[g] = None
                continue
            bits[g] = dict(np.load(os.path.join(o, "w.npz")))
        good = all(bits.get(g) is not None for g in (1, 2)) and all(
            np.array_equal(bits[1][k], bits[2][k]) for k in bits[1])
        moved = good and all(not np.array_equal(bits[1][k], c.w[k]) for k in ("W", "R", "Bi", "P"))
        print(("ok   " if good and moved else "FAIL ") + "pipelined training, g = 1 and 2: the same weights after 2 steps"
              + ("" if moved else " (but W, R, B or P did not change)"))
        good &= moved
        if not good:
            bad.append("pipe")
    if bad:
        print("FAILED:", ", ".join(bad))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
