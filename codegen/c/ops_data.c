/* codegen/c/ops_data.c - data movement, shape ops and reductions for the CPU target:
 * Reshape-like copies, Dropout, Shape, Size, ConstantOfShape, Range, Concat, Split,
 * Slice, Gather, GatherElements, Transpose, Pad, Tile, Reduce*, ArgMax/ArgMin, CumSum, CumProd,
 * Trilu, DepthToSpace, SpaceToDepth, OneHot, Resize/Upsample; and the op dispatch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "codegen/op_params.h"

#define LL(x) ((long long)(x))

static int norm_axis(int64_t a, int r) { return (int)(a < 0 ? a + r : a); }

/* Emit nested loops over shape dims[0..r) named i0..; returns the number opened. */
static int open_loops(cg_ctx *c, const int64_t *dims, int r, int indent) {
  for (int d = 0; d < r; d++)
    cg_w(c, "%*sfor (long i%d = 0; i%d < %lld; i%d++) {\n", indent + 2 * d, "", d, d, LL(dims[d]), d);
  return r;
}
static void close_loops(cg_ctx *c, int r, int indent) {
  for (int d = r - 1; d >= 0; d--) cg_w(c, "%*s}\n", indent + 2 * d, "");
}

/* "i0 * 12 + i1 * 3 + i2" from strides (zero strides skipped), or "0". */
static const char *index_expr(char *buf, size_t n, const int64_t *st, int r) {
  size_t o = 0;
  buf[0] = 0;
  for (int d = 0; d < r; d++) {
    if (!st[d]) continue;
    if (st[d] == 1) o += (size_t)snprintf(buf + o, n - o, "%si%d", o ? " + " : "", d);
    else o += (size_t)snprintf(buf + o, n - o, "%si%d * %lld", o ? " + " : "", d, LL(st[d]));
  }
  if (!o) snprintf(buf, n, "0");
  return buf;
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity when the output cannot alias */
static int emit_copy(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  if (ir_value_bytes(x) != ir_value_bytes(y)) return cg_fail(c, n, "input and output sizes differ");
  if (cg_numel(y)) cg_w(c, "  memcpy(y0, x0, %lldu);\n", LL(ir_value_bytes(y)));
  return 0;
}

static int emit_dropout(cg_ctx *c, const ir_node *n) {
  ir_value *y = cg_out(c, n, 0), *mask = cg_out(c, n, 1);
  /* inference semantics: the output is the input; the mask all true */
  if (y && cg_numel(y)) cg_w(c, "  memcpy(y0, x0, %lldu);\n", LL(ir_value_bytes(y)));
  if (mask && cg_numel(mask)) cg_w(c, "  memset(y1, 1, %lldu);\n", LL(ir_value_bytes(mask)));
  return 0;
}

static int emit_shape(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int64_t s, e;
  cg_shape_range(n, r, &s, &e);
  int k = 0;
  for (int64_t i = s; i < e; i++) cg_w(c, "  y0[%d] = %lld;\n", k++, LL(x->shape.dims[i]));
  if (k != cg_numel(y)) return cg_fail(c, n, "output size does not match the shape slice");
  return 0;
}

static int emit_size(cg_ctx *c, const ir_node *n) {
  cg_w(c, "  y0[0] = %lld;\n", LL(cg_numel(cg_in(c, n, 0))));
  return 0;
}

static int emit_constant_of_shape(cg_ctx *c, const ir_node *n) {
  ir_value *y = cg_out(c, n, 0);
  const ir_attr *a = ir_attr_find(n, "value");
  double v = 0;
  if (a && a->type == IR_ATTR_TENSOR && a->tensor >= 0) ir_const_f64(&c->g->values[a->tensor], 0, &v);
  char l[48];
  if (!cg_numel(y)) return 0;
  if (ir_dtype_is_float(y->dtype)) cg_flit(l, sizeof l, v, y->dtype);
  else snprintf(l, sizeof l, "%lld", LL(v));
  cg_w(c, "  for (long i = 0; i < %lld; i++) y0[i] = %s;\n", LL(cg_numel(y)), l);
  return 0;
}

static int emit_range(cg_ctx *c, const ir_node *n) {
  ir_value *y = cg_out(c, n, 0);
  const char *T = cg_ctype(y->dtype);
  if (!cg_numel(y)) return 0;
  cg_w(c, "  for (long i = 0; i < %lld; i++) y0[i] = (%s)(x0[0] + (%s)i * x2[0]);\n", LL(cg_numel(y)), T, T);
  return 0;
}

static int emit_concat(cg_ctx *c, const ir_node *n) {
  ir_value *y = cg_out(c, n, 0);
  int r = y->shape.rank, axis;
  int64_t outer, inner;
  if (cg_axis_split(c->g, "cpu", n, y, &axis, &outer, &inner)) return -1;
  int64_t tot = y->shape.dims[axis] * inner, off = 0;
  size_t es = ir_dtype_size(y->dtype);
  for (int k = 0; k < n->n_in; k++) {
    ir_value *x = cg_in(c, n, k);
    if (!x) continue;
    int64_t chunk = x->shape.rank == r ? x->shape.dims[axis] * inner : 0;
    if (chunk && outer)
      cg_w(c, "  for (long o = 0; o < %lld; o++) memcpy(y0 + o * %lld + %lld, x%d + o * %lld, %lldu);\n", LL(outer),
           LL(tot), LL(off), k, LL(chunk), LL(chunk * (int64_t)es));
    off += chunk;
  }
  if (off != tot) return cg_fail(c, n, "input sizes do not add up to the output");
  return 0;
}

static int emit_split(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0);
  int axis;
  int64_t outer, inner;
  if (cg_axis_split(c->g, "cpu", n, x, &axis, &outer, &inner)) return -1;
  int64_t tot = x->shape.dims[axis] * inner, off = 0;
  size_t es = ir_dtype_size(x->dtype);
  for (int k = 0; k < n->n_out; k++) {
    ir_value *y = cg_out(c, n, k);
    if (!y) continue;
    int64_t chunk = y->shape.dims[axis] * inner;
    if (chunk && outer)
      cg_w(c, "  for (long o = 0; o < %lld; o++) memcpy(y%d + o * %lld, x0 + o * %lld + %lld, %lldu);\n", LL(outer), k,
           LL(chunk), LL(tot), LL(off), LL(chunk * (int64_t)es));
    off += chunk;
  }
  return 0;
}

/* Slice: starts/ends/axes/steps from constant inputs (opset >= 10) or attributes. */
static int emit_slice(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int64_t st[IR_MAX_RANK], sp[IR_MAX_RANK];
  if (cg_slice_params(c->g, "cpu", n, st, sp)) return -1;
  if (!cg_numel(y)) return 0;
  int64_t xs[IR_MAX_RANK] = {0}, is[IR_MAX_RANK] = {0};
  cg_strides(&x->shape, xs);
  int64_t base = 0;
  for (int d = 0; d < r; d++) {
    base += st[d] * xs[d];
    is[d] = sp[d] * xs[d];
  }
  char e[512];
  cg_w(c, "  const %s *xb = x0 + %lld;\n  long o = 0;\n", cg_ctype(x->dtype), LL(base));
  open_loops(c, y->shape.dims, r, 2);
  cg_w(c, "%*sy0[o++] = xb[%s];\n", 2 + 2 * r, "", index_expr(e, sizeof e, is, r));
  close_loops(c, r, 2);
  return 0;
}

static int emit_gather(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *ix = cg_in(c, n, 1), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", 0), r);
  if (axis < 0 || axis >= r) return cg_fail(c, n, "axis out of range");
  int64_t outer = 1, inner = 1, A = x->shape.dims[axis], ni = cg_numel(ix);
  for (int i = 0; i < axis; i++) outer *= x->shape.dims[i];
  for (int i = axis + 1; i < r; i++) inner *= x->shape.dims[i];
  if (!cg_numel(y)) return 0;
  char what[48];
  snprintf(what, sizeof what, "axis %d", axis);
  int run_check = cg_const_indices(c, n, ix, A, what);
  if (run_check < 0) return -1;
  size_t es = ir_dtype_size(x->dtype);
  cg_w(c, "  for (long o = 0; o < %lld; o++)\n    for (long j = 0; j < %lld; j++) {\n", LL(outer), LL(ni));
  cg_w(c, "      long k = (long)x1[j];\n      if (k < 0) k += %lld;\n", LL(A));
  if (run_check) cg_index_check(c, n, 6, "k", "x1[j]", A, what);
  if (inner == 1) cg_w(c, "      y0[o * %lld + j] = x0[o * %lld + k];\n    }\n", LL(ni), LL(A));
  else
    cg_w(c, "      memcpy(y0 + (o * %lld + j) * %lld, x0 + (o * %lld + k) * %lld, %lldu);\n    }\n", LL(ni), LL(inner),
         LL(A), LL(inner), LL(inner * (int64_t)es));
  return 0;
}

static int emit_gather_elements(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", 0), r);
  if (axis < 0 || axis >= r) return cg_fail(c, n, "axis out of range");
  if (!cg_numel(y)) return 0;
  int64_t xs[IR_MAX_RANK] = {0}, st[IR_MAX_RANK] = {0};
  cg_strides(&x->shape, xs);
  for (int d = 0; d < r; d++) st[d] = d == axis ? 0 : xs[d];
  char e[512], what[48];
  snprintf(what, sizeof what, "axis %d", axis);
  int run_check = cg_const_indices(c, n, cg_in(c, n, 1), x->shape.dims[axis], what);
  if (run_check < 0) return -1;
  cg_w(c, "  long o = 0;\n");
  open_loops(c, y->shape.dims, r, 2);
  cg_w(c, "%*slong k = (long)x1[o];\n%*sif (k < 0) k += %lld;\n", 2 + 2 * r, "", 2 + 2 * r, "",
       LL(x->shape.dims[axis]));
  if (run_check) cg_index_check(c, n, 2 + 2 * r, "k", "x1[o]", x->shape.dims[axis], what);
  cg_w(c, "%*sy0[o++] = x0[%s + k * %lld];\n", 2 + 2 * r, "", index_expr(e, sizeof e, st, r), LL(xs[axis]));
  close_loops(c, r, 2);
  return 0;
}

#define TR_TILE 8
static int emit_transpose(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int64_t perm[IR_MAX_RANK];
  if (ir_transpose_perm(n, r, perm) < 0) return cg_fail(c, n, "bad perm");
  if (!cg_numel(y)) return 0;
  int64_t xs[IR_MAX_RANK] = {0}, st[IR_MAX_RANK] = {0};
  cg_strides(&x->shape, xs);
  for (int d = 0; d < r; d++) {
    if (perm[d] < 0 || perm[d] >= r) return cg_fail(c, n, "bad perm");
    st[d] = xs[perm[d]];
  }
  char e[512];
  /* the input's rows (output dim q, stride 1 in the input) become the output's columns
   * (the last dim, read with a stride): in tiles of TR_TILE x TR_TILE, so that the rows
   * read and the rows written stay in L1 (element by element along the output, every
   * read touched another cache line: the GPT-style model's training step spent 9% of
   * its time in such Transposes; [32, 64, 512] -> [32, 512, 64] from memory, 2.1 ms
   * that way, 0.8 ms in tiles of 8, 1.1-1.3 of 16, 1.9 of 32). The same copies, in
   * another order. */
  int q = -1;
  for (int d = 0; d < r - 1; d++)
    if (st[d] == 1 && y->shape.dims[d] > 1) q = d;
  if (q >= 0 && y->shape.dims[r - 1] >= TR_TILE && y->shape.dims[q] >= TR_TILE) {
    int64_t ys[IR_MAX_RANK];
    cg_strides(&y->shape, ys);
    int64_t Dq = y->shape.dims[q], Dl = y->shape.dims[r - 1];
    int ind = 2;
    for (int d = 0; d < r - 1; d++) {
      if (d == q) continue;
      cg_w(c, "%*sfor (long i%d = 0; i%d < %lld; i%d++) {\n", ind, "", d, d, LL(y->shape.dims[d]), d);
      ind += 2;
    }
    /* tiles along the output's last dim, then q; in a tile, the input's rows along q */
    cg_w(c, "%*sfor (long t%d = 0; t%d < %lld; t%d += %d)\n", ind, "", q, q, LL(Dq), q, TR_TILE);
    cg_w(c, "%*s  for (long t%d = 0; t%d < %lld; t%d += %d)\n", ind, "", r - 1, r - 1, LL(Dl), r - 1, TR_TILE);
    char bl[64] = "", bq[64] = "";
    if (Dl % TR_TILE) snprintf(bl, sizeof bl, " && i%d < %lld", r - 1, LL(Dl));
    if (Dq % TR_TILE) snprintf(bq, sizeof bq, " && i%d < %lld", q, LL(Dq));
    cg_w(c, "%*s    for (long i%d = t%d; i%d < t%d + %d%s; i%d++)\n", ind, "", r - 1, r - 1, r - 1, r - 1, TR_TILE, bl,
         r - 1);
    cg_w(c, "%*s      for (long i%d = t%d; i%d < t%d + %d%s; i%d++)\n", ind, "", q, q, q, q, TR_TILE, bq, q);
    char ye[512];
    index_expr(ye, sizeof ye, ys, r);
    cg_w(c, "%*s        y0[%s] = x0[%s];\n", ind, "", ye, index_expr(e, sizeof e, st, r));
    for (int d = r - 2; d >= 0; d--) {
      if (d == q) continue;
      ind -= 2;
      cg_w(c, "%*s}\n", ind, "");
    }
    return 0;
  }
  cg_w(c, "  long o = 0;\n");
  open_loops(c, y->shape.dims, r, 2);
  cg_w(c, "%*sy0[o++] = x0[%s];\n", 2 + 2 * r, "", index_expr(e, sizeof e, st, r));
  close_loops(c, r, 2);
  if (!r) cg_w(c, "  y0[0] = x0[0];\n  (void)o;\n");
  return 0;
}

static int emit_pad(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int64_t pads[2 * IR_MAX_RANK] = {0};
  double value = 0;
  const char *mode;
  if (cg_pad_params(c->g, "cpu", n, pads, &value, &mode)) return -1;
  int m = !strcmp(mode, "constant")  ? 0
          : !strcmp(mode, "reflect") ? 1
          : !strcmp(mode, "edge")    ? 2
          : !strcmp(mode, "wrap")    ? 3
                                     : -1;
  if (m < 0) return cg_fail(c, n, "Pad mode '%s' is not supported", mode);
  if (!cg_numel(y)) return 0;
  if (!cg_numel(x) && m) return cg_fail(c, n, "Pad mode '%s' of an empty tensor", mode);
  int64_t xs[IR_MAX_RANK];
  cg_strides(&x->shape, xs);
  char l[48];
  if (y->dtype == IR_FLOAT || y->dtype == IR_DOUBLE) cg_flit(l, sizeof l, value, y->dtype);
  else snprintf(l, sizeof l, "%lld", LL(value));
  cg_w(c, "  long o = 0;\n");
  for (int d = 0; d < r; d++) {
    int ind = 2 + 2 * d;
    int64_t D = x->shape.dims[d];
    cg_w(c, "%*sfor (long i%d = 0; i%d < %lld; i%d++) {\n", ind, "", d, d, LL(y->shape.dims[d]), d);
    cg_w(c, "%*s  long j%d = i%d - %lld;\n", ind, "", d, d, LL(pads[d]));
    if (m == 0) cg_w(c, "%*s  const int ok%d = j%d >= 0 && j%d < %lld;\n", ind, "", d, d, d, LL(D));
    else if (m == 1) {
      if (D == 1) cg_w(c, "%*s  j%d = 0;\n", ind, "", d);
      else
        cg_w(c, "%*s  while (j%d < 0 || j%d >= %lld) j%d = j%d < 0 ? -j%d : %lld - j%d;\n", ind, "", d, d, LL(D), d, d,
             d, LL(2 * (D - 1)), d);
    } else if (m == 2)
      cg_w(c, "%*s  j%d = j%d < 0 ? 0 : j%d >= %lld ? %lld : j%d;\n", ind, "", d, d, d, LL(D), LL(D - 1), d);
    else cg_w(c, "%*s  j%d = ((j%d %% %lld) + %lld) %% %lld;\n", ind, "", d, d, LL(D), LL(D), LL(D));
  }
  int ind = 2 + 2 * r;
  if (m == 0) {
    cg_w(c, "%*sy0[o++] = (1", ind, "");
    for (int d = 0; d < r; d++) cg_w(c, " && ok%d", d);
    cg_w(c, ") ? x0[0");
  } else cg_w(c, "%*sy0[o++] = x0[0", ind, "");
  for (int d = 0; d < r; d++) cg_w(c, " + j%d * %lld", d, LL(xs[d]));
  if (m == 0) cg_w(c, "] : %s;\n", l);
  else cg_w(c, "];\n");
  close_loops(c, r, 2);
  return 0;
}

static int emit_tile(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  if (!cg_numel(y)) return 0;
  int64_t xs[IR_MAX_RANK];
  cg_strides(&x->shape, xs);
  cg_w(c, "  long o = 0;\n");
  open_loops(c, y->shape.dims, r, 2);
  cg_w(c, "%*sy0[o++] = x0[0", 2 + 2 * r, "");
  for (int d = 0; d < r; d++) cg_w(c, " + (i%d %% %lld) * %lld", d, LL(x->shape.dims[d]), LL(xs[d]));
  cg_w(c, "];\n");
  close_loops(c, r, 2);
  if (!r) cg_w(c, "  y0[0] = x0[0];\n  (void)o;\n");
  return 0;
}

/* Sums over a run of L elements of trailing reduced axes of a float input (the
 * statistics of BatchNormalization over H and W in training, and their gradients): each
 * run's sum in 8 double lanes (element j to lane j % 8, combined pairwise), added to its
 * output's accumulator acc[e], e from the output strides ost of the t leading axes. The
 * element-by-element loop of emit_reduce adds into acc one element at a time, a chain of
 * dependent additions that does not vectorise: MobileNetV2's training step spent a fifth
 * of its time there. term: the summand, in terms of xr[k]. */
static void emit_reduce_lanes(cg_ctx *c, const ir_value *x, const int64_t *ost, int t, int64_t L, const char *term) {
  cg_w(c, "  {\n    const %s *xr = x0;\n", cg_ctype(x->dtype));
  open_loops(c, x->shape.dims, t, 4);
  int ind = 4 + 2 * t;
  char e[512];
  index_expr(e, sizeof e, ost, t);
  char in[64];
  snprintf(in, sizeof in, "%*s", ind, "");
  cg_emit_dlane_sum(c, in, "s", L, term);
  cg_w(c, "%*sacc[%s] += s;\n%*sxr += %lld;\n", ind, "", e, ind, "", LL(L));
  close_loops(c, t, 4);
  cg_w(c, "  }\n");
}

/* Reduce*: accumulate in double (scratch) over the input in row-major order (sums
 * over trailing axes of a float input in lanes: emit_reduce_lanes), then finish per
 * output element. */
static int emit_reduce(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int red[IR_MAX_RANK] = {0};
  int noop = cg_reduce_axes(c->g, "cpu", n, red);
  if (noop < 0) return -1;
  if (noop) {
    if (ir_value_bytes(x) != ir_value_bytes(y)) return cg_fail(c, n, "noop reduction changes the size");
    if (cg_numel(y)) cg_w(c, "  memcpy(y0, x0, %lldu);\n", LL(ir_value_bytes(y)));
    return 0;
  }
  int64_t on = cg_numel(y), count = 1, ost[IR_MAX_RANK], acc = 1;
  for (int d = r - 1; d >= 0; d--) {
    if (red[d]) {
      ost[d] = 0;
      count *= x->shape.dims[d];
    } else {
      ost[d] = acc;
      acc *= x->shape.dims[d];
    }
  }
  if (acc != on) return cg_fail(c, n, "output size does not match the reduction");
  if (!on) return 0;
  const char *init = "0";
  switch (n->op) {
    case IR_OP_ReduceMax: init = "-INFINITY"; break;
    case IR_OP_ReduceMin: init = "INFINITY"; break;
    case IR_OP_ReduceProd: init = "1"; break;
    default: break;
  }
  cg_scratch(c, (size_t)on * sizeof(double));
  cg_w(c, "  double *acc = (double *)scr;\n  for (long i = 0; i < %lld; i++) acc[i] = %s;\n", LL(on), init);
  if (n->op == IR_OP_ReduceLogSumExp) {
    /* max first, for a stable log-sum-exp */
    cg_w(c, "  double *mx = acc + %lld;\n  for (long i = 0; i < %lld; i++) mx[i] = -INFINITY;\n", LL(on), LL(on));
    cg_scratch(c, (size_t)on * 2 * sizeof(double));
  }
  char e[512];
  index_expr(e, sizeof e, ost, r);
  if (n->op == IR_OP_ReduceLogSumExp) {
    cg_w(c, "  {\n    long k = 0;\n");
    open_loops(c, x->shape.dims, r, 4);
    cg_w(c, "%*s{ const double v = x0[k++]; if (v > mx[%s]) mx[%s] = v; }\n", 4 + 2 * r, "", e, e);
    close_loops(c, r, 4);
    cg_w(c, "  }\n");
  }
  /* a run of trailing reduced axes of a float input: summed in lanes */
  int t = r;
  while (t > 0 && red[t - 1]) t--;
  int64_t L = 1;
  for (int d = t; d < r; d++) L *= x->shape.dims[d];
  const char *term = NULL;
  switch (n->op) {
    case IR_OP_ReduceSum:
    case IR_OP_ReduceMean:
    case IR_OP_ReduceLogSum: term = "xr[k]"; break;
    case IR_OP_ReduceSumSquare:
    case IR_OP_ReduceL2: term = "(double)xr[k] * xr[k]"; break;
    case IR_OP_ReduceL1: term = "fabs(xr[k])"; break;
    default: break;
  }
  if (term && L >= 8 && (x->dtype == IR_FLOAT || x->dtype == IR_DOUBLE)) {
    emit_reduce_lanes(c, x, ost, t, L, term);
  } else {
    cg_w(c, "  {\n    long k = 0;\n");
    open_loops(c, x->shape.dims, r, 4);
    int ind = 4 + 2 * r;
    cg_w(c, "%*sconst double v = x0[k++];\n", ind, "");
    switch (n->op) {
      case IR_OP_ReduceMax: cg_w(c, "%*sif (v > acc[%s] || v != v) acc[%s] = v;\n", ind, "", e, e); break;
      case IR_OP_ReduceMin: cg_w(c, "%*sif (v < acc[%s] || v != v) acc[%s] = v;\n", ind, "", e, e); break;
      case IR_OP_ReduceProd: cg_w(c, "%*sacc[%s] *= v;\n", ind, "", e); break;
      case IR_OP_ReduceL1: cg_w(c, "%*sacc[%s] += fabs(v);\n", ind, "", e); break;
      case IR_OP_ReduceL2:
      case IR_OP_ReduceSumSquare: cg_w(c, "%*sacc[%s] += v * v;\n", ind, "", e); break;
      case IR_OP_ReduceLogSumExp: cg_w(c, "%*sacc[%s] += exp(v - mx[%s]);\n", ind, "", e, e); break;
      default: cg_w(c, "%*sacc[%s] += v;\n", ind, "", e); break;
    }
    close_loops(c, r, 4);
    cg_w(c, "  }\n");
  }
  const char *T = cg_ctype(y->dtype);
  const char *fin = "acc[i]";
  char buf[128];
  switch (n->op) {
    case IR_OP_ReduceMean:
      snprintf(buf, sizeof buf, "acc[i] / %lld.0", LL(count));
      fin = buf;
      break;
    case IR_OP_ReduceL2: fin = "sqrt(acc[i])"; break;
    case IR_OP_ReduceLogSum: fin = "log(acc[i])"; break;
    case IR_OP_ReduceLogSumExp: fin = "log(acc[i]) + mx[i]"; break;
    default: break;
  }
  const char *lo = NULL, *hi = NULL;
  switch (y->dtype) {
    case IR_INT8: lo = "INT8_MIN", hi = "INT8_MAX"; break;
    case IR_UINT8: lo = "0", hi = "UINT8_MAX"; break;
    case IR_INT16: lo = "INT16_MIN", hi = "INT16_MAX"; break;
    case IR_UINT16: lo = "0", hi = "UINT16_MAX"; break;
    case IR_INT32: lo = "INT32_MIN", hi = "INT32_MAX"; break;
    case IR_UINT32: lo = "0", hi = "UINT32_MAX"; break;
    case IR_INT64: lo = "INT64_MIN", hi = "INT64_MAX"; break;
    case IR_UINT64: lo = "0", hi = "UINT64_MAX"; break;
    default: break;
  }
  if (y->dtype == IR_BOOL) /* an empty max (-inf) is false, an empty min (inf) true */
    cg_w(c, "  for (long i = 0; i < %lld; i++) y0[i] = (%s) > 0;\n", LL(on), fin);
  else if (lo)
    /* integers: truncated toward zero (a mean of -4 / 3 is -1, as onnxruntime and the ONNX
     * reference give), clamped to the type's range (an empty max is its smallest value),
     * NaN as 0: no undefined conversions */
    cg_w(c,
         "  for (long i = 0; i < %lld; i++) {\n    const double r = %s;\n"
         "    y0[i] = r != r ? 0 : r <= (double)%s ? %s : r >= (double)%s ? %s : (%s)r;\n  }\n",
         LL(on), fin, lo, lo, hi, hi, T);
  else cg_w(c, "  for (long i = 0; i < %lld; i++) y0[i] = (%s)(%s);\n", LL(on), T, fin);
  return 0;
}

static int emit_argmax(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", 0), r);
  if (axis < 0 || axis >= r) return cg_fail(c, n, "axis out of range");
  int last = (int)ir_attr_int(n, "select_last_index", 0);
  int64_t outer = 1, inner = 1, A = x->shape.dims[axis];
  for (int i = 0; i < axis; i++) outer *= x->shape.dims[i];
  for (int i = axis + 1; i < r; i++) inner *= x->shape.dims[i];
  if (!cg_numel(y)) return 0;
  const char *cmp = n->op == IR_OP_ArgMax ? (last ? ">=" : ">") : (last ? "<=" : "<");
  cg_w(c, "  for (long o = 0; o < %lld; o++)\n    for (long i = 0; i < %lld; i++) {\n", LL(outer), LL(inner));
  cg_w(c, "      const %s *xp = x0 + o * %lld + i;\n      long best = 0;\n", cg_ctype(x->dtype), LL(A * inner));
  cg_w(c, "      for (long k = 1; k < %lld; k++)\n        if (xp[k * %lld] %s xp[best * %lld]) best = k;\n", LL(A),
       LL(inner), cmp, LL(inner));
  cg_w(c, "      y0[o * %lld + i] = best;\n    }\n", LL(inner));
  return 0;
}

static int emit_cumsum2(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int64_t av;
  if (cg_const_ints(c, n, 1, &av, 1) != 1) return cg_fail(c, n, "axis must be a constant");
  int axis = norm_axis(av, r);
  if (axis < 0 || axis >= r) return cg_fail(c, n, "axis out of range");
  int excl = (int)ir_attr_int(n, "exclusive", 0), rev = (int)ir_attr_int(n, "reverse", 0);
  int64_t outer = 1, inner = 1, A = x->shape.dims[axis];
  for (int i = 0; i < axis; i++) outer *= x->shape.dims[i];
  for (int i = axis + 1; i < r; i++) inner *= x->shape.dims[i];
  if (!cg_numel(y)) return 0;
  const char *T = cg_ctype(y->dtype), *op = n->op == IR_OP_CumProd ? "*" : "+";
  cg_w(c, "  for (long o = 0; o < %lld; o++)\n    for (long i = 0; i < %lld; i++) {\n      %s s = %d;\n", LL(outer),
       LL(inner), T, n->op == IR_OP_CumProd);
  cg_w(c, "      for (long kk = 0; kk < %lld; kk++) {\n", LL(A));
  if (rev) cg_w(c, "        const long k = %lld - kk;\n", LL(A - 1));
  else cg_w(c, "        const long k = kk;\n");
  cg_w(c, "        const long j = (o * %lld + k) * %lld + i;\n", LL(A), LL(inner));
  if (excl) cg_w(c, "        const %s v = x0[j];\n        y0[j] = s;\n        s = (%s)(s %s v);\n", T, T, op);
  else cg_w(c, "        s = (%s)(s %s x0[j]);\n        y0[j] = s;\n", T, op);
  cg_w(c, "      }\n    }\n");
  return 0;
}

static int emit_trilu(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  if (r < 2) return cg_fail(c, n, "Trilu needs rank >= 2");
  int64_t k = 0;
  if (cg_in(c, n, 1) && cg_const_ints(c, n, 1, &k, 1) != 1) return cg_fail(c, n, "k must be a constant");
  int upper = (int)ir_attr_int(n, "upper", 1);
  int64_t R = x->shape.dims[r - 2], C = x->shape.dims[r - 1], B = cg_numel(x) / (R * C != 0 ? R * C : 1);
  if (!cg_numel(y)) return 0;
  cg_w(
      c,
      "  for (long b = 0; b < %lld; b++)\n    for (long i = 0; i < %lld; i++)\n      for (long j = 0; j < %lld; j++) {\n",
      LL(B), LL(R), LL(C));
  cg_w(c, "        const long q = (b * %lld + i) * %lld + j;\n", LL(R), LL(C));
  cg_w(c, "        y0[q] = (j - i %s %lld) ? x0[q] : 0;\n      }\n", upper ? ">=" : "<=", LL(k));
  return 0;
}

static int emit_depth_space(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  if (x->shape.rank != 4) return cg_fail(c, n, "needs a 4-D input");
  int64_t b = ir_attr_int(n, "blocksize", 1);
  if (!cg_numel(y)) return 0;
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], H = x->shape.dims[2], W = x->shape.dims[3];
  if (n->op == IR_OP_DepthToSpace) {
    int crd = !strcmp(ir_attr_str(n, "mode", "DCR"), "CRD");
    int64_t Co = C / (b * b);
    /* y[n, c, h*b+i, w*b+j] = x[n, DCR: (i*b+j)*Co + c | CRD: c*b*b + i*b + j, h, w] */
    cg_w(c, "  for (long n = 0; n < %lld; n++)\n    for (long ch = 0; ch < %lld; ch++)\n", LL(N), LL(Co));
    cg_w(c, "      for (long h = 0; h < %lld; h++)\n        for (long i = 0; i < %lld; i++)\n", LL(H), LL(b));
    cg_w(c, "          for (long w = 0; w < %lld; w++)\n            for (long j = 0; j < %lld; j++) {\n", LL(W), LL(b));
    if (crd) cg_w(c, "              const long ci = ch * %lld + i * %lld + j;\n", LL(b * b), LL(b));
    else cg_w(c, "              const long ci = (i * %lld + j) * %lld + ch;\n", LL(b), LL(Co));
    cg_w(
        c,
        "              y0[((n * %lld + ch) * %lld + h * %lld + i) * %lld + w * %lld + j] = x0[((n * %lld + ci) * %lld + h) * %lld + w];\n",
        LL(Co), LL(H * b), LL(b), LL(W * b), LL(b), LL(C), LL(H), LL(W));
    cg_w(c, "            }\n");
  } else {
    int64_t Ho = H / b, Wo = W / b, Co = C * b * b;
    int crd = !strcmp(ir_attr_str(n, "mode", "DCR"), "CRD"); /* SpaceToDepth-28 */
    cg_w(c, "  for (long n = 0; n < %lld; n++)\n    for (long ch = 0; ch < %lld; ch++)\n", LL(N), LL(C));
    cg_w(c, "      for (long h = 0; h < %lld; h++)\n        for (long i = 0; i < %lld; i++)\n", LL(Ho), LL(b));
    cg_w(c, "          for (long w = 0; w < %lld; w++)\n            for (long j = 0; j < %lld; j++) {\n", LL(Wo),
         LL(b));
    if (crd) cg_w(c, "              const long co = ch * %lld + i * %lld + j;\n", LL(b * b), LL(b));
    else cg_w(c, "              const long co = (i * %lld + j) * %lld + ch;\n", LL(b), LL(C));
    cg_w(
        c,
        "              y0[((n * %lld + co) * %lld + h) * %lld + w] = x0[((n * %lld + ch) * %lld + h * %lld + i) * %lld + w * %lld + j];\n",
        LL(Co), LL(Ho), LL(Wo), LL(C), LL(H), LL(b), LL(W), LL(b));
    cg_w(c, "            }\n");
  }
  return 0;
}

static int emit_onehot(cg_ctx *c, const ir_node *n) {
  ir_value *ix = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  double depth_d;
  if (cg_const_f64(c, n, 1, &depth_d)) return cg_fail(c, n, "depth must be a constant");
  int64_t depth = (int64_t)depth_d;
  int r = y->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", -1), r);
  if (axis < 0 || axis >= r) return cg_fail(c, n, "axis out of range");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= y->shape.dims[i];
  for (int i = axis + 1; i < r; i++) inner *= y->shape.dims[i];
  if (!cg_numel(y)) return 0;
  (void)ix;
  cg_w(c, "  for (long o = 0; o < %lld; o++)\n    for (long i = 0; i < %lld; i++) {\n", LL(outer), LL(inner));
  cg_w(c, "      long k = (long)x0[o * %lld + i];\n      if (k < 0) k += %lld;\n", LL(inner), LL(depth));
  cg_w(c, "      for (long d = 0; d < %lld; d++) y0[(o * %lld + d) * %lld + i] = d == k ? x2[1] : x2[0];\n    }\n",
       LL(depth), LL(depth), LL(inner));
  return 0;
}

/* Resize (opset 10+) and Upsample via compile-time tables per dim: nearest (one index),
 * linear (two neighbours and the upper one's weight; a sum over the corners), or the
 * filter of cubic and antialias (taps indices and weights per output index; a sum over
 * the tap tuples, the last dim innermost, each weight the product of the dims' in dim
 * order). tf_crop_and_resize: per dim a table of the output indices outside the input,
 * whose elements are extrapolation_value. */
static int emit_resize(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  cg_resize rp;
  if (cg_resize_params(c->g, "cpu", n, &rp)) return -1;
  int linear = rp.mode == CG_RESIZE_LINEAR && !rp.filter;
  if (!cg_numel(y)) return 0;
  if (!cg_numel(x)) return cg_fail(c, n, "Resize of an empty tensor");
  int64_t xs[IR_MAX_RANK];
  cg_strides(&x->shape, xs);
  int outside[IR_MAX_RANK] = {0}, any_out = 0;
  /* per dim: for each output index, i0 (or the taps), i1 and weight(s) */
  for (int d = 0; d < r; d++) {
    int64_t O = y->shape.dims[d], I = x->shape.dims[d], nt = rp.filter ? rp.taps[d] : 1;
    int64_t *ia = malloc(sizeof(int64_t) * (size_t)(O * nt)), *ib = malloc(sizeof(int64_t) * (size_t)O);
    double *wt = malloc(sizeof(double) * (size_t)(O * nt));
    unsigned char *ox = malloc((size_t)O);
    for (int64_t o = 0; o < O; o++) {
      double xo = cg_resize_coord(&rp, d, o, I, O);
      ox[o] = (unsigned char)cg_resize_outside(&rp, xo, I);
      outside[d] |= ox[o];
      if (rp.filter) {
        int64_t first;
        cg_resize_taps(&rp, d, xo, I, &first, wt + o * nt);
        for (int64_t j = 0; j < nt; j++) {
          int64_t k = first + j < 0 ? 0 : first + j >= I ? I - 1 : first + j;
          ia[o * nt + j] = k;
        }
      } else if (linear) {
        if (xo < 0) xo = 0;
        if (xo > (double)(I - 1)) xo = (double)(I - 1);
        int64_t a = (int64_t)floor(xo), b = a + 1 < I ? a + 1 : I - 1;
        ia[o] = a;
        ib[o] = b;
        wt[o] = xo - (double)a;
      } else {
        int64_t k;
        switch (rp.nearest) {
          case CG_NEAREST_FLOOR: k = (int64_t)floor(xo); break;
          case CG_NEAREST_CEIL: k = (int64_t)ceil(xo); break;
          case CG_NEAREST_ROUND_PREFER_CEIL: k = (int64_t)floor(xo + 0.5); break;
          default: k = xo == floor(xo) + 0.5 ? (int64_t)floor(xo) : (int64_t)floor(xo + 0.5); break;
        }
        if (k < 0) k = 0;
        if (k >= I) k = I - 1;
        ia[o] = k;
        ib[o] = k;
        wt[o] = 0;
      }
    }
    cg_w(c, "  static const long t%d_a[%lld] = {", d, LL(O * nt));
    for (int64_t o = 0; o < O * nt; o++) cg_w(c, "%s%lld", o ? ", " : "", LL(ia[o] * xs[d]));
    cg_w(c, "};\n");
    if (linear) {
      cg_w(c, "  static const long t%d_b[%lld] = {", d, LL(O));
      for (int64_t o = 0; o < O; o++) cg_w(c, "%s%lld", o ? ", " : "", LL(ib[o] * xs[d]));
      cg_w(c, "};\n");
    }
    if (linear || rp.filter) {
      cg_w(c, "  static const double t%d_w[%lld] = {", d, LL(O * nt));
      for (int64_t o = 0; o < O * nt; o++) cg_w(c, "%s%.17g", o ? ", " : "", wt[o]);
      cg_w(c, "};\n");
    }
    if (outside[d]) {
      any_out = 1;
      cg_w(c, "  static const unsigned char t%d_x[%lld] = {", d, LL(O));
      for (int64_t o = 0; o < O; o++) cg_w(c, "%s%d", o ? ", " : "", ox[o]);
      cg_w(c, "};\n");
    }
    free(ia);
    free(ib);
    free(wt);
    free(ox);
  }
  const char *T = cg_ctype(y->dtype);
  cg_w(c, "  long o = 0;\n");
  open_loops(c, y->shape.dims, r, 2);
  int ind = 2 + 2 * r;
  if (any_out) {
    cg_w(c, "%*sif (", ind, "");
    for (int d = 0, k = 0; d < r; d++)
      if (outside[d]) cg_w(c, "%st%d_x[i%d]", k++ ? " | " : "", d, d);
    char lit[64];
    cg_w(c, ") {\n%*s  y0[o++] = (%s)%s;\n%*s  continue;\n%*s}\n", ind, "", T,
         cg_flit(lit, sizeof lit, rp.extrapolation, IR_DOUBLE), ind, "", ind, "");
  }
  if (rp.filter) {
    /* a tap of weight 0 (and every tuple through it) adds nothing */
    cg_w(c, "%*sdouble s = 0;\n", ind, "");
    for (int d = 0; d < r; d++) {
      int in2 = ind + 2 * d, nt = rp.taps[d];
      cg_w(c, "%*sfor (int j%d = 0; j%d < %d; j%d++) {\n", in2, "", d, d, nt, d);
      if (d) cg_w(c, "%*s  const double p%d = p%d * t%d_w[i%d * %d + j%d];\n", in2, "", d, d - 1, d, d, nt, d);
      else cg_w(c, "%*s  const double p0 = t0_w[i0 * %d + j0];\n", in2, "", nt);
      cg_w(c, "%*s  if (p%d == 0) continue;\n", in2, "", d);
      if (d) cg_w(c, "%*s  const long f%d = f%d + t%d_a[i%d * %d + j%d];\n", in2, "", d, d - 1, d, d, nt, d);
      else cg_w(c, "%*s  const long f0 = t0_a[i0 * %d + j0];\n", in2, "", nt);
    }
    cg_w(c, "%*s  s += p%d * x0[f%d];\n", ind + 2 * (r - 1), "", r - 1, r - 1);
    for (int d = r - 1; d >= 0; d--) cg_w(c, "%*s}\n", ind + 2 * d, "");
    cg_w(c, "%*sy0[o++] = (%s)s;\n", ind, "", T);
  } else if (!linear) {
    cg_w(c, "%*sy0[o++] = x0[0", ind, "");
    for (int d = 0; d < r; d++) cg_w(c, " + t%d_a[i%d]", d, d);
    cg_w(c, "];\n");
  } else {
    /* multilinear: sum over the 2^r corners (dims with equal ends contribute once) */
    cg_w(c, "%*sdouble s = 0;\n", ind, "");
    cg_w(c, "%*sfor (int corner = 0; corner < %d; corner++) {\n", ind, "", 1 << r);
    cg_w(c, "%*s  long off = 0;\n%*s  double wgt = 1;\n", ind, "", ind, "");
    for (int d = 0; d < r; d++)
      cg_w(
          c,
          "%*s  if (corner & %d) { off += t%d_b[i%d]; wgt *= t%d_w[i%d]; } else { off += t%d_a[i%d]; wgt *= 1 - t%d_w[i%d]; }\n",
          ind, "", 1 << d, d, d, d, d, d, d, d, d);
    cg_w(c, "%*s  if (wgt != 0) s += wgt * x0[off];\n%*s}\n", ind, "", ind, "");
    cg_w(c, "%*sy0[o++] = (%s)s;\n", ind, "", T);
  }
  close_loops(c, r, 2);
  return 0;
}

/* TopK: repeated selection (ties: the lower index first), always sorted. */
static int emit_topk(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0), *yi = cg_out(c, n, 1);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", -1), r);
  if (axis < 0 || axis >= r) return cg_fail(c, n, "axis out of range");
  int64_t outer = 1, inner = 1, A = x->shape.dims[axis];
  for (int i = 0; i < axis; i++) outer *= x->shape.dims[i];
  for (int i = axis + 1; i < r; i++) inner *= x->shape.dims[i];
  int64_t K = (y ? y : yi)->shape.dims[axis];
  if (!K || !outer || !inner) return 0;
  const char *T = cg_ctype(x->dtype);
  const char *cmp = ir_attr_int(n, "largest", 1) ? ">" : "<";
  cg_scratch(c, (size_t)A);
  cg_w(c, "  unsigned char *used = (unsigned char *)scr;\n");
  cg_w(c, "  for (long o = 0; o < %lld; o++)\n    for (long i = 0; i < %lld; i++) {\n", LL(outer), LL(inner));
  cg_w(c, "      const %s *xp = x0 + o * %lld + i;\n      memset(used, 0, %lld);\n", T, LL(A * inner), LL(A));
  cg_w(c, "      for (long j = 0; j < %lld; j++) {\n        long b = -1;\n", LL(K));
  cg_w(
      c,
      "        for (long a = 0; a < %lld; a++)\n          if (!used[a] && (b < 0 || xp[a * %lld] %s xp[b * %lld])) b = a;\n",
      LL(A), LL(inner), cmp, LL(inner));
  cg_w(c, "        used[b] = 1;\n        const long q = (o * %lld + j) * %lld + i;\n", LL(K), LL(inner));
  if (y) cg_w(c, "        y0[q] = xp[b * %lld];\n", LL(inner));
  if (yi) cg_w(c, "        y1[q] = b;\n");
  cg_w(c, "      }\n    }\n");
  return 0;
}

/* Flat data offset of the index tuple ix[0..L) over dims[0..L) (negative indices wrap),
 * each index checked against its dim unless the indices are constant (checked here,
 * dims from data axis `first`). Returns 0, or -1 (a constant index out of range). */
static int emit_nd_offset(cg_ctx *c, const ir_node *n, const int64_t *dims, int L, int first, const char *ix, int ind) {
  const ir_value *iv = cg_in(c, n, 1);
  int run_check = iv->kind != IR_VAL_CONST;
  for (int64_t i = 0, cnt = run_check ? 0 : cg_numel(iv); i < cnt && L > 0; i++) {
    int64_t k, size = dims[i % L];
    if (ir_const_i64(iv, i, &k)) {
      run_check = 1;
      break;
    }
    if (k < -size || k >= size)
      return cg_fail(c, n, "index %lld (element %lld of the indices) is out of range for axis %d of size %lld", LL(k),
                     LL(i), first + (int)(i % L), LL(size));
  }
  cg_w(c, "%*slong off = 0;\n", ind, "");
  for (int l = 0; l < L; l++) {
    char raw[64], what[48];
    snprintf(raw, sizeof raw, "%s[%d]", ix, l);
    snprintf(what, sizeof what, "axis %d", first + l);
    cg_w(c, "%*s{\n%*s  long k = (long)%s;\n%*s  if (k < 0) k += %lld;\n", ind, "", ind, "", raw, ind, "", LL(dims[l]));
    if (run_check) cg_index_check(c, n, ind + 2, "k", raw, dims[l], what);
    cg_w(c, "%*s  off = off * %lld + k;\n%*s}\n", ind, "", LL(dims[l]), ind, "");
  }
  return 0;
}

static int emit_gather_nd(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *ix = cg_in(c, n, 1), *y = cg_out(c, n, 0);
  int b = (int)ir_attr_int(n, "batch_dims", 0), qr = ix->shape.rank;
  if (qr < 1) return cg_fail(c, n, "indices must have rank >= 1");
  int L = (int)ix->shape.dims[qr - 1];
  if (b < 0 || b + L > x->shape.rank) return cg_fail(c, n, "indices do not fit the data");
  int64_t B = 1, nI = 1, slice = 1, D = 1;
  for (int i = 0; i < b; i++) B *= x->shape.dims[i];
  for (int i = b; i < qr - 1; i++) nI *= ix->shape.dims[i];
  for (int i = b + L; i < x->shape.rank; i++) slice *= x->shape.dims[i];
  for (int i = b; i < x->shape.rank; i++) D *= x->shape.dims[i];
  if (!cg_numel(y)) return 0;
  cg_w(c, "  for (long bi = 0; bi < %lld; bi++)\n    for (long j = 0; j < %lld; j++) {\n", LL(B), LL(nI));
  cg_w(c, "      const %s *ix = x1 + (bi * %lld + j) * %d;\n", cg_ctype(ix->dtype), LL(nI), L);
  if (emit_nd_offset(c, n, x->shape.dims + b, L, b, "ix", 6)) return -1;
  cg_w(c, "      memcpy(y0 + (bi * %lld + j) * %lld, x0 + bi * %lld + off * %lld, %lldu);\n    }\n", LL(nI), LL(slice),
       LL(D), LL(slice), LL(slice * (int64_t)ir_dtype_size(x->dtype)));
  return 0;
}

/* "dst = src" / "dst += src" ... for the reduction attribute of ScatterElements/ScatterND. */
static int scatter_stmt(cg_ctx *c, const ir_node *n, const char *dst, const char *src, int ind) {
  const char *red = ir_attr_str(n, "reduction", "none");
  if (!strcmp(red, "none")) cg_w(c, "%*s%s = %s;\n", ind, "", dst, src);
  else if (!strcmp(red, "add")) cg_w(c, "%*s%s += %s;\n", ind, "", dst, src);
  else if (!strcmp(red, "mul")) cg_w(c, "%*s%s *= %s;\n", ind, "", dst, src);
  else if (!strcmp(red, "max")) cg_w(c, "%*sif (%s > %s) %s = %s;\n", ind, "", src, dst, dst, src);
  else if (!strcmp(red, "min")) cg_w(c, "%*sif (%s < %s) %s = %s;\n", ind, "", src, dst, dst, src);
  else return cg_fail(c, n, "reduction '%s' is not supported", red);
  return 0;
}

static int emit_scatter_elements(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *ix = cg_in(c, n, 1), *y = cg_out(c, n, 0);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", 0), r);
  if (axis < 0 || axis >= r || ix->shape.rank != r) return cg_fail(c, n, "axis or indices rank out of range");
  if (!cg_numel(y)) return 0;
  cg_w(c, "  memcpy(y0, x0, %lldu);\n", LL(ir_value_bytes(y)));
  if (!cg_numel(ix)) return 0;
  int64_t xs[IR_MAX_RANK] = {0}, st[IR_MAX_RANK] = {0};
  cg_strides(&x->shape, xs);
  for (int d = 0; d < r; d++) st[d] = d == axis ? 0 : xs[d];
  char e[512], dst[600], what[48];
  snprintf(what, sizeof what, "axis %d", axis);
  int run_check = cg_const_indices(c, n, ix, x->shape.dims[axis], what);
  if (run_check < 0) return -1;
  cg_w(c, "  long u = 0;\n");
  open_loops(c, ix->shape.dims, r, 2);
  int ind = 2 + 2 * r;
  cg_w(c, "%*slong k = (long)x1[u];\n%*sif (k < 0) k += %lld;\n", ind, "", ind, "", LL(x->shape.dims[axis]));
  if (run_check) cg_index_check(c, n, ind, "k", "x1[u]", x->shape.dims[axis], what);
  snprintf(dst, sizeof dst, "y0[%s + k * %lld]", index_expr(e, sizeof e, st, r), LL(xs[axis]));
  if (scatter_stmt(c, n, dst, "x2[u]", ind)) return -1;
  cg_w(c, "%*su++;\n", ind, "");
  close_loops(c, r, 2);
  return 0;
}

static int emit_scatter_nd(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *ix = cg_in(c, n, 1), *y = cg_out(c, n, 0);
  int qr = ix->shape.rank;
  if (qr < 1) return cg_fail(c, n, "indices must have rank >= 1");
  int L = (int)ix->shape.dims[qr - 1];
  if (L > x->shape.rank) return cg_fail(c, n, "indices do not fit the data");
  int64_t nI = 1, slice = 1;
  for (int i = 0; i < qr - 1; i++) nI *= ix->shape.dims[i];
  for (int i = L; i < x->shape.rank; i++) slice *= x->shape.dims[i];
  if (!cg_numel(y)) return 0;
  cg_w(c, "  memcpy(y0, x0, %lldu);\n", LL(ir_value_bytes(y)));
  cg_w(c, "  for (long j = 0; j < %lld; j++) {\n    const %s *ix = x1 + j * %d;\n", LL(nI), cg_ctype(ix->dtype), L);
  if (emit_nd_offset(c, n, x->shape.dims, L, 0, "ix", 4)) return -1;
  cg_w(c, "    for (long s = 0; s < %lld; s++) {\n", LL(slice));
  char dst[64];
  snprintf(dst, sizeof dst, "y0[off * %lld + s]", LL(slice));
  char src[64];
  snprintf(src, sizeof src, "x2[j * %lld + s]", LL(slice));
  if (scatter_stmt(c, n, dst, src, 6)) return -1;
  cg_w(c, "    }\n  }\n");
  return 0;
}

cg_op_fn cg_op_emitter_nn(ir_op op);
cg_op_fn cg_op_emitter_sample(ir_op op);
cg_op_fn cg_op_emitter_vision(ir_op op);

cg_op_fn cg_op_emitter(ir_op op) {
  cg_op_fn f = cg_op_emitter_nn(op);
  if (!f) f = cg_op_emitter_sample(op);
  if (!f) f = cg_op_emitter_vision(op);
  if (f) return f;
  switch (op) {
    case IR_OP_Reshape:
    case IR_OP_Flatten:
    case IR_OP_Squeeze:
    case IR_OP_Unsqueeze:
    case IR_OP_Identity:
    case IR_OP_BitCast: return emit_copy;
    case IR_OP_Dropout: return emit_dropout;
    case IR_OP_Shape: return emit_shape;
    case IR_OP_Size: return emit_size;
    case IR_OP_ConstantOfShape: return emit_constant_of_shape;
    case IR_OP_Range: return emit_range;
    case IR_OP_Concat: return emit_concat;
    case IR_OP_Split: return emit_split;
    case IR_OP_Slice: return emit_slice;
    case IR_OP_Gather: return emit_gather;
    case IR_OP_GatherElements: return emit_gather_elements;
    case IR_OP_Transpose: return emit_transpose;
    case IR_OP_Pad: return emit_pad;
    case IR_OP_Tile: return emit_tile;
    case IR_OP_ReduceMean:
    case IR_OP_ReduceSum:
    case IR_OP_ReduceMax:
    case IR_OP_ReduceMin:
    case IR_OP_ReduceProd:
    case IR_OP_ReduceL1:
    case IR_OP_ReduceL2:
    case IR_OP_ReduceLogSum:
    case IR_OP_ReduceLogSumExp:
    case IR_OP_ReduceSumSquare: return emit_reduce;
    case IR_OP_ArgMax:
    case IR_OP_ArgMin: return emit_argmax;
    case IR_OP_CumSum:
    case IR_OP_CumProd: return emit_cumsum2;
    case IR_OP_Trilu: return emit_trilu;
    case IR_OP_DepthToSpace:
    case IR_OP_SpaceToDepth: return emit_depth_space;
    case IR_OP_OneHot: return emit_onehot;
    case IR_OP_Resize:
    case IR_OP_Upsample: return emit_resize;
    case IR_OP_TopK: return emit_topk;
    case IR_OP_GatherND: return emit_gather_nd;
    case IR_OP_ScatterElements: return emit_scatter_elements;
    case IR_OP_ScatterND: return emit_scatter_nd;
    default: return NULL;
  }
}
