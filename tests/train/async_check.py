#!/usr/bin/env python3
"""The asynchronous schedules (pipecc --train --schedule pipedream|async|spectrain|2bw)
against tools/async_ref.py, an independent PyTorch model of their semantics:

  - an MLP (4 Linear layers, ReLU between, cross-entropy; SGD with momentum; layers 1 and
    3 written x @ W.t() + b, a Transpose of the weight the backward reads) compiled at
    g = 1, 2, 3, 4 (--no-replicate, PIPECC_SPLIT=even) and trained K = 7 mini-batches:
    the weights `pipeline train --save` writes within rel-L2 1e-5 (float32) of the
    reference for every mode (2bw: 4 micro-batches a batch, 7 batches);
  - at g = 1, pipedream, async and spectrain equal plain SGD (the reference's sync mode,
    and pipecc's synchronous 1F1B build, within 1e-6);
  - at g >= 2 each mode differs from synchronous SGD (the staleness is there), and
    pipedream and async each from the other's reference (stashing shows);
  - at g = 3, 4 mini-batches, a checkpoint (holding the older weight versions the later
    mini-batches read) and --resume to K: the bits of K straight; and a run with
    --checkpoint-every 4 that stops at its last mini-batch (NaN inputs) leaves the
    checkpoint taken during the run after 4, which resumes to the same bits;
  - each mode bitwise identical between two runs, and (with --mpirun) at g = 2, 3 under
    `mpirun -np g` (one rank a stage) the threads transport's bits; at g = 3 a checkpoint
    written under MPI resumes on threads and the step-4 one on threads under MPI, both
    to the bits of K straight;
  - plan.json and the plan summary: the mode, each stage's weight versions (pipedream
    N-k, async 1, spectrain 2, 2bw 2), staleness, prediction distances, N-k held
    micro-batches, and a memory term that counts the versions;
  - errors: an asynchronous schedule without --train, spectrain without momentum, -m with
    pipedream, 2bw with fewer micro-batches than it needs, --recompute: one line, exit 2;
  - at g = 3, --epochs 1 (7 batches of data) gives the bits of --steps 7.

With --sim-lib the builds are for the cuda target, run on the CUDA simulator, and only the
weights against the reference (and two runs' bits) are checked.

usage: async_check.py --pipecc build/pipecc --work DIR [--stages 1,2,3,4] [--modes ...] [--mpirun PATH]
                      [--sim-lib libcudasim.a]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools"))
import async_ref  # noqa: E402

DIMS = [8, 16, 16, 16, 10]
B, K, LR, MU = 8, 7, 0.05, 0.9
A = None


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(cmd, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=600)


def export(path, batch):
    model = async_ref.mlp_model(DIMS, seed=1, transposed=(1, 3))
    x = torch.zeros(batch, DIMS[0])
    torch.onnx.export(model, x, path, input_names=["input"], output_names=["output"], opset_version=13,
                      do_constant_folding=False)
    return model


def compile_(model_path, out, g, schedule, extra=(), ok=True):
    shutil.rmtree(out, ignore_errors=True)
    env = {"PIPECC_SPLIT": "even"}
    if A.sim_lib:
        env.update(NVCC=os.path.join(os.path.dirname(HERE), "cuda", "sim", "nvcc"), CUDASIM_LIB=A.sim_lib)
        extra = ["--target", "cuda", "--no-tf32"] + list(extra)
    r = run([A.pipecc, model_path, "--train", "-g", str(g), "--no-replicate", "--schedule", schedule, "--optimizer",
             "sgd", "--lr", str(LR), "--momentum", str(MU), "-o", out, "-j", "2", "-q"] + list(extra), env)
    if ok:
        check(r.returncode == 0, "pipecc -g %d --schedule %s: %s" % (g, schedule, r.stderr[-3000:]))
    return r


def stage_of(out, names):
    """Each weight's stage: the stage_K.c that names it as a param it owns."""
    res = {}
    for f in sorted(os.listdir(out)):
        m = re.match(r"stage_(\d+)\.(c|cu)$", f)
        if not m:
            continue
        src = open(os.path.join(out, f)).read()
        for n in names:
            if ('"%s"' % n) in src:
                check(n not in res, "weight %s in two stages" % n)
                res[n] = int(m.group(1))
    check(sorted(res) == sorted(names), "stages of %s not found: %s" % (names, res))
    return res


MPI_ENV = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def train(out, data, tag, steps=K, extra=(), ok=True, mpi=0):
    save = os.path.join(out, "w_%s.npz" % tag)
    pre = [A.mpirun, "--oversubscribe", "--allow-run-as-root", "-np", str(mpi)] if mpi else []
    r = run(pre + [os.path.join(out, "pipeline"), "train", "--data", data[0], "--labels", data[1]] +
            (["--steps", str(steps)] if steps else []) + ["--no-shuffle", "--quiet", "--save", save] + list(extra),
            MPI_ENV if mpi else None)
    if ok:
        check(r.returncode == 0, "pipeline train (%s): exit %d\n%s%s" % (out, r.returncode, r.stdout[-2000:],
                                                                        r.stderr[-2000:]))
        with np.load(save) as z:
            return {k: z[k] for k in z.files}
    return r


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def worst(w, ref):
    return max(rel(w[n], ref[n].numpy()) for n in ref)


def one_line_exit2(r, what, pattern):
    lines = [ln for ln in r.stderr.strip().splitlines() if ln]
    check(r.returncode == 2 and len(lines) == 1 and re.search(pattern, lines[0]),
          "%s: expected one line matching '%s' and exit 2, got %d: %s" % (what, pattern, r.returncode, r.stderr))


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--stages", default="1,2,3,4")
    ap.add_argument("--modes", default="pipedream,async,spectrain,2bw")
    ap.add_argument("--mpirun", default="", help="also: under mpirun, the threads transport's bits")
    ap.add_argument("--sim-lib", default="", help="the cuda target on the CUDA simulator (libcudasim.a): the "
                    "modes' weights against the reference only (float32 GEMMs without TF32)")
    A = ap.parse_args()
    if A.mpirun.endswith("NOTFOUND"):
        A.mpirun = ""
    shutil.rmtree(A.work, ignore_errors=True)
    os.makedirs(A.work)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((K * B, DIMS[0])).astype(np.float32)
    Y = rng.integers(0, DIMS[-1], size=K * B).astype(np.int64)
    data = (os.path.join(A.work, "X.npy"), os.path.join(A.work, "Y.npy"))
    np.save(data[0], X)
    np.save(data[1], Y)
    data_nan = os.path.join(A.work, "X_nan.npy")  # the last mini-batch NaN
    Xn = X.copy()
    Xn[(K - 1) * B:] = np.nan
    np.save(data_nan, Xn)
    path = os.path.join(A.work, "mlp.onnx")
    model = export(path, B)
    names = [n for n, _ in model.named_parameters()]
    sync_ref = async_ref.train("sync", model, {n: 0 for n in names}, 1, X, Y, K, B, lr=LR, momentum=MU)

    for g in [int(s) for s in A.stages.split(",")]:
        for mode in A.modes.split(","):
            out = os.path.join(A.work, "%s_g%d" % (mode, g))
            M = 4 if mode == "2bw" else 1
            compile_(path, out, g, mode, ["-m", str(M)] if mode == "2bw" else [])
            so = stage_of(out, names)
            N = max(so.values()) + 1
            check(N == g, "%s g=%d: %d stages hold weights" % (mode, g, N))
            w1 = train(out, data, "a")
            w2 = train(out, data, "b")
            for n in w1:
                check(w1[n].tobytes() == w2[n].tobytes(), "%s g=%d: two runs differ in %s" % (mode, g, n))
            if A.mpirun and g in (2, 3):
                wm = train(out, data, "mpi", mpi=g)
                for n in w1:
                    check(w1[n].tobytes() == wm[n].tobytes(), "%s g=%d: MPI differs from threads in %s" % (mode, g, n))
            if g == 3 and not A.sim_lib:  # a checkpoint after 4 mini-batches, resumed to K: the same bits
                ck = os.path.join(out, "ck")
                shutil.rmtree(ck, ignore_errors=True)
                train(out, data, "c4", steps=4, extra=["--checkpoint", ck])
                with np.load(os.path.join(ck, "checkpoint.npz")) as z:
                    kept = [k for k in z.files if k.startswith("pipecc/version/")]
                check(mode == "2bw" or kept, "%s g=3: the checkpoint holds no older weight versions" % mode)
                wr = train(out, data, "r", extra=["--resume", ck])
                for n in w1:
                    check(w1[n].tobytes() == wr[n].tobytes(), "%s g=3: resumed run differs in %s" % (mode, n))
                print("%-9s g=3: 4 steps, checkpoint (%d older version entries), resumed to %d: the same bits" %
                      (mode, len(kept), K))
                # a checkpoint during the run (--checkpoint-every 4 of K = 7): the run stops at its last
                # batch (NaN inputs, so the loss check fails) and leaves the checkpoint after 4 steps,
                # which resumes to the bits of K straight
                shutil.rmtree(ck, ignore_errors=True)
                r = train(out, (data_nan, data[1]), "cm", extra=["--checkpoint", ck, "--checkpoint-every", "4"],
                          ok=False)
                check(r.returncode == 2 and re.search(r"step %d: the loss is NaN" % K, r.stderr),
                      "%s g=3: the run with a NaN last batch: exit %d: %s" % (mode, r.returncode, r.stderr))
                with np.load(os.path.join(ck, "checkpoint.npz")) as z:
                    check(int(z["pipecc/step"][0]) == 4, "%s g=3: the checkpoint left is at step %d, not 4" %
                          (mode, int(z["pipecc/step"][0])))
                    kept_m = [k for k in z.files if k.startswith("pipecc/version/")]
                check(sorted(os.listdir(ck)) == ["checkpoint.npz"], "%s g=3: %s holds %s" % (mode, ck, os.listdir(ck)))
                wr = train(out, data, "rm", extra=["--resume", ck])
                for n in w1:
                    check(w1[n].tobytes() == wr[n].tobytes(), "%s g=3: run resumed from step 4 differs in %s" % (mode, n))
                print("%-9s g=3: checkpoint during the run at step 4 (%d older version entries), resumed to %d: "
                      "the same bits" % (mode, len(kept_m), K))
                we = train(out, data, "ep", steps=None, extra=["--epochs", "1"])  # one pass over K batches
                for n in w1:
                    check(w1[n].tobytes() == we[n].tobytes(), "%s g=3: --epochs 1 differs from --steps %d in %s" %
                          (mode, K, n))
                if A.mpirun:  # under MPI: a checkpoint at the end of 4 steps, resumed on threads; the threads'
                    # step-4 checkpoint resumed under MPI: both the bits of K straight
                    ckm = os.path.join(out, "ckm")
                    shutil.rmtree(ckm, ignore_errors=True)
                    train(out, data, "mc4", steps=4, extra=["--checkpoint", ckm], mpi=g)
                    wr = train(out, data, "mr", extra=["--resume", ckm])
                    for n in w1:
                        check(w1[n].tobytes() == wr[n].tobytes(), "%s g=3: resumed from MPI's checkpoint: %s differs" %
                              (mode, n))
                    wr = train(out, data, "rmpi", extra=["--resume", ck], mpi=g)
                    for n in w1:
                        check(w1[n].tobytes() == wr[n].tobytes(), "%s g=3: resumed under MPI: %s differs" % (mode, n))
                    print("%-9s g=3: checkpoint under MPI resumed on threads, and the other way: the same bits" % mode)
            ref = async_ref.train(mode, model, so, N, X, Y, K, B, M=M, lr=LR, momentum=MU)
            e = worst(w1, ref)
            s = worst(w1, sync_ref)
            print("%-9s g=%d: rel-L2 vs reference %.2e, vs synchronous SGD %.2e" % (mode, g, e, s))
            check(e <= 1e-5, "%s g=%d: rel-L2 %.3g vs the reference" % (mode, g, e))
            if g == 1 and mode != "2bw":
                check(s <= 1e-5, "%s g=1: rel-L2 %.3g vs plain SGD" % (mode, s))
            if g > 1 or mode == "2bw":
                check(s > 1e-4, "%s g=%d: equals synchronous SGD (%.3g): no staleness" % (mode, g, s))
            if g > 1 and mode in ("pipedream", "async"):  # stashing or not shows
                other = "async" if mode == "pipedream" else "pipedream"
                o = worst(w1, async_ref.train(other, model, so, N, X, Y, K, B, lr=LR, momentum=MU))
                check(o > 1e-5 * 3, "%s g=%d: within %.3g of %s's reference" % (mode, g, o, other))

    if A.sim_lib:
        print("async schedules on the cuda target (CUDA simulator): OK")
        return
    # the synchronous build at g=1, one micro-batch: the same as pipedream's
    out = os.path.join(A.work, "sync_g1")
    compile_(path, out, 1, "1f1b", ["-m", "1"])
    ws = train(out, data, "s")
    e = worst(ws, sync_ref)
    print("1f1b      g=1: rel-L2 vs synchronous SGD %.2e" % e)
    check(e <= 1e-5, "1f1b g=1 vs the reference's sync mode: %.3g" % e)

    # plan.json and the summary: the mode, versions kept and staleness per stage, the memory
    # term counting the versions
    plans = {}
    for mode in ("pipedream", "async", "spectrain", "2bw"):
        out = os.path.join(A.work, "plan_" + mode)
        shutil.rmtree(out, ignore_errors=True)
        r = run([A.pipecc, path, "--train", "-g", "4", "--schedule", mode, "--momentum", str(MU), "--plan-only", "-o",
                 out] + (["-m", "4"] if mode == "2bw" else []))
        check(r.returncode == 0, "--plan-only %s: %s" % (mode, r.stderr))
        check(re.search(r"stages are not replicated", r.stderr), "%s: no line saying stages are not replicated" % mode)
        check(re.search(r"%s, no flush: stage 0 " % mode, r.stderr), "%s: no versions line in the summary" % mode)
        import json
        plans[mode] = json.load(open(os.path.join(out, "plan.json")))
        check(plans[mode]["schedule"] == mode and plans[mode].get("asynchronous"), "%s: plan.json schedule" % mode)
    st = {m: plans[m]["stages"] for m in plans}
    n = len(st["pipedream"])
    check(n >= 2, "the -g 4 plan has %d stages" % n)
    for k in range(n):
        want = {"pipedream": (n - k, n - 1 - k, n - 1 - k), "async": (1, n - 1 - k, 0), "spectrain": (2, n - 1 - k, 0),
                "2bw": (2, 1, 1)}
        for m, (v, sf, sb) in want.items():
            got = (st[m][k]["weight_versions"], st[m][k]["staleness_fwd"], st[m][k]["staleness_bwd"])
            check(got == (v, sf, sb), "%s stage %d: versions/staleness %s, expected %s" % (m, k, got, (v, sf, sb)))
            check(st[m][k]["held_microbatches"] == n - k, "%s stage %d holds %d micro-batches, not %d" %
                  (m, k, st[m][k]["held_microbatches"], n - k))
        check((st["spectrain"][k]["predict_fwd"], st["spectrain"][k]["predict_bwd"]) == (k // 2 + n - k - 1, k // 2),
              "spectrain stage %d: prediction distances" % k)
        d = st["pipedream"][k]["memory_bytes"] - st["async"][k]["memory_bytes"]
        check(st["pipedream"][k]["nodes"] == st["async"][k]["nodes"], "pipedream and async plans differ")
        check(d == (n - k - 1) * st["async"][k]["param_bytes"], "pipedream stage %d: memory counts %d more bytes, not "
              "%d versions of %d" % (k, d, n - k - 1, st["async"][k]["param_bytes"]))

    # errors
    r = run([A.pipecc, path, "--schedule", "pipedream", "-g", "2", "-o", os.path.join(A.work, "e1")])
    one_line_exit2(r, "pipedream without --train", r"--schedule pipedream.*needs --train")
    r = compile_(path, os.path.join(A.work, "e2"), 2, "spectrain", ["--momentum", "0"], ok=False)
    one_line_exit2(r, "spectrain without momentum", r"spectrain.*momentum")
    r = run([A.pipecc, path, "--train", "--schedule", "spectrain", "--optimizer", "adam", "-o",
             os.path.join(A.work, "e3")])
    one_line_exit2(r, "spectrain with adam", r"spectrain.*momentum")
    r = compile_(path, os.path.join(A.work, "e4"), 2, "pipedream", ["-m", "2"], ok=False)
    one_line_exit2(r, "pipedream -m 2", r"-m does not apply")
    r = compile_(path, os.path.join(A.work, "e7"), 2, "pipedream", ["--recompute"], ok=False)
    one_line_exit2(r, "pipedream --recompute", r"re-materialisation")
    out = os.path.join(A.work, "e5")
    compile_(path, out, 4, "2bw", ["-m", "2"])
    r = train(out, data, "e5", ok=False)
    one_line_exit2(r, "2bw with 2 micro-batches on 4 stages", r"2bw needs at least 3 micro-batches")
    print("async schedules: OK")


if __name__ == "__main__":
    main()
