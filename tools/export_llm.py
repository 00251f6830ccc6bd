#!/usr/bin/env python3
"""Exports tiny Llama- and Qwen2-style language models (random weights, seed 0) with
today's PyTorch exporter (torch.onnx.export(dynamo=True)) at default-domain opset 23,
where scaled-dot-product attention becomes ONNX Attention and the RMS norms
RMSNormalization. Two forms of each model, both with a dynamic batch axis:

  NAME_prefill.onnx  input_ids [B, S] and attention_mask [B, S] (padding, 0 or 1) in,
                     logits [B, S, V] out: a causal mask combined with the padding mask;
  NAME_decode.onnx   one new token per sequence: input_ids [B, 1], attention_mask
                     [B, P + 1] and the past keys and values of every layer
                     (past_key_L, past_value_L: [B, KV heads, P, head dim]) in; logits and
                     the present keys and values (present_key_L, present_value_L) out.

The files it writes are committed as fixtures under tests/models/llm/ (each well under
2 MB; weights inside the file), so the tests need neither torch 2.x nor transformers. To
write them again:

    python3 -m venv V && V/bin/pip install torch transformers onnxscript onnx
    V/bin/python tools/export_llm.py --out tests/models/llm

tests/models/llm_check.py runs them against onnxruntime.
"""
import argparse
import os
import sys

PAST = 7      # the decode form's past length
HEAD_DIM = 16


def configs():
    from transformers import LlamaConfig, Qwen2Config
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return {"llama_tiny": (LlamaConfig, common), "qwen2_tiny": (Qwen2Config, common)}


def export(name, cfg_cls, kw, out):
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache
    torch.manual_seed(0)
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg).eval()
    layers = cfg.num_hidden_layers
    kv_heads = cfg.num_key_value_heads
    batch = torch.export.Dim("batch")

    class Prefill(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask, use_cache=False).logits

    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    path = os.path.join(out, f"{name}_prefill.onnx")
    torch.onnx.export(Prefill(), (ids, mask), path, dynamo=True, opset_version=23,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      dynamic_shapes={"ids": {0: batch}, "mask": {0: batch}}, external_data=False)
    print(f"export_llm: wrote {path}")

    class Decode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, mask, past):
            cache = DynamicCache(config=cfg)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            o = self.m(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
            outs = [o.logits]
            for i in range(layers):
                outs += [o.past_key_values.layers[i].keys, o.past_key_values.layers[i].values]
            return tuple(outs)

    ids = torch.randint(0, cfg.vocab_size, (2, 1))
    mask = torch.ones(2, PAST + 1, dtype=torch.int64)
    past = tuple(torch.randn(2, kv_heads, PAST, HEAD_DIM) for _ in range(2 * layers))
    names = [f"past_{k}_{i}" for i in range(layers) for k in ("key", "value")]
    path = os.path.join(out, f"{name}_decode.onnx")
    torch.onnx.export(Decode(), (ids, mask, past), path, dynamo=True, opset_version=23,
                      input_names=["input_ids", "attention_mask"] + names,
                      output_names=["logits"] + [n.replace("past", "present") for n in names],
                      dynamic_shapes={"ids": {0: batch}, "mask": {0: batch},
                                      "past": tuple({0: batch} for _ in names)},
                      external_data=False)
    print(f"export_llm: wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the folder to write NAME_prefill.onnx and NAME_decode.onnx to")
    ap.add_argument("--models", default="all", help="comma-separated names (llama_tiny, qwen2_tiny) or all")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"export_llm: needs torch 2.x and transformers ({e})", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    for name, (cls, kw) in configs().items():
        if a.models == "all" or name in a.models.split(","):
            export(name, cls, kw, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
