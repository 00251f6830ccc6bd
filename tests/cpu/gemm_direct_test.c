/* tests/cpu/gemm_direct_test.c - runtime/pipert_gemm.h, the direct GEMM of the cpu
 * target's Convs, MatMuls and Gemms: every variant this machine can run (AVX-512, AVX2, portable) gives,
 * bit for bit, the documented sums (fmaf over k in order from 0, then bias, residual,
 * Relu/Clip; the bias one per row or, PIPERT_GEMM_BIAS_COL, one per column), writes
 * nothing outside its M x P block, and agrees with the path it
 * replaces (a bias-filled output, cblas_sgemm with beta 1, then the epilogue) within the
 * error bound of two summation orders, 2 (K + 2) eps sum |terms|: OpenBLAS's edge
 * kernels sum in another order, so not bitwise. Shapes cover row blocks with
 * remainders, masked vector tails, chunk boundaries, strides wider than P, and NaN
 * inputs. Exit 1 if any case fails. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIPERT_KERNELS_INLINE /* the variants themselves, each called here */
#include "pipert_gemm.h"
#include "../lib/unit_rand.h"

typedef void (*gemm_fn)(long, long, long, const float *, const float *, long, const float *, float *, long,
                        const float *, long, int, float, float);

/* the formula of pipert_gemm.h, element by element; S gets the sum of the terms' magnitudes */
static void reference(long M, long P, long K, const float *W, const float *X, long ldx, const float *B, float *Y,
                      long ldy, const float *R, long ldr, int act, float lo, float hi, double *S) {
  for (long m = 0; m < M; m++)
    for (long p = 0; p < P; p++) {
      float v = 0.0f;
      const float *b = B ? B + (act & PIPERT_GEMM_BIAS_COL ? p : m) : NULL;
      double s = (b ? fabs(*b) : 0) + (R ? fabs(R[m * ldr + p]) : 0);
      for (long k = 0; k < K; k++) {
        v = fmaf(W[m * K + k], X[k * ldx + p], v);
        s += fabs((double)W[m * K + k] * X[k * ldx + p]);
      }
      S[m * P + p] = s;
      if (b) v = *b + v;
      if (R) v = v + R[m * ldr + p];
      if ((act & 3) == 1) v = v < 0 ? 0.0f : v;
      if ((act & 3) == 2) {
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
      }
      Y[m * ldy + p] = v;
    }
}

/* the path the emitted code took before: bias fill, sgemm (beta 1, or 0 without bias), epilogue */
static void blas_path(long M, long P, long K, const float *W, const float *X, long ldx, const float *B, float *Y,
                      long ldy, const float *R, long ldr, int act, float lo, float hi) {
  if (B)
    for (long m = 0; m < M; m++)
      for (long p = 0; p < P; p++) Y[m * ldy + p] = B[act & PIPERT_GEMM_BIAS_COL ? p : m];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)P, (int)K, 1, W, (int)K, X, (int)ldx, B ? 1 : 0,
              Y, (int)ldy);
  for (long m = 0; m < M; m++)
    for (long p = 0; p < P; p++) {
      float v = Y[m * ldy + p];
      if (R) v = (float)(v + R[m * ldr + p]);
      if ((act & 3) == 1) v = v < 0 ? (float)0 : v;
      if ((act & 3) == 2) v = v < lo ? lo : v > hi ? hi : v;
      Y[m * ldy + p] = v;
    }
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* bias: 0 none, 1 one per row, 2 one per column (PIPERT_GEMM_BIAS_COL) */
static int check(const char *what, long M, long P, long K, long ldx, long ldy, int bias, int res, int act, int nan,
                 gemm_fn fn, int vs_blas) {
  float *W = malloc(sizeof(float) * (size_t)(M * K)), *X = malloc(sizeof(float) * (size_t)(K * ldx));
  float *B = malloc(sizeof(float) * (size_t)(M > P ? M : P)), *R = malloc(sizeof(float) * (size_t)(M * ldy));
  float *Y = malloc(sizeof(float) * (size_t)(M * ldy)), *Z = malloc(sizeof(float) * (size_t)(M * ldy));
  double *S = malloc(sizeof(double) * (size_t)(M * P));
  rnd_fill(W, M * K);
  rnd_fill(X, K * ldx);
  rnd_fill(B, (M > P ? M : P));
  rnd_fill(R, M * ldy);
  if (nan && K * ldx > 3) X[K * ldx / 3] = NAN;
  for (long i = 0; i < M * ldy; i++) Y[i] = Z[i] = SENTINEL;
  const float lo = act == 2 ? -0.25f : 0.0f, hi = act == 2 ? 0.5f : 0.0f;
  if (bias == 2) act |= PIPERT_GEMM_BIAS_COL;
  reference(M, P, K, W, X, ldx, bias ? B : NULL, Z, ldy, res ? R : NULL, ldy, act, lo, hi, S);
  fn(M, P, K, W, X, ldx, bias ? B : NULL, Y, ldy, res ? R : NULL, ldy, act, lo, hi);
  int bad = 0;
  for (long m = 0; m < M && !bad; m++)
    for (long p = 0; p < ldy && !bad; p++) {
      float y = Y[m * ldy + p], z = Z[m * ldy + p];
      if (p >= P && !same_bits(y, SENTINEL)) {
        fprintf(stderr, "FAIL %s M=%ld P=%ld K=%ld ldy=%ld: wrote outside the block at m=%ld p=%ld\n", what, M, P, K,
                ldy, m, p);
        bad = 1;
      } else if (p < P && !same_bits(y, z) && !(isnan(y) && isnan(z))) {
        fprintf(stderr, "FAIL %s M=%ld P=%ld K=%ld bias=%d res=%d act=%d: y[%ld][%ld] = %.9g, the sums give %.9g\n",
                what, M, P, K, bias, res, act, m, p, y, z);
        bad = 1;
      }
    }
  if (!bad && vs_blas) {
    for (long i = 0; i < M * ldy; i++) Z[i] = SENTINEL;
    blas_path(M, P, K, W, X, ldx, bias ? B : NULL, Z, ldy, res ? R : NULL, ldy, act, lo, hi);
    for (long m = 0; m < M && !bad; m++)
      for (long p = 0; p < P && !bad; p++) {
        float y = Y[m * ldy + p], z = Z[m * ldy + p];
        const double tol = 2.0 * (double)(K + 2) * FLT_EPSILON * S[m * P + p];
        if (!(fabs((double)y - z) <= tol) && !(isnan(y) && isnan(z))) {
          fprintf(stderr,
                  "FAIL %s M=%ld P=%ld K=%ld: y[%ld][%ld] = %.9g, bias fill + cblas_sgemm gives %.9g (bound %.3g)\n",
                  what, M, P, K, m, p, y, z, tol);
          bad = 1;
        }
      }
  }
  free(W);
  free(X);
  free(B);
  free(R);
  free(Y);
  free(Z);
  free(S);
  return bad;
}

/* pipert_gemm_direct_seg: N segments of S positions, X, Y and R each with its own row
 * and segment strides (wider than the rows they hold); bit for bit the sums of each
 * segment apart, nothing written outside the blocks. S < 16 takes the variants without
 * AVX-512 (on a CPU without it, every S does): segment by segment, or for odd S copied
 * together through the scratch. */
static int check_seg(long M, long N, long S, long K, int bias, int res, int act, int nan) {
  const long ldx = S + 3, xs = K * ldx + 5, ldy = S + 2, ys = M * ldy + 7, ldr = S + 1, rs = M * ldr + 11;
  float *W = malloc(sizeof(float) * (size_t)(M * K)), *X = malloc(sizeof(float) * (size_t)(N * xs));
  float *B = malloc(sizeof(float) * (size_t)M), *R = malloc(sizeof(float) * (size_t)(N * rs));
  float *Y = malloc(sizeof(float) * (size_t)(N * ys)), *Z = malloc(sizeof(float) * (size_t)(N * ys));
  float *scr = malloc(sizeof(float) * (size_t)((K + M) * N * S));
  double *T = malloc(sizeof(double) * (size_t)(M * S));
  rnd_fill(W, M * K);
  rnd_fill(X, N * xs);
  rnd_fill(B, M);
  rnd_fill(R, N * rs);
  if (nan) X[N * xs / 2] = NAN;
  for (long i = 0; i < N * ys; i++) Y[i] = Z[i] = SENTINEL;
  const float lo = act == 2 ? -0.25f : 0.0f, hi = act == 2 ? 0.5f : 0.0f;
  for (long n = 0; n < N; n++)
    reference(M, S, K, W, X + n * xs, ldx, bias ? B : NULL, Z + n * ys, ldy, res ? R + n * rs : NULL, ldr, act, lo, hi,
              T);
  pipert_gemm_direct_seg(M, N, S, K, W, X, xs, ldx, bias ? B : NULL, Y, ys, ldy, res ? R : NULL, rs, ldr, act, lo, hi,
                         S % 2 ? scr : NULL);
  int bad = 0;
  for (long i = 0; i < N * ys && !bad; i++)
    if (!same_bits(Y[i], Z[i]) && !(isnan(Y[i]) && isnan(Z[i]))) {
      fprintf(stderr, "FAIL seg M=%ld N=%ld S=%ld K=%ld bias=%d res=%d act=%d: y[%ld] = %.9g, the sums give %.9g\n", M,
              N, S, K, bias, res, act, i, Y[i], Z[i]);
      bad = 1;
    }
  free(W);
  free(X);
  free(B);
  free(R);
  free(Y);
  free(Z);
  free(scr);
  free(T);
  return bad;
}

int main(void) {
  struct {
    const char *name;
    gemm_fn fn;
    int ok;
  } v[4] = {{"portable", pipert_gemm_direct_1, 1},
            {"avx2", NULL, 0},
            {"avx512", NULL, 0},
            {"dispatched", pipert_gemm_direct, 1}};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  v[1].fn = pipert_gemm_direct_256;
  v[1].ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  v[2].fn = pipert_gemm_direct_512;
  v[2].ok = __builtin_cpu_supports("avx512f");
#endif
  static const long Ms[] = {1, 2, 5, 6, 7, 13, 16, 24, 32};
  static const long Ks[] = {1, 3, 16, 27, 144, 384};
  static const long Ps[] = {1, 7, 16, 17, 63, 64, 65, 100, 784};
  long cases = 0, fails = 0;
  for (int i = 0; i < 4; i++) {
    if (!v[i].ok) {
      printf("variant %s: not supported by this CPU, not run\n", v[i].name);
      continue;
    }
    long before = cases;
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
      for (size_t b = 0; b < sizeof Ks / sizeof *Ks; b++)
        for (size_t c = 0; c < sizeof Ps / sizeof *Ps; c++) {
          long M = Ms[a], K = Ks[b], P = Ps[c];
          int sel = (int)(a + b + c);
          long ldx = P + (sel % 3 == 0 ? 5 : 0), ldy = P + (sel % 2 ? 3 : 0);
          fails +=
              check(v[i].name, M, P, K, ldx, ldy, sel % 2 ? 1 + (int)(c % 2) : 0, sel % 4 == 1, sel % 3, 0, v[i].fn, 1);
          cases++;
        }
    /* chunk boundaries (pipert_gemm_chunk), every epilogue, NaN inputs; from the sixth:
     * MatMuls of a weight matrix (rows: tokens, positions: output features, K up to
     * CG_C_DIRECT_K) with a bias per column, the last two with the chunks of X copied
     * compactly first in the AVX2 variant (PIPERT_GEMM_PACK256_LDX, _M) */
    static const long big[][3] = {{24, 3136, 144}, {16, 12544, 32}, {20, 1000, 16},  {96, 196, 384}, {7, 2000, 100},
                                  {130, 384, 128}, {37, 129, 512},  {8, 1000, 1024}, {70, 600, 200}, {64, 1100, 1024}};
    for (size_t s = 0; s < sizeof big / sizeof *big; s++)
      for (int act = 0; act < 3; act++) {
        const int col = s >= 5 ? 2 : 1;
        fails +=
            check(v[i].name, big[s][0], big[s][1], big[s][2], big[s][1], big[s][1], col, act != 1, act, 0, v[i].fn, 1);
        fails += check(v[i].name, big[s][0], big[s][1], big[s][2], big[s][1], big[s][1], act == 0 ? col : 0, 1, act, 1,
                       v[i].fn, 0);
        cases += 2;
      }
    /* the AVX-512 variant's packed chunks (PIPERT_GEMM_PACK512_M, _BYTES): row, position
     * and chunk tails, one partial tile, several chunks, rows of X and Y apart by more
     * than P, with and without NaN */
    static const long packed[][3] = {{134, 196, 256}, {128, 49, 512}, {200, 700, 96}, {131, 300, 1000}};
    for (size_t s = 0; s < sizeof packed / sizeof *packed; s++)
      for (int act = 0; act < 3; act++) {
        const long M = packed[s][0], P = packed[s][1], K = packed[s][2];
        fails += check(v[i].name, M, P, K, P + 37, P + 3, 1 + act % 2, act != 1, act, act == 2, v[i].fn, act != 2);
        cases++;
      }
    printf("variant %s: %ld cases\n", v[i].name, cases - before);
  }
  /* segmented positions: segments shorter than a vector, across a vector, a tile and a
   * chunk's end (pipert_gemm_chunk), row blocks with remainders, every epilogue, NaN */
  static const long seg[][4] = {{7, 3, 9, 16},     {5, 4, 12, 33},    {6, 8, 49, 192},
                                {13, 5, 17, 27},   {128, 8, 49, 192}, {40, 4, 196, 80},
                                {1152, 2, 49, 64}, {24, 3, 64, 72},   {131, 3, 100, 1000}};
  long before = cases;
  for (size_t s = 0; s < sizeof seg / sizeof *seg; s++)
    for (int act = 0; act < 3; act++) {
      fails += check_seg(seg[s][0], seg[s][1], seg[s][2], seg[s][3], act != 2, act != 1, act, 0);
      fails += check_seg(seg[s][0], seg[s][1], seg[s][2], seg[s][3], 1, 1, act, 1);
      cases += 2;
    }
  printf("segmented: %ld cases\n", cases - before);
  printf("%ld cases, %ld failed\n", cases, fails);
  return fails ? 1 : 0;
}
