#!/usr/bin/python3
"""onnxruntime (CPU) reference run of an ONNX model: the inference oracle for pipecc tests.

What it does
    Builds random inputs for every graph input of MODEL.onnx (initializers listed as
    inputs are skipped), runs onnxruntime on the CPU and prints to stdout one JSON line:
        {"outputs": {NAME: {"dtype": "float32", "shape": [2, 1000]}, ...}}
    with the graph outputs in graph order. Optionally saves the inputs and the outputs
    as .npz files keyed by the ONNX input/output names.

    Input shapes: --shape NAME:DIMS fixes one input's whole shape; otherwise the shape
    comes from the model, with each symbolic dim bound by -d DIM=VALUE (a symbolic dim
    left unbound is an error). Values: floats ~ N(0,1) (cast to the input's float type),
    integers uniform in [0, --int-high), bools uniform; all from numpy's generator seeded
    with --seed, so the same arguments always give the same inputs.

How to run (Debian's python with onnxruntime):
    /usr/bin/python3 tools/ort_ref.py model.onnx --shape input:2x3x224x224
    /usr/bin/python3 tools/ort_ref.py gpt.onnx -d batch=2 --int-high 512 \\
        --inputs-out x.npz --outputs-out y.npz --threads 1 --seed 0

Exit status: 0 on success, 2 on a bad argument or an unreadable model, 1 if
onnxruntime fails to load or run the model.
"""

import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npzio import save_npz  # noqa: E402

# ONNX TensorProto.DataType -> numpy dtype name (the names pipecc uses in its JSON too).
ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
    7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
}
# onnxruntime's type strings ("tensor(float)") -> numpy dtype name.
ORT_DTYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32", "tensor(uint64)": "uint64", "tensor(bool)": "bool",
}


class UsageError(Exception):
    pass


def parse_dims(text, what):
    if text == "":
        return []  # scalar
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"{what}: dims must be integers separated by 'x', got '{text}'")
    if any(d < 0 for d in dims):
        raise UsageError(f"{what}: dims must be >= 0, got '{text}'")
    return dims


def parse_shapes(items):
    shapes = {}
    for item in items or []:
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise UsageError(f"--shape '{item}': expected NAME:DIMS, e.g. input:2x3x224x224")
        if name in shapes:
            raise UsageError(f"--shape: input '{name}' given twice")
        shapes[name] = parse_dims(dims, f"--shape '{item}'")
    return shapes


def parse_dim_bindings(items):
    dims = {}
    for item in items or []:
        m = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(-?\d+)\s*", item)
        if not m:
            raise UsageError(f"-d '{item}': expected DIM=VALUE, e.g. batch=2")
        value = int(m.group(2))
        if value < 0:
            raise UsageError(f"-d '{item}': value must be >= 0")
        dims[m.group(1)] = value
    return dims


def graph_inputs(model):
    """[(name, dtype name, [int | str | None])] for the real (non-initializer) inputs."""
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise UsageError(f"input '{vi.name}' is not a tensor (sequence/map inputs unsupported)")
        dtype = ONNX_DTYPES.get(tt.elem_type)
        if dtype is None:
            raise UsageError(f"input '{vi.name}': element type {tt.elem_type} unsupported")
        dims = None
        if tt.HasField("shape"):
            dims = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(d.dim_value)
                elif d.HasField("dim_param"):
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        out.append((vi.name, dtype, dims))
    return out


def resolve_shapes(inputs, shapes, bindings):
    names = {n for n, _, _ in inputs}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise UsageError(f"--shape names unknown input(s) {unknown}; model inputs: {sorted(names)}")
    resolved = {}
    used_dims = set()
    for name, _, dims in inputs:
        if name in shapes:
            if dims is not None and len(dims) != len(shapes[name]):
                raise UsageError(f"--shape {name}: rank {len(shapes[name])} but the model "
                                 f"declares rank {len(dims)} {dims}")
            if dims is not None:
                for i, (want, got) in enumerate(zip(dims, shapes[name])):
                    if isinstance(want, int) and want != got:
                        raise UsageError(f"--shape {name}: dim {i} is {got} but the model "
                                         f"fixes it to {want}")
            resolved[name] = list(shapes[name])
            continue
        if dims is None:
            raise UsageError(f"input '{name}' has no shape in the model: give --shape {name}:DIMS")
        out = []
        for i, d in enumerate(dims):
            if isinstance(d, int):
                out.append(d)
            elif isinstance(d, str) and d in bindings:
                out.append(bindings[d])
                used_dims.add(d)
            else:
                what = f"symbolic dim '{d}'" if d else "an unnamed dynamic dim"
                raise UsageError(f"input '{name}' dim {i} is {what}: bind it with -d "
                                 f"{d or 'DIM'}=VALUE or give --shape {name}:DIMS")
        resolved[name] = out
    unused = sorted(set(bindings) - used_dims)
    if unused:
        print(f"ort_ref.py: warning: -d {', '.join(unused)} bound no input dim", file=sys.stderr)
    return resolved


def make_inputs(inputs, shapes, seed, int_high):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dtype, _ in inputs:
        shape = shapes[name]
        if dtype in ("float32", "float64", "float16"):
            feeds[name] = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        elif dtype == "bool":
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            info = np.iinfo(dtype)
            high = min(int_high, int(info.max) + 1)
            feeds[name] = rng.integers(0, high, shape, dtype=np.int64).astype(dtype)
    return feeds


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Run an ONNX model with onnxruntime (CPU) on random inputs and print "
                    "its output dtypes/shapes as JSON.")
    ap.add_argument("model", help="MODEL.onnx")
    ap.add_argument("--shape", action="append", metavar="NAME:DIMS",
                    help="whole shape of one input, e.g. input:2x3x224x224 (repeatable)")
    ap.add_argument("-d", "--dim", action="append", metavar="DIM=VALUE",
                    help="bind a symbolic dim, e.g. batch=2 (repeatable)")
    ap.add_argument("--inputs-out", metavar="X.npz", help="save the inputs here")
    ap.add_argument("--outputs-out", metavar="Y.npz", help="save the outputs here")
    ap.add_argument("--inputs-in", metavar="X.npz",
                    help="use these inputs instead of random ones (keyed by input name)")
    ap.add_argument("--seed", type=int, default=0, help="input RNG seed (default 0)")
    ap.add_argument("--int-high", type=int, default=100,
                    help="integer inputs are drawn from [0, INT_HIGH) (default 100)")
    ap.add_argument("--threads", type=int, default=0,
                    help="onnxruntime intra-op threads (default 0 = onnxruntime's choice)")
    ap.add_argument("--no-opt", action="store_true",
                    help="disable onnxruntime graph optimisations")

    def fail(msg):
        print(f"ort_ref.py: error: {msg}", file=sys.stderr)
        return 2

    # argparse exits with 2 on its own errors, which is the status we want.
    args = ap.parse_args(argv)
    if args.int_high < 1:
        return fail("--int-high must be >= 1")
    if args.threads < 0:
        return fail("--threads must be >= 0")
    if not os.path.isfile(args.model):
        return fail(f"{args.model}: no such file")

    import onnx
    try:
        model = onnx.load(args.model, load_external_data=False)
    except Exception as e:
        return fail(f"{args.model}: not a readable ONNX model: {e}")
    try:
        inputs = graph_inputs(model)
        shapes = resolve_shapes(inputs, parse_shapes(args.shape), parse_dim_bindings(args.dim))
        if args.inputs_in:
            with np.load(args.inputs_in) as z:
                feeds = {k: z[k] for k in z.files}
            missing = [n for n, _, _ in inputs if n not in feeds]
            if missing:
                raise UsageError(f"--inputs-in {args.inputs_in}: missing {missing}")
        else:
            feeds = make_inputs(inputs, shapes, args.seed, args.int_high)
    except UsageError as e:
        return fail(f"{args.model}: {e}")
    except OSError as e:
        return fail(str(e))
    del model

    import onnxruntime as ort
    so = ort.SessionOptions()
    if args.threads:
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
    if args.no_opt:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(args.model, sess_options=so,
                                    providers=["CPUExecutionProvider"])
        out_meta = sess.get_outputs()
        results = sess.run([o.name for o in out_meta], feeds)
    except Exception as e:
        print(f"ort_ref.py: {args.model}: onnxruntime failed: {e}", file=sys.stderr)
        return 1

    report = {"outputs": {}}
    arrays = {}
    for meta, value in zip(out_meta, results):
        value = np.asarray(value)
        arrays[meta.name] = value
        report["outputs"][meta.name] = {"dtype": str(value.dtype),
                                        "shape": [int(d) for d in value.shape]}
    if args.inputs_out:
        save_npz(args.inputs_out, feeds)
    if args.outputs_out:
        save_npz(args.outputs_out, arrays)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
