#!/usr/bin/env bash
# tests/cuda/sim/nvcc_tmp_test.sh NVCC LIB SRC - ./nvcc leaves nothing in $TMPDIR, after a
# compile that succeeds and after one that fails (each compile writes two preprocessed copies
# of the stage, megabytes each; a suite of a thousand builds would otherwise fill /tmp).
set -u
nvcc=$1 lib=$2 src=$3
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir "$t/tmp" "$t/out"
fail=0
if ! TMPDIR=$t/tmp CUDASIM_LIB=$lib "$nvcc" -O0 -c "$src" -o "$t/out/ok.o"; then
  echo "FAIL: compiling $src failed"; fail=1
fi
[ -s "$t/out/ok.o" ] || { echo "FAIL: no object written"; fail=1; }
printf 'int main() { return undeclared_name; }\n' > "$t/out/bad.cu"
if TMPDIR=$t/tmp CUDASIM_LIB=$lib "$nvcc" -c "$t/out/bad.cu" -o "$t/out/bad.o" 2>/dev/null; then
  echo "FAIL: a source that does not compile was accepted"; fail=1
fi
left=$(ls -A "$t/tmp")
if [ -n "$left" ]; then
  echo "FAIL: left in TMPDIR: $left"; fail=1
fi
[ $fail = 0 ] && echo "ok: a good and a bad compile left TMPDIR empty"
exit $fail
