/* codegen/c/ops_vision.c - RoiAlign and DeformConv for the CPU target, and the code of
 * one output element of each that codegen/cuda/ops_vision.c puts into its kernels (the
 * same statements on both targets).
 *
 * RoiAlign: output i = (r, c, ph, pw): the RoI's box in input pixels (x * spatial_scale,
 * less half a pixel for half_pixel; output_half_pixel makes the box at least 1 x 1), bin
 * (ph, pw) of an output_height x output_width grid over it, sampled at gh x gw points
 * (sampling_ratio, or ceil(box / output) per RoI); each sample is a bilinear tap of four
 * pixels (clamped to the edge; a sample more than a pixel outside counts as 0). avg
 * divides the sum by the sample count; max keeps the largest weighted tap of any sample
 * (onnxruntime's and the ONNX reference's max mode). The arithmetic is in the element
 * type, in onnxruntime's order.
 *
 * DeformConv (2-D): per image, the columns [C * kH * kW, oH * oW] are sampled at the
 * kernel taps moved by the offsets (offset channel og * 2kk + 2k: dh, + 1: dw), bilinear
 * with zero outside the input, times the mask; then per group the GEMM W_g [Mg, K] x
 * col_g [K, oH * oW] onto the bias, as Conv's im2col path (codegen/c/ops_nn.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "ir/diag.h"

#define LL(x) ((long long)(x))

static const char *gemm_fn(ir_dtype t) { return t == IR_DOUBLE ? "cblas_dgemm" : "cblas_sgemm"; }

/* ---- shared with codegen/cuda/ops_vision.c ----------------------------------------- */

/* What both targets need of a RoiAlign or DeformConv: float or double (float16 and
 * bfloat16 come widened, passes/opt/widen.c), 2-D. 0, or -1 after "TARGET target: ...". */
int cg_vision_check(ir_graph *g, const char *target, const ir_node *n) {
  const ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  const char *why = NULL;
  if (y->dtype != IR_FLOAT && y->dtype != IR_DOUBLE) why = "only float and double are supported";
  else if (x->shape.rank != 4) why = "only 2-D inputs [N, C, H, W] are supported";
  if (!why) return 0;
  ir_error_node(g, (int)(n - g->nodes), "%s target: %s on %s: %s", target, ir_op_name(n->op), ir_dtype_name(y->dtype),
                why);
  return -1;
}

/* Output element i (a long in scope) of RoiAlign into y0[i]; x0 X, x1 rois, x2
 * batch_indices. */
void cg_roialign_body(ir_graph *g, const ir_node *n, FILE *f, const char *ind) {
  const ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], H = x->shape.dims[2], W = x->shape.dims[3];
  int64_t OH = y->shape.dims[2], OW = y->shape.dims[3];
  int64_t sr = ir_attr_int(n, "sampling_ratio", 0);
  int max = !strcmp(ir_attr_str(n, "mode", "avg"), "max");
  /* opset 10 has no coordinate_transformation_mode: output_half_pixel */
  int half = n->opset >= 16 && !strcmp(ir_attr_str(n, "coordinate_transformation_mode", "half_pixel"), "half_pixel");
  char sc[48], l1[64] = "";
  cg_flit(sc, sizeof sc, (double)ir_attr_float(n, "spatial_scale", 1.0f), t);
  if (half) snprintf(l1, sizeof l1, " - %s", t == IR_DOUBLE ? "0.5" : "0.5f");
  fprintf(f, "%sconst long pw = i %% %lld, ph = i / %lld %% %lld, ch = i / %lld %% %lld, r = i / %lld;\n", ind, LL(OW),
          LL(OW), LL(OH), LL(OW * OH), LL(C), LL(OW * OH * C));
  fprintf(f, "%sconst long b = (long)x2[r];\n", ind);
  fprintf(f, "%s%s acc = 0;\n", ind, T);
  fprintf(f, "%sif (b >= 0 && b < %lld) { /* else out of range: undefined in ONNX; 0 */\n", ind, LL(N));
  fprintf(f, "%s  const %s *xc = x0 + (b * %lld + ch) * %lld, *roi = x1 + r * 4;\n", ind, T, LL(C), LL(H * W));
  fprintf(f, "%s  const %s sx = roi[0] * %s%s, sy = roi[1] * %s%s;\n", ind, T, sc, l1, sc, l1);
  fprintf(f, "%s  %s rw = roi[2] * %s%s - sx, rh = roi[3] * %s%s - sy;\n", ind, T, sc, l1, sc, l1);
  if (!half) fprintf(f, "%s  if (rw < 1) rw = 1;\n%s  if (rh < 1) rh = 1;\n", ind, ind);
  fprintf(f, "%s  const %s bh = rh / (%s)%lld, bw = rw / (%s)%lld;\n", ind, T, T, LL(OH), T, LL(OW));
  if (sr > 0) fprintf(f, "%s  const long gh = %lld, gw = %lld;\n", ind, LL(sr), LL(sr));
  else
    fprintf(f, "%s  const long gh = (long)ceil(rh / (%s)%lld), gw = (long)ceil(rw / (%s)%lld);\n", ind, T, LL(OH), T,
            LL(OW));
  if (max) fprintf(f, "%s  int first = 1;\n", ind);
  fprintf(f, "%s  for (long iy = 0; iy < gh; iy++) {\n", ind);
  fprintf(f, "%s    const %s yy = sy + (%s)ph * bh + ((%s)iy + (%s)0.5) * bh / (%s)gh;\n", ind, T, T, T, T, T);
  fprintf(f, "%s    for (long ix = 0; ix < gw; ix++) {\n", ind);
  fprintf(f, "%s      const %s xx = sx + (%s)pw * bw + ((%s)ix + (%s)0.5) * bw / (%s)gw;\n", ind, T, T, T, T, T);
  fprintf(f, "%s      %s v = 0;\n", ind, T);
  fprintf(f, "%s      if (!(yy < -1 || yy > %lld || xx < -1 || xx > %lld)) {\n", ind, LL(H), LL(W));
  fprintf(f, "%s        %s py = yy <= 0 ? 0 : yy, px = xx <= 0 ? 0 : xx;\n", ind, T);
  fprintf(f, "%s        long y_lo = (long)py, x_lo = (long)px, y_hi, x_hi;\n", ind);
  fprintf(f, "%s        if (y_lo >= %lld) { y_hi = y_lo = %lld; py = (%s)y_lo; } else y_hi = y_lo + 1;\n", ind,
          LL(H - 1), LL(H - 1), T);
  fprintf(f, "%s        if (x_lo >= %lld) { x_hi = x_lo = %lld; px = (%s)x_lo; } else x_hi = x_lo + 1;\n", ind,
          LL(W - 1), LL(W - 1), T);
  fprintf(f, "%s        const %s ly = py - (%s)y_lo, lx = px - (%s)x_lo, hy = 1 - ly, hx = 1 - lx;\n", ind, T, T, T);
  fprintf(f, "%s        const %s t1 = hy * hx * xc[y_lo * %lld + x_lo], t2 = hy * lx * xc[y_lo * %lld + x_hi];\n", ind,
          T, LL(W), LL(W));
  fprintf(f, "%s        const %s t3 = ly * hx * xc[y_hi * %lld + x_lo], t4 = ly * lx * xc[y_hi * %lld + x_hi];\n", ind,
          T, LL(W), LL(W));
  if (max) {
    fprintf(f, "%s        v = t1 < t2 ? t2 : t1;\n", ind);
    fprintf(f, "%s        v = v < t3 ? t3 : v;\n", ind);
    fprintf(f, "%s        v = v < t4 ? t4 : v;\n", ind);
  } else {
    fprintf(f, "%s        v = t1 + t2 + t3 + t4;\n", ind);
  }
  fprintf(f, "%s      }\n", ind);
  if (max) fprintf(f, "%s      acc = first ? v : acc < v ? v : acc;\n%s      first = 0;\n", ind, ind);
  else fprintf(f, "%s      acc += v;\n", ind);
  fprintf(f, "%s    }\n%s  }\n", ind, ind);
  if (!max) fprintf(f, "%s  acc /= (%s)(gh * gw > 1 ? gh * gw : 1);\n", ind, T);
  fprintf(f, "%s}\n%sy0[i] = acc;\n", ind, ind);
}

/* Column element q (a long in scope) of image img (a long in scope) into col[q]; x0 X,
 * x2 offset, x4 mask (if any). */
void cg_deform_body(ir_graph *g, const ir_node *n, FILE *f, const char *ind) {
  const ir_value *x = ir_in(g, n, 0), *wt = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  int64_t C = x->shape.dims[1], H = x->shape.dims[2], W = x->shape.dims[3];
  int64_t KH = wt->shape.dims[2], KW = wt->shape.dims[3], KK = KH * KW, OH = y->shape.dims[2], OW = y->shape.dims[3];
  int64_t P = OH * OW, OG = ir_attr_int(n, "offset_group", 1);
  int64_t s[2] = {1, 1}, d[2] = {1, 1}, p[4] = {0, 0, 0, 0};
  const int64_t *v;
  if (ir_attr_ints(n, "strides", &v) == 2) s[0] = v[0], s[1] = v[1];
  if (ir_attr_ints(n, "dilations", &v) == 2) d[0] = v[0], d[1] = v[1];
  if (ir_attr_ints(n, "pads", &v) == 4) p[0] = v[0], p[1] = v[1];
  int has_mask = n->n_in > 4 && n->in[4] >= 0;
  fprintf(f, "%sconst long pp = q %% %lld, row = q / %lld, k = row %% %lld, ch = row / %lld;\n", ind, LL(P), LL(P),
          LL(KK), LL(KK));
  fprintf(f, "%sconst long og = ch / %lld, oh = pp / %lld, ow = pp %% %lld;\n", ind, LL(C / OG), LL(OW), LL(OW));
  fprintf(f, "%sconst %s *xc = x0 + (img * %lld + ch) * %lld;\n", ind, T, LL(C), LL(H * W));
  fprintf(f, "%sconst %s *o = x2 + (img * %lld + og * %lld + 2 * k) * %lld + pp;\n", ind, T, LL(OG * 2 * KK),
          LL(2 * KK), LL(P));
  fprintf(f, "%sconst %s hy = (%s)(oh * %lld - %lld + k / %lld * %lld) + o[0];\n", ind, T, T, LL(s[0]), LL(p[0]),
          LL(KW), LL(d[0]));
  fprintf(f, "%sconst %s wx = (%s)(ow * %lld - %lld + k %% %lld * %lld) + o[%lld];\n", ind, T, T, LL(s[1]), LL(p[1]),
          LL(KW), LL(d[1]), LL(P));
  fprintf(f, "%s%s v = 0;\n", ind, T);
  fprintf(f, "%sif (hy > -1 && hy < %lld && wx > -1 && wx < %lld) {\n", ind, LL(H), LL(W));
  fprintf(f, "%s  const %s fh = (%s)floor(hy), fw = (%s)floor(wx);\n", ind, T, T, T);
  fprintf(f, "%s  const long h0 = (long)fh, w0 = (long)fw;\n", ind);
  fprintf(f, "%s  const %s lh = hy - fh, lw = wx - fw, hh = 1 - lh, hw = 1 - lw;\n", ind, T);
  fprintf(f, "%s  const %s v1 = h0 >= 0 && w0 >= 0 ? xc[h0 * %lld + w0] : 0;\n", ind, T, LL(W));
  fprintf(f, "%s  const %s v2 = h0 >= 0 && w0 + 1 < %lld ? xc[h0 * %lld + w0 + 1] : 0;\n", ind, T, LL(W), LL(W));
  fprintf(f, "%s  const %s v3 = h0 + 1 < %lld && w0 >= 0 ? xc[(h0 + 1) * %lld + w0] : 0;\n", ind, T, LL(H), LL(W));
  fprintf(f, "%s  const %s v4 = h0 + 1 < %lld && w0 + 1 < %lld ? xc[(h0 + 1) * %lld + w0 + 1] : 0;\n", ind, T, LL(H),
          LL(W), LL(W));
  fprintf(f, "%s  v = hh * hw * v1 + hh * lw * v2 + lh * hw * v3 + lh * lw * v4;\n", ind);
  fprintf(f, "%s}\n", ind);
  if (has_mask) fprintf(f, "%sv *= x4[(img * %lld + og * %lld + k) * %lld + pp];\n", ind, LL(OG * KK), LL(KK), LL(P));
  fprintf(f, "%scol[q] = v;\n", ind);
}

/* ---- the cpu target ----------------------------------------------------------------- */

static int emit_roialign(cg_ctx *c, const ir_node *n) {
  if (cg_vision_check(c->g, "cpu", n)) return -1;
  int64_t total = cg_numel(cg_out(c, n, 0));
  if (total == 0) return 0;
  cg_w(c, "  for (long i = 0; i < %lld; i++) {\n", LL(total));
  cg_roialign_body(c->g, n, c->body, "    ");
  cg_w(c, "  }\n");
  return 0;
}

static int emit_deform_conv(cg_ctx *c, const ir_node *n) {
  if (cg_vision_check(c->g, "cpu", n)) return -1;
  ir_value *x = cg_in(c, n, 0), *wt = cg_in(c, n, 1), *y = cg_out(c, n, 0);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  if (cg_numel(y) == 0) return 0;
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], M = y->shape.dims[1], G = ir_attr_int(n, "group", 1);
  int64_t P = y->shape.dims[2] * y->shape.dims[3], KK = wt->shape.dims[2] * wt->shape.dims[3];
  int64_t Mg = M / G, K = C / G * KK, rows = C * KK;
  int has_b = cg_in(c, n, 3) != NULL;
  if (K == 0) { /* no input channels: the bias, or zeros */
    cg_w(c, "  for (long n = 0; n < %lld; n++)\n    for (long m = 0; m < %lld; m++)\n", LL(N), LL(M));
    cg_w(c, "      for (long i = 0; i < %lld; i++) y0[(n * %lld + m) * %lld + i] = %s;\n", LL(P), LL(M), LL(P),
         has_b ? "x3[m]" : "0");
    return 0;
  }
  cg_scratch(c, (size_t)(rows * P) * ir_dtype_size(t));
  cg_w(c, "  %s *col = (%s *)scr;\n", T, T);
  cg_w(c, "  for (long img = 0; img < %lld; img++) {\n", LL(N));
  cg_w(c, "    for (long q = 0; q < %lld; q++) {\n", LL(rows * P));
  cg_deform_body(c->g, n, c->body, "      ");
  cg_w(c, "    }\n");
  cg_w(c, "    for (long g = 0; g < %lld; g++) {\n", LL(G));
  cg_w(c, "      %s *yg = y0 + (img * %lld + g * %lld) * %lld;\n", T, LL(M), LL(Mg), LL(P));
  if (has_b) {
    /* the bias first, then the GEMM accumulates onto it (beta 1), as Conv */
    cg_w(c, "      for (long m = 0; m < %lld; m++)\n", LL(Mg));
    cg_w(c, "        for (long i = 0; i < %lld; i++) yg[m * %lld + i] = x3[g * %lld + m];\n", LL(P), LL(P), LL(Mg));
  }
  cg_w(c,
       "      %s(CblasRowMajor, CblasNoTrans, CblasNoTrans, %lld, %lld, %lld, 1, x1 + g * %lld, %lld, col + g * %lld, "
       "%lld, %s, yg, %lld);\n",
       gemm_fn(t), LL(Mg), LL(P), LL(K), LL(Mg * K), LL(K), LL(K * P), LL(P), has_b ? "1" : "0", LL(P));
  cg_w(c, "    }\n  }\n");
  return 0;
}

cg_op_fn cg_op_emitter_vision(ir_op op);
cg_op_fn cg_op_emitter_vision(ir_op op) {
  switch (op) {
    case IR_OP_RoiAlign: return emit_roialign;
    case IR_OP_DeformConv: return emit_deform_conv;
    default: return NULL;
  }
}
