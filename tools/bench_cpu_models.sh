#!/usr/bin/env bash
# tools/bench_cpu_models.sh - pipecc's cpu target at g=1 (one stage, one micro-batch, one
# BLAS thread) against onnxruntime with one intra-op thread, both pinned to core 0, on
# the transformer and mobile models (prints figures; not a test):
#   bert, gpt (batch 32), vit_static (its fixed batch of 4), mobilenet_v2 (batch 8).
# Goal: ratio >= 1.0 (pipecc samples/s over onnxruntime's).
# It runs tools/bench_cpu_vs_ort.py (which see: the same inputs for both, pipecc's output
# checked against onnxruntime's, ROUNDS interleaved rounds of ITERS batches, the median
# ratio and its range) on these models without the training steps; QUIET=1 adds its
# --quiet (tools/quiet_run.py: the "others" column).
#   bash tools/bench_cpu_models.sh [BUILD_DIR] [WORK_DIR] [ITERS] [ROUNDS] [MODELS]
set -euo pipefail
cd "$(dirname "$0")/.."
Q=()
[ "${QUIET:-0}" = 1 ] && Q=(--quiet)
exec /usr/bin/python3 tools/bench_cpu_vs_ort.py --build "${1:-build}" --work "${2:-out/bench_cpu_models}" \
  --iters "${3:-10}" --rounds "${4:-5}" --models "${5:-bert,gpt,vit_static,mobilenet_v2}" --no-train "${Q[@]}"
