#!/usr/bin/python3
"""Einsum (passes/lower/einsum.c: lowered to Transpose, Reshape, Gather, Expand, ReduceSum and
batched MatMul) against onnxruntime: equations beyond the ONNX node tests (attention,
ellipsis broadcasting, diagonals, three operands, implicit outputs, outer products,
float64), each compiled with -g 1 and -g 2 (default micro-batches: a model that does
not split compiles for one) and run; rel-L2 <= --tol per output.

    einsum_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]

Also (cpu): one --train-step (mse) through two Einsums against torch.autograd (loss,
grad/W, grad/V); and an equation whose operands disagree on a subscript's size is one error line
naming the node (exit 2)."""

import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402

# name: (equation, operand shapes, dtype); the reference is onnxruntime, or numpy.einsum
# (float64, rounded) for what onnxruntime refuses (NUMPY_REF)
CASES = {
    "attn_scores": ("bhqd,bhkd->bhqk", [(4, 2, 5, 8), (4, 2, 6, 8)], np.float32),
    "attn_values": ("bhqk,bhkd->bhqd", [(4, 2, 5, 6), (4, 2, 6, 8)], np.float32),
    "batch_matmul": ("bij,bjk->bik", [(4, 3, 5), (4, 5, 7)], np.float32),
    "weights": ("bsd,df->bsf", [(4, 3, 8), (8, 5)], np.float32),
    "transpose": ("bij->bji", [(4, 3, 5)], np.float32),
    "sum_transpose": ("abc->ca", [(4, 3, 5)], np.float32),
    "implicit": ("bij,jk", [(4, 3, 5), (5, 6)], np.float32),
    "ellipsis_broadcast": ("...ij,...jk->...ik", [(4, 1, 3, 5), (1, 2, 5, 6)], np.float32),
    "ellipsis_weights": ("...ij,jk->...ik", [(4, 2, 3, 5), (5, 6)], np.float32),
    "ellipsis_ranks": ("...ij,...jk->...ik", [(4, 1, 3, 5), (2, 5, 6)], np.float32),  # numpy: ORT refuses
    "diagonal": ("bii->bi", [(4, 5, 5)], np.float32),
    "diagonal_sum": ("bii->b", [(4, 5, 5)], np.float32),
    "three": ("bi,ij,jk->bk", [(4, 3), (3, 5), (5, 2)], np.float32),
    "outer": ("bi,bj->bij", [(4, 3), (4, 5)], np.float32),
    "dot": ("bi,bi->b", [(4, 7), (4, 7)], np.float32),
    "inner_scalar": ("i,i->", [(9,), (9,)], np.float32),
    "float64": ("bij,bjk->bik", [(4, 3, 5), (4, 5, 2)], np.float64),
}
NUMPY_REF = {"ellipsis_ranks"}


def model(eq, shapes, dt):
    et = TensorProto.DOUBLE if dt == np.float64 else TensorProto.FLOAT
    names = [f"x{i}" for i in range(len(shapes))]
    g = helper.make_graph([helper.make_node("Einsum", names, ["y"], name="es", equation=eq)], "g",
                          [helper.make_tensor_value_info(n, et, s) for n, s in zip(names, shapes)],
                          [helper.make_tensor_value_info("y", et, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="pipecc-tests")
    m.ir_version = 8
    return m


def train_case(a):
    """y = einsum('bsd,df->bsf', x, W) + einsum('bsd,sd->bs', x, V)[..., None], W and V
    trained: loss and grad/W, grad/V of one --train-step (mse) against torch.autograd."""
    import torch
    from onnx import numpy_helper
    rng = np.random.default_rng(11)
    W = rng.standard_normal((8, 5)).astype(np.float32)
    V = rng.standard_normal((3, 8)).astype(np.float32)
    x = rng.standard_normal((4, 3, 8)).astype(np.float32)
    t = rng.standard_normal((4, 3, 5)).astype(np.float32)
    nodes = [helper.make_node("Einsum", ["x", "W"], ["p"], equation="bsd,df->bsf"),
             helper.make_node("Einsum", ["x", "V"], ["q"], equation="bsd,sd->bs"),
             helper.make_node("Unsqueeze", ["q", "ax"], ["q1"]), helper.make_node("Add", ["p", "q1"], ["y"])]
    inits = [numpy_helper.from_array(W, "W"), numpy_helper.from_array(V, "V"),
             numpy_helper.from_array(np.array([2], np.int64), "ax")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 3, 8))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 3, 5))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="pipecc-tests")
    d = pt.case_dir(a.work, "train")
    path = os.path.join(d, "model.onnx")
    onnx.save(m, path)
    got = pt.train_step(a.pipecc, path, d, {"x": x, "labels": t}, "einsum train step")
    if got is None:
        return False
    tw, tv = torch.tensor(W, requires_grad=True), torch.tensor(V, requires_grad=True)
    xt = torch.tensor(x)
    y = torch.einsum("bsd,df->bsf", xt, tw) + torch.einsum("bsd,sd->bs", xt, tv)[..., None]
    loss = torch.nn.functional.mse_loss(y, torch.tensor(t))
    loss.backward()
    ref = {"loss": loss.detach().numpy(), "grad/W": tw.grad.numpy(), "grad/V": tv.grad.numpy()}
    errs, good = [], True
    for k, v in ref.items():
        e = pt.rel_l2(np.asarray(got.get(k, np.full(v.shape, np.nan))), v, 1e-30)
        errs.append(f"{k} {e:.2e}")
        good &= bool(e <= 1e-5)
    print(("ok   " if good else "FAIL ") + "einsum train step vs torch.autograd: rel-L2 " + ", ".join(errs))
    pt.done_with(d, good)
    return good


def main():
    a = pt.case_args(1e-6)
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name, (eq, shapes, dt) in CASES.items():
        if a.k and not re.search(a.k, name):
            continue
        d = pt.case_dir(a.work, name)
        m = model(eq, shapes, dt)
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        rng = np.random.default_rng(len(name))
        feeds = {f"x{i}": rng.standard_normal(s).astype(dt) for i, s in enumerate(shapes)}
        if name in NUMPY_REF:
            ref = {"y": np.einsum(eq, *[v.astype(np.float64) for v in feeds.values()]).astype(dt)}
        else:
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            ref = {"y": sess.run(None, feeds)[0]}
        xin = os.path.join(d, "x.npz")
        save_npz(xin, feeds)
        good = True
        for g in (1, 2):
            out = os.path.join(d, f"g{g}")
            cmd, env = pt.sim_target([a.pipecc, path, "-g", str(g), "-o", out, "-j", "1"], pt.split_env(), a.target,
                                     a.sim_lib)
            good &= pt.build_run_rel_l2(cmd, env, out, xin, ref, a.tol, f"{name} '{eq}' -g {g}")
        ok &= good
        pt.done_with(d, good)

    if not a.k and a.target == "cpu":  # training through the lowering: one step against PyTorch autograd
        ok &= train_case(a)
    if not a.k:  # subscript j of size 5 in one operand, 4 in the other: one line naming the node
        path = os.path.join(a.work, "bad_sizes.onnx")
        onnx.save(model("ij,jk->ik", [(3, 5), (4, 2)], np.float32), path)
        ok &= pt.one_error_line([a.pipecc, path, "-o", os.path.join(a.work, "bad")], "subscript sizes disagree",
                                "node 0 'es' (Einsum", "two sizes")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
