#!/usr/bin/env bash
# tools/bench_planner.sh - planner benchmark (prints figures; not a test).
#
# For VGG-16, ResNet-18/50/101, AlexNet, ResNeXt-50/101, Inception-v3, DenseNet-121 and
# SqueezeNet1_0 at batch 32 (pipecc --plan-only --device h100 --target cuda):
#   1. planner time at g = 4 and 8: node count, planner_ms (antichain + partition, from
#      plan.json; median of RUNS runs, inference and --train), pipecc wall time (median)
#      and peak RSS (/usr/bin/time -f %M, max). Goal: planner_ms <= 50 for each.
#   2. predicted speedup over one device (training, --train) for --schedule gpipe and
#      1f1b at g = 2, 4, 8 (M = the default: the largest divisor of 32 that is <= 4g),
#      with stage replication allowed (the default) and without (--no-replicate).
# These are predictions of the cost model for an H100 (passes/plan/profile.c), not
# measurements on a GPU.
#
#   bash tools/bench_planner.sh [--build DIR] [--models DIR] [--runs N] [--markdown FILE]
#   (defaults: build, build/testwork/models, 5, none; models are exported if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build MODELS=build/testwork/models RUNS=5 MD=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --markdown) MD=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bench_planner.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
PY=${PIPECC_PYTHON:-/usr/bin/python3}
MODEL_LIST="vgg16 resnet18 resnet50 resnet101 alexnet resnext50_32x4d resnext101_32x8d inception_v3 densenet121 squeezenet1_0"
for m in $MODEL_LIST; do
  if [ ! -f "$MODELS/$m.onnx" ]; then
    "$PY" tools/export_models.py --out "$MODELS" --models "$(echo $MODEL_LIST | tr ' ' ,)" >/dev/null
    break
  fi
done
[ -x "$BUILD/pipecc" ] || { echo "bench_planner.sh: no $BUILD/pipecc (build it first)" >&2; exit 2; }

exec "$PY" - "$BUILD/pipecc" "$MODELS" "$RUNS" "$MD" $MODEL_LIST <<'EOF'
import json, os, shutil, statistics, subprocess, sys, tempfile, time

pipecc, models, runs, md_path, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
LABEL = {"vgg16": "VGG-16", "resnet18": "ResNet-18", "resnet50": "ResNet-50", "resnet101": "ResNet-101",
         "alexnet": "AlexNet", "resnext50_32x4d": "ResNeXt-50 32x4d", "resnext101_32x8d": "ResNeXt-101 32x8d",
         "inception_v3": "Inception-v3", "densenet121": "DenseNet-121", "squeezenet1_0": "SqueezeNet 1.0"}
tmp = tempfile.mkdtemp(prefix="bench_planner.")
env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}  # we want planner_ms


def plan(model, g, *opts):
    """One pipecc --plan-only run: (plan.json dict, wall s, peak RSS KiB)."""
    side = 299 if model == "inception_v3" else 224
    out = os.path.join(tmp, "out")
    cmd = ["/usr/bin/time", "-f", "RSS %M", pipecc, os.path.join(models, model + ".onnx"),
           "--shape", f"input:32x3x{side}x{side}", "-g", str(g), "-m", str(4 * g), "--device", "h100",
           "--target", "cuda", "--plan-only", "-o", out, *opts]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - t0
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        sys.exit(f"bench_planner.sh: pipecc failed ({p.returncode}): {' '.join(cmd[3:])}\n{err}")
    rss = max(int(l.split()[1]) for l in err.splitlines() if l.startswith("RSS "))
    with open(os.path.join(out, "plan.json")) as f:
        return json.load(f), wall, rss


# ---- 1. planner time -------------------------------------------------------------
timing = []
print(f"planner time, batch 32, --device h100 --target cuda --plan-only (median of {runs} runs)")
hdr = (f"{'model':<18} {'nodes':>5} {'g':>2} {'stages':>6} {'planner_ms':>10} {'st_train':>8} {'train_ms':>9} "
       f"{'wall_ms':>8} {'RSS_MiB':>8}  goal")
print(hdr)
for m in names:
    for g in (4, 8):
        pm, pt, walls, rss = [], [], [], 0
        for _ in range(runs):
            pj, w, r = plan(m, g)
            pm.append(pj["planner_ms"]); walls.append(w); rss = max(rss, r)
            pj2, w, r = plan(m, g, "--train")
            pt.append(pj2["planner_ms"]); rss = max(rss, r)
        nodes = sum(len(s["nodes"]) for s in pj["stages"])
        row = dict(model=m, nodes=nodes, g=g, stages=len(pj["stages"]), stages_train=len(pj2["stages"]),
                   planner_ms=statistics.median(pm), train_ms=statistics.median(pt),
                   wall_ms=1e3 * statistics.median(walls), rss_mib=rss / 1024)
        row["ok"] = max(row["planner_ms"], row["train_ms"]) <= 50
        timing.append(row)
        print(f"{m:<18} {nodes:>5} {g:>2} {row['stages']:>6} {row['planner_ms']:>10.2f} {row['stages_train']:>8} "
              f"{row['train_ms']:>9.2f} "
              f"{row['wall_ms']:>8.1f} {row['rss_mib']:>8.1f}  {'met' if row['ok'] else 'MISSED'}")

# ---- 2. predicted speedup ----------------------------------------------------------
speed = {}  # (model, replicate, g, schedule) -> (speedup, stages, bubble)
for rep in (True, False):
    print(f"\npredicted training speedup over one device (--train{'' if rep else ' --no-replicate'}), "
          "cost model for H100")
    print(f"{'model':<18} " + " ".join(f"{f'g={g} {s}':>11}" for g in (2, 4, 8) for s in ("gpipe", "1f1b")))
    for m in names:
        cells = []
        for g in (2, 4, 8):
            for s in ("gpipe", "1f1b"):
                pj, _, _ = plan(m, g, "--train", "--schedule", s, *([] if rep else ["--no-replicate"]))
                speed[m, rep, g, s] = (pj["predicted_speedup"], len(pj["stages"]), pj["bubble_fraction"])
                cells.append(f"{pj['predicted_speedup']:>11.2f}")
        print(f"{m:<18} " + " ".join(cells))
shutil.rmtree(tmp, ignore_errors=True)

if md_path:
    L = []
    L.append("<!-- generated by tools/bench_planner.sh --markdown; do not edit by hand -->")
    L.append("### Predicted speedup (cost model, H100)\n")
    L.append("Predictions of pipecc's cost model for NVIDIA H100 SXM GPUs joined by NVLink 4 "
             "(`passes/plan/profile.c`), not measurements: the simulated time of one training iteration "
             "(forward + backward of a batch of 32, M micro-batches) on g devices against the same "
             "M micro-batches on one device. `pipecc MODEL --shape input:32x3x224x224 -g G --device h100 "
             "-m M --target cuda --plan-only --train --schedule S` (299x299 for Inception-v3); M = 4g (8, 16 and "
             "32 for g = 2, 4, 8), given: without -m the cuda target takes the count its cost model predicts "
             "fastest (see -m in `pipecc --help`). GPipe and 1F1B get "
             "the same partition here (memory does not bind); they differ only in the simulated schedule.\n")
    for rep in (True, False):
        L.append("With stage replication (the default: a stage may be data-parallel over several devices):\n"
                 if rep else "\nPure pipeline (`--no-replicate`: one device per stage):\n")
        L.append("| model | g=2 GPipe | g=2 1F1B | g=4 GPipe | g=4 1F1B | g=8 GPipe | g=8 1F1B |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for m in names:
            L.append(f"| {LABEL.get(m, m)} | " + " | ".join(
                f"{speed[m, rep, g, s][0]:.2f}" for g in (2, 4, 8) for s in ("gpipe", "1f1b")) + " |")
        if rep:
            L.append("\nA replicated stage's replicas take whole micro-batches in turn (replica j runs those with "
                     "mb % r == j, as the runtime does): the cost model charges the busiest replica's ceil(M/r) of "
                     "the M micro-batches, caps r at M, and the simulation runs each replica as its own device.")
    L.append("\n### Planner time\n")
    L.append(f"`planner_ms`: wall time of antichain + partition (from `plan.json`), median of {runs} runs, "
             "batch 32, `--device h100 --target cuda --plan-only`, inference and `--train`; wall: the whole "
             "`pipecc` run (load, fold, shape, profile, plan, plan.json, report.html), median; peak RSS from "
             "`/usr/bin/time -f %M`. Measured on a shared 2-core build machine. Goal: planner_ms <= 50.\n")
    L.append("| model | nodes | g | planner_ms (inference) | stages | planner_ms (--train) | stages | "
             "pipecc wall ms | peak RSS MiB |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in timing:
        L.append(f"| {LABEL.get(r['model'], r['model'])} | {r['nodes']} | {r['g']} | {r['planner_ms']:.2f} | "
                 f"{r['stages']} | {r['train_ms']:.2f} | {r['stages_train']} | {r['wall_ms']:.1f} | "
                 f"{r['rss_mib']:.1f} |")
    L.append("\nFor inference the cost model makes stage replicas free (no gradient all-reduce), so every "
             "inference plan above is one stage replicated over the g devices (pure data parallelism).")
    with open(md_path, "w") as f:
        f.write("\n".join(L) + "\n")
    print(f"\nwrote {md_path}")
EOF
