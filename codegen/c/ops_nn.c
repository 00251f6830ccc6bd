/* codegen/c/ops_nn.c - compute-heavy and normalisation ops for the CPU target:
 * Conv and ConvTranspose (im2col / col2im + BLAS GEMM per group), Gemm, MatMul,
 * pooling, BatchNormalization, InstanceNormalization, LayerNormalization, LRN and the
 * Softmax family. Shapes are constants in the emitted code. GEMMs go through
 * cblas_sgemm/dgemm, or for float Convs with small K over large images and the small
 * matrices of batched float MatMuls through pipert_gemm_direct (runtime/pipert_gemm.h),
 * chosen and called with arguments that depend only on the node (never on the stage it
 * lands in), so results are the same for every stage count. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "codegen/emit_common.h"
#include "codegen/op_params.h"
#include "codegen/rnn_expr.h"
#include "passes/opt/fuse.h"
#include "passes/rnn.h"
#include "passes/opt/winograd.h"
#define PIPERT_DW_SIZES_ONLY
#include "runtime/pipert_dw.h"

#define LL(x) ((long long)(x))

static const char *gemm_fn(ir_dtype t) { return t == IR_DOUBLE ? "cblas_dgemm" : "cblas_sgemm"; }

/* ---- windows: Conv, ConvTranspose, pooling --------------------------------------- */

/* window(): codegen/op_params.c, shared with the cuda target. */
static int window(cg_ctx *c, const ir_node *n, const ir_value *x, const ir_value *y, const int64_t *kernel,
                  int transposed, cg_win3 *w) {
  return cg_window(c->g, "cpu", n, x, y, kernel, transposed, w);
}

/* The epilogue passes/opt/fuse.c folded into a Conv (cg_conv_epi in cg_c.h), applied to nr
 * rows of P outputs at pointer y (row stride ys), the residual at r (same offsets).
 * Nothing when the node carries no epilogue. */
static cg_conv_epi epilogue_of(cg_ctx *c, const ir_node *n) {
  cg_conv_epi e;
  e.act = pass_fused_act(n, &e.lo, &e.hi);
  e.res = cg_in(c, n, 3) != NULL;
  return e;
}

void cg_conv_epi_emit(cg_ctx *c, const cg_conv_epi *e, const char *ind, const char *v, const char *r) {
  char l1[48], l2[48];
  if (e->res) cg_w(c, "%s%s = (float)(%s + %s);\n", ind, v, v, r);
  if (e->act == 1) cg_w(c, "%s%s = %s < 0 ? (float)0 : %s;\n", ind, v, v, v);
  if (e->act == 2) {
    cg_w(c, "%s%s = ", ind, v);
    if (isfinite(e->lo)) cg_w(c, "%s < %s ? %s : ", v, cg_flit(l1, sizeof l1, e->lo, IR_FLOAT), l1);
    if (isfinite(e->hi)) cg_w(c, "%s > %s ? %s : ", v, cg_flit(l2, sizeof l2, e->hi, IR_FLOAT), l2);
    cg_w(c, "%s;\n", v);
  }
}

static void emit_epilogue(cg_ctx *c, const cg_conv_epi *e, const char *ind, const char *y, const char *r, int64_t nr,
                          const char *P, int64_t ys) {
  if (!e->act && !e->res) return;
  char in2[64];
  snprintf(in2, sizeof in2, "%s    ", ind);
  cg_w(c, "%sfor (long m = 0; m < %lld; m++) {\n", ind, LL(nr));
  cg_w(c, "%s  float *ym = %s + m * %lld;\n", ind, y, LL(ys));
  if (e->res) cg_w(c, "%s  const float *rm = %s + m * %lld;\n", ind, r, LL(ys));
  cg_w(c, "%s  for (long i = 0; i < %s; i++) {\n", ind, P);
  cg_w(c, "%s    float v = ym[i];\n", ind);
  cg_conv_epi_emit(c, e, in2, "v", "rm[i]");
  cg_w(c, "%s    ym[i] = v;\n%s  }\n%s}\n", ind, ind, ind);
}

/* A GEMM of a float Conv with at most CG_C_DIRECT_K products per output and at least
 * CG_C_DIRECT_OS positions per image goes through pipert_gemm_direct
 * (runtime/pipert_gemm.h): Y = epilogue(B + W X), W [M, K] rows of K, X [K, P] rows of
 * ldx, Y and the residual R rows of ldy; B and R may be "NULL". Smaller images are
 * batched (emit_conv_batched): one GEMM over several images (through the same kernel
 * where K allows, else BLAS) beats one per image. */
static int direct_gemm(ir_dtype t, int64_t K, int64_t OS) {
  return t == IR_FLOAT && K <= CG_C_DIRECT_K && OS >= CG_C_DIRECT_OS;
}

/* The activation's bounds as C literals into lo and hi (48 bytes each): a Clip's (act 2),
 * else "0" */
static void clip_lits(int act, double vlo, double vhi, char *lo, char *hi) {
  snprintf(lo, 48, "0");
  snprintf(hi, 48, "0");
  if (act == 2) {
    cg_flit(lo, 48, vlo, IR_FLOAT);
    cg_flit(hi, 48, vhi, IR_FLOAT);
  }
}

enum { DG_BIAS_COL = 1, DG_X_SHARED = 2 };
static void emit_direct_gemm(cg_ctx *c, const char *ind, const char *M, const char *P, int64_t K, const char *W,
                             const char *X, const char *ldx, const char *B, const char *Y, const char *ldy,
                             const char *R, const cg_conv_epi *e, int flags) {
  char lo[48], hi[48], act[48];
  clip_lits(e ? e->act : 0, e ? e->lo : 0, e ? e->hi : 0, lo, hi);
  /* flags: DG_BIAS_COL, B holds one bias per column (a MatMul's or Gemm's), not one per
   * row; DG_X_SHARED, X is a MatMul's B operand, which the calls before and after read too */
  snprintf(act, sizeof act, "%d%s%s", e ? e->act : 0, flags & DG_BIAS_COL ? " | PIPERT_GEMM_BIAS_COL" : "",
           flags & DG_X_SHARED ? " | PIPERT_GEMM_X_SHARED" : "");
  c->gemm_direct = 1;
  cg_w(c, "%spipert_gemm_direct(%s, %s, %lld, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);\n", ind, M, P, LL(K), W, X,
       ldx, B, Y, ldy, R, ldy, act, lo, hi);
}

/* A 1x1 Conv (group g, in scope) over nb (a C expression) images from image n0 (another)
 * through pipert_gemm_direct_seg (CG_C_SEG_OS): X, W, B, R and Y are the emitted
 * function's x0, x1, x2, x3 and y0, read and written in place; scr the scratch
 * expression (copies where the function has no AVX-512), or "NULL" (one call per image) */
static void emit_conv_seg(cg_ctx *c, const char *ind, const char *n0, const char *nb, int64_t Mg, int64_t Cg,
                          int64_t IS, int64_t OS, int64_t K, int64_t C, int64_t M, int has_bias, const cg_conv_epi *e,
                          const char *scr) {
  char lo[48], hi[48], x[96], y[96], r[96], b[48];
  clip_lits(e->act, e->lo, e->hi, lo, hi);
  if (!strcmp(n0, "0")) {
    snprintf(x, sizeof x, "x0 + g * %lld", LL(Cg * IS));
    snprintf(y, sizeof y, "y0 + g * %lld", LL(Mg * OS));
    snprintf(r, sizeof r, e->res ? "x3 + g * %lld" : "NULL", LL(Mg * OS));
  } else {
    snprintf(x, sizeof x, "x0 + (%s * %lld + g * %lld) * %lld", n0, LL(C), LL(Cg), LL(IS));
    snprintf(y, sizeof y, "y0 + (%s * %lld + g * %lld) * %lld", n0, LL(M), LL(Mg), LL(OS));
    snprintf(r, sizeof r, e->res ? "x3 + (%s * %lld + g * %lld) * %lld" : "NULL", n0, LL(M), LL(Mg), LL(OS));
  }
  snprintf(b, sizeof b, has_bias ? "x2 + g * %lld" : "NULL", LL(Mg));
  c->gemm_direct = 1;
  cg_w(
      c,
      "%spipert_gemm_direct_seg(%lld, %s, %lld, %lld, x1 + g * %lld, %s, %lld, %lld, %s, %s, %lld, %lld, %s, %lld, %lld, %d, %s, %s, %s);\n",
      ind, LL(Mg), nb, LL(OS), LL(K), LL(Mg * K), x, LL(C * OS), LL(OS), b, y, LL(M * OS), LL(OS), r, LL(M * OS),
      LL(OS), e->act, lo, hi, scr);
}

/* One im2col row: dst[ow] = src[ow * stride + kw * dilation - pad], 0 outside the input.
 * The valid ow range is computed once per row: zeros, a copy (memcpy for stride 1), zeros.
 * In the emitted code: dst, src and kw are in scope. */
static void emit_im2col_row(cg_ctx *c, const cg_win3 *w, size_t esz) {
  const char *ind = "                  ";
  long long S = LL(w->s[2]), OW = LL(w->out[2]), W = LL(w->in[2]);
  cg_w(c, "%sconst long off = kw * %lld - %lld; /* iw = ow * %lld + off */\n", ind, LL(w->d[2]), LL(w->pb[2]), S);
  cg_w(c, "%slong lo = off >= 0 ? 0 : (-off + %lld) / %lld, hi = (%lld - off + %lld) / %lld;\n", ind, S - 1, S, W,
       S - 1, S);
  cg_w(c, "%sif (hi > %lld) hi = %lld;\n%sif (hi < 0) hi = 0;\n%sif (lo > hi) lo = hi;\n", ind, OW, OW, ind, ind);
  cg_w(c, "%sfor (long ow = 0; ow < lo; ow++) dst[ow] = 0;\n", ind);
  if (S == 1) cg_w(c, "%sif (hi > lo) memcpy(dst + lo, src + lo + off, (size_t)(hi - lo) * %zu);\n", ind, esz);
  else cg_w(c, "%sfor (long ow = lo; ow < hi; ow++) dst[ow] = src[ow * %lld + off];\n", ind, S);
  cg_w(c, "%sfor (long ow = hi; ow < %lld; ow++) dst[ow] = 0;\n", ind, OW);
}

/* Conv batching (see emit_conv): outputs with fewer than CONV_BATCH_OS positions per
 * image, blocks of images whose col + yt fit in CONV_BATCH_BYTES of scratch. */
#define CONV_BATCH_OS 1024
/* The im2col tile of a Conv's GEMM (emit_conv), in bytes: about half of a 2 MiB L2, so the
 * GEMM reads the columns im2col just wrote from there (ResNet-50 at batch 8, whose 7x7
 * stem writes 147 x 12544 floats per image, on one core of an Intel Xeon with AVX-512,
 * 2026-12-02, 6 interleaved rounds: 1.027x the throughput with 8 MiB tiles, 1.008x with 2
 * MiB, the same bits). A build with -DCG_C_COL_BYTES=N sets another, to compare. */
#ifndef CG_C_COL_BYTES
#define CG_C_COL_BYTES (1 << 20)
#endif
#define CONV_BATCH_BYTES (8 << 20)

static int emit_conv_batched(cg_ctx *c, const ir_node *n, const cg_win3 *w, const char *T, ir_dtype t, size_t esz,
                             int64_t N, int64_t C, int64_t M, int64_t G, int64_t Cg, int64_t Mg, int64_t IS, int64_t OS,
                             int64_t K, int direct, int64_t NB, int has_bias, const cg_conv_epi *e) {
  (void)n;
  int64_t rows = w->out[0] * w->out[1];
  cg_scratch(c, (size_t)((K + Mg) * NB * OS) * esz);
  cg_w(c, "  /* batched: %lld images per GEMM */\n", LL(NB));
  if (direct && t == IR_FLOAT && K <= CG_C_SEG_K && OS >= 16) {
    cg_w(c, "  for (long n0 = 0; n0 < %lld; n0 += %lld) {\n", LL(N), LL(NB));
    cg_w(c, "    const long nb = %lld - n0 < %lld ? %lld - n0 : %lld;\n", LL(N), LL(NB), LL(N), LL(NB));
    cg_w(c, "    for (long g = 0; g < %lld; g++) {\n", LL(G));
    /* the images read and written in place; scr copies them together where
     * pipert_gemm_direct_seg has no AVX-512 */
    emit_conv_seg(c, "      ", "n0", "nb", Mg, Cg, IS, OS, K, C, M, has_bias, e, "(float *)scr");
    cg_w(c, "    }\n  }\n");
    return 0;
  }
  cg_w(c, "  %s *col = (%s *)scr;\n", T, T);
  cg_w(c, "  %s *yt = col + %lld;\n", T, LL(K * NB * OS));
  cg_w(c, "  for (long n0 = 0; n0 < %lld; n0 += %lld) {\n", LL(N), LL(NB));
  cg_w(c, "    const long nb = %lld - n0 < %lld ? %lld - n0 : %lld;\n", LL(N), LL(NB), LL(N), LL(NB));
  cg_w(c, "    const long P = nb * %lld;\n", LL(OS));
  cg_w(c, "    for (long g = 0; g < %lld; g++) {\n", LL(G));
  cg_w(c, "      const %s *wg = x1 + g * %lld;\n", T, LL(Mg * K));
  cg_w(c, "      for (long j = 0; j < nb; j++) {\n");
  cg_w(c, "        const %s *xg = x0 + ((n0 + j) * %lld + g * %lld) * %lld;\n", T, LL(C), LL(Cg), LL(IS));
  if (direct) {
    cg_w(c, "        for (long ci = 0; ci < %lld; ci++) memcpy(col + ci * P + j * %lld, xg + ci * %lld, %lld);\n",
         LL(Cg), LL(OS), LL(IS), LL(OS * (int64_t)esz));
  } else {
    cg_w(c, "        for (long ci = 0; ci < %lld; ci++)\n", LL(Cg));
    cg_w(c, "          for (long kd = 0; kd < %lld; kd++)\n", LL(w->k[0]));
    cg_w(c, "            for (long kh = 0; kh < %lld; kh++)\n", LL(w->k[1]));
    cg_w(c, "              for (long kw = 0; kw < %lld; kw++) {\n", LL(w->k[2]));
    cg_w(c, "                %s *row = col + (((ci * %lld + kd) * %lld + kh) * %lld + kw) * P + j * %lld;\n", T,
         LL(w->k[0]), LL(w->k[1]), LL(w->k[2]), LL(OS));
    cg_w(c, "                for (long r = 0; r < %lld; r++) {\n", LL(rows));
    cg_w(c, "                  const long od = r / %lld, oh = r %% %lld;\n", LL(w->out[1]), LL(w->out[1]));
    cg_w(c, "                  const long id = od * %lld - %lld + kd * %lld, ih = oh * %lld - %lld + kh * %lld;\n",
         LL(w->s[0]), LL(w->pb[0]), LL(w->d[0]), LL(w->s[1]), LL(w->pb[1]), LL(w->d[1]));
    cg_w(c, "                  %s *dst = row + r * %lld;\n", T, LL(w->out[2]));
    cg_w(c, "                  if (id < 0 || id >= %lld || ih < 0 || ih >= %lld) {\n", LL(w->in[0]), LL(w->in[1]));
    cg_w(c, "                    for (long ow = 0; ow < %lld; ow++) dst[ow] = 0;\n", LL(w->out[2]));
    cg_w(c, "                    continue;\n                  }\n");
    cg_w(c, "                  const %s *src = xg + (ci * %lld + id) * %lld + ih * %lld;\n", T, LL(w->in[0]),
         LL(w->in[1] * w->in[2]), LL(w->in[2]));
    emit_im2col_row(c, w, esz);
    cg_w(c, "                }\n              }\n");
  }
  cg_w(c, "      }\n");
  /* float with K <= CG_C_DIRECT_K: pipert_gemm_direct over the block's images (5-15%
   * faster than cblas_sgemm on MobileNetV2's 7x7 and 14x14 GEMMs on one AVX-512 core),
   * the bias and, without a residual, the activation in its epilogue; else the bias
   * first, then BLAS accumulates onto it (beta 1) */
  const int dk = t == IR_FLOAT && K <= CG_C_DIRECT_K;
  if (dk) {
    char mg[32], kb[48];
    snprintf(mg, sizeof mg, "%lld", LL(Mg));
    snprintf(kb, sizeof kb, "x2 + g * %lld", LL(Mg));
    cg_conv_epi ea = *e;
    if (ea.res) ea.act = 0; /* (the residual comes first: applied with the activation after the scatter) */
    emit_direct_gemm(c, "      ", mg, "P", K, "wg", "col", "P", has_bias ? kb : "NULL", "yt", "P", "NULL", &ea, 0);
  } else {
    if (has_bias) {
      cg_w(c, "      for (long m = 0; m < %lld; m++) {\n", LL(Mg));
      cg_w(c, "        %s *yp = yt + m * P;\n", T);
      cg_w(c, "        const %s bm = x2[g * %lld + m];\n", T, LL(Mg));
      cg_w(c, "        for (long i = 0; i < P; i++) yp[i] = bm;\n");
      cg_w(c, "      }\n");
    }
    cg_w(
        c,
        "      %s(CblasRowMajor, CblasNoTrans, CblasNoTrans, %lld, (int)P, %lld, 1, wg, %lld, col, (int)P, %s, yt, (int)P);\n",
        gemm_fn(t), LL(Mg), LL(K), LL(K), has_bias ? "1" : "0");
  }
  cg_w(c, "      for (long j = 0; j < nb; j++) {\n");
  cg_w(c, "        for (long m = 0; m < %lld; m++)\n", LL(Mg));
  cg_w(c, "          memcpy(y0 + ((n0 + j) * %lld + g * %lld + m) * %lld, yt + m * P + j * %lld, %lld);\n", LL(M),
       LL(Mg), LL(OS), LL(OS), LL(OS * (int64_t)esz));
  if (e->res || (e->act && !dk)) {
    char yo[160], ro[160], os[32];
    snprintf(yo, sizeof yo, "(y0 + ((n0 + j) * %lld + g * %lld) * %lld)", LL(M), LL(Mg), LL(OS));
    snprintf(ro, sizeof ro, "(x3 + ((n0 + j) * %lld + g * %lld) * %lld)", LL(M), LL(Mg), LL(OS));
    snprintf(os, sizeof os, "%lld", LL(OS));
    emit_epilogue(c, e, "        ", yo, ro, Mg, os, OS);
  }
  cg_w(c, "      }\n");
  cg_w(c, "    }\n");
  cg_w(c, "  }\n");
  return 0;
}

#define DW_MAX_TAPS PASS_DW_MAX_TAPS

/* Short rows (no residual, and a stored row's vectors cost less than an output row's
 * vectors and scalar tail: RW / 16 < OW / 16 + (OW % 16) / 2, a scalar step taken as
 * half a vector's): the stencil runs along the bordered image's stored rows end to
 * end, one loop over (OH - 1) * RW + OW positions (RW: the floats of a stored row),
 * rounded up to whole vectors, into scratch (the positions past each row's end, and
 * the last vector's, are computed and dropped), and the rows are copied out: a
 * 14-wide row left 6 of every 14 outputs to scalar code, a 7-wide one all, the flat
 * loop none. With a stride S1 > 1 down the columns, the bordered rows are stored in S1
 * phases (rows q, q + S1, q + 2 S1... together), so that output row oh + 1 reads every
 * tap one stored row after output row oh, as along a row with the column phases
 * (emit_conv_depthwise). Each output is the same expression as in the row loop, so the
 * bits are the same. */
static int dw_flat(const cg_win3 *w, const cg_conv_epi *e) {
  int64_t PW = w->in[2] + w->pb[2] + w->pe[2], S2 = w->s[2], RW = S2 * ((PW + S2 - 1) / S2), OW = w->out[2];
  return !e->res && RW < 16 * (OW / 16) + 8 * (OW % 16);
}

/* The layout of the bordered image: PH = IH + pads rows of RW floats, the S2 = stride
 * phases of PWS columns each; with dw_flat in S1 row phases of PHS rows each, bordered
 * row r stored at row (r % S1) PHS + r / S1 (dw_at). */
typedef struct {
  int64_t PH, PW, S1, PHS, S2, PWS, RW;
} dw_layout;
static dw_layout dw_layout_of(const cg_win3 *w, const cg_conv_epi *e) {
  dw_layout l;
  l.PH = w->in[1] + w->pb[1] + w->pe[1];
  l.PW = w->in[2] + w->pb[2] + w->pe[2];
  l.S1 = dw_flat(w, e) ? w->s[1] : 1;
  l.PHS = (l.PH + l.S1 - 1) / l.S1;
  l.S2 = w->s[2];
  l.PWS = (l.PW + l.S2 - 1) / l.S2;
  l.RW = l.S2 * l.PWS;
  return l;
}
/* The offset in floats of bordered row r, column col */
static int64_t dw_at(const dw_layout *l, int64_t r, int64_t col) {
  return ((r % l->S1) * l->PHS + r / l->S1) * l->RW + (col % l->S2) * l->PWS + col / l->S2;
}

/* The scratch of a depthwise Conv, in floats: the bordered image, with dw_flat 16
 * floats more (which the flat loop's last vector reads past the image; zeroed like the
 * border), then with dw_flat the flat output (OH rows of RW), each at PAD16 floats. */
#define PAD16(n) (((n) + 15) / 16 * 16)
static int64_t dw_pad_region(const cg_win3 *w, const cg_conv_epi *e) {
  dw_layout l = dw_layout_of(w, e);
  return PAD16(l.S1 * l.PHS * l.RW + (dw_flat(w, e) ? 16 : 0));
}
static int64_t dw_scratch_floats(const cg_win3 *w, const cg_conv_epi *e) {
  dw_layout l = dw_layout_of(w, e);
  return dw_pad_region(w, e) + (dw_flat(w, e) ? PAD16(w->out[1] * l.RW) : 0);
}

/* One channel of a depthwise Conv, at indent ind. In scope: ch (the channel), xp (its
 * input plane), yp (its output plane), rp (the residual's, with e->res), pad (the
 * bordered image, zero outside the input since the unit's start, followed by the
 * flat output: dw_scratch_floats), x1 (W), x2 (B). */
static void emit_dw_channel(cg_ctx *c, const cg_win3 *w, int has_bias, const cg_conv_epi *e, const char *ind) {
  int64_t IH = w->in[1], IW = w->in[2], OH = w->out[1], OW = w->out[2], KH = w->k[1], KW = w->k[2];
  const dw_layout l = dw_layout_of(w, e);
  const int64_t S = l.S2, PWS = l.PWS, pb1 = w->pb[1];
  /* bordered row ih + pb1 of input row ih: stored at row (ih + pb1) % S1 * PHS + (ih + pb1) / S1 */
  char row[160];
  if (l.S1 == 1) snprintf(row, sizeof row, "(ih + %lld) * %lld", LL(pb1), LL(l.RW));
  else
    snprintf(row, sizeof row, "((ih + %lld) %% %lld * %lld + (ih + %lld) / %lld) * %lld", LL(pb1), LL(l.S1), LL(l.PHS),
             LL(pb1), LL(l.S1), LL(l.RW));
  if (S == 1) {
    cg_w(c, "%sfor (long ih = 0; ih < %lld; ih++)\n", ind, LL(IH));
    cg_w(c, "%s  memcpy(pad + %s + %lld, xp + ih * %lld, sizeof(float) * %lld);\n", ind, row, LL(w->pb[2]), LL(IW),
         LL(IW));
  } else {
    cg_w(c, "%sfor (long ih = 0; ih < %lld; ih++) {\n", ind, LL(IH));
    cg_w(c, "%s  float *pr = pad + %s;\n", ind, row);
    cg_w(c, "%s  const float *xr = xp + ih * %lld;\n", ind, LL(IW));
    for (int64_t q = 0; q < S; q++) {
      /* bordered columns q + j S hold input column q + j S - pb where that is in [0, IW) */
      int64_t pb = w->pb[2], lo = pb - q > 0 ? (pb - q + S - 1) / S : 0;
      int64_t hi = IW - 1 + pb - q >= 0 ? (IW - 1 + pb - q) / S : -1; /* inclusive */
      if (hi < lo) continue;
      cg_w(c, "%s  for (long j = 0; j < %lld; j++) pr[%lld + j] = xr[%lld + j * %lld];\n", ind, LL(hi - lo + 1),
           LL(q * PWS + lo), LL(q + lo * S - pb), LL(S));
    }
    cg_w(c, "%s}\n", ind);
  }
  cg_w(c, "%sconst float *wc = x1 + ch * %lld;\n", ind, LL(KH * KW));
  for (int64_t k = 0; k < KH * KW; k++) cg_w(c, "%sconst float w%lld = wc[%lld];\n", ind, LL(k), LL(k));
  cg_w(c, "%sconst float b = %s;\n", ind, has_bias ? "x2[ch]" : "0.0f");
  if (dw_flat(w, e)) {
    /* output (oh, ow), tap (kh, kw) reads bordered (oh S1 + kh d1, ow S2 + kw d2): stored
     * at oh RW + ow + dw_at(kh d1, kw d2) */
    cg_w(c, "%sfloat *o = pad + %lld; /* the rows run on into each other */\n", ind, LL(dw_pad_region(w, e)));
    cg_w(c, "%sfor (long i = 0; i < %lld; i++) {\n", ind, LL(PAD16((OH - 1) * l.RW + OW)));
    cg_w(c, "%s  float v = b;\n", ind);
    for (int64_t kh = 0; kh < KH; kh++)
      for (int64_t kw = 0; kw < KW; kw++)
        cg_w(c, "%s  v = PK_FMA(w%lld, pad[i + %lld], v);\n", ind, LL(kh * KW + kw),
             LL(dw_at(&l, kh * w->d[1], kw * w->d[2])));
    char in2[64];
    snprintf(in2, sizeof in2, "%s  ", ind);
    cg_conv_epi_emit(c, e, in2, "v", "");
    cg_w(c, "%s  o[i] = v;\n%s}\n", ind, ind);
    cg_w(c, "%sfor (long oh = 0; oh < %lld; oh++) memcpy(yp + oh * %lld, o + oh * %lld, sizeof(float) * %lld);\n", ind,
         LL(OH), LL(OW), LL(l.RW), LL(OW));
    return;
  }
  cg_w(c, "%sfor (long oh = 0; oh < %lld; oh++) {\n", ind, LL(OH));
  for (int64_t kh = 0; kh < KH; kh++)
    cg_w(c, "%s  const float *p%lld = pad + (oh * %lld + %lld) * %lld;\n", ind, LL(kh), LL(w->s[1]), LL(kh * w->d[1]),
         LL(l.RW));
  cg_w(c, "%s  float *yr = yp + oh * %lld;\n", ind, LL(OW));
  cg_w(c, "%s  for (long ow = 0; ow < %lld; ow++) {\n", ind, LL(OW));
  cg_w(c, "%s    float v = b;\n", ind);
  for (int64_t kh = 0; kh < KH; kh++)
    for (int64_t kw = 0; kw < KW; kw++) {
      /* column ow S + kw d: phase (kw d) % S, element ow + (kw d) / S of it */
      int64_t o = kw * w->d[2];
      cg_w(c, "%s    v = PK_FMA(w%lld, p%lld[ow + %lld], v);\n", ind, LL(kh * KW + kw), LL(kh),
           LL((o % S) * PWS + o / S));
    }
  char r[64], in3[64];
  snprintf(r, sizeof r, "rp[oh * %lld + ow]", LL(OW));
  snprintf(in3, sizeof in3, "%s    ", ind);
  cg_conv_epi_emit(c, e, in3, "v", r);
  cg_w(c, "%s    yr[ow] = v;\n%s  }\n%s}\n", ind, ind, ind);
}

/* Small maps (at most PIPERT_DW_MAX_POS outputs, from at most 16 times as many inputs: its
 * scratch holds 16 bordered images) go through runtime/pipert_dw.h, 16 channels at a time,
 * one per lane: the same sums as emit_dw_channel's, bit for bit. */
static int dw_blocked(const cg_win3 *w) {
  return w->out[1] * w->out[2] <= PIPERT_DW_MAX_POS && w->in[1] * w->in[2] <= 16 * PIPERT_DW_MAX_POS;
}
static pipert_dw_shape dw_shape(const cg_win3 *w, int64_t C, const cg_conv_epi *e) {
  pipert_dw_shape s = {0};
  s.C = C;
  s.IH = w->in[1];
  s.IW = w->in[2];
  s.OH = w->out[1];
  s.OW = w->out[2];
  s.KH = w->k[1];
  s.KW = w->k[2];
  s.sh = w->s[1];
  s.sw = w->s[2];
  s.dh = w->d[1];
  s.dw = w->d[2];
  s.ph = w->pb[1];
  s.pw = w->pb[2];
  s.act = e->act;
  s.lo = e->act == 2 ? (float)e->lo : 0;
  s.hi = e->act == 2 ? (float)e->hi : 0;
  return s;
}
/* The call, at indent ind: np planes from X into Y (channels c0 onwards), R the residual's */
static void emit_dw_blocked(cg_ctx *c, const pipert_dw_shape *s, const char *ind, const char *np, const char *c0,
                            const char *X, const char *B, const char *R, const char *Y, const char *scr) {
  char lo[48], hi[48];
  clip_lits(s->act, s->lo, s->hi, lo, hi);
  c->dw_blocked = 1;
  cg_w(
      c,
      "%sstatic const pipert_dw_shape dws = {%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %d, %s, %s};\n",
      ind, LL(s->C), LL(s->IH), LL(s->IW), LL(s->OH), LL(s->OW), LL(s->KH), LL(s->KW), LL(s->sh), LL(s->sw), LL(s->dh),
      LL(s->dw), LL(s->ph), LL(s->pw), s->act, lo, hi);
  cg_w(c, "%spipert_dw(&dws, %s, %s, %s, x1, %s, %s, %s, %s);\n", ind, np, c0, X, B, R, Y, scr);
}

/* Depthwise Conv (one input and one output channel per group, 2-D or 1-D, float, at
 * most DW_MAX_TAPS taps): per channel, the image copied into a zero-bordered scratch
 * image, then per output element the bias and one fused multiply-add per tap in (kh, kw)
 * order (PK_FMA; a padding tap adds w * 0), the taps unrolled with the weights in
 * locals, the fused epilogue,
 * one store: the loop along the output row vectorises. im2col + a 1-row GEMM per
 * channel spent its time on the copies and the calls. With a stride S > 1 along the
 * row, each bordered row is stored as S phases (phase q holds its columns q, q + S,
 * q + 2S...), so a tap reads a contiguous run of one phase instead of every S-th
 * element: the same values in the same order (the same bits), loads the loop
 * vectorises. */
static int emit_conv_depthwise(cg_ctx *c, const cg_win3 *w, int64_t N, int64_t C, int has_bias, const cg_conv_epi *e) {
  if (dw_blocked(w)) {
    pipert_dw_shape s = dw_shape(w, C, e);
    char np[32];
    snprintf(np, sizeof np, "%lld", LL(N * C));
    cg_scratch(c, (size_t)pipert_dw_scratch(&s) * sizeof(float));
    cg_w(c, "  /* depthwise on a small map: 16 channels at a time, one per lane (pipert_dw.h) */\n");
    emit_dw_blocked(c, &s, "  ", np, "0", "x0", has_bias ? "x2" : "NULL", e->res ? "x3" : "NULL", "y0", "(float *)scr");
    return 0;
  }
  cg_scratch(c, (size_t)dw_scratch_floats(w, e) * sizeof(float));
  cg_w(c, "  /* depthwise: a direct stencil per channel over a zero-bordered copy%s */\n",
       w->s[2] > 1 ? " (each row in its stride's phases)" : "");
  cg_w(c, "  float *pad = (float *)scr;\n");
  cg_w(c, "  memset(pad, 0, sizeof(float) * %lld);\n", LL(dw_pad_region(w, e)));
  cg_w(c, "  for (long nc = 0; nc < %lld; nc++) {\n", LL(N * C));
  cg_w(c, "    const long ch = nc %% %lld;\n", LL(C));
  cg_w(c, "    const float *xp = x0 + nc * %lld;\n    float *yp = y0 + nc * %lld;\n", LL(w->in[1] * w->in[2]),
       LL(w->out[1] * w->out[2]));
  if (e->res) cg_w(c, "    const float *rp = x3 + nc * %lld;\n", LL(w->out[1] * w->out[2]));
  emit_dw_channel(c, w, has_bias, e, "    ");
  cg_w(c, "  }\n");
  return 0;
}

/* Scratch for the expanded channels of a fused expansion (below): about 1 MiB, half
 * of L2, so they are still there when the stencil reads them. */
#define EXPAND_BLOCK_BYTES (1 << 20)

/* A 1x1 Conv fused into the depthwise Conv that reads it (passes/opt/fuse.h,
 * pass_fuse_expand_dw): per image, blocks of MB channels: the bias, one GEMM of the
 * block's rows of the 1x1's weights by the image ([MB, K] x [K, H*W], into scratch),
 * the 1x1's activation, then the depthwise stencil of each channel of the block from
 * the scratch. The expanded map never leaves the cache. The 1x1 Conv alone computes
 * each of its outputs as the bias plus one GEMM dot product over K, then its
 * activation; so does this, so the bits are those of the two Convs apart. */
static int emit_conv_expand_dw(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *wt = cg_in(c, n, 1), *b = cg_in(c, n, 2), *we = cg_in(c, n, 4), *be = cg_in(c, n, 5);
  ir_value *y = cg_out(c, n, 0);
  if (!x || !wt || !we || !y || x->dtype != IR_FLOAT || y->dtype != IR_FLOAT || x->shape.rank != 4 ||
      we->shape.rank != 4 || wt->shape.rank != 4 || cg_in(c, n, 3))
    return cg_fail(c, n, "pipecc.expand on a Conv it does not fit");
  int64_t N = x->shape.dims[0], K = x->shape.dims[1], M = y->shape.dims[1];
  if (we->shape.dims[0] != M || we->shape.dims[1] != K || wt->shape.dims[0] != M || wt->shape.dims[1] != 1 ||
      ir_attr_int(n, "group", 1) != M || wt->shape.dims[2] * wt->shape.dims[3] > DW_MAX_TAPS)
    return cg_fail(c, n, "pipecc.expand on a Conv it does not fit");
  int64_t kernel[3] = {wt->shape.dims[2], wt->shape.dims[3], 1};
  cg_win3 w;
  if (window(c, n, x, y, kernel, 0, &w)) return -1;
  if (cg_numel(y) == 0) return 0;
  int64_t OS1 = w.in[1] * w.in[2], OS = w.out[1] * w.out[2];
  int64_t MBmax = EXPAND_BLOCK_BYTES / (OS1 * (int64_t)sizeof(float));
  if (MBmax < 1) MBmax = 1;
  int64_t blocks = (M + MBmax - 1) / MBmax, MB = (M + blocks - 1) / blocks;
  cg_conv_epi ee = {0}, e = epilogue_of(c, n);
  int64_t T = PAD16(MB * OS1);
  const int blocked = dw_blocked(&w) && !e.res;
  pipert_dw_shape dws = dw_shape(&w, M, &e);
  cg_scratch(c, (size_t)(T + (blocked ? pipert_dw_scratch(&dws) : dw_scratch_floats(&w, &e))) * sizeof(float));
  ee.act = pass_fused_expand_act(n, &ee.lo, &ee.hi);
  cg_w(c, "  /* N=%lld K=%lld M=%lld in=%lldx%lld out=%lldx%lld kernel=%lldx%lld */\n", LL(N), LL(K), LL(M),
       LL(w.in[1]), LL(w.in[2]), LL(w.out[1]), LL(w.out[2]), LL(w.k[1]), LL(w.k[2]));
  cg_w(c, "  /* fused: the 1x1 ");
  cg_put_comment(c->body, ir_attr_str(n, "pipecc.expand", ""), 600);
  const char *fused = ir_attr_str(n, "pipecc.fused", NULL);
  if (fused) {
    cg_w(c, "; after the depthwise: ");
    cg_put_comment(c->body, fused, 600);
  }
  cg_w(c, " */\n");
  cg_w(c, "  /* per image, %lld channels at a time: the 1x1 Conv into scratch (%lld KiB, in L2),\n", LL(MB),
       LL(T * 4 / 1024));
  cg_w(c, "   * then the depthwise stencil of %s from it */\n",
       blocked ? "16 channels at a time, one per lane (pipert_dw.h)," : "each channel");
  cg_w(c, "  float *t = (float *)scr;\n  float *pad = t + %lld;\n", LL(T));
  if (!blocked) cg_w(c, "  memset(pad, 0, sizeof(float) * %lld);\n", LL(dw_pad_region(&w, &e)));
  cg_w(c, "  for (long n = 0; n < %lld; n++) {\n", LL(N));
  cg_w(c, "    const float *xn = x0 + n * %lld;\n", LL(K * OS1));
  cg_w(c, "    for (long c0 = 0; c0 < %lld; c0 += %lld) {\n", LL(M), LL(MB));
  cg_w(c, "      const long mb = %lld - c0 < %lld ? %lld - c0 : %lld;\n", LL(M), LL(MB), LL(M), LL(MB));
  if (direct_gemm(IR_FLOAT, K, OS1)) {
    /* the same call as the 1x1 Conv's own (emit_conv), on a block of its rows */
    char os1[32], wb[48];
    snprintf(os1, sizeof os1, "%lld", LL(OS1));
    snprintf(wb, sizeof wb, "x4 + c0 * %lld", LL(K));
    emit_direct_gemm(c, "      ", "mb", os1, K, wb, "xn", os1, be ? "x5 + c0" : "NULL", "t", os1, "NULL", &ee, 0);
  } else {
    if (be) {
      cg_w(c, "      for (long m = 0; m < mb; m++) {\n");
      cg_w(c, "        float *tm = t + m * %lld;\n        const float bm = x5[c0 + m];\n", LL(OS1));
      cg_w(c, "        for (long i = 0; i < %lld; i++) tm[i] = bm;\n      }\n", LL(OS1));
    }
    cg_w(
        c,
        "      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mb, %lld, %lld, 1, x4 + c0 * %lld, %lld, xn, %lld, %s, t, %lld);\n",
        LL(OS1), LL(K), LL(K), LL(K), LL(OS1), be ? "1" : "0", LL(OS1));
  }
  if (ee.act && !direct_gemm(IR_FLOAT, K, OS1)) {
    cg_w(c, "      for (long m = 0; m < mb; m++) {\n");
    cg_w(c, "        float *ym = t + m * %lld;\n", LL(OS1));
    cg_w(c, "        for (long i = 0; i < %lld; i++) {\n          float v = ym[i];\n", LL(OS1));
    cg_conv_epi_emit(c, &ee, "          ", "v", "");
    cg_w(c, "          ym[i] = v;\n        }\n      }\n");
  }
  if (blocked) {
    char yb[96];
    snprintf(yb, sizeof yb, "y0 + (n * %lld + c0) * %lld", LL(M), LL(OS));
    emit_dw_blocked(c, &dws, "      ", "mb", "c0", "t", b ? "x2" : "NULL", "NULL", yb, "pad");
    cg_w(c, "    }\n  }\n");
    return 0;
  }
  cg_w(c, "      for (long m = 0; m < mb; m++) {\n");
  cg_w(c, "        const long ch = c0 + m;\n");
  cg_w(c, "        const float *xp = t + m * %lld;\n", LL(OS1));
  cg_w(c, "        float *yp = y0 + (n * %lld + ch) * %lld;\n", LL(M), LL(OS));
  emit_dw_channel(c, &w, b != NULL, &e, "        ");
  cg_w(c, "      }\n    }\n  }\n");
  return 0;
}

/* A float 2-D Conv with a small output (at most SMALLOUT_OS positions), few output
 * channels per group and many products per output (SMALLOUT_K or more): a depthwise
 * Conv's weight gradient, which autodiff writes as a Conv of the images by the output's
 * gradient (per group: 3x3 outputs, a 56x56 kernel over 8 images). im2col copied the
 * kernel's every tap for every output (25088 x 16 floats per group, 4 at a time), then
 * a GEMM of one row: MobileNetV2's training step spent a tenth of its time there. Here
 * each output is one dot product, along each kernel row over the taps inside the image,
 * in 16 float lanes (tap j of a row's valid run to lane j % 16), combined pairwise,
 * then the bias and the fused epilogue. */
#define SMALLOUT_OS 64
#define SMALLOUT_K 256
static int conv_smallout(const cg_win3 *w, ir_dtype t, int64_t Mg, int64_t K) {
  return t == IR_FLOAT && w->in[0] == 1 && w->out[0] == 1 && w->k[0] == 1 && w->out[1] * w->out[2] <= SMALLOUT_OS &&
         Mg <= 4 && K >= SMALLOUT_K;
}
static int emit_conv_smallout(cg_ctx *c, const cg_win3 *w, int64_t N, int64_t C, int64_t M, int64_t G, int has_bias,
                              const cg_conv_epi *e) {
  int64_t Cg = C / G, Mg = M / G, KH = w->k[1], KW = w->k[2], IH = w->in[1], IW = w->in[2], OH = w->out[1],
          OW = w->out[2];
  int64_t S2 = w->s[2], D2 = w->d[2], PB2 = w->pb[2];
  cg_w(c, "  /* a small output: each output one dot product, the kernel's rows in 16 lanes */\n");
  cg_w(c, "  for (long n = 0; n < %lld; n++)\n    for (long gm = 0; gm < %lld; gm++) {\n", LL(N), LL(M));
  cg_w(c, "      const long g = gm / %lld;\n      const float *wm = x1 + gm * %lld;\n", LL(Mg), LL(Cg * KH * KW));
  cg_w(c, "      for (long oh = 0; oh < %lld; oh++)\n        for (long ow = 0; ow < %lld; ow++) {\n", LL(OH), LL(OW));
  cg_w(c, "          float l[16] = {0};\n");
  /* kw with 0 <= off + kw D2 < IW, off = ow S2 - PB2: from lo to hi (exclusive) */
  cg_w(c, "          const long off = ow * %lld - %lld;\n", LL(S2), LL(PB2));
  cg_w(
      c,
      "          long lo = off >= 0 ? 0 : (-off + %lld) / %lld, hi = %lld - off > 0 ? (%lld - off + %lld) / %lld : 0;\n",
      LL(D2 - 1), LL(D2), LL(IW), LL(IW), LL(D2 - 1), LL(D2));
  cg_w(c, "          if (hi > %lld) hi = %lld;\n", LL(KW), LL(KW));
  cg_w(c, "          for (long ci = 0; ci < %lld; ci++) {\n", LL(Cg));
  cg_w(c, "            const float *xc = x0 + (n * %lld + g * %lld + ci) * %lld;\n", LL(C), LL(Cg), LL(IH * IW));
  cg_w(c, "            for (long kh = 0; kh < %lld; kh++) {\n", LL(KH));
  cg_w(c, "              const long ih = oh * %lld - %lld + kh * %lld;\n", LL(w->s[1]), LL(w->pb[1]), LL(w->d[1]));
  cg_w(c, "              if (ih < 0 || ih >= %lld) continue;\n", LL(IH));
  cg_w(c, "              const float *xr = xc + ih * %lld;\n", LL(IW));
  cg_w(c, "              const float *wr = wm + (ci * %lld + kh) * %lld;\n", LL(KH), LL(KW));
  cg_w(c, "              long kw = lo;\n");
  cg_w(c, "              for (; kw + 16 <= hi; kw += 16)\n");
  cg_w(c, "                for (long j = 0; j < 16; j++) l[j] += wr[kw + j] * xr[off + (kw + j) * %lld];\n", LL(D2));
  cg_w(c,
       "              for (long j = 0; j < 16 && kw + j < hi; j++) l[j] += wr[kw + j] * xr[off + (kw + j) * %lld];\n",
       LL(D2));
  cg_w(c, "            }\n          }\n");
  for (int h = 8; h >= 1; h /= 2) cg_w(c, "          for (long j = 0; j < %d; j++) l[j] += l[j + %d];\n", h, h);
  cg_w(c, "          float v = l[0];\n");
  if (has_bias) cg_w(c, "          v = x2[gm] + v;\n");
  char r[96];
  snprintf(r, sizeof r, "x3[((n * %lld + gm) * %lld + oh) * %lld + ow]", LL(M), LL(OH), LL(OW));
  cg_conv_epi_emit(c, e, "          ", "v", r);
  cg_w(c, "          y0[((n * %lld + gm) * %lld + oh) * %lld + ow] = v;\n        }\n    }\n", LL(M), LL(OH), LL(OW));
  return 0;
}

static int emit_conv(cg_ctx *c, const ir_node *n) {
  if (ir_attr_find(n, "pipecc.expand")) return emit_conv_expand_dw(c, n);
  ir_value *x = cg_in(c, n, 0), *wt = cg_in(c, n, 1), *b = cg_in(c, n, 2), *y = cg_out(c, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE) return cg_fail(c, n, "Conv on %s is not supported", ir_dtype_name(t));
  int64_t kernel[3];
  int wm = pass_winograd_m(n); /* filters transformed by passes/opt/winograd.c: 3x3 */
  for (int i = 0; i < x->shape.rank - 2 && i < 3; i++) kernel[i] = wm ? 3 : wt->shape.dims[2 + i];
  cg_win3 w;
  if (window(c, n, x, y, kernel, 0, &w)) return -1;
  const char *T = cg_ctype(t);
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], M = y->shape.dims[1], G = ir_attr_int(n, "group", 1);
  if (G < 1 || C % G || M % G) return cg_fail(c, n, "group %lld does not divide the channels", LL(G));
  int64_t Cg = C / G, Mg = M / G;
  int64_t IS = w.in[0] * w.in[1] * w.in[2], OS = w.out[0] * w.out[1] * w.out[2];
  int64_t K = Cg * w.k[0] * w.k[1] * w.k[2];
  if (wm && (!cg_winograd_fits(&w, G, C, M, t) || wt->shape.rank != 3 || wt->shape.dims[0] != (wm + 2) * (wm + 2) ||
             wt->shape.dims[1] != M || wt->shape.dims[2] != C))
    return cg_fail(c, n, "pipecc.winograd on a Conv it does not fit");
  if (!wm && (wt->shape.dims[1] != Cg || wt->shape.dims[0] != M))
    return cg_fail(c, n, "weight shape does not match the input");
  if (cg_numel(y) == 0) return 0;
  int direct = 1;
  for (int j = 0; j < 3; j++) direct &= w.k[j] == 1 && w.s[j] == 1 && w.pb[j] == 0 && w.pe[j] == 0;
  cg_w(c, "  /* N=%lld C=%lld M=%lld group=%lld in=%lldx%lldx%lld out=%lldx%lldx%lld kernel=%lldx%lldx%lld */\n", LL(N),
       LL(C), LL(M), LL(G), LL(w.in[0]), LL(w.in[1]), LL(w.in[2]), LL(w.out[0]), LL(w.out[1]), LL(w.out[2]), LL(w.k[0]),
       LL(w.k[1]), LL(w.k[2]));
  int64_t rows = w.out[0] * w.out[1], rt = rows;
  size_t esz = t == IR_DOUBLE ? 8 : 4;
  /* Small outputs (late layers): one GEMM for a block of NB images, whose rows of
   * nb*OS positions fill the kernel's tiles (and BLAS packs the weights once per block
   * instead of once per image). col is [K, nb*OS] (for a direct 1x1 conv a transposing
   * copy of X), the GEMM writes yt [Mg, nb*OS], and a copy scatters it back to
   * [nb, M, OS]. The decision and NB depend only on the node's shapes. Not for the 1x1
   * Convs that pipert_gemm_direct runs per image (direct_gemm): it reads X in place, so
   * there is nothing to share. */
  int64_t NB = 1;
  const int dg = direct_gemm(t, K, OS);
  if (OS < CONV_BATCH_OS && N > 1 && !(direct && dg)) {
    int64_t per_img = (K + Mg) * OS * (int64_t)esz;
    NB = per_img > 0 ? (int64_t)(CONV_BATCH_BYTES / per_img) : 1;
    if (NB > N) NB = N;
    if (NB >= 2) {
      int64_t blocks = (N + NB - 1) / NB;
      NB = (N + blocks - 1) / blocks;
    }
  }
  cg_conv_epi e = epilogue_of(c, n);
  if ((e.act || e.res) && t != IR_FLOAT) return cg_fail(c, n, "a fused epilogue on a %s Conv", ir_dtype_name(t));
  const char *fused = ir_attr_str(n, "pipecc.fused", NULL);
  if (fused) {
    cg_w(c, "  /* fused into the GEMM's output blocks: ");
    cg_put_comment(c->body, fused, 600);
    cg_w(c, " */\n");
  }
  if (wm) return cg_emit_conv_winograd(c, n, &w, wm, N, C, M, b != NULL, &e);
  if (t == IR_FLOAT && G == C && G == M && w.in[0] == 1 && w.out[0] == 1 && w.k[0] == 1 &&
      w.k[1] * w.k[2] <= DW_MAX_TAPS)
    return emit_conv_depthwise(c, &w, N, C, b != NULL, &e);
  if (!direct && conv_smallout(&w, t, Mg, K)) return emit_conv_smallout(c, &w, N, C, M, G, b != NULL, &e);
  if (NB >= 2) return emit_conv_batched(c, n, &w, T, t, esz, N, C, M, G, Cg, Mg, IS, OS, K, direct, NB, b != NULL, &e);
  if (dg && direct && N > 1 && OS < CG_C_SEG_OS && OS >= 16) {
    /* all the images as one GEMM, read and written in place (CG_C_SEG_OS) */
    cg_w(c, "  for (long g = 0; g < %lld; g++) {\n", LL(G));
    char nb[32];
    snprintf(nb, sizeof nb, "%lld", LL(N));
    emit_conv_seg(c, "    ", "0", nb, Mg, Cg, IS, OS, K, C, M, b != NULL, &e, "NULL");
    cg_w(c, "  }\n");
    return 0;
  }
  const char *beta = b ? "1" : "0";
  if (!direct) {
    /* im2col tile: at most ~CG_C_COL_BYTES of scratch, at least one output row */
    int64_t per_row = K * w.out[2] * (int64_t)esz;
    rt = per_row > 0 ? (int64_t)CG_C_COL_BYTES / per_row : rows;
    if (rt < 1) rt = 1;
    if (rt > rows) rt = rows;
    cg_scratch(c, (size_t)(K * rt * w.out[2]) * esz);
    cg_w(c, "  %s *col = (%s *)scr;\n", T, T);
  }
  cg_w(c, "  for (long n = 0; n < %lld; n++) {\n", LL(N));
  cg_w(c, "    for (long g = 0; g < %lld; g++) {\n", LL(G));
  cg_w(c, "      const %s *xg = x0 + (n * %lld + g * %lld) * %lld;\n", T, LL(C), LL(Cg), LL(IS));
  cg_w(c, "      const %s *wg = x1 + g * %lld;\n", T, LL(Mg * K));
  cg_w(c, "      %s *yg = y0 + (n * %lld + g * %lld) * %lld;\n", T, LL(M), LL(Mg), LL(OS));
  if (e.res) cg_w(c, "      const %s *rg = x3 + (n * %lld + g * %lld) * %lld;\n", T, LL(M), LL(Mg), LL(OS));
  /* pipert_gemm_direct's arguments: the bias of group g, the row counts */
  char mg[32], bg[48], os[32];
  snprintf(mg, sizeof mg, "%lld", LL(Mg));
  snprintf(bg, sizeof bg, "x2 + g * %lld", LL(Mg));
  snprintf(os, sizeof os, "%lld", LL(OS));
  if (dg && direct) {
    /* runtime/pipert_gemm.h: the bias, the sums and the epilogue in one pass over X */
    emit_direct_gemm(c, "      ", mg, os, K, "wg", "xg", os, b ? bg : "NULL", "yg", os, e.res ? "rg" : "NULL", &e, 0);
    cg_w(c, "    }\n  }\n");
    return 0;
  }
  if (b && !dg) {
    /* the bias first, then the GEMM accumulates onto it (beta 1) */
    cg_w(c, "      for (long m = 0; m < %lld; m++) {\n", LL(Mg));
    cg_w(c, "        %s *yp = yg + m * %lld;\n", T, LL(OS));
    cg_w(c, "        const %s bm = x2[g * %lld + m];\n", T, LL(Mg));
    cg_w(c, "        for (long i = 0; i < %lld; i++) yp[i] = bm;\n", LL(OS));
    cg_w(c, "      }\n");
  }
  if (direct) {
    cg_w(
        c,
        "      %s(CblasRowMajor, CblasNoTrans, CblasNoTrans, %lld, %lld, %lld, 1, wg, %lld, xg, %lld, %s, yg, %lld);\n",
        gemm_fn(t), LL(Mg), LL(OS), LL(K), LL(K), LL(OS), beta, LL(OS));
    char os[32];
    snprintf(os, sizeof os, "%lld", LL(OS));
    emit_epilogue(c, &e, "      ", "yg", "rg", Mg, os, OS);
  } else {
    cg_w(c, "      for (long r0 = 0; r0 < %lld; r0 += %lld) {\n", LL(rows), LL(rt));
    cg_w(c, "        const long nr = %lld - r0 < %lld ? %lld - r0 : %lld;\n", LL(rows), LL(rt), LL(rows), LL(rt));
    cg_w(c, "        const long P = nr * %lld;\n", LL(w.out[2]));
    cg_w(c, "        for (long ci = 0; ci < %lld; ci++)\n", LL(Cg));
    cg_w(c, "          for (long kd = 0; kd < %lld; kd++)\n", LL(w.k[0]));
    cg_w(c, "            for (long kh = 0; kh < %lld; kh++)\n", LL(w.k[1]));
    cg_w(c, "              for (long kw = 0; kw < %lld; kw++) {\n", LL(w.k[2]));
    cg_w(c, "                %s *row = col + (((ci * %lld + kd) * %lld + kh) * %lld + kw) * P;\n", T, LL(w.k[0]),
         LL(w.k[1]), LL(w.k[2]));
    cg_w(c, "                for (long rr = 0; rr < nr; rr++) {\n");
    cg_w(c, "                  const long r = r0 + rr, od = r / %lld, oh = r %% %lld;\n", LL(w.out[1]), LL(w.out[1]));
    cg_w(c, "                  const long id = od * %lld - %lld + kd * %lld, ih = oh * %lld - %lld + kh * %lld;\n",
         LL(w.s[0]), LL(w.pb[0]), LL(w.d[0]), LL(w.s[1]), LL(w.pb[1]), LL(w.d[1]));
    cg_w(c, "                  %s *dst = row + rr * %lld;\n", T, LL(w.out[2]));
    cg_w(c, "                  if (id < 0 || id >= %lld || ih < 0 || ih >= %lld) {\n", LL(w.in[0]), LL(w.in[1]));
    cg_w(c, "                    for (long ow = 0; ow < %lld; ow++) dst[ow] = 0;\n", LL(w.out[2]));
    cg_w(c, "                    continue;\n                  }\n");
    cg_w(c, "                  const %s *src = xg + (ci * %lld + id) * %lld + ih * %lld;\n", T, LL(w.in[0]),
         LL(w.in[1] * w.in[2]), LL(w.in[2]));
    emit_im2col_row(c, &w, esz);
    cg_w(c, "                }\n              }\n");
    char yo[64], ro[64];
    snprintf(yo, sizeof yo, "(yg + r0 * %lld)", LL(w.out[2]));
    snprintf(ro, sizeof ro, "(rg + r0 * %lld)", LL(w.out[2]));
    if (dg) {
      emit_direct_gemm(c, "        ", mg, "P", K, "wg", "col", "P", b ? bg : "NULL", yo, os, e.res ? ro : "NULL", &e,
                       0);
    } else {
      cg_w(
          c,
          "        %s(CblasRowMajor, CblasNoTrans, CblasNoTrans, %lld, (int)P, %lld, 1, wg, %lld, col, (int)P, %s, yg + r0 * %lld, %lld);\n",
          gemm_fn(t), LL(Mg), LL(K), LL(K), beta, LL(w.out[2]), LL(OS));
      emit_epilogue(c, &e, "        ", yo, ro, Mg, "P", OS);
    }
    cg_w(c, "      }\n");
  }
  cg_w(c, "    }\n");
  cg_w(c, "  }\n");
  return 0;
}

/* The input depth and row loops of a ConvTranspose's scatter under tap (kd, kh), at
 * indentation ind: od and oh the output depth and row, those outside skipped; the caller
 * closes the two loops. */
static void emit_ct_rows(cg_ctx *c, const char *ind, const cg_win3 *w) {
  cg_w(c, "%sfor (long id = 0; id < %lld; id++) {\n", ind, LL(w->in[0]));
  cg_w(c, "%s  const long od = id * %lld - %lld + kd * %lld;\n", ind, LL(w->s[0]), LL(w->pb[0]), LL(w->d[0]));
  cg_w(c, "%s  if (od < 0 || od >= %lld) continue;\n", ind, LL(w->out[0]));
  cg_w(c, "%s  for (long ih = 0; ih < %lld; ih++) {\n", ind, LL(w->in[1]));
  cg_w(c, "%s    const long oh = ih * %lld - %lld + kh * %lld;\n", ind, LL(w->s[1]), LL(w->pb[1]), LL(w->d[1]));
  cg_w(c, "%s    if (oh < 0 || oh >= %lld) continue;\n", ind, LL(w->out[1]));
}

/* ConvTranspose: per sample and group, col = W_g^T X_g (GEMM), then col2im adds the
 * columns into the output; bias last. A depthwise one (the input gradient of a depthwise
 * Conv, as autodiff writes it) scatters each input row into the output row of every tap,
 * y[o] += x[i] * w[tap], in col2im's order (tap, then position) and with its products
 * (col = W^T X is x * w there): the same bits without a K = 1 GEMM per channel and its
 * KK x IS columns. */
static int emit_conv_transpose(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *wt = cg_in(c, n, 1), *b = cg_in(c, n, 2), *y = cg_out(c, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE) return cg_fail(c, n, "ConvTranspose on %s is not supported", ir_dtype_name(t));
  int64_t kernel[3];
  for (int i = 0; i < x->shape.rank - 2 && i < 3; i++) kernel[i] = wt->shape.dims[2 + i];
  cg_win3 w;
  if (cg_conv_transpose_window(c->g, "cpu", n, x, y, kernel, &w)) return -1;
  const char *T = cg_ctype(t);
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], G = ir_attr_int(n, "group", 1), M = y->shape.dims[1];
  if (G < 1 || C % G || M % G) return cg_fail(c, n, "group %lld does not divide the channels", LL(G));
  int64_t Cg = C / G, Mg = M / G;
  int64_t IS = w.in[0] * w.in[1] * w.in[2], OS = w.out[0] * w.out[1] * w.out[2];
  int64_t KK = w.k[0] * w.k[1] * w.k[2], Kc = Mg * KK;
  size_t esz = t == IR_DOUBLE ? 8 : 4;
  if (cg_numel(y) == 0) return 0;
  cg_w(c, "  memset(y0, 0, sizeof(%s) * %lld);\n", T, LL(cg_numel(y)));
  cg_w(c, "  for (long n = 0; n < %lld; n++)\n    for (long g = 0; g < %lld; g++) {\n", LL(N), LL(G));
  cg_w(c, "      const %s *xg = x0 + (n * %lld + g * %lld) * %lld;\n", T, LL(C), LL(Cg), LL(IS));
  cg_w(c, "      %s *yg = y0 + (n * %lld + g * %lld) * %lld;\n", T, LL(M), LL(Mg), LL(OS));
  if (Cg == 1 && Mg == 1) {
    cg_w(c, "      const %s *wg = x1 + g * %lld;\n", T, LL(KK));
    cg_w(c, "      for (long kd = 0; kd < %lld; kd++)\n        for (long kh = 0; kh < %lld; kh++)\n", LL(w.k[0]),
         LL(w.k[1]));
    cg_w(c, "          for (long kw = 0; kw < %lld; kw++) {\n", LL(w.k[2]));
    cg_w(c, "            const %s wv = wg[(kd * %lld + kh) * %lld + kw];\n", T, LL(w.k[1]), LL(w.k[2]));
    /* the inputs whose ow = iw * s - pb + kw * d falls in [0, OW) */
    cg_w(c, "            const long off = kw * %lld - %lld;\n", LL(w.d[2]), LL(w.pb[2]));
    cg_w(c, "            const long lo = off < 0 ? (-off + %lld) / %lld : 0;\n", LL(w.s[2] - 1), LL(w.s[2]));
    cg_w(c, "            long hi = %lld - off > 0 ? (%lld - off + %lld) / %lld : 0;\n", LL(w.out[2]), LL(w.out[2]),
         LL(w.s[2] - 1), LL(w.s[2]));
    cg_w(c, "            if (hi > %lld) hi = %lld;\n", LL(w.in[2]), LL(w.in[2]));
    emit_ct_rows(c, "            ", &w);
    cg_w(c, "                const %s *xr = xg + (id * %lld + ih) * %lld;\n", T, LL(w.in[1]), LL(w.in[2]));
    cg_w(c, "                %s *yr = yg + (od * %lld + oh) * %lld;\n", T, LL(w.out[1]), LL(w.out[2]));
    cg_w(c, "                for (long iw = lo; iw < hi; iw++) yr[iw * %lld + off] += xr[iw] * wv;\n", LL(w.s[2]));
    cg_w(c, "              }\n            }\n          }\n    }\n");
  } else {
    cg_scratch(c, (size_t)(Kc * IS) * esz);
    cg_w(c, "      %s *col = (%s *)scr;\n", T, T);
    /* W: [C, Mg, k...]; group g rows g*Cg..: as a [Cg, Kc] matrix; col = W_g^T (Kc x Cg) * X_g (Cg x IS) */
    cg_w(
        c,
        "      %s(CblasRowMajor, CblasTrans, CblasNoTrans, %lld, %lld, %lld, 1, x1 + g * %lld, %lld, xg, %lld, 0, col, %lld);\n",
        gemm_fn(t), LL(Kc), LL(IS), LL(Cg), LL(Cg * Kc), LL(Kc), LL(IS), LL(IS));
    cg_w(c, "      for (long m = 0; m < %lld; m++)\n", LL(Mg));
    cg_w(c, "        for (long kd = 0; kd < %lld; kd++)\n          for (long kh = 0; kh < %lld; kh++)\n", LL(w.k[0]),
         LL(w.k[1]));
    cg_w(c, "            for (long kw = 0; kw < %lld; kw++) {\n", LL(w.k[2]));
    cg_w(c, "              const %s *cr = col + (((m * %lld + kd) * %lld + kh) * %lld + kw) * %lld;\n", T, LL(w.k[0]),
         LL(w.k[1]), LL(w.k[2]), LL(IS));
    emit_ct_rows(c, "              ", &w);
    cg_w(c, "                  for (long iw = 0; iw < %lld; iw++) {\n", LL(w.in[2]));
    cg_w(c, "                    const long ow = iw * %lld - %lld + kw * %lld;\n", LL(w.s[2]), LL(w.pb[2]), LL(w.d[2]));
    cg_w(c, "                    if (ow < 0 || ow >= %lld) continue;\n", LL(w.out[2]));
    cg_w(c, "                    yg[((m * %lld + od) * %lld + oh) * %lld + ow] += cr[(id * %lld + ih) * %lld + iw];\n",
         LL(w.out[0]), LL(w.out[1]), LL(w.out[2]), LL(w.in[1]), LL(w.in[2]));
    cg_w(c, "                  }\n                }\n              }\n            }\n    }\n");
  }
  if (b) {
    cg_w(c, "  for (long n = 0; n < %lld; n++)\n    for (long m = 0; m < %lld; m++)\n", LL(N), LL(M));
    cg_w(c, "      for (long i = 0; i < %lld; i++) y0[(n * %lld + m) * %lld + i] += x2[m];\n", LL(OS), LL(M), LL(OS));
  }
  return 0;
}

/* ---- Gemm, MatMul ------------------------------------------------------------------ */

static int emit_gemm(cg_ctx *c, const ir_node *n) {
  ir_value *a = cg_in(c, n, 0), *b = cg_in(c, n, 1), *cc = cg_in(c, n, 2), *y = cg_out(c, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE) return cg_fail(c, n, "Gemm on %s is not supported", ir_dtype_name(t));
  if (a->shape.rank != 2 || b->shape.rank != 2) return cg_fail(c, n, "Gemm needs 2-D inputs");
  int ta = (int)ir_attr_int(n, "transA", 0), tb = (int)ir_attr_int(n, "transB", 0);
  double alpha = ir_attr_float(n, "alpha", 1.0f), beta = ir_attr_float(n, "beta", 1.0f);
  int64_t M = ta ? a->shape.dims[1] : a->shape.dims[0], K = ta ? a->shape.dims[0] : a->shape.dims[1];
  int64_t N = tb ? b->shape.dims[0] : b->shape.dims[1];
  const char *T = cg_ctype(t);
  char l1[48];
  if (M * N == 0) return 0;
  int use_c = cc && beta != 0.0;
  /* C broadcast to [M, N]: its last two dims (1 where absent) */
  int r = use_c ? cc->shape.rank : 0;
  int64_t d0 = r >= 2 ? cc->shape.dims[r - 2] : 1, d1 = r >= 1 ? cc->shape.dims[r - 1] : 1;
  if (t == IR_FLOAT && !ta && !tb && alpha == 1.0 && K > 0 && K <= CG_C_DIRECT_K && (!use_c || beta == 1.0)) {
    /* pipert_gemm_direct (B as stored: passes/opt/pretranspose.h stores a constant B of a
     * Gemm with transB transposed), C its bias, one per column or per row, or its
     * residual: y = C + A B, one dot product per output, as cblas_sgemm onto a C-filled
     * y computes it but for the order of the products' sum */
    const char *bias = "NULL", *res = "NULL";
    int col = 0;
    if (use_c && d0 == 1 && d1 == N) bias = "x2", col = DG_BIAS_COL;
    else if (use_c && d1 == 1 && d0 == M) bias = "x2";
    else if (use_c && d0 == M && d1 == N) res = "x2";
    else if (use_c) goto blas; /* (a scalar C over several rows and columns) */
    char sm[32], sn[32];
    snprintf(sm, sizeof sm, "%lld", LL(M));
    snprintf(sn, sizeof sn, "%lld", LL(N));
    emit_direct_gemm(c, "  ", sm, sn, K, "x0", "x1", sn, bias, "y0", sn, res, NULL, col | DG_X_SHARED);
    return 0;
  }
blas:
  if (use_c) {
    int64_t cs0 = d0 != 1 ? d1 : 0, cs1 = d1 != 1 ? 1 : 0;
    cg_w(c, "  for (long i = 0; i < %lld; i++)\n    for (long j = 0; j < %lld; j++)\n", LL(M), LL(N));
    if (beta == 1.0) cg_w(c, "      y0[i * %lld + j] = x2[i * %lld + j * %lld];\n", LL(N), LL(cs0), LL(cs1));
    else
      cg_w(c, "      y0[i * %lld + j] = %s * x2[i * %lld + j * %lld];\n", LL(N), cg_flit(l1, sizeof l1, beta, t),
           LL(cs0), LL(cs1));
  }
  if (K == 0) {
    if (!use_c) cg_w(c, "  memset(y0, 0, sizeof(%s) * %lld);\n", T, LL(M * N));
    return 0;
  }
  cg_w(c, "  %s(CblasRowMajor, %s, %s, %lld, %lld, %lld, %s, x0, %lld, x1, %lld, %s, y0, %lld);\n", gemm_fn(t),
       ta ? "CblasTrans" : "CblasNoTrans", tb ? "CblasTrans" : "CblasNoTrans", LL(M), LL(N), LL(K),
       cg_flit(l1, sizeof l1, alpha, t), LL(ta ? M : K), LL(tb ? K : N), use_c ? "1" : "0", LL(N));
  return 0;
}

int64_t cg_gemm_rows(int64_t M, int64_t N) {
  int64_t r = N > 0 ? ((int64_t)1 << 20) / (N * 4) : M;
  r -= r % 16;
  if (r < 16) r = 16;
  /* no lone short block at the end: blocks of equal size, rounded up to 16 rows */
  if (r < M) {
    int64_t nb = (M + r - 1) / r;
    r = (M + nb - 1) / nb;
    r += (16 - r % 16) % 16;
  }
  return r < M ? r : M;
}

void cg_gemm_blocks_open(cg_ctx *c, int64_t M, int64_t N, int64_t K, int64_t MB, const char *a, const char *b,
                         const char *y, int y_whole) {
  char yb[64], ab[64], sn[32];
  if (y_whole) snprintf(yb, sizeof yb, "%s + r0 * %lld", y, LL(N));
  else snprintf(yb, sizeof yb, "%s", y);
  snprintf(ab, sizeof ab, "%s + r0 * %lld", a, LL(K));
  snprintf(sn, sizeof sn, "%lld", LL(N));
  cg_w(c, "  for (long r0 = 0; r0 < %lld; r0 += %lld) {\n", LL(M), LL(MB));
  cg_w(c, "    const long nr = %lld - r0 < %lld ? %lld - r0 : %lld;\n", LL(M), LL(MB), LL(M), LL(MB));
  if (K <= CG_C_DIRECT_K)
    emit_direct_gemm(c, "    ", "nr", sn, K, ab, b, sn, "NULL", yb, sn, "NULL", NULL, DG_X_SHARED);
  else
    cg_w(
        c,
        "    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, %lld, %lld, 1, %s, %lld, %s, %lld, 0, %s, %lld);\n",
        LL(N), LL(K), ab, LL(K), b, LL(N), yb, LL(N));
}

/* A MatMul operand's rows x cols matrix at src (emitted expression), stored with leading
 * dimension ld, transposed (trans: cols rows of rows) or not, copied into scratch cm at
 * off as a compact untransposed matrix, each stored row read whole; its name into dst. */
static void emit_compact(cg_ctx *c, const char *T, const char *src, int64_t rows, int64_t cols, int trans, int64_t ld,
                         int64_t off, char *dst, size_t dst_len) {
  if (trans)
    cg_w(
        c,
        "    for (long k = 0; k < %lld; k++)\n      for (long i = 0; i < %lld; i++) cm[%lld + i * %lld + k] = (%s)[k * %lld + i];\n",
        LL(cols), LL(rows), LL(off), LL(cols), src, LL(ld));
  else
    cg_w(c, "    for (long i = 0; i < %lld; i++) memcpy(cm + %lld + i * %lld, %s + i * %lld, sizeof(%s) * %lld);\n",
         LL(rows), LL(off), LL(cols), src, LL(ld), T, LL(cols));
  snprintf(dst, dst_len, "cm + %lld", LL(off));
}

static int emit_matmul(cg_ctx *c, const ir_node *n) {
  ir_value *y = cg_out(c, n, 0);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  cg_matmul mm;
  if (cg_matmul_params(c->g, "cpu", n, &mm)) return -1;
  int64_t M = mm.M, K = mm.K, N = mm.N, NB = mm.NB;
  int nb = mm.nb;
  const int64_t *bd = mm.bd, *sa = mm.sa, *sb = mm.sb;
  if (cg_numel(y) == 0) return 0;
  if (K == 0) {
    cg_w(c, "  memset(y0, 0, sizeof(%s) * %lld);\n", T, LL(cg_numel(y)));
    return 0;
  }
  if ((t != IR_FLOAT && t != IR_DOUBLE) && (mm.pa || mm.pb))
    return cg_fail(c, n, "a Transpose folded into an integer MatMul");
  if (t != IR_FLOAT && t != IR_DOUBLE) {
    /* integer MatMul: plain loops */
    cg_w(c, "  for (long bi = 0; bi < %lld; bi++) {\n    long rem = bi, ao = 0, bo = 0;\n", LL(NB));
    for (int i = nb - 1; i >= 0; i--)
      cg_w(c, "    { const long q = rem %% %lld; rem /= %lld; ao += q * %lld; bo += q * %lld; }\n", LL(bd[i]),
           LL(bd[i]), LL(sa[i]), LL(sb[i]));
    cg_w(c, "    (void)rem;\n    for (long i = 0; i < %lld; i++)\n      for (long j = 0; j < %lld; j++) {\n", LL(M),
         LL(N));
    cg_w(
        c,
        "        %s s = 0;\n        for (long k = 0; k < %lld; k++) s += x0[ao + i * %lld + k] * x1[bo + k * %lld + j];\n",
        T, LL(K), LL(K), LL(N));
    cg_w(c, "        y0[bi * %lld + i * %lld + j] = s;\n      }\n  }\n", LL(M * N), LL(N));
    return 0;
  }
  int b_flat = !mm.pb;
  for (int i = 0; i < nb; i++) b_flat &= sb[i] == 0;
  int a_full = !mm.pa;
  for (int i = 0; i < nb; i++) a_full &= sa[i] != 0 || bd[i] == 1;
  if (b_flat && a_full) {
    /* B is one matrix and A's batch is contiguous: GEMMs with M' = batch * M, float in
     * blocks of cg_gemm_rows rows (as when an element-wise unit takes the MatMul in) */
    int64_t MB = t == IR_FLOAT ? cg_gemm_rows(NB * M, N) : NB * M;
    if (MB >= NB * M && t == IR_FLOAT && K <= CG_C_DIRECT_K) {
      char sm[32], sn[32];
      snprintf(sm, sizeof sm, "%lld", LL(NB * M));
      snprintf(sn, sizeof sn, "%lld", LL(N));
      emit_direct_gemm(c, "  ", sm, sn, K, "x0", "x1", sn, "NULL", "y0", sn, "NULL", NULL, DG_X_SHARED);
      return 0;
    }
    if (MB >= NB * M) {
      cg_w(c,
           "  %s(CblasRowMajor, CblasNoTrans, CblasNoTrans, %lld, %lld, %lld, 1, x0, %lld, x1, %lld, 0, y0, %lld);\n",
           gemm_fn(t), LL(NB * M), LL(N), LL(K), LL(K), LL(N), LL(N));
      return 0;
    }
    cg_gemm_blocks_open(c, NB * M, N, K, MB, "x0", "x1", "y0", 1); /* (float only: MB < NB * M) */
    cg_w(c, "  }\n");
    return 0;
  }
  const char *fused = ir_attr_str(n, "pipecc.fused", NULL);
  if (fused) {
    cg_w(c, "  /* fused: ");
    cg_put_comment(c->body, fused, 600);
    cg_w(c, " */\n");
  }
  cg_w(c, "  for (long bi = 0; bi < %lld; bi++) {\n    long rem = bi, ao = 0, bo = 0;\n", LL(NB));
  for (int i = nb - 1; i >= 0; i--)
    cg_w(c, "    { const long q = rem %% %lld; rem /= %lld; ao += q * %lld; bo += q * %lld; }\n", LL(bd[i]), LL(bd[i]),
         LL(sa[i]), LL(sb[i]));
  cg_w(c, "    (void)rem;\n");
  /* An operand with a folded Transpose: its matrix's stored rows (transposed or not) lie
   * ld apart. Each is copied whole into a compact matrix in scratch first, transposed
   * on the way where it is stored transposed, and BLAS multiplies compact untransposed
   * matrices as without the fold (rows far apart, 16 KiB for attention's heads, fall
   * into one cache set: BLAS reading them in place was slower, and so was its
   * transposed kernel on these small matrices). */
  char pa[48] = "x0 + ao", pb[48] = "x1 + bo";
  int64_t lda = K, ldb = N;
  if (mm.pa || mm.pb) {
    cg_scratch(c, ir_dtype_size(t) * (size_t)((mm.pa ? M * K : 0) + (mm.pb ? K * N : 0)));
    cg_w(c, "    %s *cm = (%s *)scr;\n", T, T);
  }
  if (mm.pa) emit_compact(c, T, "x0 + ao", M, K, mm.ta, mm.lda, 0, pa, sizeof pa);
  else if (mm.ta || mm.lda != K) return cg_fail(c, n, "MatMul: operand A is strided without a folded Transpose");
  if (mm.pb) emit_compact(c, T, "x1 + bo", K, N, mm.tb, mm.ldb, mm.pa ? M * K : 0, pb, sizeof pb);
  else if (mm.tb || mm.ldb != N) return cg_fail(c, n, "MatMul: operand B is strided without a folded Transpose");
  if (t == IR_FLOAT && M * N * K <= CG_C_DIRECT_MATMUL) {
    /* small matrices (attention's heads): BLAS packs both operands on every call */
    char sm[32], sn[32], yo[64];
    snprintf(sm, sizeof sm, "%lld", LL(M));
    snprintf(sn, sizeof sn, "%lld", LL(N));
    snprintf(yo, sizeof yo, "y0 + bi * %lld", LL(M * N));
    emit_direct_gemm(c, "    ", sm, sn, K, pa, pb, sn, "NULL", yo, sn, "NULL", NULL, 0);
  } else
    cg_w(
        c,
        "    %s(CblasRowMajor, CblasNoTrans, CblasNoTrans, %lld, %lld, %lld, 1, %s, %lld, %s, %lld, 0, y0 + bi * %lld, %lld);\n",
        gemm_fn(t), LL(M), LL(N), LL(K), pa, LL(lda), pb, LL(ldb), LL(M * N), LL(N));
  cg_w(c, "  }\n");
  return 0;
}

/* ---- pooling ------------------------------------------------------------------------- */

/* MaxPool of float rows (no indices, dilation 1, one depth slice): per output row, the
 * column-wise max of the window's input rows into scratch, then the max of each
 * window's columns, a loop of constant length over a row bordered with -inf (which never
 * wins: v > m), so it vectorises. A max over the same elements as the generic loop (NaN
 * ignored the same way: v > m ? v : m), with the rows clamped instead of tested per
 * element. With a stride s > 1 the bordered row is first split by phase (column u at
 * [u % s][u / s]), so that window ow's column ow * s + kw is element ow + kw / s of phase
 * kw % s: contiguous in ow, where the windows' columns s apart would not vectorise. */
static void emit_maxpool_rows(cg_ctx *c, const char *T, int64_t NC, const cg_win3 *w) {
  int64_t H = w->in[1], W = w->in[2], IS = H * W, OS = w->out[1] * w->out[2], OW = w->out[2], S = w->s[2];
  /* t: the row maxima at t[pb .. pb + W), -inf on either side out to every window's end */
  int64_t PB = w->pb[2], TW = (OW - 1) * S + w->k[2];
  if (TW < PB + W) TW = PB + W;
  int64_t TQ = (TW + S - 1) / S; /* with S > 1: t padded to TQ * S, then its S phases of TQ */
  if (S > 1) TW = TQ * S;
  cg_scratch(c, (size_t)(TW + (S > 1 ? TW : 0)) * (T[0] == 'd' ? 8 : 4));
  cg_w(c, "  %s *t = (%s *)scr, *tp = t + %lld;\n", T, T, LL(PB));
  if (S > 1) cg_w(c, "  %s *tq = t + %lld; /* [%lld][%lld]: t by phase */\n", T, LL(TW), LL(S), LL(TQ));
  cg_w(c, "  for (long i = 0; i < %lld; i++) t[i] = -INFINITY;\n", LL(TW));
  cg_w(c, "  for (long nc = 0; nc < %lld; nc++) {\n", LL(NC));
  cg_w(c, "    const %s *xp = x0 + nc * %lld;\n    %s *yp = y0 + nc * %lld;\n", T, LL(IS), T, LL(OS));
  cg_w(c, "    for (long oh = 0; oh < %lld; oh++) {\n", LL(w->out[1]));
  cg_w(c, "      const long h0 = oh * %lld - %lld, h1 = h0 + %lld;\n", LL(w->s[1]), LL(w->pb[1]), LL(w->k[1]));
  cg_w(c, "      for (long iw = 0; iw < %lld; iw++) tp[iw] = -INFINITY;\n", LL(W));
  cg_w(c, "      for (long ih = h0 < 0 ? 0 : h0; ih < (h1 < %lld ? h1 : %lld); ih++)\n", LL(H), LL(H));
  cg_w(c, "        for (long iw = 0; iw < %lld; iw++) {\n", LL(W));
  cg_w(c, "          const %s v = xp[ih * %lld + iw];\n          tp[iw] = v > tp[iw] ? v : tp[iw];\n        }\n", T,
       LL(W));
  if (S > 1) cg_emit_phase_split(c, "      ", "tq", "t", S, TQ);
  /* every window whole: a pad's -inf never wins (v > m), as a skipped tap */
  cg_w(c, "      for (long ow = 0; ow < %lld; ow++) {\n", LL(OW));
  cg_w(c, "        %s m = -INFINITY;\n", T);
  cg_w(c, "        for (long kw = 0; kw < %lld; kw++) {\n", LL(w->k[2]));
  if (S > 1)
    cg_w(c, "          const %s v = tq[kw %% %lld * %lld + ow + kw / %lld];\n          m = v > m ? v : m;\n        }\n", T,
         LL(S), LL(TQ), LL(S));
  else cg_w(c, "          const %s v = t[ow + kw];\n          m = v > m ? v : m;\n        }\n", T);
  cg_w(c, "        yp[oh * %lld + ow] = m;\n      }\n    }\n  }\n", LL(OW));
}

static int emit_pool(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0), *yi = cg_out(c, n, 1);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  int sr = x->shape.rank - 2;
  cg_win3 w;
  if (cg_pool_window(c->g, "cpu", n, x, y, &w)) return -1;
  int64_t NC = x->shape.dims[0] * x->shape.dims[1];
  int64_t IS = w.in[0] * w.in[1] * w.in[2], OS = w.out[0] * w.out[1] * w.out[2];
  if (cg_numel(y) == 0) return 0;
  int is_max = n->op == IR_OP_MaxPool || n->op == IR_OP_GlobalMaxPool;
  int is_lp = n->op == IR_OP_LpPool || n->op == IR_OP_GlobalLpPool;
  int include_pad = (int)ir_attr_int(n, "count_include_pad", 0);
  double p = (double)ir_attr_int(n, "p", 2);
  int col_major = (int)ir_attr_int(n, "storage_order", 0);
  if (yi && col_major && sr != 2) return cg_fail(c, n, "storage_order=1 is supported for 2-D pooling only");
  if (n->op == IR_OP_MaxPool && !yi && (t == IR_FLOAT || t == IR_DOUBLE) && w.in[0] == 1 && w.out[0] == 1 &&
      w.k[0] == 1 && w.d[1] == 1 && w.d[2] == 1) {
    emit_maxpool_rows(c, T, NC, &w);
    return 0;
  }
  if (n->op == IR_OP_GlobalAveragePool && (t == IR_FLOAT || t == IR_DOUBLE) && OS == 1) {
    /* each map's sum in 8 double lanes (they vectorise; the scalar loop below adds one
     * element at a time), combined pairwise, over the count */
    cg_w(c, "  for (long nc = 0; nc < %lld; nc++) {\n", LL(NC));
    cg_w(c, "    const %s *xp = x0 + nc * %lld;\n", T, LL(IS));
    cg_emit_dlane_sum(c, "    ", "s", IS, "xp[k]");
    cg_w(c, "    y0[nc] = (%s)(s / %lld);\n  }\n", T, LL(IS));
    return 0;
  }
  cg_w(c, "  for (long nc = 0; nc < %lld; nc++) {\n", LL(NC));
  cg_w(c, "    const %s *xp = x0 + nc * %lld;\n", T, LL(IS));
  cg_w(c, "    for (long od = 0; od < %lld; od++)\n      for (long oh = 0; oh < %lld; oh++)\n", LL(w.out[0]),
       LL(w.out[1]));
  cg_w(c, "        for (long ow = 0; ow < %lld; ow++) {\n", LL(w.out[2]));
  cg_w(c, "          const long d0 = od * %lld - %lld, h0 = oh * %lld - %lld, w0 = ow * %lld - %lld;\n", LL(w.s[0]),
       LL(w.pb[0]), LL(w.s[1]), LL(w.pb[1]), LL(w.s[2]), LL(w.pb[2]));
  if (is_max)
    cg_w(c, "          %s m = %s;\n          long mi = 0;\n", T, t == IR_FLOAT || t == IR_DOUBLE ? "-INFINITY" : "0");
  else cg_w(c, "          double s = 0;\n          long cnt = 0%s;\n", !is_lp && include_pad ? ", pcnt = 0" : "");
  if (is_max && t != IR_FLOAT && t != IR_DOUBLE) cg_w(c, "          int first = 1;\n");
  cg_w(c, "          for (long kd = 0; kd < %lld; kd++) {\n", LL(w.k[0]));
  cg_w(c, "            const long id = d0 + kd * %lld;\n", LL(w.d[0]));
  cg_w(c, "            for (long kh = 0; kh < %lld; kh++) {\n", LL(w.k[1]));
  cg_w(c, "              const long ih = h0 + kh * %lld;\n", LL(w.d[1]));
  cg_w(c, "              for (long kw = 0; kw < %lld; kw++) {\n", LL(w.k[2]));
  cg_w(c, "                const long iw = w0 + kw * %lld;\n", LL(w.d[2]));
  if (!is_max && !is_lp && include_pad) /* the taps on the input or its pads */
    cg_w(c, "                pcnt += id >= %lld && id < %lld && ih >= %lld && ih < %lld && iw >= %lld && iw < %lld;\n",
         LL(-w.pb[0]), LL(w.in[0] + w.pe[0]), LL(-w.pb[1]), LL(w.in[1] + w.pe[1]), LL(-w.pb[2]), LL(w.in[2] + w.pe[2]));
  cg_w(c, "                if (id < 0 || id >= %lld || ih < 0 || ih >= %lld || iw < 0 || iw >= %lld) continue;\n",
       LL(w.in[0]), LL(w.in[1]), LL(w.in[2]));
  cg_w(c, "                const long ii = (id * %lld + ih) * %lld + iw;\n", LL(w.in[1]), LL(w.in[2]));
  cg_w(c, "                const %s v = xp[ii];\n", T);
  if (is_max) {
    if (t == IR_FLOAT || t == IR_DOUBLE) cg_w(c, "                if (v > m) {\n");
    else cg_w(c, "                if (first || v > m) {\n                  first = 0;\n");
    cg_w(c, "                  m = v;\n");
    if (yi) {
      if (col_major) cg_w(c, "                  mi = iw * %lld + ih;\n", LL(w.in[1]));
      else cg_w(c, "                  mi = ii;\n");
    }
    cg_w(c, "                }\n");
  } else if (is_lp) {
    if (p == 1) cg_w(c, "                s += fabs((double)v);\n");
    else if (p == 2) cg_w(c, "                s += (double)v * (double)v;\n");
    else cg_w(c, "                s += pow(fabs((double)v), %.17g);\n", p);
    cg_w(c, "                cnt++;\n");
  } else {
    cg_w(c, "                s += v;\n                cnt++;\n");
  }
  cg_w(c, "              }\n            }\n          }\n");
  cg_w(c, "          const long oi = nc * %lld + (od * %lld + oh) * %lld + ow;\n", LL(OS), LL(w.out[1]), LL(w.out[2]));
  if (is_max) {
    cg_w(c, "          y0[oi] = m;\n");
    if (yi) cg_w(c, "          y1[oi] = nc * %lld + mi;\n", LL(IS));
    else cg_w(c, "          (void)mi;\n");
  } else if (is_lp) {
    if (p == 1 || p == 2) cg_w(c, "          (void)cnt;\n          y0[oi] = (%s)%s;\n", T, p == 1 ? "s" : "sqrt(s)");
    else cg_w(c, "          (void)cnt;\n          y0[oi] = (%s)pow(s, 1.0 / %.17g);\n", T, p);
  } else {
    /* count_include_pad: the taps on the input or its pads count, not those of a
     * ceil_mode window past the end pad (as onnxruntime, PyTorch and onnx 1.23's
     * reference) */
    if (include_pad) cg_w(c, "          (void)cnt;\n");
    cg_w(c, "          y0[oi] = (%s)(s / (double)%s);\n", T, include_pad ? "(pcnt ? pcnt : 1)" : "(cnt ? cnt : 1)");
  }
  cg_w(c, "        }\n  }\n");
  return 0;
}

/* ---- float reductions that vectorise ------------------------------------------------ */

/* Partial sums or maxima kept in LANES floats: element k goes to lane k % LANES, the
 * lanes are combined pairwise at the end (lane l with l + 8, then l + 4, ...). A fixed
 * order that GCC vectorises at any width (a plain float reduction it may not reorder,
 * so it stays scalar, and a sequential combination costs more than short rows). */
#define LANES 16

/* `const TYPE NAME = sum over k < n of EXPR` (EXPR in terms of k, converted to TYPE) in
 * `lanes` partial sums: element k to lane k % lanes, combined pairwise at the end. The
 * tail's bounds are constants (a tail loop running on from the main loop's index made
 * GCC warn that its 9th iteration would overflow 8 lanes). */
static void emit_sum_lanes(cg_ctx *c, const char *ind, const char *name, int64_t n, const char *expr, const char *type,
                           int lanes) {
  int64_t whole = n - n % lanes;
  cg_w(c, "%s%s %s_l[%d] = {0};\n", ind, type, name, lanes);
  if (whole) {
    cg_w(c, "%sfor (long %s_k = 0; %s_k < %lld; %s_k += %d)\n", ind, name, name, LL(whole), name, lanes);
    cg_w(c, "%s  for (long l = 0; l < %d; l++) {\n%s    const long k = %s_k + l;\n", ind, lanes, ind, name);
    cg_w(c, "%s    %s_l[l] += %s;\n%s  }\n", ind, name, expr, ind);
  }
  if (n % lanes) {
    cg_w(c, "%sfor (long l = 0; l < %lld; l++) {\n%s  const long k = %lld + l;\n", ind, LL(n % lanes), ind, LL(whole));
    cg_w(c, "%s  %s_l[l] += %s;\n%s}\n", ind, name, expr, ind);
  }
  for (int h = lanes / 2; h >= 1; h /= 2)
    cg_w(c, "%sfor (long l = 0; l < %d; l++) %s_l[l] += %s_l[l + %d];\n", ind, h, name, name, h);
  cg_w(c, "%sconst %s %s = %s_l[0];\n", ind, type, name, name);
}

/* `const float NAME = sum over k < n of EXPR` in LANES float lanes (Softmax, LayerNormalization). */
static void emit_lane_sum(cg_ctx *c, const char *ind, const char *name, int64_t n, const char *expr) {
  emit_sum_lanes(c, ind, name, n, expr, "float", LANES);
}

/* (cg_c.h) */
void cg_emit_phase_split(cg_ctx *c, const char *ind, const char *dst, const char *src, int64_t S, int64_t n) {
  cg_w(c, "%sfor (long ph = 0; ph < %lld; ph++)\n%s  PK_IVDEP\n", ind, LL(S), ind);
  cg_w(c, "%s  for (long j = 0; j < %lld; j++) (%s)[ph * %lld + j] = (%s)[j * %lld + ph];\n", ind, LL(n), dst, LL(n),
       src, LL(S));
}

/* `const double NAME = sum over k < n of EXPR` in 8 double lanes: the sums of
 * GlobalAveragePool, of reductions over trailing axes and of BatchNormalization's
 * statistics in training (a single double accumulator is a chain of dependent additions:
 * one element per 4 cycles). */
void cg_emit_dlane_sum(cg_ctx *c, const char *ind, const char *name, int64_t n, const char *expr) {
  emit_sum_lanes(c, ind, name, n, expr, "double", 8);
}

/* `const float NAME = max over k < n of EXPR`, the max as `v > m ? v : m` (a NaN is passed
 * over, as by the scalar loop); n >= 1. */
static void emit_lane_max(cg_ctx *c, const char *ind, const char *name, int64_t n, const char *expr) {
  cg_w(c, "%sfloat %s_l[%d];\n", ind, name, LANES);
  cg_w(c, "%sfor (long l = 0; l < %d; l++) {\n%s  const long k = 0;\n%s  %s_l[l] = %s;\n%s}\n", ind, LANES, ind, ind,
       name, expr, ind);
  cg_w(c, "%slong %s_k = 0;\n", ind, name);
  cg_w(c, "%sfor (; %s_k + %d <= %lld; %s_k += %d)\n", ind, name, LANES, LL(n), name, LANES);
  cg_w(c, "%s  for (long l = 0; l < %d; l++) {\n%s    const long k = %s_k + l;\n", ind, LANES, ind, name);
  cg_w(c, "%s    const float v = %s;\n%s    %s_l[l] = v > %s_l[l] ? v : %s_l[l];\n%s  }\n", ind, expr, ind, name, name,
       name, ind);
  cg_w(c, "%sfor (long l = 0; %s_k < %lld; %s_k++, l++) {\n%s  const long k = %s_k;\n", ind, name, LL(n), name, ind,
       name);
  cg_w(c, "%s  const float v = %s;\n%s  %s_l[l] = v > %s_l[l] ? v : %s_l[l];\n%s}\n", ind, expr, ind, name, name, name,
       ind);
  for (int h = LANES / 2; h >= 1; h /= 2)
    cg_w(c, "%sfor (long l = 0; l < %d; l++) %s_l[l] = %s_l[l + %d] > %s_l[l] ? %s_l[l + %d] : %s_l[l];\n", ind, h,
         name, name, h, name, name, h, name);
  cg_w(c, "%sconst float %s = %s_l[0];\n", ind, name, name);
}

/* ---- normalisation -------------------------------------------------------------------- */

static int emit_batchnorm(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE)
    return cg_fail(c, n, "BatchNormalization on %s is not supported", ir_dtype_name(t));
  const char *T = cg_ctype(t);
  char l1[48], l2[48], f1[16];
  snprintf(f1, sizeof f1, "%s", t == IR_DOUBLE ? "sqrt" : "sqrtf");
  double eps = ir_attr_float(n, "epsilon", 1e-5f), mom = ir_attr_float(n, "momentum", 0.9f);
  int64_t N = x->shape.dims[0], C = x->shape.rank > 1 ? x->shape.dims[1] : 1, S = 1;
  for (int i = 2; i < x->shape.rank; i++) S *= x->shape.dims[i];
  int training = (int)ir_attr_int(n, "training_mode", 0);
  if (cg_numel(y) == 0) return 0;
  if (!training) {
    /* as onnxruntime: y = x * (scale / sqrt(var + eps)) + (B - mean * scale / sqrt(var + eps)) */
    cg_w(c, "  for (long ch = 0; ch < %lld; ch++) {\n", LL(C));
    cg_w(c, "    const %s a = x1[ch] / %s(x4[ch] + %s);\n", T, f1, cg_flit(l1, sizeof l1, eps, t));
    cg_w(c, "    const %s b = x2[ch] - x3[ch] * a;\n", T);
    cg_w(c, "    for (long n = 0; n < %lld; n++) {\n", LL(N));
    cg_w(c, "      const %s *xp = x0 + (n * %lld + ch) * %lld;\n      %s *yp = y0 + (n * %lld + ch) * %lld;\n", T,
         LL(C), LL(S), T, LL(C), LL(S));
    cg_w(c, "      for (long i = 0; i < %lld; i++) yp[i] = xp[i] * a + b;\n    }\n  }\n", LL(S));
    return 0;
  }
  /* training mode: statistics of this micro-batch (population variance) */
  ir_value *rm = cg_out(c, n, 1), *rv = cg_out(c, n, 2);
  /* the sums of each image's map in double lanes, added image by image */
  cg_w(c, "  for (long ch = 0; ch < %lld; ch++) {\n", LL(C));
  cg_w(c, "    double s = 0, q = 0;\n");
  cg_w(c, "    for (long n = 0; n < %lld; n++) {\n      const %s *xp = x0 + (n * %lld + ch) * %lld;\n", LL(N), T, LL(C),
       LL(S));
  cg_emit_dlane_sum(c, "      ", "sn", S, "xp[k]");
  cg_w(c, "      s += sn;\n    }\n");
  cg_w(c, "    const double mean = s / %lld.0;\n", LL(N * S));
  cg_w(c, "    for (long n = 0; n < %lld; n++) {\n      const %s *xp = x0 + (n * %lld + ch) * %lld;\n", LL(N), T, LL(C),
       LL(S));
  cg_emit_dlane_sum(c, "      ", "qn", S, "(xp[k] - mean) * (xp[k] - mean)");
  cg_w(c, "      q += qn;\n    }\n");
  cg_w(c, "    const double var = q / %lld.0;\n", LL(N * S));
  cg_w(c, "    const double inv = 1.0 / sqrt(var + %.17g);\n", (double)(float)eps);
  cg_w(c, "    const double sc = x1[ch], bi = x2[ch];\n");
  cg_w(c, "    for (long n = 0; n < %lld; n++)\n      for (long i = 0; i < %lld; i++) {\n", LL(N), LL(S));
  cg_w(c, "        const long k = (n * %lld + ch) * %lld + i;\n", LL(C), LL(S));
  cg_w(c, "        y0[k] = (%s)((x0[k] - mean) * inv * sc + bi);\n      }\n", T);
  if (rm) cg_w(c, "    y1[ch] = (%s)(x3[ch] * %s + mean * (1 - %s));\n", T, cg_flit(l2, sizeof l2, mom, IR_DOUBLE), l2);
  if (rv) cg_w(c, "    y2[ch] = (%s)(x4[ch] * %s + var * (1 - %s));\n", T, cg_flit(l2, sizeof l2, mom, IR_DOUBLE), l2);
  cg_w(c, "  }\n");
  return 0;
}

static int emit_instnorm(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  double eps = ir_attr_float(n, "epsilon", 1e-5f);
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], S = 1;
  for (int i = 2; i < x->shape.rank; i++) S *= x->shape.dims[i];
  if (cg_numel(y) == 0) return 0;
  cg_w(c, "  for (long n = 0; n < %lld; n++)\n    for (long ch = 0; ch < %lld; ch++) {\n", LL(N), LL(C));
  cg_w(c, "      const %s *xp = x0 + (n * %lld + ch) * %lld;\n      %s *yp = y0 + (n * %lld + ch) * %lld;\n", T, LL(C),
       LL(S), T, LL(C), LL(S));
  cg_w(c, "      double s = 0, q = 0;\n      for (long i = 0; i < %lld; i++) s += xp[i];\n", LL(S));
  cg_w(c, "      const double mean = s / %lld.0;\n", LL(S));
  cg_w(c, "      for (long i = 0; i < %lld; i++) q += (xp[i] - mean) * (xp[i] - mean);\n", LL(S));
  cg_w(c, "      const double inv = 1.0 / sqrt(q / %lld.0 + %.17g);\n", LL(S), (double)(float)eps);
  cg_w(c, "      for (long i = 0; i < %lld; i++) yp[i] = (%s)((xp[i] - mean) * inv * x1[ch] + x2[ch]);\n    }\n", LL(S),
       T);
  return 0;
}

static int emit_layernorm(cg_ctx *c, const ir_node *n) {
  ir_value *bi = cg_in(c, n, 2), *y = cg_out(c, n, 0);
  ir_value *ym = cg_out(c, n, 1), *yr = cg_out(c, n, 2);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  double eps = ir_attr_float(n, "epsilon", 1e-5f);
  int64_t outer, inner, ns, nbias;
  if (cg_layernorm_params(c->g, "cpu", n, &outer, &inner, &ns, &nbias)) return -1;
  if (cg_numel(y) == 0) return 0;
  if (t == IR_FLOAT && cg_in(c, n, 1)->dtype == IR_FLOAT && (!bi || bi->dtype == IR_FLOAT)) {
    /* float: the sums in LANES float partial sums (they vectorise; the order is the
     * source's, whatever the vector width), mean and variance in two passes */
    char l1[48];
    cg_w(c, "  for (long o = 0; o < %lld; o++) {\n", LL(outer));
    cg_w(c, "    const float *xp = x0 + o * %lld;\n    float *yp = y0 + o * %lld;\n", LL(inner), LL(inner));
    emit_lane_sum(c, "    ", "s", inner, "xp[k]");
    cg_w(c, "    const float mean = s / %lld.0f;\n", LL(inner));
    emit_lane_sum(c, "    ", "q", inner, "(xp[k] - mean) * (xp[k] - mean)");
    cg_w(c, "    const float inv = 1.0f / sqrtf(q / %lld.0f + %s);\n", LL(inner),
         cg_flit(l1, sizeof l1, eps, IR_FLOAT));
    cg_w(c, "    for (long i = 0; i < %lld; i++) yp[i] = (xp[i] - mean) * inv * x1[%s]%s;\n", LL(inner),
         ns == 1 ? "0" : "i", bi ? (nbias == 1 ? " + x2[0]" : " + x2[i]") : "");
    if (ym) cg_w(c, "    y1[o] = (%s)mean;\n", cg_ctype(ym->dtype));
    if (yr) cg_w(c, "    y2[o] = (%s)inv;\n", cg_ctype(yr->dtype));
    cg_w(c, "  }\n");
    return 0;
  }
  cg_w(c, "  for (long o = 0; o < %lld; o++) {\n", LL(outer));
  cg_w(c, "    const %s *xp = x0 + o * %lld;\n    %s *yp = y0 + o * %lld;\n", T, LL(inner), T, LL(inner));
  cg_w(c, "    double s = 0, q = 0;\n    for (long i = 0; i < %lld; i++) s += xp[i];\n", LL(inner));
  cg_w(c, "    const double mean = s / %lld.0;\n", LL(inner));
  cg_w(c, "    for (long i = 0; i < %lld; i++) q += (xp[i] - mean) * (xp[i] - mean);\n", LL(inner));
  cg_w(c, "    const double inv = 1.0 / sqrt(q / %lld.0 + %.17g);\n", LL(inner), (double)(float)eps);
  cg_w(c, "    for (long i = 0; i < %lld; i++) yp[i] = (%s)((%s)((xp[i] - mean) * inv) * x1[%s]%s);\n", LL(inner), T, T,
       ns == 1 ? "0" : "i", bi ? (nbias == 1 ? " + x2[0]" : " + x2[i]") : "");
  if (ym) cg_w(c, "    y1[o] = (%s)mean;\n", cg_ctype(ym->dtype));
  if (yr) cg_w(c, "    y2[o] = (%s)inv;\n", cg_ctype(yr->dtype));
  cg_w(c, "  }\n");
  return 0;
}

static int emit_lrn(cg_ctx *c, const ir_node *n) {
  ir_value *x = cg_in(c, n, 0), *y = cg_out(c, n, 0);
  const char *T = cg_ctype(y->dtype);
  int64_t size = ir_attr_int(n, "size", 1);
  double alpha = ir_attr_float(n, "alpha", 1e-4f), beta = ir_attr_float(n, "beta", 0.75f),
         bias = ir_attr_float(n, "bias", 1.0f);
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], S = 1;
  for (int i = 2; i < x->shape.rank; i++) S *= x->shape.dims[i];
  int64_t lo = (size - 1) / 2, hi = (size - 1) - lo; /* floor / ceil of (size-1)/2 */
  if (cg_numel(y) == 0) return 0;
  cg_w(c, "  for (long n = 0; n < %lld; n++)\n    for (long ch = 0; ch < %lld; ch++)\n", LL(N), LL(C));
  cg_w(c, "      for (long i = 0; i < %lld; i++) {\n        double s = 0;\n", LL(S));
  cg_w(c, "        for (long k = ch - %lld; k <= ch + %lld; k++) {\n", LL(lo), LL(hi));
  cg_w(c, "          if (k < 0 || k >= %lld) continue;\n", LL(C));
  cg_w(c, "          const double v = x0[(n * %lld + k) * %lld + i];\n          s += v * v;\n        }\n", LL(C),
       LL(S));
  cg_w(c, "        const long j = (n * %lld + ch) * %lld + i;\n", LL(C), LL(S));
  cg_w(c, "        y0[j] = (%s)(x0[j] / pow(%.17g + %.17g * s, %.17g));\n      }\n", T, (double)(float)bias,
       (double)(float)alpha / (double)size, (double)(float)beta);
  return 0;
}

/* Softmax, LogSoftmax, Hardmax: opset >= 13 along one axis (default -1); before 13 on
 * the input coerced to 2-D at axis (default 1). */
static int emit_softmax(cg_ctx *c, const ir_node *n) {
  ir_value *y = cg_out(c, n, 0);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  int64_t outer, A, inner;
  if (cg_softmax_params(c->g, "cpu", n, &outer, &A, &inner)) return -1;
  if (cg_numel(y) == 0) return 0;
  if (t == IR_FLOAT && inner == 1 && A >= 1 && n->op != IR_OP_Hardmax) {
    /* float rows: max and sum in lanes (emit_lane_max/sum), pk_expf_le0 (the stage
     * prelude: x - max is at most 0, or NaN) */
    cg_w(c, "  for (long o = 0; o < %lld; o++) {\n", LL(outer));
    cg_w(c, "    const float *xp = x0 + o * %lld;\n    float *yp = y0 + o * %lld;\n", LL(A), LL(A));
    emit_lane_max(c, "    ", "m", A, "xp[k]");
    if (n->op == IR_OP_Softmax) {
      emit_lane_sum(c, "    ", "s", A, "(yp[k] = pk_expf_le0(xp[k] - m))");
      /* times the reciprocal: a vector division costs more than the exps of short rows */
      cg_w(c, "    const float rs = 1.0f / s;\n");
      cg_w(c, "    for (long k = 0; k < %lld; k++) yp[k] = yp[k] * rs;\n  }\n", LL(A));
    } else {
      emit_lane_sum(c, "    ", "s", A, "pk_expf_le0(xp[k] - m)");
      cg_w(c, "    const float ls = logf(s);\n");
      cg_w(c, "    for (long k = 0; k < %lld; k++) yp[k] = xp[k] - m - ls;\n  }\n", LL(A));
    }
    return 0;
  }
  const char *ex = t == IR_DOUBLE ? "exp" : "expf";
  cg_w(c, "  for (long o = 0; o < %lld; o++)\n    for (long i = 0; i < %lld; i++) {\n", LL(outer), LL(inner));
  cg_w(c, "      const %s *xp = x0 + o * %lld + i;\n      %s *yp = y0 + o * %lld + i;\n", T, LL(A * inner), T,
       LL(A * inner));
  cg_w(c, "      %s m = xp[0];\n      long mk = 0;\n", T);
  cg_w(
      c,
      "      for (long k = 1; k < %lld; k++)\n        if (xp[k * %lld] > m) {\n          m = xp[k * %lld];\n          mk = k;\n        }\n",
      LL(A), LL(inner), LL(inner));
  if (n->op == IR_OP_Hardmax) {
    cg_w(c, "      for (long k = 0; k < %lld; k++) yp[k * %lld] = k == mk;\n    }\n", LL(A), LL(inner));
    return 0;
  }
  cg_w(c, "      (void)mk;\n      double s = 0;\n");
  if (n->op == IR_OP_Softmax) {
    cg_w(c, "      for (long k = 0; k < %lld; k++) {\n        const %s e = %s(xp[k * %lld] - m);\n", LL(A), T, ex,
         LL(inner));
    cg_w(c, "        yp[k * %lld] = e;\n        s += e;\n      }\n", LL(inner));
    cg_w(c, "      for (long k = 0; k < %lld; k++) yp[k * %lld] = (%s)(yp[k * %lld] / s);\n    }\n", LL(A), LL(inner),
         T, LL(inner));
  } else {
    cg_w(c, "      for (long k = 0; k < %lld; k++) s += %s(xp[k * %lld] - m);\n", LL(A), ex, LL(inner));
    cg_w(c, "      const %s ls = (%s)log(s);\n", T, T);
    cg_w(c, "      for (long k = 0; k < %lld; k++) yp[k * %lld] = xp[k * %lld] - m - ls;\n    }\n", LL(A), LL(inner),
         LL(inner));
  }
  return 0;
}

/* ---- RNN, GRU, LSTM ------------------------------------------------------------------- */

static void rnn_write(void *ctx, const char *fmt, va_list ap) { vfprintf(((cg_ctx *)ctx)->body, fmt, ap); }

/* Per direction: one GEMM for the input projection of every step, then per step a GEMM
 * with R and the gate arithmetic of codegen/rnn_expr.h over [B, H] (scratch: xw
 * [S*B, G*H], hr [B, G*H], the states hs, cs and GRU's rh [B, H]). */
static int emit_rnn(cg_ctx *c, const ir_node *n) {
  pass_rnn r;
  if (pass_rnn_info(c->g, (int)(n - c->g->nodes), &r)) return -1;
  ir_dtype t = cg_in(c, n, 0)->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE)
    return cg_fail(c, n, "%s on %s is not supported", ir_op_name(n->op), ir_dtype_name(t));
  const char *T = cg_ctype(t);
  int64_t S = r.S, B = r.B, I = r.I, H = r.H, GH = r.G * H, cols = cg_rnn_step_cols(&r);
  if ((!r.has_y && !r.has_yh && !r.has_yc) || B == 0) return 0;
  cg_scratch(c, (size_t)(S * B * GH + B * GH + 3 * B * H) * ir_dtype_size(t));
  cg_w(c, "  %s *xw = (%s *)scr, *hr = xw + %lld, *hs = hr + %lld, *cs = hs + %lld, *rh = cs + %lld;\n", T, T,
       LL(S * B * GH), LL(B * GH), LL(B * H), LL(B * H));
  cg_w(c, "  (void)xw; (void)hr; (void)cs; (void)rh;\n");
  if (r.has_y && r.has_seq) cg_w(c, "  memset(y0, 0, sizeof(%s) * %lld);\n", T, LL(S * r.D * B * H));
  cg_expr_writer w = {c->g, "cpu", c, rnn_write};
  const char *loop = "    for (long b = 0; b < %lld; b++)\n      for (long j = 0; j < %lld; j++) {\n";
  for (int d = 0; d < r.D; d++) {
    int rev = d == 1 || r.reverse;
    cg_w(c, "  /* direction %d (%s) */\n  {\n", d, rev ? "reverse" : "forward");
    if (S > 0) {
      if (I > 0)
        cg_w(
            c,
            "    %s(CblasRowMajor, CblasNoTrans, CblasTrans, %lld, %lld, %lld, 1, x0, %lld, x1 + %lld, %lld, 0, xw, %lld);\n",
            gemm_fn(t), LL(S * B), LL(GH), LL(I), LL(I), LL(d * GH * I), LL(I), LL(GH));
      else cg_w(c, "    memset(xw, 0, sizeof(%s) * %lld);\n", T, LL(S * B * GH));
    }
    cg_w(c, loop, LL(B), LL(H));
    cg_rnn_phase(&w, &r, d, CG_RNN_INIT, t, "        ");
    cg_w(c, "      }\n");
    if (S > 0) {
      cg_w(c, "    for (long s = 0; s < %lld; s++) {\n", LL(S));
      if (rev) cg_w(c, "      const long t = %lld - s;\n", LL(S - 1));
      else cg_w(c, "      const long t = s;\n");
      cg_w(
          c,
          "      %s(CblasRowMajor, CblasNoTrans, CblasTrans, %lld, %lld, %lld, 1, hs, %lld, x2 + %lld, %lld, 0, hr, %lld);\n",
          gemm_fn(t), LL(B), LL(cols), LL(H), LL(H), LL(d * GH * H), LL(H), LL(GH));
      const char *loop2 = "      for (long b = 0; b < %lld; b++)\n        for (long j = 0; j < %lld; j++) {\n";
      if (cols != GH) {
        cg_w(c, loop2, LL(B), LL(H));
        cg_rnn_phase(&w, &r, d, CG_RNN_RESET, t, "          ");
        cg_w(c, "        }\n");
        cg_w(
            c,
            "      %s(CblasRowMajor, CblasNoTrans, CblasTrans, %lld, %lld, %lld, 1, rh, %lld, x2 + %lld, %lld, 0, hr + %lld, %lld);\n",
            gemm_fn(t), LL(B), LL(H), LL(H), LL(H), LL(d * GH * H + 2 * H * H), LL(H), LL(2 * H), LL(GH));
      }
      cg_w(c, loop2, LL(B), LL(H));
      cg_rnn_phase(&w, &r, d, CG_RNN_GATES, t, "          ");
      cg_w(c, "        }\n    }\n");
    }
    if (r.has_yh || r.has_yc) {
      cg_w(c, loop, LL(B), LL(H));
      cg_rnn_phase(&w, &r, d, CG_RNN_FINI, t, "        ");
      cg_w(c, "      }\n");
    }
    cg_w(c, "  }\n");
  }
  return 0;
}

/* dispatch for this file; the rest is in ops_data.c */
cg_op_fn cg_op_emitter_nn(ir_op op);
cg_op_fn cg_op_emitter_nn(ir_op op) {
  switch (op) {
    case IR_OP_Conv: return emit_conv;
    case IR_OP_ConvTranspose: return emit_conv_transpose;
    case IR_OP_Gemm: return emit_gemm;
    case IR_OP_MatMul: return emit_matmul;
    case IR_OP_RNN:
    case IR_OP_GRU:
    case IR_OP_LSTM: return emit_rnn;
    case IR_OP_MaxPool:
    case IR_OP_AveragePool:
    case IR_OP_LpPool:
    case IR_OP_GlobalAveragePool:
    case IR_OP_GlobalMaxPool:
    case IR_OP_GlobalLpPool: return emit_pool;
    case IR_OP_BatchNormalization: return emit_batchnorm;
    case IR_OP_InstanceNormalization: return emit_instnorm;
    case IR_OP_LayerNormalization: return emit_layernorm;
    case IR_OP_LRN: return emit_lrn;
    case IR_OP_Softmax:
    case IR_OP_LogSoftmax:
    case IR_OP_Hardmax: return emit_softmax;
    case IR_OP_Attention: return cg_emit_attention;
    default: return NULL;
  }
}
