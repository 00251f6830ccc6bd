/* The in-process transport: one worker thread per stage replica running the stream
 * interpreter (rt_worker.c), mailboxes between stages; a set travels by reference.
 *
 * Deadlock freedom: every worker handles its micro-batches in increasing order per
 * opcode; a mailbox (producer stage j -> consumer stage i) accepts micro-batch m only
 * when m < low + cap, low being the smallest micro-batch the consumer side has not
 * taken yet, so the smallest unfinished micro-batch can always move (training rounds
 * use cap = M: a send never waits within a step; the programs are proven free of
 * deadlock under that rule before running, rt_validate_plan). All waits are timed and
 * check the abort flag, so a failure stops everyone. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "rt.h"
#include "rt_fakedev.h"

#define BOX_CAP 2    /* micro-batches in flight on one edge (inference) */
#define POOL_EXTRA 2 /* sets per pool beyond the mailbox capacity */
#define WAIT_MS 20

typedef struct rt_box {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int cap;
  int64_t low;  /* smallest micro-batch not taken yet */
  int64_t *mb;  /* [cap] micro-batch held by the slot */
  int *state;   /* [cap] 0 empty, 1 full, 2 taken (waits for low to pass) */
  rt_set **set; /* [cap] */
} rt_box;

typedef struct rt_tworker {
  rt_worker w;
  rt_exec *ex;
  int index;
  pthread_t th;
} rt_tworker;

typedef struct rt_rbar { /* the replicas of one stage */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int count;
  int64_t gen;
} rt_rbar;

struct rt_exec {
  const pipert_pipeline *p;
  const rt_options *o;
  int M;
  int nworkers;
  rt_tworker *w;
  rt_weights *weights;       /* per stage */
  const pipert_instr **prog; /* per stage */
  int *prog_len;
  pipert_instr **prog_owned;
  rt_topo *topo;
  rt_box **box, **gbox; /* box[j * S + i]: forward j -> i; gbox[t * S + s]: backward t -> s */
  rt_rbar *rbar;        /* per stage */
  /* per run */
  atomic_int abort;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, failed_rc;
  int bar_count;
  int64_t bar_gen;
  const rt_array *in;
  rt_array *out;
  int64_t T;
  int64_t period; /* data slots (micro-batches) in in[]/out[]; 0: T */
  /* Streaming (period < T): batch b (micro-batches b*period .. +period) is complete when
   * all its graph outputs are written; batch_left[b] counts down, batch_done[b] is the
   * time it reached 0. */
  int64_t nbatch;
  atomic_llong *batch_left;
  double *batch_done;
  void **pinned; /* device mode: input arrays page-locked (pin), [n_inputs] */
  size_t *pinned_n;
};

static void cond_init(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += WAIT_MS * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(cv, mu, &ts);
}

static int aborted(rt_exec *ex) { return atomic_load_explicit(&ex->abort, memory_order_acquire); }

/* First failure wins: prints its message (none when empty: printed already) and stops
 * everyone. */
static void fail_msg(rt_exec *ex, int rc, const char *msg) {
  pthread_mutex_lock(&ex->mu);
  if (!ex->failed_rc) {
    if (msg[0]) rt_errorf("%s", msg);
    ex->failed_rc = rc;
  }
  atomic_store_explicit(&ex->abort, 1, memory_order_release);
  pthread_cond_broadcast(&ex->cv);
  pthread_mutex_unlock(&ex->mu);
}

static void fail(rt_exec *ex, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(rt_exec *ex, int rc, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fail_msg(ex, rc, buf);
}

/* ---- mailboxes ------------------------------------------------------------ */

static rt_box *box_new(int cap) {
  rt_box *b = calloc(1, sizeof *b);
  pthread_mutex_init(&b->mu, NULL);
  cond_init(&b->cv);
  b->cap = cap;
  b->mb = calloc((size_t)cap, sizeof *b->mb);
  b->state = calloc((size_t)cap, sizeof *b->state);
  b->set = calloc((size_t)cap, sizeof *b->set);
  return b;
}

static void box_free(rt_box *b) {
  if (!b) return;
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b->mb);
  free(b->state);
  free(b->set);
  free(b);
}

static int box_put(rt_exec *ex, rt_box *b, int64_t mb, rt_set *s) {
  pthread_mutex_lock(&b->mu);
  while (mb >= b->low + b->cap && !aborted(ex)) timed_wait(&b->cv, &b->mu);
  int ok = !aborted(ex);
  if (ok) {
    int k = (int)(mb % b->cap);
    b->mb[k] = mb;
    b->state[k] = 1;
    b->set[k] = s;
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return ok ? 0 : -1;
}

static rt_set *box_take(rt_exec *ex, rt_box *b, int64_t mb) {
  int k = (int)(mb % b->cap);
  rt_set *s = NULL;
  pthread_mutex_lock(&b->mu);
  while (!(b->state[k] == 1 && b->mb[k] == mb) && !aborted(ex)) timed_wait(&b->cv, &b->mu);
  if (!aborted(ex)) {
    s = b->set[k];
    b->set[k] = NULL;
    b->state[k] = 2;
    while (b->state[b->low % b->cap] == 2 && b->mb[b->low % b->cap] == b->low) {
      b->state[b->low % b->cap] = 0;
      b->low++;
    }
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return s;
}

static void box_reset(rt_box *b) {
  b->low = 0;
  for (int k = 0; k < b->cap; k++) {
    b->mb[k] = -1;
    b->state[k] = 0;
    b->set[k] = NULL;
  }
}

/* End-of-round barrier of all workers (timed, abortable). */
static int barrier(rt_exec *ex) {
  pthread_mutex_lock(&ex->mu);
  int64_t gen = ex->bar_gen;
  if (++ex->bar_count == ex->nworkers) {
    ex->bar_count = 0;
    ex->bar_gen++;
    pthread_cond_broadcast(&ex->cv);
  } else {
    while (gen == ex->bar_gen && !aborted(ex)) timed_wait(&ex->cv, &ex->mu);
  }
  pthread_mutex_unlock(&ex->mu);
  return aborted(ex) ? -1 : 0;
}

/* Barrier of the replicas of one stage. */
static int replica_barrier(rt_exec *ex, int s) {
  rt_rbar *b = &ex->rbar[s];
  pthread_mutex_lock(&b->mu);
  int64_t gen = b->gen;
  if (++b->count == ex->p->stages[s].replicas) {
    b->count = 0;
    b->gen++;
    pthread_cond_broadcast(&b->cv);
  } else {
    while (gen == b->gen && !aborted(ex)) timed_wait(&b->cv, &b->mu);
  }
  pthread_mutex_unlock(&b->mu);
  return aborted(ex) ? -1 : 0;
}

static rt_tworker *worker_of(rt_exec *ex, int s, int r) {
  for (int i = 0; i < ex->nworkers; i++)
    if (ex->w[i].w.stage == s && ex->w[i].w.replica == r) return &ex->w[i];
  return NULL;
}

/* ---- the link: what the interpreter asks of the threads transport ------------------ */

static rt_set *t_recv(void *link, rt_worker *w, int kind, int from, int64_t g) {
  rt_exec *ex = link;
  int S = ex->p->n_stages;
  return box_take(ex, kind ? ex->gbox[from * S + w->stage] : ex->box[from * S + w->stage], g);
}

static int t_send(void *link, rt_worker *w, int kind, rt_set *s, int64_t g) {
  rt_exec *ex = link;
  const rt_topo *t = w->topo;
  int S = ex->p->n_stages, n = kind ? t->ngc : t->nfc;
  const int *to = kind ? t->gc : t->fc;
  if (n == 0) rt_set_release(s);          /* nobody reads it: drop the transport's reference */
  else atomic_fetch_add(&s->refs, n - 1); /* one reference per reader */
  for (int k = 0; k < n; k++)
    if (box_put(ex, kind ? ex->gbox[w->stage * S + to[k]] : ex->box[w->stage * S + to[k]], g, s)) return -1;
  return 0;
}

static const void *t_input(void *link, rt_worker *w, int idx, int64_t g) {
  rt_exec *ex = link;
  (void)w;
  return (const char *)ex->in[idx].data + (size_t)(g % ex->period) * ex->p->inputs[idx].nbytes;
}

static void t_output(void *link, rt_worker *w, int q, int64_t g, const void *data) {
  rt_exec *ex = link;
  (void)w;
  memcpy((char *)ex->out[q].data + (size_t)(g % ex->period) * ex->p->outputs[q].nbytes, data, ex->p->outputs[q].nbytes);
  int64_t b = g / ex->period;
  if (ex->batch_left && atomic_fetch_sub(&ex->batch_left[b], 1) == 1) ex->batch_done[b] = rt_now();
}

/* Sum the GRAD params over the stage's replicas, in replica order, into every replica. */
static int t_allreduce(void *link, rt_worker *w) {
  rt_exec *ex = link;
  const pipert_stage_desc *d = ex->p->stages[w->stage].stage;
  int R = ex->p->stages[w->stage].replicas, rc = 0;
  if (R < 2) return 0;
  if (replica_barrier(ex, w->stage)) return -1;
  /* device mode: summed device to device (the same order, so the same bits) */
  const pipert_device_ops *dv = w->dev && w->dev->param_sum && w->dev->param_copy ? w->dev : NULL;
  if (w->replica == 0 && dv) {
    for (int k = 0; k < d->n_params && !rc; k++) {
      const pipert_param_desc *pd = &d->params[k];
      if (pd->kind != PIPERT_PARAM_GRAD) continue;
      for (int r = 1; r < R && !rc; r++)
        rc |= dv->param_sum(w->state, worker_of(ex, w->stage, r)->w.state, pd->offset, pd->nbytes, pd->dtype);
      for (int r = 1; r < R && !rc; r++)
        rc |= dv->param_copy(worker_of(ex, w->stage, r)->w.state, w->state, pd->offset, pd->nbytes);
    }
    if (rc) fail(ex, 1, "stage %d: all-reduce of the gradients failed", w->stage);
  } else if (w->replica == 0) {
    for (int k = 0; k < d->n_params && !rc; k++) {
      const pipert_param_desc *pd = &d->params[k];
      if (pd->kind != PIPERT_PARAM_GRAD) continue;
      void *acc = rt_aligned_alloc(pd->nbytes), *tmp = rt_aligned_alloc(pd->nbytes);
      rc |= d->param_io(w->state, 0, pd->offset, acc, pd->nbytes);
      for (int r = 1; r < R && !rc; r++) {
        rc |= d->param_io(worker_of(ex, w->stage, r)->w.state, 0, pd->offset, tmp, pd->nbytes);
        rt_sum_into(acc, tmp, pd->nbytes, pd->dtype);
      }
      for (int r = 0; r < R && !rc; r++)
        rc |= d->param_io(worker_of(ex, w->stage, r)->w.state, 1, pd->offset, acc, pd->nbytes);
      free(acc);
      free(tmp);
    }
    if (rc) fail(ex, 1, "stage %d: all-reduce of the gradients failed", w->stage);
  }
  return replica_barrier(ex, w->stage) || rc ? -1 : 0;
}

static int t_aborted(void *link) { return aborted(link); }
static void t_fail(void *link, int rc, const char *msg) { fail_msg(link, rc, msg); }

static const rt_link_ops threads_ops = {t_recv, t_send, t_input, t_output, t_allreduce, t_aborted, t_fail, NULL, NULL};

static void *worker_main(void *arg) {
  rt_tworker *tw = arg;
  rt_exec *ex = tw->ex;
  rt_worker *w = &tw->w;
  rt_cur_stage = w->stage;
  if (ex->o->pin) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET((int)(tw->index % (n > 0 ? n : 1)), &cs);
    pthread_setaffinity_np(pthread_self(), sizeof cs, &cs);
  }
  int64_t rounds = (ex->T + ex->M - 1) / ex->M;
  for (int64_t r = 0; r < rounds; r++) {
    if (rt_worker_round(w, r * ex->M, ex->T)) break;
    if (r + 1 < rounds && barrier(ex)) break;
  }
  if (w->dev_async) { /* forward only queued the work: the time it ran on the device */
    double b = rt_worker_end_wait(w, ex->T);
    /* a failure there (a fault on one GPU after its last hand-over) fails the run: other
     * GPUs' stages may have read what it never wrote */
    char nm[64];
    const char *why = b < 0 ? rt_bad_input_take() : NULL; /* an index out of range, found on the device */
    if (why) fail(ex, 2, "%s: %s", rt_worker_name(w, nm, sizeof nm), why);
    else if (b < 0) fail(ex, 1, "%s: work queued on its device failed", rt_worker_name(w, nm, sizeof nm));
    w->busy = b >= 0 ? b : 0;
  }
  pthread_mutex_lock(&ex->mu);
  ex->done++;
  pthread_cond_broadcast(&ex->cv);
  pthread_mutex_unlock(&ex->mu);
  return NULL;
}

/* ---- create / run / destroy ---------------------------------------------- */

int rt_threads_create(const pipert_pipeline *p, const rt_options *o, int M, rt_exec **out) {
  int S = p->n_stages;
  rt_exec *ex = calloc(1, sizeof *ex);
  *out = ex;
  ex->p = p;
  ex->o = o;
  ex->M = M;
  pthread_mutex_init(&ex->mu, NULL);
  cond_init(&ex->cv);
  ex->weights = calloc((size_t)S, sizeof *ex->weights);
  ex->prog = calloc((size_t)S, sizeof *ex->prog);
  ex->prog_len = calloc((size_t)S, sizeof(int));
  ex->prog_owned = calloc((size_t)S, sizeof *ex->prog_owned);
  ex->topo = calloc((size_t)S, sizeof *ex->topo);
  ex->box = calloc((size_t)S * (size_t)S, sizeof(rt_box *));
  ex->gbox = calloc((size_t)S * (size_t)S, sizeof(rt_box *));
  ex->rbar = calloc((size_t)S, sizeof *ex->rbar);
  for (int s = 0; s < S; s++) {
    ex->prog[s] = rt_stage_program(p, s, M, &ex->prog_len[s], &ex->prog_owned[s]);
    ex->nworkers += p->stages[s].replicas;
    pthread_mutex_init(&ex->rbar[s].mu, NULL);
    cond_init(&ex->rbar[s].cv);
  }
  rt_topo_build(p, ex->prog, ex->prog_len, ex->topo);
  if (p->training && rt_async_mode(p)) { /* the streams the plan did not carry: their proof here */
    char e[512] = "";
    rt_async_check(p, ex->prog, ex->prog_len, M, e, sizeof e);
    if (e[0]) {
      rt_errorf("internal error: the %s streams: %s", p->schedule, e);
      return 1;
    }
  }
  int cap = p->training ? M : BOX_CAP;
  for (int s = 0; s < S; s++) {
    for (int k = 0; k < ex->topo[s].nfc; k++) ex->box[s * S + ex->topo[s].fc[k]] = box_new(cap);
    for (int k = 0; k < ex->topo[s].ngc; k++) ex->gbox[s * S + ex->topo[s].gc[k]] = box_new(cap);
  }
  /* Weights: all stages checked before any init. */
  char err[1024];
  for (int s = 0; s < S; s++)
    if (rt_weights_load(p->stages[s].stage, o->weights_dir, &ex->weights[s], err, sizeof err)) {
      rt_errorf("%s", err);
      return 2;
    }
  /* a training stage holds every micro-batch of a step at most (GPipe); inference a few */
  int pool_cap = p->training ? M + BOX_CAP + POOL_EXTRA : BOX_CAP + POOL_EXTRA;
  ex->w = calloc((size_t)ex->nworkers, sizeof *ex->w);
  int wi = 0; /* also the plan's device of this replica: stages' replicas in order */
  for (int s = 0; s < S; s++) {
    const pipert_stage_desc *d = p->stages[s].stage;
    for (int r = 0; r < p->stages[s].replicas; r++, wi++) {
      rt_tworker *tw = &ex->w[wi];
      tw->ex = ex;
      tw->index = wi;
      rt_worker_init(&tw->w, p, s, r, M, ex->prog[s], ex->prog_len[s], &ex->topo[s], pool_cap, &threads_ops, ex);
      if (d->init) {
        rt_cur_stage = s;
        rt_init_device = wi;
        int rc = d->init(&tw->w.state, ex->weights[s].map, ex->weights[s].len);
        rt_cur_stage = rt_init_device = -1;
        if (rc) {
          rt_errorf("stage %d: init failed (status %d)", s, rc);
          return 1;
        }
        if (rt_fakedev_attach(p, s, tw->w.state)) return 1;
      }
      if (p->training && rt_async_mode(p)) {
        char e[512] = "";
        tw->w.async_base = o->async_base;
        tw->w.async_keep = o->async_keep;
        tw->w.async_every = o->async_every;
        tw->w.async_ckpt = o->async_ckpt;
        if (rt_async_init(&tw->w, e, sizeof e)) {
          rt_errorf("train: --schedule %s: %s", p->schedule, e);
          return 2;
        }
      }
    }
  }
  /* device mode: stages on one accelerator exchange sets in its memory; on several, each
   * device reading the others' memory (peer access, every pair of the devices used) */
  int dev = !rt_env_on("PIPERT_HOST_SETS");
  for (int i = 0; i < ex->nworkers && dev; i++) {
    const pipert_stage_desc *d = p->stages[ex->w[i].w.stage].stage;
    dev = d->device && ex->w[i].w.state && (!p->training || d->device->backward);
  }
  for (int i = 0; i < ex->nworkers && dev; i++) {
    const pipert_device_ops *di = p->stages[ex->w[i].w.stage].stage->device;
    int oi = di->ordinal(ex->w[i].w.state);
    for (int j = 0; j < ex->nworkers && dev; j++) {
      int oj = p->stages[ex->w[j].w.stage].stage->device->ordinal(ex->w[j].w.state);
      dev = oi == oj || (di->peer && di->peer(ex->w[i].w.state, oj) == 0);
    }
  }
  for (int i = 0; i < ex->nworkers && dev; i++)
    rt_worker_set_device(&ex->w[i].w, p->stages[ex->w[i].w.stage].stage->device);
  /* ... and hands them over on the device, no thread waiting for another's work
   * (PIPERT_SYNC_SETS=1: each forward/backward finishes before its set is handed on) */
  int async = dev && !rt_env_on("PIPERT_SYNC_SETS");
  for (int i = 0; i < ex->nworkers && async; i++) {
    rt_worker *w = &ex->w[i].w;
    if (!w->dev->async) break;
    if (w->dev->async(w->state, 1)) {
      rt_errorf("stage %d: cannot hand over on the device", w->stage);
      return 1;
    }
    w->dev_async = 1;
  }
  if (rt_env_on("PIPERT_VERBOSE") && !p->stages[0].stage->device) {
    fprintf(stderr, "pipeline: %d stage replica%s on host threads\n", ex->nworkers, ex->nworkers == 1 ? "" : "s");
  } else if (rt_env_on("PIPERT_VERBOSE")) { /* where the stages run and how they hand over */
    int nd = 0, seen[64];
    for (int i = 0; i < ex->nworkers; i++) {
      const pipert_device_ops *di = p->stages[ex->w[i].w.stage].stage->device;
      int o = di && ex->w[i].w.state ? di->ordinal(ex->w[i].w.state) : -1, k = 0;
      while (k < nd && seen[k] != o) k++;
      if (k == nd && nd < 64) seen[nd++] = o;
    }
    int replicated = 0;
    for (int s = 0; s < S; s++) replicated |= p->stages[s].replicas > 1;
    const pipert_device_ops *d0 = ex->nworkers ? ex->w[0].w.dev : NULL;
    fprintf(stderr, "pipeline: %d stage replica%s on %d device%s; sets between stages in %s memory%s%s\n", ex->nworkers,
            ex->nworkers == 1 ? "" : "s", nd, nd == 1 ? "" : "s", dev ? "device" : "host",
            dev ? (ex->nworkers && ex->w[0].w.dev_async ? ", handed over on the device" : ", handed over synchronously")
                : "",
            !p->training || !replicated             ? ""
            : d0 && d0->param_sum && d0->param_copy ? "; replicas' gradients summed in device memory"
                                                    : "; replicas' gradients summed in host memory");
  }
  return 0;
}

void rt_threads_set_period(rt_exec *ex, int64_t period) { ex->period = period; }

int rt_threads_on_device(const rt_exec *ex) {
  for (int i = 0; ex && i < ex->nworkers; i++)
    if (ex->w[i].w.dev) return 1;
  return 0;
}

/* Device mode, inference: page-lock the graph input arrays the uploads read (once; a
 * bench repeats runs over the same arrays, which live until rt_threads_destroy).
 * Unpinned memory is first copied through a staging buffer: a batch of 32 ResNet-50
 * images is 19 MB. Training steps hand in arrays that change, so they stay unpinned. */
static void unpin_inputs(rt_exec *ex) {
  for (int i = 0; ex->pinned && i < ex->p->n_inputs; i++)
    if (ex->pinned[i]) ex->w[0].w.dev->pin(ex->w[0].w.state, ex->pinned[i], ex->pinned_n[i], 0);
  free(ex->pinned);
  free(ex->pinned_n);
  ex->pinned = NULL;
  ex->pinned_n = NULL;
}

static void pin_inputs(rt_exec *ex, const rt_array *in) {
  const pipert_device_ops *dev = ex->nworkers ? ex->w[0].w.dev : NULL;
  if (!dev || !dev->pin || ex->p->training || rt_env_on("PIPERT_NO_PIN")) return;
  int n = ex->p->n_inputs;
  if (!ex->pinned) {
    ex->pinned = calloc((size_t)n + 1, sizeof(void *));
    ex->pinned_n = calloc((size_t)n + 1, sizeof(size_t));
  }
  for (int i = 0; i < n; i++) {
    if (ex->pinned[i] == in[i].data && ex->pinned_n[i] == in[i].nbytes) continue;
    if (ex->pinned[i]) dev->pin(ex->w[0].w.state, ex->pinned[i], ex->pinned_n[i], 0);
    ex->pinned[i] = NULL;
    if (in[i].data && in[i].nbytes && !dev->pin(ex->w[0].w.state, in[i].data, in[i].nbytes, 1)) {
      ex->pinned[i] = in[i].data;
      ex->pinned_n[i] = in[i].nbytes;
    }
  }
}

/* Forgets the streaming batches' bookkeeping (see struct rt_exec). */
static void drop_batches(rt_exec *ex) {
  free(ex->batch_left);
  free(ex->batch_done);
  ex->batch_left = NULL;
  ex->batch_done = NULL;
  ex->nbatch = 0;
}

/* The stall watchdog: a worker in a call that only its own stage's work ends (a forward,
 * an output's download, the device wait at the end; rt_worker_working) for longer than
 * PIPERT_STALL_S seconds (rt_stall_limit) fails the run, naming the oldest such call: a
 * GPU kernel that never finishes would otherwise hang the process (in one process no
 * NCCL timeout bounds the waits). */
static void stall_check(rt_exec *ex, int started, double now, double stall_s) {
  long long oldest = 0;
  int at = -1, n_stalled = 0;
  for (int i = 0; i < started; i++) {
    long long t = rt_worker_stalled(&ex->w[i].w, now, stall_s);
    if (!t) continue;
    n_stalled++;
    if (at < 0 || t < oldest) {
      oldest = t;
      at = i;
    }
  }
  if (at < 0) return;
  rt_worker *w = &ex->w[at].w;
  char where[96], what[96], also[256] = "";
  /* the others stalled: with the hand-over on the devices, the stage whose kernel hangs
   * need not be the first whose host thread waits */
  size_t len = 0;
  for (int i = 0, k = 0; i < started && k < 4 && n_stalled > 1; i++) {
    if (i == at || !rt_worker_stalled(&ex->w[i].w, now, stall_s)) continue;
    char o[96];
    len += (size_t)snprintf(also + len, sizeof also - len, "%s%s",
                            k++ ? ", " : "; stalled too: ", rt_worker_where(&ex->w[i].w, o, sizeof o));
    if (len >= sizeof also) break;
  }
  fail(ex, 1, "%s: %s has not returned in %.0f s (PIPERT_STALL_S%s): a device that hangs?%s",
       rt_worker_where(w, where, sizeof where), rt_worker_stall_what(w, what, sizeof what), now - oldest * 1e-6, also,
       w->dev_async ? " (stages hand over on the devices, so it may be a stage's this one waits for: "
                      "PIPERT_SYNC_SETS=1 names it)"
                    : "");
}

int rt_threads_run(rt_exec *ex, const rt_array *in, rt_array *out, int64_t T, rt_stats *st) {
  const pipert_pipeline *p = ex->p;
  int S = p->n_stages;
  if (p->training && T != ex->M) {
    rt_errorf("internal error: a training run is one step of %d micro-batches, not %lld", ex->M, (long long)T);
    return 1;
  }
  ex->in = in;
  ex->out = out;
  ex->T = T;
  pin_inputs(ex, in);
  if (ex->period <= 0 || ex->period > T) ex->period = T;
  drop_batches(ex);
  if (ex->period < T && p->n_outputs) {
    ex->nbatch = (T + ex->period - 1) / ex->period;
    ex->batch_left = calloc((size_t)ex->nbatch, sizeof *ex->batch_left);
    ex->batch_done = calloc((size_t)ex->nbatch, sizeof *ex->batch_done);
    if (!ex->batch_left || !ex->batch_done) drop_batches(ex); /* no steady-state figure, nothing else lost */
    for (int64_t b = 0; b < ex->nbatch; b++) {
      int64_t mbs = T - b * ex->period < ex->period ? T - b * ex->period : ex->period;
      atomic_init(&ex->batch_left[b], (long long)(mbs * p->n_outputs));
    }
  }
  atomic_store(&ex->abort, 0);
  ex->done = ex->failed_rc = ex->bar_count = 0;
  for (int i = 0; i < S * S; i++) {
    if (ex->box[i]) box_reset(ex->box[i]);
    if (ex->gbox[i]) box_reset(ex->gbox[i]);
  }
  for (int i = 0; i < ex->nworkers; i++) rt_worker_reset(&ex->w[i].w);
  double t0 = rt_now();
  int started = 0;
  for (; started < ex->nworkers; started++)
    if (pthread_create(&ex->w[started].th, NULL, worker_main, &ex->w[started]) != 0) {
      fail(ex, 1, "cannot start worker thread %d", started);
      break;
    }
  /* Wait for the workers; after a failure (or --timeout) give them a few
   * seconds to notice, then leave without them rather than hang. */
  double abort_at = 0, deadline = ex->o->timeout_s > 0 ? t0 + ex->o->timeout_s : 0;
  double stall_s = ex->nworkers ? rt_stall_limit(&ex->w[0].w) : 0;
  pthread_mutex_lock(&ex->mu);
  while (ex->done < started) {
    timed_wait(&ex->cv, &ex->mu);
    double now = rt_now();
    if (stall_s > 0 && !ex->failed_rc) {
      pthread_mutex_unlock(&ex->mu);
      stall_check(ex, started, now, stall_s);
      pthread_mutex_lock(&ex->mu);
    }
    if (deadline && now > deadline && !ex->failed_rc) {
      pthread_mutex_unlock(&ex->mu);
      fail(ex, 1, "timed out after %.1f s (--timeout)", ex->o->timeout_s);
      pthread_mutex_lock(&ex->mu);
    }
    if (aborted(ex) && !abort_at) abort_at = now;
    if (abort_at && now - abort_at > 3.0) {
      rt_errorf("stopping: a stage worker did not stop within 3 s (stuck in forward?)");
      fflush(NULL);
      _exit(1);
    }
  }
  pthread_mutex_unlock(&ex->mu);
  for (int i = 0; i < started; i++) pthread_join(ex->w[i].th, NULL);
  st->wall_s = rt_now() - t0;
  /* the steady state: from the first batch's completion to the last's (the fill excluded) */
  st->steady_s = 0;
  st->steady_batches = 0;
  if (ex->nbatch >= 2 && !ex->failed_rc) {
    double last = 0;
    for (int64_t b = 0; b < ex->nbatch; b++)
      if (ex->batch_done[b] > last) last = ex->batch_done[b];
    st->steady_s = last - ex->batch_done[0];
    st->steady_batches = (int)(ex->nbatch - 1);
  }
  for (int s = 0; s < S; s++) {
    st->busy_s[s] = 0;
    if (st->cpu_s) st->cpu_s[s] = 0;
    if (st->peak_bytes) st->peak_bytes[s] = 0;
    if (st->peak_sets) st->peak_sets[s] = 0;
  }
  for (int i = 0; i < ex->nworkers; i++) {
    rt_worker *w = &ex->w[i].w;
    st->busy_s[w->stage] += w->busy;
    if (st->cpu_s) st->cpu_s[w->stage] += w->cpu;
    size_t b = (size_t)w->fpool.n * w->fpool.set_bytes + (size_t)w->gpool.n * w->gpool.set_bytes;
    if (st->peak_bytes && b > st->peak_bytes[w->stage]) st->peak_bytes[w->stage] = b;
    if (st->peak_sets && w->peak_inflight > st->peak_sets[w->stage]) st->peak_sets[w->stage] = w->peak_inflight;
  }
  return ex->failed_rc;
}

rt_worker *rt_threads_worker(rt_exec *ex, int stage, int replica) {
  for (int i = 0; i < ex->nworkers; i++)
    if (ex->w[i].w.stage == stage && ex->w[i].w.replica == replica) return &ex->w[i].w;
  return NULL;
}

void *rt_threads_state(rt_exec *ex, int stage, int replica) {
  rt_tworker *w = worker_of(ex, stage, replica);
  return w ? w->w.state : NULL;
}

void rt_threads_destroy(rt_exec *ex) {
  const pipert_pipeline *p = ex->p;
  int S = p->n_stages;
  unpin_inputs(ex);
  for (int i = 0; ex->w && i < ex->nworkers; i++) {
    rt_worker *w = &ex->w[i].w;
    const pipert_stage_desc *d = p->stages[w->stage].stage;
    rt_worker_free(w); /* sets (device memory in device mode) go before the stage's state */
    rt_fakedev_detach(p, w->stage, w->state);
    if (w->state && d->fini) d->fini(w->state);
  }
  for (int i = 0; i < S * S; i++) {
    box_free(ex->box[i]);
    box_free(ex->gbox[i]);
  }
  rt_topo_free(ex->topo, S);
  for (int s = 0; s < S; s++) {
    rt_weights_unload(&ex->weights[s]);
    free(ex->prog_owned[s]);
    pthread_mutex_destroy(&ex->rbar[s].mu);
    pthread_cond_destroy(&ex->rbar[s].cv);
  }
  free(ex->w);
  free(ex->weights);
  free(ex->prog);
  drop_batches(ex);
  free(ex->prog_len);
  free(ex->prog_owned);
  free(ex->topo);
  free(ex->box);
  free(ex->gbox);
  free(ex->rbar);
  pthread_mutex_destroy(&ex->mu);
  pthread_cond_destroy(&ex->cv);
  free(ex);
}

/* ---- the training backend ------------------------------------------------- */

static int tb_run(void *impl, const rt_array *in, rt_array *out, rt_stats *st) {
  rt_exec *ex = impl;
  return rt_threads_run(ex, in, out, ex->M, st);
}

static int tb_param_io(void *impl, int stage, int replica, const pipert_param_desc *pd, int write, void *buf) {
  rt_exec *ex = impl;
  return ex->p->stages[stage].stage->param_io(rt_threads_state(ex, stage, replica), write, pd->offset, buf, pd->nbytes);
}

static int64_t tb_bcast(void *impl, int64_t v) {
  (void)impl;
  return v;
}

static int tb_vrange(void *impl, int stage, int64_t *first, int64_t *end) {
  return rt_async_kept(rt_threads_worker(impl, stage, 0), first, end);
}

static int tb_vio(void *impl, int stage, int64_t v, int mom, int write, void *buf, size_t nbytes) {
  return rt_async_io(rt_threads_worker(impl, stage, 0), v, mom, write, buf, nbytes);
}

static int64_t tb_vmissing(void *impl, int stage) { return rt_async_missing(rt_threads_worker(impl, stage, 0)); }

int rt_threads_backend(const pipert_pipeline *p, const rt_options *o, int M, rt_backend *be) {
  rt_exec *ex = NULL;
  int rc = rt_threads_create(p, o, M, &ex);
  *be = (rt_backend){ex, 0, tb_run, tb_param_io, tb_bcast, tb_vrange, tb_vio, tb_vmissing};
  return rc;
}

void rt_threads_backend_free(rt_backend *be) {
  if (be->impl) rt_threads_destroy(be->impl);
  be->impl = NULL;
}
