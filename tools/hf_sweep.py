#!/usr/bin/env python3
"""Exports small transformers and timm models (random weights, seed 0) through both of
PyTorch's exporters (TorchScript: dynamo=False; torch.export: dynamo=True) with a dynamic
batch axis, compiles each with pipecc at batch 4 and -g 2 -m 4, runs it, and compares
every output with onnxruntime (rel-L2 <= 1e-4), and compiles it again at -g 1 with the same
micro-batches, whose outputs must be bitwise those of -g 2. Prints one line per export and a table:
whether it compiled, its micro-batch count (pipecc's plan.json) and its error. An export
the exporter itself fails, or onnxruntime cannot run, is listed but not counted; the exit
status is 0 when every other one compiles and matches.

Needs torch 2.x, transformers and timm (a venv: `pip install torch transformers timm
onnxscript onnx onnxruntime`); not part of the suite, which has no torch 2.x.

    V/bin/python tools/hf_sweep.py --pipecc build/pipecc --work /tmp/sweep [--models bert,vit]
        [--exporters torchscript,dynamo] [--opset 18] [--markdown]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 16
BATCH = 4
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            vocab_size=256, max_position_embeddings=64)


def hf_text(cls_name, model_name="AutoModel", **kw):
    """A text model of transformers' class cls_name (a config class) taking input_ids and
    attention_mask."""
    def make():
        import transformers
        cfg = getattr(transformers, cls_name)(**kw)
        auto = getattr(transformers, model_name)
        return (auto.from_config(cfg) if model_name.startswith("Auto") else auto(cfg)), "text"
    return make


def timm_model(name):
    def make():
        import timm
        return timm.create_model(name, pretrained=False, num_classes=10), "image"
    return make


def hf_image(cls_name, model_name, **kw):
    def make():
        import transformers
        cfg = getattr(transformers, cls_name)(**kw)
        return getattr(transformers, model_name)(cfg), "image"
    return make


MODELS = {
    "bert": hf_text("BertConfig", **TINY),
    "roberta": hf_text("RobertaConfig", **dict(TINY, max_position_embeddings=80)),
    "distilbert": hf_text("DistilBertConfig", dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=256,
                          max_position_embeddings=64),
    "modernbert": hf_text("ModernBertConfig", **dict(TINY, global_attn_every_n_layers=2, local_attention=8, pad_token_id=0,
                                                     bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)),
    "deberta_v2": hf_text("DebertaV2Config", **TINY),
    "llama": hf_text("LlamaConfig", "AutoModelForCausalLM", **dict(TINY, num_key_value_heads=2)),
    "qwen2": hf_text("Qwen2Config", "AutoModelForCausalLM", **dict(TINY, num_key_value_heads=2)),
    "t5_encoder": hf_text("T5Config", "T5EncoderModel", d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                          vocab_size=256),
    "bart": hf_text("BartConfig", d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=256,
                    max_position_embeddings=64),
    "clip_text": hf_text("CLIPTextConfig", "CLIPTextModel", **dict(TINY, max_position_embeddings=64)),
    "vit": hf_image("ViTConfig", "ViTModel", **dict(TINY, image_size=32, patch_size=8)),
    "segformer": hf_image("SegformerConfig", "SegformerForSemanticSegmentation", image_size=32,
                          hidden_sizes=[16, 32, 48, 64], num_encoder_blocks=4, depths=[1, 1, 1, 1],
                          num_attention_heads=[1, 2, 2, 4], decoder_hidden_size=32, num_labels=4),
    "timm_resnet18": timm_model("resnet18"),
    "timm_convnext_atto": timm_model("convnext_atto"),
    "timm_efficientnet_b0": timm_model("efficientnet_b0"),
    "timm_vit_tiny": timm_model("vit_tiny_patch16_224"),
    "timm_mobilenetv3": timm_model("mobilenetv3_small_100"),
}
IMAGE_SIZE = {"vit": 32, "segformer": 32}



def export(name, exporter, path, opset):
    import torch
    torch.manual_seed(0)
    model, kind = MODELS[name]()
    model.eval()
    if kind == "text":
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, ids, mask):
                o = self.m(input_ids=ids, attention_mask=mask)
                return o.logits if hasattr(o, "logits") else o.last_hidden_state
        args = (torch.randint(0, 256, (2, SEQ)), torch.ones(2, SEQ, dtype=torch.int64))
        names = ["input_ids", "attention_mask"]
        dyn = {"ids": {0: torch.export.Dim("batch")}, "mask": {0: torch.export.Dim("batch")}}
    else:
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, x):
                o = self.m(x)
                if hasattr(o, "logits"):
                    return o.logits
                return o.last_hidden_state if hasattr(o, "last_hidden_state") else o
        s = IMAGE_SIZE.get(name, 224)
        args = (torch.randn(2, 3, s, s),)
        names = ["input"]
        dyn = {"x": {0: torch.export.Dim("batch")}}
    w = M().eval()
    if exporter == "dynamo":
        torch.onnx.export(w, args, path, dynamo=True, opset_version=opset, input_names=names,
                          output_names=["out"], dynamic_shapes=dyn, external_data=False)
    else:
        torch.onnx.export(w, args, path, dynamo=False, opset_version=opset, input_names=names,
                          output_names=["out"], dynamic_axes={n: {0: "batch"} for n in names})
    return names, args


def feeds_for(names, args):
    rng = np.random.default_rng(0)
    f = {}
    for n, a in zip(names, args):
        shape = [BATCH] + list(a.shape[1:])
        if n == "input_ids":
            f[n] = rng.integers(0, 256, shape).astype(np.int64)
        elif n == "attention_mask":
            m = np.ones(shape, np.int64)
            for r in range(shape[0]):
                m[r, :r] = 0
            f[n] = m
        else:
            f[n] = rng.standard_normal(shape).astype(np.float32)
    return f


def run_one(a, name, exporter):
    import onnxruntime as ort
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from npzio import save_npz
    d = os.path.join(a.work, f"{name}_{exporter}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    row = {"model": name, "exporter": exporter, "compiled": False, "microbatches": None, "rel_l2": None, "note": ""}
    t = time.time()
    try:
        names, args = export(name, exporter, path, a.opset)
    except Exception as e:  # an exporter failure is the exporter's, not pipecc's
        row["note"] = "export failed: " + str(e).strip().splitlines()[0][:120]
        return row
    feeds = feeds_for(names, args)
    xin = os.path.join(d, "x.npz")
    save_npz(xin, feeds)
    try:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    except Exception as e:
        row["note"] = "onnxruntime failed: " + str(e).strip().splitlines()[0][:120]
        return row
    out = os.path.join(d, "g2")
    cmd = [a.pipecc, path, "-g", "2", "-m", str(BATCH), "--no-replicate", "-o", out, "-j", "2"]
    for k, v in feeds.items():
        cmd += ["--shape", f"{k}:{'x'.join(map(str, v.shape))}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PIPECC_COSTS="model"))
    if r.returncode:
        row["note"] = "pipecc: " + (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1][:200]
        return row
    row["compiled"] = True
    with open(os.path.join(out, "plan.json")) as f:
        row["microbatches"] = json.load(f)["microbatches"]
    notes = [ln for ln in r.stderr.splitlines() if "one micro-batch" in ln]
    if notes:
        row["note"] = notes[0].strip()[:200]
    r2 = subprocess.run([os.path.join(out, "pipeline"), "--input", xin, "--output", os.path.join(out, "y.npz")],
                        capture_output=True, text=True)
    if r2.returncode:
        row["note"] = "pipeline: " + r2.stderr.strip()[-200:]
        return row
    got = dict(np.load(os.path.join(out, "y.npz")))
    errs = []
    for k, v in ref.items():
        g = got.get(k)
        if g is None or g.shape != v.shape:
            errs.append(float("inf"))
            continue
        v64, g64 = v.astype(np.float64), g.astype(np.float64)
        errs.append(float(np.linalg.norm(g64 - v64) / max(np.linalg.norm(v64), 1e-30)))
    row["rel_l2"] = max(errs)
    # the same micro-batches on one stage: bitwise the same outputs
    out1 = os.path.join(d, "g1")
    cmd1 = [a.pipecc, path, "-g", "1", "-m", str(row["microbatches"]), "-o", out1, "-j", "2"] + cmd[cmd.index("-j") + 2:]
    r1 = subprocess.run(cmd1, capture_output=True, text=True, env=dict(os.environ, PIPECC_COSTS="model"))
    if not r1.returncode:
        r1 = subprocess.run([os.path.join(out1, "pipeline"), "--input", xin, "--output", os.path.join(out1, "y.npz")],
                            capture_output=True, text=True)
    if r1.returncode:
        row["note"] = "g = 1: " + (r1.stderr.strip().splitlines() or ["exit %d" % r1.returncode])[-1][:200]
    else:
        got1 = dict(np.load(os.path.join(out1, "y.npz")))
        row["bitwise_g"] = sorted(got1) == sorted(got) and all(got1[k].tobytes() == got[k].tobytes() for k in got)
    row["seconds"] = round(time.time() - t, 1)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipecc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="all")
    ap.add_argument("--exporters", default="torchscript,dynamo")
    ap.add_argument("--opset", type=int, default=18)
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    import torch
    names = list(MODELS) if a.models == "all" else a.models.split(",")
    rows = []
    for n in names:
        for e in a.exporters.split(","):
            row = run_one(a, n, e)
            ok = row["compiled"] and row["rel_l2"] is not None and row["rel_l2"] <= 1e-4 and row.get("bitwise_g")
            row["ok"] = bool(ok)
            print(f"{'ok  ' if ok else 'FAIL'} {n:22s} {e:11s} m={row['microbatches']} "
                  f"rel-L2 {row['rel_l2'] if row['rel_l2'] is None else '%.1e' % row['rel_l2']} "
                  f"g1=g2 {row.get('bitwise_g')} {row['note']}", flush=True)
            rows.append(row)
    exported = [r for r in rows if not r["note"].startswith(("export failed", "onnxruntime failed"))]
    good = sum(r["ok"] for r in exported)
    multi = sum(r["ok"] and (r["microbatches"] or 0) >= 2 for r in exported)
    print(f"hf_sweep: torch {torch.__version__}, opset {a.opset}: {len(exported)} of {len(rows)} exports written "
          f"and run by onnxruntime; {good} of those compile, match onnxruntime and give the same bits at g = 1 "
          f"and 2, {multi} of them with 2 or more micro-batches")
    if a.markdown:
        print("| model | exporter | compiles | micro-batches | rel-L2 | g = 1 bits = g = 2 | note |\n"
              "|---|---|---|---|---|---|---|")
        for r in rows:
            rl = "" if r["rel_l2"] is None else f"{r['rel_l2']:.1e}"
            print(f"| {r['model']} | {r['exporter']} | {'yes' if r['compiled'] else 'no'} | "
                  f"{r['microbatches'] or ''} | {rl} | {'yes' if r.get('bitwise_g') else 'no'} | {r['note']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if good == len(exported) else 1


if __name__ == "__main__":
    sys.exit(main())
