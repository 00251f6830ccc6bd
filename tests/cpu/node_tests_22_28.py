#!/usr/bin/python3
"""cpu target, the ONNX backend node tests of default-domain opsets 22 to 28: written by
tools/gen_node_tests.py from the case generators of onnx 1.23 or later (the wheels ship no
node-test data), with the cases of earlier opsets that they add to the data of
tests/lib/node_data.py (onnx 1.16.2's), and run by node_tests.py with the expected failures
of tests/cpu/node_xfail_22_28.txt (exact: an unexpected pass fails too). A test passes on
the ONNX backend runner's own check (node_tests.py --criterion onnx: rtol 1e-3, atol 1e-7,
bfloat16 within two of its ulps), the check every backend of these tests is held to; the
summary says how many passes are also within pipecc's tighter one. The tests of ops pipecc
does not have run too (--all-ops): their refusals are expected failures with reasons.

    node_tests_22_28.py --pipecc build/pipecc --work W [--python P] [--sample N] [--jobs 2]
                        [--cuda-sim LIBCUDASIM]

P is a Python with onnx 1.23 or later and numpy (default: the one running this script);
onnxruntime is not needed. Without one the run is reported SKIPPED and exits 77. The tests
are written once into W/data-<onnx version>[-new] (about 10 s of CPU) and reused; --sample N
runs only the first N tests (by name) of each set of op types, as node_tests.py --sample."""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-k", default=None)
    ap.add_argument("--cuda-sim", default=None, metavar="LIBCUDASIM",
                    help="run them on the cuda target on the CUDA simulator (node_tests_cuda.py run --sim), less "
                         "the cpu target's expected failures and tests/cuda/node_xfail_22_28_cuda.txt's")
    a = ap.parse_args()
    py = a.python
    if not py or not os.access(py, os.X_OK):
        print(f"SKIPPED: no Python with onnx >= 1.23 ('{py}': pass --python)")
        return SKIP
    r = subprocess.run([py, "-c", "import numpy, onnx; print(onnx.__version__)"], capture_output=True, text=True)
    ver = r.stdout.strip()
    parts = ver.split(".")
    if r.returncode or len(parts) < 2 or not all(p.isdigit() for p in parts[:2]) or \
            (int(parts[0]), int(parts[1])) < (1, 23):
        print(f"SKIPPED: {py} has no onnx >= 1.23 with numpy ({ver or r.stderr.strip()[-200:]})")
        return SKIP
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from node_data import node_data_dir  # noqa: E402
    old = node_data_dir()
    new_since = ["--new-since", old] if os.path.isdir(old) else []
    data = os.path.join(a.work, f"data-{ver}" + ("-new" if new_since else ""))
    stamp = data + ".written"  # beside the folder: node_tests.py takes every entry in it for a test
    if not os.path.exists(stamp):
        r = subprocess.run([py, os.path.join(ROOT, "tools", "gen_node_tests.py"), data] + new_since)
        if r.returncode:
            print(f"tools/gen_node_tests.py failed (exit {r.returncode})")
            return 1
        open(stamp, "w").close()
    xfail = os.path.join(HERE, "node_xfail_22_28.txt")
    if a.cuda_sim:  # the cuda target on the simulator: the tests the cpu target passes
        cmd = [py, os.path.join(ROOT, "tests", "cuda", "node_tests_cuda.py"), "run", "--sim", a.cuda_sim, "--all",
               "--pipecc", a.pipecc, "--work", os.path.join(a.work, "cuda"), "--data", data, "--no-extra",
               "--criterion", "onnx", "--xfail", xfail, "--xfail",
               os.path.join(ROOT, "tests", "cuda", "node_xfail_22_28_cuda.txt"), "--jobs", str(a.jobs)]
    else:
        cmd = [py, os.path.join(HERE, "node_tests.py"), "--pipecc", a.pipecc, "--work", os.path.join(a.work, "run"),
               "--data", data, "--no-extra", "--all-ops", "--criterion", "onnx", "--xfail", xfail, "--jobs",
               str(a.jobs)]
    if a.sample:
        cmd += ["--sample", str(a.sample)]
    if a.k:
        cmd += ["-k", a.k]
    print(f"onnx {ver} ({py})", flush=True)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
