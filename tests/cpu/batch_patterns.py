#!/usr/bin/python3
"""The patterns of today's transformer and timm exports that must compile for several
micro-batches (passes/batch.c) and the constant folds they need (passes/opt/fold_eval.c),
each reduced to a few nodes built with onnx.helper, with a dynamic batch axis:

  mask_flat_gather  the padding mask indexed across the flattened batch (transformers'
                    mask[arange(B)[:, None, None, None], arange(S)] as TorchScript writes
                    it): Flatten to [B*S, 1], Gather at b*S+s, Reshape(-1), Reshape back
  repeat_matmul     k.repeat(B, 1, 1) of a batch-free tensor computed at run time (Tile
                    with the batch from Shape) times a query reshaped [B,H,S,D]->[B*H,S,D]
  same_pad          timm's "same" padding: Shape, Sub, Clip(min=0), Concat, Pad
  castlike_range    the dynamo exporter's optimize=False arange: CastLike into Range
  resize_sizes      F.interpolate(size=...) by dynamo: Resize with a constant 'sizes'
                    holding the batch fixed at export
  mean_as_strided   ConvNeXt's head by dynamo: a mean, Reshape(-1) and a Gather of
                    constant flat indices b*C+c fixed at export for the whole batch
  torch_mask, torch_repeat  the first two as torch.onnx.export (TorchScript) writes them
  torch_mask_static  the mask exported with the batch fixed (arange(B) a constant)
  mask_gathernd_static  the mask as dynamo writes it at a fixed batch: a GatherND of
                    constant (b, s) tuples

Each is compiled at batch 4 with -g 1 -m 4 and with -g 2 and the default micro-batch
count (the largest divisor of the batch up to 4g, 4 here): pipecc must not fall back to
one micro-batch (its note "compiling for one micro-batch"; plan.json's microbatches is
4), the outputs must match onnxruntime (rel-L2 <= --tol) and be bitwise equal across
-g 1 and 2. One pattern that truly mixes the samples (the mask gathered with the batch
in reverse order) must keep the note at -g 2 (and refuse -m 4 at -g 1, exit 2).

    batch_patterns.py --pipecc build/pipecc --work DIR [-k PATTERN]
Exit status 0 when every case passes."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402

B, S, H, D = 4, 6, 2, 8
F32, I64 = TP.FLOAT, TP.INT64


def C(name, arr, dt=np.int64):
    return nh.from_array(np.array(arr, dtype=dt), name)


def N(op, ins, outs, **attrs):
    return h.make_node(op, ins, outs, name=outs[0], **attrs)


def vi(name, dt, shape):
    return h.make_tensor_value_info(name, dt, shape)


def model(nodes, inputs, outputs, inits, opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="pipecc-tests")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def batch_range(x, pre):
    """Range(0, x.size(0), 1) as the exporters write it: Shape, Gather, Range."""
    return [N("Shape", [x], [pre + "shape"]), N("Gather", [pre + "shape", "i0"], [pre + "B"], axis=0),
            N("Range", ["s0", pre + "B", "s1"], [pre + "ar"])]


def mask_flat_gather(reverse=False):
    """x [B,S,D] * mask[arange(B)[:, None, None, None], arange(S)] (mask [B,S]) ->
    y [B,1,S,D]; reverse: the batch gathered in reverse order (samples mix)."""
    nodes = batch_range("x", "")
    ar = "ar"
    if reverse:  # B-1-b: sample b reads sample B-1-b
        nodes += [N("Sub", ["B", "s1"], ["Bm1"]), N("Sub", ["Bm1", "ar"], ["rar"])]
        ar = "rar"
    nodes += [
        N("Unsqueeze", [ar, "ax123"], ["ar4"]),                 # [B,1,1,1]
        N("Mul", ["ar4", "Sc"], ["row"]),                        # b*S
        N("Add", ["row", "sr"], ["idx"]),                        # [B,1,1,S]: b*S+s
        N("Flatten", ["mask"], ["mflat"], axis=2),               # [B*S, 1]
        N("Reshape", ["mflat", "bs1"], ["m2"]),                  # [B*S, 1]
        N("Gather", ["m2", "idx"], ["mg"], axis=0),              # [B,1,1,S,1]
        N("Reshape", ["mg", "m1"], ["mv"]),                      # [B*S]
        N("Unsqueeze", ["B", "ax0"], ["Bu"]),
        N("Concat", ["Bu", "one", "one", "Su"], ["back"], axis=0),
        N("Reshape", ["mv", "back"], ["m4"]),                    # [B,1,1,S]
        N("Squeeze", ["m4", "ax1"], ["m3"]),                     # [B,1,S]
        N("Unsqueeze", ["m3", "ax3"], ["m3u"]),                  # [B,1,S,1]
        N("Unsqueeze", ["x", "ax1"], ["x4"]),                    # [B,1,S,D]
        N("Mul", ["x4", "m3u"], ["y"]),
    ]
    inits = [C("i0", 0), C("s0", 0), C("s1", 1), C("ax123", [1, 2, 3]), C("Sc", S), C("sr", np.arange(S)),
             C("bs1", [-1, 1]), C("m1", [-1]), C("one", [1]), C("Su", [S]), C("ax0", [0]), C("ax1", [1]),
             C("ax3", [3])]
    return model(nodes, [vi("x", F32, ["batch", S, D]), vi("mask", F32, ["batch", S])],
                 [vi("y", F32, ["batch", 1, S, D])], inits)


def repeat_matmul():
    """q [B,H,S,D] reshaped to [B*H,S,D] times k.repeat(B,1,1)^T, k = P @ W [H,S,D] computed
    at run time from weights (batch-free) -> [B*H,S,S], reshaped back to [B,H,S,S]."""
    rng = np.random.default_rng(3)
    nodes = [
        N("Shape", ["q"], ["shape"]), N("Gather", ["shape", "i0"], ["B"], axis=0),
        N("Unsqueeze", ["B", "ax0"], ["Bu"]),
        N("Concat", ["Bu", "one", "one"], ["reps"], axis=0),
        N("Relu", ["P"], ["Pr"]),                                # runtime, batch-free
        N("MatMul", ["Pr", "W"], ["k"]),                         # [H,S,D]
        N("Tile", ["k", "reps"], ["kr"]),                        # [B*H,S,D]
        N("Transpose", ["kr"], ["kt"], perm=[0, 2, 1]),
        N("Reshape", ["q", "qs"], ["q3"]),                       # [B*H,S,D]
        N("MatMul", ["q3", "kt"], ["sc"]),                       # [B*H,S,S]
        N("Concat", ["Bu", "Hc", "Sc2", "Sc2"], ["back"], axis=0),
        N("Reshape", ["sc", "back"], ["y"]),
    ]
    inits = [C("i0", 0), C("ax0", [0]), C("one", [1]), C("qs", [-1, S, D]), C("Hc", [H]), C("Sc2", [S]),
             C("P", rng.standard_normal((H, S, D)), np.float32), C("W", rng.standard_normal((D, D)), np.float32)]
    return model(nodes, [vi("q", F32, ["batch", H, S, D])], [vi("y", F32, ["batch", H, S, S])], inits)


def same_pad():
    """timm's Conv2dSame: pad so that a 3x3 stride-2 conv covers the input: pads =
    max((ceil(i/s)-1)*s + k - i, 0) from the input's shape, then Pad and Conv."""
    rng = np.random.default_rng(5)
    nodes = [
        N("Shape", ["x"], ["shape"]),
        N("Slice", ["shape", "two", "four"], ["hw"]),
        N("Sub", ["hw", "one"], ["hw1"]), N("Div", ["hw1", "two"], ["q"]),   # ceil(i/2)-1 = (i-1)//2
        N("Mul", ["q", "two"], ["q2"]), N("Add", ["q2", "three"], ["q3"]),
        N("Sub", ["q3", "hw"], ["need"]),
        N("Clip", ["need", "zero"], ["p"]),
        N("Div", ["p", "two"], ["p0"]), N("Sub", ["p", "p0"], ["p1"]),
        N("Concat", ["z2", "p0", "z2", "p1"], ["pads"], axis=0),
        N("Pad", ["x", "pads"], ["xp"]),
        N("Conv", ["xp", "Wc"], ["y"], strides=[2, 2], kernel_shape=[3, 3]),
    ]
    inits = [C("two", [2]), C("four", [4]), C("one", [1]), C("three", [3]), C("zero", 0), C("z2", [0, 0]),
             C("Wc", rng.standard_normal((4, 3, 3, 3)), np.float32)]
    return model(nodes, [vi("x", F32, ["batch", 3, 8, 9])], [vi("y", F32, ["batch", 4, 4, 5])], inits, opset=13)


def castlike_range():
    """x [B,S] + arange(1, S + 1) with start and step CastLike'd to the limit's type."""
    nodes = [
        N("Shape", ["x"], ["shape"]), N("Gather", ["shape", "i1"], ["Sn"], axis=0),
        N("Add", ["Sn", "i1"], ["lim"]),
        N("CastLike", ["start", "lim"], ["st"]), N("CastLike", ["step", "lim"], ["dl"]),
        N("Range", ["st", "lim", "dl"], ["r"]),
        N("Cast", ["r"], ["rf"], to=F32),
        N("Add", ["x", "rf"], ["y"]),
    ]
    inits = [C("i1", 1), C("start", 1.0, np.float32), C("step", 1.0, np.float32)]
    return model(nodes, [vi("x", F32, ["batch", S])], [vi("y", F32, ["batch", S])], inits, opset=15)


def resize_sizes():
    """F.interpolate(x, size=(2H, 2W)) as dynamo writes it: Resize with a constant 'sizes'
    that holds the batch fixed at export, [B, C, 2H, 2W]; linear and nearest."""
    nodes = [
        N("Resize", ["x", "", "", "sz"], ["yl"], mode="linear"),
        N("Resize", ["x", "", "", "sz"], ["yn"], mode="nearest"),
        N("Add", ["yl", "yn"], ["y"]),
    ]
    return model(nodes, [vi("x", F32, ["batch", 3, 5, 4])], [vi("y", F32, ["batch", 3, 10, 8])],
                 [C("sz", [B, 3, 10, 8])], opset=13)


def mean_as_strided():
    """ConvNeXt's head as dynamo writes it: x.mean((2, 3), keepdim=True), then as_strided to
    the same [B, C, 1, 1]: Reshape(-1) and a Gather of constant flat indices b*C+c fixed at
    export for the whole batch; then Flatten and a Linear."""
    rng = np.random.default_rng(7)
    Cc = 5
    idx = (np.arange(B)[:, None] * Cc + np.arange(Cc)[None, :]).reshape(B, Cc, 1, 1)
    nodes = [
        N("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=1),
        N("Reshape", ["m", "m1"], ["flat"]),
        N("Gather", ["flat", "idx"], ["st"], axis=0),
        N("Flatten", ["st"], ["f"], axis=1),
        N("MatMul", ["f", "W"], ["y"]),
    ]
    return model(nodes, [vi("x", F32, ["batch", Cc, 4, 4])], [vi("y", F32, ["batch", 3])],
                 [C("m1", [-1]), C("idx", idx), C("W", rng.standard_normal((Cc, 3)), np.float32)], opset=13)


def mask_gathernd_static():
    """The padding mask as dynamo writes it at a fixed batch: a GatherND of constant (b, s)
    tuples, [B,1,1,S,2], from mask [B,S]; then x [B,S,D] * mask."""
    bs = np.stack(np.broadcast_arrays(np.arange(B)[:, None, None, None], np.arange(S)[None, None, None, :]), -1)
    nodes = [
        N("GatherND", ["mask", "bs"], ["m4"]),                   # [B,1,1,S]
        N("Squeeze", ["m4", "ax1"], ["m3"]),                     # [B,1,S]
        N("Unsqueeze", ["m3", "ax3"], ["m3u"]),                  # [B,1,S,1]
        N("Unsqueeze", ["x", "ax1"], ["x4"]),                    # [B,1,S,D]
        N("Mul", ["x4", "m3u"], ["y"]),
    ]
    return model(nodes, [vi("x", F32, [B, S, D]), vi("mask", F32, [B, S])], [vi("y", F32, [B, 1, S, D])],
                 [C("bs", bs), C("ax1", [1]), C("ax3", [3])])


def torch_export(name, dynamic=True):
    """The mask and repeat patterns as PyTorch's TorchScript exporter writes them, with a
    dynamic batch axis or (dynamic False) the batch fixed at export, where arange(B) is a
    constant (torch.onnx.export, opset 17)."""
    import io
    import warnings
    import torch
    import torch.nn as nn
    torch.manual_seed(0)

    class Mask(nn.Module):
        def forward(self, x, mask):
            b, s = mask.shape
            m = mask[torch.arange(b)[:, None, None, None], torch.arange(s)]  # [B,1,1,S]
            return x.unsqueeze(1) * m.squeeze(1).unsqueeze(-1)

    class Repeat(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.Parameter(torch.randn(H, S, D))
            self.lin = nn.Linear(D, D)

        def forward(self, q):
            b, hh, s, d = q.shape
            k = self.lin(self.p).repeat(b, 1, 1)  # computed at run time, then repeated
            return torch.bmm(q.reshape(b * hh, s, d), k.transpose(1, 2)).reshape(b, hh, s, s)

    if name == "mask":
        m, args, names = Mask(), (torch.randn(B, S, D), torch.ones(B, S)), ["x", "mask"]
    else:
        m, args, names = Repeat(), (torch.randn(B, H, S, D),), ["q"]
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, args, f, input_names=names, output_names=["y"], opset_version=17,
                          dynamic_axes={n: {0: "batch"} for n in names + ["y"]} if dynamic else None)
    return onnx.load_from_string(f.getvalue())


CASES = {
    "mask_flat_gather": (mask_flat_gather, {"x": (B, S, D), "mask": (B, S)}),
    "repeat_matmul": (repeat_matmul, {"q": (B, H, S, D)}),
    "same_pad": (same_pad, {"x": (B, 3, 8, 9)}),
    "castlike_range": (castlike_range, {"x": (B, S)}),
    "resize_sizes": (resize_sizes, {"x": (B, 3, 5, 4)}),
    "mean_as_strided": (mean_as_strided, {"x": (B, 5, 4, 4)}),
    "torch_mask": (lambda: torch_export("mask"), {"x": (B, S, D), "mask": (B, S)}),
    "torch_repeat": (lambda: torch_export("repeat"), {"q": (B, H, S, D)}),
    "torch_mask_static": (lambda: torch_export("mask", dynamic=False), {"x": (B, S, D), "mask": (B, S)}),
    "mask_gathernd_static": (mask_gathernd_static, {"x": (B, S, D), "mask": (B, S)}),
}
NOTE = "compiling for one micro-batch"


def compile_run(a, path, d, g, xin, label):
    """pipecc -g G, run; (outputs, plan's micro-batch count, stderr) or None. -g 1 with -m 4
    (one device gets one micro-batch by default), -g 2 with the default count (4 at batch 4)."""
    out = os.path.join(d, f"g{g}")
    bind = [] if os.path.basename(d).endswith("_static") else ["-d", f"batch={B}"]  # a fixed batch: nothing to bind
    cmd = [a.pipecc, path] + bind + ["-g", str(g), "-o", out, "-j", "2"] + (["-m", str(B)] if g == 1 else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=pt.split_env())
    if r.returncode:
        print(r.stderr[-3000:])
        print(f"FAIL {label}: pipecc exited with {r.returncode}")
        return None
    with open(os.path.join(out, "plan.json")) as f:
        mb = json.load(f)["microbatches"]
    got, _ = pt.run_pipeline(out, xin, label)
    return None if got is None else (got, mb, r.stderr)


def run_case(a, name, fn, shapes, mixes=False):
    import onnxruntime as ort
    d = pt.case_dir(a.work, name)
    path = os.path.join(d, "model.onnx")
    onnx.save(fn(), path)
    rng = np.random.default_rng(len(name))
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    if "mask" in feeds:
        feeds["mask"] = (rng.random(shapes["mask"]) < 0.7).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    xin = os.path.join(d, "x.npz")
    save_npz(xin, feeds)
    good, outs = True, {}
    for g in (1, 2):
        label = f"{name} -g {g}"
        if mixes and g == 1:  # -m 4 asked for: one line naming the Gather, exit 2
            good &= pt.one_error_line([a.pipecc, path, "-d", f"batch={B}", "-g", "1", "-m", str(B), "-o",
                                       os.path.join(d, "g1")], label + " -m 4", "(Gather", "other samples")
            continue
        res = compile_run(a, path, d, g, xin, label)
        if res is None:
            return False
        got, mb, err = res
        noted = NOTE in err
        if mixes:  # the samples mix: one micro-batch, said in the note
            fine = noted and mb == 1
            print(("ok   " if fine else "FAIL ") + f"{label}: {mb} micro-batch(es), note {'given' if noted else 'missing'}")
            good &= fine
            continue
        errs = []
        for k, v in ref.items():
            e = pt.rel_l2(got[k], v, 1e-30) if k in got and got[k].shape == v.shape else float("inf")
            errs.append(f"{k} {e:.2e}")
            good &= bool(e <= a.tol)
        fine_mb = not noted and mb == B
        good &= fine_mb
        print(("ok   " if good else "FAIL ") + f"{label}: {mb} micro-batches{' (note: ' + NOTE + ')' if noted else ''}"
              f", rel-L2 " + ", ".join(errs))
        outs[g] = got
    if not mixes and len(outs) == 2:
        same = all(outs[1][k].tobytes() == outs[2][k].tobytes() for k in ref)
        print(("ok   " if same else "FAIL ") + f"{name}: -g 1 and -g 2 bitwise equal")
        good &= same
    pt.done_with(d, good)
    return good


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("-k", default=None)
    ap.add_argument("--tol", type=float, default=1e-6)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name, (fn, shapes) in CASES.items():
        if a.k and not re.search(a.k, name):
            continue
        ok &= run_case(a, name, fn, shapes)
    if not a.k or re.search(a.k, "mask_reverse"):
        ok &= run_case(a, "mask_reverse", lambda: mask_flat_gather(reverse=True), CASES["mask_flat_gather"][1],
                       mixes=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
