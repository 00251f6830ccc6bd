#!/usr/bin/python3
"""Convergence on a real data set: scikit-learn's 8x8 digits (1797 images, shipped in
Debian's python3-sklearn), a small CNN exported from PyTorch in training mode
(tools/export_models.py's smallcnn: (Conv3x3-BN-ReLU-MaxPool) x2 + Linear), trained
by pipecc's pipelined program with 1F1B at g=1 and g=4 stages, and by PyTorch on the
same batches.

    /usr/bin/python3 tools/train_digits.py --pipecc build/pipecc --out out/digits \\
        [--epochs 20] [--stages 1,4] [--no-torch] [--min-accuracy A]

  data      1437 training images (batches of 32 = 4 micro-batches of 8, the order
            drawn by `pipeline train`'s shuffle, seed 0; the last partial batch dropped),
            360 test images; pixels / 16
  model     SGD, lr 0.05, momentum 0.9, weight decay 1e-4, cross-entropy
  g=G       pipecc MODEL --train -g G -m 4 --no-replicate --schedule 1f1b (the planner's
            split), `pipeline train --epochs E --log gG.csv --save gG.npz`
  torch     the same model, initial weights, batches and micro-batches in PyTorch
  test      each run's trained weights (and BatchNorm running statistics) in the torch
            model, exported in eval mode, run by onnxruntime on the 360 test images

Writes DIR/loss.svg (tools/plot_train.py), DIR/summary.json, and prints the final
loss and test accuracy of every run and whether the pipecc curves are identical
(bit for bit: same loss printed at every step). Exit status 1 if they are not, or if a
run's test accuracy is below --min-accuracy, or the plot is not well-formed SVG.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LR, MOMENTUM, WD, BATCH, M = 0.05, 0.9, 1e-4, 32, 4


def splitmix_order(n, seed, epoch):
    """The permutation `pipeline train` draws for an epoch (runtime/rt_train.c)."""
    mask = (1 << 64) - 1
    st = (seed * 0x100000001B3 + epoch) & mask
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        st = (st + 0x9E3779B97F4A7C15) & mask
        z = st
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        j = z % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def data():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(y))
    x, y = x[perm], y[perm]
    return x[:1437], y[:1437], x[1437:], y[1437:]


def make_model():
    import torch
    import export_models as em
    torch.manual_seed(0)
    model = em.build_model("smallcnn")
    with torch.no_grad():  # distinct values, so the exporter keeps one initializer per parameter
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape))
    return model


def export(model, path, training):
    import torch
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    model.train(training)
    torch.onnx.export(model, (torch.zeros(BATCH, 1, 8, 8),), path, input_names=["input"], output_names=["output"],
                      opset_version=15, training=mode, do_constant_folding=False,
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


def torch_train(model, x, y, epochs, log):
    import torch
    import torch.nn.functional as F
    model.train(True)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    spe, b, step = len(y) // BATCH, BATCH // M, 0
    with open(log, "w") as f:
        f.write("step,epoch,loss,accuracy,samples_per_s\n")
        for e in range(epochs):
            order = splitmix_order(len(y), 0, e)
            for s in range(spe):
                idx = order[s * BATCH:(s + 1) * BATCH]
                xb, yb = torch.from_numpy(x[idx]), torch.from_numpy(y[idx])
                opt.zero_grad()
                total, correct = 0.0, 0
                for m in range(M):
                    out = model(xb[m * b:(m + 1) * b])
                    loss = F.cross_entropy(out, yb[m * b:(m + 1) * b])
                    (loss / M).backward()
                    total += float(loss) / M
                    correct += int((out.argmax(1) == yb[m * b:(m + 1) * b]).sum())
                opt.step()
                step += 1
                f.write("%d,%d,%.9g,%.9g,0\n" % (step, e + 1, total, correct / BATCH))
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def test_accuracy(weights, x, y, work, name):
    """Weights (ONNX initializer names = torch state_dict names) in the eval-mode model,
    exported and run by onnxruntime on the test set."""
    import onnxruntime as ort
    import torch
    model = make_model()
    sd = model.state_dict()
    for k, v in weights.items():
        if k in sd:
            sd[k] = torch.from_numpy(np.asarray(v))
    model.load_state_dict(sd)
    path = os.path.join(work, name + "_eval.onnx")
    export(model, path, False)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    out = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    return float((out.argmax(1) == y).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--stages", default="1,4")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--min-accuracy", type=float, default=0.0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    xtr, ytr, xte, yte = data()
    np.save(os.path.join(a.out, "X.npy"), xtr)
    np.save(os.path.join(a.out, "Y.npy"), ytr)
    onnx_path = os.path.join(a.out, "smallcnn_digits.onnx")
    export(make_model(), onnx_path, True)
    runs, summary = [], {"epochs": a.epochs, "batch": BATCH, "microbatches": M, "runs": {}}
    for g in [int(s) for s in a.stages.split(",")]:
        d = os.path.join(a.out, "g%d" % g)
        cmd = [a.pipecc, onnx_path, "--shape", "input:%dx1x8x8" % BATCH, "--train", "--loss", "cross-entropy",
               "--optimizer", "sgd", "--lr", str(LR), "--momentum", str(MOMENTUM), "--weight-decay", str(WD),
               "-g", str(g), "-m", str(M), "--no-replicate", "--schedule", "1f1b", "-o", d]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit("train_digits.py: pipecc failed:\n" + r.stderr)
        stages = sum(1 for f in os.listdir(d) if f.startswith("stage_") and f.endswith(".c"))
        log, w = os.path.join(a.out, "g%d.csv" % g), os.path.join(a.out, "g%d.npz" % g)
        r = subprocess.run([os.path.join(d, "pipeline"), "train", "--data", os.path.join(a.out, "X.npy"), "--labels",
                            os.path.join(a.out, "Y.npy"), "--epochs", str(a.epochs), "--seed", "0", "--log", log,
                            "--save", w], capture_output=True, text=True)
        if r.returncode:
            sys.exit("train_digits.py: pipeline train failed:\n" + r.stdout[-2000:] + r.stderr)
        last = [ln for ln in r.stdout.splitlines() if ln.startswith("trained")]
        acc = test_accuracy(dict(np.load(w)), xte, yte, a.out, "g%d" % g)
        rows = open(log).read().splitlines()[1:]
        summary["runs"]["pipecc g=%d" % g] = {"stages": stages, "final_loss": float(rows[-1].split(",")[2]),
                                              "test_accuracy": acc, "steps": len(rows),
                                              "summary": last[0] if last else ""}
        runs.append(("pipecc, %d stage%s (1F1B)" % (stages, "" if stages == 1 else "s"), log))
    if not a.no_torch:
        log = os.path.join(a.out, "torch.csv")
        w = torch_train(make_model(), xtr, ytr, a.epochs, log)
        rows = open(log).read().splitlines()[1:]
        summary["runs"]["torch"] = {"final_loss": float(rows[-1].split(",")[2]),
                                    "test_accuracy": test_accuracy(w, xte, yte, a.out, "torch"), "steps": len(rows)}
        runs.append(("PyTorch, same batches", log))
    curves = [[",".join(r.split(",")[:3]) for r in open(p).read().splitlines()[1:]] for lab, p in runs if "pipecc" in lab]
    identical = all(c == curves[0] for c in curves)
    summary["pipecc_curves_identical"] = identical
    if not a.no_torch:
        tl = np.array([float(r.split(",")[2]) for r in open(runs[-1][1]).read().splitlines()[1:]])
        pl = np.array([float(r.split(",")[2]) for r in open(runs[0][1]).read().splitlines()[1:]])
        summary["max_abs_loss_diff_vs_torch"] = float(np.max(np.abs(tl - pl)))
    subprocess.run([sys.executable, os.path.join(HERE, "plot_train.py"), os.path.join(a.out, "loss.svg"),
                    "--title", "8x8 digits, small CNN, %d epochs: training loss" % a.epochs, "--smooth", "5", "--log-y"]
                   + ["%s=%s" % r for r in runs], check=True)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    for k, v in summary["runs"].items():
        print("%-12s final loss %.4f, test accuracy %.2f%% (%d steps)" % (k, v["final_loss"], 100 * v["test_accuracy"],
                                                                          v["steps"]))
    print("pipecc loss curves identical across %s stages: %s" % (a.stages, "yes" if identical else "NO"))
    if "max_abs_loss_diff_vs_torch" in summary:
        print("largest |loss difference| to PyTorch over all steps: %.3g" % summary["max_abs_loss_diff_vs_torch"])
    print("plot: %s" % os.path.join(a.out, "loss.svg"))
    import xml.etree.ElementTree as ET
    lines = ET.parse(os.path.join(a.out, "loss.svg")).getroot().findall("{http://www.w3.org/2000/svg}polyline")
    low = [k for k, v in summary["runs"].items() if v["test_accuracy"] < a.min_accuracy]
    if low:
        print("test accuracy below %.2f: %s" % (a.min_accuracy, ", ".join(low)))
    if len(lines) != len(runs):
        print("the plot has %d curves, expected %d" % (len(lines), len(runs)))
    return 0 if identical and not low and len(lines) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
