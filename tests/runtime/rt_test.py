#!/usr/bin/env python3
"""libpipert tests: runs the fake pipelines built from fake_pipeline.c.

usage: rt_test.py CASE --bin BUILD/tests/runtime --work DIR [--mpirun PATH]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile

import numpy as np

W = 6
A = None  # parsed arguments


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def exe(name):
    return os.path.join(A.bin, name, name)


def weights_dir(name):
    d = os.path.join(A.work, "w_" + name)
    os.makedirs(d, exist_ok=True)
    r = subprocess.run([exe(name), "--write-weights", d], capture_output=True, text=True)
    check(r.returncode == 0, "--write-weights failed: " + r.stderr)
    return d


def run(cmd, env=None, timeout=30):
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)
    r.elapsed = time.monotonic() - t0
    return r


def mpirun(n):
    check(A.mpirun, "mpirun not found")
    return [A.mpirun, "--oversubscribe", "--allow-run-as-root", "-np", str(n)]


MPI_ENV = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def make_inputs(batch, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, W)).astype(np.float32)
    s = rng.standard_normal(batch)
    xp = os.path.join(A.work, "x%d.npy" % batch)
    sp = os.path.join(A.work, "s%d.npy" % batch)
    np.save(xp, x)
    np.save(sp, s)
    return x, s, xp, sp


def expected(x, s):
    j = np.arange(W, dtype=np.float32)
    w1 = np.float32(0.25) * j - np.float32(0.5)
    w3 = np.float32(1.5) - np.float32(0.125) * j
    h2 = x * np.float32(2) + w1
    y = h2 * np.float32(0.5) + x * w3
    return {"y": y, "z": s * 3.0, "mid": h2}


def run_pipeline(name, batch, extra=(), env=None, prefix=(), out=None):
    x, s, xp, sp = make_inputs(batch)
    out = out or os.path.join(A.work, "out_%s_%d_%s" % (name, batch, "_".join(extra).replace("-", "")))
    shutil.rmtree(out, ignore_errors=True)
    cmd = list(prefix) + [exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out,
                          "--weights-dir", weights_dir(name)] + list(extra)
    r = run(cmd, env)
    check(r.returncode == 0, "%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr))
    got = {n: np.load(os.path.join(out, n + ".npy")) for n in ("y", "z", "mid")}
    exp = expected(x, s)
    for n in got:
        check(got[n].shape == exp[n].shape and got[n].dtype == exp[n].dtype,
              "%s: output %s has %s %s, expected %s %s" % (name, n, got[n].shape, got[n].dtype, exp[n].shape,
                                                           exp[n].dtype))
        check(np.allclose(got[n], exp[n], rtol=1e-6, atol=1e-6), "%s: output %s differs from numpy" % (name, n))
    return got


def same_bits(a, b, what):
    for n in a:
        check(a[n].tobytes() == b[n].tobytes(), "%s: output %s not bitwise equal" % (what, n))


# ---- cases ------------------------------------------------------------------

def case_npy():
    """numpy -> runtime reader/writer -> numpy, every supported dtype and several ranks."""
    arrays = {
        "f4": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 3,
        "f8": np.linspace(0, 1, 7),
        "f2": np.arange(6, dtype=np.float16).reshape(3, 2),
        "i8": np.arange(-5, 5, dtype=np.int64).reshape(2, 5),
        "i4": np.arange(12, dtype=np.int32).reshape(1, 2, 2, 3),
        "i1": np.arange(-4, 4, dtype=np.int8),
        "u1": np.arange(10, dtype=np.uint8),
        "b1": np.array([[True, False], [False, True]]),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "r8": np.ones((1, 1, 1, 1, 1, 1, 1, 2), dtype=np.float32),
    }
    for k, a in arrays.items():
        src = os.path.join(A.work, k + ".npy")
        dst = os.path.join(A.work, k + "_copy.npy")
        np.save(src, a)
        r = run([os.path.join(A.bin, "rt_unit"), "copy", src, dst])
        check(r.returncode == 0, "copy %s: %s" % (k, r.stderr))
        b = np.load(dst)
        check(b.dtype == a.dtype and b.shape == a.shape and b.tobytes() == a.tobytes(), "npy round trip " + k)
        check(open(src, "rb").read() == open(dst, "rb").read(), "npy bytes differ from numpy's for " + k)
    bad = {"fortran": np.asfortranarray(np.ones((2, 3), dtype=np.float32)),
           "bigendian": np.arange(3, dtype=">f4"), "complex": np.ones(2, dtype=np.complex64)}
    for k, a in bad.items():
        src = os.path.join(A.work, k + ".npy")
        np.save(src, a)
        r = run([os.path.join(A.bin, "rt_unit"), "copy", src, os.path.join(A.work, "bad.npy")])
        check(r.returncode == 2 and src in r.stderr, "%s should be rejected: %s" % (k, r.stderr))
    trunc = os.path.join(A.work, "trunc.npy")
    np.save(trunc, np.ones(100, dtype=np.float32))
    os.truncate(trunc, 200)
    r = run([os.path.join(A.bin, "rt_unit"), "copy", trunc, os.path.join(A.work, "bad.npy")])
    check(r.returncode == 2 and "truncated" in r.stderr, "truncated npy: " + r.stderr)


def case_npz():
    src = os.path.join(A.work, "in.npz")
    dst = os.path.join(A.work, "copy.npz")
    a = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "idx": np.arange(5, dtype=np.int64),
         "flag": np.array([True, False])}
    np.savez(src, **a)
    r = run([os.path.join(A.bin, "rt_unit"), "copy", src, dst])
    check(r.returncode == 0, "npz copy: " + r.stderr)
    with np.load(dst) as z:
        check(sorted(z.files) == sorted(a), "npz names: %s" % z.files)
        for k in a:
            check(z[k].dtype == a[k].dtype and z[k].tobytes() == a[k].tobytes(), "npz entry " + k)
    with zipfile.ZipFile(dst) as z:
        check(z.testzip() is None, "zip CRC check of our npz")
        check(all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist()), "stored entries")
    # deterministic output
    dst2 = os.path.join(A.work, "copy2.npz")
    run([os.path.join(A.bin, "rt_unit"), "copy", src, dst2])
    check(open(dst, "rb").read() == open(dst2, "rb").read(), "npz output not deterministic")
    comp = os.path.join(A.work, "comp.npz")
    np.savez_compressed(comp, **a)
    r = run([os.path.join(A.bin, "rt_unit"), "copy", comp, dst])
    check(r.returncode == 2 and "compressed" in r.stderr and "savez_compressed" in r.stderr,
          "compressed npz must be rejected clearly: " + r.stderr)


def case_outputs_equal():
    """1 vs 2 vs 4 stages, plan's M: correct and bitwise equal."""
    for batch in (8, 12):
        ref = run_pipeline("rt_fake_s1", batch)
        for name in ("rt_fake_s2", "rt_fake_s4"):
            same_bits(ref, run_pipeline(name, batch), "%s batch %d" % (name, batch))


def case_microbatches():
    ref = run_pipeline("rt_fake_s1", 16)
    for name in ("rt_fake_s1", "rt_fake_s2", "rt_fake_s4"):
        for m in (1, 2, 3, 4, 5, 8, 16):
            same_bits(ref, run_pipeline(name, 16, ["--microbatches", str(m)]), "%s M=%d" % (name, m))
    # another micro-batch size (3): batch 9 and 18
    for batch in (9, 18):
        run_pipeline("rt_fake_s2_mb3", batch, ["--microbatches", "2"])


def case_replicas():
    ref = run_pipeline("rt_fake_s1", 16)
    for name in ("rt_fake_s4_r2", "rt_fake_s2_r3"):
        for m in (1, 3, 4, 7):
            same_bits(ref, run_pipeline(name, 16, ["--microbatches", str(m)]), "%s M=%d" % (name, m))


def case_npz_io():
    x, s, xp, sp = make_inputs(8)
    inz = os.path.join(A.work, "in.npz")
    np.savez(inz, x=x, s=s)
    outz = os.path.join(A.work, "out.npz")
    r = run([exe("rt_fake_s2"), "--input", inz, "--output", outz, "--weights-dir", weights_dir("rt_fake_s2")])
    check(r.returncode == 0, "npz in/out: " + r.stderr)
    exp = expected(x, s)
    with np.load(outz) as z:
        check(sorted(z.files) == ["mid", "y", "z"], "npz outputs: %s" % z.files)
        for n in exp:
            check(np.allclose(z[n], exp[n], rtol=1e-6), "npz output " + n)
    # positional inputs
    r = run([exe("rt_fake_s2"), "--input", xp, "--input", sp, "--output", os.path.join(A.work, "pos"),
             "--weights-dir", weights_dir("rt_fake_s2")])
    check(r.returncode == 0 and os.path.exists(os.path.join(A.work, "pos", "y.npy")), "positional: " + r.stderr)
    # a single .npy output for a 3-output pipeline is an error
    r = run([exe("rt_fake_s2"), "--input", inz, "--output", os.path.join(A.work, "one.npy"),
             "--weights-dir", weights_dir("rt_fake_s2")])
    check(r.returncode == 2 and "3 outputs" in r.stderr, "several outputs into one .npy: " + r.stderr)


def expect_error(r, status, pattern, what):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == status, "%s: exit %d, expected %d; stderr: %s" % (what, r.returncode, status, r.stderr))
    check(len(lines) == 1, "%s: expected one line, got: %r" % (what, r.stderr))
    check(re.search(pattern, lines[0]), "%s: message %r does not match %r" % (what, lines[0], pattern))


def case_bad_input():
    wd = weights_dir("rt_fake_s2")
    _, _, xp, sp = make_inputs(8)
    out = os.path.join(A.work, "out")

    def go(x=None, s=None, extra=()):
        xs = os.path.join(A.work, "bad_x.npy")
        ss = os.path.join(A.work, "bad_s.npy")
        if x is not None:
            np.save(xs, x)
        if s is not None:
            np.save(ss, s)
        return run([exe("rt_fake_s2"), "--input", "x=" + (xs if x is not None else xp),
                    "--input", "s=" + (ss if s is not None else sp), "--output", out, "--weights-dir", wd] + list(extra))

    expect_error(go(x=np.zeros((8, 5), np.float32)), 2,
                 r"^pipeline: input 'x' .*expected shape \(8, 6\).*given \(8, 5\)$", "wrong inner dim")
    expect_error(go(x=np.zeros((7, 6), np.float32)), 2,
                 r"^pipeline: input 'x' .*expected shape \(8, 6\).*micro-batch size 2.*given \(7, 6\)$", "batch")
    expect_error(go(x=np.zeros((8, 6, 1), np.float32)), 2, r"input 'x' .*given \(8, 6, 1\)", "rank")
    expect_error(go(x=np.zeros((8, 6), np.float64)), 2, r"^pipeline: input 'x' .*expected dtype float32, given float64",
                 "dtype")
    expect_error(go(s=np.zeros(10)), 2, r"^pipeline: input 's' .*batch of 10 samples, but other inputs have 8", "T")
    expect_error(run([exe("rt_fake_s2"), "--input", "x=" + xp, "--output", out, "--weights-dir", wd]), 2,
                 r"^pipeline: input 's' .* not given", "missing input")
    expect_error(run([exe("rt_fake_s2"), "--input", "q=" + xp, "--output", out, "--weights-dir", wd]), 2,
                 r"no input named 'q'", "unknown name")
    expect_error(run([exe("rt_fake_s2"), "--input", "x=/nonexistent.npy", "--input", "s=" + sp, "--output", out,
                      "--weights-dir", wd]), 2, r"^pipeline: /nonexistent.npy: No such file", "no file")
    expect_error(go(extra=["--microbatches", "0"]), 2, r"--microbatches", "bad option")
    r = run([exe("rt_fake_s2"), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out, "--weights-dir", wd],
            {"FAKE_BAD_PROGRAM": "1"})
    expect_error(r, 2, r"^pipeline: internal error: bad pipeline description: stage 0: instruction 2: RECV_ACT of "
                 r"micro-batch 2 out of order", "bad program")


def weights_case(mutate, pattern, mpi=False):
    name = "rt_fake_s4_mpi" if mpi else "rt_fake_s4"
    wd = weights_dir(name)
    path = os.path.join(wd, "weights_1.bin")
    mutate(path)
    _, _, xp, sp = make_inputs(8)
    cmd = [exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--output", os.path.join(A.work, "o"),
           "--weights-dir", wd]
    if mpi:
        r = run(mpirun(4) + cmd, MPI_ENV)
        check(r.returncode == 2, "mpi weights: exit %d: %s" % (r.returncode, r.stderr))
        check(re.search(pattern, r.stderr, re.M), "mpi weights message: " + r.stderr)
        return
    expect_error(run(cmd), 2, pattern, "weights")


def case_weights_missing():
    weights_case(os.remove, r"^pipeline: stage 1: weights_1.bin: missing")


def case_weights_truncated():
    weights_case(lambda p: os.truncate(p, 10), r"^pipeline: stage 1: weights_1.bin: truncated \(10 bytes, expected 24\)")
    weights_case(lambda p: open(p, "ab").write(b"x"), r"^pipeline: stage 1: weights_1.bin: wrong size")


def flip(p):
    b = bytearray(open(p, "rb").read())
    b[5] ^= 0x10
    open(p, "wb").write(bytes(b))


def case_weights_corrupt():
    weights_case(flip, r"^pipeline: stage 1: weights_1.bin: checksum mismatch")


def misbehave(mode, name="rt_fake_s4", stage=2, extra=(), prefix=(), env=None):
    _, _, xp, sp = make_inputs(32)
    e = {"FAKE_MODE": mode, "FAKE_STAGE": str(stage)}
    e.update(env or {})
    return run(list(prefix) + [exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--output",
                               os.path.join(A.work, "o"), "--weights-dir", weights_dir(name)] + list(extra), e)


def case_stage_fails():
    for name, stage in (("rt_fake_s4", 2), ("rt_fake_s4", 0), ("rt_fake_s4", 3), ("rt_fake_s4_r2", 1)):
        for m in ("1", "4", "16"):
            r = misbehave("fail", name, stage, ["--microbatches", m])
            check(r.elapsed < 5, "stage failure took %.1f s" % r.elapsed)
            expect_error(r, 1, r"^pipeline: stage %d( \(replica \d\))?: forward failed on micro-batch \d+ \(status -7\)$"
                         % stage, "%s stage %d fails" % (name, stage))
            check(not os.path.exists(os.path.join(A.work, "o")), "no output after a failure")


def case_stage_crashes():
    r = misbehave("crash")
    check(r.returncode == -11, "crash: exit %d" % r.returncode)
    check("pipeline: stage 2: crashed (SIGSEGV)" in r.stderr, "crash message: " + r.stderr)
    check(r.elapsed < 5, "crash took %.1f s" % r.elapsed)


def case_stage_hangs():
    r = misbehave("hang", extra=["--timeout", "1"])
    check(r.returncode == 1, "hang: exit %d: %s" % (r.returncode, r.stderr))
    check("timed out after 1.0 s" in r.stderr, "hang message: " + r.stderr)
    check(r.elapsed < 8, "hang took %.1f s" % r.elapsed)


def parse_bench(out, stages):
    m = re.search(r"^throughput: ([0-9.]+) samples/s$", out, re.M)
    check(m and float(m.group(1)) > 0, "throughput line: " + out)
    busy = re.findall(r"^stage (\d+): busy ([0-9.]+) ms \(([0-9.]+)%\), (\d+) replicas?(?:, cpu ([0-9.]+) ms)?$", out,
                      re.M)
    check(len(busy) == stages and [int(b[0]) for b in busy] == list(range(stages)), "stage lines: " + out)
    # each stage thread's own CPU time in its busy spans: there, and never above their wall time
    for b in busy:
        check(b[4] != "" and float(b[4]) <= float(b[1]) * 1.01 + 0.005, "stage %s: cpu %s ms, busy %s ms: %s"
              % (b[0], b[4] or "missing", b[1], out))
    m = re.search(r"^bubble: measured (-?[0-9.]+) predicted ([0-9.]+)$", out, re.M)
    check(m, "bubble line: " + out)
    measured, predicted = float(m.group(1)), float(m.group(2))
    check(-0.01 <= measured <= 1.0, "measured bubble %f" % measured)
    return measured, predicted


def case_bench():
    _, _, xp, sp = make_inputs(64)
    for name, stages in (("rt_fake_s1", 1), ("rt_fake_s4", 4), ("rt_fake_s4_r2", 4)):
        r = run([exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--bench", "5",
                 "--weights-dir", weights_dir(name), "--pin"])
        check(r.returncode == 0, "bench: " + r.stderr)
        measured, predicted = parse_bench(r.stdout, stages)
        check(abs(predicted - (stages - 1) / (4 + stages - 1)) < 1e-4, "predicted bubble %f" % predicted)
        # --stream: N batches through one filled pipeline; the steady state over the
        # N - 1 batches after the first one's completion (none for N = 1)
        for n in (5, 1):
            r = run([exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--bench", str(n), "--stream",
                     "--weights-dir", weights_dir(name)])
            check(r.returncode == 0, "bench --stream: " + r.stderr)
            check(re.search(r"^bubble: measured -?[0-9.]+ \(streaming %d batches; " % n, r.stdout, re.M),
                  "streamed bubble line: " + r.stdout)
            m = re.search(r"^steady state: ([0-9.]+) samples/s \((\d+) batches from the first batch's completion",
                          r.stdout, re.M)
            if n == 1:
                check(not m, "a steady state from one batch: " + r.stdout)
            else:
                check(m and float(m.group(1)) > 0 and int(m.group(2)) == n - 1, "steady state line: " + r.stdout)


def dev_stats(stderr):
    """(parts queued ahead, uploads queued ahead, event waits, uploads into a buffer the
    part queued just before reads) summed over the fake device's replicas."""
    st = re.findall(r"^fake device: stage \d+: (\d+) parts queued ahead, (\d+) uploads queued ahead, (\d+) waits, "
                    r"\d+ parts beside a transfer, (\d+) uploads behind the last part$", stderr, re.M)
    check(st, "no fake device statistics: " + stderr)
    return tuple(sum(int(x[i]) for x in st) for i in range(4))


def beside_transfers(stderr):
    """{stage: parts that ran while one of its NCCL groups was in flight} (fake device)."""
    return {int(s): int(n) for s, n in re.findall(r"^fake device: stage (\d+): .* (\d+) parts beside a transfer,",
                                                   stderr, re.M)}


def case_device():
    """Stages on the fake asynchronous device (PIPERT_FAKE_DEVICE=1, runtime/rt_fakedev.c: a
    thread per stream, random delays): sets handed over on the device by events give the
    same bits as the host pipeline for 1 to 32 micro-batches and with replicas; so do the
    synchronous hand-over (PIPERT_SYNC_SETS=1), host sets (PIPERT_HOST_SETS=1) and a
    stream of batches."""
    ref = run_pipeline("rt_fake_s1", 64)
    for name in ("rt_fake_s4", "rt_fake_s2_r3"):
        for m in ("1", "4", "32"):
            for how, env in (("events", {}), ("synchronous", {"PIPERT_SYNC_SETS": "1"}),
                             ("host sets", {"PIPERT_HOST_SETS": "1"})):
                out = os.path.join(A.work, "dev_%s_%s_%s" % (name, m, how.replace(" ", "_")))
                env = dict(env, FAKE_DEV_STATS="1", PIPERT_FAKE_DEVICE="1")
                got = run_pipeline(name, 64, ["--microbatches", m], env, out=out)
                same_bits(ref, got, "%s M=%s, %s" % (name, m, how))
                # the statistics come with stderr: run again to read them (same bits again)
                _, _, xp, sp = make_inputs(64)
                r = run([exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out + "_2",
                         "--weights-dir", weights_dir(name), "--microbatches", m], env)
                check(r.returncode == 0, "%s: %s" % (name, r.stderr))
                ahead, uploads, waits, behind = dev_stats(r.stderr)
                if how == "events":
                    # every stage's 32 micro-batches queued; stage 0's x and the last stage's x and s
                    # uploaded on the upload stream
                    check(ahead >= 64 // 2 and uploads >= 3 * 32 and waits > 0, "%s M=%s: %d parts and %d uploads "
                          "queued ahead, %d waits: the hand-over did not run on the device" %
                          (name, m, ahead, uploads, waits))
                    # a graph input's next micro-batch goes to the other of two device copies, so
                    # its upload never waits for the forward queued just before (which reads the first)
                    check(behind == 0, "%s M=%s: %d uploads into a buffer the part queued before reads: the "
                          "upload waits for that part and the device idles for the copy" % (name, m, behind))
                else:
                    check(ahead == 0 and uploads == 0, "%s M=%s %s: %d parts, %d uploads queued ahead" %
                          (name, m, how, ahead, uploads))
        # a stream of batches reuses every set many times; busy time comes from the device
        _, _, xp, sp = make_inputs(64)
        out = os.path.join(A.work, "dev_%s_stream" % name)
        r = run([exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out, "--bench", "5", "--stream",
                 "--weights-dir", weights_dir(name), "--microbatches", "8"], {"PIPERT_FAKE_DEVICE": "1"})
        check(r.returncode == 0, "%s --bench --stream: %s" % (name, r.stderr))
        same_bits(ref, {n: np.load(os.path.join(out, n + ".npy")) for n in ref}, "%s streamed" % name)
        busy = re.findall(r"^stage \d+: busy ([0-9.]+) ms", r.stdout, re.M)
        check(busy and all(float(b) > 0 for b in busy), "%s: busy lines: %s" % (name, r.stdout))
    # the control: with the device's event waits dropped (FAKE_NO_WAIT=1) later stages read
    # sets before they are written and the outputs change; else this test could not fail
    broken = 0
    for i in range(3):
        out = os.path.join(A.work, "dev_no_wait_%d" % i)
        r = run([exe("rt_fake_s4"), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out,
                 "--weights-dir", weights_dir("rt_fake_s4"), "--microbatches", "32"],
                {"FAKE_NO_WAIT": "1", "PIPERT_FAKE_DEVICE": "1"})
        check(r.returncode == 0, "rt_fake_s4 FAKE_NO_WAIT=1: " + r.stderr)
        got = {n: np.load(os.path.join(out, n + ".npy")) for n in ref}
        broken += any(got[n].tobytes() != ref[n].tobytes() for n in ref)
        if broken:
            break
    check(broken, "without the event waits the outputs stayed right in 3 runs: the test cannot see a broken hand-over")
    # out of device memory (FAKE_DEV_MEM: its size) at the first set, the graph inputs or
    # later sets: one line naming the stage, exit 1, no outputs, no hang
    for mem in ("100", "1200", "2000"):
        out = os.path.join(A.work, "dev_oom")
        shutil.rmtree(out, ignore_errors=True)
        r = run([exe("rt_fake_s4"), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out,
                 "--weights-dir", weights_dir("rt_fake_s4"), "--microbatches", "8"],
                {"PIPERT_FAKE_DEVICE": "1", "FAKE_DEV_MEM": mem})
        expect_error(r, 1, r"^pipeline: stage \d on the fake device: out of memory \(\d+ bytes more",
                     "FAKE_DEV_MEM=" + mem)
        check(not os.path.exists(out) and r.elapsed < 10, "out of device memory: outputs written, or %.1f s" % r.elapsed)
    print("ok: device hand-over; without its waits the outputs change (run %d)" % (i + 1))


def case_mpi():
    for n, name in ((2, "rt_fake_s2_mpi"), (4, "rt_fake_s4_mpi")):
        for batch, m in ((8, None), (12, "4"), (16, "3"), (16, "1")):
            extra = ["--microbatches", m] if m else []
            ref = run_pipeline("rt_fake_s1", batch, extra)
            same_bits(ref, run_pipeline(name, batch, extra, MPI_ENV, mpirun(n)), "%s np %d M=%s" % (name, n, m))
    _, _, xp, sp = make_inputs(16)
    r = run(mpirun(4) + [exe("rt_fake_s4_mpi"), "--input", "x=" + xp, "--input", "s=" + sp, "--bench", "3",
                         "--weights-dir", weights_dir("rt_fake_s4_mpi")], MPI_ENV)
    check(r.returncode == 0, "mpi bench: " + r.stderr)
    parse_bench(r.stdout, 4)
    # a wrong input: rank 0 reports it, everyone exits 2
    bad = os.path.join(A.work, "bad.npy")
    np.save(bad, np.zeros((8, 5), np.float32))
    r = run(mpirun(2) + [exe("rt_fake_s2_mpi"), "--input", "x=" + bad, "--input", "s=" + sp, "--output",
                         os.path.join(A.work, "o"), "--weights-dir", weights_dir("rt_fake_s2_mpi")], MPI_ENV)
    check(r.returncode == 2 and "input 'x'" in r.stderr and "given (8, 5)" in r.stderr, "mpi bad input: " + r.stderr)
    check(r.stderr.count("pipeline:") == 1, "one message: " + r.stderr)


def case_mpi_wrong_np():
    _, _, xp, sp = make_inputs(8)
    r = run(mpirun(3) + [exe("rt_fake_s2_mpi"), "--input", "x=" + xp, "--input", "s=" + sp, "--output",
                         os.path.join(A.work, "o"), "--weights-dir", weights_dir("rt_fake_s2_mpi")], MPI_ENV)
    check(r.returncode == 2 and "3 ranks for a 2-stage pipeline" in r.stderr, "wrong np: " + r.stderr)


def case_mpi_weights():
    weights_case(flip, r"^pipeline: stage 1: weights_1.bin: checksum mismatch", mpi=True)


def case_mpi_stage_fails():
    r = misbehave("fail", "rt_fake_s4_mpi", 2, prefix=mpirun(4), env=MPI_ENV)
    check(r.returncode != 0 and "pipeline: stage 2: forward failed" in r.stderr, "mpi fail: " + r.stderr)
    check(r.elapsed < 10, "mpi failure took %.1f s" % r.elapsed)


def case_mpi_rank_dies():
    for mode in ("die", "crash"):
        for stage in (1, 3, 0):
            r = misbehave(mode, "rt_fake_s4_mpi", stage, prefix=mpirun(4), env=MPI_ENV)
            check(r.returncode != 0, "mpi %s: exit 0" % mode)
            check(r.elapsed < 10, "mpi %s took %.1f s" % (mode, r.elapsed))
    r = misbehave("hang", "rt_fake_s4_mpi", 2, ["--timeout", "2"], prefix=mpirun(4), env=MPI_ENV)
    check(r.returncode != 0 and re.search(r"rank \d \(stage \d\): timed out", r.stderr) and r.elapsed < 10,
          "mpi hang: no line naming the rank and its stage: " + r.stderr)


def case_mpi_device():
    """The MPI transport's NCCL mode (PIPERT_FAKE_DEVICE=1: the fake device with NCCL's
    send/receive groups over MPI, synchronous sends): sets in device memory, moved by the
    device's sends and receives in groups queued on a stream of their own, ordered against
    the stage's work by the hand-over's events (the host does not wait for transfers);
    the same bits as the host pipeline, every boundary's tensors sent and received once
    per micro-batch; PIPERT_SYNC_SETS=1 completes every group and part before going on,
    PIPERT_HOST_SETS=1 goes through host memory; with the device's event waits dropped the
    outputs change (the control); a failing, dying or hanging stage stops every rank."""
    name = "rt_fake_s4_mpi"
    fake = dict(MPI_ENV, PIPERT_FAKE_DEVICE="1")
    ref = run_pipeline("rt_fake_s1", 64)
    _, _, xp, sp = make_inputs(64)
    for m in ("1", "4", "32"):
        for how, extra in (("queued", {}), ("synchronous", {"PIPERT_SYNC_SETS": "1"}),
                           ("host sets", {"PIPERT_HOST_SETS": "1"})):
            env = dict(fake, FAKE_DEV_STATS="1", **extra)
            out = os.path.join(A.work, "o_%s_%s" % (m, how.replace(" ", "_")))
            r = run(mpirun(4) + [exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out,
                                 "--weights-dir", weights_dir(name), "--microbatches", m], env)
            check(r.returncode == 0, "%s M=%s %s: %s" % (name, m, how, r.stderr))
            same_bits(ref, {n: np.load(os.path.join(out, n + ".npy")) for n in ref}, "%s M=%s %s" % (name, m, how))
            comm = re.findall(r"^fake nccl: rank (\d): (\d+) sends, (\d+) receives, (\d+) groups, (\d+) queued ahead$",
                              r.stderr, re.M)
            note = "stages exchange tensors through host memory" in r.stderr
            if how == "host sets":
                check(not comm, "PIPERT_HOST_SETS=1: NCCL used: " + r.stderr)
                continue
            check(not note, "NCCL mode declined: " + r.stderr)
            check(sorted(int(c[0]) for c in comm) == [0, 1, 2, 3], "fake nccl statistics: " + r.stderr)
            sends, recvs = sum(int(c[1]) for c in comm), sum(int(c[2]) for c in comm)
            check(sends == recvs == 3 * 32, "%s M=%s: %d sends, %d receives, expected 96 each (3 boundaries x 32 "
                  "micro-batches)" % (name, m, sends, recvs))
            ahead, groups = sum(int(c[4]) for c in comm), sum(int(c[3]) for c in comm)
            ahead_parts = dev_stats(r.stderr)[0]
            if how == "queued":
                # most groups (each waits up to 300 us on the fake stream first) are still
                # running when their end returns, and so are most parts
                check(ahead * 2 >= groups and ahead_parts >= 32, "%s M=%s: %d of %d groups and %d parts queued "
                      "ahead: the transfers did not run on the device's streams" % (name, m, ahead, groups,
                                                                                    ahead_parts))
                print("M=%s: %d of %d NCCL groups and %d parts queued ahead, the host pipeline's bits" %
                      (m, ahead, groups, ahead_parts))
            else:
                check(ahead == 0 and ahead_parts == 0, "%s M=%s PIPERT_SYNC_SETS=1: %d groups, %d parts queued ahead"
                      % (name, m, ahead, ahead_parts))
    # the receive of the next micro-batch queued ahead of a stage's work (inference,
    # rt_program_ahead): the middle stages' transfers run beside their parts; in the
    # plan's order (PIPERT_RECV_AHEAD=0) a middle stage's group waits for its part's
    # output and its next part for the group, so none does. The same bits either way.
    beside = {}
    for ahead in ("1", "0"):
        out = os.path.join(A.work, "o_ahead_%s" % ahead)
        r = run(mpirun(4) + [exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out,
                             "--weights-dir", weights_dir(name), "--microbatches", "32"],
                dict(fake, FAKE_DEV_STATS="1", PIPERT_RECV_AHEAD=ahead))
        check(r.returncode == 0, "%s PIPERT_RECV_AHEAD=%s: %s" % (name, ahead, r.stderr))
        same_bits(ref, {n: np.load(os.path.join(out, n + ".npy")) for n in ref}, "PIPERT_RECV_AHEAD=" + ahead)
        b = beside_transfers(r.stderr)
        check(sorted(b) == [0, 1, 2, 3], "fake device statistics: " + r.stderr)
        beside[ahead] = b[1] + b[2]
    print("M=32: middle stages' parts beside a transfer: %d of 64 with the receive ahead, %d in the plan's order" %
          (beside["1"], beside["0"]))
    check(beside["1"] >= 16 and beside["0"] < beside["1"], "receives ahead: %d parts of the middle stages beside a "
          "transfer, %d without" % (beside["1"], beside["0"]))
    # the control: without the device's event waits, sends read sets before the forward
    # has written them (and receives overwrite sets still read): the outputs change
    broken = 0
    for i in range(3):
        out = os.path.join(A.work, "o_no_wait_%d" % i)
        r = run(mpirun(4) + [exe(name), "--input", "x=" + xp, "--input", "s=" + sp, "--output", out,
                             "--weights-dir", weights_dir(name), "--microbatches", "32"], dict(fake, FAKE_NO_WAIT="1"))
        check(r.returncode == 0, "%s FAKE_NO_WAIT=1: %s" % (name, r.stderr))
        got = {n: np.load(os.path.join(out, n + ".npy")) for n in ref}
        broken += any(got[n].tobytes() != ref[n].tobytes() for n in ref)
        if broken:
            break
    check(broken, "NCCL mode without the event waits: the outputs stayed right in 3 runs: the test cannot see a "
          "broken order")
    r = misbehave("fail", name, 2, prefix=mpirun(4), env=fake)
    # queued work fails at a later call: the forward of a later micro-batch, or the round's end
    check(r.returncode != 0 and re.search(r"^pipeline: stage 2: (forward failed|work queued on its device failed)",
                                          r.stderr, re.M) and r.elapsed < 10, "NCCL mode, a stage fails: " + r.stderr)
    for stage in (1, 3):
        r = misbehave("die", name, stage, prefix=mpirun(4), env=fake)
        check(r.returncode != 0 and r.elapsed < 10, "NCCL mode, stage %d dies: exit %d after %.1f s" %
              (stage, r.returncode, r.elapsed))
    r = misbehave("none", name, 2, prefix=mpirun(4), env=dict(fake, FAKE_DEV_MEM="300"))
    check(r.returncode != 0 and re.search(r"^pipeline: stage \d on the fake device: out of memory", r.stderr, re.M)
          and r.elapsed < 10, "NCCL mode, out of device memory: " + r.stderr)
    r = misbehave("hang", name, 2, ["--timeout", "2"], prefix=mpirun(4), env=fake)
    check(r.returncode != 0 and re.search(r"rank \d \(stage \d\): timed out", r.stderr) and r.elapsed < 10,
          "NCCL mode, a stage hangs: " + r.stderr)
    # no --timeout: the NCCL waits' own timeout (PIPECC_NCCL_TIMEOUT) stops a neighbour of
    # the hanging stage, with transfers queued on the device or completed in each call
    for how, extra in (("queued", {}), ("synchronous", {"PIPERT_SYNC_SETS": "1"})):
        r = misbehave("hang", name, 2, prefix=mpirun(4), env=dict(fake, PIPECC_NCCL_TIMEOUT="2", **extra))
        check(r.returncode != 0 and r.elapsed < 15 and
              re.search(r"^pipeline: stage [13] on the fake device: NCCL send/receive: timed out after 2 s", r.stderr,
                        re.M), "NCCL mode (%s), a stage hangs, NCCL timeout 2 s: exit %d after %.1f s: %s" %
              (how, r.returncode, r.elapsed, r.stderr))


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpirun", default="")
    A = ap.parse_args()
    shutil.rmtree(A.work, ignore_errors=True)
    os.makedirs(A.work)
    fn = globals().get("case_" + A.case)
    if not fn:
        fail("unknown case " + A.case)
    fn()
    print("ok: " + A.case)


if __name__ == "__main__":
    main()
