/* pipert_dw.h - the depthwise Conv of small maps that the cpu target's stage code runs
 * (codegen/c/ops_nn.c, dw_blocked: 2-D, float, maps of at most PIPERT_DW_MAX_POS
 * positions). stage_K.c includes it where it calls it, for the declaration; the code is
 * compiled once into libpipert (runtime/pipert_kernels.c).
 *
 *   pipert_dw(s, np, c0, X, W, B, R, Y, scr)
 *
 * computes np planes j = 0 .. np-1 (plane j: channel ch = (c0 + j) % s->C, input
 * X + j * IH * IW, output Y + j * OH * OW, residual R + j * OH * OW when R is not NULL):
 *
 *   v = B[ch]                               (0 when B is NULL)
 *   v = fma(W[ch * KH * KW + kh * KW + kw], x(oh * sh + kh * dh - ph, ow * sw + kw * dw - pw), v)
 *       for every tap (kh, kw) in that order, x = 0 outside the image (a tap there adds w * 0)
 *   v = v + R[...]                          (when R is not NULL: a fused residual)
 *   v = v < 0 ? 0 : v                       (act 1: Relu)
 *   v = v < lo ? lo : v; v = v > hi ? hi : v   (act 2: Clip)
 *
 * which is, bit for bit, what codegen/c/ops_nn.c's per-channel stencil (emit_dw_channel)
 * computes for every output, so the choice between the two depends on the shape alone.
 * The per-channel stencil pays, on a 7 x 7 map, for copying 7 rows of 7 floats in and out
 * of a bordered image and a 5 x 5 kernel's 25 weights for 49 outputs, its vectors along a
 * row padded to 11; here 16 planes go at once, one per lane: their images transposed into
 * a zero-bordered image of 16-float positions, every output then one vector with one
 * fused multiply-add per tap, and transposed back with the residual and the activation.
 * The AVX-512 variant transposes 16 x 16 blocks with permutes, the AVX2 one each half of
 * the lanes in 8 x 8 blocks with shuffles, and the portable one loops over the lanes.
 * All use correctly rounded fused multiply-adds in the same order: the same bits.
 *
 * scr: pipert_dw_scratch(s) floats, 64-byte aligned. */
#ifndef PIPERT_DW_H
#define PIPERT_DW_H

#include <math.h>
#include <stddef.h>
#include <string.h>

/* maps of at most this many output positions go through pipert_dw (14 x 14; a build of
 * pipecc with -DPIPERT_DW_MAX_POS=0 sends none, to time the two kernels side by side) */
#ifndef PIPERT_DW_MAX_POS
#define PIPERT_DW_MAX_POS 196
#endif

typedef struct {
  long C; /* channels: plane j is channel (c0 + j) % C */
  long IH, IW, OH, OW, KH, KW;
  long sh, sw, dh, dw, ph, pw; /* strides, dilations, leading pads */
  int act;                     /* 0, 1 Relu, 2 Clip to [lo, hi] */
  float lo, hi;
} pipert_dw_shape;

/* the bordered image: rows and columns enough for every tap of every output */
static inline long pipert_dw_ph(const pipert_dw_shape *s) {
  long a = (s->OH - 1) * s->sh + (s->KH - 1) * s->dh + 1, b = s->ph + s->IH;
  return a > b ? a : b;
}
static inline long pipert_dw_pw(const pipert_dw_shape *s) {
  long a = (s->OW - 1) * s->sw + (s->KW - 1) * s->dw + 1, b = s->pw + s->IW;
  return a > b ? a : b;
}
static inline long pipert_dw_r16(long n) { return (n + 15) / 16 * 16; }
/* floats of scratch: the bordered image, the output, the weights, the bias (16 lanes
 * each) and the bordered position of every input position */
static inline long pipert_dw_scratch(const pipert_dw_shape *s) {
  return 16 * (pipert_dw_ph(s) * pipert_dw_pw(s) + pipert_dw_r16(s->OH * s->OW) + s->KH * s->KW + 1) +
         pipert_dw_r16(s->IH * s->IW);
}

#ifndef PIPERT_DW_SIZES_ONLY /* (codegen/c/ops_nn.c sizes the scratch with the above) */
#if !defined(PIPERT_KERNELS_INLINE) && !defined(PIPERT_KERNELS_IMPL)
/* libpipert's copy (runtime/pipert_kernels.c, compiled once with the stage code's flags) */
void pipert_dw(const pipert_dw_shape *s, long np, long c0, const float *X, const float *W, const float *B,
               const float *R, float *Y, float *scr);
#else
/* the kernels themselves: in runtime/pipert_kernels.c (PIPERT_KERNELS_IMPL), or static in
 * a file compiled with -DPIPERT_KERNELS_INLINE (tests/cpu/dw_test.c, a stage rebuilt with
 * other -DPIPERT_DW_* settings) */
#ifdef PIPERT_KERNELS_INLINE
#define PIPERT_DW_API __attribute__((unused)) static
#else
#define PIPERT_DW_API
#endif
static inline float pipert_dw_epi(float v, const float *r, int act, float lo, float hi) {
  if (r) v = v + *r;
  if (act == 1) v = v < 0 ? 0.0f : v;
  if (act == 2) {
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
  }
  return v;
}

/* The scratch's parts, and each input position's bordered one (as an int: the images are
 * small) */
typedef struct {
  float *bp, *bo, *wb, *bb;
  int *at;
  long PW, P, Q;
} pipert_dw_parts;
static inline pipert_dw_parts pipert_dw_split(const pipert_dw_shape *s, float *scr) {
  pipert_dw_parts t;
  const long PH = pipert_dw_ph(s);
  t.PW = pipert_dw_pw(s);
  t.P = s->IH * s->IW;
  t.Q = s->OH * s->OW;
  t.bp = scr;
  t.bo = t.bp + 16 * PH * t.PW;
  t.wb = t.bo + 16 * pipert_dw_r16(t.Q);
  t.bb = t.wb + 16 * s->KH * s->KW;
  t.at = (int *)(t.bb + 16);
  memset(t.bp, 0, sizeof(float) * 16 * PH * t.PW);
  memset(t.bo, 0, sizeof(float) * 16 * pipert_dw_r16(t.Q));
  for (long p = 0; p < t.P; p++) t.at[p] = (int)(((p / s->IW + s->ph) * t.PW + p % s->IW + s->pw) * 16);
  return t;
}

/* The weights and bias of planes c0 + j0 .. + nb - 1, one lane each (0 in the others) */
static inline void pipert_dw_weights(const pipert_dw_shape *s, const pipert_dw_parts *t, long c0, long nb,
                                     const float *W, const float *B) {
  const long KK = s->KH * s->KW;
  long ch = c0 % s->C;
  for (int l = 0; l < 16; l++, ch = ch + 1 == s->C ? 0 : ch + 1) {
    for (long k = 0; k < KK; k++) t->wb[k * 16 + l] = l < nb ? W[ch * KK + k] : 0.0f;
    t->bb[l] = l < nb && B ? B[ch] : 0.0f;
  }
}

#define PIPERT_DW_PORTABLE(NAME, ATTR)                                                                               \
  ATTR static void NAME(const pipert_dw_shape *s, long np, long c0, const float *X, const float *W, const float *B,  \
                        const float *R, float *Y, float *scr) {                                                      \
    pipert_dw_parts t = pipert_dw_split(s, scr);                                                                     \
    const long KH = s->KH, KW = s->KW, PW = t.PW, P = t.P, Q = t.Q;                                                  \
    for (long j0 = 0; j0 < np; j0 += 16) {                                                                           \
      const long nb = np - j0 < 16 ? np - j0 : 16;                                                                   \
      pipert_dw_weights(s, &t, c0 + j0, nb, W, B);                                                                   \
      for (int l = 0; l < 16; l++) {                                                                                 \
        const float *x = X + (j0 + (l < nb ? l : 0)) * P;                                                            \
        for (long p = 0; p < P; p++) t.bp[t.at[p] + l] = l < nb ? x[p] : 0.0f;                                       \
      }                                                                                                              \
      for (long oh = 0; oh < s->OH; oh++)                                                                            \
        for (long ow = 0; ow < s->OW; ow++) {                                                                        \
          float acc[16];                                                                                             \
          for (int l = 0; l < 16; l++) acc[l] = t.bb[l];                                                             \
          for (long kh = 0; kh < KH; kh++)                                                                           \
            for (long kw = 0; kw < KW; kw++) {                                                                       \
              const float *xp = t.bp + ((oh * s->sh + kh * s->dh) * PW + ow * s->sw + kw * s->dw) * 16;              \
              const float *wk = t.wb + (kh * KW + kw) * 16;                                                          \
              for (int l = 0; l < 16; l++) acc[l] = fmaf(wk[l], xp[l], acc[l]);                                      \
            }                                                                                                        \
          float *o = t.bo + (oh * s->OW + ow) * 16;                                                                  \
          for (int l = 0; l < 16; l++) o[l] = acc[l];                                                                \
        }                                                                                                            \
      for (long l = 0; l < nb; l++) {                                                                                \
        float *y = Y + (j0 + l) * Q;                                                                                 \
        const float *r = R ? R + (j0 + l) * Q : NULL;                                                                \
        for (long q = 0; q < Q; q++) y[q] = pipert_dw_epi(t.bo[q * 16 + l], r ? r + q : NULL, s->act, s->lo, s->hi); \
      }                                                                                                              \
    }                                                                                                                \
  }

PIPERT_DW_PORTABLE(pipert_dw_1, )

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define PIPERT_DW_T512 __attribute__((target("avx512f")))
#ifdef __clang__
#define PIPERT_DW_UNROLL _Pragma("unroll")
#define PIPERT_DW_UNROLL16 _Pragma("unroll")
#define PIPERT_DW_UNROLL32 _Pragma("unroll")
#else
#define PIPERT_DW_UNROLL _Pragma("GCC unroll 4")
#define PIPERT_DW_UNROLL16 _Pragma("GCC unroll 16")
#define PIPERT_DW_UNROLL32 _Pragma("GCC unroll 32")
#endif
/* r[i][j] <-> r[j][i]: for each bit b of the index, swap the blocks of b x b whose row has
 * bit b clear and column bit b set with their mirror images, one permute per row. */
PIPERT_DW_T512 static inline void pipert_dw_tr16(__m512 r[16]) {
  /* per bit b: row i's lanes (its own j, or row i + b's j - b: 16 + j - b), row i + b's */
  static const int ix[4][2][16] = {{{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                                    {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
                                   {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                                    {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
                                   {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                                    {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
                                   {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                                    {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}}};
  PIPERT_DW_UNROLL16 for (int k = 0; k < 4; k++) {
    const int b = 1 << k;
    const __m512i il = _mm512_loadu_si512(ix[k][0]), ih = _mm512_loadu_si512(ix[k][1]);
    PIPERT_DW_UNROLL16 for (int i = 0; i < 16; i++) if (!(i & b)) {
      const __m512 a = r[i], c = r[i + b];
      r[i] = _mm512_permutex2var_ps(a, il, c);
      r[i + b] = _mm512_permutex2var_ps(a, ih, c);
    }
  }
}

/* n (1 to 4, a constant once inlined) outputs along a row: x their first tap's input,
 * each next output sx floats on, each next tap dx floats on along a row and dy down */
PIPERT_DW_T512 static inline __attribute__((always_inline)) void pipert_dw_row512(const int n, __m512 bias,
                                                                                  const float *x, const float *wb,
                                                                                  long KH, long KW, long dy, long dx,
                                                                                  long sx, float *o) {
  __m512 a[4] = {bias, bias, bias, bias};
  for (long kh = 0; kh < KH; kh++) {
    const float *xr = x + kh * dy, *wk = wb + kh * KW * 16;
    for (long kw = 0; kw < KW; kw++) {
      const __m512 w = _mm512_loadu_ps(wk + kw * 16);
      const float *xp = xr + kw * dx;
      PIPERT_DW_UNROLL for (int i = 0; i < n; i++) a[i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xp + i * sx), a[i]);
    }
  }
  PIPERT_DW_UNROLL for (int i = 0; i < n; i++) _mm512_storeu_ps(o + i * 16, a[i]);
}

/* n outputs along a row at stride SW, KW taps along the row at dilation 1 (n, KW and SW
 * constants once inlined): each row of taps loads its (n - 1) SW + KW input vectors once
 * and every output and tap that meets one uses it, so a tap costs one load for n fused
 * multiply-adds; the same (kh, kw) order as pipert_dw_row512, the same bits */
PIPERT_DW_T512 static inline __attribute__((always_inline)) void pipert_dw_rowk512(const int n, const int KW,
                                                                                   const int SW, __m512 bias,
                                                                                   const float *x, const float *wb,
                                                                                   long KH, long dy, float *o) {
  /* sized for the largest call: n <= 7 outputs, SW <= 2, KW <= 5, so at most
   * (7 - 1) * 2 + 5 input vectors per row of taps */
  __m512 a[7];
  PIPERT_DW_UNROLL16 for (int i = 0; i < n; i++) a[i] = bias;
  for (long kh = 0; kh < KH; kh++) {
    const float *xr = x + kh * dy, *wk = wb + kh * KW * 16;
    __m512 xv[6 * 2 + 5];
    PIPERT_DW_UNROLL32 for (int j = 0; j < (n - 1) * SW + KW; j++) xv[j] = _mm512_loadu_ps(xr + j * 16);
    PIPERT_DW_UNROLL16 for (int kw = 0; kw < KW; kw++) {
      const __m512 w = _mm512_loadu_ps(wk + kw * 16);
      PIPERT_DW_UNROLL16 for (int i = 0; i < n; i++) a[i] = _mm512_fmadd_ps(w, xv[i * SW + kw], a[i]);
    }
  }
  PIPERT_DW_UNROLL16 for (int i = 0; i < n; i++) _mm512_storeu_ps(o + i * 16, a[i]);
}
/* one output row of OW through pipert_dw_rowk512, in runs of 7, 4, 2 and 1 outputs */
#define PIPERT_DW_ROWK(KW, SW)                                                                                    \
  PIPERT_DW_T512 static void pipert_dw_rowk512_##KW##_##SW(long OW, __m512 bias, const float *x, const float *wb, \
                                                           long KH, long dy, float *o) {                          \
    long ow = 0;                                                                                                  \
    for (; ow + 7 <= OW; ow += 7) pipert_dw_rowk512(7, KW, SW, bias, x + ow * SW * 16, wb, KH, dy, o + ow * 16);  \
    for (; ow + 4 <= OW; ow += 4) pipert_dw_rowk512(4, KW, SW, bias, x + ow * SW * 16, wb, KH, dy, o + ow * 16);  \
    for (; ow + 2 <= OW; ow += 2) pipert_dw_rowk512(2, KW, SW, bias, x + ow * SW * 16, wb, KH, dy, o + ow * 16);  \
    if (ow < OW) pipert_dw_rowk512(1, KW, SW, bias, x + ow * SW * 16, wb, KH, dy, o + ow * 16);                   \
  }
PIPERT_DW_ROWK(3, 1)
PIPERT_DW_ROWK(3, 2)
PIPERT_DW_ROWK(5, 1)
PIPERT_DW_ROWK(5, 2)
typedef void (*pipert_dw_rowk_fn)(long, __m512, const float *, const float *, long, long, float *);

/* pipert_dw_weights for 16 channels in order (no wrap past C): transposed, 16 taps at a time */
PIPERT_DW_T512 static inline void pipert_dw_weights512(const pipert_dw_shape *s, const pipert_dw_parts *t, long c0,
                                                       long nb, const float *W, const float *B) {
  const long KK = s->KH * s->KW, ch = c0 % s->C;
  if (nb < 16 || ch + 16 > s->C) {
    pipert_dw_weights(s, t, c0, nb, W, B);
    return;
  }
  for (long k0 = 0; k0 < KK; k0 += 16) {
    const long left = KK - k0;
    const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
    __m512 r[16];
    PIPERT_DW_UNROLL16 for (int l = 0; l < 16; l++) r[l] = _mm512_maskz_loadu_ps(m, W + (ch + l) * KK + k0);
    pipert_dw_tr16(r);
    PIPERT_DW_UNROLL16 for (int j = 0; j < 16; j++) if (j < left) _mm512_storeu_ps(t->wb + (k0 + j) * 16, r[j]);
  }
  _mm512_storeu_ps(t->bb, B ? _mm512_loadu_ps(B + ch) : _mm512_setzero_ps());
}

PIPERT_DW_T512 static void pipert_dw_512(const pipert_dw_shape *s, long np, long c0, const float *X, const float *W,
                                         const float *B, const float *R, float *Y, float *scr) {
  pipert_dw_parts t = pipert_dw_split(s, scr);
  const long KH = s->KH, KW = s->KW, PW = t.PW, P = t.P, Q = t.Q, OW = s->OW;
  const long sw16 = s->sw * 16, dw16 = s->dw * 16;
  const __m512 zero = _mm512_setzero_ps(), vlo = _mm512_set1_ps(s->lo), vhi = _mm512_set1_ps(s->hi);
  pipert_dw_rowk_fn rowk = NULL;
  if (s->dw == 1 && (s->sw == 1 || s->sw == 2) && (KW == 3 || KW == 5))
    rowk = KW == 3 ? (s->sw == 1 ? pipert_dw_rowk512_3_1 : pipert_dw_rowk512_3_2)
                   : (s->sw == 1 ? pipert_dw_rowk512_5_1 : pipert_dw_rowk512_5_2);
  for (long j0 = 0; j0 < np; j0 += 16) {
    const long nb = np - j0 < 16 ? np - j0 : 16;
    pipert_dw_weights512(s, &t, c0 + j0, nb, W, B);
    /* in: 16 positions of the 16 planes at a time, transposed, each to its bordered place */
    for (long p0 = 0; p0 < P; p0 += 16) {
      const long left = P - p0;
      const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
      __m512 r[16];
      PIPERT_DW_UNROLL16 for (int l = 0; l < 16; l++) r[l] =
          l < nb ? _mm512_maskz_loadu_ps(m, X + (j0 + l) * P + p0) : zero;
      pipert_dw_tr16(r);
      const long n = left < 16 ? left : 16;
      PIPERT_DW_UNROLL16 for (int j = 0; j < 16; j++) if (j < n) _mm512_storeu_ps(t.bp + t.at[p0 + j], r[j]);
    }
    const __m512 bias = _mm512_loadu_ps(t.bb);
    /* every output: the bias, then one fused multiply-add per tap; 3- and 5-wide kernels at
     * stride 1 or 2 and dilation 1 along the row with their inputs loaded once per row of
     * taps, the others up to four outputs at once */
    for (long oh = 0; oh < s->OH; oh++) {
      float *o = t.bo + oh * OW * 16;
      const float *xo = t.bp + oh * s->sh * PW * 16;
      if (rowk) {
        rowk(OW, bias, xo, t.wb, KH, PW * 16 * s->dh, o);
      } else {
        long ow = 0;
        for (; ow + 4 <= OW; ow += 4)
          pipert_dw_row512(4, bias, xo + ow * sw16, t.wb, KH, KW, PW * 16 * s->dh, dw16, sw16, o + ow * 16);
        if (OW - ow == 3)
          pipert_dw_row512(3, bias, xo + ow * sw16, t.wb, KH, KW, PW * 16 * s->dh, dw16, sw16, o + ow * 16);
        else if (OW - ow == 2)
          pipert_dw_row512(2, bias, xo + ow * sw16, t.wb, KH, KW, PW * 16 * s->dh, dw16, sw16, o + ow * 16);
        else if (OW - ow == 1)
          pipert_dw_row512(1, bias, xo + ow * sw16, t.wb, KH, KW, PW * 16 * s->dh, dw16, sw16, o + ow * 16);
      }
    }
    /* out: 16 outputs of the 16 planes at a time, transposed, the residual and the activation */
    for (long q0 = 0; q0 < Q; q0 += 16) {
      const long left = Q - q0;
      const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
      __m512 r[16];
      PIPERT_DW_UNROLL16 for (int j = 0; j < 16; j++) r[j] = _mm512_loadu_ps(t.bo + (q0 + j) * 16);
      pipert_dw_tr16(r);
      PIPERT_DW_UNROLL16 for (int l = 0; l < 16; l++) {
        if (l >= nb) break;
        __m512 v = r[l];
        if (R) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, R + (j0 + l) * Q + q0));
        if (s->act == 1) v = _mm512_max_ps(zero, v);
        if (s->act == 2) v = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v));
        _mm512_mask_storeu_ps(Y + (j0 + l) * Q + q0, m, v);
      }
    }
  }
}

#define PIPERT_DW_T256 __attribute__((target("avx2,fma")))

/* r[i][j] <-> r[j][i] for an 8 x 8 block: pairs of rows interleaved, then pairs of pairs,
 * then the 128-bit halves */
PIPERT_DW_T256 static inline void pipert_dw_tr8(__m256 r[8]) {
  __m256 t[8], u[8];
  PIPERT_DW_UNROLL16 for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  PIPERT_DW_UNROLL16 for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  PIPERT_DW_UNROLL16 for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

/* the first n of 8 lanes: pipert_dw_m8 + 8 - n */
static const int pipert_dw_m8[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
PIPERT_DW_T256 static inline __m256i pipert_dw_mask8(long n) {
  return _mm256_loadu_si256((const __m256i *)(pipert_dw_m8 + 8 - (n < 8 ? n : 8)));
}

/* pipert_dw_row512's sums on 8 of the 16 lanes (x, wb and o point at the first of them;
 * positions and taps stay 16 floats apart) */
PIPERT_DW_T256 static inline __attribute__((always_inline)) void pipert_dw_row256(const int n, __m256 bias,
                                                                                  const float *x, const float *wb,
                                                                                  long KH, long KW, long dy, long dx,
                                                                                  long sx, float *o) {
  __m256 a[4] = {bias, bias, bias, bias};
  for (long kh = 0; kh < KH; kh++) {
    const float *xr = x + kh * dy, *wk = wb + kh * KW * 16;
    for (long kw = 0; kw < KW; kw++) {
      const __m256 w = _mm256_loadu_ps(wk + kw * 16);
      const float *xp = xr + kw * dx;
      PIPERT_DW_UNROLL for (int i = 0; i < n; i++) a[i] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp + i * sx), a[i]);
    }
  }
  PIPERT_DW_UNROLL for (int i = 0; i < n; i++) _mm256_storeu_ps(o + i * 16, a[i]);
}

/* pipert_dw_rowk512 on 8 lanes: n <= 4 outputs (4 accumulators and up to 3 SW + KW = 11
 * input vectors fit AVX2's 16 registers), the same (kh, kw) order */
PIPERT_DW_T256 static inline __attribute__((always_inline)) void pipert_dw_rowk256(const int n, const int KW,
                                                                                   const int SW, __m256 bias,
                                                                                   const float *x, const float *wb,
                                                                                   long KH, long dy, float *o) {
  __m256 a[4];
  PIPERT_DW_UNROLL16 for (int i = 0; i < n; i++) a[i] = bias;
  for (long kh = 0; kh < KH; kh++) {
    const float *xr = x + kh * dy, *wk = wb + kh * KW * 16;
    __m256 xv[3 * 2 + 5];
    PIPERT_DW_UNROLL16 for (int j = 0; j < (n - 1) * SW + KW; j++) xv[j] = _mm256_loadu_ps(xr + j * 16);
    PIPERT_DW_UNROLL16 for (int kw = 0; kw < KW; kw++) {
      const __m256 w = _mm256_loadu_ps(wk + kw * 16);
      PIPERT_DW_UNROLL16 for (int i = 0; i < n; i++) a[i] = _mm256_fmadd_ps(w, xv[i * SW + kw], a[i]);
    }
  }
  PIPERT_DW_UNROLL16 for (int i = 0; i < n; i++) _mm256_storeu_ps(o + i * 16, a[i]);
}
/* one output row of OW on 8 lanes through pipert_dw_rowk256, in runs of 4, 2 and 1 */
#define PIPERT_DW_ROWK256(KW, SW)                                                                                 \
  PIPERT_DW_T256 static void pipert_dw_rowk256_##KW##_##SW(long OW, __m256 bias, const float *x, const float *wb, \
                                                           long KH, long dy, float *o) {                          \
    long ow = 0;                                                                                                  \
    for (; ow + 4 <= OW; ow += 4) pipert_dw_rowk256(4, KW, SW, bias, x + ow * SW * 16, wb, KH, dy, o + ow * 16);  \
    if (ow + 2 <= OW) {                                                                                           \
      pipert_dw_rowk256(2, KW, SW, bias, x + ow * SW * 16, wb, KH, dy, o + ow * 16);                              \
      ow += 2;                                                                                                    \
    }                                                                                                             \
    if (ow < OW) pipert_dw_rowk256(1, KW, SW, bias, x + ow * SW * 16, wb, KH, dy, o + ow * 16);                   \
  }
PIPERT_DW_ROWK256(3, 1)
PIPERT_DW_ROWK256(3, 2)
PIPERT_DW_ROWK256(5, 1)
PIPERT_DW_ROWK256(5, 2)
typedef void (*pipert_dw_rowk256_fn)(long, __m256, const float *, const float *, long, long, float *);

/* pipert_dw_512's passes with 8-float vectors: the same 16-lane scratch, each half of the
 * lanes transposed 8 x 8 and computed on its own (a half with no plane is skipped) */
PIPERT_DW_T256 static void pipert_dw_avx2(const pipert_dw_shape *s, long np, long c0, const float *X, const float *W,
                                          const float *B, const float *R, float *Y, float *scr) {
  pipert_dw_parts t = pipert_dw_split(s, scr);
  const long KH = s->KH, KW = s->KW, PW = t.PW, P = t.P, Q = t.Q, OW = s->OW;
  const long sw16 = s->sw * 16, dw16 = s->dw * 16;
  const __m256 zero = _mm256_setzero_ps(), vlo = _mm256_set1_ps(s->lo), vhi = _mm256_set1_ps(s->hi);
  pipert_dw_rowk256_fn rowk = NULL;
  if (s->dw == 1 && (s->sw == 1 || s->sw == 2) && (KW == 3 || KW == 5))
    rowk = KW == 3 ? (s->sw == 1 ? pipert_dw_rowk256_3_1 : pipert_dw_rowk256_3_2)
                   : (s->sw == 1 ? pipert_dw_rowk256_5_1 : pipert_dw_rowk256_5_2);
  for (long j0 = 0; j0 < np; j0 += 16) {
    const long nb = np - j0 < 16 ? np - j0 : 16;
    pipert_dw_weights(s, &t, c0 + j0, nb, W, B);
    for (int h = 0; h < 2 && 8 * h < nb; h++) {
      const long j1 = j0 + 8 * h, nh = nb - 8 * h < 8 ? nb - 8 * h : 8;
      /* in: 8 positions of 8 planes at a time, transposed, each to its bordered place */
      for (long p0 = 0; p0 < P; p0 += 8) {
        const __m256i m = pipert_dw_mask8(P - p0);
        __m256 r[8];
        PIPERT_DW_UNROLL16 for (int l = 0; l < 8; l++) r[l] =
            l < nh ? _mm256_maskload_ps(X + (j1 + l) * P + p0, m) : zero;
        pipert_dw_tr8(r);
        const long n = P - p0 < 8 ? P - p0 : 8;
        PIPERT_DW_UNROLL16 for (int j = 0; j < 8; j++) if (j < n) _mm256_storeu_ps(t.bp + t.at[p0 + j] + 8 * h, r[j]);
      }
      const __m256 bias = _mm256_loadu_ps(t.bb + 8 * h);
      const float *wb = t.wb + 8 * h;
      for (long oh = 0; oh < s->OH; oh++) {
        float *o = t.bo + oh * OW * 16 + 8 * h;
        const float *xo = t.bp + oh * s->sh * PW * 16 + 8 * h;
        if (rowk) {
          rowk(OW, bias, xo, wb, KH, PW * 16 * s->dh, o);
        } else {
          long ow = 0;
          for (; ow + 4 <= OW; ow += 4)
            pipert_dw_row256(4, bias, xo + ow * sw16, wb, KH, KW, PW * 16 * s->dh, dw16, sw16, o + ow * 16);
          if (OW - ow == 3)
            pipert_dw_row256(3, bias, xo + ow * sw16, wb, KH, KW, PW * 16 * s->dh, dw16, sw16, o + ow * 16);
          else if (OW - ow == 2)
            pipert_dw_row256(2, bias, xo + ow * sw16, wb, KH, KW, PW * 16 * s->dh, dw16, sw16, o + ow * 16);
          else if (OW - ow == 1)
            pipert_dw_row256(1, bias, xo + ow * sw16, wb, KH, KW, PW * 16 * s->dh, dw16, sw16, o + ow * 16);
        }
      }
      /* out: 8 outputs of 8 planes at a time, transposed, the residual and the activation */
      for (long q0 = 0; q0 < Q; q0 += 8) {
        const __m256i m = pipert_dw_mask8(Q - q0);
        __m256 r[8];
        PIPERT_DW_UNROLL16 for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(t.bo + (q0 + j) * 16 + 8 * h);
        pipert_dw_tr8(r);
        PIPERT_DW_UNROLL16 for (int l = 0; l < 8; l++) {
          if (l >= nh) break;
          __m256 v = r[l];
          if (R) v = _mm256_add_ps(v, _mm256_maskload_ps(R + (j1 + l) * Q + q0, m));
          if (s->act == 1) v = _mm256_max_ps(zero, v);
          if (s->act == 2) v = _mm256_min_ps(vhi, _mm256_max_ps(vlo, v));
          _mm256_maskstore_ps(Y + (j1 + l) * Q + q0, m, v);
        }
      }
    }
  }
}
#endif

PIPERT_DW_API void pipert_dw(const pipert_dw_shape *s, long np, long c0, const float *X, const float *W, const float *B,
                             const float *R, float *Y, float *scr) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#ifndef PIPERT_DW_NO_AVX512
  if (__builtin_cpu_supports("avx512f")) {
    pipert_dw_512(s, np, c0, X, W, B, R, Y, scr);
    return;
  }
#endif
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    pipert_dw_avx2(s, np, c0, X, W, B, R, Y, scr);
    return;
  }
#endif
  pipert_dw_1(s, np, c0, X, W, B, R, Y, scr);
}
#endif /* the kernels */
#endif /* PIPERT_DW_SIZES_ONLY */

#endif
