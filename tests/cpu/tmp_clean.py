#!/usr/bin/python3
"""pipecc leaves nothing in TMPDIR: after a build, and when it is killed while its compilers
run (a build step timed out by the caller). The compilers' output goes to temporary files
that are unlinked as soon as they are made (codegen/build.c), so no file of pipecc's is
ever visible there.

    tmp_clean.py --pipecc build/pipecc --model gpt.onnx --shape input_ids:2x64 --work DIR"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import pipecc_test as pt  # noqa: E402


def left(d, prefix=""):
    return sorted(f for f in os.listdir(d) if f.startswith(prefix))


def main():
    a = pt.model_args().parse_args()
    shutil.rmtree(a.work, ignore_errors=True)

    def build(out):
        return [a.pipecc, a.model, "-g", "2", "-j", "2", "-o", os.path.join(a.work, out)] + \
            [x for s in a.shape for x in ("--shape", s)]

    ok = True
    # 1. a whole build
    t1 = os.path.join(a.work, "tmp1")
    os.makedirs(t1)
    env = dict(os.environ, TMPDIR=t1)
    p = subprocess.run(build("b1"), env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print("FAIL build: exit %d: %s" % (p.returncode, p.stderr[-400:]))
        return 1
    rest = left(t1)
    print(("ok   " if not rest else "FAIL ") + "after a build, TMPDIR holds %s" % (rest or "nothing"))
    ok &= not rest
    # 2. killed while compiling (and nothing of pipecc's in /tmp either, in case TMPDIR were
    # not followed: with its files unlinked at once, none is ever there)
    before = set(left("/tmp", "pipecc-"))
    t2 = os.path.join(a.work, "tmp2")
    os.makedirs(t2)
    env = dict(os.environ, TMPDIR=t2)
    p = subprocess.Popen(build("b2"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = False
    for line in p.stderr:
        if "] cc stage_" in line:  # the compilers are running
            seen = True
            time.sleep(0.3)
            p.send_signal(signal.SIGKILL)
            break
    p.wait()
    p.stderr.close()
    if not seen:
        print("FAIL pipecc never started compiling (exit %d)" % p.returncode)
        return 1
    mine = left(t2, "pipecc-") + sorted(set(left("/tmp", "pipecc-")) - before)
    print(("ok   " if not mine else "FAIL ") + "pipecc killed while compiling: its files left in TMPDIR or /tmp: %s" % (mine or "none"))
    ok &= not mine
    # the orphaned compilers finish on their own; wait for them so the test leaves no processes
    deadline = time.time() + 120
    while left(t2) and time.time() < deadline:
        time.sleep(0.2)
    rest = left(t2)
    print(("ok   " if not rest else "FAIL ") + "once its compilers ended, TMPDIR holds %s" % (rest or "nothing"))
    ok &= not rest
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
