#!/usr/bin/python3
"""cuda target, ONNX backend node tests of the ops with runtime kernels of their own
(FAMILIES below: ConvTranspose, the gathers and scatters, ArgMax/ArgMin, TopK, CumSum, CumProd,
Trilu, DepthToSpace/SpaceToDepth, OneHot, Range, Resize/Upsample, LRN, RNN/GRU/LSTM), and
the models of our own in the same layout (EXTRA: tests/lib/extra_models.py, expected
outputs from onnxruntime) for what the node tests leave out. The cpu target's node tests
(tests/cpu/node_tests.py) run those too.

    node_tests_cuda.py build --pipecc build/pipecc --work /tmp/w [--jobs 2] [-k PATTERN]
        No GPU needed. Every node test of those ops whose ops are all in ir/ops.def, less
        the cpu target's expected failures (tests/cpu/node_xfail.txt: features neither
        target has), is emitted with `pipecc --target cuda --emit-only` (one stage, one
        micro-batch); pipecc must exit 0. Then each family's stage sources are compiled
        by nvcc for sm_80 and sm_90 as ONE translation unit (every stage_0.cu inside a
        namespace of its own, its descriptor renamed), the device runtime once, and all
        of it linked into one program, so a runtime function that a stage calls but the
        runtime lacks fails too. Warnings fail the run. A second emit of every test
        must give the same stage source (deterministic output), and some stages must
        take a given path (EXPECT_CALLS: the MaxPool gradient's gather, the cropped
        ConvTranspose, ...).

    node_tests_cuda.py run --pipecc build/pipecc --work /tmp/w [--jobs 2] [-k PATTERN] [--sim LIB] [--all]
                      [--shard K/N]
        Needs a GPU (exit 77 = skipped when /dev/nvidia0 is missing or nvidia-smi fails),
        or --sim LIB: the CUDA simulator (tests/cuda/sim; its nvcc, this libcudasim.a):
        emits every selected test (--no-tf32), builds them 48 to a program (their stages in
        one translation unit, each in a namespace of its own; their pipeline descriptions
        in another, the test picked by the program's first argument; the runtime object
        compiled once and shared; a chunk that fails to build is built test by test so
        the failure names its test), runs each on test_data_set_0 and compares with the
        expected outputs as the cpu target's node tests do (floats: rtol 1e-4, atol 1e-5;
        others exact; --criterion onnx: the ONNX runner's check, node_tests.py's). --all:
        every node test whose ops are in ir/ops.def (less the cpu target's expected
        failures), not only those of FAMILIES: element-wise chains,
        pooling, normalisation, reductions, Gemm/MatMul, Conv, ... (about 1300 tests; 2
        to 4 minutes on 2 cores on the simulator; built one by one, 6 to 15). --shard K/N:
        every N-th of the selected tests from the K-th on.

Exit 0 pass, 1 fail, 77 skipped.
"""

import argparse
import concurrent.futures as cf
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "cpu"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import extra_models  # noqa: E402  (write_extra: the EXTRA models)
import pipecc_test as pt  # noqa: E402  (done_with)
import node_tests as cpu_nodes  # noqa: E402  (read_pb, bake_shape_inputs, supported_ops, load_xfail)
from npzio import save_npz  # noqa: E402
from node_data import node_data_dir  # noqa: E402

SKIP = 77

# family -> the ops it covers; a test belongs to the first family one of its nodes is in
FAMILIES = {
    "convtranspose": {"ConvTranspose"},
    "gather_scatter": {"GatherElements", "GatherND", "ScatterElements", "ScatterND"},
    "argmax_topk": {"ArgMax", "ArgMin", "TopK"},
    "cumsum_trilu": {"CumSum", "CumProd", "Trilu"},
    "layout": {"DepthToSpace", "SpaceToDepth", "OneHot", "Range"},
    "resize": {"Resize", "Upsample"},
    "lrn": {"LRN"},
    "recurrent": {"RNN", "GRU", "LSTM"},
    "sample": {"GridSample", "Det"},
    "vision": {"RoiAlign", "DeformConv"},
    "lowered": {"CenterCropPad", "MaxUnpool", "ReverseSequence", "Col2Im", "Compress", "AffineGrid", "Scatter"},
}
# families of the EXTRA models only (the node tests of these ops run in every model test)
EXTRA_FAMILIES = {
    "reduce": {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceSumSquare", "ReduceLogSumExp"},
}


# calls an emitted stage must contain (the path the model is there to exercise)
EXPECT_CALLS = {
    "extra_maxpool_grad": "pk_maxpool_scatter(",
    "extra_scatter_elements_add_large": "pk_scatter(",
    "extra_convtranspose_group_asym": "unpadded into scratch, then cropped",
    "test_convtranspose_autopad_same": "unpadded into scratch, then cropped",
    "test_convtranspose": "pk_conv(",
    "extra_range_large": "pk_range(",
}


def have_gpu():
    if not os.path.exists("/dev/nvidia0"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def select_tests(pattern, work, every=False, data=None, xfail_paths=None, extra=True, sample=0):
    """[(family, name, test dir)] of the node tests of FAMILIES, sorted by name, then EXTRA;
    every: also the node tests of all the other ops (family 'other'). data: the node
    tests' folder (default tests/lib/node_data.py's); the tests named in the lists
    xfail_paths (default the cpu target's node_xfail.txt) are left out; sample: only the
    first N tests of each set of op types (node_tests.py --sample)."""
    data = data or node_data_dir()
    if not os.path.isdir(data):
        sys.exit(f"node_tests_cuda.py: no ONNX node test data at {data} (tools/install_deps.sh writes it; or "
                 "point PIPECC_ONNX_NODE_DATA at a copy of onnx/backend/test/data/node)")
    ops = cpu_nodes.supported_ops()
    xfail = {}
    for path in xfail_paths or [os.path.join(ROOT, "tests", "cpu", "node_xfail.txt")]:
        xfail.update(cpu_nodes.load_xfail(path))
    out = []
    per_set = {}
    cands = [(n, os.path.join(data, n)) for n in sorted(os.listdir(data))]
    cands += extra_models.write_extra(work) if extra else []
    for name, tdir in cands:
        if (pattern and not re.search(pattern, name)) or name in xfail:
            continue
        try:
            m = onnx.load(os.path.join(tdir, "model.onnx"), load_external_data=False)
        except Exception:  # noqa: BLE001
            continue
        types = {n.op_type for n in m.graph.node}
        if not m.graph.node or not all((n.domain in ("", "ai.onnx") and n.op_type in ops and
                                        n.op_type not in cpu_nodes.PREVIEW_OPS) or
                                       (n.domain == "ai.onnx.preview" and n.op_type in cpu_nodes.PREVIEW_OPS)
                                       for n in m.graph.node):
            continue
        if sample and not name.startswith("extra_"):
            key = frozenset(types)
            per_set[key] = per_set.get(key, 0) + 1
            if per_set[key] > sample:
                continue
        fams = dict(FAMILIES, **(EXTRA_FAMILIES if name.startswith("extra_") else {}))
        fam = next((f for f, fops in fams.items() if types & fops), "other" if every else None)
        if fam:
            out.append((fam, name, tdir))
    return out


def prepare(name, tdir, work):
    """The test's model (shape inputs baked into initializers), feeds, expected outputs,
    folder and pipecc's --seq arguments (sequences: tests/cpu/node_tests.py read_data)."""
    m = onnx.load(os.path.join(tdir, "model.onnx"))
    ds = os.path.join(tdir, "test_data_set_0")
    feeds, expect, seq_len = cpu_nodes.read_data(m, ds)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    model = os.path.join(tdir, "model.onnx")
    if cpu_nodes.bake_shape_inputs(m, feeds):
        model = os.path.join(d, "model.onnx")
        onnx.save(m, model)
    return model, feeds, expect, d, cpu_nodes.list_args(seq_len)


def pipecc_cmd(pipecc, model, feeds, out_dir, extra=()):
    cmd = [pipecc, model, "--target", "cuda", "-g", "1", "-m", "1", "-o", out_dir, "-j", "1"] + list(extra)
    for k, v in feeds.items():
        if v.ndim:  # a scalar input is declared so in the model
            cmd += ["--shape", f"{k}:" + "x".join(str(s) for s in v.shape)]
    return cmd


def emit(args):
    """pipecc --emit-only twice; returns (name, error or '', stage source path)."""
    fam, name, tdir, pipecc, work = args
    try:
        model, feeds, _, d, seqs = prepare(name, tdir, work)
        srcs = []
        for k in range(2):
            out = os.path.join(d, f"emit{k}")
            shutil.rmtree(out, ignore_errors=True)
            r = subprocess.run(pipecc_cmd(pipecc, model, feeds, out, ["--emit-only"] + seqs), capture_output=True,
                               text=True, env=dict(os.environ, PIPECC_SPLIT="even"))
            if r.returncode:
                msg = [l for l in r.stderr.splitlines() if "cuda target" in l or "error" in l] or r.stderr.splitlines()[-2:]
                return name, f"pipecc exit {r.returncode}: " + (msg[0][:200] if msg else ""), None
            srcs.append(open(os.path.join(out, "stage_0.cu"), "rb").read().split(b"\n", 4)[-1])
        if srcs[0] != srcs[1]:
            return name, "two emits differ", None
        if name in EXPECT_CALLS and EXPECT_CALLS[name].encode() not in srcs[0]:
            return name, f"the stage lacks '{EXPECT_CALLS[name]}'", None
        return name, "", os.path.join(d, "emit0")
    except Exception as e:  # noqa: BLE001
        return name, f"test harness: {type(e).__name__}: {str(e)[:160]}", None


def make_vars(build_dir):
    """NVCC, CUDA_ARCH, NVCCFLAGS, PIPERT_INCLUDE, PIPERT_LIB, LIBS of an emitted Makefile."""
    v = {}
    for line in open(os.path.join(build_dir, "Makefile")):
        m = re.match(r"^(CUDA_HOME|NVCC|CUDA_ARCH|NVCCFLAGS|PIPERT_INCLUDE|PIPERT_LIB|LIBS) \??= ?(.*)$", line.rstrip())
        if m:
            v[m.group(1)] = m.group(2)
    if os.environ.get("NVCC"):  # the Makefile's NVCC ?= takes it too
        v["NVCC"] = os.environ["NVCC"]
    for _ in range(3):
        for k in v:
            v[k] = re.sub(r"\$\((\w+)\)", lambda mm: v.get(mm.group(1), ""), v[k])
    return v


def nvcc_run(cmd, label):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, shell=True)
    warn = [l for l in (r.stdout + r.stderr).splitlines() if re.search(r"warning", l, re.I)]
    if r.returncode:
        return f"{label}: nvcc failed:\n" + (r.stdout + r.stderr)[-6000:], time.time() - t
    if warn:
        return f"{label}: warnings:\n" + "\n".join(warn[:20]), time.time() - t
    return "", time.time() - t


def family_unit(work, fam, dirs, what="family"):
    """One .cu that includes every stage of the family (or chunk), each in its own namespace."""
    path = os.path.join(work, f"{what}_{fam}.cu")
    with open(path, "w") as f:
        f.write(f"/* node tests of {what} {fam}: every emitted stage_0.cu in a namespace of its own */\n")
        f.write('#include "pipecc_cuda.h"\n')
        for name, d in dirs:
            ident = re.sub(r"\W", "_", name)
            f.write(f"\n#undef SCRATCH_OFF\n#define pipecc_stage_0 pipecc_stage_{ident}\n")
            f.write(f"namespace {ident} {{\n#include \"{os.path.join(d, 'stage_0.cu')}\"\n}}\n#undef pipecc_stage_0\n")
    return path


def build_mode(a, tests):
    t0 = time.time()
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        res = list(ex.map(emit, [(fam, name, tdir, a.pipecc, a.work) for fam, name, tdir in tests]))
    fam_of = {name: fam for fam, name, _ in tests}
    bad = [f"FAIL  {name}: {why}" for name, why, _ in res if why]
    dirs = {}
    for name, why, d in res:
        if not why:
            dirs.setdefault(fam_of[name], []).append((name, d))
    print(f"emitted {sum(len(v) for v in dirs.values())} of {len(tests)} node tests in {time.time() - t0:.0f} s")
    if not dirs:
        for line in bad:
            print(line)
        return 1
    first = next(iter(dirs.values()))[0][1]
    v = make_vars(first)
    base = f"{v['NVCC']} {v['NVCCFLAGS']} -I{first} -I{v['PIPERT_INCLUDE']}"
    jobs = [(f"{base} -c -o {os.path.join(a.work, 'rt.o')} {os.path.join(first, 'pipecc_cuda_rt.cu')}", "runtime")]
    for fam in sorted(dirs):
        src = family_unit(a.work, fam, dirs[fam])
        jobs.append((f"{base} -c -o {src[:-3]}.o {src}", f"family {fam} ({len(dirs[fam])} tests)"))
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        outs = list(ex.map(lambda j: nvcc_run(*j), jobs))
    for (cmd, label), (err, dt) in zip(jobs, outs):
        print(f"nvcc {label}: {dt:.1f} s")
        if err:
            bad.append("FAIL  " + err)
    if not any(err for err, _ in outs):
        main = os.path.join(a.work, "link_main.c")
        with open(main, "w") as f:
            f.write("int main(void) { return 0; }\n")
        objs = " ".join(os.path.join(a.work, f"family_{fam}.o") for fam in sorted(dirs))
        err, dt = nvcc_run(f"{v['NVCC']} {v['CUDA_ARCH']} -o {os.path.join(a.work, 'linked')} {main} {objs} "
                           f"{os.path.join(a.work, 'rt.o')} {v['PIPERT_LIB']} {v['LIBS']}", "link")
        print(f"link: {dt:.1f} s")
        if err:
            bad.append("FAIL  " + err)
    for line in bad:
        print(line)
    for fam in sorted(dirs):
        print(f"  {fam}: {', '.join(n for n, _ in dirs[fam])}")
    ntests = sum(len(x) for x in dirs.values())
    print(f"cuda node tests (build): {len(tests)} selected, {ntests} emitted and compiled in {len(dirs)} families, "
          f"{len(bad)} failures; {time.time() - t0:.0f} s")
    return 1 if bad else 0


def run_one(args):
    """One emitted test: run it (its chunk's program, or its own pipeline made here when the
    chunk did not build) and compare."""
    fam, name, tdir, work, rt_obj, exe, criterion = args  # exe: (chunk program, the test's name there) or None
    try:
        model, feeds, expect, d, _ = prepare(name, tdir, work)
        elem = {o.name: o.type.tensor_type.elem_type for o in onnx.load(model, load_external_data=False).graph.output}
        b = os.path.join(d, "build")
        if exe is None:
            os.makedirs(os.path.join(b, "obj"), exist_ok=True)
            shutil.copy(rt_obj, os.path.join(b, "obj", "pipecc_cuda_rt.o"))  # newer than the .cu: make keeps it
            r = subprocess.run(["make", "-s", "-C", b, "pipeline"], capture_output=True, text=True)
            if r.returncode:
                return name, "make failed: " + (r.stdout + r.stderr)[-400:]
            cmd = [os.path.join(b, "pipeline")]
        else:
            cmd = [exe[0], exe[1], "--weights-dir", b]
        xin, yout = os.path.join(d, "x.npz"), os.path.join(d, "y.npz")
        save_npz(xin, feeds)
        if os.path.exists(yout):
            os.remove(yout)
        r = subprocess.run(cmd + ["--input", xin, "--output", yout], capture_output=True, text=True, timeout=600)
        if r.returncode:
            return name, f"pipeline exit {r.returncode}: " + " | ".join(r.stderr.splitlines()[-2:])
        why, _ = cpu_nodes.compare_outputs(dict(np.load(yout)), expect, elem, criterion)
        pt.done_with(d, not why)  # 1300 builds of about 4 MB each otherwise
        return name, why
    except Exception as e:  # noqa: BLE001
        return name, f"test harness: {type(e).__name__}: {str(e)[:160]}"


def emit_for_run(args):
    """run mode: pipecc --emit-only --no-tf32 for one test; (name, why or '', build folder)."""
    fam, name, tdir, pipecc, work = args
    try:
        model, feeds, _, d, seqs = prepare(name, tdir, work)
        b = os.path.join(d, "build")
        shutil.rmtree(b, ignore_errors=True)
        r = subprocess.run(pipecc_cmd(pipecc, model, feeds, b, ["--emit-only", "--no-tf32"] + seqs),
                           capture_output=True, text=True, env=dict(os.environ, PIPECC_SPLIT="even"))
        if r.returncode:
            return name, f"pipecc exit {r.returncode}: " + " | ".join(r.stderr.splitlines()[-2:]), b
        return name, "", b
    except Exception as e:  # noqa: BLE001
        return name, f"test harness: {type(e).__name__}: {str(e)[:160]}", None


def chunk_program(work, k, members, v, rt_obj):
    """One program for a chunk of emitted tests [(name, build folder)]: their stages in one
    translation unit (each in a namespace of its own, as the build mode's families), their
    pipeline_main.c in another (each main renamed, the test picked by the first argument),
    linked once with the shared runtime object. Returns (path, '') or (None, why)."""
    unit = family_unit(work, k, members, "chunk")
    main = os.path.join(work, f"chunk_{k}_main.cu")
    with open(main, "w") as f:
        f.write(f"/* node tests, chunk {k}: every pipeline description; ./chunk_{k} NAME ARGS... runs NAME */\n")
        f.write("#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n#include \"pipert.h\"\n")
        for name, b in members:
            ident = re.sub(r"\W", "_", name)
            # C linkage for the stage descriptor the description names; main renamed per test
            f.write(f"\nnamespace m_{ident} {{\nextern \"C\" {{\n#define pipecc_stage_0 pipecc_stage_{ident}\n"
                    f"#define main pipecc_main_{ident}\n#include \"{os.path.join(b, 'pipeline_main.c')}\"\n"
                    f"#undef main\n#undef pipecc_stage_0\n}}\n}}\n")
        f.write("\nstatic const struct { const char *name; int (*run)(int, char **); } tests[] = {\n")
        for name, _ in members:
            ident = re.sub(r"\W", "_", name)
            f.write(f"  {{\"{name}\", m_{ident}::pipecc_main_{ident}}},\n")
        f.write("};\n\nint main(int argc, char **argv) {\n"
                "  for (size_t i = 0; argc > 1 && i < sizeof tests / sizeof tests[0]; i++)\n"
                "    if (!strcmp(argv[1], tests[i].name)) {\n"
                "      argv[1] = argv[0];\n"
                "      return tests[i].run(argc - 1, argv + 1);\n"
                "    }\n"
                "  fprintf(stderr, \"usage: %s TEST ARGS...: TEST one of this chunk's node tests\\n\", argv[0]);\n"
                "  return 2;\n}\n")
    first = members[0][1]
    base = f"{v['NVCC']} {v['NVCCFLAGS']} -I{first} -I{v['PIPERT_INCLUDE']}"
    exe = os.path.join(work, f"chunk_{k}")
    for cmd in (f"{base} -c -o {unit[:-3]}.o {unit}", f"{base} -c -o {main[:-3]}.o {main}",
                f"{v['NVCC']} {v['CUDA_ARCH']} -o {exe} {unit[:-3]}.o {main[:-3]}.o {rt_obj} {v['PIPERT_LIB']} "
                f"{v['LIBS']}"):
        r = subprocess.run(cmd, capture_output=True, text=True, shell=True)
        if r.returncode:
            return None, (r.stdout + r.stderr)[-2000:]
    return exe, ""


CHUNK = 48  # tests per program in run mode


def run_mode(a, tests):
    if not a.sim and not have_gpu():
        print("SKIP cuda node tests: no GPU (/dev/nvidia0 missing or nvidia-smi failed)")
        return SKIP
    t0 = time.time()
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        emitted = list(ex.map(emit_for_run, [(f, n, t, a.pipecc, a.work) for f, n, t in tests]))
    res = [(n, why) for n, why, _ in emitted if why]
    good = [(n, b) for n, why, b in emitted if not why]
    if not good:
        for n, why in res:
            print(f"FAIL  {n}: {why}")
        return 1
    # the runtime object once, from the first emitted copy
    v = make_vars(good[0][1])
    rt_obj = os.path.join(a.work, "rt.o")
    err, dt = nvcc_run(f"{v['NVCC']} {v['NVCCFLAGS']} -I{good[0][1]} -I{v['PIPERT_INCLUDE']} -c -o {rt_obj} "
                       f"{os.path.join(good[0][1], 'pipecc_cuda_rt.cu')}", "runtime")
    if err:
        print("FAIL  " + err)
        return 1
    # the tests in chunks of CHUNK, one program each (compiled and linked once, not per test);
    # a chunk that does not build runs its tests one by one, so the failure names its test
    chunks = [good[i:i + CHUNK] for i in range(0, len(good), CHUNK)]
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        built = list(ex.map(lambda kc: chunk_program(a.work, kc[0], kc[1], v, rt_obj), enumerate(chunks)))
    by_name = {n: (f, t) for f, n, t in tests}
    jobs = []
    for members, (exe, why) in zip(chunks, built):
        if exe is None:
            print(f"chunk of {len(members)} ({members[0][0]} .. {members[-1][0]}) did not build; its tests one by one:\n"
                  + why[-600:])
        for n, _ in members:
            f, t = by_name[n]
            jobs.append((f, n, t, a.work, rt_obj, (exe, n) if exe else None, a.criterion))
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        res += list(ex.map(run_one, jobs))
    bad = [f"FAIL  {n}: {why}" for n, why in res if why]
    for line in bad:
        print(line)
    nbuilt = sum(1 for exe, _ in built if exe)
    if not bad:  # the chunks' sources, objects and programs (tens of MB)
        for k in range(len(chunks)):
            for suffix in (".cu", ".o", "_main.cu", "_main.o", ""):
                p = os.path.join(a.work, f"chunk_{k}{suffix}")
                if os.path.exists(p):
                    os.remove(p)
    print(f"cuda node tests (run): {len(tests)} run, {len(tests) - len(bad)} passed, {len(bad)} failed "
          f"({nbuilt} of {len(chunks)} programs of up to {CHUNK} tests built at once); {time.time() - t0:.0f} s")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["build", "run"])
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-k", default=None, help="only tests whose name matches this regex")
    ap.add_argument("--all", action="store_true",
                    help="every node test whose ops are in ir/ops.def, not only those of FAMILIES")
    ap.add_argument("--shard", default=None, metavar="K/N",
                    help="only every N-th selected test from the K-th (1..N) on: ctest runs the simulator's "
                         "1300 tests as N tests that each finish well inside their timeout")
    ap.add_argument("--sim", default=None, metavar="LIBCUDASIM",
                    help="run: build with tests/cuda/sim/nvcc against this simulator library and run on the CPU")
    ap.add_argument("--data", default=None,
                    help="the node tests' folder (default: tests/lib/node_data.py's; tools/gen_node_tests.py "
                         "writes those of opsets 22 to 28)")
    ap.add_argument("--xfail", action="append", default=None,
                    help="leave out the tests this list names (default: tests/cpu/node_xfail.txt); repeatable")
    ap.add_argument("--no-extra", action="store_true", help="leave out the models of our own")
    ap.add_argument("--criterion", choices=("pipecc", "onnx"), default="pipecc",
                    help="the comparison (tests/cpu/node_tests.py --criterion)")
    ap.add_argument("--sample", type=int, default=0, metavar="N",
                    help="only the first N node tests (by name) of each set of op types")
    a = ap.parse_args()
    if a.sim:
        import run_cuda
        run_cuda.use_sim(a.sim)
    a.pipecc = os.path.abspath(a.pipecc)
    a.work = os.path.abspath(a.work)
    os.makedirs(a.work, exist_ok=True)
    tests = select_tests(a.k, a.work, a.all, a.data, a.xfail, not a.no_extra, a.sample)
    if a.shard:
        m = re.fullmatch(r"(\d+)/(\d+)", a.shard)
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            ap.error(f"--shard {a.shard}: expected K/N with 1 <= K <= N")
        k, n = int(m.group(1)), int(m.group(2))
        tests = tests[k - 1::n]
    if not tests:
        print("no node tests selected")
        return 1
    return build_mode(a, tests) if a.mode == "build" else run_mode(a, tests)


if __name__ == "__main__":
    sys.exit(main())
