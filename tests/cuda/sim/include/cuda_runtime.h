/* cuda_runtime.h (CUDA simulator) - the part of the CUDA runtime API that pipecc's
 * device runtime and generated stages use, for compiling them with g++ and running them
 * on the CPU in tests (tests/cuda/sim/README.md). Declarations written for the
 * simulator; the numeric values of the enums are its own.
 *
 * Device code runs on the CPU: a kernel launch (rewritten by tests/cuda/sim/nvcc from
 * k<<<grid, block, smem, stream>>>(args) to cudasim_launch((k), "k", grid, block,
 * smem, stream)(args)) is queued on its stream, whose thread later runs every block, each
 * CUDA thread of a block as a fiber when the kernel synchronises (__syncthreads, warp
 * shuffles), as a plain call otherwise. */
#ifndef CUDASIM_CUDA_RUNTIME_H
#define CUDASIM_CUDA_RUNTIME_H
#ifndef __cplusplus
#error "the CUDA simulator's headers are C++ (tests/cuda/sim/nvcc compiles .cu files as C++)"
#endif

#include <library_types.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>

#define CUDASIM 1
#define CUDART_VERSION 12000

/* ---- qualifiers ----------------------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
/* one copy per simulated block: blocks of a stream run one after another on its thread */
#define __shared__ static thread_local
#define __constant__ static

/* ---- types ---------------------------------------------------------------------------- */
struct uint3 {
  unsigned x, y, z;
};
/* CUDA's 16-byte vector type, aligned as on the device (a float4 load needs it) */
struct alignas(16) float4 {
  float x, y, z, w;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorPeerAccessUnsupported = 217,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorIllegalAddress = 700,
  cudaErrorAssert = 710,
  cudaErrorHardwareStackError = 714,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorUnknown = 999
} cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};

#define cudaStreamDefault 0x0u
#define cudaStreamNonBlocking 0x1u
#define cudaEventDefault 0x0u
#define cudaEventBlockingSync 0x1u
#define cudaEventDisableTiming 0x2u
#define cudaHostRegisterDefault 0x0u
#define cudaHostRegisterPortable 0x1u
#define cudaHostAllocDefault 0x0u

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int clockRate;
  int major, minor;
  int multiProcessorCount;
  int pciBusID, pciDeviceID, pciDomainID;
};

/* ---- the runtime API ------------------------------------------------------------------ */
extern "C" {
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
/* peer access: every pair of distinct devices can (CUDASIM_PEER=0: none can) */
cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2
};
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
}

template <class T>
static inline cudaError_t cudaMalloc(T **p, size_t n) {
  return ::cudaMalloc((void **)p, n);
}
template <class T>
static inline cudaError_t cudaMallocHost(T **p, size_t n) {
  return ::cudaMallocHost((void **)p, n);
}

/* ---- device-side built-ins ------------------------------------------------------------ */
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;
constexpr int warpSize = 32;

namespace cudasim {
/* the block barrier and the warp exchange of the calling simulated thread */
void syncthreads();
/* the value of lane (own lane ^ lane_mask) within groups of width lanes, as
 * __shfl_xor_sync: every live lane of the warp must take part */
void warp_exchange(const void *mine, void *theirs, size_t size, int lane_mask, int width);
/* a kernel with its arguments, as launched (not std::function: <functional> alone took
 * a quarter of the time g++ spends on a small stage) */
struct kernel_body {
  virtual ~kernel_body() {}
  virtual void run() const = 0;
};
template <class F, class T>
struct kernel_call final : kernel_body {
  F f;
  T args;
  kernel_call(F f_, T &&a) : f(f_), args(std::move(a)) {}
  void run() const override { std::apply(f, args); }
};
/* queue a kernel: body (taken over, freed after its run) runs once per CUDA thread with
 * threadIdx/blockIdx set */
cudaError_t launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s, kernel_body *body);

template <class K>
struct launcher {
  K k;
  const char *name;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <class... A>
  void operator()(A &&...a) const {
    run(k, std::forward<A>(a)...);
  }

 private:
  template <class... P, class... A>
  void run(void (*f)(P...), A &&...a) const {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    /* kernel arguments are copied at the launch, as CUDA does */
    using args_t = std::tuple<std::decay_t<P>...>;
    args_t args(std::forward<A>(a)...);
    launch(name, grid, block, smem, stream, new kernel_call<void (*)(P...), args_t>(f, std::move(args)));
  }
};
}  // namespace cudasim

template <class K>
static inline cudasim::launcher<K> cudasim_launch(K k, const char *name, dim3 grid, dim3 block, size_t smem = 0,
                                                  cudaStream_t s = 0) {
  return cudasim::launcher<K>{k, name, grid, block, smem, s};
}

static inline void __syncthreads() { cudasim::syncthreads(); }

template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  (void)mask;
  static_assert(sizeof(T) <= 8, "__shfl_xor_sync of more than 8 bytes");
  T r;
  cudasim::warp_exchange(&v, &r, sizeof(T), lane_mask, width);
  return r;
}

template <class T>
static inline T __ldg(const T *p) {
  return *p;
}

/* CUDA's min/max overloads for mixed integer and floating arguments */
template <class A, class B>
static inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type C;
  return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B>
static inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type C;
  return (C)a < (C)b ? (C)b : (C)a;
}

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
/* __expf, __logf, __powf: glibc declares and exports functions of these names */
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline int __float_as_int(float x) {
  int r;
  memcpy(&r, &x, 4);
  return r;
}
static inline float __int_as_float(int x) {
  float r;
  memcpy(&r, &x, 4);
  return r;
}
static inline unsigned __float_as_uint(float x) {
  unsigned r;
  memcpy(&r, &x, 4);
  return r;
}
static inline float __uint_as_float(unsigned x) {
  float r;
  memcpy(&r, &x, 4);
  return r;
}
static inline long long __double_as_longlong(double x) {
  long long r;
  memcpy(&r, &x, 8);
  return r;
}
static inline double __longlong_as_double(long long x) {
  double r;
  memcpy(&r, &x, 8);
  return r;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }

#endif
