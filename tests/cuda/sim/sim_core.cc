/* sim_core.cc - the CUDA simulator's runtime: device memory, streams, events, graph
 * capture and kernel execution on the CPU (tests/cuda/sim/README.md).
 *
 * Streams are threads. Every operation queued on a stream (kernel, copy, memset, event
 * record, wait on an event, a cuDNN/cuBLAS call through cudasim::enqueue) runs later on
 * that stream's thread, in order, so the host and other streams race with it exactly as
 * they would with a GPU; only the waits a program asks for (events, synchronisation)
 * order them. The simulator is stricter than a GPU where it can be: fresh device memory
 * is filled with 0xff bytes (NaN as float), API calls that a stream capture forbids
 * invalidate it, device arguments that are not device memory are errors, and a kernel
 * whose threads wait at different barriers stops the process with one line.
 *
 * Environment:
 *   CUDASIM_DEVICES=N   devices reported (default 1; 0: cudaGetDeviceCount fails)
 *   CUDASIM_PEER=0      no device can access another's memory (cudaDeviceCanAccessPeer)
 *   CUDASIM_MEM_MB=N    memory per device (default 81920): cudaMalloc beyond it fails
 *   CUDASIM_POISON=0    leave fresh device memory as the allocator gives it
 *   CUDASIM_HANG_S=N    a host wait longer than N s (default 600) stops the process
 *   CUDASIM_STATS=1     at exit: kernels, blocks and fiber switches, per process, and the
 *                       kernels each device ran
 *   CUDASIM_FAULT=MODE:N[:RANK]  the N-th kernel this process runs (from 1; under
 *                       mpirun only in the process of that rank, OMPI_COMM_WORLD_RANK
 *                       or PMI_RANK) fails as a GPU fault would, for error-path tests.
 *                       MODE error: the kernel does not run, and like an illegal
 *                       address the error is sticky on its device (as a CUDA
 *                       context's): every later call while that device is current
 *                       returns cudaErrorIllegalAddress and work queued there is
 *                       dropped; other devices run on. die: the process exits at once
 *                       (status 9, as if killed). hang: the kernel never finishes (its
 *                       stream stops).
 *   CUDASIM_FAULT_DEVICE=D  CUDASIM_FAULT counts only the kernels device D runs. */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <stdint.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sim_internal.h"

namespace cudasim {

/* ---- configuration, messages ------------------------------------------------------------ */

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *e;
  long r = strtol(v, &e, 10);
  return *e ? dflt : r;
}

void warn(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cudasim: %s\n", buf);
}

[[noreturn]] static void fatal(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cudasim: %s\n", buf);
  fflush(stderr);
  abort();
}

static int n_devices() {
  static int n = (int)env_long("CUDASIM_DEVICES", 1);
  return n < 0 ? 0 : n;
}

static thread_local int tl_device = 0;
static thread_local cudaError_t tl_last = cudaSuccess;

/* A sticky error per device (CUDASIM_FAULT=error): once set, every call made while that
 * device is current returns it (a CUDA context's sticky error). */
static constexpr int MAX_DEVICES = 64;
static std::atomic<int> sticky_dev[MAX_DEVICES];
static int sticky_of(int device) { return device >= 0 && device < MAX_DEVICES ? sticky_dev[device].load() : 0; }

static cudaError_t fail(cudaError_t e) {
  if (e == cudaSuccess && sticky_of(tl_device)) e = (cudaError_t)sticky_of(tl_device);
  if (e != cudaSuccess && e != cudaErrorNotReady) tl_last = e; /* not-ready is a status, not an error */
  return e;
}

static std::atomic<long> st_kernels{0}, st_blocks{0}, st_fiber_blocks{0}, st_switches{0};
/* kernels per device (CUDASIM_STATS): a stream's worker runs its kernels on its device */
static std::atomic<long> st_dev_kernels[MAX_DEVICES];
static thread_local int tl_stream_device = -1;

/* ---- device memory ---------------------------------------------------------------------- */

struct Alloc {
  size_t size;
  int device;
};
static std::mutex mem_mu;
static std::map<uintptr_t, Alloc> allocs;     /* device memory by start */
static std::map<uintptr_t, size_t> host_regs; /* page-locked host ranges */
static std::vector<size_t> mem_used;

static bool find_range(const std::map<uintptr_t, size_t> &m, const void *p) {
  uintptr_t a = (uintptr_t)p;
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a < it->first + (it->second ? it->second : 1);
}

bool is_device_range(const void *p, size_t n) {
  std::lock_guard<std::mutex> g(mem_mu);
  uintptr_t a = (uintptr_t)p;
  auto it = allocs.upper_bound(a);
  if (it == allocs.begin()) return false;
  --it;
  uintptr_t end = it->first + (it->second.size ? it->second.size : 1);
  return a < end && (n ? n : 1) <= end - a;
}

bool is_device_ptr(const void *p) { return is_device_range(p, 1); }

static bool is_pinned(const void *p) {
  std::lock_guard<std::mutex> g(mem_mu);
  return find_range(host_regs, p);
}

/* ---- streams ------------------------------------------------------------------------------ */

struct Graph;

struct Wait {
  CUstream_st *s;
  uint64_t ticket;
};

struct Item {
  uint64_t ticket;
  std::vector<Wait> waits;
  std::function<void()> fn;
  const char *what;
};

}  // namespace cudasim

struct CUstream_st {
  int device = 0;
  unsigned flags = 0;
  bool legacy = false, destroyed = false, stop = false;
  std::deque<cudasim::Item> q;
  uint64_t submitted = 0, completed = 0;
  std::condition_variable cv;
  std::thread th;
  /* capture */
  cudasim::Graph *cap = nullptr;
  std::thread::id cap_thread;
  int cap_mode = 0;
  bool cap_invalid = false;
};

struct CUevent_st {
  int device = 0;           /* the device current at its creation: only its streams record it */
  CUstream_st *s = nullptr; /* the stream and ticket of its latest record */
  uint64_t ticket = 0;
  unsigned flags = 0;
  bool destroyed = false, captured = false;
  double t_ms = 0;
};

struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
  std::vector<const char *> what;
  bool destroyed = false;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> nodes;
  std::vector<const char *> what;
  bool destroyed = false;
};

namespace cudasim {
struct Graph : CUgraph_st {};

static std::mutex mu; /* every stream's queue and counters, events */
static std::condition_variable done_cv;
static std::vector<CUstream_st *> streams;
static CUstream_st *legacy_streams[MAX_DEVICES]; /* each device's legacy default stream */

static double now_ms() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void worker(CUstream_st *s) {
  tl_stream_device = s->device;
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    s->cv.wait(lk, [&] { return !s->q.empty() || s->stop; });
    if (s->q.empty()) break;
    Item &it = s->q.front();
    done_cv.wait(lk, [&] {
      for (const Wait &w : it.waits)
        if (w.s->completed < w.ticket) return false;
      return true;
    });
    std::function<void()> fn = std::move(it.fn);
    uint64_t t = it.ticket;
    lk.unlock();
    if (fn && !sticky_of(s->device)) fn(); /* after a sticky error the context is dead: work is dropped */
    lk.lock();
    s->completed = t;
    s->q.pop_front();
    done_cv.notify_all();
  }
}

/* Waits on the host until pred holds (mu held), stopping the process after CUDASIM_HANG_S. */
template <class P>
static void host_wait(std::unique_lock<std::mutex> &lk, const char *what, P pred) {
  static long hang = env_long("CUDASIM_HANG_S", 600);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(hang);
  while (!pred())
    if (done_cv.wait_until(lk, until) == std::cv_status::timeout && !pred()) {
      for (CUstream_st *s : streams)
        if (!s->destroyed && s->completed < s->submitted)
          fprintf(stderr, "cudasim: stream %p: %llu operations pending, the first '%s'\n", (void *)s,
                  (unsigned long long)(s->submitted - s->completed), s->q.empty() ? "?" : s->q.front().what);
      fatal("%s waited %ld s for the device (CUDASIM_HANG_S): a wait that never ends", what, hang);
    }
}

static CUstream_st *new_stream(unsigned flags, bool legacy) {
  CUstream_st *s = new CUstream_st;
  s->device = tl_device;
  s->flags = flags;
  s->legacy = legacy;
  s->th = std::thread(worker, s);
  streams.push_back(s);
  return s;
}

/* The stream a handle names (NULL: the legacy default stream); mu held. */
static CUstream_st *resolve(cudaStream_t s) {
  if (s) return s;
  CUstream_st *&l = legacy_streams[tl_device >= 0 && tl_device < MAX_DEVICES ? tl_device : 0];
  if (!l) l = new_stream(0, true);
  return l;
}

/* The capture (not relaxed) this thread is running, if any; mu held. */
static CUstream_st *capturing_here() {
  for (CUstream_st *s : streams)
    if (s->cap && s->cap_thread == std::this_thread::get_id() && s->cap_mode != cudaStreamCaptureModeRelaxed) return s;
  return nullptr;
}

/* A call a capture forbids (it would wait for the device or change memory): invalidates the
 * capture and fails, as CUDA does; mu held. */
static bool forbidden_in_capture(const char *call) {
  CUstream_st *c = capturing_here();
  if (!c) return false;
  if (!c->cap_invalid)
    warn("%s while this thread captures a stream into a CUDA graph: the capture is invalidated", call);
  c->cap_invalid = true;
  return true;
}

static cudaError_t enqueue_locked(CUstream_st *s, std::vector<Wait> waits, std::function<void()> fn, const char *what) {
  if (s->destroyed) {
    warn("%s on a destroyed stream", what);
    return cudaErrorInvalidResourceHandle;
  }
  if (s->cap) {
    if (s->cap_invalid) return cudaErrorStreamCaptureInvalidated;
    if (!waits.empty()) {
      s->cap_invalid = true;
      warn("%s: a wait for work outside the capture inside a stream capture", what);
      return cudaErrorStreamCaptureUnsupported;
    }
    s->cap->nodes.push_back(std::move(fn));
    s->cap->what.push_back(what);
    return cudaSuccess;
  }
  /* a device's legacy default stream waits for its blocking streams, and they for it */
  if (s->legacy) {
    for (CUstream_st *b : streams)
      if (b != s && b->device == s->device && !b->destroyed && !(b->flags & cudaStreamNonBlocking) &&
          b->submitted > b->completed)
        waits.push_back({b, b->submitted});
  } else if (CUstream_st *l = legacy_streams[s->device];
             !(s->flags & cudaStreamNonBlocking) && l && l->submitted > l->completed) {
    waits.push_back({l, l->submitted});
  }
  Item it;
  it.ticket = ++s->submitted;
  it.waits = std::move(waits);
  it.fn = std::move(fn);
  it.what = what;
  s->q.push_back(std::move(it));
  s->cv.notify_one();
  return cudaSuccess;
}

cudaError_t enqueue(cudaStream_t h, std::function<void()> fn, const char *what) {
  std::lock_guard<std::mutex> g(mu);
  CUstream_st *s = resolve(h);
  if (s->legacy && forbidden_in_capture(what)) return cudaErrorStreamCaptureUnsupported;
  return enqueue_locked(s, {}, std::move(fn), what);
}

/* Waits until everything queued on s so far has run; mu held. */
static void drain(std::unique_lock<std::mutex> &lk, CUstream_st *s, const char *what) {
  uint64_t t = s->submitted;
  host_wait(lk, what, [&] { return s->completed >= t; });
}

/* ---- kernels ------------------------------------------------------------------------------- */

enum { F_READY = 0, F_BLOCK, F_WARP, F_DONE };

/* Switching between a block's threads. On x86-64 a switch saves the callee-saved
 * registers and the floating-point control words on the old stack and loads them from
 * the new one (a few nanoseconds); swapcontext would also save and restore the signal
 * mask with a system call per switch, and a kernel with barriers in a loop switches
 * hundreds of millions of times in a training test. Elsewhere: ucontext. */
#if defined(__x86_64__)
#define CUDASIM_FAST_SWITCH 1
extern "C" void cudasim_switch(void **save_sp, void *load_sp);
asm(R"(
.text
.globl cudasim_switch
.type cudasim_switch,@function
cudasim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cudasim_switch, .-cudasim_switch
.section .note.GNU-stack,"",@progbits
.text
)");
struct Fiber {
  void *sp;
  int state;
};
#else
#define CUDASIM_FAST_SWITCH 0
struct Fiber {
  ucontext_t uc;
  int state;
};
#endif

/* One block being run as fibers on this thread. */
struct BlockRun {
#if CUDASIM_FAST_SWITCH
  void *sched;
#else
  ucontext_t sched;
#endif
  std::vector<Fiber> f;
  int n = 0, cur = 0;
  dim3 block;
  const std::function<void()> *body = nullptr;
  const char *name = "";
  bool warned_exited = false;
  std::vector<uint64_t> slot;
};

static thread_local BlockRun *tl_run;
static thread_local const char *tl_kernel;
static thread_local std::vector<char *> tl_stacks;
static const size_t STACK = 256 * 1024;

static char *fiber_stack(int i) {
  while ((int)tl_stacks.size() <= i) {
    void *p = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fatal("mmap of a fiber stack: %s", strerror(errno));
    mprotect(p, 4096, PROT_NONE); /* a guard page: overflowing it faults */
    tl_stacks.push_back((char *)p);
  }
  return tl_stacks[(size_t)i];
}

static void set_thread(const dim3 &b, int i) {
  threadIdx.x = (unsigned)i % b.x;
  threadIdx.y = ((unsigned)i / b.x) % b.y;
  threadIdx.z = (unsigned)i / (b.x * b.y);
}

#if CUDASIM_FAST_SWITCH
/* A new fiber's first switch "returns" into fiber_entry, which never returns: the
 * finished fiber switches to the scheduler, which never resumes it. */
static void fiber_entry() {
  BlockRun *r = tl_run;
  (*r->body)();
  r->f[(size_t)r->cur].state = F_DONE;
  void *dead;
  cudasim_switch(&dead, r->sched);
  __builtin_unreachable();
}

static void make_fiber(BlockRun *r, int i) {
  Fiber &f = r->f[(size_t)i];
  uint64_t *sp = (uint64_t *)(fiber_stack(i) + STACK); /* 16-byte aligned */
  *--sp = 0;                                           /* fiber_entry's return address: none */
  *--sp = (uint64_t)(uintptr_t)&fiber_entry;           /* popped by cudasim_switch's ret */
  for (int k = 0; k < 6; k++) *--sp = 0;               /* rbp, rbx, r12..r15 */
  uint32_t csr;
  uint16_t cw;
  __asm__ volatile("stmxcsr %0" : "=m"(csr));
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  *--sp = (uint64_t)csr | (uint64_t)cw << 32; /* the control words, as cudasim_switch stores them */
  f.sp = sp;
  f.state = F_READY;
}

static void resume(BlockRun *r, int i) {
  r->cur = i;
  set_thread(r->block, i);
  st_switches++;
  cudasim_switch(&r->sched, r->f[(size_t)i].sp);
}

static void yield(int state) {
  BlockRun *r = tl_run;
  Fiber &f = r->f[(size_t)r->cur];
  f.state = state;
  cudasim_switch(&f.sp, r->sched);
}
#else
static void fiber_main() {
  BlockRun *r = tl_run;
  (*r->body)();
  r->f[(size_t)r->cur].state = F_DONE;
  /* returning switches to uc_link: the scheduler */
}

static void make_fiber(BlockRun *r, int i) {
  Fiber &f = r->f[(size_t)i];
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = fiber_stack(i);
  f.uc.uc_stack.ss_size = STACK;
  f.uc.uc_link = &r->sched;
  f.state = F_READY;
  makecontext(&f.uc, fiber_main, 0);
}

static void resume(BlockRun *r, int i) {
  r->cur = i;
  set_thread(r->block, i);
  st_switches++;
  swapcontext(&r->sched, &r->f[(size_t)i].uc);
}

static void yield(int state) {
  BlockRun *r = tl_run;
  Fiber &f = r->f[(size_t)r->cur];
  f.state = state;
  swapcontext(&f.uc, &r->sched);
}
#endif

/* Runs the fibers of r until all are done; fibers 0..started-1 exist already. */
static void schedule(BlockRun *r) {
  for (;;) {
    bool ran = false;
    for (int i = 0; i < r->n; i++)
      if (r->f[(size_t)i].state == F_READY) {
        resume(r, i);
        ran = true;
      }
    if (ran) continue;
    int live = 0, at_block = 0;
    for (int i = 0; i < r->n; i++) {
      live += r->f[(size_t)i].state != F_DONE;
      at_block += r->f[(size_t)i].state == F_BLOCK;
    }
    if (!live) return;
    bool released = false;
    for (int w = 0; w * 32 < r->n; w++) {
      int lanes = 0, waiting = 0;
      for (int i = w * 32; i < r->n && i < w * 32 + 32; i++) {
        lanes += r->f[(size_t)i].state != F_DONE;
        waiting += r->f[(size_t)i].state == F_WARP;
      }
      if (waiting && waiting == lanes) {
        for (int i = w * 32; i < r->n && i < w * 32 + 32; i++)
          if (r->f[(size_t)i].state == F_WARP) r->f[(size_t)i].state = F_READY;
        released = true;
      }
    }
    if (!released && at_block == live) {
      for (int i = 0; i < r->n; i++)
        if (r->f[(size_t)i].state == F_BLOCK) r->f[(size_t)i].state = F_READY;
      released = true;
    }
    if (!released)
      fatal(
          "kernel %s: block (%u,%u,%u): threads wait at different barriers (__syncthreads / warp shuffles): a "
          "GPU would hang or misbehave",
          r->name, blockIdx.x, blockIdx.y, blockIdx.z);
  }
}

void syncthreads() {
  if (!tl_run)
    fatal("kernel %s: a thread other than thread 0 reached __syncthreads, thread 0 never did (divergent barrier)",
          tl_kernel ? tl_kernel : "?");
  yield(F_BLOCK);
}

void warp_exchange(const void *mine, void *theirs, size_t size, int lane_mask, int width) {
  BlockRun *r = tl_run;
  if (!r)
    fatal("kernel %s: a thread other than thread 0 made a warp shuffle, thread 0 never did (divergent shuffle)",
          tl_kernel ? tl_kernel : "?");
  int t = r->cur, lane = t & 31, base = t - lane;
  int src = lane ^ lane_mask;
  if (width > 0 && width < 32 && src / width != lane / width) src = lane;
  uint64_t v = 0;
  memcpy(&v, mine, size);
  r->slot[(size_t)t] = v;
  yield(F_WARP); /* every live lane has written */
  int s = base + src;
  if (s >= r->n || r->f[(size_t)s].state == F_DONE) {
    if (!r->warned_exited)
      warn("kernel %s: a warp shuffle reads lane %d, which has exited (undefined on a GPU)", r->name, src);
    r->warned_exited = true;
    s = t;
  }
  uint64_t got = r->slot[(size_t)s];
  yield(F_WARP); /* every live lane has read before the next exchange writes */
  memcpy(theirs, &got, size);
}

/* CUDASIM_FAULT (above): whether this kernel run is the one to fail, and how. */
enum { FAULT_NONE = 0, FAULT_ERROR, FAULT_DIE, FAULT_HANG };
static int fault_now(const char *name) {
  static int mode = -1;
  static long at = 0;
  static std::atomic<long> runs{0};
  static std::once_flag once;
  std::call_once(once, [] {
    mode = FAULT_NONE;
    const char *v = getenv("CUDASIM_FAULT");
    if (!v || !*v) return;
    char m[16] = "";
    long n = 0, rank = -1;
    int k = sscanf(v, "%15[a-z]:%ld:%ld", m, &n, &rank);
    if (k < 2 || n < 1) fatal("CUDASIM_FAULT=%s: expected MODE:N[:RANK] with MODE error, die or hang", v);
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMI_RANK");
    if (k == 3 && (!r || atol(r) != rank)) return;
    if (!strcmp(m, "error")) mode = FAULT_ERROR;
    else if (!strcmp(m, "die")) mode = FAULT_DIE;
    else if (!strcmp(m, "hang")) mode = FAULT_HANG;
    else fatal("CUDASIM_FAULT=%s: MODE is error, die or hang", v);
    at = n;
  });
  static const long only_dev = env_long("CUDASIM_FAULT_DEVICE", -1);
  if (mode == FAULT_NONE || (only_dev >= 0 && tl_stream_device != only_dev) || ++runs != at) return FAULT_NONE;
  warn("CUDASIM_FAULT: kernel %s (run %ld in process %d, device %d) %s", name, at, (int)getpid(), tl_stream_device,
       mode == FAULT_ERROR ? "faults (sticky cudaErrorIllegalAddress)"
       : mode == FAULT_DIE ? "kills its process"
                           : "never finishes");
  return mode;
}

static void run_grid(const char *name, dim3 grid, dim3 block, const std::function<void()> &body) {
  switch (fault_now(name)) {
    case FAULT_ERROR:
      if (tl_stream_device >= 0 && tl_stream_device < MAX_DEVICES)
        sticky_dev[tl_stream_device] = cudaErrorIllegalAddress;
      return;
    case FAULT_DIE: _exit(9);
    case FAULT_HANG:
      for (;;) pause();
    default: break;
  }
  gridDim = grid;
  blockDim = block;
  tl_kernel = name;
  int n = (int)(block.x * block.y * block.z);
  BlockRun r;
  r.n = n;
  r.block = block;
  r.body = &body;
  r.name = name;
  r.f.resize((size_t)n);
  r.slot.resize((size_t)n);
  bool fibers = false;
  st_kernels++;
  if (tl_stream_device >= 0 && tl_stream_device < MAX_DEVICES) st_dev_kernels[tl_stream_device]++;
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        blockIdx.x = bx;
        blockIdx.y = by;
        blockIdx.z = bz;
        st_blocks++;
        bool first = bx == 0 && by == 0 && bz == 0;
        if (first) {
          /* thread 0 of the first block as a fiber: does the kernel synchronise? */
          tl_run = &r;
          make_fiber(&r, 0);
          for (int i = 1; i < n; i++) r.f[(size_t)i].state = F_DONE;
          resume(&r, 0);
          fibers = r.f[0].state != F_DONE;
          if (!fibers) {
            tl_run = nullptr;
            for (int i = 1; i < n; i++) {
              set_thread(block, i);
              body();
            }
            continue;
          }
          for (int i = 1; i < n; i++) make_fiber(&r, i);
          st_fiber_blocks++;
          schedule(&r);
          continue;
        }
        if (fibers) {
          for (int i = 0; i < n; i++) make_fiber(&r, i);
          st_fiber_blocks++;
          schedule(&r);
        } else {
          for (int i = 0; i < n; i++) {
            set_thread(block, i);
            body();
          }
        }
      }
  tl_run = nullptr;
  tl_kernel = nullptr;
}

cudaError_t launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s, kernel_body *body) {
  std::shared_ptr<const kernel_body> b(body);
  unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (!threads || threads > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535 ||
      grid.x > 0x7fffffffu || smem > 48 * 1024) {
    warn("kernel %s: launch with grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of shared memory: invalid configuration",
         name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem);
    return fail(cudaErrorInvalidConfiguration);
  }
  cudaError_t e = enqueue(
      s, [name, grid, block, b]() { run_grid(name, grid, block, [&b]() { b->run(); }); }, name);
  return fail(e);
}

static void print_stats() {
  if (!env_long("CUDASIM_STATS", 0)) return;
  fprintf(stderr, "cudasim: %ld kernels, %ld blocks (%ld as fibers), %ld fiber switches\n", st_kernels.load(),
          st_blocks.load(), st_fiber_blocks.load(), st_switches.load());
  std::string per;
  for (int d = 0; d < MAX_DEVICES && d < n_devices(); d++) per += " " + std::to_string(st_dev_kernels[d].load());
  fprintf(stderr, "cudasim: kernels per device:%s\n", per.c_str());
}
static int stats_registered = atexit(print_stats);

}  // namespace cudasim

using namespace cudasim;

/* ---- the API -------------------------------------------------------------------------------- */

extern "C" {

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorPeerAccessUnsupported: return "cudaErrorPeerAccessUnsupported";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    default: return cudaGetErrorName(e);
  }
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = sticky_of(tl_device) ? (cudaError_t)sticky_of(tl_device) : tl_last;
  tl_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return sticky_of(tl_device) ? (cudaError_t)sticky_of(tl_device) : tl_last; }

cudaError_t cudaGetDeviceCount(int *n) {
  *n = n_devices();
  return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}

static std::set<std::pair<int, int>> peers_enabled; /* (device, peer) */

cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer) {
  if (device < 0 || device >= n_devices() || peer < 0 || peer >= n_devices()) return fail(cudaErrorInvalidDevice);
  *can = device != peer && env_long("CUDASIM_PEER", 1) != 0;
  return fail(cudaSuccess);
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  int can = 0;
  if (flags) return fail(cudaErrorInvalidValue);
  cudaError_t e = cudaDeviceCanAccessPeer(&can, tl_device, peer);
  if (e != cudaSuccess) return e;
  if (!can) return fail(peer == tl_device ? cudaErrorInvalidDevice : cudaErrorPeerAccessUnsupported);
  std::lock_guard<std::mutex> g(mu);
  if (!peers_enabled.insert({tl_device, peer}).second) return fail(cudaErrorPeerAccessAlreadyEnabled);
  return fail(cudaSuccess);
}

cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= n_devices()) return fail(n_devices() ? cudaErrorInvalidDevice : cudaErrorNoDevice);
  tl_device = d;
  return fail(cudaSuccess);
}

cudaError_t cudaGetDevice(int *d) {
  if (!n_devices()) return fail(cudaErrorNoDevice);
  *d = tl_device;
  return fail(cudaSuccess);
}

static size_t mem_limit() { return (size_t)env_long("CUDASIM_MEM_MB", 81920) << 20; }

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
  if (d < 0 || d >= n_devices()) return fail(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "cudasim %d (the CPU)", d);
  p->totalGlobalMem = mem_limit();
  p->sharedMemPerBlock = 48 * 1024;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 2;
  return fail(cudaSuccess);
}

/* Waits for the work queued so far on device d's streams (its legacy one too); mu held.
 * Other devices' streams run on, as on a GPU: memory another device still reads is the
 * caller's to wait for. */
static void device_drain(std::unique_lock<std::mutex> &lk, int d, const char *what) {
  std::vector<std::pair<CUstream_st *, uint64_t>> t;
  for (CUstream_st *s : streams)
    if (!s->destroyed && s->device == d) t.push_back({s, s->submitted});
  host_wait(lk, what, [&] {
    for (auto &x : t)
      if (x.first->completed < x.second) return false;
    return true;
  });
}

cudaError_t cudaDeviceSynchronize(void) {
  std::unique_lock<std::mutex> lk(mu);
  if (forbidden_in_capture("cudaDeviceSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
  device_drain(lk, tl_device, "cudaDeviceSynchronize");
  return fail(cudaSuccess);
}

cudaError_t cudaDeviceReset(void) { return cudaDeviceSynchronize(); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  std::lock_guard<std::mutex> g(mem_mu);
  if (mem_used.size() <= (size_t)tl_device) mem_used.resize((size_t)tl_device + 1);
  *total_bytes = mem_limit();
  *free_bytes = mem_limit() - mem_used[(size_t)tl_device];
  return fail(cudaSuccess);
}

cudaError_t cudaMalloc(void **p, size_t n) {
  *p = nullptr;
  if (!n_devices()) return fail(cudaErrorNoDevice);
  {
    std::lock_guard<std::mutex> g(mu);
    if (forbidden_in_capture("cudaMalloc")) return fail(cudaErrorStreamCaptureUnsupported);
  }
  size_t sz = (n + 255) & ~(size_t)255;
  if (!sz) sz = 256;
  {
    std::lock_guard<std::mutex> g(mem_mu);
    if (mem_used.size() <= (size_t)tl_device) mem_used.resize((size_t)tl_device + 1);
    if (mem_used[(size_t)tl_device] + sz > mem_limit()) return fail(cudaErrorMemoryAllocation);
    mem_used[(size_t)tl_device] += sz;
  }
  void *m = aligned_alloc(256, sz);
  if (!m) return fail(cudaErrorMemoryAllocation);
  if (env_long("CUDASIM_POISON", 1)) memset(m, 0xff, sz);
  std::lock_guard<std::mutex> g(mem_mu);
  allocs[(uintptr_t)m] = Alloc{sz, tl_device};
  *p = m;
  return fail(cudaSuccess);
}

/* Waits for the allocation's device (as CUDA's implicit synchronization), not for the
 * others: a copy another device still has queued from or to p finds it gone when it runs
 * (checked_copy stops the process). */
cudaError_t cudaFree(void *p) {
  if (!p) return fail(cudaSuccess);
  int dev;
  {
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) {
      warn("cudaFree of %p, which is not the start of a device allocation", p);
      return fail(cudaErrorInvalidValue);
    }
    dev = it->second.device;
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    if (forbidden_in_capture("cudaFree")) return fail(cudaErrorStreamCaptureUnsupported);
    device_drain(lk, dev, "cudaFree");
  }
  std::lock_guard<std::mutex> g(mem_mu);
  auto it = allocs.find((uintptr_t)p);
  if (it == allocs.end()) {
    warn("cudaFree of %p, freed twice at once", p);
    return fail(cudaErrorInvalidValue);
  }
  mem_used[(size_t)it->second.device] -= it->second.size;
  allocs.erase(it);
  free(p);
  return fail(cudaSuccess);
}

cudaError_t cudaMallocHost(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> g(mem_mu);
  host_regs[(uintptr_t)*p] = n;
  return fail(cudaSuccess);
}

cudaError_t cudaFreeHost(void *p) {
  if (!p) return fail(cudaSuccess);
  {
    std::lock_guard<std::mutex> g(mem_mu);
    host_regs.erase((uintptr_t)p);
  }
  free(p);
  return fail(cudaSuccess);
}

cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags) {
  (void)flags;
  std::lock_guard<std::mutex> g(mem_mu);
  if (find_range(host_regs, p)) return fail(cudaErrorInvalidValue); /* cudaErrorHostMemoryAlreadyRegistered */
  host_regs[(uintptr_t)p] = n;
  return fail(cudaSuccess);
}

cudaError_t cudaHostUnregister(void *p) {
  std::lock_guard<std::mutex> g(mem_mu);
  if (!host_regs.erase((uintptr_t)p)) return fail(cudaErrorInvalidValue);
  return fail(cudaSuccess);
}

/* Checks a copy's pointers against its kind: the device side must be device memory. */
static cudaError_t check_copy(const char *call, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  bool dd = is_device_ptr(dst), sd = is_device_ptr(src);
  if (n && ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) && !dd)) {
    warn("%s: the destination %p is not device memory", call, dst);
    return cudaErrorInvalidValue;
  }
  if (n && ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) && !sd)) {
    warn("%s: the source %p is not device memory", call, src);
    return cudaErrorInvalidValue;
  }
  if (n && ((dd && !is_device_range(dst, n)) || (sd && !is_device_range(src, n)))) {
    warn("%s: %zu bytes at %s %p run past the end of its device allocation", call, n,
         dd && !is_device_range(dst, n) ? "the destination" : "the source", dd && !is_device_range(dst, n) ? dst : src);
    return cudaErrorInvalidValue;
  }
  if ((unsigned)kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  return fail(cudaSuccess);
}

/* A queued copy when it runs: device memory it names must still be allocated (a cudaFree
 * that did not wait for this stream, e.g. on another device, is a use after free). */
static void checked_copy(const char *call, void *dst, const void *src, size_t n, bool dd, bool sd) {
  if ((dd && !is_device_range(dst, n)) || (sd && !is_device_range(src, n)))
    fatal("%s on a stream of device %d: its %s %p was freed (cudaFree) after the copy was queued and before it ran",
          call, tl_stream_device, dd && !is_device_range(dst, n) ? "destination" : "source",
          dd && !is_device_range(dst, n) ? dst : src);
  memcpy(dst, src, n);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, n, kind);
  if (e) return fail(e);
  if (!n) return fail(cudaSuccess);
  bool dd = is_device_ptr(dst), sd = is_device_ptr(src);
  if (!sd && !is_pinned(src)) {
    /* from pageable memory: the source is read before the call returns */
    auto copy = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
    return fail(enqueue(
        s, [dst, copy, n]() { memcpy(dst, copy->data(), n); }, "cudaMemcpyAsync"));
  }
  e = enqueue(
      s, [dst, src, n, dd, sd]() { checked_copy("cudaMemcpyAsync", dst, src, n, dd, sd); }, "cudaMemcpyAsync");
  if (e) return fail(e);
  if (!dd && !is_pinned(dst)) {
    /* to pageable memory: returns once the copy is done */
    std::unique_lock<std::mutex> lk(mu);
    CUstream_st *st = resolve(s);
    if (st->cap) return fail(cudaSuccess);
    drain(lk, st, "cudaMemcpyAsync to pageable memory");
  }
  return fail(cudaSuccess);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  {
    std::lock_guard<std::mutex> g(mu);
    if (forbidden_in_capture("cudaMemcpy")) return fail(cudaErrorStreamCaptureUnsupported);
  }
  cudaError_t e = check_copy("cudaMemcpy", dst, src, n, kind);
  if (e) return fail(e);
  if (!n) return fail(cudaSuccess);
  e = enqueue(
      nullptr, [dst, src, n]() { memcpy(dst, src, n); }, "cudaMemcpy");
  if (e) return fail(e);
  std::unique_lock<std::mutex> lk(mu);
  drain(lk, resolve(nullptr), "cudaMemcpy");
  return fail(cudaSuccess);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s) {
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  if (!width || !height) return fail(cudaSuccess);
  cudaError_t e = check_copy("cudaMemcpy2DAsync", dst, src, width, kind);
  if (e) return fail(e);
  if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) {
    warn("cudaMemcpy2DAsync: only device-to-device copies are simulated");
    return fail(cudaErrorNotSupported);
  }
  return fail(enqueue(
      s,
      [=]() {
        for (size_t r = 0; r < height; r++) memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
      },
      "cudaMemcpy2DAsync"));
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  if (n && !is_device_range(p, n)) {
    warn("cudaMemsetAsync: %p (%zu bytes) is not device memory or runs past the end of its allocation", p, n);
    return fail(cudaErrorInvalidValue);
  }
  if (!n) return fail(cudaSuccess);
  return fail(enqueue(
      s, [p, v, n]() { memset(p, v, n); }, "cudaMemsetAsync"));
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
  {
    std::lock_guard<std::mutex> g(mu);
    if (forbidden_in_capture("cudaMemset")) return fail(cudaErrorStreamCaptureUnsupported);
  }
  cudaError_t e = cudaMemsetAsync(p, v, n, nullptr);
  if (e) return e;
  std::unique_lock<std::mutex> lk(mu);
  drain(lk, resolve(nullptr), "cudaMemset");
  return fail(cudaSuccess);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  if (!n_devices()) return fail(cudaErrorNoDevice);
  std::lock_guard<std::mutex> g(mu);
  *s = new_stream(flags, false);
  return fail(cudaSuccess);
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  std::unique_lock<std::mutex> lk(mu);
  if (s->destroyed) {
    warn("cudaStreamDestroy of a destroyed stream");
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (s->cap) {
    s->cap_invalid = true;
    s->cap = nullptr;
  }
  /* the stream's work still runs; its thread ends after it */
  s->destroyed = true;
  s->stop = true;
  s->cv.notify_one();
  std::thread t = std::move(s->th);
  lk.unlock();
  t.join(); /* the object stays, so that a late use is reported, not a crash */
  return fail(cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  std::unique_lock<std::mutex> lk(mu);
  if (forbidden_in_capture("cudaStreamSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
  CUstream_st *s = resolve(h);
  if (s->destroyed) return fail(cudaErrorInvalidResourceHandle);
  if (s->cap) return fail(cudaErrorStreamCaptureUnsupported);
  drain(lk, s, "cudaStreamSynchronize");
  return fail(cudaSuccess);
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
  std::lock_guard<std::mutex> g(mu);
  if (forbidden_in_capture("cudaStreamQuery")) return fail(cudaErrorStreamCaptureUnsupported);
  CUstream_st *s = resolve(h);
  if (s->destroyed) return fail(cudaErrorInvalidResourceHandle);
  return fail(s->completed >= s->submitted ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  if (!n_devices()) return fail(cudaErrorNoDevice);
  *e = new CUevent_st;
  (*e)->flags = flags;
  (*e)->device = tl_device;
  return fail(cudaSuccess);
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(mu);
  if (e->destroyed) {
    warn("cudaEventDestroy of a destroyed event");
    return fail(cudaErrorInvalidResourceHandle);
  }
  e->destroyed = true; /* kept: a late use is reported */
  return fail(cudaSuccess);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(mu);
  if (e->destroyed) {
    warn("cudaEventRecord of a destroyed event");
    return fail(cudaErrorInvalidResourceHandle);
  }
  CUstream_st *s = resolve(h);
  if (s->device != e->device) { /* as CUDA: an event is recorded on a stream of its own device */
    warn("cudaEventRecord of an event of device %d on a stream of device %d", e->device, s->device);
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (s->cap) {
    /* inside a capture the event orders nodes of the graph only: with one captured
     * stream that is the graph's order already */
    if (s->cap_invalid) return fail(cudaErrorStreamCaptureInvalidated);
    e->captured = true;
    return fail(cudaSuccess);
  }
  if (s->legacy && forbidden_in_capture("cudaEventRecord on the default stream"))
    return fail(cudaErrorStreamCaptureUnsupported);
  cudaError_t r = enqueue_locked(
      s, {}, [e]() { e->t_ms = now_ms(); }, "cudaEventRecord");
  if (r) return fail(r);
  e->s = s;
  e->ticket = s->submitted;
  e->captured = false;
  return fail(cudaSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(mu);
  if (e->destroyed) {
    warn("cudaEventQuery of a destroyed event");
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (e->captured) return fail(cudaErrorStreamCaptureUnsupported);
  return fail(!e->s || e->s->completed >= e->ticket ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::unique_lock<std::mutex> lk(mu);
  if (forbidden_in_capture("cudaEventSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
  if (e->destroyed) {
    warn("cudaEventSynchronize of a destroyed event");
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (e->captured) return fail(cudaErrorStreamCaptureUnsupported);
  CUstream_st *s = e->s;
  uint64_t t = e->ticket;
  if (s) host_wait(lk, "cudaEventSynchronize", [&] { return s->completed >= t; });
  return fail(cudaSuccess);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned flags) {
  (void)flags;
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(mu);
  if (e->destroyed) {
    warn("cudaStreamWaitEvent on a destroyed event");
    return fail(cudaErrorInvalidResourceHandle);
  }
  CUstream_st *s = resolve(h);
  if (s->cap) {
    if (e->captured) return fail(cudaSuccess); /* recorded in this capture, before: the graph's order */
    if (!e->s || e->s->completed >= e->ticket) return fail(cudaSuccess);
  }
  if (!e->s) return fail(cudaSuccess); /* never recorded: nothing to wait for */
  return fail(enqueue_locked(s, {{e->s, e->ticket}}, nullptr, "cudaStreamWaitEvent"));
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  std::lock_guard<std::mutex> g(mu);
  if (!a || !b || a->destroyed || b->destroyed) return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!a->s || !b->s) return fail(cudaErrorInvalidResourceHandle);
  if (a->s->completed < a->ticket || b->s->completed < b->ticket) return fail(cudaErrorNotReady);
  *ms = (float)(b->t_ms - a->t_ms);
  return fail(cudaSuccess);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode) {
  std::lock_guard<std::mutex> g(mu);
  if (!h) return fail(cudaErrorStreamCaptureUnsupported); /* the legacy stream cannot be captured */
  if (h->destroyed) return fail(cudaErrorInvalidResourceHandle);
  if (h->cap) return fail(cudaErrorInvalidValue);
  h->cap = new Graph;
  h->cap_thread = std::this_thread::get_id();
  h->cap_mode = mode;
  h->cap_invalid = false;
  return fail(cudaSuccess);
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *out) {
  std::lock_guard<std::mutex> g(mu);
  *out = nullptr;
  if (!h || h->destroyed) return fail(cudaErrorInvalidResourceHandle);
  if (!h->cap) return fail(cudaErrorInvalidValue);
  if (h->cap_mode != cudaStreamCaptureModeRelaxed && h->cap_thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  Graph *gr = h->cap;
  bool bad = h->cap_invalid;
  h->cap = nullptr;
  h->cap_invalid = false;
  if (bad) {
    delete gr;
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *out = gr;
  return fail(cudaSuccess);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus *status) {
  std::lock_guard<std::mutex> g(mu);
  if (!status) return fail(cudaErrorInvalidValue);
  if (h && h->destroyed) return fail(cudaErrorInvalidResourceHandle);
  *status = !h || !h->cap    ? cudaStreamCaptureStatusNone
            : h->cap_invalid ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return fail(cudaSuccess);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags) {
  (void)flags;
  if (!g || g->destroyed) return fail(cudaErrorInvalidResourceHandle);
  *x = new CUgraphExec_st;
  (*x)->nodes = g->nodes;
  (*x)->what = g->what;
  return fail(cudaSuccess);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t h) {
  if (!x || x->destroyed) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(mu);
  CUstream_st *s = resolve(h);
  if (s->legacy && forbidden_in_capture("cudaGraphLaunch on the default stream"))
    return fail(cudaErrorStreamCaptureUnsupported);
  for (size_t i = 0; i < x->nodes.size(); i++) {
    cudaError_t e = enqueue_locked(s, {}, x->nodes[i], x->what[i]);
    if (e) return fail(e);
  }
  return fail(cudaSuccess);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
  if (!x || x->destroyed) return fail(cudaErrorInvalidResourceHandle);
  x->destroyed = true; /* queued nodes hold copies of the functions */
  return fail(cudaSuccess);
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  if (!g || g->destroyed) return fail(cudaErrorInvalidResourceHandle);
  g->destroyed = true;
  return fail(cudaSuccess);
}

}  // extern "C"
