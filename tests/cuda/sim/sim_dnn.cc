/* sim_dnn.cc - the CUDA simulator's cuDNN (legacy convolution API), cuBLASLt and cuBLAS:
 * the calls pipecc's device runtime (codegen/cuda/rt/pipecc_cuda_rt.cu) makes, computed
 * on the CPU (tests/cuda/sim/README.md).
 *
 * Like the GPU libraries, a computing call (cudnnConvolutionForward,
 * cudnnConvolutionBackwardData, cublasLtMatmul, cublasGemmStridedBatchedEx) only checks its
 * arguments and queues the work on the handle's stream (cudasim::enqueue); it runs later
 * on that stream's thread, or at every launch of a CUDA graph that captured it. Everything
 * the work reads is copied into it at the call: descriptor contents, pointers, the values
 * of alpha and beta (host pointer mode).
 *
 * Arithmetic: in the data type. GEMMs go to OpenBLAS (cblas_sgemm / cblas_dgemm, one
 * thread per caller, so results are the same on every run); a float GEMM accumulates in
 * float as cuBLAS's CUBLAS_COMPUTE_32F does. Convolutions are im2col + GEMM per image and
 * group (a 1x1 stride-1 unpadded convolution is a plain GEMM), backward data GEMM +
 * col2im. TF32 is emulated: where a GPU with tensor cores would use it (a float
 * convolution whose math type is not CUDNN_FMA_MATH, a cuBLAS(Lt) GEMM with compute
 * type CUBLAS_COMPUTE_32F_FAST_TF32), the operands (x or dy and the filter; A and B)
 * are rounded to TF32 first (10 mantissa bits, to nearest, ties away from zero, as
 * cvt.rna.tf32.f32) and the products accumulated in float, so tolerances meant for TF32
 * are tested as such; NVIDIA_TF32_OVERRIDE=0 turns it off, as on a GPU.
 *
 * Stricter than the GPU where a GPU would fail or go undefined: data pointers must be
 * device memory over the whole extent the descriptors give them, aligned to the element
 * size; an output may not overlap an input or itself (batches, strides); a workspace
 * smaller than the size query said is an error; each failure says why in one line
 * (cudasim::warn) and returns the library's error status. Descriptors destroyed or never
 * created are errors too. */
#include <cblas.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim_internal.h"

namespace {

/* ---- live objects ------------------------------------------------------------------------ */

enum Kind { K_DNN = 1, K_TENSOR, K_FILTER, K_CONV, K_BLAS, K_LT, K_LT_DESC, K_LT_LAYOUT, K_LT_PREF, K_BACKEND };

std::mutex reg_mu;
std::unordered_map<const void *, int> &registry() {
  static std::unordered_map<const void *, int> m;
  return m;
}

template <class T>
T *obj_new(int kind) {
  T *p = new T();
  std::lock_guard<std::mutex> g(reg_mu);
  registry()[p] = kind;
  return p;
}

bool obj_live(const void *p, int kind) {
  if (!p) return false;
  std::lock_guard<std::mutex> g(reg_mu);
  auto it = registry().find(p);
  return it != registry().end() && it->second == kind;
}

template <class T>
bool obj_delete(T *p, int kind) {
  {
    std::lock_guard<std::mutex> g(reg_mu);
    auto it = registry().find(p);
    if (it == registry().end() || it->second != kind) return false;
    registry().erase(it);
  }
  delete p;
  return true;
}

void blas_init() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

/* ---- memory regions: device checks and overlaps --------------------------------------------- */

/* The elements base + es * sum_i j_i * str[i], 0 <= j_i < dim[i]. */
struct Region {
  uintptr_t base = 0;
  size_t es = 1;
  int nd = 0;
  int64_t dim[6] = {0}, str[6] = {0};
};

Region region(const void *p, size_t es, int nd, const int64_t *dim, const int64_t *str) {
  Region r;
  r.base = (uintptr_t)p;
  r.es = es;
  r.nd = nd;
  for (int i = 0; i < nd; i++) r.dim[i] = dim[i], r.str[i] = str[i];
  return r;
}

/* A column-major matrix batch: rows contiguous, columns ld apart, batches stride apart. */
Region mat_region(const void *p, size_t es, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  int64_t d[3] = {batch, cols, rows}, s[3] = {stride, ld, 1};
  return region(p, es, 3, d, s);
}

bool region_empty(const Region &r) {
  for (int i = 0; i < r.nd; i++)
    if (r.dim[i] <= 0) return true;
  return false;
}

/* [lo, hi) in bytes */
void region_span(const Region &r, uintptr_t *lo, uintptr_t *hi) {
  int64_t mn = 0, mx = 0;
  for (int i = 0; i < r.nd; i++) {
    int64_t e = (r.dim[i] - 1) * r.str[i];
    if (e < 0) mn += e;
    else mx += e;
  }
  *lo = r.base + (uintptr_t)(mn * (int64_t)r.es);
  *hi = r.base + (uintptr_t)((mx + 1) * (int64_t)r.es);
}

/* Whether the region lies in device memory (start and end) aligned to its element size;
 * warns once naming the call and the argument if not. */
bool check_dev(const char *call, const char *arg, const Region &r) {
  if (region_empty(r)) return true;
  uintptr_t lo, hi;
  region_span(r, &lo, &hi);
  if (!r.base) {
    cudasim::warn("%s: %s is NULL", call, arg);
    return false;
  }
  if (!cudasim::is_device_ptr((const void *)lo)) {
    cudasim::warn(
        "%s: %s (%p) is not device memory (a host pointer, or memory already freed): on a GPU an "
        "illegal address",
        call, arg, (void *)r.base);
    return false;
  }
  if (!cudasim::is_device_range((const void *)lo, hi - lo)) {
    cudasim::warn("%s: %s (%p): the %zu bytes its descriptor spans run past the end of its device allocation", call,
                  arg, (void *)r.base, (size_t)(hi - lo));
    return false;
  }
  if (r.base % r.es) {
    cudasim::warn("%s: %s (%p) is not aligned to its element size (%zu bytes): on a GPU a misaligned address", call,
                  arg, (void *)r.base, r.es);
    return false;
  }
  return true;
}

/* Still device memory when the queued work runs (not freed in between)? */
bool still_dev(const char *call, const char *arg, const Region &r) {
  if (region_empty(r)) return true;
  uintptr_t lo, hi;
  region_span(r, &lo, &hi);
  if (cudasim::is_device_range((const void *)lo, hi - lo)) return true;
  cudasim::warn(
      "%s: %s (%p) is no longer device memory when the queued operation runs (freed after the call, or a "
      "graph replayed after the free): the operation is skipped",
      call, arg, (void *)r.base);
  return false;
}

/* Byte intervals [start, end) of the region, ascending; false if there would be too many
 * to list (then nothing is concluded). */
bool region_intervals(const Region &r, std::vector<std::pair<uintptr_t, uintptr_t>> &out) {
  out.clear();
  if (region_empty(r)) return true;
  int nd = r.nd;
  int64_t run = 1;
  int outer = nd;
  if (nd > 0 && r.str[nd - 1] == 1) run = r.dim[nd - 1], outer = nd - 1;
  int64_t count = 1;
  for (int i = 0; i < outer; i++) {
    count *= r.dim[i];
    if (count > ((int64_t)1 << 24)) return false;
  }
  out.reserve((size_t)count);
  int64_t j[6] = {0};
  for (int64_t c = 0; c < count; c++) {
    int64_t off = 0;
    for (int i = 0; i < outer; i++) off += j[i] * r.str[i];
    uintptr_t s = r.base + (uintptr_t)(off * (int64_t)r.es);
    out.push_back({s, s + (uintptr_t)(run * (int64_t)r.es)});
    for (int i = outer - 1; i >= 0; i--) {
      if (++j[i] < r.dim[i]) break;
      j[i] = 0;
    }
  }
  std::sort(out.begin(), out.end());
  return true;
}

/* Whether two distinct elements of the region share memory (an output written by several
 * GPU threads at once). */
bool region_self_overlaps(const Region &r) {
  if (region_empty(r)) return false;
  /* sufficient: dims sorted by stride nest (each stride at least the extent of the
   * smaller ones) - packed, sliced, interleaved batches all pass this */
  std::vector<std::pair<int64_t, int64_t>> ds;
  for (int i = 0; i < r.nd; i++)
    if (r.dim[i] > 1) ds.push_back({r.str[i] < 0 ? -r.str[i] : r.str[i], r.dim[i]});
  std::sort(ds.begin(), ds.end());
  int64_t extent = 1;
  bool nested = true;
  for (auto &d : ds) {
    if (d.first < extent) {
      nested = false;
      break;
    }
    extent = d.first * (d.second - 1) + extent;
  }
  if (nested) return false;
  /* exact, remembered per shape */
  static std::mutex mu;
  static std::set<std::vector<int64_t>> fine;
  std::vector<int64_t> key{(int64_t)r.es, r.nd};
  for (int i = 0; i < r.nd; i++) key.push_back(r.dim[i]), key.push_back(r.str[i]);
  {
    std::lock_guard<std::mutex> g(mu);
    if (fine.count(key)) return false;
  }
  Region z = r;
  z.base = (uintptr_t)1 << 40; /* the layout only */
  std::vector<std::pair<uintptr_t, uintptr_t>> iv;
  if (!region_intervals(z, iv)) return false;
  for (size_t i = 1; i < iv.size(); i++)
    if (iv[i].first < iv[i - 1].second) return true;
  std::lock_guard<std::mutex> g(mu);
  fine.insert(key);
  return false;
}

bool regions_overlap(const Region &a, const Region &b) {
  if (region_empty(a) || region_empty(b)) return false;
  uintptr_t alo, ahi, blo, bhi;
  region_span(a, &alo, &ahi);
  region_span(b, &blo, &bhi);
  if (ahi <= blo || bhi <= alo) return false;
  std::vector<std::pair<uintptr_t, uintptr_t>> ia, ib;
  if (!region_intervals(a, ia) || !region_intervals(b, ib)) return false;
  size_t i = 0, j = 0;
  while (i < ia.size() && j < ib.size()) {
    if (ia[i].second <= ib[j].first) i++;
    else if (ib[j].second <= ia[i].first) j++;
    else return true;
  }
  return false;
}

/* ---- shared kernels ------------------------------------------------------------------------ */

/* TF32 for the float GEMMs the job on this thread runs (set by the job from its math
 * or compute type) */
thread_local bool tl_tf32;

bool tf32_allowed() {
  static int off = -1;
  if (off < 0) {
    const char *v = getenv("NVIDIA_TF32_OVERRIDE");
    off = v && !strcmp(v, "0");
  }
  return !off;
}

float to_tf32(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return v; /* inf, NaN */
  u = (u + 0x1000u) & ~0x1fffu;
  memcpy(&v, &u, 4);
  return v;
}

/* the elements a stored r x c matrix with leading dimension ld spans */
size_t mat_span(CBLAS_ORDER o, int r, int c, int ld) {
  if (r <= 0 || c <= 0) return 0;
  return o == CblasColMajor ? (size_t)ld * (size_t)(c - 1) + (size_t)r : (size_t)ld * (size_t)(r - 1) + (size_t)c;
}

const float *tf32_copy(std::vector<float> &buf, const float *p, size_t n) {
  buf.resize(n);
  for (size_t i = 0; i < n; i++) buf[i] = to_tf32(p[i]);
  return buf.data();
}

void gemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float al, const float *a, int lda,
          const float *b, int ldb, float be, float *c, int ldc) {
  if (tl_tf32 && k > 0) {
    thread_local std::vector<float> ra, rb;
    bool at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
    a = tf32_copy(ra, a, mat_span(o, at ? k : m, at ? m : k, lda));
    b = tf32_copy(rb, b, mat_span(o, bt ? n : k, bt ? k : n, ldb));
  }
  cblas_sgemm(o, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);
}
void gemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double al, const double *a,
          int lda, const double *b, int ldb, double be, double *c, int ldc) {
  cblas_dgemm(o, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);
}

/* per-thread scratch (each stream runs on its own thread) */
struct Scratch {
  std::vector<char> buf[5];
};
thread_local Scratch tl_scratch;

template <class T>
T *scratch(int i, size_t n) {
  std::vector<char> &v = tl_scratch.buf[i];
  if (v.size() < n * sizeof(T)) v.resize(n * sizeof(T));
  return (T *)v.data();
}

int64_t ceil_div(int64_t a, int64_t b) { /* b > 0 */
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ==== cuDNN ================================================================================== */

}  // namespace

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  int nd = 0;
  int dim[CUDNN_DIM_MAX] = {0}, str[CUDNN_DIM_MAX] = {0};
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t fmt = CUDNN_TENSOR_NCHW;
  int nd = 0;
  int dim[CUDNN_DIM_MAX] = {0};
};
struct cudnnConvolutionStruct {
  bool set = false;
  int n = 0;
  int pad[CUDNN_DIM_MAX] = {0}, str[CUDNN_DIM_MAX] = {0}, dil[CUDNN_DIM_MAX] = {0};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t ct = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

bool dnn_type_ok(cudnnDataType_t t) { return (int)t >= (int)CUDNN_DATA_FLOAT && (int)t <= (int)CUDNN_DATA_BOOLEAN; }

/* A convolution normalised to 3 spatial dims (leading dims of 1). "x" is the forward
 * input (backward data's dx), "y" the forward output (dy). */
struct Geo {
  int nsp = 0; /* spatial dims in the descriptors: 2 or 3 */
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  int64_t N = 0, C = 0, K = 0, G = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0}, str[3] = {1, 1, 1}, dil[3] = {1, 1, 1};
  int64_t xs[5] = {0}, ys[5] = {0}; /* n, c, s0, s1, s2 strides in elements */
  bool flip = false;
  bool w_nhwc = false; /* filter format CUDNN_TENSOR_NHWC: [K, taps, C/G] in memory (KRSC) */
  size_t es() const { return dt == CUDNN_DATA_DOUBLE ? 8 : 4; }
  int64_t ksz() const { return k[0] * k[1] * k[2]; }
  int64_t isp() const { return in[0] * in[1] * in[2]; }
  int64_t osp() const { return out[0] * out[1] * out[2]; }
  int64_t rows() const { return C / G * ksz(); }
  bool one_by_one() const {
    for (int i = 0; i < 3; i++)
      if (k[i] != 1 || str[i] != 1 || pad[i] != 0) return false;
    return true;
  }
  size_t col_bytes() const { return (size_t)(rows() * osp()) * es(); }
  Region x_region(const void *p) const {
    int64_t d[5] = {N, C, in[0], in[1], in[2]};
    return region(p, es(), 5, d, xs);
  }
  Region y_region(const void *p) const {
    int64_t d[5] = {N, K, out[0], out[1], out[2]};
    return region(p, es(), 5, d, ys);
  }
  Region w_region(const void *p) const {
    int64_t d[1] = {K * rows()}, s[1] = {1};
    return region(p, es(), 1, d, s);
  }
};

/* x, w, conv (and y if given) into g; warns and returns the status cuDNN would. */
cudnnStatus_t make_geo(const char *call, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                       cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t y, Geo *g, const char *xname = "x",
                       const char *yname = "y") {
  if (!obj_live(x, K_TENSOR) || !x->set) {
    cudasim::warn("%s: the %s descriptor was not created or not set (or was destroyed)", call, xname);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (y && (!obj_live(y, K_TENSOR) || !y->set)) {
    cudasim::warn("%s: the %s descriptor was not created or not set (or was destroyed)", call, yname);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!obj_live(w, K_FILTER) || !w->set) {
    cudasim::warn("%s: the filter descriptor was not created or not set (or was destroyed)", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!obj_live(c, K_CONV) || !c->set) {
    cudasim::warn("%s: the convolution descriptor was not created or not set (or was destroyed)", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  int nd = x->nd;
  if (w->nd != nd || (y && y->nd != nd) || c->n != nd - 2) {
    cudasim::warn("%s: %s has %d dims, the filter %d, %s %d, the convolution %d spatial dims: they must agree", call,
                  xname, nd, w->nd, yname, y ? y->nd : nd, c->n);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (nd != 4 && nd != 5) {
    cudasim::warn("%s: %d-D tensors: convolutions take 4-D or 5-D ones", call, nd);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (w->dt != x->dt || (y && y->dt != x->dt)) {
    cudasim::warn("%s: %s, filter and %s have different data types", call, xname, yname);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!((x->dt == CUDNN_DATA_FLOAT && c->ct == CUDNN_DATA_FLOAT) ||
        (x->dt == CUDNN_DATA_DOUBLE && c->ct == CUDNN_DATA_DOUBLE))) {
    cudasim::warn("%s: data type %d with compute type %d: the simulator supports float/float and double/double", call,
                  (int)x->dt, (int)c->ct);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (w->fmt != CUDNN_TENSOR_NCHW && w->fmt != CUDNN_TENSOR_NHWC) {
    cudasim::warn("%s: filter format %d: the simulator supports CUDNN_TENSOR_NCHW and CUDNN_TENSOR_NHWC", call,
                  (int)w->fmt);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  g->w_nhwc = w->fmt == CUDNN_TENSOR_NHWC;
  g->nsp = nd - 2;
  g->dt = x->dt;
  g->N = x->dim[0];
  g->C = x->dim[1];
  g->K = w->dim[0];
  g->G = c->groups;
  g->flip = c->mode == CUDNN_CONVOLUTION;
  if (w->dim[1] * (int64_t)c->groups != g->C) {
    cudasim::warn("%s: %s has %d channels, the filter %d per group with %d groups", call, xname, x->dim[1], w->dim[1],
                  c->groups);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (g->K % g->G) {
    cudasim::warn("%s: the filter's %d output channels are not divisible by the group count %d", call, w->dim[0],
                  c->groups);
    return CUDNN_STATUS_BAD_PARAM;
  }
  int off = 3 - g->nsp;
  for (int i = 0; i < 3; i++) g->in[i] = 1, g->out[i] = 1, g->k[i] = 1, g->pad[i] = 0, g->str[i] = 1, g->dil[i] = 1;
  for (int i = 0; i < g->nsp; i++) {
    int j = off + i;
    g->in[j] = x->dim[2 + i];
    g->k[j] = w->dim[2 + i];
    g->pad[j] = c->pad[i];
    g->str[j] = c->str[i];
    g->dil[j] = c->dil[i];
    int64_t span = g->in[j] + 2 * g->pad[j] - ((g->k[j] - 1) * g->dil[j] + 1);
    if (span < 0) {
      cudasim::warn(
          "%s: spatial dim %d: input %lld padded by %lld on both ends is smaller than the dilated filter "
          "(%lld taps, dilation %lld)",
          call, i, (long long)g->in[j], (long long)g->pad[j], (long long)g->k[j], (long long)g->dil[j]);
      return CUDNN_STATUS_BAD_PARAM;
    }
    g->out[j] = span / g->str[j] + 1;
  }
  g->xs[0] = x->str[0], g->xs[1] = x->str[1];
  g->xs[2] = g->xs[3] = g->xs[4] = 0;
  for (int i = 0; i < g->nsp; i++) g->xs[2 + off + i] = x->str[2 + i];
  if (y) {
    bool ok = y->dim[0] == x->dim[0] && y->dim[1] == w->dim[0];
    for (int i = 0; i < g->nsp; i++) ok = ok && y->dim[2 + i] == g->out[off + i];
    if (!ok) {
      char want[128], have[128];
      int a = snprintf(want, sizeof want, "%lld,%lld", (long long)g->N, (long long)g->K);
      int b = snprintf(have, sizeof have, "%d,%d", y->dim[0], y->dim[1]);
      for (int i = 0; i < g->nsp; i++) {
        a += snprintf(want + a, sizeof want - (size_t)a, ",%lld", (long long)g->out[off + i]);
        b += snprintf(have + b, sizeof have - (size_t)b, ",%d", y->dim[2 + i]);
      }
      cudasim::warn("%s: %s is [%s], the convolution of %s by the filter gives [%s]", call, yname, have, xname, want);
      return CUDNN_STATUS_BAD_PARAM;
    }
    g->ys[0] = y->str[0], g->ys[1] = y->str[1];
    g->ys[2] = g->ys[3] = g->ys[4] = 0;
    for (int i = 0; i < g->nsp; i++) g->ys[2 + off + i] = y->str[2 + i];
  }
  if (g->rows() * g->osp() > INT_MAX || g->N * g->C * g->isp() > INT_MAX || g->N * g->K * g->osp() > INT_MAX) {
    cudasim::warn("%s: 2^31 elements or more in a tensor or in the lowered convolution", call);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  return CUDNN_STATUS_SUCCESS;
}

/* the algorithms and their workspaces */
bool fwd_algo_supported(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}
size_t fwd_ws(const Geo &g, cudnnConvolutionFwdAlgo_t a) {
  if (a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) return (size_t)g.ksz() * sizeof(int64_t); /* tap table */
  if (a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM) return g.col_bytes(); /* im2col buffer */
  return 0;
}
bool bwd_algo_supported(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
size_t bwd_ws(const Geo &g, cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 ? g.col_bytes() : 0;
}

cudnnMathType_t reported_math(cudnnConvolutionDescriptor_t c, bool tensor_core_algo) {
  if (c->math == CUDNN_DEFAULT_MATH && tensor_core_algo && c->ct == CUDNN_DATA_FLOAT) return CUDNN_TENSOR_OP_MATH;
  if (c->ct == CUDNN_DATA_DOUBLE && c->math != CUDNN_FMA_MATH) return CUDNN_DEFAULT_MATH;
  return c->math;
}

/* ---- convolution kernels -------------------------------------------------------------------- */

bool packed(const int64_t *dim, const int64_t *str, int nd) {
  int64_t want = 1;
  for (int i = nd - 1; i >= 0; i--) {
    if (dim[i] > 1 && str[i] != want) return false;
    want *= dim[i];
  }
  return true;
}

/* strided [N, C, s0, s1, s2] -> packed */
template <class T>
void gather5(const T *src, const int64_t *d, const int64_t *s, T *dst) {
  for (int64_t a = 0; a < d[0]; a++)
    for (int64_t b = 0; b < d[1]; b++)
      for (int64_t c = 0; c < d[2]; c++)
        for (int64_t e = 0; e < d[3]; e++) {
          const T *p = src + a * s[0] + b * s[1] + c * s[2] + e * s[3];
          for (int64_t f = 0; f < d[4]; f++) *dst++ = p[f * s[4]];
        }
}

/* dst (strided) = alpha * src (packed) + beta * dst; dst not read when beta == 0 */
template <class T>
void combine5(T *dst, const int64_t *d, const int64_t *s, const T *src, T alpha, T beta) {
  for (int64_t a = 0; a < d[0]; a++)
    for (int64_t b = 0; b < d[1]; b++)
      for (int64_t c = 0; c < d[2]; c++)
        for (int64_t e = 0; e < d[3]; e++) {
          T *p = dst + a * s[0] + b * s[1] + c * s[2] + e * s[3];
          if (beta == (T)0)
            for (int64_t f = 0; f < d[4]; f++) p[f * s[4]] = alpha * *src++;
          else
            for (int64_t f = 0; f < d[4]; f++) p[f * s[4]] = alpha * *src++ + beta * p[f * s[4]];
        }
}

/* The valid output range [lo, hi) along the last dim for tap e: input index ow*s + off. */
struct Span {
  int64_t off, lo, hi;
};
Span w_span(const Geo &g, int64_t e) {
  Span r;
  r.off = e * g.dil[2] - g.pad[2];
  r.lo = clamp64(ceil_div(-r.off, g.str[2]), 0, g.out[2]);
  r.hi = clamp64(ceil_div(g.in[2] - r.off, g.str[2]), r.lo, g.out[2]);
  return r;
}

/* col[(c, a, b, e), (od, oh, ow)] = x[c, od*s0 - p0 + a*d0, ...] (0 outside) for one
 * group's Cg input planes of one image */
template <class T>
void im2col(const Geo &g, const T *x, T *col) {
  const int64_t Cg = g.C / g.G, isp = g.isp(), osp = g.osp();
  for (int64_t c = 0; c < Cg; c++) {
    const T *xc = x + c * isp;
    for (int64_t a = 0; a < g.k[0]; a++)
      for (int64_t b = 0; b < g.k[1]; b++)
        for (int64_t e = 0; e < g.k[2]; e++) {
          T *row = col + (((c * g.k[0] + a) * g.k[1] + b) * g.k[2] + e) * osp;
          Span sp = w_span(g, e);
          for (int64_t od = 0; od < g.out[0]; od++) {
            int64_t id = od * g.str[0] - g.pad[0] + a * g.dil[0];
            for (int64_t oh = 0; oh < g.out[1]; oh++) {
              int64_t ih = oh * g.str[1] - g.pad[1] + b * g.dil[1];
              T *r = row + (od * g.out[1] + oh) * g.out[2];
              if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
                memset((void *)r, 0, sizeof(T) * (size_t)g.out[2]);
                continue;
              }
              int64_t base = (id * g.in[1] + ih) * g.in[2];
              for (int64_t ow = 0; ow < sp.lo; ow++) r[ow] = 0;
              if (g.str[2] == 1) {
                if (sp.hi > sp.lo) memcpy(r + sp.lo, xc + base + sp.lo + sp.off, sizeof(T) * (size_t)(sp.hi - sp.lo));
              } else {
                for (int64_t ow = sp.lo; ow < sp.hi; ow++) r[ow] = xc[base + ow * g.str[2] + sp.off];
              }
              for (int64_t ow = sp.hi; ow < g.out[2]; ow++) r[ow] = 0;
            }
          }
        }
  }
}

/* the adjoint: x[c, ...] += col[(c, a, b, e), (od, oh, ow)] */
template <class T>
void col2im(const Geo &g, const T *col, T *x) {
  const int64_t Cg = g.C / g.G, isp = g.isp(), osp = g.osp();
  for (int64_t c = 0; c < Cg; c++) {
    T *xc = x + c * isp;
    for (int64_t a = 0; a < g.k[0]; a++)
      for (int64_t b = 0; b < g.k[1]; b++)
        for (int64_t e = 0; e < g.k[2]; e++) {
          const T *row = col + (((c * g.k[0] + a) * g.k[1] + b) * g.k[2] + e) * osp;
          Span sp = w_span(g, e);
          for (int64_t od = 0; od < g.out[0]; od++) {
            int64_t id = od * g.str[0] - g.pad[0] + a * g.dil[0];
            if (id < 0 || id >= g.in[0]) continue;
            for (int64_t oh = 0; oh < g.out[1]; oh++) {
              int64_t ih = oh * g.str[1] - g.pad[1] + b * g.dil[1];
              if (ih < 0 || ih >= g.in[1]) continue;
              const T *r = row + (od * g.out[1] + oh) * g.out[2];
              T *dst = xc + (id * g.in[1] + ih) * g.in[2] + sp.off;
              if (g.str[2] == 1)
                for (int64_t ow = sp.lo; ow < sp.hi; ow++) dst[ow] += r[ow];
              else
                for (int64_t ow = sp.lo; ow < sp.hi; ow++) dst[ow * g.str[2]] += r[ow];
            }
          }
        }
  }
}

/* the filter as computed, [K, C/G, taps]: from KRSC for CUDNN_TENSOR_NHWC, flipped taps
 * for CUDNN_CONVOLUTION */
template <class T>
const T *filter_taps(const Geo &g, const T *w) {
  if (g.w_nhwc) {
    const int64_t ksz = g.ksz(), Cg = g.C / g.G;
    T *f = scratch<T>(4, (size_t)(g.K * Cg * ksz));
    for (int64_t k = 0; k < g.K; k++)
      for (int64_t t = 0; t < ksz; t++)
        for (int64_t c = 0; c < Cg; c++) f[(k * Cg + c) * ksz + t] = w[(k * ksz + t) * Cg + c];
    w = f;
  }
  if (!g.flip) return w;
  const int64_t ksz = g.ksz(), blocks = g.K * (g.C / g.G);
  T *f = scratch<T>(3, (size_t)(blocks * ksz));
  for (int64_t b = 0; b < blocks; b++)
    for (int64_t t = 0; t < ksz; t++) f[b * ksz + t] = w[b * ksz + ksz - 1 - t];
  return f;
}

struct ConvJob {
  Geo g;
  int fwd;  /* 1: forward, 0: backward data */
  int algo; /* cudnnConvolutionFwdAlgo_t or cudnnConvolutionBwdDataAlgo_t */
  const void *x_or_dy, *w;
  void *out; /* y or dx */
  double alpha, beta;
  void *ws;
  size_t ws_need;
  bool tf32;  /* float data, math type not CUDNN_FMA_MATH */
  bool split; /* the sum over taps in two halves, added (the backend API's engines): other
                 bits than the legacy algorithms', as another GPU kernel's order gives */
};

template <class T>
void conv_forward(const ConvJob &j) {
  const Geo &g = j.g;
  const int64_t Cg = g.C / g.G, Kg = g.K / g.G, rows = g.rows(), isp = g.isp(), osp = g.osp();
  const T alpha = (T)j.alpha, beta = (T)j.beta;
  const T *W = filter_taps(g, (const T *)j.w);
  int64_t xd[5] = {g.N, g.C, g.in[0], g.in[1], g.in[2]}, yd[5] = {g.N, g.K, g.out[0], g.out[1], g.out[2]};
  const T *X = (const T *)j.x_or_dy;
  if (!packed(xd, g.xs, 5)) {
    T *t = scratch<T>(0, (size_t)(g.N * g.C * isp));
    gather5(X, xd, g.xs, t);
    X = t;
  }
  bool direct = packed(yd, g.ys, 5) && alpha == (T)1 && beta == (T)0;
  T *O = direct ? (T *)j.out : scratch<T>(1, (size_t)(g.N * g.K * osp));
  if (j.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM && j.ws) {
    /* the precomputed tap offsets, as the GPU algorithm keeps them in the workspace */
    char *tab = (char *)j.ws;
    int64_t t = 0;
    for (int64_t a = 0; a < g.k[0]; a++)
      for (int64_t b = 0; b < g.k[1]; b++)
        for (int64_t e = 0; e < g.k[2]; e++, t++) {
          int64_t off = ((a * g.dil[0]) * g.in[1] + b * g.dil[1]) * g.in[2] + e * g.dil[2];
          memcpy(tab + t * (int64_t)sizeof off, &off, sizeof off);
        }
  }
  bool one = g.one_by_one();
  T *col = nullptr;
  if (!one) col = j.algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM && j.ws ? (T *)j.ws : scratch<T>(2, (size_t)(rows * osp));
  for (int64_t n = 0; n < g.N; n++)
    for (int64_t gr = 0; gr < g.G; gr++) {
      const T *xg = X + (n * g.C + gr * Cg) * isp;
      const T *B = xg;
      if (!one) {
        im2col(g, xg, col);
        B = col;
      }
      int64_t h = j.split ? rows / 2 : rows;
      gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Kg, (int)osp, (int)h, (T)1, W + gr * Kg * rows, (int)rows, B,
           (int)osp, (T)0, O + (n * g.K + gr * Kg) * osp, (int)osp);
      if (h < rows)
        gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Kg, (int)osp, (int)(rows - h), (T)1,
             W + gr * Kg * rows + h, (int)rows, B + h * osp, (int)osp, (T)1, O + (n * g.K + gr * Kg) * osp, (int)osp);
    }
  if (!direct) combine5((T *)j.out, yd, g.ys, O, alpha, beta);
}

template <class T>
void conv_backward_data(const ConvJob &j) {
  const Geo &g = j.g;
  const int64_t Cg = g.C / g.G, Kg = g.K / g.G, rows = g.rows(), isp = g.isp(), osp = g.osp();
  const T alpha = (T)j.alpha, beta = (T)j.beta;
  const T *W = filter_taps(g, (const T *)j.w);
  int64_t xd[5] = {g.N, g.C, g.in[0], g.in[1], g.in[2]}, yd[5] = {g.N, g.K, g.out[0], g.out[1], g.out[2]};
  const T *DY = (const T *)j.x_or_dy;
  if (!packed(yd, g.ys, 5)) {
    T *t = scratch<T>(0, (size_t)(g.N * g.K * osp));
    gather5(DY, yd, g.ys, t);
    DY = t;
  }
  bool direct = packed(xd, g.xs, 5) && alpha == (T)1 && beta == (T)0;
  T *DX = direct ? (T *)j.out : scratch<T>(1, (size_t)(g.N * g.C * isp));
  bool one = g.one_by_one();
  T *col = nullptr;
  if (!one) {
    col = j.algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 && j.ws ? (T *)j.ws : scratch<T>(2, (size_t)(rows * osp));
    memset((void *)DX, 0, sizeof(T) * (size_t)(g.N * g.C * isp));
  }
  for (int64_t n = 0; n < g.N; n++)
    for (int64_t gr = 0; gr < g.G; gr++) {
      const T *dyg = DY + (n * g.K + gr * Kg) * osp;
      T *dxg = DX + (n * g.C + gr * Cg) * isp;
      /* col [rows, osp] = W_g^T [rows, Kg] x dy_g [Kg, osp] */
      gemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)osp, (int)Kg, (T)1, W + gr * Kg * rows, (int)rows,
           dyg, (int)osp, (T)0, one ? dxg : col, (int)osp);
      if (!one) col2im(g, col, dxg);
    }
  if (!direct) combine5((T *)j.out, xd, g.xs, DX, alpha, beta);
}

const char *dnn_status_name(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_ALLOC_FAILED: return "CUDNN_STATUS_ALLOC_FAILED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_INVALID_VALUE: return "CUDNN_STATUS_INVALID_VALUE";
    case CUDNN_STATUS_ARCH_MISMATCH: return "CUDNN_STATUS_ARCH_MISMATCH";
    case CUDNN_STATUS_MAPPING_ERROR: return "CUDNN_STATUS_MAPPING_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_LICENSE_ERROR: return "CUDNN_STATUS_LICENSE_ERROR";
    case CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING: return "CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING";
    case CUDNN_STATUS_RUNTIME_IN_PROGRESS: return "CUDNN_STATUS_RUNTIME_IN_PROGRESS";
    case CUDNN_STATUS_RUNTIME_FP_OVERFLOW: return "CUDNN_STATUS_RUNTIME_FP_OVERFLOW";
    case CUDNN_STATUS_VERSION_MISMATCH: return "CUDNN_STATUS_VERSION_MISMATCH";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

/* The checks a convolution call shares; fills j (not its algo-specific parts). */
cudnnStatus_t conv_call_checks(const char *call, const void *alpha, const void *beta, const char *in_name,
                               const void *in, const void *w, const char *out_name, void *out, void *ws, size_t ws_size,
                               size_t need, ConvJob *j) {
  const Geo &g = j->g;
  if (!alpha || !beta) {
    cudasim::warn("%s: alpha or beta is NULL", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (ws_size < need) {
    cudasim::warn("%s: workspace of %zu bytes, the algorithm needs %zu (the workspace size query's answer)", call,
                  ws_size, need);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (need && !ws) {
    cudasim::warn("%s: the algorithm needs %zu bytes of workspace and workSpace is NULL", call, need);
    return CUDNN_STATUS_BAD_PARAM;
  }
  bool fwd = j->fwd;
  Region rin = fwd ? g.x_region(in) : g.y_region(in), rout = fwd ? g.y_region(out) : g.x_region(out);
  Region rw = g.w_region(w);
  if (!check_dev(call, in_name, rin) || !check_dev(call, "w", rw) || !check_dev(call, out_name, rout))
    return CUDNN_STATUS_BAD_PARAM;
  Region rws;
  if (ws) {
    int64_t d[1] = {(int64_t)(ws_size ? ws_size : 1)}, s[1] = {1};
    rws = region(ws, 1, 1, d, s);
    if (!check_dev(call, "workSpace", rws)) return CUDNN_STATUS_BAD_PARAM;
    if (need && (uintptr_t)ws % g.es()) {
      cudasim::warn("%s: workSpace (%p) is not aligned to the element size", call, ws);
      return CUDNN_STATUS_BAD_PARAM;
    }
    rws.dim[0] = (int64_t)need;
  }
  if (region_self_overlaps(rout)) {
    cudasim::warn("%s: the %s descriptor's strides make elements share memory", call, out_name);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (regions_overlap(rout, rin) || regions_overlap(rout, rw)) {
    cudasim::warn("%s: %s (%p) overlaps %s: cuDNN convolutions are not in-place", call, out_name, out,
                  regions_overlap(rout, rin) ? in_name : "w");
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (ws && need && (regions_overlap(rws, rin) || regions_overlap(rws, rw) || regions_overlap(rws, rout))) {
    cudasim::warn("%s: the workspace's %zu bytes in use (%p) overlap a tensor of the call", call, need, ws);
    return CUDNN_STATUS_BAD_PARAM;
  }
  j->x_or_dy = in;
  j->w = w;
  j->out = out;
  j->ws = need ? ws : nullptr;
  j->ws_need = need;
  if (g.dt == CUDNN_DATA_DOUBLE) {
    j->alpha = *(const double *)alpha;
    j->beta = *(const double *)beta;
  } else {
    j->alpha = *(const float *)alpha;
    j->beta = *(const float *)beta;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t conv_enqueue(const char *call, cudnnHandle_t h, const ConvJob &j) {
  const char *in_name = j.fwd ? "x" : "dy", *out_name = j.fwd ? "y" : "dx";
  auto fn = [j, call, in_name, out_name]() {
    const Geo &g = j.g;
    Region rin = j.fwd ? g.x_region(j.x_or_dy) : g.y_region(j.x_or_dy);
    Region rout = j.fwd ? g.y_region(j.out) : g.x_region(j.out);
    if (!still_dev(call, in_name, rin) || !still_dev(call, "w", g.w_region(j.w)) || !still_dev(call, out_name, rout))
      return;
    if (j.ws) {
      int64_t d[1] = {(int64_t)j.ws_need}, s[1] = {1};
      if (!still_dev(call, "workSpace", region(j.ws, 1, 1, d, s))) return;
    }
    blas_init();
    tl_tf32 = j.tf32;
    if (j.fwd) {
      if (g.dt == CUDNN_DATA_DOUBLE) conv_forward<double>(j);
      else conv_forward<float>(j);
    } else {
      if (g.dt == CUDNN_DATA_DOUBLE) conv_backward_data<double>(j);
      else conv_backward_data<float>(j);
    }
  };
  cudaError_t e = cudasim::enqueue(h->stream, fn, call);
  if (e != cudaSuccess) {
    cudasim::warn("%s: queueing on the handle's stream failed (%s)", call, cudaGetErrorString(e));
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}

bool dnn_handle_ok(const char *call, cudnnHandle_t h) {
  if (obj_live(h, K_DNN)) return true;
  cudasim::warn("%s: the cuDNN handle was not created by cudnnCreate (or was destroyed)", call);
  return false;
}

}  // namespace

extern "C" {

const char *cudnnGetErrorString(cudnnStatus_t status) { return dnn_status_name(status); }
size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  *handle = obj_new<cudnnContext>(K_DNN);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  if (!obj_delete(handle, K_DNN)) {
    cudasim::warn("cudnnDestroy: not a live cuDNN handle (destroyed twice?)");
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  if (!dnn_handle_ok("cudnnSetStream", handle)) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId) {
  if (!dnn_handle_ok("cudnnGetStream", handle) || !streamId) return CUDNN_STATUS_BAD_PARAM;
  *streamId = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc) {
  if (!tensorDesc) return CUDNN_STATUS_BAD_PARAM;
  *tensorDesc = obj_new<cudnnTensorStruct>(K_TENSOR);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t dataType, int nbDims,
                                         const int dimA[], const int strideA[]) {
  const char *call = "cudnnSetTensorNdDescriptor";
  if (!obj_live(d, K_TENSOR)) {
    cudasim::warn("%s: not a live tensor descriptor", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!dnn_type_ok(dataType) || !dimA || !strideA) return CUDNN_STATUS_BAD_PARAM;
  if (nbDims < 3 || nbDims > CUDNN_DIM_MAX) {
    cudasim::warn("%s: %d dims (3 to %d are supported)", call, nbDims, CUDNN_DIM_MAX);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  int64_t total = 1;
  for (int i = 0; i < nbDims; i++) {
    if (dimA[i] <= 0 || strideA[i] <= 0) {
      cudasim::warn("%s: dim %d is %d with stride %d: dims and strides must be positive", call, i, dimA[i], strideA[i]);
      return CUDNN_STATUS_BAD_PARAM;
    }
    total *= dimA[i];
  }
  if (total > INT_MAX) {
    cudasim::warn("%s: %lld elements: more than 2^31 - 1", call, (long long)total);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  d->dt = dataType;
  d->nd = nbDims;
  for (int i = 0; i < nbDims; i++) d->dim[i] = dimA[i], d->str[i] = strideA[i];
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  if (!d) return CUDNN_STATUS_SUCCESS;
  if (!obj_delete(d, K_TENSOR)) {
    cudasim::warn("cudnnDestroyTensorDescriptor: not a live tensor descriptor (destroyed twice?)");
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc) {
  if (!filterDesc) return CUDNN_STATUS_BAD_PARAM;
  *filterDesc = obj_new<cudnnFilterStruct>(K_FILTER);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int nbDims, const int filterDimA[]) {
  const char *call = "cudnnSetFilterNdDescriptor";
  if (!obj_live(d, K_FILTER)) {
    cudasim::warn("%s: not a live filter descriptor", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!dnn_type_ok(dataType) || !filterDimA || (int)format < (int)CUDNN_TENSOR_NCHW ||
      (int)format > (int)CUDNN_TENSOR_NCHW_VECT_C)
    return CUDNN_STATUS_BAD_PARAM;
  if (nbDims < 3 || nbDims > CUDNN_DIM_MAX) {
    cudasim::warn("%s: %d dims (3 to %d are supported)", call, nbDims, CUDNN_DIM_MAX);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  for (int i = 0; i < nbDims; i++)
    if (filterDimA[i] <= 0) {
      cudasim::warn("%s: dim %d is %d: dims must be positive", call, i, filterDimA[i]);
      return CUDNN_STATUS_BAD_PARAM;
    }
  d->dt = dataType;
  d->fmt = format;
  d->nd = nbDims;
  for (int i = 0; i < nbDims; i++) d->dim[i] = filterDimA[i];
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  if (!d) return CUDNN_STATUS_SUCCESS;
  if (!obj_delete(d, K_FILTER)) {
    cudasim::warn("cudnnDestroyFilterDescriptor: not a live filter descriptor (destroyed twice?)");
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc) {
  if (!convDesc) return CUDNN_STATUS_BAD_PARAM;
  *convDesc = obj_new<cudnnConvolutionStruct>(K_CONV);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int arrayLength, const int padA[],
                                              const int filterStrideA[], const int dilationA[],
                                              cudnnConvolutionMode_t mode, cudnnDataType_t computeType) {
  const char *call = "cudnnSetConvolutionNdDescriptor";
  if (!obj_live(d, K_CONV)) {
    cudasim::warn("%s: not a live convolution descriptor", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!padA || !filterStrideA || !dilationA || !dnn_type_ok(computeType) ||
      (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION))
    return CUDNN_STATUS_BAD_PARAM;
  if (arrayLength < 1 || arrayLength > CUDNN_DIM_MAX - 2) {
    cudasim::warn("%s: arrayLength %d", call, arrayLength);
    return CUDNN_STATUS_BAD_PARAM;
  }
  for (int i = 0; i < arrayLength; i++)
    if (padA[i] < 0 || filterStrideA[i] <= 0 || dilationA[i] <= 0) {
      cudasim::warn("%s: spatial dim %d: pad %d, stride %d, dilation %d (pads >= 0, strides and dilations > 0)", call,
                    i, padA[i], filterStrideA[i], dilationA[i]);
      return CUDNN_STATUS_BAD_PARAM;
    }
  d->n = arrayLength;
  for (int i = 0; i < arrayLength; i++) d->pad[i] = padA[i], d->str[i] = filterStrideA[i], d->dil[i] = dilationA[i];
  d->mode = mode;
  d->ct = computeType;
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groupCount) {
  if (!obj_live(d, K_CONV)) {
    cudasim::warn("cudnnSetConvolutionGroupCount: not a live convolution descriptor");
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (groupCount < 1) return CUDNN_STATUS_BAD_PARAM;
  d->groups = groupCount;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int *groupCount) {
  if (!obj_live(d, K_CONV) || !groupCount) return CUDNN_STATUS_BAD_PARAM;
  *groupCount = d->groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t mathType) {
  if (!obj_live(d, K_CONV)) {
    cudasim::warn("cudnnSetConvolutionMathType: not a live convolution descriptor");
    return CUDNN_STATUS_BAD_PARAM;
  }
  if ((int)mathType < (int)CUDNN_DEFAULT_MATH || (int)mathType > (int)CUDNN_FMA_MATH) return CUDNN_STATUS_BAD_PARAM;
  d->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t *mathType) {
  if (!obj_live(d, K_CONV) || !mathType) return CUDNN_STATUS_BAD_PARAM;
  *mathType = d->math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  if (!d) return CUDNN_STATUS_SUCCESS;
  if (!obj_delete(d, K_CONV)) {
    cudasim::warn("cudnnDestroyConvolutionDescriptor: not a live convolution descriptor (destroyed twice?)");
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc, int nbDims,
                                                    int tensorOuputDimA[]) {
  const char *call = "cudnnGetConvolutionNdForwardOutputDim";
  if (!tensorOuputDimA) return CUDNN_STATUS_BAD_PARAM;
  Geo g;
  cudnnStatus_t st = make_geo(call, inputTensorDesc, filterDesc, convDesc, nullptr, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if (nbDims != inputTensorDesc->nd) {
    cudasim::warn("%s: nbDims %d, the input has %d dims", call, nbDims, inputTensorDesc->nd);
    return CUDNN_STATUS_BAD_PARAM;
  }
  tensorOuputDimA[0] = (int)g.N;
  tensorOuputDimA[1] = (int)g.K;
  for (int i = 0; i < g.nsp; i++) tensorOuputDimA[2 + i] = (int)g.out[3 - g.nsp + i];
  return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t fwd_algos(const char *call, cudnnHandle_t handle, cudnnTensorDescriptor_t x,
                               cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t y,
                               int requested, int *returned, cudnnConvolutionFwdAlgoPerf_t *perf, bool find) {
  if (!dnn_handle_ok(call, handle)) return CUDNN_STATUS_BAD_PARAM;
  if (!returned || !perf || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  Geo g;
  cudnnStatus_t st = make_geo(call, x, w, c, y, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  /* the heuristic's ranking; a search ranks by (simulated) time, GEMM first */
  static const cudnnConvolutionFwdAlgo_t heur[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_DIRECT};
  static const cudnnConvolutionFwdAlgo_t srch[] = {
      CUDNN_CONVOLUTION_FWD_ALGO_GEMM,          CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
      CUDNN_CONVOLUTION_FWD_ALGO_FFT,           CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
      CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,      CUDNN_CONVOLUTION_FWD_ALGO_DIRECT};
  const cudnnConvolutionFwdAlgo_t *order = find ? srch : heur;
  int n = std::min(requested, (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  for (int i = 0; i < n; i++) {
    cudnnConvolutionFwdAlgoPerf_t &p = perf[i];
    memset(&p, 0, sizeof p);
    p.algo = order[i];
    bool ok = fwd_algo_supported(p.algo);
    p.status = ok ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    p.time = ok ? (find ? 0.1f * (float)(i + 1) : -1.0f) : -1.0f;
    p.memory = ok ? fwd_ws(g, p.algo) : 0;
    p.determinism = CUDNN_DETERMINISTIC;
    p.mathType = reported_math(c, p.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  }
  *returned = n;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                     const cudnnFilterDescriptor_t filterDesc,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t destDesc,
                                                     const int requestedAlgoCount, int *returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t *perfResults) {
  return fwd_algos("cudnnGetConvolutionForwardAlgorithm_v7", handle, srcDesc, filterDesc, convDesc, destDesc,
                   requestedAlgoCount, returnedAlgoCount, perfResults, false);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                   const cudnnFilterDescriptor_t wDesc,
                                                   const cudnnConvolutionDescriptor_t convDesc,
                                                   const cudnnTensorDescriptor_t yDesc, const int requestedAlgoCount,
                                                   int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults) {
  return fwd_algos("cudnnFindConvolutionForwardAlgorithm", handle, xDesc, wDesc, convDesc, yDesc, requestedAlgoCount,
                   returnedAlgoCount, perfResults, true);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes) {
  const char *call = "cudnnGetConvolutionForwardWorkspaceSize";
  if (!dnn_handle_ok(call, handle) || !sizeInBytes) return CUDNN_STATUS_BAD_PARAM;
  Geo g;
  cudnnStatus_t st = make_geo(call, xDesc, wDesc, convDesc, yDesc, &g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if ((int)algo < 0 || (int)algo >= (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT) return CUDNN_STATUS_BAD_PARAM;
  if (!fwd_algo_supported(algo)) return CUDNN_STATUS_NOT_SUPPORTED;
  *sizeInBytes = fwd_ws(g, algo);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
                                      const cudnnTensorDescriptor_t yDesc, void *y) {
  const char *call = "cudnnConvolutionForward";
  if (!dnn_handle_ok(call, handle)) return CUDNN_STATUS_BAD_PARAM;
  ConvJob j{};
  j.fwd = 1;
  cudnnStatus_t st = make_geo(call, xDesc, wDesc, convDesc, yDesc, &j.g);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if ((int)algo < 0 || (int)algo >= (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT) {
    cudasim::warn("%s: algorithm %d is not a cudnnConvolutionFwdAlgo_t", call, (int)algo);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!fwd_algo_supported(algo)) {
    cudasim::warn("%s: algorithm %d does not support this convolution", call, (int)algo);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  j.algo = algo;
  st = conv_call_checks(call, alpha, beta, "x", x, w, "y", y, workSpace, workSpaceSizeInBytes, fwd_ws(j.g, algo), &j);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  j.tf32 = j.g.dt == CUDNN_DATA_FLOAT && convDesc->math != CUDNN_FMA_MATH && tf32_allowed();
  return conv_enqueue(call, handle, j);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
  const char *call = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
  if (!dnn_handle_ok(call, handle)) return CUDNN_STATUS_BAD_PARAM;
  if (!returnedAlgoCount || !perfResults || requestedAlgoCount < 1) return CUDNN_STATUS_BAD_PARAM;
  Geo g;
  cudnnStatus_t st = make_geo(call, gradDesc, filterDesc, convDesc, diffDesc, &g, "dx", "dy");
  if (st != CUDNN_STATUS_SUCCESS) return st;
  /* ALGO_0 (atomics, non-deterministic) ranks first, as it often does on GPUs */
  static const cudnnConvolutionBwdDataAlgo_t order[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD};
  int n = std::min(requestedAlgoCount, (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  for (int i = 0; i < n; i++) {
    cudnnConvolutionBwdDataAlgoPerf_t &p = perfResults[i];
    memset(&p, 0, sizeof p);
    p.algo = order[i];
    bool ok = bwd_algo_supported(p.algo);
    p.status = ok ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    p.time = -1.0f;
    p.memory = ok ? bwd_ws(g, p.algo) : 0;
    p.determinism = p.algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
    p.mathType = reported_math(convDesc, p.algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  }
  *returnedAlgoCount = n;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                           const cudnnTensorDescriptor_t dyDesc,
                                                           const cudnnConvolutionDescriptor_t convDesc,
                                                           const cudnnTensorDescriptor_t dxDesc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes) {
  const char *call = "cudnnGetConvolutionBackwardDataWorkspaceSize";
  if (!dnn_handle_ok(call, handle) || !sizeInBytes) return CUDNN_STATUS_BAD_PARAM;
  Geo g;
  cudnnStatus_t st = make_geo(call, dxDesc, wDesc, convDesc, dyDesc, &g, "dx", "dy");
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if ((int)algo < 0 || (int)algo >= (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT) return CUDNN_STATUS_BAD_PARAM;
  if (!bwd_algo_supported(algo)) return CUDNN_STATUS_NOT_SUPPORTED;
  *sizeInBytes = bwd_ws(g, algo);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
                                           size_t workSpaceSizeInBytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxDesc, void *dx) {
  const char *call = "cudnnConvolutionBackwardData";
  if (!dnn_handle_ok(call, handle)) return CUDNN_STATUS_BAD_PARAM;
  ConvJob j{};
  j.fwd = 0;
  cudnnStatus_t st = make_geo(call, dxDesc, wDesc, convDesc, dyDesc, &j.g, "dx", "dy");
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if ((int)algo < 0 || (int)algo >= (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT) {
    cudasim::warn("%s: algorithm %d is not a cudnnConvolutionBwdDataAlgo_t", call, (int)algo);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!bwd_algo_supported(algo)) {
    cudasim::warn("%s: algorithm %d does not support this convolution", call, (int)algo);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  j.algo = algo;
  st = conv_call_checks(call, alpha, beta, "dy", dy, w, "dx", dx, workSpace, workSpaceSizeInBytes, bwd_ws(j.g, algo),
                        &j);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  j.tf32 = j.g.dt == CUDNN_DATA_FLOAT && convDesc->math != CUDNN_FMA_MATH && tf32_allowed();
  return conv_enqueue(call, handle, j);
}

}  // extern "C"

/* ==== cuDNN's backend (graph) API ================================================================== */
/* One forward convolution per operation graph. A descriptor keeps the attributes set on it;
 * finalizing one copies what it needs out of the descriptors it names (so they may be
 * destroyed afterwards) and checks what cuDNN would. Engines: 0 the "tensor-core" one
 * (numerical note TENSOR_CORE, float data only: TF32 emulated as for the legacy API's
 * default math, im2col in the workspace), 1 the FMA one (no workspace, no TF32). */

namespace {

struct BTensor {
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  int nd = 0;
  int64_t dim[CUDNN_DIM_MAX] = {0}, str[CUDNN_DIM_MAX] = {0};
  int64_t uid = 0, align = 0;
};
struct BConv {
  cudnnDataType_t ct = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int n = 0;
  int64_t dil[3] = {0}, str[3] = {0}, pre[3] = {0}, post[3] = {0};
};
/* a convolution-forward operation as finalized, with its geometry */
struct BOp {
  BTensor x, w, y;
  BConv conv;
  double alpha = 1, beta = 0;
  Geo geo;
};

enum { BE_TC = 0, BE_FMA = 1 };

struct BackendDesc {
  cudnnBackendDescriptorType_t type;
  bool final = false;
  /* attributes as set: (type, count, bytes) */
  struct Attr {
    cudnnBackendAttributeType_t t;
    int64_t n;
    std::vector<unsigned char> v;
  };
  std::map<int, Attr> attrs;
  /* finalized contents */
  BTensor tensor;
  BConv conv;
  BOp op; /* operation, graph, heuristics, configuration, engine, plan */
  cudnnHandle_t handle = nullptr;
  std::vector<int> engines;  /* heuristics: the results */
  int engine = -1;           /* configuration, engine, plan */
  size_t ws = 0;             /* plan */
  std::vector<int64_t> uids; /* variant pack */
  std::vector<void *> ptrs;
  void *workspace = nullptr;
};

const char *be_type_name(cudnnBackendDescriptorType_t t) {
  switch (t) {
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: return "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR";
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return "CUDNN_BACKEND_ENGINE_DESCRIPTOR";
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR";
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR";
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: return "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      return "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR";
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR";
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return "CUDNN_BACKEND_TENSOR_DESCRIPTOR";
  }
  return "an unknown descriptor type";
}

/* The descriptor type an attribute belongs to, the element type it takes, and the most
 * elements it may have. */
struct AttrSpec {
  cudnnBackendAttributeName_t name;
  const char *text;
  cudnnBackendDescriptorType_t owner;
  cudnnBackendAttributeType_t t;
  int64_t max;
};
const AttrSpec attr_specs[] = {
    {CUDNN_ATTR_CONVOLUTION_COMP_TYPE, "CUDNN_ATTR_CONVOLUTION_COMP_TYPE", CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
     CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_ATTR_CONVOLUTION_CONV_MODE, "CUDNN_ATTR_CONVOLUTION_CONV_MODE", CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
     CUDNN_TYPE_CONVOLUTION_MODE, 1},
    {CUDNN_ATTR_CONVOLUTION_DILATIONS, "CUDNN_ATTR_CONVOLUTION_DILATIONS", CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
     CUDNN_TYPE_INT64, 3},
    {CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, "CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES",
     CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_TYPE_INT64, 3},
    {CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, "CUDNN_ATTR_CONVOLUTION_POST_PADDINGS", CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
     CUDNN_TYPE_INT64, 3},
    {CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, "CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS", CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
     CUDNN_TYPE_INT64, 3},
    {CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, "CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS", CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
     CUDNN_TYPE_INT64, 1},
    {CUDNN_ATTR_ENGINEHEUR_MODE, "CUDNN_ATTR_ENGINEHEUR_MODE", CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
     CUDNN_TYPE_HEUR_MODE, 1},
    {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH",
     CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_ATTR_ENGINEHEUR_RESULTS, "CUDNN_ATTR_ENGINEHEUR_RESULTS", CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0},
    {CUDNN_ATTR_ENGINECFG_ENGINE, "CUDNN_ATTR_ENGINECFG_ENGINE", CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0},
    {CUDNN_ATTR_EXECUTION_PLAN_HANDLE, "CUDNN_ATTR_EXECUTION_PLAN_HANDLE", CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
     CUDNN_TYPE_HANDLE, 1},
    {CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG",
     CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE",
     CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_INT64, 0},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_TYPE_FLOAT, 1},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_TYPE_FLOAT, 1},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1},
    {CUDNN_ATTR_OPERATIONGRAPH_HANDLE, "CUDNN_ATTR_OPERATIONGRAPH_HANDLE", CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
     CUDNN_TYPE_HANDLE, 1},
    {CUDNN_ATTR_OPERATIONGRAPH_OPS, "CUDNN_ATTR_OPERATIONGRAPH_OPS", CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 64},
    {CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", CUDNN_BACKEND_TENSOR_DESCRIPTOR,
     CUDNN_TYPE_INT64, 1},
    {CUDNN_ATTR_TENSOR_DATA_TYPE, "CUDNN_ATTR_TENSOR_DATA_TYPE", CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE,
     1},
    {CUDNN_ATTR_TENSOR_DIMENSIONS, "CUDNN_ATTR_TENSOR_DIMENSIONS", CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64,
     CUDNN_DIM_MAX},
    {CUDNN_ATTR_TENSOR_STRIDES, "CUDNN_ATTR_TENSOR_STRIDES", CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64,
     CUDNN_DIM_MAX},
    {CUDNN_ATTR_TENSOR_UNIQUE_ID, "CUDNN_ATTR_TENSOR_UNIQUE_ID", CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64, 1},
    {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS", CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
     CUDNN_TYPE_INT64, 64},
    {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS",
     CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_TYPE_VOID_PTR, 64},
    {CUDNN_ATTR_VARIANT_PACK_WORKSPACE, "CUDNN_ATTR_VARIANT_PACK_WORKSPACE", CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
     CUDNN_TYPE_VOID_PTR, 1},
    {CUDNN_ATTR_ENGINE_GLOBAL_INDEX, "CUDNN_ATTR_ENGINE_GLOBAL_INDEX", CUDNN_BACKEND_ENGINE_DESCRIPTOR,
     CUDNN_TYPE_INT64, 0},
    {CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, "CUDNN_ATTR_ENGINE_NUMERICAL_NOTE", CUDNN_BACKEND_ENGINE_DESCRIPTOR,
     CUDNN_TYPE_NUMERICAL_NOTE, 0},
    {CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, "CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE", CUDNN_BACKEND_ENGINE_DESCRIPTOR,
     CUDNN_TYPE_BEHAVIOR_NOTE, 0},
};

const AttrSpec *attr_spec(cudnnBackendAttributeName_t a) {
  for (const AttrSpec &s : attr_specs)
    if (s.name == a) return &s;
  return nullptr;
}

size_t be_elem_size(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_DOUBLE: return sizeof(double);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void *);
    case CUDNN_TYPE_CONVOLUTION_MODE: return sizeof(cudnnConvolutionMode_t);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_NUMERICAL_NOTE: return sizeof(cudnnBackendNumericalNote_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_BEHAVIOR_NOTE: return sizeof(int);
  }
  return 0;
}

BackendDesc *be_live(const void *p) { return obj_live(p, K_BACKEND) ? (BackendDesc *)p : nullptr; }

/* the attribute's elements, or NULL (with a warning naming what is missing) */
const BackendDesc::Attr *be_need(const char *call, const BackendDesc *d, cudnnBackendAttributeName_t a) {
  auto it = d->attrs.find((int)a);
  if (it != d->attrs.end() && it->second.n > 0) return &it->second;
  const AttrSpec *s = attr_spec(a);
  cudasim::warn("%s: %s: %s is not set", call, be_type_name(d->type), s ? s->text : "an attribute");
  return nullptr;
}
int64_t be_i64(const BackendDesc::Attr *a, int64_t i) {
  int64_t v;
  memcpy(&v, a->v.data() + (size_t)i * sizeof v, sizeof v);
  return v;
}
template <class T>
T be_val(const BackendDesc::Attr *a, int64_t i = 0) {
  T v;
  memcpy(&v, a->v.data() + (size_t)i * sizeof v, sizeof v);
  return v;
}
/* a descriptor named by an attribute: live, of the type wanted, finalized */
BackendDesc *be_ref(const char *call, const BackendDesc *d, cudnnBackendAttributeName_t a,
                    cudnnBackendDescriptorType_t want, int64_t i = 0) {
  const BackendDesc::Attr *at = be_need(call, d, a);
  if (!at) return nullptr;
  BackendDesc *r = be_live(be_val<cudnnBackendDescriptor_t>(at, i));
  const AttrSpec *s = attr_spec(a);
  if (!r || r->type != want || !r->final) {
    cudasim::warn("%s: %s names %s, which is %s", call, s ? s->text : "an attribute", be_type_name(want),
                  !r                ? "not a live descriptor (destroyed?)"
                  : r->type != want ? "of another type"
                                    : "not finalized");
    return nullptr;
  }
  return r;
}

/* legacy descriptors for a finalized operation, to share the legacy API's checks and
 * arithmetic (make_geo, conv_call_checks, conv_enqueue) */
struct Legacy {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t c = nullptr;
  ~Legacy() {
    if (x) obj_delete(x, K_TENSOR);
    if (y) obj_delete(y, K_TENSOR);
    if (w) obj_delete(w, K_FILTER);
    if (c) obj_delete(c, K_CONV);
  }
};

cudnnStatus_t be_geo(const char *call, const BOp &op, Geo *g) {
  Legacy L;
  const BTensor *ts[3] = {&op.x, &op.y, &op.w};
  for (const BTensor *t : ts)
    for (int i = 0; i < t->nd; i++)
      if (t->dim[i] > INT_MAX || t->str[i] > INT_MAX) {
        cudasim::warn("%s: a dimension or stride of 2^31 or more", call);
        return CUDNN_STATUS_NOT_SUPPORTED;
      }
  L.x = obj_new<cudnnTensorStruct>(K_TENSOR);
  L.y = obj_new<cudnnTensorStruct>(K_TENSOR);
  L.w = obj_new<cudnnFilterStruct>(K_FILTER);
  L.c = obj_new<cudnnConvolutionStruct>(K_CONV);
  cudnnTensorDescriptor_t lt[2] = {L.x, L.y};
  const BTensor *bt[2] = {&op.x, &op.y};
  for (int k = 0; k < 2; k++) {
    lt[k]->set = true;
    lt[k]->dt = bt[k]->dt;
    lt[k]->nd = bt[k]->nd;
    for (int i = 0; i < bt[k]->nd; i++) lt[k]->dim[i] = (int)bt[k]->dim[i], lt[k]->str[i] = (int)bt[k]->str[i];
  }
  /* the filter: packed, in NCHW (KCRS) or NHWC (KRSC) order */
  const BTensor &w = op.w;
  int nd = w.nd;
  int64_t nchw[CUDNN_DIM_MAX], nhwc[CUDNN_DIM_MAX];
  nchw[nd - 1] = 1;
  for (int i = nd - 2; i >= 0; i--) nchw[i] = nchw[i + 1] * w.dim[i + 1];
  nhwc[1] = 1;
  nhwc[nd - 1] = w.dim[1];
  for (int i = nd - 2; i >= 2; i--) nhwc[i] = nhwc[i + 1] * w.dim[i + 1];
  nhwc[0] = nhwc[2] * w.dim[2];
  bool is_nchw = true, is_nhwc = true;
  for (int i = 0; i < nd; i++) {
    is_nchw = is_nchw && (w.dim[i] == 1 || w.str[i] == nchw[i]);
    is_nhwc = is_nhwc && (w.dim[i] == 1 || w.str[i] == nhwc[i]);
  }
  if (!is_nchw && !is_nhwc) {
    cudasim::warn("%s: the filter's strides are neither packed NCHW (KCRS) nor packed NHWC (KRSC)", call);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  L.w->set = true;
  L.w->dt = w.dt;
  L.w->fmt = is_nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  L.w->nd = nd;
  for (int i = 0; i < nd; i++) L.w->dim[i] = (int)w.dim[i];
  const BConv &c = op.conv;
  for (int i = 0; i < c.n; i++)
    if (c.pre[i] != c.post[i]) {
      cudasim::warn("%s: spatial dim %d: pre-padding %lld, post-padding %lld: the simulator supports equal ones", call,
                    i, (long long)c.pre[i], (long long)c.post[i]);
      return CUDNN_STATUS_NOT_SUPPORTED;
    }
  L.c->set = true;
  L.c->n = c.n;
  for (int i = 0; i < c.n; i++) L.c->pad[i] = (int)c.pre[i], L.c->str[i] = (int)c.str[i], L.c->dil[i] = (int)c.dil[i];
  L.c->mode = c.mode;
  L.c->ct = c.ct;
  /* groups: the input's channels over the filter's */
  if (w.dim[1] <= 0 || op.x.dim[1] % w.dim[1]) {
    cudasim::warn("%s: the input's %lld channels are not a multiple of the filter's %lld", call, (long long)op.x.dim[1],
                  (long long)w.dim[1]);
    return CUDNN_STATUS_BAD_PARAM;
  }
  L.c->groups = (int)(op.x.dim[1] / w.dim[1]);
  return make_geo(call, L.x, L.w, L.c, L.y, g);
}

cudnnStatus_t be_finalize_tensor(const char *call, BackendDesc *d) {
  const BackendDesc::Attr *dt = be_need(call, d, CUDNN_ATTR_TENSOR_DATA_TYPE),
                          *dims = be_need(call, d, CUDNN_ATTR_TENSOR_DIMENSIONS),
                          *strs = be_need(call, d, CUDNN_ATTR_TENSOR_STRIDES),
                          *uid = be_need(call, d, CUDNN_ATTR_TENSOR_UNIQUE_ID),
                          *al = be_need(call, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
  if (!dt || !dims || !strs || !uid || !al) return CUDNN_STATUS_BAD_PARAM;
  BTensor &t = d->tensor;
  t.dt = be_val<cudnnDataType_t>(dt);
  if (dims->n != strs->n || dims->n < 3) {
    cudasim::warn("%s: a tensor of %lld dimensions and %lld strides (3 or more, as many strides as dimensions)", call,
                  (long long)dims->n, (long long)strs->n);
    return CUDNN_STATUS_BAD_PARAM;
  }
  t.nd = (int)dims->n;
  for (int i = 0; i < t.nd; i++) {
    t.dim[i] = be_i64(dims, i), t.str[i] = be_i64(strs, i);
    if (t.dim[i] <= 0 || t.str[i] <= 0) {
      cudasim::warn("%s: tensor dim %d is %lld with stride %lld: both must be positive", call, i, (long long)t.dim[i],
                    (long long)t.str[i]);
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  t.uid = be_i64(uid, 0);
  t.align = be_i64(al, 0);
  if (t.align <= 0 || (t.align & (t.align - 1))) {
    cudasim::warn("%s: byte alignment %lld is not a power of 2", call, (long long)t.align);
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t be_finalize_conv(const char *call, BackendDesc *d) {
  const BackendDesc::Attr *ct = be_need(call, d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE),
                          *mode = be_need(call, d, CUDNN_ATTR_CONVOLUTION_CONV_MODE),
                          *n = be_need(call, d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS),
                          *dil = be_need(call, d, CUDNN_ATTR_CONVOLUTION_DILATIONS),
                          *str = be_need(call, d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES),
                          *pre = be_need(call, d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS),
                          *post = be_need(call, d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS);
  if (!ct || !mode || !n || !dil || !str || !pre || !post) return CUDNN_STATUS_BAD_PARAM;
  BConv &c = d->conv;
  c.ct = be_val<cudnnDataType_t>(ct);
  c.mode = be_val<cudnnConvolutionMode_t>(mode);
  int64_t k = be_i64(n, 0);
  if (k < 1 || k > 3 || dil->n != k || str->n != k || pre->n != k || post->n != k) {
    cudasim::warn("%s: %lld spatial dims with %lld dilations, %lld strides, %lld and %lld paddings", call, (long long)k,
                  (long long)dil->n, (long long)str->n, (long long)pre->n, (long long)post->n);
    return CUDNN_STATUS_BAD_PARAM;
  }
  c.n = (int)k;
  for (int i = 0; i < c.n; i++) {
    c.dil[i] = be_i64(dil, i), c.str[i] = be_i64(str, i), c.pre[i] = be_i64(pre, i), c.post[i] = be_i64(post, i);
    if (c.dil[i] < 1 || c.str[i] < 1 || c.pre[i] < 0 || c.post[i] < 0) {
      cudasim::warn("%s: spatial dim %d: dilation %lld, stride %lld, paddings %lld and %lld", call, i,
                    (long long)c.dil[i], (long long)c.str[i], (long long)c.pre[i], (long long)c.post[i]);
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t be_finalize_op(const char *call, BackendDesc *d) {
  BackendDesc *x = be_ref(call, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_BACKEND_TENSOR_DESCRIPTOR),
              *w = be_ref(call, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_BACKEND_TENSOR_DESCRIPTOR),
              *y = be_ref(call, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_BACKEND_TENSOR_DESCRIPTOR),
              *c = be_ref(call, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                          CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const BackendDesc::Attr *al = be_need(call, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA),
                          *be = be_need(call, d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA);
  if (!x || !w || !y || !c || !al || !be) return CUDNN_STATUS_BAD_PARAM;
  BOp &op = d->op;
  op.x = x->tensor, op.w = w->tensor, op.y = y->tensor, op.conv = c->conv;
  op.alpha = al->t == CUDNN_TYPE_DOUBLE ? be_val<double>(al) : be_val<float>(al);
  op.beta = be->t == CUDNN_TYPE_DOUBLE ? be_val<double>(be) : be_val<float>(be);
  if (op.x.uid == op.w.uid || op.x.uid == op.y.uid || op.w.uid == op.y.uid) {
    cudasim::warn("%s: x, w and y need distinct unique ids (%lld, %lld, %lld)", call, (long long)op.x.uid,
                  (long long)op.w.uid, (long long)op.y.uid);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (op.conv.n + 2 != op.x.nd) {
    cudasim::warn("%s: %d-D tensors with a convolution of %d spatial dims", call, op.x.nd, op.conv.n);
    return CUDNN_STATUS_BAD_PARAM;
  }
  return be_geo(call, op, &op.geo);
}

/* the engines the heuristics offer for an operation, best first */
std::vector<int> be_engines(const BOp &op, cudnnBackendHeurMode_t mode) {
  std::vector<int> e;
  if (op.x.dt == CUDNN_DATA_FLOAT && mode != CUDNN_HEUR_MODE_FALLBACK) e.push_back(BE_TC);
  e.push_back(BE_FMA);
  return e;
}

}  // namespace

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                           cudnnBackendDescriptor_t *descriptor) {
  const char *call = "cudnnBackendCreateDescriptor";
  if (!descriptor) return CUDNN_STATUS_BAD_PARAM;
  if ((int)descriptorType < (int)CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR ||
      (int)descriptorType > (int)CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
    cudasim::warn("%s: descriptor type %d is not one the simulator has", call, (int)descriptorType);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  BackendDesc *d = obj_new<BackendDesc>(K_BACKEND);
  d->type = descriptorType;
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  if (!descriptor) return CUDNN_STATUS_SUCCESS;
  if (!obj_delete((BackendDesc *)descriptor, K_BACKEND)) {
    cudasim::warn("cudnnBackendDestroyDescriptor: not a live backend descriptor (destroyed twice?)");
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t elementCount,
                                       const void *arrayOfElements) {
  const char *call = "cudnnBackendSetAttribute";
  BackendDesc *d = be_live(descriptor);
  if (!d) {
    cudasim::warn("%s: not a live backend descriptor", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  const AttrSpec *s = attr_spec(attributeName);
  if (!s || s->owner != d->type || s->max == 0) {
    cudasim::warn("%s: attribute %s cannot be set on %s", call, s ? s->text : "(unknown)", be_type_name(d->type));
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (d->final) {
    cudasim::warn("%s: %s on a finalized %s", call, s->text, be_type_name(d->type));
    return CUDNN_STATUS_BAD_PARAM;
  }
  /* alpha and beta of a double convolution are double */
  bool type_ok = attributeType == s->t || (s->t == CUDNN_TYPE_FLOAT && attributeType == CUDNN_TYPE_DOUBLE);
  if (!type_ok) {
    cudasim::warn("%s: %s given elements of attribute type %d, it takes %d", call, s->text, (int)attributeType,
                  (int)s->t);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (elementCount < 1 || elementCount > s->max || !arrayOfElements) {
    cudasim::warn("%s: %s given %lld elements (1 to %lld)%s", call, s->text, (long long)elementCount, (long long)s->max,
                  arrayOfElements ? "" : " at NULL");
    return CUDNN_STATUS_BAD_PARAM;
  }
  BackendDesc::Attr &a = d->attrs[(int)attributeName];
  a.t = attributeType;
  a.n = elementCount;
  size_t bytes = be_elem_size(attributeType) * (size_t)elementCount;
  a.v.assign((const unsigned char *)arrayOfElements, (const unsigned char *)arrayOfElements + bytes);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  const char *call = "cudnnBackendFinalize";
  BackendDesc *d = be_live(descriptor);
  if (!d) {
    cudasim::warn("%s: not a live backend descriptor", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (d->final) {
    cudasim::warn("%s: %s finalized twice", call, be_type_name(d->type));
    return CUDNN_STATUS_BAD_PARAM;
  }
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: st = be_finalize_tensor(call, d); break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: st = be_finalize_conv(call, d); break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: st = be_finalize_op(call, d); break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: {
      const BackendDesc::Attr *h = be_need(call, d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE),
                              *ops = be_need(call, d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
      if (!h || !ops) return CUDNN_STATUS_BAD_PARAM;
      d->handle = be_val<cudnnHandle_t>(h);
      if (!dnn_handle_ok(call, d->handle)) return CUDNN_STATUS_BAD_PARAM;
      if (ops->n != 1) {
        cudasim::warn("%s: an operation graph of %lld operations: the simulator runs one convolution", call,
                      (long long)ops->n);
        return CUDNN_STATUS_NOT_SUPPORTED;
      }
      BackendDesc *op =
          be_ref(call, d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      if (!op) return CUDNN_STATUS_BAD_PARAM;
      d->op = op->op;
      break;
    }
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
      BackendDesc *g = be_ref(call, d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
      const BackendDesc::Attr *m = be_need(call, d, CUDNN_ATTR_ENGINEHEUR_MODE);
      if (!g || !m) return CUDNN_STATUS_BAD_PARAM;
      cudnnBackendHeurMode_t mode = be_val<cudnnBackendHeurMode_t>(m);
      if ((int)mode < 0 || (int)mode >= (int)CUDNN_HEUR_MODES_COUNT) {
        cudasim::warn("%s: heuristics mode %d", call, (int)mode);
        return CUDNN_STATUS_BAD_PARAM;
      }
      d->op = g->op;
      d->handle = g->handle;
      d->engines = be_engines(g->op, mode);
      break;
    }
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      const BackendDesc::Attr *h = be_need(call, d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
      BackendDesc *cfg = be_ref(call, d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      if (!h || !cfg) return CUDNN_STATUS_BAD_PARAM;
      d->handle = be_val<cudnnHandle_t>(h);
      if (!dnn_handle_ok(call, d->handle)) return CUDNN_STATUS_BAD_PARAM;
      d->op = cfg->op;
      d->engine = cfg->engine;
      d->ws = d->engine == BE_TC ? fwd_ws(d->op.geo, CUDNN_CONVOLUTION_FWD_ALGO_GEMM) : 0;
      break;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
      const BackendDesc::Attr *u = be_need(call, d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
                              *p = be_need(call, d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
      if (!u || !p) return CUDNN_STATUS_BAD_PARAM;
      if (u->n != p->n) {
        cudasim::warn("%s: a variant pack of %lld unique ids and %lld data pointers", call, (long long)u->n,
                      (long long)p->n);
        return CUDNN_STATUS_BAD_PARAM;
      }
      d->uids.clear();
      d->ptrs.clear();
      for (int64_t i = 0; i < u->n; i++) d->uids.push_back(be_i64(u, i)), d->ptrs.push_back(be_val<void *>(p, i));
      auto w = d->attrs.find((int)CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
      d->workspace = w != d->attrs.end() ? be_val<void *>(&w->second) : nullptr;
      break;
    }
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      cudasim::warn("%s: the simulator makes %s only as CUDNN_ATTR_ENGINEHEUR_RESULTS (and their engines)", call,
                    be_type_name(d->type));
      return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (st == CUDNN_STATUS_SUCCESS) d->final = true;
  return st;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t requestedElementCount,
                                       int64_t *elementCount, void *arrayOfElements) {
  const char *call = "cudnnBackendGetAttribute";
  BackendDesc *d = be_live(descriptor);
  const AttrSpec *s = attr_spec(attributeName);
  if (!d || !s || s->owner != d->type) {
    cudasim::warn("%s: %s of %s", call, s ? s->text : "an unknown attribute",
                  d ? be_type_name(d->type) : "a descriptor that is not live");
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (attributeType != s->t) {
    cudasim::warn("%s: %s asked for as attribute type %d, it is %d", call, s->text, (int)attributeType, (int)s->t);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!d->final) {
    cudasim::warn("%s: %s of a %s not finalized", call, s->text, be_type_name(d->type));
    return CUDNN_STATUS_NOT_INITIALIZED;
  }
  if (requestedElementCount < 0 || (requestedElementCount > 0 && !arrayOfElements)) return CUDNN_STATUS_BAD_PARAM;
  switch (attributeName) {
    case CUDNN_ATTR_ENGINEHEUR_RESULTS:
    case CUDNN_ATTR_ENGINECFG_ENGINE: {
      bool heur = attributeName == CUDNN_ATTR_ENGINEHEUR_RESULTS;
      int64_t n = heur ? (int64_t)d->engines.size() : 1, k = std::min(n, requestedElementCount);
      cudnnBackendDescriptorType_t want = heur ? CUDNN_BACKEND_ENGINECFG_DESCRIPTOR : CUDNN_BACKEND_ENGINE_DESCRIPTOR;
      for (int64_t i = 0; i < k; i++) {
        BackendDesc *r = be_live(((cudnnBackendDescriptor_t *)arrayOfElements)[i]);
        if (!r || r->type != want || r->final) {
          cudasim::warn("%s: %s: element %lld must be a %s made by cudnnBackendCreateDescriptor and not finalized",
                        call, s->text, (long long)i, be_type_name(want));
          return CUDNN_STATUS_BAD_PARAM;
        }
        r->op = d->op;
        r->handle = d->handle;
        r->engine = heur ? d->engines[(size_t)i] : d->engine;
        r->final = true;
      }
      if (elementCount) *elementCount = requestedElementCount ? k : n;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      if (requestedElementCount >= 1) *(int64_t *)arrayOfElements = d->engine;
      if (elementCount) *elementCount = 1;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: {
      std::vector<cudnnBackendNumericalNote_t> notes;
      if (d->engine == BE_TC) notes.push_back(CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
      int64_t k = std::min((int64_t)notes.size(), requestedElementCount);
      for (int64_t i = 0; i < k; i++) ((cudnnBackendNumericalNote_t *)arrayOfElements)[i] = notes[(size_t)i];
      if (elementCount) *elementCount = requestedElementCount ? k : (int64_t)notes.size();
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
      if (elementCount) *elementCount = 0;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
      if (requestedElementCount >= 1) *(int64_t *)arrayOfElements = (int64_t)d->ws;
      if (elementCount) *elementCount = 1;
      return CUDNN_STATUS_SUCCESS;
    default: {
      auto it = d->attrs.find((int)attributeName);
      int64_t n = it == d->attrs.end() ? 0 : it->second.n, k = std::min(n, requestedElementCount);
      if (k) memcpy(arrayOfElements, it->second.v.data(), be_elem_size(s->t) * (size_t)k);
      if (elementCount) *elementCount = requestedElementCount ? k : n;
      return CUDNN_STATUS_SUCCESS;
    }
  }
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack) {
  const char *call = "cudnnBackendExecute";
  if (!dnn_handle_ok(call, handle)) return CUDNN_STATUS_BAD_PARAM;
  BackendDesc *p = be_live(executionPlan), *v = be_live(variantPack);
  if (!p || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !p->final) {
    cudasim::warn("%s: the plan is not a finalized CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!v || v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR || !v->final) {
    cudasim::warn("%s: the variant pack is not a finalized CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (handle != p->handle) {
    cudasim::warn("%s: the plan was made for another cuDNN handle", call);
    return CUDNN_STATUS_BAD_PARAM;
  }
  const BOp &op = p->op;
  const BTensor *ts[3] = {&op.x, &op.w, &op.y};
  const char *names[3] = {"x", "w", "y"};
  void *ptr[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < 3; k++) {
    size_t i = 0;
    while (i < v->uids.size() && v->uids[i] != ts[k]->uid) i++;
    if (i == v->uids.size()) {
      cudasim::warn("%s: the variant pack has no pointer for %s (unique id %lld)", call, names[k],
                    (long long)ts[k]->uid);
      return CUDNN_STATUS_BAD_PARAM;
    }
    ptr[k] = v->ptrs[i];
    if ((uintptr_t)ptr[k] % (uintptr_t)ts[k]->align) {
      cudasim::warn("%s: %s (%p) is not aligned to the %lld bytes its tensor descriptor declares", call, names[k],
                    ptr[k], (long long)ts[k]->align);
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  if (p->ws && !v->workspace) {
    cudasim::warn("%s: the plan needs %zu bytes of workspace and the variant pack has none", call, p->ws);
    return CUDNN_STATUS_BAD_PARAM;
  }
  ConvJob j{};
  j.fwd = 1;
  j.g = op.geo;
  j.algo = p->engine == BE_TC ? CUDNN_CONVOLUTION_FWD_ALGO_GEMM : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  double ad = op.alpha, bd = op.beta;
  float af = (float)op.alpha, bf = (float)op.beta;
  bool dbl = j.g.dt == CUDNN_DATA_DOUBLE;
  cudnnStatus_t st =
      conv_call_checks(call, dbl ? (const void *)&ad : (const void *)&af, dbl ? (const void *)&bd : (const void *)&bf,
                       "x", ptr[0], ptr[1], "y", ptr[2], v->workspace, p->ws, p->ws, &j);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  j.tf32 = p->engine == BE_TC && j.g.dt == CUDNN_DATA_FLOAT && tf32_allowed();
  j.split = true;
  return conv_enqueue(call, handle, j);
}

}  // extern "C"

/* ==== cuBLAS and cuBLASLt ========================================================================= */

struct cublasContext {
  cudaStream_t stream = nullptr;
  void *ws = nullptr;
  size_t ws_size = 0;
};
struct cublasLtContext {
  int unused = 0;
};
struct cublasLtMatmulDescOpaque {
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  cudaDataType scale = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N, tc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  std::map<int, std::vector<char>> other;
};
struct cublasLtMatrixLayoutOpaque {
  cudaDataType type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0, plane = 0;
};
struct cublasLtMatmulPreferenceOpaque {
  uint64_t max_ws = 0;
  uint32_t align[4] = {256, 256, 256, 256};
  std::map<int, std::vector<char>> other;
};

namespace {

const char *blas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char *blas_status_string(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

bool op_ok(int32_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; }

/* 0: float, 1: double, -1: not supported */
int gemm_kind(cublasComputeType_t ct, cudaDataType scale) {
  switch (ct) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32: return scale == CUDA_R_32F ? 0 : -1;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: return scale == CUDA_R_64F ? 1 : -1;
    default: return -1;
  }
}

struct MatSpec {
  int64_t rows, cols, ld, stride;
};

/* D = alpha op(A) op(B) + beta C, column-major, batched */
struct GemmJob {
  int dbl;
  bool ta, tb;
  int64_t m, n, k, batch;
  MatSpec A, B, C, D;
  const void *a, *b, *c;
  void *d;
  double alpha, beta;
  Region ra, rb, rc, rd; /* what is read and written */
  bool tf32;             /* CUBLAS_COMPUTE_32F_FAST_TF32 */
  bool split;            /* the second algorithm of the heuristic: k in two halves, summed
                            (other bits than the first's, as another GPU kernel's) */
  /* cuBLASLt's epilogue (BIAS, RELU, RELU_BIAS): D[r, c] += bias[r], then max(D, 0) */
  bool bias_add, relu;
  const void *bias;
  Region rbias;
};

/* cuBLASLt's epilogue after alpha op(A) op(B) + beta C: the bias broadcast along the
 * columns (one value per row of D), then ReLU as cuBLASLt defines it, max(v, 0) */
template <class T>
void gemm_epilogue(const GemmJob &j) {
  if (!j.bias_add && !j.relu) return;
  const T *bias = (const T *)j.bias;
  for (int64_t i = 0; i < j.batch; i++)
    for (int64_t c = 0; c < j.n; c++) {
      T *col = (T *)j.d + i * j.D.stride + c * j.D.ld;
      for (int64_t r = 0; r < j.m; r++) {
        T v = col[r];
        if (j.bias_add) v += bias[r];
        if (j.relu) v = std::fmax(v, (T)0);
        col[r] = v;
      }
    }
}

template <class T>
void gemm_run(const GemmJob &j) {
  const T alpha = (T)j.alpha, beta = (T)j.beta;
  const T *A = (const T *)j.a, *B = (const T *)j.b, *C = (const T *)j.c;
  T *D = (T *)j.d;
  for (int64_t i = 0; i < j.batch; i++) {
    T *Di = D + i * j.D.stride;
    if (beta != (T)0 && C != D) { /* D = C first, then D = alpha AB + beta D */
      const T *Ci = C + i * j.C.stride;
      for (int64_t c = 0; c < j.n; c++) memmove(Di + c * j.D.ld, Ci + c * j.C.ld, sizeof(T) * (size_t)j.m);
    }
    if (j.k == 0 || alpha == (T)0) {
      for (int64_t c = 0; c < j.n; c++) {
        T *col = Di + c * j.D.ld;
        if (beta == (T)0)
          for (int64_t r = 0; r < j.m; r++) col[r] = 0;
        else
          for (int64_t r = 0; r < j.m; r++) col[r] *= beta;
      }
      continue; /* the epilogue below still runs */
    }
    if (beta == (T)0) /* never read D (it may hold NaN) */
      for (int64_t c = 0; c < j.n; c++) memset((void *)(Di + c * j.D.ld), 0, sizeof(T) * (size_t)j.m);
    int64_t k1 = j.split ? j.k / 2 : j.k;
    const T *Ai = A + i * j.A.stride, *Bi = B + i * j.B.stride;
    gemm(CblasColMajor, j.ta ? CblasTrans : CblasNoTrans, j.tb ? CblasTrans : CblasNoTrans, (int)j.m, (int)j.n, (int)k1,
         alpha, Ai, (int)j.A.ld, Bi, (int)j.B.ld, beta, Di, (int)j.D.ld);
    if (k1 < j.k) /* the rest of k: op(A)'s columns and op(B)'s rows from k1 */
      gemm(CblasColMajor, j.ta ? CblasTrans : CblasNoTrans, j.tb ? CblasTrans : CblasNoTrans, (int)j.m, (int)j.n,
           (int)(j.k - k1), alpha, Ai + (j.ta ? k1 : k1 * j.A.ld), (int)j.A.ld, Bi + (j.tb ? k1 * j.B.ld : k1),
           (int)j.B.ld, (T)1, Di, (int)j.D.ld);
  }
  gemm_epilogue<T>(j);
}

/* Checks shared by cuBLAS and cuBLASLt once the shapes are known; fills the regions. */
cublasStatus_t gemm_checks(const char *call, GemmJob &j) {
  size_t es = j.dbl ? 8 : 4;
  if (j.m > INT_MAX || j.n > INT_MAX || j.k > INT_MAX || j.A.ld > INT_MAX || j.B.ld > INT_MAX || j.D.ld > INT_MAX ||
      j.C.ld > INT_MAX) {
    cudasim::warn("%s: a dimension or leading dimension of 2^31 or more", call);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  bool reads_ab = j.k > 0 && j.alpha != 0, reads_c = j.beta != 0;
  j.ra = mat_region(j.a, es, j.A.rows, j.A.cols, j.A.ld, j.batch, j.A.stride);
  j.rb = mat_region(j.b, es, j.B.rows, j.B.cols, j.B.ld, j.batch, j.B.stride);
  j.rc = mat_region(j.c, es, j.C.rows, j.C.cols, j.C.ld, j.batch, j.C.stride);
  j.rd = mat_region(j.d, es, j.D.rows, j.D.cols, j.D.ld, j.batch, j.D.stride);
  if (!reads_ab) j.ra.nd = j.rb.nd = 1, j.ra.dim[0] = j.rb.dim[0] = 0;
  if (!reads_c) j.rc.nd = 1, j.rc.dim[0] = 0;
  if (!check_dev(call, "A", j.ra) || !check_dev(call, "B", j.rb) || !check_dev(call, "C", j.rc) ||
      !check_dev(call, "D", j.rd))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (region_self_overlaps(j.rd)) {
    cudasim::warn(
        "%s: the output's batches or columns share memory (ld %lld, batch stride %lld, %lld x %lld, batch "
        "%lld)",
        call, (long long)j.D.ld, (long long)j.D.stride, (long long)j.D.rows, (long long)j.D.cols, (long long)j.batch);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (regions_overlap(j.rd, j.ra) || regions_overlap(j.rd, j.rb)) {
    cudasim::warn("%s: the output (%p) overlaps %s: GEMMs are not in-place", call, j.d,
                  regions_overlap(j.rd, j.ra) ? "A" : "B");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (reads_c && j.c != j.d && regions_overlap(j.rd, j.rc)) {
    cudasim::warn("%s: D (%p) and C (%p) differ but overlap", call, j.d, j.c);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t gemm_enqueue(const char *call, cudaStream_t s, const GemmJob &j) {
  if (j.m == 0 || j.n == 0 || j.batch == 0) return CUBLAS_STATUS_SUCCESS;
  auto fn = [j, call]() {
    if (!still_dev(call, "A", j.ra) || !still_dev(call, "B", j.rb) || !still_dev(call, "C", j.rc) ||
        !still_dev(call, "D", j.rd) || (j.bias_add && !still_dev(call, "the bias", j.rbias)))
      return;
    blas_init();
    tl_tf32 = j.tf32;
    if (j.dbl) gemm_run<double>(j);
    else gemm_run<float>(j);
  };
  cudaError_t e = cudasim::enqueue(s, fn, call);
  if (e != cudaSuccess) {
    cudasim::warn("%s: queueing on the stream failed (%s)", call, cudaGetErrorString(e));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt ------------------------------------------------------------------------------- */

const uint64_t LT_ALGO_MAGIC = 0x43554441'53494d4cull;

/* the shapes and types of a cuBLASLt matmul (everything but pointers) */
cublasStatus_t lt_shape(const char *call, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                        cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, GemmJob *j) {
  if (!obj_live(op, K_LT_DESC)) {
    cudasim::warn("%s: the matmul descriptor was not created (or was destroyed)", call);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  cublasLtMatrixLayout_t L[4] = {A, B, C, D};
  const char *names = "ABCD";
  for (int i = 0; i < 4; i++)
    if (!obj_live(L[i], K_LT_LAYOUT)) {
      cudasim::warn("%s: the layout of %c was not created (or was destroyed)", call, names[i]);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  uint32_t ep = op->epilogue;
  if (op->pointer_mode != CUBLASLT_POINTER_MODE_HOST || op->tc != CUBLAS_OP_N ||
      (ep != CUBLASLT_EPILOGUE_DEFAULT && ep != CUBLASLT_EPILOGUE_BIAS && ep != CUBLASLT_EPILOGUE_RELU &&
       ep != CUBLASLT_EPILOGUE_RELU_BIAS)) {
    cudasim::warn(
        "%s: pointer mode %d, epilogue %u, TRANSC %d: the simulator supports host pointers, the epilogues "
        "DEFAULT, BIAS, RELU and RELU_BIAS, and no TRANSC",
        call, (int)op->pointer_mode, (unsigned)ep, (int)op->tc);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (op->other.count(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) || op->other.count(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE)) {
    cudasim::warn(
        "%s: a bias data type or batch stride was set: the simulator supports the default (D's type, one "
        "vector for every batch)",
        call);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  j->bias_add = ep == CUBLASLT_EPILOGUE_BIAS || ep == CUBLASLT_EPILOGUE_RELU_BIAS;
  j->relu = ep == CUBLASLT_EPILOGUE_RELU || ep == CUBLASLT_EPILOGUE_RELU_BIAS;
  int kind = gemm_kind(op->ct, op->scale);
  cudaDataType want = kind == 1 ? CUDA_R_64F : CUDA_R_32F;
  if (kind < 0 || A->type != want || B->type != want || C->type != want || D->type != want) {
    cudasim::warn(
        "%s: compute type %d, scale type %d, A/B/C/D types %d/%d/%d/%d: the simulator supports "
        "32F with float and 64F with double throughout",
        call, (int)op->ct, (int)op->scale, (int)A->type, (int)B->type, (int)C->type, (int)D->type);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  for (int i = 0; i < 4; i++) {
    if (L[i]->order != CUBLASLT_ORDER_COL) {
      cudasim::warn("%s: the layout of %c has order %d: the simulator supports CUBLASLT_ORDER_COL", call, names[i],
                    (int)L[i]->order);
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (L[i]->ld < (int64_t)std::max<uint64_t>(1, L[i]->rows) || L[i]->rows > (uint64_t)INT64_MAX / 2 ||
        L[i]->cols > (uint64_t)INT64_MAX / 2) {
      cudasim::warn("%s: %c is %llu x %llu with leading dimension %lld (at least its rows)", call, names[i],
                    (unsigned long long)L[i]->rows, (unsigned long long)L[i]->cols, (long long)L[i]->ld);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (A->batch != D->batch || B->batch != D->batch || C->batch != D->batch || D->batch < 1) {
    cudasim::warn("%s: batch counts A %d, B %d, C %d, D %d: they must be equal and positive", call, A->batch, B->batch,
                  C->batch, D->batch);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  bool ta = op->ta != CUBLAS_OP_N, tb = op->tb != CUBLAS_OP_N;
  uint64_t m = D->rows, n = D->cols;
  uint64_t am = ta ? A->cols : A->rows, ak = ta ? A->rows : A->cols;
  uint64_t bk = tb ? B->cols : B->rows, bn = tb ? B->rows : B->cols;
  if (am != m || bn != n || ak != bk || C->rows != m || C->cols != n) {
    cudasim::warn(
        "%s: op(A) is %llu x %llu, op(B) %llu x %llu, C %llu x %llu, D %llu x %llu: the shapes do not match "
        "(TRANSA %d, TRANSB %d)",
        call, (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn,
        (unsigned long long)C->rows, (unsigned long long)C->cols, (unsigned long long)m, (unsigned long long)n,
        (int)op->ta, (int)op->tb);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  j->dbl = kind;
  j->tf32 = op->ct == CUBLAS_COMPUTE_32F_FAST_TF32 && tf32_allowed();
  j->ta = ta;
  j->tb = tb;
  j->m = (int64_t)m;
  j->n = (int64_t)n;
  j->k = (int64_t)ak;
  j->batch = D->batch;
  auto spec = [](cublasLtMatrixLayout_t l) {
    return MatSpec{(int64_t)l->rows, (int64_t)l->cols, l->ld, l->batch > 1 ? l->stride : 0};
  };
  j->A = spec(A);
  j->B = spec(B);
  j->C = spec(C);
  j->D = spec(D);
  return CUBLAS_STATUS_SUCCESS;
}

uint32_t pow2_part(uint64_t x) { /* largest power of 2 dividing x, capped at 2^31 */
  if (!x) return 1u << 31;
  uint64_t p = x & (~x + 1);
  return p > (1u << 31) ? 1u << 31 : (uint32_t)p;
}

/* the alignment an algorithm chosen under preference alignment pref may rely on */
uint32_t lt_align(uint32_t pref, const MatSpec &s, int64_t batch, size_t es) {
  uint32_t a = std::min<uint32_t>(pref ? pref : 1, 16);
  if (s.cols > 1) a = std::min(a, pow2_part((uint64_t)s.ld * es));
  if (batch > 1 && s.stride) a = std::min(a, pow2_part((uint64_t)(s.stride < 0 ? -s.stride : s.stride) * es));
  return a ? a : 1;
}

bool lt_handle_ok(const char *call, cublasLtHandle_t h) {
  if (obj_live(h, K_LT)) return true;
  cudasim::warn("%s: the cuBLASLt handle was not created by cublasLtCreate (or was destroyed)", call);
  return false;
}

bool blas_handle_ok(const char *call, cublasHandle_t h) {
  if (obj_live(h, K_BLAS)) return true;
  cudasim::warn("%s: the cuBLAS handle was not created by cublasCreate (or was destroyed)", call);
  return false;
}

/* attribute value of exactly the expected size */
template <class V>
bool attr_get(const char *call, int attr, const void *buf, size_t size, V *out) {
  if (!buf || size != sizeof(V)) {
    cudasim::warn("%s: attribute %d takes %zu bytes, got %zu", call, attr, sizeof(V), size);
    return false;
  }
  memcpy(out, buf, sizeof(V));
  return true;
}

}  // namespace

extern "C" {

const char *cublasGetStatusString(cublasStatus_t status) { return blas_status_string(status); }
const char *cublasGetStatusName(cublasStatus_t status) { return blas_status_name(status); }
const char *cublasLtGetStatusString(cublasStatus_t status) { return blas_status_string(status); }
const char *cublasLtGetStatusName(cublasStatus_t status) { return blas_status_name(status); }

/* ---- cuBLAS ---- */

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = obj_new<cublasContext>(K_BLAS);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!obj_delete(handle, K_BLAS)) {
    cudasim::warn("cublasDestroy: not a live cuBLAS handle (destroyed twice?)");
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t streamId) {
  if (!blas_handle_ok("cublasSetStream", handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  /* as cuBLAS: setting the stream puts the workspace back to the default pool */
  handle->ws = nullptr;
  handle->ws_size = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *streamId) {
  if (!blas_handle_ok("cublasGetStream", handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!streamId) return CUBLAS_STATUS_INVALID_VALUE;
  *streamId = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes) {
  const char *call = "cublasSetWorkspace";
  if (!blas_handle_ok(call, handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace) {
    if ((uintptr_t)workspace % 256) {
      cudasim::warn("%s: workspace (%p) is not aligned to 256 bytes", call, workspace);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    int64_t d[1] = {(int64_t)(workspaceSizeInBytes ? workspaceSizeInBytes : 1)}, s[1] = {1};
    if (!check_dev(call, "workspace", region(workspace, 1, 1, d, s))) return CUBLAS_STATUS_INVALID_VALUE;
  } else if (workspaceSizeInBytes) {
    cudasim::warn("%s: NULL workspace of %zu bytes", call, workspaceSizeInBytes);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->ws = workspace;
  handle->ws_size = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  const char *call = "cublasGemmStridedBatchedEx";
  if (!blas_handle_ok(call, handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!op_ok(transa) || !op_ok(transb) || m < 0 || n < 0 || k < 0 || batchCount < 0 || !alpha || !beta) {
    cudasim::warn("%s: transa %d, transb %d, m %d, n %d, k %d, batchCount %d, alpha %p, beta %p", call, (int)transa,
                  (int)transb, m, n, k, batchCount, alpha, beta);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m)) {
    cudasim::warn("%s: lda %d, ldb %d, ldc %d too small for m %d, n %d, k %d (transa %d, transb %d)", call, lda, ldb,
                  ldc, m, n, k, (int)transa, (int)transb);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  int kind = Atype == CUDA_R_32F ? 0 : Atype == CUDA_R_64F ? 1 : -1;
  cudaDataType scale = kind == 1 ? CUDA_R_64F : CUDA_R_32F;
  if (kind < 0 || Btype != Atype || Ctype != Atype || gemm_kind(computeType, scale) != kind) {
    cudasim::warn(
        "%s: types A %d, B %d, C %d with compute type %d: the simulator supports float with 32F and double "
        "with 64F",
        call, (int)Atype, (int)Btype, (int)Ctype, (int)computeType);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  (void)algo;
  GemmJob j{};
  j.dbl = kind;
  j.tf32 = computeType == CUBLAS_COMPUTE_32F_FAST_TF32 && tf32_allowed();
  j.ta = ta;
  j.tb = tb;
  j.m = m, j.n = n, j.k = k, j.batch = batchCount;
  j.A = MatSpec{ta ? k : m, ta ? m : k, lda, batchCount > 1 ? strideA : 0};
  j.B = MatSpec{tb ? n : k, tb ? k : n, ldb, batchCount > 1 ? strideB : 0};
  j.C = MatSpec{m, n, ldc, batchCount > 1 ? strideC : 0};
  j.D = j.C;
  j.a = A, j.b = B, j.c = C, j.d = C;
  if (kind == 1) j.alpha = *(const double *)alpha, j.beta = *(const double *)beta;
  else j.alpha = *(const float *)alpha, j.beta = *(const float *)beta;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  cublasStatus_t st = gemm_checks(call, j);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  return gemm_enqueue(call, handle->stream, j);
}

/* ---- cuBLASLt ---- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = obj_new<cublasLtContext>(K_LT);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!obj_delete(lightHandle, K_LT)) {
    cudasim::warn("cublasLtDestroy: not a live cuBLASLt handle (destroyed twice?)");
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulDesc_t d = obj_new<cublasLtMatmulDescOpaque>(K_LT_DESC);
  d->ct = computeType;
  d->scale = scaleType;
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (!matmulDesc) return CUBLAS_STATUS_SUCCESS;
  if (!obj_delete(matmulDesc, K_LT_DESC)) {
    cudasim::warn("cublasLtMatmulDescDestroy: not a live matmul descriptor (destroyed twice?)");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
  const char *call = "cublasLtMatmulDescSetAttribute";
  if (!obj_live(d, K_LT_DESC)) {
    cudasim::warn("%s: not a live matmul descriptor", call);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  int32_t v = 0;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      if (!attr_get(call, attr, buf, sizeInBytes, &v)) return CUBLAS_STATUS_INVALID_VALUE;
      d->ct = (cublasComputeType_t)v;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      if (!attr_get(call, attr, buf, sizeInBytes, &v)) return CUBLAS_STATUS_INVALID_VALUE;
      d->scale = (cudaDataType)v;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      if (!attr_get(call, attr, buf, sizeInBytes, &v)) return CUBLAS_STATUS_INVALID_VALUE;
      d->pointer_mode = v;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
    case CUBLASLT_MATMUL_DESC_TRANSC:
      if (!attr_get(call, attr, buf, sizeInBytes, &v)) return CUBLAS_STATUS_INVALID_VALUE;
      if (!op_ok(v)) {
        cudasim::warn("%s: %d is not a cublasOperation_t", call, (int)v);
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : attr == CUBLASLT_MATMUL_DESC_TRANSB ? d->tb : d->tc) = v;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t e = 0;
      if (!attr_get(call, attr, buf, sizeInBytes, &e)) return CUBLAS_STATUS_INVALID_VALUE;
      d->epilogue = e;
      return CUBLAS_STATUS_SUCCESS;
    }
    default:
      if (!buf && sizeInBytes) return CUBLAS_STATUS_INVALID_VALUE;
      d->other[(int)attr].assign((const char *)buf, (const char *)buf + sizeInBytes);
      return CUBLAS_STATUS_SUCCESS;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatrixLayout_t l = obj_new<cublasLtMatrixLayoutOpaque>(K_LT_LAYOUT);
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (!matLayout) return CUBLAS_STATUS_SUCCESS;
  if (!obj_delete(matLayout, K_LT_LAYOUT)) {
    cudasim::warn("cublasLtMatrixLayoutDestroy: not a live matrix layout (destroyed twice?)");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
  const char *call = "cublasLtMatrixLayoutSetAttribute";
  if (!obj_live(l, K_LT_LAYOUT)) {
    cudasim::warn("%s: not a live matrix layout", call);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      uint32_t v = 0;
      if ((ok = attr_get(call, attr, buf, sizeInBytes, &v))) l->type = (cudaDataType)v;
      break;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: ok = attr_get(call, attr, buf, sizeInBytes, &l->order); break;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: ok = attr_get(call, attr, buf, sizeInBytes, &l->rows); break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: ok = attr_get(call, attr, buf, sizeInBytes, &l->cols); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: ok = attr_get(call, attr, buf, sizeInBytes, &l->ld); break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
      int32_t v = 0;
      if ((ok = attr_get(call, attr, buf, sizeInBytes, &v))) {
        if (v < 1) {
          cudasim::warn("%s: batch count %d", call, (int)v);
          return CUBLAS_STATUS_INVALID_VALUE;
        }
        l->batch = v;
      }
      break;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: ok = attr_get(call, attr, buf, sizeInBytes, &l->stride); break;
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: ok = attr_get(call, attr, buf, sizeInBytes, &l->plane); break;
    default: cudasim::warn("%s: unknown attribute %d", call, (int)attr); return CUBLAS_STATUS_INVALID_VALUE;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = obj_new<cublasLtMatmulPreferenceOpaque>(K_LT_PREF);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (!pref) return CUBLAS_STATUS_SUCCESS;
  if (!obj_delete(pref, K_LT_PREF)) {
    cudasim::warn("cublasLtMatmulPreferenceDestroy: not a live preference (destroyed twice?)");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes) {
  const char *call = "cublasLtMatmulPreferenceSetAttribute";
  if (!obj_live(p, K_LT_PREF)) {
    cudasim::warn("%s: not a live preference", call);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return attr_get(call, attr, buf, sizeInBytes, &p->max_ws) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return attr_get(call, attr, buf, sizeInBytes, &p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES])
                 ? CUBLAS_STATUS_SUCCESS
                 : CUBLAS_STATUS_INVALID_VALUE;
    default:
      if (!buf && sizeInBytes) return CUBLAS_STATUS_INVALID_VALUE;
      p->other[(int)attr].assign((const char *)buf, (const char *)buf + sizeInBytes);
      return CUBLAS_STATUS_SUCCESS;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount) {
  const char *call = "cublasLtMatmulAlgoGetHeuristic";
  if (!lt_handle_ok(call, lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount) return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  if (!obj_live(preference, K_LT_PREF)) {
    cudasim::warn("%s: the preference was not created (or was destroyed)", call);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  GemmJob j{};
  cublasStatus_t st = lt_shape(call, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &j);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  size_t es = j.dbl ? 8 : 4;
  /* two algorithms where k >= 2 (the second sums k in two halves: LT_ALGO_MAGIC | 1) */
  int n = std::min(requestedAlgoCount, j.k >= 2 ? 2 : 1);
  for (int a = 0; a < n; a++) {
    cublasLtMatmulHeuristicResult_t &r = heuristicResultsArray[a];
    memset(&r, 0, sizeof r);
    r.algo.data[0] = LT_ALGO_MAGIC | (uint64_t)a;
    r.algo.data[1] = (uint64_t)operationDesc->ct;
    r.algo.data[2] = (uint64_t)j.dbl;
    const MatSpec *ms[4] = {&j.A, &j.B, &j.C, &j.D};
    for (int i = 0; i < 4; i++) r.algo.data[3 + i] = lt_align(preference->align[i], *ms[i], j.batch, es);
    r.algo.data[7] = 0; /* workspace bytes the algorithm needs */
    r.workspaceSize = 0;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
  }
  *returnAlgoCount = n;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  const char *call = "cublasLtMatmul";
  if (!lt_handle_ok(call, lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta) {
    cudasim::warn("%s: alpha or beta is NULL", call);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  GemmJob j{};
  cublasStatus_t st = lt_shape(call, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &j);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (j.dbl) j.alpha = *(const double *)alpha, j.beta = *(const double *)beta;
  else j.alpha = *(const float *)alpha, j.beta = *(const float *)beta;
  if (C == D && j.beta != 0 && (Cdesc->ld != Ddesc->ld || j.C.stride != j.D.stride || Cdesc->type != Ddesc->type)) {
    cudasim::warn(
        "%s: C and D are the same memory (in place) but their layouts differ (ld %lld / %lld, batch stride "
        "%lld / %lld)",
        call, (long long)Cdesc->ld, (long long)Ddesc->ld, (long long)j.C.stride, (long long)j.D.stride);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (algo) {
    if ((algo->data[0] & ~(uint64_t)1) != LT_ALGO_MAGIC) {
      cudasim::warn("%s: algo was not filled by cublasLtMatmulAlgoGetHeuristic (uninitialised?)", call);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (algo->data[1] != (uint64_t)computeDesc->ct || algo->data[2] != (uint64_t)j.dbl) {
      cudasim::warn("%s: algo was chosen for compute type %llu, data kind %llu; this call has %d, %d", call,
                    (unsigned long long)algo->data[1], (unsigned long long)algo->data[2], (int)computeDesc->ct, j.dbl);
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (workspaceSizeInBytes < algo->data[7]) {
      cudasim::warn("%s: workspace of %zu bytes, the algorithm needs %llu", call, workspaceSizeInBytes,
                    (unsigned long long)algo->data[7]);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    const void *ptr[4] = {A, B, C, D};
    const char *names = "ABCD";
    for (int i = 0; i < 4; i++) {
      if (i == 2 && j.beta == 0) continue;
      uint64_t need = algo->data[3 + i];
      if (need > 1 && (uintptr_t)ptr[i] % need) {
        cudasim::warn(
            "%s: %c (%p) is %u-byte aligned, the algorithm from cublasLtMatmulAlgoGetHeuristic relies on "
            "%llu (its preference's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES, default 256, was not met)",
            call, names[i], ptr[i], (unsigned)pow2_part((uint64_t)(uintptr_t)ptr[i]), (unsigned long long)need,
            names[i]);
        return CUBLAS_STATUS_NOT_SUPPORTED;
      }
    }
  }
  if (workspace) {
    int64_t d[1] = {(int64_t)(workspaceSizeInBytes ? workspaceSizeInBytes : 1)}, s[1] = {1};
    if (!check_dev(call, "workspace", region(workspace, 1, 1, d, s))) return CUBLAS_STATUS_INVALID_VALUE;
  } else if (workspaceSizeInBytes) {
    cudasim::warn("%s: NULL workspace of %zu bytes", call, workspaceSizeInBytes);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  j.a = A, j.b = B, j.c = C, j.d = D;
  if (j.bias_add) { /* the pointer as set when this call was made (a graph replays that one) */
    auto it = computeDesc->other.find(CUBLASLT_MATMUL_DESC_BIAS_POINTER);
    if (it == computeDesc->other.end() || it->second.size() != sizeof(void *)) {
      cudasim::warn("%s: a BIAS epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER", call);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(&j.bias, it->second.data(), sizeof(void *));
    int64_t d[1] = {j.m}, s[1] = {1};
    j.rbias = region(j.bias, j.dbl ? 8 : 4, 1, d, s);
    if (!j.bias || !check_dev(call, "the bias", j.rbias)) return CUBLAS_STATUS_INVALID_VALUE;
  }
  j.split = algo && (algo->data[0] & 1);
  st = gemm_checks(call, j);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  return gemm_enqueue(call, stream, j);
}

}  // extern "C"
