#!/usr/bin/python3
"""Write the seed corpus for the frontend fuzzer (tests only; nothing here is committed).

    make_seeds.py --out DIR [--models DIR] [--max-bytes N]

Seeds: small exported models (smallcnn, gpt from tools/export_models.py, exported into
--models when missing and torch is there) and every case of tests/errors/make_corpus.py
up to --max-bytes (default 100 KiB). Float initializers bigger than 1 KiB are turned into
graph inputs of the same name, type and static shape, so that gpt (2 MB of weights)
becomes a small seed whose graph still reaches fold and shape (big float Constant
nodes likewise; doc strings are dropped). Also writes DIR.dict, a libFuzzer dictionary
of the op names of ir/ops.def and common attribute names.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

# error cases that are slow by design (they hit a budget): no use as seeds
SLOW = {"function_exponential", "loop_unroll_budget"}
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def shrink(path, out):
    import onnx
    from onnx import helper
    m = onnx.load(path)
    keep = []
    for t in m.graph.initializer:
        nbytes = len(t.raw_data) or 4 * len(t.float_data)
        if t.data_type == onnx.TensorProto.FLOAT and nbytes > 1024:
            m.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    nodes = []
    for nd in m.graph.node:  # big float Constant nodes become inputs too
        t = nd.attribute[0].t if nd.op_type == "Constant" and len(nd.attribute) == 1 else None
        if t is not None and t.data_type == onnx.TensorProto.FLOAT and len(t.raw_data) > 1024:
            m.graph.input.append(helper.make_tensor_value_info(nd.output[0], t.data_type, list(t.dims)))
            continue
        nd.doc_string = ""
        nodes.append(nd)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.doc_string = m.graph.doc_string = ""
    with open(out, "wb") as f:
        f.write(m.SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=os.path.join(ROOT, "build", "testwork", "models"))
    ap.add_argument("--max-bytes", type=int, default=100 << 10)
    a = ap.parse_args()
    if os.path.isdir(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    n = 0
    want = ["smallcnn", "gpt"]
    missing = [m for m in want if not os.path.exists(os.path.join(a.models, m + ".onnx"))]
    if missing:
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "export_models.py"), "--out", a.models,
                            "--models", ",".join(missing), "--no-check"])
        if r.returncode:
            print("make_seeds.py: could not export %s; going on without" % ",".join(missing))
    for m in want:
        p = os.path.join(a.models, m + ".onnx")
        if os.path.exists(p):
            shrink(p, os.path.join(a.out, "model_" + m + ".onnx"))
            n += 1
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "errors")
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "errors", "make_corpus.py"), "--out", corpus],
                       check=True, stdout=subprocess.DEVNULL)
        for name in sorted(os.listdir(corpus)):
            p = os.path.join(corpus, name, name + ".onnx")
            if name in SLOW:
                continue
            if os.path.isfile(p) and os.path.getsize(p) <= a.max_bytes:
                shutil.copy(p, os.path.join(a.out, "errors_" + name + ".onnx"))
                n += 1
    words = set()
    with open(os.path.join(ROOT, "ir", "ops.def")) as f:
        for line in f:
            if line.startswith("OP("):
                words.add(line[3:].split(",")[0].strip())
    words |= {"kernel_shape", "strides", "pads", "dilations", "group", "axis", "axes", "perm", "keepdims", "value",
              "value_float", "value_ints", "to", "alpha", "beta", "transA", "transB", "epsilon", "location", "offset",
              "length", "ai.onnx", "local", "Constant", "training_mode", "mode", "auto_pad", "ceil_mode"}
    with open(a.out.rstrip("/") + ".dict", "w") as f:
        for w in sorted(words):
            f.write('"%s"\n' % w)
    print("make_seeds.py: %d seeds in %s, %d dictionary words" % (n, a.out, len(words)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
