#!/usr/bin/env bash
# tools/bench_cpu.sh - the CPU target's benchmarks (prints figures; not a test).
#  (a) ResNet-50, batch 32 (--shape input:32x3x224x224), 8 micro-batches: a 2-stage
#      pipeline on the 2 cores (one BLAS thread per stage) over 1 stage on one core.
#      Goal >= 1.85x (limit 2.0). Both streamed (--bench N --stream: batches back to
#      back, the pipeline filled once), and per batch (fill and drain every batch).
#  (b) pipecc g=1 on one thread vs onnxruntime with one intra-op thread, same model
#      and batch. Goal >= 1.0x.
# Run it on a quiet machine:  bash tools/bench_cpu.sh [BUILD_DIR] [WORK_DIR] [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
WORK=${2:-out/bench_cpu}
N=${3:-4}
PY=/usr/bin/python3
mkdir -p "$WORK"
$PY tools/export_models.py --out "$WORK/models" --models resnet50 >/dev/null
M="$WORK/models/resnet50.onnx"
SHAPE="--shape input:32x3x224x224"
$PY tools/ort_ref.py "$M" $SHAPE --threads 1 --inputs-out "$WORK/in.npz" --outputs-out "$WORK/exp.npz" >/dev/null
"$BUILD/pipecc" "$M" $SHAPE -g 1 -m 8 -o "$WORK/g1m8" >/dev/null 2>&1
"$BUILD/pipecc" "$M" $SHAPE -g 2 -m 8 --no-replicate -o "$WORK/g2m8" 2>&1 | grep -E "^ +[0-9]+ |bottleneck"
"$BUILD/pipecc" "$M" $SHAPE -g 1 -m 1 -o "$WORK/g1m1" >/dev/null 2>&1
tp() { awk '/^throughput/ {print $2}'; }
echo "== (a) 2 stages on 2 cores vs 1 stage on 1 core (ResNet-50, batch 32, 8 micro-batches)"
t1s=$(taskset -c 0 "$WORK/g1m8/pipeline" --input "$WORK/in.npz" --output "$WORK/o1.npz" --bench "$N" --stream | tp)
t2s=$("$WORK/g2m8/pipeline" --input "$WORK/in.npz" --output "$WORK/o2.npz" --bench "$N" --stream --pin | tee "$WORK/g2.txt" | tp)
cat "$WORK/g2.txt"
t1b=$(taskset -c 0 "$WORK/g1m8/pipeline" --input "$WORK/in.npz" --output "$WORK/o1.npz" --bench "$N" | tp)
t2b=$("$WORK/g2m8/pipeline" --input "$WORK/in.npz" --output "$WORK/o2.npz" --bench "$N" --pin | tp)
$PY tools/compare.py "$WORK/o2.npz" "$WORK/o1.npz" --bitwise
awk -v a="$t1s" -v b="$t2s" -v c="$t1b" -v d="$t2b" 'BEGIN {
  printf "streamed:  g=1 %.2f samples/s, g=2 %.2f samples/s, speedup %.3fx (goal 1.85x)\n", a, b, b / a;
  printf "per batch: g=1 %.2f samples/s, g=2 %.2f samples/s, speedup %.3fx (fill-drain limit 2*(1-1/9) = 1.78x)\n", c, d, d / c }'
echo "== (b) pipecc g=1, one thread vs onnxruntime, one intra-op thread (ResNet-50, batch 32)"
tp_p=$(taskset -c 0 "$WORK/g1m1/pipeline" --input "$WORK/in.npz" --output "$WORK/o3.npz" --bench "$N" | tp)
tp_o=$(taskset -c 0 $PY tools/ort_bench.py "$M" "$WORK/in.npz" --threads 1 --iters "$N" | tp)
$PY tools/compare.py "$WORK/o3.npz" "$WORK/exp.npz"
awk -v a="$tp_p" -v b="$tp_o" 'BEGIN { printf "pipecc %.2f samples/s, onnxruntime %.2f samples/s, ratio %.3fx (goal 1.0x)\n", a, b, a / b }'
