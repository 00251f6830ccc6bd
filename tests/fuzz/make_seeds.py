#!/usr/bin/python3
"""Write the seed corpus for the frontend fuzzer (tests only; nothing here is committed).

    make_seeds.py --out DIR [--models DIR] [--max-bytes N]
    make_seeds.py --npy --out DIR      # the .npy/.npz readers' seeds (fuzz_npy.c)

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


def npy_seeds(out):
    """Seeds for fuzz_npy.c: byte 0 picks the reader (0: .npy, 1: .npz), then the file.
    Valid arrays of several dtypes and ranks, npz files (zip64 too), and the hostile
    headers that once crashed the readers (sizes past the file, overflowing shapes, an
    end record claiming 2^40 entries)."""
    import io
    import struct
    import numpy as np
    seeds = {}
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((0, 4), np.int64), np.array(3.5),
              np.ones((2, 1, 2), np.bool_), np.arange(4, dtype=np.uint16), np.arange(5, dtype=np.float64)]
    for i, x in enumerate(arrays):
        b = io.BytesIO()
        np.save(b, x)
        seeds["npy_%d" % i] = b"\0" + b.getvalue()
    hdr = b.getvalue()
    for name, shape in [("huge", "(1000000000000,)"), ("overflow", "(576460752303423488, 3, 224, 224)"),
                        ("big", "(300000000,)"), ("negative", "(-1, 4)")]:
        d = ("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape).encode()
        d += b" " * (63 - (10 + len(d)) % 64) + b"\n"
        seeds["npy_" + name] = b"\0" + b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d + b"\0" * 64
    seeds["npy_truncated"] = b"\0" + hdr[: len(hdr) // 2]
    for i, z64 in enumerate([False, True]):
        b = io.BytesIO()
        import zipfile
        with zipfile.ZipFile(b, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for k, x in enumerate(arrays[:3]):
                with z.open("a%d.npy" % k, "w", force_zip64=z64) as f:
                    np.save(f, x)
        seeds["npz_%d" % i] = b"\1" + b.getvalue()
    # a zip64 end of central directory claiming 2^40 entries, its locator, the end record
    z64eocd = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 1 << 40, 1 << 40, 0, 0)
    loc = struct.pack("<IIQI", 0x07064B50, 0, 0, 1)
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    seeds["npz_entries"] = b"\1" + z64eocd + loc + eocd
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    with open(out.rstrip("/") + ".dict", "w") as f:
        for w in ["\\x93NUMPY", "'descr'", "'fortran_order'", "'shape'", "<f4", "<i8", "|b1", "False", "PK\\x03\\x04",
                  "PK\\x01\\x02", "PK\\x05\\x06", "PK\\x06\\x06", "PK\\x06\\x07"]:
            f.write('"%s"\n' % w)
    print("make_seeds.py: %d .npy/.npz seeds in %s" % (len(seeds), out))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=os.path.join(ROOT, "build", "testwork", "models"))
    ap.add_argument("--max-bytes", type=int, default=100 << 10)
    ap.add_argument("--npy", action="store_true", help="the .npy/.npz readers' seeds instead")
    a = ap.parse_args()
    if os.path.isdir(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    if a.npy:
        return npy_seeds(a.out)
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
