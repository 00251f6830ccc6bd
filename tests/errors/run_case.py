#!/usr/bin/python3
"""Run pipecc on one case of the error corpus and check the outcome (tests only).

    run_case.py --pipecc build/pipecc --corpus DIR CASE      # one case (what ctest runs)
    run_case.py --pipecc build/pipecc --corpus DIR --all     # every case, as a table

For every case: pipecc must exit with the expected status within the case's time bound
and must not crash (a signal, a sanitizer report or an exit status other than 0 and 2
is a failure). For error cases also: every stderr line starts with the model's path and
': ', the message matches the case's regular expression, quotes the node name when the
case has one, and is exactly one line (for single-problem cases) of at most 400
characters. The wall time is printed. pipecc runs with --emit=ir, or, when the case's
args hold --plan-only, with -o and a fresh temporary folder. Uses only the standard library.
"""

import argparse
import json
import os
import re
import subprocess
import tempfile
import sys
import time

MAX_LINE = 400


def run_one(pipecc, corpus, name, c, verbose=True):
    """Returns (ok, summary line, details)."""
    model = os.path.join(corpus, c["model"])
    cmd = [pipecc, model, "--emit=ir"] + c["args"]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pipecc-errors-") as out:
        if "--plan-only" in c["args"]:  # plans (and splits the batch), into a folder of its own
            cmd = [pipecc, model, "-o", out] + c["args"]
        try:
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               timeout=max(60.0, 3 * c["max_s"]))
        except subprocess.TimeoutExpired:
            return False, "%-32s FAIL  hang (killed after %.0f s)" % (name, max(60.0, 3 * c["max_s"])), \
                "  command: " + " ".join(cmd) + "\n"
    dt = time.monotonic() - t0
    err = p.stderr.decode("utf-8", "replace")
    lines = err.splitlines()
    problems = []
    if p.returncode < 0:
        problems.append("killed by signal %d (crash)" % -p.returncode)
    elif p.returncode != c["status"]:
        problems.append("exit status %d, expected %d" % (p.returncode, c["status"]))
    if "Sanitizer" in err or "runtime error:" in err or "internal error" in err:
        problems.append("sanitizer report or internal error")
    if dt > c["max_s"]:
        problems.append("took %.2f s, bound %.1f s" % (dt, c["max_s"]))
    if c["status"] == 2:
        if not lines:
            problems.append("no message on stderr")
        for ln in lines:
            if not ln.startswith(model + ": "):
                problems.append("line does not start with the file name: %r" % ln[:200])
                break
            if len(ln) > MAX_LINE:
                problems.append("line of %d characters (at most %d)" % (len(ln), MAX_LINE))
                break
        if c["one_line"] and len(lines) != 1:
            problems.append("%d lines on stderr, expected exactly 1" % len(lines))
        if c["expect"] and not re.search(c["expect"], err, re.I):
            problems.append("message does not match /%s/" % c["expect"])
        if c["node"] and ("'%s'" % c["node"]) not in err:
            problems.append("message does not name node '%s'" % c["node"])
    else:
        # a plan prints its summary; the model's own lines must be warnings or notes
        own = [ln for ln in lines if ln.startswith(model + ": ")] if "--plan-only" in c["args"] else lines
        if any(ln.strip() and not ln.startswith((model + ": warning:", model + ": note:")) for ln in own):
            problems.append("unexpected stderr")
        if c["expect"] and not re.search(c["expect"], err, re.I):
            problems.append("stderr does not match /%s/" % c["expect"])
    first = lines[0] if lines else ""
    if len(first) > 160:
        first = first[:157] + "..."
    summary = "%-32s %s  rc=%d  %6.3f s  %s" % (name, "ok  " if not problems else "FAIL", p.returncode, dt, first)
    details = ""
    if problems:
        details = "  problems: " + "; ".join(problems) + "\n  command: " + " ".join(cmd) + "\n  stderr:\n" + \
            "".join("    " + ln[:300] + "\n" for ln in lines[:20])
        if c.get("pending"):
            details += "  (this check depends on: %s)\n" % c["pending"]
    return not problems, summary, details


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("case", nargs="*")
    a = ap.parse_args()
    with open(os.path.join(a.corpus, "manifest.json")) as f:
        manifest = json.load(f)
    names = sorted(manifest) if a.all else a.case
    if not names:
        ap.error("give a case name or --all")
    failed = 0
    for n in names:
        if n not in manifest:
            print("%s: no such case in %s (regenerate the corpus)" % (n, a.corpus))
            failed += 1
            continue
        good, summary, details = run_one(a.pipecc, a.corpus, n, manifest[n])
        print(summary)
        if details:
            print(details, end="")
        failed += not good
    if a.all:
        print("%d/%d cases ok" % (len(names) - failed, len(names)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
