#!/usr/bin/python3
"""An independent PyTorch model of pipecc's asynchronous training schedules
(docs/training.md, "Asynchronous schedules"), for tests and studies only.

It follows the schedules' definitions, not pipecc's code. N stages k = 0..N-1, mini-batches
i = 0..K-1, one update of every stage per mini-batch (2bw: per batch of M micro-batches);
version u of stage k = its weights after u of its own updates:

  pipedream  mini-batch i's forward and backward at stage k use version max(0, i-(N-1-k));
  async      the forward as pipedream, the backward the latest version (i);
  spectrain  forward:  W_hat = W - s_f*lr*v, W = version max(0, i-(N-1-k)),
             backward: W_hat = W - s_b*lr*v, W = version i,
             v = the SGD momentum buffer after the update that made W (zero for version 0),
             s_f = floor(k/2) + N - k - 1, s_b = floor(k/2);
  2bw        every micro-batch of batch t uses version max(0, t-1) for both passes;
  sync       (for comparison) version i: plain mini-batch SGD.

"Uses version V in the backward" means the backward's products with the weights (the
gradient sent to the previous stage) use V, while the weight gradients multiply the
incoming gradient by the activations the forward made. Gradients are those of the batch's
mean loss; each update is torch.optim.SGD's step on the stage's latest weights and its
latest momentum buffer.

The model is an MLP of Linear layers with ReLU between them (`mlp_model`; some layers
may be written x @ W.t() + b); each layer's weight and bias belong to one stage
(`stage_of`, from the compiled build).

    import async_ref
    w = async_ref.train(mode, model, stage_of, N, X, Y, K, B, M=1, lr=..., momentum=...)
"""
import torch


class MLP(torch.nn.Module):
    """Linear layers fc0, fc1, ... with ReLU between; the layers in `transposed` compute
    x @ W.t() + b (exported as a Transpose of the weight and a MatMul: a value the forward
    derives from a weight alone), the others call the Linear (a Gemm)."""

    def __init__(self, dims, transposed=()):
        super().__init__()
        self.n = len(dims) - 1
        self.transposed = set(transposed)
        for j in range(self.n):
            self.add_module("fc%d" % j, torch.nn.Linear(dims[j], dims[j + 1]))

    def forward(self, h):
        for j in range(self.n):
            lin = getattr(self, "fc%d" % j)
            h = h @ lin.weight.t() + lin.bias if j in self.transposed else lin(h)
            if j + 1 < self.n:
                h = torch.relu(h)
        return h


def mlp_model(dims, seed=0, transposed=()):
    torch.manual_seed(seed)
    return MLP(dims, transposed)


class _Linear(torch.autograd.Function):
    """y = x W_f^T + b_f; the backward sends g W_b to the previous layer and gives W and b
    the gradients g^T x and sum(g)."""

    @staticmethod
    def forward(ctx, x, wf, bf, wb):
        ctx.save_for_backward(x, wb)
        return x @ wf.t() + bf

    @staticmethod
    def backward(ctx, g):
        x, wb = ctx.saved_tensors
        return g @ wb, g.t() @ x, g.sum(0), None


def _linears(model):
    return [(n, m) for n, m in model.named_children() if isinstance(m, torch.nn.Linear)]


def _loss(model, fw, bw, x, y):
    """Mean cross-entropy of the MLP with forward weights fw and backward weights bw (dicts
    by parameter name); the gradients of fw's leaves are the weight gradients."""
    h = x
    lin = _linears(model)
    for j, (n, _) in enumerate(lin):
        h = _Linear.apply(h, fw[n + ".weight"], fw[n + ".bias"], bw[n + ".weight"])
        if j + 1 < len(lin):
            h = torch.relu(h)
    return torch.nn.functional.cross_entropy(h, y)


def train(mode, model, stage_of, N, X, Y, K, B, M=1, lr=0.05, momentum=0.9, dtype=torch.float32):
    """The weights (dict name -> tensor) after K mini-batches (batch i = rows i*B..(i+1)*B-1
    of X, Y; 2bw: in M micro-batches of B/M) of `mode` on N stages. stage_of: parameter
    name -> stage."""
    names = [n for n, _ in model.named_parameters()]
    latest = {n: p.detach().clone().to(dtype) for n, p in model.named_parameters()}
    hist = {n: [latest[n].clone()] for n in names}          # hist[n][u]: version u
    mom = {n: [torch.zeros_like(latest[n])] for n in names}  # momentum buffer after update u
    opt = {n: torch.optim.SGD([torch.nn.Parameter(latest[n].clone())], lr=lr, momentum=momentum) for n in names}
    X = torch.as_tensor(X).to(dtype)
    Y = torch.as_tensor(Y)
    for i in range(K):
        x, y = X[i * B:(i + 1) * B], Y[i * B:(i + 1) * B]
        fw, bw = {}, {}
        for n in names:
            k = stage_of[n]
            lag = max(0, i - (N - 1 - k))
            if mode == "sync":
                vf = vb = i
            elif mode == "2bw":
                vf = vb = max(0, i - 1)
            elif mode == "pipedream":
                vf = vb = lag
            else:  # async, spectrain: the forward's latest, the backward's latest
                vf, vb = lag, i
            wf, wb = hist[n][vf], hist[n][vb]
            if mode == "spectrain":
                sf, sb = k // 2 + N - k - 1, k // 2
                wf = wf - (sf * lr) * mom[n][vf]
                wb = wb - (sb * lr) * mom[n][vb]
            fw[n] = wf.clone().requires_grad_(True)
            bw[n] = wb.clone()
        grads = {n: torch.zeros_like(latest[n]) for n in names}
        mb = B // M
        for m in range(M):
            for n in names:
                fw[n].grad = None
            loss = _loss(model, fw, bw, x[m * mb:(m + 1) * mb], y[m * mb:(m + 1) * mb]) / M
            loss.backward()
            for n in names:
                grads[n] += fw[n].grad
        for n in names:
            (p,) = opt[n].param_groups[0]["params"]
            p.grad = grads[n]
            opt[n].step()
            st = opt[n].state[p]
            hist[n].append(p.detach().clone())
            mom[n].append(st["momentum_buffer"].detach().clone() if momentum else grads[n].clone())
    return {n: hist[n][-1] for n in names}
