/* passes/lower/lower_llm.c - the operators opsets 23 and 24 added for transformer
 * exports, written in other ops after shape inference (pass_lower_ops), so that both
 * targets and autodiff handle them as the ops they become:
 *
 *   RMSNormalization-23(X, scale): X / sqrt(mean(X^2 over [axis, rank)) + epsilon) in
 *     float (stash_type 1; float64 stays float64), cast back to X's type, times scale.
 *   Swish-24(X): X * Sigmoid(alpha * X).
 *   RotaryEmbedding-23(X, cos_cache, sin_cache[, position_ids]): X [B, H, S, D], or
 *     [B, S, H*D] with num_heads; the first rotary_embedding_dim (default D) of each
 *     head's D rotated by the cos and sin of its position (the caches gathered at
 *     position_ids [B, S], else read as [B, S, R/2]) in halves or, interleaved, in
 *     pairs; the rest passed through.
 *   Attention-23/24/25(Q, K, V[, attn_mask, past_key, past_value, nonpad_kv_seqlen]): Q [B, Hq, Sq, D] or
 *     [B, Sq, Hq*D] with q_num_heads, K and V likewise with kv_num_heads (Hq a multiple:
 *     GQA and MQA repeat each key/value head for Hq/Hkv query heads); past_key/value
 *     concatenated before K and V along the sequence (present_key/value); scores Q K^T
 *     times `scale` (default 1/sqrt(D)), softcap * tanh(scores / softcap) when softcap
 *     > 0, plus the bias: a float attn_mask as is, a boolean one 0 where true and -inf
 *     where false, and with is_causal -inf past the diagonal offset by the past length;
 *     Softmax over the keys (a row with every key masked gives zeros), times V; the
 *     qk_matmul_output of modes 0 to 3; Attention-24's nonpad_kv_seqlen [B] (keys from
 *     nonpad_kv_seqlen[b] on are padding, and the causal frontier and the windows are
 *     offset by nonpad_kv_seqlen[b] - Sq) and Attention-25's left/right_window_size (key
 *     j for the query at position p while p - left <= j <= p + right). A mask shorter
 *     than total_length along its last axis is padded with masked keys. softmax_precision
 *     double computes the softmax in double (written in ops, not fused); other precisions
 *     than float, double or the inputs' type are refused with one line. float16 and
 *     bfloat16 are computed in float, rounded once at the outputs.
 *   In inference, Attention without the qk_matmul_output output stays one node
 *   (llm_attention_fused) for the targets' fused kernels, which never hold the whole
 *   score matrix; training (whose backward is taken through the ops written here) and
 *   the qk_matmul_output output, which is that matrix, are written in other ops: the
 *   scores [B, Hq, Sq, T] are then materialised, the causal and window masks computed
 *   when run from the key and query indices. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/lower/lower_llm.h"
#include "passes/shape/shape_impl.h"

/* ---- shape rules ---- */

int sh_RMSNormalization(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0), *s = sh_in(g, node, 1);
  int axis;
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || sh_same_dtype(g, node, x, s, "input X", "scale")) return -1;
  if (sh_axis(g, node, ir_attr_int(SH_NODE, "axis", -1), x->shape.rank, "axis", &axis)) return -1;
  int64_t st = ir_attr_int(SH_NODE, "stash_type", 1);
  if (st != 1) SH_FAIL("stash_type %lld is not supported (1: computed in float)", (long long)st);
  ir_shape norm = {0};
  norm.rank = x->shape.rank - axis;
  for (int i = 0; i < norm.rank; i++) norm.dims[i] = x->shape.dims[axis + i];
  if (sh_unibroadcast(g, node, &norm, &s->shape, "the normalized dims", "scale")) return -1;
  SH_NODE->flops = 4 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

int sh_Swish(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X")) return -1;
  SH_NODE->flops = 4 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* RotaryEmbedding's geometry: batch, sequence, heads, head size, rotated dims */
typedef struct {
  int64_t B, S, H, D, R;
} rope_dims;

static int rope_geometry(ir_graph *g, int node, rope_dims *r) {
  const ir_value *x = sh_in(g, node, 0), *cs = sh_in(g, node, 1), *sn = sh_in(g, node, 2), *p = sh_in(g, node, 3);
  char b[64];
  int64_t nh = ir_attr_int(SH_NODE, "num_heads", 0);
  if (x->shape.rank == 4) {
    r->B = x->shape.dims[0], r->H = x->shape.dims[1], r->S = x->shape.dims[2], r->D = x->shape.dims[3];
    if (nh && nh != r->H) SH_FAIL("num_heads %lld, but X [B, H, S, D] has %lld heads", (long long)nh, (long long)r->H);
  } else if (x->shape.rank == 3) {
    if (nh < 1 || x->shape.dims[2] % nh)
      SH_FAIL("X of shape %s ([B, S, hidden]) needs num_heads dividing its hidden size (num_heads %lld)",
              sh_str(&x->shape, b, sizeof b), (long long)nh);
    r->B = x->shape.dims[0], r->S = x->shape.dims[1], r->H = nh, r->D = x->shape.dims[2] / nh;
  } else {
    SH_FAIL("X of shape %s: [B, H, S, D] or [B, S, hidden] expected", sh_str(&x->shape, b, sizeof b));
  }
  r->R = ir_attr_int(SH_NODE, "rotary_embedding_dim", 0);
  if (!r->R) r->R = r->D;
  if (r->R < 2 || r->R > r->D || r->R % 2)
    SH_FAIL("rotary_embedding_dim %lld: an even number up to the head size %lld expected", (long long)r->R,
            (long long)r->D);
  for (int k = 1; k <= 2; k++) {
    const ir_value *c = k == 1 ? cs : sn;
    const char *name = k == 1 ? "cos_cache" : "sin_cache";
    if (sh_same_dtype(g, node, x, c, "input X", name)) return -1;
    int ok =
        p ? c->shape.rank == 2 && c->shape.dims[1] == r->R / 2
          : c->shape.rank == 3 && c->shape.dims[0] == r->B && c->shape.dims[1] == r->S && c->shape.dims[2] == r->R / 2;
    if (!ok)
      SH_FAIL("%s of shape %s: %s expected", name, sh_str(&c->shape, b, sizeof b),
              p ? "[max_position, rotary_embedding_dim / 2]" : "[B, S, rotary_embedding_dim / 2]");
  }
  if (p) {
    if (sh_check_dtype(g, node, p, SH_INDEX, "position_ids")) return -1;
    if (p->shape.rank != 2 || p->shape.dims[0] != r->B || p->shape.dims[1] != r->S)
      SH_FAIL("position_ids of shape %s: [B, S] = [%lld, %lld] expected", sh_str(&p->shape, b, sizeof b),
              (long long)r->B, (long long)r->S);
  }
  return 0;
}

int sh_RotaryEmbedding(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  rope_dims r;
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || rope_geometry(g, node, &r)) return -1;
  SH_NODE->flops = 3 * (double)r.B * (double)r.S * (double)r.H * (double)r.R;
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* ---- lowering ---- */

/* x[..., lo:hi] along the last axis */
static int last_slice(ad_ctx *a, int x, int64_t lo, int64_t hi) {
  int64_t ax = ad_shape(a, x).rank - 1;
  int in[4] = {x, ad_c_i64(a, &lo, 1), ad_c_i64(a, &hi, 1), ad_c_i64(a, &ax, 1)};
  return ad_op(a, IR_OP_Slice, in, 4);
}

static int concat_last(ad_ctx *a, int x, int y) {
  int in[2] = {x, y};
  int id = ad_begin(a, IR_OP_Concat, in, 2, 1, NULL);
  ad_attr_i(a, id, "axis", -1);
  return ad_end(a, id);
}

static int lower_rmsnorm(ad_ctx *a, int node) {
  ir_node nd = a->g->nodes[node];
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT;
  int r = ad_shape(a, nd.in[0]).rank, axis = (int)ir_attr_int(&nd, "axis", -1);
  if (axis < 0) axis += r;
  int64_t ax[IR_MAX_RANK];
  for (int i = axis; i < r; i++) ax[i - axis] = i;
  int x = ad_cast(a, nd.in[0], t);
  int ms = ad_reduce(a, IR_OP_ReduceMean, ad_bin(a, IR_OP_Mul, x, x), ax, r - axis, 1);
  int rms = ad_un(a, IR_OP_Sqrt, ad_bin(a, IR_OP_Add, ms, ad_c_f(a, ir_attr_float(&nd, "epsilon", 1e-5f), t)));
  int y = ad_cast(a, ad_bin(a, IR_OP_Div, x, rms), xt);
  return ad_take_output(a, node, 0, ad_bin(a, IR_OP_Mul, y, nd.in[1]));
}

static int lower_swish(ad_ctx *a, int node) {
  ir_node nd = a->g->nodes[node];
  ir_dtype t = ad_dtype(a, nd.in[0]);
  double alpha = ir_attr_float(&nd, "alpha", 1.0f);
  int x = nd.in[0], ax = alpha == 1.0 ? x : ad_bin(a, IR_OP_Mul, x, ad_c_f(a, alpha, t));
  return ad_take_output(a, node, 0, ad_bin(a, IR_OP_Mul, x, ad_un(a, IR_OP_Sigmoid, ax)));
}

static int lower_rope(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  rope_dims r;
  if (rope_geometry(g, node, &r)) return -1;
  ir_shape xs = ad_shape(a, nd.in[0]);
  int64_t bshd[4] = {r.B, r.S, r.H, r.D}, perm[4] = {0, 2, 1, 3};
  ir_shape s4 = ir_shape_of(4, bshd);
  int x = xs.rank == 4 ? ad_transpose(a, nd.in[0], perm, 4) : ad_reshape(a, nd.in[0], &s4);
  int cs = nd.in[1], sn = nd.in[2];
  if (nd.n_in > 3 && nd.in[3] >= 0) { /* the caches' rows at position_ids: [B, S, R/2] */
    for (int k = 0; k < 2; k++) {
      int in[2] = {k ? sn : cs, nd.in[3]};
      int id = ad_begin(a, IR_OP_Gather, in, 2, 1, NULL);
      ad_attr_i(a, id, "axis", 0);
      *(k ? &sn : &cs) = ad_end(a, id);
    }
  }
  int64_t c4[4] = {r.B, r.S, 1, r.R / 2};
  ir_shape cshape = ir_shape_of(4, c4);
  cs = ad_reshape(a, cs, &cshape);
  sn = ad_reshape(a, sn, &cshape);
  int rot = r.R == r.D ? x : last_slice(a, x, 0, r.R), x1, x2;
  int interleaved = (int)ir_attr_int(&nd, "interleaved", 0);
  int64_t p5[5] = {r.B, r.S, r.H, r.R / 2, 2}, h4[4] = {r.B, r.S, r.H, r.R / 2};
  ir_shape pairs = ir_shape_of(5, p5), half = ir_shape_of(4, h4);
  if (interleaved) { /* (x0, x1), (x2, x3), ...: [..., R/2, 2] */
    int pr = ad_reshape(a, rot, &pairs);
    x1 = ad_reshape(a, last_slice(a, pr, 0, 1), &half);
    x2 = ad_reshape(a, last_slice(a, pr, 1, 2), &half);
  } else {
    x1 = last_slice(a, rot, 0, r.R / 2);
    x2 = last_slice(a, rot, r.R / 2, r.R);
  }
  int re = ad_bin(a, IR_OP_Sub, ad_bin(a, IR_OP_Mul, cs, x1), ad_bin(a, IR_OP_Mul, sn, x2));
  int im = ad_bin(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, sn, x1), ad_bin(a, IR_OP_Mul, cs, x2));
  int64_t q5[5] = {r.B, r.S, r.H, r.R / 2, 1}, rr[4] = {r.B, r.S, r.H, r.R};
  ir_shape one = ir_shape_of(5, q5), rs = ir_shape_of(4, rr);
  int y = interleaved ? ad_reshape(a, concat_last(a, ad_reshape(a, re, &one), ad_reshape(a, im, &one)), &rs)
                      : concat_last(a, re, im);
  if (r.R < r.D) y = concat_last(a, y, last_slice(a, x, r.R, r.D));
  y = xs.rank == 4 ? ad_transpose(a, y, perm, 4) : ad_reshape(a, y, &xs);
  return ad_take_output(a, node, 0, y);
}

/* ---- Attention ---- */

int llm_attn_geometry(ir_graph *g, int node, llm_attn_dims *d) {
  const ir_node *n = SH_NODE;
  const ir_value *q = sh_in(g, node, 0), *k = sh_in(g, node, 1), *v = sh_in(g, node, 2);
  const ir_value *pk = sh_in(g, node, 4), *pv = sh_in(g, node, 5);
  char b[64], c[64];
  int64_t qh = ir_attr_int(n, "q_num_heads", 0), kh = ir_attr_int(n, "kv_num_heads", 0);
  if (q->shape.rank != k->shape.rank || q->shape.rank != v->shape.rank || (q->shape.rank != 3 && q->shape.rank != 4))
    SH_FAIL("Q, K and V must all be 4D [B, H, S, D] or all 3D [B, S, H*D]");
  d->three_d = q->shape.rank == 3;
  d->B = q->shape.dims[0];
  if (k->shape.dims[0] != d->B || v->shape.dims[0] != d->B) SH_FAIL("Q, K and V differ in their batch size");
  if (d->three_d) {
    if (qh < 1 || kh < 1 || q->shape.dims[2] % qh || k->shape.dims[2] % kh || v->shape.dims[2] % kh)
      SH_FAIL(
          "3D Q, K and V need q_num_heads and kv_num_heads dividing their hidden sizes (q_num_heads %lld, "
          "kv_num_heads %lld)",
          (long long)qh, (long long)kh);
    d->Hq = qh, d->Hkv = kh, d->Sq = q->shape.dims[1], d->Skv = k->shape.dims[1];
    d->D = q->shape.dims[2] / qh, d->Dv = v->shape.dims[2] / kh;
    if (k->shape.dims[2] / kh != d->D) SH_FAIL("K's head size differs from Q's");
    if (v->shape.dims[1] != d->Skv) SH_FAIL("K and V differ in their sequence length");
  } else {
    d->Hq = q->shape.dims[1], d->Hkv = k->shape.dims[1], d->Sq = q->shape.dims[2], d->Skv = k->shape.dims[2];
    d->D = q->shape.dims[3], d->Dv = v->shape.dims[3];
    if (k->shape.dims[3] != d->D)
      SH_FAIL("K's head size %lld differs from Q's %lld", (long long)k->shape.dims[3], (long long)d->D);
    if (v->shape.dims[1] != d->Hkv || v->shape.dims[2] != d->Skv) SH_FAIL("K and V differ in their heads or length");
  }
  if (d->Hkv < 1 || d->Hq % d->Hkv)
    SH_FAIL("%lld query heads are not a multiple of the %lld key/value heads", (long long)d->Hq, (long long)d->Hkv);
  d->Sp = 0;
  if (!pk != !pv) SH_FAIL("past_key and past_value must be given together");
  if (pk) {
    if (pk->shape.rank != 4 || pv->shape.rank != 4 || pk->shape.dims[0] != d->B || pk->shape.dims[1] != d->Hkv ||
        pk->shape.dims[3] != d->D || pv->shape.dims[0] != d->B || pv->shape.dims[1] != d->Hkv ||
        pv->shape.dims[2] != pk->shape.dims[2] || pv->shape.dims[3] != d->Dv)
      SH_FAIL("past_key %s / past_value %s: [B, kv_num_heads, past, head size] expected",
              sh_str(&pk->shape, b, sizeof b), sh_str(&pv->shape, c, sizeof c));
    d->Sp = pk->shape.dims[2];
  }
  const ir_value *np = sh_in(g, node, 6);
  if (np) {
    if (pk) SH_FAIL("nonpad_kv_seqlen cannot be combined with past_key and past_value");
    if (sh_check_dtype(g, node, np, SH_BIT(IR_INT64), "nonpad_kv_seqlen")) return -1;
    if (ir_shape_numel(&np->shape) != d->B || np->shape.rank != 1)
      SH_FAIL("nonpad_kv_seqlen of shape %s: [batch_size] = [%lld] expected", sh_str(&np->shape, b, sizeof b),
              (long long)d->B);
  }
  if (ir_attr_int(n, "left_window_size", -1) < -1 || ir_attr_int(n, "right_window_size", -1) < -1)
    SH_FAIL("left_window_size and right_window_size: -1 (unbounded) or a size expected");
  int64_t mode = ir_attr_int(n, "qk_matmul_output_mode", 0), sp = ir_attr_int(n, "softmax_precision", 0);
  if (mode < 0 || mode > 3) SH_FAIL("qk_matmul_output_mode %lld: 0 to 3 expected", (long long)mode);
  /* the narrow types compute in float; double is the one precision above it */
  if (sp && sp != (int64_t)q->dtype && sp != IR_DOUBLE && !(sp == IR_FLOAT && q->dtype != IR_DOUBLE))
    SH_FAIL("softmax_precision %lld other than float, double or the inputs' type is not supported", (long long)sp);
  return 0;
}

int sh_Attention(ir_graph *g, int node) {
  const ir_value *q = sh_in(g, node, 0), *m = sh_in(g, node, 3);
  llm_attn_dims d;
  if (sh_check_dtype(g, node, q, SH_BIT(IR_FLOAT) | SH_BIT(IR_DOUBLE) | SH_BIT(IR_FLOAT16) | SH_BIT(IR_BFLOAT16),
                     "input Q"))
    return -1;
  for (int i = 1; i < 6; i++)
    if (i != 3 && sh_in(g, node, i) && sh_same_dtype(g, node, q, sh_in(g, node, i), "input Q", "K, V and the past"))
      return -1;
  if (llm_attn_geometry(g, node, &d)) return -1;
  int64_t T = d.Sp + d.Skv;
  if (m) {
    if (m->dtype != IR_BOOL && sh_same_dtype(g, node, q, m, "input Q", "attn_mask")) return -1;
    /* a mask shorter than total_length along its last axis counts as padded with masked keys */
    int64_t full[4] = {d.B, d.Hq, d.Sq, T};
    ir_shape fs = ir_shape_of(4, full), out, ms = m->shape;
    if (ms.rank >= 1 && ms.dims[ms.rank - 1] > 1 && ms.dims[ms.rank - 1] < T) ms.dims[ms.rank - 1] = T;
    if (m->shape.rank > 4 || sh_broadcast(g, node, &fs, &ms, &out, "the scores", "attn_mask")) return -1;
    if (ir_shape_numel(&out) != ir_shape_numel(&fs))
      SH_FAIL("attn_mask does not broadcast to the scores [B, q_num_heads, q_length, total_length]");
  }
  int64_t y4[4] = {d.B, d.Hq, d.Sq, d.Dv}, y3[3] = {d.B, d.Sq, d.Hq * d.Dv};
  int64_t pk[4] = {d.B, d.Hkv, T, d.D}, pv[4] = {d.B, d.Hkv, T, d.Dv}, qk[4] = {d.B, d.Hq, d.Sq, T};
  ir_shape ys = d.three_d ? ir_shape_of(3, y3) : ir_shape_of(4, y4), pks = ir_shape_of(4, pk);
  ir_shape pvs = ir_shape_of(4, pv), qks = ir_shape_of(4, qk);
  SH_NODE->flops = 2.0 * (double)d.B * (double)d.Hq * (double)d.Sq * (double)T * (double)(d.D + d.Dv);
  if (sh_set_out(g, node, 0, q->dtype, &ys) || sh_set_out(g, node, 1, q->dtype, &pks) ||
      sh_set_out(g, node, 2, q->dtype, &pvs) || sh_set_out(g, node, 3, q->dtype, &qks))
    return -1;
  return 0;
}

int llm_heads_first(ad_ctx *a, int x, int64_t B, int64_t S, int64_t H, int64_t D) {
  int64_t s4[4] = {B, S, H, D}, perm[4] = {0, 2, 1, 3};
  ir_shape s = ir_shape_of(4, s4);
  return ad_transpose(a, ad_reshape(a, x, &s), perm, 4);
}

static int lower_attention(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  llm_attn_dims d;
  if (llm_attn_geometry(g, node, &d)) return -1;
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT; /* float16: in float */
  int64_t T = d.Sp + d.Skv, mode = ir_attr_int(&nd, "qk_matmul_output_mode", 0);
  int q = ad_cast(a, nd.in[0], t), k = ad_cast(a, nd.in[1], t), v = ad_cast(a, nd.in[2], t);
  if (d.three_d) {
    q = llm_heads_first(a, q, d.B, d.Sq, d.Hq, d.D);
    k = llm_heads_first(a, k, d.B, d.Skv, d.Hkv, d.D);
    v = llm_heads_first(a, v, d.B, d.Skv, d.Hkv, d.Dv);
  }
  if (d.Sp) { /* the cache first, along the sequence */
    int kk[2] = {ad_cast(a, nd.in[4], t), k}, vv[2] = {ad_cast(a, nd.in[5], t), v};
    int idk = ad_begin(a, IR_OP_Concat, kk, 2, 1, NULL), idv;
    ad_attr_i(a, idk, "axis", 2);
    k = ad_end(a, idk);
    idv = ad_begin(a, IR_OP_Concat, vv, 2, 1, NULL);
    ad_attr_i(a, idv, "axis", 2);
    v = ad_end(a, idv);
  }
  ad_take_output(a, node, 1, ad_cast(a, k, xt));
  ad_take_output(a, node, 2, ad_cast(a, v, xt));
  if (d.Hq > d.Hkv) { /* each key/value head serves Hq/Hkv query heads, in order */
    int64_t r = d.Hq / d.Hkv, k5[5] = {d.B, d.Hkv, 1, T, d.D}, ke[5] = {d.B, d.Hkv, r, T, d.D};
    int64_t v5[5] = {d.B, d.Hkv, 1, T, d.Dv}, ve[5] = {d.B, d.Hkv, r, T, d.Dv};
    int64_t k4[4] = {d.B, d.Hq, T, d.D}, v4[4] = {d.B, d.Hq, T, d.Dv};
    ir_shape a5 = ir_shape_of(5, k5), e5 = ir_shape_of(5, ke), a4 = ir_shape_of(4, k4);
    ir_shape b5 = ir_shape_of(5, v5), f5 = ir_shape_of(5, ve), b4 = ir_shape_of(4, v4);
    k = ad_reshape(a, ad_expand(a, ad_reshape(a, k, &a5), &e5), &a4);
    v = ad_reshape(a, ad_expand(a, ad_reshape(a, v, &b5), &f5), &b4);
  }
  double scale = ir_attr_float(&nd, "scale", 0.0f);
  if (!ir_attr_find(&nd, "scale")) scale = 1.0 / sqrt((double)d.D);
  const int64_t tr[4] = {0, 1, 3, 2};
  int s = ad_bin(a, IR_OP_MatMul, q, ad_transpose(a, k, tr, 4));
  s = ad_bin(a, IR_OP_Mul, s, ad_c_f(a, scale, t));
  int qk = s;
  double cap = ir_attr_float(&nd, "softcap", 0.0f);
  if (cap > 0)
    s = ad_bin(a, IR_OP_Mul, ad_un(a, IR_OP_Tanh, ad_bin(a, IR_OP_Div, s, ad_c_f(a, cap, t))), ad_c_f(a, cap, t));
  if (mode == 1) qk = s;
  int masked = 0;
  if (nd.n_in > 3 && nd.in[3] >= 0) {
    int m = nd.in[3];
    if (ad_dtype(a, m) != IR_BOOL) m = ad_cast(a, m, t);
    else {
      int in[3] = {m, ad_c_f(a, 0, t), ad_c_f(a, -INFINITY, t)};
      m = ad_op(a, IR_OP_Where, in, 3);
    }
    ir_shape ms = ad_shape(a, m);
    int64_t tm = ms.rank ? ms.dims[ms.rank - 1] : 1;
    if (tm > 1 && tm < T) { /* padded with masked keys up to total_length */
      ms.dims[ms.rank - 1] = T - tm;
      int64_t np = ir_shape_numel(&ms);
      size_t es = ir_dtype_size(t);
      unsigned char *pad = malloc((size_t)np * es);
      for (int64_t e = 0; e < np; e++) {
        float f = -INFINITY;
        double df = -INFINITY;
        memcpy(pad + (size_t)e * es, t == IR_DOUBLE ? (void *)&df : (void *)&f, es);
      }
      m = concat_last(a, m, ad_c_tensor(a, t, &ms, pad, (size_t)np * es));
      free(pad);
    }
    s = ad_bin(a, IR_OP_Add, s, m);
    masked = 1;
  }
  /* the causal frontier, the windows and nonpad_kv_seqlen's padding: comparisons of
   * the key index j [T] with the query's position i + offset [Sq, 1] (offset: the past
   * length, or nonpad_kv_seqlen - Sq per batch [B, 1, 1, 1]), computed when run */
  int64_t lw = ir_attr_int(&nd, "left_window_size", -1), rw = ir_attr_int(&nd, "right_window_size", -1);
  int causal = ir_attr_int(&nd, "is_causal", 0) != 0, npad = nd.n_in > 6 && nd.in[6] >= 0;
  if (causal || lw >= 0 || rw >= 0 || npad) {
    int64_t *iv = malloc(sizeof(int64_t) * (size_t)(d.Sq + T));
    for (int64_t j = 0; j < T; j++) iv[j] = j;
    for (int64_t i = 0; i < d.Sq; i++) iv[T + i] = i + (npad ? 0 : d.Sp);
    int64_t q2[2] = {d.Sq, 1}, b4[4] = {d.B, 1, 1, 1};
    ir_shape qs2 = ir_shape_of(2, q2), bs4 = ir_shape_of(4, b4);
    int jj = ad_c_i64(a, iv, (int)T), pos = ad_reshape(a, ad_c_i64(a, iv + T, (int)d.Sq), &qs2), np4 = -1;
    free(iv);
    if (npad) {
      np4 = ad_reshape(a, nd.in[6], &bs4);
      pos = ad_bin(a, IR_OP_Add, pos, ad_bin(a, IR_OP_Sub, np4, ad_c_i64_scalar(a, d.Sq)));
    }
    int ok = -1;
    if (causal) ok = ad_bin(a, IR_OP_LessOrEqual, jj, pos);
    if (lw >= 0) { /* pos - j <= lw */
      int w = ad_bin(a, IR_OP_LessOrEqual, ad_bin(a, IR_OP_Sub, pos, ad_c_i64_scalar(a, lw)), jj);
      ok = ok < 0 ? w : ad_bin(a, IR_OP_And, ok, w);
    }
    if (rw >= 0) { /* j - pos <= rw */
      int w = ad_bin(a, IR_OP_LessOrEqual, jj, ad_bin(a, IR_OP_Add, pos, ad_c_i64_scalar(a, rw)));
      ok = ok < 0 ? w : ad_bin(a, IR_OP_And, ok, w);
    }
    if (npad) {
      int w = ad_bin(a, IR_OP_Less, jj, np4);
      ok = ok < 0 ? w : ad_bin(a, IR_OP_And, ok, w);
    }
    int in[3] = {ok, ad_c_f(a, 0, t), ad_c_f(a, -INFINITY, t)};
    s = ad_bin(a, IR_OP_Add, s, ad_op(a, IR_OP_Where, in, 3));
    masked = 1;
  }
  if (mode == 2) qk = s;
  /* softmax_precision double: the softmax computed in double, its result rounded back */
  int dbl = t != IR_DOUBLE && ir_attr_int(&nd, "softmax_precision", 0) == IR_DOUBLE;
  int sd = dbl ? ad_cast(a, s, IR_DOUBLE) : s;
  int id = ad_begin(a, IR_OP_Softmax, &sd, 1, 1, NULL);
  ad_attr_i(a, id, "axis", -1);
  int p = ad_end(a, id);
  if (masked) { /* a row with every key masked: zeros, not NaN */
    int64_t last = 3;
    ir_dtype st = dbl ? IR_DOUBLE : t;
    int mx = ad_reduce(a, IR_OP_ReduceMax, sd, &last, 1, 1);
    int in[3] = {ad_bin(a, IR_OP_Greater, mx, ad_c_f(a, -INFINITY, st)), p, ad_c_f(a, 0, st)};
    p = ad_op(a, IR_OP_Where, in, 3);
  }
  if (dbl) p = ad_cast(a, p, t);
  if (mode == 3) qk = p;
  int y = ad_bin(a, IR_OP_MatMul, p, v);
  if (d.three_d) {
    int64_t perm[4] = {0, 2, 1, 3}, y3[3] = {d.B, d.Sq, d.Hq * d.Dv};
    ir_shape ys = ir_shape_of(3, y3);
    y = ad_reshape(a, ad_transpose(a, y, perm, 4), &ys);
  }
  ad_take_output(a, node, 3, ad_cast(a, qk, xt));
  if (a->err) return -1;
  return ad_take_output(a, node, 0, ad_cast(a, y, xt));
}

int llm_attention_fused(const ir_graph *g, const ir_node *n, int training) {
  if (n->op != IR_OP_Attention || training) return 0;
  if (n->n_out > 3 && n->out[3] >= 0) return 0;
  ir_dtype t = g->values[n->in[0]].dtype;
  if (ir_attr_int(n, "softmax_precision", 0) == IR_DOUBLE) return 0; /* the kernels' softmax is in float */
  return t == IR_FLOAT || t == IR_FLOAT16 || t == IR_BFLOAT16;
}

int llm_attn_plan_of(ir_graph *g, int node, llm_attn_plan *p) {
  memset(p, 0, sizeof *p);
  if (llm_attn_geometry(g, node, &p->d)) return -1;
  const ir_node *n = &g->nodes[node];
  const ir_value *m = sh_in(g, node, 3);
  p->T = p->d.Sp + p->d.Skv;
  p->scale = ir_attr_find(n, "scale") ? ir_attr_float(n, "scale", 0.0f) : 1.0 / sqrt((double)p->d.D);
  p->cap = ir_attr_float(n, "softcap", 0.0f);
  if (p->cap < 0) p->cap = 0;
  p->causal = ir_attr_int(n, "is_causal", 0) != 0;
  p->lw = ir_attr_int(n, "left_window_size", -1);
  p->rw = ir_attr_int(n, "right_window_size", -1);
  p->nonpad = sh_in(g, node, 6) != NULL;
  p->Tm = p->T;
  if (m) {
    int64_t md[4] = {1, 1, 1, 1};
    for (int k = 0; k < m->shape.rank; k++) md[4 - m->shape.rank + k] = m->shape.dims[k];
    p->has_mask = 1;
    p->mask_bool = m->dtype == IR_BOOL;
    p->mT = md[3] == 1 ? 0 : 1;
    p->mS = md[2] == 1 ? 0 : md[3];
    p->mH = md[1] == 1 ? 0 : md[2] * md[3];
    p->mB = md[0] == 1 ? 0 : md[1] * md[2] * md[3];
    if (md[3] > 1) p->Tm = md[3];
  }
  return 0;
}

int llm_is_lowered(const ir_node *n) {
  return n->op == IR_OP_RMSNormalization || n->op == IR_OP_Swish || n->op == IR_OP_RotaryEmbedding ||
         n->op == IR_OP_Attention;
}

int llm_lower(ad_ctx *a, int node) {
  switch (a->g->nodes[node].op) {
    case IR_OP_RMSNormalization: return lower_rmsnorm(a, node);
    case IR_OP_Swish: return lower_swish(a, node);
    case IR_OP_Attention: return lower_attention(a, node);
    default: return lower_rope(a, node);
  }
}
