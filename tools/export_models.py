#!/usr/bin/python3
"""Export the pipecc test models to ONNX (tests and tools only; never part of the compiler).

What it does
    Builds every test model from torch.nn / torchvision with random weights (fixed seed,
    weights=None: nothing is ever downloaded) and exports it with torch.onnx to
    DIR/NAME.onnx. A file that already exists and is newer than this script is kept
    (cache); exports go to NAME.onnx.tmp first and are renamed, so an interrupted run
    never leaves a half-written model behind.

How to run (always with Debian's python, which has torch 1.13 / torchvision 0.14):
    /usr/bin/python3 tools/export_models.py --out build/testwork/models            # all
    /usr/bin/python3 tools/export_models.py --out DIR --models resnet18,gpt
    /usr/bin/python3 tools/export_models.py --list           # names, opsets, inputs
    /usr/bin/python3 tools/export_models.py --out DIR --ops  # op types in DIR: the model
                          # opsets they appear under and the ONNX schema versions that apply
    Options: --force (re-export even if cached), --no-check (skip onnx.checker).

Models (input "input" float32 [batch,3,H,W] with symbolic dim "batch", output "output",
eval mode, opset 13 unless listed below):
    vgg16 resnet18 resnet50 resnet101 alexnet resnext50_32x4d resnext101_32x8d
    inception_v3 (299x299; aux_logits=False, init_weights=False, He-initialised Convs) densenet121
    squeezenet1_0 mobilenet_v2 googlenet (aux_logits=False, init_weights=False, He-initialised Convs)
  Opsets deliberately varied so the frontend sees several:
    resnet18      opset 15
    mobilenet_v2  opset 17
    gpt           opset 14 (LayerNorm decomposes into ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add)
    bert          opset 17 (LayerNorm exported as the native LayerNormalization op)
    mha_static    opset 14 (PyTorch 2.11's exporter emits scaled_dot_product_attention for
                  nn.MultiheadAttention, which it can lower from opset 14 only)
    *_train       opset 15 (BatchNormalization's training_mode attribute exists from 14)
    all others    opset 13
  Training-mode exports (TrainingMode.TRAINING, do_constant_folding=False):
    resnet18_train, mobilenet_v2_train (keeps Dropout with training_mode=True),
    smallcnn_train. BatchNormalization carries training_mode=1 and returns the updated
    running mean/var as extra node outputs (not graph outputs).
  gpt:  input "input_ids" int64 [batch,64] (ids < 512), output "logits" float32
        [batch,64,512]; token + learned position Embedding, 2 pre-norm
        TransformerEncoderLayer(128, 4 heads, ff 512, gelu) with a causal mask, final
        LayerNorm, Linear head.
  bert: input "input_ids" int64 [batch,64] (ids < 512), output "output" float32
        [batch,2]; token + position Embedding + LayerNorm, 2 post-norm
        TransformerEncoderLayer(128, 4 heads, ff 512, gelu), first-token pooler
        Linear+Tanh, Linear(128,2) classifier. No attention-mask input.
  smallcnn: input "input" float32 [batch,1,8,8] (the 8x8 digits set), output "output"
        [batch,10]; (Conv3x3-BN-ReLU-MaxPool2) x2 + Linear.
  Fixed batch of 4 (exported without a dynamic axis, so Reshape shapes hold the batch
  size; compiling them for micro-batches exercises passes/batch.h):
    shufflenet_static  shufflenet_v2_x0_5 (channel shuffle: Reshape to [4, 2, C/2, H, W])
    mha_static         input [4,16,64]: 2 TransformerEncoderLayer(64, 4 heads, ff 128),
                       batch_first (MultiheadAttention reshapes to [16, 4*4, 16])
    batchview_static   input [4,3,3,8,8]: Conv on [B*T,3,8,8], Linear on [T*B,256],
                       then x.view(x.size(0), -1) -> output [4,18]
    lstm_static        the lstm model below (its zero initial states are constants [2, 4, 32])
    vit_static         a small torchvision VisionTransformer (32x32 images, 8x8 patches, 2
                       layers, 2 heads, width 32): the class token is a constant [4, 1, 32]
  Not part of the tests (nor of --models all); the CNNs tools/bench_cpu_vs_ort.py times
  beside the tuned set (opset 13 unless named): efficientnet_b0 (depthwise Convs, SiLU, squeeze-excitation),
  convnext_tiny (opset 17: 7x7 depthwise Convs, LayerNormalization, GELU),
  regnet_y_400mf (group Convs, squeeze-excitation), mobilenet_v3_large (HardSwish,
  squeeze-excitation), mnasnet1_0.
  lstm, gru, rnn (opset 14): input "input" float32 [batch,12,16] (batch_first), output
        "output". lstm: 2-layer nn.LSTM(16, 32) + Linear(32, 10) on the last step's output
        [batch,10]; gru: 1-layer bidirectional nn.GRU(16, 24), all steps [batch,12,48];
        rnn: 2-layer nn.RNN(16, 20, relu) with an initial state of ones, plus the last
        hidden state of both layers through a Linear(40, 10) [batch,10].
"""

import argparse
import os
import sys
import time

VOCAB = 512
SEQ = 64
D_MODEL = 128

# name -> (builder key, opset, training, input spec)
#   input spec: (input name, per-sample shape, dtype, output names)
IMG = ("input", (3, 224, 224), "float32", ["output"])
IMG299 = ("input", (3, 299, 299), "float32", ["output"])
DIGITS = ("input", (1, 8, 8), "float32", ["output"])
IDS_GPT = ("input_ids", (SEQ,), "int64", ["logits"])
IDS_BERT = ("input_ids", (SEQ,), "int64", ["output"])
SEQ_FEAT = ("input", (16, 64), "float32", ["output"])
CLIP = ("input", (3, 3, 8, 8), "float32", ["output"])
IMG32 = ("input", (3, 32, 32), "float32", ["output"])
# Exported with this fixed batch (no dynamic axis): the tracer writes x.size(0) into the
# shapes of Reshapes, which compiling for micro-batches must rewrite (passes/batch.h).
STATIC_BATCH = {"shufflenet_static": 4, "mha_static": 4, "batchview_static": 4, "lstm_static": 4,
                "vit_static": 4}
SEQ_RNN = ("input", (12, 16), "float32", ["output"])

MODELS = {
    "vgg16": ("vgg16", 13, False, IMG),
    "resnet18": ("resnet18", 15, False, IMG),
    "resnet50": ("resnet50", 13, False, IMG),
    "resnet101": ("resnet101", 13, False, IMG),
    "alexnet": ("alexnet", 13, False, IMG),
    "resnext50_32x4d": ("resnext50_32x4d", 13, False, IMG),
    "resnext101_32x8d": ("resnext101_32x8d", 13, False, IMG),
    "inception_v3": ("inception_v3", 13, False, IMG299),
    "densenet121": ("densenet121", 13, False, IMG),
    "squeezenet1_0": ("squeezenet1_0", 13, False, IMG),
    "mobilenet_v2": ("mobilenet_v2", 17, False, IMG),
    "googlenet": ("googlenet", 13, False, IMG),
    "shufflenet_static": ("shufflenet_v2_x0_5", 13, False, IMG),
    "mha_static": ("mha", 14, False, SEQ_FEAT),
    "batchview_static": ("batchview", 13, False, CLIP),
    "lstm_static": ("lstm", 14, False, SEQ_RNN),
    "vit_static": ("vit", 15, False, IMG32),
    "resnet18_train": ("resnet18", 15, True, IMG),
    "mobilenet_v2_train": ("mobilenet_v2", 15, True, IMG),
    "smallcnn": ("smallcnn", 13, False, DIGITS),
    "smallcnn_train": ("smallcnn", 15, True, DIGITS),
    "gpt": ("gpt", 14, False, IDS_GPT),
    "bert": ("bert", 17, False, IDS_BERT),
    "lstm": ("lstm", 14, False, SEQ_RNN),
    "gru": ("gru", 14, False, SEQ_RNN),
    "rnn": ("rnn", 14, False, SEQ_RNN),
    # torchvision CNNs the cpu kernels were not tuned on (tools/bench_cpu_vs_ort.py)
    "efficientnet_b0": ("efficientnet_b0", 13, False, IMG),
    "convnext_tiny": ("convnext_tiny", 17, False, IMG),
    "regnet_y_400mf": ("regnet_y_400mf", 13, False, IMG),
    "mobilenet_v3_large": ("mobilenet_v3_large", 13, False, IMG),
    "mnasnet1_0": ("mnasnet1_0", 13, False, IMG),
}
# left out of --models all (the tests' fixture): tools/bench_cpu_vs_ort.py names them
BENCH_ONLY = {"efficientnet_b0", "convnext_tiny", "regnet_y_400mf", "mobilenet_v3_large", "mnasnet1_0"}


def build_model(key):
    """Returns a freshly initialised torch.nn.Module (seed fixed by the caller)."""
    import torch
    import torch.nn as nn
    import torchvision.models as tvm

    if key in ("inception_v3", "googlenet"):
        m = getattr(tvm, key)(weights=None, aux_logits=False, init_weights=False)
        # PyTorch's default Conv init shrinks the signal by about 1/sqrt(3) a layer: after
        # these models' depth the logits are the classifier's bias alone, and a test that
        # compares them cannot see the convolutions. He init keeps the signal's scale.
        for mod in m.modules():
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(mod.weight, mode="fan_in", nonlinearity="relu")
        return m
    if hasattr(tvm, key) and key not in ("smallcnn", "gpt", "bert", "mha", "batchview", "lstm", "gru", "rnn", "vit"):
        return getattr(tvm, key)(weights=None)

    if key == "smallcnn":
        class SmallCNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.features = nn.Sequential(
                    nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                    nn.MaxPool2d(2),                                   # 8x8 -> 4x4
                    nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                    nn.MaxPool2d(2))                                   # 4x4 -> 2x2
                self.fc = nn.Linear(32 * 2 * 2, 10)

            def forward(self, x):
                return self.fc(torch.flatten(self.features(x), 1))
        return SmallCNN()

    def encoder_layer(norm_first):
        return nn.TransformerEncoderLayer(d_model=D_MODEL, nhead=4, dim_feedforward=512,
                                          dropout=0.1, activation="gelu",
                                          batch_first=True, norm_first=norm_first)

    if key == "gpt":
        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok = nn.Embedding(VOCAB, D_MODEL)
                self.pos = nn.Embedding(SEQ, D_MODEL)
                self.layers = nn.ModuleList([encoder_layer(True) for _ in range(2)])
                self.ln_f = nn.LayerNorm(D_MODEL)
                self.head = nn.Linear(D_MODEL, VOCAB)
                self.register_buffer("positions", torch.arange(SEQ).unsqueeze(0),
                                     persistent=False)
                mask = torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1)
                self.register_buffer("causal_mask", mask, persistent=False)

            def forward(self, ids):
                x = self.tok(ids) + self.pos(self.positions)
                for layer in self.layers:
                    x = layer(x, src_mask=self.causal_mask)
                return self.head(self.ln_f(x))
        return GPT()

    if key == "bert":
        class Bert(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok = nn.Embedding(VOCAB, D_MODEL)
                self.pos = nn.Embedding(SEQ, D_MODEL)
                self.ln = nn.LayerNorm(D_MODEL)
                self.layers = nn.ModuleList([encoder_layer(False) for _ in range(2)])
                self.pool = nn.Linear(D_MODEL, D_MODEL)
                self.cls = nn.Linear(D_MODEL, 2)
                self.register_buffer("positions", torch.arange(SEQ).unsqueeze(0),
                                     persistent=False)

            def forward(self, ids):
                x = self.ln(self.tok(ids) + self.pos(self.positions))
                for layer in self.layers:
                    x = layer(x)
                return self.cls(torch.tanh(self.pool(x[:, 0])))
        return Bert()

    if key == "mha":  # nn.MultiheadAttention reshapes to [T, B*heads, 16] inside
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True), 2)

    if key == "vit":
        from torchvision.models.vision_transformer import VisionTransformer
        m = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                              num_classes=10)
        nn.init.normal_(m.heads.head.weight)  # torchvision zeroes the head: the logits would be 0
        return m

    if key == "batchview":
        class BatchView(nn.Module):
            """The batch folded with time both ways round: [B*T, C, H, W] for a Conv,
            [T*B, F] for a Linear, then x.view(x.size(0), -1)."""
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3, padding=1)
                self.lin = nn.Linear(4 * 8 * 8, 6)

            def forward(self, x):
                b, t = x.shape[0], x.shape[1]
                y = torch.relu(self.conv(x.reshape(b * t, 3, 8, 8))).reshape(b, t, 4 * 8 * 8)
                z = self.lin(y.transpose(0, 1).reshape(t * b, 4 * 8 * 8)).reshape(t, b, 6).transpose(0, 1)
                return torch.tanh(z.reshape(z.size(0), -1))
        return BatchView()

    if key == "lstm":
        class LSTMNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.LSTM(16, 32, num_layers=2, batch_first=True)
                self.fc = nn.Linear(32, 10)

            def forward(self, x):
                y, _ = self.rnn(x)
                return self.fc(y[:, -1])
        return LSTMNet()

    if key == "gru":
        class GRUNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(16, 24, batch_first=True, bidirectional=True)

            def forward(self, x):
                return self.rnn(x)[0]
        return GRUNet()

    if key == "rnn":
        class RNNNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.RNN(16, 20, num_layers=2, nonlinearity="relu", batch_first=True)
                self.fc = nn.Linear(40, 10)

            def forward(self, x):
                h0 = torch.ones(2, x.shape[0], 20)
                _, h = self.rnn(x, h0)
                return self.fc(torch.cat([h[0], h[1]], 1))
        return RNNNet()

    raise KeyError(key)


def export_one(name, path, check):
    import torch
    key, opset, training, (in_name, sample_shape, dtype, out_names) = MODELS[name]
    torch.manual_seed(0)
    model = build_model(key)
    model.train(training)
    batch = STATIC_BATCH.get(name, 2)
    if dtype == "int64":
        example = torch.randint(0, VOCAB, (batch,) + sample_shape, dtype=torch.int64)
    else:
        example = torch.randn((batch,) + sample_shape)
    dyn = {in_name: {0: "batch"}}
    for o in out_names:
        dyn[o] = {0: "batch"}
    if name in STATIC_BATCH:
        dyn = {}
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    tmp = path + ".tmp"
    # Grad stays enabled on purpose: under no_grad an eval TransformerEncoderLayer takes
    # the fused fast path (aten::_transformer_encoder_layer_fwd), which has no ONNX export.
    # PyTorch 2.9 and later export through torch.export (dynamo=True) unless told not to:
    # the models here are the TorchScript exporter's, at the opsets listed above.
    import inspect
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.enable_grad():
        torch.onnx.export(model, (example,), tmp, export_params=True,
                          training=mode, input_names=[in_name], output_names=out_names,
                          opset_version=opset, do_constant_folding=not training,
                          dynamic_axes=dyn, **legacy)
    if check:
        import onnx
        onnx.checker.check_model(tmp)
    os.replace(tmp, path)
    return opset, training


def op_summary(paths):
    """Returns {(domain, op_type): set of 'opset' strings} over the given models."""
    import onnx
    ops = {}
    per_model = {}
    for p in paths:
        m = onnx.load(p, load_external_data=False)
        imports = {o.domain: o.version for o in m.opset_import}
        names = set()

        def walk(g):
            for n in g.node:
                dom = n.domain if n.domain not in ("", "ai.onnx") else ""
                ops.setdefault((dom, n.op_type), set()).add(imports.get(dom, imports.get("ai.onnx")))
                names.add(n.op_type)
                for a in n.attribute:
                    if a.type == onnx.AttributeProto.GRAPH:
                        walk(a.g)
                    for sg in a.graphs:
                        walk(sg)
        walk(m.graph)
        per_model[os.path.basename(p)] = (imports.get("", None), sorted(names))
    return ops, per_model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (created if missing)")
    ap.add_argument("--models", default="all", help="comma-separated names, or 'all' (the test models)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--ops", action="store_true",
                    help="print the op types (with opsets) found in the .onnx files of --out")
    ap.add_argument("--force", action="store_true", help="re-export even when cached")
    ap.add_argument("--no-check", action="store_true", help="skip onnx.checker")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = ap.parse_args(argv)

    if args.list:
        for name, (key, opset, training, (in_name, shape, dtype, outs)) in MODELS.items():
            dims = "x".join([str(STATIC_BATCH.get(name, "batch"))] + [str(d) for d in shape])
            print(f"{name:20s} opset {opset:2d} {'train' if training else 'eval '} "
                  f"{in_name}:{dtype}[{dims}] -> {','.join(outs)}")
        return 0
    if not args.out:
        ap.error("--out DIR is required (or use --list)")

    if args.models == "all":  # the test models: the benchmarks' own only when named
        names = [n for n in MODELS if n not in BENCH_ONLY]
    else:
        names = [n.strip() for n in args.models.split(",") if n.strip()]
        bad = [n for n in names if n not in MODELS]
        if bad:
            print(f"export_models.py: unknown model(s): {', '.join(bad)}; "
                  f"known: {', '.join(MODELS)}", file=sys.stderr)
            return 2

    if args.ops:
        paths = [os.path.join(args.out, n + ".onnx") for n in names]
        paths = [p for p in paths if os.path.exists(p)]
        ops, per_model = op_summary(paths)
        import onnx.defs
        for (dom, op), opsets in sorted(ops.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            since = set()
            for v in opsets:
                try:
                    since.add(onnx.defs.get_schema(op, v, dom).since_version)
                except Exception:
                    since.add("?")
            print(f"{(dom + '.') if dom else ''}{op}: model opsets {sorted(opsets)}, "
                  f"schema versions {sorted(since, key=lambda v: (isinstance(v, str), str(v).zfill(4)))}")
        print(f"# {len(ops)} op types in {len(paths)} models")
        for base, (opset, opnames) in per_model.items():
            print(f"# {base} (opset {opset}): {' '.join(opnames)}")
        return 0

    os.makedirs(args.out, exist_ok=True)
    import torch
    torch.set_num_threads(max(1, args.threads))
    import warnings
    warnings.filterwarnings("ignore")  # torch.onnx's tracer warnings drown the progress lines
    script_mtime = os.path.getmtime(os.path.abspath(__file__))
    t_all = time.time()
    failed = []
    for i, name in enumerate(names, 1):
        path = os.path.join(args.out, name + ".onnx")
        tag = f"[{i}/{len(names)}] {name}"
        if (not args.force and os.path.exists(path)
                and os.path.getmtime(path) > script_mtime):
            print(f"{tag}: cached {path}", flush=True)
            continue
        t0 = time.time()
        try:
            opset, training = export_one(name, path, not args.no_check)
        except Exception as e:  # report every model, fail at the end
            failed.append(name)
            print(f"{tag}: FAILED: {type(e).__name__}: {e}", flush=True)
            try:
                os.remove(path + ".tmp")
            except OSError:
                pass
            continue
        mb = os.path.getsize(path) / 1e6
        print(f"{tag}: opset {opset} {'train' if training else 'eval'} "
              f"{mb:.1f} MB in {time.time() - t0:.1f} s -> {path}", flush=True)
    print(f"done: {len(names) - len(failed)}/{len(names)} models in "
          f"{time.time() - t_all:.1f} s", flush=True)
    if failed:
        print(f"export_models.py: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
