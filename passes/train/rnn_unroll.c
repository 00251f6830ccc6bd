/* passes/train/rnn_unroll.c - training through RNN, GRU and LSTM: before autodiff, every
 * recurrent node is replaced by its recurrence written out one time step at a time in
 * ONNX ops (Gemm, Split, the gate activations, Mul, Add, Concat), whose gradients
 * passes/train/autodiff.c has. The forward computes what the fused inference kernel computes
 * (passes/rnn.h, codegen/rnn_expr.c: the same gate order, biases, clip, peepholes,
 * input_forget and linear_before_reset), in a different order of rounding.
 *
 * Per direction d: the input projection of all S steps is one Gemm ([S*B, I] x W_d^T,
 * plus the biases that sit outside the reset gate), split into S slices; each step
 * then does one Gemm with R_d (two for GRU without linear_before_reset, where the reset
 * gate scales h before the product) and the gate arithmetic. Y is the Concat of the
 * steps' h in time order, Y_h / Y_c the last step's state of each direction.
 *
 * The planner sees the steps as ordinary nodes, so it may cut a long recurrence
 * between steps. sequence_lens is not supported here (one error line). */
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/train/autodiff.h"
#include "passes/rewrite.h"
#include "passes/rnn.h"

static ir_shape shp(int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = rank;
  s.dims[0] = d0;
  s.dims[1] = d1;
  s.dims[2] = d2;
  s.dims[3] = d3;
  return s;
}

/* x[..., s:e, ...] on one axis */
static int slice1(ad_ctx *a, int x, int64_t axis, int64_t s, int64_t e) {
  int in[4] = {x, ad_c_i64(a, &s, 1), ad_c_i64(a, &e, 1), ad_c_i64(a, &axis, 1)};
  return ad_op(a, IR_OP_Slice, in, 4);
}

/* direction d's slice of a [D, ...] weight, reshaped to s */
static int per_dir(ad_ctx *a, int w, int d, int D, ir_shape s) {
  return ad_reshape(a, D == 1 ? w : slice1(a, w, 0, d, d + 1), &s);
}

static int gemm_bt(ad_ctx *a, int x, int w) { /* x w^T */
  int in[2] = {x, w};
  int id = ad_begin(a, IR_OP_Gemm, in, 2, 1, NULL);
  ad_attr_i(a, id, "transB", 1);
  return ad_end(a, id);
}

/* One Split of x along `axis` into n parts (n <= 8: what both code generators take), of
 * the given sizes, or equal when sizes is NULL. */
static void split_node(ad_ctx *a, int x, int axis, const int64_t *sizes, int n, int *out) {
  ir_graph *g = a->g;
  int in[2] = {x, sizes ? ad_c_i64(a, sizes, n) : -1};
  int id = ad_begin(a, IR_OP_Split, in, sizes ? 2 : 1, 1, NULL);
  int *outs = ir_alloc_array(g->arena, (size_t)n, sizeof(int));
  outs[0] = g->nodes[id].out[0];
  for (int k = 1; k < n; k++)
    outs[k] = ir_add_value(g, ir_sprintf(g->arena, "%s:%d", g->nodes[id].name, k), IR_VAL_ACT, IR_UNDEFINED);
  g->nodes[id].out = outs;
  g->nodes[id].n_out = n;
  for (int k = 0; k < n; k++) g->values[outs[k]].producer = id;
  ad_attr_i(a, id, "axis", axis);
  ad_end(a, id);
  for (int k = 0; k < n; k++) out[k] = g->nodes[id].out[k];
}

static void split(ad_ctx *a, int x, int n, int *out) { split_node(a, x, 1, NULL, n, out); }

/* x [n*rows, ...] into n blocks of `rows` along axis 0: a tree of Splits of at most 8 */
static void split_rows(ad_ctx *a, int x, int64_t n, int64_t rows, int *out) {
  if (n == 1) {
    out[0] = x;
    return;
  }
  int64_t c = n <= 8 ? 1 : (n + 7) / 8, m = (n + c - 1) / c, sz[8] = {0};
  int part[8];
  for (int k = 0; k < m; k++) sz[k] = (k < m - 1 ? c : n - c * (m - 1)) * rows;
  split_node(a, x, 0, sz, (int)m, c == 1 ? out : part);
  if (c > 1)
    for (int k = 0; k < m; k++) split_rows(a, part[k], sz[k] / rows, rows, out + k * c);
}

/* Concat along axis; both code generators take at most 64 inputs: a tree beyond */
static int concat(ad_ctx *a, const int *in, int n, int axis) {
  if (n > 64) {
    int c = (n + 63) / 64, m = (n + c - 1) / c, part[64];
    for (int k = 0; k < m; k++) part[k] = concat(a, in + k * c, k < m - 1 ? c : n - c * (m - 1), axis);
    return concat(a, part, m, axis);
  }
  int id = ad_begin(a, IR_OP_Concat, in, n, 1, NULL);
  ad_attr_i(a, id, "axis", axis);
  return ad_end(a, id);
}

static int act(ad_ctx *a, const pass_rnn_actv *f, int x) {
  int id;
  switch (f->fn) {
    case PASS_RNN_SIGMOID: return ad_un(a, IR_OP_Sigmoid, x);
    case PASS_RNN_TANH: return ad_un(a, IR_OP_Tanh, x);
    case PASS_RNN_RELU: return ad_un(a, IR_OP_Relu, x);
    case PASS_RNN_LEAKYRELU:
      id = ad_begin(a, IR_OP_LeakyRelu, &x, 1, 1, NULL);
      ad_attr_f(a, id, "alpha", f->alpha);
      return ad_end(a, id);
    case PASS_RNN_THRESHOLDEDRELU: { /* x > alpha ? x : 0 */
      int in[3] = {ad_bin(a, IR_OP_Greater, x, ad_c_f(a, f->alpha, a->ft)), x, ad_c_f(a, 0, a->ft)};
      return ad_op(a, IR_OP_Where, in, 3);
    }
    case PASS_RNN_HARDSIGMOID:
      id = ad_begin(a, IR_OP_HardSigmoid, &x, 1, 1, NULL);
      ad_attr_f(a, id, "alpha", f->alpha);
      ad_attr_f(a, id, "beta", f->beta);
      return ad_end(a, id);
    case PASS_RNN_AFFINE:
      return ad_bin(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, x, ad_c_f(a, f->alpha, a->ft)), ad_c_f(a, f->beta, a->ft));
    case PASS_RNN_SCALEDTANH:
      return ad_bin(a, IR_OP_Mul, ad_un(a, IR_OP_Tanh, ad_bin(a, IR_OP_Mul, x, ad_c_f(a, f->beta, a->ft))),
                    ad_c_f(a, f->alpha, a->ft));
    case PASS_RNN_ELU:
      id = ad_begin(a, IR_OP_Elu, &x, 1, 1, NULL);
      ad_attr_f(a, id, "alpha", f->alpha);
      return ad_end(a, id);
    case PASS_RNN_SOFTSIGN: /* x / (1 + |x|) */
      return ad_bin(a, IR_OP_Div, x, ad_bin(a, IR_OP_Add, ad_c_f(a, 1, a->ft), ad_un(a, IR_OP_Abs, x)));
    case PASS_RNN_SOFTPLUS: return ad_un(a, IR_OP_Softplus, x);
  }
  return -1;
}

/* act(clip(x)): the clip bounds the pre-activations of the gates, not h(c) */
static int gate(ad_ctx *a, const pass_rnn *r, const pass_rnn_actv *f, int x) {
  if (r->has_clip) {
    int in[3] = {x, ad_c_f(a, -r->clip, a->ft), ad_c_f(a, r->clip, a->ft)};
    x = ad_op(a, IR_OP_Clip, in, 3);
  }
  return act(a, f, x);
}

/* The node's output k is now computed by the (fresh) node producing v: that node writes
 * the old value instead, so names, consumers and graph outputs stay as they were. */
static void bind_out(ir_graph *g, int node, int k, int v) {
  int old = g->nodes[node].out[k], p = g->values[v].producer;
  ir_node *pn = &g->nodes[p];
  for (int j = 0; j < pn->n_out; j++)
    if (pn->out[j] == v) pn->out[j] = old;
  g->values[old].producer = p;
}

/* direction d's initial state [B, H]: of v ([D, B, H], layout 1 [B, D, H]) or zeros */
static int initial(ad_ctx *a, const pass_rnn *r, int v, int d) {
  ir_shape s = shp(2, r->B, r->H, 0, 0);
  if (v < 0) return ad_zeros(a, &s, a->ft);
  return ad_reshape(a, r->D == 1 ? v : slice1(a, v, r->layout ? 1 : 0, d, d + 1), &s);
}

static int unroll(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  pass_rnn r;
  if (pass_rnn_info(g, node, &r)) return -1;
  ir_node nd = g->nodes[node];
  if (r.has_seq) {
    ir_error_node(g, node,
                  "training through %s with input sequence_lens is not supported (export the sequences "
                  "padded to one length, without sequence_lens)",
                  ir_op_name(nd.op));
    return -1;
  }
  a->ft = g->values[nd.in[0]].dtype;
  a->base = nd.name && *nd.name ? nd.name : ir_sprintf(g->arena, "%s_%d", ir_op_name(nd.op), node);
  a->tag = "step";
  a->cnt = 0;
  int64_t S = r.S, B = r.B, I = r.I, H = r.H, G = r.G, GH = G * H;
  int D = r.D;
  int X = nd.in[0];
  int in_b = r.has_b ? nd.in[3] : -1, in_h0 = r.has_h0 ? nd.in[5] : -1;
  int in_c0 = r.has_c0 ? nd.in[6] : -1, in_p = r.has_p ? nd.in[7] : -1;
  if (r.layout) X = ad_transpose(a, X, (const int64_t[]){1, 0, 2}, 3); /* [S, B, I] */
  ir_shape sx2 = shp(2, S * B, I, 0, 0);
  int x2 = ad_reshape(a, X, &sx2);
  int *xs = calloc((size_t)S * 2, sizeof(int)), *steps = xs + S; /* a direction's input slices and h per step */
  int ydir[2] = {-1, -1};                                        /* a direction's Y: [S, 1, B, H] */
  int hl[2] = {-1, -1}, cl[2] = {-1, -1};
  for (int d = 0; d < D; d++) {
    int rev = r.reverse || d == 1;
    const pass_rnn_actv *f = &r.act[d][0], *gg = &r.act[d][r.NA > 1 ? 1 : 0], *hh = &r.act[d][r.NA > 2 ? 2 : 0];
    int Wd = per_dir(a, nd.in[1], d, D, shp(2, GH, I, 0, 0));
    int Rd = per_dir(a, nd.in[2], d, D, shp(2, GH, H, 0, 0));
    int bias_x = -1, rbh = -1; /* added to the input projection; GRU linear_before_reset: Rb of h */
    if (r.has_b) {
      int bd = per_dir(a, in_b, d, D, shp(1, 2 * GH, 0, 0, 0));
      int wb = slice1(a, bd, 0, 0, GH), rb = slice1(a, bd, 0, GH, 2 * GH);
      if (r.lbr) {
        int parts[2] = {ad_bin(a, IR_OP_Add, slice1(a, wb, 0, 0, 2 * H), slice1(a, rb, 0, 0, 2 * H)),
                        slice1(a, wb, 0, 2 * H, 3 * H)};
        bias_x = concat(a, parts, 2, 0);
        rbh = slice1(a, rb, 0, 2 * H, 3 * H);
      } else {
        bias_x = ad_bin(a, IR_OP_Add, wb, rb);
      }
    }
    int xp = gemm_bt(a, x2, Wd); /* [S*B, GH] */
    if (bias_x >= 0) xp = ad_bin(a, IR_OP_Add, xp, bias_x);
    split_rows(a, xp, S, B, xs); /* the steps' slices of the projection: [B, GH] each */
    int hp = initial(a, &r, in_h0, d), cp = r.op == IR_OP_LSTM ? initial(a, &r, in_c0, d) : -1;
    int pi = -1, po = -1, pf = -1;
    if (in_p >= 0) {
      int pd = per_dir(a, in_p, d, D, shp(1, 3 * H, 0, 0, 0));
      pi = slice1(a, pd, 0, 0, H);
      po = slice1(a, pd, 0, H, 2 * H);
      pf = slice1(a, pd, 0, 2 * H, 3 * H);
    }
    int Rzr = -1, Rh = -1;
    if (r.op == IR_OP_GRU && !r.lbr) {
      Rzr = slice1(a, Rd, 0, 0, 2 * H);
      Rh = slice1(a, Rd, 0, 2 * H, 3 * H);
    }
    for (int64_t k = 0; k < S; k++) {
      int64_t t = rev ? S - 1 - k : k;
      int xt = xs[t];
      int hn;
      if (r.op == IR_OP_RNN) {
        hn = gate(a, &r, f, ad_bin(a, IR_OP_Add, xt, gemm_bt(a, hp, Rd)));
      } else if (r.op == IR_OP_GRU) {
        int xg[3], hg[3];
        split(a, xt, 3, xg);
        if (r.lbr) {
          split(a, gemm_bt(a, hp, Rd), 3, hg);
        } else {
          split(a, gemm_bt(a, hp, Rzr), 2, hg);
        }
        int z = gate(a, &r, f, ad_bin(a, IR_OP_Add, xg[0], hg[0]));
        int rg = gate(a, &r, f, ad_bin(a, IR_OP_Add, xg[1], hg[1]));
        int ah;
        if (r.lbr) {
          int hr = rbh >= 0 ? ad_bin(a, IR_OP_Add, hg[2], rbh) : hg[2];
          ah = ad_bin(a, IR_OP_Add, xg[2], ad_bin(a, IR_OP_Mul, rg, hr));
        } else {
          ah = ad_bin(a, IR_OP_Add, xg[2], gemm_bt(a, ad_bin(a, IR_OP_Mul, rg, hp), Rh));
        }
        int ht = gate(a, &r, gg, ah);
        /* (1 - z) * ht + z * hp */
        hn = ad_bin(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), z), ht),
                    ad_bin(a, IR_OP_Mul, z, hp));
      } else { /* LSTM: gates i, o, f, c */
        int pre[4];
        split(a, ad_bin(a, IR_OP_Add, xt, gemm_bt(a, hp, Rd)), 4, pre);
        int ai = pi >= 0 ? ad_bin(a, IR_OP_Add, pre[0], ad_bin(a, IR_OP_Mul, pi, cp)) : pre[0];
        int ig = gate(a, &r, f, ai), fg;
        if (r.input_forget) {
          fg = ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), ig);
        } else {
          int af = pf >= 0 ? ad_bin(a, IR_OP_Add, pre[2], ad_bin(a, IR_OP_Mul, pf, cp)) : pre[2];
          fg = gate(a, &r, f, af);
        }
        int cg = gate(a, &r, gg, pre[3]);
        int cn = ad_bin(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, fg, cp), ad_bin(a, IR_OP_Mul, ig, cg));
        int ao = po >= 0 ? ad_bin(a, IR_OP_Add, pre[1], ad_bin(a, IR_OP_Mul, po, cn)) : pre[1];
        int og = gate(a, &r, f, ao);
        hn = ad_bin(a, IR_OP_Mul, og, act(a, hh, cn));
        cp = cn;
      }
      hp = hn;
      steps[t] = hn;
    }
    hl[d] = hp;
    cl[d] = cp;
    if (r.has_y) {
      ir_shape s4 = shp(4, 1, 1, B, H);
      for (int64_t t = 0; t < S; t++) steps[t] = ad_reshape(a, steps[t], &s4);
      ydir[d] = concat(a, steps, (int)S, 0);
    }
  }
  /* every output's last node is made here for it alone (bind_out) */
  if (!a->err && r.has_y) {
    int y = D == 1 ? ydir[0] : concat(a, ydir, D, 1); /* [S, D, B, H] */
    if (r.layout) y = ad_transpose(a, y, (const int64_t[]){2, 0, 1, 3}, 4);
    bind_out(g, node, 0, y);
  }
  for (int k = 1; k <= 2 && !a->err; k++) {
    if (!(k == 1 ? r.has_yh : r.has_yc)) continue;
    int v, *last = k == 1 ? hl : cl;
    if (D == 1) { /* [B, H] -> [1, B, H] (layout 1: [B, 1, H]) */
      ir_shape s3 = r.layout ? shp(3, B, 1, H, 0) : shp(3, 1, B, H, 0);
      v = ad_reshape(a, last[0], &s3);
    } else {
      ir_shape s3 = shp(3, 1, B, H, 0);
      int parts[2] = {ad_reshape(a, last[0], &s3), ad_reshape(a, last[1], &s3)};
      v = concat(a, parts, 2, 0); /* [D, B, H] */
      if (r.layout) v = ad_transpose(a, v, (const int64_t[]){1, 0, 2}, 3);
    }
    bind_out(g, node, k, v);
  }
  free(xs);
  g->nodes[node].dead = 1;
  return a->err ? -1 : 0;
}

int pass_rnn_unroll(ir_graph *g) {
  int n = g->n_nodes, done = 0;
  ad_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.g = g;
  ctx.stage = -1;
  ctx.phase = IR_PHASE_FWD;
  for (int i = 0; i < n; i++) {
    ir_node *nd = &g->nodes[i];
    if (nd->dead || (nd->op != IR_OP_RNN && nd->op != IR_OP_GRU && nd->op != IR_OP_LSTM)) continue;
    if (unroll(&ctx, i)) return -1;
    done++;
  }
  if (!done) return 0;
  if (ir_toposort(g)) return -1;
  ir_compact(g);
  return g->n_errors ? -1 : 0;
}
