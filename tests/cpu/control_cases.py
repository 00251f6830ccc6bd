#!/usr/bin/python3
"""Control flow (If, Loop, Scan; passes/lower/control.c expands them into the graph) in models
exported from TorchScript and built with onnx.helper, against onnxruntime running the
same model on the same inputs; each compiled at -g 1 and -g 2 (-m 2 where the model
allows micro-batches) and run.

  rnn_loop     torch.jit.script: an RNN cell in a Python for loop over the time axis
               (range(x.size(1)): the trip count comes from a static shape), the outputs
               gathered by torch.cat, so the carried value grows every iteration; a
               dynamic batch axis (-d batch=4), 2 micro-batches at -g 2
  gate_if      torch.jit.script: `if flag > 0` on a scalar graph input: the condition
               is computed at run time, both branches are computed and Where selects;
               run with flag = 1 and flag = -1. And with --const flag=1 / -1 (the input
               compiled as a constant): the If folds, only its branch's Gemm is compiled
  early_exit   torch.jit.script: `for i in range(6)` with `break` once the activations
               are small (a condition computed at run time; the exporter writes the
               loop with an unbounded trip count and the counter in the condition): the
               iterations after the break are masked; inputs that break at once, later,
               and never. The condition reduces over the batch: -m 1 only, and -m 2 is
               refused with one error line
  scan9        Scan-9 (onnx.helper): two scan inputs along axis 1, one reversed, a state,
               scan outputs along axes 0 and 1 (one reversed), a weight read from the
               outer graph
  scan8        Scan-8 (opset 8, batch axis first): a running sum and product per sequence
               (unrolled per sample: -m 1)
  nested       Loop (trip count 4) whose body holds an If on the iteration number
               (even: Add, odd: Mul with an outer weight) and a Scan; scan outputs
  lists        torch.jit.script: a Python list appended to in a loop (SequenceEmpty and
               SequenceInsert carried by the Loop), torch.stack of it, torch.unbind into
               a list comprehension (SplitToSequence, SequenceAt in a Loop), torch.cat of
               that list, ys[-1], and the list itself returned (a sequence output: the
               pipeline gives hs.0 ... hs.4); -d batch=4, 2 micro-batches at -g 2
  seq_graph    sequence ops (onnx.helper) on a sequence graph input (--seq xs=3: inputs
               xs.0 ... xs.2): SequenceInsert at the front, SequenceErase of the last,
               SequenceMap with a body reading a tensor input, SequenceLength,
               SequenceAt, ConcatFromSequence stacking along a new last axis and
               concatenating a SequenceConstruct; an If on a run-time flag whose
               branches give sequences (Where per tensor), flag true and false
  optional     torch.jit.script: an Optional[Tensor] that is None until the first
               iteration of a loop sets it (`if h is None`): Optional without a value
               carried by the Loop, OptionalHasElement, an If on it, OptionalGetElement;
               -d batch=4, 2 micro-batches at -g 2
  opt_break    torch.jit.script: the same Optional in a loop with a data-dependent
               `break` (its iterations after the first masked, the optional holding a
               tensor by then); inputs that break at once, later, never
  opt_graph    an optional graph input (onnx.helper) read through OptionalHasElement,
               an If on it and OptionalGetElement: given a value, and empty (--none b);
               Optional with and without an input, Identity of an optional
  train_loop   --train-step (mse) through rnn_loop's unrolled loop (one output): loss and
               weight gradients against torch autograd (cpu target)
  errors       one error line each: a trip count given at run time; If branches of
               different shapes under a run-time condition; a run-time loop condition
               with scan outputs; a sequence position given at run time; a sequence
               input without --seq; If branches giving sequences of different lengths
               under a run-time condition; If branches giving an optional with and
               without a value under a run-time condition; OptionalGetElement of an
               empty optional; --none naming an input that is not optional

    control_cases.py --pipecc build/pipecc --work DIR [--target cpu|cuda --sim-lib LIB] [-k PATTERN]"""

import os
import re
import sys
import warnings

from typing import List, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from npzio import save_npz  # noqa: E402
import pipecc_test as pt  # noqa: E402

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL


def cell_class():
    import torch

    class Cell(torch.nn.Module):
        def __init__(s, both=True):
            super().__init__()
            s.ih, s.hh, s.both = torch.nn.Linear(8, 16), torch.nn.Linear(16, 16), both

        def forward(s, x):
            h = torch.zeros(x.size(0), 16)
            out = torch.zeros(x.size(0), 0, 16)
            for t in range(x.size(1)):
                h = torch.tanh(s.ih(x[:, t]) + s.hh(h))
                out = torch.cat([out, h.unsqueeze(1)], 1)
            if s.both:
                return out, h
            return out, out  # one output (TorchScript needs one return type)
    return Cell


def script_model(name, path):
    """Exports the TorchScript module `name`; returns its input feeds (name -> list of
    input dicts to run)."""
    import torch
    torch.manual_seed(0)
    Cell = cell_class()
    rng = np.random.default_rng(3)


    class Gate(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.a, s.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(s, x, flag):
            if bool(flag > 0):
                y = torch.relu(s.a(x))
            else:
                y = torch.sigmoid(s.b(x)) * 2
            return y

    class Early(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.a = torch.nn.Linear(8, 8)
            with torch.no_grad():
                s.a.weight.mul_(0.5)
                s.a.bias.zero_()

        def forward(s, x):
            y = x
            for i in range(6):
                y = torch.tanh(s.a(y))
                if bool(y.abs().max() < 0.05):
                    break
            return y

    class Lists(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.lin = torch.nn.Linear(8, 8)

        def forward(s, x):
            ys: List[torch.Tensor] = []
            h = x[:, 0]
            for t in range(x.size(1)):
                h = torch.tanh(s.lin(x[:, t]) + h)
                ys.append(h)
            zs = [torch.relu(p) for p in torch.unbind(x, 1)]
            return torch.stack(ys, 1), torch.cat(zs, 1) + ys[-1].sum(1, keepdim=True), ys

    class Opt(Lists):  # Lists' Linear, another forward
        def forward(s, x):
            h: Optional[torch.Tensor] = None
            for t in range(x.size(1)):
                if h is None:
                    h = torch.tanh(s.lin(x[:, t]))
                else:
                    h = torch.tanh(s.lin(x[:, t]) + h)
            if h is None:
                return x.sum(1)
            return h * 2

    class OptBreak(Early):  # Early's damped Linear, another forward
        def forward(s, x):
            h: Optional[torch.Tensor] = None
            for i in range(6):
                if h is None:
                    h = torch.tanh(s.a(x))
                else:
                    h = torch.tanh(s.a(h))
                if bool(h.abs().max() < 0.05):
                    break
            if h is None:
                return x
            return h

    dyn = None
    if name == "optional":
        mod, args, names, dyn = Opt(), (torch.randn(4, 5, 8),), ["x"], {"x": {0: "batch"}}
        feeds = [{"x": rng.standard_normal((4, 5, 8)).astype(np.float32)}]
    elif name == "opt_break":
        mod, args, names = OptBreak(), (torch.randn(4, 8),), ["x"]
        feeds = [{"x": (s * rng.standard_normal((4, 8))).astype(np.float32)} for s in (0.01, 0.3, 5.0)]
    elif name == "lists":
        mod, args, names, dyn = Lists(), (torch.randn(4, 5, 8),), ["x"], {"x": {0: "batch"}}
        feeds = [{"x": rng.standard_normal((4, 5, 8)).astype(np.float32)}]
    elif name == "rnn_loop":  # a dynamic batch axis, bound with -d batch=4 (the zeros follow x's shape)
        mod, args, names, dyn = Cell(), (torch.randn(4, 5, 8),), ["x"], {"x": {0: "batch"}}
        feeds = [{"x": rng.standard_normal((4, 5, 8)).astype(np.float32)}]
    elif name == "gate_if":
        mod, args, names = Gate(), (torch.randn(4, 8), torch.tensor(1.0)), ["x", "flag"]
        x = rng.standard_normal((4, 8)).astype(np.float32)
        feeds = [{"x": x, "flag": np.array(f, np.float32)} for f in (1.0, -1.0)]
    else:
        mod, args, names = Early(), (torch.randn(4, 8),), ["x"]
        feeds = [{"x": (s * rng.standard_normal((4, 8))).astype(np.float32)} for s in (0.01, 0.3, 5.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(mod), args, path, input_names=names, dynamic_axes=dyn,
                          opset_version=17 if name.startswith("opt") else 15,  # Loop-16 carries optionals
                          output_names={"lists": ["y", "z", "hs"], "optional": ["y"], "opt_break": ["y"]}.get(name))
    return feeds


def graph_model(name, path):
    """Writes the onnx.helper model `name`; returns its feeds as script_model does."""
    rng = np.random.default_rng(5)
    if name == "scan9":
        body = helper.make_graph(
            [helper.make_node("Mul", ["a_t", "w"], ["aw"]), helper.make_node("Add", ["s", "aw"], ["s1"]),
             helper.make_node("Add", ["s1", "b_t"], ["s2"]), helper.make_node("Tanh", ["s2"], ["o1"]),
             helper.make_node("Mul", ["b_t", "two"], ["o2"])],
            "body", [helper.make_tensor_value_info(n, F32, [3]) for n in ("s", "a_t", "b_t")],
            [helper.make_tensor_value_info(n, F32, [3]) for n in ("s2", "o1", "o2")],
            [numpy_helper.from_array(np.array(2, np.float32), "two")])
        nodes = [helper.make_node("Scan", ["s0", "a", "b"], ["s_end", "y1", "y2"], body=body, num_scan_inputs=2,
                                  scan_input_axes=[1, 0], scan_input_directions=[0, 1], scan_output_axes=[0, 1],
                                  scan_output_directions=[1, 0])]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s0", F32, [3]),
                                           helper.make_tensor_value_info("a", F32, [3, 6]),
                                           helper.make_tensor_value_info("b", F32, [6, 3])],
                              [helper.make_tensor_value_info(n, F32, None) for n in ("s_end", "y1", "y2")],
                              [numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "w")])
        opset = 16
        feeds = [{"s0": rng.standard_normal(3).astype(np.float32),
                  "a": rng.standard_normal((3, 6)).astype(np.float32),
                  "b": rng.standard_normal((6, 3)).astype(np.float32)}]
    elif name == "scan8":
        body = helper.make_graph(
            [helper.make_node("Add", ["s", "x_t"], ["s1"]), helper.make_node("Mul", ["p", "x_t"], ["p1"]),
             helper.make_node("Identity", ["s1"], ["o"])],
            "body", [helper.make_tensor_value_info(n, F32, [2]) for n in ("s", "p", "x_t")],
            [helper.make_tensor_value_info(n, F32, [2]) for n in ("s1", "p1", "o")])
        nodes = [helper.make_node("Scan", ["", "s0", "p0", "x"], ["s_end", "p_end", "y"], body=body, num_scan_inputs=1)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s0", F32, [4, 2]),
                                           helper.make_tensor_value_info("p0", F32, [4, 2]),
                                           helper.make_tensor_value_info("x", F32, [4, 3, 2])],
                              [helper.make_tensor_value_info(n, F32, None) for n in ("s_end", "p_end", "y")])
        opset = 8
        feeds = [{"s0": rng.standard_normal((4, 2)).astype(np.float32),
                  "p0": np.ones((4, 2), np.float32),
                  "x": rng.uniform(0.5, 1.5, (4, 3, 2)).astype(np.float32)}]
    elif name == "seq_graph":
        t = lambda n: helper.make_tensor_value_info(n, F32, [2, 3])  # noqa: E731
        mbody = helper.make_graph([helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Tanh", ["ab"], ["o"])],
                                  "mbody", [t("a"), t("b")], [t("o")])
        tb = helper.make_graph([helper.make_node("SequenceConstruct", ["y", "y"], ["ts"])], "t", [],
                               [helper.make_tensor_sequence_value_info("ts", F32, [2, 3])])
        eb = helper.make_graph([helper.make_node("Neg", ["y"], ["ny"]),
                                helper.make_node("SequenceConstruct", ["ny", "y"], ["es"])], "e", [],
                               [helper.make_tensor_sequence_value_info("es", F32, [2, 3])])
        nodes = [helper.make_node("SequenceInsert", ["xs", "y", "zero"], ["s1"]),
                 helper.make_node("SequenceErase", ["s1"], ["s2"]),
                 helper.make_node("SequenceMap", ["s2", "y"], ["s3"], body=mbody),
                 helper.make_node("SequenceLength", ["s3"], ["n"]),
                 helper.make_node("SequenceAt", ["s3", "one"], ["at1"]),
                 helper.make_node("ConcatFromSequence", ["s3"], ["stacked"], axis=-1, new_axis=1),
                 helper.make_node("SequenceConstruct", ["at1", "y"], ["pair"]),
                 helper.make_node("ConcatFromSequence", ["pair"], ["cat"], axis=0),
                 helper.make_node("If", ["flag"], ["picked"], then_branch=tb, else_branch=eb),
                 helper.make_node("ConcatFromSequence", ["picked"], ["sel"], axis=1)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_sequence_value_info("xs", F32, [2, 3]), t("y"),
                                           helper.make_tensor_value_info("flag", BOOL, [])],
                              [helper.make_tensor_value_info("n", I64, []), t("at1"),
                               helper.make_tensor_value_info("stacked", F32, [2, 3, 3]),
                               helper.make_tensor_value_info("cat", F32, [4, 3]),
                               helper.make_tensor_value_info("sel", F32, [2, 6]),
                               helper.make_tensor_sequence_value_info("s3", F32, [2, 3])],
                              [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                               numpy_helper.from_array(np.array(-2, np.int64), "one")])
        opset = 17
        xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]
        y = rng.standard_normal((2, 3)).astype(np.float32)
        feeds = [{"xs": xs, "y": y, "flag": np.array(f)} for f in (True, False)]
    elif name == "opt_graph":
        t = lambda n: helper.make_tensor_value_info(n, F32, [2, 3])  # noqa: E731
        tb = helper.make_graph([helper.make_node("OptionalGetElement", ["b"], ["bv"]),
                                helper.make_node("Mul", ["x", "bv"], ["r"])], "t", [], [t("r")])
        eb = helper.make_graph([helper.make_node("Neg", ["x"], ["r2"])], "e", [], [t("r2")])
        opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F32, [2, 3]))
        nodes = [helper.make_node("OptionalHasElement", ["b"], ["has"]),
                 helper.make_node("If", ["has"], ["y"], then_branch=tb, else_branch=eb),
                 helper.make_node("Optional", ["x"], ["ox"]),
                 helper.make_node("Identity", ["ox"], ["ox2"]),
                 helper.make_node("OptionalGetElement", ["ox2"], ["gx"]),
                 helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(F32, [2, 3])),
                 helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
                 helper.make_node("Cast", ["has_none"], ["hn"], to=F32),
                 helper.make_node("Sub", ["gx", "hn"], ["z"]),
                 helper.make_node("Cast", ["has"], ["has_f"], to=F32)]
        g = helper.make_graph(nodes, "g", [t("x"), helper.make_value_info("b", opt)],
                              [t("y"), t("z"), helper.make_tensor_value_info("has_f", F32, [])])
        opset = 18
        x = rng.standard_normal((2, 3)).astype(np.float32)
        feeds = [{"x": x, "b": rng.standard_normal((2, 3)).astype(np.float32)}, {"x": x, "b": None}]
    else:  # nested
        then_b = helper.make_graph([helper.make_node("Add", ["h", "x"], ["r"])], "then", [],
                                   [helper.make_tensor_value_info("r", F32, None)])
        else_b = helper.make_graph([helper.make_node("Mul", ["h", "w"], ["r2"])], "else", [],
                                   [helper.make_tensor_value_info("r2", F32, None)])
        sbody = helper.make_graph([helper.make_node("Add", ["acc", "e"], ["acc1"]),
                                   helper.make_node("Identity", ["acc1"], ["so"])],
                                  "sbody", [helper.make_tensor_value_info(n, F32, [4]) for n in ("acc", "e")],
                                  [helper.make_tensor_value_info(n, F32, [4]) for n in ("acc1", "so")])
        body = helper.make_graph(
            [helper.make_node("Mod", ["i", "two"], ["m"]), helper.make_node("Equal", ["m", "zero"], ["even"]),
             helper.make_node("If", ["even"], ["hn"], then_branch=then_b, else_branch=else_b),
             helper.make_node("Scan", ["z4", "hn"], ["last", "cums"], body=sbody, num_scan_inputs=1),
             helper.make_node("Tanh", ["cums"], ["hs"]), helper.make_node("Identity", ["c"], ["c1"]),
             helper.make_node("ReduceSum", ["last"], ["tot"], keepdims=0)],
            "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", BOOL, []),
                     helper.make_tensor_value_info("h", F32, [3, 4])],
            [helper.make_tensor_value_info("c1", BOOL, []), helper.make_tensor_value_info("hs", F32, [3, 4]),
             helper.make_tensor_value_info("tot", F32, [])],
            [numpy_helper.from_array(np.array(2, np.int64), "two"), numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.zeros(4, np.float32), "z4")])
        nodes = [helper.make_node("Loop", ["trip", "", "h0"], ["h_end", "tots"], body=body)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("h0", F32, [3, 4]),
                                           helper.make_tensor_value_info("x", F32, [3, 4])],
                              [helper.make_tensor_value_info(n, F32, None) for n in ("h_end", "tots")],
                              [numpy_helper.from_array(np.array(4, np.int64), "trip"),
                               numpy_helper.from_array(rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32), "w")])
        opset = 16
        feeds = [{"h0": rng.standard_normal((3, 4)).astype(np.float32),
                  "x": rng.standard_normal((3, 4)).astype(np.float32)}]
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), path)
    return feeds


def error_models(d):
    """(label, model path, strings the error line must hold)"""
    out = []
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c1"]), helper.make_node("Add", ["v", "v"], ["v1"])],
                             "body", [helper.make_tensor_value_info("i", I64, []),
                                      helper.make_tensor_value_info("c", BOOL, []),
                                      helper.make_tensor_value_info("v", F32, [2])],
                             [helper.make_tensor_value_info("c1", BOOL, []), helper.make_tensor_value_info("v1", F32, [2])])
    g = helper.make_graph([helper.make_node("Loop", ["n", "", "v0"], ["v_end"], body=body, name="loop")], "g",
                          [helper.make_tensor_value_info("n", I64, []), helper.make_tensor_value_info("v0", F32, [2])],
                          [helper.make_tensor_value_info("v_end", F32, None)])
    out.append(("runtime trip count", g, 16, ["node 0 'loop' (Loop", "trip count 'n' is computed at run time"]))
    tb = helper.make_graph([helper.make_node("Identity", ["x"], ["r"])], "t", [], [helper.make_tensor_value_info("r", F32, None)])
    eb = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["r2"], keepdims=1)], "e", [],
                           [helper.make_tensor_value_info("r2", F32, None)])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=tb, else_branch=eb, name="pick")], "g",
                          [helper.make_tensor_value_info("c", BOOL, []), helper.make_tensor_value_info("x", F32, [2, 3])],
                          [helper.make_tensor_value_info("y", F32, None)])
    out.append(("If branches of different shapes", g, 16,
                ["node 0 'pick' (If", "branches give output 0 as float32 [2, 3] and float32 [1, 1]"]))
    body = helper.make_graph([helper.make_node("Less", ["v", "lim"], ["c1"]), helper.make_node("Add", ["v", "v"], ["v1"]),
                              helper.make_node("Identity", ["v"], ["s"])],
                             "body", [helper.make_tensor_value_info("i", I64, []),
                                      helper.make_tensor_value_info("c", BOOL, []),
                                      helper.make_tensor_value_info("v", F32, [])],
                             [helper.make_tensor_value_info("c1", BOOL, []), helper.make_tensor_value_info("v1", F32, []),
                              helper.make_tensor_value_info("s", F32, [])],
                             [numpy_helper.from_array(np.array(100, np.float32), "lim")])
    g = helper.make_graph([helper.make_node("Loop", ["n", "", "v0"], ["v_end", "seq"], body=body, name="grow")], "g",
                          [helper.make_tensor_value_info("v0", F32, [])],
                          [helper.make_tensor_value_info(n, F32, None) for n in ("v_end", "seq")],
                          [numpy_helper.from_array(np.array(10, np.int64), "n")])
    out.append(("run-time condition with scan outputs", g, 16,
                ["node 0 'grow' (Loop", "condition is computed at run time", "scan output"]))
    g = helper.make_graph([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
                           helper.make_node("SequenceAt", ["s", "i"], ["y"], name="at")], "g",
                          [helper.make_tensor_value_info("x", F32, [3, 2]), helper.make_tensor_value_info("i", I64, [])],
                          [helper.make_tensor_value_info("y", F32, None)])
    out.append(("run-time sequence position", g, 17,
                ["node 1 'at' (SequenceAt", "position 'i' is not a constant", "known at compile time"]))
    g = helper.make_graph([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)], "g",
                          [helper.make_tensor_sequence_value_info("xs", F32, [2])],
                          [helper.make_tensor_value_info("y", F32, None)])
    out.append(("sequence input without --seq", g, 17, ["graph input 'xs' is a sequence", "--seq xs=N"]))
    tb = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["ts"])], "t", [],
                           [helper.make_tensor_sequence_value_info("ts", F32, None)])
    eb = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["es"])], "e", [],
                           [helper.make_tensor_sequence_value_info("es", F32, None)])
    g = helper.make_graph([helper.make_node("If", ["c"], ["s"], then_branch=tb, else_branch=eb, name="pick"),
                           helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "g",
                          [helper.make_tensor_value_info("c", BOOL, []), helper.make_tensor_value_info("x", F32, [2])],
                          [helper.make_tensor_value_info("y", F32, None)])
    out.append(("If giving sequences of different lengths", g, 17,
                ["node 0 'pick' (If", "sequences of different lengths"]))
    tb = helper.make_graph([helper.make_node("Optional", ["x"], ["to"])], "t", [],
                           [helper.make_value_info("to", helper.make_optional_type_proto(
                               helper.make_tensor_type_proto(F32, [2])))])
    eb = helper.make_graph([helper.make_node("Optional", [], ["eo"], type=helper.make_tensor_type_proto(F32, [2]))],
                           "e", [], [helper.make_value_info("eo", helper.make_optional_type_proto(
                               helper.make_tensor_type_proto(F32, [2])))])
    g = helper.make_graph([helper.make_node("If", ["c"], ["o"], then_branch=tb, else_branch=eb, name="pick"),
                           helper.make_node("OptionalHasElement", ["o"], ["y"])], "g",
                          [helper.make_tensor_value_info("c", BOOL, []), helper.make_tensor_value_info("x", F32, [2])],
                          [helper.make_tensor_value_info("y", BOOL, None)])
    out.append(("If giving an optional with and without a value", g, 18,
                ["node 0 'pick' (If", "an optional with a value in one branch and without one in the other"]))
    g = helper.make_graph([helper.make_node("Optional", [], ["e"], type=helper.make_tensor_type_proto(F32, [2])),
                           helper.make_node("OptionalGetElement", ["e"], ["y"], name="get")], "g",
                          [helper.make_tensor_value_info("x", F32, [2])], [helper.make_tensor_value_info("y", F32, None)])
    out.append(("OptionalGetElement of an empty optional", g, 18,
                ["node 1 'get' (OptionalGetElement", "input 'e' is an optional without a value"]))
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", F32, [2])],
                          [helper.make_tensor_value_info("y", F32, None)])
    out.append(("--none on a tensor input", g, 18, ["--none names 'x', which is not an optional graph input"],
                ["--none", "x"]))
    res = []
    for k, (label, g, opset, must, *extra) in enumerate(out):
        p = os.path.join(d, f"bad{k}.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), p)
        res.append((label, p, must, extra[0] if extra else []))
    return res


def train_loop(a):
    """One training step (--train-step --loss mse) through the unrolled loop of rnn_loop:
    the loss and the gradient of each weight against torch autograd on the TorchScript
    module itself (float32; rel-L2 1e-5)."""
    import torch
    d = pt.case_dir(a.work, "train_loop")
    path = os.path.join(d, "model.onnx")
    torch.manual_seed(1)
    mod = cell_class()(both=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(mod), (torch.randn(4, 5, 8),), path, input_names=["x"],
                          output_names=["y", "y2"], opset_version=15)
    m = onnx.load(path)
    del m.graph.output[1:]  # the loss is on y
    onnx.save(m, path)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 5, 8)).astype(np.float32)
    target = rng.standard_normal((4, 5, 16)).astype(np.float32)
    got = pt.train_step(a.pipecc, path, d, {"x": x, "labels": target}, "train_loop")
    if got is None:
        return False
    y, _ = mod(torch.tensor(x))
    loss = torch.nn.functional.mse_loss(y, torch.tensor(target))
    loss.backward()
    ref = {"loss": loss.detach().numpy()}
    for k, p in mod.named_parameters():
        ref["grad/" + k] = p.grad.numpy()
    ok, worst = pt.compare(got, ref, 1e-5, "train_loop")
    print(("ok   " if ok else "FAIL ") + f"train_loop: loss and {len(ref) - 1} gradients vs torch autograd: worst "
          f"rel-L2 {worst:.2e}")
    pt.done_with(d, ok)
    return ok


CASES = {"rnn_loop": (script_model, True), "gate_if": (script_model, True), "early_exit": (script_model, False),
         "scan9": (graph_model, False), "scan8": (graph_model, False), "nested": (graph_model, False),
         "lists": (script_model, True), "seq_graph": (graph_model, False), "optional": (script_model, True),
         "opt_break": (script_model, False), "opt_graph": (graph_model, False)}


def flat(d):
    """A sequence (a list) NAME as the tensors NAME.0, NAME.1, ... that pipelines take and
    give; an optional without a value (None) is not given."""
    out = {}
    for k, v in d.items():
        if v is None:
            continue
        if isinstance(v, list):
            out.update({f"{k}.{i}": e for i, e in enumerate(v)})
        else:
            out[k] = v
    return out


def main():
    a = pt.case_args(1e-5)
    import onnxruntime as ort
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for name, (make, microbatches) in CASES.items():
        if a.k and not re.search(a.k, name):
            continue
        d = pt.case_dir(a.work, name)
        path = os.path.join(d, "model.onnx")
        feeds = make(name, path)
        m = onnx.load(path)
        print(f"     {name}: ops {', '.join(sorted({n.op_type for n in m.graph.node}))} (opset "
              f"{m.opset_import[0].version})")
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3  # not its warnings about the shapes a loop's carried value declares
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        onames = [o.name for o in sess.get_outputs()]
        good = True
        # -g 2 -m 2 splits the batch (dim 0 of every input with one) where the model allows
        builds = [(1, []), (2, ["-m", "2"] if microbatches else ["-m", "1"])]
        for g, extra in builds:
            built = {}  # one build per set of list arguments (--seq, --none) the inputs need
            for k, f in enumerate(feeds):
                bind = ["-d", "batch=4"] if name in ("rnn_loop", "lists", "optional") else []
                bind += [a for n, v in f.items() if isinstance(v, list) for a in ("--seq", f"{n}={len(v)}")]
                nones = [a for n, v in f.items() if v is None for a in ("--none", n)]
                bind += nones
                first = tuple(bind) not in built
                if first:
                    built[tuple(bind)] = os.path.join(d, f"g{g}" + (f"-{len(built)}" if built else ""))
                out = built[tuple(bind)]
                cmd, env = pt.sim_target([a.pipecc, path, *bind, "-g", str(g), *extra, "-o", out, "-j", "1"],
                                         pt.split_env(), a.target, a.sim_lib)
                xin = os.path.join(d, f"x{k}.npz")
                save_npz(xin, flat(f))
                ref = flat(dict(zip(onames, sess.run(None, f))))
                # built by the first run that needs it; others only run it ("true" stands for pipecc)
                good &= pt.build_run_rel_l2(cmd if first else ["true"], env, out, xin, ref, a.tol,
                                            f"{name} -g {g} {' '.join(extra + nones)} inputs {k} vs onnxruntime")
        if name == "gate_if":  # --const flag=F: the If folds, one branch is compiled
            for k, f in enumerate(feeds):
                out = os.path.join(d, f"const{k}")
                cmd, env = pt.sim_target([a.pipecc, path, "--const", f"flag={f['flag']:g}", "-g", "2", "-o", out,
                                          "-j", "1"], pt.split_env(), a.target, a.sim_lib)
                xin = os.path.join(d, f"xc{k}.npz")
                save_npz(xin, {"x": f["x"]})
                ref = dict(zip(onames, sess.run(None, f)))
                good &= pt.build_run_rel_l2(cmd, env, out, xin, ref, a.tol, f"gate_if --const flag={f['flag']:g} -g 2")
                srcs = "".join(open(os.path.join(out, f)).read() for f in os.listdir(out)
                               if f.startswith("stage_") and f.endswith((".c", ".cu")))
                gemms = sorted(set(re.findall(r"Gemm '([^']*)'", srcs)))
                one = len(gemms) == 1
                print(("ok   " if one else "FAIL ") + f"gate_if --const flag={f['flag']:g}: Gemms compiled {gemms}")
                good &= one
        if name == "early_exit":
            good &= pt.one_error_line([a.pipecc, path, "-g", "2", "-m", "2", "-o", os.path.join(d, "bad")],
                                      "early_exit -m 2", "ReduceMax", "micro-batches would not add up to the batch")
        ok &= good
        pt.done_with(d, good)
    if a.target == "cpu" and (not a.k or re.search(a.k, "train_loop")):
        ok &= train_loop(a)
    if not a.k or re.search(a.k, "errors"):
        d = pt.case_dir(a.work, "errors")
        for label, p, must, extra in error_models(d):
            ok &= pt.one_error_line([a.pipecc, p, *extra, "-o", os.path.join(d, "out")], label, *must)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
