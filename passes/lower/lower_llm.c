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
 *     pairs; the rest passed through. */
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
    int ok = p ? c->shape.rank == 2 && c->shape.dims[1] == r->R / 2
               : c->shape.rank == 3 && c->shape.dims[0] == r->B && c->shape.dims[1] == r->S &&
                     c->shape.dims[2] == r->R / 2;
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

static ir_shape dims(int r, const int64_t *d) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = r;
  for (int i = 0; i < r; i++) s.dims[i] = d[i];
  return s;
}

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

static int finish(ad_ctx *a, int node, int y) {
  ir_node nd = a->g->nodes[node];
  for (int i = 0; i < nd.n_in; i++)
    if (nd.in[i] == y) y = ad_un(a, IR_OP_Identity, y);
  if (a->err) return -1;
  ir_take_output(a->g, y, nd.out[0]);
  return 0;
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
  return finish(a, node, ad_bin(a, IR_OP_Mul, y, nd.in[1]));
}

static int lower_swish(ad_ctx *a, int node) {
  ir_node nd = a->g->nodes[node];
  ir_dtype t = ad_dtype(a, nd.in[0]);
  double alpha = ir_attr_float(&nd, "alpha", 1.0f);
  int x = nd.in[0], ax = alpha == 1.0 ? x : ad_bin(a, IR_OP_Mul, x, ad_c_f(a, alpha, t));
  return finish(a, node, ad_bin(a, IR_OP_Mul, x, ad_un(a, IR_OP_Sigmoid, ax)));
}

static int lower_rope(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  rope_dims r;
  if (rope_geometry(g, node, &r)) return -1;
  ir_shape xs = ad_shape(a, nd.in[0]);
  int64_t bshd[4] = {r.B, r.S, r.H, r.D}, perm[4] = {0, 2, 1, 3};
  ir_shape s4 = dims(4, bshd);
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
  ir_shape cshape = dims(4, c4);
  cs = ad_reshape(a, cs, &cshape);
  sn = ad_reshape(a, sn, &cshape);
  int rot = r.R == r.D ? x : last_slice(a, x, 0, r.R), x1, x2;
  int interleaved = (int)ir_attr_int(&nd, "interleaved", 0);
  int64_t p5[5] = {r.B, r.S, r.H, r.R / 2, 2}, h4[4] = {r.B, r.S, r.H, r.R / 2};
  ir_shape pairs = dims(5, p5), half = dims(4, h4);
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
  ir_shape one = dims(5, q5), rs = dims(4, rr);
  int y = interleaved ? ad_reshape(a, concat_last(a, ad_reshape(a, re, &one), ad_reshape(a, im, &one)), &rs)
                      : concat_last(a, re, im);
  if (r.R < r.D) y = concat_last(a, y, last_slice(a, x, r.R, r.D));
  y = xs.rank == 4 ? ad_transpose(a, y, perm, 4) : ad_reshape(a, y, &xs);
  return finish(a, node, y);
}

int llm_is_lowered(const ir_node *n) {
  return n->op == IR_OP_RMSNormalization || n->op == IR_OP_Swish || n->op == IR_OP_RotaryEmbedding;
}

int llm_lower(ad_ctx *a, int node) {
  switch (a->g->nodes[node].op) {
    case IR_OP_RMSNormalization: return lower_rmsnorm(a, node);
    case IR_OP_Swish: return lower_swish(a, node);
    default: return lower_rope(a, node);
  }
}
