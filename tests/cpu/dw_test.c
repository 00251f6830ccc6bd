/* tests/cpu/dw_test.c - runtime/pipert_dw.h, the depthwise Conv of small maps: every
 * variant this machine can run (AVX-512, AVX2, portable) gives, bit for bit, the
 * documented sums (the bias, then fmaf over the taps in (kh, kw) order with 0 outside the
 * image, then the residual and Relu/Clip), writes nothing outside its np output planes,
 * and leaves its inputs as they were. Shapes cover 3x3 and 5x5 kernels, strides 1 and 2,
 * a dilation, asymmetric and no pads, plane counts that are not multiples of 16 (a
 * partial last block), a channel offset (the fused expansion's blocks), maps of 1 x 1 to
 * 14 x 14 positions, negative zeros, and NaN and infinite inputs. Exit 1 if any case
 * fails. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIPERT_KERNELS_INLINE /* the variants themselves, each called here */
#include "pipert_dw.h"
#include "../lib/unit_rand.h"

typedef void (*dw_fn)(const pipert_dw_shape *, long, long, const float *, const float *, const float *, const float *,
                      float *, float *);

/* the formula of pipert_dw.h, output by output */
static void reference(const pipert_dw_shape *s, long np, long c0, const float *X, const float *W, const float *B,
                      const float *R, float *Y) {
  for (long j = 0; j < np; j++) {
    const long ch = (c0 + j) % s->C;
    for (long oh = 0; oh < s->OH; oh++)
      for (long ow = 0; ow < s->OW; ow++) {
        float v = B ? B[ch] : 0.0f;
        for (long kh = 0; kh < s->KH; kh++)
          for (long kw = 0; kw < s->KW; kw++) {
            const long ih = oh * s->sh + kh * s->dh - s->ph, iw = ow * s->sw + kw * s->dw - s->pw;
            const float x = ih >= 0 && ih < s->IH && iw >= 0 && iw < s->IW ? X[(j * s->IH + ih) * s->IW + iw] : 0.0f;
            v = fmaf(W[(ch * s->KH + kh) * s->KW + kw], x, v);
          }
        const long q = j * s->OH * s->OW + oh * s->OW + ow;
        if (R) v = v + R[q];
        if (s->act == 1) v = v < 0 ? 0.0f : v;
        if (s->act == 2) {
          v = v < s->lo ? s->lo : v;
          v = v > s->hi ? s->hi : v;
        }
        Y[q] = v;
      }
  }
}

static int run_case(const char *vname, dw_fn fn, long C, long np, long c0, long IH, long IW, long K, long st, long dil,
                    long pb, long pe, int bias, int res, int act, int special) {
  pipert_dw_shape s = {0};
  s.C = C;
  s.IH = IH;
  s.IW = IW;
  s.KH = s.KW = K;
  s.sh = s.sw = st;
  s.dh = s.dw = dil;
  s.ph = s.pw = pb;
  s.OH = (IH + pb + pe - dil * (K - 1) - 1) / st + 1;
  s.OW = (IW + pb + pe - dil * (K - 1) - 1) / st + 1;
  s.act = act;
  s.lo = -0.25f;
  s.hi = 0.5f;
  const long P = IH * IW, Q = s.OH * s.OW;
  float *X = malloc(sizeof(float) * (size_t)(np * P)), *X0 = malloc(sizeof(float) * (size_t)(np * P));
  float *W = malloc(sizeof(float) * (size_t)(C * K * K)), *B = malloc(sizeof(float) * (size_t)C);
  float *R = malloc(sizeof(float) * (size_t)(np * Q)), *Y = malloc(sizeof(float) * (size_t)(np * Q + 32));
  float *E = malloc(sizeof(float) * (size_t)(np * Q));
  float *scr = aligned_alloc(64, (size_t)pipert_dw_r16(pipert_dw_scratch(&s)) * sizeof(float));
  rnd_fill(X, np * P);
  rnd_fill(W, C * K * K);
  rnd_fill(B, C);
  rnd_fill(R, np * Q);
  if (special) { /* signed zeros everywhere in plane 0; a NaN and an infinity in plane 1 */
    for (long i = 0; i < P; i++) X[i] = -0.0f;
    if (B) B[c0 % C] = -0.0f;
    if (np > 1) {
      X[P + P / 2] = NAN;
      X[P + P - 1] = INFINITY;
    }
  }
  memcpy(X0, X, sizeof(float) * (size_t)(np * P));
  for (long i = 0; i < np * Q + 32; i++) Y[i] = SENTINEL;
  reference(&s, np, c0, X, W, bias ? B : NULL, res ? R : NULL, E);
  fn(&s, np, c0, X, W, bias ? B : NULL, res ? R : NULL, Y, scr);
  int bad = 0;
  for (long i = 0; i < np * Q && !bad; i++) {
    uint32_t a, b;
    memcpy(&a, &Y[i], 4);
    memcpy(&b, &E[i], 4);
    if (a != b && !(isnan(Y[i]) && isnan(E[i]))) {
      printf(
          "FAIL %s C=%ld np=%ld c0=%ld %ldx%ld k%ld s%ld d%ld pads %ld,%ld bias %d res %d act %d: "
          "output %ld is %.9g, expected %.9g\n",
          vname, C, np, c0, IH, IW, K, st, dil, pb, pe, bias, res, act, i, Y[i], E[i]);
      bad = 1;
    }
  }
  for (long i = np * Q; i < np * Q + 32 && !bad; i++)
    if (Y[i] != SENTINEL) {
      printf("FAIL %s: wrote past its output (float %ld)\n", vname, i);
      bad = 1;
    }
  if (!bad && memcmp(X, X0, sizeof(float) * (size_t)(np * P))) {
    printf("FAIL %s: changed its input\n", vname);
    bad = 1;
  }
  free(X);
  free(X0);
  free(W);
  free(B);
  free(R);
  free(Y);
  free(E);
  free(scr);
  return bad;
}

int main(void) {
  struct {
    const char *name;
    dw_fn fn;
  } v[3] = {{"portable", pipert_dw_1}};
  int nv = 1;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    v[nv++] = (__typeof__(v[0])){"avx2", pipert_dw_avx2};
  if (__builtin_cpu_supports("avx512f")) v[nv++] = (__typeof__(v[0])){"avx512", pipert_dw_512};
#endif
  /* C, np, c0, IH, IW, K, stride, dilation, pad begin, pad end */
  static const long cases[][10] = {
      {32, 32, 0, 7, 7, 3, 1, 1, 1, 1},   {1152, 40, 16, 7, 7, 5, 1, 1, 2, 2}, {24, 37, 5, 14, 14, 3, 2, 1, 0, 1},
      {20, 20, 0, 14, 14, 3, 1, 1, 1, 1}, {17, 17, 3, 9, 11, 3, 1, 2, 2, 2},   {16, 5, 0, 1, 1, 3, 1, 1, 1, 1},
      {48, 48, 0, 14, 14, 5, 2, 1, 2, 2}, {8, 24, 0, 6, 5, 3, 1, 1, 0, 0},     {64, 33, 31, 4, 4, 5, 1, 1, 2, 2},
  };
  int fails = 0, n = 0;
  for (int k = 0; k < nv; k++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
      for (int f = 0; f < 6; f++) {
        const long *a = cases[c];
        const int bias = f != 1, res = f >= 3, act = f % 3, special = f == 5;
        fails += run_case(v[k].name, v[k].fn, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], bias, res,
                          act, special);
        n++;
      }
  /* the dispatch: what the stage code calls */
  fails += run_case("pipert_dw", pipert_dw, 96, 96, 0, 7, 7, 3, 1, 1, 1, 1, 1, 1, 1, 0);
  printf("dw: %d variant%s (", nv, nv == 1 ? "" : "s");
  for (int k = 0; k < nv; k++) printf("%s%s", k ? ", " : "", v[k].name);
  printf("), %d cases: %s\n", n + 1, fails ? "FAILED" : "all bitwise equal to the reference");
  return fails ? 1 : 0;
}
