#!/usr/bin/env bash
# tools/gpu_kit.sh - pipecc's GPU checks in one call on a lent GPU machine.
#
#   bash tools/gpu_kit.sh pack              # here: fill .gpu/ (git-ignored), about 18 MiB
#   bash tools/gpu_kit.sh run [STEP ...]    # there, in the repository root, .gpu carried
#
# A lent GPU machine (one H100 or H200; see docs/cuda.md) has nvcc, cuDNN, cuBLAS,
# NCCL, PyTorch, onnx and onnxruntime, but no protobuf-c, cJSON or OpenBLAS, no
# protoc-c, no ONNX node test data in its onnx wheel, and cannot fetch packages. Device
# time is short (15 minutes a session, 10 a command), so everything it needs is packed
# here and the checks run in one command:
#
# pack  copies this machine's installed libprotobuf-c, libcjson and OpenBLAS (with
#       libgfortran and libquadmath) and their headers, generates the ONNX bindings from
#       the installed onnx.proto (libonnx-dev) for a protoc-c stand-in, and adds the
#       ONNX backend node tests' data of the installed onnx wheel: one archive,
#       .gpu/kit.tgz. Needs tools/install_deps.sh's packages.
# run   unpacks .gpu/kit.tgz into $GPU_KIT_ROOT (default /tmp/pipecc-gpu-kit), builds
#       pipecc in build-gpu against it (PIPECC_CUDA_ARCH=90: Hopper only, half of nvcc's
#       work) and runs the STEPs in order, each only while GPU_KIT_BUDGET seconds
#       (default 540, counted from the start) leave room for its estimate; a step that
#       does not fit is reported as not run. Logs go to $OUT (the device tool's folder
#       that comes back) or .gpu/out; a table of the steps is printed last.
#
# Steps (default: info build export bench correct profile ctest):
#   info     nvidia-smi, nvcc, python, torch, onnxruntime, where cuDNN's header is
#   build    cmake + ninja: build-gpu with the tests (PIPECC_PYTHON = python3 there; no
#            -Werror: that machine's GCC 13 warns where this one's does not)
#   export   tools/export_models.py resnet50,bert into build-gpu/testwork/models
#   bench    tools/bench_gpu.sh --quick: ResNet-50 g=1 (legacy cuDNN API, graph API, stem
#            through cuDNN, one input copy, Convs tuned), BERT-style g=1 (one input copy), PyTorch eager
#            and torch.compile (batch 32, TF32); about 100 s on an H200
#   benchfull  tools/bench_gpu.sh (every row; about twice as long as bench)
#   profile  pipecc --profile-run on ResNet-50, batch 32: legacy API, graph API, stem
#            through cuDNN, tuned (PIPECC_CONV_TUNE=1, with each distinct Conv's ways and
#            times): the slowest nodes and the MaxPool, per node, side by side
#   correct  ctest -L gpu -R 'resnet50|bert' -j 2 (g = 1, 2, 4 against onnxruntime); ~100 s
#            one after the other
#   ctest    ctest -L gpu -j 4, the rest but the node tests, the training programs first
#            (what is left of the budget; the build sets PIPECC_GPU_TESTS_PARALLEL, so
#            -j runs them side by side instead of one at a time under the nvcc lock)
#   node     ctest -R cuda.gpu.node_tests (the node tests on the GPU)
#
# Step times on an H200 (16 cores), 2026-11-27: build 14 s, export 11 s, bench 101 s,
# correct 96 s, profile 4 s (its nvcc build reused); one at a time the ctest step's tests
# took 600 s.
#
# Without a GPU, `run` runs info alone and reports every other step as "no GPU" (exit 1),
# unless GPU_KIT_NO_GPU=1 (to check the kit itself on a machine without one: the build
# and export steps run, the rest fail).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KIT="$ROOT/.gpu"
cmd="${1:-}"
[ $# -gt 0 ] && shift

pack() {
  local stage
  stage="$(mktemp -d)"
  # shellcheck disable=SC2064 # (the path now: the trap runs after pack's locals are gone)
  trap "rm -rf '$stage'" EXIT # (also when a check below exits)
  mkdir -p "$stage/include" "$stage/lib" "$stage/bin" "$stage/gen" "$KIT"
  # headers: cblas.h includes openblas_config.h; protobuf-c/ and cjson/ as installed
  local inc
  inc="$(printf '#include <cblas.h>\n' | cc -E -x c - -H 2>&1 >/dev/null | sed -n 's/^\. //p' | head -1)"
  [ -f "$inc" ] || { echo "gpu_kit: cblas.h not found (install libopenblas-dev)" >&2; exit 2; }
  cp -L "$inc" "$(dirname "$inc")/openblas_config.h" "$stage/include/"
  cp -rL /usr/include/protobuf-c /usr/include/cjson "$stage/include/"
  # libraries: the files the dynamic linker resolves here, under their sonames, plus the
  # unversioned names the linker looks for
  local probe="$stage/probe"
  printf '#include <cblas.h>\nint main(void){float a=1,b=1,c=0;cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1,&a,1,&b,1,0,&c,1);return 0;}\n' |
    cc -x c - -o "$probe" -Wl,--no-as-needed -lopenblas -lprotobuf-c -lcjson
  local so path
  while read -r so path; do
    case "$so" in
      libopenblas.so.0|libgfortran.so.5|libquadmath.so.0|libprotobuf-c.so.1|libcjson.so.1)
        cp -L "$path" "$stage/lib/$so"
        ln -sf "$so" "$stage/lib/${so%%.so.*}.so" ;;
    esac
  done < <(ldd "$probe" | awk '$2 == "=>" { print $1, $3 }')
  for so in libopenblas libgfortran libquadmath libprotobuf-c libcjson; do
    [ -e "$stage/lib/$so.so" ] || { echo "gpu_kit: $so not resolved by ldd" >&2; exit 2; }
  done
  rm -f "$probe"
  # the ONNX bindings, generated from the installed schema as CMake would, and a protoc-c
  # that hands them out (the GPU machine has no protoc-c)
  local proto=/usr/include/onnx/onnx.proto
  [ -f "$proto" ] || { echo "gpu_kit: $proto not found (install libonnx-dev)" >&2; exit 2; }
  mkdir -p "$stage/include/onnx"
  cp "$proto" "$stage/include/onnx/"
  protoc-c --c_out="$stage/gen" -I"$(dirname "$proto")" "$proto"
  cat > "$stage/bin/protoc-c" <<'EOF'
#!/bin/sh
# protoc-c stand-in (tools/gpu_kit.sh): copies the bindings generated by pack
out=""
for a in "$@"; do case "$a" in --c_out=*) out="${a#--c_out=}" ;; esac; done
[ -n "$out" ] || { echo "protoc-c stand-in: no --c_out" >&2; exit 1; }
here="$(cd "$(dirname "$0")/.." && pwd)"
cp "$here/gen/onnx.pb-c.c" "$here/gen/onnx.pb-c.h" "$out/"
EOF
  chmod +x "$stage/bin/protoc-c"
  # the ONNX backend node tests' data (tests/lib/node_data.py: onnx 1.16.2's, opsets up to 21)
  local node
  node="$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, "'"$ROOT/tests/lib"'"); import node_data; print(node_data.node_data_dir())')"
  [ -d "$node" ] || { echo "gpu_kit: $node not found (bash tools/install_deps.sh)" >&2; exit 2; }
  mkdir -p "$stage/onnx_node"
  cp -r "$node/." "$stage/onnx_node/"
  tar -C "$stage" -czf "$KIT/kit.tgz.tmp" include lib bin gen onnx_node
  mv "$KIT/kit.tgz.tmp" "$KIT/kit.tgz"
  echo "gpu_kit: $KIT/kit.tgz ($(du -h "$KIT/kit.tgz" | cut -f1)); on the GPU machine:"
  echo "  run(command='bash tools/gpu_kit.sh run', carry=['.gpu'], timeout_s=600)"
}

[ "$cmd" = pack ] && { pack; exit 0; }
if [ "$cmd" != run ]; then
  sed -n '2,40p' "$0"
  [ "$cmd" = -h ] || [ "$cmd" = --help ] && exit 0
  exit 2
fi

# ---- run (on the GPU machine) ------------------------------------------------------------
START=$(date +%s)
BUDGET=${GPU_KIT_BUDGET:-540}
LOGS="${OUT:-$KIT/out}"
mkdir -p "$LOGS"
BUILD="$ROOT/build-gpu"
KROOT="${GPU_KIT_ROOT:-/tmp/pipecc-gpu-kit}"
PY="$(command -v python3)"
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(info build export bench correct profile ctest)
SUMMARY="$LOGS/summary.txt"
: > "$SUMMARY"

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# estimate (s) of each step, with 16 cores: a step starts only if it fits
est() {
  case "$1" in
    info) echo 5 ;; build) echo 60 ;; export) echo 20 ;; bench) echo 130 ;; benchfull) echo 400 ;;
    profile) echo 60 ;; correct) echo 110 ;; node) echo 200 ;; ctest) echo 120 ;; *) echo 0 ;;
  esac
}

if [ ! -f "$KIT/kit.tgz" ]; then
  echo "gpu_kit: $KIT/kit.tgz missing: run 'bash tools/gpu_kit.sh pack' here and carry .gpu" >&2
  exit 2
fi
rm -rf "$KROOT"
mkdir -p "$KROOT"
tar -C "$KROOT" -xzf "$KIT/kit.tgz"
export CPATH="$KROOT/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$KROOT/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$KROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PIPECC_ONNX_NODE_DATA="$KROOT/onnx_node"
export PIPECC_CUDA_ARCH="${PIPECC_CUDA_ARCH:-90}"
export PIPECC_PYTHON="$PY"
export PYTHONUNBUFFERED=1
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then
  CUDA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
  export CUDA_HOME
fi
have_gpu=0
if [ -e /dev/nvidia0 ] && nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi

step_info() {
  nvidia-smi || true
  nvcc --version | tail -2 || true
  echo "CUDA_HOME=${CUDA_HOME:-}"
  ls /usr/include/cudnn*.h /usr/include/x86_64-linux-gnu/cudnn*.h "${CUDA_HOME:-/usr/local/cuda}"/include/cudnn*.h 2>/dev/null | head -3 || true
  "$PY" -c 'import sys, numpy, onnx, onnxruntime, torch; print(sys.version.split()[0], "numpy", numpy.__version__, "onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available())'
  nproc
  [ "$have_gpu" = 1 ] || [ "${GPU_KIT_NO_GPU:-0}" = 1 ]
}
step_build() {
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPECC_BUILD_TESTS=ON \
    -DPROTOC_C="$KROOT/bin/protoc-c" -DONNX_PROTO="$KROOT/include/onnx/onnx.proto" \
    -DPROTOBUF_C_LIB="$KROOT/lib/libprotobuf-c.so" -DCJSON_LIB="$KROOT/lib/libcjson.so" \
    -DPIPECC_PYTHON="$PY" -DPIPECC_GPU_TESTS_PARALLEL=ON
  cmake --build "$BUILD" -j "$(nproc)"
}
step_export() {
  "$PY" "$ROOT/tools/export_models.py" --out "$BUILD/testwork/models" --models resnet50,bert
}
step_bench() {
  bash "$ROOT/tools/bench_gpu.sh" --build "$BUILD" --work /tmp/pipecc-bench-gpu --quick
}
step_benchfull() {
  bash "$ROOT/tools/bench_gpu.sh" --build "$BUILD" --work /tmp/pipecc-bench-gpu
}
step_profile() {
  local d=/tmp/pipecc-gpu-profile
  rm -rf "$d"
  "$BUILD/pipecc" "$BUILD/testwork/models/resnet50.onnx" --target cuda --shape input:32x3x224x224 --profile-run -o "$d"
  "$d/profile" --profile-out "$d/legacy.json"
  PIPECC_CONV_API=graph "$d/profile" --profile-out "$d/graph.json"
  PIPECC_CONV_DIRECT=0 "$d/profile" --profile-out "$d/cudnnstem.json"
  # every Conv's ways timed where it runs, the fastest kept (PIPECC_CONV_TUNE): a line per
  # distinct Conv with each way's time
  PIPECC_CONV_TUNE=1 PIPECC_CONV_VERBOSE=1 "$d/profile" --profile-out "$d/tuned.json" 2> "$d/tune.log"
  grep "; kept: " "$d/tune.log" | sed 's/^pipeline: [^:]*: //' || true
  cp "$d/legacy.json" "$d/graph.json" "$d/tuned.json" "$d/tune.log" "$LOGS/" 2>/dev/null || true
  "$PY" - "$d/legacy.json" "$d/graph.json" "$d/cudnnstem.json" "$d/tuned.json" <<'EOF'
import json, sys
a, b, c, t = (json.load(open(p))["nodes"] for p in sys.argv[1:5])
ta, tb, tc, tt = (sum(v["fwd_ms"] for v in x.values()) for x in (a, b, c, t))
print(f"ResNet-50 batch 32, per batch: legacy cuDNN API {ta:.3f} ms, graph API {tb:.3f} ms, "
      f"stem through cuDNN (PIPECC_CONV_DIRECT=0) {tc:.3f} ms, tuned (PIPECC_CONV_TUNE=1) {tt:.3f} ms")
rows = sorted(a, key=lambda k: -a[k]["fwd_ms"])
pick = rows[:12] + [k for k in rows[12:] if "pool" in k.lower()]
print(f"{'node':48s} {'legacy ms':>10s} {'graph ms':>10s} {'cudnn stem':>10s} {'tuned':>10s}")
nan = {"fwd_ms": float("nan")}
for k in pick:
    print(f"{k[:48]:48s} {a[k]['fwd_ms']:10.4f} {b.get(k, nan)['fwd_ms']:10.4f} "
          f"{c.get(k, nan)['fwd_ms']:10.4f} {t.get(k, nan)['fwd_ms']:10.4f}")
EOF
}
ctest_left() { # ctest arguments...: run inside what is left of the budget
  local t=$(( $(left) - 10 ))
  (cd "$BUILD" && timeout "$t" ctest --output-on-failure --timeout "$t" "$@")
}
step_correct() { ctest_left -L gpu -R 'resnet50|bert' -j 2; }
step_ctest() { # the training programs first (the least run on a GPU), then the rest
  local rc=0
  ctest_left -L gpu -R 'train|step\.' -E 'node_tests' -j 4 || rc=$?
  ctest_left -L gpu -E 'resnet50|bert|node_tests|train|step\.' -j 4 || rc=$?
  return $rc
}
step_node() { ctest_left -R 'cuda\.gpu\.node_tests'; }

status=0
for s in "${STEPS[@]}"; do
  if ! declare -F "step_$s" >/dev/null; then
    echo "gpu_kit: unknown step '$s' (see --help)" >&2
    exit 2
  fi
  if [ "$s" != info ] && [ "$have_gpu" = 0 ] && [ "${GPU_KIT_NO_GPU:-0}" != 1 ]; then
    printf '%-10s %-8s %6s\n' "$s" "no GPU" - >> "$SUMMARY"
    status=1
    continue
  fi
  if [ "$(left)" -lt "$(est "$s")" ]; then
    printf '%-10s %-8s %6s  (%s s left, needs about %s)\n' "$s" "not run" - "$(left)" "$(est "$s")" >> "$SUMMARY"
    continue
  fi
  t0=$(date +%s)
  echo "== gpu_kit: $s ($(left) s of the budget left)"
  set +e
  ( set -o pipefail; "step_$s" 2>&1 | tee "$LOGS/$s.log" )
  rc=$?
  set -e
  res=ok
  [ "$rc" = 0 ] || { res="FAILED($rc)"; status=1; }
  printf '%-10s %-8s %5ss\n' "$s" "$res" "$(( $(date +%s) - t0 ))" >> "$SUMMARY"
  # a later step needs pipecc: stop once the build failed
  if [ "$s" = build ] && [ "$rc" != 0 ]; then break; fi
done
echo
echo "== gpu_kit summary ($(( $(date +%s) - START )) s; logs in $LOGS)"
cat "$SUMMARY"
exit $status
