/* passes/lower/lower_llm_state.c - the operators opsets 24 to 28 added for gated and
 * recurrent transformer blocks and their caches, written in other ops after shape
 * inference (pass_lower_ops), so that both targets and autodiff take them as the ops
 * they become:
 *
 *   SwiGLU-28(A, B): A * Sigmoid(alpha * A) * B (A and B of one shape).
 *   TensorScatter-24(past_cache, update[, write_indices]): the cache with update written
 *     along `axis` from write_indices[b] (0 without it) for each sample b; mode
 *     "circular" wraps the positions modulo the cache length. Written as a Where over
 *     the cache positions of a GatherElements of update, so the cache position m of
 *     sample b takes update's position m - write_indices[b] when that is in [0, S).
 *   CausalConvWithState-27(X [B, C, L], W [C, 1, k][, bias, past_state [B, C, k-1]]):
 *     past_state (zeros without it) concatenated before X along the length, a depthwise
 *     Conv (group C) of that, SiLU after it with activation "silu" or "swish" (computed
 *     in float from the Conv's result in X's type);
 *     present_state the last k-1 positions of the concatenation.
 *   LinearAttention-27(Q [B, T, Hq*dk], K [B, T, Hkv*dk], V [B, T, Hkv*dv][, past_state
 *     [B, Hkv, dk, dv], decay, beta]): the recurrence of its update_rule (linear, gated,
 *     delta, gated_delta) run token by token (T steps in the graph, in float), each query
 *     head reading the state of its key/value head; output scale * q_t S_t, present_state
 *     the last state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/lower/lower_llm.h"
#include "passes/lower/lower_llm_state.h"
#include "passes/shape/shape_impl.h"

/* ---- shape rules ---- */

int sh_SwiGLU(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0), *y = sh_in(g, node, 1);
  char b1[64], b2[64];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input A") || sh_same_dtype(g, node, x, y, "input A", "input B")) return -1;
  int same = x->shape.rank == y->shape.rank;
  for (int i = 0; same && i < x->shape.rank; i++) same = x->shape.dims[i] == y->shape.dims[i];
  if (!same)
    SH_FAIL("inputs A %s and B %s must have the same shape", sh_str(&x->shape, b1, sizeof b1),
            sh_str(&y->shape, b2, sizeof b2));
  SH_NODE->flops = 5 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* TensorScatter's sequence axis (checked) */
static int ts_axis(ir_graph *g, int node, int *axis) {
  const ir_value *c = sh_in(g, node, 0), *u = sh_in(g, node, 1), *w = sh_in(g, node, 2);
  char b1[64], b2[64];
  int r = c->shape.rank;
  if (r < 2) SH_FAIL("past_cache of shape %s: rank 2 or more expected", sh_str(&c->shape, b1, sizeof b1));
  if (sh_axis(g, node, ir_attr_int(SH_NODE, "axis", -2), r, "axis", axis)) return -1;
  if (*axis == 0) SH_FAIL("axis 0 is the batch axis; the sequence axis must be another");
  int ok = u->shape.rank == r && u->shape.dims[*axis] <= c->shape.dims[*axis];
  for (int i = 0; ok && i < r; i++) ok = i == *axis || u->shape.dims[i] == c->shape.dims[i];
  if (!ok)
    SH_FAIL("update of shape %s must match past_cache %s except a sequence no longer along axis %d",
            sh_str(&u->shape, b1, sizeof b1), sh_str(&c->shape, b2, sizeof b2), *axis);
  if (w) {
    if (w->dtype != IR_INT64) SH_FAIL("write_indices must be int64");
    if (w->shape.rank != 1 || w->shape.dims[0] != c->shape.dims[0])
      SH_FAIL("write_indices of shape %s: [batch_size] = [%lld] expected", sh_str(&w->shape, b1, sizeof b1),
              (long long)c->shape.dims[0]);
  }
  const char *mode = ir_attr_str(SH_NODE, "mode", "linear");
  if (strcmp(mode, "linear") && strcmp(mode, "circular")) SH_FAIL("mode '%s' is not one of 'linear', 'circular'", mode);
  return 0;
}

int sh_TensorScatter(ir_graph *g, int node) {
  const ir_value *c = sh_in(g, node, 0), *u = sh_in(g, node, 1);
  int axis;
  if (sh_check_dtype(g, node, c, SH_ALL, "past_cache") || sh_same_dtype(g, node, c, u, "past_cache", "update") ||
      ts_axis(g, node, &axis))
    return -1;
  SH_NODE->flops = 0;
  return sh_set_out(g, node, 0, c->dtype, &c->shape);
}

/* CausalConvWithState's kernel size (checked) */
static int ccs_geometry(ir_graph *g, int node, int64_t *k) {
  const ir_value *x = sh_in(g, node, 0), *w = sh_in(g, node, 1), *bias = sh_in(g, node, 2), *p = sh_in(g, node, 3);
  char b1[64], b2[64];
  if (x->shape.rank != 3) SH_FAIL("input of shape %s: [B, C, L] expected", sh_str(&x->shape, b1, sizeof b1));
  int64_t C = x->shape.dims[1];
  if (w->shape.rank != 3 || w->shape.dims[0] != C || w->shape.dims[1] != 1 || w->shape.dims[2] < 1)
    SH_FAIL("weight of shape %s: [C, 1, k] = [%lld, 1, k] expected", sh_str(&w->shape, b1, sizeof b1), (long long)C);
  *k = w->shape.dims[2];
  if (sh_same_dtype(g, node, x, w, "input", "weight")) return -1;
  if (bias && (sh_same_dtype(g, node, x, bias, "input", "bias") || bias->shape.rank != 1 || bias->shape.dims[0] != C))
    SH_FAIL("bias of shape %s: [C] = [%lld] expected", sh_str(&bias->shape, b1, sizeof b1), (long long)C);
  if (p && (sh_same_dtype(g, node, x, p, "input", "past_state") || p->shape.rank != 3 ||
            p->shape.dims[0] != x->shape.dims[0] || p->shape.dims[1] != C || p->shape.dims[2] != *k - 1))
    SH_FAIL("past_state of shape %s: [B, C, k - 1] for input %s expected", sh_str(&p->shape, b1, sizeof b1),
            sh_str(&x->shape, b2, sizeof b2));
  const char *act = ir_attr_str(SH_NODE, "activation", "none");
  if (strcmp(act, "none") && strcmp(act, "silu") && strcmp(act, "swish"))
    SH_FAIL("activation '%s' is not one of 'none', 'silu', 'swish'", act);
  return 0;
}

int sh_CausalConvWithState(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  int64_t k;
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input") || ccs_geometry(g, node, &k)) return -1;
  ir_shape ps = x->shape;
  ps.dims[2] = k - 1;
  SH_NODE->flops = 2 * (double)k * sh_numel(&x->shape);
  if (sh_set_out(g, node, 0, x->dtype, &x->shape)) return -1;
  return sh_set_out(g, node, 1, sh_in(g, node, 3) ? sh_in(g, node, 3)->dtype : x->dtype, &ps);
}

/* LinearAttention's geometry */
typedef struct {
  int64_t B, T, Hq, Hkv, dk, dv, Dg, Db; /* Dg: decay per head (1) or per key dim; Db: beta per head or 1 */
  int gated, delta;
} la_dims;

static int la_geometry(ir_graph *g, int node, la_dims *d) {
  const ir_value *q = sh_in(g, node, 0), *k = sh_in(g, node, 1), *v = sh_in(g, node, 2), *p = sh_in(g, node, 3);
  const ir_value *dc = sh_in(g, node, 4), *be = sh_in(g, node, 5);
  char b1[64];
  const char *rule = ir_attr_str(SH_NODE, "update_rule", "gated_delta");
  if (!strcmp(rule, "linear")) d->gated = 0, d->delta = 0;
  else if (!strcmp(rule, "gated")) d->gated = 1, d->delta = 0;
  else if (!strcmp(rule, "delta")) d->gated = 0, d->delta = 1;
  else if (!strcmp(rule, "gated_delta")) d->gated = 1, d->delta = 1;
  else SH_FAIL("update_rule '%s' is not one of 'linear', 'gated', 'delta', 'gated_delta'", rule);
  d->Hq = ir_attr_int(SH_NODE, "q_num_heads", 0), d->Hkv = ir_attr_int(SH_NODE, "kv_num_heads", 0);
  if (d->Hq < 1 || d->Hkv < 1 || d->Hq % d->Hkv)
    SH_FAIL("q_num_heads %lld must be a positive multiple of kv_num_heads %lld", (long long)d->Hq, (long long)d->Hkv);
  const ir_value *qkv[3] = {q, k, v};
  const char *nm[3] = {"query", "key", "value"};
  for (int i = 0; i < 3; i++) {
    if (qkv[i]->shape.rank != 3)
      SH_FAIL("%s of shape %s: [B, T, heads * head size] expected", nm[i], sh_str(&qkv[i]->shape, b1, sizeof b1));
    if (i && sh_same_dtype(g, node, q, qkv[i], "query", nm[i])) return -1;
  }
  d->B = q->shape.dims[0], d->T = q->shape.dims[1];
  if (q->shape.dims[2] % d->Hq || k->shape.dims[2] % d->Hkv || v->shape.dims[2] % d->Hkv)
    SH_FAIL("the hidden sizes of query, key and value must be multiples of their head counts");
  d->dk = q->shape.dims[2] / d->Hq, d->dv = v->shape.dims[2] / d->Hkv;
  for (int i = 1; i < 3; i++)
    if (qkv[i]->shape.dims[0] != d->B || qkv[i]->shape.dims[1] != d->T)
      SH_FAIL("%s of shape %s: [B, T] = [%lld, %lld] leading expected", nm[i], sh_str(&qkv[i]->shape, b1, sizeof b1),
              (long long)d->B, (long long)d->T);
  if (k->shape.dims[2] != d->Hkv * d->dk)
    SH_FAIL("key of shape %s: [B, T, kv_num_heads * %lld] expected", sh_str(&k->shape, b1, sizeof b1),
            (long long)d->dk);
  if (p) {
    if (sh_check_dtype(g, node, p, SH_FLOATS, "past_state")) return -1;
    if (p->shape.rank != 4 || p->shape.dims[0] != d->B || p->shape.dims[1] != d->Hkv || p->shape.dims[2] != d->dk ||
        p->shape.dims[3] != d->dv)
      SH_FAIL("past_state of shape %s: [B, kv_num_heads, d_k, d_v] = [%lld, %lld, %lld, %lld] expected",
              sh_str(&p->shape, b1, sizeof b1), (long long)d->B, (long long)d->Hkv, (long long)d->dk, (long long)d->dv);
  }
  if (d->gated != !!dc) SH_FAIL("update_rule '%s' %s the decay input", rule, d->gated ? "needs" : "takes no");
  if (d->delta != !!be) SH_FAIL("update_rule '%s' %s the beta input", rule, d->delta ? "needs" : "takes no");
  d->Dg = d->Db = 1;
  if (dc) {
    if (sh_same_dtype(g, node, q, dc, "query", "decay")) return -1;
    int64_t last = dc->shape.rank == 3 ? dc->shape.dims[2] : -1;
    if (dc->shape.rank != 3 || dc->shape.dims[0] != d->B || dc->shape.dims[1] != d->T ||
        (last != d->Hkv && last != d->Hkv * d->dk))
      SH_FAIL("decay of shape %s: [B, T, kv_num_heads] or [B, T, kv_num_heads * d_k] expected",
              sh_str(&dc->shape, b1, sizeof b1));
    d->Dg = last / d->Hkv;
  }
  if (be) {
    if (sh_same_dtype(g, node, q, be, "query", "beta")) return -1;
    int64_t last = be->shape.rank == 3 ? be->shape.dims[2] : -1;
    if (be->shape.rank != 3 || be->shape.dims[0] != d->B || be->shape.dims[1] != d->T || (last != d->Hkv && last != 1))
      SH_FAIL("beta of shape %s: [B, T, kv_num_heads] or [B, T, 1] expected", sh_str(&be->shape, b1, sizeof b1));
    d->Db = last;
  }
  return 0;
}

int sh_LinearAttention(ir_graph *g, int node) {
  const ir_value *q = sh_in(g, node, 0), *p = sh_in(g, node, 3);
  la_dims d;
  if (sh_check_dtype(g, node, q, SH_FLOATS, "query") || la_geometry(g, node, &d)) return -1;
  int64_t yd[3] = {d.B, d.T, d.Hq * d.dv}, sd[4] = {d.B, d.Hkv, d.dk, d.dv};
  ir_shape ys, ss;
  memset(&ys, 0, sizeof ys);
  memset(&ss, 0, sizeof ss);
  ys.rank = 3, ss.rank = 4;
  memcpy(ys.dims, yd, sizeof yd);
  memcpy(ss.dims, sd, sizeof sd);
  SH_NODE->flops = 6 * (double)d.B * (double)d.T * (double)d.Hq * (double)d.dk * (double)d.dv;
  if (sh_set_out(g, node, 0, q->dtype, &ys)) return -1;
  return sh_set_out(g, node, 1, p ? p->dtype : q->dtype, &ss);
}

/* ---- lowering ---- */

/* x[lo:hi] along axis */
static int slice_axis(ad_ctx *a, int x, int64_t axis, int64_t lo, int64_t hi) {
  int in[4] = {x, ad_c_i64(a, &lo, 1), ad_c_i64(a, &hi, 1), ad_c_i64(a, &axis, 1)};
  return ad_op(a, IR_OP_Slice, in, 4);
}

static int concat_axis(ad_ctx *a, const int *xs, int n, int64_t axis) {
  int id = ad_begin(a, IR_OP_Concat, xs, n, 1, NULL);
  ad_attr_i(a, id, "axis", axis);
  return ad_end(a, id);
}

static int lower_swiglu(ad_ctx *a, int node) {
  ir_node nd = a->g->nodes[node];
  ir_dtype t = ad_dtype(a, nd.in[0]);
  double alpha = ir_attr_float(&nd, "alpha", 1.0f);
  int x = nd.in[0], ax = alpha == 1.0 ? x : ad_bin(a, IR_OP_Mul, x, ad_c_f(a, alpha, t));
  int sw = ad_bin(a, IR_OP_Mul, x, ad_un(a, IR_OP_Sigmoid, ax));
  return ad_take_output(a, node, 0, ad_bin(a, IR_OP_Mul, sw, nd.in[1]));
}

static int lower_tensor_scatter(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int axis;
  if (ts_axis(g, node, &axis)) return -1;
  ir_shape cs = ad_shape(a, nd.in[0]), us = ad_shape(a, nd.in[1]);
  int r = cs.rank, circular = !strcmp(ir_attr_str(&nd, "mode", "linear"), "circular");
  int64_t M = cs.dims[axis], S = us.dims[axis];
  /* the cache positions, along the axis */
  int64_t pd[IR_MAX_RANK];
  for (int i = 0; i < r; i++) pd[i] = i == axis ? M : 1;
  ir_shape ps = ir_shape_of(r, pd);
  int64_t *m = calloc((size_t)(M ? M : 1), sizeof(int64_t));
  for (int64_t i = 0; i < M; i++) m[i] = i;
  int d = ad_c_tensor(a, IR_INT64, &ps, m, sizeof(int64_t) * (size_t)M);
  free(m);
  if (nd.n_in > 2 && nd.in[2] >= 0) { /* m - write_indices[b], per sample */
    int64_t wd[IR_MAX_RANK];
    for (int i = 0; i < r; i++) wd[i] = i == 0 ? cs.dims[0] : 1;
    ir_shape ws = ir_shape_of(r, wd);
    d = ad_bin(a, IR_OP_Sub, d, ad_reshape(a, nd.in[2], &ws));
  }
  if (circular) {
    int id = ad_begin(a, IR_OP_Mod, (int[]){d, ad_c_i64_scalar(a, M)}, 2, 1, NULL);
    d = ad_end(a, id);
  }
  int in_range = ad_bin(a, IR_OP_Less, d, ad_c_i64_scalar(a, S));
  if (!circular) {
    int ge = ad_bin(a, IR_OP_GreaterOrEqual, d, ad_c_i64_scalar(a, 0));
    in_range = ad_bin(a, IR_OP_And, in_range, ge);
  }
  int idx = ad_bin(a, IR_OP_Min, ad_bin(a, IR_OP_Max, d, ad_c_i64_scalar(a, 0)), ad_c_i64_scalar(a, S - 1));
  ir_shape full = cs;
  idx = ad_expand(a, idx, &full);
  int id = ad_begin(a, IR_OP_GatherElements, (int[]){nd.in[1], idx}, 2, 1, NULL);
  ad_attr_i(a, id, "axis", axis);
  int upd = ad_end(a, id);
  int in[3] = {in_range, upd, nd.in[0]};
  return ad_take_output(a, node, 0, ad_op(a, IR_OP_Where, in, 3));
}

static int lower_causal_conv(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int64_t k;
  if (ccs_geometry(g, node, &k)) return -1;
  ir_shape xs = ad_shape(a, nd.in[0]);
  ir_dtype xt = ad_dtype(a, nd.in[0]);
  int64_t B = xs.dims[0], C = xs.dims[1], L = xs.dims[2];
  int x = nd.in[0], padded = x;
  if (k > 1) {
    int64_t pd[3] = {B, C, k - 1};
    ir_shape ps = ir_shape_of(3, pd);
    int past = nd.n_in > 3 && nd.in[3] >= 0 ? ad_cast(a, nd.in[3], xt) : ad_zeros(a, &ps, xt);
    padded = concat_axis(a, (int[]){past, x}, 2, 2);
  }
  int cin[3] = {padded, nd.in[1], nd.n_in > 2 && nd.in[2] >= 0 ? nd.in[2] : -1};
  int id = ad_begin(a, IR_OP_Conv, cin, cin[2] >= 0 ? 3 : 2, 1, NULL);
  ad_attr_i(a, id, "group", C);
  ad_attr_is(a, id, "kernel_shape", &k, 1);
  int y = ad_end(a, id);
  if (strcmp(ir_attr_str(&nd, "activation", "none"), "none")) { /* SiLU of the rounded Conv, in float */
    int yf = ad_cast(a, y, xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT);
    y = ad_cast(a, ad_bin(a, IR_OP_Mul, yf, ad_un(a, IR_OP_Sigmoid, yf)), xt);
  }
  int st;
  if (k > 1) st = slice_axis(a, padded, 2, L, L + k - 1);
  else {
    int64_t pd[3] = {B, C, 0};
    ir_shape ps = ir_shape_of(3, pd);
    st = ad_zeros(a, &ps, xt);
  }
  if (nd.n_out > 1 && nd.out[1] >= 0) st = ad_cast(a, st, g->values[nd.out[1]].dtype);
  ad_take_output(a, node, 1, st);
  if (a->err) return -1;
  return ad_take_output(a, node, 0, y);
}

static int lower_linear_attention(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  la_dims d;
  if (la_geometry(g, node, &d)) return -1;
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT;
  int64_t G = d.Hq / d.Hkv;
  int q = llm_heads_first(a, ad_cast(a, nd.in[0], t), d.B, d.T, d.Hq, d.dk);
  int k = llm_heads_first(a, ad_cast(a, nd.in[1], t), d.B, d.T, d.Hkv, d.dk);
  int v = llm_heads_first(a, ad_cast(a, nd.in[2], t), d.B, d.T, d.Hkv, d.dv);
  int eg = -1, be = -1;
  if (d.gated) /* exp(decay) as [B, Hkv, T, Dg] */
    eg = ad_un(a, IR_OP_Exp, llm_heads_first(a, ad_cast(a, nd.in[4], t), d.B, d.T, d.Hkv, d.Dg));
  if (d.delta) be = llm_heads_first(a, ad_cast(a, nd.in[5], t), d.B, d.T, d.Db, 1); /* [B, Db, T, 1] */
  int64_t sd[4] = {d.B, d.Hkv, d.dk, d.dv};
  ir_shape ss = ir_shape_of(4, sd);
  int S = nd.n_in > 3 && nd.in[3] >= 0 ? ad_cast(a, nd.in[3], t) : ad_zeros(a, &ss, t);
  int64_t kc[4] = {d.B, d.Hkv, d.dk, 1}, gc[4] = {d.B, d.Hkv, d.Dg, 1}, qg[4] = {d.B, d.Hkv, G, d.dk};
  int64_t ot[4] = {d.B, d.Hq, 1, d.dv};
  ir_shape kcs = ir_shape_of(4, kc), gcs = ir_shape_of(4, gc), qgs = ir_shape_of(4, qg), ots = ir_shape_of(4, ot);
  int *outs = calloc((size_t)(d.T ? d.T : 1), sizeof(int));
  for (int64_t i = 0; i < d.T; i++) {
    int kt = slice_axis(a, k, 2, i, i + 1), vt = slice_axis(a, v, 2, i, i + 1); /* [B, Hkv, 1, d] */
    if (d.gated) S = ad_bin(a, IR_OP_Mul, S, ad_reshape(a, slice_axis(a, eg, 2, i, i + 1), &gcs));
    if (d.delta) {
      int got = ad_bin(a, IR_OP_MatMul, kt, S); /* S^T k: [B, Hkv, 1, dv] */
      vt = ad_bin(a, IR_OP_Mul, slice_axis(a, be, 2, i, i + 1), ad_bin(a, IR_OP_Sub, vt, got));
    }
    S = ad_bin(a, IR_OP_Add, S, ad_bin(a, IR_OP_Mul, ad_reshape(a, kt, &kcs), vt));
    int qt = ad_reshape(a, slice_axis(a, q, 2, i, i + 1), &qgs); /* [B, Hkv, G, dk] */
    outs[i] = ad_reshape(a, ad_bin(a, IR_OP_MatMul, qt, S), &ots);
  }
  double scale = ir_attr_float(&nd, "scale", 0.0f);
  if (scale == 0.0) scale = 1.0 / sqrt((double)d.dk);
  int y = d.T == 1 ? outs[0] : concat_axis(a, outs, (int)d.T, 2); /* [B, Hq, T, dv] */
  free(outs);
  y = ad_bin(a, IR_OP_Mul, y, ad_c_f(a, scale, t));
  int64_t perm[4] = {0, 2, 1, 3}, y3[3] = {d.B, d.T, d.Hq * d.dv};
  ir_shape ys = ir_shape_of(3, y3);
  y = ad_reshape(a, ad_transpose(a, y, perm, 4), &ys);
  if (nd.n_out > 1 && nd.out[1] >= 0) ad_take_output(a, node, 1, ad_cast(a, S, g->values[nd.out[1]].dtype));
  if (a->err) return -1;
  return ad_take_output(a, node, 0, ad_cast(a, y, xt));
}

int llm_state_is_lowered(const ir_node *n) {
  return n->op == IR_OP_SwiGLU || n->op == IR_OP_TensorScatter || n->op == IR_OP_CausalConvWithState ||
         n->op == IR_OP_LinearAttention;
}

int llm_state_lower(ad_ctx *a, int node) {
  switch (a->g->nodes[node].op) {
    case IR_OP_SwiGLU: return lower_swiglu(a, node);
    case IR_OP_TensorScatter: return lower_tensor_scatter(a, node);
    case IR_OP_CausalConvWithState: return lower_causal_conv(a, node);
    default: return lower_linear_attention(a, node);
  }
}
