#!/usr/bin/python3
"""Measured costs by default (tools/pipecc_costs.h), on smallcnn, cpu target, g = 2,
--plan-only, with a fresh $XDG_CACHE_HOME and PIPECC_COSTS unset:
  - the first compile profiles (one line says so, then "costs: measured ... profiled in"),
    writes one profile into $XDG_CACHE_HOME/pipecc/profiles and leaves no profiling folder
    in the output directory nor a temporary file in the cache;
  - the same command again is a hit: no profiling, the cached file named, unchanged;
  - the plan is the one --profile CACHED_FILE makes (the stages' times are the profile's);
  - every part of the key misses when changed: the micro-batch shape, --no-fuse,
    --winograd 0, the model's weights, the machine ($OPENBLAS_CORETYPE);
  - --cost-model and PIPECC_COSTS=model plan on the cost model, profiling nothing;
  - an unwritable cache warns, still plans on measured costs, and leaves nothing behind.

    costs.py --pipecc build/pipecc --models DIR --work /tmp/w

Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

PROFILING = "pipecc: profiling the model"
FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    model = os.path.join(a.models, "smallcnn.onnx")
    cache = os.path.join(a.work, "cache")
    profiles = os.path.join(cache, "pipecc", "profiles")
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    for k in ("PIPECC_COSTS", "PIPECC_SPLIT", "OPENBLAS_CORETYPE"):
        env.pop(k, None)
    n_out = [0]

    def pipecc(*opts, shape="input:8x1x8x8", model=model, env=env):
        n_out[0] += 1
        out = os.path.join(a.work, f"o{n_out[0]}")
        cmd = [a.pipecc, model, "--shape", shape, "-g", "2", "--plan-only", "-o", out, *opts]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr}")
        return r, out, " ".join(opts) or "(default)"

    def cached():
        return sorted(os.listdir(profiles)) if os.path.isdir(profiles) else []

    def miss(what, r, before):
        after = cached()
        if PROFILING not in r.stderr or "profiled in" not in r.stderr or len(after) != len(before) + 1:
            fail(f"{what}: expected a miss (profiling, one more cached profile: {len(before)} -> {len(after)}):\n"
                 f"{r.stderr}")

    # first compile: a miss
    r, out, _ = pipecc()
    files = cached()
    miss("first compile", r, [])
    if os.path.exists(os.path.join(out, ".pipecc-profile")):
        fail("the profiling folder is left in the output directory")
    if not files or not all(f.endswith(".json") for f in files):
        fail(f"the cache holds {files}, expected one .json profile")
        return 1
    path = os.path.join(profiles, files[0])
    mtime = os.stat(path).st_mtime_ns
    plan1 = json.load(open(os.path.join(out, "plan.json")))

    # the same command: a hit
    r, out, _ = pipecc()
    if PROFILING in r.stderr or f"costs: measured on this machine (cached: {path})" not in r.stderr:
        fail(f"second compile: expected a hit naming {path}:\n{r.stderr}")
    if cached() != files or os.stat(path).st_mtime_ns != mtime:
        fail("a hit changed the cache")
    if json.load(open(os.path.join(out, "plan.json")))["stages"] != plan1["stages"]:
        fail("a hit planned differently from the compile that profiled")

    # the plan is the one the cached profile makes through --profile
    r, out, _ = pipecc("--profile", path)
    want = [(s["nodes"], s["replicas"], round(s["compute_ms"], 9)) for s in plan1["stages"]]
    got = [(s["nodes"], s["replicas"], round(s["compute_ms"], 9))
           for s in json.load(open(os.path.join(out, "plan.json")))["stages"]]
    if got != want or PROFILING in r.stderr:
        fail(f"--profile {path} plans {got}, the measured default {want}")

    # each part of the key
    changed = os.path.join(a.work, "changed.onnx")
    m = onnx.load(model)
    init = m.graph.initializer[0]
    w = numpy_helper.to_array(init).copy()
    w.flat[0] += 1.0
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    onnx.save(m, changed)
    for what, kw, opts in [
        ("micro-batch shape", {"shape": "input:16x1x8x8"}, ["-m", "8"]),
        ("--no-fuse", {}, ["--no-fuse"]),
        ("--winograd 0", {}, ["--winograd", "0"]),
        ("the model's weights", {"model": changed}, []),
        ("the machine (OPENBLAS_CORETYPE)", {"env": dict(env, OPENBLAS_CORETYPE="Haswell")}, []),
    ]:
        before = cached()
        r, _, _ = pipecc(*opts, **kw)
        miss(what, r, before)

    # the analytical path
    before = cached()
    for what, opts, e, line in [("--cost-model", ["--cost-model"], env, "costs: the cost model (--cost-model)"),
                                ("PIPECC_COSTS=model", [], dict(env, PIPECC_COSTS="model"),
                                 "costs: the cost model (PIPECC_COSTS=model)")]:
        r, _, _ = pipecc(*opts, env=e)
        if PROFILING in r.stderr or line not in r.stderr or cached() != before:
            fail(f"{what}: expected {line!r} and no profiling:\n{r.stderr}")

    # an unwritable cache: XDG_CACHE_HOME is a file
    blocker = os.path.join(a.work, "not_a_dir")
    open(blocker, "w").close()
    r, out, _ = pipecc(env=dict(env, XDG_CACHE_HOME=blocker))
    if "cannot write the profile cache" not in r.stderr or "costs: measured on this machine (profiled in" not in \
            r.stderr or os.path.exists(os.path.join(out, ".pipecc-profile")):
        fail(f"unwritable cache: expected a warning, measured costs, no folder left:\n{r.stderr}")
    leftovers = [f for f in os.listdir(profiles) if not f.endswith(".json")]
    if leftovers:
        fail(f"temporary files left in the cache: {leftovers}")
    print("ok" if not FAILS else f"FAILED ({len(FAILS)})")
    return 0 if not FAILS else 1


if __name__ == "__main__":
    sys.exit(main())
