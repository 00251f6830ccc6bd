#!/usr/bin/python3
"""pipecc --calibrate and device files (tools/pipecc_calibrate.h), --plan-only on a chain
of MatMul+Relu and Conv layers built here:
  - --calibrate=FILE runs the micro-benchmark and writes a well-formed device file (every
    rate of the cpu target's kernels above 0), its path on stdout;
  - the cost model then uses it: PIPECC_DEVICE_FILE=FILE, or $XDG_CONFIG_HOME/pipecc/
    device.json found by itself, and the line above the plan table names the file; a
    file whose rates are all twice as fast halves the predicted stage times;
  - PIPECC_DEVICE_FILE=none ignores the XDG file (the tests' environment);
  - --device FILE.json plans for the device in the file; the shipped files of the
    built-in devices (tools/devices/*.json) are --print-device's and plan as their names;
  - a bad device file stops the compile with exit status 2 and one line naming it.

    calibrate.py --pipecc build/pipecc --work /tmp/w --devices tools/devices

Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)


def model(path):
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(3):
        inits.append(numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), f"c{i}"))
        nodes.append(helper.make_node("Conv", [x, f"c{i}"], [f"v{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"v{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    nodes.append(helper.make_node("Flatten", [x], ["f"], name="flat"))
    x = "f"
    k = 16 * 32 * 32
    for i in range(3):
        inits.append(numpy_helper.from_array(rng.standard_normal((k, 256)).astype(np.float32) * 0.01, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"y{i}"], name=f"relu_m{i}"))
        x, k = f"y{i}", 256
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, 32, 32])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 256])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def plan(a, onnx_path, out, env, extra=()):
    cmd = [a.pipecc, onnx_path, "--shape", "x:8x16x32x32", "-g", "2", "-m", "8", "--no-replicate", "--plan-only",
           "-o", out] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    costs = [l for l in r.stderr.splitlines() if l.startswith("pipecc: costs:")]
    p = None
    if r.returncode == 0:  # what the costs decide (plan.json also holds the planner's own time)
        with open(os.path.join(out, "plan.json")) as f:
            j = json.load(f)
        p = {"stages": [{k: s[k] for k in ("nodes", "compute_ms", "memory_bytes")} for s in j["stages"]],
             "mem_limit_bytes": j["mem_limit_bytes"], "predicted_iteration_ms": j["predicted_iteration_ms"]}
    return r, (costs[0] if costs else ""), p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--devices", required=True, help="the shipped device files (tools/devices)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    m = os.path.join(a.work, "chain.onnx")
    model(m)
    env = dict(os.environ)
    env.pop("PIPECC_SPLIT", None)
    env["PIPECC_COSTS"] = "model"
    xdg = os.path.join(a.work, "xdg")
    env["XDG_CONFIG_HOME"] = xdg
    env.pop("PIPECC_DEVICE_FILE", None)
    dev = os.path.join(a.work, "dev.json")
    if os.path.exists(dev):
        os.remove(dev)

    # --calibrate=FILE
    r = subprocess.run([a.pipecc, "--calibrate=" + dev, "-q"], capture_output=True, text=True, env=env,
                       timeout=120)
    check(r.returncode == 0 and r.stdout.strip() == dev, f"--calibrate=FILE exits 0 and prints the path ({r.stderr.strip()})")
    d = {}
    try:
        with open(dev) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"the device file is JSON ({e})")
    rates = ["gemm_gflops", "direct_gflops", "dw_gflops", "wino_gbps", "move_gbps", "mem_gbps", "ew_gelems"]
    check(d.get("pipecc_device") == 1 and d.get("name") == "cpu" and d.get("cpu_kernels") == 1,
          "the device file names the cpu device and its kernels")
    check(all(isinstance(d.get(k), (int, float)) and d[k] > 0 for k in rates) and d.get("launch_us", -1) >= 0,
          f"every rate above 0 ({ {k: d.get(k) for k in rates} })")
    check("--calibrate" in d.get("source", ""), "the file says where its figures come from")

    # no device file: the built-in cpu, no note
    out = os.path.join(a.work, "p")
    r, costs, p0 = plan(a, m, out, env)
    check(r.returncode == 0 and "device" not in costs, f"no device file: no note ({costs})")

    # PIPECC_DEVICE_FILE=FILE
    e1 = dict(env, PIPECC_DEVICE_FILE=dev)
    r, costs, p1 = plan(a, m, out, e1)
    check(r.returncode == 0 and costs.endswith(f"device cpu from {dev}"), f"PIPECC_DEVICE_FILE: the note names it ({costs})")

    # twice as fast everywhere: half the predicted time
    fast = dict(d)
    for k in rates:
        fast[k] = d[k] * 2
    fast["launch_us"] = d["launch_us"] / 2
    fdev = os.path.join(a.work, "fast.json")
    with open(fdev, "w") as f:
        json.dump(fast, f)
    r, costs, p2 = plan(a, m, out, dict(env, PIPECC_DEVICE_FILE=fdev))
    if p1 and p2:
        t1 = sum(s["compute_ms"] for s in p1["stages"])
        t2 = sum(s["compute_ms"] for s in p2["stages"])
        check(abs(t2 / t1 - 0.5) < 0.01, f"rates twice as fast: predicted {t2:.4f} ms against {t1:.4f} ms")
    else:
        check(False, "plans with the device files")

    # the XDG file, found by itself; PIPECC_DEVICE_FILE=none ignores it
    os.makedirs(os.path.join(xdg, "pipecc"), exist_ok=True)
    xfile = os.path.join(xdg, "pipecc", "device.json")
    with open(xfile, "w") as f:
        json.dump(fast, f)
    r, costs, p3 = plan(a, m, out, env)
    check(r.returncode == 0 and costs.endswith(f"device cpu from {xfile}"), f"the XDG device file is used ({costs})")
    r, costs, p4 = plan(a, m, out, dict(env, PIPECC_DEVICE_FILE="none"))
    check(r.returncode == 0 and "device" not in costs and p4 == p0,
          f"PIPECC_DEVICE_FILE=none: the built-in cpu device ({costs})")
    os.remove(xfile)

    # --device FILE.json, and the shipped files of the built-in devices
    r, costs, p5 = plan(a, m, out, env, ["--device", fdev])
    check(r.returncode == 0 and costs.endswith(f"device cpu from {fdev}") and p5 == p2, "--device FILE.json")
    for name in ["cpu", "h100", "h200", "a100"]:
        shipped = os.path.join(a.devices, name + ".json")
        pr = subprocess.run([a.pipecc, "--print-device", name], capture_output=True, text=True)
        with open(shipped) as f:
            check(pr.returncode == 0 and pr.stdout == f.read(), f"{shipped} is --print-device {name}")
        _, _, pn = plan(a, m, out, env, ["--device", name])
        _, _, pf = plan(a, m, out, env, ["--device", shipped])
        check(pn is not None and pn == pf, f"--device {shipped} plans as --device {name}")

    # a bad file: one line naming it, exit 2
    bad = os.path.join(a.work, "bad.json")
    with open(bad, "w") as f:
        json.dump(dict(d, dw_gflops="fast"), f)
    r, _, _ = plan(a, m, out, dict(env, PIPECC_DEVICE_FILE=bad))
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == 2 and len(lines) == 1 and bad in lines[0] and "dw_gflops" in lines[0],
          f"a bad device file: exit 2, one line ({r.returncode}: {r.stderr.strip()})")
    with open(bad, "w") as f:
        f.write("{\"nodes\": {}}")
    r, _, _ = plan(a, m, out, env, ["--device", bad])
    check(r.returncode == 2 and "not a pipecc device file" in r.stderr, f"not a device file: exit 2 ({r.stderr.strip()})")

    r = subprocess.run([a.pipecc, "--calibrate", m], capture_output=True, text=True, env=env)
    check(r.returncode == 2 and "takes no model" in r.stderr, f"--calibrate with a model: exit 2 ({r.stderr.strip()})")

    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
