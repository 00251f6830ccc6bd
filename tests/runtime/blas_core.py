#!/usr/bin/python3
"""The pipeline never runs BLAS kernels below the CPU's class (runtime/rt_cpu.c; docs/cpu.md,
"The BLAS core"), on a simulated failed detection.

usage: blas_core.py --pipecc BUILD/pipecc --work DIR

A model built here whose every GEMM goes to OpenBLAS (a 3x3 Conv by Winograd, a 3x3 Conv
summing 1152 products per output, a MatMul summing 2048), compiled at g=1 and batch 2:

  - OPENBLAS_CORETYPE=Prescott PIPERT_BLAS_CORE=fix: OpenBLAS starts on its Prescott
    kernels as on a CPU it does not recognise; the pipeline must restart on the CPU's
    best core and say so (-v, --bench and --info: "BLAS core X (corrected: OpenBLAS
    chose Prescott)"), X the core pipeline --info names for this CPU;
  - its outputs must be bitwise those of a run with OPENBLAS_CORETYPE=X set by hand, and
    of the plain run where OpenBLAS's own choice is X;
  - OPENBLAS_CORETYPE=Prescott alone (the user's choice) is kept, with a warning, and
    runs Prescott's kernels: their outputs differ from X's by rounding only, rel-L2
    <= 1e-5 (the summation order of another kernel; printed);
  - PIPERT_BLAS_REEXEC already set (a restart that did not take) stops a second restart.

Exit status 0 when every check passes, 1 otherwise."""
import argparse
import os
import re
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import pipecc_test as pt  # noqa: E402

# rel-L2 of Prescott's sgemm against the CPU's best core (docs/cpu.md): sums of up to 2048
# float products in another order differ by about sqrt(K) x 2^-24 relative (measured on
# Zen 4 against Cooperlake: 1.3e-6)
LEGACY_TOL = 1e-5


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def build_model(path):
    import onnx
    from onnx import TensorProto as T, helper, numpy_helper
    rng = np.random.default_rng(3)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)
    inits = [w("w1", 128, 64, 3, 3), w("b1", 128), w("w2", 32, 128, 3, 3), w("wm", 2048, 10)]
    inits.append(numpy_helper.from_array(np.array([2, 2048], np.int64), "shape"))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="wino", pads=[1, 1, 1, 1]),  # Winograd
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="im2col", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Reshape", ["c2", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "wm"], ["y"], name="mm")]
    g = helper.make_graph(nodes, "blas_core", [helper.make_tensor_value_info("x", T.FLOAT, [2, 64, 16, 16])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def run(exe, args, env_more, label):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "PIPERT_BLAS_CORE", "PIPERT_BLAS_REEXEC", "PIPERT_VERBOSE"):
        env.pop(k, None)
    env.update(env_more)
    r = subprocess.run([exe] + args, capture_output=True, text=True, env=env, timeout=120)
    if r.returncode:
        fail("%s: exit %d\n%s%s" % (label, r.returncode, r.stdout, r.stderr))
    return r


def kernels(text, label):
    m = re.search(r"^(?:pipeline: )?kernels: .*; BLAS core (\S+)(.*); pipecc GEMM (\S+)", text, re.M)
    if not m:
        fail("%s: no kernels line:\n%s" % (label, text))
    return m.group(1), m.group(2), m.group(3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    model = os.path.join(a.work, "m.onnx")
    build_model(model)
    out = os.path.join(a.work, "out")
    r = subprocess.run([a.pipecc, model, "-g", "1", "-m", "1", "-o", out, "-j", "2"], capture_output=True, text=True)
    if r.returncode:
        fail("pipecc: " + r.stderr)
    exe = os.path.join(out, "pipeline")
    x = np.random.default_rng(5).standard_normal((2, 64, 16, 16)).astype(np.float32)
    xin = os.path.join(a.work, "x.npy")
    np.save(xin, x)

    def outputs(env, label, extra=()):
        y = os.path.join(a.work, label + ".npy")
        r = run(exe, ["--input", xin, "--output", y] + list(extra), env, label)
        return np.load(y), r

    # the plain run: the CPU's best core by the pipeline's table, and OpenBLAS's own choice
    info = run(exe, ["--info"], {}, "--info").stdout
    own, note, gemm = kernels(info, "--info")
    # the simulated failed detection
    sim = {"OPENBLAS_CORETYPE": "Prescott", "PIPERT_BLAS_CORE": "fix"}
    y_fix, r = outputs(sim, "fixed", ["-v"])
    core, note, _ = kernels(r.stderr, "a simulated Prescott with -v")
    if core == "Prescott" or "corrected: OpenBLAS chose Prescott" not in note:
        fail("Prescott was not corrected: BLAS core %s%s\n%s" % (core, note, r.stderr))
    best = core
    print("simulated Prescott: restarted on %s (OpenBLAS's own choice here: %s; pipecc GEMM %s)" % (best, own, gemm))
    for args in (["--info"], ["--bench", "1"]):
        c, n, _ = kernels(run(exe, args, sim, " ".join(args)).stdout, " ".join(args))
        if c != best or "corrected" not in n:
            fail("%s on a simulated Prescott: BLAS core %s%s, expected %s (corrected)" % (" ".join(args), c, n, best))
    # bitwise those of the corrected core chosen by hand (and of the plain run where it is OpenBLAS's own)
    y_hand, r = outputs({"OPENBLAS_CORETYPE": best}, "by_hand", ["-v"])
    if kernels(r.stderr, "OPENBLAS_CORETYPE=" + best)[0] != best:
        fail("OPENBLAS_CORETYPE=%s: %s" % (best, r.stderr))
    if y_fix.tobytes() != y_hand.tobytes():
        fail("the corrected run's outputs are not bitwise those of OPENBLAS_CORETYPE=%s" % best)
    y_own, _ = outputs({}, "plain")
    if own == best and y_own.tobytes() != y_fix.tobytes():
        fail("the corrected run's outputs are not bitwise those of the plain run (both on %s)" % best)
    # the user's Prescott is kept, with a warning, and rounds otherwise
    y_leg, r = outputs({"OPENBLAS_CORETYPE": "Prescott"}, "legacy", ["-v"])
    c, n, _ = kernels(r.stderr, "OPENBLAS_CORETYPE=Prescott")
    if c != "Prescott" or "warning: OPENBLAS_CORETYPE=Prescott" not in r.stderr:
        fail("a user's OPENBLAS_CORETYPE=Prescott: BLAS core %s%s, stderr:\n%s" % (c, n, r.stderr))
    e = pt.rel_l2(y_leg, y_fix)
    same = y_leg.tobytes() == y_fix.tobytes()
    print("Prescott's kernels against %s's: %s, rel-L2 %.3g, max |diff| %.3g" %
          (best, "bitwise equal" if same else "not bitwise equal", e, float(np.abs(y_leg - y_fix).max())))
    if not e <= LEGACY_TOL:
        fail("Prescott's outputs against %s's: rel-L2 %.3g > %g" % (best, e, LEGACY_TOL))
    # no second restart
    r = run(exe, ["-v", "--input", xin, "--output", os.path.join(a.work, "guard.npy")],
            {"OPENBLAS_CORETYPE": "Prescott", "PIPERT_BLAS_CORE": "fix", "PIPERT_BLAS_REEXEC": "Prescott"}, "guard")
    c, n, _ = kernels(r.stderr, "PIPERT_BLAS_REEXEC set")
    if c != "Prescott" or "did not take" not in n or "restarting" in r.stderr:
        fail("PIPERT_BLAS_REEXEC set: BLAS core %s%s\n%s" % (c, n, r.stderr))
    print("OK")
    pt.done_with(a.work)


if __name__ == "__main__":
    main()
