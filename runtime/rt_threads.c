/* The in-process transport: one worker thread per stage replica, bounded
 * mailboxes between stages, output buffers from per-worker pools.
 *
 * A worker runs its stage's instruction stream (pipert.h). Forward outputs of a
 * micro-batch form one "set" from the worker's forward pool; the set goes to every
 * later stage that reads it (one mailbox per producer/consumer pair) and, in a
 * training program, stays with the worker until its own backward of that micro-batch
 * when the backward reads it (the stash). Backward outputs (gradients for earlier
 * stages) travel the same way through mailboxes in the other direction. Sets are
 * reference counted and go back to their pool when the last reader is done; pools
 * grow on demand up to a cap, so the sets a pool allocated measure the stage's peak
 * activation memory under the schedule.
 *
 * Deadlock freedom: every worker handles its micro-batches in increasing order per
 * opcode; a mailbox (producer stage j -> consumer stage i) accepts micro-batch m only
 * when m < low + cap, low being the smallest micro-batch the consumer side has not
 * taken yet, so the smallest unfinished micro-batch can always move (training rounds
 * use cap = M: a send never waits within a step). All waits are timed and check the
 * abort flag, so a failure stops everyone. */
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

#define BOX_CAP 2      /* micro-batches in flight on one edge (inference) */
#define POOL_EXTRA 2   /* sets per pool beyond the mailbox capacity */
#define WAIT_MS 20

typedef struct rt_pool rt_pool;

typedef struct rt_set {
  struct rt_set *next;
  rt_pool *pool;
  atomic_int refs;
  void **bufs;         /* one per output */
  void *mem;
} rt_set;

struct rt_pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rt_set *free;
  rt_set **all;        /* allocated so far (at most cap) */
  int n, cap;
  int n_bufs;
  const pipert_tensor_desc *descs;
  size_t set_bytes;
};

typedef struct rt_box {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int cap;
  int64_t low;                 /* smallest micro-batch not taken yet */
  int64_t *mb;                 /* [cap] micro-batch held by the slot */
  int *state;                  /* [cap] 0 empty, 1 full, 2 taken (waits for low to pass) */
  rt_set **set;                /* [cap] */
} rt_box;

typedef struct rt_worker {
  rt_exec *ex;
  int stage, replica, index;
  pthread_t th;
  void *state;
  rt_pool fpool, gpool;        /* forward / backward output sets */
  double busy;
  rt_set **recv;               /* [M][nfp]: forward sets of producers */
  rt_set **grecv;              /* [M][ngp]: backward sets of later stages */
  rt_set **outs, **gouts;      /* [M]: own forward / backward sets */
  const void **in, **bin;      /* forward() / backward() in[] */
} rt_worker;

typedef struct rt_topo {       /* per stage, from input_src and bwd_input_src */
  int nfp, *fp;                /* producers of forward outputs it reads (stages != itself) */
  char *fp_bwd;                /* [nfp] its backward reads that producer's outputs */
  int own_bwd;                 /* its backward reads its own forward outputs */
  int nfc;                     /* stages reading its forward outputs */
  int ngp, *gp;                /* stages whose backward outputs its backward reads */
  int ngc;                     /* stages reading its backward outputs */
  int has[PIPERT_OP_STEP + 1]; /* the program has this opcode */
} rt_topo;

typedef struct rt_rbar {       /* the replicas of one stage */
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
  rt_worker *w;
  rt_weights *weights;             /* per stage */
  const pipert_instr **prog;       /* per stage */
  int *prog_len;
  pipert_instr **prog_owned;
  rt_topo *topo;
  rt_box **box, **gbox;            /* box[j * S + i]: forward j -> i; gbox[t * S + s]: backward t -> s */
  rt_rbar *rbar;                   /* per stage */
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
  int64_t period;                 /* data slots (micro-batches) in in[]/out[]; 0: T */
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
  if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  pthread_cond_timedwait(cv, mu, &ts);
}

static int aborted(rt_exec *ex) { return atomic_load_explicit(&ex->abort, memory_order_acquire); }

/* First failure wins: prints its message and stops everyone. */
static void fail(rt_exec *ex, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(rt_exec *ex, int rc, const char *fmt, ...) {
  pthread_mutex_lock(&ex->mu);
  if (!ex->failed_rc) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    rt_errorf("%s", buf);
    ex->failed_rc = rc;
  }
  atomic_store_explicit(&ex->abort, 1, memory_order_release);
  pthread_cond_broadcast(&ex->cv);
  pthread_mutex_unlock(&ex->mu);
}

/* "stage 1" or "stage 1 (replica 2)" */
static const char *who(const rt_worker *w, char *buf, size_t n) {
  if (w->ex->p->stages[w->stage].replicas > 1) snprintf(buf, n, "stage %d (replica %d)", w->stage, w->replica);
  else snprintf(buf, n, "stage %d", w->stage);
  return buf;
}

/* ---- pools and mailboxes -------------------------------------------------- */

static void pool_init(rt_pool *pl, int n_bufs, const pipert_tensor_desc *descs, int cap) {
  memset(pl, 0, sizeof *pl);
  pthread_mutex_init(&pl->mu, NULL);
  cond_init(&pl->cv);
  pl->n_bufs = n_bufs;
  pl->descs = descs;
  pl->cap = cap;
  pl->all = calloc((size_t)cap + 1, sizeof *pl->all);
  for (int k = 0; k < n_bufs; k++) pl->set_bytes += (descs[k].nbytes + 63) / 64 * 64;
}

static rt_set *pool_get(rt_exec *ex, rt_pool *pl) {
  pthread_mutex_lock(&pl->mu);
  while (!pl->free && pl->n == pl->cap && !aborted(ex)) timed_wait(&pl->cv, &pl->mu);
  rt_set *s = NULL;
  if (pl->free) {
    s = pl->free;
    pl->free = s->next;
  } else if (pl->n < pl->cap) { /* grow: the pool's size is the schedule's peak */
    s = calloc(1, sizeof *s);
    s->pool = pl;
    s->bufs = calloc((size_t)pl->n_bufs + 1, sizeof(void *));
    char *mem = s->mem = rt_aligned_alloc(pl->set_bytes);
    for (int k = 0; k < pl->n_bufs; k++) {
      s->bufs[k] = mem;
      mem += (pl->descs[k].nbytes + 63) / 64 * 64;
    }
    pl->all[pl->n++] = s;
  }
  pthread_mutex_unlock(&pl->mu);
  return s;
}

static void set_release(rt_set *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  rt_pool *pl = s->pool;
  pthread_mutex_lock(&pl->mu);
  s->next = pl->free;
  pl->free = s;
  pthread_cond_signal(&pl->cv);
  pthread_mutex_unlock(&pl->mu);
}

static void pool_reset(rt_pool *pl) {
  pl->free = NULL;
  for (int i = 0; i < pl->n; i++) {
    pl->all[i]->next = pl->free;
    pl->free = pl->all[i];
  }
}

static void pool_free(rt_pool *pl) {
  for (int i = 0; i < pl->n; i++) {
    free(pl->all[i]->mem);
    free(pl->all[i]->bufs);
    free(pl->all[i]);
  }
  free(pl->all);
  pthread_mutex_destroy(&pl->mu);
  pthread_cond_destroy(&pl->cv);
}

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
  for (int k = 0; k < b->cap; k++) { b->mb[k] = -1; b->state[k] = 0; b->set[k] = NULL; }
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

/* ---- the worker ----------------------------------------------------------- */

static int slot_of(const int *v, int n, int x) {
  for (int k = 0; k < n; k++) if (v[k] == x) return k;
  return -1;
}

static rt_worker *worker_of(rt_exec *ex, int s, int r) {
  for (int i = 0; i < ex->nworkers; i++)
    if (ex->w[i].stage == s && ex->w[i].replica == r) return &ex->w[i];
  return NULL;
}

/* Sum the GRAD params over the stage's replicas, in replica order, into every replica. */
static int allreduce(rt_worker *w) {
  rt_exec *ex = w->ex;
  const pipert_stage_desc *d = ex->p->stages[w->stage].stage;
  int R = ex->p->stages[w->stage].replicas, rc = 0;
  if (R < 2) return 0;
  if (replica_barrier(ex, w->stage)) return -1;
  if (w->replica == 0) {
    for (int k = 0; k < d->n_params && !rc; k++) {
      const pipert_param_desc *pd = &d->params[k];
      if (pd->kind != PIPERT_PARAM_GRAD) continue;
      void *acc = rt_aligned_alloc(pd->nbytes), *tmp = rt_aligned_alloc(pd->nbytes);
      rc |= d->param_io(w->state, 0, pd->offset, acc, pd->nbytes);
      for (int r = 1; r < R && !rc; r++) {
        rc |= d->param_io(worker_of(ex, w->stage, r)->state, 0, pd->offset, tmp, pd->nbytes);
        if (pd->dtype == PIPERT_DOUBLE)
          for (size_t i = 0; i < pd->nbytes / 8; i++) ((double *)acc)[i] += ((const double *)tmp)[i];
        else
          for (size_t i = 0; i < pd->nbytes / 4; i++) ((float *)acc)[i] += ((const float *)tmp)[i];
      }
      for (int r = 0; r < R && !rc; r++) rc |= d->param_io(worker_of(ex, w->stage, r)->state, 1, pd->offset, acc, pd->nbytes);
      free(acc);
      free(tmp);
    }
    if (rc) fail(ex, 1, "stage %d: all-reduce of the gradients failed", w->stage);
  }
  return replica_barrier(ex, w->stage) || rc ? -1 : 0;
}

static int recv_act(rt_worker *w, int mb, int64_t g) {
  rt_exec *ex = w->ex;
  const rt_topo *t = &ex->topo[w->stage];
  rt_set **recv = &w->recv[(size_t)mb * (size_t)(t->nfp + 1)];
  for (int k = 0; k < t->nfp; k++)
    if (!recv[k] && !(recv[k] = box_take(ex, ex->box[t->fp[k] * ex->p->n_stages + w->stage], g))) return -1;
  return 0;
}

static int recv_grad(rt_worker *w, int mb, int64_t g) {
  rt_exec *ex = w->ex;
  const rt_topo *t = &ex->topo[w->stage];
  rt_set **grecv = &w->grecv[(size_t)mb * (size_t)(t->ngp + 1)];
  for (int k = 0; k < t->ngp; k++)
    if (!grecv[k] && !(grecv[k] = box_take(ex, ex->gbox[t->gp[k] * ex->p->n_stages + w->stage], g))) return -1;
  return 0;
}

/* Hands set o of micro-batch g to the stages that read it: boxes[s * S + c] for c in
 * [lo, hi); keep: one more reference stays with the worker. */
static int send_set(rt_worker *w, rt_set *o, int64_t g, rt_box **boxes, int lo, int hi, int readers, int keep) {
  rt_exec *ex = w->ex;
  int S = ex->p->n_stages;
  atomic_store(&o->refs, readers + keep > 0 ? readers + keep : 1);
  if (readers + keep == 0) set_release(o);
  for (int c = lo; c < hi; c++) {
    rt_box *b = boxes[w->stage * S + c];
    if (b && box_put(ex, b, g, o)) return -1;
  }
  return 0;
}

static const void *graph_input(rt_exec *ex, int idx, int64_t g) {
  return (const char *)ex->in[idx].data + (size_t)(g % ex->period) * ex->p->inputs[idx].nbytes;
}

static int do_fwd(rt_worker *w, int mb, int64_t g) {
  rt_exec *ex = w->ex;
  const pipert_pipeline *p = ex->p;
  const pipert_stage_plan *sp = &p->stages[w->stage];
  const pipert_stage_desc *d = sp->stage;
  const rt_topo *t = &ex->topo[w->stage];
  char nm[64];
  if (recv_act(w, mb, g)) return -1;
  rt_set **recv = &w->recv[(size_t)mb * (size_t)(t->nfp + 1)];
  for (int k = 0; k < d->n_inputs; k++) {
    pipert_ref src = sp->input_src[k];
    w->in[k] = src.stage == PIPERT_GRAPH_INPUT ? graph_input(ex, src.index, g)
                                               : recv[slot_of(t->fp, t->nfp, src.stage)]->bufs[src.index];
  }
  rt_set *o = pool_get(ex, &w->fpool);
  if (!o) return -1;
  double t0 = rt_now();
  int rc = d->forward(w->state, w->in, o->bufs);
  w->busy += rt_now() - t0;
  for (int k = 0; k < t->nfp; k++)
    if (!p->training || !t->fp_bwd[k]) {
      set_release(recv[k]);
      recv[k] = NULL;
    }
  if (rc != 0) {
    atomic_store(&o->refs, 1);
    set_release(o);
    fail(ex, 1, "%s: forward failed on micro-batch %lld (status %d)", who(w, nm, sizeof nm), (long long)g, rc);
    return -1;
  }
  for (int q = 0; q < p->n_outputs; q++)
    if (p->output_src[q].stage == w->stage)
      memcpy((char *)ex->out[q].data + (size_t)(g % ex->period) * p->outputs[q].nbytes, o->bufs[p->output_src[q].index],
             p->outputs[q].nbytes);
  w->outs[mb] = o;
  if (!t->has[PIPERT_OP_SEND_ACT]) { /* a stream without sends: hand on at once */
    w->outs[mb] = p->training && t->own_bwd ? o : NULL;
    return send_set(w, o, g, ex->box, w->stage + 1, p->n_stages, t->nfc, p->training && t->own_bwd);
  }
  return 0;
}

static int do_send_act(rt_worker *w, int mb, int64_t g) {
  rt_exec *ex = w->ex;
  const rt_topo *t = &ex->topo[w->stage];
  rt_set *o = w->outs[mb];
  if (!o) {
    fail(ex, 1, "internal error: stage %d: SEND_ACT %lld before FWD", w->stage, (long long)g);
    return -1;
  }
  int keep = ex->p->training && t->own_bwd;
  if (!keep) w->outs[mb] = NULL;
  return send_set(w, o, g, ex->box, w->stage + 1, ex->p->n_stages, t->nfc, keep);
}

static int do_bwd(rt_worker *w, int mb, int64_t g) {
  rt_exec *ex = w->ex;
  const pipert_pipeline *p = ex->p;
  const pipert_stage_plan *sp = &p->stages[w->stage];
  const pipert_stage_desc *d = sp->stage;
  const rt_topo *t = &ex->topo[w->stage];
  char nm[64];
  if (recv_grad(w, mb, g)) return -1;
  rt_set **recv = &w->recv[(size_t)mb * (size_t)(t->nfp + 1)];
  rt_set **grecv = &w->grecv[(size_t)mb * (size_t)(t->ngp + 1)];
  rt_set *own = w->outs[mb];
  for (int k = 0; k < d->n_bwd_inputs; k++) {
    pipert_ref src = sp->bwd_input_src[k];
    rt_set *from = NULL;
    if (src.stage == PIPERT_GRAPH_INPUT) {
      w->bin[k] = graph_input(ex, src.index, g);
      continue;
    }
    if (src.phase) from = grecv[slot_of(t->gp, t->ngp, src.stage)];
    else if (src.stage == w->stage) from = own;
    else from = recv[slot_of(t->fp, t->nfp, src.stage)];
    if (!from) {
      fail(ex, 1, "internal error: %s: BWD %lld before its FWD", who(w, nm, sizeof nm), (long long)g);
      return -1;
    }
    w->bin[k] = from->bufs[src.index];
  }
  rt_set *o = pool_get(ex, &w->gpool);
  if (!o) return -1;
  double t0 = rt_now();
  int rc = d->backward(w->state, w->bin, o->bufs);
  w->busy += rt_now() - t0;
  for (int k = 0; k < t->ngp; k++) {
    set_release(grecv[k]);
    grecv[k] = NULL;
  }
  for (int k = 0; k < t->nfp; k++)
    if (recv[k]) {
      set_release(recv[k]);
      recv[k] = NULL;
    }
  if (own && t->own_bwd) {
    set_release(own);
    w->outs[mb] = NULL;
  }
  if (rc != 0) {
    atomic_store(&o->refs, 1);
    set_release(o);
    fail(ex, 1, "%s: backward failed on micro-batch %lld (status %d)", who(w, nm, sizeof nm), (long long)g, rc);
    return -1;
  }
  w->gouts[mb] = o;
  if (!t->has[PIPERT_OP_SEND_GRAD]) {
    w->gouts[mb] = NULL;
    return send_set(w, o, g, ex->gbox, 0, w->stage, t->ngc, 0);
  }
  return 0;
}

static int do_send_grad(rt_worker *w, int mb, int64_t g) {
  rt_exec *ex = w->ex;
  rt_set *o = w->gouts[mb];
  if (!o) {
    fail(ex, 1, "internal error: stage %d: SEND_GRAD %lld before BWD", w->stage, (long long)g);
    return -1;
  }
  w->gouts[mb] = NULL;
  return send_set(w, o, g, ex->gbox, 0, w->stage, ex->topo[w->stage].ngc, 0);
}

static int worker_run(rt_worker *w) {
  rt_exec *ex = w->ex;
  const pipert_pipeline *p = ex->p;
  const pipert_stage_plan *sp = &p->stages[w->stage];
  const pipert_stage_desc *d = sp->stage;
  int s = w->stage, R = sp->replicas, M = ex->M;
  char nm[64];
  int64_t rounds = (ex->T + M - 1) / M;
  for (int64_t r = 0; r < rounds; r++) {
    int64_t base = r * M;
    if (p->training && d->zero_grads(w->state)) {
      fail(ex, 1, "%s: clearing the gradients failed", who(w, nm, sizeof nm));
      return -1;
    }
    for (int i = 0; i < ex->prog_len[s]; i++) {
      pipert_instr ins = ex->prog[s][i];
      int64_t g = base + ins.mb;
      int rc = 0;
      if (ins.op == PIPERT_OP_ALLREDUCE) {
        rc = allreduce(w);
      } else if (ins.op == PIPERT_OP_STEP) {
        double t0 = rt_now();
        int st = d->step(w->state);
        w->busy += rt_now() - t0;
        if (st) fail(ex, 1, "%s: optimizer step failed (status %d)", who(w, nm, sizeof nm), st);
        rc = st ? -1 : 0;
      } else if (ins.op == PIPERT_OP_NOP || g >= ex->T || g % R != w->replica) {
        continue;
      } else if (ins.op == PIPERT_OP_RECV_ACT) {
        rc = recv_act(w, ins.mb, g);
      } else if (ins.op == PIPERT_OP_FWD) {
        rc = do_fwd(w, ins.mb, g);
      } else if (ins.op == PIPERT_OP_SEND_ACT) {
        rc = do_send_act(w, ins.mb, g);
      } else if (ins.op == PIPERT_OP_RECV_GRAD) {
        rc = recv_grad(w, ins.mb, g);
      } else if (ins.op == PIPERT_OP_BWD) {
        rc = do_bwd(w, ins.mb, g);
      } else if (ins.op == PIPERT_OP_SEND_GRAD) {
        rc = do_send_grad(w, ins.mb, g);
      }
      if (rc) return -1;
    }
    if (r + 1 < rounds && barrier(ex)) return -1;
  }
  return 0;
}

static void *worker_main(void *arg) {
  rt_worker *w = arg;
  rt_exec *ex = w->ex;
  rt_cur_stage = w->stage;
  if (ex->o->pin) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET((int)(w->index % (n > 0 ? n : 1)), &cs);
    pthread_setaffinity_np(pthread_self(), sizeof cs, &cs);
  }
  worker_run(w);
  pthread_mutex_lock(&ex->mu);
  ex->done++;
  pthread_cond_broadcast(&ex->cv);
  pthread_mutex_unlock(&ex->mu);
  return NULL;
}

/* ---- create / run / destroy ---------------------------------------------- */

static void add_unique(int *v, int *n, int x) {
  if (slot_of(v, *n, x) < 0) v[(*n)++] = x;
}

/* Producers, consumers and mailboxes of every stage. */
static void build_topology(rt_exec *ex) {
  const pipert_pipeline *p = ex->p;
  int S = p->n_stages, cap = p->training ? ex->M : BOX_CAP;
  for (int s = 0; s < S; s++) {
    const pipert_stage_plan *sp = &p->stages[s];
    const pipert_stage_desc *d = sp->stage;
    rt_topo *t = &ex->topo[s];
    int nb = p->training ? d->n_bwd_inputs : 0;
    t->fp = calloc((size_t)(d->n_inputs + nb) + 1, sizeof(int));
    t->fp_bwd = calloc((size_t)(d->n_inputs + nb) + 1, 1);
    t->gp = calloc((size_t)nb + 1, sizeof(int));
    for (int k = 0; k < d->n_inputs; k++)
      if (sp->input_src[k].stage >= 0) add_unique(t->fp, &t->nfp, sp->input_src[k].stage);
    for (int k = 0; k < nb; k++) {
      pipert_ref r = sp->bwd_input_src[k];
      if (r.stage < 0) continue;
      if (r.phase) add_unique(t->gp, &t->ngp, r.stage);
      else if (r.stage == s) t->own_bwd = 1;
      else {
        add_unique(t->fp, &t->nfp, r.stage);
        t->fp_bwd[slot_of(t->fp, t->nfp, r.stage)] = 1;
      }
    }
    for (int i = 0; i < ex->prog_len[s]; i++)
      if (ex->prog[s][i].op >= 0 && ex->prog[s][i].op <= PIPERT_OP_STEP) t->has[ex->prog[s][i].op] = 1;
  }
  for (int s = 0; s < S; s++) {
    rt_topo *t = &ex->topo[s];
    for (int k = 0; k < t->nfp; k++) {
      ex->topo[t->fp[k]].nfc++;
      ex->box[t->fp[k] * S + s] = box_new(cap);
    }
    for (int k = 0; k < t->ngp; k++) {
      ex->topo[t->gp[k]].ngc++;
      ex->gbox[t->gp[k] * S + s] = box_new(cap);
    }
  }
}

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
  build_topology(ex);
  /* Weights: all stages checked before any init. */
  char err[1024];
  for (int s = 0; s < S; s++)
    if (rt_weights_load(p->stages[s].stage, o->weights_dir, &ex->weights[s], err, sizeof err)) {
      rt_errorf("%s", err);
      return 2;
    }
  /* a training stage holds every micro-batch of a step at most (GPipe); inference a few */
  int cap = p->training ? M + BOX_CAP + POOL_EXTRA : BOX_CAP + POOL_EXTRA;
  ex->w = calloc((size_t)ex->nworkers, sizeof *ex->w);
  int wi = 0;
  for (int s = 0; s < S; s++) {
    const pipert_stage_desc *d = p->stages[s].stage;
    const rt_topo *t = &ex->topo[s];
    for (int r = 0; r < p->stages[s].replicas; r++, wi++) {
      rt_worker *w = &ex->w[wi];
      w->ex = ex;
      w->stage = s;
      w->replica = r;
      w->index = wi;
      pool_init(&w->fpool, d->n_outputs, d->outputs, cap);
      pool_init(&w->gpool, p->training ? d->n_bwd_outputs : 0, d->bwd_outputs, cap);
      w->recv = calloc((size_t)M * (size_t)(t->nfp + 1), sizeof(rt_set *));
      w->grecv = calloc((size_t)M * (size_t)(t->ngp + 1), sizeof(rt_set *));
      w->outs = calloc((size_t)M, sizeof(rt_set *));
      w->gouts = calloc((size_t)M, sizeof(rt_set *));
      w->in = calloc((size_t)d->n_inputs + 1, sizeof(void *));
      w->bin = calloc((size_t)(p->training ? d->n_bwd_inputs : 0) + 1, sizeof(void *));
      if (d->init) {
        rt_cur_stage = s;
        int rc = d->init(&w->state, ex->weights[s].map, ex->weights[s].len);
        rt_cur_stage = -1;
        if (rc) {
          rt_errorf("stage %d: init failed (status %d)", s, rc);
          return 1;
        }
      }
    }
  }
  return 0;
}

void rt_threads_set_period(rt_exec *ex, int64_t period) { ex->period = period; }

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
  if (ex->period <= 0 || ex->period > T) ex->period = T;
  atomic_store(&ex->abort, 0);
  ex->done = ex->failed_rc = ex->bar_count = 0;
  for (int i = 0; i < S * S; i++) {
    if (ex->box[i]) box_reset(ex->box[i]);
    if (ex->gbox[i]) box_reset(ex->gbox[i]);
  }
  for (int i = 0; i < ex->nworkers; i++) {
    rt_worker *w = &ex->w[i];
    const rt_topo *t = &ex->topo[w->stage];
    w->busy = 0;
    pool_reset(&w->fpool);
    pool_reset(&w->gpool);
    memset(w->outs, 0, sizeof(rt_set *) * (size_t)ex->M);
    memset(w->gouts, 0, sizeof(rt_set *) * (size_t)ex->M);
    memset(w->recv, 0, sizeof(rt_set *) * (size_t)ex->M * (size_t)(t->nfp + 1));
    memset(w->grecv, 0, sizeof(rt_set *) * (size_t)ex->M * (size_t)(t->ngp + 1));
  }
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
  pthread_mutex_lock(&ex->mu);
  while (ex->done < started) {
    timed_wait(&ex->cv, &ex->mu);
    double now = rt_now();
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
  for (int s = 0; s < S; s++) {
    st->busy_s[s] = 0;
    if (st->peak_bytes) st->peak_bytes[s] = 0;
    if (st->peak_sets) st->peak_sets[s] = 0;
  }
  for (int i = 0; i < ex->nworkers; i++) {
    rt_worker *w = &ex->w[i];
    st->busy_s[w->stage] += w->busy;
    size_t b = (size_t)w->fpool.n * w->fpool.set_bytes + (size_t)w->gpool.n * w->gpool.set_bytes;
    if (st->peak_bytes && b > st->peak_bytes[w->stage]) st->peak_bytes[w->stage] = b;
    if (st->peak_sets && w->fpool.n > st->peak_sets[w->stage]) st->peak_sets[w->stage] = w->fpool.n;
  }
  return ex->failed_rc;
}

void *rt_threads_state(rt_exec *ex, int stage, int replica) {
  rt_worker *w = worker_of(ex, stage, replica);
  return w ? w->state : NULL;
}

void rt_threads_destroy(rt_exec *ex) {
  const pipert_pipeline *p = ex->p;
  int S = p->n_stages;
  for (int i = 0; ex->w && i < ex->nworkers; i++) {
    rt_worker *w = &ex->w[i];
    const pipert_stage_desc *d = p->stages[w->stage].stage;
    if (w->state && d->fini) d->fini(w->state);
    if (w->fpool.all) pool_free(&w->fpool);
    if (w->gpool.all) pool_free(&w->gpool);
    free(w->recv);
    free(w->grecv);
    free(w->outs);
    free(w->gouts);
    free(w->in);
    free(w->bin);
  }
  for (int i = 0; i < S * S; i++) {
    box_free(ex->box[i]);
    box_free(ex->gbox[i]);
  }
  for (int s = 0; s < S; s++) {
    rt_weights_unload(&ex->weights[s]);
    free(ex->prog_owned[s]);
    free(ex->topo[s].fp);
    free(ex->topo[s].fp_bwd);
    free(ex->topo[s].gp);
    pthread_mutex_destroy(&ex->rbar[s].mu);
    pthread_cond_destroy(&ex->rbar[s].cv);
  }
  free(ex->w);
  free(ex->weights);
  free(ex->prog);
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
