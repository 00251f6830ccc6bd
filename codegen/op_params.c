/* codegen/op_params.c - op attribute arithmetic shared by the cpu and cuda emitters
 * (see codegen/op_params.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/c/cg_c.h" /* cg_const_ints, cg_const_f64, cg_numel */
#include "codegen/op_params.h"
#include "ir/diag.h"

#define LL(x) ((long long)(x))

static int fail(ir_graph *g, const char *target, const ir_node *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(ir_graph *g, const char *target, const ir_node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ir_error_node(g, (int)(n - g->nodes), "%s target: %s", target, msg);
  return -1;
}

int cg_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y,
              const int64_t *kernel, int transposed, cg_win3 *w) {
  int sr = x->shape.rank - 2;
  if (sr < 1 || sr > 3)
    return fail(g, target, n, "only 1, 2 or 3 spatial dims are supported (input rank %d)", x->shape.rank);
  const int64_t *v;
  int64_t st[3], dl[3], pads[6];
  int cnt = ir_attr_ints(n, "strides", &v);
  for (int i = 0; i < sr; i++) st[i] = cnt == sr ? v[i] : 1;
  cnt = ir_attr_ints(n, "dilations", &v);
  for (int i = 0; i < sr; i++) dl[i] = cnt == sr ? v[i] : 1;
  cnt = ir_attr_ints(n, "pads", &v);
  for (int i = 0; i < 2 * sr; i++) pads[i] = cnt == 2 * sr ? v[i] : 0;
  const char *ap = ir_attr_str(n, "auto_pad", "NOTSET");
  for (int i = 0; i < sr; i++) {
    int64_t in = x->shape.dims[2 + i], out = y->shape.dims[2 + i];
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
      int64_t total;
      if (!transposed) {
        total = (out - 1) * st[i] + (kernel[i] - 1) * dl[i] + 1 - in;
        if (total < 0) total = 0;
      } else {
        const int64_t *op;
        int no = ir_attr_ints(n, "output_padding", &op);
        total = st[i] * (in - 1) + (no == sr ? op[i] : 0) + ((kernel[i] - 1) * dl[i] + 1) - out;
        if (total < 0) total = 0;
      }
      int upper = !strcmp(ap, "SAME_UPPER");
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[sr + i] = total - pads[i];
    } else if (!strcmp(ap, "VALID")) {
      pads[i] = pads[sr + i] = 0;
    }
  }
  w->sr = sr;
  for (int j = 0; j < 3; j++) {
    int i = j - (3 - sr);
    if (i < 0) {
      w->in[j] = w->out[j] = w->k[j] = w->s[j] = w->d[j] = 1;
      w->pb[j] = w->pe[j] = 0;
    } else {
      w->in[j] = x->shape.dims[2 + i];
      w->out[j] = y->shape.dims[2 + i];
      w->k[j] = kernel[i];
      w->s[j] = st[i];
      w->d[j] = dl[i];
      w->pb[j] = pads[i];
      w->pe[j] = pads[sr + i];
    }
  }
  return 0;
}

int cg_pool_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y,
                   cg_win3 *w) {
  int sr = x->shape.rank - 2;
  int global = n->op == IR_OP_GlobalAveragePool || n->op == IR_OP_GlobalMaxPool || n->op == IR_OP_GlobalLpPool;
  int64_t kernel[3];
  if (sr < 1 || sr > 3)
    return fail(g, target, n, "only 1, 2 or 3 spatial dims are supported (input rank %d)", x->shape.rank);
  if (global) {
    for (int j = 0; j < 3; j++) {
      int i = j - (3 - sr);
      w->in[j] = w->k[j] = i < 0 ? 1 : x->shape.dims[2 + i];
      w->out[j] = w->s[j] = w->d[j] = 1;
      w->pb[j] = w->pe[j] = 0;
    }
    w->sr = sr;
  } else {
    const int64_t *ks;
    if (ir_attr_ints(n, "kernel_shape", &ks) != sr) return fail(g, target, n, "kernel_shape must have %d entries", sr);
    for (int i = 0; i < sr; i++) kernel[i] = ks[i];
    if (cg_window(g, target, n, x, y, kernel, 0, w)) return -1;
  }
  return 0;
}

int cg_softmax_params(ir_graph *g, const char *target, const ir_node *n, int64_t *outer_out, int64_t *A_out,
                      int64_t *inner_out) {
  const ir_value *x = ir_in(g, n, 0);
  int r = x->shape.rank;
  int axis = (int)ir_attr_int(n, "axis", n->opset >= 13 ? -1 : 1);
  if (axis < 0) axis += r;
  if (r == 0) axis = 0;
  if (axis < 0 || (r > 0 && axis >= r)) return fail(g, target, n, "axis out of range");
  int64_t outer = 1, A = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= x->shape.dims[i];
  if (n->opset >= 13) {
    A = r ? x->shape.dims[axis] : 1;
    for (int i = axis + 1; i < r; i++) inner *= x->shape.dims[i];
  } else {
    for (int i = axis; i < r; i++) A *= x->shape.dims[i];
  }
  *outer_out = outer;
  *A_out = A;
  *inner_out = inner;
  return 0;
}

int cg_layernorm_params(ir_graph *g, const char *target, const ir_node *n, int64_t *outer_out, int64_t *inner_out,
                        int64_t *ns_out, int64_t *nbias_out) {
  const ir_value *x = ir_in(g, n, 0), *sc = ir_in(g, n, 1), *bi = ir_in(g, n, 2);
  int r = x->shape.rank;
  int axis = (int)ir_attr_int(n, "axis", -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return fail(g, target, n, "axis out of range");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= x->shape.dims[i];
  for (int i = axis; i < r; i++) inner *= x->shape.dims[i];
  int64_t ns = cg_numel(sc), nbias = bi ? cg_numel(bi) : 0;
  if ((ns != inner && ns != 1) || (bi && nbias != inner && nbias != 1))
    return fail(g, target, n, "Scale and B must have the normalised shape");
  *outer_out = outer;
  *inner_out = inner;
  *ns_out = ns;
  *nbias_out = nbias;
  return 0;
}

int cg_axis_split(ir_graph *g, const char *target, const ir_node *n, const ir_value *v, int *axis_out,
                  int64_t *outer_out, int64_t *inner_out) {
  int r = v->shape.rank;
  int64_t a = ir_attr_int(n, "axis", 0);
  int axis = (int)(a < 0 ? a + r : a);
  if (axis < 0 || axis >= r) return fail(g, target, n, "axis out of range");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= v->shape.dims[i];
  for (int i = axis + 1; i < r; i++) inner *= v->shape.dims[i];
  *axis_out = axis;
  *outer_out = outer;
  *inner_out = inner;
  return 0;
}

void cg_shape_range(const ir_node *n, int r, int64_t *start, int64_t *end) {
  int64_t s = ir_attr_int(n, "start", 0), e = ir_attr_int(n, "end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  if (s < 0) s = 0;
  if (e > r) e = r;
  *start = s;
  *end = e;
}

int cg_reduce_axes(ir_graph *g, const char *target, const ir_node *n, int *red) {
  cg_ctx cc = {0};
  cc.g = g;
  int r = cg_in(&cc, n, 0)->shape.rank;
  int64_t axes[IR_MAX_RANK];
  int na = ir_reduce_axes(g, n, axes, IR_MAX_RANK);
  if (na == -2) return fail(g, target, n, "axes must be a constant of at most %d values", IR_MAX_RANK);
  if (na <= 0) {
    if (ir_attr_int(n, "noop_with_empty_axes", 0)) return 1;
    for (int d = 0; d < r; d++) red[d] = 1;
  } else
    for (int i = 0; i < na; i++) {
      int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
      if (a < 0 || a >= r) return fail(g, target, n, "axis out of range");
      red[a] = 1;
    }
  return 0;
}

int cg_pad_params(ir_graph *g, const char *target, const ir_node *n, int64_t *pads, double *value_out,
                  const char **mode) {
  cg_ctx cc = {0};
  cc.g = g;
  int r = cg_in(&cc, n, 0)->shape.rank;
  int64_t raw[2 * IR_MAX_RANK], axes[IR_MAX_RANK];
  double value = 0;
  int np, na = -1;
  if (n->opset >= 11) {
    np = cg_const_ints(&cc, n, 1, raw, 2 * IR_MAX_RANK);
    if (np < 0) return fail(g, target, n, "pads must be a constant");
    if (cg_in(&cc, n, 2) && cg_const_f64(&cc, n, 2, &value) && cg_numel(cg_in(&cc, n, 2)) > 0)
      return fail(g, target, n, "constant_value must be a constant");
    if (cg_in(&cc, n, 3)) {
      na = cg_const_ints(&cc, n, 3, axes, IR_MAX_RANK);
      if (na < 0) return fail(g, target, n, "axes must be a constant");
    }
  } else {
    const int64_t *v;
    np = ir_attr_ints(n, "pads", &v);
    for (int i = 0; i < np && i < 2 * IR_MAX_RANK; i++) raw[i] = v[i];
    value = ir_attr_float(n, "value", 0.0f);
  }
  int cnt = na >= 0 ? na : r;
  if (np != 2 * cnt) return fail(g, target, n, "pads has %d entries, expected %d", np, 2 * cnt);
  for (int i = 0; i < cnt; i++) {
    int a = na >= 0 ? (int)(axes[i] < 0 ? axes[i] + r : axes[i]) : i;
    if (a < 0 || a >= r) return fail(g, target, n, "axis out of range");
    pads[a] = raw[i];
    pads[r + a] = raw[cnt + i];
  }
  *value_out = value;
  *mode = ir_attr_str(n, "mode", "constant");
  return 0;
}

int cg_slice_params(ir_graph *g, const char *target, const ir_node *n, int64_t *st, int64_t *sp) {
  cg_ctx cc = {0};
  cc.g = g;
  const ir_value *x = cg_in(&cc, n, 0);
  int r = x->shape.rank;
  int64_t starts[IR_MAX_RANK], ends[IR_MAX_RANK], axes[IR_MAX_RANK], steps[IR_MAX_RANK];
  int ns, ne, na = -1, nst = -1;
  if (n->opset >= 10) {
    ns = cg_const_ints(&cc, n, 1, starts, IR_MAX_RANK);
    ne = cg_const_ints(&cc, n, 2, ends, IR_MAX_RANK);
    if (ns < 0 || ne < 0) return fail(g, target, n, "starts and ends must be constants");
    if (cg_in(&cc, n, 3)) {
      na = cg_const_ints(&cc, n, 3, axes, IR_MAX_RANK);
      if (na < 0) return fail(g, target, n, "axes must be a constant");
    }
    if (cg_in(&cc, n, 4)) {
      nst = cg_const_ints(&cc, n, 4, steps, IR_MAX_RANK);
      if (nst < 0) return fail(g, target, n, "steps must be a constant");
    }
  } else {
    const int64_t *v;
    ns = ir_attr_ints(n, "starts", &v);
    for (int i = 0; i < ns && i < IR_MAX_RANK; i++) starts[i] = v[i];
    ne = ir_attr_ints(n, "ends", &v);
    for (int i = 0; i < ne && i < IR_MAX_RANK; i++) ends[i] = v[i];
    na = ir_attr_ints(n, "axes", &v);
    for (int i = 0; i < na && i < IR_MAX_RANK; i++) axes[i] = v[i];
  }
  if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
    return fail(g, target, n, "starts/ends/axes/steps lengths differ");
  for (int d = 0; d < r; d++) st[d] = 0, sp[d] = 1;
  for (int i = 0; i < ns; i++) {
    int a = na >= 0 ? (int)(axes[i] < 0 ? axes[i] + r : axes[i]) : i;
    if (a < 0 || a >= r) return fail(g, target, n, "axis out of range");
    int64_t dim = x->shape.dims[a], s = starts[i], step = nst >= 0 ? steps[i] : 1;
    if (step == 0) return fail(g, target, n, "step 0");
    if (s < 0) s += dim;
    if (step > 0) s = s < 0 ? 0 : s > dim ? dim : s;
    else s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
    st[a] = s;
    sp[a] = step;
  }
  return 0;
}

/* An operand's dims and element strides as the MatMul reads it: its value's, or where a
 * Transpose was folded in (attribute attr: its perm), the Transpose's output read from
 * its input. 1 if permuted, 0 if not, -1 if the perm does not fit. */
static int operand_view(const ir_node *n, const char *attr, const ir_value *v, int64_t *dims, int64_t *str) {
  int r = v->shape.rank;
  const int64_t *perm;
  int np = ir_attr_ints(n, attr, &perm);
  if (np >= 0) {
    if (np != r || r < 2) return -1;
    for (int d = 0; d < r; d++)
      if (perm[d] < 0 || perm[d] >= r) return -1;
  }
  ir_permuted_view(&v->shape, np >= 0 ? perm : NULL, dims, str);
  return np >= 0;
}

/* A rows x cols matrix with element strides sr, sc as row-major BLAS takes it: *trans
 * and the leading dimension *ld; -1 when neither stride is 1. */
static int blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int *trans, int64_t *ld) {
  if (cols == 1 || sc == 1) {
    *trans = 0;
    *ld = rows == 1 ? (cols > 1 ? cols : 1) : sr;
    return *ld >= cols ? 0 : -1;
  }
  if (rows == 1 || sr == 1) {
    *trans = 1;
    *ld = sc;
    return *ld >= rows ? 0 : -1;
  }
  return -1;
}

int cg_matmul_params(ir_graph *g, const char *target, const ir_node *n, cg_matmul *mm) {
  const ir_value *a = ir_in(g, n, 0), *b = ir_in(g, n, 1);
  int ra = a->shape.rank, rb = b->shape.rank;
  if (ra < 1 || rb < 1) return fail(g, target, n, "MatMul of scalars");
  int64_t ad[IR_MAX_RANK], as[IR_MAX_RANK], bdm[IR_MAX_RANK], bs[IR_MAX_RANK];
  int pa = operand_view(n, "pipecc.perm_a", a, ad, as), pb = operand_view(n, "pipecc.perm_b", b, bdm, bs);
  if (pa < 0 || pb < 0) return fail(g, target, n, "MatMul: a folded Transpose's perm does not fit its input");
  int64_t M = ra == 1 ? 1 : ad[ra - 2], K = ad[ra - 1];
  int64_t N = rb == 1 ? 1 : bdm[rb - 1], K2 = rb == 1 ? bdm[0] : bdm[rb - 2];
  if (K != K2) return fail(g, target, n, "MatMul inner dims differ (%lld, %lld)", LL(K), LL(K2));
  int64_t srA = ra == 1 ? K : as[ra - 2], scA = as[ra - 1];
  int64_t srB = rb == 1 ? 1 : bs[rb - 2], scB = rb == 1 ? 1 : bs[rb - 1];
  if (blas_layout(M, K, srA, scA, &mm->ta, &mm->lda) || blas_layout(K, N, srB, scB, &mm->tb, &mm->ldb))
    return fail(g, target, n, "MatMul: a folded Transpose leaves no unit stride in a matrix");
  mm->pa = pa;
  mm->pb = pb;
  int nba = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0;
  int nb = nba > nbb ? nba : nbb;
  int64_t *bd = mm->bd, *sa = mm->sa, *sb = mm->sb;
  int64_t NB = 1;
  for (int i = nb - 1; i >= 0; i--) {
    int ia = i - (nb - nba), ib = i - (nb - nbb);
    int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bdm[ib] : 1;
    bd[i] = da > db ? da : db;
    if ((da != 1 && da != bd[i]) || (db != 1 && db != bd[i]))
      return fail(g, target, n, "MatMul batch dims do not broadcast");
    sa[i] = da == 1 ? 0 : as[ia];
    sb[i] = db == 1 ? 0 : bs[ib];
    NB *= bd[i];
  }
  mm->M = M;
  mm->K = K;
  mm->N = N;
  mm->nb = nb;
  mm->NB = NB;
  return 0;
}

int cg_conv_transpose_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y,
                             const int64_t *kernel, cg_win3 *w) {
  if (cg_window(g, target, n, x, y, kernel, 1, w)) return -1;
  const int64_t *os, *pv;
  int nos = ir_attr_ints(n, "output_shape", &os);
  if (nos > 0 && ir_attr_ints(n, "pads", &pv) < 0 && !strcmp(ir_attr_str(n, "auto_pad", "NOTSET"), "NOTSET")) {
    const int64_t *op;
    int no = ir_attr_ints(n, "output_padding", &op);
    for (int j = 3 - w->sr; j < 3; j++) {
      int i = j - (3 - w->sr);
      int64_t total = w->s[j] * (w->in[j] - 1) + (no == w->sr ? op[i] : 0) + ((w->k[j] - 1) * w->d[j] + 1) - w->out[j];
      if (total < 0) total = 0;
      w->pb[j] = total / 2;
      w->pe[j] = total - w->pb[j];
    }
  }
  return 0;
}

int cg_resize_params(ir_graph *g, const char *target, const ir_node *n, cg_resize *rp) {
  const ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  int r = x->shape.rank;
  memset(rp, 0, sizeof *rp);
  const char *mode = ir_attr_str(n, "mode", "nearest");
  int old = n->op == IR_OP_Upsample || n->opset < 11;
  if (!strcmp(mode, "nearest")) rp->mode = CG_RESIZE_NEAREST;
  else if (!strcmp(mode, "linear") || !strcmp(mode, "bilinear") || !strcmp(mode, "trilinear"))
    rp->mode = CG_RESIZE_LINEAR;
  else if (!strcmp(mode, "cubic")) rp->mode = CG_RESIZE_CUBIC;
  else return fail(g, target, n, "Resize mode '%s' is not supported", mode);
  const char *ctm = old ? "asymmetric" : ir_attr_str(n, "coordinate_transformation_mode", "half_pixel");
  const char *nm = n->op == IR_OP_Upsample ? "floor" : ir_attr_str(n, "nearest_mode", "round_prefer_floor");
  static const char *const ctms[] = {"half_pixel",        "pytorch_half_pixel",        "align_corners",
                                     "asymmetric",        "tf_half_pixel_for_nearest", "half_pixel_symmetric",
                                     "tf_crop_and_resize"};
  rp->ctm = -1;
  for (int i = 0; i < (int)(sizeof ctms / sizeof ctms[0]); i++)
    if (!strcmp(ctm, ctms[i])) rp->ctm = i;
  if (rp->ctm < 0) return fail(g, target, n, "coordinate_transformation_mode '%s' is not supported", ctm);
  rp->nearest = !strcmp(nm, "floor")               ? CG_NEAREST_FLOOR
                : !strcmp(nm, "ceil")              ? CG_NEAREST_CEIL
                : !strcmp(nm, "round_prefer_ceil") ? CG_NEAREST_ROUND_PREFER_CEIL
                                                   : CG_NEAREST_ROUND_PREFER_FLOOR;
  /* antialias filters linear and cubic only (nearest ignores it) */
  rp->antialias = !old && rp->mode != CG_RESIZE_NEAREST && ir_attr_int(n, "antialias", 0);
  rp->exclude_outside = !old && ir_attr_int(n, "exclude_outside", 0);
  rp->cubic_a = ir_attr_float(n, "cubic_coeff_a", -0.75f);
  rp->extrapolation = ir_attr_float(n, "extrapolation_value", 0.0f);
  rp->filter = rp->mode == CG_RESIZE_CUBIC || (rp->mode == CG_RESIZE_LINEAR && rp->antialias);
  /* axes: scales, sizes and roi name these dims only; the others are copied */
  int ax[IR_MAX_RANK], na = r;
  const int64_t *av;
  int nav = n->opset >= 18 && !old ? ir_attr_ints(n, "axes", &av) : -1;
  if (nav > r) return fail(g, target, n, "axes has %d values, the input has rank %d", nav, r);
  if (nav > 0) na = nav;
  for (int i = 0; i < na; i++) {
    int64_t a = nav > 0 ? (av[i] < 0 ? av[i] + r : av[i]) : i;
    if (a < 0 || a >= r) return fail(g, target, n, "axis %lld out of range", LL(nav > 0 ? av[i] : a));
    ax[i] = (int)a;
  }
  for (int d = 0; d < r; d++) {
    rp->scales[d] = 1;
    rp->taps[d] = 1;
    rp->roi[1][d] = 1;
  }
  for (int i = 0; i < na; i++) rp->resized[ax[i]] = 1;
  /* scales: from the scales input when given, else output/input */
  const ir_value *sv = ir_in(g, n, old ? 1 : 2), *zv = old ? NULL : ir_in(g, n, 3);
  int have_scales = sv && cg_numel(sv) == na && sv->kind == IR_VAL_CONST;
  for (int i = 0; i < na; i++) {
    int d = ax[i];
    double s = (double)y->shape.dims[d] / (double)(x->shape.dims[d] ? x->shape.dims[d] : 1);
    if (have_scales) ir_const_f64(sv, i, &s);
    rp->scales[d] = s;
  }
  if (n->op == IR_OP_Upsample && !have_scales) {
    const ir_attr *a = ir_attr_find(n, "scales");
    if (a && a->n == r)
      for (int d = 0; d < r; d++) rp->scales[d] = a->floats[d];
  }
  /* not_larger / not_smaller: one scale for all axes, the least / greatest sizes / input */
  const char *pol = n->opset >= 18 && !old ? ir_attr_str(n, "keep_aspect_ratio_policy", "stretch") : "stretch";
  if (strcmp(pol, "stretch") && !have_scales) {
    int larger = !strcmp(pol, "not_smaller");
    if (!larger && strcmp(pol, "not_larger"))
      return fail(g, target, n, "keep_aspect_ratio_policy '%s' is not supported", pol);
    if (!zv || zv->kind != IR_VAL_CONST || cg_numel(zv) != na) return fail(g, target, n, "sizes must be a constant");
    double scale = 0;
    for (int i = 0; i < na; i++) {
      int64_t sz;
      ir_const_i64(zv, i, &sz);
      double q = (double)sz / (double)(x->shape.dims[ax[i]] ? x->shape.dims[ax[i]] : 1);
      if (!i || (larger ? q > scale : q < scale)) scale = q;
    }
    for (int i = 0; i < na; i++) rp->scales[ax[i]] = scale;
  }
  if (rp->ctm == CG_CTM_TF_CROP_AND_RESIZE) {
    const ir_value *roi = ir_in(g, n, 1);
    if (!roi || roi->kind != IR_VAL_CONST || cg_numel(roi) != 2 * na)
      return fail(g, target, n, "tf_crop_and_resize needs a constant roi of %d values", 2 * na);
    for (int i = 0; i < na; i++) {
      ir_const_f64(roi, i, &rp->roi[0][ax[i]]);
      ir_const_f64(roi, na + i, &rp->roi[1][ax[i]]);
    }
  }
  /* filter taps: 2 (linear) or 4 (cubic), widened by 1 / scale when antialiasing a downscale */
  for (int i = 0; rp->filter && i < na; i++) {
    int d = ax[i];
    double s = rp->scales[d] < 1 ? rp->scales[d] : 1;
    if (!rp->antialias) rp->taps[d] = rp->mode == CG_RESIZE_CUBIC ? 4 : 2;
    else if (s > 0) {
      double start = floor((rp->mode == CG_RESIZE_CUBIC ? -2.0 : -1.0) / s) + 1;
      if (start < -(1 << 20)) return fail(g, target, n, "scale %g is too small for antialias", s);
      rp->taps[d] = 2 - 2 * (int)start;
    }
  }
  /* a dim the filter leaves as it is (scale 1: each output index weighs its own input
   * index 1, the others 0) is copied: the same sums without tuples of weight 0 */
  for (int i = 0; rp->filter && i < na; i++) {
    int d = ax[i], same = x->shape.dims[d] == y->shape.dims[d];
    int64_t in = x->shape.dims[d];
    double *w = same ? malloc(sizeof(double) * (size_t)rp->taps[d]) : NULL;
    for (int64_t o = 0; same && o < in; o++) {
      double xo = cg_resize_coord(rp, d, o, in, in);
      int64_t first;
      if (!w || cg_resize_outside(rp, xo, in)) {
        same = 0;
        break;
      }
      cg_resize_taps(rp, d, xo, in, &first, w);
      for (int j = 0; j < rp->taps[d]; j++)
        if (w[j] != (first + j == o)) same = 0;
    }
    free(w);
    if (same) rp->resized[d] = 0, rp->taps[d] = 1;
  }
  return 0;
}

double cg_resize_coord(const cg_resize *rp, int d, int64_t o, int64_t in, int64_t out) {
  if (!rp->resized[d]) return (double)o;
  double s = rp->scales[d];
  switch (rp->ctm) {
    case CG_CTM_HALF_PIXEL: return ((double)o + 0.5) / s - 0.5;
    case CG_CTM_PYTORCH_HALF_PIXEL: return out > 1 ? ((double)o + 0.5) / s - 0.5 : 0;
    case CG_CTM_ALIGN_CORNERS:
      /* the ONNX reference divides by scale * input - 1, not output - 1 */
      return s * (double)in != 1 ? (double)o * (double)(in - 1) / (s * (double)in - 1) : 0;
    case CG_CTM_ASYMMETRIC: return (double)o / s;
    case CG_CTM_TF_HALF_PIXEL_FOR_NEAREST: return ((double)o + 0.5) / s;
    case CG_CTM_TF_CROP_AND_RESIZE: {
      double r0 = rp->roi[0][d], r1 = rp->roi[1][d], span = (double)(in - 1);
      double xo = s * (double)in != 1 ? (double)o * (r1 - r0) * span / (s * (double)in - 1) : (r1 - r0) * span / 2;
      return xo + r0 * span;
    }
    default: {
      double adj = (double)out / (s * (double)in), center = (double)in / 2;
      double off = center * (1 - adj);
      return off + ((double)o + 0.5) / s - 0.5;
    }
  }
}

int cg_resize_outside(const cg_resize *rp, double xo, int64_t in) {
  return rp->ctm == CG_CTM_TF_CROP_AND_RESIZE && (xo < 0 || xo > (double)(in - 1));
}

/* Unnormalised weight of tap i of n (at distance 1 - n / 2 + i - ratio from the
 * coordinate) as the ONNX reference writes it: cubic convolution (coefficient a), or
 * with antialias the triangle or cubic kernel at the distance times the scale (at most 1). */
static double resize_coeff(const cg_resize *rp, int d, double ratio, int i, int n) {
  double a = rp->cubic_a, s = rp->scales[d] < 1 ? rp->scales[d] : 1;
  double t = (double)(1 - n / 2 + i) - ratio;
  if (!rp->antialias) {
    double q = i < 2 ? ratio : 1 - ratio;
    if (i == 0 || i == 3) {
      double q1 = q + 1;
      return ((a * q1 - 5 * a) * q1 + 8 * a) * q1 - 4 * a;
    }
    return (((a + 2) * q - (a + 3)) * q) * q + 1;
  }
  if (rp->mode == CG_RESIZE_LINEAR) {
    double c = 1 - fabs(t * s);
    return c < 0 ? 0 : c > 1 ? 1 : c;
  }
  double u = fabs(s * t), u2 = u * u, u3 = u * u2;
  if (u <= 1) return (a + 2) * u3 - (a + 3) * u2 + 1;
  if (u < 2) return a * u3 - 5 * a * u2 + 8 * a * u - 4 * a;
  return 0;
}

void cg_resize_taps(const cg_resize *rp, int d, double xo, int64_t in, int64_t *first, double *w) {
  int n = rp->taps[d];
  if (!rp->resized[d]) {
    *first = (int64_t)xo;
    w[0] = 1;
    return;
  }
  /* the ratio lies in (0, 1]: an integral coordinate is its left neighbour's ratio 1 */
  double fl = floor(xo), ratio = xo == fl ? 1 : xo - fl;
  *first = (int64_t)fl - (xo == fl) + 1 - n / 2;
  for (int i = 0; i < n; i++) w[i] = resize_coeff(rp, d, ratio, i, n);
  if (rp->antialias) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += w[i];
    for (int i = 0; i < n; i++) w[i] = w[i] / sum;
  }
  if (rp->exclude_outside) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
      if (*first + i < 0 || *first + i >= in) w[i] = 0;
      sum += w[i];
    }
    for (int i = 0; i < n; i++) w[i] = w[i] / sum;
  }
}
