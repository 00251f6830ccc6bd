#!/usr/bin/python3
"""plan.json's param_bytes is what each stage loads: for every stage of every case, the
planner's figure is within 2% of the size of the weights_K.bin the code generator wrote
(Winograd-transformed, pre-transposed and permuted filters included; 0 for a stage
without one), and the figures add up to the files' total within 2%.

    weight_bytes.py --pipecc build/pipecc --models DIR --work /tmp/w

Cases: ResNet-18 at g = 2 (Winograd F(4x4) filters: 4x the model's bytes), MobileNetV2 at
g = 4 (depthwise and 1x1 expansions fused), smallcnn at g = 2. Exit status 0 when every
check passes, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys

CASES = [
    ("resnet18", "input:2x3x224x224", 2),
    ("mobilenet_v2", "input:2x3x224x224", 4),
    ("smallcnn", "input:2x1x8x8", 2),
]
TOL = 0.02


def check(a, name, shape, g):
    out = os.path.join(a.work, f"{name}_g{g}")
    cmd = [a.pipecc, os.path.join(a.models, name + ".onnx"), "--shape", shape, "-g", str(g), "--no-replicate",
           "--emit-only", "-q", "-o", out]
    env = dict(os.environ)
    env.pop("PIPECC_SPLIT", None)
    env["PIPECC_COSTS"] = "model"  # the plan shapes checked here are the cost model's
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(f"FAIL: {name}: {' '.join(cmd)} exited {r.returncode}:\n{r.stderr}")
        return False
    stages = json.load(open(os.path.join(out, "plan.json")))["stages"]
    ok = len(stages) == g
    if not ok:
        print(f"FAIL: {name}: {len(stages)} stages, expected {g}")
    tot_p = tot_f = 0
    for k, st in enumerate(stages):
        f = os.path.join(out, f"weights_{k}.bin")
        fb = os.path.getsize(f) if os.path.exists(f) else 0
        pb = st["param_bytes"]
        tot_p, tot_f = tot_p + pb, tot_f + fb
        good = abs(pb - fb) <= TOL * fb
        print(f"{name} g={g} stage {k}: plan.json param_bytes {pb}, weights_{k}.bin {fb} bytes"
              f"{'' if good else '  <- off by more than 2%'}")
        ok = ok and good
    if not (tot_f > 0 and abs(tot_p - tot_f) <= TOL * tot_f):
        print(f"FAIL: {name}: param_bytes add up to {tot_p}, the weights files to {tot_f}")
        ok = False
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    ok = all([check(a, *c) for c in CASES])
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
