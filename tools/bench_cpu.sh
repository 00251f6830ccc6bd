#!/usr/bin/env bash
# tools/bench_cpu.sh - the CPU target's benchmarks (prints figures; not a test).
#  (a) ResNet-50, batch 32 (--shape input:32x3x224x224), 8 micro-batches: a 2-stage
#      pipeline on the 2 cores (one BLAS thread per stage) over 1 stage on one core.
#      Goal >= 1.85x (limit 2.0). Both streamed (--bench N --stream: batches back to
#      back, the pipeline filled once), and per batch (fill and drain every batch).
#      The 2-stage split is planned on measured costs: --target cpu --profile-run builds
#      a one-stage profiler, which times every node on core 0 (profile.json), and
#      pipecc --profile profile.json plans with it.
#  (b) pipecc g=1 on one thread vs onnxruntime with one intra-op thread, same model
#      and batch. Goal >= 1.0x.
# Each figure is taken ROUNDS times, the two sides of a ratio alternating. The machine
# may be shared: every run goes through tools/quiet_run.py, which first waits (up to
# 15 minutes) for idle cores and afterwards reports how many cores other processes took
# during the run ("others"); figures with others well above 0 are not clean.
# Run it on a quiet machine:  bash tools/bench_cpu.sh [BUILD_DIR] [WORK_DIR] [ITERS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
WORK=${2:-out/bench_cpu}
N=${3:-4}
R=${4:-3}
PY=/usr/bin/python3
mkdir -p "$WORK"
$PY tools/export_models.py --out "$WORK/models" --models resnet50 >/dev/null
M="$WORK/models/resnet50.onnx"
SHAPE="--shape input:32x3x224x224"
$PY tools/ort_ref.py "$M" $SHAPE --threads 1 --inputs-out "$WORK/in.npz" --outputs-out "$WORK/exp.npz" >/dev/null
"$BUILD/pipecc" "$M" $SHAPE -m 8 --target cpu --profile-run -o "$WORK/prof" >/dev/null 2>&1
taskset -c 0 "$WORK/prof/profile" --profile-out "$WORK/profile.json" 2>&1 | tail -1
"$BUILD/pipecc" "$M" $SHAPE -g 1 -m 8 -o "$WORK/g1m8" >/dev/null 2>&1
"$BUILD/pipecc" "$M" $SHAPE -g 2 -m 8 --no-replicate --profile "$WORK/profile.json" -o "$WORK/g2m8" 2>&1 |
  grep -E "^ +[0-9]+ |bottleneck"
"$BUILD/pipecc" "$M" $SHAPE -g 1 -m 1 -o "$WORK/g1m1" >/dev/null 2>&1
Q="$PY tools/quiet_run.py --"
tp() { awk '/^throughput/ {print $2}'; }
oth() { awk '/^others:/ {print $2}'; }
# How far two cores scale here at all: on a VM whose vCPUs share physical cores, FMA
# throughput of both together is well under twice one (the ceiling of (a)).
cc -O2 -mavx2 -mfma -pthread tools/fma_peak.c -o "$WORK/fma_peak" && $Q "$WORK/fma_peak" 2
echo "== (a) 2 stages on 2 cores vs 1 stage on 1 core (ResNet-50, batch 32, 8 micro-batches)"
for i in $(seq "$R"); do
  r1s=$($Q taskset -c 0 "$WORK/g1m8/pipeline" --input "$WORK/in.npz" --output "$WORK/o1.npz" --bench "$N" --stream)
  r2s=$($Q "$WORK/g2m8/pipeline" --input "$WORK/in.npz" --output "$WORK/o2.npz" --bench "$N" --stream --pin)
  r1b=$($Q taskset -c 0 "$WORK/g1m8/pipeline" --input "$WORK/in.npz" --output "$WORK/o1.npz" --bench "$N")
  r2b=$($Q "$WORK/g2m8/pipeline" --input "$WORK/in.npz" --output "$WORK/o2.npz" --bench "$N" --pin)
  echo "$r2s" | grep -E "^stage" | tr '\n' ' '
  echo
  $Q "$WORK/fma_peak" 1 | grep -v others | tr '\n' ' '
  echo
  awk -v a="$(echo "$r1s" | tp)" -v b="$(echo "$r2s" | tp)" -v c="$(echo "$r1b" | tp)" -v d="$(echo "$r2b" | tp)" \
      -v o="$(echo "$r1s" | oth) $(echo "$r2s" | oth) $(echo "$r1b" | oth) $(echo "$r2b" | oth)" 'BEGIN {
    printf "streamed: g=1 %.2f, g=2 %.2f samples/s, speedup %.3fx (goal 1.85x)   per batch: g=1 %.2f, g=2 %.2f, %.3fx (limit 1.78x)   others (cores): %s\n",
           a, b, b / a, c, d, d / c, o }'
done
$PY tools/compare.py "$WORK/o2.npz" "$WORK/o1.npz" --bitwise
echo "== (b) pipecc g=1, one thread vs onnxruntime, one intra-op thread (ResNet-50, batch 32)"
for i in $(seq "$R"); do
  rp=$($Q taskset -c 0 "$WORK/g1m1/pipeline" --input "$WORK/in.npz" --output "$WORK/o3.npz" --bench "$N")
  ro=$($Q taskset -c 0 $PY tools/ort_bench.py "$M" "$WORK/in.npz" --threads 1 --iters "$N")
  awk -v a="$(echo "$rp" | tp)" -v b="$(echo "$ro" | tp)" -v o="$(echo "$rp" | oth) $(echo "$ro" | oth)" \
      'BEGIN { printf "pipecc %.2f samples/s, onnxruntime %.2f samples/s, ratio %.3fx (goal 1.0x)   others (cores): %s\n", a, b, a / b, o }'
done
$PY tools/compare.py "$WORK/o3.npz" "$WORK/exp.npz"
