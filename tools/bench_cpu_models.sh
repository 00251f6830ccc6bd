#!/usr/bin/env bash
# tools/bench_cpu_models.sh - pipecc's cpu target at g=1 (one stage, one micro-batch, one
# BLAS thread) against onnxruntime with one intra-op thread, both pinned to core 0, on
# the transformer and mobile models (prints figures; not a test):
#   bert, gpt (batch 32), vit_static (its fixed batch of 4), mobilenet_v2 (batch 8).
# Goal: ratio >= 1.0 (pipecc samples/s over onnxruntime's).
# Per model: the same inputs for both (tools/ort_ref.py), pipecc's output checked
# against onnxruntime's (tools/compare.py, rel-L2 <= 1e-4), then ROUNDS rounds of
# `pipeline --bench ITERS` and `ort_bench.py --iters ITERS`, their order swapped every
# round (the machine's speed drifts; vit_static runs 50 x ITERS batches); the line per model gives the median ratio over
# the rounds, its range, and the median throughputs. With QUIET=1 every run goes
# through tools/quiet_run.py (waits for idle cores, then reports "others": the cores
# other processes took; figures with others well above 0 are not clean) and the worst
# "others" of the model's runs is printed.
#   bash tools/bench_cpu_models.sh [BUILD_DIR] [WORK_DIR] [ITERS] [ROUNDS] [MODELS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
WORK=${2:-out/bench_cpu_models}
N=${3:-10}
R=${4:-5}
MODELS=${5:-bert,gpt,vit_static,mobilenet_v2}
PY=/usr/bin/python3
mkdir -p "$WORK"
$PY tools/export_models.py --out "$WORK/models" --models "$MODELS" >/dev/null
Q=""
[ "${QUIET:-0}" = 1 ] && Q="$PY tools/quiet_run.py --"
tp() { awk '/^throughput/ {print $2}'; }
oth() { awk 'BEGIN { m = 0 } /^others:/ { if ($2 > m) m = $2 } END { print m }'; }
med() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf "%-14s %10s %10s %8s %19s %7s\n" model pipecc/s ort/s ratio "range" others
for m in ${MODELS//,/ }; do
  NI=$N
  case $m in
    bert | gpt) B="-d batch=32" ;;
    mobilenet_v2) B="-d batch=8" ;;
    vit_static) B="" NI=$((N * 50)) ;; # a batch takes a fraction of a millisecond
    *) B="" ;;
  esac
  M="$WORK/models/$m.onnx"
  $PY tools/ort_ref.py "$M" $B --threads 1 --inputs-out "$WORK/$m.in.npz" --outputs-out "$WORK/$m.exp.npz" >/dev/null
  "$BUILD/pipecc" "$M" $B -g 1 -m 1 -o "$WORK/$m" >/dev/null 2>&1
  taskset -c 0 "$WORK/$m/pipeline" --input "$WORK/$m.in.npz" --output "$WORK/$m.o.npz" >/dev/null
  $PY tools/compare.py "$WORK/$m.o.npz" "$WORK/$m.exp.npz" >"$WORK/$m.compare" ||
    { cat "$WORK/$m.compare"; echo "bench_cpu_models.sh: $m: pipecc's output is off" >&2; exit 1; }
  : >"$WORK/$m.rounds"
  : >"$WORK/$m.log"
  for i in $(seq "$R"); do
    pc() { $Q taskset -c 0 "$WORK/$m/pipeline" --input "$WORK/$m.in.npz" --output "$WORK/$m.o.npz" --bench "$NI" 2>&1 |
             tee -a "$WORK/$m.log"; }
    ort() { $Q taskset -c 0 $PY tools/ort_bench.py "$M" "$WORK/$m.in.npz" --iters "$NI" 2>&1 | tee -a "$WORK/$m.log"; }
    if [ $((i % 2)) = 1 ]; then a=$(pc | tp); b=$(ort | tp); else b=$(ort | tp); a=$(pc | tp); fi
    echo "$a $b" >>"$WORK/$m.rounds"
  done
  r=$(awk '{ printf "%.4f\n", $1 / $2 }' "$WORK/$m.rounds" | med)
  lo=$(awk '{ print $1 / $2 }' "$WORK/$m.rounds" | sort -g | head -1)
  hi=$(awk '{ print $1 / $2 }' "$WORK/$m.rounds" | sort -g | tail -1)
  printf "%-14s %10.1f %10.1f %7.3fx %8.3f..%-8.3f %7s\n" "$m" "$(cut -d' ' -f1 "$WORK/$m.rounds" | med)" \
    "$(cut -d' ' -f2 "$WORK/$m.rounds" | med)" "$r" "$lo" "$hi" "$([ -n "$Q" ] && oth <"$WORK/$m.log" || echo -)"
done
