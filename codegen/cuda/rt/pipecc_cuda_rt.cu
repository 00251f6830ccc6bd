/* pipecc_cuda_rt.cu - the device runtime of a pipecc cuda build (see pipecc_cuda.h).
 * Compiled once per build; independent of the model. */
#include <cublas_v2.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecc_cuda.h"

/* ---- errors ------------------------------------------------------------------------ */

static const char *unit_name(pk_stage *S) {
  if (S->unit >= 0 && S->unit < S->info->n_units) return S->info->unit_names[S->unit];
  return "setup";
}

extern "C" int pk_fail(pk_stage *S, const char *what, const char *detail) {
  fprintf(stderr, "pipeline: %s: %s: %s: %s\n", S->where, unit_name(S), what, detail ? detail : "failed");
  return 1;
}

static int cu_ok(pk_stage *S, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  pk_fail(S, what, cudaGetErrorString(e));
  return 0;
}
static int dnn_ok(pk_stage *S, cudnnStatus_t e, const char *what) {
  if (e == CUDNN_STATUS_SUCCESS) return 1;
  pk_fail(S, what, cudnnGetErrorString(e));
  return 0;
}
static int blas_ok(pk_stage *S, cublasStatus_t e, const char *what) {
  if (e == CUBLAS_STATUS_SUCCESS) return 1;
  pk_fail(S, what, cublasGetStatusString(e));
  return 0;
}

extern "C" int pk_check_launch(pk_stage *S) {
  cudaError_t e = cudaGetLastError();
  return cu_ok(S, e, "kernel launch") ? 0 : 1;
}

extern "C" unsigned pk_grid(int64_t n) {
  int64_t b = (n + PK_THREADS - 1) / PK_THREADS;
  if (b < 1) b = 1;
  if (b > 65536) b = 65536;
  return (unsigned)b;
}

#define GRID_LOOP(i, n) for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---- convolution (cuDNN) ---------------------------------------------------------------- */

struct pk_conv_s {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnConvolutionFwdAlgo_t algo;
  size_t ws;
  cudnnDataType_t dt;
};

/* Workspace limit for one convolution's algorithm. */
#define PK_CONV_WS_LIMIT ((size_t)1 << 30)

static int conv_setup(pk_stage *S, struct pk_conv_s *c, const pk_conv_p *p) {
  cudnnHandle_t h = (cudnnHandle_t)S->cudnn;
  c->dt = p->dtype == PK_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  /* 4-D descriptors for 1-D and 2-D convolutions (a leading 1), 5-D for 3-D */
  int nd = p->sr == 3 ? 3 : 2, off = 3 - nd;
  int xd[5], yd[5], wd[5], xs[5], ys[5], pad[3], str[3], dil[3];
  xd[0] = p->n, xd[1] = p->c, yd[0] = p->n, yd[1] = p->m, wd[0] = p->m, wd[1] = p->c / p->groups;
  for (int i = 0; i < nd; i++) {
    xd[2 + i] = p->in[off + i];
    yd[2 + i] = p->out[off + i];
    wd[2 + i] = p->k[off + i];
    pad[i] = p->pad[off + i];
    str[i] = p->stride[off + i];
    dil[i] = p->dil[off + i];
  }
  xs[nd + 1] = ys[nd + 1] = 1;
  for (int i = nd; i >= 0; i--) {
    xs[i] = xs[i + 1] * xd[i + 1];
    ys[i] = ys[i + 1] * yd[i + 1];
  }
  if (!dnn_ok(S, cudnnCreateTensorDescriptor(&c->x), "cudnnCreateTensorDescriptor") ||
      !dnn_ok(S, cudnnCreateTensorDescriptor(&c->y), "cudnnCreateTensorDescriptor") ||
      !dnn_ok(S, cudnnCreateFilterDescriptor(&c->w), "cudnnCreateFilterDescriptor") ||
      !dnn_ok(S, cudnnCreateConvolutionDescriptor(&c->conv), "cudnnCreateConvolutionDescriptor"))
    return 1;
  if (!dnn_ok(S, cudnnSetTensorNdDescriptor(c->x, c->dt, nd + 2, xd, xs), "cudnnSetTensorNdDescriptor(x)") ||
      !dnn_ok(S, cudnnSetTensorNdDescriptor(c->y, c->dt, nd + 2, yd, ys), "cudnnSetTensorNdDescriptor(y)") ||
      !dnn_ok(S, cudnnSetFilterNdDescriptor(c->w, c->dt, CUDNN_TENSOR_NCHW, nd + 2, wd), "cudnnSetFilterNdDescriptor") ||
      !dnn_ok(S, cudnnSetConvolutionNdDescriptor(c->conv, nd, pad, str, dil, CUDNN_CROSS_CORRELATION, c->dt),
              "cudnnSetConvolutionNdDescriptor") ||
      !dnn_ok(S, cudnnSetConvolutionGroupCount(c->conv, p->groups), "cudnnSetConvolutionGroupCount"))
    return 1;
  /* TF32 allowed: default math; exact float32: FMA math only */
  cudnnMathType_t math = (S->tf32 || p->dtype != PK_F32) ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  if (!dnn_ok(S, cudnnSetConvolutionMathType(c->conv, math), "cudnnSetConvolutionMathType")) return 1;
  int outd[5];
  if (!dnn_ok(S, cudnnGetConvolutionNdForwardOutputDim(c->conv, c->x, c->w, nd + 2, outd),
              "cudnnGetConvolutionNdForwardOutputDim"))
    return 1;
  for (int i = 0; i < nd + 2; i++)
    if (outd[i] != yd[i]) return pk_fail(S, "convolution", "cuDNN's output shape differs from the model's");
  /* algorithm: cuDNN's heuristics, once; the first that fits the workspace limit */
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  if (!dnn_ok(S, cudnnGetConvolutionForwardAlgorithm_v7(h, c->x, c->w, c->conv, c->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                        &found, perf),
              "cudnnGetConvolutionForwardAlgorithm_v7"))
    return 1;
  int pick = -1;
  /* never ALLOW_CONVERSION (float16 down-conversion); with --no-tf32 the descriptor
   * keeps FMA math, which is what the chosen algorithm then runs with */
  for (int i = 0; i < found && pick < 0; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= PK_CONV_WS_LIMIT &&
        perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
      pick = i;
  if (pick < 0) return pk_fail(S, "cudnnGetConvolutionForwardAlgorithm_v7", "no usable algorithm");
  c->algo = perf[pick].algo;
  if (math == CUDNN_DEFAULT_MATH &&
      !dnn_ok(S, cudnnSetConvolutionMathType(c->conv, perf[pick].mathType), "cudnnSetConvolutionMathType"))
    return 1;
  if (!dnn_ok(S, cudnnGetConvolutionForwardWorkspaceSize(h, c->x, c->w, c->conv, c->y, c->algo, &c->ws),
              "cudnnGetConvolutionForwardWorkspaceSize"))
    return 1;
  if (c->ws > S->ws_bytes) S->ws_bytes = c->ws;
  return 0;
}

extern "C" int pk_conv(pk_stage *S, int idx, const void *x, const void *w, void *y) {
  struct pk_conv_s *c = &S->conv[idx];
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  const void *al = c->dt == CUDNN_DATA_DOUBLE ? (const void *)&one : (const void *)&onef;
  const void *be = c->dt == CUDNN_DATA_DOUBLE ? (const void *)&zero : (const void *)&zerof;
  return dnn_ok(S, cudnnConvolutionForward((cudnnHandle_t)S->cudnn, al, c->x, x, c->w, w, c->conv, c->algo, S->ws,
                                           c->ws, be, c->y, y),
                "cudnnConvolutionForward")
             ? 0
             : 1;
}

template <typename T>
__global__ void k_bias(T *y, const T *b, int64_t c, int64_t sp, int64_t total) {
  GRID_LOOP(i, total) y[i] += b[(i / sp) % c];
}

extern "C" int pk_bias(pk_stage *S, int dtype, void *y, const void *b, int64_t n, int64_t c, int64_t sp) {
  int64_t t = n * c * sp;
  if (dtype == PK_F64) k_bias<double><<<pk_grid(t), PK_THREADS, 0, S->stream>>>((double *)y, (const double *)b, c, sp, t);
  else k_bias<float><<<pk_grid(t), PK_THREADS, 0, S->stream>>>((float *)y, (const float *)b, c, sp, t);
  return pk_check_launch(S);
}

/* ---- GEMM (cuBLAS) ------------------------------------------------------------------------ */

extern "C" int pk_gemm(pk_stage *S, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                       const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, double beta,
                       void *c, int64_t ldc, int64_t sc, int64_t batch) {
  /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap operands */
  cublasHandle_t h = (cublasHandle_t)S->cublas;
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff || batch > 0x7fffffff)
    return pk_fail(S, "cublasGemmStridedBatchedEx", "dimension too large");
  if (dtype == PK_F64) {
    return blas_ok(S,
                   cublasGemmStridedBatchedEx(h, ob, oa, (int)n, (int)m, (int)k, &alpha, b, CUDA_R_64F, (int)ldb, sb,
                                              a, CUDA_R_64F, (int)lda, sa, &beta, c, CUDA_R_64F, (int)ldc, sc,
                                              (int)batch, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx")
               ? 0
               : 1;
  }
  float af = (float)alpha, bf = (float)beta;
  return blas_ok(S,
                 cublasGemmStridedBatchedEx(h, ob, oa, (int)n, (int)m, (int)k, &af, b, CUDA_R_32F, (int)ldb, sb, a,
                                            CUDA_R_32F, (int)lda, sa, &bf, c, CUDA_R_32F, (int)ldc, sc, (int)batch,
                                            S->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx")
             ? 0
             : 1;
}

/* ---- data movement ---------------------------------------------------------------------------- */

template <typename T>
__global__ void k_copy(pk_copy_p p, const T *__restrict__ x, T *__restrict__ y, int64_t total) {
  GRID_LOOP(i, total) {
    int64_t r = i, off = p.base;
    bool in = true;
    for (int d = p.rank - 1; d >= 0; d--) {
      int64_t o = r % p.ydims[d];
      r /= p.ydims[d];
      int64_t j = o - p.pb[d], D = p.xd[d];
      if (p.mode != PK_PAD_NONE && (j < 0 || j >= D)) {
        switch (p.mode) {
          case PK_PAD_CONST: in = false; break;
          case PK_PAD_EDGE: j = j < 0 ? 0 : D - 1; break;
          case PK_PAD_REFLECT:
            if (D == 1) j = 0;
            else
              while (j < 0 || j >= D) j = j < 0 ? -j : 2 * (D - 1) - j;
            break;
          default: j = ((j % D) + D) % D; break;
        }
      }
      off += j * p.xs[d];
    }
    T v;
    if (in) v = x[off];
    else memcpy(&v, &p.value, sizeof(T));
    y[i] = v;
  }
}

extern "C" int pk_copy(pk_stage *S, const pk_copy_p *p, const void *x, void *y) {
  int64_t t = 1;
  for (int d = 0; d < p->rank; d++) t *= p->ydims[d];
  if (t == 0) return 0;
  unsigned g = pk_grid(t);
  switch (p->esize) {
    case 1: k_copy<uint8_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint8_t *)x, (uint8_t *)y, t); break;
    case 2: k_copy<uint16_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint16_t *)x, (uint16_t *)y, t); break;
    case 4: k_copy<uint32_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint32_t *)x, (uint32_t *)y, t); break;
    default: k_copy<uint64_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint64_t *)x, (uint64_t *)y, t); break;
  }
  return pk_check_launch(S);
}

extern "C" int pk_memcpy(pk_stage *S, void *y, const void *x, size_t bytes) {
  if (!bytes || x == y) return 0;
  return cu_ok(S, cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, S->stream), "cudaMemcpyAsync") ? 0 : 1;
}

extern "C" int pk_memcpy2d(pk_stage *S, void *y, size_t ypitch, const void *x, size_t xpitch, size_t width,
                           size_t rows) {
  if (!width || !rows) return 0;
  return cu_ok(S, cudaMemcpy2DAsync(y, ypitch, x, xpitch, width, rows, cudaMemcpyDeviceToDevice, S->stream),
               "cudaMemcpy2DAsync")
             ? 0
             : 1;
}

template <typename T>
__global__ void k_fill(T *y, T v, int64_t n) {
  GRID_LOOP(i, n) y[i] = v;
}

extern "C" int pk_fill(pk_stage *S, void *y, int esize, uint64_t value, int64_t n) {
  if (n <= 0) return 0;
  unsigned g = pk_grid(n);
  switch (esize) {
    case 1: k_fill<uint8_t><<<g, PK_THREADS, 0, S->stream>>>((uint8_t *)y, (uint8_t)value, n); break;
    case 2: k_fill<uint16_t><<<g, PK_THREADS, 0, S->stream>>>((uint16_t *)y, (uint16_t)value, n); break;
    case 4: k_fill<uint32_t><<<g, PK_THREADS, 0, S->stream>>>((uint32_t *)y, (uint32_t)value, n); break;
    default: k_fill<uint64_t><<<g, PK_THREADS, 0, S->stream>>>((uint64_t *)y, value, n); break;
  }
  return pk_check_launch(S);
}

template <typename T>
__global__ void k_gather(const T *__restrict__ x, const void *__restrict__ idx, int idx64, T *__restrict__ y,
                         int64_t a, int64_t ni, int64_t inner, int64_t total) {
  GRID_LOOP(t, total) {
    int64_t i = t % inner, r = t / inner, j = r % ni, o = r / ni;
    int64_t k = idx64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
    if (k < 0) k += a;
    if (k < 0 || k >= a) k = 0; /* out of range: undefined in ONNX */
    y[t] = x[(o * a + k) * inner + i];
  }
}

extern "C" int pk_gather(pk_stage *S, int esize, const void *x, const void *idx, int idx64, void *y, int64_t outer,
                         int64_t a, int64_t ni, int64_t inner) {
  int64_t t = outer * ni * inner;
  if (t == 0) return 0;
  unsigned g = pk_grid(t);
  switch (esize) {
    case 1: k_gather<uint8_t><<<g, PK_THREADS, 0, S->stream>>>((const uint8_t *)x, idx, idx64, (uint8_t *)y, a, ni, inner, t); break;
    case 2: k_gather<uint16_t><<<g, PK_THREADS, 0, S->stream>>>((const uint16_t *)x, idx, idx64, (uint16_t *)y, a, ni, inner, t); break;
    case 4: k_gather<uint32_t><<<g, PK_THREADS, 0, S->stream>>>((const uint32_t *)x, idx, idx64, (uint32_t *)y, a, ni, inner, t); break;
    default: k_gather<uint64_t><<<g, PK_THREADS, 0, S->stream>>>((const uint64_t *)x, idx, idx64, (uint64_t *)y, a, ni, inner, t); break;
  }
  return pk_check_launch(S);
}

/* ---- pooling ---------------------------------------------------------------------------------- */

__global__ void k_pool(pk_pool_p p, const float *__restrict__ x, float *__restrict__ y, int64_t *__restrict__ yi,
                       int64_t total) {
  int64_t IS = p.in[0] * p.in[1] * p.in[2];
  GRID_LOOP(t, total) {
    int64_t ow = t % p.out[2], r = t / p.out[2], oh = r % p.out[1];
    r /= p.out[1];
    int64_t od = r % p.out[0], nc = r / p.out[0];
    const float *xp = x + nc * IS;
    int64_t d0 = od * p.s[0] - p.pb[0], h0 = oh * p.s[1] - p.pb[1], w0 = ow * p.s[2] - p.pb[2];
    float m = -INFINITY;
    int64_t mi = 0, cnt = 0;
    double s = 0;
    for (int64_t kd = 0; kd < p.k[0]; kd++) {
      int64_t id = d0 + kd * p.d[0];
      for (int64_t kh = 0; kh < p.k[1]; kh++) {
        int64_t ih = h0 + kh * p.d[1];
        for (int64_t kw = 0; kw < p.k[2]; kw++) {
          int64_t iw = w0 + kw * p.d[2];
          if (id < 0 || id >= p.in[0] || ih < 0 || ih >= p.in[1] || iw < 0 || iw >= p.in[2]) continue;
          int64_t ii = (id * p.in[1] + ih) * p.in[2] + iw;
          float v = xp[ii];
          if (p.kind == PK_POOL_MAX) {
            if (v > m) {
              m = v;
              mi = p.col_major_index ? iw * p.in[1] + ih : ii;
            }
          } else if (p.kind == PK_POOL_LP) {
            double a = fabs((double)v);
            s += p.p == 1 ? a : p.p == 2 ? a * a : pow(a, p.p);
            cnt++;
          } else {
            s += v;
            cnt++;
          }
        }
      }
    }
    if (p.kind == PK_POOL_MAX) {
      y[t] = m;
      if (yi) yi[t] = nc * IS + mi;
    } else if (p.kind == PK_POOL_LP) {
      y[t] = (float)(p.p == 1 ? s : p.p == 2 ? sqrt(s) : pow(s, 1.0 / p.p));
    } else {
      /* count_include_pad: the whole window counts, as the ONNX reference */
      y[t] = (float)(s / (double)(p.count_include_pad ? p.k[0] * p.k[1] * p.k[2] : (cnt ? cnt : 1)));
    }
  }
}

extern "C" int pk_pool(pk_stage *S, const pk_pool_p *p, const float *x, float *y, int64_t *yi) {
  int64_t t = p->nc * p->out[0] * p->out[1] * p->out[2];
  if (t == 0) return 0;
  k_pool<<<pk_grid(t), PK_THREADS, 0, S->stream>>>(*p, x, y, yi, t);
  return pk_check_launch(S);
}

/* ---- softmax ------------------------------------------------------------------------------------ */

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* inner == 1: one warp per row */
__global__ void k_softmax_rows(int kind, const float *__restrict__ x, float *__restrict__ y, int64_t rows, int64_t a) {
  int lane = threadIdx.x & 31;
  int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (; row < rows; row += nw) {
    const float *xp = x + row * a;
    float *yp = y + row * a;
    float m = -INFINITY;
    for (int64_t k = lane; k < a; k += 32) m = fmaxf(m, xp[k]);
    m = warp_max(m);
    if (kind == PK_HARDMAX) {
      /* first index of the maximum */
      int64_t first = a;
      for (int64_t k = lane; k < a; k += 32)
        if (xp[k] == m && k < first) first = k;
      for (int o = 16; o > 0; o >>= 1) {
        int64_t other = __shfl_xor_sync(0xffffffffu, first, o);
        first = other < first ? other : first;
      }
      for (int64_t k = lane; k < a; k += 32) yp[k] = k == first ? 1.0f : 0.0f;
      continue;
    }
    float s = 0;
    for (int64_t k = lane; k < a; k += 32) s += expf(xp[k] - m);
    s = warp_sum(s);
    if (kind == PK_SOFTMAX) {
      float inv = 1.0f / s;
      for (int64_t k = lane; k < a; k += 32) yp[k] = expf(xp[k] - m) * inv;
    } else {
      float ls = logf(s);
      for (int64_t k = lane; k < a; k += 32) yp[k] = xp[k] - m - ls;
    }
  }
}

/* inner > 1: one thread per (outer, inner) column */
__global__ void k_softmax_cols(int kind, const float *__restrict__ x, float *__restrict__ y, int64_t outer, int64_t a,
                               int64_t inner) {
  GRID_LOOP(t, outer * inner) {
    int64_t i = t % inner, o = t / inner;
    const float *xp = x + o * a * inner + i;
    float *yp = y + o * a * inner + i;
    float m = xp[0];
    int64_t mk = 0;
    for (int64_t k = 1; k < a; k++)
      if (xp[k * inner] > m) m = xp[k * inner], mk = k;
    if (kind == PK_HARDMAX) {
      for (int64_t k = 0; k < a; k++) yp[k * inner] = k == mk ? 1.0f : 0.0f;
      continue;
    }
    float s = 0;
    for (int64_t k = 0; k < a; k++) s += expf(xp[k * inner] - m);
    if (kind == PK_SOFTMAX)
      for (int64_t k = 0; k < a; k++) yp[k * inner] = expf(xp[k * inner] - m) / s;
    else {
      float ls = logf(s);
      for (int64_t k = 0; k < a; k++) yp[k * inner] = xp[k * inner] - m - ls;
    }
  }
}

extern "C" int pk_softmax(pk_stage *S, int kind, const float *x, float *y, int64_t outer, int64_t a, int64_t inner) {
  if (outer * a * inner == 0) return 0;
  if (inner == 1) k_softmax_rows<<<pk_grid(outer * 32), PK_THREADS, 0, S->stream>>>(kind, x, y, outer, a);
  else k_softmax_cols<<<pk_grid(outer * inner), PK_THREADS, 0, S->stream>>>(kind, x, y, outer, a, inner);
  return pk_check_launch(S);
}

/* ---- normalisation ------------------------------------------------------------------------------ */

/* block-wide sum of PK_THREADS threads */
__device__ float block_sum(float v, float *sh) {
  v = warp_sum(v);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float t = 0;
  for (int i = 0; i < PK_THREADS / 32; i++) t += sh[i];
  return t;
}

/* one block per row; two passes (mean, then variance) */
__global__ void k_layernorm(const float *__restrict__ x, const float *__restrict__ scale, int64_t ns,
                            const float *__restrict__ bias, int64_t nb, float *__restrict__ y, float *mean_out,
                            float *inv_out, int64_t outer, int64_t inner, float eps, int per_row) {
  __shared__ float sh[PK_THREADS / 32];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const float *xp = x + row * inner;
    float *yp = y + row * inner;
    float s = 0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) s += xp[i];
    float mean = block_sum(s, sh) / (float)inner;
    float q = 0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      float d = xp[i] - mean;
      q += d * d;
    }
    float inv = rsqrtf(block_sum(q, sh) / (float)inner + eps);
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      int64_t si = per_row ? row % ns : (ns == 1 ? 0 : i), bi = per_row ? row % nb : (nb == 1 ? 0 : i);
      float v = (xp[i] - mean) * inv * scale[si];
      yp[i] = bias ? v + bias[bi] : v;
    }
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[row] = mean;
      if (inv_out) inv_out[row] = inv;
    }
  }
}

extern "C" int pk_layernorm(pk_stage *S, const float *x, const float *scale, int64_t ns, const float *bias, int64_t nb,
                            float *y, float *mean, float *inv, int64_t outer, int64_t inner, double eps, int per_row) {
  if (outer * inner == 0) return 0;
  int64_t g = outer < 65536 ? outer : 65536;
  k_layernorm<<<(unsigned)g, PK_THREADS, 0, S->stream>>>(x, scale, ns, bias, nb, y, mean, inv, outer, inner, (float)eps,
                                                          per_row);
  return pk_check_launch(S);
}

__global__ void k_batchnorm(const float *__restrict__ x, const float *__restrict__ scale, const float *__restrict__ bias,
                            const float *__restrict__ mean, const float *__restrict__ var, float *__restrict__ y,
                            int64_t c, int64_t sp, float eps, int64_t total) {
  GRID_LOOP(i, total) {
    int64_t ch = (i / sp) % c;
    float a = scale[ch] / sqrtf(var[ch] + eps);
    float b = bias[ch] - mean[ch] * a;
    y[i] = x[i] * a + b;
  }
}

extern "C" int pk_batchnorm(pk_stage *S, const float *x, const float *scale, const float *bias, const float *mean,
                            const float *var, float *y, int64_t n, int64_t c, int64_t sp, double eps) {
  int64_t t = n * c * sp;
  if (t == 0) return 0;
  k_batchnorm<<<pk_grid(t), PK_THREADS, 0, S->stream>>>(x, scale, bias, mean, var, y, c, sp, (float)eps, t);
  return pk_check_launch(S);
}

/* one block per channel */
__global__ void k_batchnorm_train(const float *__restrict__ x, const float *__restrict__ scale,
                                  const float *__restrict__ bias, const float *__restrict__ rm_in,
                                  const float *__restrict__ rv_in, float *__restrict__ y, float *rm, float *rv,
                                  int64_t n, int64_t c, int64_t sp, float eps, float mom) {
  __shared__ float sh[PK_THREADS / 32];
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    int64_t cnt = n * sp;
    float s = 0;
    for (int64_t t = threadIdx.x; t < cnt; t += blockDim.x) s += x[((t / sp) * c + ch) * sp + t % sp];
    float mean = block_sum(s, sh) / (float)cnt;
    float q = 0;
    for (int64_t t = threadIdx.x; t < cnt; t += blockDim.x) {
      float d = x[((t / sp) * c + ch) * sp + t % sp] - mean;
      q += d * d;
    }
    float var = block_sum(q, sh) / (float)cnt;
    float inv = rsqrtf(var + eps);
    for (int64_t t = threadIdx.x; t < cnt; t += blockDim.x) {
      int64_t k = ((t / sp) * c + ch) * sp + t % sp;
      y[k] = (x[k] - mean) * inv * scale[ch] + bias[ch];
    }
    if (threadIdx.x == 0) {
      if (rm) rm[ch] = rm_in[ch] * mom + mean * (1 - mom);
      if (rv) rv[ch] = rv_in[ch] * mom + var * (1 - mom);
    }
  }
}

extern "C" int pk_batchnorm_train(pk_stage *S, const float *x, const float *scale, const float *bias, const float *mean,
                                  const float *var, float *y, float *rmean, float *rvar, int64_t n, int64_t c,
                                  int64_t sp, double eps, double momentum) {
  if (n * c * sp == 0) return 0;
  int64_t g = c < 65536 ? c : 65536;
  k_batchnorm_train<<<(unsigned)g, PK_THREADS, 0, S->stream>>>(x, scale, bias, mean, var, y, rmean, rvar, n, c, sp,
                                                                 (float)eps, (float)momentum);
  return pk_check_launch(S);
}

/* ---- reductions: one warp per output element ------------------------------------------------------- */

__global__ void k_reduce(pk_reduce_p p, const float *__restrict__ x, float *__restrict__ y, int64_t nout, int64_t cnt) {
  int lane = threadIdx.x & 31;
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  int64_t xs[PK_MAX_RANK];
  int64_t acc = 1;
  for (int d = p.rank - 1; d >= 0; d--) xs[d] = acc, acc *= p.xd[d];
  for (; w < nout; w += nw) {
    /* base offset of this output: kept dims from w */
    int64_t r = w, base = 0;
    for (int d = p.rank - 1; d >= 0; d--)
      if (!p.red[d]) {
        base += (r % p.xd[d]) * xs[d];
        r /= p.xd[d];
      }
    float mx = -INFINITY;
    if (p.kind == PK_RED_LOGSUMEXP) {
      for (int64_t k = lane; k < cnt; k += 32) {
        int64_t q = k, off = base;
        for (int d = p.rank - 1; d >= 0; d--)
          if (p.red[d]) off += (q % p.xd[d]) * xs[d], q /= p.xd[d];
        mx = fmaxf(mx, x[off]);
      }
      mx = warp_max(mx);
    }
    float a = p.kind == PK_RED_MAX ? -INFINITY : p.kind == PK_RED_MIN ? INFINITY : p.kind == PK_RED_PROD ? 1.0f : 0.0f;
    for (int64_t k = lane; k < cnt; k += 32) {
      int64_t q = k, off = base;
      for (int d = p.rank - 1; d >= 0; d--)
        if (p.red[d]) off += (q % p.xd[d]) * xs[d], q /= p.xd[d];
      float v = x[off];
      switch (p.kind) {
        case PK_RED_MAX: a = (v > a || v != v) ? v : a; break;
        case PK_RED_MIN: a = (v < a || v != v) ? v : a; break;
        case PK_RED_PROD: a *= v; break;
        case PK_RED_L1: a += fabsf(v); break;
        case PK_RED_L2: case PK_RED_SUMSQ: a += v * v; break;
        case PK_RED_LOGSUMEXP: a += expf(v - mx); break;
        default: a += v; break;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      float b = __shfl_xor_sync(0xffffffffu, a, o);
      switch (p.kind) {
        case PK_RED_MAX: a = (b > a || b != b) ? b : a; break;
        case PK_RED_MIN: a = (b < a || b != b) ? b : a; break;
        case PK_RED_PROD: a *= b; break;
        default: a += b; break;
      }
    }
    if (lane == 0) {
      switch (p.kind) {
        case PK_RED_MEAN: a = a / (float)cnt; break;
        case PK_RED_L2: a = sqrtf(a); break;
        case PK_RED_LOGSUM: a = logf(a); break;
        case PK_RED_LOGSUMEXP: a = logf(a) + mx; break;
        default: break;
      }
      y[w] = a;
    }
  }
}

extern "C" int pk_reduce(pk_stage *S, const pk_reduce_p *p, const float *x, float *y) {
  int64_t nout = 1, cnt = 1;
  for (int d = 0; d < p->rank; d++) {
    if (p->red[d]) cnt *= p->xd[d];
    else nout *= p->xd[d];
  }
  if (nout == 0) return 0;
  k_reduce<<<pk_grid(nout * 32), PK_THREADS, 0, S->stream>>>(*p, x, y, nout, cnt);
  return pk_check_launch(S);
}

/* ---- stage life cycle ---------------------------------------------------------------------------- */

static void set_where(pk_stage *S) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, S->device) == cudaSuccess)
    snprintf(S->where, sizeof S->where, "stage %d on cuda:%d (%.200s)", S->info->id, S->device, prop.name);
  else snprintf(S->where, sizeof S->where, "stage %d on cuda:%d", S->info->id, S->device);
}

static void stage_free(pk_stage *S) {
  if (!S) return;
  if (S->device >= 0) cudaSetDevice(S->device);
  if (S->exec) cudaGraphExecDestroy(S->exec);
  if (S->conv) {
    for (int i = 0; i < S->info->n_conv; i++) {
      struct pk_conv_s *c = &S->conv[i];
      if (c->x) cudnnDestroyTensorDescriptor(c->x);
      if (c->y) cudnnDestroyTensorDescriptor(c->y);
      if (c->w) cudnnDestroyFilterDescriptor(c->w);
      if (c->conv) cudnnDestroyConvolutionDescriptor(c->conv);
    }
    free(S->conv);
  }
  if (S->ev) {
    for (int i = 0; i <= S->info->n_units; i++)
      if (S->ev[i]) cudaEventDestroy(S->ev[i]);
    free(S->ev);
  }
  if (S->cublas) cublasDestroy((cublasHandle_t)S->cublas);
  if (S->cudnn) cudnnDestroy((cudnnHandle_t)S->cudnn);
  if (S->w) cudaFree(S->w);
  if (S->io) cudaFree(S->io);
  if (S->a) cudaFree(S->a);
  if (S->ws) cudaFree(S->ws);
  if (S->stream) cudaStreamDestroy(S->stream);
  free(S);
}

extern "C" int pk_stage_init(void **state, const pk_stage_info *info, int tf32, const void *weights,
                             size_t weights_len) {
  *state = NULL;
  pk_stage *S = (pk_stage *)calloc(1, sizeof *S);
  if (!S) return 1;
  S->info = info;
  S->tf32 = tf32;
  S->unit = -1;
  S->device = -1;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    fprintf(stderr, "pipeline: stage %d: no CUDA device (%s)\n", info->id,
            e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    free(S);
    return 1;
  }
  const char *pin = getenv("PIPECC_CUDA_DEVICE");
  S->device = pin && *pin ? atoi(pin) % ndev : info->id % ndev;
  set_where(S);
  const char *gr = getenv("PIPECC_CUDA_GRAPH");
  S->use_graph = !(gr && !strcmp(gr, "0"));
  int ok = cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") &&
           cu_ok(S, cudaStreamCreateWithFlags(&S->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudnnHandle_t dnn = NULL;
  cublasHandle_t blas = NULL;
  ok = ok && dnn_ok(S, cudnnCreate(&dnn), "cudnnCreate");
  S->cudnn = dnn;
  ok = ok && dnn_ok(S, cudnnSetStream(dnn, S->stream), "cudnnSetStream");
  ok = ok && blas_ok(S, cublasCreate(&blas), "cublasCreate");
  S->cublas = blas;
  ok = ok && blas_ok(S, cublasSetStream(blas, S->stream), "cublasSetStream");
  /* weights: uploaded once */
  if (ok && weights_len) {
    ok = cu_ok(S, cudaMalloc((void **)&S->w, weights_len), "cudaMalloc(weights)") &&
         cu_ok(S, cudaMemcpy(S->w, weights, weights_len, cudaMemcpyHostToDevice), "cudaMemcpy(weights)");
  }
  if (ok && info->io_bytes) ok = cu_ok(S, cudaMalloc((void **)&S->io, info->io_bytes), "cudaMalloc(inputs/outputs)");
  if (ok && info->arena_bytes) {
    ok = cu_ok(S, cudaMalloc((void **)&S->a, info->arena_bytes), "cudaMalloc(arena)") &&
         cu_ok(S, cudaMemset(S->a, 0, info->arena_bytes), "cudaMemset(arena)");
  }
  /* convolutions: descriptors and algorithms once, one shared workspace */
  if (ok && info->n_conv) {
    S->conv = (struct pk_conv_s *)calloc((size_t)info->n_conv, sizeof *S->conv);
    ok = S->conv != NULL;
    for (int i = 0; ok && i < info->n_conv; i++) {
      S->unit = -1;
      ok = conv_setup(S, &S->conv[i], &info->conv[i]) == 0;
    }
  }
  /* cuBLAS uses the same workspace (the stream orders its uses); at least 32 MiB */
  if (S->ws_bytes < ((size_t)32 << 20)) S->ws_bytes = (size_t)32 << 20;
  if (ok) ok = cu_ok(S, cudaMalloc(&S->ws, S->ws_bytes), "cudaMalloc(workspace)");
  if (ok) ok = blas_ok(S, cublasSetWorkspace(blas, S->ws, S->ws_bytes), "cublasSetWorkspace");
  if (ok) ok = cu_ok(S, cudaDeviceSynchronize(), "cudaDeviceSynchronize(init)");
  if (!ok) {
    stage_free(S);
    return 1;
  }
  *state = S;
  return 0;
}

/* Run the units: replay the captured graph, or capture it on the first call. */
static int run_units(pk_stage *S) {
  if (!S->use_graph || S->ev) return S->info->run(S);
  if (!S->captured) {
    S->captured = 1;
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(S->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      S->use_graph = 0;
      return S->info->run(S);
    }
    int rc = S->info->run(S);
    cudaError_t e = cudaStreamEndCapture(S->stream, &graph);
    if (rc) {
      if (graph) cudaGraphDestroy(graph);
      return rc;
    }
    if (e != cudaSuccess || cudaGraphInstantiate(&S->exec, graph, 0) != cudaSuccess) {
      /* capture not possible here: run eagerly from now on */
      cudaGetLastError();
      if (graph) cudaGraphDestroy(graph);
      S->exec = NULL;
      S->use_graph = 0;
      return S->info->run(S);
    }
    cudaGraphDestroy(graph);
  }
  S->unit = -1;
  return cu_ok(S, cudaGraphLaunch(S->exec, S->stream), "cudaGraphLaunch") ? 0 : 1;
}

extern "C" int pk_stage_forward(void *state, const void *const *in, void *const *out) {
  pk_stage *S = (pk_stage *)state;
  const pk_stage_info *I = S->info;
  S->unit = -1;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice")) return 1;
  for (int k = 0; k < I->n_in; k++)
    if (I->in_bytes[k] && !cu_ok(S, cudaMemcpyAsync(S->io + I->in_off[k], in[k], I->in_bytes[k], cudaMemcpyHostToDevice,
                                                   S->stream),
                                 "cudaMemcpyAsync(input)"))
      return 1;
  if (run_units(S)) return 1;
  S->unit = -1;
  for (int k = 0; k < I->n_out; k++)
    if (I->out_bytes[k] && !cu_ok(S, cudaMemcpyAsync(out[k], S->io + I->out_off[k], I->out_bytes[k],
                                                    cudaMemcpyDeviceToHost, S->stream),
                                  "cudaMemcpyAsync(output)"))
      return 1;
  return cu_ok(S, cudaStreamSynchronize(S->stream), "cudaStreamSynchronize") ? 0 : 1;
}

extern "C" void pk_stage_fini(void *state) { stage_free((pk_stage *)state); }

extern "C" void pk_mark(pk_stage *S, int u) { cudaEventRecord(S->ev[u], S->stream); }

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

extern "C" int pk_stage_profile(void *state, const void *const *in, int warmup, int reps, float *unit_ms) {
  pk_stage *S = (pk_stage *)state;
  const pk_stage_info *I = S->info;
  int U = I->n_units;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice")) return 1;
  S->ev = (cudaEvent_t *)calloc((size_t)U + 1, sizeof(cudaEvent_t));
  float *samples = (float *)calloc((size_t)(U ? U : 1) * (size_t)(reps > 0 ? reps : 1), sizeof(float));
  if (!S->ev || !samples) return 1;
  for (int i = 0; i <= U; i++)
    if (!cu_ok(S, cudaEventCreate(&S->ev[i]), "cudaEventCreate")) return 1;
  for (int k = 0; k < I->n_in; k++)
    if (I->in_bytes[k] &&
        !cu_ok(S, cudaMemcpy(S->io + I->in_off[k], in[k], I->in_bytes[k], cudaMemcpyHostToDevice), "cudaMemcpy(input)"))
      return 1;
  for (int r = 0; r < warmup + reps; r++) {
    if (I->run(S)) return 1;
    pk_mark(S, U);
    if (!cu_ok(S, cudaStreamSynchronize(S->stream), "cudaStreamSynchronize")) return 1;
    if (r < warmup) continue;
    /* a unit with no code records no event: it takes 0 ms (its event is the next one's) */
    for (int u = 0; u < U; u++) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, S->ev[u], S->ev[u + 1]) != cudaSuccess) {
        cudaGetLastError();
        ms = 0;
      }
      samples[(size_t)u * (size_t)reps + (size_t)(r - warmup)] = ms < 0 ? 0 : ms;
    }
  }
  for (int u = 0; u < U; u++) {
    float *s = samples + (size_t)u * (size_t)reps;
    qsort(s, (size_t)reps, sizeof(float), cmp_float);
    unit_ms[u] = reps ? s[reps / 2] : 0;
  }
  free(samples);
  return 0;
}

extern "C" const char *pk_stage_device_name(void *state, char *buf, size_t n) {
  pk_stage *S = (pk_stage *)state;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, S->device) == cudaSuccess) snprintf(buf, n, "%s", prop.name);
  else snprintf(buf, n, "cuda:%d", S->device);
  return buf;
}

extern "C" int pk_stage_units(void *state, const char *const **unit_names, const int **unit_n_nodes,
                              const char *const **node_names) {
  const pk_stage_info *I = ((pk_stage *)state)->info;
  *unit_names = I->unit_names;
  *unit_n_nodes = I->unit_n_nodes;
  *node_names = I->node_names;
  return I->n_units;
}
