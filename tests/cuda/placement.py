#!/usr/bin/python3
"""Stage replicas on the plan's devices, in one process (the threads transport), on the
CUDA simulator with 4 devices (CUDASIM_DEVICES=4), which reach each other's memory (the
sets stages hand each other stay in device memory, read across devices) or do not
(CUDASIM_PEER=0: the sets go through host memory):

  - smallcnn, -g 4 -m 4: the plan replicates one stage on devices 0..3;
  - smallcnn, -g 4 -m 2: stage 0 on device 0, stage 1 replicated on devices 1..2, stage 2
    on device 3 (the stages hand over through host sets between devices);
  - smallcnn_train, --train -g 4 -m 4: stage 0 replicated on devices 0..1, whose
    gradients the runtime sums device to device (through host memory without peer
    access), then stages on devices 2 and 3.

Each must (1) have the plan that the case describes (plan.json), (2) run kernels on every
device of its plan and on no other (the simulator's per-device kernel counts,
CUDASIM_STATS=1), (3) hand over in the memory the runtime says (PIPERT_VERBOSE=1), and
(4) give the same bits on 4 devices, with and without peer access, as on one
(inference: the outputs; training: the losses and the saved weights after 2 steps); inference
matches onnxruntime (float32, rel-L2 <= 1e-5). Before, in one process a stage's replicas
all ran on the stage's device (stage K on device K): on 4 GPUs the first plan used one.

And (5), on the simulator: a fault of device 0 (CUDASIM_FAULT_DEVICE=0, sticky on that
device only, as on GPUs) at its middle kernel and at its last one fails the run: exit
status 1, no output or weights file, one line from the device naming stage and device
and one from the runtime. Before, a fault after device 0's last hand-over was printed
but the run exited 0 and wrote outputs that stages on other devices computed from sets
device 0 never wrote. A kernel of device 0 that never finishes (CUDASIM_FAULT=hang) stops
the run within seconds (PIPERT_STALL_S=3): exit status 1, nothing written, a line naming
a stage, its device and the call that has not returned; before, the process hung.

On GPUs (no --sim; label gpu, exit 77 = skipped with fewer than 2): the same builds on
every GPU there is (up to 4), against a run pinned to GPU 0 (PIPECC_CUDA_DEVICE=0) and
one through host memory (PIPERT_HOST_SETS=1), bit for bit (no kernel counts there).

    placement.py --sim LIBCUDASIM --pipecc build/pipecc --models DIR --work DIR
    placement.py --pipecc build/pipecc --models DIR --work DIR           (2 or more GPUs)
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, HERE)
import pipecc_test as pt  # noqa: E402
import run_cuda as rc  # noqa: E402  (gpus)
from npzio import save_npz  # noqa: E402

# name, model, pipecc options, the plan's devices per stage
CASES = [
    ("replicas4", "smallcnn", ["-d", "batch=8", "-g", "4", "-m", "4"], [[0, 1, 2, 3]]),
    ("mixed", "smallcnn", ["-d", "batch=8", "-g", "4", "-m", "2"], [[0], [1, 2], [3]]),
    ("train", "smallcnn_train", ["-d", "batch=8", "--train", "-g", "4", "-m", "4"], [[0, 1], [2], [3]]),
]


def run(cmd, env, label):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if r.returncode:
        print(r.stdout[-3000:], r.stderr[-3000:])
        print(f"FAIL {label}: exit {r.returncode}")
        return None
    return r


def per_device(stderr):
    m = re.search(r"^cudasim: kernels per device:((?: \d+)+)$", stderr, re.M)
    return [int(v) for v in m.group(1).split()] if m else None


def fault_runs(name, cmd, out, env, n0):
    """(5): device 0's kernel n0 // 2 and n0 (its last) fault, and kernel n0 // 2 hangs;
    the run must fail plainly."""
    ok = True
    for mode, at in (("error", n0 // 2), ("error", n0), ("hang", max(n0 // 2, 1))):
        if os.path.exists(out):
            os.remove(out)
        e = dict(env, CUDASIM_DEVICES="4", CUDASIM_FAULT=f"{mode}:{at}", CUDASIM_FAULT_DEVICE="0", PIPERT_STALL_S="3")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=120)
        except subprocess.TimeoutExpired:
            print(f"FAIL {name}: device 0's kernel {at} of {n0} {mode}s: the run did not end within 120 s")
            ok = False
            continue
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("pipeline:")]
        injected = re.search(r"^cudasim: CUDASIM_FAULT: kernel .* device 0\)", r.stderr, re.M)
        if mode == "error":
            dev_line = [ln for ln in lines if re.match(r"pipeline: stage \d+ on cuda:0 .*cudaErrorIllegalAddress", ln)]
        else:
            dev_line = [ln for ln in lines if re.match(r"pipeline: stage \d+.* on device \d: .* has not returned in \d+ s", ln)]
        bad = []
        if not injected:
            bad.append("the simulator did not inject the fault")
        if r.returncode != 1:
            bad.append(f"exit status {r.returncode}, not 1")
        if os.path.exists(out):
            bad.append(f"{os.path.basename(out)} was written")
        if not dev_line:
            bad.append("no line names a stage on cuda:0 and the fault" if mode == "error"
                       else "no line names a stalled stage, its device and its call")
        if len(lines) > 2:
            bad.append(f"{len(lines)} pipeline lines, not at most 2")
        if bad:
            print(r.stderr[-2000:])
            print(f"FAIL {name}: device 0's kernel {at} of {n0} {mode}s: {'; '.join(bad)}")
            ok = False
        else:
            print(f"ok   {name}: device 0's kernel {at} of {n0} {mode}s: exit 1, nothing written, "
                  f"{len(lines)} lines: {dev_line[0][:90]}...")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sim", default=None, help="the CUDA simulator's library; without it, real GPUs (2 or more)")
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    ngpu = 0
    if a.sim:
        env = dict(os.environ, NVCC=os.path.join(HERE, "sim", "nvcc"), CUDASIM_LIB=os.path.abspath(a.sim))
    else:
        ngpu = min(rc.gpus(), 4)
        if ngpu < 2:
            print(f"SKIP placement: {ngpu} GPU(s), the test needs 2 or more")
            return 77
        env = dict(os.environ)
    os.makedirs(a.work, exist_ok=True)
    rng = np.random.default_rng(7)
    ok = True
    arch = ["--cuda-arch", "90"] if a.sim else []
    for name, model, opts, devices in CASES:
        d = os.path.join(a.work, name)
        shutil.rmtree(d, ignore_errors=True)
        path = os.path.join(a.models, model + ".onnx")
        if not run([a.pipecc, path, "--target", "cuda", "--no-tf32", *arch, "-o", d, "-j", "2"] + opts,
                   env, f"{name}: pipecc"):
            ok = False
            continue
        with open(os.path.join(d, "plan.json")) as f:
            plan = json.load(f)
        got = [st["devices"] for st in plan["stages"]]
        if got != devices:
            print(f"FAIL {name}: the plan's devices per stage are {got}, the case needs {devices} "
                  "(the planner changed: pick options that give such a plan)")
            ok = False
            continue
        train = "--train" in opts
        x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
        if train:
            xf, yf = os.path.join(d, "x.npy"), os.path.join(d, "labels.npy")
            np.save(xf, x)
            np.save(yf, rng.integers(0, 10, 8).astype(np.int64))
        else:
            xf = os.path.join(d, "x.npz")
            save_npz(xf, {"input": x})
        outs, counts = {}, None
        # one device; 4 that reach each other's memory (sets handed over in device memory,
        # read across devices); 4 without peer access (sets through host memory)
        # (on GPUs: pinned to GPU 0; every GPU, peer access where the GPUs have it; every GPU
        # through host memory)
        nd = 4 if a.sim else ngpu
        # (GPUs without peer access hand over through the host: either memory there)
        for ndev, peer, mode in ((1, 1, "device"), (nd, 1, "device" if a.sim else "(device|host)"), (nd, 0, "host")):
            if a.sim:
                e = dict(env, CUDASIM_DEVICES=str(ndev), CUDASIM_STATS="1", CUDASIM_PEER=str(peer), PIPERT_VERBOSE="1")
            else:
                e = dict(env, PIPERT_VERBOSE="1", **({"PIPECC_CUDA_DEVICE": "0"} if ndev == 1 else {}),
                         **({} if peer else {"PIPERT_HOST_SETS": "1"}))
            key = f"{'all' if ndev > 1 else '1'}{'' if peer else ' (through host memory)'}"
            out = os.path.join(d, f"out_{ndev}_{peer}.npz")
            if train:
                cmd = [os.path.join(d, "pipeline"), "train", "--data", xf, "--labels", yf, "--steps", "2",
                       "--batch", "8", "--no-shuffle", "--save", out]
            else:
                cmd = [os.path.join(d, "pipeline"), "--input", xf, "--output", out]
            r = run(cmd, e, f"{name} on {key} device(s)")
            if r is None:
                ok = False
                break
            outs[key] = (dict(np.load(out)), re.findall(r"loss[ =:]+([0-9.eE+-]+)", r.stdout + r.stderr))
            m = re.search(rf"^pipeline: \d+ stage replicas? on {len(set(v % ndev for st in devices for v in st))} "
                          rf"devices?; sets between stages in {mode} memory", r.stderr, re.M)
            if m and train:  # the replicas' gradients: summed device to device, or through the host
                m = re.search(rf"^pipeline: .*; replicas' gradients summed in {mode} memory$", r.stderr, re.M)
            if m and not a.sim:
                print(f"ok   {name} on {key} GPU(s): {m.group(0)}")
            if not m:
                print(r.stderr[-1500:])
                print(f"FAIL {name} on {key} device(s): no 'sets between stages in {mode} memory' line"
                      f"{' (and gradients summed there)' if train else ''}")
                ok = False
            if ndev > 1 and peer:
                counts = per_device(r.stderr)
        if len(outs) < 3:
            continue
        if a.sim:  # (no kernel counts on GPUs)
            planned = sorted({v for st in devices for v in st})
            used = [k for k, c in enumerate(counts or []) if c > 0]
            if counts is None or used != planned:
                print(f"FAIL {name}: kernels per device {counts}: devices {used} ran kernels, the plan's are {planned}")
                ok = False
            else:
                print(f"ok   {name}: kernels per device {counts} (the plan's devices {devices})")
        o1, l1 = outs["1"]
        for key in ("all", "all (through host memory)"):
            o4, l4 = outs[key]
            same = o1.keys() == o4.keys() and all(np.array_equal(o1[k].view(np.uint8), o4[k].view(np.uint8)) for k in o1)
            if not same or l1 != l4:
                print(f"FAIL {name}: {key} devices give other bits than one ({'outputs' if not same else 'losses'})")
                ok = False
            else:
                print(f"ok   {name}: {key} devices give the bits of one ({len(o1)} {'weights' if train else 'outputs'}"
                      f"{', losses ' + ' '.join(l1) if train else ''})")
        o4 = outs["all"][0]
        if not train:
            import onnxruntime as ort
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            ref = sess.run(None, {"input": x})[0]
            y = next(iter(o4.values()))
            err = pt.rel_l2(y, ref)
            good = err <= 1e-5
            print(f"{'ok  ' if good else 'FAIL'} {name}: against onnxruntime rel-L2 {err:.2e} (<= 1e-5)")
            ok &= good
        if a.sim and counts and counts[0] > 1:  # the last command, peer access on: device memory
            ok &= fault_runs(name, cmd, out, env, counts[0])
        pt.done_with(d, ok)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
