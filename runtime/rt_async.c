/* The asynchronous training schedules (docs/training.md, "Asynchronous schedules"):
 * pipedream (weight stashing), async (vanilla: the latest weights), spectrain (weight
 * prediction) and 2bw (PipeDream-2BW). A run of K mini-batches is one round of T = K*M
 * micro-batches (M = the compiled micro-batches per batch: 1 except for 2bw) whose
 * streams are 1F1B without a flush, a STEP after the backward of every batch's last
 * micro-batch.
 *
 * Weight versions: version u of stage k is its weights after u of its own updates. The
 * latest version lives in the stage's parameter memory; an older one is copied (to host
 * memory, through param_io) only at a STEP that would overwrite it while an instruction
 * later in the stream still needs it, and freed after its last reader. A FWD or BWD that
 * needs an older version reads it where it is: the stage's weights_at points its weight
 * reads at the copy for that one instruction (no copy; a stage without weights_at gets
 * the version written into its parameter memory and the latest restored after). The
 * STEP always updates the latest weights with the latest optimizer state (which is never
 * stashed). SpecTrain's prediction W - s*lr*v (v the momentum buffer after the latest
 * update) is one element-wise pass into a scratch buffer that the instruction reads the
 * same way; from the latest version it reads the stage's parameter memory in place where
 * the stage offers it (param_memory). Host copies are laid out as the parameter memory
 * up to the end of the last weight (wend bytes), each weight at its own offset. */
#include <stdlib.h>
#include <string.h>
#include "rt.h"

int rt_async_mode(const pipert_pipeline *p) {
  const char *s = p->training && p->schedule ? p->schedule : "";
  return !strcmp(s, "pipedream") ? RT_ASYNC_PIPEDREAM
         : !strcmp(s, "async")   ? RT_ASYNC_VANILLA
         : !strcmp(s, "spectrain") ? RT_ASYNC_SPECTRAIN
         : !strcmp(s, "2bw")     ? RT_ASYNC_2BW
                                 : RT_SYNC;
}

pipert_instr *rt_async_program(const pipert_pipeline *p, int s, int T, int *len) {
  const pipert_stage_plan *sp = &p->stages[s];
  int N = p->n_stages, Mb = p->microbatches > 0 ? p->microbatches : 1, has[PIPERT_OP_STEP + 1] = {0};
  for (int i = 0; i < sp->program_len; i++)
    if (sp->program[i].op >= 0 && sp->program[i].op <= PIPERT_OP_STEP) has[sp->program[i].op] = 1;
  pipert_instr *v = malloc(sizeof *v * (7 * (size_t)T + 1));
  int n = 0, w = N - 1 - s < T ? N - 1 - s : T;
#define PUT(o, m) (v[n++] = (pipert_instr){(o), (m)})
#define FWD(j)                                                 \
  do {                                                         \
    if (has[PIPERT_OP_RECV_ACT]) PUT(PIPERT_OP_RECV_ACT, (j)); \
    PUT(PIPERT_OP_FWD, (j));                                   \
    if (has[PIPERT_OP_SEND_ACT]) PUT(PIPERT_OP_SEND_ACT, (j)); \
  } while (0)
#define BWD(j)                                                   \
  do {                                                           \
    if (has[PIPERT_OP_RECV_GRAD]) PUT(PIPERT_OP_RECV_GRAD, (j)); \
    PUT(PIPERT_OP_BWD, (j));                                     \
    if (has[PIPERT_OP_SEND_GRAD]) PUT(PIPERT_OP_SEND_GRAD, (j)); \
    if (((j) + 1) % Mb == 0) PUT(PIPERT_OP_STEP, 0);             \
  } while (0)
  for (int j = 0; j < w; j++) FWD(j);
  for (int j = w; j < T; j++) {
    FWD(j);
    BWD(j - w);
  }
  for (int j = T - w; j < T; j++) BWD(j);
#undef PUT
#undef FWD
#undef BWD
  *len = n;
  return v;
}

void rt_async_check(const pipert_pipeline *p, const pipert_instr *const *prog, const int *len, int T, char *e,
                    size_t elen) {
  int Mb = p->microbatches > 0 ? p->microbatches : 1;
  if (T % Mb) {
    snprintf(e, elen, "%d micro-batches are not whole batches of %d", T, Mb);
    return;
  }
  for (int s = 0; s < p->n_stages && !e[0]; s++) {
    if (p->stages[s].replicas != 1) {
      snprintf(e, elen, "stage %d: asynchronous schedules run one replica a stage", s);
      return;
    }
    /* the order of each opcode's micro-batches as in a synchronous round, STEPs apart:
     * the c-th STEP right where c whole batches have had their backward */
    pipert_instr *q = malloc(sizeof *q * ((size_t)len[s] + 1));
    int n = 0, bwd = 0, steps = 0;
    for (int i = 0; i < len[s] && !e[0]; i++) {
      if (prog[s][i].op == PIPERT_OP_STEP) {
        if (bwd != (steps + 1) * Mb)
          snprintf(e, elen, "stage %d: instruction %d: STEP after %d backwards, not after batch %d's", s, i, bwd,
                   steps);
        steps++;
        continue;
      }
      if (prog[s][i].op == PIPERT_OP_ALLREDUCE) snprintf(e, elen, "stage %d: instruction %d: ALLREDUCE", s, i);
      if (prog[s][i].op == PIPERT_OP_BWD) bwd++;
      q[n++] = prog[s][i];
    }
    q[n++] = (pipert_instr){PIPERT_OP_STEP, 0};
    if (!e[0] && steps != T / Mb) snprintf(e, elen, "stage %d: %d STEPs for %d batches", s, steps, T / Mb);
    if (!e[0]) rt_check_stream(p, s, q, n, T, e, elen);
    free(q);
  }
  if (!e[0]) rt_check_deadlock_progs(p, prog, len, T, e, elen);
}

/* ---- weight versions ------------------------------------------------------------- */

struct rt_async {
  int mode, N, k, Mb, len;
  int64_t base;   /* updates done before this run (a resumed run: the checkpoint's step) */
  int64_t keep;   /* versions keep..versions-2 outlive the run: the run after it reads them */
  int *need;      /* [len] the version a FWD/BWD reads (-1: the latest, or not a FWD/BWD) */
  int *last_need; /* [versions] the last instruction that reads version v, -1: none, len: a later run */
  int64_t versions; /* base + updates in the stream + 1 (versions are numbered from the first run) */
  int64_t u;        /* updates done */
  int nw;         /* owned weights */
  const pipert_param_desc **wd, **mom; /* [nw] each weight and its momentum buffer (spectrain) */
  const pipert_param_desc *lr;
  size_t wend;     /* a host copy's bytes: the parameter memory up to the last weight's end */
  char **stash;    /* [versions] host copies, NULL where the version is not copied */
  char **mstash;   /* [versions] spectrain: the momentum buffers that came with them */
  char *cur, *tmp; /* the latest weights while another version is in place (or spectrain's momentum);
                      the prediction */
  int64_t every, total; /* checkpoints during the run (rt_async_ckpt), every this many updates, before total */
  const rt_async_ckpt *ck;
  int swapped;     /* 1: weights_at points elsewhere; 2: another version is in the parameter memory */
  size_t *gap;     /* [2 ngap] a host copy's bytes outside every weight: begin, end */
  int ngap;
  char *spare[2];  /* host copies no version holds any more, for the next ones (no fresh pages to fault in) */
};

static int io_all(rt_worker *w, int write, char *buf) {
  const pipert_stage_desc *d = w->p->stages[w->stage].stage;
  struct rt_async *a = w->async;
  for (int i = 0; i < a->nw; i++)
    if (d->param_io(w->state, write, a->wd[i]->offset, buf + a->wd[i]->offset, a->wd[i]->nbytes)) return -1;
  return 0;
}

/* the momentum buffers into buf, each at its weight's offset */
static int io_mom(rt_worker *w, char *buf) {
  const pipert_stage_desc *d = w->p->stages[w->stage].stage;
  struct rt_async *a = w->async;
  for (int q = 0; q < a->nw; q++)
    if (d->param_io(w->state, 0, a->mom[q]->offset, buf + a->wd[q]->offset, a->wd[q]->nbytes)) return -1;
  return 0;
}

static size_t host_bytes(const struct rt_async *a) { return (a->wend + 63) / 64 * 64 + 64; }

/* A host copy whose every weight its caller writes next (io_all, io_mom, rt_async_io):
 * only the bytes between and after them are cleared (a checkpoint writes them) */
static char *host_copy(struct rt_async *a) {
  char *b = NULL;
  for (int k = 0; k < 2 && !b; k++)
    if (a->spare[k]) {
      b = a->spare[k];
      a->spare[k] = NULL;
    }
  if (!b) b = aligned_alloc(64, host_bytes(a));
  for (int g = 0; b && g < a->ngap; g++) memset(b + a->gap[2 * g], 0, a->gap[2 * g + 1] - a->gap[2 * g]);
  return b;
}

static void release(struct rt_async *a, char *b) {
  for (int k = 0; k < 2 && b; k++)
    if (!a->spare[k]) {
      a->spare[k] = b;
      b = NULL;
    }
  free(b);
}

static int by_offset(const void *x, const void *y) {
  size_t a = (*(const pipert_param_desc *const *)x)->offset, b = (*(const pipert_param_desc *const *)y)->offset;
  return a < b ? -1 : a > b;
}

/* a->gap: [0, host_bytes) less the weights */
static int find_gaps(struct rt_async *a) {
  const pipert_param_desc **o = malloc(sizeof *o * ((size_t)a->nw + 1));
  a->gap = malloc(sizeof(size_t) * 2 * ((size_t)a->nw + 1));
  if (!o || !a->gap) {
    free(o);
    return -1;
  }
  memcpy(o, a->wd, sizeof *o * (size_t)a->nw);
  qsort(o, (size_t)a->nw, sizeof *o, by_offset);
  size_t at = 0;
  for (int q = 0; q <= a->nw; q++) {
    size_t b = q < a->nw ? o[q]->offset : host_bytes(a), e = q < a->nw ? o[q]->offset + o[q]->nbytes : b;
    if (b > at) {
      a->gap[2 * a->ngap] = at;
      a->gap[2 * a->ngap + 1] = b;
      a->ngap++;
    }
    if (e > at) at = e;
  }
  free(o);
  return 0;
}

int rt_async_init(rt_worker *w, char *e, size_t elen) {
  const pipert_pipeline *p = w->p;
  const pipert_stage_desc *d = p->stages[w->stage].stage;
  struct rt_async *a = calloc(1, sizeof *a);
  w->async = a;
  a->mode = rt_async_mode(p);
  a->N = p->n_stages;
  a->k = w->stage;
  a->Mb = p->microbatches > 0 ? p->microbatches : 1;
  a->len = w->prog_len;
  a->wd = calloc((size_t)d->n_params + 1, sizeof *a->wd);
  a->mom = calloc((size_t)d->n_params + 1, sizeof *a->mom);
  for (int i = 0; i < d->n_params; i++) {
    const pipert_param_desc *pd = &d->params[i];
    if (pd->kind == PIPERT_PARAM_WEIGHT && !pd->owner) {
      snprintf(e, elen, "stage %d: weight '%s' is read by several stages (tied), which asynchronous schedules do not run",
               w->stage, pd->name);
      return -1;
    }
    if (pd->kind == PIPERT_PARAM_WEIGHT) {
      a->wd[a->nw++] = pd;
      if (pd->offset + pd->nbytes > a->wend) a->wend = pd->offset + pd->nbytes;
    }
    if (pd->kind == PIPERT_PARAM_HYPER && !strcmp(pd->name, "hyper/lr")) a->lr = pd;
  }
  for (int i = 0; i < a->nw && a->mode == RT_ASYNC_SPECTRAIN; i++) {
    char nm[1024];
    snprintf(nm, sizeof nm, "state/%s/momentum", a->wd[i]->name);
    for (int j = 0; j < d->n_params; j++)
      if (d->params[j].kind == PIPERT_PARAM_OPTSTATE && !strcmp(d->params[j].name, nm)) a->mom[i] = &d->params[j];
    if (!a->mom[i] || a->mom[i]->nbytes != a->wd[i]->nbytes || a->mom[i]->dtype != a->wd[i]->dtype) {
      snprintf(e, elen, "stage %d: spectrain: weight '%s' has no momentum buffer (SGD with momentum > 0)", w->stage,
               a->wd[i]->name);
      return -1;
    }
  }
  if (a->mode == RT_ASYNC_SPECTRAIN && a->nw && !a->lr) {
    snprintf(e, elen, "stage %d: spectrain: no hyper/lr", w->stage);
    return -1;
  }
  a->need = calloc((size_t)a->len + 1, sizeof(int));
  a->base = w->p->training ? w->async_base : 0;
  int64_t u = a->base;
  for (int i = 0; i < a->len; i++) u += w->prog[i].op == PIPERT_OP_STEP;
  a->versions = u + 1;
  a->last_need = malloc(sizeof(int) * (size_t)a->versions);
  a->stash = calloc((size_t)a->versions, sizeof(char *));
  a->mstash = calloc((size_t)a->versions, sizeof(char *));
  for (int64_t v = 0; v < a->versions; v++) a->last_need[v] = -1;
  /* what the continuation of this run reads of the versions before its start: forwards
   * N-1-k behind (2bw: the batch before) */
  a->keep = u - (a->mode == RT_ASYNC_2BW ? 1 : a->N - 1 - a->k);
  if (a->keep < 0) a->keep = 0;
  if (!w->async_keep) a->keep = u;
  for (int64_t v = a->keep; v < u; v++) a->last_need[v] = a->len;
  a->total = u;
  a->every = w->async_ckpt ? w->async_every : 0;
  a->ck = w->async_ckpt;
  /* a checkpoint after c updates keeps the versions the steps after c read: copied at the
   * update that overwrites them (last_need past it), freed after the c-th update */
  int64_t c = a->base;
  for (int i = 0; a->every > 0 && i < a->len; i++) {
    if (w->prog[i].op != PIPERT_OP_STEP || ++c % a->every || c >= a->total) continue;
    for (int64_t v = rt_async_first_kept(w, c); v < c; v++)
      if (a->last_need[v] < i + 1) a->last_need[v] = i + 1;
  }
  u = a->base;
  for (int i = 0; i < a->len; i++) {
    int op = w->prog[i].op, v = -1;
    int64_t j = a->base * a->Mb + w->prog[i].mb; /* the micro-batch since the first run */
    a->need[i] = -1;
    if (op == PIPERT_OP_STEP) u++;
    if (op != PIPERT_OP_FWD && op != PIPERT_OP_BWD) continue;
    int64_t lag = j - (a->N - 1 - a->k);
    if (a->mode == RT_ASYNC_2BW) v = (int)(j / a->Mb > 0 ? j / a->Mb - 1 : 0);
    else if (a->mode == RT_ASYNC_PIPEDREAM || op == PIPERT_OP_FWD) v = (int)(lag > 0 ? lag : 0);
    if (v < 0) continue; /* the latest (async's and spectrain's backward) */
    if (v > u) {
      snprintf(e, elen,
               "stage %d: the %s of micro-batch %lld needs the weights after %d updates, and %lld are done "
               "(2bw needs at least %d micro-batches a batch)",
               w->stage, op == PIPERT_OP_FWD ? "forward" : "backward", (long long)j, v, (long long)u, a->N - 1);
      return -1;
    }
    if (op == PIPERT_OP_FWD && a->mode != RT_ASYNC_2BW && v != u && v >= a->base) { /* the stream is the schedule */
      snprintf(e, elen, "stage %d: internal error: forward %lld after %lld updates, not %d", w->stage, (long long)j,
               (long long)u, v);
      return -1;
    }
    a->need[i] = v;
    if (a->last_need[v] < i) a->last_need[v] = i;
  }
  if (!find_gaps(a)) {
    a->cur = host_copy(a);
    a->tmp = host_copy(a);
  }
  if (a->cur && a->tmp) return 0;
  snprintf(e, elen, "stage %d: out of memory for the weight versions", w->stage);
  return -1;
}

int64_t rt_async_first_kept(const rt_worker *w, int64_t step) {
  const struct rt_async *a = w->async;
  int64_t v = step - (a->mode == RT_ASYNC_2BW ? 1 : a->N - 1 - a->k);
  return v > 0 ? v : 0;
}

/* a checkpoint after c updates is taken during this run */
static int ckpt_at(const struct rt_async *a, int64_t c) {
  return a->every > 0 && c > a->base && c < a->total && c % a->every == 0;
}

void rt_async_reset(rt_worker *w) { /* (a version put there for a resumed run stays) */
  struct rt_async *a = w->async;
  a->u = a->base;
  a->swapped = 0;
}

static double hyper(rt_worker *w, const pipert_param_desc *pd) {
  const pipert_stage_desc *d = w->p->stages[w->stage].stage;
  double x = 0;
  if (pd->dtype == PIPERT_DOUBLE) d->param_io(w->state, 0, pd->offset, &x, sizeof x);
  else {
    float f = 0;
    d->param_io(w->state, 0, pd->offset, &f, sizeof f);
    x = f;
  }
  return x;
}

/* y = x - c m over n floats, in blocks of 16 that the compiler vectorises at -O2 (the
 * same operations, no contraction: the same bits), then the rest */
static void predict_f32(float *restrict y, const float *restrict x, const float *restrict m, float c, size_t n) {
  size_t e = 0;
  for (; e + 16 <= n; e += 16)
    for (int j = 0; j < 16; j++) y[e + j] = x[e + j] - c * m[e + j];
  for (; e < n; e++) y[e] = x[e] - c * m[e];
}

int rt_async_before(rt_worker *w, int i) {
  struct rt_async *a = w->async;
  int op = w->prog[i].op, v = a->need[i];
  if (op == PIPERT_OP_BWD && w->prog[i].mb % a->Mb == 0 && w->prog[i].mb > 0) {
    /* a batch's first backward: the gradients start over (the last batch's stay for --save-grads) */
    if (w->p->stages[w->stage].stage->zero_grads(w->state)) return -1;
  }
  if (op == PIPERT_OP_FWD && w->prog[i].mb % a->Mb == 0) { /* batch c's first forward: a checkpoint's buffers */
    int64_t c = a->base + w->prog[i].mb / a->Mb;
    if (ckpt_at(a, c) && a->ck->take(a->ck->ctx, w, c, 1)) return -1;
  }
  if (!a->nw) return 0;
  int old = v >= 0 && v != a->u; /* a version held in a copy */
  int64_t ver = v >= 0 ? v : a->u;
  int s = a->mode != RT_ASYNC_SPECTRAIN ? 0 : op == PIPERT_OP_FWD ? a->k / 2 + a->N - a->k - 1 : a->k / 2;
  if (ver == 0) s = 0; /* v is zero before the first update */
  if (old && (!a->stash[v] || (s && !a->mstash[v]))) return -1; /* (rt_async_init and rt_async_missing prove them) */
  if (!old && !s) return 0;
  const pipert_stage_desc *d = w->p->stages[w->stage].stage;
  const char *src = old ? a->stash[v] : NULL;
  if (s) { /* spectrain: W_hat = W - s*lr*v into tmp, W and v the version's */
    double c = (double)s * hyper(w, a->lr);
    const char *W = src, *M = old ? a->mstash[v] : a->cur, *pm = NULL;
    if (!old) { /* the latest: W and v read in the parameter memory, or copied from it */
      if (d->param_memory && !(pm = d->param_memory(w->state))) return -1;
      if (!pm && (io_all(w, 0, a->tmp) || io_mom(w, a->cur))) return -1;
      W = pm ? pm : a->tmp;
      if (pm) M = pm;
    }
    for (int q = 0; q < a->nw; q++) {
      const pipert_param_desc *pd = a->wd[q];
      size_t off = pd->offset, moff = pm ? a->mom[q]->offset : off;
      if (pd->dtype == PIPERT_DOUBLE) {
        const double *x = (const double *)(const void *)(W + off), *m = (const double *)(const void *)(M + moff);
        double *y = (double *)(void *)(a->tmp + off);
        for (size_t e = 0; e < pd->nbytes / sizeof(double); e++) y[e] = x[e] - c * m[e];
      } else
        predict_f32((float *)(void *)(a->tmp + off), (const float *)(const void *)(W + off),
                    (const float *)(const void *)(M + moff), (float)c, pd->nbytes / sizeof(float));
    }
    src = a->tmp;
  }
  if (d->weights_at) {
    if (d->weights_at(w->state, src)) return -1;
    a->swapped = 1;
    return 0;
  }
  if (io_all(w, 0, a->cur)) return -1;
  a->swapped = 2;
  return io_all(w, 1, (char *)src);
}

int rt_async_after(rt_worker *w, int i) {
  struct rt_async *a = w->async;
  (void)i;
  int how = a->swapped;
  a->swapped = 0;
  if (how == 1) return w->p->stages[w->stage].stage->weights_at(w->state, NULL);
  return how == 2 ? io_all(w, 1, a->cur) : 0;
}

int rt_async_step(rt_worker *w, int i, int after) {
  struct rt_async *a = w->async;
  if (!after) { /* the update would overwrite version u: copy it if a later instruction reads it */
    if (a->nw && a->last_need[a->u] > i && !a->stash[a->u]) {
      if (!(a->stash[a->u] = host_copy(a)) || io_all(w, 0, a->stash[a->u])) return -1;
      if (a->mode == RT_ASYNC_SPECTRAIN && (!(a->mstash[a->u] = host_copy(a)) || io_mom(w, a->mstash[a->u]))) return -1;
    }
    return 0;
  }
  a->u++;
  if (ckpt_at(a, a->u) && a->ck->take(a->ck->ctx, w, a->u, 0)) return -1;
  for (int64_t v = 0; v < a->u && v < a->versions; v++)
    if (a->stash[v] && a->last_need[v] < i) {
      release(a, a->stash[v]);
      release(a, a->mstash[v]);
      a->stash[v] = a->mstash[v] = NULL;
    }
  return 0;
}

int rt_async_kept(const rt_worker *w, int64_t *first, int64_t *end) {
  const struct rt_async *a = w->async;
  *first = a ? a->keep : 0;
  *end = a ? a->versions - 1 : 0;
  return a ? a->nw : 0;
}

void *rt_async_version(rt_worker *w, int64_t v, int momentum, int create) {
  struct rt_async *a = w->async;
  if (!a || v < 0 || v >= a->versions || (momentum && a->mode != RT_ASYNC_SPECTRAIN)) return NULL;
  char **slot = momentum ? &a->mstash[v] : &a->stash[v];
  if (!*slot && create) *slot = host_copy(a);
  return *slot;
}

const pipert_param_desc *rt_async_weight(const rt_worker *w, int q, size_t *offset) {
  const struct rt_async *a = w->async;
  if (q < 0 || q >= a->nw) return NULL;
  *offset = a->wd[q]->offset;
  return a->wd[q];
}

int64_t rt_async_missing(const rt_worker *w) {
  const struct rt_async *a = w->async;
  for (int i = 0; a && a->nw && i < a->len; i++) { /* (a stage without weights has no versions) */
    int v = a->need[i];
    if (v < 0 || v >= a->base) continue;
    int s = a->mode == RT_ASYNC_SPECTRAIN && v > 0 && w->prog[i].op == PIPERT_OP_FWD && a->k / 2 + a->N - a->k - 1 > 0;
    if (!a->stash[v] || (s && !a->mstash[v])) return v;
  }
  return -1;
}

size_t rt_async_copy_bytes(const pipert_stage_desc *d) {
  size_t n = 0;
  for (int i = 0; i < d->n_params; i++)
    if (d->params[i].kind == PIPERT_PARAM_WEIGHT && d->params[i].offset + d->params[i].nbytes > n)
      n = d->params[i].offset + d->params[i].nbytes;
  return n;
}

int rt_async_io(rt_worker *w, int64_t v, int mom, int write, void *buf, size_t nbytes) {
  struct rt_async *a = w ? w->async : NULL;
  if (!a || nbytes != a->wend) return -1;
  char *c = rt_async_version(w, v, mom, write);
  if (!c) return write ? -1 : 0;
  if (write) memcpy(c, buf, nbytes);
  else memcpy(buf, c, nbytes);
  return 1;
}

void rt_async_free(rt_worker *w) {
  struct rt_async *a = w->async;
  if (!a) return;
  for (int64_t v = 0; v < a->versions; v++) {
    free(a->stash[v]);
    free(a->mstash[v]);
  }
  free(a->stash);
  free(a->mstash);
  free(a->need);
  free(a->last_need);
  free(a->wd);
  free(a->mom);
  free(a->cur);
  free(a->tmp);
  free(a->gap);
  free(a->spare[0]);
  free(a->spare[1]);
  free(a);
  w->async = NULL;
}
