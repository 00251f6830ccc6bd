#!/usr/bin/python3
"""The lines that explain a plan (tools/pipecc_driver.c, explain_plan), on a chain of six
MatMul+Relu layers built here, --plan-only:
  - replicated stages (g = 4, a batch of 64) say "x 2" and name --no-replicate; with
    --no-replicate the line is gone;
  - one micro-batch over several stages says there is no overlap: for a model that fixes
    its batch at 1, with the export's dynamic batch axis; for a dynamic batch bound to 1,
    with --shape; for -m 1 on a batch of 64, with -m M;
  - a plan of several micro-batches without replicas prints neither line.

    explain_plan.py --pipecc build/pipecc --work /tmp/w

Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def chain(path, dim0):
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(6):
        inits.append(numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim0, 256])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [dim0, 256])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


REPL = "--no-replicate for one core per stage"
ONE = "one micro-batch: the "


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    fixed, dyn = os.path.join(a.work, "fixed1.onnx"), os.path.join(a.work, "dyn.onnx")
    chain(fixed, 1)
    chain(dyn, "N")
    env = dict(os.environ)
    env.pop("PIPECC_SPLIT", None)
    env["PIPECC_COSTS"] = "model"  # the plan shapes checked here are the cost model's
    # (model, options, strings that must appear, strings that must not)
    cases = [
        (dyn, ["--shape", "x:64x256", "-g", "4"], ["stage 0 x 2", REPL], [ONE]),
        (dyn, ["--shape", "x:64x256", "-g", "4", "--no-replicate"], [], [REPL, ONE]),
        (fixed, ["-g", "2"], [ONE, "fixes the batch at 1 (input 'x' dim 0)", "dynamic_axes={'x': {0: 'batch'}}"],
         [REPL]),
        (dyn, ["--shape", "x:1x256", "-g", "2"], [ONE, "--shape x:Nx"], ["dynamic_axes"]),
        (dyn, ["--shape", "x:64x256", "-g", "4", "-m", "1", "--no-replicate"], [ONE, "-m M splits the batch of 64"],
         [REPL]),
    ]
    ok = True
    for k, (model, opts, must, mustnt) in enumerate(cases):
        cmd = [a.pipecc, model, *opts, "--plan-only", "-o", os.path.join(a.work, f"c{k}")]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        bad = [f"missing {s!r}" for s in must if s not in r.stderr] + [f"has {s!r}" for s in mustnt if s in r.stderr]
        if r.returncode != 0 or bad:
            print(f"FAIL: {' '.join(cmd)} (exit {r.returncode}): {'; '.join(bad)}\n{r.stderr}")
            ok = False
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
