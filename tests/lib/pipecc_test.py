"""Helpers shared by the real-model test drivers (tests/cpu/run_model.py,
tests/cuda/run_cuda.py): the pipecc command line, the onnxruntime reference
(tools/ort_ref.py, or per micro-batch for training-mode exports), running a built
pipeline and comparing its outputs (rel-L2).

    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    import pipecc_test as pt
"""

import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def model_args():
    """The arguments every real-model driver takes: --pipecc, --model, --shape (repeated),
    --work. Returns the parser for the driver to add its own."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--work", required=True)
    return ap


def model_work(a, fresh=True):
    """(model name, its folder under --work): emptied first when fresh, else kept."""
    import shutil
    name = os.path.splitext(os.path.basename(a.model))[0]
    work = os.path.join(a.work, name)
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work, exist_ok=True)
    return name, work


def case_dir(work, name):
    """work/name, emptied (a model case's folder)."""
    import shutil
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def done_with(path, ok=True):
    """Removes a test's work folder once it passed (builds, weights, outputs: the suite
    writes gigabytes otherwise), unless PIPECC_KEEP_WORK is set; a failed test's folder
    stays for a look."""
    import shutil
    if ok and not os.environ.get("PIPECC_KEEP_WORK"):
        shutil.rmtree(path, ignore_errors=True)


def rel_l2(a, b, floor=0.0):
    """||a - b|| / max(||b||, floor) in float64 (||a - b|| when that is zero)."""
    import numpy as np
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    d = np.linalg.norm(a - b)
    n = max(np.linalg.norm(b), floor)
    return float(d / n if n > 0 else d)


def pipecc_cmd(pipecc, model, g, microbatches, out_dir, jobs, shapes, pre=(), post=()):
    """pipecc MODEL [pre] -g G -m M -o DIR -j JOBS --shape ... [post]."""
    cmd = [pipecc, model] + list(pre) + ["-g", str(g), "-m", str(microbatches), "-o", out_dir, "-j", str(jobs)]
    for s in shapes:
        cmd += ["--shape", s]
    return cmd + list(post)


def run_pipecc(cmd, label):
    """Runs a pipecc command line; its CompletedProcess, or None (printed) when it failed."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=split_env())
    if r.returncode:
        print(r.stderr[-4000:])
        print(f"FAIL {label}: pipecc exited with {r.returncode}")
        return None
    return r


def fused_chains(stderr):
    """The chain count of pipecc --time-passes' fuse line, -1 when there is none."""
    m = re.search(r"pass fuse .*\((\d+) chains\)", stderr)
    return int(m.group(1)) if m else -1


def fused_expansions(stderr):
    """The pair count of pipecc --time-passes' expand_dw line (a 1x1 Conv fused into a
    depthwise Conv, cpu target), -1 when there is none."""
    m = re.search(r"pass expand_dw .*\((\d+) pairs\)", stderr)
    return int(m.group(1)) if m else -1


def split_env(**more):
    """The environment for pipecc with exactly g contiguous stages (PIPECC_SPLIT=even)."""
    return dict(os.environ, PIPECC_SPLIT="even", **more)


def ort_reference(name, model, shapes, int_high, xin, yref, threads):
    """tools/ort_ref.py: random inputs (seed 0) into xin, onnxruntime outputs into yref.
    Returns True, or prints the failure and returns False."""
    cmd = [sys.executable, os.path.join(ROOT, "tools", "ort_ref.py"), model, "--inputs-out", xin,
           "--outputs-out", yref, "--threads", str(threads), "--seed", "0"]
    for s in shapes:
        cmd += ["--shape", s]
    if int_high:
        cmd += ["--int-high", str(int_high)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(r.stdout, r.stderr)
        print(f"FAIL {name}: ort_ref.py failed")
        return False
    return True


def ort_micro(model, inputs, M):
    """onnxruntime per micro-batch (training-mode exports), Dropout forced to inference."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    m = onnx.load(model)
    for n in m.graph.node:
        if n.op_type == "Dropout" and len(n.input) >= 3 and n.input[2]:
            name = n.input[2]
            for c in m.graph.node:
                if c.op_type == "Constant" and c.output[0] == name:
                    c.attribute[0].t.raw_data = b"\x00"
            for init in m.graph.initializer:
                if init.name == name:
                    init.raw_data = b"\x00"
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outs = {k: [] for k in names}
    B = next(iter(inputs.values())).shape[0]
    b = B // M
    for i in range(M):
        feed = {k: v[i * b:(i + 1) * b] for k, v in inputs.items()}
        for k, v in zip(names, sess.run(None, feed)):
            outs[k].append(v)
    return {k: np.concatenate(v) for k, v in outs.items()}


def run_pipeline(d, xin, label, extra=(), env=None, out_name="y.npz", log=None):
    """Runs d/pipeline on the inputs xin (more options extra, environment variables env
    added); returns (outputs dict or None, seconds). log: a list its stderr is appended to."""
    import numpy as np
    out = os.path.join(d, out_name)
    t = time.time()
    r = subprocess.run([os.path.join(d, "pipeline"), "--input", xin, "--output", out] + list(extra),
                       capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    tr = time.time() - t
    if log is not None:
        log.append(r.stderr)
    if r.returncode:
        print(r.stdout[-4000:], r.stderr[-4000:])
        print(f"FAIL {label}: pipeline exited with {r.returncode}")
        return None, tr
    return dict(np.load(out)), tr


def case_args(tol):
    """The command line of the model-case scripts (rnn_cases, legacy_opset, einsum_cases):
    --pipecc, --work, --target cpu|cuda, --sim-lib, -k PATTERN, --tol (default tol)."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--target", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--sim-lib", default=None, help="cuda: the CPU CUDA simulator library (tests/cuda/sim)")
    ap.add_argument("-k", default=None, help="only cases whose name matches this regex")
    ap.add_argument("--tol", type=float, default=tol)
    return ap.parse_args()


def one_error_line(cmd, label, *must, env=None):
    """Runs cmd (a pipecc command that must fail): exit 2 and one stderr line holding every
    string of must. Prints one line; True when it holds."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = r.stderr.strip().splitlines()
    good = r.returncode == 2 and len(lines) == 1 and all(m in lines[0] for m in must)
    print(("ok   " if good else "FAIL ") + f"{label}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    return good


def sim_target(cmd, env, target, sim_lib):
    """cmd and env for --target cuda through the CPU CUDA simulator (tests/cuda/sim),
    exact float32; unchanged for the cpu target."""
    if target == "cuda":
        cmd += ["--target", "cuda", "--no-tf32", "--cuda-arch", "90"]
        if "-m" not in cmd and "--microbatches" not in cmd:  # the cpu target's default count, as the cpu run
            cmd += ["-m", "max"]
        env.update(NVCC=os.path.join(ROOT, "tests", "cuda", "sim", "nvcc"), CUDASIM_LIB=sim_lib)
    return cmd, env


def cc_warnings(stderr):
    """The compiler's warning lines in stderr, from the emitted sources and the runtime
    headers they include (.c, .cu, .h, .cuh)."""
    return [ln for ln in stderr.splitlines() if re.search(r"\.(c|cu|h|cuh):\d+:\d+: warning:", ln)]


def build_run(cmd, env, out_dir, xin, label):
    """Runs the pipecc command cmd (a warning in the generated code fails it), then
    out_dir/pipeline on xin: its outputs, or None after printing why."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    warn = cc_warnings(r.stderr)
    if r.returncode or warn:
        print(r.stderr[-3000:])
        print(f"FAIL {label}: pipecc exit {r.returncode}{', warnings' if warn else ''}")
        return None
    return run_pipeline(out_dir, xin, label, env=env)[0]


def build_run_rel_l2(cmd, env, out_dir, xin, ref, tol, label):
    """build_run, then rel-L2 <= tol for every output of ref. Prints one line; True when
    everything holds."""
    import numpy as np
    got = build_run(cmd, env, out_dir, xin, label)
    if got is None:
        return False
    errs, fine = [], True
    for k, v in ref.items():
        if k not in got or got[k].shape != v.shape:
            errs.append(f"{k}: missing or shape {got.get(k, np.zeros(0)).shape} != {v.shape}")
            fine = False
            continue
        e = rel_l2(got[k], v, 1e-30)
        errs.append(f"{k} {e:.2e}")
        if not e <= tol:
            fine = False
            errs[-1] += " (over the bound)"
    print(("ok   " if fine else "FAIL ") + label + ": rel-L2 " + ", ".join(errs))
    return fine


def train_step(pipecc, model, d, feeds, label):
    """`pipecc MODEL --train-step --loss mse --lr 0.1` (one stage) into d/g1, then that step
    on feeds (input name -> array, "labels" among them). Returns its outputs (loss,
    grad/W, new/W), or None after printing why."""
    import numpy as np
    out = os.path.join(d, "g1")
    r = subprocess.run([pipecc, model, "-g", "1", "-o", out, "-j", "2", "--train-step", "--loss", "mse", "--lr", "0.1"],
                       capture_output=True, text=True)
    if r.returncode:
        print(r.stderr[-3000:])
        print(f"FAIL {label}: pipecc exited with {r.returncode}")
        return None
    xin = os.path.join(d, "in.npz")
    np.savez(xin, **feeds)
    return run_pipeline(out, xin, label, out_name="out.npz")[0]


def median_rel_l2(got, ref, floor=None):
    """The median over ref's outputs of compare()'s rel-L2 (outputs missing count as inf)."""
    import numpy as np
    errs = []
    for k in ref:
        errs.append(compare({k: got[k]}, {k: ref[k]}, float("inf"), k, floor, scale_ref=ref)[1]
                    if k in got else float("inf"))
    return float(np.median(errs)) if errs else 0.0


def compare(got, ref, tol, label, floor=None, scale_ref=None):
    """Every reference output present with its shape and dtype, rel-L2 <= tol, and not
    every float reference output zero. Returns (ok, worst rel-L2).

    floor (training outputs): ||got - ref|| is divided by max(||ref||, floor * R), R the
    largest reference norm among the outputs of the same kind (the prefix before '/':
    grad/, new/). A gradient that is zero in exact arithmetic (a Conv bias followed by
    a batch-statistics BatchNormalization: the mean is subtracted again) comes out as
    rounding noise (norm 6e-8 beside weight gradients of 2 to 10 for smallcnn_train),
    and the rel-L2 of two noise vectors says nothing. Any error above floor * R * tol
    in absolute terms still fails. scale_ref: the outputs R is taken from (default ref)."""
    import numpy as np

    def kind(k):
        return k.split("/", 1)[0] if "/" in k else ""
    scale = {}
    if floor:
        for k, v in (scale_ref or ref).items():
            scale[kind(k)] = max(scale.get(kind(k), 0.0), float(np.linalg.norm(v.astype(np.float64).ravel())))
    ok = True
    worst = 0.0
    floats = [v for v in ref.values() if v.dtype.kind == "f"]
    if floats and not any(np.any(v) for v in floats):
        # torchvision's ViT starts with a zero head: every output 0 whatever the body does
        print(f"FAIL {label}: every reference output is zero, so the comparison proves nothing "
              "(give the model non-zero weights)")
        ok = False
    for k, v in ref.items():
        if k not in got:
            print(f"FAIL {label}: output {k} missing")
            ok = False
            continue
        if got[k].shape != v.shape or got[k].dtype != v.dtype:
            print(f"FAIL {label}: output {k}: {got[k].dtype}{got[k].shape} vs {v.dtype}{v.shape}")
            ok = False
            continue
        e = rel_l2(got[k], v, floor * scale[kind(k)] if floor else 0.0)
        worst = max(worst, e)
        if not e <= tol:
            print(f"FAIL {label}: output {k}: rel-L2 {e:.3g} > {tol:g}")
            ok = False
    return ok, worst
