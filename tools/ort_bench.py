#!/usr/bin/env python3
"""tools/ort_bench.py - onnxruntime throughput on the CPU for the same inputs as a
pipecc pipeline: ort_bench.py MODEL.onnx INPUTS.npz [--threads 1] [--iters N]
Prints `throughput: X samples/s` over the timed iterations after one warm-up run (the
definition of the pipeline's --bench: samples of all iterations / their total time), and
`best: X samples/s` of the fastest iteration."""
import argparse
import time

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    feeds = dict(np.load(a.inputs))
    batch = next(iter(feeds.values())).shape[0]
    s.run(None, feeds)
    times = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        s.run(None, feeds)
        times.append(time.perf_counter() - t0)
    print(f"throughput: {batch * len(times) / sum(times):.2f} samples/s")
    print(f"best: {batch / min(times):.2f} samples/s")


if __name__ == "__main__":
    main()
