/* The in-process transport: one worker thread per stage replica, bounded
 * mailboxes between stages, output buffers from per-worker pools.
 *
 * Deadlock freedom: every worker handles its micro-batches in increasing order;
 * a mailbox (producer stage j -> consumer stage i) accepts micro-batch m only
 * when m < low + cap, low being the smallest micro-batch the consumer side has
 * not taken yet, so the smallest unfinished micro-batch can always move. All
 * waits are timed and check the abort flag, so a failure stops everyone. */
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

#define BOX_CAP 2      /* micro-batches in flight on one edge */
#define POOL_EXTRA 2   /* output sets per worker beyond BOX_CAP */
#define WAIT_MS 20

typedef struct rt_worker rt_worker;

typedef struct rt_set {
  struct rt_set *next;
  rt_worker *owner;
  atomic_int refs;
  void **bufs;         /* one per stage output */
  void *mem;
} rt_set;

typedef struct rt_box {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t low;                 /* smallest micro-batch not taken yet */
  int64_t mb[BOX_CAP];         /* micro-batch held by the slot */
  int state[BOX_CAP];          /* 0 empty, 1 full, 2 taken (waits for low to pass) */
  rt_set *set[BOX_CAP];
} rt_box;

struct rt_worker {
  rt_exec *ex;
  int stage, replica, index;
  pthread_t th;
  void *state;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rt_set *free;
  rt_set *sets;
  int nsets;
  double busy;
  rt_set **recv;       /* [M][n_producers] */
  rt_set **outs;       /* [M] */
  const void **in;     /* forward()'s in[] */
};

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
  int *nprod, **prod;              /* per stage: distinct producer stages */
  int *ncons;                      /* per stage: distinct consumer stages */
  rt_box **box;                    /* box[j * n_stages + i] */
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

/* ---- pools and mailboxes -------------------------------------------------- */

static rt_set *pool_get(rt_worker *w) {
  pthread_mutex_lock(&w->mu);
  while (!w->free && !aborted(w->ex)) timed_wait(&w->cv, &w->mu);
  rt_set *s = w->free;
  if (s) w->free = s->next;
  pthread_mutex_unlock(&w->mu);
  return s;
}

static void set_release(rt_set *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  rt_worker *w = s->owner;
  pthread_mutex_lock(&w->mu);
  s->next = w->free;
  w->free = s;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static int box_put(rt_exec *ex, rt_box *b, int64_t mb, rt_set *s) {
  pthread_mutex_lock(&b->mu);
  while (mb >= b->low + BOX_CAP && !aborted(ex)) timed_wait(&b->cv, &b->mu);
  int ok = !aborted(ex);
  if (ok) {
    int k = (int)(mb % BOX_CAP);
    b->mb[k] = mb;
    b->state[k] = 1;
    b->set[k] = s;
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return ok ? 0 : -1;
}

static rt_set *box_take(rt_exec *ex, rt_box *b, int64_t mb) {
  int k = (int)(mb % BOX_CAP);
  rt_set *s = NULL;
  pthread_mutex_lock(&b->mu);
  while (!(b->state[k] == 1 && b->mb[k] == mb) && !aborted(ex)) timed_wait(&b->cv, &b->mu);
  if (!aborted(ex)) {
    s = b->set[k];
    b->set[k] = NULL;
    b->state[k] = 2;
    while (b->state[b->low % BOX_CAP] == 2 && b->mb[b->low % BOX_CAP] == b->low) {
      b->state[b->low % BOX_CAP] = 0;
      b->low++;
    }
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return s;
}

static void box_reset(rt_box *b) {
  b->low = 0;
  for (int k = 0; k < BOX_CAP; k++) { b->mb[k] = -1; b->state[k] = 0; b->set[k] = NULL; }
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

/* ---- the worker ----------------------------------------------------------- */

static int prod_slot(rt_exec *ex, int s, int j) {
  for (int k = 0; k < ex->nprod[s]; k++) if (ex->prod[s][k] == j) return k;
  return -1;
}

static int worker_run(rt_worker *w) {
  rt_exec *ex = w->ex;
  const pipert_pipeline *p = ex->p;
  const pipert_stage_plan *sp = &p->stages[w->stage];
  const pipert_stage_desc *d = sp->stage;
  int s = w->stage, R = sp->replicas, np = ex->nprod[s], M = ex->M;
  int64_t rounds = (ex->T + M - 1) / M;
  for (int64_t r = 0; r < rounds; r++) {
    int64_t base = r * M;
    for (int i = 0; i < ex->prog_len[s]; i++) {
      pipert_instr ins = ex->prog[s][i];
      int64_t g = base + ins.mb;
      if (ins.op == PIPERT_OP_NOP || g >= ex->T || g % R != w->replica) continue;
      rt_set **recv = &w->recv[(size_t)ins.mb * (size_t)(np ? np : 1)];
      if (ins.op == PIPERT_OP_RECV_ACT) {
        for (int k = 0; k < np; k++) {
          rt_box *b = ex->box[ex->prod[s][k] * p->n_stages + s];
          if (!(recv[k] = box_take(ex, b, g))) return -1;
        }
      } else if (ins.op == PIPERT_OP_FWD) {
        for (int k = 0; k < d->n_inputs; k++) {
          pipert_ref src = sp->input_src[k];
          if (src.stage == PIPERT_GRAPH_INPUT) {
            w->in[k] = (const char *)ex->in[src.index].data + (size_t)(g % ex->period) * p->inputs[src.index].nbytes;
          } else {
            rt_set *rs = recv[prod_slot(ex, s, src.stage)];
            if (!rs) {
              fail(ex, 1, "internal error: stage %d: FWD %lld before RECV_ACT", s, (long long)g);
              return -1;
            }
            w->in[k] = rs->bufs[src.index];
          }
        }
        rt_set *o = pool_get(w);
        if (!o) return -1;
        double t0 = rt_now();
        int rc = d->forward(w->state, w->in, o->bufs);
        w->busy += rt_now() - t0;
        for (int k = 0; k < np; k++) { set_release(recv[k]); recv[k] = NULL; }
        if (rc != 0) {
          atomic_store(&o->refs, 1);
          set_release(o);
          if (R > 1)
            fail(ex, 1, "stage %d (replica %d): forward failed on micro-batch %lld (status %d)", s, w->replica,
                 (long long)g, rc);
          else
            fail(ex, 1, "stage %d: forward failed on micro-batch %lld (status %d)", s, (long long)g, rc);
          return -1;
        }
        w->outs[ins.mb] = o;
      } else if (ins.op == PIPERT_OP_SEND_ACT) {
        rt_set *o = w->outs[ins.mb];
        if (!o) {
          fail(ex, 1, "internal error: stage %d: SEND_ACT %lld before FWD", s, (long long)g);
          return -1;
        }
        w->outs[ins.mb] = NULL;
        for (int q = 0; q < p->n_outputs; q++)
          if (p->output_src[q].stage == s)
            memcpy((char *)ex->out[q].data + (size_t)(g % ex->period) * p->outputs[q].nbytes, o->bufs[p->output_src[q].index],
                   p->outputs[q].nbytes);
        int nc = ex->ncons[s];
        atomic_store(&o->refs, nc ? nc : 1);
        if (!nc) set_release(o);
        for (int c = s + 1; c < p->n_stages; c++) {
          rt_box *b = ex->box[s * p->n_stages + c];
          if (b && box_put(ex, b, g, o)) return -1;
        }
      }
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
  ex->nprod = calloc((size_t)S, sizeof(int));
  ex->prod = calloc((size_t)S, sizeof(int *));
  ex->ncons = calloc((size_t)S, sizeof(int));
  ex->box = calloc((size_t)S * (size_t)S, sizeof(rt_box *));
  for (int s = 0; s < S; s++) {
    const pipert_stage_plan *sp = &p->stages[s];
    ex->prog[s] = rt_stage_program(p, s, M, &ex->prog_len[s], &ex->prog_owned[s]);
    ex->prod[s] = calloc((size_t)sp->stage->n_inputs + 1, sizeof(int));
    for (int k = 0; k < sp->stage->n_inputs; k++) {
      int j = sp->input_src[k].stage;
      if (j < 0 || prod_slot(ex, s, j) >= 0) continue;
      ex->prod[s][ex->nprod[s]++] = j;
      ex->ncons[j]++;
      rt_box *b = calloc(1, sizeof *b);
      pthread_mutex_init(&b->mu, NULL);
      cond_init(&b->cv);
      ex->box[j * S + s] = b;
    }
    ex->nworkers += sp->replicas;
  }
  /* Weights: all stages checked before any init. */
  char err[1024];
  for (int s = 0; s < S; s++)
    if (rt_weights_load(p->stages[s].stage, o->weights_dir, &ex->weights[s], err, sizeof err)) {
      rt_errorf("%s", err);
      return 2;
    }
  ex->w = calloc((size_t)ex->nworkers, sizeof *ex->w);
  int wi = 0;
  for (int s = 0; s < S; s++) {
    const pipert_stage_desc *d = p->stages[s].stage;
    size_t setbytes = 0;
    for (int k = 0; k < d->n_outputs; k++) setbytes += (d->outputs[k].nbytes + 63) / 64 * 64;
    for (int r = 0; r < p->stages[s].replicas; r++, wi++) {
      rt_worker *w = &ex->w[wi];
      w->ex = ex;
      w->stage = s;
      w->replica = r;
      w->index = wi;
      pthread_mutex_init(&w->mu, NULL);
      cond_init(&w->cv);
      w->nsets = BOX_CAP + POOL_EXTRA;
      w->sets = calloc((size_t)w->nsets, sizeof *w->sets);
      for (int i = 0; i < w->nsets; i++) {
        rt_set *st = &w->sets[i];
        st->owner = w;
        st->bufs = calloc((size_t)d->n_outputs + 1, sizeof(void *));
        char *mem = st->mem = rt_aligned_alloc(setbytes);
        for (int k = 0; k < d->n_outputs; k++) {
          st->bufs[k] = mem;
          mem += (d->outputs[k].nbytes + 63) / 64 * 64;
        }
      }
      w->recv = calloc((size_t)M * (size_t)(ex->nprod[s] + 1), sizeof(rt_set *));
      w->outs = calloc((size_t)M, sizeof(rt_set *));
      w->in = calloc((size_t)d->n_inputs + 1, sizeof(void *));
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
  ex->in = in;
  ex->out = out;
  ex->T = T;
  if (ex->period <= 0 || ex->period > T) ex->period = T;
  atomic_store(&ex->abort, 0);
  ex->done = ex->failed_rc = ex->bar_count = 0;
  for (int i = 0; i < S * S; i++) if (ex->box[i]) box_reset(ex->box[i]);
  for (int i = 0; i < ex->nworkers; i++) {
    rt_worker *w = &ex->w[i];
    w->busy = 0;
    w->free = NULL;
    for (int k = 0; k < w->nsets; k++) { w->sets[k].next = w->free; w->free = &w->sets[k]; }
    memset(w->outs, 0, sizeof(rt_set *) * (size_t)ex->M);
    memset(w->recv, 0, sizeof(rt_set *) * (size_t)ex->M * (size_t)(ex->nprod[w->stage] + 1));
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
  for (int s = 0; s < S; s++) st->busy_s[s] = 0;
  for (int i = 0; i < ex->nworkers; i++) st->busy_s[ex->w[i].stage] += ex->w[i].busy;
  return ex->failed_rc;
}

void rt_threads_destroy(rt_exec *ex) {
  const pipert_pipeline *p = ex->p;
  int S = p->n_stages;
  for (int i = 0; ex->w && i < ex->nworkers; i++) {
    rt_worker *w = &ex->w[i];
    const pipert_stage_desc *d = p->stages[w->stage].stage;
    if (w->state && d->fini) d->fini(w->state);
    for (int k = 0; w->sets && k < w->nsets; k++) {
      free(w->sets[k].mem);
      free(w->sets[k].bufs);
    }
    free(w->sets);
    free(w->recv);
    free(w->outs);
    free(w->in);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
  }
  for (int i = 0; i < S * S; i++)
    if (ex->box[i]) {
      pthread_mutex_destroy(&ex->box[i]->mu);
      pthread_cond_destroy(&ex->box[i]->cv);
      free(ex->box[i]);
    }
  for (int s = 0; s < S; s++) {
    rt_weights_unload(&ex->weights[s]);
    free(ex->prog_owned[s]);
    free(ex->prod[s]);
  }
  free(ex->w);
  free(ex->weights);
  free(ex->prog);
  free(ex->prog_len);
  free(ex->prog_owned);
  free(ex->nprod);
  free(ex->prod);
  free(ex->ncons);
  free(ex->box);
  pthread_mutex_destroy(&ex->mu);
  pthread_cond_destroy(&ex->cv);
  free(ex);
}
