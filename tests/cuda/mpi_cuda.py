#!/usr/bin/python3
"""cuda target across processes: one process per stage replica (`pipeline --launch`, i.e.
mpirun), tensors between them through NCCL, replicas' gradients all-reduced by NCCL.

    mpi_cuda.py --pipecc build/pipecc --model gpt.onnx --shape input_ids:2x64 --int-high 512 \\
                --work /tmp/w --sim build/tests/cuda/sim/libcudasim.a
        Inference, 2 stages (PIPECC_SPLIT=even, --no-tf32): the outputs of `--launch` (2
        ranks, a device each: NCCL sends and receives) and of `--launch` with the two
        ranks on ONE device (the runtime's note, then host memory between them) are the
        bits of the one-process run. With --sim, the failures of item 6 of the CUDA
        issue, injected by the simulator (CUDASIM_FAULT, CUDASIM_MEM_MB): a kernel fault,
        a process that dies and a kernel that never finishes, on either rank; out of
        device memory. Each must end every process with a non-zero status within 60 s
        (a hang without --timeout through PIPECC_NCCL_TIMEOUT=5), a fault and out of
        memory with one line naming the stage and its device; a kernel that never
        finishes with both ranks on one device (host memory, no NCCL) through the stall
        watchdog (PIPERT_STALL_S=3), with a line naming the rank, stage, device and call.

    mpi_cuda.py ... --program labels:4 --label-high 10
        The training program (run_cuda.py's PROGRAM_ARGS, --no-tf32), 2 steps: 2 stages
        (PIPECC_SPLIT=even), and the planner's own plan for -g 4 (with 8 micro-batch rows
        per batch it replicates stage 0: --replicated), under `--launch` against the
        one-process run: the same loss, gradients and weights, bit for bit; NCCL sends
        (and, replicated, all-reduces) must have run.

Needs Open MPI's mpirun and either the simulator (--sim: every rank a CUDA device of its
own, CUDASIM_DEVICES) or as many GPUs as ranks (exit 77 = skipped otherwise). Exit 0 pass,
1 fail, 77 skipped.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_cuda as rc  # noqa: E402
import pipecc_test as pt  # noqa: E402  (on the path through run_cuda)

SKIP = 77
MPI_ENV = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL " + what)
    return cond


def env_for(a, devices, **more):
    e = dict(os.environ, **MPI_ENV, **more)
    if a.sim:
        e["CUDASIM_DEVICES"] = str(devices)
        e["CUDASIM_STATS"] = "1"
    return e


def run(cmd, env, timeout=300):
    t = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        r.elapsed = time.time() - t
    except subprocess.TimeoutExpired as e:
        r = subprocess.CompletedProcess(cmd, 124, e.stdout or "", (e.stderr or b"").decode(errors="replace")
                                        if isinstance(e.stderr, bytes) else e.stderr or "")
        r.elapsed = time.time() - t
    return r


def nccl_counts(err):
    """(sends, receives, all-reduces) over the processes' simulator statistics."""
    rows = re.findall(r"^cudasim: NCCL in process \d+: (\d+) sends, (\d+) receives, (\d+) all-reduces", err, re.M)
    return tuple(sum(int(r[i]) for r in rows) for i in range(3))


def same_npz(x, y):
    return sorted(x) == sorted(y) and all(x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes() for k in x)


def ranks_of(d):
    import json
    return sum(s.get("replicas", 1) for s in json.load(open(os.path.join(d, "plan.json")))["stages"])


def inference(a, work):
    d = os.path.join(work, "g2")
    good, dt = rc.build(a, 2, d, ["--no-tf32"])
    if not check(good, "2-stage build"):
        return
    xin = os.path.join(work, "x.npz")
    sys.path.insert(0, os.path.join(pt.ROOT, "tools"))
    from npzio import save_npz
    save_npz(xin, rc.random_feeds(a, None))
    exe = os.path.join(d, "pipeline")
    base = [exe, "--input", xin, "--microbatches", str(a.microbatches)]

    def out(tag):
        return os.path.join(work, f"y_{tag}.npz")

    r = run(base + ["--output", out("one")], env_for(a, 2))
    if not check(r.returncode == 0, f"one process: exit {r.returncode}: {r.stderr[-2000:]}"):
        return
    ref = dict(np.load(out("one")))
    r = run(base + ["--output", out("nccl"), "--launch"], env_for(a, 2))
    if check(r.returncode == 0, f"--launch: exit {r.returncode}: {r.stderr[-3000:]}"):
        check(same_npz(ref, dict(np.load(out("nccl")))), "--launch (NCCL): outputs differ from one process's")
        check("through host memory" not in r.stderr, "--launch on 2 devices went through host memory: " + r.stderr)
        if a.sim:
            s, rv, _ = nccl_counts(r.stderr)
            check(s > 0 and s == rv, f"--launch: NCCL sends {s}, receives {rv}: {r.stderr[-2000:]}")
            print(f"ok inference, 2 ranks on 2 devices: NCCL ({s} sends, {rv} receives), the one-process bits "
                  f"({r.elapsed:.1f} s)")
    if a.sim:  # two ranks on one device: NCCL refuses that; the runtime says so and uses host memory
        r = run(base + ["--output", out("host"), "--launch"], env_for(a, 1))
        if check(r.returncode == 0, f"--launch on one device: exit {r.returncode}: {r.stderr[-3000:]}"):
            check(re.search(r"through host memory.*share a GPU", r.stderr), "no note that two ranks share a GPU: "
                  + r.stderr[-2000:])
            check(same_npz(ref, dict(np.load(out("host")))), "--launch on one device: outputs differ")
            check(nccl_counts(r.stderr)[0] == 0, "--launch on one device: NCCL sends ran")
            print(f"ok inference, 2 ranks on 1 device: host memory between them (noted), the same bits")
        faults(a, base, out("fault"))


def faults(a, base, out):
    cmd = base + ["--output", out, "--launch"]
    for mode in ("error", "die", "hang"):
        for rank in (0, 1):
            env = env_for(a, 2, CUDASIM_FAULT=f"{mode}:{a.fault_kernel}:{rank}", PIPECC_NCCL_TIMEOUT="5")
            r = run(cmd, env, timeout=120)
            what = f"{mode} in a kernel of rank {rank}" + (" (PIPECC_NCCL_TIMEOUT=5, no --timeout)"
                                                           if mode == "hang" else "")
            injected = re.search(r"^cudasim: CUDASIM_FAULT: kernel", r.stderr, re.M)
            if not check(injected, f"{what}: the fault was not injected (fewer kernels?): {r.stderr[-1500:]}"):
                continue
            check(r.returncode not in (0, 124), f"{what}: exit {r.returncode} (124: hung): {r.stderr[-2500:]}")
            check(r.elapsed < 60, f"{what}: took {r.elapsed:.1f} s")
            lines = re.findall(r"^pipeline: stage \d+ on cuda:\d+ \(.*\): .*$", r.stderr, re.M)
            if mode == "error":
                check(any("cudaErrorIllegalAddress" in ln for ln in lines),
                      f"{what}: no line naming the stage, its device and the fault: {r.stderr[-2500:]}")
            print(f"ok {what}: exit {r.returncode} after {r.elapsed:.1f} s" +
                  (f"; {lines[0]}" if lines else ""))
    # the two ranks on one device: host memory between them, no NCCL timeout to end a
    # kernel that never finishes; the stall watchdog does (before: hung)
    for rank in (0, 1):
        env = env_for(a, 1, CUDASIM_FAULT=f"hang:{a.fault_kernel}:{rank}", PIPERT_STALL_S="3")
        r = run(cmd, env, timeout=120)
        what = f"hang in a kernel of rank {rank}, both ranks on one device (host memory, PIPERT_STALL_S=3)"
        line = re.search(rf"^pipeline: rank {rank}: stage \d+.* on device 0: .* has not returned in \d+ s.*$",
                         r.stderr, re.M)
        check(r.returncode not in (0, 124) and r.elapsed < 60 and line,
              f"{what}: exit {r.returncode} (124: hung) after {r.elapsed:.1f} s, no line naming the rank, stage, "
              f"device and call: {r.stderr[-2500:]}")
        print(f"ok {what}: exit {r.returncode} after {r.elapsed:.1f} s; {line.group(0) if line else ''}")
    r = run(cmd, env_for(a, 2, CUDASIM_MEM_MB="1"), timeout=120)
    lines = re.findall(r"^pipeline: stage \d+ on cuda:\d+ \(.*\): cudaMalloc.*out of memory$", r.stderr, re.M)
    check(r.returncode not in (0, 124) and lines and r.elapsed < 60,
          f"out of device memory: exit {r.returncode}, {r.elapsed:.1f} s: {r.stderr[-2000:]}")
    print(f"ok out of device memory: exit {r.returncode}; {lines[0] if lines else ''}")


def program(a, work):
    feeds = rc.random_feeds(a, a.program)
    args = rc.train_args(a, work, feeds) + ["--steps", "2", "--no-shuffle", "--quiet"]
    builds = []
    d = os.path.join(work, "p2")
    good, _ = rc.build(a, 2, d, ["--no-tf32"])
    if check(good, "2-stage training build"):
        builds.append(("2 stages", d))
    if a.replicated:
        d = os.path.join(work, "p4")
        shutil.rmtree(d, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if k != "PIPECC_SPLIT"}
        r = subprocess.run(rc.pipecc_cmd(a, 4, d, ["--no-tf32"]), capture_output=True, text=True, env=env)
        if check(r.returncode == 0, "-g 4 training build: " + r.stderr[-3000:]):
            rep = re.search(r"^\s+\d+\s+\d+\.\.\d+\s+([2-9])\s", r.stderr, re.M)
            if check(rep, "-g 4: the planner's plan has no replicated stage: " + r.stderr[-1500:]):
                builds.append(("the planner's -g 4 plan (a stage on 2 replicas)", d))
    for name, d in builds:
        n = ranks_of(d)

        def train(tag, extra):
            o = os.path.join(d, tag)
            r = run([os.path.join(d, "pipeline"), "train"] + args + ["--save", o + "_w.npz", "--save-grads",
                                                                      o + "_g.npz", "--log", o + ".csv"] + extra,
                    env_for(a, n), timeout=600)
            if not check(r.returncode == 0, f"{name} {tag}: exit {r.returncode}: {r.stderr[-3000:]}"):
                return None, r
            log = [",".join(ln.split(",")[:4]) for ln in open(o + ".csv").read().splitlines()]
            return (dict(np.load(o + "_w.npz")), dict(np.load(o + "_g.npz")), log), r

        one, _ = train("one", [])
        mpi, r = train("launch", ["--launch"])
        if one is None or mpi is None:
            continue
        check(same_npz(one[0], mpi[0]), f"{name}: weights differ between one process and --launch")
        check(same_npz(one[1], mpi[1]), f"{name}: gradients differ between one process and --launch")
        check(one[2] == mpi[2], f"{name}: loss logs differ: {one[2]} vs {mpi[2]}")
        check("through host memory" not in r.stderr, f"{name}: --launch went through host memory: {r.stderr[-2000:]}")
        if a.sim:
            s, rv, ar = nccl_counts(r.stderr)
            check(s > 0 and s == rv, f"{name}: NCCL sends {s}, receives {rv}")
            if "replicas" in name:
                check(ar > 0, f"{name}: no NCCL all-reduce of the replicas' gradients")
            print(f"ok {name}, {n} ranks: NCCL ({s} sends, {rv} receives, {ar} all-reduces), loss "
                  f"{one[2][-1].split(',')[2]}: one process's bits ({r.elapsed:.1f} s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--work", required=True)
    ap.add_argument("--int-high", type=int, default=None)
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--program", default=None, metavar="LABELS:DIMS")
    ap.add_argument("--label-high", type=int, default=2)
    ap.add_argument("--replicated", action="store_true", help="--program: also the planner's -g 4 plan")
    ap.add_argument("--fault-kernel", type=int, default=40, help="--sim: the kernel run that faults")
    ap.add_argument("--sim", default=None, metavar="LIBCUDASIM")
    a = ap.parse_args()
    a.step, a.train = None, False
    if not shutil.which("mpirun"):
        print("SKIP: mpirun not found")
        return SKIP
    if a.sim:
        rc.use_sim(a.sim)
    elif rc.gpus() < (4 if a.replicated else 2):
        print("SKIP: fewer GPUs than ranks (or none)")
        return SKIP
    name = os.path.splitext(os.path.basename(a.model))[0]
    work = os.path.join(a.work, name)
    os.makedirs(work, exist_ok=True)
    program(a, work) if a.program else inference(a, work)
    print(f"{'FAIL' if failures else 'PASS'} {name} across processes ({len(failures)} failed checks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
