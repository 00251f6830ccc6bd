/* The stream interpreter: one stage replica running its instruction stream
 * (pipert.h), with set pools and the stage's topology; the transport (threads, MPI)
 * moves sets through rt_link_ops.
 *
 * Forward outputs of a micro-batch form one set from the worker's forward pool; the
 * set goes to every later stage that reads it and, in a training program, stays with
 * the worker until its own backward of that micro-batch when the backward reads it
 * (the stash). Backward outputs (gradients for earlier stages) travel the same way in
 * the other direction. A stream without RECV/SEND opcodes for a direction (the first
 * stage receives nothing, the last sends no activations) receives inside FWD/BWD and
 * hands on at once. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rt.h"

#define WAIT_MS 20

/* ---- pools ---------------------------------------------------------------------- */

void rt_pool_init(rt_pool *pl, int n_bufs, const pipert_tensor_desc *descs, int cap) {
  memset(pl, 0, sizeof *pl);
  pthread_mutex_init(&pl->mu, NULL);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&pl->cv, &a);
  pthread_condattr_destroy(&a);
  pl->n_bufs = n_bufs;
  pl->descs = descs;
  pl->cap = cap;
  pl->all = calloc((size_t)cap + 1, sizeof *pl->all);
  for (int k = 0; k < n_bufs; k++) pl->set_bytes += (descs[k].nbytes + 255) / 256 * 256;
}

/* A free set, or a new one while under cap; waits otherwise. NULL after an abort. */
static rt_set *pool_get(rt_worker *w, rt_pool *pl) {
  pthread_mutex_lock(&pl->mu);
  while (!pl->free && pl->n == pl->cap && !w->ops->aborted(w->link)) {
    if (w->ops->poll) { /* sends in flight may free a set */
      pthread_mutex_unlock(&pl->mu);
      w->ops->poll(w->link, w);
      pthread_mutex_lock(&pl->mu);
      if (pl->free) break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += WAIT_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&pl->cv, &pl->mu, &ts);
  }
  rt_set *s = NULL;
  if (pl->free) {
    s = pl->free;
    pl->free = s->next;
    atomic_store(&s->refs, 0); /* references are added from here (send_set, deferred outputs) */
  } else if (pl->n < pl->cap) {
    char *mem = pl->dev ? pl->dev->alloc(pl->dev_state, pl->set_bytes) : rt_aligned_alloc(pl->set_bytes);
    if (!mem) { /* stops the run: a device has said why already */
      char msg[160] = "";
      if (!pl->dev)
        snprintf(msg, sizeof msg, "stage %d: out of memory for its sets (%zu bytes more)", w->stage, pl->set_bytes);
      pthread_mutex_unlock(&pl->mu);
      w->ops->fail(w->link, 1, msg);
      return NULL;
    }
    s = calloc(1, sizeof *s);
    s->pool = pl;
    s->bufs = calloc((size_t)pl->n_bufs + 1, sizeof(void *));
    s->mem = mem;
    for (int k = 0; k < pl->n_bufs; k++) {
      s->bufs[k] = mem;
      mem += (pl->descs[k].nbytes + 255) / 256 * 256;
    }
    pl->all[pl->n++] = s;
  }
  pthread_mutex_unlock(&pl->mu);
  return s;
}

rt_set *rt_worker_get(rt_worker *w, int kind) { return pool_get(w, kind ? &w->gpool : &w->fpool); }

rt_set *rt_pool_get(rt_worker *w, rt_pool *pl) { return pool_get(w, pl); }

void rt_set_release(rt_set *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  rt_pool *pl = s->pool;
  pthread_mutex_lock(&pl->mu);
  s->next = pl->free;
  pl->free = s;
  pthread_cond_signal(&pl->cv);
  pthread_mutex_unlock(&pl->mu);
}

void rt_pool_reset(rt_pool *pl) {
  pl->free = NULL;
  for (int i = 0; i < pl->n; i++) {
    pl->all[i]->next = pl->free;
    pl->free = pl->all[i];
  }
}

void rt_pool_free(rt_pool *pl) {
  for (int i = 0; i < pl->n; i++) {
    if (pl->dev) pl->dev->release(pl->dev_state, pl->all[i]->mem);
    else free(pl->all[i]->mem);
    free(pl->all[i]->bufs);
    free(pl->all[i]->link);
    free(pl->all[i]);
  }
  free(pl->all);
  pthread_mutex_destroy(&pl->mu);
  pthread_cond_destroy(&pl->cv);
  memset(pl, 0, sizeof *pl);
}

/* ---- topology --------------------------------------------------------------------- */

static int slot_of(const int *v, int n, int x) {
  for (int k = 0; k < n; k++)
    if (v[k] == x) return k;
  return -1;
}

static void add_unique(int *v, int *n, int x) {
  if (slot_of(v, *n, x) < 0) v[(*n)++] = x;
}

void rt_topo_build(const pipert_pipeline *p, const pipert_instr *const *prog, const int *prog_len, rt_topo *topo) {
  int S = p->n_stages;
  for (int s = 0; s < S; s++) {
    const pipert_stage_plan *sp = &p->stages[s];
    const pipert_stage_desc *d = sp->stage;
    rt_topo *t = &topo[s];
    memset(t, 0, sizeof *t);
    int nb = p->training ? d->n_bwd_inputs : 0;
    t->fp = calloc((size_t)(d->n_inputs + nb) + 1, sizeof(int));
    t->fp_bwd = calloc((size_t)(d->n_inputs + nb) + 1, 1);
    t->gp = calloc((size_t)nb + 1, sizeof(int));
    t->fc = calloc((size_t)S + 1, sizeof(int));
    t->gc = calloc((size_t)S + 1, sizeof(int));
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
    for (int i = 0; i < prog_len[s]; i++)
      if (prog[s][i].op >= 0 && prog[s][i].op <= PIPERT_OP_STEP) t->has[prog[s][i].op] = 1;
  }
  for (int s = 0; s < S; s++) {
    for (int k = 0; k < topo[s].nfp; k++) topo[topo[s].fp[k]].fc[topo[topo[s].fp[k]].nfc++] = s;
    for (int k = 0; k < topo[s].ngp; k++) topo[topo[s].gp[k]].gc[topo[topo[s].gp[k]].ngc++] = s;
  }
}

void rt_topo_free(rt_topo *topo, int S) {
  for (int s = 0; s < S; s++) {
    free(topo[s].fp);
    free(topo[s].fp_bwd);
    free(topo[s].gp);
    free(topo[s].fc);
    free(topo[s].gc);
  }
}

/* ---- the worker ------------------------------------------------------------------ */

void rt_worker_init(rt_worker *w, const pipert_pipeline *p, int stage, int replica, int M, const pipert_instr *prog,
                    int prog_len, const rt_topo *topo, int cap, const rt_link_ops *ops, void *link) {
  const pipert_stage_desc *d = p->stages[stage].stage;
  memset(w, 0, sizeof *w);
  w->p = p;
  w->ops = ops;
  w->link = link;
  w->stage = stage;
  w->replica = replica;
  w->M = M;
  w->prog = prog;
  w->prog_len = prog_len;
  w->topo = topo;
  rt_pool_init(&w->fpool, d->n_outputs, d->outputs, cap);
  rt_pool_init(&w->gpool, p->training ? d->n_bwd_outputs : 0, d->bwd_outputs, cap);
  w->recv = calloc((size_t)M * (size_t)(topo->nfp + 1), sizeof(rt_set *));
  w->grecv = calloc((size_t)M * (size_t)(topo->ngp + 1), sizeof(rt_set *));
  w->outs = calloc((size_t)M, sizeof(rt_set *));
  w->gouts = calloc((size_t)M, sizeof(rt_set *));
  w->in = calloc((size_t)d->n_inputs + 1, sizeof(void *));
  w->bin = calloc((size_t)(p->training ? d->n_bwd_inputs : 0) + 1, sizeof(void *));
}

void rt_worker_reset(rt_worker *w) {
  w->busy = 0;
  w->cpu = 0;
  atomic_store(&w->work_since_us, 0);
  w->n_pend = 0; /* an aborted run's deferred outputs: the pools start over below */
  rt_pool_reset(&w->fpool);
  rt_pool_reset(&w->gpool);
  w->inflight = 0;
  memset(w->outs, 0, sizeof(rt_set *) * (size_t)w->M);
  memset(w->gouts, 0, sizeof(rt_set *) * (size_t)w->M);
  memset(w->recv, 0, sizeof(rt_set *) * (size_t)w->M * (size_t)(w->topo->nfp + 1));
  memset(w->grecv, 0, sizeof(rt_set *) * (size_t)w->M * (size_t)(w->topo->ngp + 1));
}

/* device mode: device copies kept per graph input. Training keeps every micro-batch of
 * the step (backward reads them again); inference two, used in turn, so that in async
 * mode the upload of micro-batch g + 1 (on the upload stream) runs while forward g still
 * reads its copy: with one, the upload waited for that forward and the forward of g + 1
 * for the upload, and the device idled for every copy (ResNet-50, batch 32 on an H200:
 * 2.67 ms busy in a 3.10 ms period; the 19 MB upload took the difference;
 * PIPERT_INPUT_COPIES=1 keeps one, to compare). A --bench --stream run of thousands of
 * micro-batches once allocated one each. */
static int dev_slots(const rt_worker *w) { return w->p->training ? w->M : w->in_copies; }

/* Graph input idx of micro-batch g for forward/backward: the transport's slice, or in
 * device mode its copy on the device (uploaded once per micro-batch of the round). */
static const void *graph_input(rt_worker *w, int idx, int64_t g) {
  const void *host = w->ops->input(w->link, w, idx, g);
  if (!w->dev || !host) return host;
  int slots = dev_slots(w);
  size_t k = (size_t)idx * (size_t)slots + (size_t)(g % slots), n = w->p->inputs[idx].nbytes;
  if (!w->dev_in[k] && !(w->dev_in[k] = w->dev->alloc(w->state, n))) {
    w->ops->fail(w->link, 1, ""); /* stops the run; the device has said why */
    return NULL;
  }
  if (w->dev_in_mb[k] != g + 1) {
    if (w->dev->upload(w->state, w->dev_in[k], host, n)) return NULL;
    w->dev_in_mb[k] = g + 1;
  }
  return w->dev_in[k];
}

/* Graph output q of micro-batch g to the transport (downloaded first in device mode). */
static int graph_output(rt_worker *w, int q, int64_t g, const void *data) {
  if (w->dev) {
    size_t n = w->p->outputs[q].nbytes;
    if (!w->host_out[q]) w->host_out[q] = rt_aligned_alloc(n);
    if (w->dev->download(w->state, w->host_out[q], data, n)) return -1;
    data = w->host_out[q];
  }
  w->ops->output(w->link, w, q, g, data);
  return 0;
}

static int failf(rt_worker *w, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Async device mode: graph output q of micro-batch g, in set s, waits for the next
 * forward to be queued (a download waits for the device, which meanwhile has that
 * forward to run). ref: the entry holds a reference on s. */
struct rt_pend {
  rt_set *s;
  int q, ref;
  int64_t g;
  const void *data;
};

static int defer_output(rt_worker *w, rt_set *s, int q, int64_t g, const void *data, int ref) {
  if (w->n_pend == w->cap_pend) {
    int cap = w->cap_pend ? 2 * w->cap_pend : 8;
    struct rt_pend *np = realloc(w->pend, sizeof *np * (size_t)cap);
    if (!np) return -1;
    w->pend = np;
    w->cap_pend = cap;
  }
  if (ref) atomic_fetch_add(&s->refs, 1);
  w->pend[w->n_pend++] = (struct rt_pend){s, q, ref, g, data};
  return 0;
}

/* The deferred outputs of micro-batches before `before` to the transport (all: INT64_MAX). */
static int flush_outputs(rt_worker *w, int64_t before) {
  int keep = 0, rc = 0;
  char nm[64];
  for (int i = 0; i < w->n_pend; i++) {
    struct rt_pend e = w->pend[i];
    if (e.g >= before) {
      w->pend[keep++] = e;
      continue;
    }
    if (!rc && graph_output(w, e.q, e.g, e.data))
      rc = failf(w, 1, "%s: cannot copy graph output %d of micro-batch %lld", rt_worker_name(w, nm, sizeof nm), e.q,
                 (long long)e.g);
    if (e.ref) rt_set_release(e.s);
  }
  w->n_pend = keep;
  return rc;
}

void rt_worker_set_device(rt_worker *w, const pipert_device_ops *dev) {
  w->dev = dev;
  w->fpool.dev = w->gpool.dev = dev;
  w->fpool.dev_state = w->gpool.dev_state = w->state;
  const char *copies = getenv("PIPERT_INPUT_COPIES");
  w->in_copies = copies && !strcmp(copies, "1") ? 1 : 2;
  w->dev_in = calloc((size_t)w->p->n_inputs * (size_t)dev_slots(w) + 1, sizeof(void *));
  w->dev_in_mb = calloc((size_t)w->p->n_inputs * (size_t)dev_slots(w) + 1, sizeof(int64_t));
  w->host_out = calloc((size_t)w->p->n_outputs + 1, sizeof(void *));
}

void rt_worker_free(rt_worker *w) {
  rt_async_free(w);
  if (w->fpool.all) rt_pool_free(&w->fpool);
  if (w->gpool.all) rt_pool_free(&w->gpool);
  for (int i = 0; w->dev_in && i < w->p->n_inputs * dev_slots(w); i++)
    if (w->dev_in[i]) w->dev->release(w->state, w->dev_in[i]);
  for (int q = 0; w->host_out && q < w->p->n_outputs; q++) free(w->host_out[q]);
  free(w->dev_in);
  free(w->dev_in_mb);
  free(w->host_out);
  free(w->pend);
  free(w->recv);
  free(w->grecv);
  free(w->outs);
  free(w->gouts);
  free(w->in);
  free(w->bin);
}

const char *rt_worker_name(const rt_worker *w, char *buf, size_t n) {
  if (w->p->stages[w->stage].replicas > 1) snprintf(buf, n, "stage %d (replica %d)", w->stage, w->replica);
  else snprintf(buf, n, "stage %d", w->stage);
  return buf;
}

static int failf(rt_worker *w, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int failf(rt_worker *w, int rc, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  w->ops->fail(w->link, rc, buf);
  return -1;
}

static int group_begin(rt_worker *w) {
  if (!w->ops->group || w->in_group) return 0;
  w->in_group = 1;
  return w->ops->group(w->link, w, 1);
}

static int group_end(rt_worker *w) {
  if (!w->in_group) return 0;
  w->in_group = 0;
  return w->ops->group(w->link, w, 0);
}

static int recv_all(rt_worker *w, int kind, int mb, int64_t g) {
  const rt_topo *t = w->topo;
  int n = kind ? t->ngp : t->nfp;
  const int *from = kind ? t->gp : t->fp;
  rt_set **r = kind ? &w->grecv[(size_t)mb * (size_t)(t->ngp + 1)] : &w->recv[(size_t)mb * (size_t)(t->nfp + 1)];
  for (int k = 0; k < n; k++)
    if (!r[k] && (group_begin(w) || !(r[k] = w->ops->recv(w->link, w, kind, from[k], g)))) return -1;
  return 0;
}

/* Hand set o of micro-batch g on; keep: one more reference stays with the worker. */
static int send_set(rt_worker *w, int kind, rt_set *o, int64_t g, int keep) {
  atomic_fetch_add(&o->refs, 1 + keep); /* the transport's reference, released by it */
  return group_begin(w) || w->ops->send(w->link, w, kind, o, g);
}

static int do_fwd(rt_worker *w, int mb, int64_t g) {
  const pipert_pipeline *p = w->p;
  const pipert_stage_plan *sp = &p->stages[w->stage];
  const pipert_stage_desc *d = sp->stage;
  const rt_topo *t = w->topo;
  char nm[64];
  if (recv_all(w, 0, mb, g) || group_end(w)) return -1;
  rt_set **recv = &w->recv[(size_t)mb * (size_t)(t->nfp + 1)];
  for (int k = 0; k < d->n_inputs; k++) {
    pipert_ref src = sp->input_src[k];
    w->in[k] = src.stage == PIPERT_GRAPH_INPUT ? graph_input(w, src.index, g)
                                               : recv[slot_of(t->fp, t->nfp, src.stage)]->bufs[src.index];
    if (!w->in[k])
      return failf(w, 1, "%s: graph input %d of micro-batch %lld unavailable", rt_worker_name(w, nm, sizeof nm),
                   src.index, (long long)g);
  }
  rt_set *o = pool_get(w, &w->fpool);
  if (!o) return -1;
  double t0 = rt_now(), c0 = rt_thread_cpu();
  int rc = (w->dev ? w->dev->forward : d->forward)(w->state, w->in, o->bufs);
  w->cpu += rt_thread_cpu() - c0; /* (read inside the wall span: never more than it) */
  w->busy += rt_now() - t0;
  for (int k = 0; k < t->nfp; k++)
    if (!p->training || !t->fp_bwd[k]) {
      rt_set_release(recv[k]);
      recv[k] = NULL;
    }
  if (rc != 0) {
    atomic_store(&o->refs, 1);
    rt_set_release(o);
    const char *why = rt_bad_input_take();
    if (rc == PIPERT_STATUS_BAD_INPUT && why)
      return failf(w, 2, "%s: micro-batch %lld: %s", rt_worker_name(w, nm, sizeof nm), (long long)g, why);
    return failf(w, 1, "%s: forward failed on micro-batch %lld (status %d)", rt_worker_name(w, nm, sizeof nm),
                 (long long)g, rc);
  }
  for (int q = 0, first = 1; q < p->n_outputs; q++) {
    if (p->output_src[q].stage != w->stage) continue;
    const void *data = o->bufs[p->output_src[q].index];
    if (w->dev_async ? defer_output(w, o, q, g, data, first) : graph_output(w, q, g, data))
      return failf(w, 1, "%s: cannot copy graph output %d of micro-batch %lld", rt_worker_name(w, nm, sizeof nm), q,
                   (long long)g);
    first = 0;
  }
  if (w->n_pend && flush_outputs(w, g)) return -1; /* the earlier ones: this forward is queued */
  int keep = p->training && t->own_bwd;
  if (p->training && ++w->inflight > w->peak_inflight) w->peak_inflight = w->inflight;
  w->outs[mb] = o;
  if (!t->has[PIPERT_OP_SEND_ACT]) {
    if (!keep) w->outs[mb] = NULL;
    return send_set(w, 0, o, g, keep);
  }
  return 0;
}

static int do_send(rt_worker *w, int kind, int mb, int64_t g) {
  rt_set **slot = kind ? &w->gouts[mb] : &w->outs[mb];
  rt_set *o = *slot;
  if (!o)
    return failf(w, 1, "internal error: stage %d: %s %lld before its %s", w->stage, kind ? "SEND_GRAD" : "SEND_ACT",
                 (long long)g, kind ? "BWD" : "FWD");
  int keep = !kind && w->p->training && w->topo->own_bwd;
  if (!keep) *slot = NULL;
  return send_set(w, kind, o, g, keep);
}

static int do_bwd(rt_worker *w, int mb, int64_t g) {
  const pipert_pipeline *p = w->p;
  const pipert_stage_plan *sp = &p->stages[w->stage];
  const pipert_stage_desc *d = sp->stage;
  const rt_topo *t = w->topo;
  char nm[64];
  if (recv_all(w, 1, mb, g) || group_end(w)) return -1;
  rt_set **recv = &w->recv[(size_t)mb * (size_t)(t->nfp + 1)];
  rt_set **grecv = &w->grecv[(size_t)mb * (size_t)(t->ngp + 1)];
  rt_set *own = w->outs[mb];
  for (int k = 0; k < d->n_bwd_inputs; k++) {
    pipert_ref src = sp->bwd_input_src[k];
    if (src.stage == PIPERT_GRAPH_INPUT) {
      if (!(w->bin[k] = graph_input(w, src.index, g)))
        return failf(w, 1, "%s: graph input %d of micro-batch %lld unavailable", rt_worker_name(w, nm, sizeof nm),
                     src.index, (long long)g);
      continue;
    }
    rt_set *from = src.phase               ? grecv[slot_of(t->gp, t->ngp, src.stage)]
                   : src.stage == w->stage ? own
                                           : recv[slot_of(t->fp, t->nfp, src.stage)];
    if (!from)
      return failf(w, 1, "internal error: %s: BWD %lld before its FWD", rt_worker_name(w, nm, sizeof nm), (long long)g);
    w->bin[k] = from->bufs[src.index];
  }
  rt_set *o = pool_get(w, &w->gpool);
  if (!o) return -1;
  double t0 = rt_now(), c0 = rt_thread_cpu();
  int rc = (w->dev ? w->dev->backward : d->backward)(w->state, w->bin, o->bufs);
  w->cpu += rt_thread_cpu() - c0; /* (read inside the wall span: never more than it) */
  w->busy += rt_now() - t0;
  for (int k = 0; k < t->ngp; k++) {
    rt_set_release(grecv[k]);
    grecv[k] = NULL;
  }
  for (int k = 0; k < t->nfp; k++)
    if (recv[k]) {
      rt_set_release(recv[k]);
      recv[k] = NULL;
    }
  if (own && t->own_bwd) {
    rt_set_release(own);
    w->outs[mb] = NULL;
  }
  w->inflight--;
  if (rc != 0) {
    atomic_store(&o->refs, 1);
    rt_set_release(o);
    const char *why = rt_bad_input_take();
    if (rc == PIPERT_STATUS_BAD_INPUT && why)
      return failf(w, 2, "%s: micro-batch %lld: %s", rt_worker_name(w, nm, sizeof nm), (long long)g, why);
    return failf(w, 1, "%s: backward failed on micro-batch %lld (status %d)", rt_worker_name(w, nm, sizeof nm),
                 (long long)g, rc);
  }
  w->gouts[mb] = o;
  if (!t->has[PIPERT_OP_SEND_GRAD]) {
    w->gouts[mb] = NULL;
    return send_set(w, 1, o, g, 0);
  }
  return 0;
}

void rt_worker_working(rt_worker *w, int op, int64_t g) {
  if (op == RT_IDLE) {
    atomic_store(&w->work_since_us, 0);
    return;
  }
  w->work_op = op;
  w->work_mb = g;
  atomic_store(&w->work_since_us, (long long)(rt_now() * 1e6) + 1);
}

/* PIPERT_STALL_S, or the default: 600 s where the stages run on a device, off on the
 * CPU (a long forward there is only slow). */
double rt_stall_limit(const rt_worker *w) {
  const char *v = getenv("PIPERT_STALL_S");
  if (v && *v) {
    char *e;
    double s = strtod(v, &e);
    if (!*e && s >= 0) return s;
    rt_errorf("PIPERT_STALL_S=%s: expected seconds (0: off); using 600", v);
    return 600;
  }
  return w->p->stages[w->stage].stage->device ? 600 : 0;
}

long long rt_worker_stalled(const rt_worker *w, double now, double stall_s) {
  long long t = atomic_load(&((rt_worker *)w)->work_since_us);
  return stall_s > 0 && t && (long long)(now * 1e6) - t > (long long)(stall_s * 1e6) ? t : 0;
}

const char *rt_worker_where(const rt_worker *w, char *buf, size_t n) {
  char nm[64];
  const pipert_device_ops *dv = w->p->stages[w->stage].stage->device; /* (w->dev: device mode only) */
  int d = dv && dv->ordinal && w->state ? dv->ordinal(w->state) : -1;
  if (d >= 0) snprintf(buf, n, "%s on device %d", rt_worker_name(w, nm, sizeof nm), d);
  else snprintf(buf, n, "%s", rt_worker_name(w, nm, sizeof nm));
  return buf;
}

const char *rt_worker_stall_what(const rt_worker *w, char *buf, size_t n) {
  int op = w->work_op;
  if (op == PIPERT_OP_FWD || op == PIPERT_OP_BWD)
    snprintf(buf, n, "the %s of micro-batch %lld", op == PIPERT_OP_FWD ? "forward" : "backward", (long long)w->work_mb);
  else
    snprintf(buf, n, "%s",
             op == PIPERT_OP_STEP        ? "the optimizer step"
             : op == PIPERT_OP_ALLREDUCE ? "the sum of the replicas' gradients"
             : op == RT_WORK_END         ? "the wait for its device's queued work"
                                         : "the graph outputs' download");
  return buf;
}

double rt_worker_end_wait(rt_worker *w, int64_t T) {
  rt_worker_working(w, RT_WORK_END, T);
  double b = w->dev->busy ? w->dev->busy(w->state) : 0;
  rt_worker_working(w, RT_IDLE, 0);
  return b;
}

int rt_worker_round(rt_worker *w, int64_t base, int64_t T) {
  const pipert_pipeline *p = w->p;
  const pipert_stage_desc *d = p->stages[w->stage].stage;
  int R = p->stages[w->stage].replicas;
  char nm[64];
  if (w->dev_in_mb) memset(w->dev_in_mb, 0, ((size_t)p->n_inputs * (size_t)dev_slots(w) + 1) * sizeof(int64_t));
  if (p->training && d->zero_grads(w->state))
    return failf(w, 1, "%s: clearing the gradients failed", rt_worker_name(w, nm, sizeof nm));
  if (w->async) rt_async_reset(w);
  for (int i = 0; i < w->prog_len; i++) {
    pipert_instr ins = w->prog[i];
    int64_t g = base + ins.mb;
    int rc = 0;
    if (ins.op == PIPERT_OP_ALLREDUCE) {
      rt_worker_working(w, ins.op, g); /* (a replica that stopped before it is the older call) */
      rc = group_end(w) || w->ops->allreduce(w->link, w);
      rt_worker_working(w, RT_IDLE, 0);
    } else if (ins.op == PIPERT_OP_STEP) {
      if (group_end(w)) return -1;
      double t0 = rt_now(), c0 = rt_thread_cpu();
      rt_worker_working(w, ins.op, g);
      if (w->async && rt_async_step(w, i, 0))
        return failf(w, 1, "%s: keeping a weight version failed", rt_worker_name(w, nm, sizeof nm));
      int st = d->step(w->state);
      if (w->async && !st && rt_async_step(w, i, 1))
        return failf(w, 1, "%s: the checkpoint after this step failed", rt_worker_name(w, nm, sizeof nm));
      rt_worker_working(w, RT_IDLE, 0);
      w->cpu += rt_thread_cpu() - c0;
      w->busy += rt_now() - t0;
      if (st) return failf(w, 1, "%s: optimizer step failed (status %d)", rt_worker_name(w, nm, sizeof nm), st);
    } else if (ins.op == PIPERT_OP_NOP || g >= T || g % R != w->replica) {
      continue;
    } else if (ins.op == PIPERT_OP_RECV_ACT || ins.op == PIPERT_OP_RECV_GRAD) {
      rc = recv_all(w, ins.op == PIPERT_OP_RECV_GRAD, ins.mb, g);
    } else if (ins.op == PIPERT_OP_FWD || ins.op == PIPERT_OP_BWD) {
      /* (a set to write may wait for a reader's release: a stage behind this one that
       * stopped is the older call the watchdog names) */
      rt_worker_working(w, ins.op, g);
      if (w->async && rt_async_before(w, i))
        return failf(w, 1, "%s: putting a weight version in place failed", rt_worker_name(w, nm, sizeof nm));
      rc = ins.op == PIPERT_OP_FWD ? do_fwd(w, ins.mb, g) : do_bwd(w, ins.mb, g);
      if (w->async && rt_async_after(w, i))
        return failf(w, 1, "%s: restoring the latest weights failed", rt_worker_name(w, nm, sizeof nm));
      rt_worker_working(w, RT_IDLE, 0);
    } else if (ins.op == PIPERT_OP_SEND_ACT || ins.op == PIPERT_OP_SEND_GRAD) {
      rc = do_send(w, ins.op == PIPERT_OP_SEND_GRAD, ins.mb, g);
    }
    if (rc) return -1;
  }
  rt_worker_working(w, RT_WORK_OUTPUTS, T);
  int rc = flush_outputs(w, INT64_MAX);
  rt_worker_working(w, RT_IDLE, 0);
  return rc || group_end(w) ? -1 : 0;
}
