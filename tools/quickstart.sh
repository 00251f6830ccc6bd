#!/usr/bin/env bash
# tools/quickstart.sh - the main job, end to end, on a fresh machine:
#   install dependencies, build pipecc, export ResNet-18 from PyTorch, compile it into a
#   2-stage pipeline (--no-replicate: one stage per core, no data-parallel replicas) for this machine's CPU cores, run a batch through it, and compare
#   the result with onnxruntime.
#   MODEL=gpt SHAPE="-d batch=4" bash tools/quickstart.sh   # another model
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target pipecc pipert
MODEL=${MODEL:-resnet18}
SHAPE=${SHAPE:---shape input:8x3x224x224}
G=${G:-2}
WORK=${WORK:-out/quickstart}
mkdir -p "$WORK"
PY=/usr/bin/python3
$PY tools/export_models.py --out "$WORK/models" --models "$MODEL"
echo "== pipecc $MODEL -g $G"
# shellcheck disable=SC2086
"$BUILD/pipecc" "$WORK/models/$MODEL.onnx" $SHAPE -g "$G" --no-replicate -o "$WORK/$MODEL-g$G"
echo "== onnxruntime reference"
# shellcheck disable=SC2086
$PY tools/ort_ref.py "$WORK/models/$MODEL.onnx" $SHAPE --int-high 512 \
  --inputs-out "$WORK/inputs.npz" --outputs-out "$WORK/expected.npz" >/dev/null
echo "== run the pipeline"
"$WORK/$MODEL-g$G/pipeline" --input "$WORK/inputs.npz" --output "$WORK/outputs.npz" --bench 3
$PY tools/compare.py "$WORK/outputs.npz" "$WORK/expected.npz" --rtol-l2 1e-4
echo "quickstart: ok (report: $WORK/$MODEL-g$G/report.html)"
