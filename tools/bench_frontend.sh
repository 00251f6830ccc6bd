#!/usr/bin/env bash
# tools/bench_frontend.sh - foundation benchmark: wall time and peak RSS of
# parse + fold + shape (pipecc --emit=ir) for VGG-16 and ResNet-50.
# Goal: <= 0.3 s and <= 1.2x the model file's size in RSS.
#   bash tools/bench_frontend.sh [BUILD_DIR] [MODELS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODELS=${2:-out/models}
/usr/bin/python3 tools/export_models.py --out "$MODELS" --models vgg16,resnet50 >/dev/null
printf "%-10s %10s %12s %14s %12s %10s\n" model file_MiB wall_s_med peak_RSS_MiB RSS/file goal
for m in vgg16 resnet50; do
  f="$MODELS/$m.onnx"
  size=$(stat -c %s "$f")
  cat "$f" >/dev/null   # warm page cache: we measure pipecc, not the disk
  walls=() rss=0
  for i in 1 2 3 4 5; do
    # pipecc's own --time-passes total (ms resolution) for the time, time(1) for the RSS
    out=$( { /usr/bin/time -f "RSS %M" "$BUILD/pipecc" "$f" --shape input:1x3x224x224 --emit=ir --time-passes >/dev/null; } 2>&1)
    ms=$(echo "$out" | awk '/pipecc: total/ {print $3}')
    walls+=("$(awk -v ms="$ms" 'BEGIN {printf "%.4f", ms / 1000}')")
    r=$(echo "$out" | awk '/^RSS/ {print $2}')
    [ "$r" -gt "$rss" ] && rss=$r
  done
  med=$(printf "%s\n" "${walls[@]}" | sort -n | sed -n 3p)
  awk -v m="$m" -v s="$size" -v w="$med" -v r="$rss" 'BEGIN {
    ratio = r * 1024 / s;
    ok = (w <= 0.3 && ratio <= 1.2) ? "met" : "MISSED";
    printf "%-10s %10.1f %12.4f %14.1f %12.4f %10s\n", m, s / 1048576, w, r / 1024, ratio, ok }'
done
