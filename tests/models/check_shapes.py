#!/usr/bin/python3
"""Check that pipecc infers the same graph-output dtypes and shapes as onnxruntime.

What it does
    1. runs  PIPECC MODEL --emit=ir-json --shape NAME:DIMS ... [-d DIM=VALUE ...]
       and reads its JSON from stdout: {"outputs": [graph output names],
       "values": {NAME: {"dtype": "float32", "shape": [2, 1000]}, ...}, "nodes": [...]};
    2. runs  tools/ort_ref.py MODEL with the same bindings (random inputs, CPU, 1 thread)
       and reads {"outputs": {NAME: {"dtype": ..., "shape": [...]}}};
    3. asserts pipecc's graph outputs are onnxruntime's (same names, same order) and that
       every one has the same dtype and shape. On a mismatch it prints a table of both
       sides and exits 1; a tool failure (pipecc or ort_ref crashing, bad JSON) exits 1
       with that tool's command line and stderr; a bad argument exits 2.

How to run (ctest does it as models.shapes.NAME, see tests/models/CMakeLists.txt):
    /usr/bin/python3 tests/models/check_shapes.py --pipecc build/pipecc \\
        --model build/testwork/models/resnet18.onnx --shape input:2x3x224x224
    /usr/bin/python3 tests/models/check_shapes.py --pipecc build/pipecc \\
        --model build/testwork/models/gpt.onnx --shape input_ids:2x64 --int-high 512
    --pipecc may be a Python script (*.py), which is then run with this interpreter;
    tests/models/test_check_shapes.py uses that to test this checker with a fake pipecc.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ORT_REF = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "ort_ref.py"))


class ToolError(Exception):
    pass


def run_json(cmd, what, timeout):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{what} timed out after {timeout} s\n  command: {shlex.join(cmd)}")
    except OSError as e:
        raise ToolError(f"{what} could not be started: {e}\n  command: {shlex.join(cmd)}")
    err = p.stderr.decode(errors="replace").rstrip()
    if p.returncode != 0:
        raise ToolError(f"{what} exited with status {p.returncode}\n"
                        f"  command: {shlex.join(cmd)}\n"
                        + (f"  stderr:\n{_indent(_tail(err))}" if err else "  (no stderr)"))
    out = p.stdout.decode(errors="replace")
    try:
        return json.loads(out)
    except ValueError as e:
        raise ToolError(f"{what} printed no valid JSON on stdout ({e})\n"
                        f"  command: {shlex.join(cmd)}\n"
                        f"  stdout starts: {out[:300]!r}"
                        + (f"\n  stderr:\n{_indent(_tail(err))}" if err else ""))


def _tail(text, lines=40):
    parts = text.splitlines()
    if len(parts) > lines:
        parts = [f"... ({len(parts) - lines} lines left out)"] + parts[-lines:]
    return "\n".join(parts)


def _indent(text):
    return "\n".join("    " + l for l in text.splitlines())


def describe(entry):
    if entry is None:
        return "(missing)"
    if not isinstance(entry, dict):
        return f"(not an object: {entry!r})"
    shape = entry.get("shape")
    dims = ",".join(str(d) for d in shape) if isinstance(shape, list) else repr(shape)
    return f"{entry.get('dtype')}[{dims}]"


def compare(pipecc_json, ort_json):
    """Returns a list of problem strings (empty when pipecc agrees with onnxruntime) and
    the table rows (name, pipecc, ort, verdict)."""
    problems = []
    rows = []
    ort_outputs = ort_json.get("outputs")
    if not isinstance(ort_outputs, dict):
        raise ToolError("ort_ref.py JSON has no 'outputs' object")
    ort_names = list(ort_outputs)

    p_names = pipecc_json.get("outputs") if isinstance(pipecc_json, dict) else None
    values = pipecc_json.get("values") if isinstance(pipecc_json, dict) else None
    if not isinstance(p_names, list) or not all(isinstance(n, str) for n in p_names):
        problems.append("pipecc JSON: 'outputs' must be a list of graph output names, got "
                        f"{type(p_names).__name__}: {str(p_names)[:200]}")
        p_names = []
    if not isinstance(values, dict):
        problems.append("pipecc JSON: 'values' must be an object NAME -> {dtype, shape}, got "
                        f"{type(values).__name__}")
        values = {}

    missing = [n for n in ort_names if n not in p_names]
    extra = [n for n in p_names if n not in ort_names]
    if missing:
        problems.append(f"graph outputs missing from pipecc's 'outputs': {missing}")
    if extra:
        problems.append(f"pipecc lists graph outputs that onnxruntime does not have: {extra}")
    if not missing and not extra and p_names != ort_names:
        problems.append(f"graph output order differs: pipecc {p_names}, onnxruntime {ort_names}")
    dups = sorted({n for n in p_names if p_names.count(n) > 1})
    if dups:
        problems.append(f"pipecc lists graph outputs more than once: {dups}")

    for name in ort_names + extra:
        want = ort_outputs.get(name)
        got = values.get(name)
        verdict = "ok"
        if want is None:
            verdict = "extra"
        elif got is None:
            verdict = "MISSING"
            problems.append(f"output '{name}': no entry in pipecc's 'values'")
        elif not isinstance(got, dict):
            verdict = "BAD"
            problems.append(f"output '{name}': pipecc 'values' entry is not an object")
        else:
            bad = []
            if got.get("dtype") != want["dtype"]:
                bad.append("dtype")
            shape = got.get("shape")
            if not (isinstance(shape, list) and shape == want["shape"]
                    and all(type(d) is int for d in shape)):
                bad.append("shape")
            if bad:
                verdict = "DIFF " + "+".join(bad)
                problems.append(f"output '{name}': {' and '.join(bad)} "
                                f"{'differ' if len(bad) > 1 else 'differs'}: pipecc "
                                f"{describe(got)}, onnxruntime {describe(want)}")
        rows.append((name, describe(got), describe(want), verdict))
    return problems, rows


def format_table(rows):
    head = ("output", "pipecc", "onnxruntime", "")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(3)]
    lines = []
    for r in [head] + rows:
        lines.append("  " + "  ".join(str(r[i]).ljust(widths[i]) for i in range(3))
                     + ("  " + r[3] if r[3] else ""))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Compare pipecc's inferred graph-output dtypes/shapes with onnxruntime's.")
    ap.add_argument("--pipecc", required=True, help="the pipecc executable (or a .py script)")
    ap.add_argument("--model", required=True, help="MODEL.onnx")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME:DIMS",
                    help="input binding passed to both pipecc and ort_ref.py (repeatable)")
    ap.add_argument("-d", "--dim", action="append", default=[], metavar="DIM=VALUE",
                    help="symbolic dim binding passed to both (repeatable)")
    ap.add_argument("--int-high", type=int, default=100,
                    help="ort_ref.py: integer inputs in [0, INT_HIGH) (default 100)")
    ap.add_argument("--ort-ref", default=DEFAULT_ORT_REF, help="path to tools/ort_ref.py")
    ap.add_argument("--timeout", type=float, default=900,
                    help="seconds allowed to each tool (default 900)")
    args = ap.parse_args(argv)

    if not args.shape and not args.dim:
        ap.error("give at least one --shape NAME:DIMS or -d DIM=VALUE binding")
    for s in args.shape:
        if ":" not in s:
            ap.error(f"--shape '{s}': expected NAME:DIMS")
    for d in args.dim:
        if "=" not in d:
            ap.error(f"-d '{d}': expected DIM=VALUE")
    for path, what in ((args.model, "--model"), (args.pipecc, "--pipecc"),
                       (args.ort_ref, "--ort-ref")):
        if not os.path.isfile(path):
            print(f"check_shapes.py: error: {what} {path}: no such file", file=sys.stderr)
            return 2

    bind = []
    for s in args.shape:
        bind += ["--shape", s]
    for d in args.dim:
        bind += ["-d", d]

    pipecc = [args.pipecc]
    if args.pipecc.endswith(".py"):
        pipecc = [sys.executable, args.pipecc]
    pipecc_cmd = pipecc + [args.model, "--emit=ir-json"] + bind
    ort_cmd = [sys.executable, args.ort_ref, args.model, "--threads", "1",
               "--int-high", str(args.int_high)] + bind

    model = os.path.basename(args.model)
    try:
        p_json = run_json(pipecc_cmd, "pipecc", args.timeout)
        o_json = run_json(ort_cmd, "ort_ref.py", args.timeout)
        problems, rows = compare(p_json, o_json)
    except ToolError as e:
        print(f"check_shapes.py: {model}: FAIL: {e}", file=sys.stderr)
        return 1

    table = format_table(rows)
    if problems:
        print(f"check_shapes.py: {model}: FAIL: pipecc and onnxruntime disagree "
              f"({' '.join(args.shape + args.dim)})", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        print(table, file=sys.stderr)
        print(f"  pipecc:      {shlex.join(pipecc_cmd)}", file=sys.stderr)
        print(f"  onnxruntime: {shlex.join(ort_cmd)}", file=sys.stderr)
        return 1
    print(f"check_shapes.py: {model}: ok ({len(rows)} output(s))")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
