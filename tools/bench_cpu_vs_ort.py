#!/usr/bin/python3
"""tools/bench_cpu_vs_ort.py - pipecc's cpu target against onnxruntime on one core, and its
training steps against PyTorch eager with one thread, on whatever machine it runs on
(prints figures; not a test):

  /usr/bin/python3 tools/bench_cpu_vs_ort.py [--build build] [--work DIR] [--models A,B,..]
      [--models-dir M]
      [--rounds R] [--iters N] [--cnn-batch B] [--seq-batch B] [--train-models gpt,mobilenet_v2]
      [--train-rounds R] [--no-train] [--quiet] [--markdown]

What it runs. The machine first: the CPU model (/proc/cpuinfo), its instruction sets,
the BLAS core and pipecc's GEMM variant (the "kernels:" line of `pipeline --info`), and
onnxruntime's version. Then per model (tools/export_models.py's, exported into
DIR/models when missing): the same random inputs for both (tools/ort_ref.py), `pipecc
MODEL -g 1 -m 1`, pipecc's outputs checked against onnxruntime's (tools/compare.py,
rel-L2 <= 1e-4; a model that fails to compile or to match is reported and skipped), then
R rounds of `pipeline --bench N` and `tools/ort_bench.py --iters N --threads 1`, both
under `taskset -c 0`, their order swapped every round (the machine's speed drifts).
The line per model: the median throughputs (samples/s), the median ratio pipecc /
onnxruntime over the rounds and its range. --quiet runs each timing through
tools/quiet_run.py (waits for idle cores; "others" is the most CPU other processes took
during the model's runs, in cores: figures with others well above 0 are not clean).

Models (default): the set the cpu kernels were tuned on (resnet50, mobilenet_v2,
vit_static, bert, gpt) and five torchvision CNNs they were not (efficientnet_b0,
convnext_tiny, regnet_y_400mf, mobilenet_v3_large, mnasnet1_0: depthwise Convs,
squeeze-excitation, SiLU, HardSwish, 7x7 depthwise Convs, LayerNormalization, GELU).
Batch: --cnn-batch for the CNNs (default 8), --seq-batch for bert and gpt (default 32);
vit_static has its fixed batch of 4 (and runs 50 x N batches: one takes a fraction of a
millisecond).

Training (unless --no-train): tools/bench_cpu_train.py on --train-models, its lines
passed through (PyTorch's time per step over pipecc's: above 1, pipecc is faster).

--markdown prints the tables as markdown too (for docs/performance.md).
Exit status 0, or 1 when no model could be measured."""
import argparse
import datetime
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, med, sh  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
TUNED = ["resnet50", "mobilenet_v2", "vit_static", "bert", "gpt"]
UNTUNED = ["efficientnet_b0", "convnext_tiny", "regnet_y_400mf", "mobilenet_v3_large", "mnasnet1_0"]
LABEL = {"resnet50": "ResNet-50", "mobilenet_v2": "MobileNetV2", "vit_static": "ViT (small, static batch 4)",
         "bert": "BERT-style", "gpt": "GPT-style", "efficientnet_b0": "EfficientNet-B0",
         "convnext_tiny": "ConvNeXt-Tiny", "regnet_y_400mf": "RegNetY-400MF", "mobilenet_v3_large": "MobileNetV3-Large",
         "mnasnet1_0": "MNASNet 1.0"}


def throughput(text):
    m = re.search(r"^throughput: ([0-9.]+)", text, re.M)
    return float(m.group(1)) if m else None


def others(text):
    v = [float(x) for x in re.findall(r"^others: ([0-9.]+)", text, re.M)]
    return max(v) if v else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=os.path.join(ROOT, "out", "bench_cpu_vs_ort"))
    ap.add_argument("--models", default=",".join(TUNED + UNTUNED))
    ap.add_argument("--models-dir", default=None, help="where the .onnx files are (default: DIR/models)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--cnn-batch", type=int, default=8)
    ap.add_argument("--seq-batch", type=int, default=32)
    ap.add_argument("--train-models", default="gpt,mobilenet_v2")
    ap.add_argument("--train-rounds", type=int, default=3)
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    mdir = a.models_dir or os.path.join(a.work, "models")
    os.makedirs(mdir, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    r = sh([PY, os.path.join(ROOT, "tools", "export_models.py"), "--out", mdir, "--models", ",".join(models)])
    if r.returncode:
        sys.exit("bench_cpu_vs_ort.py: export_models.py failed:\n" + r.stderr[-2000:])
    pipecc = os.path.join(a.build, "pipecc")
    pin = ["taskset", "-c", "0"]
    quiet = [PY, os.path.join(ROOT, "tools", "quiet_run.py"), "--"] if a.quiet else []
    import onnxruntime
    kernels = None
    rows = []
    print(f"{'model':<20} {'batch':>5} {'pipecc/s':>9} {'ort/s':>9} {'ratio':>7} {'range':>13} {'others':>6}", flush=True)
    for m in models:
        batch = 4 if m == "vit_static" else a.seq_batch if m in ("bert", "gpt") else a.cnn_batch
        dims = [] if m == "vit_static" else ["-d", f"batch={batch}"]
        iters = a.iters * 50 if m == "vit_static" else a.iters
        model = os.path.join(mdir, m + ".onnx")
        xin, yexp = os.path.join(a.work, m + ".in.npz"), os.path.join(a.work, m + ".exp.npz")
        out, d = os.path.join(a.work, m + ".o.npz"), os.path.join(a.work, m)

        def skip(why):
            print(f"{m:<20} {batch:>5} skipped: {why}", flush=True)
            rows.append((m, batch, None, None, None, None, None, why))
        r = sh([PY, os.path.join(ROOT, "tools", "ort_ref.py"), model, *dims, "--threads", "1", "--inputs-out", xin,
                "--outputs-out", yexp])
        if r.returncode:
            skip("onnxruntime: " + (r.stderr.strip().splitlines() or ["failed"])[-1])
            continue
        r = sh([pipecc, model, *dims, "-g", "1", "-m", "1", "-o", d])
        if r.returncode:
            skip("pipecc: " + (r.stderr.strip().splitlines() or ["failed"])[-1])
            continue
        exe = os.path.join(d, "pipeline")
        if kernels is None or "no OpenBLAS" in kernels:  # the first pipeline that links a BLAS names it
            k = re.search(r"^kernels: (.*)$", sh([exe, "--info"]).stdout, re.M)
            kernels = k.group(1) if k else "?"
            if "no OpenBLAS" not in kernels:
                print(f"# {kernels}; onnxruntime {onnxruntime.__version__}; "
                      f"{os.cpu_count()} cores; {datetime.date.today()}", flush=True)
        r = sh(pin + [exe, "--input", xin, "--output", out])
        c = sh([PY, os.path.join(ROOT, "tools", "compare.py"), out, yexp]) if not r.returncode else r
        if c.returncode:
            skip("outputs off onnxruntime's: " + (c.stdout + c.stderr).strip().replace("\n", "; ")[-200:])
            continue
        pc, oc, log = [], [], ""
        for i in range(a.rounds):
            runs = [("p", quiet + pin + [exe, "--input", xin, "--output", out, "--bench", str(iters)]),
                    ("o", quiet + pin + [PY, os.path.join(ROOT, "tools", "ort_bench.py"), model, xin, "--iters",
                                         str(iters), "--threads", "1"])]
            for who, cmd in (runs if i % 2 == 0 else runs[::-1]):
                r = sh(cmd)
                log += r.stdout + r.stderr
                t = throughput(r.stdout)
                if r.returncode or t is None:
                    sys.exit(f"bench_cpu_vs_ort.py: {m}: {' '.join(cmd)} failed:\n{r.stdout[-1000:]}{r.stderr[-1000:]}")
                (pc if who == "p" else oc).append(t)
        ratios = [p / o for p, o in zip(pc, oc)]
        oth = others(log)
        rows.append((m, batch, med(pc), med(oc), med(ratios), min(ratios), max(ratios), oth))
        print(f"{m:<20} {batch:>5} {med(pc):>9.2f} {med(oc):>9.2f} {med(ratios):>6.3f}x "
              f"{min(ratios):>6.3f}..{max(ratios):<6.3f} {'-' if oth is None else f'{oth:.2f}':>6}", flush=True)
    if kernels is not None and "no OpenBLAS" in kernels:  # no pipeline linked a BLAS: name the rest
        print(f"# {kernels}; onnxruntime {onnxruntime.__version__}; {os.cpu_count()} cores; {datetime.date.today()}")
    train = []
    if not a.no_train and a.train_models:
        cmd = [PY, os.path.join(ROOT, "tools", "bench_cpu_train.py"), "--pipecc", pipecc, "--work",
               os.path.join(a.work, "train"), "--models", a.train_models, "--rounds", str(a.train_rounds)]
        print("# training, one thread: " + " ".join(cmd[1:]), flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)  # the exporter's warnings only on failure
        sys.stdout.write(r.stdout)
        if r.returncode:
            sys.stdout.write(r.stderr[-3000:])
        for line in r.stdout.splitlines()[1:]:
            f = line.split()
            if len(f) >= 6 and f[4].endswith("x"):
                train.append((f[0], f[1], f[2], f[3], f[4], f[5]))
    if a.markdown:
        print(f"\n{kernels or cpu_model()}; onnxruntime {onnxruntime.__version__}; {datetime.date.today()}\n")
        print("| model | batch | pipecc samples/s | onnxruntime samples/s | ratio (range) |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for m, b, p, o, r_, lo, hi, x in rows:
            tag = LABEL.get(m, m) + ("" if m in TUNED else " (not tuned for)")
            if p is None:
                print(f"| {tag} | {b} | - | - | not run: {x} |")
            else:
                print(f"| {tag} | {b} | {p:.2f} | {o:.2f} | {r_:.3f}x ({lo:.3f}..{hi:.3f}) |")
        if train:
            print("\n| training step | batch | pipecc ms | PyTorch ms | PyTorch / pipecc (range) |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for name, b, p, t, r_, rng in train:
                print(f"| {LABEL.get(name, name)} | {b} | {p} | {t} | {r_} ({rng}) |")
    return 0 if any(r[2] is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
