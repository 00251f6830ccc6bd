#!/usr/bin/env bash
# Build the fuzzers (clang, ASan + UBSan, libFuzzer) in their own build folder and run
# the frontend's for SECONDS (default 60), then the .npy/.npz readers' for half as long.
# Exit status 0: no finding; 1: a crash, leak, sanitizer report, timeout or
# out-of-memory (the input is left in WORK/artifacts/ and printed as a reproduce
# command); 2: the build or the seeds failed.
#
#   tests/fuzz/run_fuzz.sh [SECONDS]
#   tests/fuzz/run_fuzz.sh --no-build --target frontend|npy --fuzzer PATH --work DIR 30
#
# Environment: PIPECC_FUZZ_BUILD (build folder, default build-fuzz), CC (default clang),
# FUZZ_JOBS (ninja -j, default 2). Inputs found to add coverage are kept in WORK/corpus
# between runs; the seeds are made anew each run (tests/fuzz/make_seeds.py).
set -euo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${PIPECC_FUZZ_BUILD:-$SRC/build-fuzz}"
build=1
target=""
fuzzer=""
work=""
seconds=60
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --fuzzer) fuzzer="$2"; shift ;;
    --work) work="$2"; shift ;;
    --target) target="$2"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) seconds="$1" ;;
  esac
  shift
done
if [ -z "$target" ]; then # both, one after the other, from one build
  if [ "$build" = 1 ]; then
    if [ ! -f "$BUILD/build.ninja" ]; then
      CC="${CC:-clang}" cmake -S "$SRC" -B "$BUILD" -G Ninja -DPIPECC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        > "$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 2; }
    fi
    ninja -C "$BUILD" -j "${FUZZ_JOBS:-2}" fuzz_frontend fuzz_npy || exit 2
  fi
  "$0" --no-build --target frontend --fuzzer "$BUILD/tests/fuzz/fuzz_frontend" --work "${work:-$BUILD/testwork/fuzz}" \
    "$seconds" || exit $?
  "$0" --no-build --target npy --fuzzer "$BUILD/tests/fuzz/fuzz_npy" --work "${work:-$BUILD/testwork/fuzz}/npy" \
    "$(( (seconds + 1) / 2 ))"
  exit $?
fi
[ -n "$fuzzer" ] || { echo "run_fuzz.sh: --target needs --fuzzer"; exit 2; }
[ -n "$work" ] || work="$BUILD/testwork/fuzz"
[ -x "$fuzzer" ] || { echo "run_fuzz.sh: no fuzzer at $fuzzer"; exit 2; }

mkdir -p "$work/corpus" "$work/artifacts"
if [ "$target" = npy ]; then
  /usr/bin/python3 "$SRC/tests/fuzz/make_seeds.py" --npy --out "$work/seeds" || exit 2
else
  /usr/bin/python3 "$SRC/tests/fuzz/make_seeds.py" --out "$work/seeds" --models "$BUILD/testwork/models" || exit 2
fi

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
echo "run_fuzz.sh: fuzzing $target for $seconds s ($fuzzer)"
set +e
"$fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=131072 \
  -dict="$work/seeds.dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" "$work/seeds" 2>&1 | tee "$work/fuzz.log" | \
  grep -v -E '^#[0-9]+.*(NEW|REDUCE)' 
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then
  echo "run_fuzz.sh: FINDING (fuzzer exit status $rc); artifacts:"
  ls -la "$work/artifacts/"
  for f in "$work/artifacts/"*; do
    [ -f "$f" ] && echo "  reproduce: $fuzzer $f"
  done
  exit 1
fi
echo "run_fuzz.sh: no findings in $target in $seconds s"
