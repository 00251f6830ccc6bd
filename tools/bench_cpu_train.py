#!/usr/bin/python3
"""tools/bench_cpu_train.py - pipecc's training programs on the cpu target at g=1 (one
stage, one micro-batch) against PyTorch eager with one thread, both on core 0, one
optimizer step at a time (prints figures; not a test; it runs itself under taskset -c 0):

  /usr/bin/python3 tools/bench_cpu_train.py [--pipecc build/pipecc] [--work DIR]
      [--models gpt,mobilenet_v2] [--steps N] [--rounds R]

Per model (tools/export_models.py's: the GPT-style model in eval mode at batch 32,
MobileNetV2 in training mode, BatchNorm on batch statistics, at batch 8), the same random
inputs and labels for both, cross-entropy, SGD with momentum: `pipecc MODEL --train -g 1
-m 1`, then R rounds, their order swapped every round, of `DIR/pipeline train --steps
1+N --log` (the median of steps 2 .. 1+N as the pipeline logs them: start-up and the
first step left out) and of N PyTorch steps after one (zero_grad, forward, loss,
backward, step). The line per model: the median times per step, the median ratio (PyTorch's time
over pipecc's: above 1, pipecc is faster) and its range over the rounds."""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import med  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))


def prepare(name, work):
    """-> (torch model, onnx path, input name, x, y, batch)"""
    import torch
    import export_models as em
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    model = em.build_model(name)
    if name == "gpt":
        batch = 32
        model.eval()  # no dropout; autograd still works
        x = rng.integers(0, 512, size=(batch, 64)).astype(np.int64)
        y = rng.integers(0, 512, size=(batch, 64)).astype(np.int64)
        in_name, mode = "input_ids", torch.onnx.TrainingMode.EVAL
    else:
        batch = 8
        model.train()
        x = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
        y = rng.integers(0, 1000, size=(batch,)).astype(np.int64)
        in_name, mode = "input", torch.onnx.TrainingMode.TRAINING
    path = os.path.join(work, name + ".onnx")
    with torch.enable_grad():
        torch.onnx.export(model, (torch.from_numpy(x),), path, training=mode, input_names=[in_name],
                          output_names=["output"], opset_version=14, do_constant_folding=False,
                          dynamic_axes={in_name: {0: "batch"}, "output": {0: "batch"}})
    return model, path, in_name, x, y, batch


def torch_step_ms(model, x, y, steps):
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        opt.zero_grad()
        out = model(xt)
        loss_fn(out.reshape(-1, out.shape[-1]), yt.reshape(-1)).backward()
        opt.step()
    step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps * 1e3


def pipecc_step_ms(d, work, steps, batch):
    """The median time of steps 2 .. 1+steps from the pipeline's own log (samples/s per
    step): start-up (a second or more, and as noisy as it is long: the arena's first
    touch) left out."""
    log = os.path.join(work, "train_log.csv")
    r = subprocess.run(["taskset", "-c", "0", os.path.join(d, "pipeline"), "train", "--data",
                        os.path.join(work, "X.npy"), "--labels", os.path.join(work, "Y.npy"), "--steps", str(1 + steps),
                        "--quiet", "--no-shuffle", "--log", log], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"bench_cpu_train.py: pipeline train failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    with open(log) as f:
        rows = [line.strip().split(",") for line in f.readlines()[1:]]
    return med([1e3 * batch / float(row[4]) for row in rows[1:]])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipecc", default=os.path.join(ROOT, "build", "pipecc"))
    ap.add_argument("--work", default=os.path.join(ROOT, "out", "bench_cpu_train"))
    ap.add_argument("--models", default="gpt,mobilenet_v2")
    ap.add_argument("--steps", type=int, default=0, help="steps per timing (default: 10 for gpt, 3 otherwise)")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if os.sched_getaffinity(0) != {0}:
        # the whole process on core 0 before torch starts its threads (pinning only this
        # thread later left them free: PyTorch's step then took 65 ms instead of 95)
        os.execvp("taskset", ["taskset", "-c", "0", sys.executable] + sys.argv)
    import torch
    torch.set_num_threads(1)
    print(f"{'model':<14} {'batch':>5} {'pipecc ms':>10} {'torch ms':>9} {'ratio':>7} {'range':>15}")
    for name in a.models.split(","):
        work = os.path.join(a.work, name)
        os.makedirs(work, exist_ok=True)
        model, path, in_name, x, y, batch = prepare(name, work)
        np.save(os.path.join(work, "X.npy"), x)
        np.save(os.path.join(work, "Y.npy"), y)
        d = os.path.join(work, "build")
        cmd = [a.pipecc, path, "--train", "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.01", "--momentum",
               "0.9", "-g", "1", "-m", "1", "-o", d, "--shape", f"{in_name}:" + "x".join(map(str, x.shape))]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"bench_cpu_train.py: {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
        steps = a.steps or (10 if name == "gpt" else 3)
        pc, tc = [], []
        for i in range(a.rounds):
            if i % 2 == 0:
                pc.append(pipecc_step_ms(d, work, steps, batch))
                tc.append(torch_step_ms(model, x, y, steps))
            else:
                tc.append(torch_step_ms(model, x, y, steps))
                pc.append(pipecc_step_ms(d, work, steps, batch))
        ratios = [t / p for p, t in zip(pc, tc)]
        print(f"{name:<14} {batch:>5} {med(pc):>10.1f} {med(tc):>9.1f} {med(ratios):>6.3f}x "
              f"{min(ratios):>7.3f}..{max(ratios):<6.3f}", flush=True)


if __name__ == "__main__":
    main()
