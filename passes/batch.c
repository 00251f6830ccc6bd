/* passes/batch.c - the batch axis of every value when compiling for micro-batches, and
 * the nodes that cannot be split along it (see passes/batch.h). */
#include "passes/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "ir/ops.h"

/* The advice every report ends with. */
#define ADVICE "compile with -m 1 (the batch in one micro-batch)"

/* pass_batch_axis, constants included when consts (a constant folded from the batch's
 * size, such as indices built from its arange, has another shape at the whole batch). */
static int batch_axis(const ir_graph *g, int v, int consts) {
  const ir_graph *f = g->batch_full;
  if (!f || v < 0 || v >= g->n_values) return -3;
  const ir_value *x = &g->values[v];
  if (x->kind == IR_VAL_CONST && (!consts || x->is_initializer)) return -1;
  int fv = x->name ? ir_find_value(f, x->name) : -1;
  if (fv < 0) return -3;
  const ir_value *y = &f->values[fv];
  if (!ir_shape_static(&x->shape) || !ir_shape_static(&y->shape)) return -3;
  if (ir_shape_same_dims(&x->shape, &y->shape)) return -1;
  if (x->shape.rank != y->shape.rank) return -2;
  int axis = -1;
  for (int i = 0; i < x->shape.rank; i++) {
    if (x->shape.dims[i] == y->shape.dims[i]) continue;
    if (axis >= 0 || x->shape.dims[i] * g->microbatches != y->shape.dims[i]) return -2;
    axis = i;
  }
  return axis;
}

int pass_batch_axis(const ir_graph *g, int v) { return batch_axis(g, v, 0); }

static const ir_value *full_value(const ir_graph *g, int v) {
  const char *name = g->values[v].name;
  int fv = name ? ir_find_value(g->batch_full, name) : -1;
  return fv >= 0 ? &g->batch_full->values[fv] : NULL;
}

static int64_t one_if_unset(int64_t f) { return f > 0 ? f : 1; }

/* Where the batch of x (axis a of its whole-batch shape xf, that dim being A x B x C)
 * lands in a reshape of it to yf: row-major order is kept, so the batch elements are
 * those after the first `outer` and before the last `inner` of each block; the output
 * axis j whose leading and trailing dims divide those and whose size is outer' x B x
 * inner' holds them. 0 with *j, *A2, *C2; -1 when no axis does. */
static int reshape_batch(const ir_shape *xf, int a, int64_t A, int64_t C, const ir_shape *yf, int *j, int64_t *A2,
                         int64_t *C2) {
  int64_t outer = A, inner = C;
  if (xf->dims[a] % (A * C)) return -1;
  int64_t B = xf->dims[a] / (A * C);
  for (int i = 0; i < xf->rank; i++)
    if (i != a) *(i < a ? &outer : &inner) *= xf->dims[i];
  int64_t before = 1;
  for (int k = 0; k < yf->rank; k++) {
    int64_t after = 1, d = yf->dims[k];
    for (int i = k + 1; i < yf->rank; i++) after *= yf->dims[i];
    if (d > 0 && after > 0 && outer % before == 0 && inner % after == 0 && d == outer / before * B * (inner / after)) {
      *j = k, *A2 = outer / before, *C2 = inner / after;
      return 0;
    }
    before *= d;
    if (!before || before > outer) break;
  }
  return -1;
}

int pass_batch_reshape(ir_graph *g, int node, ir_shape *out) {
  const ir_node *n = &g->nodes[node];
  int m = g->microbatches;
  if (!g->batch_full || m <= 1 || n->n_in < 1 || n->n_out < 1 || n->out[0] < 0) return 0;
  int a = pass_batch_axis(g, n->in[0]);
  if (a < 0) return 0;
  const ir_value *x = &g->values[n->in[0]], *xf = full_value(g, n->in[0]), *yf = full_value(g, n->out[0]);
  if (!xf || !yf || !ir_shape_static(&yf->shape)) return 0;
  int j;
  int64_t A2, C2;
  if (!reshape_batch(&xf->shape, a, one_if_unset(x->batch_outer), one_if_unset(x->batch_inner), &yf->shape, &j, &A2,
                     &C2)) {
    *out = yf->shape;
    out->dims[j] /= m;
    return 1;
  }
  char sx[128], sy[128];
  ir_error_node(g, node, "no axis of its target shape %s (fixed at export) holds the batch of its input %s split in %d",
                ir_shape_str(&yf->shape, sy, sizeof sy), ir_shape_str(&xf->shape, sx, sizeof sx), m);
  return -1;
}

static int const_slices(ir_graph *g, int node, int slot, int axis, int64_t want);
static void gather_whole_batch(ir_graph *g, int node, int a);

int pass_batch_const(ir_graph *g, int node, int slot, int axis, int64_t want) {
  const ir_node *n = &g->nodes[node];
  int m = g->microbatches;
  const ir_value *v = ir_in(g, n, slot);
  if (!g->batch_full || m <= 1 || !v || v->kind != IR_VAL_CONST || v->data_nchw || axis < 0 || axis >= v->shape.rank ||
      v->shape.dims[axis] != want * m || !ir_shape_static(&v->shape))
    return 0;
  size_t es = ir_dtype_size(v->dtype), inner = es, outer = 1, d = (size_t)v->shape.dims[axis];
  for (int i = 0; i < v->shape.rank; i++)
    if (i != axis) *(i < axis ? &outer : &inner) *= (size_t)v->shape.dims[i];
  if (!es || (!v->zero_init && v->nbytes != outer * d * inner)) return 0;
  const unsigned char *p = v->data;
  for (size_t o = 0; o < outer && !v->zero_init; o++)
    for (size_t k = 1; k < d; k++)
      if (memcmp(p + (o * d + k) * inner, p + o * d * inner, inner)) return 0; /* the samples differ */
  return const_slices(g, node, slot, axis, want);
}

/* The constant input slot of node replaced by its first `want` slices along axis. 1. */
static int const_slices(ir_graph *g, int node, int slot, int axis, int64_t want) {
  const ir_value *v = ir_in(g, &g->nodes[node], slot);
  size_t es = ir_dtype_size(v->dtype), inner = es, outer = 1, d = (size_t)v->shape.dims[axis];
  for (int i = 0; i < v->shape.rank; i++)
    if (i != axis) *(i < axis ? &outer : &inner) *= (size_t)v->shape.dims[i];
  const unsigned char *p = v->data;
  ir_shape s = v->shape;
  s.dims[axis] = want;
  char *name = ir_sprintf(g->arena, "%s.micro", v->name ? v->name : "const");
  ir_dtype t = v->dtype;
  int nv;
  if (v->zero_init) {
    nv = ir_add_zero_const(g, name, t, &s);
  } else {
    size_t nb = outer * (size_t)want * inner;
    unsigned char *buf = ir_xmalloc(nb ? nb : 1);
    for (size_t o = 0; o < outer; o++) memcpy(buf + o * (size_t)want * inner, p + o * d * inner, (size_t)want * inner);
    nv = ir_add_const(g, name, t, &s, buf, nb);
    free(buf);
  }
  g->nodes[node].in[slot] = nv;
  return 1;
}

void pass_batch_consts(ir_graph *g, int node) {
  if (!g->batch_full || g->microbatches <= 1) return;
  const ir_node *n = &g->nodes[node];
  ir_kind kind = n->op >= 0 && n->op < IR_OP_COUNT ? ir_op_table[n->op].kind : IR_K_SPECIAL;
  if ((n->op == IR_OP_Gather || n->op == IR_OP_GatherND) && n->n_in >= 2) {
    int a = pass_batch_axis(g, n->in[0]);
    if (a >= 0) gather_whole_batch(g, node, a);
    return;
  }
  if (kind != IR_K_BINARY && kind != IR_K_VARIADIC && kind != IR_K_COMPARE && n->op != IR_OP_Concat &&
      n->op != IR_OP_Where)
    return;
  int x = -1, a = -1;
  for (int k = 0; k < n->n_in && a < 0; k++)
    if ((a = pass_batch_axis(g, n->in[k])) >= 0) x = n->in[k];
  const ir_value *xf = x >= 0 ? full_value(g, x) : NULL;
  if (!xf) return;
  int rx = g->values[x].shape.rank;
  int64_t whole = xf->shape.dims[a], micro = g->values[x].shape.dims[a];
  for (int k = 0; k < n->n_in; k++) {
    const ir_value *c = ir_in(g, &g->nodes[node], k);
    if (!c || c->kind != IR_VAL_CONST) continue;
    int ca = a - (rx - c->shape.rank); /* broadcasting aligns the last axes */
    if (ca >= 0 && c->shape.dims[ca] == whole) pass_batch_const(g, node, k, ca, micro);
  }
}

int pass_batch_expand(ir_graph *g, int node, int64_t *s, int n) {
  const ir_node *nd = &g->nodes[node];
  if (!g->batch_full || g->microbatches <= 1 || nd->n_in < 1) return 0;
  int a = pass_batch_axis(g, nd->in[0]);
  const ir_value *x = a >= 0 ? &g->values[nd->in[0]] : NULL, *xf = x ? full_value(g, nd->in[0]) : NULL;
  if (!xf) return 0;
  int j = a + (n - x->shape.rank); /* the shape lines up with the input's last axes */
  if (j < 0 || j >= n || s[j] != xf->shape.dims[a] || s[j] == x->shape.dims[a]) return 0;
  s[j] = x->shape.dims[a];
  return 1;
}

/* axis normalised for rank r (negative counts from the end) */
static int norm_axis(int64_t axis, int r) { return (int)(axis < 0 ? axis + r : axis); }

/* 1 when every element of the constant indices ix, at position p along its axis ai, picks
 * an element of data axis of size D whose sample (of b, C elements each) is p's; 0 when
 * one does not; -1 when a value cannot be read. */
static int indices_per_sample(const ir_value *ix, int ai, int64_t D, int64_t b, int64_t C, int64_t Ci) {
  int64_t inner = 1, n_ix = ir_shape_numel(&ix->shape);
  for (int d = ai + 1; d < ix->shape.rank; d++) inner *= ix->shape.dims[d];
  for (int64_t k = 0, v; k < n_ix; k++) {
    if (ir_const_i64(ix, k, &v)) return -1;
    if (v < 0) v += D;
    int64_t p = k / inner % ix->shape.dims[ai]; /* the position along the indices' batch axis */
    if (v < 0 || v >= D || v / C % b != p / Ci % b) return 0;
  }
  return 1;
}

/* 1 when n is a Gather along axis a, the axis that holds its data's batch. */
static int gathers_batch(const ir_graph *g, const ir_node *n, int a) {
  return n->op == IR_OP_Gather && n->n_in >= 2 && n->in[1] >= 0 && a >= 0 &&
         norm_axis(ir_attr_int(n, "axis", 0), g->values[n->in[0]].shape.rank) == a;
}

/* Gather along the axis a that holds its data's batch, with indices that hold the batch
 * (on their axis *ai): 1 when every index of sample j picks an element of sample j (as
 * b*S+s from the batch's arange does), at the micro-batch and at the whole batch; 0 when
 * some index picks another sample's; -1 when that is not known (indices computed at run
 * time) or the pattern is not this one. */
static int gather_per_sample(const ir_graph *g, const ir_node *n, int a, int *ai) {
  if (!gathers_batch(g, n, a) || (*ai = batch_axis(g, n->in[1], 1)) < 0) return -1;
  const ir_value *x = &g->values[n->in[0]], *ix = &g->values[n->in[1]];
  const ir_value *xf = full_value(g, n->in[0]), *ixf = full_value(g, n->in[1]);
  int64_t b = ir_graph_batch(g, -1), B = ir_graph_batch(g->batch_full, -1), D = x->shape.dims[a];
  int64_t C = one_if_unset(x->batch_inner), Ci = one_if_unset(ix->batch_inner);
  if (ix->kind != IR_VAL_CONST || !xf || !ixf || ixf->kind != IR_VAL_CONST || b <= 0 || B <= 0) return -1;
  int r = indices_per_sample(ix, *ai, D, b, C, Ci);
  return r == 1 ? indices_per_sample(ixf, *ai, xf->shape.dims[a], B, C, Ci) : r;
}

int pass_batch_sizes(ir_graph *g, int node, int64_t *s, const int *ax, int na) {
  const ir_node *nd = &g->nodes[node];
  if (!g->batch_full || g->microbatches <= 1 || nd->n_in < 1) return 0;
  int a = pass_batch_axis(g, nd->in[0]);
  const ir_value *x = a >= 0 ? &g->values[nd->in[0]] : NULL, *xf = x ? full_value(g, nd->in[0]) : NULL;
  if (!xf) return 0;
  for (int i = 0; i < na; i++)
    if (ax[i] == a && s[i] == xf->shape.dims[a] && s[i] != x->shape.dims[a]) {
      s[i] = x->shape.dims[a];
      return 1;
    }
  return 0;
}

/* Gather's constant indices fixed at export for the whole batch B on their axis ai, into
 * data whose batch axis is the gather axis with C elements a sample: when sample j's
 * indices are sample 0's plus j*C (each within sample 0's), the indices of the first
 * `want` samples replace them (pass_batch_consts). GatherND (batch_dims 0, the data's
 * batch on axis 0): the same for the first coordinate of each index tuple, the others
 * equal to sample 0's. */
static void gather_whole_batch(ir_graph *g, int node, int a) {
  const ir_node *n = &g->nodes[node];
  const ir_value *x = &g->values[n->in[0]], *ix = ir_in(g, n, 1), *xf = full_value(g, n->in[0]);
  int64_t B = ir_graph_batch(g->batch_full, -1), b = ir_graph_batch(g, -1), C = one_if_unset(x->batch_inner);
  int nd = n->op == IR_OP_GatherND, axis = nd ? 0 : norm_axis(ir_attr_int(n, "axis", 0), x->shape.rank);
  if (!ix || ix->kind != IR_VAL_CONST || !xf || B <= 0 || b <= 0 || b == B || one_if_unset(x->batch_outer) != 1 ||
      xf->shape.dims[a] != B * C || axis != a || !ir_shape_static(&ix->shape) ||
      (nd && (ir_attr_int(n, "batch_dims", 0) != 0 || ix->shape.rank < 2)))
    return;
  int64_t K = nd ? ix->shape.dims[ix->shape.rank - 1] : 1; /* GatherND: the coordinates of a tuple */
  if (K < 1) return;
  for (int ai = 0; ai < ix->shape.rank - nd; ai++) {
    if (ix->shape.dims[ai] != B) continue;
    int64_t inner = 1, numel = ir_shape_numel(&ix->shape), ok = 1;
    for (int d = ai + 1; d < ix->shape.rank; d++) inner *= ix->shape.dims[d];
    for (int64_t k = 0, v, v0; k < numel && ok; k++) {
      int64_t j = k / inner % B, k0 = k - j * inner, first = k % K == 0;
      ok = !ir_const_i64(ix, k, &v) && !ir_const_i64(ix, k0, &v0) &&
           (first ? v0 >= 0 && v0 < C && v == v0 + j * C : v == v0);
    }
    if (ok && const_slices(g, node, 1, ai, b)) return;
  }
}

/* Inputs whose values (not only their shapes or types) the node reads. */
static int data_inputs(const ir_node *n) {
  if (n->op == IR_OP_Shape || n->op == IR_OP_Size) return 0;
  if (n->op == IR_OP_CastLike) return 1;
  return n->n_in;
}

void pass_batch_node(ir_graph *g, int node) {
  if (!g->batch_full || g->microbatches <= 1) return;
  const ir_node *n = &g->nodes[node];
  int64_t A = 0, C = 0;
  int a = -1;
  for (int k = 0; k < data_inputs(n) && a < 0; k++)
    if ((a = pass_batch_axis(g, n->in[k])) >= 0) {
      A = g->values[n->in[k]].batch_outer;
      C = g->values[n->in[k]].batch_inner;
      if (n->op == IR_OP_Reshape || n->op == IR_OP_Flatten) {
        const ir_value *xf = full_value(g, n->in[k]), *yf = n->out[0] >= 0 ? full_value(g, n->out[0]) : NULL;
        int j;
        if (!xf || !yf || reshape_batch(&xf->shape, a, one_if_unset(A), one_if_unset(C), &yf->shape, &j, &A, &C))
          A = C = 0; /* the check reports it from the shapes */
      }
    }
  if (gathers_batch(g, n, a)) { /* the output holds the batch as its indices do */
    A = g->values[n->in[1]].batch_outer;
    C = g->values[n->in[1]].batch_inner;
  }
  if (n->op == IR_OP_Tile && a < 0 && n->n_out == 1 && n->out[0] >= 0) {
    /* x.repeat(B, ...) of a batch-free x: each sample's block is the same copies of x, the
     * batch outermost */
    int ao = pass_batch_axis(g, n->out[0]);
    const ir_value *x = ir_in(g, n, 0), *y = &g->values[n->out[0]];
    int64_t b = ir_graph_batch(g, -1);
    if (ao >= 0 && x && b > 0 && x->shape.dims[ao] > 0 && y->shape.dims[ao] % (b * x->shape.dims[ao]) == 0)
      A = 1, C = y->shape.dims[ao] / b;
  }
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0) {
      g->values[n->out[k]].batch_outer = A;
      g->values[n->out[k]].batch_inner = C;
    }
}

/* Element k of constant input i of node n, or dflt when it is absent or not constant. */
static int64_t const_in(ir_graph *g, const ir_node *n, int i, int64_t k, int64_t dflt) {
  const ir_value *v = ir_in(g, n, i);
  int64_t x;
  return v && v->kind == IR_VAL_CONST && !ir_const_i64(v, k, &x) ? x : dflt;
}

/* Slice keeps the batch axis a whole and in order? (opset 10+: starts, ends, axes,
 * steps are inputs 1-4; before: attributes without steps) */
static int slice_keeps(ir_graph *g, const ir_node *n, int a) {
  const ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  int r = x->shape.rank;
  int64_t na;
  const int64_t *av = NULL;
  if (n->opset >= 10) {
    const ir_value *axes = ir_in(g, n, 3), *starts = ir_in(g, n, 1);
    na = axes ? ir_shape_numel(&axes->shape) : starts ? ir_shape_numel(&starts->shape) : 0;
  } else {
    const int64_t *sv;
    na = ir_attr_ints(n, "axes", &av);
    if (na < 0) na = ir_attr_ints(n, "starts", &sv);
  }
  for (int64_t k = 0; k < na; k++) {
    int64_t ax = n->opset >= 10 ? const_in(g, n, 3, k, k) : av ? av[k] : k;
    if (norm_axis(ax, r) != a) continue;
    int64_t step = n->opset >= 10 ? const_in(g, n, 4, k, 1) : 1;
    return step == 1 && y->shape.dims[a] == x->shape.dims[a];
  }
  return 1;
}

/* Why node n cannot run on a micro-batch whose batch lies on axis a of its input 0 (and
 * axis ao of its output 0), or NULL when it can. Shapes catch reductions, gathers and
 * slices across the batch; these are the nodes that keep their shapes while mixing. */
static const char *works_across(ir_graph *g, const ir_node *n, int a, int ao) {
  const ir_value *x = ir_in(g, n, 0);
  int r = x ? x->shape.rank : 0;
  switch (n->op) {
    case IR_OP_Softmax:
    case IR_OP_LogSoftmax:
    case IR_OP_Hardmax: {
      int ax = norm_axis(ir_attr_int(n, "axis", n->opset >= 13 ? -1 : 1), r);
      if (n->opset >= 13 ? a == ax : a >= ax) return "it normalises along the batch axis";
      return NULL;
    }
    case IR_OP_LayerNormalization:
      return a >= norm_axis(ir_attr_int(n, "axis", -1), r) ? "it normalises over the batch axis" : NULL;
    case IR_OP_CumSum:
    case IR_OP_CumProd:
      return a == norm_axis(const_in(g, n, 1, 0, 0), r)
                 ? (n->op == IR_OP_CumSum ? "it sums along the batch axis" : "it multiplies along the batch axis")
                 : NULL;
    case IR_OP_Concat:
      return ao >= 0 && n->n_in > 1 && ao == norm_axis(ir_attr_int(n, "axis", 0), r)
                 ? "it concatenates along the batch axis"
                 : NULL;
    case IR_OP_Split: return a == norm_axis(ir_attr_int(n, "axis", 0), r) ? "it splits the batch axis" : NULL;
    case IR_OP_RNN:
    case IR_OP_GRU:
    case IR_OP_LSTM: /* X is [seq, batch, in], or [batch, seq, in] with layout 1 */
      return a == (ir_attr_int(n, "layout", 0) ? 1 : 0) ? "it runs its recurrence along the batch axis (the model's "
                                                          "input is sequence-first)"
                                                        : NULL;
    case IR_OP_Slice: return slice_keeps(g, n, a) ? NULL : "it slices the batch axis";
    case IR_OP_Tile: return const_in(g, n, 1, a, 1) != 1 ? "it repeats the batch axis" : NULL;
    case IR_OP_Gather: {
      int ai;
      return gather_per_sample(g, n, a, &ai) == 0 ? "its indices pick elements of other samples along the batch axis"
                                                  : NULL;
    }
    case IR_OP_BatchNormalization: /* inference: per channel; training: statistics of each micro-batch (by design, as in
                                      GPipe) */
      if (ir_attr_int(n, "training_mode", 0) == 0 && n->n_out == 1) return NULL;
      return a != 0 ? "it takes batch statistics over an axis that is not the batch's" : NULL;
    case IR_OP_RoiAlign: return "its batch_indices pick images of the whole batch, not of a micro-batch";
    case IR_OP_MaxPool: /* its Indices count from the micro-batch's first sample: right for MaxUnpool and the
                           gradient, which read them within the micro-batch, not as a graph output */
      if (n->n_out > 1 && n->out[1] >= 0 && g->values[n->out[1]].is_output)
        return "its Indices output, a graph output, would count from each micro-batch's first sample";
      return a != 0 ? "its input carries the batch on another axis than 0 (N of N,C,...)" : NULL;
    case IR_OP_Conv:
    case IR_OP_ConvTranspose:
    case IR_OP_AveragePool:
    case IR_OP_LpPool:
    case IR_OP_GlobalMaxPool:
    case IR_OP_GlobalAveragePool:
    case IR_OP_GlobalLpPool:
    case IR_OP_InstanceNormalization:
    case IR_OP_LRN:
    case IR_OP_DepthToSpace:
    case IR_OP_SpaceToDepth: return a != 0 ? "its input carries the batch on another axis than 0 (N of N,C,...)" : NULL;
    case IR_OP_GridSample: /* X's N with grid's N, or X's C with a grid that does not depend on it */
      return a > 1 || (a == 0) != (pass_batch_axis(g, n->in[1]) == 0) ? "it samples X across the batch axis" : NULL;
    case IR_OP_Det: return a >= r - 2 ? "it takes determinants across the batch axis" : NULL;
    case IR_OP_Attention: /* the fused node (inference): Q [B, ...] */
      return a != 0 ? "its input Q carries the batch on another axis than 0 (B of [B, H, S, D] or [B, S, H*D])" : NULL;
    default: return NULL;
  }
}

int pass_batch_check(ir_graph *g) {
  if (!g->batch_full || g->microbatches <= 1) return 0;
  int m = g->microbatches;
  char s1[128], s2[128];
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    int dep = 0, cascade = 0, mixed = 0, first = -1, a0 = n->n_in > 0 ? pass_batch_axis(g, n->in[0]) : -1;
    int gathers = gathers_batch(g, n, a0);
    for (int k = 0; k < data_inputs(n); k++) {
      int a = pass_batch_axis(g, n->in[k]);
      dep |= a >= 0 || a == -2;
      cascade |= a == -2;
      if (a < 0 || (gathers && k == 1)) continue; /* a Gather's output holds the batch as its indices */
      const ir_value *v = &g->values[n->in[k]], *w = first >= 0 ? &g->values[first] : v;
      if (one_if_unset(v->batch_outer) != one_if_unset(w->batch_outer) ||
          one_if_unset(v->batch_inner) != one_if_unset(w->batch_inner))
        mixed = 1;
      if (first < 0) first = n->in[k];
    }
    if (!dep || cascade) continue; /* an input that went wrong was reported at its node */
    int indep = 0, known = 0, bad = -1;
    for (int k = 0; k < n->n_out; k++) {
      if (n->out[k] < 0) continue;
      int a = pass_batch_axis(g, n->out[k]);
      if (a == -2 && bad < 0) bad = n->out[k];
      known += a != -3;
      indep += a == -1;
    }
    const char *why = NULL;
    if (bad >= 0) {
      const ir_value *f = full_value(g, bad);
      ir_error_node(g, i,
                    "its output is %s at a micro-batch, not the whole batch's %s split in %d on one axis; " ADVICE,
                    ir_shape_str(&g->values[bad].shape, s1, sizeof s1), ir_shape_str(&f->shape, s2, sizeof s2), m);
      return 1;
    }
    if (known && indep == known)
      why = "its output does not change with the batch size: it reduces, gathers or slices across the batch";
    else if (mixed) why = "its inputs hold the samples of the batch in different orders";
    else if (a0 >= 0) why = works_across(g, n, a0, n->n_out > 0 ? pass_batch_axis(g, n->out[0]) : -3);
    if (why) { /* the first one only: what follows from it would repeat it */
      ir_error_node(g, i, "%s, so %d micro-batches would not add up to the batch; " ADVICE, why, m);
      return 1;
    }
  }
  for (int k = 0; k < g->n_outputs; k++) {
    int v = g->outputs[k], a = pass_batch_axis(g, v);
    if ((a == 0 && one_if_unset(g->values[v].batch_outer) == 1) || a == -3 || a == -2) continue; /* -2: at its node */
    const ir_value *f = full_value(g, v);
    char nm[96];
    ir_error(g,
             "graph output '%s' (%s at a micro-batch, %s at the whole batch) %s, but micro-batches are joined on "
             "axis 0; " ADVICE,
             ir_printable(g->values[v].name, 60, nm, sizeof nm), ir_shape_str(&g->values[v].shape, s1, sizeof s1),
             f ? ir_shape_str(&f->shape, s2, sizeof s2) : "?",
             a < 0   ? "does not depend on the batch"
             : a > 0 ? "holds the batch on another axis"
                     : "holds it inside axis 0");
    return 1;
  }
  return 0;
}
