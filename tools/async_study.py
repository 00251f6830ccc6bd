#!/usr/bin/python3
"""The asynchronous schedules against synchronous 1F1B, the SpecTrain paper's comparison on
this machine (docs/training.md), on three tasks whose data ship with Debian's python.

    /usr/bin/python3 tools/async_study.py --pipecc build/pipecc --out out/async_study [--epochs 10] [-g 4]
        [--task digits|charlstm|chartransformer] [--lr L] [--check-2bw STEPS]

  charlstm, chartransformer: a character-level language model on the standard-library
            sources (char_data: 3200 training and 1000 validation sequences of 16), a
            residual 2-layer LSTM (width 64) or a 2-layer causal Transformer (width 32, 2
            heads); batches of 16 (1f1b and 2bw: 4 micro-batches of 4), SGD lr 0.1,
            momentum 0.9; an "epoch" is 200 steps, one pass over the training sequences
            (shuffled); validation by onnxruntime on the model `--export-onnx` writes
  digits (the default):

  data      tools/train_digits.py's split: 1437 training images, 360 validation images
  model     tools/train_digits.py's small CNN ((Conv3x3-BN-ReLU-MaxPool) x2 + Linear),
            SGD lr 0.05, momentum 0.9, weight decay 1e-4, cross-entropy; mini-batches of
            32 (shuffled by `pipeline train`, seed 0)
  builds    -g G --no-replicate: 1f1b (-m 4: 4 micro-batches of 8), 2bw (-m 4), and
            pipedream, async, spectrain (one micro-batch of 32 a mini-batch)
  figures   per mode: min training loss (epoch means of the per-step losses of
            `pipeline train --log`), min validation loss and max validation accuracy over
            the epochs (after epoch e: the weights of a run of e epochs' steps, which are
            the weights after e epochs of the longer run, evaluated by torch in eval mode)

--check-2bw STEPS compares 2bw's first STEPS per-step losses with a PyTorch loop of its
semantics (delay-1 SGD on the same batches).

Writes DIR/loss.svg (tools/plot_train.py, the per-step training loss of every mode),
DIR/summary.json, and prints the table.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_digits as td  # noqa: E402

MODES = ["1f1b", "pipedream", "async", "spectrain", "2bw"]
V, T = 96, 16  # the character tasks: printable ASCII (1..95) and 0 for any other byte; sequences of 16


def char_data():
    """Python's standard-library sources (/usr/lib/python3.X/*.py, sorted, concatenated):
    3200 training sequences of 16 characters from the start, 1000 validation sequences
    from the end; labels: the next characters."""
    import glob
    import sysconfig
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    a = np.frombuffer(b"".join(open(f, "rb").read() for f in files), np.uint8).astype(np.int64)
    a = np.where((a >= 32) & (a < 127), a - 31, 0)
    n = (len(a) - 1) // T
    x, y = a[:n * T].reshape(n, T), a[1:n * T + 1].reshape(n, T)
    return x[:3200], y[:3200], x[-1000:], y[-1000:]


def char_model(kind):
    import torch

    class CharLSTM(torch.nn.Module):  # a residual LSTM: two layers, the second's output added to the first's
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, 32)
            self.l1 = torch.nn.LSTM(32, 64, batch_first=True)
            self.l2 = torch.nn.LSTM(64, 64, batch_first=True)
            self.fc = torch.nn.Linear(64, V)

        def forward(self, x):
            h1, _ = self.l1(self.emb(x))
            h2, _ = self.l2(h1)
            return self.fc(h1 + h2)

    class CharTransformer(torch.nn.Module):  # two causal encoder layers, width 32, 2 heads
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, 32)
            self.pos = torch.nn.Parameter(0.02 * torch.randn(T, 32))
            layer = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
            self.enc = torch.nn.TransformerEncoder(layer, 2)
            self.fc = torch.nn.Linear(32, V)
            self.register_buffer("mask", torch.triu(torch.full((T, T), -1e9), 1))

        def forward(self, x):
            return self.fc(self.enc(self.emb(x) + self.pos, mask=self.mask))

    torch.manual_seed(0)
    return CharLSTM() if kind == "charlstm" else CharTransformer()


def char_export(model, path, batch):
    import torch
    model.eval()
    torch.onnx.export(model, (torch.zeros(batch, T, dtype=torch.int64),), path, input_names=["input"],
                      output_names=["output"], opset_version=14, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING, dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


def char_evaluate(onnx_path, x, y):
    """Mean next-character cross-entropy and accuracy of a trained model (--export-onnx) by
    onnxruntime."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    out = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    z = out.reshape(-1, V).astype(np.float64)
    z -= z.max(1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(1, keepdims=True))
    t = y.reshape(-1)
    return float(-lp[np.arange(len(t)), t].mean()), float((z.argmax(1) == t).mean())


def evaluate(weights, x, y):
    import torch
    import torch.nn.functional as F
    model = td.make_model()
    sd = model.state_dict()
    for k, v in weights.items():
        if k in sd:
            sd[k] = torch.from_numpy(np.asarray(v))
    model.load_state_dict(sd)
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(x))
        return float(F.cross_entropy(out, torch.from_numpy(y))), float((out.argmax(1).numpy() == y).mean())


def check_2bw(xt, yt, log, steps):
    """2bw's per-step losses (pipecc's log) against a PyTorch loop of its semantics: batch t's
    gradients (4 micro-batches of 8, batch-statistics BatchNorm) at the weights after t-1
    updates, applied to the latest weights by torch.optim.SGD. The largest difference."""
    import torch
    import torch.nn.functional as F
    model = td.make_model()
    model.train(True)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=td.LR, momentum=td.MOMENTUM, weight_decay=td.WD)
    prev = [p.detach().clone() for p in params]
    spe, mb, worst, t = len(yt) // td.BATCH, td.BATCH // td.M, 0.0, 0
    for e in range(steps // spe + 1):
        order = td.splitmix_order(len(yt), 0, e)
        for s in range(spe):
            if t == steps:
                return worst
            idx = order[s * td.BATCH:(s + 1) * td.BATCH]
            xb, yb = torch.from_numpy(xt[idx]), torch.from_numpy(yt[idx])
            latest = [p.detach().clone() for p in params]
            with torch.no_grad():
                for p, q in zip(params, prev):
                    p.copy_(q)
            opt.zero_grad()
            total = 0.0
            for m in range(td.M):
                loss = F.cross_entropy(model(xb[m * mb:(m + 1) * mb]), yb[m * mb:(m + 1) * mb])
                (loss / td.M).backward()
                total += float(loss) / td.M
            with torch.no_grad():
                for p, q in zip(params, latest):
                    p.copy_(q)
            prev = latest
            opt.step()
            worst = max(worst, abs(total - log[t]))
            t += 1
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("-g", type=int, default=4)
    ap.add_argument("--check-2bw", type=int, default=0, metavar="STEPS",
                    help="also compare 2bw's first STEPS losses with a PyTorch loop of its semantics")
    ap.add_argument("--task", default="digits", choices=["digits", "charlstm", "chartransformer"])
    ap.add_argument("--lr", type=float, default=None, help="default: 0.05 (digits), 0.1 (the character tasks)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    char = a.task != "digits"
    if char:
        xt, yt, xv, yv = char_data()
        batch, spe, lr, wd, shape = 16, 200, a.lr or 0.1, 0.0, "input:16x%d" % T
        path = os.path.join(a.out, a.task + ".onnx")
        char_export(char_model(a.task), path, batch)
    else:
        xt, yt, xv, yv = td.data()
        batch, lr, wd, shape = td.BATCH, a.lr or td.LR, td.WD, "input:%dx1x8x8" % td.BATCH
        spe = len(yt) // batch
        path = os.path.join(a.out, "smallcnn.onnx")
        td.export(td.make_model(), path, True)
    np.save(os.path.join(a.out, "X.npy"), xt)
    np.save(os.path.join(a.out, "Y.npy"), yt)
    res = {}
    for mode in MODES:
        d = os.path.join(a.out, mode)
        m = ["-m", "4"] if mode in ("1f1b", "2bw") else []
        r = subprocess.run([a.pipecc, path, "--shape", shape, "--train", "-g", str(a.g), "--no-replicate", "--schedule",
                            mode, "--optimizer", "sgd", "--lr", str(lr), "--momentum", str(td.MOMENTUM),
                            "--weight-decay", str(wd), "-o", d, "-q"] + m, capture_output=True, text=True)
        if r.returncode:
            sys.exit("pipecc %s: %s" % (mode, r.stderr))
        vloss, vacc, diverged = [], [], None
        for e in range(1, a.epochs + 1):
            save = os.path.join(d, "w%d.npz" % e)
            exp = os.path.join(d, "trained%d.onnx" % e)
            log = os.path.join(d, "train.csv")
            r = subprocess.run([os.path.join(d, "pipeline"), "train", "--data", os.path.join(a.out, "X.npy"),
                                "--labels", os.path.join(a.out, "Y.npy"), "--steps", str(e * spe), "--seed", "0",
                                "--quiet", "--save", save] + (["--export-onnx", exp] if char else []) +
                               (["--log", log] if e == a.epochs else []), capture_output=True, text=True)
            if r.returncode and re.search(r"the loss is (NaN|infinite)", r.stderr):
                diverged = r.stderr.strip().splitlines()[-1]
                break
            if r.returncode:
                sys.exit("pipeline %s: %s%s" % (mode, r.stdout[-1000:], r.stderr[-1000:]))
            if char:
                l, acc = char_evaluate(exp, xv, yv)
            else:
                with np.load(save) as z:
                    l, acc = evaluate({k: z[k] for k in z.files}, xv, yv)
            vloss.append(l)
            vacc.append(acc)
        if diverged:
            res[mode] = {"diverged": diverged, "val_loss": vloss, "val_accuracy": vacc}
            print("%-9s diverged: %s" % (mode, diverged), flush=True)
            continue
        losses = [float(ln.split(",")[2]) for ln in open(log).read().splitlines()[1:]]
        tl = [float(np.mean(losses[i * spe:(i + 1) * spe])) for i in range(a.epochs)]
        res[mode] = {"min_train_loss": min(tl), "min_val_loss": min(vloss), "max_val_accuracy": max(vacc),
                     "train_loss_per_epoch": tl, "val_loss": vloss, "val_accuracy": vacc}
        print("%-9s min train loss %.4f  min val loss %.4f  max val accuracy %.2f%%" %
              (mode, min(tl), min(vloss), 100 * max(vacc)), flush=True)
    if a.check_2bw and not char:
        d = check_2bw(xt, yt, [float(ln.split(",")[2]) for ln in
                               open(os.path.join(a.out, "2bw", "train.csv")).read().splitlines()[1:]], a.check_2bw)
        print("2bw: the first %d losses within %.3g of PyTorch's delay-1 SGD" % (a.check_2bw, d))
        res["2bw"]["torch_check_max_abs"] = d
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"task": a.task, "g": a.g, "epochs": a.epochs, "steps_per_epoch": spe, "modes": res}, f, indent=1)
    subprocess.run([sys.executable, os.path.join(HERE, "plot_train.py"), os.path.join(a.out, "loss.svg")] +
                   ["%s=%s" % (m, os.path.join(a.out, m, "train.csv")) for m in MODES if "diverged" not in res[m]] +
                   ["--title", "%s, %d stages: training loss per step" % (
                       {"digits": "digits, small CNN", "charlstm": "stdlib text, residual LSTM",
                        "chartransformer": "stdlib text, Transformer"}[a.task], a.g), "--smooth", "20",
                    "--log-y"], check=True)
    print("| mode | min train loss | min validation loss | max validation accuracy |")
    print("| --- | ---: | ---: | ---: |")
    for m in MODES:
        if "diverged" in res[m]:
            print("| %s | diverged (%s) | | |" % (m, res[m]["diverged"]))
            continue
        print("| %s | %.4f | %.4f | %.2f%% |" % (m, res[m]["min_train_loss"], res[m]["min_val_loss"],
                                               100 * res[m]["max_val_accuracy"]))


if __name__ == "__main__":
    main()
