#!/usr/bin/env python3
"""tools/compare.py - compare two .npz files output by output (relative L2 error).

    compare.py GOT.npz EXPECTED.npz [--rtol-l2 1e-4] [--bitwise]

Exit 0 when every array of EXPECTED is in GOT with the same shape and dtype and
rel-L2 = ||got - exp|| / max(||exp||, tiny) <= --rtol-l2 (or bitwise equal with --bitwise)."""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("got")
    ap.add_argument("expected")
    ap.add_argument("--rtol-l2", type=float, default=1e-4)
    ap.add_argument("--bitwise", action="store_true")
    a = ap.parse_args()
    got, exp = np.load(a.got), np.load(a.expected)
    ok = True
    for k in exp.files:
        if k not in got.files:
            print(f"compare: {k}: missing from {a.got}")
            ok = False
            continue
        g, e = got[k], exp[k]
        if g.shape != e.shape or g.dtype != e.dtype:
            print(f"compare: {k}: got {g.dtype}{list(g.shape)}, expected {e.dtype}{list(e.shape)}")
            ok = False
            continue
        if a.bitwise:
            same = g.tobytes() == e.tobytes()
            print(f"compare: {k}: {'bitwise equal' if same else 'NOT bitwise equal'}")
            ok &= same
            continue
        gf, ef = g.astype(np.float64), e.astype(np.float64)
        if not np.all(np.isfinite(gf) == np.isfinite(ef)):
            print(f"compare: {k}: non-finite values differ")
            ok = False
            continue
        m = np.isfinite(ef)
        err = np.linalg.norm((gf - ef)[m]) / max(np.linalg.norm(ef[m]), 1e-30)
        good = err <= a.rtol_l2
        print(f"compare: {k}: rel-L2 {err:.3e} ({'ok' if good else 'FAIL'}, limit {a.rtol_l2:g}), "
              f"max abs diff {np.max(np.abs(gf - ef)) if gf.size else 0:.3e}")
        ok &= bool(good)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
