/* pipert_gemm.h - the GEMM that the cpu target's stage code runs for float Convs with
 * few inputs per output (1x1 Convs, and im2col'd ones, whose K is at most
 * CG_C_DIRECT_K in codegen/codegen.h), for MatMuls and Gemms of one B matrix with K up
 * to that (a transformer's projections: W is then the activations, X the weights, read
 * in place where BLAS packs them on every call) and for the small matrices of batched
 * MatMuls (attention's heads: CG_C_DIRECT_MATMUL). stage_K.c includes it where it calls
 * it, for the declarations; the code is compiled once into libpipert
 * (runtime/pipert_kernels.c).
 *
 *   pipert_gemm_direct(M, P, K, W, X, ldx, B, Y, ldy, R, ldr, act, lo, hi)
 *
 * computes, for m < M and p < P,
 *
 *   v = sum over k = 0 .. K-1 of W[m * K + k] * X[k * ldx + p]
 *       (one fused multiply-add per k, in that order, starting from 0)
 *   v = B[m] + v                      (when B is not NULL; B[p] + v with
 *                                      PIPERT_GEMM_BIAS_COL in act: one per column)
 *   v = v + R[m * ldr + p]            (when R is not NULL: a fused residual)
 *   v = v < 0 ? 0 : v                 (act & 3 == 1: Relu)
 *   v = v < lo ? lo : v; v = v > hi ? hi : v   (act & 3 == 2: Clip; infinite bounds allowed)
 *   Y[m * ldy + p] = v
 *
 * which is, bit for bit, what the separate nodes compute from one dot product per output
 * (a bias-filled output, the GEMM accumulating onto it, then Add and Relu/Clip); every
 * Conv that the emitted code sends here goes through this same function however it is
 * fused or staged, so fused and unfused builds, and every stage count, give the same
 * bits. (OpenBLAS's sgemm sums the outputs at a tile edge in another order: the same
 * values within rounding, not the same bits; tests/cpu/gemm_direct_test.c checks both.)
 *
 * Why not sgemm: BLAS packs the activations (the large operand) into its own layout on
 * every call, once per few outputs when M is small, and writes the output twice more
 * (bias fill, epilogue); for a MatMul by a weight matrix it packs the weights on every
 * call (GPT-style model: 7% of its time in sgemm_oncopy). This kernel reads X in
 * place (AVX-512 with many rows: copied compactly as the first row block reads it,
 * PIPERT_GEMM_PACK512_M): a chunk of positions (about 128 KiB of X) at a time, for
 * each block of 6 output rows a register tile of 6 rows x 64 positions (AVX-512: 24
 * accumulators) or 6 x 16 (AVX2: 12), the bias, residual and activation applied as the
 * tile is stored.
 * One variant per instruction set, picked at the call (__builtin_cpu_supports); all
 * use correctly rounded fused multiply-adds, so all give the same bits, the scalar one
 * (fmaf) included. Compiling a stage with
 * -DPIPERT_KERNELS_INLINE -DPIPERT_GEMM_NO_AVX512 skips the AVX-512 variant, to time the AVX2 one. The first
 * row block of each chunk prefetches the next tile's X (AVX-512), which it would
 * otherwise wait for row by row (on the large maps of MobileNetV2's first projections
 * most of all). */
#ifndef PIPERT_GEMM_H
#define PIPERT_GEMM_H

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* act's flag: B holds one bias per column p (a MatMul's or Gemm's bias over its output
 * features) instead of one per row m (a Conv's over its output channels). */
#define PIPERT_GEMM_BIAS_COL 4
/* act's flag: X is a MatMul's B operand (a weight matrix), which the calls before and
 * after this one read too (the emitted code's blocks of rows): the AVX-512 variant packs
 * it only where it does not stay in L2 (PIPERT_GEMM_PACK512_SHARED). */
#define PIPERT_GEMM_X_SHARED 8

#if !defined(PIPERT_KERNELS_INLINE) && !defined(PIPERT_KERNELS_IMPL)
/* libpipert's copy (runtime/pipert_kernels.c, compiled once with the stage code's flags) */
void pipert_gemm_direct(long M, long P, long K, const float *restrict W, const float *restrict X, long ldx,
                        const float *restrict B, float *restrict Y, long ldy, const float *restrict R, long ldr,
                        int act, float lo, float hi);
void pipert_gemm_direct_seg(long M, long N, long S, long K, const float *restrict W, const float *restrict X, long xs,
                            long ldx, const float *restrict B, float *restrict Y, long ys, long ldy,
                            const float *restrict R, long rs, long ldr, int act, float lo, float hi,
                            float *restrict scr);
#else
/* the kernels themselves: in runtime/pipert_kernels.c (PIPERT_KERNELS_IMPL), or static
 * in a file compiled with -DPIPERT_KERNELS_INLINE (the unit tests, tools/gemm_shapes.c,
 * a stage rebuilt with other -DPIPERT_GEMM_* settings) */
#ifdef PIPERT_KERNELS_INLINE
#define PIPERT_GEMM_API __attribute__((unused)) static
#else
#define PIPERT_GEMM_API
#endif

/* Positions per chunk: about PIPERT_GEMM_CHUNK_BYTES of X. */
#ifndef PIPERT_GEMM_CHUNK_BYTES
#define PIPERT_GEMM_CHUNK_BYTES (128 << 10)
#endif
static inline long pipert_gemm_chunk(long K) {
  long pc = (long)(PIPERT_GEMM_CHUNK_BYTES / 4) / (K > 0 ? K : 1);
  pc -= pc % 64;
  return pc < 64 ? 64 : pc;
}

static inline float pipert_gemm_epi1(float v, const float *b, const float *r, int act, float lo, float hi) {
  if (b) v = *b + v;
  if (r) v = v + *r;
  if ((act & 3) == 1) v = v < 0 ? 0.0f : v;
  if ((act & 3) == 2) {
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
  }
  return v;
}

/* The portable variant: the same sums with fmaf, 64 positions of one row at a time. */
static void pipert_gemm_direct_1(long M, long P, long K, const float *restrict W, const float *restrict X, long ldx,
                                 const float *restrict B, float *restrict Y, long ldy, const float *restrict R,
                                 long ldr, int act, float lo, float hi) {
  float acc[64];
  for (long m = 0; m < M; m++)
    for (long p0 = 0; p0 < P; p0 += 64) {
      const long pc = P - p0 < 64 ? P - p0 : 64;
      for (long j = 0; j < pc; j++) acc[j] = 0.0f;
      for (long k = 0; k < K; k++) {
        const float w = W[m * K + k], *xk = X + k * ldx + p0;
        for (long j = 0; j < pc; j++) acc[j] = fmaf(w, xk[j], acc[j]);
      }
      for (long j = 0; j < pc; j++)
        Y[m * ldy + p0 + j] = pipert_gemm_epi1(acc[j], B ? B + (act & PIPERT_GEMM_BIAS_COL ? p0 + j : m) : NULL,
                                               R ? R + m * ldr + p0 + j : NULL, act, lo, hi);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define PIPERT_GEMM_INLINE static inline __attribute__((always_inline))
#ifdef __clang__
#define PIPERT_GEMM_UNROLL _Pragma("unroll")
#else
#define PIPERT_GEMM_UNROLL _Pragma("GCC unroll 8")
#endif
#define PIPERT_GEMM_T512 __attribute__((target("avx512f")))
#define PIPERT_GEMM_T256 __attribute__((target("avx2,fma")))

/* Under AddressSanitizer (the sanitizer suite compiles emitted stages with it) each
 * variant's tile is one function taking its rows and vectors at run time, instead of
 * one inlined, unrolled copy per shape: clang with ASan and UBSan spent about 4 minutes
 * on the copies of every stage that includes this header. The same operations in the
 * same order, so the same bits; only slower. */
#if defined(__SANITIZE_ADDRESS__)
#define PIPERT_GEMM_SAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PIPERT_GEMM_SAN 1
#endif
#endif
#ifdef PIPERT_GEMM_SAN /* (run-time trip counts: nothing to unroll) */
#undef PIPERT_GEMM_UNROLL
#define PIPERT_GEMM_UNROLL
#endif

/* A tile of segmented positions (pipert_gemm_direct_seg): the lanes m1[j] of its vector j
 * go to offset y1[j] of Y's row (r1[j] of R's), the others m2[j], which are in the next
 * segment, to y2[j] (r2[j]). */
typedef struct {
  __mmask16 m1[4], m2[4];
  long y1[4], y2[4], r1[4], r2[4];
} pipert_seg512;

/* AVX-512: mr (1..6, a constant once inlined) rows by 4 vectors of 16 positions; mk[j]
 * masks vector j (all ones but at the end of a row); the first nfull vectors (a constant
 * too) are whole and load and store without their mask (masked loads and stores cost
 * more). Relu is max(0, v) (x86 max
 * returns its second operand unless the first is greater: v < 0 ? 0 : v, NaN and -0
 * kept), Clip max(lo, v) then min(hi, v), the same way round. */
PIPERT_GEMM_T512 PIPERT_GEMM_INLINE void pipert_gemm_tile512(const int mr, const int nv, long K,
                                                             const float *restrict W, const float *restrict X, long ldx,
                                                             const float *restrict B, float *restrict Y, long ldy,
                                                             const float *restrict R, long ldr, int act, float lo,
                                                             float hi, const __mmask16 *mk, int pf, const int nfull,
                                                             float *restrict pw, const pipert_seg512 *sg) {
  __m512 acc[6][4];
  PIPERT_GEMM_UNROLL for (int i = 0; i < mr; i++) PIPERT_GEMM_UNROLL for (int j = 0; j < nv; j++) acc[i][j] =
      _mm512_setzero_ps();
  for (long k = 0; k < K; k++) {
    const float *xk = X + k * ldx;
    if (pf) /* the first row block of a chunk reads X from memory: fetch the next tile's */
      PIPERT_GEMM_UNROLL for (int j = 0; j < 4; j++) _mm_prefetch((const char *)(xk + 64 + 16 * j), _MM_HINT_T0);
    __m512 x[4];
    PIPERT_GEMM_UNROLL for (int j = 0; j < nv; j++) x[j] =
        j < nfull ? _mm512_loadu_ps(xk + 16 * j) : _mm512_maskz_loadu_ps(mk[j], xk + 16 * j);
    if (pw) /* the first row block of a packed chunk: copy the tile's X as it reads it */
      PIPERT_GEMM_UNROLL for (int j = 0; j < nv; j++) _mm512_store_ps(pw + k * 64 + 16 * j, x[j]);
    PIPERT_GEMM_UNROLL for (int i = 0; i < mr; i++) {
      const __m512 w = _mm512_set1_ps(W[i * K + k]);
      PIPERT_GEMM_UNROLL for (int j = 0; j < nv; j++) acc[i][j] = _mm512_fmadd_ps(w, x[j], acc[i][j]);
    }
  }
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi), zero = _mm512_setzero_ps();
  /* B: one bias per row (B[i]), or with PIPERT_GEMM_BIAS_COL one per position (B[16 j + lane]) */
  __m512 bc[4] = {zero, zero, zero, zero}; /* set below where a bias per column is added */
  if (B && (act & PIPERT_GEMM_BIAS_COL))
    PIPERT_GEMM_UNROLL for (int j = 0; j < nv; j++) bc[j] =
        j < nfull ? _mm512_loadu_ps(B + 16 * j) : _mm512_maskz_loadu_ps(mk[j], B + 16 * j);
  PIPERT_GEMM_UNROLL for (int i = 0; i < mr; i++) {
    const __m512 b = _mm512_set1_ps(B && !(act & PIPERT_GEMM_BIAS_COL) ? B[i] : 0.0f);
    PIPERT_GEMM_UNROLL for (int j = 0; j < nv; j++) {
      __m512 v = acc[i][j];
      if (B) v = _mm512_add_ps(act & PIPERT_GEMM_BIAS_COL ? bc[j] : b, v);
      if (R && sg) /* the vector's lanes in two segments */
        v = _mm512_add_ps(v, _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(sg->m1[j], R + i * ldr + sg->r1[j]), sg->m2[j],
                                                  R + i * ldr + sg->r2[j]));
      else if (R)
        v = _mm512_add_ps(
            v, j < nfull ? _mm512_loadu_ps(R + i * ldr + 16 * j) : _mm512_maskz_loadu_ps(mk[j], R + i * ldr + 16 * j));
      if ((act & 3) == 1) v = _mm512_max_ps(zero, v);
      if ((act & 3) == 2) v = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v));
      if (sg) {
        _mm512_mask_storeu_ps(Y + i * ldy + sg->y1[j], sg->m1[j], v);
        _mm512_mask_storeu_ps(Y + i * ldy + sg->y2[j], sg->m2[j], v);
      } else if (j < nfull) _mm512_storeu_ps(Y + i * ldy + 16 * j, v);
      else _mm512_mask_storeu_ps(Y + i * ldy + 16 * j, mk[j], v);
    }
  }
}

/* With at least PIPERT_GEMM_PACK512_M rows of W, and more than PIPERT_GEMM_PACK512_BYTES of
 * X per chunk (which then does not stay in L1), the first row block of each chunk also
 * writes the X it reads into a compact buffer, 64 positions by K per tile, which the
 * other row blocks read instead of X's rows ldx apart: the same products in the same
 * order, so the same bits. Measured on an Intel Xeon with AVX-512 (2026-12-02), 8 calls
 * of one image each, X and W left in L3 as a model leaves them, the median of 15
 * interleaved rounds against reading in place: ResNet-50's 1x1 Convs 1.07-1.29x (1024 x
 * 196 by 256 1.09x, 128 x 3136 by 256 1.29x), M = 128 and 192 by K = 64..256 1.09-1.32x;
 * but M = 24..96 0.80-1.06x (geomean 0.93x): too few row blocks reuse the copy. */
#ifndef PIPERT_GEMM_PACK512_M
#define PIPERT_GEMM_PACK512_M 128
#endif
#ifndef PIPERT_GEMM_PACK512_BYTES
#define PIPERT_GEMM_PACK512_BYTES (32 << 10)
#endif
/* A shared X (PIPERT_GEMM_X_SHARED) is packed only above this size: with their
 * projections' X (192-256 KiB, in L2 from call to call) packed, the GPT- and BERT-style
 * models ran at 0.96-0.98x end to end; alone, BERT-base's shapes (512 x 3072 by 768 and
 * 512 x 768 by 3072, an X of 9 MiB) ran 2.6-3.9x faster packed. */
#ifndef PIPERT_GEMM_PACK512_SHARED
#define PIPERT_GEMM_PACK512_SHARED (1 << 20)
#endif

#ifdef PIPERT_GEMM_SAN
PIPERT_GEMM_T512 __attribute__((noinline)) static void pipert_gemm_tile512_rt(
    int mr, int nv, long K, const float *restrict W, const float *restrict X, long ldx, const float *restrict B,
    float *restrict Y, long ldy, const float *restrict R, long ldr, int act, float lo, float hi, const __mmask16 *mk,
    int pf, int nfull, float *restrict pw, const pipert_seg512 *sg) {
  pipert_gemm_tile512(mr, nv, K, W, X, ldx, B, Y, ldy, R, ldr, act, lo, hi, mk, pf, nfull, pw, sg);
}
#endif

PIPERT_GEMM_T512 static void pipert_gemm_direct_512(long M, long P, long K, const float *restrict W,
                                                    const float *restrict X, long ldx, const float *restrict B,
                                                    float *restrict Y, long ldy, const float *restrict R, long ldr,
                                                    int act, float lo, float hi) {
  const long PC = pipert_gemm_chunk(K), PW = P < PC ? P : PC;
  /* X's chunk packed (see PIPERT_GEMM_PACK512_M): tile t of the chunk at pk + t * 64 * K,
   * 64 floats per k; NULL (X read in place) where it does not pay, or without memory */
  const int pack = M >= PIPERT_GEMM_PACK512_M && 4 * K * PW > PIPERT_GEMM_PACK512_BYTES &&
                   (!(act & PIPERT_GEMM_X_SHARED) || 4 * K * P > PIPERT_GEMM_PACK512_SHARED);
  float *pk = pack ? (float *)aligned_alloc(64, sizeof(float) * (size_t)(K * ((PW + 63) / 64 * 64))) : NULL;
  for (long q0 = 0; q0 < P; q0 += PC) {
    const long qe = P - q0 < PC ? P : q0 + PC;
    for (long m0 = 0; m0 < M; m0 += 6) {
      const float *w = W + m0 * K;
      for (long p0 = q0; p0 < qe; p0 += 64) {
        const float *b = B ? B + (act & PIPERT_GEMM_BIAS_COL ? p0 : m0) : NULL;
        __mmask16 mk[4];
        for (int j = 0; j < 4; j++) {
          const long left = qe - p0 - 16 * j;
          mk[j] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
        }
        /* the first row block packs the tile (pw), the others read the packed copy */
        float *pt = pk ? pk + (p0 - q0) * K : NULL, *pw = m0 == 0 ? pt : NULL;
        const int packed = pt && m0;
        const float *x = packed ? pt : X + p0, *r = R ? R + m0 * ldr + p0 : NULL;
        const long lx = packed ? 64 : ldx;
        float *y = Y + m0 * ldy + p0;
        const int mr = M - m0 < 6 ? (int)(M - m0) : 6, nv = qe - p0 >= 64 ? 4 : (int)((qe - p0 + 15) / 16);
#ifdef PIPERT_GEMM_SAN
        {
          const int full6 = mr == 6, last_whole = mk[nv - 1] == (__mmask16)0xffff;
          const int nvr = full6 ? nv : 4, nf = full6 ? (last_whole ? nv : nv - 1) : 0;
          pipert_gemm_tile512_rt(mr, nvr, K, w, x, lx, b, y, ldy, r, ldr, act, lo, hi, mk, m0 == 0, nf, pw, NULL);
        }
#else
#define PIPERT_T512(MR, NV, NF) \
  pipert_gemm_tile512(MR, NV, K, w, x, lx, b, y, ldy, r, ldr, act, lo, hi, mk, m0 == 0, NF, pw, NULL)
        if (mr == 6) {
          /* full row blocks: as many vectors as the positions need, all whole or the last
           * one partial */
          const int last_whole = mk[nv - 1] == (__mmask16)0xffff;
          switch (nv * 2 + last_whole) {
            case 9: PIPERT_T512(6, 4, 4); break;
            case 8: PIPERT_T512(6, 4, 3); break;
            case 7: PIPERT_T512(6, 3, 3); break;
            case 6: PIPERT_T512(6, 3, 2); break;
            case 5: PIPERT_T512(6, 2, 2); break;
            case 4: PIPERT_T512(6, 2, 1); break;
            case 3: PIPERT_T512(6, 1, 1); break;
            default: PIPERT_T512(6, 1, 0); break;
          }
        } else {
          /* the last rows: 4 vectors, those past the end masked off */
          switch (mr) {
            case 5: PIPERT_T512(5, 4, 0); break;
            case 4: PIPERT_T512(4, 4, 0); break;
            case 3: PIPERT_T512(3, 4, 0); break;
            case 2: PIPERT_T512(2, 4, 0); break;
            default: PIPERT_T512(1, 4, 0); break;
          }
        }
#undef PIPERT_T512
#endif
      }
    }
  }
  free(pk);
}

/* Segmented positions (pipert_gemm_direct_seg), AVX-512: per chunk, its X gathered from
 * the segments into the packed panel of PIPERT_GEMM_PACK512_M (64 positions by K per
 * tile, zero past the end), then every row block reads the panel, and each tile's
 * vectors are stored (and R's read) in one or two masked parts, either side of a
 * segment's end; the same products in the same order as pipert_gemm_direct_512, so the
 * same bits. Returns 0, or -1 without memory for the panel (nothing written). */
#ifndef PIPERT_GEMM_NO_AVX512
PIPERT_GEMM_T512 __attribute__((unused)) static int pipert_gemm_direct_512s(
    long M, long N, long S, long K, const float *restrict W, const float *restrict X, long xs, long ldx,
    const float *restrict B, float *restrict Y, long ys, long ldy, const float *restrict R, long rs, long ldr, int act,
    float lo, float hi) {
  const long P = N * S, PC = pipert_gemm_chunk(K), PW = P < PC ? P : PC, NT = (PW + 63) / 64;
  float *pk = (float *)aligned_alloc(64, sizeof(float) * (size_t)(K * NT * 64));
  pipert_seg512 *sg = (pipert_seg512 *)malloc(sizeof(pipert_seg512) * (size_t)NT);
  if (!pk || !sg) {
    free(pk);
    free(sg);
    return -1;
  }
  const __mmask16 ones = (__mmask16)0xffff, all[4] = {ones, ones, ones, ones};
  for (long q0 = 0; q0 < P; q0 += PC) {
    const long qe = P - q0 < PC ? P : q0 + PC;
    for (long p0 = q0, t = 0; p0 < qe; p0 += 64, t++) {
      /* vector j: positions p .. p + 15, from offset o of segment n on; the lanes past
       * S - o in segment n + 1 */
      long x1[4], x2[4];
      pipert_seg512 *g = &sg[t];
      for (int j = 0; j < 4; j++) {
        const long p = p0 + 16 * j, n = p / S, o = p % S, left = qe - p;
        const __mmask16 in = left >= 16 ? ones : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
        const long split = S - o; /* lanes in segment n */
        g->m1[j] = split >= 16 ? in : (__mmask16)(in & ((1u << split) - 1u));
        g->m2[j] = (__mmask16)(in & ~g->m1[j]);
        x1[j] = n * xs + o;
        g->y1[j] = n * ys + o;
        g->r1[j] = n * rs + o;
        /* (lane L of the vector at offset L - split of segment n + 1) */
        x2[j] = g->m2[j] ? (n + 1) * xs - split : x1[j];
        g->y2[j] = g->m2[j] ? (n + 1) * ys - split : g->y1[j];
        g->r2[j] = g->m2[j] ? (n + 1) * rs - split : g->r1[j];
      }
      float *pt = pk + t * 64 * K;
      for (long k = 0; k < K; k++) {
        const float *xk = X + k * ldx;
        PIPERT_GEMM_UNROLL for (int j = 0; j < 4; j++)
            _mm512_store_ps(pt + k * 64 + 16 * j,
                            _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(g->m1[j], xk + x1[j]), g->m2[j], xk + x2[j]));
      }
    }
    for (long m0 = 0; m0 < M; m0 += 6) {
      const float *w = W + m0 * K, *b = B ? B + m0 : NULL, *r = R ? R + m0 * ldr : NULL;
      float *y = Y + m0 * ldy;
      const int mr = M - m0 < 6 ? (int)(M - m0) : 6;
      for (long p0 = q0, t = 0; p0 < qe; p0 += 64, t++) {
        const float *x = pk + t * 64 * K;
#ifdef PIPERT_GEMM_SAN
        pipert_gemm_tile512_rt(mr, 4, K, w, x, 64, b, y, ldy, r, ldr, act, lo, hi, all, 0, 4, NULL, &sg[t]);
#else
#define PIPERT_T512(MR) pipert_gemm_tile512(MR, 4, K, w, x, 64, b, y, ldy, r, ldr, act, lo, hi, all, 0, 4, NULL, &sg[t])
        switch (mr) {
          case 6: PIPERT_T512(6); break;
          case 5: PIPERT_T512(5); break;
          case 4: PIPERT_T512(4); break;
          case 3: PIPERT_T512(3); break;
          case 2: PIPERT_T512(2); break;
          default: PIPERT_T512(1); break;
        }
#undef PIPERT_T512
#endif
      }
    }
  }
  free(pk);
  free(sg);
  return 0;
}
#endif

/* AVX2: mr rows by 2 vectors of 8 positions; masked loads and stores at a row's end
 * (lane i of mask vector j is on while 8 * j + i < the positions left), plain ones for
 * the first nfull vectors (whole; a constant once inlined). On maps of at least
 * PIPERT_GEMM_PF256_MIN positions the first row block of a chunk prefetches X
 * PIPERT_GEMM_PF256 positions ahead, as the AVX-512 variant does (on an AVX2-only AMD
 * EPYC, cold caches: 16 x 12544 by 32 for 8 images 3.9 -> 2.6-2.9 ms, MobileNetV2's
 * projections on 56x56 and 112x112 maps 15-40% faster per node; on 14x14 and 7x7 maps, whose X
 * is mostly in L2 already, prefetching cost 6-16%). */
#ifndef PIPERT_GEMM_PF256
#define PIPERT_GEMM_PF256 32
#endif
/* X's rows PIPERT_GEMM_PACK256_LDX floats apart or more, with PIPERT_GEMM_PACK256_M
 * rows of W or more: each chunk of X is copied into a compact buffer (ldx = the chunk's
 * width) before the tiles read it; the same products in the same order, so the same
 * bits. A MatMul by a weight matrix of many columns read in place here ran at 51-60
 * GFLOP/s against OpenBLAS's 93-102 (2048 x 3072 by 256, 2048 x 2048 by 512; the tile
 * steps from row to row of X, a page apart and more), and at 95-103 copied, on an AMD
 * EPYC with its AVX-512 variant left out (which reads 4 vectors of a row per step and
 * kept 1.04-1.11x of OpenBLAS there without copying); MobileNetV2's 7x7 layers batched
 * over 8 images (rows of 392) 0.87-0.88x of OpenBLAS in place, 0.97-1.00x copied. */
#ifndef PIPERT_GEMM_PACK256_LDX
#define PIPERT_GEMM_PACK256_LDX 256
#endif
#ifndef PIPERT_GEMM_PACK256_M
#define PIPERT_GEMM_PACK256_M 64
#endif
#ifndef PIPERT_GEMM_PF256_MIN
#define PIPERT_GEMM_PF256_MIN 1024
#endif
PIPERT_GEMM_T256 PIPERT_GEMM_INLINE void pipert_gemm_tile256(const int mr, long K, const float *restrict W,
                                                             const float *restrict X, long ldx, const float *restrict B,
                                                             float *restrict Y, long ldy, const float *restrict R,
                                                             long ldr, int act, float lo, float hi, const __m256i *mk,
                                                             int pf, const int nfull) {
  __m256 acc[6][2];
  PIPERT_GEMM_UNROLL for (int i = 0; i < mr; i++) PIPERT_GEMM_UNROLL for (int j = 0; j < 2; j++) acc[i][j] =
      _mm256_setzero_ps();
  for (long k = 0; k < K; k++) {
    const float *xk = X + k * ldx;
    if (pf) _mm_prefetch((const char *)(xk + PIPERT_GEMM_PF256), _MM_HINT_T0);
    __m256 x[2];
    PIPERT_GEMM_UNROLL for (int j = 0; j < 2; j++) x[j] =
        j < nfull ? _mm256_loadu_ps(xk + 8 * j) : _mm256_maskload_ps(xk + 8 * j, mk[j]);
    PIPERT_GEMM_UNROLL for (int i = 0; i < mr; i++) {
      const __m256 w = _mm256_set1_ps(W[i * K + k]);
      PIPERT_GEMM_UNROLL for (int j = 0; j < 2; j++) acc[i][j] = _mm256_fmadd_ps(w, x[j], acc[i][j]);
    }
  }
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi), zero = _mm256_setzero_ps();
  __m256 bc[2] = {zero, zero}; /* set below where a bias per column is added */
  if (B && (act & PIPERT_GEMM_BIAS_COL))
    PIPERT_GEMM_UNROLL for (int j = 0; j < 2; j++) bc[j] =
        j < nfull ? _mm256_loadu_ps(B + 8 * j) : _mm256_maskload_ps(B + 8 * j, mk[j]);
  PIPERT_GEMM_UNROLL for (int i = 0; i < mr; i++) {
    const __m256 b = _mm256_set1_ps(B && !(act & PIPERT_GEMM_BIAS_COL) ? B[i] : 0.0f);
    PIPERT_GEMM_UNROLL for (int j = 0; j < 2; j++) {
      __m256 v = acc[i][j];
      if (B) v = _mm256_add_ps(act & PIPERT_GEMM_BIAS_COL ? bc[j] : b, v);
      if (R)
        v = _mm256_add_ps(
            v, j < nfull ? _mm256_loadu_ps(R + i * ldr + 8 * j) : _mm256_maskload_ps(R + i * ldr + 8 * j, mk[j]));
      if ((act & 3) == 1) v = _mm256_max_ps(zero, v);
      if ((act & 3) == 2) v = _mm256_min_ps(vhi, _mm256_max_ps(vlo, v));
      if (j < nfull) _mm256_storeu_ps(Y + i * ldy + 8 * j, v);
      else _mm256_maskstore_ps(Y + i * ldy + 8 * j, mk[j], v);
    }
  }
}

#ifdef PIPERT_GEMM_SAN
PIPERT_GEMM_T256 __attribute__((noinline)) static void pipert_gemm_tile256_rt(
    int mr, long K, const float *restrict W, const float *restrict X, long ldx, const float *restrict B,
    float *restrict Y, long ldy, const float *restrict R, long ldr, int act, float lo, float hi, const __m256i *mk,
    int pf, int nfull) {
  pipert_gemm_tile256(mr, K, W, X, ldx, B, Y, ldy, R, ldr, act, lo, hi, mk, pf, nfull);
}
#endif

PIPERT_GEMM_T256 static void pipert_gemm_direct_256(long M, long P, long K, const float *restrict W,
                                                    const float *restrict X, long ldx, const float *restrict B,
                                                    float *restrict Y, long ldy, const float *restrict R, long ldr,
                                                    int act, float lo, float hi) {
  const long PC = pipert_gemm_chunk(K);
  const int pf_map = P >= PIPERT_GEMM_PF256_MIN;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  /* X's rows far apart (a weight matrix of many columns): each chunk copied compactly
   * first, where enough row blocks reuse it (see PIPERT_GEMM_PACK256_LDX) */
  float *pk = ldx >= PIPERT_GEMM_PACK256_LDX && M >= PIPERT_GEMM_PACK256_M
                  ? (float *)malloc(sizeof(float) * (size_t)(K * (P < PC ? P : PC)))
                  : NULL;
  const float *X0 = X;
  const long ldx0 = ldx;
  for (long q0 = 0; q0 < P; q0 += PC) {
    const long qe = P - q0 < PC ? P : q0 + PC;
    if (pk) {
      const long cw = qe - q0;
      for (long k = 0; k < K; k++) memcpy(pk + k * cw, X0 + k * ldx0 + q0, sizeof(float) * (size_t)cw);
      X = pk - q0; /* (positions p0 of the chunk at pk + p0 - q0) */
      ldx = cw;
    }
    for (long m0 = 0; m0 < M; m0 += 6) {
      const float *w = W + m0 * K;
      for (long p0 = q0; p0 < qe; p0 += 16) {
        const float *b = B ? B + (act & PIPERT_GEMM_BIAS_COL ? p0 : m0) : NULL;
        __m256i mk[2];
        for (int j = 0; j < 2; j++) {
          const long left = qe - p0 - 8 * j;
          mk[j] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left > 8 ? 8 : left < 0 ? 0 : left)), lane);
        }
        const float *x = X + p0, *r = R ? R + m0 * ldr + p0 : NULL;
        float *y = Y + m0 * ldy + p0;
        const int nfull = qe - p0 >= 16 ? 2 : qe - p0 >= 8 ? 1 : 0;
#ifdef PIPERT_GEMM_SAN
        pipert_gemm_tile256_rt(M - m0 < 6 ? (int)(M - m0) : 6, K, w, x, ldx, b, y, ldy, r, ldr, act, lo, hi, mk,
                               pf_map && m0 == 0, nfull);
#else
#define PIPERT_T256(MR, NF) \
  pipert_gemm_tile256(MR, K, w, x, ldx, b, y, ldy, r, ldr, act, lo, hi, mk, pf_map &&m0 == 0, NF)
        switch ((M - m0 < 6 ? M - m0 : 6) * 3 + nfull) {
          case 20: PIPERT_T256(6, 2); break;
          case 19: PIPERT_T256(6, 1); break;
          case 18: PIPERT_T256(6, 0); break;
          case 17: PIPERT_T256(5, 2); break;
          case 16: PIPERT_T256(5, 1); break;
          case 15: PIPERT_T256(5, 0); break;
          case 14: PIPERT_T256(4, 2); break;
          case 13: PIPERT_T256(4, 1); break;
          case 12: PIPERT_T256(4, 0); break;
          case 11: PIPERT_T256(3, 2); break;
          case 10: PIPERT_T256(3, 1); break;
          case 9: PIPERT_T256(3, 0); break;
          case 8: PIPERT_T256(2, 2); break;
          case 7: PIPERT_T256(2, 1); break;
          case 6: PIPERT_T256(2, 0); break;
          case 5: PIPERT_T256(1, 2); break;
          case 4: PIPERT_T256(1, 1); break;
          default: PIPERT_T256(1, 0); break;
        }
#undef PIPERT_T256
#endif
      }
    }
  }
  free(pk);
}
#endif

PIPERT_GEMM_API void pipert_gemm_direct(long M, long P, long K, const float *restrict W, const float *restrict X,
                                        long ldx, const float *restrict B, float *restrict Y, long ldy,
                                        const float *restrict R, long ldr, int act, float lo, float hi) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#ifndef PIPERT_GEMM_NO_AVX512
  if (__builtin_cpu_supports("avx512f")) {
    pipert_gemm_direct_512(M, P, K, W, X, ldx, B, Y, ldy, R, ldr, act, lo, hi);
    return;
  }
#endif
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    pipert_gemm_direct_256(M, P, K, W, X, ldx, B, Y, ldy, R, ldr, act, lo, hi);
    return;
  }
#endif
  pipert_gemm_direct_1(M, P, K, W, X, ldx, B, Y, ldy, R, ldr, act, lo, hi);
}

/* pipert_gemm_direct over N segments of S positions (a Conv's images: a 1x1 Conv of
 * several small images as one GEMM, without copying them together first): position
 * p = n S + s of X's row k at X[n * xs + k * ldx + s], of Y's row m at
 * Y[n * ys + m * ldy + s], of R's at R[n * rs + m * ldr + s]; the sums, the bias (one per
 * row) and the epilogue of pipert_gemm_direct, bit for bit. Without AVX-512 (or with
 * S < 16), the segments go through pipert_gemm_direct one by one where scr is NULL, else
 * copied together into scr, (K + M) * N * S floats: X as one [K, N S] matrix, the GEMM
 * into one [M, N S], then scattered with the residual and the activation. (Unused in a
 * stage whose direct GEMMs are all pipert_gemm_direct's.) */
PIPERT_GEMM_API void pipert_gemm_direct_seg(long M, long N, long S, long K, const float *restrict W,
                                            const float *restrict X, long xs, long ldx, const float *restrict B,
                                            float *restrict Y, long ys, long ldy, const float *restrict R, long rs,
                                            long ldr, int act, float lo, float hi, float *restrict scr) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(PIPERT_GEMM_NO_AVX512)
  if (S >= 16 && __builtin_cpu_supports("avx512f") &&
      pipert_gemm_direct_512s(M, N, S, K, W, X, xs, ldx, B, Y, ys, ldy, R, rs, ldr, act, lo, hi) == 0)
    return;
#endif
  if (!scr) {
    for (long n = 0; n < N; n++)
      pipert_gemm_direct(M, S, K, W, X + n * xs, ldx, B, Y + n * ys, ldy, R ? R + n * rs : NULL, ldr, act, lo, hi);
    return;
  }
  const long P = N * S;
  float *col = scr, *yt = scr + K * P;
  for (long n = 0; n < N; n++)
    for (long k = 0; k < K; k++) memcpy(col + k * P + n * S, X + n * xs + k * ldx, sizeof(float) * (size_t)S);
  /* the bias in the GEMM; the residual, then the activation, as the rows are scattered */
  pipert_gemm_direct(M, P, K, W, col, P, B, yt, P, NULL, 0, R ? 0 : act, lo, hi);
  for (long n = 0; n < N; n++)
    for (long m = 0; m < M; m++) {
      float *ym = Y + n * ys + m * ldy;
      const float *tm = yt + m * P + n * S;
      if (!R) {
        memcpy(ym, tm, sizeof(float) * (size_t)S);
        continue;
      }
      const float *rm = R + n * rs + m * ldr;
      for (long s = 0; s < S; s++) ym[s] = pipert_gemm_epi1(tm[s], NULL, rm + s, act, lo, hi);
    }
}

#endif /* the kernels */

#endif
