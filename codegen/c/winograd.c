/* codegen/c/winograd.c - 2-D 3x3 stride-1 Convs by Winograd minimal filtering
 * F(m x m, 3 x 3) for the cpu target; passes/opt/winograd.c chose the Convs and transformed
 * their filters to U = G g G^T ahead of time (the weight input, [a*a, M, C]).
 *
 * With a = m + 2, the output is cut into m x m tiles; each tile needs an a x a input
 * patch d. For every tile and channel the emitted code computes V = B^T d B, and for
 * every tile and output channel the output Y = A^T [sum_c U (.) V] A. The sum over
 * channels for each of the a*a positions of the transformed tile is a GEMM, [M x C] x [C x tiles], done by OpenBLAS
 * (by pipert_gemm_direct where a block holds no more tiles than channels, below):
 * a*a GEMMs of 2*M*C*tiles FLOPs instead of im2col's one GEMM of 2*M*C*9*m*m*tiles, i.e. 9 m^2 / (m + 2)^2 times fewer
 * (2.25 for m = 2, 4 for m = 4). The transforms are straight-line code with the matrices' constants (zeros dropped,
 * ones as adds), each a pass over the rows and then one over the columns of all the tiles
 * of a tile row at once, loops over tiles that the compiler vectorises (one tile at a
 * time, the scalar transforms took 11 of the 16 ms of a 64-channel 56x56 Conv of
 * ResNet-50 at batch 8 on an Intel Xeon). float32 only (the pass prepares nothing else).
 *
 * Memory: tiles are processed in blocks of whole tile rows (over all images), so V and
 * the GEMM results stay within WINO_BYTES of scratch.
 * Everything depends only on the node's shapes, so every stage count gives the same
 * bits; the output gets the bias and then the fused epilogue, the same expressions as
 * separate nodes. */
#include <stdio.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "passes/opt/winograd.h"

#define LL(x) ((long long)(x))
#define WINO_BYTES (8 << 20)

/* n elements rounded up to an odd number of lines of `lines` elements */
static int64_t odd_lines(int64_t n, int64_t lines) { return ((n + lines - 1) / lines | 1) * lines; }

int cg_winograd_fits(const cg_win3 *w, int64_t G, int64_t C, int64_t M, ir_dtype t) {
  if (t != IR_FLOAT || w->sr != 2 || G != 1 || C < 1 || M < 1) return 0;
  if (w->k[1] != 3 || w->k[2] != 3) return 0;
  for (int j = 1; j < 3; j++)
    if (w->s[j] != 1 || w->d[j] != 1 || w->out[j] < 1) return 0;
  return 1;
}

/* One term of a sum: "+ s", "- s" or "+ k * s"; first: no leading "+". */
static void term(cg_ctx *c, int *first, double k, const char *s) {
  char lit[48];
  if (k == 0) return;
  if (k == 1) cg_w(c, "%s%s", *first ? "" : " + ", s);
  else if (k == -1) cg_w(c, "%s%s", *first ? "-" : " - ", s);
  else cg_w(c, "%s%s * %s", *first ? "" : " + ", cg_flit(lit, sizeof lit, k, IR_FLOAT), s);
  *first = 0;
}

/* dst[i] = sum_k X[i*K + k] * src[k] for i < R, one statement each, its terms in the
 * order of k. The transforms B^T d B and A^T q A are two such passes: over the rows of
 * the patch (src[k] = row k, the same column), then over its columns; written in this
 * order either way, every output is the same sum of the same products. */
static void emit_lin(cg_ctx *c, const char *ind, char dst[][96], char src[][96], const double *X, int R, int K) {
  for (int i = 0; i < R; i++) {
    cg_w(c, "%s%s = ", ind, dst[i]);
    int first = 1;
    for (int k = 0; k < K; k++) term(c, &first, X[i * K + k], src[k]);
    cg_w(c, "%s;\n", first ? "0" : "");
  }
}

int cg_emit_conv_winograd(cg_ctx *c, const ir_node *n, const cg_win3 *w, int m, int64_t N, int64_t C, int64_t M,
                          int has_bias, const cg_conv_epi *e) {
  (void)n;
  const char *T = "float";
  const double *BT, *G, *AT;
  pass_winograd_mats(m, &BT, &G, &AT);
  (void)G; /* the pass applied G */
  int a = m + 2, aa = a * a;
  size_t esz = 4;
  int64_t H = w->in[1], W = w->in[2], Ho = w->out[1], Wo = w->out[2];
  int64_t th = (Ho + m - 1) / m, tw = (Wo + m - 1) / m, rows = N * th;
  /* a block: RB tile rows; V [aa][C][P] and Yt [aa][M][P], P = RB * tw */
  int64_t per_row = (int64_t)aa * (C + M) * tw * (int64_t)esz;
  int64_t RB = per_row > 0 ? WINO_BYTES / per_row : rows;
  if (RB < 1) RB = 1;
  if (RB > rows) RB = rows;
  int64_t blocks = (rows + RB - 1) / RB;
  RB = (rows + blocks - 1) / blocks;
  int64_t L = tw * m + 2; /* a padded input row: input columns -pb .. tw*m - pb + 1 */
  /* After the pass over the patch's rows, each row is split by phase: column u at
   * [u % m][u / m], TP apart, so that tile tx's column m*tx + k is element tx + k / m of
   * phase k % m and the pass over the columns reads every tile of a row at once. Rows
   * are RW = m * TP long (the columns past L are computed and never read). */
  int64_t TP = (L + m - 1) / m, RW = m * TP;
  /* The a*a matrices of V and Yt are written and read a*a at a time, one element of
   * each: their distance is padded to an odd number of 64-byte lines, so the a*a streams
   * fall in different cache sets (an exact multiple of 4 KiB would put them all in one). */
  int64_t lines = (int64_t)(64 / esz);
  cg_scratch(c, ((size_t)aa * (odd_lines(C * RB * tw, lines) + odd_lines(M * RB * tw, lines)) +
                 (size_t)(3 * a * RW + m * RW)) *
                    esz);
  cg_w(c,
       "  /* Winograd F(%dx%d, 3x3): %lldx%lld tiles per image, blocks of %lld tile rows; %d GEMMs "
       "[%lld x %lld] x [%lld x tiles] per block */\n",
       m, m, LL(th), LL(tw), LL(RB), aa, LL(M), LL(C), LL(C));
  cg_w(c, "  %s *V = (%s *)scr;                     /* [%d][C][P]: B^T d B, VS apart */\n", T, T, aa);
  cg_w(c, "  %s *Yt = V + %lld;                      /* [%d][M][P], YS apart */\n", T,
       LL((int64_t)aa * odd_lines(C * RB * tw, lines)), aa);
  cg_w(c, "  %s *buf = Yt + %lld;                    /* [%d][%lld]: padded input rows */\n", T,
       LL((int64_t)aa * odd_lines(M * RB * tw, lines)), a, LL(RW));
  cg_w(c, "  %s *sr = buf + %lld;                     /* [%d][%lld]: B^T d */\n", T, LL(a * RW), a, LL(RW));
  cg_w(c, "  %s *sp = sr + %lld;                      /* [%d][%d][%lld]: B^T d by phase */\n", T, LL(a * RW), a, m,
       LL(TP));
  cg_w(c, "  %s *op = sp + %lld;                      /* [%d][%lld]: A^T q A, the output rows */\n", T, LL(a * RW), m,
       LL(RW));
  cg_w(c, "  for (long r0 = 0; r0 < %lld; r0 += %lld) {\n", LL(rows), LL(RB));
  cg_w(c, "    const long nr = %lld - r0 < %lld ? %lld - r0 : %lld;\n", LL(rows), LL(RB), LL(rows), LL(RB));
  cg_w(c, "    const long P = nr * %lld;\n", LL(tw));
  cg_w(c, "    const long VS = ((%lld * P + %lld) / %lld | 1) * %lld, YS = ((%lld * P + %lld) / %lld | 1) * %lld;\n",
       LL(C), LL(lines - 1), LL(lines), LL(lines), LL(M), LL(lines - 1), LL(lines), LL(lines));
  /* input transform */
  cg_w(c, "    for (long ci = 0; ci < %lld; ci++)\n", LL(C));
  cg_w(c, "      for (long rr = 0; rr < nr; rr++) {\n");
  cg_w(c, "        const long r = r0 + rr, img = r / %lld, ty = r %% %lld;\n", LL(th), LL(th));
  cg_w(c, "        const %s *xc = x0 + (img * %lld + ci) * %lld;\n", T, LL(C), LL(H * W));
  cg_w(c, "        for (int k = 0; k < %d; k++) {\n", a);
  cg_w(c, "          const long iy = ty * %d - %lld + k;\n", m, LL(w->pb[1]));
  cg_w(c, "          %s *dst = buf + k * %lld;\n", T, LL(RW));
  cg_w(c, "          if (iy < 0 || iy >= %lld) {\n", LL(H));
  cg_w(c, "            for (long u = 0; u < %lld; u++) dst[u] = 0;\n", LL(RW));
  cg_w(c, "            continue;\n          }\n");
  cg_w(c, "          const %s *src = xc + iy * %lld;\n", T, LL(W));
  cg_w(c, "          for (long u = 0; u < %lld; u++) {\n", LL(RW));
  cg_w(c, "            const long ix = u - %lld;\n", LL(w->pb[2]));
  cg_w(c, "            dst[u] = ix >= 0 && ix < %lld ? src[ix] : 0;\n", LL(W));
  cg_w(c, "          }\n        }\n");
  char dst[36][96], src[8][96];
  /* over the patch's rows, every column at once: sr[i][u] = sum_k B^T[i][k] buf[k][u] */
  cg_w(c, "        PK_IVDEP\n");
  cg_w(c, "        for (long u = 0; u < %lld; u++) {\n", LL(RW));
  for (int i = 0; i < a; i++) snprintf(dst[i], sizeof dst[i], "sr[%lld + u]", LL(i * RW));
  for (int k = 0; k < a; k++) snprintf(src[k], sizeof src[k], "buf[%lld + u]", LL(k * RW));
  emit_lin(c, "          ", dst, src, BT, a, a);
  cg_w(c, "        }\n");
  cg_w(c, "        for (int i = 0; i < %d; i++) {\n", a);
  char spi[48], sri[48];
  snprintf(spi, sizeof spi, "sp + i * %lld", LL(RW));
  snprintf(sri, sizeof sri, "sr + i * %lld", LL(RW));
  cg_emit_phase_split(c, "          ", spi, sri, m, TP);
  cg_w(c, "        }\n");
  /* over the columns, every tile of the row at once: V[i*a + j][tx] = sum_k B^T[j][k]
   * sr[i][m*tx + k] */
  cg_w(c, "        %s *vp = V + ci * P + rr * %lld;\n", T, LL(tw));
  cg_w(c, "        PK_IVDEP\n");
  cg_w(c, "        for (long tx = 0; tx < %lld; tx++) {\n", LL(tw));
  for (int i = 0; i < a; i++) {
    for (int j = 0; j < a; j++) snprintf(dst[j], sizeof dst[j], "vp[%d * VS + tx]", i * a + j);
    for (int k = 0; k < a; k++) snprintf(src[k], sizeof src[k], "sp[%lld + tx]", LL(i * RW + (k % m) * TP + k / m));
    emit_lin(c, "          ", dst, src, BT, a, a);
  }
  cg_w(c, "        }\n      }\n");
  /* the a*a GEMMs */
  cg_w(c, "    for (int e = 0; e < %d; e++)\n", aa);
  /* A block of no more tiles than channels (ResNet-50's layer3 and layer4 at batch 8:
   * [256 x 256] x [256 x 64], [512 x 512] x [512 x 32]): cblas_sgemm would pack the
   * [M x C] filters on every call for a few multiplies per filter element, so
   * pipert_gemm_direct reads them in place (one core of an AMD EPYC, Zen 4, AVX-512,
   * OpenBLAS Cooperlake, 2026-12-01, the least of five --profile-run medians per Conv:
   * 14.4-16.4 ms against 16.7-19.7 in layer3, 11.7 against 18.1-19.6 in layer4). Wider
   * blocks (layer1, layer2: 392 and 196 tiles over 64 and 128 channels) stay with
   * OpenBLAS, the faster there (29.6-30.7 ms against 30.9-37.6, 17.1-21.7 against
   * 19.5-22.6; docs/cpu.md). Either way the sums depend on the shapes alone. */
  if (C <= CG_C_DIRECT_K && RB * tw <= C) {
    c->gemm_direct = 1;
    cg_w(
        c,
        "      pipert_gemm_direct(%lld, P, %lld, x1 + e * %lld, V + e * VS, P, NULL, Yt + e * YS, P, NULL, 0, 0, 0, 0);\n",
        LL(M), LL(C), LL(M * C));
  } else
    cg_w(
        c,
        "      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, %lld, (int)P, %lld, 1, x1 + e * %lld, %lld, V + e * VS, "
        "(int)P, 0, Yt + e * YS, (int)P);\n",
        LL(M), LL(C), LL(M * C), LL(C));
  /* output transform, bias, epilogue */
  cg_w(c, "    for (long mo = 0; mo < %lld; mo++)\n", LL(M));
  cg_w(c, "      for (long rr = 0; rr < nr; rr++) {\n");
  cg_w(c, "        const long r = r0 + rr, img = r / %lld, ty = r %% %lld;\n", LL(th), LL(th));
  cg_w(c, "        const long oy0 = ty * %d, ni = %lld - oy0 < %d ? %lld - oy0 : %d;\n", m, LL(Ho), m, LL(Ho), m);
  cg_w(c, "        %s *yb = y0 + (img * %lld + mo) * %lld + oy0 * %lld;\n", T, LL(M), LL(Ho * Wo), LL(Wo));
  if (e->res)
    cg_w(c, "        const float *rb = x3 + (img * %lld + mo) * %lld + oy0 * %lld;\n", LL(M), LL(Ho * Wo), LL(Wo));
  cg_w(c, "        const %s *yp = Yt + mo * P + rr * %lld;\n", T, LL(tw));
  /* every tile of the row at once: s[i][j] = sum_k A^T[i][k] q[k][j] (q[k][j]: the GEMM
   * results of tile tx), then the output rows, op[i][m*tx + j] = sum_k s[i][k] A^T[j][k] */
  cg_w(c, "        PK_IVDEP\n");
  cg_w(c, "        for (long tx = 0; tx < %lld; tx++) {\n", LL(tw));
  for (int j = 0; j < a; j++) {
    for (int i = 0; i < m; i++) snprintf(dst[i], sizeof dst[i], "const %s s%d_%d", T, i, j);
    for (int k = 0; k < a; k++) snprintf(src[k], sizeof src[k], "yp[%d * YS + tx]", k * a + j);
    emit_lin(c, "          ", dst, src, AT, m, a);
  }
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < m; j++) snprintf(dst[j], sizeof dst[j], "op[%lld + tx * %d]", LL(i * RW + j), m);
    for (int k = 0; k < a; k++) snprintf(src[k], sizeof src[k], "s%d_%d", i, k);
    emit_lin(c, "          ", dst, src, AT, m, a);
  }
  cg_w(c, "        }\n");
  /* the bias and the epilogue, along each output row */
  cg_w(c, "        for (long i = 0; i < ni; i++)\n");
  cg_w(c, "          for (long ox = 0; ox < %lld; ox++) {\n", LL(Wo));
  cg_w(c, "            %s v = op[i * %lld + ox]%s;\n", T, LL(RW), has_bias ? " + x2[mo]" : "");
  char rex[64];
  snprintf(rex, sizeof rex, "rb[i * %lld + ox]", LL(Wo));
  cg_conv_epi_emit(c, e, "            ", "v", rex);
  cg_w(c, "            yb[i * %lld + ox] = v;\n", LL(Wo));
  cg_w(c, "          }\n      }\n");
  cg_w(c, "  }\n");
  return 0;
}
