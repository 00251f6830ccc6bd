#!/usr/bin/env python3
"""Two or more builds of one model side by side (tools only): the same input through each
build's `pipeline` on one core, then interleaved rounds of `pipeline --bench N`, and
each build's throughput against the first's, with whether their outputs are bitwise
the same.

    /usr/bin/python3 tools/ab_builds.py --input x.npz DIR_A DIR_B [DIR_C ...]
        [--rounds 6] [--bench 2] [--core 0]

Each DIR is a pipecc output directory (DIR/pipeline). A build of the same model with a
compile-time switch of the kernels' headers comes from rebuilding a copy with its own copy
of the kernels (PIPERT_KERNELS_INLINE), e.g.

    cp -r A B && make -C B -B pipeline CFLAGS="$(sed -n 's/^CFLAGS = //p' A/Makefile) -DPIPERT_KERNELS_INLINE -DPIPERT_GEMM_PACK512_M=100000"

Rounds alternate the order of the builds (A B C, then C B A, ...). Prints, per build,
the median samples/s over the rounds, the median of the per-round ratios to the first
build with their range, and `bitwise equal: True/False` (every output of the first run,
byte for byte). The input: an .npz of the model's inputs by name."""
import argparse
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, med, sh  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="pipecc output directories; the first is the reference")
    ap.add_argument("--input", required=True, help=".npz of the model's inputs")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--bench", type=int, default=2, help="batches per `pipeline --bench` run")
    ap.add_argument("--core", type=int, default=0)
    a = ap.parse_args()
    if len(a.dirs) < 2:
        ap.error("give at least two build directories")
    for d in a.dirs:
        if not os.access(os.path.join(d, "pipeline"), os.X_OK):
            sys.exit(f"ab_builds.py: {d}: no executable pipeline (build it first)")
    pin = ["taskset", "-c", str(a.core)]
    with tempfile.TemporaryDirectory() as tmp:
        outs = []
        for k, d in enumerate(a.dirs):
            o = os.path.join(tmp, f"out{k}.npz")
            r = sh(pin + [os.path.join(d, "pipeline"), "--input", a.input, "--output", o])
            if r.returncode:
                sys.exit(f"ab_builds.py: {d}/pipeline failed ({r.returncode}): {r.stderr.strip()[-300:]}")
            with np.load(o) as z:
                outs.append({n: z[n].tobytes() for n in z.files})
        tp = [[] for _ in a.dirs]
        for i in range(a.rounds):
            order = range(len(a.dirs)) if i % 2 == 0 else reversed(range(len(a.dirs)))
            for k in order:
                r = sh(pin + [os.path.join(a.dirs[k], "pipeline"), "--input", a.input, "--output",
                              os.path.join(tmp, "bench.npz"), "--bench", str(a.bench)])
                m = re.search(r"throughput: ([0-9.]+)", r.stdout)
                if r.returncode or not m:
                    sys.exit(f"ab_builds.py: {a.dirs[k]}/pipeline --bench failed: {(r.stderr or r.stdout)[-300:]}")
                tp[k].append(float(m.group(1)))
    print(f"# {cpu_model()}; core {a.core}; {a.rounds} interleaved rounds of --bench {a.bench}")
    for k, d in enumerate(a.dirs):
        ratios = [b / r for r, b in zip(tp[0], tp[k])]
        same = outs[k] == outs[0]
        print(f"{d}: {med(tp[k]):.2f} samples/s, ratio to {a.dirs[0]} {med(ratios):.3f} "
              f"({min(ratios):.3f}..{max(ratios):.3f}), bitwise equal: {same}")


if __name__ == "__main__":
    main()
