/* rt_fakedev.c - the simulated asynchronous device (see rt_fakedev.h). */
#include "rt_fakedev.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt_handover.h"
#ifdef PIPERT_HAVE_MPI
#include <mpi.h>
#endif

typedef int (*stage_fn)(void *state, const void *const *in, void *const *out);

/* ---- streams ---------------------------------------------------------------------- */

typedef struct fev {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned long rec, done;
} fev;
enum { C_COPY, C_RUN, C_RECORD, C_WAIT, C_FENCE, C_COMM };
struct fgroup;
typedef struct cmd {
  int k;
  void *dst;
  const void *src;
  size_t n;
  fev *ev;
  unsigned long seq;
  stage_fn fn; /* C_RUN: fn(state, in, out) */
  void *state;
  void **in, **out;
  struct fgroup *grp; /* C_COMM: a group of sends and receives */
  struct cmd *next;
} cmd;

static int comm_run(struct fgroup *g); /* C_COMM on a stream: its calls, completed */

typedef struct fstream {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cmd *head, *tail;
  int stop, err, waits;
  unsigned long fences, fences_done;
  unsigned seed;
  double busy;                  /* seconds in C_RUN */
  atomic_int comm_in, comm_out; /* C_COMM commands begun, ended (a comm stream) */
  struct fstream *watch;        /* its replica's comm stream, when it has one */
  int beside;                   /* C_RUNs that ran while a C_COMM of watch did */
  pthread_t th;
  struct fstream *next; /* every open stream: a release waits for them all */
} fstream;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static fstream *g_streams;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void push(fstream *f, cmd c) {
  cmd *p = malloc(sizeof *p);
  if (!p) abort(); /* a test device */
  *p = c;
  p->next = NULL;
  pthread_mutex_lock(&f->mu);
  if (f->tail) f->tail->next = p;
  else f->head = p;
  f->tail = p;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

static void *stream_main(void *arg) {
  fstream *f = arg;
  for (;;) {
    pthread_mutex_lock(&f->mu);
    while (!f->head && !f->stop) pthread_cond_wait(&f->cv, &f->mu);
    if (!f->head) {
      pthread_mutex_unlock(&f->mu);
      return NULL;
    }
    cmd *c = f->head;
    f->head = c->next;
    if (!f->head) f->tail = NULL;
    unsigned r = (unsigned)rand_r(&f->seed);
    fstream *w = f->watch;
    pthread_mutex_unlock(&f->mu);
    /* a command's delay is part of its time: a transfer beside a run overlaps it */
    int in0 = w ? atomic_load(&w->comm_in) : 0, out0 = w ? atomic_load(&w->comm_out) : 0;
    if (c->k == C_COMM) atomic_fetch_add(&f->comm_in, 1);
    if (c->k != C_FENCE) usleep(r % 300);
    if (c->k == C_COPY) { /* in two halves, a delay between: a racing access shows */
      size_t h = c->n / 2;
      memcpy(c->dst, c->src, h);
      usleep(r % 50);
      memcpy((char *)c->dst + h, (const char *)c->src + h, c->n - h);
    } else if (c->k == C_RUN) {
      double t0 = now_s();
      int rc = c->fn(c->state, (const void *const *)c->in, c->out);
      int beside = w && (in0 > out0 || atomic_load(&w->comm_in) != in0);
      pthread_mutex_lock(&f->mu);
      f->beside += beside;
      f->busy += now_s() - t0;
      if (rc && !f->err) f->err = rc;
      pthread_mutex_unlock(&f->mu);
    } else if (c->k == C_COMM) {
      int rc = comm_run(c->grp);
      atomic_fetch_add(&f->comm_out, 1);
      pthread_mutex_lock(&f->mu);
      if (rc && !f->err) f->err = rc;
      pthread_mutex_unlock(&f->mu);
    } else if (c->k == C_RECORD || c->k == C_WAIT) {
      pthread_mutex_lock(&c->ev->mu);
      if (c->k == C_RECORD) {
        if (c->ev->done < c->seq) c->ev->done = c->seq;
        pthread_cond_broadcast(&c->ev->cv);
      } else {
        while (c->ev->done < c->seq) pthread_cond_wait(&c->ev->cv, &c->ev->mu);
      }
      pthread_mutex_unlock(&c->ev->mu);
    } else { /* C_FENCE */
      pthread_mutex_lock(&f->mu);
      f->fences_done = c->seq;
      pthread_cond_broadcast(&f->cv);
      pthread_mutex_unlock(&f->mu);
    }
    free(c);
  }
}

/* Waits for everything queued on f; its first error (a stage function's status), if any. */
static int finish(fstream *f) {
  pthread_mutex_lock(&f->mu);
  unsigned long seq = ++f->fences;
  pthread_mutex_unlock(&f->mu);
  push(f, (cmd){.k = C_FENCE, .seq = seq});
  pthread_mutex_lock(&f->mu);
  while (f->fences_done < seq) pthread_cond_wait(&f->cv, &f->mu);
  int e = f->err;
  pthread_mutex_unlock(&f->mu);
  return e;
}

static fstream *stream_open(unsigned seed) {
  fstream *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->seed = seed;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  if (pthread_create(&f->th, NULL, stream_main, f)) {
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
    return NULL;
  }
  pthread_mutex_lock(&g_mu);
  f->next = g_streams;
  g_streams = f;
  pthread_mutex_unlock(&g_mu);
  return f;
}

static void stream_close(fstream *f) {
  if (!f) return;
  finish(f);
  pthread_mutex_lock(&g_mu);
  for (fstream **pp = &g_streams; *pp; pp = &(*pp)->next)
    if (*pp == f) {
      *pp = f->next;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_lock(&f->mu);
  f->stop = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  pthread_join(f->th, NULL);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  free(f);
}

/* ---- events for the hand-over ------------------------------------------------------- */

static void *ho_event_new(void *stream) {
  (void)stream;
  fev *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  return e;
}
static void ho_event_free(void *event) {
  fev *e = event;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}
static int ho_record(void *stream, void *event) {
  fev *e = event;
  pthread_mutex_lock(&e->mu);
  unsigned long seq = ++e->rec;
  pthread_mutex_unlock(&e->mu);
  push(stream, (cmd){.k = C_RECORD, .ev = e, .seq = seq});
  return 0;
}
static int ho_wait(void *stream, void *event) {
  fev *e = event;
  fstream *f = stream;
  if (getenv("FAKE_NO_WAIT")) return 0;
  pthread_mutex_lock(&e->mu);
  unsigned long seq = e->rec;
  pthread_mutex_unlock(&e->mu);
  if (seq) {
    push(f, (cmd){.k = C_WAIT, .ev = e, .seq = seq});
    f->waits++; /* only the stream's owner queues on it */
  }
  return 0;
}
static int ho_finish(void *stream) { return finish(stream); }
static const rt_ho_ops ho_ops = {ho_event_new, ho_event_free, ho_record,
                                 ho_wait,      ho_finish,     NULL}; /* dev_release finishes every stream first */

/* ---- replicas ------------------------------------------------------------------------- */

typedef struct replica {
  void *state;
  const pipert_stage_desc *orig; /* the stage as compiled (its step, zero_grads, param_io) */
  int stage;
  fstream *s, *us, *cs; /* its work, its uploads, its NCCL calls (when MPI
                           allows calls from every thread) */
  void **io[4];         /* its own buffers: forward in, out, backward in, out */
  int async, queued_ahead, uploads_ahead;
  int uploads_behind;     /* async uploads into a buffer the part queued last reads */
  const void *last_in[8]; /* that part's inputs (the first 8) */
  int n_last_in;
  struct replica *next;
} replica;

static replica *g_replicas;

static replica *replica_of(void *state) {
  pthread_mutex_lock(&g_mu);
  replica *r = g_replicas;
  while (r && r->state != state) r = r->next;
  pthread_mutex_unlock(&g_mu);
  if (!r) {
    fprintf(stderr, "pipeline: fake device: a state it does not know (internal error)\n");
    abort();
  }
  return r;
}

static int finish_replica(replica *r) {
  int c = r->cs ? finish(r->cs) : 0, a = finish(r->us), b = finish(r->s);
  return c ? c : a ? a : b;
}

/* ---- the device form -------------------------------------------------------------------- */

/* the transport names each rank's device in PIPECC_CUDA_DEVICE (its local rank) */
static int dev_ordinal(void *state) {
  (void)state;
  const char *d = getenv("PIPECC_CUDA_DEVICE");
  return d ? atoi(d) : 0;
}

/* FAKE_DEV_MEM=BYTES: the device's memory, for the out-of-memory paths */
static size_t g_used;
static int g_oom_said;

static void *dev_alloc(void *state, size_t n) {
  const char *cap = getenv("FAKE_DEV_MEM");
  pthread_mutex_lock(&g_mu);
  int oom = cap && g_used + n > (size_t)strtoull(cap, NULL, 10), say = oom && !g_oom_said;
  if (!oom) g_used += n;
  if (say) g_oom_said = 1;
  pthread_mutex_unlock(&g_mu);
  if (oom) { /* the first says why; stages that run out at the same time stop quietly */
    if (say)
      fprintf(stderr, "pipeline: stage %d on the fake device: out of memory (%zu bytes more, FAKE_DEV_MEM=%s)\n",
              replica_of(state)->stage, n, cap);
    return NULL;
  }
  char *base = malloc(64 + (n ? n : 1)); /* its size in front, for the release */
  if (!base || rt_ho_add(base + 64, n)) {
    free(base);
    pthread_mutex_lock(&g_mu);
    g_used -= n;
    pthread_mutex_unlock(&g_mu);
    fprintf(stderr, "pipeline: stage %d on the fake device: out of host memory (%zu bytes)\n", replica_of(state)->stage,
            n);
    return NULL;
  }
  memcpy(base, &n, sizeof n);
  memset(base + 64, 0xA5, n); /* garbage, as fresh device memory */
  return base + 64;
}

static void dev_release(void *state, void *p) {
  (void)state;
  pthread_mutex_lock(&g_mu); /* as cudaFree: the whole device finishes first */
  for (fstream *f = g_streams; f; f = f->next) finish(f);
  pthread_mutex_unlock(&g_mu);
  rt_ho_remove(&ho_ops, p);
  char *base = (char *)p - 64;
  size_t n;
  memcpy(&n, base, sizeof n);
  pthread_mutex_lock(&g_mu);
  g_used -= n;
  pthread_mutex_unlock(&g_mu);
  free(base);
}

/* async: on the upload stream, ordered by the hand-over like any other write */
static int dev_upload(void *state, void *dev, const void *host, size_t n) {
  replica *r = replica_of(state);
  if (!r->async) {
    push(r->s, (cmd){.k = C_COPY, .dst = dev, .src = host, .n = n});
    return finish(r->s);
  }
  for (int k = 0; k < r->n_last_in; k++) r->uploads_behind += r->last_in[k] == dev;
  if (rt_ho_before_write(&ho_ops, r->us, dev)) return 1;
  push(r->us, (cmd){.k = C_COPY, .dst = dev, .src = host, .n = n});
  r->uploads_ahead++;
  return rt_ho_after_write(&ho_ops, r->us, dev, 0);
}

static int dev_download(void *state, void *host, const void *dev, size_t n) {
  replica *r = replica_of(state);
  if (r->async && rt_ho_before_read(&ho_ops, r->s, dev)) return 1;
  push(r->s, (cmd){.k = C_COPY, .dst = host, .src = dev, .n = n});
  return finish(r->s);
}

/* One part (bwd: the backward) of replica r: copies in, the stage's function, copies out. */
static int dev_part(void *state, int bwd, const void *const *in, void *const *out) {
  replica *r = replica_of(state);
  const pipert_stage_desc *d = r->orig;
  int ni = bwd ? d->n_bwd_inputs : d->n_inputs, no = bwd ? d->n_bwd_outputs : d->n_outputs;
  const pipert_tensor_desc *ti = bwd ? d->bwd_inputs : d->inputs, *to = bwd ? d->bwd_outputs : d->outputs;
  void **bi = r->io[2 * bwd], **bo = r->io[2 * bwd + 1];
  fstream *f = r->s;
  for (int k = 0; r->async && k < ni; k++)
    if (rt_ho_before_read(&ho_ops, f, in[k])) return 1;
  for (int k = 0; k < ni; k++) push(f, (cmd){.k = C_COPY, .dst = bi[k], .src = in[k], .n = ti[k].nbytes});
  for (int k = 0; r->async && k < ni; k++)
    if (rt_ho_after_read(&ho_ops, f, in[k])) return 1;
  r->n_last_in = ni < 8 ? ni : 8;
  for (int k = 0; k < r->n_last_in; k++) r->last_in[k] = in[k];
  push(f, (cmd){.k = C_RUN, .fn = bwd ? d->backward : d->forward, .state = state, .in = bi, .out = bo});
  for (int k = 0; r->async && k < no; k++)
    if (rt_ho_before_write(&ho_ops, f, out[k])) return 1;
  for (int k = 0; k < no; k++) push(f, (cmd){.k = C_COPY, .dst = out[k], .src = bo[k], .n = to[k].nbytes});
  if (!r->async) return finish(f);
  for (int k = 0; k < no; k++)
    if (rt_ho_after_write(&ho_ops, f, out[k], 0)) return 1;
  r->queued_ahead++;
  pthread_mutex_lock(&f->mu);
  int e = f->err; /* a failure shows at the next call, as a GPU's */
  pthread_mutex_unlock(&f->mu);
  return e;
}

static int dev_forward(void *state, const void *const *in, void *const *out) { return dev_part(state, 0, in, out); }
static int dev_backward(void *state, const void *const *in, void *const *out) { return dev_part(state, 1, in, out); }

static int dev_async(void *state, int on) {
  replica *r = replica_of(state);
  int rc = finish_replica(r);
  if (!rc) r->async = on;
  return rc;
}

static double dev_busy(void *state) {
  replica *r = replica_of(state);
  if (finish_replica(r)) return -1;
  pthread_mutex_lock(&r->s->mu);
  double b = r->s->busy;
  r->s->busy = 0;
  pthread_mutex_unlock(&r->s->mu);
  return b;
}

#ifdef PIPERT_HAVE_MPI
/* NCCL's groups over MPI: an MPI communicator over the same ranks, synchronous-mode
 * sends (MPI_Issend: complete only once the peer receives, as NCCL's rendezvous), every
 * call of a group completed at its end, the all-reduce through param_io. In async mode
 * a group runs on the replica's comm stream (a send reads its buffer there, a receive
 * writes it, ordered by the hand-over) and its end returns once it is queued. */
typedef struct fop {
  void *buf;
  size_t n;
  int peer, send;
} fop;
typedef struct fgroup {
  MPI_Comm c;
  fop *op;
  int n, cap, stage;
  atomic_int *done;
} fgroup;
typedef struct fcomm {
  MPI_Comm c;
  int depth, sends, recvs, groups, ahead;
  fgroup open;     /* the calls of the open group */
  atomic_int done; /* groups the comm stream has completed */
  int queued;      /* groups queued on it */
} fcomm;

#define FAKE_TAG 0x6e63 /* setup messages on MPI_COMM_WORLD, apart from the transport's */

/* The id names the world rank that made it (the communicator's rank 0) and a serial. */
static int comm_id(void *buf, size_t len) {
  static int serial;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  snprintf(buf, len, "fake-nccl %d %d", r, ++serial);
  return 0;
}

/* Members find each other through the id's maker: each sends it its world rank and its
 * rank in the new communicator, the maker answers with everyone's world ranks in that
 * order, and the members make an MPI communicator of them (collective over them only,
 * as ncclCommInitRank). With MPI_THREAD_MULTIPLE the replica gets its comm stream. */
static void *comm_init(void *state, const void *id, int nranks, int rank) {
  int maker = -1, serial = 0, me = 0, level = 0;
  if (sscanf(id, "fake-nccl %d %d", &maker, &serial) != 2 || nranks < 1 || rank < 0 || rank >= nranks) return NULL;
  replica *r = replica_of(state);
  MPI_Query_thread(&level);
  if (level == MPI_THREAD_MULTIPLE && !r->cs) {
    if (!(r->cs = stream_open(4049u + 31u * (unsigned)r->stage))) return NULL;
    pthread_mutex_lock(&r->s->mu);
    r->s->watch = r->cs;
    pthread_mutex_unlock(&r->s->mu);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int *world = calloc((size_t)nranks, sizeof(int));
  fcomm *f = calloc(1, sizeof *f);
  if (!world || !f) {
    free(world);
    free(f);
    return NULL;
  }
  if (rank == 0) {
    world[0] = me;
    for (int i = 1; i < nranks; i++) {
      int msg[2];
      MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, FAKE_TAG + serial, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (msg[1] > 0 && msg[1] < nranks) world[msg[1]] = msg[0];
    }
    for (int i = 1; i < nranks; i++) MPI_Send(world, nranks, MPI_INT, world[i], FAKE_TAG + serial, MPI_COMM_WORLD);
  } else {
    int msg[2] = {me, rank};
    MPI_Send(msg, 2, MPI_INT, maker, FAKE_TAG + serial, MPI_COMM_WORLD);
    MPI_Recv(world, nranks, MPI_INT, maker, FAKE_TAG + serial, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Group all, sub;
  MPI_Comm_group(MPI_COMM_WORLD, &all);
  MPI_Group_incl(all, nranks, world, &sub);
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, sub, FAKE_TAG + serial, &f->c);
  MPI_Group_free(&sub);
  MPI_Group_free(&all);
  free(world);
  if (rc != MPI_SUCCESS) {
    free(f);
    return NULL;
  }
  f->open.c = f->c;
  f->open.stage = r->stage;
  f->open.done = &f->done;
  return f;
}

/* A group's calls posted and completed (the comm stream, or the host); frees g's calls. */
static int comm_run(fgroup *g) {
  MPI_Request *q = malloc(sizeof(MPI_Request) * (size_t)(g->n + 1));
  int rc = !q;
  for (int i = 0; !rc && i < g->n; i++) {
    fop *o = &g->op[i];
    rc = (o->send ? MPI_Issend(o->buf, (int)o->n, MPI_BYTE, o->peer, 7, g->c, &q[i])
                  : MPI_Irecv(o->buf, (int)o->n, MPI_BYTE, o->peer, 7, g->c, &q[i])) != MPI_SUCCESS;
    if (rc) g->n = i;
  }
  /* as NCCL's waits: within PIPECC_NCCL_TIMEOUT seconds (default 600), else one line
   * (the requests stay posted: the run stops) */
  const char *tv = getenv("PIPECC_NCCL_TIMEOUT");
  double limit = tv && atof(tv) > 0 ? atof(tv) : 600, t0 = now_s();
  for (int done = 0; q && g->n && !rc && !done;) {
    rc = MPI_Testall(g->n, q, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS;
    if (!rc && !done && now_s() - t0 > limit) {
      fprintf(stderr,
              "pipeline: stage %d on the fake device: NCCL send/receive: timed out after %.0f s (a peer "
              "stopped?)\n",
              g->stage, limit);
      rc = 1;
      g->n = 0; /* left posted */
    } else if (!done) {
      usleep(100);
    }
  }
  free(q);
  free(g->op);
  if (g->done) atomic_fetch_add(g->done, 1);
  free(g);
  return rc;
}

/* The open group to the comm stream (async) or run here; then its buffers' events. */
static int comm_complete(replica *r, fcomm *f) {
  fgroup *g = malloc(sizeof *g);
  if (!g) return 1;
  *g = f->open;
  f->open.op = NULL;
  f->open.n = f->open.cap = 0;
  f->groups++;
  if (!r->async || !r->cs) {
    /* synchronous: the buffers' writers have finished (each part completes before it
     * returns) */
    g->done = NULL;
    return comm_run(g);
  }
  fop *ops = malloc(sizeof(fop) * (size_t)(g->n + 1));
  if (!ops) {
    free(g->op);
    free(g);
    return 1;
  }
  if (g->n) memcpy(ops, g->op, sizeof(fop) * (size_t)g->n);
  int n = g->n;
  push(r->cs, (cmd){.k = C_COMM, .grp = g});
  f->queued++;
  int rc = 0;
  for (int i = 0; !rc && i < n; i++)
    rc = ops[i].send ? rt_ho_after_read(&ho_ops, r->cs, ops[i].buf) : rt_ho_after_write(&ho_ops, r->cs, ops[i].buf, 0);
  free(ops);
  if (atomic_load(&f->done) < f->queued) f->ahead++; /* returned before the group completed */
  pthread_mutex_lock(&r->cs->mu);
  int e = r->cs->err; /* a failure shows at the next call, as NCCL's */
  pthread_mutex_unlock(&r->cs->mu);
  return rc ? rc : e;
}
static int comm_group(void *state, void *comm, int begin) {
  fcomm *f = comm;
  if (begin) {
    f->depth++;
    return 0;
  }
  return --f->depth ? 0 : comm_complete(replica_of(state), f);
}
static int comm_post(void *state, fcomm *f, void *buf, size_t n, int peer, int send) {
  replica *r = replica_of(state);
  fgroup *g = &f->open;
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    fop *no = realloc(g->op, sizeof(fop) * (size_t)cap);
    if (!no) return 1;
    g->op = no;
    g->cap = cap;
  }
  if (r->async && r->cs && (send ? rt_ho_before_read(&ho_ops, r->cs, buf) : rt_ho_before_write(&ho_ops, r->cs, buf)))
    return 1;
  g->op[g->n++] = (fop){buf, n, peer, send};
  if (send) f->sends++;
  else f->recvs++;
  return f->depth ? 0 : comm_complete(r, f);
}
static int comm_send(void *state, void *comm, const void *buf, size_t n, int peer) {
  return comm_post(state, comm, (void *)buf, n, peer, 1);
}
static int comm_recv(void *state, void *comm, void *buf, size_t n, int peer) {
  return comm_post(state, comm, buf, n, peer, 0);
}
/* parameter memory [off, off + n) of float32/float64 summed over the communicator */
static int comm_sum(void *state, void *comm, size_t off, size_t n, int dtype) {
  fcomm *f = comm;
  replica *r = replica_of(state);
  void *buf = malloc(n ? n : 1);
  if (!buf) return 1;
  int f64 = dtype == PIPERT_DOUBLE;
  int rc = finish_replica(r) || r->orig->param_io(state, 0, off, buf, n) ||
           MPI_Allreduce(MPI_IN_PLACE, buf, (int)(n / (f64 ? 8 : 4)), f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, f->c) !=
               MPI_SUCCESS ||
           r->orig->param_io(state, 1, off, buf, n);
  free(buf);
  return rc;
}
static void comm_free(void *state, void *comm) {
  fcomm *f = comm;
  replica *r = replica_of(state);
  if (r->cs) finish(r->cs); /* its groups done before the communicator goes */
  if (getenv("FAKE_DEV_STATS")) {
    int rk = 0;
    MPI_Comm_rank(f->c, &rk);
    fprintf(stderr, "fake nccl: rank %d: %d sends, %d receives, %d groups, %d queued ahead\n", rk, f->sends, f->recvs,
            f->groups, f->ahead);
  }
  MPI_Comm_free(&f->c);
  free(f->open.op);
  free(f);
}
#define FAKE_COMM comm_id, comm_init, comm_group, comm_send, comm_recv, comm_sum, comm_free
#else
static int comm_run(struct fgroup *g) {
  (void)g;
  return 1;
}
#define FAKE_COMM NULL, NULL, NULL, NULL, NULL, NULL, NULL
#endif

static const pipert_device_ops fake_ops = {dev_ordinal, dev_alloc,    dev_release, dev_upload, dev_download,
                                           dev_forward, dev_backward, FAKE_COMM,   NULL,       dev_async,
                                           dev_busy,    NULL,         NULL,        NULL};

/* A training stage's host calls, after its queued work (a GPU orders them on its stream). */
static int w_step(void *state) {
  replica *r = replica_of(state);
  int rc = finish_replica(r);
  return rc ? rc : r->orig->step(state);
}
static int w_zero_grads(void *state) {
  replica *r = replica_of(state);
  int rc = finish_replica(r);
  return rc ? rc : r->orig->zero_grads(state);
}
static int w_param_io(void *state, int write, size_t offset, void *host, size_t nbytes) {
  replica *r = replica_of(state);
  int rc = finish_replica(r);
  return rc ? rc : r->orig->param_io(state, write, offset, host, nbytes);
}
static const void *w_param_memory(void *state) {
  replica *r = replica_of(state);
  return finish_replica(r) ? NULL : r->orig->param_memory(state);
}
static int w_weights_at(void *state, const void *host) { /* (the queued parts read the weights where they were) */
  replica *r = replica_of(state);
  int rc = finish_replica(r);
  return rc ? rc : r->orig->weights_at(state, host);
}

/* ---- the pipeline copy ------------------------------------------------------------------- */

typedef struct fake_copy {
  pipert_pipeline p; /* first: the copy's address is the pipeline's */
  const pipert_pipeline *orig;
  pipert_stage_plan *plans;
  pipert_stage_desc *descs;
} fake_copy;

int rt_fakedev_on(void) {
  const char *on = getenv("PIPERT_FAKE_DEVICE");
  return on && !strcmp(on, "1");
}

const pipert_pipeline *rt_fakedev_pipeline(const pipert_pipeline *p) {
  if (!rt_fakedev_on()) return p;
  int S = p->n_stages;
  fake_copy *c = calloc(1, sizeof *c);
  if (!c) return p;
  c->plans = calloc((size_t)S + 1, sizeof *c->plans);
  c->descs = calloc((size_t)S + 1, sizeof *c->descs);
  if (!c->plans || !c->descs) {
    free(c->plans);
    free(c->descs);
    free(c);
    return p;
  }
  c->p = *p;
  c->orig = p;
  for (int s = 0; s < S; s++) {
    c->plans[s] = p->stages[s];
    c->descs[s] = *p->stages[s].stage;
    c->plans[s].stage = &c->descs[s];
    pipert_stage_desc *d = &c->descs[s];
    if (d->device) continue;
    d->device = &fake_ops;
    if (d->step) d->step = w_step;
    if (d->zero_grads) d->zero_grads = w_zero_grads;
    if (d->param_io) d->param_io = w_param_io;
    if (d->weights_at) d->weights_at = w_weights_at;
    if (d->param_memory) d->param_memory = w_param_memory;
  }
  c->p.stages = c->plans;
  return &c->p;
}

void rt_fakedev_free(const pipert_pipeline *p) {
  if (!rt_fakedev_on() || !p) return;
  fake_copy *c = (fake_copy *)p;
  free(c->plans);
  free(c->descs);
  free(c);
}

static void free_bufs(void **b, int n) {
  for (int k = 0; b && k < n; k++) free(b[k]);
  free(b);
}

static void **new_bufs(int n, const pipert_tensor_desc *t) {
  void **b = calloc((size_t)n + 1, sizeof(void *));
  for (int k = 0; b && k < n; k++)
    if (!(b[k] = malloc(t[k].nbytes ? t[k].nbytes : 1))) {
      free_bufs(b, k);
      return NULL;
    }
  return b;
}

int rt_fakedev_attach(const pipert_pipeline *p, int s, void *state) {
  const pipert_stage_desc *d = p->stages[s].stage;
  if (d->device != &fake_ops) return 0;
  replica *r = calloc(1, sizeof *r);
  if (!r) return 1;
  r->state = state;
  r->stage = s;
  r->orig = ((const fake_copy *)p)->orig->stages[s].stage;
  unsigned seed = 12345u + 977u * (unsigned)s + (unsigned)((size_t)state % 1000u);
  r->s = stream_open(seed);
  r->us = stream_open(seed + 7919u);
  r->io[0] = new_bufs(d->n_inputs, d->inputs);
  r->io[1] = new_bufs(d->n_outputs, d->outputs);
  r->io[2] = new_bufs(p->training ? d->n_bwd_inputs : 0, d->bwd_inputs);
  r->io[3] = new_bufs(p->training ? d->n_bwd_outputs : 0, d->bwd_outputs);
  if (!r->s || !r->us || !r->io[0] || !r->io[1] || !r->io[2] || !r->io[3]) {
    fprintf(stderr, "pipeline: stage %d: fake device: cannot start its streams\n", s);
    stream_close(r->s);
    stream_close(r->us);
    free_bufs(r->io[0], d->n_inputs);
    free_bufs(r->io[1], d->n_outputs);
    free_bufs(r->io[2], p->training ? d->n_bwd_inputs : 0);
    free_bufs(r->io[3], p->training ? d->n_bwd_outputs : 0);
    free(r);
    return 1;
  }
  pthread_mutex_lock(&g_mu);
  r->next = g_replicas;
  g_replicas = r;
  pthread_mutex_unlock(&g_mu);
  return 0;
}

void rt_fakedev_detach(const pipert_pipeline *p, int s, void *state) {
  const pipert_stage_desc *d = p->stages[s].stage;
  if (d->device != &fake_ops || !state) return;
  pthread_mutex_lock(&g_mu);
  replica **pp = &g_replicas;
  while (*pp && (*pp)->state != state) pp = &(*pp)->next;
  replica *r = *pp;
  if (r) *pp = r->next;
  pthread_mutex_unlock(&g_mu);
  if (!r) return;
  finish_replica(r);
  if (getenv("FAKE_DEV_STATS"))
    fprintf(stderr,
            "fake device: stage %d: %d parts queued ahead, %d uploads queued ahead, %d waits, %d parts beside "
            "a transfer, %d uploads behind the last part\n",
            s, r->queued_ahead, r->uploads_ahead, r->s->waits + r->us->waits + (r->cs ? r->cs->waits : 0), r->s->beside,
            r->uploads_behind);
  pthread_mutex_lock(&r->s->mu);
  r->s->watch = NULL; /* its thread reads it with every command */
  pthread_mutex_unlock(&r->s->mu);
  stream_close(r->cs);
  stream_close(r->us);
  stream_close(r->s);
  free_bufs(r->io[0], d->n_inputs);
  free_bufs(r->io[1], d->n_outputs);
  free_bufs(r->io[2], p->training ? d->n_bwd_inputs : 0);
  free_bufs(r->io[3], p->training ? d->n_bwd_outputs : 0);
  free(r);
}
