/* sim_core_test.cu - the CUDA simulator's runtime core (built through ./nvcc, so the launch
 * rewriting is tested too). Each check prints one line; exit 0 when all pass.
 *   kernels: grid-stride loops, 2-D blocks, __shared__ + __syncthreads, warp shuffles
 *   streams: order within a stream, events between streams (and a control without the
 *            wait, which must see the old value), the legacy default stream
 *   copies:  pageable uploads read at the call, downloads to pageable memory complete at
 *            the call, page-locked ones at the stream's pace; host pointers refused
 *   graphs:  capture, replay, and calls a capture forbids invalidating it
 *   errors:  invalid launch configurations, out of memory (CUDASIM_MEM_MB), no device,
 *            lanes of a warp waiting at different barriers (a child process must abort
 *            with one line naming the kernel)
 *   devices: (child processes, CUDASIM_DEVICES=2) cudaFree waits for its own device
 *            only, so a copy device 1 still has queued from freed device-0 memory aborts
 *            the process naming it, and waiting for device 1 first does not; a fault on
 *            device 1 is sticky there only (device 0 runs on) */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures = 0, checks = 0;

static void check(bool ok, const char *what) {
  checks++;
  if (!ok) failures++;
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}

__global__ void k_axpy(float a, const float *x, float *y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + y[i];
}

__global__ void k_index2d(int *out, int w) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  out[y * w + x] = y * 1000 + x;
}

/* one block sums n values through shared memory and a tree of barriers */
__global__ void k_block_sum(const float *x, float *out, int n) {
  __shared__ float sh[256];
  float v = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}

/* each warp sums its lanes' values with xor shuffles */
__global__ void k_warp_sum(const int *x, int *out) {
  int v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void k_slow_set(int *p, int v, int ms) {
  usleep((useconds_t)ms * 1000);
  *p = v;
}

__global__ void k_copy_int(const int *a, int *b) { *b = *a; }

/* half of each warp shuffles while the other half waits at the block's barrier: on a GPU
 * that is undefined (a full-mask shuffle without all its lanes); here, a deadlock */
__global__ void k_divergent(int *p) {
  int v = (int)threadIdx.x;
  if ((threadIdx.x & 31) < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  else __syncthreads();
  p[threadIdx.x] = v;
}

static void kernels() {
  const int n = 10000;
  float *x, *y;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  float *h = (float *)malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) h[i] = (float)i;
  cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemset(y, 0, n * sizeof(float));
  k_axpy<<<7, 128>>>(2.0f, x, y, n);
  k_axpy<<<(n + 255) / 256, 256, 0, 0>>>(1.0f, x, y, n);
  cudaMemcpy(h, y, n * sizeof(float), cudaMemcpyDeviceToHost);
  bool ok = true;
  for (int i = 0; i < n; i++) ok &= h[i] == 3.0f * (float)i;
  check(ok && cudaGetLastError() == cudaSuccess, "grid-stride kernel, two launch forms");

  int *d, hi[64 * 48];
  cudaMalloc(&d, sizeof hi);
  k_index2d<<<dim3(4, 3), dim3(16, 16)>>>(d, 64);
  cudaMemcpy(hi, d, sizeof hi, cudaMemcpyDeviceToHost);
  ok = true;
  for (int yy = 0; yy < 48; yy++)
    for (int xx = 0; xx < 64; xx++) ok &= hi[yy * 64 + xx] == yy * 1000 + xx;
  check(ok, "2-D grid and blocks: threadIdx/blockIdx/blockDim");

  float *s, hs[3];
  cudaMalloc(&s, sizeof hs);
  k_block_sum<<<3, 256>>>(x, s, 1000);
  cudaMemcpy(hs, s, sizeof hs, cudaMemcpyDeviceToHost);
  check(hs[0] == 499500.0f && hs[1] == hs[0] && hs[2] == hs[0], "__shared__ and __syncthreads: block sums");

  int *wi, *wo, hw[128];
  cudaMalloc(&wi, sizeof hw);
  cudaMalloc(&wo, sizeof hw);
  for (int i = 0; i < 128; i++) hw[i] = i;
  cudaMemcpy(wi, hw, sizeof hw, cudaMemcpyHostToDevice);
  k_warp_sum<<<2, 64>>>(wi, wo);
  cudaMemcpy(hw, wo, sizeof hw, cudaMemcpyDeviceToHost);
  ok = true;
  for (int w = 0; w < 4; w++)
    for (int l = 0; l < 32; l++) ok &= hw[w * 32 + l] == 32 * w * 32 + 496;
  check(ok, "__shfl_xor_sync: warp sums on every lane");

  k_axpy<<<0, 128>>>(1.0f, x, y, n);
  check(cudaGetLastError() == cudaErrorInvalidConfiguration, "a grid of 0 blocks: cudaErrorInvalidConfiguration");
  k_axpy<<<1, 2048>>>(1.0f, x, y, n);
  check(cudaGetLastError() == cudaErrorInvalidConfiguration && cudaGetLastError() == cudaSuccess,
        "2048 threads per block: cudaErrorInvalidConfiguration, then cleared");
  cudaFree(x);
  cudaFree(y);
  cudaFree(d);
  cudaFree(s);
  cudaFree(wi);
  cudaFree(wo);
  free(h);
}

static void streams() {
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  int *p, *q, hv = 0;
  cudaMalloc(&p, 4);
  cudaMalloc(&q, 4);
  cudaMemsetAsync(p, 0, 4, a);
  cudaMemsetAsync(q, 0, 4, a);
  cudaStreamSynchronize(a);

  k_slow_set<<<1, 1, 0, a>>>(p, 7, 300);
  check(cudaStreamQuery(a) == cudaErrorNotReady, "a stream with a kernel running: cudaErrorNotReady");
  cudaEventRecord(e, a);
  cudaStreamWaitEvent(b, e, 0);
  k_copy_int<<<1, 1, 0, b>>>(p, q);
  cudaStreamSynchronize(b);
  cudaMemcpy(&hv, q, 4, cudaMemcpyDeviceToHost);
  check(hv == 7 && cudaEventQuery(e) == cudaSuccess, "an event orders two streams");

  /* control: without the wait, the second stream reads the old value */
  k_slow_set<<<1, 1, 0, a>>>(p, 9, 300);
  k_copy_int<<<1, 1, 0, b>>>(p, q);
  cudaStreamSynchronize(b);
  cudaMemcpy(&hv, q, 4, cudaMemcpyDeviceToHost);
  check(hv == 7, "control: without the event the other stream runs ahead (reads 7, not 9)");
  cudaStreamSynchronize(a);

  /* the legacy default stream waits for blocking streams */
  cudaStream_t c;
  cudaStreamCreate(&c);
  k_slow_set<<<1, 1, 0, c>>>(p, 11, 200);
  k_copy_int<<<1, 1>>>(p, q);
  cudaMemcpy(&hv, q, 4, cudaMemcpyDeviceToHost);
  check(hv == 11, "the default stream waits for a blocking stream's work");

  /* uploads from pageable memory read it at the call; page-locked ones later */
  int src = 5;
  cudaMemcpyAsync(q, &src, 4, cudaMemcpyHostToDevice, a);
  src = 6;
  cudaStreamSynchronize(a); /* a is non-blocking: the default stream would not wait for it */
  cudaMemcpy(&hv, q, 4, cudaMemcpyDeviceToHost);
  check(hv == 5, "cudaMemcpyAsync from pageable memory copies the value at the call");
  int *pin;
  cudaMallocHost(&pin, 4);
  *pin = 1;
  k_slow_set<<<1, 1, 0, a>>>(p, 3, 200);
  cudaMemcpyAsync(pin, p, 4, cudaMemcpyDeviceToHost, a);
  bool early = *pin == 1;
  cudaStreamSynchronize(a);
  check(early && *pin == 3, "a download to page-locked memory completes with its stream, not at the call");
  cudaFreeHost(pin);
  int host_only = 0;
  check(cudaMemcpyAsync(&host_only, &src, 4, cudaMemcpyHostToDevice, a) == cudaErrorInvalidValue,
        "a host pointer as a copy's device side: cudaErrorInvalidValue");
  cudaGetLastError();

  float ms = -1;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  cudaEventRecord(t0, a);
  k_slow_set<<<1, 1, 0, a>>>(p, 1, 50);
  cudaEventRecord(t1, a);
  cudaEventSynchronize(t1);
  check(cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess && ms >= 40 && ms < 5000,
        "event timing around a 50 ms kernel");
  check(cudaEventElapsedTime(&ms, e, t1) == cudaErrorInvalidResourceHandle,
        "timing with a cudaEventDisableTiming event fails");
  cudaGetLastError();
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  cudaStreamDestroy(c);
  cudaFree(p);
  cudaFree(q);
}

static void graphs() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int n = 1000;
  float *x, *y, h[n];
  cudaMalloc(&x, sizeof h);
  cudaMalloc(&y, sizeof h);
  for (int i = 0; i < n; i++) h[i] = 1.0f;
  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
  cudaMemset(y, 0, sizeof h);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "begin capture");
  k_axpy<<<4, 256, 0, s>>>(1.0f, x, y, n);
  cudaMemcpyAsync(x, y, sizeof h, cudaMemcpyDeviceToDevice, s);
  check(cudaStreamEndCapture(s, &g) == cudaSuccess && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess,
        "end capture, instantiate");
  cudaStreamSynchronize(s);
  cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
  check(h[0] == 0.0f, "captured work does not run at capture");
  for (int r = 0; r < 3; r++) cudaGraphLaunch(ge, s);
  cudaStreamSynchronize(s);
  cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
  check(h[0] == 4.0f && h[n - 1] == 4.0f, "three replays: y = 1, 2, 4 (each reads the last x)");
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);

  void *m = nullptr;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  k_axpy<<<4, 256, 0, s>>>(1.0f, x, y, n);
  cudaError_t em = cudaMalloc(&m, 64);
  cudaError_t ee = cudaStreamEndCapture(s, &g);
  check(em == cudaErrorStreamCaptureUnsupported && ee == cudaErrorStreamCaptureInvalidated,
        "cudaMalloc inside a capture fails and invalidates it");
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  cudaError_t es = cudaStreamSynchronize(s);
  ee = cudaStreamEndCapture(s, &g);
  check(es == cudaErrorStreamCaptureUnsupported && ee == cudaErrorStreamCaptureInvalidated,
        "cudaStreamSynchronize inside a capture fails and invalidates it");
  cudaGetLastError();
  cudaStreamDestroy(s);
  cudaFree(x);
  cudaFree(y);
}

static void errors(const char *self) {
  setenv("CUDASIM_MEM_MB", "64", 1);
  void *a = nullptr, *b = nullptr;
  cudaError_t ea = cudaMalloc(&a, 40 << 20), eb = cudaMalloc(&b, 40 << 20);
  check(ea == cudaSuccess && eb == cudaErrorMemoryAllocation && !b,
        "CUDASIM_MEM_MB=64: a second 40 MiB allocation runs out of memory");
  cudaFree(a);
  cudaGetLastError();
  unsetenv("CUDASIM_MEM_MB");

  /* a kernel whose threads wait at different barriers stops the process with one line
   * (a child process: exec'd, as the simulator's stream threads do not survive fork) */
  int fds[2];
  if (pipe(fds)) return;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    execl(self, self, "--divergent", (char *)nullptr);
    _exit(3);
  }
  close(fds[1]);
  char buf[4096] = {0};
  ssize_t k, got = 0;
  while ((k = read(fds[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0) got += k;
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  check(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, "k_divergent") && strstr(buf, "different barriers"),
        "threads at different barriers: the process aborts naming the kernel");
  if (!WIFSIGNALED(st)) fprintf(stderr, "%s", buf);

  /* CUDASIM_DEVICES=0: no device */
  pid = fork();
  if (pid == 0) {
    setenv("CUDASIM_DEVICES", "0", 1);
    execl(self, self, "--count-devices", (char *)nullptr);
    _exit(3);
  }
  waitpid(pid, &st, 0);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 100, "CUDASIM_DEVICES=0: cudaGetDeviceCount says cudaErrorNoDevice");
}

/* a child process with CUDASIM_DEVICES=2 and more environment; its exit status */
static int child(const char *self, const char *mode, const char *const *env, char *err, size_t n) {
  int fds[2];
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    setenv("CUDASIM_DEVICES", "2", 1);
    for (int i = 0; env && env[i]; i += 2) setenv(env[i], env[i + 1], 1);
    execl(self, self, mode, (char *)nullptr);
    _exit(3);
  }
  close(fds[1]);
  ssize_t k, got = 0;
  while ((k = read(fds[0], err + got, n - 1 - (size_t)got)) > 0) got += k;
  err[got] = 0;
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

static void devices(const char *self) {
  char buf[4096];
  int st = child(self, "--free-while-read", nullptr, buf, sizeof buf);
  check(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, "was freed") && strstr(buf, "device 1"),
        "cudaFree on device 0 does not wait for device 1: its queued copy of the freed memory aborts, named");
  if (!(WIFSIGNALED(st) && strstr(buf, "was freed"))) fprintf(stderr, "%s", buf);
  st = child(self, "--free-after-wait", nullptr, buf, sizeof buf);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the same with device 1's stream waited for first: no complaint");
  if (!WIFEXITED(st) || WEXITSTATUS(st)) fprintf(stderr, "%s", buf);
  const char *fault[] = {"CUDASIM_FAULT", "error:1", "CUDASIM_FAULT_DEVICE", "1", nullptr};
  st = child(self, "--sticky-per-device", fault, buf, sizeof buf);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(buf, "device 1"),
        "a fault on device 1 (CUDASIM_FAULT_DEVICE=1) is sticky there; device 0's calls and kernels run on");
  if (!WIFEXITED(st) || WEXITSTATUS(st)) fprintf(stderr, "%s", buf);
}

/* --free-while-read, --free-after-wait: device 1 copies device-0 memory behind a 300 ms
 * kernel; device 0 frees it (after waiting for device 1's stream, or not) */
static int free_while_read(bool wait) {
  int *p = nullptr, *q = nullptr, *flag = nullptr;
  cudaSetDevice(0);
  cudaMalloc(&p, 4096);
  cudaMemset(p, 0, 4096);
  cudaDeviceSynchronize();
  cudaSetDevice(1);
  cudaStream_t s1;
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaMalloc(&q, 4096);
  cudaMalloc(&flag, sizeof(int));
  k_slow_set<<<1, 1, 0, s1>>>(flag, 1, 300);
  cudaMemcpyAsync(q, p, 4096, cudaMemcpyDeviceToDevice, s1);
  if (wait) cudaStreamSynchronize(s1);
  cudaSetDevice(0);
  cudaFree(p);
  cudaSetDevice(1);
  cudaStreamSynchronize(s1);
  return 0;
}

static int sticky_per_device() {
  int *a = nullptr, *b = nullptr, h = 0;
  cudaSetDevice(1);
  cudaMalloc(&b, sizeof(int));
  k_slow_set<<<1, 1>>>(b, 7, 0); /* device 1's first kernel: faults */
  cudaError_t e1 = cudaDeviceSynchronize(), e1b = cudaMemset(b, 0, sizeof(int));
  cudaSetDevice(0);
  cudaError_t e0 = cudaMalloc(&a, sizeof(int));
  k_slow_set<<<1, 1>>>(a, 5, 0);
  cudaError_t e0b = cudaMemcpy(&h, a, sizeof h, cudaMemcpyDeviceToHost);
  bool ok = e1 == cudaErrorIllegalAddress && e1b == cudaErrorIllegalAddress && e0 == cudaSuccess &&
            e0b == cudaSuccess && h == 5;
  if (!ok)
    fprintf(stderr, "device 1: %s, %s; device 0: %s, %s, %d\n", cudaGetErrorName(e1), cudaGetErrorName(e1b),
            cudaGetErrorName(e0), cudaGetErrorName(e0b), h);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--free-while-read")) return free_while_read(false);
  if (argc > 1 && !strcmp(argv[1], "--free-after-wait")) return free_while_read(true);
  if (argc > 1 && !strcmp(argv[1], "--sticky-per-device")) return sticky_per_device();
  if (argc > 1 && !strcmp(argv[1], "--divergent")) {
    int *p;
    cudaMalloc(&p, 64 * 4);
    k_divergent<<<1, 64>>>(p);
    cudaDeviceSynchronize();
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--count-devices")) {
    int n = -1;
    cudaError_t e = cudaGetDeviceCount(&n);
    return n == 0 ? (int)e : 1;
  }
  kernels();
  streams();
  graphs();
  errors(argv[0]);
  devices(argv[0]);
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
