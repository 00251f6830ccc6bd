#!/usr/bin/env bash
# tools/test.sh - set up a fresh machine, build pipecc and run the whole test suite.
#   bash tools/test.sh            # everything CI runs (no GPU needed)
#   BUILD=build-x bash tools/test.sh -L models   # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPECC_WERROR=ON -DPIPECC_BUILD_TESTS=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
cd "$BUILD"
ctest -j "$(nproc)" --output-on-failure --timeout 1800 "$@"
