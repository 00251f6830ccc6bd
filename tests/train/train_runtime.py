#!/usr/bin/env python3
"""`pipeline train` beyond one step's arithmetic (train_check.py covers that):

  memory     GPipe vs 1F1B on 4 stages, 8 micro-batches: under 1F1B stage s holds p - s
             micro-batches (GPipe: all M), and stage 0's measured peak of held
             activations is p/M of GPipe's; the trained weights of both schedules are
             bitwise equal
  recompute  --recompute (re-materialisation) on 4 stages, 8 micro-batches, 1F1B and
             GPipe: trained weights, running statistics, gradients and losses bitwise
             those of the build without it; the backward parts compute the copied forward
             nodes; a stage's forward hands on only what other stages read (no values
             kept for its own backward), and stage 0's measured peak of held activations
             is the micro-batches it holds times what it sends, under the build without
  resume     5 steps straight vs 3 steps, a checkpoint, and --resume to step 5 (Adam,
             shuffled data, an epoch boundary crossed): bitwise equal weights and log
  export     --export-onnx: a valid model whose initializers are the trained values,
             every other byte unchanged, that onnxruntime runs
  replicas   a plan with replicated stages (gradients all-reduced) equals torch
  tied       a weight read by the first and the last stage (tied embedding): gradients
             summed across stages, copies refreshed; equals torch; bitwise equal for
             1, 2 and 3 stages
  errors     bad data, labels, batch, options, checkpoints: exit 2 and one line
  nccl_rules the proof the NCCL transport needs (PIPERT_CHECK_NCCL=1): the 1F1B and GPipe
             programs pipecc emits for 2-4 stages, with and without replicas, keep NCCL's
             rules (programs it refuses: `rt_unit programs`, tests/runtime)
  mpi        `mpirun -np R pipeline train` (one rank per stage replica): 3 stages and a plan
             with a replicated stage give the threads transport's bits (weights, gradients,
             losses); a checkpoint written under MPI resumes under threads; `pipeline train
             --launch` starts the processes itself; a wrong -np is one line and exit 2

usage: train_runtime.py CASE --pipecc build/pipecc --work DIR [--mpirun PATH]
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
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools"))
import train_check as tc  # noqa: E402

A = None


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(cmd, env=None, timeout=600):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)


def compile_(path, out, args, even=True):
    r = run([A.pipecc, path, "-o", out, "-j", "2"] + args, {"PIPECC_SPLIT": "even"} if even else {})
    check(r.returncode == 0, "pipecc %s: %s" % (" ".join(args), r.stderr[-3000:]))
    return os.path.join(out, "pipeline")


def train(exe, args, ok=True):
    r = run([exe, "train"] + args)
    if ok:
        check(r.returncode == 0, "pipeline train %s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout[-2000:],
                                                                        r.stderr[-2000:]))
    return r


def npz(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def same_bits(a, b, what):
    check(sorted(a) == sorted(b), "%s: different names" % what)
    for k in a:
        check(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), "%s: '%s' differs" % (what, k))


def case_dir(name):
    d = os.path.join(A.work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def model(name, d):
    return tc.make_case(name, None, d)


def save_data(d, x, y):
    np.save(os.path.join(d, "X.npy"), x)
    np.save(os.path.join(d, "Y.npy"), y)
    return ["--data", os.path.join(d, "X.npy"), "--labels", os.path.join(d, "Y.npy")]


def convnet_case(name, seed, batch):
    """The convnet case in a fresh folder, with `batch` random samples saved:
    (folder, model path, loss, optimizer, `pipeline train` data arguments)."""
    d = case_dir(name)
    _, path, inputs, labels, loss, opt, _ = model("convnet", d)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
    y = rng.integers(0, 5, size=batch).astype(np.int64)
    return d, path, loss, opt, save_data(d, x, y)


# ---- cases ---------------------------------------------------------------------------

def peak_lines(out, P):
    """Per stage: (peak bytes of held activations, micro-batches held) from `pipeline
    train`'s memory line."""
    stages = re.findall(r"stage (\d+) ([\d.]+) (B|KiB|MiB) \((\d+) micro-batch", out)
    check(len(stages) == P, "no memory line for %d stages: %s" % (P, out))
    unit = {"B": 1, "KiB": 1024, "MiB": 1 << 20}
    return [(float(b) * unit[u], int(n)) for _, b, u, n in stages]


def case_memory():
    d, path, loss, opt, data = convnet_case("memory", 3, 8)
    P, M = 4, 8
    held, nbytes, w = {}, {}, {}
    for sched in ("gpipe", "1f1b"):
        exe = compile_(path, os.path.join(d, sched), ["--shape", "input:8x3x16x16", "-g", str(P), "-m", str(M),
                                                      "--schedule", sched] + tc.pipecc_args(loss, opt, "--train"))
        r = train(exe, data + ["--steps", "2", "--no-shuffle", "--save", os.path.join(d, sched + ".npz")])
        stages = peak_lines(r.stdout, P)
        nbytes[sched], held[sched] = stages[0]
        for s, (_, n) in enumerate(stages):  # 1F1B: stage s holds p - s; GPipe: all M
            want = P - s if sched == "1f1b" else M
            check(n == want, "%s: stage %d held %d micro-batches, expected %d" % (sched, s, n, want))
        w[sched] = npz(os.path.join(d, sched + ".npz"))
        for s in range(P):  # the new weights, optimizer state and gradient sums are written in place
            src = open(os.path.join(d, sched, "stage_%d.c" % s)).read()
            for fn in ("stage_backward", "stage_step"):
                body = src[src.index("static int %s(void *state" % fn):]
                body = body[:body.index("\n}\n")]
                check("write back" not in body and "memcpy" not in body,
                      "%s: stage %d's %s copies values back instead of writing them in place" % (sched, s, fn))
    ratio = nbytes["1f1b"] / nbytes["gpipe"]
    print("stage 0 peak activations: gpipe %.1f KiB (%d micro-batches), 1f1b %.1f KiB (%d); ratio %.3f, p/M = %.3f" % (
        nbytes["gpipe"] / 1024, held["gpipe"], nbytes["1f1b"] / 1024, held["1f1b"], ratio, P / M))
    check(held["gpipe"] == M, "GPipe's stage 0 must hold all %d micro-batches, held %d" % (M, held["gpipe"]))
    check(held["1f1b"] == P, "1F1B's stage 0 must hold p = %d micro-batches, held %d" % (P, held["1f1b"]))
    check(abs(ratio - P / M) < 0.02, "1F1B/GPipe memory ratio %.3f, expected p/M = %.3f" % (ratio, P / M))
    same_bits(w["gpipe"], w["1f1b"], "GPipe vs 1F1B weights")
    print("ok memory")


def case_recompute():
    d, path, loss, opt, data = convnet_case("recompute", 5, 8)
    P, M = 4, 8
    SUFFIX = {"": "", "full": "-rc", "selective": "-sel"}
    COSTLY = ("Conv", "ConvTranspose", "MatMul", "Gemm")
    for sched in ("1f1b", "gpipe"):
        res, plans, ops = {}, {}, {}
        for rc in ("", "full", "selective"):
            tag = sched + SUFFIX[rc]
            args = ["--shape", "input:8x3x16x16", "-g", str(P), "-m", str(M), "--schedule", sched,
                    "--plan-only"] + tc.pipecc_args(loss, opt, "--train") + (["--recompute=" + rc] if rc else [])
            if rc == "full":
                args[-1] = "--recompute"
            plan = os.path.join(d, tag + "-plan")
            compile_(path, plan, args)
            with open(os.path.join(plan, "plan.json")) as f:
                pj = json.load(f)
            check(pj.get("recompute") is bool(rc) and pj.get("recompute_selective") is (rc == "selective"),
                  "%s: plan.json's recompute flags" % tag)
            plans[rc] = [sum(st[k] for st in pj["stages"]) for k in ("fwd_ms", "bwd_ms")]
            exe = compile_(path, os.path.join(d, tag), [a for a in args if a != "--plan-only"])
            r = train(exe, data + ["--steps", "2", "--no-shuffle", "--save", os.path.join(d, tag + ".npz"),
                                   "--save-grads", os.path.join(d, tag + "-g.npz"), "--log", os.path.join(d, tag + ".csv")])
            src = "".join(open(os.path.join(d, tag, f)).read() for f in sorted(os.listdir(os.path.join(d, tag)))
                          if re.match(r"stage_\d+\.c$", f))
            ops[rc] = {name: op for op, name in re.findall(r"node \d+: (\w+) '([^']*/recompute)'", src)}
            check((len(ops[rc]) > 0) == bool(rc), "%s: %d recomputed forward nodes in the stage code" % (tag, len(ops[rc])))
            res[rc] = (peak_lines(r.stdout, P), npz(os.path.join(d, tag + ".npz")), npz(os.path.join(d, tag + "-g.npz")),
                       [ln.rsplit(",", 1)[0] for ln in open(os.path.join(d, tag + ".csv"))])  # (not samples/s)
        # full: every forward node again; selective: the cheap ones between the costly ones
        costly = [n for n, op in ops["full"].items() if op in COSTLY]
        check(costly and not [n for n, op in ops["selective"].items() if op in COSTLY] and
              0 < len(ops["selective"]) < len(ops["full"]) and set(ops["selective"]) <= set(ops["full"]),
              "%s: recomputed %s (full) and %s (selective)" % (sched, sorted(ops["full"].values()),
                                                              sorted(ops["selective"].values())))
        # the planner counts each recomputed node's forward again in its backward
        (f0, b0), (f1, b1), (f2, b2) = plans[""], plans["full"], plans["selective"]
        check(abs(f1 - f0) <= 1e-9 * f0 and abs(b1 - (b0 + f0)) <= 1e-6 * (b0 + f0) and
              abs(f2 - f0) <= 1e-9 * f0 and b0 < b2 < b1,
              "%s: planned forward/backward ms %.6g/%.6g (full), %.6g/%.6g (selective), %.6g/%.6g without" % (
                  sched, f1, b1, f2, b2, f0, b0))
        (pk0, w0, g0, log0) = res[""]
        for rc in ("full", "selective"):
            pk1, w1, g1, log1 = res[rc]
            same_bits(w0, w1, "%s: weights with and without --recompute=%s" % (sched, rc))
            same_bits(g0, g1, "%s: gradients with and without --recompute=%s" % (sched, rc))
            check(log0 == log1, "%s: the loss logs differ with --recompute=%s" % (sched, rc))
            for s in range(P):
                check(pk0[s][1] == pk1[s][1], "%s: stage %d held %d micro-batches with --recompute=%s, %d without" %
                      (sched, s, pk1[s][1], rc, pk0[s][1]))
        # what a stage's forward hands on is now only what other stages read (or the graph's
        # outputs; selective: and the costly nodes' outputs), and stage 0 (which sends no
        # gradients) holds exactly that per micro-batch (a later stage's figure also counts
        # the gradient sets it sent and that are not yet consumed, which moves with thread
        # timing)
        pkf, pks = res["full"][0], res["selective"][0]
        handed = {}  # per mode, per stage: bytes of the forward's set of one micro-batch
        for rc in ("", "full", "selective"):
            descs = {}
            for k in range(P):
                text = open(os.path.join(d, sched + SUFFIX[rc], "stage_%d.c" % k)).read()
                descs[k] = {part: re.findall(r'^  \{"([^"]+)", \d+, \d+, \{[\d, ]*\}, (\d+)u\},$',
                                             text.split("static const pipert_tensor_desc %s[" % part)[1].split("};")[0], re.M)
                            for part in ("stage_inputs", "stage_outputs")}
            handed[rc] = [sum(int(n) for _, n in descs[k]["stage_outputs"]) for k in range(P)]
            if not rc:
                continue
            kept = {}
            for k in range(P):
                read = {n for j in range(P) if j != k for n, _ in descs[j]["stage_inputs"]} | {"loss", "output"}
                extra = [n for n, _ in descs[k]["stage_outputs"] if n not in read]
                kept[k] = [n for n in extra if rc == "selective" and any("/%s_output" % op in n for op in COSTLY)]
                extra = [n for n in extra if n not in kept[k]]
                check(not extra, "%s: stage %d keeps forward values with --recompute=%s: %s" % (sched, k, rc, extra))
            check((rc == "selective") == bool(kept[0]), "%s: stage 0 keeps %s with --recompute=%s" % (sched, kept[0], rc))
            set0 = sum((int(b) + 255) // 256 * 256 for _, b in descs[0]["stage_outputs"])
            pk1 = res[rc][0]
            check(pk1[0][0] == pk1[0][1] * set0, "%s: stage 0 held %.0f bytes with --recompute=%s, expected %d "
                  "micro-batches of the %d bytes it sends or keeps" % (sched, pk1[0][0], rc, pk1[0][1], set0))
        h0, hf, hs = handed[""], handed["full"], handed["selective"]
        check(all(x <= y <= z for x, y, z in zip(hf, hs, h0)) and sum(hf) < sum(hs) < sum(h0),
              "%s: bytes a micro-batch's forward hands on per stage: %s (full), %s (selective), %s without" % (
                  sched, hf, hs, h0))
        check(pkf[0][0] < pk0[0][0] and pkf[0][0] <= pks[0][0] <= pk0[0][0],
              "%s: stage 0 held %.0f bytes with --recompute, %.0f with --recompute=selective, %.0f without" % (
                  sched, pkf[0][0], pks[0][0], pk0[0][0]))
        print("%s: a micro-batch's forward hands on %s bytes per stage without, %s with --recompute=selective, %s "
              "with --recompute" % (sched, h0, hs, hf))
        print("%s: peak held activations per stage without / --recompute / --recompute=selective: %s "
              "(recomputed nodes: %d / %d)" % (sched, ", ".join(
                  "%.1f / %.1f / %.1f KiB" % (a[0] / 1024, b[0] / 1024, c[0] / 1024) for a, b, c in zip(pk0, pkf, pks)),
                  len(ops["full"]), len(ops["selective"])))
    # the planner's memory term credits it: a held micro-batch costs the forward tensors the
    # stage exchanges (received + sent), plus one micro-batch's activations while its
    # backward runs; under a limit that no plan of the plain program meets (GPipe holds
    # all M micro-batches), the --recompute program plans
    # (selective: plus the outputs of the costly nodes, kept_bytes)
    pj = {rc: json.load(open(os.path.join(d, "gpipe%s-plan" % SUFFIX[rc], "plan.json"))) for rc in SUFFIX}
    s0 = pj[""]["stages"][0]
    f = (s0["memory_bytes"] - s0["held_microbatches"] * s0["activation_bytes"]) / s0["param_bytes"]
    check(f in (2, 3, 4), "weights, gradients and optimizer state: %g bytes per weight byte" % f)
    for rc in ("full", "selective"):
        for k, st in enumerate(pj[rc]["stages"]):
            want = f * st["param_bytes"] + st["activation_bytes"] + (st["held_microbatches"] - 1) * (
                st["exchange_bytes"] + st["kept_bytes"])
            check(st["held_microbatches"] == -(-M // st["replicas"]) and st["memory_bytes"] == want and
                  st["peak_memory_bytes"] == want and (st["kept_bytes"] > 0) == (rc == "selective"),
                  "gpipe --recompute=%s stage %d: memory %d (peak %d), held %d, kept %d, expected %d" % (
                      rc, k, st["memory_bytes"], st["peak_memory_bytes"], st["held_microbatches"], st["kept_bytes"],
                      want))
    limit = max(st["memory_bytes"] for st in pj["full"]["stages"])
    check(limit < max(st["memory_bytes"] for st in pj[""]["stages"]), "--recompute did not lower the plan's memory")
    args = ["--shape", "input:8x3x16x16", "-g", str(P), "-m", str(M), "--schedule", "gpipe", "--plan-only",
            "--memory-limit", str(limit)] + tc.pipecc_args(loss, opt, "--train")
    r = run([A.pipecc, path, "-o", os.path.join(d, "limit")] + args)
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "does not fit in %d bytes" % limit in r.stderr,
          "plain training under --memory-limit %d: exit %d, %s" % (limit, r.returncode, r.stderr.strip()))
    r = run([A.pipecc, path, "-o", os.path.join(d, "limit-rc")] + args + ["--recompute"])
    check(r.returncode == 0, "--recompute under --memory-limit %d: exit %d, %s" % (limit, r.returncode, r.stderr.strip()))
    fit = json.load(open(os.path.join(d, "limit-rc", "plan.json")))
    check(all(st["memory_bytes"] <= limit for st in fit["stages"]), "a stage over the limit: %s" %
          [st["memory_bytes"] for st in fit["stages"]])
    print("gpipe: planned memory per device %s without --recompute, %s with it; under --memory-limit %d only "
          "--recompute plans" % ([st["memory_bytes"] for st in pj[""]["stages"]],
                                  [st["memory_bytes"] for st in pj["full"]["stages"]], limit))
    # --recompute=auto: each stage none, selective or full, the least recomputation that
    # fits. Under a limit between what the plain and the full plans need (GPipe, one
    # device a stage), some stages recompute and some do not; the stage code follows the
    # plan's modes, and the bits are those of the plain build (no replicas: every split
    # gives the same bits)
    base = ["--shape", "input:8x3x16x16", "-g", str(P), "-m", str(M), "--schedule", "gpipe", "--no-replicate",
            "--plan-only"] + tc.pipecc_args(loss, opt, "--train")
    need = {}
    for rc in ("", "--recompute"):
        out = os.path.join(d, "auto-ref" + rc)
        compile_(path, out, base + ([rc] if rc else []))
        need[rc] = max(st["memory_bytes"] for st in json.load(open(os.path.join(out, "plan.json")))["stages"])
    limit = (need[""] + need["--recompute"]) // 2
    args = [a for a in base if a != "--plan-only"] + ["--recompute=auto", "--memory-limit", str(limit)]
    exe = compile_(path, os.path.join(d, "auto"), args, even=False)  # (the plan's stages and modes)
    pa = json.load(open(os.path.join(d, "auto", "plan.json")))
    modes = [st["recompute"] for st in pa["stages"]]
    check(pa["recompute_auto"] is True and all(st["memory_bytes"] <= limit for st in pa["stages"]) and
          "none" in modes and set(modes) - {"none"},
          "--recompute=auto under --memory-limit %d (plain needs %d, full %d): stages %s, memory %s" % (
              limit, need[""], need["--recompute"], modes, [st["memory_bytes"] for st in pa["stages"]]))
    for k, mode in enumerate(modes):
        text = open(os.path.join(d, "auto", "stage_%d.c" % k)).read()
        copied = re.findall(r"node \d+: (\w+) '[^']*/recompute'", text)
        check(bool(copied) == (mode != "none") and not (mode == "selective" and set(copied) & set(COSTLY)),
              "--recompute=auto stage %d (%s): copies %s" % (k, mode, sorted(set(copied))))
    r = train(exe, data + ["--steps", "2", "--no-shuffle", "--save", os.path.join(d, "auto.npz")])
    same_bits(res[""][1], npz(os.path.join(d, "auto.npz")), "--recompute=auto weights")
    print("--recompute=auto under --memory-limit %d (plain plan needs %d a device, full %d): stages %s" % (
        limit, need[""], need["--recompute"], modes))
    # --recompute without --train (inference, or the one-step function): one line, exit 2
    for flag in ("--recompute", "--recompute=selective", "--recompute=auto"):
        for extra in ([], ["--train-step", "--loss", "cross-entropy"]):
            r = run([A.pipecc, path, "-o", os.path.join(d, "bad"), "--shape", "input:8x3x16x16", "-g", "2", "--plan-only",
                     flag] + extra)
            check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and flag in r.stderr and
                  "--train" in r.stderr, "%s %s: exit %d, %r" % (flag, " ".join(extra), r.returncode, r.stderr))
    r = run([A.pipecc, path, "-o", os.path.join(d, "bad"), "--shape", "input:8x3x16x16", "--plan-only", "--train",
             "--recompute=some"])
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "'some'" in r.stderr and
          "selective" in r.stderr and "auto" in r.stderr, "--recompute=some: exit %d, %r" % (r.returncode, r.stderr))
    print("ok recompute")


def case_resume():
    d = case_dir("resume")
    _, path, inputs, labels, loss, opt, _ = model("convnet_adamw", d)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((20, 3, 16, 16)).astype(np.float32)  # 2 batches of 8 per epoch, 4 dropped
    y = rng.integers(0, 5, size=20).astype(np.int64)
    data = save_data(d, x, y)
    exe = compile_(path, os.path.join(d, "b"), ["--shape", "input:8x3x16x16", "-g", "2", "-m", "2"]
                   + tc.pipecc_args(loss, opt, "--train"))
    common = data + ["--seed", "7", "--quiet"]
    ca, cb = os.path.join(d, "ckA"), os.path.join(d, "ckB")
    train(exe, common + ["--steps", "5", "--checkpoint", ca, "--checkpoint-every", "2", "--save",
                         os.path.join(d, "a.npz"), "--log", os.path.join(d, "a.csv")])
    train(exe, common + ["--steps", "3", "--checkpoint", cb, "--checkpoint-every", "3", "--log", os.path.join(d, "b.csv")])
    check(sorted(os.listdir(cb)) == ["checkpoint.npz"], "checkpoint folder: %s" % os.listdir(cb))
    ck = npz(os.path.join(cb, "checkpoint.npz"))
    check(int(ck["pipecc/step"][0]) == 3 and any(k.startswith("state/") for k in ck), "checkpoint contents: %s" % list(ck))
    train(exe, common + ["--steps", "5", "--resume", cb, "--save", os.path.join(d, "b.npz"), "--log",
                         os.path.join(d, "b.csv")])
    same_bits(npz(os.path.join(d, "a.npz")), npz(os.path.join(d, "b.npz")), "straight vs resumed weights")
    la = open(os.path.join(d, "a.csv")).read().splitlines()
    lb = open(os.path.join(d, "b.csv")).read().splitlines()
    strip = [",".join(r.split(",")[:4]) for r in la], [",".join(r.split(",")[:4]) for r in lb]
    check(strip[0] == strip[1], "loss logs differ:\n%s\n%s" % ("\n".join(strip[0]), "\n".join(strip[1])))
    r = train(exe, common + ["--steps", "5", "--resume", cb, "--seed", "8"], ok=False)
    check(r.returncode == 2 and "seed" in r.stderr, "resume with another seed: " + r.stderr)
    print("ok resume: 5 steps straight == 3 steps + checkpoint + resume (weights bitwise, losses %s)"
          % " ".join(s.split(",")[2][:8] for s in strip[0][1:]))


def case_export():
    d = case_dir("export")
    _, path, inputs, labels, loss, opt, _ = model("smallcnn_train", d)
    x = np.concatenate([inputs["input"]] * 2)
    data = save_data(d, x, np.concatenate([labels] * 2))
    exe = compile_(path, os.path.join(d, "b"), ["--shape", "input:4x1x8x8", "-g", "2", "-m", "2"]
                   + tc.pipecc_args(loss, opt, "--train"))
    out = os.path.join(d, "trained.onnx")
    train(exe, data + ["--steps", "3", "--quiet", "--save", os.path.join(d, "w.npz"), "--export-onnx", out])
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    onnx.checker.check_model(out)
    before, after, saved = onnx.load(path), onnx.load(out), npz(os.path.join(d, "w.npz"))
    init = {i.name: numpy_helper.to_array(i) for i in after.graph.initializer}
    orig = {i.name: numpy_helper.to_array(i) for i in before.graph.initializer}
    for k, v in saved.items():
        check(np.array_equal(init[k], v), "exported '%s' differs from --save" % k)
        check(not np.array_equal(orig[k], v), "'%s' did not change in training" % k)
    for k in orig:
        if k not in saved:
            check(np.array_equal(orig[k], init[k]), "untrained initializer '%s' changed" % k)
    for i in before.graph.initializer:
        i.ClearField("raw_data")
    for i in after.graph.initializer:
        i.ClearField("raw_data")
    check(before.SerializeToString() == after.SerializeToString(), "the exported model differs beyond the weights")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    y = ort.InferenceSession(out, so, providers=["CPUExecutionProvider"]).run(None, {"input": inputs["input"]})[0]
    check(np.isfinite(y).all(), "onnxruntime on the exported model: not finite")
    print("ok export: %d trained initializers written into %s, the rest unchanged" % (len(saved), os.path.basename(out)))


# a stage on 2 or more devices in pipecc's plan table (which stage the planner replicates
# at -g 4 follows its cost model)
REPLICATED = re.compile(r"^\s+\d+\s+\d+\.\.\d+\s+[2-9] ", re.M)


def case_replicas():
    d = case_dir("replicas")
    m, path, inputs, labels, loss, opt, mode = model("convnet", d)
    x = inputs["input"]
    x = np.concatenate([x, x[::-1] * 0.5])
    y = np.concatenate([labels, labels[::-1]])
    tl, grads, new, before = tc.torch_steps(m, {"input": x}, y, loss, opt, mode, 4, 2)
    data = save_data(d, x, y)
    out = os.path.join(d, "b")
    r = run([A.pipecc, path, "--shape", "input:8x3x16x16", "-g", "4", "-m", "4", "-o", out]
            + tc.pipecc_args(loss, opt, "--train"))
    check(r.returncode == 0, r.stderr[-2000:])
    check(REPLICATED.search(r.stderr), "the plan should replicate a stage:\n" + r.stderr)
    train(os.path.join(out, "pipeline"), data + ["--steps", "2", "--no-shuffle", "--quiet", "--save",
                                                 os.path.join(d, "w.npz"), "--save-grads", os.path.join(d, "g.npz")])
    res = npz(os.path.join(d, "g.npz"))
    res.update({"new/" + k: v for k, v in npz(os.path.join(d, "w.npz")).items()})
    worst = {"loss": 0.0, "grad": 0.0, "new": 0.0, "step": 0.0}
    check(tc.compare_step("replicas", 4, res, None, grads, new, before, 1e-4, worst), "replicated stages vs torch")
    print("ok replicas: a replicated stage at -g 4, 2 steps: grads %.2e, weights %.2e rel-L2 of torch" % (worst["grad"],
                                                                                                   worst["new"]))


def tied_model(d):
    import torch
    import torch.nn as nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 16)
            self.mid = nn.Linear(16, 16)
            self.mid2 = nn.Linear(16, 16)

        def forward(self, ids):
            x = torch.tanh(self.mid(self.emb(ids)))
            x = torch.tanh(self.mid2(x)).mean(1)
            return torch.nn.functional.linear(x, self.emb.weight)  # the embedding, tied as the output layer

    torch.manual_seed(0)
    model = Tied()
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 20, size=(4, 6)).astype(np.int64)
    y = rng.integers(0, 20, size=4).astype(np.int64)
    path = os.path.join(d, "tied.onnx")
    torch.onnx.export(model, (torch.from_numpy(ids),), path, input_names=["ids"], output_names=["output"],
                      opset_version=17, do_constant_folding=False, dynamic_axes={"ids": {0: "batch"}})
    return model, path, ids, y


def case_tied():
    d = case_dir("tied")
    m, path, ids, y = tied_model(d)
    opt = ("sgd", dict(lr=0.1, momentum=0.9))
    tl, grads, new, before = tc.torch_steps(m, {"ids": ids}, y, "cross-entropy", opt, False, 2, 2)
    data = save_data(d, ids, y)
    res = {}
    for g in (1, 2, 3):
        exe = compile_(path, os.path.join(d, "g%d" % g), ["--shape", "ids:4x6", "-g", str(g), "-m", "2"]
                       + tc.pipecc_args("cross-entropy", opt, "--train"))
        if g > 1:
            src = open(os.path.join(d, "g%d" % g, "stage_%d.c" % (g - 1))).read()
            check('{"emb.weight", 1, 1, 2, {20, 16}' in src and re.search(r'"emb\.weight", 1, 1, 2, \{20, 16\}, \d+u, \d+u, 0}',
                                                                         src), "the last stage should hold a copy of emb.weight")
        train(exe, data + ["--steps", "2", "--no-shuffle", "--quiet", "--save", os.path.join(d, "w%d.npz" % g),
                           "--save-grads", os.path.join(d, "g%d.npz" % g)])
        r = npz(os.path.join(d, "g%d.npz" % g))
        r.update({"new/" + k: v for k, v in npz(os.path.join(d, "w%d.npz" % g)).items()})
        res[g] = r
        worst = {"loss": 0.0, "grad": 0.0, "new": 0.0, "step": 0.0}
        check(tc.compare_step("tied", g, r, None, grads, new, before, 1e-4, worst), "tied weights vs torch, g=%d" % g)
    same_bits(res[1], res[2], "tied g=1 vs g=2")
    same_bits(res[1], res[3], "tied g=1 vs g=3")
    print("ok tied: emb.weight read by the first and last stages: equals torch, bitwise equal for 1, 2, 3 stages")


def case_errors():
    d = case_dir("errors")
    _, path, inputs, labels, loss, opt, _ = model("smallcnn_train", d)
    x = np.concatenate([inputs["input"]] * 2)
    y = np.concatenate([labels] * 2)
    data = save_data(d, x, y)
    exe = compile_(path, os.path.join(d, "b"), ["--shape", "input:4x1x8x8", "-g", "2", "-m", "2", "--train",
                                                "--lr", "0.1"])
    np.save(os.path.join(d, "bad_shape.npy"), np.zeros((8, 1, 9, 9), np.float32))
    np.save(os.path.join(d, "bad_dtype.npy"), np.zeros((8, 1, 8, 8), np.float64))
    np.save(os.path.join(d, "few.npy"), np.zeros((2, 1, 8, 8), np.float32))
    np.save(os.path.join(d, "Y7.npy"), np.zeros(7, np.int64))
    os.makedirs(os.path.join(d, "empty"), exist_ok=True)
    other = os.path.join(d, "other")
    os.makedirs(other, exist_ok=True)
    from npzio import save_npz
    save_npz(os.path.join(other, "checkpoint.npz"), {"pipecc/step": np.array([1]), "pipecc/seed": np.array([0]),
                                                     "pipecc/shuffle": np.array([1]), "x": np.zeros(3, np.float32)})
    X, Y = os.path.join(d, "X.npy"), os.path.join(d, "Y.npy")
    cases = [
        (["--data", os.path.join(d, "bad_shape.npy"), "--labels", Y, "--steps", "1"], "shape"),
        (["--data", os.path.join(d, "bad_dtype.npy"), "--labels", Y, "--steps", "1"], "float32"),
        (["--data", X, "--steps", "1"], "--labels"),
        (["--data", X, "--labels", os.path.join(d, "Y7.npy"), "--steps", "1"], "samples"),
        (["--data", os.path.join(d, "few.npy"), "--labels", os.path.join(d, "few.npy"), "--steps", "1"], ""),
        (data + ["--steps", "1", "--batch", "6"], "compiled for batches of 4"),
        (data + ["--steps", "1", "--momentum", "0.9"], "compiled without"),
        (data + ["--steps", "1", "--resume", os.path.join(d, "empty")], "checkpoint.npz"),
        (data + ["--steps", "2", "--resume", other], "has no"),
        (data, "--steps"),
        (data + ["--steps", "1", "--frobnicate"], "unknown option"),
        (["--data", os.path.join(d, "missing.npy"), "--labels", Y, "--steps", "1"], "missing.npy"),
    ]
    for args, want in cases:
        r = train(exe, args, ok=False)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        check(r.returncode == 2, "%s: exit %d, expected 2: %s" % (args, r.returncode, r.stderr))
        check(len(lines) == 1 and lines[0].startswith("pipeline: ") and want in lines[0],
              "%s: expected one line with '%s', got: %s" % (args, want, r.stderr))
    r = run([exe, "--input", X, "--output", os.path.join(d, "o.npz")])
    check(r.returncode == 2 and "train" in r.stderr, "running a training program as inference: " + r.stderr)
    # a program that deadlocks (stage 0 waits for micro-batch 0's gradient before it
    # sends micro-batch 0's activations) is refused before anything runs
    main_c = os.path.join(d, "b", "pipeline_main.c")
    src = open(main_c).read()
    good = "program_0[9] = {{2, 0}, {3, 0}, {2, 1}, {3, 1}, {4, 0}, {5, 0}, {4, 1}, {5, 1}, {9, 0}}"
    check(good in src, "unexpected 1F1B program of stage 0: " + src[src.find("program_0"):][:120])
    open(main_c, "w").write(src.replace(good, "program_0[9] = {{2, 0}, {4, 0}, {3, 0}, {2, 1}, {3, 1}, {5, 0}, "
                                              "{4, 1}, {5, 1}, {9, 0}}"))
    r = run(["make", "-s", "-C", os.path.join(d, "b")])
    check(r.returncode == 0, "make: " + r.stderr)
    r = train(exe, data + ["--steps", "1"], ok=False)
    check(r.returncode == 2 and "deadlock" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          "a deadlocking program: " + r.stderr)
    print("ok errors: %d bad invocations and a deadlocking program, each exit 2 with one line" % (len(cases) + 1))


def case_nccl_rules():
    d = case_dir("nccl_rules")
    _, path, inputs, labels, loss, opt, _ = model("convnet", d)
    rng = np.random.default_rng(7)
    data = save_data(d, rng.standard_normal((8, 3, 16, 16)).astype(np.float32),
                     rng.integers(0, 5, size=8).astype(np.int64))
    configs = [["-g", "2", "-m", "4", "--no-replicate"], ["-g", "3", "-m", "4", "--no-replicate"],
               ["-g", "4", "-m", "8", "--no-replicate"], ["-g", "4", "-m", "4"]]
    n = 0
    for sched in ("1f1b", "gpipe"):
        for cfg in configs:
            out = os.path.join(d, "%s_%s" % (sched, "_".join(cfg)))
            exe = compile_(path, out, ["--shape", "input:8x3x16x16", "--schedule", sched] + cfg
                           + tc.pipecc_args(loss, opt, "--train"), even=False)
            r = run([exe, "train", "--steps", "1", "--quiet"] + data, {"PIPERT_CHECK_NCCL": "1"})
            check(r.returncode == 0 and "keep NCCL's rules" in r.stderr, "%s %s: %s" % (sched, cfg, r.stderr))
            n += 1
    print("ok nccl_rules: the %d programs pipecc emitted keep NCCL's rules (refusals: tests/runtime rt_unit programs)" % n)


MPI_ENV = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def mpi_train(n, exe, args, ok=True):
    r = run([A.mpirun, "--oversubscribe", "--allow-run-as-root", "-np", str(n), exe, "train"] + args, MPI_ENV)
    if ok:
        check(r.returncode == 0, "mpirun -np %d pipeline train: exit %d\n%s%s" % (n, r.returncode, r.stdout[-2000:],
                                                                                  r.stderr[-2000:]))
    return r


def case_mpi():
    check(A.mpirun, "mpirun not found")
    d, path, loss, opt, data = convnet_case("mpi", 6, 16)
    builds = {"3 stages": (compile_(path, os.path.join(d, "s3"), ["--shape", "input:8x3x16x16", "-g", "3", "-m", "4"]
                                    + tc.pipecc_args(loss, opt, "--train")), 3)}
    r = run([A.pipecc, path, "--shape", "input:8x3x16x16", "-g", "4", "-m", "4", "-o", os.path.join(d, "r4")]
            + tc.pipecc_args(loss, opt, "--train"))
    check(r.returncode == 0 and REPLICATED.search(r.stderr), "a replicated plan: " + r.stderr)
    builds["4 devices, a replicated stage"] = (os.path.join(d, "r4", "pipeline"), 4)
    for name, (exe, n) in builds.items():
        out = {}
        for how in ("threads", "mpi"):
            o = os.path.join(d, "%s_%s" % (os.path.basename(os.path.dirname(exe)), how))
            args = data + ["--steps", "3", "--seed", "2", "--quiet", "--save", o + "_w.npz", "--save-grads", o + "_g.npz",
                           "--log", o + ".csv"]
            if how == "mpi":
                mpi_train(n, exe, args)
            else:
                train(exe, args)
            out[how] = (npz(o + "_w.npz"), npz(o + "_g.npz"),
                        [",".join(r.split(",")[:4]) for r in open(o + ".csv").read().splitlines()])
        same_bits(out["threads"][0], out["mpi"][0], name + ": weights, threads vs MPI")
        same_bits(out["threads"][1], out["mpi"][1], name + ": gradients, threads vs MPI")
        check(out["threads"][2] == out["mpi"][2], name + ": loss logs, threads vs MPI")
    # a checkpoint under MPI, resumed under threads, equals 4 steps straight
    exe, n = builds["3 stages"]
    ck = os.path.join(d, "ck")
    mpi_train(n, exe, data + ["--steps", "2", "--seed", "2", "--quiet", "--checkpoint", ck])
    train(exe, data + ["--steps", "4", "--seed", "2", "--quiet", "--resume", ck, "--save", os.path.join(d, "res.npz")])
    train(exe, data + ["--steps", "4", "--seed", "2", "--quiet", "--save", os.path.join(d, "straight.npz")])
    same_bits(npz(os.path.join(d, "straight.npz")), npz(os.path.join(d, "res.npz")), "MPI checkpoint resumed by threads")
    # --launch starts the processes itself (through mpirun)
    r = run([exe, "train", "--launch"] + data + ["--steps", "4", "--seed", "2", "--quiet", "--save",
                                                 os.path.join(d, "launched.npz")], dict(MPI_ENV, PIPERT_MPIRUN=A.mpirun))
    check(r.returncode == 0, "--launch: " + r.stderr)
    same_bits(npz(os.path.join(d, "straight.npz")), npz(os.path.join(d, "launched.npz")), "--launch vs threads")
    r = mpi_train(2, exe, data + ["--steps", "1"], ok=False)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("pipeline:")]
    check(r.returncode == 2 and len(lines) == 1 and "mpirun -np 3" in lines[0], "wrong -np: " + r.stderr)
    print("ok mpi: 3 stages on 3 ranks and a plan with a replicated stage on 4 ranks give the threads transport's bits; "
          "checkpoints move between transports")


def fake_device_builds(name):
    """The convnet training builds the fake-device cases run: (folder, data arguments,
    {name: pipeline}) for 3 stages under 1F1B and GPipe, 4 devices with a replicated stage and a
    replicated stage beside one that is not."""
    d, path, loss, opt, data = convnet_case(name, 7, 16)
    builds = {}
    for sched in ("1f1b", "gpipe"):
        builds["3 stages " + sched] = compile_(path, os.path.join(d, "s3_" + sched), [
            "--shape", "input:8x3x16x16", "-g", "3", "-m", "4", "--schedule", sched] + tc.pipecc_args(loss, opt, "--train"))
    r = run([A.pipecc, path, "--shape", "input:8x3x16x16", "-g", "4", "-m", "4", "-o", os.path.join(d, "r4")]
            + tc.pipecc_args(loss, opt, "--train"))
    check(r.returncode == 0 and REPLICATED.search(r.stderr), "a replicated plan: " + r.stderr)
    builds["4 devices, a replicated stage"] = os.path.join(d, "r4", "pipeline")
    r = run([A.pipecc, path, "--shape", "input:8x3x16x16", "-g", "3", "-m", "4", "-o", os.path.join(d, "r3")]
            + tc.pipecc_args(loss, opt, "--train"))
    check(r.returncode == 0 and re.search(r"^\s+0\s+0\.\.1\s+2 ", r.stderr, re.M) and
          re.search(r"^\s+1\s+2\.\.2\s+1 ", r.stderr, re.M), "a plan with stage 0 on 2 replicas, stage 1 on one: "
          + r.stderr)
    builds["stage 0 x 2 replicas, stage 1"] = os.path.join(d, "r3", "pipeline")
    return d, data, builds


FAKE = {"PIPERT_FAKE_DEVICE": "1", "FAKE_DEV_STATS": "1"}


def fake_device_run(d, data, exe, tag, env, mpi_n=0):
    """3 training steps of exe (under mpirun with mpi_n ranks when given): ((weights,
    gradients, loss log), stderr)."""
    o = os.path.join(d, "%s_%s" % (os.path.basename(os.path.dirname(exe)), tag))
    args = data + ["--steps", "3", "--seed", "2", "--quiet", "--save", o + "_w.npz", "--save-grads", o + "_g.npz",
                   "--log", o + ".csv"]
    if mpi_n:  # a hang (a collective some ranks miss) stops within a minute
        r = run([A.mpirun, "--oversubscribe", "--allow-run-as-root", "-np", str(mpi_n), exe, "train"] + args +
                ["--timeout", "60"], dict(MPI_ENV, **env))
    else:
        r = run([exe, "train"] + args, env)
    check(r.returncode == 0, "%s %s: exit %d\n%s" % (exe, tag, r.returncode, r.stderr[-3000:]))
    log = [",".join(ln.split(",")[:4]) for ln in open(o + ".csv").read().splitlines()]
    return (npz(o + "_w.npz"), npz(o + "_g.npz"), log), r.stderr


def same_run(host, dev, what):
    same_bits(host[0], dev[0], what + ": weights")
    same_bits(host[1], dev[1], what + ": gradients")
    check(host[2] == dev[2], what + ": loss logs")


def case_fake_device():
    """Training programs on the fake asynchronous device (PIPERT_FAKE_DEVICE=1,
    runtime/rt_fakedev.c), threads transport: device-mode sets, stashes and graph inputs,
    forward and backward queued on the device and handed over by events, the optimizer
    step after them; the host run's bits (fake_device_builds' plans); dropping the
    device's event waits changes them."""
    d, data, builds = fake_device_builds("fake_device")
    for name, exe in builds.items():
        host, _ = fake_device_run(d, data, exe, "host", {})
        dev, err = fake_device_run(d, data, exe, "fake", FAKE)
        same_run(host, dev, name + ", host vs fake device")
        st = re.findall(r"^fake device: stage \d+: (\d+) parts queued ahead, (\d+) uploads queued ahead", err, re.M)
        check(st and sum(int(a) for a, _ in st) > 0 and sum(int(b) for _, b in st) > 0,
              name + ": nothing queued ahead on the fake device: " + err[-2000:])
        print("ok %s: fake device (%d parts, %d uploads queued ahead) gives the host's bits" % (
            name, sum(int(a) for a, _ in st), sum(int(b) for _, b in st)))
    exe = builds["3 stages 1f1b"]
    host, _ = fake_device_run(d, data, exe, "host", {})
    broken, _ = fake_device_run(d, data, exe, "no_wait", dict(FAKE, FAKE_NO_WAIT="1"))
    check(any(host[0][k].tobytes() != broken[0][k].tobytes() for k in host[0]),
          "without the device's event waits the weights stayed right: the comparison cannot see a broken hand-over")


def case_mpi_fake_device():
    """The same plans under MPI in NCCL mode on the fake device: sends and receives in
    groups, the replicas' all-reduce over a communicator of their own (made by the
    replicas' ranks only); the host run's bits."""
    check(A.mpirun, "mpirun not found")
    d, data, builds = fake_device_builds("mpi_fake_device")
    for name, n in (("3 stages 1f1b", 3), ("4 devices, a replicated stage", 4), ("stage 0 x 2 replicas, stage 1", 3)):
        exe = builds[name]
        host, _ = fake_device_run(d, data, exe, "host", {})
        dev, err = fake_device_run(d, data, exe, "fake_mpi", FAKE, n)
        check(re.search(r"^fake nccl: rank 0: [1-9]\d* sends", err, re.M) and "through host memory" not in err,
              name + ": NCCL mode not used: " + err[-2000:])
        same_run(host, dev, name + " under MPI, host vs fake device (NCCL mode)")
        # the groups run on the device's comm stream: their ends return before they complete
        st = re.findall(r"^fake nccl: rank \d+: \d+ sends, \d+ receives, (\d+) groups, (\d+) queued ahead$", err, re.M)
        groups, ahead = sum(int(g) for g, _ in st), sum(int(a) for _, a in st)
        check(ahead > 0, "%s: none of %d NCCL groups queued ahead: %s" % (name, groups, err[-2000:]))
        print("ok %s under MPI (%d ranks), NCCL mode on the fake device (%d of %d groups queued ahead): the host's "
              "bits" % (name, n, ahead, groups))
        # the plan's order of receives (PIPERT_RECV_AHEAD=0): the same bits; the parts
        # that ran beside a transfer, per stage, with and without receives moved ahead
        plain, err0 = fake_device_run(d, data, exe, "fake_mpi_plain", dict(FAKE, PIPERT_RECV_AHEAD="0"), n)
        same_run(host, plain, name + " under MPI, PIPERT_RECV_AHEAD=0")

        def beside(e):
            return [int(b) for b in re.findall(r"^fake device: stage \d+: .* (\d+) parts beside a transfer,", e, re.M)]
        print("   parts beside a transfer, per process: %s with receives ahead, %s in the plan's order" %
              (beside(err), beside(err0)))


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpirun", default="")
    A = ap.parse_args()
    os.makedirs(A.work, exist_ok=True)
    globals()["case_" + A.case]()


if __name__ == "__main__":
    main()
