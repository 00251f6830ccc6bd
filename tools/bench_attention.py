#!/usr/bin/python3
"""tools/bench_attention.py - one ONNX Attention node (opset 23) on the cpu target against
onnxruntime, one thread each (prints figures; not a test):

  /usr/bin/python3 tools/bench_attention.py [--build build] [--work DIR] [--seq 512]
      [--heads 8] [--head-size 64] [--batch 1] [--rounds 7] [--iters 20] [--cases mha,causal,gqa]

Cases: mha (Q, K, V [B, H, S, D], no mask), causal (is_causal=1), gqa (3D inputs
[B, S, H*D], H/4 key/value heads, causal). Each model is compiled with `pipecc -g 1 -m 1`
(inference: the fused kernel, codegen/c/ops_attn.c), its output checked against
onnxruntime's (rel-L2 <= 1e-5), then R rounds of `pipeline --bench N` and
`tools/ort_bench.py --iters N --threads 1`, both under `taskset -c 0`, their order
swapped every round. The line per case: the median time per run of each (ms) and the
median over the rounds of pipecc's time / onnxruntime's (below 1: pipecc is faster),
with its range. The first lines name the CPU, the BLAS core, onnxruntime's version and
the machine's load average (other processes share the cores: the figures are noisy
where it is high). Exit status 0, or 1 when a case failed."""
import argparse
import datetime
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as T, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, med  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable


def make(case, B, H, S, D):
    """the model and its random inputs"""
    rng = np.random.default_rng(0)
    attrs, ins = {}, ["q", "k", "v"]
    if case == "gqa":
        hk = max(1, H // 4)
        shapes = {"q": [B, S, H * D], "k": [B, S, hk * D], "v": [B, S, hk * D]}
        attrs = {"q_num_heads": H, "kv_num_heads": hk, "is_causal": 1}
    else:
        shapes = {n: [B, H, S, D] for n in ins}
        if case == "causal":
            attrs = {"is_causal": 1}
    node = helper.make_node("Attention", ins, ["y"], **attrs)
    vis = [helper.make_tensor_value_info(n, T.FLOAT, shapes[n]) for n in ins]
    g = helper.make_graph([node], case, vis, [helper.make_tensor_value_info("y", T.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    return m, {n: rng.standard_normal(shapes[n]).astype(np.float32) for n in ins}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=os.path.join(ROOT, "out", "bench_attention"))
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--cases", default="mha,causal,gqa")
    a = ap.parse_args()
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    pin = ["taskset", "-c", "0"]
    print(f"# {cpu_model()}; onnxruntime {ort.__version__}; {os.cpu_count()} cores; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {datetime.date.today()}", flush=True)
    print(f"# Attention B={a.batch} heads={a.heads} seq={a.seq} head_size={a.head_size}, float, one thread",
          flush=True)
    print(f"{'case':<8} {'pipecc ms':>10} {'ort ms':>9} {'pipecc/ort time':>16} {'range':>13}", flush=True)
    ok, kernels = True, None
    for case in [c for c in a.cases.split(",") if c]:
        m, xin = make(case, a.batch, a.heads, a.seq, a.head_size)
        d = os.path.join(a.work, case)
        os.makedirs(d, exist_ok=True)
        path, xp, yp = os.path.join(d, "model.onnx"), os.path.join(d, "x.npz"), os.path.join(d, "y.npz")
        onnx.save(m, path)
        np.savez(xp, **xin)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, xin)[0]
        r = subprocess.run([os.path.join(a.build, "pipecc"), path, "-g", "1", "-m", "1", "-o", os.path.join(d, "b")],
                           capture_output=True, text=True)
        exe = os.path.join(d, "b", "pipeline")
        if r.returncode:
            print(f"{case:<8} pipecc failed: {r.stderr.strip().splitlines()[-1:]}", flush=True)
            ok = False
            continue
        if kernels is None:
            k = re.search(r"^kernels: (.*)$", subprocess.run([exe, "--info"], capture_output=True, text=True).stdout,
                          re.M)
            kernels = k.group(1) if k else "?"
            print(f"# {kernels}", flush=True)
        r = subprocess.run(pin + [exe, "--input", xp, "--output", yp], capture_output=True, text=True)
        got = np.load(yp)["y"] if not r.returncode else None
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) if got is not None else float("inf")
        if not err <= 1e-5:
            print(f"{case:<8} output off onnxruntime's: rel-L2 {err:.2e} {r.stderr[-300:]}", flush=True)
            ok = False
            continue
        tp, to = [], []
        runs = [("p", pin + [exe, "--input", xp, "--output", yp, "--bench", str(a.iters)]),
                ("o", pin + [PY, os.path.join(ROOT, "tools", "ort_bench.py"), path, xp, "--iters", str(a.iters),
                             "--threads", "1"])]
        for i in range(a.rounds):
            for who, cmd in (runs if i % 2 == 0 else runs[::-1]):
                r = subprocess.run(cmd, capture_output=True, text=True)
                t = re.search(r"^throughput: ([0-9.]+)", r.stdout, re.M)
                if r.returncode or not t:
                    sys.exit(f"bench_attention.py: {' '.join(cmd)} failed:\n{r.stdout[-800:]}{r.stderr[-800:]}")
                (tp if who == "p" else to).append(1000.0 * a.batch / float(t.group(1)))  # ms per run
        ratios = [p / o for p, o in zip(tp, to)]
        print(f"{case:<8} {med(tp):>10.3f} {med(to):>9.3f} {med(ratios):>15.3f}x "
              f"{min(ratios):>6.3f}..{max(ratios):<6.3f}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
