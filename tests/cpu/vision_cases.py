#!/usr/bin/python3
"""RoiAlign and DeformConv (codegen/{c,cuda}/ops_vision.c) in small PyTorch models
exported to ONNX, against onnxruntime running the same model; each compiled with -g 1
and -g 2 and run.

  roialign_net     Conv, torchvision.ops.roi_align (aligned: RoiAlign-16 half_pixel,
                   adaptive sampling), Linear. batch_indices pick images of the whole
                   batch: -g 2 with micro-batches asked for (-m 2) is refused with one
                   error line; -g 2 alone falls back to one micro-batch (a note); -g 2
                   -m 1 runs
  roialign10_net   the same not aligned, sampling_ratio 2, opset 11 (RoiAlign-10)
  deform_mask      Convs computing the offsets and (sigmoid) mask of
                   torchvision.ops.deform_conv2d (DCNv2: DeformConv-19 with mask), bias
  deform_nomask    the same without mask (DCNv1), two offset groups, stride 2
  roialign_train,  --train-step through RoiAlign / DeformConv: refused with one error
  deform_train     line (no gradient rules)

torch.onnx of this PyTorch has no exporter for torchvision's deform_conv2d (DeformConv
is opset 19, beyond the exporter's 17): the script registers a symbolic writing it, and
the exported model's default-domain opset is raised to 19 (its other ops, Conv, Mul,
Sigmoid, Relu, Constant, mean the same there).

    vision_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]"""

import os
import re
import sys
import warnings

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402

BATCH = 4


def deform_symbolic(g, x, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, n_weight_grps,
                    n_offset_grps, use_mask):
    from torch.onnx import symbolic_helper as sh
    i = lambda v: sh._get_const(v, "i", "")  # noqa: E731
    ins = [x, weight, offset, bias] + ([mask] if i(use_mask) else [])
    return g.op("DeformConv", *ins, strides_i=[i(stride_h), i(stride_w)], pads_i=[i(pad_h), i(pad_w), i(pad_h), i(pad_w)],
                dilations_i=[i(dil_h), i(dil_w)], group_i=i(n_weight_grps), offset_group_i=i(n_offset_grps))


def module(name):
    import torch
    from torchvision.ops import deform_conv2d, roi_align
    torch.manual_seed(0)

    class RoiNet(torch.nn.Module):
        def __init__(s, aligned, sr):
            super().__init__()
            s.c, s.fc, s.aligned, s.sr = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Linear(8 * 4 * 3, 5), aligned, sr

        def forward(s, x, boxes):
            f = torch.relu(s.c(x))
            r = roi_align(f, boxes, (4, 3), spatial_scale=0.5, sampling_ratio=s.sr, aligned=s.aligned)
            return s.fc(r.flatten(1))

    class DeformNet(torch.nn.Module):
        def __init__(s, mask, og, stride):
            super().__init__()
            s.mask, s.stride = mask, stride
            s.off = torch.nn.Conv2d(4, og * 2 * 9, 3, padding=1, stride=stride)
            s.msk = torch.nn.Conv2d(4, og * 9, 3, padding=1, stride=stride) if mask else None
            s.w = torch.nn.Parameter(torch.randn(6, 4, 3, 3) * 0.3)
            s.b = torch.nn.Parameter(torch.randn(6) * 0.1)

        def forward(s, x):
            off = s.off(x) * 2
            m = torch.sigmoid(s.msk(x)) if s.mask else None
            return torch.relu(deform_conv2d(x, off, s.w, s.b, stride=s.stride, padding=1, mask=m))

    if name == "roialign_net":
        return RoiNet(True, 0)
    if name == "roialign10_net":
        return RoiNet(False, 2)
    if name == "deform_nomask":
        return DeformNet(False, 2, 2)
    return DeformNet(True, 1, 1)


def export(name, d, rng):
    """model path, feeds"""
    import torch
    m = module(name).eval()
    path = os.path.join(d, "model.onnx")
    if name.startswith("roialign"):
        x = rng.standard_normal((BATCH, 3, 12, 14)).astype(np.float32)
        lo = rng.uniform(-2, 20, (6, 2))
        boxes = np.concatenate([rng.integers(0, BATCH, (6, 1)), lo, lo + rng.uniform(1, 16, (6, 2))], 1).astype(np.float32)
        feeds = {"x": x, "boxes": boxes}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, (torch.from_numpy(x), torch.from_numpy(boxes)), path, input_names=["x", "boxes"],
                              output_names=["y"], opset_version=16 if name == "roialign_net" else 11)
        return path, feeds
    torch.onnx.register_custom_op_symbolic("torchvision::deform_conv2d", deform_symbolic, 17)
    x = rng.standard_normal((BATCH, 4, 9, 10)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # its checker refuses DeformConv at opset 17 after writing the model
            torch.onnx.export(m, (torch.from_numpy(x),), path, input_names=["x"], output_names=["y"], opset_version=17)
        except torch.onnx.errors.CheckerError:
            pass
    mp = onnx.load(path)
    for o in mp.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 19
    onnx.checker.check_model(mp)
    onnx.save(mp, path)
    return path, {"x": x}


def main():
    a = pt.case_args(1e-5)
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for seed, name in enumerate(("roialign_net", "roialign10_net", "deform_mask", "deform_nomask", "roialign_train",
                                 "deform_train")):
        if a.k and not re.search(a.k, name):
            continue
        rng = np.random.default_rng(100 + seed)
        d = pt.case_dir(a.work, name)
        path, feeds = export({"roialign_train": "roialign_net", "deform_train": "deform_mask"}.get(name, name), d, rng)
        ops = sorted({n.op_type for n in onnx.load(path).graph.node})
        print(f"     {name}: ops {', '.join(ops)}")
        good = True
        if name.endswith("_train"):
            op = "RoiAlign" if name.startswith("roialign") else "DeformConv"
            cmd = [a.pipecc, path, "-g", "1", "-o", os.path.join(d, "t"), "--train-step", "--loss", "mse"]
            good = pt.one_error_line(cmd, f"{name}: training through {op}", op, "no gradient")
            ok &= good
            pt.done_with(d, good)
            continue
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ref = {"y": sess.run(None, feeds)[0]}
        xin = os.path.join(d, "x.npz")
        save_npz(xin, feeds)
        runs = [("1", None), ("2", None)]
        if name.startswith("deform"):
            runs.append(("1", str(BATCH)))  # -g 2's default micro-batches: the same bits (cpu)
        if name.startswith("roialign"):
            cmd, env = pt.sim_target([a.pipecc, path, "-g", "2", "-m", "2", "-o", os.path.join(d, "m2"), "-j", "1"],
                                     pt.split_env(), a.target, a.sim_lib)
            good &= pt.one_error_line(cmd, f"{name} -g 2 -m 2: refused", "RoiAlign", "batch_indices", "-m 1", env=env)
            runs.append(("2", "1"))
        for g, m in runs:
            out = os.path.join(d, f"g{g}" + (f"m{m}" if m else ""))
            cmd = [a.pipecc, path, "-g", g, "-o", out, "-j", "1"] + (["-m", m] if m else [])
            cmd, env = pt.sim_target(cmd, pt.split_env(), a.target, a.sim_lib)
            good &= pt.build_run_rel_l2(cmd, env, out, xin, ref, a.tol,
                                        f"{name} -g {g}{' -m ' + m if m else ''} vs onnxruntime")
        if name.startswith("deform") and a.target == "cpu" and good:
            y1, y2 = (np.load(os.path.join(d, o, "y.npz"))["y"] for o in (f"g1m{BATCH}", "g2"))
            same = np.array_equal(y1, y2)
            print(("ok   " if same else "FAIL ") + f"{name}: -g 1 -m {BATCH} and -g 2 give the same bits")
            good &= same
        ok &= good
        pt.done_with(d, good)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
