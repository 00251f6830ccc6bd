#!/bin/bash
# tools/bench_gpu.sh - cuda target throughput on one GPU: ResNet-50 and the BERT-style
# model of tools/export_models.py, pipecc (g=1 and g=4 stages sharing the GPU) against
# PyTorch eager and torch.compile on the same GPU, batch and precision (TF32 on, as
# pipecc's default; --no-tf32 switches both sides to exact float32).
#
#   tools/bench_gpu.sh [--build DIR] [--batch B] [--iters N] [--work DIR] [--no-tf32] [--quick]
#
#   --build DIR   pipecc build directory (default: build), with DIR/pipecc
#   --batch B     samples per batch (default 32; must be divisible by the micro-batches)
#   --iters N     timed iterations (default 200; pipecc --bench N --stream, PyTorch N batches)
#   --work DIR    models and pipecc builds (default: /tmp/pipecc-bench-gpu)
#   --quick       g=1 only: ResNet-50 (legacy and graph cuDNN API, stem by cuDNN, one input
#                 copy) and BERT-style (one input copy), against eager and torch.compile
#                 (2 nvcc builds instead of 8; tools/gpu_kit.sh)
#   PIPECC_PYTHON python with torch, torchvision, onnx, numpy (default /usr/bin/python3)
#
# Prints one line per (model, runner): samples/s and ms per batch, then the speedups
# (ResNet-50 also with --layout nchw: channels-last Convs against the model's layout; with
# --layout nhwc-all; its 1x1 Convs through cuDNN, PIPECC_CONV_GEMM=0, against GEMMs; and
# its Convs through cuDNN's graph API, PIPECC_CONV_API=graph, against the legacy API).
# Needs an NVIDIA GPU: exits 1 with a message when there is none.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build"
BATCH=32
ITERS=200
WORK=/tmp/pipecc-bench-gpu
TF32=1
QUICK=0
PY="${PIPECC_PYTHON:-/usr/bin/python3}"

while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --iters) ITERS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --no-tf32) TF32=0; shift ;;
    --quick) QUICK=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "bench_gpu.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ ! -e /dev/nvidia0 ] || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "bench_gpu.sh: no NVIDIA GPU here (/dev/nvidia0 missing or nvidia-smi failed);" \
       "this benchmark runs the cuda target and PyTorch on a GPU, nothing was measured" >&2
  exit 1
fi
PIPECC="$BUILD/pipecc"
if [ ! -x "$PIPECC" ]; then
  echo "bench_gpu.sh: $PIPECC not found (build pipecc first, or pass --build DIR)" >&2
  exit 2
fi
if ! "$PY" -c "import torch, torchvision, numpy; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "bench_gpu.sh: $PY lacks torch/torchvision/numpy or torch sees no CUDA device" >&2
  exit 2
fi

GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
mkdir -p "$WORK/models"
"$PY" "$ROOT/tools/export_models.py" --out "$WORK/models" --models resnet50,bert >&2

NOTF32=()
[ "$TF32" = 1 ] || NOTF32=(--no-tf32)
RESULTS="$WORK/results.txt"
: > "$RESULTS"

# pipecc: build (g stages, all on the one GPU, m micro-batches), run --bench, record
# samples/s as runner LABEL; for g > 1 the same build again with PIPERT_SYNC_SETS=1
# (every stage finishes each micro-batch before handing it on: synchronous hand-over)
bench_pipecc() { # name input_name shape input_file g m label [pipecc flags...]
  local name=$1 in=$2 shape=$3 file=$4 g=$5 m=$6 label=$7
  shift 7
  local flags=("$@")
  local d="$WORK/$name-$label"
  local split=()
  [ "$g" -gt 1 ] && split=(env PIPECC_SPLIT=even)  # exactly g stages, one replica each
  # --stream: batches back to back, as the PyTorch loop runs them, so with -m 1 the
  # stages overlap consecutive batches. pipecc's figure includes copying every batch
  # from host memory; PyTorch's input stays on the GPU.
  ${split[@]+"${split[@]}"} "$PIPECC" "$WORK/models/$name.onnx" --target cuda --shape "$in:$shape" -g "$g" -m "$m" \
      ${NOTF32[@]+"${NOTF32[@]}"} ${flags[@]+"${flags[@]}"} -o "$d" >&2
  bench_env "$name" "$in" "$file" "$label" "" "$label"
  [ "$g" -gt 1 ] && bench_env "$name" "$in" "$file" "$label" PIPERT_SYNC_SETS=1 "$label-sync"
  return 0
}

# the build WORK/NAME-BUILD_LABEL run (--bench --stream), with one environment variable
# set unless VAR=VALUE is empty; samples/s recorded as runner LABEL
bench_env() { # name input_name input_file build_label VAR=VALUE label
  local out sps
  out="$(env ${5:+"$5"} "$WORK/$1-$4/pipeline" --input "$2=$3" --bench "$ITERS" --stream)"
  echo "$out" >&2
  sps="$(echo "$out" | sed -n 's/^throughput: \([0-9.]*\) samples\/s.*/\1/p')"
  echo "$1 $6 $sps" >> "$RESULTS"
}

# PyTorch eager and torch.compile, same model definition, batch and input
bench_torch() { # name input_file
  "$PY" - "$ROOT" "$1" "$2" "$ITERS" "$TF32" >> "$RESULTS" <<'EOF'
import sys, time
import numpy as np
import torch
root, name, path, iters, tf32 = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
sys.path.insert(0, root + "/tools")
from export_models import build_model
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.backends.cudnn.allow_tf32 = tf32
torch.manual_seed(0)
model = build_model(name).eval().cuda()
x = torch.from_numpy(np.load(path)).cuda()

def rate(fn):
    with torch.inference_mode():
        for _ in range(10):
            fn(x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            fn(x)
        torch.cuda.synchronize()
        return x.shape[0] * iters / (time.perf_counter() - t)

print(f"{name} torch-eager {rate(model):.2f}")
print(f"{name} torch-compile {rate(torch.compile(model)):.2f}")
EOF
}

"$PY" - "$WORK" "$BATCH" <<'EOF'
import sys
import numpy as np
work, b = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
np.save(f"{work}/resnet50_x.npy", rng.standard_normal((b, 3, 224, 224), dtype=np.float32))
np.save(f"{work}/bert_x.npy", rng.integers(0, 512, (b, 64), dtype=np.int64))
EOF

# g=1: the batch in one micro-batch; g=4: 4 micro-batches (pipecc-g4), or the batch in one
# (pipecc-g4-m1: kernels as large as g=1's, the stages overlapping consecutive batches)
runs=("1 1 pipecc-g1" "4 4 pipecc-g4" "4 1 pipecc-g4-m1")
[ "$QUICK" = 1 ] && runs=("1 1 pipecc-g1")
for run in "${runs[@]}"; do
  read -r g m label <<< "$run"
  bench_pipecc resnet50 input "${BATCH}x3x224x224" "$WORK/resnet50_x.npy" "$g" "$m" "$label"
  bench_pipecc bert input_ids "${BATCH}x64" "$WORK/bert_x.npy" "$g" "$m" "$label"
done
if [ "$QUICK" = 0 ]; then
  # the model's own NCHW layout everywhere instead of channels-last Convs (passes/opt/layout.h)
  bench_pipecc resnet50 input "${BATCH}x3x224x224" "$WORK/resnet50_x.npy" 1 1 pipecc-g1-nchw --layout nchw
  # the 3-channel stem channels-last too; and the default build with its 1x1 Convs through
  # cuDNN instead of cuBLASLt GEMMs (pk_conv_1x1)
  bench_pipecc resnet50 input "${BATCH}x3x224x224" "$WORK/resnet50_x.npy" 1 1 pipecc-g1-nhwc-all --layout nhwc-all
  bench_env resnet50 input "$WORK/resnet50_x.npy" pipecc-g1 PIPECC_CONV_GEMM=0 pipecc-g1-cudnn1x1
fi
# the same build with its Convs through cuDNN's graph (backend) API and heuristics mode A
# instead of the legacy API's heuristic (PIPECC_CONV_API=graph); with its stem through
# cuDNN instead of the direct kernel (PIPECC_CONV_DIRECT=0); with one device copy of the
# input instead of two (PIPERT_INPUT_COPIES=1: the upload of the next batch waits for the
# forward reading the copy); with each Conv's ways timed on its first call and the fastest
# kept (PIPECC_CONV_TUNE=1)
extra_rows() {
  bench_env resnet50 input "$WORK/resnet50_x.npy" pipecc-g1 PIPECC_CONV_API=graph pipecc-g1-graph
  bench_env resnet50 input "$WORK/resnet50_x.npy" pipecc-g1 PIPECC_CONV_DIRECT=0 pipecc-g1-cudnnstem
  bench_env resnet50 input "$WORK/resnet50_x.npy" pipecc-g1 PIPERT_INPUT_COPIES=1 pipecc-g1-1copy
  bench_env resnet50 input "$WORK/resnet50_x.npy" pipecc-g1 PIPECC_CONV_TUNE=1 pipecc-g1-tune
  bench_env bert input_ids "$WORK/bert_x.npy" pipecc-g1 PIPERT_INPUT_COPIES=1 pipecc-g1-1copy
}
extra_rows
# --quick: all again, so the table shows how far one run moves between two of the same
if [ "$QUICK" = 1 ]; then
  bench_env resnet50 input "$WORK/resnet50_x.npy" pipecc-g1 "" pipecc-g1
  bench_env bert input_ids "$WORK/bert_x.npy" pipecc-g1 "" pipecc-g1
  extra_rows
fi
bench_torch resnet50 "$WORK/resnet50_x.npy"
bench_torch bert "$WORK/bert_x.npy"

echo
echo "GPU: $GPU, batch $BATCH, $ITERS iterations, TF32 $([ "$TF32" = 1 ] && echo on || echo off)"
printf "%-10s %-15s %14s %14s\n" model runner samples/s ms/batch
awk -v b="$BATCH" '{ printf "%-10s %-15s %14.1f %14.3f\n", $1, $2, $3, ($3 > 0 ? 1000 * b / $3 : 0) }' "$RESULTS"
for m in resnet50 bert; do
  awk -v m="$m" '$1 == m { r[$2] = $3 }
    function q(a, b) { return (a > 0 && b > 0) ? sprintf("%.2fx", a / b) : "n/a" }
    END { printf "%s: pipecc g=1 / eager %s, / torch.compile %s; g=4 (one GPU) / g=1: %s (-m 4), %s (-m 1);",
                 m, q(r["pipecc-g1"], r["torch-eager"]), q(r["pipecc-g1"], r["torch-compile"]),
                 q(r["pipecc-g4"], r["pipecc-g1"]), q(r["pipecc-g4-m1"], r["pipecc-g1"])
          printf " hand-over on the device / synchronous (PIPERT_SYNC_SETS=1): %s (-m 4), %s (-m 1)",
                 q(r["pipecc-g4"], r["pipecc-g4-sync"]), q(r["pipecc-g4-m1"], r["pipecc-g4-m1-sync"])
          if ("pipecc-g1-nchw" in r) printf "; channels-last / --layout nchw (g=1): %s", q(r["pipecc-g1"], r["pipecc-g1-nchw"])
          if ("pipecc-g1-nhwc-all" in r) printf "; --layout nhwc-all / nhwc: %s", q(r["pipecc-g1-nhwc-all"], r["pipecc-g1"])
          if ("pipecc-g1-cudnn1x1" in r) printf "; 1x1 Convs as GEMMs / through cuDNN: %s", q(r["pipecc-g1"], r["pipecc-g1-cudnn1x1"])
          if ("pipecc-g1-graph" in r) printf "; cuDNN graph API / legacy API: %s (torch.compile: %s)", q(r["pipecc-g1-graph"], r["pipecc-g1"]), q(r["pipecc-g1-graph"], r["torch-compile"])
          if ("pipecc-g1-cudnnstem" in r) printf "; stem by the direct kernel / by cuDNN (PIPECC_CONV_DIRECT=0): %s", q(r["pipecc-g1"], r["pipecc-g1-cudnnstem"])
          if ("pipecc-g1-1copy" in r) printf "; two input copies / one (PIPERT_INPUT_COPIES=1): %s", q(r["pipecc-g1"], r["pipecc-g1-1copy"])
          if ("pipecc-g1-tune" in r) printf "; Convs tuned (PIPECC_CONV_TUNE=1) / default: %s (torch.compile: %s)", q(r["pipecc-g1-tune"], r["pipecc-g1"]), q(r["pipecc-g1-tune"], r["torch-compile"])
          printf "\n" }' \
    "$RESULTS"
done
