#!/usr/bin/python3
"""Language models as today's PyTorch exporter writes them at opset 23 (ONNX Attention,
RMSNormalization; tests/models/llm/*.onnx, written by tools/export_llm.py) against
onnxruntime: every output within rel-L2 --tol at each stage count of --stages (batch 4,
one sample per micro-batch), and bitwise equal across the stage counts on the
cpu target.

Inputs (seed 0): token ids below the vocabulary; attention masks of left padding (row r
starts with r zeros, so the masks differ per sample and every row keeps a real token);
past keys and values standard normal.

    llm_check.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB]
                 [-k PATTERN] [--stages 1,2,4]"""

import argparse
import glob
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402

BATCH = 4


def feeds_for(sess, rng):
    """Inputs for every graph input of the onnxruntime session, at batch BATCH."""
    feeds = {}
    for i in sess.get_inputs():
        shape = [BATCH if not isinstance(d, int) else d for d in i.shape]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 256, shape).astype(np.int64)
        elif i.name == "attention_mask":
            m = np.ones(shape, np.int64)
            for r in range(shape[0]):
                m[r, :min(r, shape[1] - 1)] = 0
            feeds[i.name] = m
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default=os.path.join(HERE, "llm"))
    ap.add_argument("--target", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--sim-lib", default=None)
    ap.add_argument("-k", default=None)
    ap.add_argument("--stages", default="1,2,4")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    import onnxruntime as ort
    paths = sorted(glob.glob(os.path.join(a.models, "*.onnx")))
    if not paths:
        print(f"FAIL: no models in {a.models}")
        return 1
    ok, ran = True, 0
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        if a.k and not re.search(a.k, name):
            continue
        ran += 1
        d = pt.case_dir(a.work, name)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feeds = feeds_for(sess, np.random.default_rng(0))
        ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        xin = os.path.join(d, "x.npz")
        save_npz(xin, feeds)
        shapes = [f"{k}:{'x'.join(map(str, v.shape))}" for k, v in feeds.items()]
        good, outs = True, []
        for g in a.stages.split(","):
            out = os.path.join(d, f"g{g}")
            cmd = [a.pipecc, path, "-g", g, "-m", str(BATCH), "--no-replicate", "-o", out, "-j", "2"] + \
                [x for s in shapes for x in ("--shape", s)]
            cmd, env = pt.sim_target(cmd, pt.split_env(), a.target, a.sim_lib)
            label = f"{name} -g {g}"
            good &= pt.build_run_rel_l2(cmd, env, out, xin, ref, a.tol, label)
            if os.path.exists(os.path.join(out, "y.npz")):
                outs.append((label, dict(np.load(os.path.join(out, "y.npz")))))
        if a.target == "cpu" and good:
            for label, o in outs[1:]:
                same = all(np.array_equal(o[k].view(np.uint32), outs[0][1][k].view(np.uint32)) for k in o)
                print(("ok   " if same else "FAIL ") + f"{label}: bitwise equal to {outs[0][0]}")
                good &= same
        ok &= good
        pt.done_with(d, good)
    if not ran:
        print("FAIL: no model matched")
        return 1
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
