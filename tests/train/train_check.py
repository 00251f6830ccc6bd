#!/usr/bin/env python3
"""Training step vs PyTorch autograd (passes/train/autodiff.c, passes/train/optim.c).

For every case: a torch model and its ONNX export (parameters keep their torch names),
one optimizer step in torch on fixed random data (loss, each parameter's .grad, the
updated parameters), then `pipecc MODEL --train --loss ... --optimizer ... -g G -o DIR`
for every G, DIR/pipeline on the same data and labels. Asserts per tensor rel-L2 <= tol
for the loss, every gradient and every updated weight, and bitwise-equal outputs
across the stage counts (PIPECC_SPLIT=even).

  train_check.py --pipecc build/pipecc --work /tmp/tw [--cases smallcnn_train,mlp,...]
                 [--stages 1,2] [--models DIR]

Cases: smallcnn_train (tools/export_models.py's model, BatchNorm with batch statistics),
mlp, mlp_mse_adam, convnet, convnet_adamw, tiny_transformer, recurrent (LSTM and GRU), and the bigger cases
resnet18_train and mobilenet_v2_train (in float64, see make_case), resnet18_train_f32
and gpt. Every model is exported here as tools/export_models.py does, but
with do_constant_folding=False (weights keep their torch names) and parameters made
distinct (the exporter merges equal initializers). --models is accepted and unused.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402  (done_with, rel_l2)
from pipecc_test import rel_l2  # noqa: E402


# ---- models -------------------------------------------------------------------------

def make_case(name, models_dir, work):
    """-> (torch module, onnx path, input dict name->np, labels np, loss, optimizer spec, train mode)"""
    import torch
    import torch.nn as nn
    import export_models as em

    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    path = os.path.join(work, name + ".onnx")

    def export(model, x, in_name, opset, training):
        mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
        with torch.enable_grad():
            torch.onnx.export(model, (torch.from_numpy(x),), path, export_params=True, training=mode,
                              input_names=[in_name], output_names=["output"], opset_version=opset,
                              do_constant_folding=False, keep_initializers_as_inputs=False,
                              dynamic_axes={in_name: {0: "batch"}, "output": {0: "batch"}})

    def perturb(model):
        # the exporter merges initializers with equal contents (every LayerNorm/BatchNorm
        # weight starts as ones): make every parameter distinct so names map one to one
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn(p.shape))

    if name in ("smallcnn_train", "resnet18_train", "resnet18_train_f32"):
        # resnet18_train runs in float64: in float32 a ReLU input within rounding of 0
        # (there are several among 4M activations) flips sign between two correct
        # implementations and moves its gradient in or out of every upstream sum
        # (~1e-3 relative, measured); resnet18_train_f32 shows that figure.
        key = name.split("_")[0]
        f64 = name == "resnet18_train"
        torch.manual_seed(0)
        model = em.build_model(key)
        perturb(model)
        model.train(True)
        shape = (4, 1, 8, 8) if key == "smallcnn" else (2, 3, 224, 224)
        x = rng.standard_normal(shape).astype(np.float64 if f64 else np.float32)
        if f64:
            model.double()
        y = rng.integers(0, 10 if key == "smallcnn" else 1000, size=(shape[0],)).astype(np.int64)
        export(model, x, "input", 15, True)  # as tools/export_models.py, parameters made distinct
        opt = ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=1e-4))
        return model, path, {"input": x}, y, "cross-entropy", opt, True
    if name == "mobilenet_v2_train":
        # float64 as resnet18_train; Dropout p=0 (a random mask cannot match torch's)
        torch.manual_seed(0)
        model = em.build_model("mobilenet_v2")
        model.classifier[0].p = 0.0
        perturb(model)
        model.train(True)
        model.double()
        x = rng.standard_normal((2, 3, 224, 224))
        y = rng.integers(0, 1000, size=(2,)).astype(np.int64)
        export(model, x, "input", 15, True)
        return model, path, {"input": x}, y, "cross-entropy", ("sgd", dict(lr=0.1, momentum=0.9)), True
    if name == "gpt":
        # tools/export_models.py folds constants (weights become transposed
        # onnx::MatMul_* tensors); exported here without folding, so they keep their names
        torch.manual_seed(0)
        model = em.build_model("gpt")
        perturb(model)
        model.eval()  # eval mode: no dropout; autograd still works
        x = rng.integers(0, 512, size=(2, 64)).astype(np.int64)
        export(model, x, "input_ids", 14, False)
        y = rng.integers(0, 512, size=(2, 64)).astype(np.int64)
        # SGD: Adam would turn the key part of in_proj_bias, whose exact gradient is 0
        # (softmax ignores a constant shift), into +-lr from rounding noise
        return model, path, {"input_ids": x}, y, "cross-entropy", ("sgd", dict(lr=0.1, momentum=0.9)), False
    if name == "recurrent":
        # nn.LSTM (2 layers) into a bidirectional nn.GRU, float64: the exporter reorders
        # the gates with Slice/Concat of the torch parameters, pipecc unrolls the steps
        # (passes/train/rnn_unroll.c); the gradients reach the parameters through both
        class Rec(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)
                self.gru = nn.GRU(8, 5, bidirectional=True, batch_first=True)
                self.fc = nn.Linear(10, 4)

            def forward(self, x):
                y, _ = self.lstm(x)
                y, h = self.gru(y)
                return self.fc(y[:, -1]) + h.sum(0).sum(1, keepdim=True)
        model = Rec().double()
        perturb(model)
        x = rng.standard_normal((4, 7, 6))
        export(model, x, "input", 15, False)
        y = rng.integers(0, 4, size=(4,)).astype(np.int64)
        return model, path, {"input": x}, y, "cross-entropy", ("adam", dict(lr=0.01)), False
    if name in ("mlp", "mlp_mse_adam"):
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 24),
                              nn.Sigmoid(), nn.Linear(24, 10))
        x = rng.standard_normal((8, 16)).astype(np.float32)
        export(model, x, "input", 15, False)
        if name == "mlp":
            y = rng.integers(0, 10, size=(8,)).astype(np.int64)
            return model, path, {"input": x}, y, "cross-entropy", ("sgd", dict(lr=0.1, momentum=0.9, nesterov=True,
                                                                                 weight_decay=0.01)), False
        y = rng.standard_normal((8, 10)).astype(np.float32)
        return model, path, {"input": x}, y, "mse", ("adam", dict(lr=0.01, weight_decay=0.01)), False
    if name in ("convnet", "convnet_adamw"):
        class ConvNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)  # before BN: grad 0
                self.bn1 = nn.BatchNorm2d(8)
                self.c2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, bias=False)
                self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
                self.c3 = nn.Conv2d(16, 12, 1)
                self.pool = nn.MaxPool2d(3, stride=2, padding=1)
                self.avg = nn.AvgPool2d(2)
                self.fc = nn.Linear(12, 5)
                self.scale = nn.Parameter(torch.randn(1, 12, 1, 1))

            def forward(self, x):
                x = torch.relu(self.bn1(self.c1(x)))          # [N,8,8,8]
                r = x
                x = torch.relu(self.c2(x)) + r                # residual Add
                x = self.pool(x)                              # [N,8,4,4]
                y = torch.sigmoid(self.dw(x))
                x = torch.cat([x, y * x], 1)                  # Concat, Mul
                x = torch.tanh(self.c3(x)) * self.scale       # broadcast Mul with a weight
                x = self.avg(x)                               # [N,12,2,2]
                x = x.mean(dim=(2, 3))                        # ReduceMean
                return self.fc(x)
        model = ConvNet()
        model.train(True)
        x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
        export(model, x, "input", 15, True)
        y = rng.integers(0, 5, size=(4,)).astype(np.int64)
        if name == "convnet":
            return model, path, {"input": x}, y, "cross-entropy", ("sgd", dict(lr=0.05, momentum=0.5)), True
        return model, path, {"input": x}, y, "cross-entropy", ("adamw", dict(lr=0.01, weight_decay=0.1)), True
    if name == "tiny_transformer":
        class Tiny(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(20, 16)
                self.ln = nn.LayerNorm(16)
                self.qkv = nn.Linear(16, 48)
                self.proj = nn.Linear(16, 16)
                self.ff1 = nn.Linear(16, 32)
                self.ff2 = nn.Linear(32, 16)
                self.head = nn.Linear(16, 7)

            def forward(self, ids):
                n = ids.shape[0]
                x = self.emb(ids)                                   # Gather
                h = self.ln(x)
                q, k, v = self.qkv(h).split(16, dim=-1)             # Split / Slice
                q = q.reshape(n, 6, 2, 8).transpose(1, 2)           # Reshape, Transpose
                k = k.reshape(n, 6, 2, 8).transpose(1, 2)
                v = v.reshape(n, 6, 2, 8).transpose(1, 2)
                att = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1)
                o = (att @ v).transpose(1, 2).reshape(n, 6, 16)
                x = x + self.proj(o)
                x = x + self.ff2(torch.nn.functional.gelu(self.ff1(x)))
                return self.head(x[:, 0])                           # Gather / Slice
        model = Tiny()
        x = rng.integers(0, 20, size=(2, 6)).astype(np.int64)
        export(model, x, "ids", 17, False)
        y = rng.integers(0, 7, size=(2,)).astype(np.int64)
        return model, path, {"ids": x}, y, "cross-entropy", ("sgd", dict(lr=0.1)), False
    raise KeyError(name)


def torch_step(model, inputs, labels, loss_kind, opt_spec, train_mode):
    import torch
    import torch.nn.functional as F
    model.train(train_mode)
    params = dict(model.named_parameters())
    before = {k: v.detach().clone() for k, v in params.items()}
    xs = [torch.from_numpy(v) for v in inputs.values()]
    out = model(*xs)
    if loss_kind == "cross-entropy":
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), torch.from_numpy(labels).reshape(-1))
    else:
        loss = F.mse_loss(out, torch.from_numpy(labels))
    kind, kw = opt_spec
    opt = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind](
        model.parameters(), **kw)
    opt.zero_grad()
    loss.backward()
    grads = {k: v.grad.detach().numpy().copy() for k, v in params.items() if v.grad is not None}
    opt.step()
    new = {k: v.detach().numpy().copy() for k, v in params.items()}
    new.update({k: v.detach().numpy().copy() for k, v in model.named_buffers() if v.dtype.is_floating_point})
    return float(loss), grads, new, {k: v.numpy() for k, v in before.items()}


def torch_steps(model, inputs, labels, loss_kind, opt_spec, train_mode, M, steps):
    """`steps` optimizer steps on the same batch, each over M micro-batches (BatchNorm with
    each micro-batch's statistics, every micro-batch's loss divided by M, gradients
    accumulated), as pipecc's pipelined program runs them. Returns the mean loss and
    the gradients of the last step, the weights (and buffers) after it, and the weights
    before the last step."""
    import torch
    import torch.nn.functional as F
    model.train(train_mode)
    params = dict(model.named_parameters())
    kind, kw = opt_spec
    opt = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind](
        model.parameters(), **kw)
    xs = [torch.from_numpy(v) for v in inputs.values()]
    y = torch.from_numpy(labels)
    B = xs[0].shape[0]
    b = B // M
    for _ in range(steps):
        before = {k: v.detach().clone().numpy() for k, v in params.items()}
        opt.zero_grad()
        total = 0.0
        for m in range(M):
            out = model(*[x[m * b:(m + 1) * b] for x in xs])
            ym = y[m * b:(m + 1) * b]
            if loss_kind == "cross-entropy":
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), ym.reshape(-1))
            else:
                loss = F.mse_loss(out, ym)
            (loss / M).backward()
            total += float(loss) / M
        grads = {k: v.grad.detach().numpy().copy() for k, v in params.items() if v.grad is not None}
        opt.step()
    new = {k: v.detach().numpy().copy() for k, v in params.items()}
    new.update({k: v.detach().numpy().copy() for k, v in model.named_buffers() if v.dtype.is_floating_point})
    return total, grads, new, before


def run_pipeline_case(a, name):
    """The pipelined training program: pipecc --train -g G -m M, `pipeline train --steps K`."""
    work = os.path.join(a.work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model, path, inputs, labels, loss_kind, opt_spec, train_mode = make_case(name, a.models, work)
    t0 = time.time()
    loss, grads, new, before = torch_steps(model, inputs, labels, loss_kind, opt_spec, train_mode, a.microbatches,
                                           a.steps)
    (in_name, x), = inputs.items()
    np.save(os.path.join(work, "X.npy"), x)
    np.save(os.path.join(work, "Y.npy"), labels)
    shapes = ["--shape", f"{in_name}:" + "x".join(str(d) for d in x.shape)]
    results, ok = {}, True
    worst = {"loss": 0.0, "grad": 0.0, "new": 0.0, "step": 0.0}
    for g in a.stages:
        d = os.path.join(work, f"g{g}")
        cmd = ([a.pipecc, path, "-g", str(g), "-m", str(a.microbatches), "-o", d, "-j", "2", "--schedule", a.schedule]
               + shapes + pipecc_args(loss_kind, opt_spec, "--train"))
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PIPECC_SPLIT="even"))
        if r.returncode:
            print(" ".join(cmd))
            print(r.stdout[-3000:], r.stderr[-6000:])
            print(f"FAIL {name} g={g}: pipecc exited with {r.returncode}")
            return False, worst
        run = [os.path.join(d, "pipeline"), "train", "--data", os.path.join(work, "X.npy"), "--labels",
               os.path.join(work, "Y.npy"), "--steps", str(a.steps), "--no-shuffle", "--quiet",
               "--save", os.path.join(d, "w.npz"), "--save-grads", os.path.join(d, "g.npz"),
               "--log", os.path.join(d, "log.csv")]
        r = subprocess.run(run, capture_output=True, text=True)
        if r.returncode:
            print(" ".join(run))
            print(r.stdout[-3000:], r.stderr[-3000:])
            print(f"FAIL {name} g={g}: pipeline train exited with {r.returncode}")
            return False, worst
        with open(os.path.join(d, "log.csv")) as f:
            last = f.read().strip().splitlines()[-1].split(",")
        res = {"loss": np.array(float(last[2]))}
        res.update({k: v for k, v in np.load(os.path.join(d, "g.npz")).items()})
        res.update({"new/" + k: v for k, v in np.load(os.path.join(d, "w.npz")).items()})
        results[g] = (res, last[2])
        ok &= compare_step(name, g, res, loss, grads, new, before, a.tol, worst)
    gs = sorted(results)
    for g in gs[1:]:
        if results[g][1] != results[gs[0]][1]:
            print(f"  {name}: the loss differs between g={gs[0]} ({results[gs[0]][1]}) and g={g} ({results[g][1]})")
            ok = False
        for k, v in results[gs[0]][0].items():
            if k != "loss" and not np.array_equal(v.view(np.uint8), results[g][0][k].view(np.uint8)):
                print(f"  {name}: {k} differs bitwise between g={gs[0]} and g={g}")
                ok = False
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {a.steps} step(s) of {a.microbatches} micro-batches ({a.schedule}): "
          f"max rel-L2 loss {worst['loss']:.2e} grads {worst['grad']:.2e} updated weights {worst['new']:.2e} "
          f"(of the step {worst['step']:.2e})"
          + (f" BN running stats {worst['running']:.2e}" if "running" in worst else "")
          + f" (stages {','.join(map(str, gs))}, bitwise equal; {time.time() - t0:.1f} s)")
    return ok, worst


def compare_step(name, g, res, loss, grads, new, before, tol, worst):
    """res: "loss" (unless loss is None), "grad/P" and "new/P" arrays of one run vs torch;
    updates worst. Returns ok."""
    ok = True
    if loss is not None:
        e = rel_l2(res["loss"], loss)
        worst["loss"] = max(worst["loss"], e)
        if e > tol:
            print(f"  {name} g={g}: loss {float(res['loss']):.7g} vs torch {loss:.7g} (rel {e:.2e})")
            ok = False
    trained = sorted(k[5:] for k in res if k.startswith("grad/"))
    # floors: 1e-3 of the largest gradient / update of the model, for tensors whose exact
    # value is ~0 (the bias of a convolution followed by BatchNorm has gradient 0 in exact
    # arithmetic; both sides hold rounding noise of ~1e-8 there)
    gfloor = 1e-3 * max(np.linalg.norm(v) for v in grads.values())
    nfloor = 1e-3 * max(np.linalg.norm(new[k] - before[k]) for k in grads)
    missing = [k for k in grads if k not in trained]
    if missing:
        print(f"  {name}: torch parameters without a pipecc gradient: {missing}")
        ok = False
    for p in trained:
        if p not in grads:
            print(f"  {name}: pipecc trains '{p}', which torch does not have as a parameter")
            ok = False
            continue
        for kind, ref in (("grad", grads[p]), ("new", new[p])):
            got = res[f"{kind}/{p}"]
            if got.shape != ref.shape:
                print(f"  {name} g={g}: {kind}/{p} shape {got.shape} vs torch {ref.shape}")
                ok = False
                continue
            e = rel_l2(got, ref, gfloor if kind == "grad" else 0.0)
            worst[kind] = max(worst[kind], e)
            if kind == "new":  # also relative to the step (information: rounding of p - lr*d)
                worst["step"] = max(worst["step"], rel_l2(got - before[p], ref - before[p], nfloor))
            if e > tol:
                print(f"  {name} g={g}: {kind}/{p} rel-L2 {e:.2e}")
                ok = False
    # BatchNorm running statistics (torch updates the variance with the unbiased
    # batch variance, n/(n-1); ONNX BatchNormalization-15 and pipecc with the
    # population variance): reported, not asserted
    for k in res:
        if k.startswith("new/") and k[4:] not in grads and k[4:] in new and not k.startswith("new/state/"):
            worst["running"] = max(worst.get("running", 0.0), rel_l2(res[k], new[k[4:]]))
    return ok


def pipecc_args(loss_kind, opt_spec, flag="--train-step"):
    kind, kw = opt_spec
    a = [flag, "--loss", loss_kind, "--optimizer", kind, "--lr", repr(kw.get("lr", 0.01))]
    if kw.get("momentum"):
        a += ["--momentum", repr(kw["momentum"])]
    if kw.get("nesterov"):
        a += ["--nesterov"]
    if kind == "adamw" or kw.get("weight_decay"):
        a += ["--weight-decay", repr(kw.get("weight_decay", 0.01))]
    return a


def run_case(a, name):
    work = os.path.join(a.work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model, path, inputs, labels, loss_kind, opt_spec, train_mode = make_case(name, a.models, work)
    t0 = time.time()
    loss, grads, new, before = torch_step(model, inputs, labels, loss_kind, opt_spec, train_mode)
    npz_in = os.path.join(work, "in.npz")
    feeds = dict(inputs)
    feeds["labels"] = labels
    save_npz(npz_in, feeds)
    shapes = []
    for k, v in inputs.items():
        shapes += ["--shape", f"{k}:" + "x".join(str(d) for d in v.shape)]
    results = {}
    ok = True
    worst = {"loss": 0.0, "grad": 0.0, "new": 0.0, "step": 0.0}
    for g in a.stages:
        d = os.path.join(work, f"g{g}")
        cmd = [a.pipecc, path, "-g", str(g), "-m", "1", "-o", d, "-j", "2"] + shapes + pipecc_args(loss_kind, opt_spec)
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PIPECC_SPLIT="even"))
        if r.returncode:
            print(" ".join(cmd))
            print(r.stdout[-3000:], r.stderr[-6000:])
            print(f"FAIL {name} g={g}: pipecc exited with {r.returncode}")
            return False, worst
        out = os.path.join(d, "out.npz")
        r = subprocess.run([os.path.join(d, "pipeline"), "--input", npz_in, "--output", out], capture_output=True,
                           text=True)
        if r.returncode:
            print(r.stdout[-3000:], r.stderr[-3000:])
            print(f"FAIL {name} g={g}: pipeline exited with {r.returncode}")
            return False, worst
        res = dict(np.load(out))
        results[g] = res
        ok &= compare_step(name, g, res, loss, grads, new, before, a.tol, worst)
    gs = sorted(results)
    for g in gs[1:]:
        for k, v in results[gs[0]].items():
            if v.shape != results[g][k].shape or v.tobytes() != results[g][k].tobytes():
                print(f"  {name}: output {k} differs bitwise between g={gs[0]} and g={g}")
                ok = False
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max rel-L2 loss {worst['loss']:.2e} grads {worst['grad']:.2e} "
          f"updated weights {worst['new']:.2e} (of the step {worst['step']:.2e})"
          + (f" BN running stats {worst['running']:.2e}" if "running" in worst else "") + f" (stages {','.join(map(str, gs))}, {time.time() - t0:.1f} s)")
    return ok, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default=None)
    ap.add_argument("--cases", default="smallcnn_train,mlp,mlp_mse_adam,convnet,convnet_adamw,tiny_transformer,"
                    "recurrent")
    ap.add_argument("--stages", default="1,2")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--mode", choices=["step", "pipeline"], default="step",
                    help="step: the one-step function (--train-step); pipeline: the pipelined program (--train)")
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--schedule", default="1f1b")
    a = ap.parse_args()
    a.stages = [int(s) for s in a.stages.split(",")]
    os.makedirs(a.work, exist_ok=True)
    bad = []
    for c in a.cases.split(","):
        ok, _ = (run_pipeline_case if a.mode == "pipeline" else run_case)(a, c)
        pt.done_with(os.path.join(a.work, c), ok)
        if not ok:
            bad.append(c)
    if bad:
        print("FAILED:", ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
