/* sim_nccl.cc - NCCL for the CUDA simulator: communicators between processes on one host.
 *
 * ncclGetUniqueId makes a random name; ncclCommInitRank joins the ranks through Unix
 * sockets under /tmp/<name>/ (each rank connects to the lower ranks and accepts the
 * higher ones). A reader thread per peer queues what arrives. A group of sends and
 * receives (or one call outside a group) becomes ONE operation on its stream: it sends,
 * receives in order per peer, and then waits until every peer has taken its sends, so a
 * send completes only when its receive has run, as NCCL's rendezvous; a group that pairs
 * a send and a receive with the same peer never deadlocks, two ungrouped ones can, as on
 * GPUs. An all-reduce sends the buffer to every peer and sums all ranks' buffers in rank
 * order, so every rank gets the same bits.
 *
 * A peer whose connection closes (its process stopped, or destroyed its communicator)
 * is an error only for an operation that still needs it (a receive from it with
 * nothing left to take, a send it has not taken): then the communicator's
 * asynchronous error is ncclRemoteError. A rank that finishes and leaves first is no
 * error for the others, as with NCCL. ncclCommAbort ends the operations waiting.
 * Environment: CUDASIM_NCCL_INIT_S (default 120): how long ncclCommInitRank waits for
 * its peers; CUDASIM_STATS=1: at exit, the sends, receives and all-reduces that ran. */
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sim_internal.h"

namespace {

enum { FR_DATA = 1, FR_ACK = 2 };
struct Frame {
  uint32_t type, pad;
  uint64_t len;
};

struct Peer {
  int fd = -1;
  std::thread reader;
  std::deque<std::vector<char>> inbox; /* what this peer sent us, in order */
  uint64_t posted = 0, acked = 0;      /* our sends to it, and those it has received */
  bool closed = false;                 /* its connection closed: nothing more comes */
  std::mutex wmu;
};

}  // namespace

struct ncclComm {
  int nranks = 0, rank = 0;
  std::vector<Peer *> peers;
  std::mutex mu;
  std::condition_variable cv;
  ncclResult_t err = ncclSuccess;
  bool stopping = false;
  std::string last = "no error";
};

namespace {

void set_error(ncclComm *c, ncclResult_t r, const std::string &what) {
  std::lock_guard<std::mutex> g(c->mu);
  if (c->err == ncclSuccess && !c->stopping) {
    c->err = r;
    c->last = what;
    cudasim::warn("NCCL rank %d: %s", c->rank, what.c_str());
  }
  c->cv.notify_all();
}

bool read_all(int fd, void *p, size_t n) {
  char *b = (char *)p;
  while (n) {
    ssize_t k = read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= (size_t)k;
  }
  return true;
}

bool write_all(int fd, const void *p, size_t n) {
  const char *b = (const char *)p;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= (size_t)k;
  }
  return true;
}

void reader(ncclComm *c, int peer) {
  Peer *p = c->peers[(size_t)peer];
  for (;;) {
    Frame f;
    if (!read_all(p->fd, &f, sizeof f)) break;
    if (f.type == FR_DATA) {
      std::vector<char> v(f.len);
      if (f.len && !read_all(p->fd, v.data(), f.len)) break;
      std::lock_guard<std::mutex> g(c->mu);
      p->inbox.push_back(std::move(v));
      c->cv.notify_all();
    } else if (f.type == FR_ACK) {
      std::lock_guard<std::mutex> g(c->mu);
      p->acked += f.len;
      c->cv.notify_all();
    } else {
      set_error(c, ncclInternalError, "a malformed message from rank " + std::to_string(peer));
      break;
    }
  }
  std::lock_guard<std::mutex> g(c->mu);
  p->closed = true;
  c->cv.notify_all();
}

std::string closed_msg(int peer) {
  return "the connection to rank " + std::to_string(peer) + " closed (a peer stopped?)";
}

bool send_frame(ncclComm *c, int peer, uint32_t type, const void *data, uint64_t len) {
  Peer *p = c->peers[(size_t)peer];
  std::lock_guard<std::mutex> g(p->wmu);
  Frame f{type, 0, len};
  if (!write_all(p->fd, &f, sizeof f) || (type == FR_DATA && len && !write_all(p->fd, data, len))) {
    set_error(c, ncclRemoteError, "sending to rank " + std::to_string(peer) + " failed (a peer stopped?)");
    return false;
  }
  return true;
}

/* The next message from peer (waits); false after an error or an abort. */
bool take(ncclComm *c, int peer, std::vector<char> &out) {
  std::unique_lock<std::mutex> lk(c->mu);
  Peer *p = c->peers[(size_t)peer];
  c->cv.wait(lk, [&] { return !p->inbox.empty() || p->closed || c->err != ncclSuccess || c->stopping; });
  if (p->inbox.empty()) {
    bool gone = p->closed && c->err == ncclSuccess && !c->stopping;
    lk.unlock();
    if (gone) set_error(c, ncclRemoteError, closed_msg(peer));
    return false;
  }
  out = std::move(p->inbox.front());
  p->inbox.pop_front();
  return true;
}

struct Op {
  ncclComm *c;
  int kind; /* 0 send, 1 receive, 2 all-reduce */
  const void *src;
  void *dst;
  size_t bytes;
  int peer;
  ncclDataType_t type;
  cudaStream_t s;
};

template <class T>
void add_into(T *acc, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    T v;
    memcpy(&v, b + i * sizeof(T), sizeof(T));
    acc[i] += v;
  }
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}

void all_reduce(const Op &o) {
  ncclComm *c = o.c;
  std::vector<char> mine((const char *)o.src, (const char *)o.src + o.bytes);
  for (int p = 0; p < c->nranks; p++)
    if (p != c->rank && !send_frame(c, p, FR_DATA, mine.data(), o.bytes)) return;
  std::vector<std::vector<char>> got((size_t)c->nranks);
  got[(size_t)c->rank] = mine;
  for (int p = 0; p < c->nranks; p++)
    if (p != c->rank) {
      if (!take(c, p, got[(size_t)p])) return;
      if (got[(size_t)p].size() != o.bytes) {
        set_error(c, ncclInvalidUsage, "all-reduce of different sizes on the ranks");
        return;
      }
    }
  /* rank order on every rank: the same bits everywhere */
  std::vector<char> acc(got[0]);
  size_t n = o.bytes / type_size(o.type);
  for (int p = 1; p < c->nranks; p++) {
    const char *b = got[(size_t)p].data();
    switch (o.type) {
      case ncclFloat32: add_into((float *)acc.data(), b, n); break;
      case ncclFloat64: add_into((double *)acc.data(), b, n); break;
      case ncclInt32: add_into((int32_t *)acc.data(), b, n); break;
      case ncclInt64: add_into((int64_t *)acc.data(), b, n); break;
      default: set_error(c, ncclInvalidArgument, "all-reduce: a data type the simulator does not sum"); return;
    }
  }
  memcpy(o.dst, acc.data(), o.bytes);
}

std::atomic<long> st_sends, st_recvs, st_sums, st_bytes;
void print_stats() {
  if (st_sends || st_recvs || st_sums) {
    const char *v = getenv("CUDASIM_STATS");
    if (v && atoi(v))
      fprintf(stderr, "cudasim: NCCL in process %d: %ld sends, %ld receives, %ld all-reduces, %ld bytes\n",
              (int)getpid(), st_sends.load(), st_recvs.load(), st_sums.load(), st_bytes.load());
  }
}
int stats_registered = atexit(print_stats);

/* One group on its stream's thread. */
void run_group(const std::vector<Op> &ops) {
  if (ops.empty()) return;
  ncclComm *c = ops[0].c;
  std::vector<std::pair<int, uint64_t>> sent;
  for (const Op &o : ops)
    if (o.kind == 0) {
      uint64_t t;
      {
        std::lock_guard<std::mutex> g(c->mu);
        t = ++c->peers[(size_t)o.peer]->posted;
      }
      if (!send_frame(c, o.peer, FR_DATA, o.src, o.bytes)) return;
      sent.push_back({o.peer, t});
      st_sends++;
      st_bytes += (long)o.bytes;
    }
  for (const Op &o : ops) {
    if (o.kind == 2) {
      all_reduce(o);
      st_sums++;
      st_bytes += (long)o.bytes;
    }
    if (o.kind != 1) continue;
    std::vector<char> v;
    if (!take(c, o.peer, v)) return;
    if (v.size() != o.bytes) {
      set_error(c, ncclInvalidUsage,
                "rank " + std::to_string(o.peer) + " sent " + std::to_string(v.size()) + " bytes to a receive of " +
                    std::to_string(o.bytes));
      return;
    }
    memcpy(o.dst, v.data(), o.bytes);
    st_recvs++;
    if (!send_frame(c, o.peer, FR_ACK, nullptr, 1)) return;
  }
  std::unique_lock<std::mutex> lk(c->mu);
  for (auto &s : sent) {
    Peer *p = c->peers[(size_t)s.first];
    c->cv.wait(lk, [&] { return p->acked >= s.second || p->closed || c->err != ncclSuccess || c->stopping; });
    if (p->acked < s.second && p->closed && c->err == ncclSuccess && !c->stopping) {
      lk.unlock();
      set_error(c, ncclRemoteError, closed_msg(s.first));
      return;
    }
  }
}

thread_local int tl_depth;
thread_local std::vector<Op> tl_ops;

ncclResult_t submit(const Op &o) {
  if (!o.c) return ncclInvalidArgument;
  {
    std::lock_guard<std::mutex> g(o.c->mu);
    if (o.c->err != ncclSuccess) return o.c->err;
  }
  if (o.kind != 2 && (o.peer < 0 || o.peer >= o.c->nranks || o.peer == o.c->rank)) {
    cudasim::warn("NCCL rank %d: a send or receive with peer %d of %d ranks", o.c->rank, o.peer, o.c->nranks);
    return ncclInvalidArgument;
  }
  const void *dp = o.kind == 0 ? o.src : o.dst;
  if (o.bytes &&
      (!cudasim::is_device_range(dp, o.bytes) || (o.kind == 2 && !cudasim::is_device_range(o.src, o.bytes)))) {
    cudasim::warn("NCCL rank %d: a buffer that is not device memory, or runs past the end of its allocation",
                  o.c->rank);
    return ncclInvalidArgument;
  }
  tl_ops.push_back(o);
  if (tl_depth) return ncclSuccess;
  return ncclGroupEnd();
}

}  // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t c) {
  if (!c) return "";
  std::lock_guard<std::mutex> g(c->mu);
  static thread_local std::string copy;
  copy = c->last;
  return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  unsigned long long r = 0;
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd < 0 || read(fd, &r, sizeof r) != (ssize_t)sizeof r)
    r = (unsigned long long)time(nullptr) ^ ((unsigned long long)getpid() << 32);
  if (fd >= 0) close(fd);
  snprintf(id->internal, sizeof id->internal, "/tmp/cudasim-nccl-%016llx", r);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  id.internal[sizeof id.internal - 1] = 0;
  std::string dir = id.internal;
  if (dir.rfind("/tmp/cudasim-nccl-", 0) != 0) return ncclInvalidArgument;
  ncclComm *c = new ncclComm;
  c->nranks = nranks;
  c->rank = rank;
  c->peers.resize((size_t)nranks);
  for (auto &p : c->peers) p = new Peer;
  if (nranks == 1) {
    *out = c;
    return ncclSuccess;
  }
  mkdir(dir.c_str(), 0700);
  auto path = [&](int r) { return dir + "/" + std::to_string(r); };
  int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path(rank).c_str());
  unlink(a.sun_path);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, nranks)) {
    cudasim::warn("NCCL rank %d: cannot listen on %s: %s", rank, a.sun_path, strerror(errno));
    if (lfd >= 0) close(lfd);
    return ncclSystemError;
  }
  long limit = 120;
  if (const char *v = getenv("CUDASIM_NCCL_INIT_S")) limit = atol(v) > 0 ? atol(v) : limit;
  time_t t0 = time(nullptr);
  bool ok = true;
  for (int p = 0; p < rank && ok; p++) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un b;
    memset(&b, 0, sizeof b);
    b.sun_family = AF_UNIX;
    snprintf(b.sun_path, sizeof b.sun_path, "%s", path(p).c_str());
    while (connect(fd, (struct sockaddr *)&b, sizeof b)) {
      if (time(nullptr) - t0 > limit) {
        cudasim::warn("NCCL rank %d: rank %d did not come within %ld s", rank, p, limit);
        ok = false;
        break;
      }
      usleep(10000);
    }
    int32_t me = rank;
    if (ok && !write_all(fd, &me, sizeof me)) ok = false;
    c->peers[(size_t)p]->fd = fd;
  }
  for (int k = rank + 1; k < nranks && ok; k++) {
    int fd = accept(lfd, nullptr, nullptr);
    int32_t who = -1;
    if (fd < 0 || !read_all(fd, &who, sizeof who) || who <= rank || who >= nranks || c->peers[(size_t)who]->fd >= 0) {
      cudasim::warn("NCCL rank %d: a bad connection while joining", rank);
      ok = false;
      break;
    }
    c->peers[(size_t)who]->fd = fd;
  }
  close(lfd);
  unlink(path(rank).c_str());
  rmdir(dir.c_str()); /* the last rank out removes it */
  if (!ok) return ncclSystemError;
  for (int p = 0; p < nranks; p++)
    if (p != rank) c->peers[(size_t)p]->reader = std::thread(reader, c, p);
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
  (void)cfg; /* non-blocking or not, the simulator joins before it returns */
  return ncclCommInitRank(c, nranks, id, rank);
}

static void stop_comm(ncclComm_t c) {
  {
    std::lock_guard<std::mutex> g(c->mu);
    c->stopping = true;
    c->cv.notify_all();
  }
  for (Peer *p : c->peers)
    if (p->fd >= 0) shutdown(p->fd, SHUT_RDWR);
  for (Peer *p : c->peers)
    if (p->reader.joinable()) p->reader.join();
  for (Peer *p : c->peers)
    if (p->fd >= 0) {
      close(p->fd);
      p->fd = -1;
    }
  /* the object stays: an operation still queued on a stream may hold it */
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  stop_comm(c);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  stop_comm(c);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state) {
  if (!c) return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(c->mu);
  *state = c->err;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  tl_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (tl_depth > 0) tl_depth--;
  if (tl_depth || tl_ops.empty()) return ncclSuccess;
  std::vector<Op> ops;
  ops.swap(tl_ops);
  for (const Op &o : ops)
    if (o.c != ops[0].c || o.s != ops[0].s) {
      cudasim::warn("NCCL: a group over several communicators or streams (not simulated)");
      return ncclInvalidUsage;
    }
  cudaError_t e = cudasim::enqueue(
      ops[0].s, [ops]() { run_group(ops); }, "NCCL group");
  return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return submit(Op{c, 0, buf, nullptr, count * type_size(t), peer, t, s});
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return submit(Op{c, 1, nullptr, buf, count * type_size(t), peer, t, s});
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
  if (op != ncclSum) return ncclInvalidArgument;
  return submit(Op{c, 2, send, recv, count * type_size(t), 0, t, s});
}

}  // extern "C"
