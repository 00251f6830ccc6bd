#!/usr/bin/python3
"""Where a model's time goes on the cpu target, node by node, against onnxruntime's own
per-node profile (tools only).

    /usr/bin/python3 tools/profile_vs_ort.py MODEL.onnx [-d batch=8] [--pipecc build/pipecc]
        [--reps 5] [--top 25] [--work DIR] [--json FILE]

pipecc: `pipecc MODEL --target cpu -g 1 --profile-run`, then `DIR/profile --reps N`, which
times every unit on one thread (the median of N runs; a fused unit's time split evenly
over its nodes). onnxruntime: one intra-op thread, all graph optimisations, profiling on,
the median of N runs per kernel. Both on core 0 (taskset), one after the other.

The two runtimes fuse differently (onnxruntime folds a BatchNormalization, an activation
or an Add into its Conv, and pipecc a 1x1 Conv into the depthwise Conv after it), so the
nodes of the model are grouped as onnxruntime's kernels cover them, and both sides' times
are summed per group, named after its first Conv, Gemm or MatMul (its anchor). onnxruntime's layout changes (ReorderInput/ReorderOutput of its NCHWc path) have
no node of the model: they are listed apart.

Prints the anchors sorted by how much longer pipecc takes, each with its op, output
shape, both times and their ratio, then the totals per op type. Needs onnx, onnxruntime
and numpy (Debian's python3 with tools/requirements.txt).
"""

import argparse
import collections
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, med, sh  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIN = ["taskset", "-c", "0"]


def ort_profile(model, dims, reps, work):
    """{kernel name: median ms} of onnxruntime's profile, one thread"""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(work, "ort_profile")
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    types = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}
    for i in s.get_inputs():
        shape = [dims.get(d, 1) if isinstance(d, str) or d is None else d for d in i.shape]
        t = types.get(i.type)
        if t is None:
            sys.exit(f"profile_vs_ort.py: input {i.name} has type {i.type}, which this script does not feed")
        feeds[i.name] = (rng.standard_normal(shape).astype(t) if t == np.float32 else
                         rng.integers(0, 2, shape).astype(t))
    for _ in range(reps + 1):
        s.run(None, feeds)
    path = s.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.unlink(path)
    per = collections.defaultdict(list)
    ops = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        name = e["name"][: -len("_kernel_time")]
        per[name].append(e["dur"] / 1e3)
        ops[name] = e.get("args", {}).get("op_name", "?")
    # the first run is the warm-up
    return {k: med(v[1:] if len(v) > 1 else v) for k, v in per.items()}, ops


def pipecc_profile(pipecc, model, dim_args, reps, work):
    """{node name: ms} of DIR/profile"""
    d = os.path.join(work, "pipecc")
    r = sh([pipecc, model, *dim_args, "--target", "cpu", "-g", "1", "-m", "1", "--profile-run", "-o", d])
    if r.returncode:
        sys.exit(f"profile_vs_ort.py: pipecc exited {r.returncode}:\n{r.stderr[-2000:]}")
    out = os.path.join(work, "pipecc_profile.json")
    r = sh(PIN + [os.path.join(d, "profile"), "--reps", str(reps), "--profile-out", out])
    if r.returncode:
        sys.exit(f"profile_vs_ort.py: {d}/profile exited {r.returncode}:\n{r.stderr[-2000:]}")
    with open(out) as f:
        return {k: v["fwd_ms"] for k, v in json.load(f)["nodes"].items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-d", "--dim", action="append", default=[], metavar="NAME=N",
                    help="a symbolic input dimension's value, as pipecc's -d (default 1)")
    ap.add_argument("--pipecc", default=os.path.join(ROOT, "build", "pipecc"))
    ap.add_argument("--reps", type=int, default=5, help="timed runs per side (default 5)")
    ap.add_argument("--top", type=int, default=25, help="anchors listed (default 25; 0: all)")
    ap.add_argument("--work", help="scratch folder (default: a temporary one)")
    ap.add_argument("--json", help="also write every anchor's figures to this file")
    a = ap.parse_args()
    import onnx

    dims = {}
    for d in a.dim:
        m = re.fullmatch(r"([^=]+)=([0-9]+)", d)
        if not m:
            sys.exit(f"profile_vs_ort.py: -d {d}: expected NAME=N")
        dims[m.group(1)] = int(m.group(2))
    dim_args = [x for d in a.dim for x in ("-d", d)]
    tmp = None
    if not a.work:
        tmp = tempfile.TemporaryDirectory(prefix="profile_vs_ort.")
        a.work = tmp.name
    os.makedirs(a.work, exist_ok=True)

    # onnxruntime's profile first (in this process, on core 0), then pipecc's (its build on
    # every core, its profile on core 0)
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else None
    if cores is not None:
        os.sched_setaffinity(0, {0})
    ort_ms, ort_ops = ort_profile(a.model, dims, a.reps, a.work)
    if cores is not None:
        os.sched_setaffinity(0, cores)
    pc_ms = pipecc_profile(a.pipecc, a.model, dim_args, a.reps, a.work)

    g = onnx.shape_inference.infer_shapes(onnx.load(a.model, load_external_data=False)).graph
    shapes = {}
    for v in list(g.value_info) + list(g.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            shapes[v.name] = "x".join(str(x.dim_value) if x.HasField("dim_value") else (x.dim_param or "?")
                                      for x in t.shape.dim)
    producer = {}
    nodes = {n.name: n for n in g.node}
    if len(nodes) < len(g.node):
        print("profile_vs_ort.py: warning: the model has unnamed or repeated node names; their times are not "
              "matched (PyTorch's exporter names every node)", file=sys.stderr)
    for n in g.node:
        for o in n.output:
            producer[o] = n.name
    # Each onnxruntime kernel ends at a node of the model: the one of that name, or for its
    # own layout (NCHWc) kernels the one whose output the name gives with "_nchwc" appended.
    # It covers the nodes back from there up to the ends of other kernels (the Conv,
    # BatchNormalization and activation it fused).
    end_of = {}
    layout = {}
    for k in ort_ms:
        if k in nodes:
            end_of[k] = k
        elif k.endswith("_nchwc") and k[: -len("_nchwc")] in producer:
            end_of[producer[k[: -len("_nchwc")]]] = k
        else:
            layout[k] = ort_ms[k]
    group = {}  # model node -> the end node of the onnxruntime kernel that covers it
    for end in end_of:
        stack = [end]
        while stack:
            name = stack.pop()
            if name in group:
                continue
            group[name] = end
            for i in nodes[name].input:
                p = producer.get(i)
                if p is not None and p not in end_of and p not in group:
                    stack.append(p)
    heavy = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Attention", "LSTM", "GRU")

    def anchor_of(name):
        """a group's name: its first heavy node in the model's order, else its end"""
        end = group.get(name)
        if end is None:
            return name  # a node onnxruntime optimised away
        return first_heavy.get(end, end)

    first_heavy = {}
    for n in g.node:
        e = group.get(n.name)
        if e is not None and e not in first_heavy and n.op_type in heavy:
            first_heavy[e] = n.name

    rows = collections.defaultdict(lambda: [0.0, 0.0])
    for k, v in pc_ms.items():
        if k in nodes:
            rows[anchor_of(k)][0] += v
    for end, k in end_of.items():
        rows[anchor_of(end)][1] += ort_ms[k]
    tot_p, tot_o = sum(pc_ms.values()), sum(ort_ms.values())
    unknown = sum(v for k, v in pc_ms.items() if k not in nodes)

    def shape_of(name):
        n = nodes[name]
        return shapes.get(n.output[0], "?") if n.output else "?"

    print(f"# {os.path.basename(a.model)} {' '.join(a.dim)}; {cpu_model()}; one core; median of {a.reps} runs")
    print(f"# totals: pipecc {tot_p:.3f} ms, onnxruntime {tot_o:.3f} ms "
          f"(of which its layout changes {sum(layout.values()):.3f} ms)"
          + (f"; pipecc units without a model node {unknown:.3f} ms" if unknown else ""))
    order = sorted(rows.items(), key=lambda kv: kv[1][1] - kv[1][0])
    lst = order if a.top == 0 else order[: a.top]
    print(f"{'pipecc ms':>10} {'ort ms':>9} {'ratio':>6} {'diff':>8}  {'op':<18} {'output':<14} anchor")
    for name, (p, o) in lst:
        ratio = f"{p / o:.2f}" if o > 0 else "-"
        print(f"{p:>10.3f} {o:>9.3f} {ratio:>6} {p - o:>8.3f}  {nodes[name].op_type:<18} {shape_of(name):<14} {name}")
    per_op = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for name, (p, o) in rows.items():
        t = per_op[nodes[name].op_type]
        t[0] += p
        t[1] += o
        t[2] += 1
    print(f"\n{'op (anchor)':<20} {'count':>5} {'pipecc ms':>10} {'ort ms':>9} {'ratio':>6}")
    for op, (p, o, cnt) in sorted(per_op.items(), key=lambda kv: -kv[1][0]):
        print(f"{op:<20} {cnt:>5} {p:>10.3f} {o:>9.3f} {p / o if o > 0 else float('nan'):>6.2f}")
    if layout:
        print(f"{'(ort layout)':<20} {len(layout):>5} {0.0:>10.3f} {sum(layout.values()):>9.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "dims": dims, "cpu": cpu_model(), "reps": a.reps,
                       "anchors": {k: {"op": nodes[k].op_type, "output": shape_of(k), "pipecc_ms": p, "ort_ms": o}
                                   for k, (p, o) in rows.items()},
                       "ort_layout_ms": layout, "ort_ops": ort_ops}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
