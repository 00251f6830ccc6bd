#!/usr/bin/python3
"""Check pipecc's plan.json and report.html for one model and one set of options.

What it does
    1. runs  PIPECC MODEL --shape ... --plan-only -o OUT [extra options]  twice with
       SOURCE_DATE_EPOCH set (reproducible build: no timing figures) and asserts both
       runs wrote byte-identical plan.json and report.html; runs it once more without,
       and asserts the outputs differ only in the planner's wall time (planner_ms in
       plan.json, <span id="planner-ms"> in the report);
    2. plan.json: parses, has the documented fields (passes/plan/PLANNER.md), and every node
       of the IR (PIPECC MODEL --emit=ir-json with the same bindings) is in exactly one
       stage;
    3. report.html: valid UTF-8, parsed by html.parser with every non-void element
       closed in order; contains an <svg> (the DAG, the Gantt chart); nothing is loaded
       from elsewhere (no http:// or https://, no src=, href=, url(, @import); one legend
       entry per stage, each with its own colour, and every DAG node drawn in its
       stage's colour; one DAG node per IR node; as many forward (backward) Gantt boxes
       as FWD (BWD) instructions in plan.json; the Gantt replay ends at the simulator's
       predicted_iteration_ms.
Exit status 0 when all holds, 1 on a failed check (each printed), 2 on a bad argument.

    /usr/bin/python3 tests/report/check_report.py --pipecc build/pipecc \\
        --model build/testwork/models/resnet50.onnx --shape input:32x3x224x224 \\
        --out /tmp/rep -- -g 4 --train
"""

import argparse
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
PLAN_FIELDS = ["version", "devices", "microbatches", "schedule", "stages", "bottleneck_ms", "lower_bound_ms",
               "predicted_iteration_ms", "predicted_speedup", "planner_ms"]
STAGE_FIELDS = ["id", "nodes", "devices", "replicas", "compute_ms", "comm_ms", "memory_bytes"]

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode(errors="replace"))
        raise SystemExit(f"FAIL: exit status {p.returncode}: {' '.join(cmd)}")
    return p.stdout


class Report(html.parser.HTMLParser):
    """Collects what the checks need and checks that elements nest properly."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []        # (tag, attrs)
        self.errors = []
        self.svgs = set()
        self.n_svg = 0
        self.chips = {}        # stage -> colour
        self.dag_nodes = []    # [fill, title text]
        self.gantt = {"f": 0, "b": 0}
        self.gantt_end = None
        self.planner_ms = 0
        self.in_title = None

    def _in(self, tag, **want):
        for t, a in self.stack:
            if t == tag and all(a.get(k) == v for k, v in want.items()):
                return True
        return False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._element(tag, a)
        if tag not in VOID:
            self.stack.append((tag, a))

    def handle_startendtag(self, tag, attrs):
        self._element(tag, dict(attrs))

    def _element(self, tag, a):
        cls = (a.get("class") or "").split()
        if tag == "svg":
            self.n_svg += 1
            if a.get("id"):
                self.svgs.add(a["id"])
            if a.get("id") == "gantt":
                self.gantt_end = float(a["data-end-ms"])
        if tag == "span" and "chip" in cls:
            self.chips[int(a["data-stage"])] = a["data-color"]
        if tag == "span" and a.get("id") == "planner-ms":
            self.planner_ms += 1
        if tag == "rect" and self._in("svg", id="dag") and self._in("g", **{"class": "n"}):
            self.dag_nodes.append([a.get("fill"), ""])
        if tag == "rect" and "gb" in cls:
            for k in ("f", "b"):
                if k in cls:
                    self.gantt[k] += 1
        if tag == "title" and self._in("svg", id="dag") and self.dag_nodes:
            self.in_title = self.dag_nodes[-1]

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"line {self.getpos()[0]}: </{tag}> closes "
                               f"<{self.stack[-1][0] if self.stack else 'nothing'}>")
            return
        self.stack.pop()
        if tag == "title":
            self.in_title = None

    def handle_data(self, data):
        if self.in_title is not None:
            self.in_title[1] += data


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-report-bytes", type=int, default=0, help="fail if report.html is larger")
    ap.add_argument("--forbid", action="append", default=[], help="a string report.html must not contain")
    ap.add_argument("--expect-fused", action="store_true", help="fail unless some nodes were fused")
    ap.add_argument("extra", nargs="*", help="more pipecc options (after --)")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"FAIL: no model {a.model} (the models.export fixture makes it)")
        return 1
    binds = []
    for s in a.shape:
        binds += ["--shape", s]
    cmd = [a.pipecc, a.model] + binds + ["--plan-only", "-o", a.out] + a.extra
    shutil.rmtree(a.out, ignore_errors=True)

    # 1. determinism. plan.json and the report carry the planner's wall time (planner_ms,
    # <span id="planner-ms">) except in reproducible builds (SOURCE_DATE_EPOCH set): two
    # such runs must be byte-identical; a normal run may differ from them only there.
    def outputs(env):
        run(cmd, env)
        with open(os.path.join(a.out, "plan.json"), "rb") as f:
            pj = f.read()
        with open(os.path.join(a.out, "report.html"), "rb") as f:
            rh = f.read()
        return pj, rh

    env_repro = dict(os.environ, SOURCE_DATE_EPOCH="1")
    env_plain = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    plan_r1, rep_r1 = outputs(env_repro)
    plan_r2, rep_r2 = outputs(env_repro)
    plan1, rep1 = outputs(env_plain)
    check(plan_r1 == plan_r2, "plan.json differs between two identical runs (SOURCE_DATE_EPOCH set)")
    check(rep_r1 == rep_r2, "report.html differs between two identical runs (SOURCE_DATE_EPOCH set)")
    check(json.loads(plan_r1).get("planner_ms", 0) is None, "plan.json: planner_ms not null with SOURCE_DATE_EPOCH")
    pm = json.loads(plan1).get("planner_ms")
    check(isinstance(pm, (int, float)) and pm >= 0, f"plan.json: planner_ms {pm!r}, expected a time")
    mask = re.compile(rb'(<span id="planner-ms">).*?(</span>)')
    check(len(mask.findall(rep1)) == 1, "report.html must hold exactly one <span id=\"planner-ms\">")
    check(mask.sub(rb"\1\2", rep1) == mask.sub(rb"\1\2", rep_r1),
          "report.html: a normal and a reproducible run differ beyond planner-ms")
    plan_nt = re.sub(rb'"planner_ms": [^,]*,', b'"planner_ms": null,', plan1)
    check(plan_nt == plan_r1, "plan.json: a normal and a reproducible run differ beyond planner_ms")

    # 2. plan.json
    plan = json.loads(plan1)
    for k in PLAN_FIELDS:
        check(k in plan, f"plan.json: no field {k!r}")
    check(plan.get("version") == 1, f"plan.json: version {plan.get('version')!r}, expected 1")
    check(plan.get("schedule") in ("gpipe", "1f1b"), f"plan.json: schedule {plan.get('schedule')!r}")
    # the default micro-batch count on cuda: every divisor of the batch up to 4*g tried,
    # largest first, and the one predicted fastest kept (ties: the larger); -m given: no search
    search = plan.get("microbatch_search")
    g = int(a.extra[a.extra.index("-g") + 1]) if "-g" in a.extra else 1
    m_opt = next((a.extra[i + 1] for i, o in enumerate(a.extra[:-1]) if o in ("-m", "--microbatches")), None)
    cuda = "--target" in a.extra and a.extra[a.extra.index("--target") + 1] == "cuda"
    if g > 1 and (m_opt == "auto" or (cuda and m_opt is None)):
        batch = int(a.shape[0].split(":")[1].split("x")[0])
        want = [m for m in range(4 * g, 0, -1) if batch % m == 0]
        check(isinstance(search, list) and [e.get("microbatches") for e in search] == want,
              f"plan.json: microbatch_search {search!r}, expected the counts {want}")
        ok = [(e["predicted_iteration_ms"], -e["microbatches"]) for e in search or []
              if isinstance(e.get("predicted_iteration_ms"), (int, float))]
        check(bool(ok) and plan.get("microbatches") == -min(ok)[1],
              f"plan.json: {plan.get('microbatches')} micro-batches, but the search predicts {search!r}")
        check(ok and abs(plan.get("predicted_iteration_ms", -1) - min(ok)[0]) < 1e-6,
              "plan.json: the plan's predicted iteration is not the search's prediction for its count")
    else:
        check(search is None, f"plan.json: microbatch_search {search!r} without a search")
    stages = plan.get("stages", [])
    check(len(stages) >= 1, "plan.json: no stages")
    for i, st in enumerate(stages):
        for k in STAGE_FIELDS:
            check(k in st, f"plan.json: stage {i}: no field {k!r}")
        check(st.get("id") == i, f"plan.json: stage {i} has id {st.get('id')}")
        check(len(st.get("devices", [])) == st.get("replicas"), f"plan.json: stage {i}: devices vs replicas")
    dims = []  # -d DIM=VALUE among the extra options bind symbolic dims for --emit too
    for i, o in enumerate(a.extra[:-1]):
        if o == "-d" and "=" in a.extra[i + 1]:
            dims += ["-d", a.extra[i + 1]]
    if "--train" in a.extra:  # a training plan splits the model with its loss
        dims.append("--train")
    ir = json.loads(run([a.pipecc, a.model] + binds + dims + ["--emit=ir-json"]))
    ir_names = [n["name"] for n in ir["nodes"]]
    # every IR node is in exactly one stage: as a node of the planned graph, or merged into
    # one of them by a pass (a Conv's Add/Relu, listed under "fused")
    placed = {}
    n_planned = n_fused = 0
    for st in stages:
        check(isinstance(st.get("fused"), dict), f"plan.json: stage {st.get('id')}: no fused object")
        fused = st.get("fused") if isinstance(st.get("fused"), dict) else {}
        nodes = st.get("nodes", [])
        stray = [k for k in fused if k not in nodes]
        check(not stray, f"plan.json: stage {st.get('id')}: fused into nodes not in the stage: {stray[:5]}")
        n_planned += len(nodes)
        for name in nodes + [m for v in fused.values() for m in v]:
            placed[name] = placed.get(name, 0) + 1
        n_fused += sum(len(v) for v in fused.values())
    if a.expect_fused:
        check(n_fused > 0, "plan.json: no nodes fused, expected some")
    n_placed = sum(placed.values())
    # nodes the cuda layout pass adds (passes/opt/layout.h): Transposes into and out of the
    # channels-last region, named after the value they convert (unnamed IR nodes are
    # "Op_index" in plan.json, so only the count tells)
    ir_set = set(ir_names)
    added = [k for k in placed if k not in ir_set and re.search(r"\.to_n(hwc|chw)$", k)]
    check(n_placed == len(ir_names) + len(added),
          f"plan.json: {n_placed} nodes in stages ({n_fused} of them fused, {len(added)} layout "
          f"transposes added), the IR has {len(ir_names)}")
    twice = [k for k, v in placed.items() if v > 1]
    check(not twice, f"plan.json: nodes in more than one stage: {twice[:5]}")
    missing = [n for n in ir_names if n and n not in placed]
    check(not missing, f"plan.json: IR nodes in no stage: {missing[:5]}")

    # 3. report.html
    try:
        text = rep1.decode("utf-8")
    except UnicodeDecodeError as e:
        failures.append(f"report.html is not valid UTF-8: {e}")
        text = rep1.decode("utf-8", errors="replace")
    r = Report()
    r.feed(text)
    r.close()
    check(not r.errors, f"report.html: badly nested elements: {r.errors[:5]}")
    check(not r.stack, f"report.html: unclosed elements: {[t for t, _ in r.stack][:10]}")
    check(text.lstrip().lower().startswith("<!doctype html>"), "report.html: no <!DOCTYPE html>")
    check(r.n_svg >= 2 and {"dag", "gantt"} <= r.svgs, f"report.html: svgs {sorted(r.svgs)}, want dag and gantt")
    for bad in ("http://", "https://", "src=", "href=", "url(", "@import", "<link", "<img", "<iframe"):
        check(bad not in text.lower(), f"report.html: contains {bad!r} (must be self-contained)")
    if a.max_report_bytes:
        check(len(rep1) <= a.max_report_bytes, f"report.html: {len(rep1)} bytes, more than {a.max_report_bytes}")
    for bad in a.forbid:
        check(bad not in text, f"report.html: contains {bad!r}")
    check(r.planner_ms == 1, "report.html: planner-ms element missing or repeated")
    n_stages = len(stages)
    check(sorted(r.chips) == list(range(n_stages)), f"report.html: legend has stages {sorted(r.chips)}")
    colours = [r.chips.get(k) for k in range(n_stages)]
    check(len(set(colours)) == n_stages, f"report.html: stage colours not distinct: {colours}")
    fills = {f for f, _ in r.dag_nodes}
    for k, c in enumerate(colours):
        check(c in fills, f"report.html: stage {k}'s colour {c} is on no DAG node")
    check(len(r.dag_nodes) == n_planned, f"report.html: {len(r.dag_nodes)} DAG nodes, the plan has {n_planned}")
    stage_of = {}
    for k, st in enumerate(stages):
        for name in st.get("nodes", []):
            stage_of[name] = k
    wrong = []
    for fill, title in r.dag_nodes:
        name = title.split("\n", 1)[0]
        if name in stage_of and fill != colours[stage_of[name]]:
            wrong.append(name)
    check(not wrong, f"report.html: DAG nodes not in their stage's colour: {wrong[:5]}")
    # a fused node's tooltip names what was merged into it (the search box finds them)
    title_of = {t.split("\n", 1)[0]: t for _, t in r.dag_nodes}
    unnamed = [(k, m) for st in stages for k, v in (st.get("fused") or {}).items() for m in v
               if len(m) < 150 and m not in title_of.get(k, "")]
    check(not unnamed, f"report.html: fused nodes missing from their node's tooltip: {unnamed[:3]}")
    n_fwd = sum(1 for st in stages for ins in st.get("instructions", []) if ins[0] == "FWD")
    n_bwd = sum(1 for st in stages for ins in st.get("instructions", []) if ins[0] == "BWD")
    check(n_fwd > 0, "plan.json: no FWD instructions")
    check(r.gantt["f"] == n_fwd, f"report.html: {r.gantt['f']} forward Gantt boxes, plan.json has {n_fwd} FWD")
    check(r.gantt["b"] == n_bwd, f"report.html: {r.gantt['b']} backward Gantt boxes, plan.json has {n_bwd} BWD")
    pit = plan.get("predicted_iteration_ms") or 0
    check(r.gantt_end is not None and abs(r.gantt_end - pit) <= 1e-6 + 1e-6 * abs(pit),
          f"report.html: Gantt ends at {r.gantt_end} ms, plan.json predicts {pit} ms")

    name = os.path.basename(a.model)
    if failures:
        for f in failures:
            print("FAIL:", f)
        return 1
    print(f"ok: {name} {' '.join(a.extra)}: {n_stages} stages, {len(ir_names)} nodes ({n_fused} fused), {n_fwd} FWD / {n_bwd} BWD boxes, "
          f"report {len(rep1)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
