#!/usr/bin/env bash
# tools/install_deps.sh - install everything pipecc needs on a fresh Debian 12 machine.
# Idempotent: skips what is already there. Needs root (apt-get) or sudo.
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

APT_PKGS="build-essential cmake ninja-build clang libclang-rt-14-dev pkg-config
  libprotobuf-c-dev protobuf-c-compiler libonnx-dev libopenblas-dev libcjson-dev
  libopenmpi-dev openmpi-bin python3-torch python3-torchvision python3-numpy python3-pip python3-venv python3-sklearn"
missing=""
for p in $APT_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "install_deps: apt-get install$missing"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi

# Python is for tests and tools only: Debian's python3 (it has torch); onnx (which ships
# the backend node tests) and onnxruntime (the inference oracle) from PyPI, with numpy<2
# because Debian's torch is built against numpy 1.x.
PY=/usr/bin/python3
if ! $PY - <<'PYEOF' 2>/dev/null
import onnx, onnxruntime, numpy, torch, torchvision, ml_dtypes
assert onnx.__version__ == "1.16.2", onnx.__version__
assert numpy.__version__.startswith("1."), numpy.__version__
PYEOF
then
  echo "install_deps: pip install -r tools/requirements.txt"
  $SUDO $PY -m pip install -q --break-system-packages -r "$(dirname "$0")/requirements.txt"
fi
# onnx 1.23 for the node tests of opsets 22 to 28 (cpu.node_tests_22_28): written by its
# own case generators, since its wheel ships no test data. A venv of its own, beside the
# onnx 1.16 the rest of the suite reads (PIPECC_ONNX_PYTHON in tests/cpu/CMakeLists.txt).
VENV=${PIPECC_ONNX_VENV:-/opt/venv-onnx-1.23}
if ! "$VENV/bin/python" -c 'import onnx, numpy; assert onnx.__version__ == "1.23.2"' 2>/dev/null; then
  echo "install_deps: $VENV with onnx 1.23.2"
  $SUDO $PY -m venv "$VENV"
  $SUDO "$VENV/bin/pip" install -q onnx==1.23.2
fi
echo "install_deps: ok"
