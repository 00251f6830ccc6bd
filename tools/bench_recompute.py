#!/usr/bin/env python3
"""tools/bench_recompute.py - what re-materialisation (`pipecc --train --recompute`, and
`--recompute=selective`) saves and costs on a training model: the same model built three
times (without, with --recompute=selective and with --recompute, PIPECC_SPLIT=even so all
have the same G stages), then

  1. `pipeline train --steps 3` of each on the same data: the trained weights and the
     gradients (--save, --save-grads) compared byte for byte;
  2. each stage's peak of held activation sets (the runtime's `memory:` line) and the
     stages' arenas (the stage sources' headers);
  3. ROUNDS interleaved rounds of `pipeline train --steps STEPS` on cores 0..G-1 (the
     order rotated every round): samples/s from the runs' logs (the last step's line),
     and the median ratios with / without.

  /usr/bin/python3 tools/bench_recompute.py [--model NAME] [-g G] [-m M] [--batch-repeat R]
                                            [--steps S] [--rounds N] [--work DIR]
                                            [--memory-limit BYTES [--schedule S]]

With --memory-limit, the planner splits every build (one device a stage, so the bits
still agree across splits) under that limit, and --recompute=auto is a fourth build;
a mode whose plan does not fit is reported and left out.

NAME is one of tests/train/train_check.py's cases (gpt, resnet18_train_f32,
resnet18_train, mobilenet_v2_train, tiny_transformer, convnet, ...); its batch is
repeated R times (default 1). Prints figures; not a test (ctest -R
train.runtime.recompute is). Exit 1 when the bits differ."""
import argparse
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import train_check as tc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt")
    ap.add_argument("-g", type=int, default=1)
    ap.add_argument("-m", type=int, default=2)
    ap.add_argument("--batch-repeat", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--work", default="out/bench_recompute")
    ap.add_argument("--memory-limit", default=None)
    ap.add_argument("--schedule", default="1f1b")
    ap.add_argument("--pipecc", default=os.path.join(ROOT, "build", "pipecc"))
    a = ap.parse_args()
    work = os.path.abspath(os.path.join(a.work, a.model))
    os.makedirs(work, exist_ok=True)
    _, path, inputs, y, loss, opt, _ = tc.make_case(a.model, None, work)
    (iname, x), = inputs.items()
    x = np.concatenate([x] * a.batch_repeat)
    y = np.concatenate([y] * a.batch_repeat)
    np.save(os.path.join(work, "X.npy"), x)
    np.save(os.path.join(work, "Y.npy"), y)
    data = ["--data", os.path.join(work, "X.npy"), "--labels", os.path.join(work, "Y.npy"), "--no-shuffle"]
    shape = iname + ":" + "x".join(map(str, x.shape))
    MODES = ("", "selective", "full") + (("auto",) if a.memory_limit else ())
    name = lambda rc: "--recompute=" + rc if rc else "without"  # noqa: E731
    dirs = {rc: os.path.join(work, "recompute-" + rc if rc else "plain") for rc in MODES}
    env = dict(os.environ) if a.memory_limit else dict(os.environ, PIPECC_SPLIT="even")
    extra = ["--memory-limit", a.memory_limit, "--no-replicate", "--schedule", a.schedule] if a.memory_limit else []
    fits = []
    for rc, d in dirs.items():
        cmd = [a.pipecc, path, "-o", d, "--shape", shape, "-g", str(a.g), "-m", str(a.m)] + \
            tc.pipecc_args(loss, opt, "--train") + (["--recompute=" + rc] if rc else []) + extra
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode and a.memory_limit and "does not fit" in r.stderr:
            print("  %-23s no plan fits in %s bytes a device" % (name(rc) + ":",
                                                               a.memory_limit))
            continue
        if r.returncode:
            sys.exit("bench_recompute: pipecc failed:\n" + r.stderr[-3000:])
        fits.append(rc)
        if a.memory_limit:
            table = [ln for ln in r.stderr.splitlines() if re.match(r"\s+\d+\s+\d+\.\.", ln)]
            print("  %-23s planned stages: %s" % (name(rc) + ":", "; ".join(
                "%s nodes, %s %s%s" % (t[3], t[6], t[7], ", " + t[8] if rc else "") for t in map(str.split, table))))
    MODES = tuple(fits)
    if not MODES:
        sys.exit("bench_recompute: nothing fits; raise --memory-limit")
    ref = MODES[0]  # the bits and the samples/s are compared with the first build that fits
    print("%s, batch %d, %d stages, %d micro-batches%s" % (a.model, x.shape[0], a.g, a.m,
                                                         ", under --memory-limit " + a.memory_limit if a.memory_limit else ""))
    saved = {}
    for rc in MODES:
        d = dirs[rc]
        r = subprocess.run([os.path.join(d, "pipeline"), "train", "--steps", "3", "--save", os.path.join(d, "w.npz"),
                            "--save-grads", os.path.join(d, "g.npz")] + data, capture_output=True, text=True)
        if r.returncode:
            sys.exit("bench_recompute: pipeline train failed:\n" + r.stdout[-2000:] + r.stderr[-2000:])
        mem = [ln for ln in r.stdout.splitlines() if ln.startswith("memory:")]
        arenas = []
        for f in sorted(os.listdir(d), key=lambda f: int(re.sub(r"\D", "", f) or 0)):
            if re.match(r"stage_\d+\.c$", f):
                m = re.search(r"arena (\d+) bytes", open(os.path.join(d, f)).read(4096))
                b = int(m.group(1)) if m else -1
                arenas.append("?" if b < 0 else "%.1f MB" % (b / 1e6) if b >= 1e6 else "%.1f KB" % (b / 1e3))
        print("  %-23s %s; arenas %s" % (name(rc) + ":",
                                         mem[0] if mem else "(no memory line)", ", ".join(arenas)))
        saved[rc] = [dict(np.load(os.path.join(d, f))) for f in ("w.npz", "g.npz")]
    same = all(sorted(saved[ref][i]) == sorted(saved[rc][i]) and
               all(saved[ref][i][k].tobytes() == saved[rc][i][k].tobytes() for k in saved[ref][i])
               for i in (0, 1) for rc in MODES[1:])
    print("  weights and gradients after 3 steps: %s" % ("bitwise equal in all %d builds" % len(MODES) if same
                                                         else "DIFFER"))
    # each run on cores 0..G-1 (as the figures in the README were taken)
    pin = ["taskset", "-c", ",".join(str(i) for i in range(min(a.g, os.cpu_count() or 1)))] \
        if subprocess.run(["which", "taskset"], capture_output=True).returncode == 0 else []
    sps = {rc: [] for rc in MODES}
    for k in range(a.rounds):
        for rc in MODES[k % len(MODES):] + MODES[:k % len(MODES)]:
            log = os.path.join(dirs[rc], "bench.csv")
            r = subprocess.run(pin + [os.path.join(dirs[rc], "pipeline"), "train", "--steps", str(a.steps), "--quiet",
                                "--log", log] + data, capture_output=True, text=True)
            if r.returncode:
                sys.exit("bench_recompute: pipeline train failed:\n" + r.stderr[-2000:])
            sps[rc].append(float(open(log).read().splitlines()[-1].split(",")[-1]))
    for rc in MODES:
        print("  samples/s %-23s %s" % (name(rc) + ":", ", ".join("%.2f" % v for v in sps[rc])))
    for rc in MODES[1:]:
        print("  %s / %s: median %.3fx" % (name(rc), name(ref), np.median(sps[rc]) / np.median(sps[ref])))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
