#!/usr/bin/env python3
"""tools/quiet_run.py - run a benchmark command on a shared machine and say how much
else ran meanwhile: quiet_run.py [--wait S] [--idle F] -- CMD ...

First waits (at most --wait seconds, default 900) until all cores were at least --idle
(default 0.9) idle over 2 s. Then runs CMD, passes its output through, and prints
    others: X cores
the CPU time other processes used during the run (all cores' busy time from /proc/stat
minus CMD's own user+system time), divided by the run's wall time: 0 on a quiet
machine; 0.5 means another process took half a core on average. Exit status: CMD's."""
import argparse
import os
import subprocess
import sys
import time


def busy_idle():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle, idle


def idle_fraction(dt=2.0):
    b0, i0 = busy_idle()
    time.sleep(dt)
    b1, i1 = busy_idle()
    return (i1 - i0) / max(1, (b1 - b0) + (i1 - i0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait", type=float, default=900)
    ap.add_argument("--idle", type=float, default=0.9)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    t0 = time.time()
    while idle_fraction() < a.idle and time.time() - t0 < a.wait:
        pass
    hz = os.sysconf("SC_CLK_TCK")
    b0, _ = busy_idle()
    w0 = time.time()
    r0 = os.times()
    p = subprocess.run(cmd)
    r1 = os.times()
    w1 = time.time()
    b1, _ = busy_idle()
    own = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    others = max(0.0, (b1 - b0) / hz - own) / max(1e-9, w1 - w0)
    print(f"others: {others:.2f} cores")
    sys.stdout.flush()
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
