/* pipecc_cuda_limits.h - the limits of the device runtime's own kernels, in one place for
 * both sides: the code generator (codegen/cuda/ops.c, plain C) decides from them which
 * call it emits, and the runtime (pipecc_cuda_rt.cu) checks them again before it
 * launches the kernel, falling back to cuDNN where they do not hold. Plain C, no CUDA.
 * pipecc copies it into the build directory beside pipecc_cuda.h. */
#ifndef PIPECC_CUDA_LIMITS_H
#define PIPECC_CUDA_LIMITS_H
#include <stdint.h>

/* pk_conv_direct (a Conv on few input channels, a network's stem): a block computes
 * PK_DC_TH x PK_DC_TW output positions of one image for PK_DC_MB output channels, with
 * the weights (PK_DC_TAPS = C * kh * kw taps of PK_DC_MB channels) and the input tile
 * (C rows of (TH - 1) * stride_h + kh, each (TW - 1) * stride_w + kw columns padded to a
 * multiple of stride_w; at most PK_DC_XT floats) in shared memory. */
#define PK_DC_TH 8
#define PK_DC_TW 32
#define PK_DC_MB 32
#define PK_DC_TAPS 160
#define PK_DC_XT 6144

/* The input tile's rows and its columns per stride phase (the kernel's iht and iwq). */
static inline int64_t pk_dc_tile_rows(int64_t kh, int64_t sh) { return (PK_DC_TH - 1) * sh + kh; }
static inline int64_t pk_dc_tile_cols(int64_t kw, int64_t sw) { return ((PK_DC_TW - 1) * sw + kw + sw - 1) / sw; }

/* Whether a 2-D Conv of one group, no dilation, n images of c channels to m channels with
 * a kh x kw kernel of strides sh, sw fits pk_conv_direct: 1, or 0. */
static inline int pk_dc_fits(int64_t n, int64_t c, int64_t m, int64_t kh, int64_t kw, int64_t sh, int64_t sw) {
  if (n < 1 || c < 1 || m < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1) return 0;
  return c * kh * kw <= PK_DC_TAPS && c * pk_dc_tile_rows(kh, sh) * pk_dc_tile_cols(kw, sw) * sw <= PK_DC_XT &&
         n * ((m + PK_DC_MB - 1) / PK_DC_MB) <= 65535;
}
/* The largest v_head_size of pk_attention (its per-lane accumulators: PK_ATTN_DV / 32). */
#define PK_ATTN_DV 256
#endif
