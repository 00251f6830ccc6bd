#!/usr/bin/python3
"""Write a small ONNX model whose node and tensor names are hostile to an HTML report:
markup, quotes and ampersands, control characters, a 1 MB name, an empty name, non-ASCII.

    /usr/bin/python3 tests/report/hostile_model.py OUT.onnx
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HUGE = "x" * 1_000_000
NAMES = ["<script>alert(1)</script>", "a\"b'c&d<e>f&amp;", HUGE, "\x01\x02\x7f\u2028tab\tnl\nend", "",
         "\u00fcn\u00efc\u00f8d\u00e9 \u540d\u524d \U0001F642", "]]><!-- --></svg></div>"]


def main(out):
    x = helper.make_tensor_value_info("in<put>", TensorProto.FLOAT, ["batch", 64])
    w = numpy_helper.from_array(np.full((64, 64), 0.01, dtype=np.float32), "w&<eight>")
    nodes, prev = [], "in<put>"
    for i, name in enumerate(NAMES):
        t = f"t{i}<\"&'>"
        if i == 1:
            nodes.append(helper.make_node("Add", [prev, "in<put>"], [t], name=name))
        elif i % 3 == 2:
            nodes.append(helper.make_node("MatMul", [prev, "w&<eight>"], [t], name=name))
        else:
            nodes.append(helper.make_node("Relu", [prev], [t], name=name))
        prev = t
    y = helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", 64])
    g = helper.make_graph(nodes, "hostile <graph> & \"co\"", [x], [y], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="<producer>")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    onnx.save(m, out)


if __name__ == "__main__":
    main(sys.argv[1])
