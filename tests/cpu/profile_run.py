#!/usr/bin/python3
"""cpu target, --profile-run: build the one-stage profiler of MODEL, run it, check that
its JSON times every node of the compiled graph (positive fwd_ms, the total consistent)
and names the micro-batch it timed, and that the planner takes it without falling back
to the cost model for any node, its times scaled to the plan's micro-batches.

    profile_run.py --pipecc build/pipecc --model resnet18.onnx --shape input:2x3x224x224 \\
                   --work /tmp/w [-g 2]

Exit status 0 when every check passes, 1 otherwise.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import pipecc_test as pt  # noqa: E402


def main():
    ap = pt.model_args()
    ap.add_argument("-g", type=int, default=2)
    a = ap.parse_args()
    name, work = pt.model_work(a)
    shapes = [x for s in a.shape for x in ("--shape", s)]
    prof_dir, js = os.path.join(work, "prof"), os.path.join(work, "profile.json")
    env = dict(os.environ)
    env.pop("PIPECC_SPLIT", None)
    r = subprocess.run([a.pipecc, a.model, *shapes, "--target", "cpu", "--profile-run", "-j", "2", "-o", prof_dir],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0 or not os.access(os.path.join(prof_dir, "profile"), os.X_OK):
        print(f"FAIL: pipecc --profile-run exited {r.returncode}:\n{r.stderr}")
        return 1
    r = subprocess.run([os.path.join(prof_dir, "profile"), "--warmup", "1", "--reps", "3", "--profile-out", js, "-v"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL: profile exited {r.returncode}:\n{r.stderr}")
        return 1
    prof = json.load(open(js))
    # the nodes of the compiled graph: the IR after the cpu passes, as plan.json names them
    plan = json.load(open(os.path.join(prof_dir, "plan.json")))
    names = [n for st in plan.get("stages", []) for n in st.get("nodes", [])]
    nodes = prof.get("nodes", {})
    ok = True
    missing = [n for n in names if n and n not in nodes]
    if not names or missing:
        print(f"FAIL: {len(missing)} of {len(names)} planned nodes not in the profile: {missing[:5]}")
        ok = False
    bad = [k for k, v in nodes.items() if not (isinstance(v.get("fwd_ms"), (int, float)) and v["fwd_ms"] >= 0)]
    if bad:
        print(f"FAIL: bad fwd_ms for {bad[:5]}")
        ok = False
    total = sum(v["fwd_ms"] for v in nodes.values())
    if not (total > 0 and abs(total - prof.get("total_ms", -1)) <= 1e-3 * total + 1e-3):
        print(f"FAIL: node times sum to {total}, total_ms {prof.get('total_ms')}")
        ok = False
    r = subprocess.run([a.pipecc, a.model, *shapes, "-g", str(a.g), "--no-replicate", "--profile", js, "--plan-only",
                        "-o", os.path.join(work, "plan")], capture_output=True, text=True, env=env)
    if r.returncode != 0 or "not in the profile" in r.stderr:
        print(f"FAIL: planning with the profile (exit {r.returncode}):\n{r.stderr}")
        ok = False
    # the profile says the micro-batch it timed; the plan's micro-batches hold batch / M
    # samples, so its stages' times add up to the profile's total / M, with a note
    batch = prof.get("batch")
    if not (isinstance(batch, int) and batch >= 1):
        print(f"FAIL: the profile's batch {batch!r}, expected the micro-batch it timed")
        ok = False
    elif r.returncode == 0:
        plan = json.load(open(os.path.join(work, "plan", "plan.json")))
        m = plan["microbatches"]
        staged = sum(st["compute_ms"] for st in plan["stages"])
        noted = "its times are scaled by" in r.stderr
        if abs(staged - total / m) > 1e-4 * total or noted != (m > 1):
            print(f"FAIL: {m} micro-batches of a batch of {batch}: the stages' times add up to {staged:.4f} ms, "
                  f"expected {total / m:.4f} (the profile's {total:.4f} / {m}); scaling note {'' if noted else 'not '}"
                  f"printed:\n{r.stderr}")
            ok = False
    print(f"{name}: {len(nodes)} nodes profiled, {total:.3f} ms per micro-batch: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
