#!/usr/bin/python3
"""cuda target tests for one model.

    run_cuda.py build --pipecc build/pipecc --model resnet18.onnx --shape input:2x3x224x224 \\
                      --stages 2 --work /tmp/w
        Emits with --target cuda (PIPECC_SPLIT=even: exactly g contiguous stages) and
        builds through nvcc for sm_80 and sm_90 (compile and link only: no GPU needed).
        Checks: pipecc exits 0, DIR/pipeline exists, nvcc/cc print no warnings, and a
        second --emit-only run gives byte-identical sources (deterministic output).

    run_cuda.py run --pipecc ... --model ... --shape ... --stages 1,2,4 --work /tmp/w \\
                    [--int-high 512] [--train]
        Needs a GPU (exit 77 = skipped when /dev/nvidia0 is missing or nvidia-smi fails):
        builds for every g (all stages share the one GPU), runs DIR/pipeline on random
        inputs and compares with onnxruntime (tools/ort_ref.py): rel-L2 <= 1e-3 with TF32
        (the default), and for g=1 again with --no-tf32 at rel-L2 <= 1e-4. The largest g
        (stages handing over on the device) must give the same bits with
        PIPERT_SYNC_SETS=1 and over 20 streamed batches (--bench 20 --stream; 8 on the
        simulator). The
        float32 g=1 build runs again with PIPECC_CONV_GEMM=0 where it has 1x1 Convs as
        cuBLASLt GEMMs (pk_conv_1x1: cuDNN's convolution and the epilogue pass instead),
        and g=1 is also built with --layout nhwc-all (the 3-channel stem channels-last
        too); both compared (float32) with onnxruntime. The g=1 builds (TF32 and
        float32) with Convs run again with PIPECC_CONV_API=graph: every Conv a plan of
        cuDNN's backend API, every call through it, compared with onnxruntime as before.
        The first of those builds runs again with PIPECC_CONV_TUNE=1 (each Conv's ways
        timed on its first call, the fastest kept; compared with onnxruntime; again with
        the decisions' file it wrote: nothing timed, the same bits) and with
        PIPECC_CONV_TUNE=last (each Conv's last way, the graph API, kept: bitwise the
        outputs of the graph API forced by the switches, and so the run with its
        decisions' file alone).

    run_cuda.py fuse --pipecc ... --model resnet18.onnx --shape ... --work /tmp/w
        Emits (--emit-only, no nvcc) with and without --no-fuse: the fused build's stage
        sources run each chain pipecc reports fusing in one kernel, pk_conv_epi (bias,
        residual Add and Relu/Clip after cuDNN's convolution) or the stem's direct
        convolution with its epilogue (pk_conv_direct with an activation or residual),
        the unfused build never, and the fused build has fewer units. In run mode, g=1 is also built
        with --no-fuse and compared (float32) with onnxruntime.

    run_cuda.py layout --pipecc ... --model resnet50.onnx --shape ... --work /tmp/w \
                       --max-transposes 2
        Emits (--emit-only, no nvcc) with the default channels-last layout and with
        --layout nchw: the default build's sources describe as many Convs to cuDNN as
        channels-last as pipecc reports turning (at least one), the nchw build none, and
        the default build adds at most --max-transposes Transpose units (the layout
        changes at the edges of the channels-last region, not around every Conv); its
        channels-last 1x1 stride-1 Convs of one group (at least one) all call
        pk_conv_1x1 (cuBLASLt GEMMs), the nchw build's none. In
        run mode, g=1 is also built with --layout nchw and compared (float32) with
        onnxruntime.

    --program labels:2 --label-high 10 (both modes)
        The pipelined training program instead (PROGRAM_ARGS: pipecc --train, cross-entropy,
        SGD with momentum, 2 micro-batches). build: as above; without a GPU
        `pipeline train` must exit 1 naming the stage. run: `pipeline train --steps 2
        --no-shuffle` on random data for every g against the cpu target's g=1 program:
        loss, every gradient (--save-grads) and weight (--save) within rel-L2 1e-3 with
        --no-tf32 (tolerance not yet measured on a GPU); then the last g again with
        --recompute and --recompute=selective (re-materialisation): bitwise the same
        weights, gradients and losses.

    --step labels:2 --label-high 10 (both modes)
        The one-step training program instead (STEP_ARGS: cross-entropy loss, SGD, one
        micro-batch); labels:DIMS is the shape of its int64 labels input. build: as
        above. run: the reference is the cpu target's build of the same program on the
        same random inputs (labels below --label-high); every output (loss, gradients,
        updated weights and statistics) within rel-L2 1e-3 with --no-tf32 for every g,
        and 3e-2 with TF32 for g=1 (tolerances not yet measured on a GPU). --noise TRIES
        (resnet18_train, mobilenet_v2_train: batch statistics over few values): the fp32
        bound is twice the most the cpu reference itself moves when its inputs move by
        one ulp (at least 1e-3), and the median over the outputs must stay within 1e-3.

Prints one line per build with its wall time. Exit 0 pass, 1 fail, 77 skipped.
"""

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import pipecc_test as pt  # noqa: E402

SKIP = 77
STEP_ARGS = ["--train-step", "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.1"]
PROGRAM_ARGS = ["--train", "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"]


def gpus():
    """The GPUs nvidia-smi lists (0 without it)."""
    if not shutil.which("nvidia-smi"):
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([ln for ln in r.stdout.splitlines() if ln.startswith("GPU ")]) if r.returncode == 0 else 0


def have_gpu():
    if not os.path.exists("/dev/nvidia0"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


TF32_NOTE = ("TF32 not asserted: BatchNormalization with batch statistics over micro-batches of one or two "
             "samples is ill-conditioned in TF32 (PyTorch's own TF32 against float32 on mobilenet_v2 in training "
             "mode, batch 1, H100: rel-L2 0.65); the float32 runs are the check")


def limit(tol):
    """(the bound compare() applies, its description); tol None: printed, not asserted."""
    return (tol, f"tolerance {tol:g}") if tol else (float("inf"), TF32_NOTE)


def batch_stats(a):
    """True when the program normalises with batch statistics: --train inference of a model
    exported in training mode, or a training program of a model with BatchNormalization."""
    if a.train:
        return True
    if not (a.step or a.program):
        return False
    import onnx
    m = onnx.load(a.model, load_external_data=False)
    return any(n.op_type == "BatchNormalization" for n in m.graph.node)


def pipecc_cmd(a, g, d, extra=(), target="cuda"):
    pre = ["--target", target] + (STEP_ARGS if a.step else PROGRAM_ARGS if a.program else [])
    return pt.pipecc_cmd(a.pipecc, a.model, g, a.microbatches, d, a.jobs, a.shape, pre, extra)


def build(a, g, d, extra=()):
    """pipecc --target cuda into d; returns (ok, seconds)."""
    shutil.rmtree(d, ignore_errors=True)
    t = time.time()
    r = subprocess.run(pipecc_cmd(a, g, d, extra), capture_output=True, text=True, env=pt.split_env())
    dt = time.time() - t
    name = os.path.basename(a.model)
    if r.returncode or not os.path.exists(os.path.join(d, "pipeline")):
        print(r.stdout[-4000:], r.stderr[-12000:])
        print(f"FAIL {name} g={g}: pipecc --target cuda exited with {r.returncode}")
        return False, dt
    warn = [l for l in r.stderr.splitlines()
            if re.search(r"(\.cu|\.c|\.h)(:\d+:\d+:|\(\d+\)).*warning|^nvcc warning", l)]
    if warn:
        print("\n".join(warn[:20]))
        print(f"FAIL {name} g={g}: the emitted code compiles with warnings")
        return False, dt
    return True, dt


def same_sources(a, g, d, d2):
    """A second --emit-only run must write byte-identical sources."""
    shutil.rmtree(d2, ignore_errors=True)
    r = subprocess.run(pipecc_cmd(a, g, d2, ["--emit-only"]), capture_output=True, text=True,
                       env=pt.split_env(SOURCE_DATE_EPOCH="0"))
    if r.returncode:
        print(r.stderr[-4000:])
        return False
    ok = True
    for f in sorted(os.listdir(d2)):
        if f in ("plan.json", "report.html", "Makefile") or f.endswith(".bin"):
            continue  # plan.json/report.html: planner's; Makefile: has the -o DIR command line
        if not filecmp.cmp(os.path.join(d, f), os.path.join(d2, f), shallow=False):
            # the header has the command line (different -o); compare without it
            x = open(os.path.join(d, f), "rb").read().split(b"\n", 4)[-1]
            y = open(os.path.join(d2, f), "rb").read().split(b"\n", 4)[-1]
            if x != y:
                print(f"FAIL: {f} differs between two runs")
                ok = False
    shutil.rmtree(d2, ignore_errors=True)
    return ok


def random_feeds(a, labels):
    """Random inputs for a.shape (token ids below --int-high) and int64 labels below
    --label-high of shape `labels` (NAME:DIMS; None: no labels); {name: array}."""
    import numpy as np
    rng = np.random.default_rng(0)
    feeds = {}
    for s in a.shape + ([labels] if labels else []):
        nm, dims = s.rsplit(":", 1)
        shape = [int(v) for v in dims.replace(",", "x").split("x")]
        if s == labels:
            feeds[nm] = rng.integers(0, a.label_high, shape).astype(np.int64)
        elif a.int_high:
            feeds[nm] = rng.integers(0, a.int_high, shape).astype(np.int64)
        else:
            feeds[nm] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def train_args(a, work, feeds):
    """`pipeline train` data arguments for feeds (saved as .npy files in work)."""
    import numpy as np
    args = []
    lab = a.program.rsplit(":", 1)[0]
    for k, v in feeds.items():
        f = os.path.join(work, f"train_{k}.npy")
        np.save(f, v)
        args += ["--labels", f] if k == lab else ["--data", f"{k}={f}"]
    return args


NO_DEVICE_ENV = dict(os.environ, CUDASIM_DEVICES="0")


def use_sim(lib):
    """Builds from here on go through the CUDA simulator (tests/cuda/sim): its nvcc (make's
    NVCC ?= takes it from the environment), linking the simulator library lib."""
    os.environ["NVCC"] = os.path.join(HERE, "sim", "nvcc")
    os.environ["CUDASIM_LIB"] = os.path.abspath(lib)


def no_device_error(a, d, work):
    """Without a GPU the built pipeline must fail cleanly: exit 1, a line naming the stage
    (on the simulator: CUDASIM_DEVICES=0)."""
    import numpy as np
    if a.program:
        r = subprocess.run([os.path.join(d, "pipeline"), "train", "--steps", "1"] + train_args(a, work, random_feeds(a, a.program)),
                           capture_output=True, text=True, timeout=300, env=NO_DEVICE_ENV)
        if r.returncode != 1 or not re.search(r"^pipeline: stage \d+: no CUDA device", r.stderr, re.M):
            print(r.stdout[-2000:], r.stderr[-2000:])
            print(f"FAIL: without a GPU pipeline train should exit 1 naming the stage (got {r.returncode})")
            return False
        print("no GPU: " + r.stderr.splitlines()[0])
        return True
    files = []
    for s in a.shape + ([a.step] if a.step else []):
        name, dims = s.rsplit(":", 1)
        shape = [int(v) for v in dims.replace(",", "x").split("x")]
        f = os.path.join(work, f"zeros_{len(files)}.npy")
        np.save(f, np.zeros(shape, dtype=np.int64 if a.int_high or s == a.step else np.float32))
        files += ["--input", f"{name}={f}"]
    r = subprocess.run([os.path.join(d, "pipeline")] + files + ["--output", os.path.join(work, "y.npz")],
                       capture_output=True, text=True, timeout=300, env=NO_DEVICE_ENV)
    if r.returncode != 1 or not re.search(r"^pipeline: stage \d+: no CUDA device", r.stderr, re.M):
        print(r.stdout[-2000:], r.stderr[-2000:])
        print(f"FAIL: without a GPU the pipeline should exit 1 naming the stage (got {r.returncode})")
        return False
    print("no GPU: " + r.stderr.splitlines()[0])
    return True


def run_program(a, name, work, stages):
    """The pipelined training program on the GPU against the cpu target's, 2 steps."""
    import numpy as np
    args = train_args(a, work, random_feeds(a, a.program)) + ["--steps", "2", "--no-shuffle", "--quiet"]

    def train(d, tag):
        r = subprocess.run([os.path.join(d, "pipeline"), "train"] + args + [
            "--save", os.path.join(d, "w.npz"), "--save-grads", os.path.join(d, "g.npz"), "--log", os.path.join(d, "l.csv")],
            capture_output=True, text=True)
        if r.returncode:
            print(r.stdout[-3000:], r.stderr[-3000:])
            print(f"FAIL {name} {tag}: pipeline train exited with {r.returncode}")
            return None
        out = dict(np.load(os.path.join(d, "w.npz")))
        out.update(dict(np.load(os.path.join(d, "g.npz"))))
        out["loss"] = np.array([float(r.split(",")[2]) for r in open(os.path.join(d, "l.csv")).read().splitlines()[1:]])
        return out

    d = os.path.join(work, "ref_cpu")
    shutil.rmtree(d, ignore_errors=True)
    r = subprocess.run(pipecc_cmd(a, 1, d, target="cpu"), capture_output=True, text=True, env=pt.split_env())
    ref = train(d, "cpu") if not r.returncode else None
    if ref is None:
        print(r.stderr[-4000:])
        print(f"FAIL {name}: the cpu reference failed")
        return 1
    ok = True
    last = None
    for g in stages:
        d = os.path.join(work, f"program_g{g}")
        good, dt = build(a, g, d, ["--no-tf32"])
        got = train(d, f"g={g}") if good else None
        if got is None:
            ok = False
            continue
        good, worst = pt.compare(got, ref, 1e-3, f"{name} g={g}", floor=1e-3)
        ok &= good
        print(f"{name} training program g={g}: build {dt:.1f} s, max rel-L2 {worst:.3g} vs cpu (tolerance 1e-3)")
        last = (g, got)
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    if last:
        # re-materialisation (--recompute): the backward parts run copies of the forward
        # nodes, the same kernels on the same operands: the same bits as without it
        # (--recompute=selective: copies of the cheap nodes only, the same bits too)
        g, got = last
        for flag in ("--recompute", "--recompute=selective"):
            d = os.path.join(work, f"program_g{g}_{flag.lstrip('-').replace('=', '_')}")
            good, dt = build(a, g, d, ["--no-tf32", flag])
            rc = train(d, f"g={g} {flag}") if good else None
            srcs = "".join(open(os.path.join(d, f)).read() for f in os.listdir(d) if re.match(r"stage_\d+\.cu$", f)) if good else ""
            copies = len(set(re.findall(r"node \d+: \w+ '([^']*/recompute)'", srcs)))
            same = rc is not None and sorted(rc) == sorted(got) and all(rc[k].tobytes() == got[k].tobytes() for k in got)
            if not same or not copies:
                bad = [k for k in got if rc is None or k not in rc or rc[k].tobytes() != got[k].tobytes()]
                print(f"FAIL {name} g={g} {flag}: {copies} recomputed nodes; differs from the build without it in {bad[:5]}")
                ok = False
            else:
                print(f"{name} training program g={g} {flag}: build {dt:.1f} s, {copies} forward nodes recomputed, "
                      "weights, gradients and losses bitwise those without it")
            if not a.keep:
                shutil.rmtree(d, ignore_errors=True)
    print(("PASS " if ok else "FAIL ") + name)
    return 0 if ok else 1


def same_handover(d, xin, got, label, batches=20):
    """Stages sharing the GPU hand sets over on the device (events, no host waits): the
    outputs must not change, bit for bit, when every stage finishes each micro-batch
    before handing it on (PIPERT_SYNC_SETS=1), nor over a stream of `batches` batches that
    reuses every set many times (--bench N --stream keeps the last batch's outputs; a pool
    holds 4 sets, runtime/rt_threads.c, so 8 batches of 2 micro-batches use each 4 times)."""
    ok = True
    for how, extra, env in (("synchronous hand-over", [], {"PIPERT_SYNC_SETS": "1"}),
                            (f"{batches} batches streamed", ["--bench", str(batches), "--stream"], None)):
        other, _ = pt.run_pipeline(d, xin, f"{label} {how}", extra, env, "y_other.npz")
        same = other is not None and sorted(other) == sorted(got) and all(
            other[k].tobytes() == got[k].tobytes() for k in got)
        print(f"{label}: {how}: {'bitwise equal' if same else 'DIFFERENT'}")
        ok &= same
    return ok


def reference_noise(d, xin, ref, tries, name):
    """How far the cpu reference build d moves when every float input moves by one ulp in
    a random direction: the worst rel-L2 (compare()'s, floor 1e-3) over `tries` such
    inputs, or None after a failure. A training step with batch statistics over few
    elements is ill-conditioned: a ReLU input within rounding of 0 flips and moves a
    channel's batch-statistics gradient (resnet18_train at batch 2: layer4's BatchNorms
    average 98 values; one-ulp input changes moved the cpu target's own gradients by up
    to 1.0%, 6 of 8 tries above 0.15%). Two correct float32 implementations differ by
    that much too, so the fp32 bound is measured, not assumed."""
    import numpy as np
    sys.path.insert(0, os.path.join(pt.ROOT, "tools"))
    from npzio import save_npz
    feeds = dict(np.load(xin))
    worst = 0.0
    for i in range(tries):
        rng = np.random.default_rng(1000 + i)
        moved = {}
        for k, v in feeds.items():
            if v.dtype.kind == "f":
                to = np.where(rng.random(v.shape) < 0.5, -np.inf, np.inf).astype(v.dtype)
                v = np.nextafter(v, to)
            moved[k] = v
        xp = os.path.join(d, "x_ulp.npz")
        save_npz(xp, moved)
        got, _ = pt.run_pipeline(d, xp, f"{name} cpu one ulp", out_name="y_ulp.npz")
        if got is None:
            return None
        worst = max(worst, pt.compare(got, ref, float("inf"), f"{name} cpu one ulp", floor=1e-3)[1])
    return worst


def run_step(a, name, work, stages):
    """The one-step training program on the GPU against the cpu target's."""
    sys.path.insert(0, os.path.join(pt.ROOT, "tools"))
    from npzio import save_npz
    xin = os.path.join(work, "x.npz")
    save_npz(xin, random_feeds(a, a.step))
    d = os.path.join(work, "ref_cpu")
    shutil.rmtree(d, ignore_errors=True)
    r = subprocess.run(pipecc_cmd(a, 1, d, target="cpu"), capture_output=True, text=True, env=pt.split_env())
    if r.returncode:
        print(r.stderr[-4000:])
        print(f"FAIL {name}: the cpu reference build failed")
        return 1
    ref, _ = pt.run_pipeline(d, xin, f"{name} cpu")
    if ref is None:
        return 1
    fp32_tol = 1e-3
    if a.noise:
        noise = reference_noise(d, xin, ref, a.noise, name)
        if noise is None:
            return 1
        fp32_tol = max(fp32_tol, 2 * noise)
        print(f"{name}: the cpu reference moves by up to rel-L2 {noise:.3g} when its float inputs move by one ulp "
              f"({a.noise} tries): fp32 bound max(1e-3, 2 x {noise:.3g}) = {fp32_tol:.3g}, median over outputs 1e-3")
    tf32_tol = None if batch_stats(a) else 3e-2
    runs = [(g, ["--no-tf32"], fp32_tol, "fp32") for g in stages]
    if tf32_tol is None and a.sim:
        # with batch statistics the TF32 run is not compared (see the message below), only
        # printed: on a GPU for its figure, on the simulator (a CPU run of the step) left out
        print(f"{name} step g=1 tf32: not run on the simulator (not compared: batch statistics)")
    else:
        runs.append((1, [], tf32_tol, "tf32"))
    ok = True
    for g, extra, tol, tag in runs:
        d = os.path.join(work, f"step_g{g}_{tag}")
        good, dt = build(a, g, d, extra)
        got = pt.run_pipeline(d, xin, f"{name} g={g} {tag}")[0] if good else None
        if got is None:
            ok = False
            continue
        bound, told = limit(tol)
        good, worst = pt.compare(got, ref, bound, f"{name} g={g} {tag}", floor=1e-3)
        if a.noise and tag == "fp32":  # most outputs as close as a well-conditioned problem's
            med = pt.median_rel_l2(got, ref, floor=1e-3)
            if not med <= 1e-3:
                print(f"FAIL {name} g={g} {tag}: median rel-L2 over the outputs {med:.3g} > 1e-3")
                good = False
            told += f", median {med:.3g}"
        ok &= good
        print(f"{name} step g={g} {tag}: build {dt:.1f} s, max rel-L2 {worst:.3g} vs cpu ({told})")
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    print(("PASS " if ok else "FAIL ") + name)
    return 0 if ok else 1


def stage_sources(d):
    """Build directory d's stage_K.cu sources, joined in name order."""
    return "".join(open(os.path.join(d, f)).read() for f in sorted(os.listdir(d))
                   if f.startswith("stage_") and f.endswith(".cu"))


def emitted(a, name, work, tag, extra):
    """pipecc --emit-only with extra flags: (its stderr, the stage_K.cu sources joined), or None."""
    d = os.path.join(work, tag)
    shutil.rmtree(d, ignore_errors=True)
    r = pt.run_pipecc(pipecc_cmd(a, 2, d, ["--emit-only"] + extra), f"{name} {tag}")
    if r is None:
        return None
    src = stage_sources(d)
    if not a.keep:
        shutil.rmtree(d, ignore_errors=True)
    return r.stderr, src


def conv_gemms(d):
    """How many 1x1 Convs build d's stage sources run as cuBLASLt GEMMs (pk_conv_1x1)."""
    return len(re.findall(r"\bpk_conv_1x1\(", stage_sources(d)))


def graph_api_run(d, xin, ref, bound, told, label):
    """Build d run again with PIPECC_CONV_API=graph: every forward float32 convolution must
    get a plan of cuDNN's backend API (PIPECC_CONV_VERBOSE's count per stage), every call
    run it (no pointer off its 16-byte alignment), and the outputs compare as before."""
    log = []
    got, tr = pt.run_pipeline(d, xin, f"{label} PIPECC_CONV_API=graph", log=log,
                              env={"PIPECC_CONV_API": "graph", "PIPECC_CONV_VERBOSE": "1"})
    if got is None:
        return False
    counts = re.findall(r"(\d+) of (\d+) forward float32 convolutions through cuDNN's graph API", log[0])
    planned, total = sum(int(p) for p, _ in counts), sum(int(t) for _, t in counts)
    misaligned = log[0].count("the legacy API runs it")
    good, worst = pt.compare(got, ref, bound, f"{label} graph API")
    ok = good and total > 0 and planned == total and not misaligned
    print(f"{'PASS' if ok else 'FAIL'} {label}, Convs through cuDNN's graph API (PIPECC_CONV_API=graph): "
          f"{planned} of {total} planned, {misaligned} fell back to the legacy API; run {tr:.2f} s, "
          f"max rel-L2 {worst:.3g} ({told})")
    return ok


def tuned_run(d, xin, ref, bound, told, label):
    """Build d run again with PIPECC_CONV_TUNE=1: each forward Conv's ways timed on its
    first call (PIPECC_CONV_VERBOSE prints a line per timed Conv: at least two ways, one
    kept), outputs compared with onnxruntime as before; the decisions kept in a file
    (PIPECC_CONV_TUNE_FILE), and a second tuned run with that file times nothing and gives
    the first's bits. Then with PIPECC_CONV_TUNE=last, which keeps each Conv's last way,
    cuDNN's graph API (graph_api_run checks that every Conv has a plan), into another file:
    its outputs, every micro-batch's (the first from the timing run, the others from the
    captured graph), and those of a run with that file alone (no timing), must be bitwise
    those of the run that sends every Conv through the graph API by the switches
    (PIPECC_CONV_API=graph, GEMM and direct kernels off)."""
    def tuned(tune, path, tag):
        log = []
        env = {"PIPECC_CONV_TUNE": tune, "PIPECC_CONV_VERBOSE": "1", "PIPECC_CONV_TUNE_FILE": path}
        got, tr = pt.run_pipeline(d, xin, f"{label} PIPECC_CONV_TUNE={tune} {tag}", log=log, env=env,
                                  out_name=f"y_{tag}.npz")
        lines = [ln for ln in (log[0] if log else "").splitlines() if "; kept: " in ln]
        return got, tr, lines

    def same(x, y):
        return sorted(x) == sorted(y) and all(x[k].tobytes() == y[k].tobytes() for k in y)

    f1, f2 = os.path.join(d, "tune1.txt"), os.path.join(d, "tune_last.txt")
    for f in (f1, f2):
        if os.path.exists(f):
            os.remove(f)
    got, tr, lines = tuned("1", f1, "tune")
    if got is None:
        return False
    ways = [ln.split(": convolution", 1)[1].split("; kept: ")[0].count(" ms") for ln in lines]
    good, worst = pt.compare(got, ref, bound, f"{label} tuned")
    ok = good and len(lines) > 0 and min(ways) >= 2
    print(f"{'PASS' if ok else 'FAIL'} {label}, Convs tuned (PIPECC_CONV_TUNE=1): {len(lines)} timed, "
          f"{min(ways, default=0)} to {max(ways, default=0)} ways each; run {tr:.2f} s, max rel-L2 {worst:.3g} ({told})")
    again, _, lines2 = tuned("1", f1, "tune_again")
    kept = sum(1 for ln in open(f1) if ln[0] in "cg") if os.path.exists(f1) else 0
    good = again is not None and not lines2 and kept >= len(lines) and same(again, got)
    print(f"{'PASS' if good else 'FAIL'} {label}, tuned again with the decisions' file: {kept} decisions in it, "
          f"{len(lines2)} Convs timed again, outputs {'bitwise' if again is not None and same(again, got) else 'NOT'} "
          f"the first tuned run's")
    ok &= good
    last, _, lines = tuned("last", f2, "last")
    fonly, _, lines3 = tuned("0", f2, "file_only")
    forced, _ = pt.run_pipeline(d, xin, f"{label} all through the graph API", out_name="y_graph.npz",
                                env={"PIPECC_CONV_API": "graph", "PIPECC_CONV_GEMM": "0", "PIPECC_CONV_DIRECT": "0",
                                     "PIPECC_CONV_TUNE": "0"})
    if last is None or forced is None or fonly is None:
        return False
    kept = [ln.split("; kept: ")[1] for ln in lines]
    good = len(kept) > 0 and all(k == "cuDNN graph API" for k in kept) and same(last, forced)
    print(f"{'PASS' if good else 'FAIL'} {label}, PIPECC_CONV_TUNE=last: {len(kept)} timed Convs, "
          f"{sum(k == 'cuDNN graph API' for k in kept)} kept the graph API; outputs "
          f"{'bitwise' if same(last, forced) else 'NOT bitwise'} those of every Conv through the graph API by the switches")
    ok &= good
    good = not lines3 and same(fonly, forced)
    print(f"{'PASS' if good else 'FAIL'} {label}, its decisions' file alone (PIPECC_CONV_TUNE_FILE, no "
          f"PIPECC_CONV_TUNE): {len(lines3)} Convs timed, outputs {'bitwise' if same(fonly, forced) else 'NOT bitwise'} "
          f"those of every Conv through the graph API")
    ok &= good
    # a file that is not one: one line naming it and the line, the run goes on untuned
    bad = os.path.join(d, "tune_bad.txt")
    with open(bad, "w") as f:
        f.write("# comment\nc GPU 3 1 2\n")
    log = []
    got, _ = pt.run_pipeline(d, xin, f"{label} a bad decisions' file", log=log, out_name="y_bad.npz",
                             env={"PIPECC_CONV_TUNE": "0", "PIPECC_CONV_TUNE_FILE": bad})
    said = [ln for ln in (log[0] if log else "").splitlines() if "not a tuning decision" in ln]
    good = got is not None and len(said) == 1 and f"{bad}:2:" in said[0]
    print(f"{'PASS' if good else 'FAIL'} {label}, a bad decisions' file: {said[0] if said else 'no line'}")
    return ok and good


def check_fuse(a, name, work):
    """Fused Conv epilogues in the emitted cuda sources (see the module docstring)."""
    calls, units = {}, {}
    for tag, extra in (("fused", ["--time-passes"]), ("unfused", ["--no-fuse"])):
        e = emitted(a, name, work, f"fuse_{tag}", extra)
        if e is None:
            return 1
        if tag == "fused":
            chains = pt.fused_chains(e[0])
        # pk_conv_direct(S, idx, x, w, b, r, y, act, lo, hi): fused where r or act is set
        direct = re.findall(r"\bpk_conv_direct\(S, \d+, [^,]+, [^,]+, [^,]+, ([^,]+), [^,]+, (\d+),", e[1])
        calls[tag] = len(re.findall(r"\bpk_conv_epi\(", e[1])) + sum(r != "NULL" or act != "0" for r, act in direct)
        units[tag] = len(re.findall(r"PK_UNIT\(", e[1]))
    print(f"{name}: {chains} chains fused; Convs with a fused epilogue (pk_conv_epi, pk_conv_direct): fused "
          f"{calls['fused']}, unfused {calls['unfused']}; "
          f"units: fused {units['fused']}, unfused {units['unfused']}")
    ok = chains > 0 and calls["fused"] == chains and calls["unfused"] == 0 and units["fused"] < units["unfused"]
    print(("PASS " if ok else "FAIL ") + name)
    return 0 if ok else 1


def check_layout(a, name, work):
    """Channels-last Convs and the transposes around them (see the module docstring)."""
    convs, transposes, reported, gemms, want_gemms = {}, {}, 0, {}, 0
    for tag, extra in (("nhwc", ["--time-passes"]), ("nchw", ["--layout", "nchw"])):
        e = emitted(a, name, work, f"layout_{tag}", extra)
        if e is None:
            return 1
        if tag == "nhwc":
            m = re.search(r"pass layout .*\((\d+) convs\)", e[0])
            reported = int(m.group(1)) if m else -1
        convs[tag] = len(re.findall(r"channels-last \(NHWC, filter KRSC\)", e[1]))
        transposes[tag] = len(re.findall(r"/\* node \d+: Transpose '", e[1]))
        gemms[tag] = len(re.findall(r"\bpk_conv_1x1\(", e[1]))
        if tag == "nhwc":  # channels-last 1x1 Convs of one group whose output keeps the input's size: stride 1
            want_gemms = sum(1 for i, o in re.findall(r"group=1 in=(\d+x\d+x\d+) out=(\d+x\d+x\d+) "
                                                      r"kernel=1x1x1, channels-last", e[1]) if i == o)
    added = transposes["nhwc"] - transposes["nchw"]
    print(f"{name}: pipecc reports {reported} channels-last convs; in the sources: nhwc {convs['nhwc']}, "
          f"nchw {convs['nchw']}; Transpose units added {added} (at most {a.max_transposes}); 1x1 Convs as "
          f"GEMMs (pk_conv_1x1): nhwc {gemms['nhwc']} of {want_gemms}, nchw {gemms['nchw']}")
    ok = reported > 0 and convs["nhwc"] == reported and convs["nchw"] == 0 and 0 <= added <= a.max_transposes
    ok &= want_gemms > 0 and gemms["nhwc"] == want_gemms and gemms["nchw"] == 0
    print(("PASS " if ok else "FAIL ") + name)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["build", "run", "fuse", "layout"])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--stages", default="2")
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--work", required=True)
    ap.add_argument("--int-high", type=int, default=None, help="integer inputs (token ids) below this")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--step", default=None, metavar="LABELS:DIMS",
                    help="the one-step training program; its labels input and shape")
    ap.add_argument("--program", default=None, metavar="LABELS:DIMS",
                    help="the pipelined training program; its labels input and shape")
    ap.add_argument("--label-high", type=int, default=2, help="labels below this (run --step)")
    ap.add_argument("--keep", action="store_true", help="keep the build directories")
    ap.add_argument("--no-variants", action="store_true",
                    help="run: leave out the float32 g=1 builds with --no-fuse, --layout nchw and --layout "
                         "nhwc-all (the simulator runs them on ResNet-18 and MobileNetV2, not on every CNN)")
    ap.add_argument("--max-transposes", type=int, default=2, help="layout: Transpose units the layout may add")
    ap.add_argument("--noise", type=int, default=0, metavar="TRIES",
                    help="run --step: bound fp32 differences by the cpu reference's own movement "
                         "under one-ulp input changes (TRIES of them; see reference_noise)")
    ap.add_argument("--sim", default=None, metavar="LIBCUDASIM",
                    help="build with tests/cuda/sim/nvcc against this simulator library and run on the CPU: "
                         "the gpu checks without a GPU")
    a = ap.parse_args()
    if a.sim:
        use_sim(a.sim)
    name = os.path.splitext(os.path.basename(a.model))[0]
    work = os.path.join(a.work, name)
    os.makedirs(work, exist_ok=True)
    rc = run_mode(a, name, work)
    if rc == 0 and not a.keep:
        pt.done_with(work)
    return rc


def run_mode(a, name, work):
    stages = [int(x) for x in a.stages.split(",")]
    if a.step:
        a.microbatches = 1

    if a.mode == "fuse":
        return check_fuse(a, name, work)
    if a.mode == "layout":
        return check_layout(a, name, work)

    if a.mode == "build":
        ok = True
        for g in stages:
            d = os.path.join(work, f"build_g{g}")
            good, dt = build(a, g, d)
            print(f"{name} g={g}: emit + nvcc build {dt:.1f} s")
            if good and not same_sources(a, g, d, d + "_again"):
                good = False
            if good and (a.sim or not have_gpu()) and not no_device_error(a, d, work):
                good = False
            ok &= good
            if good and not a.keep:
                shutil.rmtree(d, ignore_errors=True)
        print(("PASS " if ok else "FAIL ") + name)
        return 0 if ok else 1

    if not a.sim and not have_gpu():
        print(f"SKIP {name}: no GPU (/dev/nvidia0 missing or nvidia-smi failed)")
        return SKIP
    if a.step:
        return run_step(a, name, work, stages)
    if a.program:
        return run_program(a, name, work, stages)
    import numpy as np
    xin = os.path.join(work, "x.npz")
    yref = os.path.join(work, "y.npz")
    if not pt.ort_reference(name, a.model, a.shape, a.int_high, xin, yref, 4):
        return 1
    ref = dict(np.load(yref))
    if a.train:
        ref = pt.ort_micro(a.model, dict(np.load(xin)), a.microbatches)  # per micro-batch (batch statistics)
    if batch_stats(a):
        # the TF32 run is printed, not compared (tolerance None): on the simulator left out
        runs = [(g, ["--no-tf32"], 1e-4, "fp32") for g in stages] + ([] if a.sim else [(1, [], None, "tf32")])
    else:
        runs = [(g, [], 1e-3, "tf32") for g in stages] + [(1, ["--no-tf32"], 1e-4, "fp32")]
        if not a.no_variants:
            runs += [(1, ["--no-tf32", "--no-fuse"], 1e-4, "fp32-unfused"),
                     (1, ["--no-tf32", "--layout", "nchw"], 1e-4, "fp32-nchw"),
                     (1, ["--no-tf32", "--layout", "nhwc-all"], 1e-4, "fp32-nhwc-all")]
    ok = True
    for g, extra, tol, tag in runs:
        d = os.path.join(work, f"run_g{g}_{tag}")
        good, dt = build(a, g, d, extra)
        if not good:
            ok = False
            continue
        got, tr = pt.run_pipeline(d, xin, f"{name} g={g} {tag}")
        if got is None:
            ok = False
            continue
        bound, told = limit(tol)
        good, worst = pt.compare(got, ref, bound, f"{name} g={g} {tag}")
        ok &= good
        print(f"{name} g={g} {tag}: build {dt:.1f} s, run {tr:.2f} s, max rel-L2 {worst:.3g} ({told})")
        if tag == "fp32" and g == 1 and conv_gemms(d):
            got, tr = pt.run_pipeline(d, xin, f"{name} g=1 {tag} PIPECC_CONV_GEMM=0", env={"PIPECC_CONV_GEMM": "0"})
            good, worst = (False, float("nan")) if got is None else pt.compare(got, ref, bound, f"{name} g=1 cudnn-1x1")
            ok &= good
            print(f"{name} g=1 {tag}, 1x1 Convs through cuDNN (PIPECC_CONV_GEMM=0): run {tr:.2f} s, "
                  f"max rel-L2 {worst:.3g} ({told})")
        if g == 1 and tag in ("tf32", "fp32") and re.search(r"\bpk_conv(_1x1)?\(", stage_sources(d)):
            ok &= graph_api_run(d, xin, ref, bound, told, f"{name} g=1 {tag}")
            if tag == runs[0][3]:
                ok &= tuned_run(d, xin, ref, bound, told, f"{name} g=1 {tag}")
        if g > 1 and g == max(stages) and tag == runs[0][3]:
            # on the simulator (every forward a CPU run) 8 batches, on a GPU 20
            ok &= same_handover(d, xin, got, f"{name} g={g} {tag}", 8 if a.sim else 20)
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    print(("PASS " if ok else "FAIL ") + name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
