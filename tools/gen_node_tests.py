#!/usr/bin/env python3
"""Write the ONNX backend node tests of default-domain opsets from --min-opset (default 22)
on, in the layout of onnx/backend/test/data/node (DIR/NAME/model.onnx and
test_data_set_K/input_J.pb, output_J.pb), made by the installed onnx package's own case
generators (onnx.backend.test.case.node.collect_testcases): wheels of onnx 1.19 and later
ship no node-test data.

    python3 tools/gen_node_tests.py DIR [--min-opset 22] [--new-since OLD_DATA]   # onnx >= 1.23 for 28

tests/cpu/node_tests.py --data DIR runs them."""
import argparse
import os
import shutil
import sys
import warnings


def opset(m):
    return max([o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] or [0])


def write_value(path, vi, value, numpy_helper, TensorProto):
    t = vi.type
    if t.HasField("sequence_type"):
        pb = numpy_helper.from_list(value, vi.name)
    elif t.HasField("optional_type"):
        pb = numpy_helper.from_optional(value, vi.name)
    elif isinstance(value, TensorProto):
        pb = value
    else:
        pb = numpy_helper.from_array(value, vi.name)
    with open(path, "wb") as f:
        f.write(pb.SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--min-opset", type=int, default=22)
    ap.add_argument("--new-since", default=None, metavar="DATA",
                    help="also the cases of earlier opsets that this node-test folder (an older onnx's data) "
                         "lacks by name")
    a = ap.parse_args()
    known = set(os.listdir(a.new_since)) if a.new_since else None
    import onnx
    from onnx import TensorProto, numpy_helper
    from onnx.backend.test.case import node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    shutil.rmtree(a.out, ignore_errors=True)
    n = 0
    for c in cases:
        if c.model is None or (opset(c.model) < a.min_opset and (known is None or c.name in known)):
            continue
        d = os.path.join(a.out, c.name)
        os.makedirs(d)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(c.model.SerializeToString())
        for i, (ins, outs) in enumerate(c.data_sets):
            ds = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(ds)
            for j, v in enumerate(ins):
                write_value(os.path.join(ds, f"input_{j}.pb"), c.model.graph.input[j], v, numpy_helper, TensorProto)
            for j, v in enumerate(outs):
                write_value(os.path.join(ds, f"output_{j}.pb"), c.model.graph.output[j], v, numpy_helper,
                            TensorProto)
        n += 1
    also = f", and those of earlier opsets {a.new_since} lacks" if known is not None else ""
    print(f"wrote {n} node tests of opsets {a.min_opset} and later{also} (onnx {onnx.__version__}) into {a.out}")


if __name__ == "__main__":
    sys.exit(main())
