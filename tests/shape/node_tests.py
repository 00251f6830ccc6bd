#!/usr/bin/env python3
"""Shape inference against the ONNX backend node tests shipped in the onnx package.

For every test folder onnx/backend/test/data/node/*/ (model.onnx, test_data_set_0/
input_*.pb, output_*.pb) run `pipecc model.onnx --emit=ir-json` and compare the dtype
and shape of every graph output with output_*.pb.

  - Graph inputs with symbolic or missing dims are bound from input_*.pb (--shape).
  - When pipecc says a graph input must be a constant for a static shape (Reshape's
    'shape', Slice's 'starts', ...), that input becomes an initializer holding the
    test's input_*.pb data and pipecc runs again (the test then checks the shape rule
    for that data, as a model exported with constant shapes would).
  - Every test either passes or is named in node_tests_skip.txt with a reason. The
    run fails on a test that is neither, and on a skip-list entry that now passes.

Usage: node_tests.py --pipecc build/pipecc [--data DIR] [--skip FILE] [--work DIR]
                     [--jobs 2] [-k SUBSTRING] [-v] [--write-skip FILE]
--write-skip writes a fresh skip list (failing tests with the reason found now,
keeping the reasons already in the list) for review before it is checked in.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys

import onnx
from onnx import TensorProto

HERE = os.path.dirname(os.path.abspath(__file__))

# TensorProto.DataType -> pipecc's dtype names (ir/ir.c)
DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
          9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64",
          15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
          20: "float8e5m2fnuz"}


def default_data_dir():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
    from node_data import node_data_dir  # noqa: E402
    return node_data_dir()


def read_skip(path):
    skip = {}
    if not os.path.exists(path):
        return skip
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            skip[name] = reason.strip() or "(no reason given)"
    return skip


def value_kind(vi):
    return vi.type.WhichOneof("value")


def unwrap(vi):
    """vi with an optional type replaced by the type it holds (pipecc compiles an optional
    holding a value as that value)."""
    if value_kind(vi) != "optional_type":
        return vi
    out = onnx.ValueInfoProto(name=vi.name)
    out.type.CopyFrom(vi.type.optional_type.elem_type)
    return out


def load_value(vi, path):
    """("tensor", TensorProto), ("seq", [TensorProto]) or ("none", None): the value of a
    test data file for graph input or output vi."""
    k = value_kind(vi)
    if k == "sequence_type":
        return "seq", load_seq(path)
    if k != "optional_type":
        return "tensor", load_pb(path)
    o = onnx.OptionalProto()
    with open(path, "rb") as f:
        o.ParseFromString(f.read())
    if o.elem_type == onnx.OptionalProto.TENSOR:
        return "tensor", o.tensor_value
    if o.elem_type == onnx.OptionalProto.SEQUENCE:
        return "seq", list(o.sequence_value.tensor_values)
    return "none", None


def classify_types(model):
    """A skip reason from the model's declared types, or None."""
    vis = list(model.graph.input) + list(model.graph.output)
    for vi in vis:
        k = value_kind(vi)
        if k == "optional_type":
            k, vi = value_kind(unwrap(vi)), unwrap(vi)
        if k in ("optional_type", "map_type", "sparse_tensor_type"):
            return "value types: map or sparse values, optionals of them"
        if k == "sequence_type" and vi.type.sequence_type.elem_type.WhichOneof("value") != "tensor_type":
            return "value types: sequences of other than tensors"
    for vi in map(unwrap, vis):
        tt = vi.type.sequence_type.elem_type if value_kind(vi) == "sequence_type" else vi.type
        if tt.WhichOneof("value") == "tensor_type":
            et = tt.tensor_type.elem_type
            if et == TensorProto.STRING:
                return "string tensors: not supported"
            if et not in DTYPES:
                return "dtype: %s not supported" % TensorProto.DataType.Name(et)
            if et in (14, 15):
                return "dtype: complex not supported"
    return None


def load_pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def load_seq(path):
    """The TensorProtos of a SequenceProto file."""
    s = onnx.SequenceProto()
    with open(path, "rb") as f:
        s.ParseFromString(f.read())
    return list(s.tensor_values)


def classify_error(err):
    """Skip-reason category from pipecc's stderr."""
    m = re.search(r"unsupported ops? \(\d+ types?\): (.*)", err)
    if m:
        ops = sorted(set(re.findall(r"(?:^|; )([A-Za-z0-9_]+) \((?:domain ([^,]+), )?opset", m.group(1))))
        names = sorted({(d + "." if d else "") + o for o, d in ops})
        return "unsupported op: " + ", ".join(names)
    if "must be a constant for a static shape" in err:
        return "data-dependent: a shape input is computed at run time (from graph input values)"
    if "trip count" in err and "computed at run time" in err:
        return "data-dependent: a Loop's trip count is computed at run time (from graph input values)"
    m = re.search(r"unsupported default-domain opset (\d+)", err)
    if m:
        return "old opset: %s (pipecc reads 1..21)" % m.group(1)
    if "imports no default-domain opset" in err:
        return "other domain: only non-default-domain ops"
    if "not supported" in err or "unsupported" in err:
        line = err.strip().splitlines()[0]
        line = re.sub(r"^.*?model\.onnx: ", "", line)
        return "not supported: " + line[:120]
    return None


class Test:
    def __init__(self, name, folder):
        self.name, self.folder = name, folder
        self.status, self.reason, self.detail = "fail", None, ""


def run_one(args, t):
    model_path = os.path.join(t.folder, "model.onnx")
    ds = os.path.join(t.folder, "test_data_set_0")
    try:
        model = onnx.load(model_path, load_external_data=False)
    except Exception as e:  # noqa: BLE001
        t.reason, t.detail = "model cannot be loaded by onnx", str(e)
        return t
    r = classify_types(model)
    if r:
        t.reason = r
        return t
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    shapes, in_pb = [], {}
    for k, vi in enumerate(inputs):
        p = os.path.join(ds, "input_%d.pb" % k)
        if not os.path.exists(p):
            continue
        kind, data = load_value(vi, p)
        if kind == "none":  # an optional without a value
            shapes += ["--none", vi.name]
            continue
        if kind == "seq":  # --seq NAME=N: inputs NAME.0 ... bound one by one
            el = data
            shapes += ["--seq", "%s=%d" % (vi.name, len(el))]
            for i, e in enumerate(el):
                if e.dims:
                    shapes += ["--shape", "%s.%d:%s" % (vi.name, i, "x".join(str(d) for d in e.dims))]
            continue
        in_pb[vi.name] = data
        tt = unwrap(vi).type.tensor_type
        static = tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)
        if not static:
            dims = list(data.dims)
            if dims:
                shapes += ["--shape", "%s:%s" % (vi.name, "x".join(str(d) for d in dims))]
            else:
                t.reason = "scalar graph input with symbolic shape"
                return t
    outs = []
    k = 0
    while os.path.exists(os.path.join(ds, "output_%d.pb" % k)):
        po = os.path.join(ds, "output_%d.pb" % k)
        kind, data = load_value(model.graph.output[k], po) if k < len(model.graph.output) else ("tensor", load_pb(po))
        if kind == "none":
            t.reason = "an output is an optional without a value"
            return t
        outs.extend(data if kind == "seq" else [data])  # a sequence: outputs NAME.0, ...
        k += 1
    made_const = []
    path = model_path
    for _ in range(8):
        cmd = [args.pipecc, path, "--emit=ir-json"] + shapes
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, errors="replace")
        except subprocess.TimeoutExpired:
            t.detail = "pipecc timed out"
            return t
        if p.returncode not in (0, 2):
            t.detail = "pipecc crashed (status %d): %s" % (p.returncode, p.stderr.strip()[-400:])
            return t
        if p.returncode == 0:
            break
        m = re.search(r"must be a constant for a static shape", p.stderr)
        names = re.findall(r"\(value '([^']*)'\) must be a constant", p.stderr)
        names = [n for n in names if n in in_pb and n not in made_const]
        if not m or not names:
            t.reason = classify_error(p.stderr)
            if t.reason and t.reason.startswith("other domain"):
                doms = sorted({n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")})
                t.reason = "%s: %s" % ("training-only" if "ai.onnx.preview.training" in doms else "other domain",
                                       ", ".join(doms))
            t.detail = p.stderr.strip()[-600:]
            return t
        # make those graph inputs initializers holding the test's data
        for n in dict.fromkeys(names):
            tensor = TensorProto()
            tensor.CopyFrom(in_pb[n])
            tensor.name = n
            model.graph.initializer.append(tensor)
            if model.ir_version >= 4:
                for i, vi in enumerate(model.graph.input):
                    if vi.name == n:
                        del model.graph.input[i]
                        break
            made_const.append(n)
            shapes_new = []
            for a, b in zip(shapes[::2], shapes[1::2]):
                if not b.startswith(n + ":"):
                    shapes_new += [a, b]
            shapes = shapes_new
        os.makedirs(args.work, exist_ok=True)
        path = os.path.join(args.work, t.name + ".onnx")
        onnx.save(model, path)
    else:
        t.detail = "too many rounds of making inputs constant"
        return t
    try:
        ir = json.loads(p.stdout)
    except ValueError as e:
        t.detail = "bad JSON from pipecc: %s" % e
        return t
    gouts = ir["outputs"]
    if len(gouts) != len(outs):
        t.detail = "pipecc has %d graph outputs, the test %d" % (len(gouts), len(outs))
        return t
    bad = []
    for name, ref in zip(gouts, outs):
        v = ir["values"].get(name)
        want_dt = DTYPES.get(ref.data_type, "type%d" % ref.data_type)
        want_sh = list(ref.dims)
        if v is None or v["dtype"] != want_dt or v["shape"] != want_sh:
            got = (v["dtype"], v["shape"]) if v else ("missing", None)
            bad.append("%s: got %s %s, expected %s %s" % (name, got[0], got[1], want_dt, want_sh))
            if got == ("bfloat16", want_sh) and want_dt == "uint16":
                t.reason = "test data: the reference output stores bfloat16 as uint16"
    if bad:
        t.detail = "; ".join(bad)
        return t
    t.status = "pass"
    if made_const:
        t.detail = "made constant: " + ", ".join(made_const)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--data", default=default_data_dir())
    ap.add_argument("--skip", default=os.path.join(HERE, "node_tests_skip.txt"))
    ap.add_argument("--work", default=os.path.join("/tmp", "pipecc-node-tests-%d" % os.getpid()))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-k", default=None, help="only tests whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--write-skip", default=None, help="write a regenerated skip list here")
    args = ap.parse_args()
    args.pipecc = os.path.abspath(args.pipecc)

    names = sorted(d for d in os.listdir(args.data) if os.path.isfile(os.path.join(args.data, d, "model.onnx")))
    if args.k:
        names = [n for n in names if args.k in n]
    if not names:
        print("node tests: none found in %s" % args.data)
        return 1
    skip = read_skip(args.skip)
    tests = [Test(n, os.path.join(args.data, n)) for n in names]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        list(ex.map(lambda t: run_one(args, t), tests))

    passed, skipped, failed, stale = [], {}, [], []
    for t in tests:
        if t.status == "pass":
            if t.name in skip:
                stale.append(t)
            else:
                passed.append(t)
        elif t.name in skip:
            key = skip[t.name].split(":")[0]
            skipped.setdefault(key, []).append(t)
        else:
            failed.append(t)
    if args.verbose:
        for t in tests:
            print("%-60s %s %s %s" % (t.name, t.status, t.reason or "", t.detail[:300]))
    for t in failed:
        print("FAIL %s: %s%s" % (t.name, (t.reason + ": ") if t.reason else "", t.detail[:500]))
    for t in stale:
        print("STALE %s: listed in the skip list (%s) but passes now: remove it" % (t.name, skip[t.name]))
    if args.write_skip:
        with open(args.write_skip, "w") as f:
            f.write("# ONNX backend node tests (onnx %s) that tests/shape/node_tests.py skips, with the reason.\n"
                    "# Format: TEST_NAME REASON. Regenerate with node_tests.py --write-skip FILE and review.\n"
                    % onnx.__version__)
            for t in tests:
                if t.status == "pass":
                    continue
                reason = skip.get(t.name) or t.reason or ("shape or dtype differs: " + t.detail[:200].replace("\n", " "))
                f.write("%s %s\n" % (t.name, reason))
    n_skip = sum(len(v) for v in skipped.values())
    by = ", ".join("%s %d" % (k, len(v)) for k, v in sorted(skipped.items(), key=lambda kv: -len(kv[1])))
    print("node tests: %d passed, %d skipped (by reason: %s), %d failed%s" %
          (len(passed), n_skip, by or "none", len(failed) + len(stale),
           " (%d stale skip-list entries)" % len(stale) if stale else ""))
    return 1 if failed or stale else 0


if __name__ == "__main__":
    sys.exit(main())
