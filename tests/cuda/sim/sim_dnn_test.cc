/* sim_dnn_test.cc - checks the CUDA simulator's cuDNN, cuBLASLt and cuBLAS (sim_dnn.cc)
 * against naive loops in double: convolution forward and backward data (1-D, 2-D, 3-D,
 * groups, depthwise, strides, dilations, pads, strided tensors, alpha/beta, float and
 * double, the adjoint identity), cublasLtMatmul and cublasGemmStridedBatchedEx (all four
 * transposes, ld > rows, strided and interleaved batches, alpha/beta), graph replay after
 * the descriptors are gone, determinism, and the errors (shapes, host pointers, extents,
 * workspace, alignment, in-place, destroyed descriptors); cuDNN's backend API for forward
 * convolutions (every engine the heuristics offer, KCRS and KRSC filters, its errors).
 *
 * Build (from the repository root):
 *   g++ -std=c++17 -O2 -Wall -Wextra -I tests/cuda/sim/include -I tests/cuda/sim \
 *       tests/cuda/sim/sim_dnn_test.cc tests/cuda/sim/sim_dnn.cc tests/cuda/sim/sim_core.cc \
 *       -lopenblas -lpthread -o sim_dnn_test
 * One line per check, a summary; exit status 0 when all pass. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

static int n_pass, n_fail;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  printf("%s %s\n", ok ? "PASS" : "FAIL", buf);
  fflush(stdout);
  if (ok) n_pass++;
  else n_fail++;
}

/* a call that must succeed: else the file, line, call and status, exit 2 */
#define MUST(x, ok, name_of)                                                   \
  do {                                                                         \
    auto e_ = (x);                                                             \
    if (e_ != (ok)) {                                                          \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, name_of(e_)); \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)
#define CU(x) MUST(x, cudaSuccess, cudaGetErrorString)
#define DNN(x) MUST(x, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)
#define BL(x) MUST(x, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)

/* ---- helpers ---------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rnd() { /* uniform in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}
static std::vector<double> rnd_vec(size_t n) {
  std::vector<double> v(n);
  for (auto &x : v) x = rnd();
  return v;
}

/* device buffer of doubles stored as T (es 4: float, 8: double) */
struct Dev {
  void *p = nullptr;
  size_t n = 0, es = 4;
  Dev() = default;
  Dev(const std::vector<double> &h, size_t esz) : n(h.size()), es(esz) {
    CU(cudaMalloc(&p, std::max<size_t>(n, 1) * es));
    put(h);
  }
  void put(const std::vector<double> &h) {
    std::vector<char> buf(n * es);
    for (size_t i = 0; i < n; i++) {
      if (es == 8) memcpy(&buf[i * 8], &h[i], 8);
      else {
        float f = (float)h[i];
        memcpy(&buf[i * 4], &f, 4);
      }
    }
    if (n) CU(cudaMemcpy(p, buf.data(), n * es, cudaMemcpyHostToDevice));
  }
  std::vector<double> get() const {
    std::vector<char> buf(n * es);
    if (n) CU(cudaMemcpy(buf.data(), p, n * es, cudaMemcpyDeviceToHost));
    std::vector<double> h(n);
    for (size_t i = 0; i < n; i++) {
      if (es == 8) memcpy(&h[i], &buf[i * 8], 8);
      else {
        float f;
        memcpy(&f, &buf[i * 4], 4);
        h[i] = f;
      }
    }
    return h;
  }
  void free_() {
    if (p) cudaFree(p);
    p = nullptr;
  }
};

/* host values as stored (float rounding) */
static std::vector<double> as_stored(std::vector<double> v, size_t es) {
  if (es == 4)
    for (auto &x : v) x = (double)(float)x;
  return v;
}

/* max |a - b| over max |b| */
static double rel_err(const std::vector<double> &a, const std::vector<double> &b) {
  double d = 0, m = 1e-30;
  for (size_t i = 0; i < a.size(); i++) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    d = std::max(d, fabs(a[i] - b[i]));
    m = std::max(m, fabs(b[i]));
  }
  return d / m;
}

/* ---- convolution reference ---------------------------------------------------------------- */

struct Conv {
  const char *name;
  int nsp; /* 1, 2 (4-D descriptors) or 3 (5-D) */
  int N, C, K, G;
  int in[3], k[3], pad[3], str[3], dil[3]; /* the last nsp entries are used */
  bool dbl, flip;
  double alpha, beta;
  int xlay, ylay; /* 0 packed, 1 channels innermost, 2 padded with gaps */
};

struct Shape {
  int nd; /* descriptor dims: 4 or 5 */
  int dim[5], str[5];
  int64_t d5[5], s5[5]; /* normalised n, c, s0, s1, s2 */
  size_t elems;         /* buffer elements */
};

static Shape make_shape(int nsp, int n, int c, const int64_t *sp, int lay) {
  Shape s{};
  s.nd = nsp == 3 ? 5 : 4;
  s.dim[0] = n, s.dim[1] = c;
  for (int i = 0; i < s.nd - 2; i++) s.dim[2 + i] = (int)sp[3 - (s.nd - 2) + i];
  /* innermost-first order of the descriptor's dims */
  std::vector<int> order;
  if (lay == 1) {
    order.push_back(1);
    for (int i = s.nd - 1; i >= 2; i--) order.push_back(i);
    order.push_back(0);
  } else {
    for (int i = s.nd - 1; i >= 0; i--) order.push_back(i);
  }
  int64_t st = lay == 2 ? 2 : 1;
  for (int i : order) {
    s.str[i] = (int)st;
    st = st * s.dim[i] + (lay == 2 ? 3 : 0);
  }
  int64_t maxoff = 0;
  for (int i = 0; i < s.nd; i++) maxoff += (int64_t)(s.dim[i] - 1) * s.str[i];
  s.elems = (size_t)maxoff + 1;
  s.d5[0] = n, s.d5[1] = c, s.s5[0] = s.str[0], s.s5[1] = s.str[1];
  for (int i = 0; i < 3; i++) s.d5[2 + i] = sp[i], s.s5[2 + i] = 0;
  for (int i = 0; i < s.nd - 2; i++) s.s5[2 + 3 - (s.nd - 2) + i] = s.str[2 + i];
  return s;
}

static int64_t off5(const Shape &s, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e) {
  return a * s.s5[0] + b * s.s5[1] + c * s.s5[2] + d * s.s5[3] + e * s.s5[4];
}

struct ConvGeom {
  int64_t in[3], out[3], k[3], pad[3], str[3], dil[3];
};
static ConvGeom geom(const Conv &c) {
  ConvGeom g;
  for (int i = 0; i < 3; i++) {
    bool used = i >= 3 - c.nsp;
    g.in[i] = used ? c.in[i] : 1;
    g.k[i] = used ? c.k[i] : 1;
    g.pad[i] = used ? c.pad[i] : 0;
    g.str[i] = used ? c.str[i] : 1;
    g.dil[i] = used ? c.dil[i] : 1;
    g.out[i] = (g.in[i] + 2 * g.pad[i] - ((g.k[i] - 1) * g.dil[i] + 1)) / g.str[i] + 1;
  }
  return g;
}

/* visit every (x element, w element, y element) triple of the convolution */
template <class F>
static void conv_visit(const Conv &c, const ConvGeom &g, const Shape &xs, const Shape &ys, F f) {
  int64_t Cg = c.C / c.G, Kg = c.K / c.G, ksz = g.k[0] * g.k[1] * g.k[2];
  for (int64_t n = 0; n < c.N; n++)
    for (int64_t kk = 0; kk < c.K; kk++) {
      int64_t gr = kk / Kg;
      for (int64_t o0 = 0; o0 < g.out[0]; o0++)
        for (int64_t o1 = 0; o1 < g.out[1]; o1++)
          for (int64_t o2 = 0; o2 < g.out[2]; o2++) {
            int64_t yo = off5(ys, n, kk, o0, o1, o2);
            for (int64_t ci = 0; ci < Cg; ci++)
              for (int64_t a = 0; a < g.k[0]; a++)
                for (int64_t b = 0; b < g.k[1]; b++)
                  for (int64_t e = 0; e < g.k[2]; e++) {
                    int64_t i0 = o0 * g.str[0] - g.pad[0] + a * g.dil[0];
                    int64_t i1 = o1 * g.str[1] - g.pad[1] + b * g.dil[1];
                    int64_t i2 = o2 * g.str[2] - g.pad[2] + e * g.dil[2];
                    if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
                    int64_t tap = (a * g.k[1] + b) * g.k[2] + e;
                    if (c.flip) tap = ksz - 1 - tap;
                    int64_t wo = (kk * Cg + ci) * ksz + tap;
                    f(off5(xs, n, gr * Cg + ci, i0, i1, i2), wo, yo);
                  }
          }
    }
}

/* elements of a shape's view */
static std::vector<char> view_mask(const Shape &s) {
  std::vector<char> m(s.elems, 0);
  for (int64_t a = 0; a < s.d5[0]; a++)
    for (int64_t b = 0; b < s.d5[1]; b++)
      for (int64_t c = 0; c < s.d5[2]; c++)
        for (int64_t d = 0; d < s.d5[3]; d++)
          for (int64_t e = 0; e < s.d5[4]; e++) m[(size_t)off5(s, a, b, c, d, e)] = 1;
  return m;
}

struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  void destroy() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    x = y = nullptr;
    w = nullptr;
    conv = nullptr;
  }
};

static Descs make_descs(const Conv &c, const Shape &xs, const Shape &ys) {
  Descs d;
  cudnnDataType_t dt = c.dbl ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  int nd = xs.nd, ns = nd - 2;
  int wd[5] = {c.K, c.C / c.G, 1, 1, 1}, pad[3], str[3], dil[3];
  for (int i = 0; i < ns; i++) {
    int j = 3 - ns + i;
    wd[2 + i] = j >= 3 - c.nsp ? c.k[j] : 1;
    pad[i] = j >= 3 - c.nsp ? c.pad[j] : 0;
    str[i] = j >= 3 - c.nsp ? c.str[j] : 1;
    dil[i] = j >= 3 - c.nsp ? c.dil[j] : 1;
  }
  DNN(cudnnCreateTensorDescriptor(&d.x));
  DNN(cudnnCreateTensorDescriptor(&d.y));
  DNN(cudnnCreateFilterDescriptor(&d.w));
  DNN(cudnnCreateConvolutionDescriptor(&d.conv));
  DNN(cudnnSetTensorNdDescriptor(d.x, dt, nd, xs.dim, xs.str));
  DNN(cudnnSetTensorNdDescriptor(d.y, dt, nd, ys.dim, ys.str));
  DNN(cudnnSetFilterNdDescriptor(d.w, dt, CUDNN_TENSOR_NCHW, nd, wd));
  DNN(cudnnSetConvolutionNdDescriptor(d.conv, ns, pad, str, dil, c.flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION,
                                      dt));
  DNN(cudnnSetConvolutionGroupCount(d.conv, c.G));
  DNN(cudnnSetConvolutionMathType(d.conv, c.dbl ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  return d;
}

static double tol(bool dbl) { return dbl ? 1e-11 : 2e-5; }

/* TF32 as the simulator rounds a GEMM's operands (and as cvt.rna.tf32.f32 does) */
static std::vector<double> tf32_rounded(std::vector<double> v) {
  for (double &d : v) {
    float f = (float)d;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x1000u) & ~0x1fffu;
    memcpy(&f, &u, 4);
    d = f;
  }
  return v;
}

/* A TF32 GEMM's result: against the exact reference it must be off by TF32's rounding
 * (the emulation is on), against the reference of the rounded operands within float's
 * tolerance. Returns the error against the exact reference. */
static double check_tf32(const char *api, const std::string &name, const std::vector<double> &got,
                         const std::vector<double> &exact, const std::vector<double> &rounded) {
  double e = rel_err(got, exact), r = rel_err(got, rounded);
  check(e > 1e-6 && e < 3e-3 && r < tol(false),
        "%s %s TF32: rel error %.3g against float32 math (TF32 rounding "
        "expected), %.3g against the TF32-rounded operands",
        api, name.c_str(), e, r);
  return e;
}

static void alpha_beta(bool dbl, double a, double b, float *af, float *bf, const void **pa, const void **pb,
                       const double *ad, const double *bd) {
  *af = (float)a, *bf = (float)b;
  *pa = dbl ? (const void *)ad : (const void *)af;
  *pb = dbl ? (const void *)bd : (const void *)bf;
}

/* tf32: float with CUDNN_DEFAULT_MATH (TF32 allowed) instead of CUDNN_FMA_MATH */
static void test_conv(cudnnHandle_t h, cudaStream_t s, const Conv &c, bool backward, int algo_pick, bool tf32 = false) {
  ConvGeom g = geom(c);
  size_t es = c.dbl ? 8 : 4;
  Shape xs = make_shape(c.nsp, c.N, c.C, g.in, c.xlay), ys = make_shape(c.nsp, c.N, c.K, g.out, c.ylay);
  int64_t ksz = g.k[0] * g.k[1] * g.k[2];
  std::vector<double> hx = as_stored(rnd_vec(xs.elems), es),
                      hw = as_stored(rnd_vec((size_t)(c.K * (c.C / c.G) * ksz)), es),
                      hy = as_stored(rnd_vec(ys.elems), es);
  Dev dx(hx, es), dw(hw, es), dy(hy, es);
  Descs d = make_descs(c, xs, ys);
  if (tf32) DNN(cudnnSetConvolutionMathType(d.conv, CUDNN_DEFAULT_MATH));
  std::vector<double> rx = tf32 ? tf32_rounded(hx) : hx, rw = tf32 ? tf32_rounded(hw) : hw,
                      ry = tf32 ? tf32_rounded(hy) : hy, ref_r; /* ref_r: from the TF32-rounded operands */
  int outd[5];
  DNN(cudnnGetConvolutionNdForwardOutputDim(d.conv, d.x, d.w, xs.nd, outd));
  bool dims_ok = true;
  for (int i = 0; i < ys.nd; i++) dims_ok &= outd[i] == ys.dim[i];
  const char *dir = backward ? "backward data" : "forward";
  check(dims_ok, "conv %s %s: cudnnGetConvolutionNdForwardOutputDim", c.name, dir);
  size_t ws_size = 0;
  int algo = 0;
  if (!backward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found,
                                               perf));
    int idx = algo_pick < found ? algo_pick : 0;
    check(found > 0 && perf[idx].status == CUDNN_STATUS_SUCCESS, "conv %s %s: heuristic offers algorithm %d", c.name,
          dir, (int)perf[idx].algo);
    algo = perf[idx].algo;
    DNN(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, perf[idx].algo, &ws_size));
    check(ws_size == perf[idx].memory, "conv %s %s: workspace size %zu as the heuristic said", c.name, dir, ws_size);
  } else {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int found = 0;
    DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                    &found, perf));
    int idx = algo_pick < found ? algo_pick : 0;
    check(found > 0 && perf[idx].status == CUDNN_STATUS_SUCCESS, "conv %s %s: heuristic offers algorithm %d", c.name,
          dir, (int)perf[idx].algo);
    algo = perf[idx].algo;
    DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, perf[idx].algo, &ws_size));
    check(ws_size == perf[idx].memory, "conv %s %s: workspace size %zu as the heuristic said", c.name, dir, ws_size);
  }
  void *ws = nullptr;
  if (ws_size) CU(cudaMalloc(&ws, ws_size));
  float af, bf;
  const void *pa, *pb;
  alpha_beta(c.dbl, c.alpha, c.beta, &af, &bf, &pa, &pb, &c.alpha, &c.beta);
  std::vector<double> ref, got;
  std::vector<char> mask;
  if (!backward) {
    DNN(cudnnConvolutionForward(h, pa, d.x, dx.p, d.w, dw.p, d.conv, (cudnnConvolutionFwdAlgo_t)algo, ws, ws_size, pb,
                                d.y, dy.p));
    CU(cudaStreamSynchronize(s));
    got = dy.get();
    std::vector<double> acc(ys.elems, 0.0), acc_r(ys.elems, 0.0);
    conv_visit(c, g, xs, ys, [&](int64_t xo, int64_t wo, int64_t yo) {
      acc[yo] += hx[xo] * hw[wo];
      acc_r[yo] += rx[xo] * rw[wo];
    });
    mask = view_mask(ys);
    ref = ref_r = hy;
    for (size_t i = 0; i < ys.elems; i++)
      if (mask[i]) ref[i] = c.alpha * acc[i] + c.beta * hy[i], ref_r[i] = c.alpha * acc_r[i] + c.beta * hy[i];
  } else {
    /* dy lives in the y shape, dx in the x shape */
    DNN(cudnnConvolutionBackwardData(h, pa, d.w, dw.p, d.y, dy.p, d.conv, (cudnnConvolutionBwdDataAlgo_t)algo, ws,
                                     ws_size, pb, d.x, dx.p));
    CU(cudaStreamSynchronize(s));
    got = dx.get();
    std::vector<double> acc(xs.elems, 0.0), acc_r(xs.elems, 0.0);
    conv_visit(c, g, xs, ys, [&](int64_t xo, int64_t wo, int64_t yo) {
      acc[xo] += hy[yo] * hw[wo];
      acc_r[xo] += ry[yo] * rw[wo];
    });
    mask = view_mask(xs);
    ref = ref_r = hx;
    for (size_t i = 0; i < xs.elems; i++)
      if (mask[i]) ref[i] = c.alpha * acc[i] + c.beta * hx[i], ref_r[i] = c.alpha * acc_r[i] + c.beta * hx[i];
  }
  bool gaps = true;
  for (size_t i = 0; i < ref.size(); i++)
    if (!mask[i] && got[i] != ref[i]) gaps = false;
  if (tf32) {
    check_tf32(backward ? "cudnnConvolutionBackwardData" : "cudnnConvolutionForward", c.name, got, ref, ref_r);
    check(gaps, "conv %s %s TF32: elements outside the view unchanged", c.name, dir);
  } else {
    double e = rel_err(got, ref);
    check(e < tol(c.dbl) && gaps, "conv %s %s (%s, algo %d): max rel error %.3g%s", c.name, dir,
          c.dbl ? "double" : "float", algo, e, gaps ? "" : ", elements outside the view changed");
  }
  d.destroy();
  dx.free_(), dw.free_(), dy.free_();
  if (ws) cudaFree(ws);
}

/* ---- cuDNN's backend (graph) API ------------------------------------------------------------ */

struct BeConv {
  cudnnBackendDescriptor_t t[3] = {nullptr, nullptr, nullptr}, conv = nullptr, op = nullptr, graph = nullptr,
                           heur = nullptr;
  void destroy() {
    for (auto &d : t) cudnnBackendDestroyDescriptor(d), d = nullptr;
    cudnnBackendDestroyDescriptor(conv), cudnnBackendDestroyDescriptor(op), cudnnBackendDestroyDescriptor(graph),
        cudnnBackendDestroyDescriptor(heur);
    conv = op = graph = heur = nullptr;
  }
};

static cudnnBackendDescriptor_t be_tensor(cudnnDataType_t dt, int nd, const int64_t *dim, const int64_t *str,
                                          int64_t uid, int64_t align) {
  cudnnBackendDescriptor_t t;
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dim));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, str));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  DNN(cudnnBackendFinalize(t));
  return t;
}

/* the graph x * w -> y (uids 1, 2, 3) and its heuristics, as pipecc's runtime builds them;
 * w_krsc: the filter channels innermost */
static BeConv be_conv(cudnnHandle_t h, const Conv &c, const Shape &xs, const Shape &ys, bool w_krsc,
                      cudnnBackendHeurMode_t mode, int64_t align = 4) {
  BeConv b;
  cudnnDataType_t dt = c.dbl ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  int nd = xs.nd, ns = nd - 2;
  int64_t xd[5], xst[5], yd[5], yst[5], wd[5] = {c.K, c.C / c.G, 1, 1, 1}, wst[5], pad[3], str[3], dil[3];
  for (int i = 0; i < nd; i++) xd[i] = xs.dim[i], xst[i] = xs.str[i], yd[i] = ys.dim[i], yst[i] = ys.str[i];
  for (int i = 0; i < ns; i++) {
    int j = 3 - ns + i;
    bool used = j >= 3 - c.nsp;
    wd[2 + i] = used ? c.k[j] : 1;
    pad[i] = used ? c.pad[j] : 0;
    str[i] = used ? c.str[j] : 1;
    dil[i] = used ? c.dil[j] : 1;
  }
  wst[nd - 1] = 1;
  for (int i = nd - 2; i >= 0; i--) wst[i] = wst[i + 1] * wd[i + 1];
  if (w_krsc) {
    wst[1] = 1;
    wst[nd - 1] = wd[1];
    for (int i = nd - 2; i >= 2; i--) wst[i] = wst[i + 1] * wd[i + 1];
    wst[0] = wst[2] * wd[2];
  }
  b.t[0] = be_tensor(dt, nd, xd, xst, 1, align);
  b.t[1] = be_tensor(dt, nd, wd, wst, 2, align);
  b.t[2] = be_tensor(dt, nd, yd, yst, 3, align);
  cudnnConvolutionMode_t cm = CUDNN_CROSS_CORRELATION;
  int64_t n = ns;
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &b.conv));
  DNN(cudnnBackendSetAttribute(b.conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  DNN(cudnnBackendSetAttribute(b.conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &cm));
  DNN(cudnnBackendSetAttribute(b.conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &n));
  DNN(cudnnBackendSetAttribute(b.conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, n, dil));
  DNN(cudnnBackendSetAttribute(b.conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, n, str));
  DNN(cudnnBackendSetAttribute(b.conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, n, pad));
  DNN(cudnnBackendSetAttribute(b.conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, n, pad));
  DNN(cudnnBackendFinalize(b.conv));
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &b.op));
  cudnnBackendAttributeName_t io[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
  for (int k = 0; k < 3; k++) DNN(cudnnBackendSetAttribute(b.op, io[k], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.t[k]));
  DNN(cudnnBackendSetAttribute(b.op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               1, &b.conv));
  float af = (float)c.alpha, bf = (float)c.beta;
  if (c.dbl) {
    DNN(cudnnBackendSetAttribute(b.op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_DOUBLE, 1, &c.alpha));
    DNN(cudnnBackendSetAttribute(b.op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_DOUBLE, 1, &c.beta));
  } else {
    DNN(cudnnBackendSetAttribute(b.op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &af));
    DNN(cudnnBackendSetAttribute(b.op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &bf));
  }
  DNN(cudnnBackendFinalize(b.op));
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &b.graph));
  DNN(cudnnBackendSetAttribute(b.graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  DNN(cudnnBackendSetAttribute(b.graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.op));
  DNN(cudnnBackendFinalize(b.graph));
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &b.heur));
  DNN(cudnnBackendSetAttribute(b.heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &b.graph));
  DNN(cudnnBackendSetAttribute(b.heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  DNN(cudnnBackendFinalize(b.heur));
  return b;
}

/* the heuristics' engine configurations (up to 8) and whether each has the TENSOR_CORE note */
static int be_configs(cudnnBackendDescriptor_t heur, cudnnBackendDescriptor_t *cfg, bool *tc) {
  int64_t n = 0, got = 0;
  DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr));
  n = std::min<int64_t>(n, 8);
  for (int64_t i = 0; i < n; i++) DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
  DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfg));
  for (int64_t i = 0; i < got; i++) {
    cudnnBackendDescriptor_t eng;
    DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    int64_t k = 0;
    DNN(cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, &eng));
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    DNN(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &k, notes));
    tc[i] = false;
    for (int64_t j = 0; j < k; j++) tc[i] = tc[i] || notes[j] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    DNN(cudnnBackendDestroyDescriptor(eng));
  }
  return (int)got;
}

static cudnnBackendDescriptor_t be_plan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, int64_t *ws) {
  cudnnBackendDescriptor_t p;
  int64_t k = 0;
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p));
  DNN(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  DNN(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
  DNN(cudnnBackendFinalize(p));
  DNN(cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k, ws));
  return p;
}

/* a variant pack of n (uid, pointer) pairs and a workspace; NULL where finalizing failed */
static cudnnBackendDescriptor_t be_pack(int n, const int64_t *uid, void *const *ptr, void *ws) {
  cudnnBackendDescriptor_t v;
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &v));
  DNN(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid));
  DNN(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr));
  DNN(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  DNN(cudnnBackendFinalize(v));
  return v;
}

/* every engine the heuristics offer against the naive loops: the FMA engine to float's
 * tolerance, the tensor-core one with TF32's rounding; x and y as the case lays them out,
 * the filter KCRS or KRSC */
static void test_backend_conv(cudnnHandle_t h, cudaStream_t s, const Conv &c, bool w_krsc,
                              cudnnBackendHeurMode_t mode) {
  ConvGeom g = geom(c);
  size_t es = c.dbl ? 8 : 4;
  Shape xs = make_shape(c.nsp, c.N, c.C, g.in, c.xlay), ys = make_shape(c.nsp, c.N, c.K, g.out, c.ylay);
  int64_t ksz = g.k[0] * g.k[1] * g.k[2], Cg = c.C / c.G;
  std::vector<double> hx = as_stored(rnd_vec(xs.elems), es), hw = as_stored(rnd_vec((size_t)(c.K * Cg * ksz)), es),
                      hy = as_stored(rnd_vec(ys.elems), es);
  /* the filter as laid out on the device: KRSC puts each tap's Cg channels together */
  std::vector<double> dwv = hw;
  if (w_krsc)
    for (int64_t k = 0; k < c.K; k++)
      for (int64_t ci = 0; ci < Cg; ci++)
        for (int64_t t = 0; t < ksz; t++)
          dwv[(size_t)((k * ksz + t) * Cg + ci)] = hw[(size_t)((k * Cg + ci) * ksz + t)];
  Dev dx(hx, es), dw(dwv, es);
  std::vector<double> acc(ys.elems, 0.0), acc_r(ys.elems, 0.0), rx = tf32_rounded(hx), rw = tf32_rounded(hw);
  conv_visit(c, g, xs, ys, [&](int64_t xo, int64_t wo, int64_t yo) {
    acc[yo] += hx[xo] * hw[wo];
    acc_r[yo] += rx[xo] * rw[wo];
  });
  std::vector<char> mask = view_mask(ys);
  std::vector<double> ref = hy, ref_r = hy;
  for (size_t i = 0; i < ys.elems; i++)
    if (mask[i]) ref[i] = c.alpha * acc[i] + c.beta * hy[i], ref_r[i] = c.alpha * acc_r[i] + c.beta * hy[i];
  BeConv b = be_conv(h, c, xs, ys, w_krsc, mode);
  cudnnBackendDescriptor_t cfg[8] = {nullptr};
  bool tc[8] = {false};
  int n = be_configs(b.heur, cfg, tc);
  int want = (!c.dbl && mode != CUDNN_HEUR_MODE_FALLBACK) ? 2 : 1;
  check(n == want && (n < 2 || (tc[0] && !tc[1])) && !tc[n - 1],
        "backend conv %s%s mode %d: %d engine configurations (%d expected, the tensor-core one first)", c.name,
        w_krsc ? " krsc" : "", (int)mode, n, want);
  for (int i = 0; i < n; i++) {
    Dev dy(hy, es);
    int64_t wsz = -1;
    cudnnBackendDescriptor_t plan = be_plan(h, cfg[i], &wsz);
    void *ws = nullptr;
    if (wsz > 0) CU(cudaMalloc(&ws, (size_t)wsz));
    int64_t uid[3] = {3, 1, 2}; /* any order */
    void *ptr[3] = {dy.p, dx.p, dw.p};
    cudnnBackendDescriptor_t v = be_pack(3, uid, ptr, ws);
    DNN(cudnnBackendExecute(h, plan, v));
    CU(cudaStreamSynchronize(s));
    std::vector<double> got = dy.get();
    bool gaps = true;
    for (size_t k = 0; k < ref.size(); k++)
      if (!mask[k] && got[k] != ref[k]) gaps = false;
    if (tc[i]) {
      check_tf32("cudnnBackendExecute", std::string(c.name) + (w_krsc ? " krsc" : ""), got, ref, ref_r);
      check(gaps && wsz >= 0, "backend conv %s TF32 engine: elements outside the view unchanged, workspace %lld",
            c.name, (long long)wsz);
    } else {
      double e = rel_err(got, ref);
      check(e < tol(c.dbl) && gaps && wsz == 0, "backend conv %s%s FMA engine: max rel error %.3g, workspace %lld%s",
            c.name, w_krsc ? " krsc" : "", e, (long long)wsz, gaps ? "" : ", elements outside the view changed");
    }
    DNN(cudnnBackendDestroyDescriptor(v));
    DNN(cudnnBackendDestroyDescriptor(plan));
    if (ws) cudaFree(ws);
    dy.free_();
  }
  for (int i = 0; i < n; i++) DNN(cudnnBackendDestroyDescriptor(cfg[i]));
  b.destroy();
  dx.free_(), dw.free_();
}

/* what the backend API refuses: one line and an error status each, nothing run */
static void test_backend_errors(cudnnHandle_t h, cudaStream_t s, const Conv &c) {
  fprintf(stderr, "---- the cudasim lines below are expected (backend API error cases) ----\n");
  ConvGeom g = geom(c);
  Shape xs = make_shape(c.nsp, c.N, c.C, g.in, 0), ys = make_shape(c.nsp, c.N, c.K, g.out, 0);
  int64_t ksz = g.k[0] * g.k[1] * g.k[2];
  std::vector<double> hy(ys.elems, 0.5);
  Dev dx(rnd_vec(xs.elems + 4), 4), dw(rnd_vec((size_t)(c.K * (c.C / c.G) * ksz)), 4), dy(hy, 4);
  BeConv b = be_conv(h, c, xs, ys, false, CUDNN_HEUR_MODE_FALLBACK, 16);
  cudnnBackendDescriptor_t cfg[8] = {nullptr};
  bool tc[8];
  int n = be_configs(b.heur, cfg, tc);
  int64_t wsz = 0;
  cudnnBackendDescriptor_t plan = be_plan(h, cfg[0], &wsz);
  int64_t uid[3] = {1, 2, 3};
  /* a setting on a finalized descriptor, an attribute of another descriptor type, a wrong element type */
  int64_t one = 1;
  float f = 1;
  check(cudnnBackendSetAttribute(b.t[0], CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &one) ==
            CUDNN_STATUS_BAD_PARAM,
        "backend: setting an attribute of a finalized tensor fails");
  cudnnBackendDescriptor_t t;
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
  check(cudnnBackendSetAttribute(t, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &one) ==
            CUDNN_STATUS_BAD_PARAM,
        "backend: a convolution's attribute on a tensor fails");
  check(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_FLOAT, 1, &f) == CUDNN_STATUS_BAD_PARAM,
        "backend: a unique id given as a float fails");
  check(cudnnBackendFinalize(t) == CUDNN_STATUS_BAD_PARAM, "backend: finalizing a tensor without its attributes fails");
  check(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &one, &one) ==
            CUDNN_STATUS_NOT_INITIALIZED,
        "backend: reading a descriptor not finalized fails");
  DNN(cudnnBackendDestroyDescriptor(t));
  /* a plan whose configuration is not finalized */
  cudnnBackendDescriptor_t raw, p2;
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &raw));
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p2));
  DNN(cudnnBackendSetAttribute(p2, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  DNN(cudnnBackendSetAttribute(p2, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw));
  check(cudnnBackendFinalize(p2) == CUDNN_STATUS_BAD_PARAM,
        "backend: a plan of an engine configuration not "
        "finalized fails");
  DNN(cudnnBackendDestroyDescriptor(p2));
  DNN(cudnnBackendDestroyDescriptor(raw));
  /* execution: a pointer off the declared alignment, a unique id missing, a host pointer, another handle */
  void *mis[3] = {(char *)dx.p + 4, dw.p, dy.p};
  cudnnBackendDescriptor_t v = be_pack(3, uid, mis, nullptr);
  check(cudnnBackendExecute(h, plan, v) == CUDNN_STATUS_BAD_PARAM,
        "backend: x 4 bytes off its 16-byte alignment "
        "fails");
  DNN(cudnnBackendDestroyDescriptor(v));
  void *two[2] = {dx.p, dw.p};
  v = be_pack(2, uid, two, nullptr);
  check(cudnnBackendExecute(h, plan, v) == CUDNN_STATUS_BAD_PARAM, "backend: a variant pack without y fails");
  DNN(cudnnBackendDestroyDescriptor(v));
  std::vector<float> host(ys.elems);
  void *hostp[3] = {dx.p, dw.p, host.data()};
  v = be_pack(3, uid, hostp, nullptr);
  check(cudnnBackendExecute(h, plan, v) == CUDNN_STATUS_BAD_PARAM, "backend: y in host memory fails");
  DNN(cudnnBackendDestroyDescriptor(v));
  cudnnHandle_t h2;
  DNN(cudnnCreate(&h2));
  void *good[3] = {dx.p, dw.p, dy.p};
  v = be_pack(3, uid, good, nullptr);
  check(cudnnBackendExecute(h2, plan, v) == CUDNN_STATUS_BAD_PARAM, "backend: a plan run on another handle fails");
  DNN(cudnnDestroy(h2));
  CU(cudaStreamSynchronize(s));
  check(dy.get() == hy, "backend: the failed calls left y unchanged");
  DNN(cudnnBackendExecute(h, plan, v));
  CU(cudaStreamSynchronize(s));
  check(dy.get() != hy, "backend: the same plan and pack run once the handle is right");
  DNN(cudnnBackendDestroyDescriptor(v));
  DNN(cudnnBackendDestroyDescriptor(plan));
  for (int i = 0; i < n; i++) DNN(cudnnBackendDestroyDescriptor(cfg[i]));
  b.destroy();
  check(cudnnBackendDestroyDescriptor((cudnnBackendDescriptor_t)&one) == CUDNN_STATUS_BAD_PARAM,
        "backend: destroying what is not a live descriptor fails");
  dx.free_(), dw.free_(), dy.free_();
  fprintf(stderr, "---- end of the expected cudasim lines ----\n");
}

/* <conv(x), y> == <x, convT(y)> through the simulator (alpha 1, beta 0) */
static void test_adjoint(cudnnHandle_t h, cudaStream_t s, const Conv &c) {
  ConvGeom g = geom(c);
  size_t es = c.dbl ? 8 : 4;
  Shape xs = make_shape(c.nsp, c.N, c.C, g.in, c.xlay), ys = make_shape(c.nsp, c.N, c.K, g.out, c.ylay);
  int64_t ksz = g.k[0] * g.k[1] * g.k[2];
  std::vector<double> hx = as_stored(rnd_vec(xs.elems), es),
                      hw = as_stored(rnd_vec((size_t)(c.K * (c.C / c.G) * ksz)), es),
                      hy = as_stored(rnd_vec(ys.elems), es);
  Dev dx(hx, es), dw(hw, es), dy(hy, es), cy(std::vector<double>(ys.elems, 0.0), es),
      cx(std::vector<double>(xs.elems, 0.0), es);
  Descs d = make_descs(c, xs, ys);
  double one = 1, zero = 0;
  float af, bf;
  const void *pa, *pb;
  alpha_beta(c.dbl, one, zero, &af, &bf, &pa, &pb, &one, &zero);
  size_t ws1 = 0, ws2 = 0;
  DNN(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &ws1));
  DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &ws2));
  void *ws;
  CU(cudaMalloc(&ws, std::max<size_t>(std::max(ws1, ws2), 1)));
  DNN(cudnnConvolutionForward(h, pa, d.x, dx.p, d.w, dw.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws, ws1, pb, d.y,
                              cy.p));
  DNN(cudnnConvolutionBackwardData(h, pa, d.w, dw.p, d.y, dy.p, d.conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws, ws2, pb,
                                   d.x, cx.p));
  CU(cudaStreamSynchronize(s));
  std::vector<double> gy = cy.get(), gx = cx.get();
  std::vector<char> my = view_mask(ys), mx = view_mask(xs);
  double l = 0, r = 0, sl = 0, sr = 0;
  for (size_t i = 0; i < ys.elems; i++)
    if (my[i]) l += gy[i] * hy[i], sl += fabs(gy[i] * hy[i]);
  for (size_t i = 0; i < xs.elems; i++)
    if (mx[i]) r += hx[i] * gx[i], sr += fabs(hx[i] * gx[i]);
  double e = fabs(l - r) / std::max(1e-30, std::max(sl, sr));
  check(e < (c.dbl ? 1e-13 : 1e-6), "conv %s adjoint (%s): <conv(x), y> = %.10g, <x, convT(y)> = %.10g, rel %.3g",
        c.name, c.dbl ? "double" : "float", l, r, e);
  d.destroy();
  dx.free_(), dw.free_(), dy.free_(), cy.free_(), cx.free_();
  cudaFree(ws);
}

/* ---- GEMM reference ----------------------------------------------------------------------- */

struct Gemm {
  bool dbl, ta, tb;
  int m, n, k, batch;
  int ld_extra;   /* added to each leading dimension */
  int interleave; /* batches interleaved within columns (ld = rows * batch + extra, stride = rows) */
  double alpha, beta;
  bool c_distinct; /* cuBLASLt only: C and D separate buffers */
  cublasComputeType_t ct;
};

struct MatL {
  int64_t rows, cols, ld, stride;
  size_t elems;
};
static MatL mat_layout(int64_t rows, int64_t cols, int batch, int extra, int inter) {
  MatL l;
  l.rows = rows, l.cols = cols;
  if (inter && batch > 1) {
    l.ld = rows * batch + extra;
    l.stride = rows;
  } else {
    l.ld = std::max<int64_t>(1, rows + extra);
    l.stride = l.ld * cols + 7;
  }
  if (batch == 1) l.stride = 0;
  l.elems = (size_t)((batch - 1) * l.stride + (cols - 1) * l.ld + rows);
  return l;
}

static std::vector<double> gemm_ref(const Gemm &t, const MatL &A, const MatL &B, const MatL &C, const MatL &D,
                                    const std::vector<double> &a, const std::vector<double> &b,
                                    const std::vector<double> &c, const std::vector<double> &d0) {
  std::vector<double> d = d0;
  for (int bi = 0; bi < t.batch; bi++)
    for (int j = 0; j < t.n; j++)
      for (int i = 0; i < t.m; i++) {
        double s = 0;
        for (int l = 0; l < t.k; l++) {
          double av = t.ta ? a[bi * A.stride + i * A.ld + l] : a[bi * A.stride + l * A.ld + i];
          double bv = t.tb ? b[bi * B.stride + l * B.ld + j] : b[bi * B.stride + j * B.ld + l];
          s += av * bv;
        }
        double cv = t.beta != 0 ? c[bi * C.stride + j * C.ld + i] : 0;
        d[bi * D.stride + j * D.ld + i] = t.alpha * s + t.beta * cv;
      }
  return d;
}

static std::string gemm_name(const Gemm &t) {
  char b[200];
  snprintf(b, sizeof b, "%s %c%c m%d n%d k%d batch %d%s ld+%d alpha %g beta %g%s", t.dbl ? "double" : "float",
           t.ta ? 'T' : 'N', t.tb ? 'T' : 'N', t.m, t.n, t.k, t.batch, t.interleave ? " interleaved" : "", t.ld_extra,
           t.alpha, t.beta, t.c_distinct ? " C!=D" : "");
  return b;
}

static void test_gemm_blas(cublasHandle_t h, cudaStream_t s, const Gemm &t) {
  size_t es = t.dbl ? 8 : 4;
  MatL A = mat_layout(t.ta ? t.k : t.m, t.ta ? t.m : t.k, t.batch, t.ld_extra, t.interleave);
  MatL B = mat_layout(t.tb ? t.n : t.k, t.tb ? t.k : t.n, t.batch, t.ld_extra, t.interleave);
  MatL C = mat_layout(t.m, t.n, t.batch, t.ld_extra, t.interleave);
  std::vector<double> ha = as_stored(rnd_vec(A.elems), es), hb = as_stored(rnd_vec(B.elems), es),
                      hc = as_stored(rnd_vec(C.elems), es);
  Dev da(ha, es), db(hb, es), dc(hc, es);
  float af, bf;
  const void *pa, *pb;
  alpha_beta(t.dbl, t.alpha, t.beta, &af, &bf, &pa, &pb, &t.alpha, &t.beta);
  cudaDataType ty = t.dbl ? CUDA_R_64F : CUDA_R_32F;
  BL(cublasGemmStridedBatchedEx(h, t.ta ? CUBLAS_OP_T : CUBLAS_OP_N, t.tb ? CUBLAS_OP_T : CUBLAS_OP_N, t.m, t.n, t.k,
                                pa, da.p, ty, (int)A.ld, A.stride, db.p, ty, (int)B.ld, B.stride, pb, dc.p, ty,
                                (int)C.ld, C.stride, t.batch, t.ct, CUBLAS_GEMM_DEFAULT));
  CU(cudaStreamSynchronize(s));
  std::vector<double> ref = gemm_ref(t, A, B, C, C, ha, hb, hc, hc), got = dc.get();
  if (t.ct == CUBLAS_COMPUTE_32F_FAST_TF32) {
    check_tf32("cublasGemmStridedBatchedEx", gemm_name(t), got, ref,
               gemm_ref(t, A, B, C, C, tf32_rounded(ha), tf32_rounded(hb), hc, hc));
  } else {
    double e = rel_err(got, ref);
    check(e < tol(t.dbl), "cublasGemmStridedBatchedEx %s: max rel error %.3g", gemm_name(t).c_str(), e);
  }
  da.free_(), db.free_(), dc.free_();
}

struct LtOp {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  void destroy() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (ld && ld != lc) cublasLtMatrixLayoutDestroy(ld);
    op = nullptr;
    la = lb = lc = ld = nullptr;
  }
};

static cublasLtMatrixLayout_t lt_layout(cudaDataType ty, const MatL &l, int batch) {
  cublasLtMatrixLayout_t r;
  BL(cublasLtMatrixLayoutCreate(&r, ty, (uint64_t)l.rows, (uint64_t)l.cols, l.ld));
  int32_t b = batch;
  int64_t st = l.stride;
  BL(cublasLtMatrixLayoutSetAttribute(r, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
  BL(cublasLtMatrixLayoutSetAttribute(r, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
  return r;
}

static LtOp lt_op(const Gemm &t, const MatL &A, const MatL &B, const MatL &C, const MatL &D) {
  LtOp o;
  cudaDataType ty = t.dbl ? CUDA_R_64F : CUDA_R_32F;
  BL(cublasLtMatmulDescCreate(&o.op, t.ct, ty));
  cublasOperation_t oa = t.ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = t.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  BL(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
  BL(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
  o.la = lt_layout(ty, A, t.batch);
  o.lb = lt_layout(ty, B, t.batch);
  o.lc = lt_layout(ty, C, t.batch);
  o.ld = t.c_distinct ? lt_layout(ty, D, t.batch) : o.lc;
  return o;
}

static bool lt_heuristic(cublasLtHandle_t lt, const LtOp &o, uint64_t ws, uint32_t align, cublasLtMatmulAlgo_t *algo) {
  cublasLtMatmulPreference_t pref;
  BL(cublasLtMatmulPreferenceCreate(&pref));
  BL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  if (align)
    for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
      BL(cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &align, sizeof align));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, o.op, o.la, o.lb, o.lc, o.ld, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found < 1) return false;
  *algo = res.algo;
  return true;
}

static void test_gemm_lt(cublasLtHandle_t lt, cudaStream_t s, void *ws, size_t ws_size, const Gemm &t) {
  size_t es = t.dbl ? 8 : 4;
  MatL A = mat_layout(t.ta ? t.k : t.m, t.ta ? t.m : t.k, t.batch, t.ld_extra, t.interleave);
  MatL B = mat_layout(t.tb ? t.n : t.k, t.tb ? t.k : t.n, t.batch, t.ld_extra, t.interleave);
  MatL C = mat_layout(t.m, t.n, t.batch, t.ld_extra, t.interleave);
  MatL D = t.c_distinct ? mat_layout(t.m, t.n, t.batch, t.ld_extra + 3, 0) : C;
  std::vector<double> ha = as_stored(rnd_vec(A.elems), es), hb = as_stored(rnd_vec(B.elems), es),
                      hc = as_stored(rnd_vec(C.elems), es), hd = as_stored(rnd_vec(D.elems), es);
  Dev da(ha, es), db(hb, es), dc(hc, es), dd;
  if (t.c_distinct) dd = Dev(hd, es);
  LtOp o = lt_op(t, A, B, C, D);
  cublasLtMatmulAlgo_t algo;
  bool got_algo = lt_heuristic(lt, o, ws_size, 0, &algo);
  check(got_algo, "cublasLtMatmulAlgoGetHeuristic %s: one algorithm", gemm_name(t).c_str());
  float af, bf;
  const void *pa, *pb;
  alpha_beta(t.dbl, t.alpha, t.beta, &af, &bf, &pa, &pb, &t.alpha, &t.beta);
  void *dptr = t.c_distinct ? dd.p : dc.p;
  BL(cublasLtMatmul(lt, o.op, pa, da.p, o.la, db.p, o.lb, pb, dc.p, o.lc, dptr, o.ld, got_algo ? &algo : nullptr, ws,
                    ws_size, s));
  o.destroy(); /* the queued work holds its own copies */
  CU(cudaStreamSynchronize(s));
  std::vector<double> ref, got, rounded;
  bool tf32 = t.ct == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (t.c_distinct) {
    ref = gemm_ref(t, A, B, C, D, ha, hb, hc, hd);
    if (tf32) rounded = gemm_ref(t, A, B, C, D, tf32_rounded(ha), tf32_rounded(hb), hc, hd);
    got = dd.get();
    check(dc.get() == hc, "cublasLtMatmul %s: C untouched", gemm_name(t).c_str());
  } else {
    ref = gemm_ref(t, A, B, C, C, ha, hb, hc, hc);
    if (tf32) rounded = gemm_ref(t, A, B, C, C, tf32_rounded(ha), tf32_rounded(hb), hc, hc);
    got = dc.get();
  }
  if (tf32) {
    check_tf32("cublasLtMatmul", gemm_name(t), got, ref, rounded);
  } else {
    double e = rel_err(got, ref);
    check(e < tol(t.dbl), "cublasLtMatmul %s: max rel error %.3g", gemm_name(t).c_str(), e);
  }
  da.free_(), db.free_(), dc.free_(), dd.free_();
}

/* ---- error cases -------------------------------------------------------------------------- */

/* cuDNN's errors on a 2-D float convolution: bad pointers, workspace, algorithm, extents,
 * overlap, shapes, descriptors */
static void test_errors_cudnn(cudnnHandle_t h) {
  /* a 2-D float convolution to break in various ways */
  Conv c = {"err", 2, 2, 4, 6, 1, {1, 8, 8}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0};
  ConvGeom g = geom(c);
  Shape xs = make_shape(2, c.N, c.C, g.in, 0), ys = make_shape(2, c.N, c.K, g.out, 0);
  Descs d = make_descs(c, xs, ys);
  Dev x(rnd_vec(xs.elems), 4), w(rnd_vec(6 * 4 * 9), 4), y(rnd_vec(ys.elems), 4);
  float one = 1, zero = 0;
  size_t ws_size = 0;
  DNN(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &ws_size));
  void *ws;
  CU(cudaMalloc(&ws, ws_size));
  std::vector<float> host_x(xs.elems, 1.0f);
  cudnnStatus_t st;

  st = cudnnConvolutionForward(h, &one, d.x, host_x.data(), d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws,
                               ws_size, &zero, d.y, y.p);
  check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnConvolutionForward with a host x -> %s", cudnnGetErrorString(st));
  st = cudnnConvolutionForward(h, &one, d.x, x.p, d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws, ws_size - 4,
                               &zero, d.y, y.p);
  check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnConvolutionForward with a workspace too small -> %s",
        cudnnGetErrorString(st));
  st = cudnnConvolutionForward(h, &one, d.x, x.p, d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_FFT, ws, ws_size, &zero,
                               d.y, y.p);
  check(st == CUDNN_STATUS_NOT_SUPPORTED, "error: cudnnConvolutionForward with an unsupported algorithm -> %s",
        cudnnGetErrorString(st));
  {
    /* y's buffer a quarter of what its descriptor spans (allocations are rounded up to
     * 256 bytes, so an overrun within the rounding is no fault, on a GPU either) */
    Dev ys_short(rnd_vec(ys.elems / 4), 4);
    st = cudnnConvolutionForward(h, &one, d.x, x.p, d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                                 0, &zero, d.y, ys_short.p);
    check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnConvolutionForward with y's allocation too small -> %s",
          cudnnGetErrorString(st));
    ys_short.free_();
  }
  {
    /* in place: y over x (same size here: C == 4, K == 6 -> use x's buffer as y) */
    Dev big(rnd_vec(ys.elems + xs.elems), 4);
    st = cudnnConvolutionForward(h, &one, d.x, big.p, d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                 nullptr, 0, &zero, d.y, (char *)big.p + 64);
    check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnConvolutionForward with y overlapping x -> %s",
          cudnnGetErrorString(st));
    big.free_();
  }
  {
    /* y descriptor of the wrong spatial size */
    cudnnTensorDescriptor_t bad;
    DNN(cudnnCreateTensorDescriptor(&bad));
    int bd[4] = {2, 6, 7, 8}, bs[4] = {6 * 56, 56, 8, 1};
    DNN(cudnnSetTensorNdDescriptor(bad, CUDNN_DATA_FLOAT, 4, bd, bs));
    st = cudnnConvolutionForward(h, &one, d.x, x.p, d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                                 0, &zero, bad, y.p);
    check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnConvolutionForward with a wrong y shape -> %s",
          cudnnGetErrorString(st));
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int found = 0;
    st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, bad, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                     &found, perf);
    check(st == CUDNN_STATUS_BAD_PARAM,
          "error: cudnnGetConvolutionBackwardDataAlgorithm_v7 with a wrong dy shape -> %s", cudnnGetErrorString(st));
    /* the descriptors in the wrong order (dx, dy swapped) */
    st = cudnnConvolutionBackwardData(h, &one, d.w, w.p, d.x, x.p, d.conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr,
                                      0, &zero, d.y, y.p);
    check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnConvolutionBackwardData with dy and dx descriptors swapped -> %s",
          cudnnGetErrorString(st));
    cudnnDestroyTensorDescriptor(bad);
    st = cudnnConvolutionForward(h, &one, d.x, x.p, d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                                 0, &zero, bad, y.p);
    check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnConvolutionForward with a destroyed descriptor -> %s",
          cudnnGetErrorString(st));
  }
  {
    /* channel mismatch: filter for 3 channels, x has 4 */
    cudnnFilterDescriptor_t bw;
    DNN(cudnnCreateFilterDescriptor(&bw));
    int wd[4] = {6, 3, 3, 3};
    DNN(cudnnSetFilterNdDescriptor(bw, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, wd));
    int outd[4];
    st = cudnnGetConvolutionNdForwardOutputDim(d.conv, d.x, bw, 4, outd);
    check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnGetConvolutionNdForwardOutputDim with a channel mismatch -> %s",
          cudnnGetErrorString(st));
    cudnnDestroyFilterDescriptor(bw);
    int neg[4] = {2, 0, 8, 8}, nst[4] = {1, 1, 1, 1};
    cudnnTensorDescriptor_t t;
    DNN(cudnnCreateTensorDescriptor(&t));
    st = cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 4, neg, nst);
    check(st == CUDNN_STATUS_BAD_PARAM, "error: cudnnSetTensorNdDescriptor with a zero dim -> %s",
          cudnnGetErrorString(st));
    cudnnDestroyTensorDescriptor(t);
  }
  d.destroy();
  x.free_(), w.free_(), y.free_();
  cudaFree(ws);
}

/* cuBLASLt's and cuBLAS's errors on an 8x5 by 5x6 float product: shapes, host pointers,
 * alignment, algorithms, overlap, workspace */
static void test_errors_blas(cublasHandle_t bh, cublasLtHandle_t lt, cudaStream_t s) {
  float one = 1, zero = 0;
  /* cuBLASLt */
  Gemm t = {false, false, false, 8, 6, 5, 1, 0, 0, 1.0, 0.0, false, CUBLAS_COMPUTE_32F};
  MatL A = mat_layout(8, 5, 1, 0, 0), B = mat_layout(5, 6, 1, 0, 0), C = mat_layout(8, 6, 1, 0, 0);
  Dev da(rnd_vec(A.elems + 64), 4), db(rnd_vec(B.elems), 4), dc(rnd_vec(C.elems + 64), 4);
  LtOp o = lt_op(t, A, B, C, C);
  cublasLtMatmulAlgo_t algo;
  bool ok = lt_heuristic(lt, o, 0, 0, &algo);
  check(ok, "cublasLtMatmulAlgoGetHeuristic for the error cases");
  cublasStatus_t bs;
  bs = cublasLtMatmul(lt, o.op, &one, da.p, o.la, db.p, o.lb, &zero, dc.p, o.lc, dc.p, o.lc, &algo, nullptr, 0, s);
  check(bs == CUBLAS_STATUS_SUCCESS, "cublasLtMatmul baseline -> %s", cublasGetStatusName(bs));
  {
    MatL Bbad = mat_layout(4, 6, 1, 0, 0); /* k 4 against A's 5 */
    cublasLtMatrixLayout_t lbad = lt_layout(CUDA_R_32F, Bbad, 1);
    bs = cublasLtMatmul(lt, o.op, &one, da.p, o.la, db.p, lbad, &zero, dc.p, o.lc, dc.p, o.lc, nullptr, nullptr, 0, s);
    check(bs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasLtMatmul with mismatched k -> %s", cublasGetStatusName(bs));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasLtMatmulPreference_t pref;
    BL(cublasLtMatmulPreferenceCreate(&pref));
    bs = cublasLtMatmulAlgoGetHeuristic(lt, o.op, o.la, lbad, o.lc, o.lc, pref, 1, &res, &found);
    check(bs != CUBLAS_STATUS_SUCCESS && found == 0, "error: cublasLtMatmulAlgoGetHeuristic with mismatched k -> %s",
          cublasGetStatusName(bs));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lbad);
  }
  {
    MatL Dbad = mat_layout(8, 5, 1, 0, 0); /* n 5 against B's 6 */
    cublasLtMatrixLayout_t lbad = lt_layout(CUDA_R_32F, Dbad, 1);
    bs = cublasLtMatmul(lt, o.op, &one, da.p, o.la, db.p, o.lb, &zero, dc.p, lbad, dc.p, lbad, nullptr, nullptr, 0, s);
    check(bs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasLtMatmul with mismatched n -> %s", cublasGetStatusName(bs));
    cublasLtMatrixLayoutDestroy(lbad);
  }
  std::vector<float> hostA(A.elems, 1.0f);
  bs = cublasLtMatmul(lt, o.op, &one, hostA.data(), o.la, db.p, o.lb, &zero, dc.p, o.lc, dc.p, o.lc, &algo, nullptr, 0,
                      s);
  check(bs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasLtMatmul with a host A -> %s", cublasGetStatusName(bs));
  bs = cublasLtMatmul(lt, o.op, &one, (char *)da.p + 4, o.la, db.p, o.lb, &zero, dc.p, o.lc, dc.p, o.lc, &algo, nullptr,
                      0, s);
  check(bs == CUBLAS_STATUS_NOT_SUPPORTED,
        "error: cublasLtMatmul with A 4-byte aligned and an algorithm chosen for 256 -> %s", cublasGetStatusName(bs));
  {
    cublasLtMatmulAlgo_t a4;
    bool ok4 = lt_heuristic(lt, o, 0, 4, &a4);
    bs = cublasLtMatmul(lt, o.op, &one, (char *)da.p + 4, o.la, db.p, o.lb, &zero, (char *)dc.p + 4, o.lc,
                        (char *)dc.p + 4, o.lc, ok4 ? &a4 : nullptr, nullptr, 0, s);
    check(ok4 && bs == CUBLAS_STATUS_SUCCESS, "cublasLtMatmul with 4-byte aligned A, D under a 4-byte preference -> %s",
          cublasGetStatusName(bs));
  }
  bs = cublasLtMatmul(lt, o.op, &one, (char *)da.p + 2, o.la, db.p, o.lb, &zero, dc.p, o.lc, dc.p, o.lc, nullptr,
                      nullptr, 0, s);
  check(bs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasLtMatmul with A not float-aligned -> %s",
        cublasGetStatusName(bs));
  {
    cublasLtMatmulAlgo_t junk;
    memset(&junk, 0x5a, sizeof junk);
    bs = cublasLtMatmul(lt, o.op, &one, da.p, o.la, db.p, o.lb, &zero, dc.p, o.lc, dc.p, o.lc, &junk, nullptr, 0, s);
    check(bs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasLtMatmul with an uninitialised algo -> %s",
          cublasGetStatusName(bs));
  }
  /* D overlapping A */
  bs = cublasLtMatmul(lt, o.op, &one, da.p, o.la, db.p, o.lb, &zero, da.p, o.lc, da.p, o.lc, nullptr, nullptr, 0, s);
  check(bs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasLtMatmul with D over A -> %s", cublasGetStatusName(bs));
  {
    /* batches of D that overlap: batch 2 with stride 8 (< one 8x6 matrix) */
    int32_t b2 = 2;
    int64_t st8 = 8;
    cublasLtMatrixLayout_t l[4];
    MatL ms[4] = {A, B, C, C};
    for (int i = 0; i < 4; i++) {
      BL(cublasLtMatrixLayoutCreate(&l[i], CUDA_R_32F, (uint64_t)ms[i].rows, (uint64_t)ms[i].cols, ms[i].ld));
      BL(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b2, sizeof b2));
      int64_t stv = i == 3 ? st8 : 0;
      BL(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stv, sizeof stv));
    }
    bs = cublasLtMatmul(lt, o.op, &one, da.p, l[0], db.p, l[1], &zero, dc.p, l[2], dc.p, l[3], nullptr, nullptr, 0, s);
    check(bs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasLtMatmul with D's batches overlapping -> %s",
          cublasGetStatusName(bs));
    for (int i = 0; i < 4; i++) cublasLtMatrixLayoutDestroy(l[i]);
  }
  /* cuBLAS */
  cublasStatus_t cs;
  cs = cublasGemmStridedBatchedEx(bh, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 5, &one, da.p, CUDA_R_32F, 7, 0, db.p, CUDA_R_32F,
                                  5, 0, &zero, dc.p, CUDA_R_32F, 8, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  check(cs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasGemmStridedBatchedEx with lda < m -> %s",
        cublasGetStatusName(cs));
  cs = cublasGemmStridedBatchedEx(bh, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 5, &one, da.p, CUDA_R_32F, 8, 0, hostA.data(),
                                  CUDA_R_32F, 5, 0, &zero, dc.p, CUDA_R_32F, 8, 0, 1, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT);
  check(cs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasGemmStridedBatchedEx with a host B -> %s",
        cublasGetStatusName(cs));
  cs = cublasGemmStridedBatchedEx(bh, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 5, &one, da.p, CUDA_R_32F, 8, 0, db.p, CUDA_R_32F,
                                  5, 0, &zero, dc.p, CUDA_R_32F, 8, 0, 1, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT);
  check(cs == CUBLAS_STATUS_NOT_SUPPORTED, "error: cublasGemmStridedBatchedEx float data with COMPUTE_64F -> %s",
        cublasGetStatusName(cs));
  cs = cublasGemmStridedBatchedEx(bh, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 5, &one, da.p, CUDA_R_32F, 8, 0, db.p, CUDA_R_32F,
                                  5, 0, &zero, dc.p, CUDA_R_32F, 8, 0, 1, CUBLAS_COMPUTE_32F_FAST_TF32,
                                  CUBLAS_GEMM_DEFAULT);
  check(cs == CUBLAS_STATUS_SUCCESS, "cublasGemmStridedBatchedEx float with COMPUTE_32F_FAST_TF32 -> %s",
        cublasGetStatusName(cs));
  {
    void *wsb;
    CU(cudaMalloc(&wsb, 1024));
    cs = cublasSetWorkspace(bh, (char *)wsb + 16, 512);
    check(cs == CUBLAS_STATUS_INVALID_VALUE, "error: cublasSetWorkspace not 256-byte aligned -> %s",
          cublasGetStatusName(cs));
    CU(cudaStreamSynchronize(s));
    cudaFree(wsb);
  }
  CU(cudaStreamSynchronize(s));
  o.destroy();
  da.free_(), db.free_(), dc.free_();
}

/* the error cases; the simulator's messages on them come between two marker lines on stderr */
static void test_errors(cudnnHandle_t h, cublasHandle_t bh, cublasLtHandle_t lt, cudaStream_t s) {
  fprintf(stderr, "---- the cudasim lines below are expected (error cases) ----\n");
  test_errors_cudnn(h);
  test_errors_blas(bh, lt, s);
  fprintf(stderr, "---- end of the expected cudasim lines ----\n");
}

/* descriptors destroyed after capture; the graph replays the convolution twice */
static void test_graph(cudnnHandle_t h, cudaStream_t s) {
  Conv c = {"graph", 2, 2, 3, 4, 1, {1, 9, 7}, {1, 3, 3}, {0, 1, 0}, {1, 2, 1}, {1, 1, 1}, false, false, 1, 1, 0, 0};
  ConvGeom g = geom(c);
  Shape xs = make_shape(2, c.N, c.C, g.in, 0), ys = make_shape(2, c.N, c.K, g.out, 0);
  std::vector<double> hx = as_stored(rnd_vec(xs.elems), 4), hw = as_stored(rnd_vec(4 * 3 * 9), 4);
  Dev dx(hx, 4), dw(hw, 4), dy(std::vector<double>(ys.elems, 0.0), 4);
  Descs d = make_descs(c, xs, ys);
  float one = 1;
  size_t wsz = 0;
  DNN(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &wsz));
  void *ws;
  CU(cudaMalloc(&ws, wsz));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  DNN(cudnnConvolutionForward(h, &one, d.x, dx.p, d.w, dw.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws, wsz, &one,
                              d.y, dy.p));
  CU(cudaStreamEndCapture(s, &graph));
  d.destroy();
  CU(cudaGraphInstantiate(&exec, graph, 0));
  CU(cudaGraphLaunch(exec, s));
  CU(cudaGraphLaunch(exec, s));
  CU(cudaStreamSynchronize(s));
  std::vector<double> got = dy.get(), acc(ys.elems, 0.0);
  conv_visit(c, g, xs, ys, [&](int64_t xo, int64_t wo, int64_t yo) { acc[yo] += hx[xo] * hw[wo]; });
  for (auto &v : acc) v *= 2; /* beta 1: two launches accumulate */
  double e = rel_err(got, acc);
  check(e < 2e-5, "graph: a captured convolution replayed twice after its descriptors were destroyed, rel %.3g", e);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(ws);
  dx.free_(), dw.free_(), dy.free_();
}

/* the same convolution twice gives the same bits */
static void test_determinism(cudnnHandle_t h, cudaStream_t s) {
  Conv c = {"det", 2, 2, 16, 24, 2, {1, 13, 11}, {1, 3, 3}, {0, 1, 1}, {1, 1, 2}, {1, 2, 1}, false, false, 1, 0, 1, 0};
  ConvGeom g = geom(c);
  Shape xs = make_shape(2, c.N, c.C, g.in, 1), ys = make_shape(2, c.N, c.K, g.out, 0);
  Dev dx(rnd_vec(xs.elems), 4), dw(rnd_vec(24 * 8 * 9), 4), y1(rnd_vec(ys.elems), 4), y2(rnd_vec(ys.elems), 4);
  Descs d = make_descs(c, xs, ys);
  float one = 1, zero = 0;
  DNN(cudnnConvolutionForward(h, &one, d.x, dx.p, d.w, dw.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                              0, &zero, d.y, y1.p));
  DNN(cudnnConvolutionForward(h, &one, d.x, dx.p, d.w, dw.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                              0, &zero, d.y, y2.p));
  CU(cudaStreamSynchronize(s));
  std::vector<double> a = y1.get(), b = y2.get();
  check(a == b, "determinism: the same convolution twice gives identical results");
  d.destroy();
  dx.free_(), dw.free_(), y1.free_(), y2.free_();
}

/* the row-major GEMM pipecc's pk_gemm maps onto cuBLASLt (operands swapped) */
static void test_pipecc_mapping(cublasLtHandle_t lt, cudaStream_t s) {
  int m = 5, n = 7, k = 4;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      /* row-major A [m,k] (or [k,m] if ta), B [k,n] (or [n,k]), C [m,n] */
      int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
      std::vector<double> ha = as_stored(rnd_vec((size_t)m * k), 4), hb = as_stored(rnd_vec((size_t)k * n), 4);
      Dev da(ha, 4), db(hb, 4), dc(std::vector<double>((size_t)m * n, 0.0), 4);
      cublasLtMatmulDesc_t op;
      BL(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
      BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
      BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
      cublasLtMatrixLayout_t la, lb, lc;
      BL(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, tb ? k : n, tb ? n : k, ldb));
      BL(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, ta ? m : k, ta ? k : m, lda));
      BL(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, ldc));
      float one = 1, zero = 0;
      BL(cublasLtMatmul(lt, op, &one, db.p, la, da.p, lb, &zero, dc.p, lc, dc.p, lc, nullptr, nullptr, 0, s));
      CU(cudaStreamSynchronize(s));
      std::vector<double> got = dc.get(), ref((size_t)m * n, 0.0);
      for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
          double acc = 0;
          for (int l = 0; l < k; l++)
            acc += (ta ? ha[l * lda + i] : ha[i * lda + l]) * (tb ? hb[j * ldb + l] : hb[l * ldb + j]);
          ref[i * ldc + j] = acc;
        }
      check(rel_err(got, ref) < 2e-5, "row-major C = op(A) op(B) through cuBLASLt as pipecc maps it (ta %d, tb %d)", ta,
            tb);
      cublasLtMatmulDescDestroy(op);
      cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
      da.free_(), db.free_(), dc.free_();
    }
}

/* cuBLASLt's epilogues as pk_conv_1x1 uses them: row-major Y[P, M] = X[P, C] W[M, C]^T
 * (column-major D = W^T... with cuBLASLt's A = W transposed, B = X), bias per row of D
 * (per output channel), the residual as C with beta 1 (C and D apart), then ReLU as
 * max(v, 0); and the errors: a BIAS epilogue with no bias pointer, an unsupported one. */
static void test_lt_epilogue(cublasLtHandle_t lt, cudaStream_t s) {
  const int P = 13, C = 6, M = 5;
  const uint32_t epis[4] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU,
                            CUBLASLT_EPILOGUE_RELU_BIAS};
  std::vector<double> hx = as_stored(rnd_vec((size_t)P * C), 4), hw = as_stored(rnd_vec((size_t)M * C), 4);
  std::vector<double> hb = as_stored(rnd_vec(M), 4), hr = as_stored(rnd_vec((size_t)P * M), 4);
  Dev dx(hx, 4), dw(hw, 4), db(hb, 4), dr(hr, 4), dy(std::vector<double>((size_t)P * M, 0.0), 4);
  for (uint32_t epi : epis)
    for (int res = 0; res < 2; res++) {
      cublasLtMatmulDesc_t op;
      BL(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
      BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
      BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
      BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
      bool bias = epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS;
      bool relu = epi == CUBLASLT_EPILOGUE_RELU || epi == CUBLASLT_EPILOGUE_RELU_BIAS;
      if (bias) BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &db.p, sizeof db.p));
      cublasLtMatrixLayout_t la, lb, lc;
      BL(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, C, M, C)); /* W [M, C] row-major */
      BL(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, C, P, C)); /* X [P, C] */
      BL(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, P, M)); /* Y, R [P, M] */
      float one = 1, beta = res ? 1.0f : 0.0f;
      BL(cublasLtMatmul(lt, op, &one, dw.p, la, dx.p, lb, &beta, res ? dr.p : dy.p, lc, dy.p, lc, nullptr, nullptr, 0,
                        s));
      CU(cudaStreamSynchronize(s));
      std::vector<double> got = dy.get(), ref((size_t)P * M);
      int relu_zeroed = 0;
      for (int p = 0; p < P; p++)
        for (int m = 0; m < M; m++) {
          double acc = 0;
          for (int c = 0; c < C; c++) acc += hx[p * C + c] * hw[m * C + c];
          if (res) acc += hr[p * M + m];
          if (bias) acc += hb[m];
          if (relu && acc < 0) acc = 0, relu_zeroed++;
          ref[p * M + m] = acc;
        }
      check(rel_err(got, ref) < 2e-5 && (!relu || relu_zeroed > 0),
            "cublasLtMatmul epilogue %u, residual %d: relu(W X + beta R + bias) as pk_conv_1x1 maps it", epi, res);
      check(dr.get() == hr, "cublasLtMatmul epilogue %u: C (the residual) untouched", epi);
      if (bias) { /* no bias pointer: refused */
        void *null = nullptr;
        BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &null, sizeof null));
        cublasStatus_t bs =
            cublasLtMatmul(lt, op, &one, dw.p, la, dx.p, lb, &beta, dy.p, lc, dy.p, lc, nullptr, nullptr, 0, s);
        check(bs == CUBLAS_STATUS_INVALID_VALUE, "error: epilogue %u with a NULL bias pointer -> %s", epi,
              cublasGetStatusName(bs));
      }
      cublasLtMatmulDescDestroy(op);
      cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    }
  {
    cublasLtMatmulDesc_t op;
    BL(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    uint32_t gelu = CUBLASLT_EPILOGUE_GELU;
    BL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu, sizeof gelu));
    cublasLtMatrixLayout_t l;
    BL(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4));
    float one = 1, zero = 0;
    cublasStatus_t bs = cublasLtMatmul(lt, op, &one, dx.p, l, dw.p, l, &zero, dy.p, l, dy.p, l, nullptr, nullptr, 0, s);
    check(bs == CUBLAS_STATUS_NOT_SUPPORTED, "error: the GELU epilogue is not simulated -> %s",
          cublasGetStatusName(bs));
    cublasLtMatmulDescDestroy(op);
    cublasLtMatrixLayoutDestroy(l);
  }
  dx.free_(), dw.free_(), db.free_(), dr.free_(), dy.free_();
}

/* beta 0: the output is never read, so fresh device memory (NaN: the simulator poisons it)
 * does not leak into the result; strided outputs keep NaN between their elements */
static void test_fresh_outputs(cudnnHandle_t h, cublasHandle_t bh, cublasLtHandle_t lt, cudaStream_t s) {
  for (int lay = 0; lay < 3; lay += 2) {
    Conv c = {"fresh",   2,         2,     4,     6,   2, {1, 7, 8}, {1, 3, 3}, {0, 1, 1},
              {1, 1, 1}, {1, 1, 1}, false, false, 0.5, 0, 0,         lay};
    ConvGeom g = geom(c);
    Shape xs = make_shape(2, c.N, c.C, g.in, 0), ys = make_shape(2, c.N, c.K, g.out, lay);
    std::vector<double> hx = as_stored(rnd_vec(xs.elems), 4), hw = as_stored(rnd_vec(6 * 2 * 9), 4);
    Dev dx(hx, 4), dw(hw, 4);
    void *y, *x2;
    CU(cudaMalloc(&y, ys.elems * 4));
    CU(cudaMalloc(&x2, xs.elems * 4));
    Descs d = make_descs(c, xs, ys);
    float al = 0.5f, zero = 0;
    DNN(cudnnConvolutionForward(h, &al, d.x, dx.p, d.w, dw.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                                0, &zero, d.y, y));
    DNN(cudnnConvolutionBackwardData(h, &al, d.w, dw.p, d.y, y, d.conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr, 0,
                                     &zero, d.x, x2));
    CU(cudaStreamSynchronize(s));
    std::vector<float> hy(ys.elems), hx2(xs.elems);
    CU(cudaMemcpy(hy.data(), y, ys.elems * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(hx2.data(), x2, xs.elems * 4, cudaMemcpyDeviceToHost));
    std::vector<char> m = view_mask(ys);
    bool ok = true;
    for (size_t i = 0; i < ys.elems; i++) ok &= m[i] ? !std::isnan(hy[i]) : std::isnan(hy[i]);
    for (float v : hx2) ok &= !std::isnan(v);
    check(ok, "beta 0 into fresh (NaN-poisoned) memory, y layout %d: no NaN in the results, gaps untouched", lay);
    d.destroy();
    cudaFree(y), cudaFree(x2);
    dx.free_(), dw.free_();
  }
  for (int lt_ = 0; lt_ < 2; lt_++) {
    int m = 9, n = 7, k = 5;
    Dev a(rnd_vec((size_t)m * k), 4), b(rnd_vec((size_t)k * n), 4);
    void *c;
    CU(cudaMalloc(&c, (size_t)m * n * 4));
    float one = 1, zero = 0;
    if (lt_) {
      cublasLtMatmulDesc_t op;
      cublasLtMatrixLayout_t la, lb, lc;
      BL(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      BL(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m));
      BL(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
      BL(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));
      BL(cublasLtMatmul(lt, op, &one, a.p, la, b.p, lb, &zero, c, lc, c, lc, nullptr, nullptr, 0, s));
      cublasLtMatmulDescDestroy(op);
      cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    } else {
      BL(cublasGemmStridedBatchedEx(bh, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.p, CUDA_R_32F, m, 0, b.p, CUDA_R_32F,
                                    k, 0, &zero, c, CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    CU(cudaStreamSynchronize(s));
    std::vector<float> hc((size_t)m * n);
    CU(cudaMemcpy(hc.data(), c, hc.size() * 4, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (float v : hc) ok &= !std::isnan(v);
    check(ok, "%s with beta 0 into fresh (NaN-poisoned) memory: no NaN",
          lt_ ? "cublasLtMatmul" : "cublasGemmStridedBatchedEx");
    cudaFree(c);
    a.free_(), b.free_();
  }
}

/* two streams with their own handles at once: the same results as one at a time */
static void test_two_streams() {
  cudaStream_t ss[2];
  cudnnHandle_t hs[2];
  cublasHandle_t bs[2];
  Conv c = {"streams", 2,         2,     16,    32, 1, {1, 24, 24}, {1, 3, 3}, {0, 1, 1},
            {1, 1, 1}, {1, 1, 1}, false, false, 1,  0, 0,           0};
  ConvGeom g = geom(c);
  Shape xs = make_shape(2, c.N, c.C, g.in, 0), ys = make_shape(2, c.N, c.K, g.out, 0);
  Dev x(rnd_vec(xs.elems), 4), w(rnd_vec(32 * 16 * 9), 4), a(rnd_vec(64 * 48), 4), b(rnd_vec(48 * 80), 4);
  Dev y[2] = {Dev(std::vector<double>(ys.elems, 0.0), 4), Dev(std::vector<double>(ys.elems, 0.0), 4)};
  Dev cc[2] = {Dev(std::vector<double>(64 * 80, 0.0), 4), Dev(std::vector<double>(64 * 80, 0.0), 4)};
  Descs d = make_descs(c, xs, ys);
  float one = 1, zero = 0;
  for (int i = 0; i < 2; i++) {
    CU(cudaStreamCreateWithFlags(&ss[i], cudaStreamNonBlocking));
    DNN(cudnnCreate(&hs[i]));
    DNN(cudnnSetStream(hs[i], ss[i]));
    BL(cublasCreate(&bs[i]));
    BL(cublasSetStream(bs[i], ss[i]));
  }
  for (int it = 0; it < 20; it++)
    for (int i = 0; i < 2; i++) {
      DNN(cudnnConvolutionForward(hs[i], &one, d.x, x.p, d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                  nullptr, 0, &zero, d.y, y[i].p));
      BL(cublasGemmStridedBatchedEx(bs[i], CUBLAS_OP_N, CUBLAS_OP_N, 64, 80, 48, &one, a.p, CUDA_R_32F, 64, 0, b.p,
                                    CUDA_R_32F, 48, 0, &zero, cc[i].p, CUDA_R_32F, 64, 0, 1, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
    }
  for (int i = 0; i < 2; i++) CU(cudaStreamSynchronize(ss[i]));
  check(y[0].get() == y[1].get() && cc[0].get() == cc[1].get(), "two streams computing at once give identical results");
  for (int i = 0; i < 2; i++) {
    cudnnDestroy(hs[i]);
    cublasDestroy(bs[i]);
    cudaStreamDestroy(ss[i]);
    y[i].free_(), cc[i].free_();
  }
  d.destroy();
  x.free_(), w.free_(), a.free_(), b.free_();
}

/* a captured convolution whose input was freed before the replay is skipped (with a line) */
static void test_graph_after_free(cudnnHandle_t h, cudaStream_t s) {
  Conv c = {"freed", 2, 1, 2, 2, 1, {1, 5, 5}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0};
  ConvGeom g = geom(c);
  Shape xs = make_shape(2, c.N, c.C, g.in, 0), ys = make_shape(2, c.N, c.K, g.out, 0);
  Dev x(rnd_vec(xs.elems), 4), w(rnd_vec(2 * 2 * 9), 4), y(std::vector<double>(ys.elems, 3.0), 4);
  Descs d = make_descs(c, xs, ys);
  float one = 1, zero = 0;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  DNN(cudnnConvolutionForward(h, &one, d.x, x.p, d.w, w.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0,
                              &zero, d.y, y.p));
  CU(cudaStreamEndCapture(s, &graph));
  CU(cudaGraphInstantiate(&exec, graph, 0));
  x.free_();
  fprintf(stderr, "---- one expected cudasim line (a replay after a free) ----\n");
  CU(cudaGraphLaunch(exec, s));
  CU(cudaStreamSynchronize(s));
  std::vector<double> got = y.get();
  bool untouched = true;
  for (double v : got) untouched &= v == 3.0;
  check(untouched, "graph replayed after its input was freed: the convolution is skipped");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  d.destroy();
  w.free_(), y.free_();
}

static void perf_probe(cudnnHandle_t h, cudaStream_t s) {
  /* a ResNet-18 layer at batch 2: 64 -> 64 channels, 56x56, 3x3 pad 1 */
  Conv c = {"perf", 2, 2, 64, 64, 1, {1, 56, 56}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0};
  ConvGeom g = geom(c);
  Shape xs = make_shape(2, c.N, c.C, g.in, 0), ys = make_shape(2, c.N, c.K, g.out, 0);
  Dev dx(rnd_vec(xs.elems), 4), dw(rnd_vec(64 * 64 * 9), 4), dy(std::vector<double>(ys.elems, 0.0), 4);
  Descs d = make_descs(c, xs, ys);
  float one = 1, zero = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; i++)
    DNN(cudnnConvolutionForward(h, &one, d.x, dx.p, d.w, dw.p, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                nullptr, 0, &zero, d.y, dy.p));
  CU(cudaStreamSynchronize(s));
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; i++)
    DNN(cudnnConvolutionBackwardData(h, &one, d.w, dw.p, d.y, dy.p, d.conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr,
                                     0, &zero, d.x, dx.p));
  CU(cudaStreamSynchronize(s));
  auto t2 = std::chrono::steady_clock::now();
  printf("INFO conv 2x64x56x56 3x3 -> 64: forward %.1f ms, backward data %.1f ms (mean of 5; %.1f GFLOP each)\n",
         std::chrono::duration<double, std::milli>(t1 - t0).count() / 5,
         std::chrono::duration<double, std::milli>(t2 - t1).count() / 5, 2.0 * 2 * 64 * 56 * 56 * 64 * 9 / 1e9);
  d.destroy();
  dx.free_(), dw.free_(), dy.free_();
  /* MobileNet-V2 layers at batch 2: depthwise 3x3 and a 1x1 projection */
  const Conv more[] = {
      {"dw", 2, 2, 144, 144, 144, {1, 56, 56}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0},
      {"pw", 2, 2, 144, 24, 1, {1, 56, 56}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0}};
  for (const Conv &m : more) {
    ConvGeom mg = geom(m);
    Shape mx = make_shape(2, m.N, m.C, mg.in, 0), my = make_shape(2, m.N, m.K, mg.out, 0);
    Dev ax(rnd_vec(mx.elems), 4), aw(rnd_vec((size_t)(m.K * (m.C / m.G) * mg.k[1] * mg.k[2])), 4),
        ay(std::vector<double>(my.elems, 0.0), 4);
    Descs md = make_descs(m, mx, my);
    auto u0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; i++)
      DNN(cudnnConvolutionForward(h, &one, md.x, ax.p, md.w, aw.p, md.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                  nullptr, 0, &zero, md.y, ay.p));
    CU(cudaStreamSynchronize(s));
    auto u1 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; i++)
      DNN(cudnnConvolutionBackwardData(h, &one, md.w, aw.p, md.y, ay.p, md.conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                                       nullptr, 0, &zero, md.x, ax.p));
    CU(cudaStreamSynchronize(s));
    auto u2 = std::chrono::steady_clock::now();
    printf("INFO conv %s 2x%dx56x56 -> %d (groups %d): forward %.1f ms, backward data %.1f ms\n", m.name, m.C, m.K, m.G,
           std::chrono::duration<double, std::milli>(u1 - u0).count() / 5,
           std::chrono::duration<double, std::milli>(u2 - u1).count() / 5);
    md.destroy();
    ax.free_(), aw.free_(), ay.free_();
  }
}

/* the convolution cases: name, nsp, N, C, K, G, in, k, pad, str, dil, dbl, flip, alpha, beta, xlay, ylay */
static const Conv convs[] = {
    {"1d", 1, 2, 3, 4, 1, {1, 1, 17}, {1, 1, 3}, {0, 0, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0},
    {"1d-stride-dil", 1, 2, 4, 6, 2, {1, 1, 23}, {1, 1, 3}, {0, 0, 2}, {1, 1, 2}, {1, 1, 3}, true, false, 1, 0, 0, 0},
    {"2d", 2, 2, 3, 5, 1, {1, 9, 10}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0},
    {"2d-double", 2, 2, 3, 5, 1, {1, 9, 10}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, true, false, 1, 0, 0, 0},
    {"2d-7x7-s2", 2, 2, 3, 8, 1, {1, 20, 19}, {1, 7, 7}, {0, 3, 3}, {1, 2, 2}, {1, 1, 1}, false, false, 1, 0, 0, 0},
    {"2d-1x1", 2, 3, 8, 6, 1, {1, 5, 7}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0},
    {"2d-1x1-s2", 2, 2, 8, 6, 1, {1, 9, 7}, {1, 1, 1}, {0, 0, 0}, {1, 2, 2}, {1, 1, 1}, true, false, 1, 0, 0, 0},
    {"2d-groups", 2, 2, 8, 12, 4, {1, 7, 9}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0},
    {"2d-depthwise", 2, 2, 6, 6, 6, {1, 11, 9}, {1, 3, 3}, {0, 1, 1}, {1, 2, 2}, {1, 1, 1}, false, false, 1, 0, 0, 0},
    {"2d-depthwise-x2", 2, 1, 4, 8, 4, {1, 8, 8}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, true, false, 1, 0, 0, 0},
    {"2d-dilated", 2, 2, 3, 4, 1, {1, 12, 13}, {1, 3, 2}, {0, 2, 1}, {1, 1, 2}, {1, 2, 3}, false, false, 1, 0, 0, 0},
    {"2d-asym-stride", 2, 1, 2, 3, 1, {1, 10, 11}, {1, 2, 4}, {0, 0, 2}, {1, 3, 2}, {1, 1, 1}, true, false, 1, 0, 0, 0},
    {"2d-alpha-beta",
     2,
     2,
     4,
     4,
     2,
     {1, 6, 7},
     {1, 3, 3},
     {0, 1, 0},
     {1, 1, 1},
     {1, 1, 1},
     false,
     false,
     0.75,
     -0.5,
     0,
     0},
    {"2d-alpha-beta-d",
     2,
     2,
     4,
     4,
     1,
     {1, 6, 7},
     {1, 3, 3},
     {0, 1, 0},
     {1, 1, 1},
     {1, 1, 1},
     true,
     false,
     2,
     0.25,
     0,
     0},
    {"2d-nhwc-x", 2, 2, 5, 3, 1, {1, 7, 6}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 1, 0},
    {"2d-strided-y", 2, 2, 5, 3, 1, {1, 7, 6}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, true, false, 1, 0, 0, 2},
    {"2d-gaps-both", 2, 2, 4, 6, 2, {1, 8, 6}, {1, 3, 2}, {0, 1, 0}, {1, 2, 1}, {1, 1, 1}, false, false, 0.5, 1, 2, 1},
    {"2d-flip", 2, 2, 3, 4, 1, {1, 8, 9}, {1, 3, 2}, {0, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, true, 1, 0, 0, 0},
    {"3d", 3, 2, 3, 4, 1, {5, 6, 7}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false, 1, 0, 0, 0},
    {"3d-double", 3, 1, 4, 4, 2, {6, 5, 7}, {2, 3, 3}, {1, 0, 1}, {2, 1, 2}, {1, 2, 1}, true, false, 1, 0, 0, 0},
    {"3d-strided", 3, 2, 3, 2, 1, {4, 5, 6}, {3, 1, 3}, {1, 0, 1}, {1, 1, 1}, {2, 1, 1}, false, true, 1.5, 0.5, 1, 2},
};

/* Every convolution case forward and backward data, by each algorithm (and TF32 where the
 * math type allows it), and the adjoint identity */
static void test_conv_cases(cudnnHandle_t h, cudaStream_t s) {
  for (const Conv &c : convs) {
    for (int pick = 0; pick < 3; pick++) test_conv(h, s, c, false, pick); /* PRECOMP, IMPLICIT, GEMM */
    for (int pick = 0; pick < 2; pick++) test_conv(h, s, c, true, pick);  /* ALGO_0, ALGO_1 */
    if (!c.dbl) {                                                         /* TF32 where the math type allows it */
      test_conv(h, s, c, false, 0, true);
      test_conv(h, s, c, true, 0, true);
    }
    test_adjoint(h, s, c);
  }
}

/* the backend API: every forward case but the flipped ones (pipecc asks for cross-
 * correlation), heuristics mode A and FALLBACK, the filter KCRS and KRSC; its errors */
static void test_backend_cases(cudnnHandle_t h, cudaStream_t s) {
  for (const Conv &c : convs) {
    if (c.flip) continue;
    test_backend_conv(h, s, c, false, CUDNN_HEUR_MODE_A);
    if (c.nsp == 2 && !c.dbl) test_backend_conv(h, s, c, true, CUDNN_HEUR_MODE_A);
  }
  test_backend_conv(h, s, convs[2], false, CUDNN_HEUR_MODE_FALLBACK);
  test_backend_errors(h, s, convs[2]);
}

/* Find ranks by time; every offered algorithm succeeds */
static void test_find_algorithm(cudnnHandle_t h) {
  const Conv &c = convs[2];
  ConvGeom g = geom(c);
  Shape xs = make_shape(2, c.N, c.C, g.in, 0), ys = make_shape(2, c.N, c.K, g.out, 0);
  Descs d = make_descs(c, xs, ys);
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  DNN(cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
  bool ok = found > 0 && perf[0].status == CUDNN_STATUS_SUCCESS && perf[0].determinism == CUDNN_DETERMINISTIC &&
            perf[0].mathType == CUDNN_FMA_MATH;
  check(ok, "cudnnFindConvolutionForwardAlgorithm: %d results, first algorithm %d", found, (int)perf[0].algo);
  d.destroy();
}

/* cublasGemmStridedBatchedEx and cublasLtMatmul: every transpose, float (FP32 and TF32 in
 * turn) and double, over products of several shapes, leading dimensions, batches and
 * alpha/beta */
static void test_gemm_cases(cublasHandle_t bh, cublasLtHandle_t lt, cudaStream_t s, void *ws, size_t ws_size) {
  const cublasComputeType_t f32[] = {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
  int ci = 0;
  for (int dbl = 0; dbl < 2; dbl++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        cublasComputeType_t ct = dbl ? CUBLAS_COMPUTE_64F : f32[ci++ % 2];
        Gemm cases[] = {
            {(bool)dbl, (bool)ta, (bool)tb, 7, 5, 9, 1, 0, 0, 1.0, 0.0, false, ct},
            {(bool)dbl, (bool)ta, (bool)tb, 33, 17, 65, 1, 3, 0, 0.5, 0.0, false, ct},
            {(bool)dbl, (bool)ta, (bool)tb, 6, 11, 4, 3, 2, 0, 1.25, -0.75, false, ct},
            {(bool)dbl, (bool)ta, (bool)tb, 6, 5, 8, 4, 1, 1, 1.0, 1.0, false, ct},
            {(bool)dbl, (bool)ta, (bool)tb, 9, 4, 3, 2, 0, 0, -1.0, 0.5, true, ct},
        };
        for (const Gemm &t : cases) {
          if (!t.c_distinct) test_gemm_blas(bh, s, t);
          test_gemm_lt(lt, s, ws, ws_size, t);
        }
      }
}

/* k == 0: D = beta C; alpha == 0 likewise */
static void test_gemm_degenerate(cublasHandle_t bh, cublasLtHandle_t lt, cudaStream_t s, void *ws, size_t ws_size) {
  Gemm z = {false, false, false, 4, 3, 0, 1, 0, 0, 1.0, 0.5, false, CUBLAS_COMPUTE_32F};
  test_gemm_blas(bh, s, z);
  z.k = 5, z.alpha = 0.0;
  test_gemm_blas(bh, s, z);
  test_gemm_lt(lt, s, ws, ws_size, z);
}

/* the default stream (NULL), then s again */
static void test_default_stream(cudnnHandle_t h, cublasHandle_t bh, cublasLtHandle_t lt, cudaStream_t s, void *ws,
                                size_t ws_size) {
  DNN(cudnnSetStream(h, nullptr));
  BL(cublasSetStream(bh, nullptr));
  Gemm t = {false, true, false, 10, 12, 7, 2, 1, 0, 1.0, 0.0, false, CUBLAS_COMPUTE_32F};
  test_gemm_blas(bh, nullptr, t);
  test_gemm_lt(lt, nullptr, ws, ws_size, t);
  test_conv(h, nullptr, convs[7], false, 0);
  test_conv(h, nullptr, convs[7], true, 1);
  DNN(cudnnSetStream(h, s));
  BL(cublasSetStream(bh, s));
}

int main() {
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudnnHandle_t h;
  DNN(cudnnCreate(&h));
  DNN(cudnnSetStream(h, s));
  cublasHandle_t bh;
  BL(cublasCreate(&bh));
  BL(cublasSetStream(bh, s));
  cublasLtHandle_t lt;
  BL(cublasLtCreate(&lt));
  size_t ws_size = (size_t)4 << 20;
  void *ws;
  CU(cudaMalloc(&ws, ws_size));
  BL(cublasSetWorkspace(bh, ws, ws_size));

  test_conv_cases(h, s);
  test_backend_cases(h, s);
  test_find_algorithm(h);

  test_gemm_cases(bh, lt, s, ws, ws_size);
  test_gemm_degenerate(bh, lt, s, ws, ws_size);
  test_pipecc_mapping(lt, s);
  test_lt_epilogue(lt, s);
  test_graph(h, s);
  test_determinism(h, s);
  test_default_stream(h, bh, lt, s, ws, ws_size);
  test_fresh_outputs(h, bh, lt, s);
  test_two_streams();
  test_errors(h, bh, lt, s);
  test_graph_after_free(h, s);
  perf_probe(h, s);

  CU(cudaStreamSynchronize(s));
  cudaFree(ws);
  BL(cublasLtDestroy(lt));
  BL(cublasDestroy(bh));
  DNN(cudnnDestroy(h));
  CU(cudaStreamDestroy(s));
  printf("%s: %d passed, %d failed\n", n_fail ? "FAILED" : "OK", n_pass, n_fail);
  return n_fail ? 1 : 0;
}
