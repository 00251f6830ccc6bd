#!/usr/bin/env bash
# tests/install/install_test.sh - pipecc installed and relocated, its trees gone:
#   1. a copy of the source tree (the files git tracks) is configured and built (pipecc,
#      libpipert) and installed with `cmake --install --prefix`;
#   2. the prefix is moved elsewhere and the copied source and build trees are deleted;
#   3. the moved pipecc compiles a model exported by the installed tools, for the cpu
#      target (built and run against onnxruntime through the installed tools, and
#      DIR/pipeline --info / --bench on generated data) and the cuda target (emitted);
#   4. no file of either output folder names the deleted trees, the source tree the
#      test ran from, or its build tree;
#   5. where cpack and dpkg-deb exist, the Debian package (cpack -G DEB), extracted, compiles
#      and runs the same model.
# usage: install_test.sh SOURCE_DIR WORK_DIR [BUILD_DIR]   (WORK_DIR: emptied; the test works in TMPDIR)
set -euo pipefail
SRC=$(cd "$1" && pwd)
WORK=$2
MAIN_BUILD=${3:-$SRC/build}
# the trees and the prefix go outside the source and build trees (TMPDIR), so that a path
# of theirs found in an output can only have come from the trees themselves
rm -rf "$2"
mkdir -p "$2"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipecc-install-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say() { echo "install_test: $*"; }
fail() { echo "FAIL: $*"; exit 1; }

say "copying the tracked source files"
if git -C "$SRC" rev-parse >/dev/null 2>&1; then
  (cd "$SRC" && git ls-files -z | tar --null -T - -cf -) | (mkdir -p "$WORK/src" && cd "$WORK/src" && tar xf -)
else
  cp -a "$SRC" "$WORK/src"
  rm -rf "$WORK/src"/build*
fi
say "configure, build (pipecc, libpipert) and install"
cmake -S "$WORK/src" -B "$WORK/bld" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPECC_WERROR=ON -DPIPECC_BUILD_TESTS=OFF \
  >"$WORK/configure.log"
cmake --build "$WORK/bld" -j "${JOBS:-2}" --target pipecc pipert >"$WORK/build.log" || { tail -30 "$WORK/build.log"; fail "build"; }
cmake --install "$WORK/bld" --prefix "$WORK/prefix" >"$WORK/install.log"
for f in bin/pipecc lib/pipecc/libpipert.a include/pipecc/pipert.h include/pipecc/pipert_gemm.h \
         share/pipecc/cuda/rt/pipecc_cuda_rt.cu share/pipecc/tools/export_models.py share/pipecc/tools/ort_ref.py; do
  [ -e "$WORK/prefix/$f" ] || fail "the install lacks $f"
done
if command -v cpack >/dev/null && command -v dpkg-deb >/dev/null; then
  say "the Debian package (cpack -G DEB), extracted rather than installed"
  (cd "$WORK/bld" && cpack -G DEB >"$WORK/cpack.log") || { tail -20 "$WORK/cpack.log"; fail "cpack -G DEB"; }
  deb=$(ls "$WORK"/bld/pipecc-*.deb)
  dpkg-deb -f "$deb" Package Version Depends | sed 's/^/install_test:   /'
  dpkg-deb -x "$deb" "$WORK/debroot"
fi
mv "$WORK/prefix" "$WORK/moved"
rm -rf "$WORK/src" "$WORK/bld"
P=$WORK/moved
say "the prefix moved to $P; the copied source and build trees deleted"

cd "$WORK"
/usr/bin/python3 "$P/share/pipecc/tools/export_models.py" --out models --models smallcnn >/dev/null
"$P/bin/pipecc" models/smallcnn.onnx -d batch=8 -g 2 -o out_cpu 2>pipecc_cpu.log || { cat pipecc_cpu.log; fail "pipecc (cpu)"; }
/usr/bin/python3 "$P/share/pipecc/tools/ort_ref.py" models/smallcnn.onnx -d batch=8 --inputs-out inputs.npz \
  --outputs-out expected.npz >/dev/null
out_cpu/pipeline --input inputs.npz --output outputs.npz || fail "the pipeline run"
/usr/bin/python3 "$P/share/pipecc/tools/compare.py" outputs.npz expected.npz --rtol-l2 1e-5 || fail "outputs against onnxruntime"
out_cpu/pipeline --info >info.txt || fail "pipeline --info"
grep -q "compiled by pipecc .* for the cpu target" info.txt && grep -q "^  input " info.txt || { cat info.txt; fail "--info"; }
out_cpu/pipeline --bench 2 >bench.txt 2>&1 || { cat bench.txt; fail "--bench on generated data"; }
grep -q "throughput:" bench.txt || fail "--bench printed no throughput"
"$P/bin/pipecc" models/smallcnn.onnx -d batch=8 -g 2 --target cuda --emit-only -o out_cuda 2>pipecc_cuda.log ||
  { cat pipecc_cuda.log; fail "pipecc (cuda, emit only)"; }
[ -f out_cuda/pipecc_cuda_rt.cu ] || fail "the cuda build lacks the device runtime"
for tree in "$WORK/src" "$WORK/bld" "$SRC" "$MAIN_BUILD"; do
  if grep -rIl --exclude='*.bin' -F "$tree" out_cpu out_cuda; then fail "files above name $tree"; fi
done
grep -q "PIPERT_LIB = $P/lib/pipecc/libpipert.a" out_cpu/Makefile || fail "the Makefile does not use the moved prefix"
deb_note=""
if [ -d "$WORK/debroot" ]; then
  D=$WORK/debroot/usr
  "$D/bin/pipecc" models/smallcnn.onnx -d batch=8 -g 1 -q -o out_deb || fail "pipecc from the Debian package"
  out_deb/pipeline --input inputs.npz --output outputs_deb.npz || fail "the Debian package's pipeline run"
  /usr/bin/python3 "$D/share/pipecc/tools/compare.py" outputs_deb.npz expected.npz --rtol-l2 1e-5 ||
    fail "the Debian package's outputs against onnxruntime"
  grep -q "PIPERT_LIB = $D/lib/pipecc/libpipert.a" out_deb/Makefile || fail "the Debian package's pipecc uses another runtime"
  deb_note="; the Debian package's pipecc built and ran it too"
fi
say "ok: installed, moved, trees deleted; cpu built and run (outputs match onnxruntime), cuda emitted; no tree path$deb_note"
