/* codegen/c/ops_sample.c - GridSample and Det for the CPU target, and the code of one
 * output element of each that codegen/cuda/ops_sample.c puts into its kernels (the
 * same statements on both targets).
 *
 * GridSample (16: 4-D; 20: N-D): output element i = (n, c, o1..or) reads the grid
 * vector g = grid[n, o1..or, :], whose component k is the coordinate of spatial dim
 * r-1-k (x first). Each coordinate is unnormalised into input pixels:
 *   align_corners 1: x = (g + 1) / 2 * (size - 1)   (-1 and 1: the corner pixels' centres)
 *   align_corners 0: x = ((g + 1) * size - 1) / 2   (-1 and 1: the corner pixels' edges)
 * nearest rounds it half to even. If any coordinate lies outside [lo, hi] ([0, size-1],
 * align_corners 0: [-0.5, size-0.5]), padding_mode border clamps every coordinate to
 * [0, size-1] (not in cubic mode: its taps are clamped, as PyTorch and onnxruntime do)
 * and reflection reflects every one into [lo, hi] (repeatedly, by the far border in
 * turn). Then per dim the taps: nearest the rounded index; linear floor(x)
 * and floor(x)+1 with weights (floor(x)+1 - x, x - floor(x)); cubic floor(x)-1 ..
 * floor(x)+2 with the cubic convolution weights of A = -0.75 at t = x - floor(x). A tap
 * outside the input reads 0 (zeros), the clamped index (border) or the reflected index
 * (reflection). The result is the nested weighted sum, the last dim innermost:
 * sum_a w0[a] * (sum_b w1[b] * (... x[a, b, ...])), in the element type (float math
 * for float), in the order onnxruntime sums.
 *
 * Det: per matrix, LU factorisation with partial pivoting in double (the row with the
 * largest magnitude in the column is the pivot; a zero column gives 0); the
 * determinant is the product of the pivots, negated per row swap. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "ir/diag.h"

#define LL(x) ((long long)(x))

/* ---- shared with codegen/cuda/ops_sample.c (declared in cg_c.h) ---------------------- */

/* What both targets need of a GridSample or Det: float or double (float16 and bfloat16
 * come widened, passes/opt/widen.c). 0, or -1 after "TARGET target: ...". */
int cg_sample_check(ir_graph *g, const char *target, const ir_node *n) {
  const ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  const char *why = NULL;
  if (y->dtype != IR_FLOAT && y->dtype != IR_DOUBLE) why = "only float and double are supported";
  else if (n->op == IR_OP_GridSample) {
    const ir_value *gr = ir_in(g, n, 1);
    if (gr->dtype != IR_FLOAT && gr->dtype != IR_DOUBLE) why = "the grid must be float or double";
    else if (x->shape.rank < 3 || x->shape.rank > 2 + 6) why = "only 1 to 6 spatial dims are supported";
  }
  if (!why) return 0;
  ir_error_node(g, (int)(n - g->nodes), "%s target: %s on %s: %s", target, ir_op_name(n->op), ir_dtype_name(x->dtype),
                why);
  return -1;
}

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

static int gs_mode(const ir_node *n) {
  const char *m = ir_attr_str(n, "mode", n->opset >= 20 ? "linear" : "bilinear");
  if (!strcmp(m, "nearest")) return GS_NEAREST;
  if (!strcmp(m, "cubic") || !strcmp(m, "bicubic")) return GS_CUBIC;
  return GS_LINEAR;
}

static int gs_padding(const ir_node *n) {
  const char *p = ir_attr_str(n, "padding_mode", "zeros");
  return !strcmp(p, "border") ? GS_BORDER : !strcmp(p, "reflection") ? GS_REFLECTION : GS_ZEROS;
}

/* Reflect the T variable v into [lo, hi] (lo < hi): by the near border, then the far
 * one, ..., as the spec's example (x = -3.5 in [-1, 1] becomes 0.5). */
static void gs_reflect(FILE *f, const char *ind, const char *T, const char *sfx, const char *v, double lo, double hi) {
  fprintf(f, "%sif (%s < (%s)%.17g) {\n", ind, v, T, lo);
  fprintf(f, "%s  const %s dx = (%s)%.17g - %s, q = floor%s(dx / (%s)%.17g), rr = dx - q * (%s)%.17g;\n", ind, T, T, lo,
          v, sfx, T, hi - lo, T, hi - lo);
  fprintf(f, "%s  %s = fmod%s(q, (%s)2) == 0 ? (%s)%.17g + rr : (%s)%.17g - rr;\n", ind, v, sfx, T, T, lo, T, hi);
  fprintf(f, "%s} else if (%s > (%s)%.17g) {\n", ind, v, T, hi);
  fprintf(f, "%s  const %s dx = %s - (%s)%.17g, q = floor%s(dx / (%s)%.17g), rr = dx - q * (%s)%.17g;\n", ind, T, v, T,
          hi, sfx, T, hi - lo, T, hi - lo);
  fprintf(f, "%s  %s = fmod%s(q, (%s)2) == 0 ? (%s)%.17g - rr : (%s)%.17g + rr;\n", ind, v, sfx, T, T, hi, T, lo);
  fprintf(f, "%s}\n", ind);
}

/* Output element i (a long in scope) of GridSample into y0[i]; x0 X, x1 grid. */
void cg_gridsample_body(ir_graph *g, const ir_node *n, FILE *f, const char *ind) {
  const ir_value *x = ir_in(g, n, 0), *gr = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  const char *T = cg_ctype(y->dtype), *GT = cg_ctype(gr->dtype), *sfx = y->dtype == IR_FLOAT ? "f" : "";
  int r = x->shape.rank - 2, mode = gs_mode(n), pad = gs_padding(n);
  int align = ir_attr_int(n, "align_corners", 0) != 0;
  int K = mode == GS_NEAREST ? 1 : mode == GS_LINEAR ? 2 : 4;
  int64_t C = x->shape.dims[1], P = 1, Q = 1, S[8], st[8];
  for (int d = 0; d < r; d++) P *= y->shape.dims[2 + d];
  for (int d = r - 1; d >= 0; d--) {
    S[d] = x->shape.dims[2 + d];
    st[d] = Q;
    Q *= S[d];
  }
  fprintf(f, "%sconst long sp = i %% %lld, nc = i / %lld;\n", ind, LL(P), LL(P));
  fprintf(f, "%sconst %s *gp = x1 + (nc / %lld * %lld + sp) * %d;\n", ind, GT, LL(C), LL(P), r);
  fprintf(f, "%sconst %s *xp = x0 + nc * %lld;\n", ind, T, LL(Q));
  /* coordinates */
  for (int d = 0; d < r; d++) {
    fprintf(f, "%s%s c%d = (%s)gp[%d];\n", ind, T, d, T, r - 1 - d);
    if (align) fprintf(f, "%sc%d = (c%d + (%s)1) / (%s)2 * (%s)%lld;\n", ind, d, d, T, T, T, LL(S[d] - 1));
    else fprintf(f, "%sc%d = ((c%d + (%s)1) * (%s)%lld - (%s)1) / (%s)2;\n", ind, d, d, T, T, LL(S[d]), T, T);
    if (mode == GS_NEAREST) fprintf(f, "%sc%d = rint%s(c%d);\n", ind, d, sfx, d);
  }
  double lo = align ? 0 : -0.5;
  if (pad == GS_REFLECTION || (pad == GS_BORDER && mode != GS_CUBIC)) {
    fprintf(f, "%sif (", ind);
    for (int d = 0; d < r; d++)
      fprintf(f, "%sc%d < (%s)%.17g || c%d > (%s)%.17g", d ? " || " : "", d, T, lo, d, T,
              (double)S[d] - 1 + (align ? 0 : 0.5));
    fprintf(f, ") {\n");
    char ind2[64], v[16];
    snprintf(ind2, sizeof ind2, "%s  ", ind);
    for (int d = 0; d < r; d++) {
      snprintf(v, sizeof v, "c%d", d);
      if (pad == GS_BORDER)
        fprintf(f, "%sc%d = c%d < (%s)0 ? (%s)0 : c%d > (%s)%lld ? (%s)%lld : c%d;\n", ind2, d, d, T, T, d, T,
                LL(S[d] - 1), T, LL(S[d] - 1), d);
      else if (align && S[d] == 1) fprintf(f, "%sc%d = 0;\n", ind2, d);
      else gs_reflect(f, ind2, T, sfx, v, lo, (double)S[d] - 1 + (align ? 0 : 0.5));
    }
    fprintf(f, "%s}\n", ind);
  }
  /* taps per dim: k<d>[t] the element offset (-1: reads 0), w<d>[t] the weight */
  for (int d = 0; d < r; d++) {
    /* NaN or beyond 2^40 pixels: keeps the conversion to long defined (every tap is
     * outside then: it reads 0 or, border, the edge) */
    fprintf(f, "%sif (!(c%d >= (%s)-1099511627776.0)) c%d = (%s)-1099511627776.0;\n", ind, d, T, d, T);
    fprintf(f, "%sif (c%d > (%s)1099511627776.0) c%d = (%s)1099511627776.0;\n", ind, d, T, d, T);
    if (mode == GS_NEAREST) fprintf(f, "%sconst long f%d = (long)c%d;\n", ind, d, d);
    else fprintf(f, "%sconst long f%d = (long)floor%s(c%d)%s;\n", ind, d, sfx, d, mode == GS_CUBIC ? " - 1" : "");
    fprintf(f, "%slong k%d[%d];\n", ind, d, K);
    if (mode != GS_NEAREST) fprintf(f, "%s%s w%d[%d];\n", ind, T, d, K);
    if (mode == GS_LINEAR) {
      fprintf(f, "%sw%d[0] = (%s)(f%d + 1) - c%d;\n%sw%d[1] = c%d - (%s)f%d;\n", ind, d, T, d, d, ind, d, d, T, d);
    } else if (mode == GS_CUBIC) {
      /* cubic convolution, A = -0.75, at distances 1+t, t, 1-t, 2-t */
      fprintf(
          f,
          "%s{\n%s  const %s A = (%s)-0.75, t = c%d - (%s)f%d - (%s)1, t1 = t + (%s)1, u = (%s)1 - t, u1 = (%s)2 - t;\n",
          ind, ind, T, T, d, T, d, T, T, T, T);
      fprintf(f, "%s  w%d[0] = ((A * t1 - (%s)5 * A) * t1 + (%s)8 * A) * t1 - (%s)4 * A;\n", ind, d, T, T, T);
      fprintf(f, "%s  w%d[1] = ((A + (%s)2) * t - (A + (%s)3)) * t * t + (%s)1;\n", ind, d, T, T, T);
      fprintf(f, "%s  w%d[2] = ((A + (%s)2) * u - (A + (%s)3)) * u * u + (%s)1;\n", ind, d, T, T, T);
      fprintf(f, "%s  w%d[3] = ((A * u1 - (%s)5 * A) * u1 + (%s)8 * A) * u1 - (%s)4 * A;\n%s}\n", ind, d, T, T, T, ind);
    }
    fprintf(f, "%sfor (int t = 0; t < %d; t++) {\n%s  long k = f%d + t;\n", ind, K, ind, d);
    if (pad == GS_ZEROS) {
      fprintf(f, "%s  k%d[t] = k >= 0 && k < %lld ? k * %lld : -1;\n", ind, d, LL(S[d]), LL(st[d]));
    } else if (pad == GS_BORDER || S[d] == 1) {
      fprintf(f, "%s  k%d[t] = (k < 0 ? 0 : k > %lld ? %lld : k) * %lld;\n", ind, d, LL(S[d] - 1), LL(S[d] - 1),
              LL(st[d]));
    } else {
      char ind2[64];
      snprintf(ind2, sizeof ind2, "%s  ", ind);
      fprintf(f, "%s  %s v = (%s)k;\n", ind, T, T);
      gs_reflect(f, ind2, T, sfx, "v", lo, (double)S[d] - 1 + (align ? 0 : 0.5));
      fprintf(f, "%s  k = (long)v;\n%s  k%d[t] = (k < 0 ? 0 : k > %lld ? %lld : k) * %lld;\n", ind, ind, d,
              LL(S[d] - 1), LL(S[d] - 1), LL(st[d]));
    }
    fprintf(f, "%s}\n", ind);
  }
  /* the sum */
  if (mode == GS_NEAREST) {
    fprintf(f, "%sy0[i] = ", ind);
    if (pad == GS_ZEROS) {
      fprintf(f, "(");
      for (int d = 0; d < r; d++) fprintf(f, "%sk%d[0] < 0", d ? " || " : "", d);
      fprintf(f, ") ? (%s)0 : ", T);
    }
    fprintf(f, "xp[k0[0]");
    for (int d = 1; d < r; d++) fprintf(f, " + k%d[0]", d);
    fprintf(f, "];\n");
    return;
  }
  for (int d = 0; d < r; d++)
    fprintf(f, "%s%*s%s s%d = 0;\n%s%*sfor (int t%d = 0; t%d < %d; t%d++) {\n", ind, 2 * d, "", T, d, ind, 2 * d, "", d,
            d, K, d);
  int in = 2 * r;
  fprintf(f, "%s%*sconst %s v = ", ind, in, "", T);
  if (pad == GS_ZEROS) {
    fprintf(f, "(");
    for (int d = 0; d < r; d++) fprintf(f, "%sk%d[t%d] < 0", d ? " || " : "", d, d);
    fprintf(f, ") ? (%s)0 : ", T);
  }
  fprintf(f, "xp[k0[t0]");
  for (int d = 1; d < r; d++) fprintf(f, " + k%d[t%d]", d, d);
  fprintf(f, "];\n");
  fprintf(f, "%s%*ss%d += w%d[t%d] * v;\n", ind, in, "", r - 1, r - 1, r - 1);
  for (int d = r - 1; d >= 0; d--) {
    fprintf(f, "%s%*s}\n", ind, 2 * d, "");
    if (d) fprintf(f, "%s%*ss%d += w%d[t%d] * s%d;\n", ind, 2 * d, "", d - 1, d - 1, d - 1, d);
  }
  fprintf(f, "%sy0[i] = s0;\n", ind);
}

/* Determinant of matrix i (a long in scope) of x0 into y0[i]; a: an expression for M*M
 * doubles of working memory. */
void cg_det_body(ir_graph *g, const ir_node *n, FILE *f, const char *ind, const char *a) {
  const ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  int64_t M = x->shape.dims[x->shape.rank - 1];
  const char *T = cg_ctype(x->dtype);
  fprintf(f, "%sdouble *a = %s;\n%sconst %s *xp = x0 + i * %lld;\n", ind, a, ind, T, LL(M * M));
  fprintf(f, "%sfor (long q = 0; q < %lld; q++) a[q] = (double)xp[q];\n", ind, LL(M * M));
  fprintf(f, "%sdouble det = 1;\n", ind);
  fprintf(f, "%sfor (long k = 0; k < %lld; k++) {\n", ind, LL(M));
  fprintf(f, "%s  long p = k;\n%s  double best = fabs(a[k * %lld + k]);\n", ind, ind, LL(M));
  fprintf(f, "%s  for (long r = k + 1; r < %lld; r++) {\n%s    const double v = fabs(a[r * %lld + k]);\n", ind, LL(M),
          ind, LL(M));
  fprintf(f, "%s    if (v > best) { best = v; p = r; }\n%s  }\n", ind, ind);
  fprintf(f, "%s  if (best == 0) { det = 0; break; }\n", ind);
  fprintf(f, "%s  if (p != k) {\n%s    for (long j = k; j < %lld; j++) {\n", ind, ind, LL(M));
  fprintf(f, "%s      const double s = a[k * %lld + j];\n%s      a[k * %lld + j] = a[p * %lld + j];\n", ind, LL(M), ind,
          LL(M), LL(M));
  fprintf(f, "%s      a[p * %lld + j] = s;\n%s    }\n%s    det = -det;\n%s  }\n", ind, LL(M), ind, ind, ind);
  fprintf(f, "%s  const double piv = a[k * %lld + k];\n%s  det *= piv;\n", ind, LL(M), ind);
  fprintf(f, "%s  for (long r = k + 1; r < %lld; r++) {\n", ind, LL(M));
  fprintf(f, "%s    const double m = a[r * %lld + k] / piv;\n", ind, LL(M));
  fprintf(f, "%s    for (long j = k + 1; j < %lld; j++) a[r * %lld + j] -= m * a[k * %lld + j];\n", ind, LL(M), LL(M),
          LL(M));
  fprintf(f, "%s  }\n%s}\n", ind, ind);
  fprintf(f, "%sy0[i] = (%s)det;\n", ind, cg_ctype(y->dtype));
}

/* ---- the CPU target --------------------------------------------------------------------- */

static int emit_gridsample(cg_ctx *c, const ir_node *n) {
  if (cg_sample_check(c->g, "cpu", n)) return -1;
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  if (!cg_numel(y)) return 0;
  int64_t Q = 1;
  for (int d = 2; d < x->shape.rank; d++) Q *= x->shape.dims[d];
  if (!Q) return cg_fail(c, n, "GridSample of an empty input");
  cg_w(c, "  for (long i = 0; i < %lld; i++) {\n", LL(cg_numel(y)));
  cg_gridsample_body(c->g, n, c->body, "    ");
  cg_w(c, "  }\n");
  return 0;
}

static int emit_det(cg_ctx *c, const ir_node *n) {
  if (cg_sample_check(c->g, "cpu", n)) return -1;
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  int64_t M = x->shape.dims[x->shape.rank - 1];
  if (!cg_numel(y)) return 0;
  int64_t MM = M * M;
  cg_scratch(c, (size_t)(MM > 0 ? MM : 1) * sizeof(double));
  cg_w(c, "  for (long i = 0; i < %lld; i++) {\n", LL(cg_numel(y)));
  cg_det_body(c->g, n, c->body, "    ", "(double *)scr");
  cg_w(c, "  }\n");
  return 0;
}

cg_op_fn cg_op_emitter_sample(ir_op op);
cg_op_fn cg_op_emitter_sample(ir_op op) {
  switch (op) {
    case IR_OP_GridSample: return emit_gridsample;
    case IR_OP_Det: return emit_det;
    default: return NULL;
  }
}
