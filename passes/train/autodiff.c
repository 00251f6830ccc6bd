/* passes/train/autodiff.c - reverse-mode autodiff: backward nodes as ONNX ops (see autodiff.h).
 * The loss and the optimizer step are in passes/train/optim.c. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/train/autodiff.h"
#include "passes/train/autodiff_impl.h"
#include "passes/pass.h"
#include "passes/shape/shape_impl.h"

/* ---- gradient bookkeeping ---- */

static int is_param(const ad_ctx *a, int v) {
  const ir_value *x = &a->g->values[v];
  return x->kind == IR_VAL_CONST && x->is_initializer && x->dtype == a->ft;
}

static int needs(ad_ctx *a, int v) { return v >= 0 && v < a->n0 && a->need[v]; }

static void acc(ad_ctx *a, int v, int gv) {
  if (!needs(a, v) || gv < 0) return;
  if (a->grad[v] < 0) a->grad[v] = gv;
  else a->grad[v] = ad_bin(a, IR_OP_Add, a->grad[v], gv);
}

/* Select the tag for computing the gradient of input value v. */
static void for_input(ad_ctx *a, int v) {
  const char *t = is_param(a, v) ? "grad_w" : "grad_x";
  if (a->tag != t) a->cnt = 0;
  a->tag = t;
}

static int unsupported(ad_ctx *a, int node, const char *why) {
  ir_error_node(a->g, node, "autodiff: no gradient for %s%s%s", ir_op_name(a->g->nodes[node].op), why ? ": " : "",
                why ? why : "");
  a->err = 1;
  return -1;
}

/* ---- rules ---- */

static int get_ints(ad_ctx *a, int node, const char *name, int64_t *out, int n, int64_t dflt) {
  const int64_t *v;
  int k = ir_attr_ints(&a->g->nodes[node], name, &v);
  for (int i = 0; i < n; i++) out[i] = k == n ? v[i] : dflt;
  return k;
}

/* Conv: dX = ConvTranspose(dy, W); dW = Conv(X^T, dy^T) with strides and dilations
 * swapped, sliced to the kernel and transposed back; dB = sum of dy. With G groups the
 * batch becomes Cg (= C/G) and each group's channels its G*N samples: the same Conv with
 * G groups gives every group's [Og, Cg, k..] at once. */
static int bw_conv(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0], W = nd.in[1], B = nd.n_in > 2 ? nd.in[2] : -1;
  ir_shape xs = ad_shape(a, X), ws = ad_shape(a, W), ys = ad_shape(a, dy);
  int sp = xs.rank - 2;
  int64_t k[IR_MAX_RANK], s[IR_MAX_RANK], d[IR_MAX_RANK], p[2 * IR_MAX_RANK], group = ir_attr_int(&nd, "group", 1);
  for (int i = 0; i < sp; i++) k[i] = ws.dims[2 + i];
  get_ints(a, node, "strides", s, sp, 1);
  get_ints(a, node, "dilations", d, sp, 1);
  get_ints(a, node, "pads", p, 2 * sp, 0);
  int ap = sh_auto_pad(ir_attr_str(&nd, "auto_pad", "NOTSET"));
  for (int i = 0; i < sp; i++) {
    int64_t o;
    if (sh_window_out(xs.dims[2 + i], k[i], s[i], d[i], ap, 0, &p[i], &p[sp + i], &o))
      return unsupported(a, node, "bad window");
  }
  if (needs(a, X)) {
    for_input(a, X);
    int64_t op[IR_MAX_RANK];
    for (int i = 0; i < sp; i++)
      op[i] = xs.dims[2 + i] - ((ys.dims[2 + i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - p[i] - p[sp + i]);
    int in[2] = {dy, W};
    int id = ad_begin(a, IR_OP_ConvTranspose, in, 2, 1, NULL);
    ad_attr_is(a, id, "kernel_shape", k, sp);
    ad_attr_is(a, id, "strides", s, sp);
    ad_attr_is(a, id, "dilations", d, sp);
    ad_attr_is(a, id, "pads", p, 2 * sp);
    ad_attr_is(a, id, "output_padding", op, sp);
    ad_attr_i(a, id, "group", group);
    acc(a, X, ad_end(a, id));
  }
  if (needs(a, W)) {
    for_input(a, W);
    int64_t perm[IR_MAX_RANK];
    for (int i = 0; i < xs.rank; i++) perm[i] = i < 2 ? 1 - i : i;
    int xt = X, yt = ad_transpose(a, dy, perm, xs.rank); /* dy^T [O, N, h..]: the kernel, G groups of N */
    if (group == 1) {
      xt = ad_transpose(a, X, perm, xs.rank); /* [C, N, H..] */
    } else { /* X [N, G*Cg, H..] -> [N, G, Cg, H..] -> [Cg, G, N, H..] -> [Cg, G*N, H..], conv with G groups */
      int64_t cg = ws.dims[1], p5[IR_MAX_RANK];
      ir_shape s5 = xs;
      s5.rank = xs.rank + 1;
      s5.dims[1] = group;
      s5.dims[2] = cg;
      for (int i = 2; i < xs.rank; i++) s5.dims[i + 1] = xs.dims[i];
      for (int i = 0; i < s5.rank; i++) p5[i] = i == 0 ? 2 : i == 2 ? 0 : i;
      xt = ad_transpose(a, ad_reshape(a, X, &s5), p5, s5.rank);
      ir_shape s4 = xs;
      s4.dims[0] = cg;
      s4.dims[1] = group * xs.dims[0];
      xt = ad_reshape(a, xt, &s4);
    }
    int in[2] = {xt, yt};
    int id = ad_begin(a, IR_OP_Conv, in, 2, 1, NULL);
    ad_attr_is(a, id, "strides", d, sp);
    ad_attr_is(a, id, "dilations", s, sp);
    ad_attr_is(a, id, "pads", p, 2 * sp);
    if (group != 1) ad_attr_i(a, id, "group", group);
    int r = ad_end(a, id); /* [Cg, O, k..] */
    ir_shape rs = ad_shape(a, r);
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK];
    int need_slice = 0;
    for (int i = 0; i < sp; i++) {
      st[i] = 0;
      en[i] = k[i];
      ax[i] = 2 + i;
      need_slice |= rs.dims[2 + i] != k[i];
    }
    if (need_slice) {
      int in2[4] = {r, ad_c_i64(a, st, sp), ad_c_i64(a, en, sp), ad_c_i64(a, ax, sp)};
      r = ad_op(a, IR_OP_Slice, in2, 4);
    }
    r = ad_transpose(a, r, perm, xs.rank);
    acc(a, W, r);
  }
  if (B >= 0 && needs(a, B)) {
    for_input(a, B);
    int64_t axes[IR_MAX_RANK];
    int n = 0;
    for (int i = 0; i < ys.rank; i++)
      if (i != 1) axes[n++] = i;
    acc(a, B, ad_reduce(a, IR_OP_ReduceSum, dy, axes, n, 0));
  }
  return 0;
}

static int gemm(ad_ctx *a, int x, int y, int ta, int tb, double alpha) {
  int in[2] = {x, y};
  int id = ad_begin(a, IR_OP_Gemm, in, 2, 1, NULL);
  if (ta) ad_attr_i(a, id, "transA", 1);
  if (tb) ad_attr_i(a, id, "transB", 1);
  if (alpha != 1) ad_attr_f(a, id, "alpha", alpha);
  return ad_end(a, id);
}

static int bw_gemm(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int A = nd.in[0], B = nd.in[1], C = nd.n_in > 2 ? nd.in[2] : -1;
  int ta = ir_attr_int(&nd, "transA", 0) != 0, tb = ir_attr_int(&nd, "transB", 0) != 0;
  double alpha = ir_attr_float(&nd, "alpha", 1), beta = ir_attr_float(&nd, "beta", 1);
  if (needs(a, A)) {
    for_input(a, A);
    acc(a, A, ta ? gemm(a, B, dy, tb, 1, alpha) : gemm(a, dy, B, 0, !tb, alpha));
  }
  if (needs(a, B)) {
    for_input(a, B);
    acc(a, B, tb ? gemm(a, dy, A, 1, ta, alpha) : gemm(a, A, dy, !ta, 0, alpha));
  }
  if (C >= 0 && needs(a, C)) {
    for_input(a, C);
    ir_shape cs = ad_shape(a, C);
    int gv = beta == 1 ? dy : ad_bin(a, IR_OP_Mul, dy, ad_c_f(a, beta, a->ft));
    acc(a, C, ad_unbroadcast(a, gv, &cs));
  }
  return 0;
}

static int swap_last(ad_ctx *a, int x) {
  int r = ad_shape(a, x).rank;
  int64_t perm[IR_MAX_RANK];
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 1] = r - 2;
  perm[r - 2] = r - 1;
  return ad_transpose(a, x, perm, r);
}

static int bw_matmul(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int A = nd.in[0], B = nd.in[1];
  ir_shape as = ad_shape(a, A), bs = ad_shape(a, B);
  if (as.rank < 2 || bs.rank < 2) return unsupported(a, node, "1-D operands");
  if (needs(a, A)) {
    for_input(a, A);
    acc(a, A, ad_unbroadcast(a, ad_bin(a, IR_OP_MatMul, dy, swap_last(a, B)), &as));
  }
  if (needs(a, B)) {
    for_input(a, B);
    int64_t P = 1;
    for (int i = 0; i < as.rank - 1; i++) P = as.dims[i] > 0 && P > 0 ? P * as.dims[i] : -1;
    ir_shape ys = ad_shape(a, dy);
    if (bs.rank == 2 && as.rank > 2 && P > 0 && as.dims[as.rank - 1] > 0 && ys.rank == as.rank &&
        ys.dims[ys.rank - 1] > 0) {
      /* a weight [K, N] shared by every matrix of A's batch (nn.Linear on [B, T, K]): one
       * GEMM over all their rows, A^T dy with A as [P, K] and dy as [P, N], instead of
       * transposing A, a batched MatMul of the batch's products and a ReduceSum over the
       * batch (the GPT-style model's training step spent 14% of its time in those
       * Transposes and ReduceSums); PyTorch's autograd sums it as one GEMM too */
      ir_shape a2, d2;
      memset(&a2, 0, sizeof a2);
      memset(&d2, 0, sizeof d2);
      a2.rank = d2.rank = 2;
      a2.dims[0] = d2.dims[0] = P;
      a2.dims[1] = as.dims[as.rank - 1];
      d2.dims[1] = ys.dims[ys.rank - 1];
      acc(a, B, gemm(a, ad_reshape(a, A, &a2), ad_reshape(a, dy, &d2), 1, 0, 1));
    } else acc(a, B, ad_unbroadcast(a, ad_bin(a, IR_OP_MatMul, swap_last(a, A), dy), &bs));
  }
  return 0;
}

/* MaxPool: the forward node also returns its argmax indices (flat over the whole
 * input); dX = ScatterElements(zeros, indices, dy, reduction add). */
static int bw_maxpool(ad_ctx *a, int node, int dy) {
  ir_graph *g = a->g;
  ir_node *nd = &g->nodes[node];
  int X = nd->in[0];
  if (!needs(a, X)) return 0;
  if (ir_attr_int(nd, "storage_order", 0)) return unsupported(a, node, "storage_order 1");
  for_input(a, X);
  int idx = nd->n_out > 1 ? nd->out[1] : -1;
  if (idx < 0) {
    idx = ir_add_value(g, ir_sprintf(g->arena, "%s/indices", nd->name), IR_VAL_ACT, IR_UNDEFINED);
    nd = &g->nodes[node];
    int *outs = ir_alloc_array(g->arena, 2, sizeof(int));
    outs[0] = nd->out[0];
    outs[1] = idx;
    nd->out = outs;
    nd->n_out = 2;
    g->values[idx].producer = node;
    if (pass_shape_node(g, node)) return a->err = 1, -1;
  }
  ir_shape xs = ad_shape(a, X);
  int64_t numel = ir_shape_numel(&xs);
  ir_shape flat;
  memset(&flat, 0, sizeof flat);
  flat.rank = 2;
  flat.dims[0] = 1;
  flat.dims[1] = ir_shape_numel(&g->values[dy].shape);
  int fi = ad_reshape(a, idx, &flat), fd = ad_reshape(a, dy, &flat);
  flat.dims[1] = numel;
  int in[3] = {ad_zeros(a, &flat, a->ft), fi, fd};
  int id = ad_begin(a, IR_OP_ScatterElements, in, 3, 1, NULL);
  ad_attr_i(a, id, "axis", 1);
  ad_attr_s(a, id, "reduction", "add");
  acc(a, X, ad_reshape(a, ad_end(a, id), &xs));
  return 0;
}

static int bw_avgpool(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  ir_shape xs = ad_shape(a, X), ys = ad_shape(a, dy);
  int sp = xs.rank - 2;
  if (nd.op == IR_OP_GlobalAveragePool) {
    double cnt = 1;
    for (int i = 0; i < sp; i++) cnt *= (double)xs.dims[2 + i];
    acc(a, X, ad_bin(a, IR_OP_Div, ad_expand(a, dy, &xs), ad_c_f(a, cnt, a->ft)));
    return 0;
  }
  int64_t k[IR_MAX_RANK], s[IR_MAX_RANK], p[2 * IR_MAX_RANK], one[IR_MAX_RANK], op[IR_MAX_RANK];
  get_ints(a, node, "kernel_shape", k, sp, 1);
  get_ints(a, node, "strides", s, sp, 1);
  get_ints(a, node, "pads", p, 2 * sp, 0);
  int ap = sh_auto_pad(ir_attr_str(&nd, "auto_pad", "NOTSET"));
  int anypad = 0;
  double cnt = 1;
  for (int i = 0; i < sp; i++) {
    int64_t o;
    if (sh_window_out(xs.dims[2 + i], k[i], s[i], 1, ap, 0, &p[i], &p[sp + i], &o))
      return unsupported(a, node, "bad window");
    anypad |= p[i] || p[sp + i];
    one[i] = 1;
    cnt *= (double)k[i];
    op[i] = xs.dims[2 + i] - ((ys.dims[2 + i] - 1) * s[i] + k[i] - p[i] - p[sp + i]);
  }
  if (ir_attr_int(&nd, "ceil_mode", 0) || (anypad && !ir_attr_int(&nd, "count_include_pad", 0)))
    return unsupported(a, node, "ceil_mode or padding not counted in the average");
  /* depthwise ConvTranspose with a constant kernel of 1/count */
  int64_t C = xs.dims[1];
  ir_shape ks;
  memset(&ks, 0, sizeof ks);
  ks.rank = xs.rank;
  ks.dims[0] = C;
  ks.dims[1] = 1;
  int64_t kn = C;
  for (int i = 0; i < sp; i++) ks.dims[2 + i] = k[i], kn *= k[i];
  size_t es = a->ft == IR_DOUBLE ? 8 : 4;
  char *kd = malloc(es * (size_t)kn);
  for (int64_t i = 0; i < kn; i++) {
    double dv = 1.0 / cnt;
    float fv = (float)dv;
    memcpy(kd + es * (size_t)i, es == 8 ? (void *)&dv : (void *)&fv, es);
  }
  int kv = ir_add_const(a->g, ir_sprintf(a->g->arena, "%s/%s/k", a->base, a->tag), a->ft, &ks, kd, es * (size_t)kn);
  free(kd);
  int in[2] = {dy, kv};
  int id = ad_begin(a, IR_OP_ConvTranspose, in, 2, 1, NULL);
  ad_attr_is(a, id, "kernel_shape", k, sp);
  ad_attr_is(a, id, "strides", s, sp);
  ad_attr_is(a, id, "dilations", one, sp);
  ad_attr_is(a, id, "pads", p, 2 * sp);
  ad_attr_is(a, id, "output_padding", op, sp);
  ad_attr_i(a, id, "group", C);
  acc(a, X, ad_end(a, id));
  return 0;
}

/* Normalisation over axes[] of x: xc = x - mean, inv = 1/sqrt(var + eps) (keepdims),
 * the variance as ReduceSumSquare(xc) / count (one pass over xc, no xc * xc tensor).
 * Returns the count (elements per normalised group). */
static double norm_stats(ad_ctx *a, int x, const int64_t *axes, int n, double eps, int *inv, int *xc) {
  ir_shape xs = ad_shape(a, x);
  double cnt = 1;
  for (int i = 0; i < n; i++) cnt *= (double)xs.dims[axes[i]];
  int mean = ad_reduce(a, IR_OP_ReduceMean, x, axes, n, 1);
  *xc = ad_bin(a, IR_OP_Sub, x, mean);
  int var = ad_bin(a, IR_OP_Div, ad_reduce(a, IR_OP_ReduceSumSquare, *xc, axes, n, 1), ad_c_f(a, cnt, a->ft));
  *inv = ad_un(a, IR_OP_Reciprocal, ad_un(a, IR_OP_Sqrt, ad_bin(a, IR_OP_Add, var, ad_c_f(a, eps, a->ft))));
  return cnt;
}

/* dx = inv * (gs - mean(gs) - xhat * mean(gs * xhat)) over axes, gs = dy * scale */
static int norm_dx(ad_ctx *a, int gs, int inv, int xhat, const int64_t *axes, int n) {
  int m1 = ad_reduce(a, IR_OP_ReduceMean, gs, axes, n, 1);
  int m2 = ad_reduce(a, IR_OP_ReduceMean, ad_bin(a, IR_OP_Mul, gs, xhat), axes, n, 1);
  int t = ad_bin(a, IR_OP_Sub, ad_bin(a, IR_OP_Sub, gs, m1), ad_bin(a, IR_OP_Mul, xhat, m2));
  return ad_bin(a, IR_OP_Mul, t, inv);
}

/* The gradients of a normalisation whose scale sr (keepdims, like inv) is constant over
 * the normalised axes (BatchNormalization in training mode, InstanceNormalization), from
 * xc = x - mean and inv (norm_stats), xhat = xc * inv never built:
 *   sum(dy * xhat) = inv * sum(dy * xc)
 *   dx = inv * sr * (dy - sum(dy) / cnt - xhat * sum(dy * xhat) / cnt)
 *      = (dy - sum(dy) / cnt - xc * (inv^2 sum(dy * xc) / cnt)) * (inv * sr)
 * which is norm_dx's with gs = dy * sr, the scale taken out of its two means. The two sums
 * (keepdims, over axes) are also what the scale's and the bias's gradients sum: *sdx
 * (sum(dy * xhat)) and *sdy. Two passes over the tensor for the reductions instead of
 * four, and neither gs nor xhat as tensors (MobileNetV2's training step spent about a
 * third of its time in the 52 BatchNorms' gradients). Any of dx, sdx, sdy may be left
 * out (NULL, !want_dx): only what is asked is built. Returns dx, or -1 when !want_dx. */
static int norm_grads_cs(ad_ctx *a, int dy, int sr, int inv, int xc, const int64_t *axes, int n, double cnt,
                         int want_dx, int *sdx, int *sdy) {
  int sc = -1, sy = -1;
  if (want_dx || sdx) sc = ad_reduce(a, IR_OP_ReduceSum, ad_bin(a, IR_OP_Mul, dy, xc), axes, n, 1);
  if (want_dx || sdy) sy = ad_reduce(a, IR_OP_ReduceSum, dy, axes, n, 1);
  if (sdx) *sdx = ad_bin(a, IR_OP_Mul, sc, inv);
  if (sdy) *sdy = sy;
  if (!want_dx) return -1;
  int rc = ad_c_f(a, 1.0 / cnt, a->ft);
  int m1 = ad_bin(a, IR_OP_Mul, sy, rc);
  int q = ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Mul, sc, rc), inv), inv);
  int t = ad_bin(a, IR_OP_Sub, ad_bin(a, IR_OP_Sub, dy, m1), ad_bin(a, IR_OP_Mul, xc, q));
  return ad_bin(a, IR_OP_Mul, t, ad_bin(a, IR_OP_Mul, inv, sr));
}

/* The gradients of X, S and B (those needed) of a normalisation with a per-channel scale
 * S and bias B (cs: the keepdims channel shape), through norm_grads_cs. The keepdims sums
 * become S's and B's gradients by a ReduceSum over rest[0..nrest) (InstanceNormalization:
 * over the images), or by a Reshape to their shape when nrest is 0 (BatchNormalization). */
static void norm_cs_backward(ad_ctx *a, int X, int S, int B, int dy, const ir_shape *cs, int inv, int xc,
                             const int64_t *axes, int n, double cnt, const int64_t *rest, int nrest) {
  int sdx = -1, sdy = -1;
  int dx = norm_grads_cs(a, dy, ad_reshape(a, S, cs), inv, xc, axes, n, cnt, needs(a, X), needs(a, S) ? &sdx : NULL,
                         needs(a, B) ? &sdy : NULL);
  if (needs(a, X)) {
    for_input(a, X);
    acc(a, X, dx);
  }
  int vs[2] = {S, B}, sums[2] = {sdx, sdy};
  for (int k = 0; k < 2; k++) {
    if (!needs(a, vs[k])) continue;
    for_input(a, vs[k]);
    ir_shape ps = ad_shape(a, vs[k]);
    acc(a, vs[k], nrest ? ad_reduce(a, IR_OP_ReduceSum, sums[k], rest, nrest, 0) : ad_reshape(a, sums[k], &ps));
  }
}

static int bw_batchnorm(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0], S = nd.in[1], B = nd.in[2], M = nd.in[3], V = nd.in[4];
  int training = ir_attr_int(&nd, "training_mode", 0) != 0;
  double eps = ir_attr_float(&nd, "epsilon", 1e-5f);
  ir_shape xs = ad_shape(a, X), cs;
  memset(&cs, 0, sizeof cs);
  cs.rank = xs.rank;
  int64_t axes[IR_MAX_RANK];
  int n = 0;
  for (int i = 0; i < xs.rank; i++) {
    cs.dims[i] = i == 1 ? xs.dims[1] : 1;
    if (i != 1) axes[n++] = i;
  }
  a->tag = "grad";
  a->cnt = 0;
  int inv, xhat;
  if (training) {
    int xc;
    double cnt = norm_stats(a, X, axes, n, eps, &inv, &xc);
    norm_cs_backward(a, X, S, B, dy, &cs, inv, xc, axes, n, cnt, NULL, 0);
    return 0;
  } else {
    int vr = ad_reshape(a, V, &cs), mr = ad_reshape(a, M, &cs);
    inv = ad_un(a, IR_OP_Reciprocal, ad_un(a, IR_OP_Sqrt, ad_bin(a, IR_OP_Add, vr, ad_c_f(a, eps, a->ft))));
    xhat = ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Sub, X, mr), inv);
  }
  if (needs(a, X)) {
    for_input(a, X);
    acc(a, X, ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Mul, dy, ad_reshape(a, S, &cs)), inv));
  }
  if (needs(a, S)) {
    for_input(a, S);
    acc(a, S, ad_reduce(a, IR_OP_ReduceSum, ad_bin(a, IR_OP_Mul, dy, xhat), axes, n, 0));
  }
  if (needs(a, B)) {
    for_input(a, B);
    acc(a, B, ad_reduce(a, IR_OP_ReduceSum, dy, axes, n, 0));
  }
  return 0;
}

static int bw_layernorm(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0], S = nd.in[1], B = nd.n_in > 2 ? nd.in[2] : -1;
  ir_shape xs = ad_shape(a, X);
  int axis = (int)ir_attr_int(&nd, "axis", -1);
  if (axis < 0) axis += xs.rank;
  double eps = ir_attr_float(&nd, "epsilon", 1e-5f);
  int64_t axes[IR_MAX_RANK], outer[IR_MAX_RANK];
  int n = 0, no = 0;
  for (int i = 0; i < xs.rank; i++) {
    if (i >= axis) axes[n++] = i;
    else outer[no++] = i;
  }
  a->tag = "grad";
  a->cnt = 0;
  int inv, xc;
  norm_stats(a, X, axes, n, eps, &inv, &xc);
  int xhat = ad_bin(a, IR_OP_Mul, xc, inv);
  if (needs(a, X)) {
    for_input(a, X);
    acc(a, X, norm_dx(a, ad_bin(a, IR_OP_Mul, dy, S), inv, xhat, axes, n));
  }
  if (needs(a, S)) {
    for_input(a, S);
    ir_shape ss = ad_shape(a, S);
    acc(a, S, ad_unbroadcast(a, ad_bin(a, IR_OP_Mul, dy, xhat), &ss));
  }
  if (B >= 0 && needs(a, B)) {
    for_input(a, B);
    ir_shape bs = ad_shape(a, B);
    acc(a, B, ad_unbroadcast(a, dy, &bs));
  }
  (void)outer;
  (void)no;
  return 0;
}

static int norm_axis(ad_ctx *a, int node, int r, int64_t dflt) {
  int64_t ax = ir_attr_int(&a->g->nodes[node], "axis", dflt);
  return (int)(ax < 0 ? ax + r : ax);
}

/* Reduce axes of node (input or attribute by opset), made non-negative; returns count,
 * 0 = all (shape inference has checked them). */
static int reduce_axes(ad_ctx *a, int node, int64_t *axes, int r) {
  int n = ir_reduce_axes(a->g, &a->g->nodes[node], axes, IR_MAX_RANK);
  if (n < 0) n = 0;
  for (int i = 0; i < n; i++)
    if (axes[i] < 0) axes[i] += r;
  return n;
}

static int bw_reduce(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  ir_shape xs = ad_shape(a, X), ks = xs;
  int64_t axes[IR_MAX_RANK];
  int n = reduce_axes(a, node, axes, xs.rank);
  if (n == 0 && ir_attr_int(&nd, "noop_with_empty_axes", 0)) {
    acc(a, X, dy);
    return 0;
  }
  double cnt = 1;
  for (int i = 0; i < xs.rank; i++) {
    int red = n == 0;
    for (int j = 0; j < n; j++) red |= axes[j] == i;
    if (red) cnt *= (double)xs.dims[i], ks.dims[i] = 1;
  }
  int gv = ad_expand(a, ad_reshape(a, dy, &ks), &xs);
  int Y = nd.out[0];
  switch (nd.op) {
    case IR_OP_ReduceMean: gv = ad_bin(a, IR_OP_Div, gv, ad_c_f(a, cnt, a->ft)); break;
    case IR_OP_ReduceSumSquare: gv = ad_bin(a, IR_OP_Mul, gv, ad_bin(a, IR_OP_Mul, X, ad_c_f(a, 2, a->ft))); break;
    case IR_OP_ReduceL2: gv = ad_bin(a, IR_OP_Mul, gv, ad_bin(a, IR_OP_Div, X, ad_reshape(a, Y, &ks))); break;
    case IR_OP_ReduceLogSumExp:
      gv = ad_bin(a, IR_OP_Mul, gv, ad_un(a, IR_OP_Exp, ad_bin(a, IR_OP_Sub, X, ad_reshape(a, Y, &ks))));
      break;
    case IR_OP_ReduceMax:
    case IR_OP_ReduceMin: { /* as torch amax/amin: shared evenly by the ties */
      int m = ad_bin(a, IR_OP_Equal, X, ad_reshape(a, Y, &ks));
      int mf = ad_cast(a, m, a->ft);
      int64_t all[IR_MAX_RANK];
      for (int i = 0; i < xs.rank; i++) all[i] = i;
      int c = n ? ad_reduce(a, IR_OP_ReduceSum, mf, axes, n, 1) : ad_reduce(a, IR_OP_ReduceSum, mf, all, xs.rank, 1);
      gv = ad_bin(a, IR_OP_Mul, gv, ad_bin(a, IR_OP_Div, mf, c));
      break;
    }
    default: break;
  }
  acc(a, X, gv);
  return 0;
}

/* GatherElements: dX = ScatterElements(zeros, indices, dy, reduction add). */
static int bw_gather_elements(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  ir_shape xs = ad_shape(a, X);
  int in[3] = {ad_zeros(a, &xs, a->ft), nd.in[1], dy};
  int id = ad_begin(a, IR_OP_ScatterElements, in, 3, 1, NULL);
  ad_attr_i(a, id, "axis", ir_attr_int(&nd, "axis", 0));
  ad_attr_s(a, id, "reduction", "add");
  acc(a, X, ad_end(a, id));
  return 0;
}

static int bw_eltwise(ad_ctx *a, int node, int dy) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int X = nd.in[0], Y = nd.out[0], X2 = nd.n_in > 1 ? nd.in[1] : -1;
  ir_shape xs = ad_shape(a, X), x2s;
  if (X2 >= 0) x2s = ad_shape(a, X2);
  int gx = -1;
  if (needs(a, X)) for_input(a, X);
  switch (nd.op) {
    case IR_OP_Identity: gx = dy; break;
    case IR_OP_Neg: gx = ad_un(a, IR_OP_Neg, dy); break;
    case IR_OP_Relu: {
      int in[3] = {ad_bin(a, IR_OP_Greater, Y, ad_c_f(a, 0, a->ft)), dy, ad_c_f(a, 0, a->ft)};
      gx = ad_op(a, IR_OP_Where, in, 3);
      break;
    }
    case IR_OP_LeakyRelu: {
      double al = ir_attr_float(&nd, "alpha", 0.01f);
      int in[3] = {ad_bin(a, IR_OP_Greater, X, ad_c_f(a, 0, a->ft)), dy,
                   ad_bin(a, IR_OP_Mul, dy, ad_c_f(a, al, a->ft))};
      gx = ad_op(a, IR_OP_Where, in, 3);
      break;
    }
    case IR_OP_Sigmoid: /* dy * (1 - y) * y */
      gx = ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Mul, dy, ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), Y)), Y);
      break;
    case IR_OP_Tanh: /* dy * (1 - y * y) */
      gx = ad_bin(a, IR_OP_Mul, dy, ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), ad_bin(a, IR_OP_Mul, Y, Y)));
      break;
    case IR_OP_Exp: gx = ad_bin(a, IR_OP_Mul, dy, Y); break;
    case IR_OP_Log: gx = ad_bin(a, IR_OP_Div, dy, X); break;
    case IR_OP_Sqrt: gx = ad_bin(a, IR_OP_Div, dy, ad_bin(a, IR_OP_Mul, Y, ad_c_f(a, 2, a->ft))); break;
    case IR_OP_Reciprocal: gx = ad_un(a, IR_OP_Neg, ad_bin(a, IR_OP_Mul, dy, ad_bin(a, IR_OP_Mul, Y, Y))); break;
    case IR_OP_Abs: gx = ad_bin(a, IR_OP_Mul, dy, ad_un(a, IR_OP_Sign, X)); break;
    case IR_OP_Erf: /* dy * 2/sqrt(pi) * exp(-x^2) */
      gx = ad_bin(a, IR_OP_Mul, dy,
                  ad_bin(a, IR_OP_Mul, ad_c_f(a, 1.1283791670955126, a->ft),
                         ad_un(a, IR_OP_Exp, ad_un(a, IR_OP_Neg, ad_bin(a, IR_OP_Mul, X, X)))));
      break;
    case IR_OP_Sin: gx = ad_bin(a, IR_OP_Mul, dy, ad_un(a, IR_OP_Cos, X)); break;
    case IR_OP_Cos: gx = ad_un(a, IR_OP_Neg, ad_bin(a, IR_OP_Mul, dy, ad_un(a, IR_OP_Sin, X))); break;
    case IR_OP_Softplus: gx = ad_bin(a, IR_OP_Mul, dy, ad_un(a, IR_OP_Sigmoid, X)); break;
    case IR_OP_Clip: { /* torch hardtanh/clamp: dy where min < x < max (strict), else 0 */
      double lo = -INFINITY, hi = INFINITY;
      if (nd.opset < 11) {
        lo = ir_attr_float(&nd, "min", -INFINITY);
        hi = ir_attr_float(&nd, "max", INFINITY);
      } else {
        for (int k = 1; k <= 2; k++) {
          const ir_value *b = ir_in(g, &nd, k);
          if (!b) continue;
          double v;
          if (b->kind != IR_VAL_CONST || b->is_initializer || ir_const_f64(b, 0, &v))
            return unsupported(a, node, "min and max must be constants");
          if (k == 1) lo = v;
          else hi = v;
        }
      }
      int m = -1;
      if (lo > -INFINITY) m = ad_bin(a, IR_OP_Greater, X, ad_c_f(a, lo, a->ft));
      if (hi < INFINITY) {
        int m2 = ad_bin(a, IR_OP_Less, X, ad_c_f(a, hi, a->ft));
        m = m < 0 ? m2 : ad_bin(a, IR_OP_And, m, m2);
      }
      if (m < 0) {
        gx = dy;
        break;
      }
      int in[3] = {m, dy, ad_c_f(a, 0, a->ft)};
      gx = ad_op(a, IR_OP_Where, in, 3);
      break;
    }
    case IR_OP_Gelu: { /* exact: dy * (Phi(x) + x * phi(x)) */
      if (strcmp(ir_attr_str(&nd, "approximate", "none"), "none")) return unsupported(a, node, "approximate tanh");
      int cdf = ad_bin(a, IR_OP_Mul, ad_c_f(a, 0.5, a->ft),
                       ad_bin(a, IR_OP_Add, ad_c_f(a, 1, a->ft),
                              ad_un(a, IR_OP_Erf, ad_bin(a, IR_OP_Mul, X, ad_c_f(a, 0.70710678118654752, a->ft)))));
      int pdf = ad_bin(a, IR_OP_Mul, ad_c_f(a, 0.39894228040143268, a->ft),
                       ad_un(a, IR_OP_Exp, ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Mul, X, X), ad_c_f(a, -0.5, a->ft))));
      gx = ad_bin(a, IR_OP_Mul, dy, ad_bin(a, IR_OP_Add, cdf, ad_bin(a, IR_OP_Mul, X, pdf)));
      break;
    }
    case IR_OP_Elu:
    case IR_OP_Selu: { /* x > 0: dy * scale; else dy * (y + alpha * scale) (Elu: scale 1) */
      int selu = nd.op == IR_OP_Selu;
      double al = ir_attr_float(&nd, "alpha", selu ? 1.67326319217681884765625f : 1.0f);
      double sc = selu ? ir_attr_float(&nd, "gamma", 1.05070102214813232421875f) : 1.0;
      int pos = ad_bin(a, IR_OP_Greater, X, ad_c_f(a, 0, a->ft));
      int neg = ad_bin(a, IR_OP_Mul, dy, ad_bin(a, IR_OP_Add, Y, ad_c_f(a, al * sc, a->ft)));
      int in[3] = {pos, sc == 1 ? dy : ad_bin(a, IR_OP_Mul, dy, ad_c_f(a, sc, a->ft)), neg};
      gx = ad_op(a, IR_OP_Where, in, 3);
      break;
    }
    case IR_OP_HardSigmoid:
    case IR_OP_HardSwish: {
      double al = nd.op == IR_OP_HardSwish ? 1.0 / 6 : ir_attr_float(&nd, "alpha", 0.2f);
      double be = nd.op == IR_OP_HardSwish ? 0.5 : ir_attr_float(&nd, "beta", 0.5f);
      /* inside: -beta/alpha < x < (1-beta)/alpha */
      int m = ad_bin(a, IR_OP_And, ad_bin(a, IR_OP_Greater, X, ad_c_f(a, -be / al, a->ft)),
                     ad_bin(a, IR_OP_Less, X, ad_c_f(a, (1 - be) / al, a->ft)));
      if (nd.op == IR_OP_HardSigmoid) {
        int in[3] = {m, ad_bin(a, IR_OP_Mul, dy, ad_c_f(a, al, a->ft)), ad_c_f(a, 0, a->ft)};
        gx = ad_op(a, IR_OP_Where, in, 3);
      } else { /* torch hardswish_backward: x < -3: 0; x <= 3: dy * (x / 3 + 0.5); else dy */
        int in1[3] = {ad_bin(a, IR_OP_LessOrEqual, X, ad_c_f(a, 3, a->ft)),
                      ad_bin(a, IR_OP_Mul, dy,
                             ad_bin(a, IR_OP_Add, ad_bin(a, IR_OP_Div, X, ad_c_f(a, 3, a->ft)), ad_c_f(a, 0.5, a->ft))),
                      dy};
        int in2[3] = {ad_bin(a, IR_OP_Less, X, ad_c_f(a, -3, a->ft)), ad_c_f(a, 0, a->ft),
                      ad_op(a, IR_OP_Where, in1, 3)};
        gx = ad_op(a, IR_OP_Where, in2, 3);
      }
      break;
    }
    case IR_OP_PRelu: {
      int pos = ad_bin(a, IR_OP_Greater, X, ad_c_f(a, 0, a->ft));
      if (needs(a, X)) {
        int in[3] = {pos, dy, ad_bin(a, IR_OP_Mul, dy, X2)};
        gx = ad_unbroadcast(a, ad_op(a, IR_OP_Where, in, 3), &xs);
      }
      if (needs(a, X2)) {
        acc(a, X, gx);
        gx = -1;
        for_input(a, X2);
        int in[3] = {pos, ad_c_f(a, 0, a->ft), ad_bin(a, IR_OP_Mul, dy, X)};
        acc(a, X2, ad_unbroadcast(a, ad_op(a, IR_OP_Where, in, 3), &x2s));
      }
      break;
    }
    case IR_OP_Sum:
    case IR_OP_Mean:
      for (int k = 0; k < nd.n_in; k++) {
        int Xk = nd.in[k];
        if (!needs(a, Xk)) continue;
        for_input(a, Xk);
        ir_shape ks = ad_shape(a, Xk);
        int gk = nd.op == IR_OP_Mean ? ad_bin(a, IR_OP_Div, dy, ad_c_f(a, nd.n_in, a->ft)) : dy;
        acc(a, Xk, ad_unbroadcast(a, gk, &ks));
      }
      return 0;
    case IR_OP_CumSum: {
      int id = ad_begin(a, IR_OP_CumSum, (int[]){dy, nd.in[1]}, 2, 1, NULL);
      ad_attr_i(a, id, "reverse", !ir_attr_int(&nd, "reverse", 0));
      if (ir_attr_int(&nd, "exclusive", 0)) ad_attr_i(a, id, "exclusive", 1);
      gx = ad_end(a, id);
      break;
    }
    case IR_OP_Cast: /* between floating-point types: cast the gradient back */
      if (ad_dtype(a, X) != IR_FLOAT && ad_dtype(a, X) != IR_DOUBLE) return 0;
      gx = ad_cast(a, dy, ad_dtype(a, X));
      break;
    case IR_OP_Add:
    case IR_OP_Sub:
    case IR_OP_Mul:
    case IR_OP_Div:
    case IR_OP_Pow: {
      if (needs(a, X)) {
        int gf = nd.op == IR_OP_Add || nd.op == IR_OP_Sub ? dy
                 : nd.op == IR_OP_Mul                     ? ad_bin(a, IR_OP_Mul, dy, X2)
                 : nd.op == IR_OP_Div                     ? ad_bin(a, IR_OP_Div, dy, X2)
                                                          : -1;
        if (nd.op == IR_OP_Pow) {
          double e;
          if (g->values[X2].kind != IR_VAL_CONST || g->values[X2].is_initializer || ir_shape_numel(&x2s) != 1 ||
              ir_const_f64(&g->values[X2], 0, &e)) /* dy * e * x^(e-1) with e a tensor */
            gf = ad_bin(
                a, IR_OP_Mul, dy,
                ad_bin(a, IR_OP_Mul, X2, ad_bin(a, IR_OP_Pow, X, ad_bin(a, IR_OP_Sub, X2, ad_c_f(a, 1, a->ft)))));
          else
            gf = e == 2 ? ad_bin(a, IR_OP_Mul, dy, ad_bin(a, IR_OP_Mul, X, ad_c_f(a, 2, a->ft)))
                        : ad_bin(a, IR_OP_Mul, dy,
                                 ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Pow, X, ad_c_f(a, e - 1, a->ft)),
                                        ad_c_f(a, e, a->ft)));
        }
        gx = ad_unbroadcast(a, gf, &xs);
      }
      if (needs(a, X2)) {
        acc(a, X, gx);
        gx = -1;
        for_input(a, X2);
        int gf = nd.op == IR_OP_Add   ? dy
                 : nd.op == IR_OP_Sub ? ad_un(a, IR_OP_Neg, dy)
                 : nd.op == IR_OP_Mul ? ad_bin(a, IR_OP_Mul, dy, X)
                 : nd.op == IR_OP_Div
                     ? ad_un(a, IR_OP_Neg, ad_bin(a, IR_OP_Div, ad_bin(a, IR_OP_Mul, dy, Y), X2))
                     : ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Mul, dy, Y), ad_un(a, IR_OP_Log, X)); /* Pow */
        acc(a, X2, ad_unbroadcast(a, gf, &x2s));
      }
      break;
    }
    default: return unsupported(a, node, NULL);
  }
  acc(a, X, gx);
  return 0;
}

static int bw_softmax(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0], Y = nd.out[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  int r = ad_shape(a, X).rank;
  int ax = norm_axis(a, node, r, nd.opset >= 13 ? -1 : 1);
  if (nd.opset < 13 && ax != r - 1) return unsupported(a, node, "opset < 13 with axis other than the last");
  int64_t axes[1] = {ax};
  if (nd.op == IR_OP_Softmax) { /* y * (dy - sum(dy * y)) */
    int s = ad_reduce(a, IR_OP_ReduceSum, ad_bin(a, IR_OP_Mul, dy, Y), axes, 1, 1);
    acc(a, X, ad_bin(a, IR_OP_Mul, Y, ad_bin(a, IR_OP_Sub, dy, s)));
  } else { /* dy - exp(y) * sum(dy) */
    int s = ad_reduce(a, IR_OP_ReduceSum, dy, axes, 1, 1);
    acc(a, X, ad_bin(a, IR_OP_Sub, dy, ad_bin(a, IR_OP_Mul, ad_un(a, IR_OP_Exp, Y), s)));
  }
  return 0;
}

static int bw_concat(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int r = ad_shape(a, dy).rank;
  int ax = norm_axis(a, node, r, 0);
  int64_t off = 0;
  for (int i = 0; i < nd.n_in; i++) {
    int X = nd.in[i];
    ir_shape xs = ad_shape(a, X);
    if (needs(a, X)) {
      for_input(a, X);
      int64_t st = off, en = off + xs.dims[ax], axv = ax;
      int in[4] = {dy, ad_c_i64(a, &st, 1), ad_c_i64(a, &en, 1), ad_c_i64(a, &axv, 1)};
      acc(a, X, ad_op(a, IR_OP_Slice, in, 4));
    }
    off += xs.dims[ax];
  }
  return 0;
}

static int bw_split(ad_ctx *a, int node) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  int *parts = malloc(sizeof(int) * (size_t)nd.n_out);
  for (int k = 0; k < nd.n_out; k++) {
    int o = nd.out[k];
    ir_shape os = ad_shape(a, o);
    parts[k] = o >= 0 && o < a->n0 && a->grad[o] >= 0 ? a->grad[o] : ad_zeros(a, &os, a->ft);
  }
  int id = ad_begin(a, IR_OP_Concat, parts, nd.n_out, 1, NULL);
  ad_attr_i(a, id, "axis", norm_axis(a, node, ad_shape(a, X).rank, 0));
  free(parts);
  acc(a, X, ad_end(a, id));
  return 0;
}

/* Slice: dX = Pad(dy) with zeros around the slice. A step |s| > 1 first spreads dy's axis
 * (length L) over L*|s| elements ([L] -> [L, 1] -> Pad -> [L, |s|] -> [L*|s|], cut to
 * the input); a negative step also reverses it (a Slice with step -1). */
static int bw_slice(ad_ctx *a, int node, int dy) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int X = nd.in[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  ir_shape xs = ad_shape(a, X), ys = ad_shape(a, dy);
  int r = xs.rank;
  int64_t st[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK], pads[2 * IR_MAX_RANK];
  int n = 0;
  if (nd.opset < 10) return unsupported(a, node, "opset < 10");
  const ir_value *sv = ir_in(g, &nd, 1), *av = ir_in(g, &nd, 3), *pv = ir_in(g, &nd, 4);
  n = (int)ir_shape_numel(&sv->shape);
  for (int i = 0; i < n; i++) {
    ir_const_i64(sv, i, &st[i]);
    ax[i] = i;
    sp[i] = 1;
    if (av) ir_const_i64(av, i, &ax[i]);
    if (pv) ir_const_i64(pv, i, &sp[i]);
    if (ax[i] < 0) ax[i] += r;
  }
  for (int i = 0; i < r; i++) pads[i] = 0;
  int cur = dy;
  for (int i = 0; i < n; i++) {
    int64_t d = xs.dims[ax[i]], len = ys.dims[ax[i]], step = sp[i] < 0 ? -sp[i] : sp[i];
    int64_t s = st[i] < 0 ? st[i] + d : st[i];
    if (len == 0) continue; /* nothing taken: dX is all padding */
    if (sp[i] > 0) {
      s = s < 0 ? 0 : s > d ? d : s;
    } else { /* the first element taken is the last of the reversed run */
      s = s < -1 ? -1 : s > d - 1 ? d - 1 : s;
      s -= (len - 1) * step;
      int64_t fst = -1, fen = INT64_MIN, fax = ax[i], fsp = -1;
      int in[5] = {cur, ad_c_i64(a, &fst, 1), ad_c_i64(a, &fen, 1), ad_c_i64(a, &fax, 1), ad_c_i64(a, &fsp, 1)};
      cur = ad_op(a, IR_OP_Slice, in, 5);
    }
    pads[ax[i]] = s;
    if (step > 1) {
      if (r >= IR_MAX_RANK) return unsupported(a, node, "a step other than 1 on a tensor of the largest rank");
      ir_shape cs = ad_shape(a, cur), us = cs;
      int64_t up[2 * (IR_MAX_RANK + 1)] = {0};
      us.rank = cs.rank + 1;
      for (int j = 0; j < cs.rank; j++) us.dims[j + (j > ax[i])] = cs.dims[j];
      us.dims[ax[i] + 1] = 1;
      up[us.rank + ax[i] + 1] = step - 1;
      int in[2] = {ad_reshape(a, cur, &us), ad_c_i64(a, up, 2 * us.rank)};
      cur = ad_op(a, IR_OP_Pad, in, 2);
      cs.dims[ax[i]] = len * step;
      cur = ad_reshape(a, cur, &cs);
      if (s + len * step > d) { /* the last run's tail lies past the input */
        int64_t z = 0, e = d - s, sax = ax[i];
        int in2[4] = {cur, ad_c_i64(a, &z, 1), ad_c_i64(a, &e, 1), ad_c_i64(a, &sax, 1)};
        cur = ad_op(a, IR_OP_Slice, in2, 4);
      }
    }
  }
  ir_shape cs = ad_shape(a, cur);
  for (int i = 0; i < r; i++) pads[r + i] = xs.dims[i] - cs.dims[i] - pads[i];
  int in[2] = {cur, ad_c_i64(a, pads, 2 * r)};
  acc(a, X, ad_op(a, IR_OP_Pad, in, 2));
  return 0;
}

/* Gather along axis a: the indexed axis is moved to the front, dX = ScatterND(zeros,
 * indices, dy moved alike, reduction add), then moved back. */
static int bw_gather(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0], I = nd.in[1];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  ir_shape xs = ad_shape(a, X), is = ad_shape(a, I), ys = ad_shape(a, dy);
  int ax = norm_axis(a, node, xs.rank, 0), q = is.rank;
  ir_shape us = is;
  us.dims[us.rank++] = 1;
  int idx = ad_cast(a, ad_reshape(a, I, &us), IR_INT64);
  int upd = dy;
  ir_shape zs = xs;
  int64_t perm[IR_MAX_RANK], back[IR_MAX_RANK];
  if (ax != 0) {
    /* dy [X[:a], I, X[a+1:]] -> [I, X[:a], X[a+1:]]; zeros [X[a], X[:a], X[a+1:]] */
    int k = 0;
    for (int i = 0; i < q; i++) perm[k++] = ax + i;
    for (int i = 0; i < ax; i++) perm[k++] = i;
    for (int i = ax + q; i < ys.rank; i++) perm[k++] = i;
    upd = ad_transpose(a, dy, perm, ys.rank);
    zs.dims[0] = xs.dims[ax];
    for (int i = 0; i < ax; i++) zs.dims[1 + i] = xs.dims[i];
    /* result [X[a], X[:a], X[a+1:]] -> X order */
    for (int i = 0; i < xs.rank; i++) back[i] = i < ax ? i + 1 : i == ax ? 0 : i;
  }
  int in[3] = {ad_zeros(a, &zs, a->ft), idx, upd};
  int id = ad_begin(a, IR_OP_ScatterND, in, 3, 1, NULL);
  ad_attr_s(a, id, "reduction", "add");
  int r = ad_end(a, id);
  if (ax != 0) r = ad_transpose(a, r, back, xs.rank);
  acc(a, X, r);
  return 0;
}

/* Pad (constant mode, pads >= 0): dX = Slice of dy. */
static int bw_pad(ad_ctx *a, int node, int dy) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int X = nd.in[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  ir_shape xs = ad_shape(a, X);
  int r = xs.rank;
  int64_t pads[2 * IR_MAX_RANK], st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK];
  if (strcmp(ir_attr_str(&nd, "mode", "constant"), "constant")) return unsupported(a, node, "mode other than constant");
  if (nd.opset >= 11) {
    const ir_value *pv = ir_in(g, &nd, 1);
    if (!pv || pv->kind != IR_VAL_CONST || ir_shape_numel(&pv->shape) != 2 * r || (nd.n_in > 3 && nd.in[3] >= 0))
      return unsupported(a, node, "pads must be a constant over all axes");
    for (int i = 0; i < 2 * r; i++) ir_const_i64(pv, i, &pads[i]);
  } else if (get_ints(a, node, "pads", pads, 2 * r, 0) != 2 * r) {
    return unsupported(a, node, "pads");
  }
  for (int i = 0; i < r; i++) {
    if (pads[i] < 0 || pads[r + i] < 0) return unsupported(a, node, "negative pads");
    st[i] = pads[i];
    en[i] = pads[i] + xs.dims[i];
    ax[i] = i;
  }
  int in[4] = {dy, ad_c_i64(a, st, r), ad_c_i64(a, en, r), ad_c_i64(a, ax, r)};
  acc(a, X, ad_op(a, IR_OP_Slice, in, 4));
  return 0;
}

static int bw_where(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int Cn = nd.in[0];
  for (int k = 1; k <= 2; k++) {
    int X = nd.in[k];
    if (!needs(a, X)) continue;
    for_input(a, X);
    ir_shape xs = ad_shape(a, X);
    int z = ad_c_f(a, 0, a->ft);
    int in[3] = {Cn, k == 1 ? dy : z, k == 1 ? z : dy};
    acc(a, X, ad_unbroadcast(a, ad_op(a, IR_OP_Where, in, 3), &xs));
  }
  return 0;
}

static int bw_dropout(ad_ctx *a, int node, int dy) {
  ir_graph *g = a->g;
  ir_node *nd = &g->nodes[node];
  int X = nd->in[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  double ratio = 0.5;
  const ir_value *rv = ir_in(g, nd, 1);
  if (rv && (rv->kind != IR_VAL_CONST || ir_const_f64(rv, 0, &ratio)))
    return unsupported(a, node, "ratio must be a constant");
  int mask = nd->n_out > 1 ? nd->out[1] : -1;
  if (mask < 0) {
    mask = ir_add_value(g, ir_sprintf(g->arena, "%s/mask", nd->name), IR_VAL_ACT, IR_UNDEFINED);
    nd = &g->nodes[node];
    int *outs = ir_alloc_array(g->arena, 2, sizeof(int));
    outs[0] = nd->out[0];
    outs[1] = mask;
    nd->out = outs;
    nd->n_out = 2;
    g->values[mask].producer = node;
    if (pass_shape_node(g, node)) return a->err = 1, -1;
  }
  int m = ad_cast(a, mask, a->ft);
  int gv = ad_bin(a, IR_OP_Mul, dy, m);
  if (ratio > 0 && ratio < 1) gv = ad_bin(a, IR_OP_Div, gv, ad_c_f(a, 1 - ratio, a->ft));
  acc(a, X, gv);
  return 0;
}

static int bw_instnorm(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0], S = nd.in[1], B = nd.in[2];
  ir_shape xs = ad_shape(a, X), cs;
  memset(&cs, 0, sizeof cs);
  cs.rank = xs.rank;
  int64_t axes[IR_MAX_RANK], all[IR_MAX_RANK];
  int n = 0, na = 0;
  for (int i = 0; i < xs.rank; i++) {
    cs.dims[i] = i == 1 ? xs.dims[1] : 1;
    if (i >= 2) axes[n++] = i;
    if (i != 1) all[na++] = i;
  }
  a->tag = "grad";
  a->cnt = 0;
  int inv, xc;
  double cnt = norm_stats(a, X, axes, n, ir_attr_float(&nd, "epsilon", 1e-5f), &inv, &xc);
  /* the per-image sums over the spatial axes, then over the images for S and B */
  norm_cs_backward(a, X, S, B, dy, &cs, inv, xc, axes, n, cnt, all, na);
  return 0;
}

/* Tile: dy viewed as [reps0, d0, reps1, d1, ...], summed over the reps axes. */
static int bw_tile(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0];
  if (!needs(a, X)) return 0;
  for_input(a, X);
  ir_shape xs = ad_shape(a, X), ys = ad_shape(a, dy), v;
  if (2 * xs.rank > IR_MAX_RANK) return unsupported(a, node, "rank > 4");
  memset(&v, 0, sizeof v);
  v.rank = 2 * xs.rank;
  int64_t axes[IR_MAX_RANK];
  for (int i = 0; i < xs.rank; i++) {
    v.dims[2 * i] = xs.dims[i] ? ys.dims[i] / xs.dims[i] : 0;
    v.dims[2 * i + 1] = xs.dims[i];
    axes[i] = 2 * i;
  }
  acc(a, X, ad_reshape(a, ad_reduce(a, IR_OP_ReduceSum, ad_reshape(a, dy, &v), axes, xs.rank, 0), &xs));
  return 0;
}

/* ConvTranspose (group 1 for dW): dX = Conv(dy, W) with the same window; dW = Conv of
 * dy^T [O, N, ..] with x^T [C, N, ..] as kernel, strides and dilations swapped. */
static int bw_convtranspose(ad_ctx *a, int node, int dy) {
  ir_node nd = a->g->nodes[node];
  int X = nd.in[0], W = nd.in[1], B = nd.n_in > 2 ? nd.in[2] : -1;
  ir_shape xs = ad_shape(a, X), ws = ad_shape(a, W), ys = ad_shape(a, dy);
  int sp = xs.rank - 2;
  int64_t k[IR_MAX_RANK], s[IR_MAX_RANK], d[IR_MAX_RANK], p[2 * IR_MAX_RANK], group = ir_attr_int(&nd, "group", 1);
  for (int i = 0; i < sp; i++) k[i] = ws.dims[2 + i];
  get_ints(a, node, "strides", s, sp, 1);
  get_ints(a, node, "dilations", d, sp, 1);
  if (get_ints(a, node, "pads", p, 2 * sp, 0) < 0 && strcmp(ir_attr_str(&nd, "auto_pad", "NOTSET"), "NOTSET"))
    return unsupported(a, node, "auto_pad");
  if (ir_attr_find(&nd, "output_shape")) return unsupported(a, node, "output_shape");
  if (needs(a, X)) {
    for_input(a, X);
    int in[2] = {dy, W};
    int id = ad_begin(a, IR_OP_Conv, in, 2, 1, NULL);
    ad_attr_is(a, id, "kernel_shape", k, sp);
    ad_attr_is(a, id, "strides", s, sp);
    ad_attr_is(a, id, "dilations", d, sp);
    ad_attr_is(a, id, "pads", p, 2 * sp);
    ad_attr_i(a, id, "group", group);
    int r = ad_end(a, id);
    ir_shape rs = ad_shape(a, r);
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK];
    int sl = 0;
    for (int i = 0; i < sp; i++)
      st[i] = 0, en[i] = xs.dims[2 + i], ax[i] = 2 + i, sl |= rs.dims[2 + i] != xs.dims[2 + i];
    if (sl) r = ad_op(a, IR_OP_Slice, (int[]){r, ad_c_i64(a, st, sp), ad_c_i64(a, en, sp), ad_c_i64(a, ax, sp)}, 4);
    acc(a, X, r);
  }
  if (needs(a, W)) {
    for_input(a, W);
    if (group != 1) return unsupported(a, node, "weight gradient with group > 1");
    int64_t perm[IR_MAX_RANK];
    for (int i = 0; i < xs.rank; i++) perm[i] = i < 2 ? 1 - i : i;
    int in[2] = {ad_transpose(a, dy, perm, xs.rank), ad_transpose(a, X, perm, xs.rank)};
    int id = ad_begin(a, IR_OP_Conv, in, 2, 1, NULL);
    ad_attr_is(a, id, "strides", d, sp);
    ad_attr_is(a, id, "dilations", s, sp);
    ad_attr_is(a, id, "pads", p, 2 * sp);
    int r = ad_end(a, id); /* [O, C, k'..] */
    ir_shape rs = ad_shape(a, r);
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK];
    int sl = 0;
    for (int i = 0; i < sp; i++) st[i] = 0, en[i] = k[i], ax[i] = 2 + i, sl |= rs.dims[2 + i] != k[i];
    if (sl) r = ad_op(a, IR_OP_Slice, (int[]){r, ad_c_i64(a, st, sp), ad_c_i64(a, en, sp), ad_c_i64(a, ax, sp)}, 4);
    acc(a, W, ad_transpose(a, r, perm, xs.rank));
  }
  if (B >= 0 && needs(a, B)) {
    for_input(a, B);
    int64_t axes[IR_MAX_RANK];
    int n = 0;
    for (int i = 0; i < ys.rank; i++)
      if (i != 1) axes[n++] = i;
    acc(a, B, ad_reduce(a, IR_OP_ReduceSum, dy, axes, n, 0));
  }
  return 0;
}

static int bw_node(ad_ctx *a, int node) {
  ir_node nd = a->g->nodes[node];
  int dy = nd.out[0] >= 0 && nd.out[0] < a->n0 ? a->grad[nd.out[0]] : -1;
  a->base = nd.name && *nd.name ? nd.name : ir_sprintf(a->g->arena, "%s_%d", ir_op_name(nd.op), node);
  a->tag = "grad_x";
  a->cnt = 0;
  a->stage = nd.stage; /* a node's backward runs in its stage */
  a->phase = IR_PHASE_BWD;
  if (nd.op == IR_OP_Split) return bw_split(a, node);
  if (nd.op == IR_OP_RNN || nd.op == IR_OP_GRU || nd.op == IR_OP_LSTM) {
    /* pass_rnn_unroll replaced these by their steps before autodiff */
    for (int k = 0; k < nd.n_out; k++)
      if (nd.out[k] >= 0 && nd.out[k] < a->n0 && a->grad[nd.out[k]] >= 0)
        return unsupported(a, node, "internal: the recurrent op was not unrolled (passes/train/rnn_unroll.c)");
    return 0;
  }
  if (dy < 0) return 0;
  if (ad_op_gradient(nd.op) != AD_GRAD) return unsupported(a, node, NULL);
  switch (nd.op) {
    case IR_OP_Conv: return bw_conv(a, node, dy);
    case IR_OP_Gemm: return bw_gemm(a, node, dy);
    case IR_OP_MatMul: return bw_matmul(a, node, dy);
    case IR_OP_MaxPool: return bw_maxpool(a, node, dy);
    case IR_OP_AveragePool:
    case IR_OP_GlobalAveragePool: return bw_avgpool(a, node, dy);
    case IR_OP_BatchNormalization: return bw_batchnorm(a, node, dy);
    case IR_OP_LayerNormalization: return bw_layernorm(a, node, dy);
    case IR_OP_Softmax:
    case IR_OP_LogSoftmax: return bw_softmax(a, node, dy);
    case IR_OP_ReduceSum:
    case IR_OP_ReduceMean:
    case IR_OP_ReduceSumSquare:
    case IR_OP_ReduceL2:
    case IR_OP_ReduceLogSumExp:
    case IR_OP_ReduceMax:
    case IR_OP_ReduceMin: return bw_reduce(a, node, dy);
    case IR_OP_GatherElements: return bw_gather_elements(a, node, dy);
    case IR_OP_Concat: return bw_concat(a, node, dy);
    case IR_OP_Slice: return bw_slice(a, node, dy);
    case IR_OP_Gather: return bw_gather(a, node, dy);
    case IR_OP_Pad: return bw_pad(a, node, dy);
    case IR_OP_InstanceNormalization: return bw_instnorm(a, node, dy);
    case IR_OP_Tile: return bw_tile(a, node, dy);
    case IR_OP_ConvTranspose: return bw_convtranspose(a, node, dy);
    case IR_OP_Where: return bw_where(a, node, dy);
    case IR_OP_Dropout: return bw_dropout(a, node, dy);
    case IR_OP_Reshape:
    case IR_OP_Flatten:
    case IR_OP_Squeeze:
    case IR_OP_Unsqueeze: {
      int X = nd.in[0];
      if (!needs(a, X)) return 0;
      for_input(a, X);
      ir_shape xs = ad_shape(a, X);
      acc(a, X, ad_reshape(a, dy, &xs));
      return 0;
    }
    case IR_OP_Expand: {
      int X = nd.in[0];
      if (!needs(a, X)) return 0;
      for_input(a, X);
      ir_shape xs = ad_shape(a, X);
      acc(a, X, ad_unbroadcast(a, dy, &xs));
      return 0;
    }
    case IR_OP_Transpose: {
      int X = nd.in[0];
      if (!needs(a, X)) return 0;
      for_input(a, X);
      int r = ad_shape(a, X).rank;
      int64_t perm[IR_MAX_RANK], inv[IR_MAX_RANK];
      const int64_t *p;
      int k = ir_attr_ints(&nd, "perm", &p);
      for (int i = 0; i < r; i++) perm[i] = k == r ? p[i] : r - 1 - i;
      for (int i = 0; i < r; i++) inv[perm[i]] = i;
      acc(a, X, ad_transpose(a, dy, inv, r));
      return 0;
    }
    default: return bw_eltwise(a, node, dy);
  }
}

/* What autodiff does with an op (ad_op_gradient in passes/train/autodiff.h): the ops
 * bw_node writes a backward for (its switch and bw_eltwise's), the ops whose outputs
 * carry no gradient to their inputs, and the rest, which it refuses. bw_node refuses
 * whatever this does not call AD_GRAD, so the table in docs/supported.md made from it
 * says no more than autodiff does. */
int ad_op_gradient(ir_op op) {
  switch (op) {
    case IR_OP_Shape:
    case IR_OP_Size:
    case IR_OP_ArgMax:
    case IR_OP_ArgMin:
    case IR_OP_Equal:
    case IR_OP_Less:
    case IR_OP_LessOrEqual:
    case IR_OP_Greater:
    case IR_OP_GreaterOrEqual:
    case IR_OP_IsNaN:
    case IR_OP_IsInf:
    case IR_OP_Sign:
    case IR_OP_Floor:
    case IR_OP_Ceil:
    case IR_OP_Round:
    case IR_OP_OneHot:
    case IR_OP_ConstantOfShape: return AD_NO_GRAD;
    /* bw_node */
    case IR_OP_Split:
    case IR_OP_RNN:
    case IR_OP_GRU:
    case IR_OP_LSTM: /* unrolled into their steps first (passes/train/rnn_unroll.c) */
    case IR_OP_Conv:
    case IR_OP_Gemm:
    case IR_OP_MatMul:
    case IR_OP_MaxPool:
    case IR_OP_AveragePool:
    case IR_OP_GlobalAveragePool:
    case IR_OP_BatchNormalization:
    case IR_OP_LayerNormalization:
    case IR_OP_Softmax:
    case IR_OP_LogSoftmax:
    case IR_OP_ReduceSum:
    case IR_OP_ReduceMean:
    case IR_OP_ReduceSumSquare:
    case IR_OP_ReduceL2:
    case IR_OP_ReduceLogSumExp:
    case IR_OP_ReduceMax:
    case IR_OP_ReduceMin:
    case IR_OP_GatherElements:
    case IR_OP_Concat:
    case IR_OP_Slice:
    case IR_OP_Gather:
    case IR_OP_Pad:
    case IR_OP_InstanceNormalization:
    case IR_OP_Tile:
    case IR_OP_ConvTranspose:
    case IR_OP_Where:
    case IR_OP_Dropout:
    case IR_OP_Reshape:
    case IR_OP_Flatten:
    case IR_OP_Squeeze:
    case IR_OP_Unsqueeze:
    case IR_OP_Expand:
    case IR_OP_Transpose:
    /* bw_eltwise */
    case IR_OP_Identity:
    case IR_OP_Neg:
    case IR_OP_Relu:
    case IR_OP_LeakyRelu:
    case IR_OP_Sigmoid:
    case IR_OP_Tanh:
    case IR_OP_Exp:
    case IR_OP_Log:
    case IR_OP_Sqrt:
    case IR_OP_Reciprocal:
    case IR_OP_Abs:
    case IR_OP_Erf:
    case IR_OP_Sin:
    case IR_OP_Cos:
    case IR_OP_Softplus:
    case IR_OP_Clip:
    case IR_OP_Gelu:
    case IR_OP_Elu:
    case IR_OP_Selu:
    case IR_OP_HardSigmoid:
    case IR_OP_HardSwish:
    case IR_OP_PRelu:
    case IR_OP_Sum:
    case IR_OP_Mean:
    case IR_OP_CumSum:
    case IR_OP_Cast:
    case IR_OP_Add:
    case IR_OP_Sub:
    case IR_OP_Mul:
    case IR_OP_Div:
    case IR_OP_Pow: return AD_GRAD;
    default: return AD_REFUSED;
  }
}

static int no_grad_op(ir_op op) { return ad_op_gradient(op) == AD_NO_GRAD; }

int ad_backward(ad_ctx *a, int loss) {
  ir_graph *g = a->g;
  a->n0 = g->n_values;
  a->need = ir_xcalloc((size_t)a->n0 + 1, 1);
  a->grad = ir_xmalloc(sizeof(int) * ((size_t)a->n0 + 1));
  for (int v = 0; v < a->n0; v++) {
    a->grad[v] = -1;
    a->need[v] = (char)is_param(a, v);
  }
  int n_nodes = g->n_nodes;
  for (int i = 0; i < n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead || no_grad_op(n->op)) continue;
    int any = 0;
    for (int k = 0; k < n->n_in; k++) any |= n->in[k] >= 0 && a->need[n->in[k]];
    for (int k = 0; k < n->n_out && any; k++)
      if (n->out[k] >= 0 && g->values[n->out[k]].dtype == a->ft) a->need[n->out[k]] = 1;
  }
  if (!a->need[loss]) {
    ir_error(g, "autodiff: the loss '%s' does not depend on any trainable float initializer", g->values[loss].name);
    return -1;
  }
  a->base = "loss";
  a->tag = "grad";
  a->cnt = 0;
  a->grad[loss] = ad_c_f(a, a->seed ? a->seed : 1, a->ft);
  for (int i = n_nodes - 1; i >= 0; i--) {
    if (g->nodes[i].dead) continue;
    bw_node(a, i);
  }
  return a->err || g->n_errors ? -1 : 0;
}
