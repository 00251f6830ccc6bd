#!/usr/bin/python3
"""How well pipecc's plans hold on this machine (cpu target): for each model, stage count
and cost path (the default, measured on this machine, and the analytical --cost-model),
compile with --no-replicate at a batch of B split into B micro-batches, run
`DIR/pipeline --bench N --pin`, and compare per stage the predicted busy time of a batch
(plan.json's compute_ms x micro-batches) with the measured one, the measured busy
max/mean (the pipeline runs at its slowest stage's pace: 1.00 is balanced), each stage
thread's own CPU time in those spans and its max/mean (where there are more stages than
cores, busy also counts the time the OS gave the stage sharing the core; the CPU time
does not), and the predicted bubble with the measured one.

    tools/plan_accuracy.py --pipecc build/pipecc --models /work/models \\
        --cases resnet18,mobilenet_v2,gpt,bert,vit_static -g 2,4 [--paths default,model]

Prints a Markdown table (and, with --json FILE, the figures; --from-json FILE... prints
the table of such files). The default path profiles on
a cache miss (its own cache under --work unless --keep-cache); the first compile's wall
time of each path is in the table, so the profiling's cost shows. Tools only: needs the
models exported by tools/export_models.py.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

# model -> (input binding at batch B, with {B} for the batch)
INPUTS = {
    "resnet18": "input:{B}x3x224x224",
    "resnet50": "input:{B}x3x224x224",
    "mobilenet_v2": "input:{B}x3x224x224",
    "inception_v3": "input:{B}x3x299x299",
    "efficientnet_b0": "input:{B}x3x224x224",
    "convnext_tiny": "input:{B}x3x224x224",
    "vit_static": "input:{B}x3x32x32",
    "gpt": "input_ids:{B}x64",
    "bert": "input_ids:{B}x64",
}
# models exported with a fixed batch (tools/export_models.py STATIC_BATCH)
FIXED_BATCH = {"vit_static": 4}


def bench(exe, iters):
    r = subprocess.run([exe, "--bench", str(iters), "--pin"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{exe} --bench exited {r.returncode}: {r.stderr}")
    busy = [float(m.group(1)) for m in re.finditer(r"^stage \d+: busy ([0-9.]+) ms", r.stdout, re.M)]
    cpu = [float(m.group(1)) for m in re.finditer(r"^stage \d+: busy .*, cpu ([0-9.]+) ms", r.stdout, re.M)]
    b = re.search(r"^bubble: measured ([0-9.]+) predicted ([0-9.]+)", r.stdout, re.M)
    return busy, (cpu if len(cpu) == len(busy) else None), (float(b.group(1)) if b else None)


def one(a, model, g, path, env):
    B = FIXED_BATCH.get(model, a.batch)
    out = os.path.join(a.work, f"{model}_g{g}_{path}")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.pipecc, os.path.join(a.models, model + ".onnx"), "--shape", INPUTS[model].format(B=B), "-g", str(g),
           "-m", str(B), "--no-replicate", "-j", str(a.jobs), "-o", out]
    if path == "model":
        cmd.append("--cost-model")
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    t = time.time() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr}")
    prof = re.search(r"profiled in ([0-9.]+) s", r.stderr)
    plan = json.load(open(os.path.join(out, "plan.json")))
    m = plan["microbatches"]
    pred = [st["compute_ms"] * m for st in plan["stages"]]
    busy, cpu, bubble = bench(os.path.join(out, "pipeline"), a.iters)
    if not a.keep_builds:
        shutil.rmtree(out, ignore_errors=True)
    mean = sum(busy) / len(busy)
    pmean = sum(pred) / len(pred)
    return {
        "model": model, "g": g, "path": path, "batch": B, "microbatches": m, "stages": len(busy),
        "compile_s": round(t, 1), "profile_s": float(prof.group(1)) if prof else 0.0,
        "predicted_ms": [round(x, 3) for x in pred], "busy_ms": [round(x, 3) for x in busy],
        "busy_max_mean": round(max(busy) / mean, 3), "predicted_max_mean": round(max(pred) / pmean, 3),
        "cpu_ms": [round(x, 3) for x in cpu] if cpu else None,
        "cpu_max_mean": round(max(cpu) * len(cpu) / sum(cpu), 3) if cpu and sum(cpu) > 0 else None,
        "cores": os.cpu_count(),
        "bubble_predicted": plan["bubble_fraction"], "bubble_measured": bubble,
    }


def table(rows):
    out = ["| model | g | costs | predicted busy per stage (ms) | measured busy (ms) | busy max/mean | "
           "stage CPU time (ms) | CPU max/mean | bubble predicted / measured | compile (profiling) s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bub = f"{r['bubble_predicted']:.3f} / {r['bubble_measured']:.3f}" if r["bubble_measured"] is not None else "-"
        prof = f" ({r['profile_s']:.1f})" if r["profile_s"] else ""
        cpu = " / ".join(f"{x:.4g}" for x in r["cpu_ms"]) if r.get("cpu_ms") else "-"
        cmm = f"{r['cpu_max_mean']:.2f}" if r.get("cpu_max_mean") else "-"
        out.append(f"| {r['model']} | {r['g']} | {'measured' if r['path'] == 'default' else 'cost model'} | "
                   f"{' / '.join(f'{x:.4g}' for x in r['predicted_ms'])} | {' / '.join(f'{x:.4g}' for x in r['busy_ms'])}"
                   f" | {r['busy_max_mean']:.2f} | {cpu} | {cmm} | {bub} | {r['compile_s']:.1f}{prof} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc")
    ap.add_argument("--models", help="folder of the exported .onnx files")
    ap.add_argument("--cases", default="resnet18,mobilenet_v2,gpt,bert,vit_static")
    ap.add_argument("-g", default="2,4", help="stage counts")
    ap.add_argument("--paths", default="default,model", help="default (measured costs) and/or model (--cost-model)")
    ap.add_argument("--batch", type=int, default=8, help="batch, split into as many micro-batches (default 8)")
    ap.add_argument("--iters", type=int, default=3, help="timed batches of --bench")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--work", default="/tmp/pipecc_plan_accuracy")
    ap.add_argument("--keep-cache", action="store_true", help="use the user's profile cache, not a fresh one")
    ap.add_argument("--keep-builds", action="store_true")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--from-json", nargs="+", metavar="FILE", help="print the table of figures written by --json")
    a = ap.parse_args()
    if a.from_json:
        print(table([r for f in a.from_json for r in json.load(open(f))]))
        return 0
    if not a.pipecc or not a.models:
        ap.error("--pipecc and --models are needed (or --from-json)")
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ)
    for k in ("PIPECC_COSTS", "PIPECC_SPLIT"):
        env.pop(k, None)
    if not a.keep_cache:
        env["XDG_CACHE_HOME"] = os.path.join(a.work, "cache")
        shutil.rmtree(env["XDG_CACHE_HOME"], ignore_errors=True)
    rows = []
    for model in a.cases.split(","):
        for g in (int(x) for x in a.g.split(",")):
            for path in a.paths.split(","):
                try:
                    rows.append(one(a, model, g, path, env))
                except (RuntimeError, OSError, KeyError) as e:
                    print(f"{model} g={g} {path}: {e}", file=sys.stderr)
                    continue
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows))
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
