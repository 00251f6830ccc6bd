#!/usr/bin/python3
"""cpu target, ONNX backend node tests: every test in onnx/backend/test/data/node whose
ops are all in ir/ops.def, and the models of our own in the same layout
(tests/lib/extra_models.py, expected outputs from onnxruntime), is compiled with pipecc
(one stage, one micro-batch), run on test_data_set_0 and compared with the expected outputs
(floats: rtol 1e-4, atol 1e-5; integers and bools: exact).

    node_tests.py --pipecc build/pipecc --work /tmp/w [--jobs 2] [-k PATTERN] [--xfail FILE]

Tests named in the expected-failure list (tests/cpu/node_xfail.txt: `name  # reason`)
must fail; one that passes is reported as XPASS and fails the run, so the list stays
exact. Builds are cached in WORK by the hash of the model and the pipecc binary, so a
second run only runs the pipelines. Exit status 0 when everything is as expected.

pipecc compiles static shapes, so inputs that decide a shape (Reshape's shape, Slice's
starts, Reduce*'s axes, ...: CONST_SLOTS) must be constants; where a test feeds them as
graph inputs, the harness turns them into initializers holding the test's values.
"""

import argparse
import concurrent.futures as cf
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from npzio import save_npz  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import pipecc_test as pt  # noqa: E402


PREVIEW_OPS = {"FlexAttention"}  # the rows of ir/ops.def of domain ai.onnx.preview


def supported_ops():
    ops = set()
    with open(os.path.join(ROOT, "ir", "ops.def")) as f:
        for line in f:
            m = re.match(r"OP\((\w+),", line)
            if m:
                ops.add(m.group(1))
    ops.add("Constant")  # the frontend turns Constant nodes into constants
    ops.add("Scatter")  # frontend/onnx_legacy.c maps it to ScatterElements
    return ops


def load_xfail(path):
    xf = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                name, _, why = line.partition("#")
                xf[name.strip()] = why.strip()
    return xf


REDUCE = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
CONST_SLOTS = dict({r: [1] for r in REDUCE}, Reshape=[1], Expand=[1], Tile=[1], ConstantOfShape=[0], Range=[0, 1, 2],
                   Slice=[1, 2, 3, 4], Pad=[1, 2, 3], Split=[1], Squeeze=[1], Unsqueeze=[1], Resize=[1, 2, 3],
                   Upsample=[1], CumSum=[1], CumProd=[1], Trilu=[1], OneHot=[1], TopK=[1], CenterCropPad=[1],
                   Col2Im=[1, 2], Compress=[1], AffineGrid=[1], MaxUnpool=[2], DFT=[1, 2], STFT=[1, 3], HannWindow=[0],
                   HammingWindow=[0], BlackmanWindow=[0], MelWeightMatrix=[0, 1, 2, 3, 4], Loop=[0, 1],
                   SequenceInsert=[2], SequenceAt=[1], SequenceErase=[1], SplitToSequence=[1])


def all_nodes(graph):
    """The nodes of graph and of the bodies of its If/Loop/Scan nodes, at any depth (a
    body reads outside values by name)."""
    out = []
    for n in graph.node:
        out.append(n)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out.extend(all_nodes(a.g))
    return out


def bake_shape_inputs(m, feeds):
    """Graph inputs used in CONST_SLOTS become initializers, also where they reach such a
    slot through other nodes (a window function's expanded body: Cast(size) ... Range),
    not through Shape or Size. Returns the names baked."""
    nodes = all_nodes(m.graph)
    made_by = {o: n for n in nodes for o in n.output}
    stack = [n.input[k] for n in nodes for k in CONST_SLOTS.get(n.op_type, []) if k < len(n.input)]
    want, seen = set(), set()
    while stack:
        v = stack.pop()
        if not v or v in seen:
            continue
        seen.add(v)
        if v in feeds:
            want.add(v)
        elif v in made_by and made_by[v].op_type not in ("Shape", "Size"):  # those read no values
            stack.extend(made_by[v].input)
            for a in made_by[v].attribute:  # an If's outputs: whatever its branches read
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.extend(i for b in all_nodes(a.g) for i in b.input)
    elem = {i.name: i.type.tensor_type.elem_type for i in m.graph.input}
    for name in want:
        m.graph.initializer.append(from_bits(feeds[name], name, elem.get(name)))
        keep = [i for i in m.graph.input if i.name != name]
        del m.graph.input[:]
        m.graph.input.extend(keep)
        del feeds[name]
    return want


# element types held as bit patterns, one value per byte (uint8), as pipecc's pipelines
# take and give them: the float8 types, float8e8m0 (24), float4e2m1 (23), float6e2m3 (27),
# float6e3m2 (28); numpy_helper.to_array would decode them to float32 or give ml_dtypes
# arrays, depending on the installed onnx, so these are read from the protobuf fields
BITS8 = {17, 18, 19, 20, 23, 24, 27, 28}
# bits per value of the packed types, low bits first (int4/uint4/float4e2m1 two to a byte,
# int2/uint2 four, float6 four in three bytes) and the signed ones among them
PACKED = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2, 27: 6, 28: 6}
SIGNED = {22: 4, 26: 2}


NAN_TYPES = {16, 17, 18, 19, 20, 24}  # bit-pattern types with NaN encodings


def tensor_bytes(t):
    """The bytes of a TensorProto of one-byte or packed values: raw_data, or int32_data (one
    byte per entry)."""
    if t.HasField("raw_data"):
        return np.frombuffer(t.raw_data, np.uint8)
    return np.array(t.int32_data, np.int64).astype(np.uint8)


def to_bits(t):
    """The array of TensorProto t as pipecc's pipelines take and give it, or None when
    numpy_helper.to_array gives that already: bit patterns for the narrow float types
    (uint16 for bfloat16, uint8 for the rest), int8 / uint8 values for int4, uint4, int2 and
    uint2 (one value per byte)."""
    dt, n = t.data_type, int(np.prod(t.dims))
    if dt == onnx.TensorProto.BFLOAT16:
        if t.HasField("raw_data"):
            return np.frombuffer(t.raw_data, "<u2").reshape(tuple(t.dims))
        return np.array(t.int32_data, np.int64).astype(np.uint16).reshape(tuple(t.dims))
    if dt not in BITS8 and dt not in PACKED:
        return None
    raw = tensor_bytes(t)
    nb = PACKED.get(dt, 8)
    if nb == 8:
        v = raw[:n]
    else:  # packed, in raw_data and in int32_data alike
        bits = np.unpackbits(raw, bitorder="little")[:n * nb].reshape(n, nb).astype(np.uint8)
        v = (bits << np.arange(nb, dtype=np.uint8)).sum(axis=1).astype(np.uint8)
    if dt in SIGNED:
        w = SIGNED[dt]
        return np.where(v >= 1 << (w - 1), v.astype(np.int16) - (1 << w), v).astype(np.int8).reshape(tuple(t.dims))
    return v.astype(np.uint8).reshape(tuple(t.dims))


def from_bits(a, name, dt):
    """A TensorProto of element type dt holding array a as to_bits gives it (packed where
    the type is); numpy_helper.from_array's for the other types."""
    if dt != onnx.TensorProto.BFLOAT16 and dt not in BITS8 and dt not in PACKED:
        return numpy_helper.from_array(a, name)
    t = onnx.TensorProto(name=name, data_type=dt, dims=a.shape)
    nb = PACKED.get(dt)
    if nb:
        v = a.reshape(-1).astype(np.uint8) & ((1 << nb) - 1)
        bits = ((v[:, None] >> np.arange(nb, dtype=np.uint8)) & 1).reshape(-1)
        t.raw_data = np.packbits(bits, bitorder="little").tobytes()
    else:
        t.raw_data = a.astype("<u2" if dt == onnx.TensorProto.BFLOAT16 else np.uint8).tobytes()
    return t


def as_array(t):
    """A TensorProto's array as pipelines take and give it (to_bits, else numpy_helper)."""
    v = to_bits(t)
    return numpy_helper.to_array(t) if v is None else v


def nan_bits(b, dt):
    """Which bit patterns b of element type dt are NaN (all False for the types without)."""
    b = b.astype(np.uint32)
    if dt == onnx.TensorProto.BFLOAT16:
        return ((b & 0x7F80) == 0x7F80) & ((b & 0x7F) != 0)
    if dt == 17:  # float8e4m3fn: S.1111.111
        return (b & 0x7F) == 0x7F
    if dt in (18, 20):  # the FNUZ types: 0x80
        return b == 0x80
    if dt == 19:  # float8e5m2: S.11111.xx, xx nonzero
        return ((b & 0x7C) == 0x7C) & ((b & 3) != 0)
    if dt == 24:  # float8e8m0
        return b == 0xFF
    return np.zeros(b.shape, bool)


def bf16_float(b):
    """bfloat16 bit patterns (uint16) as float32 values."""
    return (b.astype(np.uint32) << 16).view(np.float32)


def bits_equal(g, e, dt):
    """Bit patterns g and e of element type dt are the same, any NaN matching any NaN (ONNX
    names no NaN encoding: onnx 1.16 and 1.23 write float8e5m2's NaN as 0x7F and 0x7E)."""
    ng, ne = nan_bits(g, dt), nan_bits(e, dt)
    return bool(np.array_equal(ng, ne) and np.array_equal(g[~ng], e[~ne]))


def read_pb(path):
    """(name, array) of a TensorProto file, as as_array reads it."""
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, as_array(t)


def read_seq(path):
    """The tensors of a SequenceProto file, as read_pb reads each."""
    sq = onnx.SequenceProto()
    with open(path, "rb") as f:
        sq.ParseFromString(f.read())
    return [as_array(t) for t in sq.tensor_values]


def read_value(vi, path):
    """The value of a test data file for graph input or output vi: an array, a list of
    arrays (a sequence), or None (an optional without a value)."""
    kind = vi.type.WhichOneof("value")
    if kind == "sequence_type":
        return read_seq(path)
    if kind != "optional_type":
        return read_pb(path)[1]
    op = onnx.OptionalProto()
    with open(path, "rb") as f:
        op.ParseFromString(f.read())
    if op.elem_type == onnx.OptionalProto.TENSOR:
        return as_array(op.tensor_value)
    if op.elem_type == onnx.OptionalProto.SEQUENCE:
        return [as_array(t) for t in op.sequence_value.tensor_values]
    if op.elem_type == onnx.OptionalProto.UNDEFINED:
        return None
    raise ValueError(f"{path}: an optional of element type {op.elem_type}")


def list_args(seq_len):
    """pipecc's arguments for read_data's sequence lengths: --seq NAME=N, --none NAME."""
    return [a for k, n in seq_len.items() for a in (("--none", k) if n is None else ("--seq", f"{k}={n}"))]


def read_data(m, ds):
    """(feeds, expected outputs, sequence lengths) of model m's test data folder ds: name ->
    array, in file order. A sequence NAME is given as its tensors NAME.0, NAME.1, ... as
    pipelines take and give them (its length in seq_len[NAME] for --seq NAME=N); an
    optional input without a value is no feed (seq_len[NAME] None, for --none NAME), one
    with a value is that value."""
    init = {i.name for i in m.graph.initializer}
    in_vis = [i for i in m.graph.input if i.name not in init]
    outs_vi = list(m.graph.output)

    def files(prefix):
        fs = [f for f in os.listdir(ds) if f.startswith(prefix)]
        return sorted(fs, key=lambda s: int(re.findall(r"\d+", s)[0]))

    feeds, expect, seq_len = {}, {}, {}
    for dest, vis, prefix in ((feeds, in_vis, "input_"), (expect, outs_vi, "output_")):
        for k, f in enumerate(files(prefix)):
            if k >= len(vis):
                continue
            name = vis[k].name
            v = read_value(vis[k], os.path.join(ds, f))
            if isinstance(v, list):
                if dest is feeds:
                    seq_len[name] = len(v)
                dest.update({f"{name}.{i}": a for i, a in enumerate(v)})
            elif v is None:
                if dest is feeds:
                    seq_len[name] = None
                else:
                    raise ValueError(f"output '{name}' is an optional without a value")
            else:
                dest[name] = v
    return feeds, expect, seq_len


def run_one(args):
    try:
        return run_one_(args)
    except Exception as e:  # noqa: BLE001
        return args[0], False, f"test harness: {type(e).__name__}: {str(e)[:120]}"


def run_one_(args):
    name, tdir, pipecc, work, pipecc_hash, criterion = args
    model = os.path.join(tdir, "model.onnx")
    ds = os.path.join(tdir, "test_data_set_0")
    try:
        m = onnx.load(model)
    except Exception as e:  # noqa: BLE001
        return name, False, f"cannot load model: {e}"
    feeds, expect, seq_len = read_data(m, ds)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    if bake_shape_inputs(m, feeds):
        model = os.path.join(d, "model.onnx")
        onnx.save(m, model)
    with open(model, "rb") as f:
        key = hashlib.sha256(f.read() + pipecc_hash.encode()).hexdigest()[:16]
    stamp = os.path.join(d, "built.key")
    bdir = os.path.join(d, "build")
    if not (os.path.exists(stamp) and open(stamp).read() == key and os.path.exists(os.path.join(bdir, "pipeline"))):
        shutil.rmtree(bdir, ignore_errors=True)
        cmd = [pipecc, model, "-g", "1", "-m", "1", "-o", bdir, "-j", "1"]
        cmd += list_args(seq_len)
        for k, v in feeds.items():
            if v.ndim:  # a scalar input is declared so in the model
                cmd += ["--shape", f"{k}:" + "x".join(str(s) for s in v.shape)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PIPECC_SPLIT="even"))
        if r.returncode:
            msg = [l for l in r.stderr.splitlines() if "model.onnx:" in l or "error" in l] or r.stderr.splitlines()[-2:]
            msg = [re.sub(r"^\S*model\.onnx: ", "", l) for l in msg]
            return name, False, f"pipecc exit {r.returncode}: " + msg[0][:160]
        warn = pt.cc_warnings(r.stderr)
        if warn:
            return name, False, "emitted code has warnings: " + warn[0]
        with open(stamp, "w") as f:
            f.write(key)
    xin = os.path.join(d, "x.npz")
    save_npz(xin, feeds)
    yout = os.path.join(d, "y.npz")
    if os.path.exists(yout):
        os.remove(yout)
    r = subprocess.run([os.path.join(bdir, "pipeline"), "--input", xin, "--output", yout], capture_output=True, text=True)
    if r.returncode:
        return name, False, f"pipeline exit {r.returncode}: " + " | ".join(r.stderr.splitlines()[-2:])
    got = dict(np.load(yout))
    elem = {o.name: o.type.tensor_type.elem_type for o in m.graph.output}
    why, onnx_only = compare_outputs(got, expect, elem, criterion)
    return name, not why, why or "; ".join(onnx_only)


def compare_outputs(got, expect, elem, criterion="pipecc"):
    """Compare a pipeline's outputs got with the expected ones ({name: array}; elem: {name:
    ONNX element type}). Returns (why, onnx_only): why is "" when they match; onnx_only
    lists the outputs within the ONNX runner's tolerance but not within pipecc's own
    (criterion "onnx" only; see --criterion)."""
    onnx_only = []
    for k, e in expect.items():
        if k not in got:
            return f"output '{k}' missing", onnx_only
        g = got[k]
        if g.shape != e.shape:
            return f"output '{k}': shape {g.shape}, expected {e.shape}", onnx_only
        if g.dtype != e.dtype:
            return f"output '{k}': dtype {g.dtype}, expected {e.dtype}", onnx_only
        if e.dtype.kind in "fc":
            if not np.allclose(g, e, rtol=1e-4, atol=1e-5, equal_nan=True):
                err = np.max(np.abs(g.astype(np.float64) - e.astype(np.float64)))
                if not (criterion == "onnx" and np.allclose(g, e, rtol=1e-3, atol=1e-7, equal_nan=True)):
                    return f"output '{k}': max abs error {err:.3g}", onnx_only
                onnx_only.append(f"'{k}' max abs error {err:.3g}")
        elif elem.get(k) == onnx.TensorProto.BFLOAT16 and criterion == "onnx" and not bits_equal(g, e, elem.get(k)):
            gf, ef = bf16_float(g), bf16_float(e)
            if not np.allclose(gf, ef, rtol=2.0**-6, atol=1e-7, equal_nan=True):
                err = np.max(np.abs(gf.astype(np.float64) - ef.astype(np.float64)))
                return f"output '{k}': bfloat16 max abs error {err:.3g}", onnx_only
            onnx_only.append(f"'{k}' bfloat16 values differ")
        elif not (bits_equal(g, e, elem.get(k)) if elem.get(k) in NAN_TYPES else np.array_equal(g, e)):
            return f"output '{k}': values differ", onnx_only
    return "", onnx_only


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-k", default=None, help="only tests whose name matches this regex")
    ap.add_argument("--xfail", default=os.path.join(HERE, "node_xfail.txt"))
    ap.add_argument("--data", default=None,
                    help="the node tests' folder (default: tests/lib/node_data.py's, onnx 1.16.2's data of opsets "
                         "up to 21; tools/gen_node_tests.py writes those of later opsets)")
    ap.add_argument("--criterion", choices=("pipecc", "onnx"), default="pipecc",
                    help="pipecc: floats within rtol 1e-4 and atol 1e-5, bfloat16 and the other bit-pattern types "
                         "exact; onnx: the ONNX backend runner's own check (onnx.backend.test.runner: rtol 1e-3, "
                         "atol 1e-7; bfloat16 rtol 2^-6, two of its ulps), each test that meets only this one "
                         "counted and listed with -v")
    ap.add_argument("-v", action="store_true", help="list the tests that pass on --criterion onnx only")
    ap.add_argument("--all-ops", action="store_true",
                    help="run the tests of ops not in ir/ops.def too (pipecc's refusal is their failure, to be "
                         "listed in --xfail with its reason) rather than skip them")
    ap.add_argument("--no-extra", action="store_true", help="leave out the models of our own")
    ap.add_argument("--write-xfail", default=None, help="write the failures as a new expected-failure list")
    ap.add_argument("--sample", type=int, default=0, metavar="N",
                    help="only the first N node tests (by name) of each set of op types; the models of our own "
                         "all run (the sanitizer build: every op's kernels under ASan+UBSan in a third of the time)")
    a = ap.parse_args()
    if a.sample and a.write_xfail:
        ap.error("--write-xfail needs every test: leave out --sample")

    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from node_data import node_data_dir  # noqa: E402
    data = a.data or node_data_dir()
    ops = supported_ops()
    xfail = load_xfail(a.xfail)
    with open(a.pipecc, "rb") as f:
        pipecc_hash = hashlib.sha256(f.read()).hexdigest()
    tests, skipped, sampled_out = [], 0, 0
    per_opset = {}
    for name in sorted(os.listdir(data)):
        if a.k and not re.search(a.k, name):
            continue
        tdir = os.path.join(data, name)
        try:
            m = onnx.load(os.path.join(tdir, "model.onnx"), load_external_data=False)
        except Exception:  # noqa: BLE001
            skipped += 1
            continue
        if a.all_ops or all((n.domain in ("", "ai.onnx") and n.op_type in ops and n.op_type not in PREVIEW_OPS) or
               (n.domain == "ai.onnx.preview" and n.op_type in PREVIEW_OPS) for n in m.graph.node) and m.graph.node:
            key = frozenset(n.op_type for n in m.graph.node)
            per_opset[key] = per_opset.get(key, 0) + 1
            if a.sample and per_opset[key] > a.sample:
                sampled_out += 1
                continue
            tests.append((name, tdir, a.pipecc, a.work, pipecc_hash, a.criterion))
        else:
            skipped += 1
    os.makedirs(a.work, exist_ok=True)
    # models of our own in the same layout (tests/lib/extra_models.py, expected outputs
    # from onnxruntime): what the node tests leave out
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    import extra_models  # noqa: E402
    for name, tdir in ([] if a.no_extra else extra_models.write_extra(os.path.join(a.work, "extra_models"))):
        if not a.k or re.search(a.k, name):
            tests.append((name, tdir, a.pipecc, a.work, pipecc_hash, a.criterion))
    t0 = time.time()
    results = {}
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for name, ok, why in ex.map(run_one, tests):
            results[name] = (ok, why)
    npass = nxfail = nloose = 0
    bad = []
    for name in sorted(results):
        ok, why = results[name]
        if ok and name in xfail:
            bad.append(f"XPASS {name} (listed in the expected failures: {xfail[name]})")
        elif ok:
            npass += 1
            if why:
                nloose += 1
                if a.v:
                    print(f"pass on onnx's tolerance only: {name}: {why}")
        elif name in xfail:
            nxfail += 1
        else:
            bad.append(f"FAIL  {name}: {why}")
    for line in bad:
        print(line)
    if a.write_xfail:
        with open(a.write_xfail, "w") as f:
            f.write("# ONNX backend node tests (onnx %s) expected to fail on the cpu target: name  # reason\n" % onnx.__version__)
            for name in sorted(results):
                ok, why = results[name]
                if not ok:
                    f.write(f"{name}  # {why}\n")
    if a.sample:
        print(f"node tests: --sample {a.sample}: {sampled_out} more of the same op sets not run "
              f"({len(per_opset)} op sets)")
    print(f"node tests: {len(tests)} run ({skipped} skipped: ops not in ir/ops.def), {npass} passed, "
          f"{nxfail} expected failures, {len(bad)} unexpected; {time.time() - t0:.0f} s")
    if a.criterion == "onnx":
        print(f"node tests: on the ONNX runner's check; {npass - nloose} of the {npass} passes are also within "
              f"pipecc's own (rtol 1e-4, atol 1e-5, bit patterns exact)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
