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

# Python is for tests and tools only: Debian's python3 (it has torch); onnx and
# onnxruntime (the inference oracle) from PyPI, with numpy<2 because Debian's torch is
# built against numpy 1.x.
PY=/usr/bin/python3
if ! $PY - <<'PYEOF' 2>/dev/null
import onnx, onnxruntime, numpy, torch, torchvision, ml_dtypes
assert onnx.__version__ == "1.23.2", onnx.__version__
assert numpy.__version__.startswith("1."), numpy.__version__
PYEOF
then
  echo "install_deps: pip install -r tools/requirements.txt"
  $SUDO $PY -m pip install -q --break-system-packages -r "$(dirname "$0")/requirements.txt"
fi
# The ONNX backend node tests of opsets up to 21: the data onnx 1.16.2's wheel ships (later
# wheels ship none), unpacked from the wheel without installing it (tests/lib/node_data.py).
# Those of opsets 22 to 28 are written at test time by onnx's own case generators.
NODE=${PIPECC_ONNX_NODE_DATA:-/opt/onnx-node-tests-1.16.2}
if [ ! -f "$NODE.unpacked" ]; then
  echo "install_deps: onnx 1.16.2's node tests into $NODE"
  tmp=$(mktemp -d)
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
    -d "$tmp" onnx==1.16.2
  $SUDO $PY - "$tmp"/onnx-1.16.2-*.whl "$NODE" <<'PYEOF'
import os, shutil, sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
pre = "onnx/backend/test/data/node/"
part = out + ".part"
shutil.rmtree(part, ignore_errors=True)
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith(pre) and not n.endswith("/")]
    for n in names:
        dst = os.path.join(part, n[len(pre):])
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with z.open(n) as f, open(dst, "wb") as g:
            shutil.copyfileobj(f, g)
shutil.rmtree(out, ignore_errors=True)
os.rename(part, out)
open(out + ".unpacked", "w").close()
print(f"install_deps: {len(names)} files of onnx 1.16.2's node tests")
PYEOF
  rm -rf "$tmp"
fi
echo "install_deps: ok"
