/* partition.c — bottleneck-optimal pipeline split over prefix states (see partition.h). */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "passes/plan/partition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void pass_plan_opts_default(pass_plan_opts *o, int devices) {
  memset(o, 0, sizeof *o);
  o->devices = devices;
  o->microbatches = 4 * (devices > 0 ? devices : 1);
  o->schedule = PASS_SCHED_1F1B;
  o->topo.intra_gbps = 100.0;
  o->topo.intra_lat_ms = 0.01;
  o->topo.inter_gbps = 12.5;
  o->topo.inter_lat_ms = 0.02;
  o->optimizer_state_factor = 2.0;
}

/* ---- cost model --------------------------------------------------------------- */

int pass_device_host(const pass_topology *t, int dev) { return t->gpus_per_host > 0 ? dev / t->gpus_per_host : 0; }

static double xfer(double gbps, double lat, uint64_t bytes) {
  return lat + (gbps > 0 ? (double)bytes / (gbps * 1e6) : 0.0);
}

double pass_link_ms(const pass_topology *t, int a, int b, uint64_t bytes) {
  if (pass_device_host(t, a) == pass_device_host(t, b)) return xfer(t->intra_gbps, t->intra_lat_ms, bytes);
  return xfer(t->inter_gbps, t->inter_lat_ms, bytes);
}

static void allreduce_coef(const pass_topology *t, int first, int r, double *per_byte, double *fixed) {
  *per_byte = *fixed = 0;
  if (r <= 1) return;
  int intra = pass_device_host(t, first) == pass_device_host(t, first + r - 1);
  double bw = intra ? t->intra_gbps : t->inter_gbps;
  double lat = intra ? t->intra_lat_ms : t->inter_lat_ms;
  *per_byte = bw > 0 ? 2.0 * (r - 1) / r / (bw * 1e6) : 0.0;
  *fixed = 2.0 * (r - 1) * lat;
}

double pass_allreduce_ms(const pass_topology *t, int first, int r, uint64_t bytes) {
  double pb, fx;
  allreduce_coef(t, first, r, &pb, &fx);
  return r <= 1 ? 0.0 : (double)bytes * pb + fx;
}

double pass_replica_share(int microbatches, int replicas) {
  int M = microbatches > 0 ? microbatches : 1, r = replicas > 0 ? replicas : 1;
  return (double)((M + r - 1) / r) / M;
}

int pass_max_replicas(const pass_plan_opts *o) {
  int g = o->devices > 0 ? o->devices : 1;
  if (o->no_replicate) return 1;
  return o->microbatches > 0 && o->microbatches < g ? o->microbatches : g;
}

double pass_stage_time(const pass_plan_opts *o, const pass_stage_agg *s) {
  double c = (s->fwd_ms + (o->training ? s->bwd_ms : 0.0)) * pass_replica_share(o->microbatches, s->replicas);
  if (o->training && s->replicas > 1)
    c += pass_allreduce_ms(&o->topo, s->dev_first, s->replicas, s->param_bytes) / o->microbatches;
  return c;
}

double pass_boundary_time(const pass_plan_opts *o, int dev_next, uint64_t bytes, uint64_t grad_bytes) {
  double x = pass_link_ms(&o->topo, dev_next - 1, dev_next, bytes);
  if (o->training) x += pass_link_ms(&o->topo, dev_next, dev_next - 1, grad_bytes);
  return x;
}

const char *pass_async_name(int mode) {
  static const char *const n[] = {NULL, "pipedream", "async", "spectrain", "2bw"};
  return mode > 0 && mode <= PASS_ASYNC_2BW ? n[mode] : NULL;
}

int pass_async_from_name(const char *name) {
  for (int m = 1; name && m <= PASS_ASYNC_2BW; m++)
    if (!strcmp(name, pass_async_name(m))) return m;
  return PASS_ASYNC_NONE;
}

int pass_async_versions(int mode, int N, int k) {
  return mode == PASS_ASYNC_PIPEDREAM ? (N - k > 1 ? N - k : 1)
         : mode == PASS_ASYNC_SPECTRAIN || mode == PASS_ASYNC_2BW ? 2
                                                                   : 1;
}

void pass_async_staleness(int mode, int N, int k, int *fwd, int *bwd, int *ahead_fwd, int *ahead_bwd) {
  int lag = N - 1 - k > 0 ? N - 1 - k : 0;
  *fwd = *bwd = *ahead_fwd = *ahead_bwd = 0;
  if (mode == PASS_ASYNC_PIPEDREAM) *fwd = *bwd = lag;
  else if (mode == PASS_ASYNC_VANILLA) *fwd = lag;
  else if (mode == PASS_ASYNC_SPECTRAIN) {
    *fwd = lag;
    *ahead_fwd = k / 2 + N - k - 1;
    *ahead_bwd = k / 2;
  } else if (mode == PASS_ASYNC_2BW) *fwd = *bwd = 1;
}

uint64_t pass_stage_held(const pass_plan_opts *o, int dev_first, int replicas) {
  /* micro-batches one replica holds at once; replicas take whole micro-batches in turn */
  uint64_t r = (uint64_t)(replicas > 0 ? replicas : 1), M = (uint64_t)o->microbatches, held = 1;
  if (o->training) {
    held = (M + r - 1) / r; /* GPipe: every one of its micro-batches */
    if (o->schedule == PASS_SCHED_1F1B) {
      /* 1F1B: the stage's lead L (schedule.h) plus one; L is a multiple of r and at
       * most A + (r - 1) + sum of (r' - 1) over the later stages (the roundings),
       * A = the devices after this stage; that sum is at most A - 1, and 0 when no
       * stage is replicated */
      uint64_t A = (uint64_t)(o->devices - (dev_first + (int)r)), L = A + r - 1;
      if (pass_max_replicas(o) > 1 && A > 1) L += A - 1;
      if (L / r + 1 < held || o->async_mode) held = L / r + 1; /* no flush: the lead whatever M */
    }
  }
  return held ? held : 1;
}

uint64_t pass_stage_memory(const pass_plan_opts *o, const pass_stage_agg *s) {
  double f = o->training ? 2.0 + o->optimizer_state_factor : 1.0;
  if (o->training && o->async_mode) f += pass_async_versions(o->async_mode, o->devices, s->dev_first) - 1;
  uint64_t stat = (uint64_t)((double)s->param_bytes * f), held = pass_stage_held(o, s->dev_first, s->replicas);
  int mode = o->recompute == PASS_PLAN_RC_AUTO ? s->recompute : o->recompute;
  if (o->training && mode) return stat + s->act_bytes + (held - 1) * (s->in_bytes + s->out_bytes + s->keep_bytes);
  return stat + held * s->act_bytes;
}

/* ---- the DP ----------------------------------------------------------------------- */

typedef struct dp_ctx {
  const pass_plan_opts *o;
  const pass_states *st;
  int n, g, npairs, max_r;
  /* Stage modes: one, or with recompute chosen per stage (PASS_PLAN_RC_AUTO) three: none,
   * selective, full, each a stage time W and a memory term of its own. A stage fits
   * when one of them fits T and memory; the DP runs its range machinery per mode. */
  int Q;
  double *W[3];              /* [n+1] per mode: prefix of fwd + training*bwd (+ the mode's recomputed forward) */
  const uint64_t *keep[3];   /* [n+1] per mode: prefix of kept bytes, the recompute memory term; NULL: the
                                plain term (monotone in the stage's extent) */
  int code[3];               /* per mode: the stage's recompute value (pass_stage.recompute) */
  double *inv_r, *arb, *arc; /* per (m, r) pair */
  double *bnd;               /* [(n+1)*(g+1)] boundary time after state i, next stage at device m */
  int *lo_mem;               /* [npairs*(n+1)] smallest i meeting the plain memory term for a stage ending
                                at j; NULL = no limit or no plain mode */
  int *lo;                   /* [Q*npairs] two-pointer state per mode and pair */
  /* A memory limit with recompute. A stage (i, j]'s memory, Ab[j] - Ab[i] + h (cut[i] +
   * cut[j] + K[j] - K[i]) with h = held - 1 of its pair and K the mode's kept bytes, is
   * not monotone in i (the cut bytes are not), so the admissible i are no range. It fits
   * iff key(i) = h (cut[i] - K[i]) - Ab[i] <= limit - Ab[j] - h (cut[j] + K[j]): per
   * mode and pair, a deque of the G-marked i in the time window [lo, j) with increasing
   * keys (a sliding-window minimum) answers "some marked i fits" in O(1) amortised, so
   * a check stays O(Q n g^2). */
  int rc;               /* some mode has a deque */
  double *hm1, *Ab;     /* [npairs] held - 1; [n+1] prefix of param * f + act */
  int *dq, *dqh, *dqt;  /* [Q*npairs*(n+1)] deques; [Q*npairs] head, tail */
  unsigned char *F, *G; /* [(n+1)*(g+1)] */
  int *cnt;             /* [(g+1)*(n+2)] prefix counts of G over i, per m */
  long checks;
} dp_ctx;

static inline int pair_idx(int m, int r) { return m * (m - 1) / 2 + (r - 1); }

static inline double dp_stage_time(const dp_ctx *c, int q, int p, int i, int j) {
  return (c->W[q][j] - c->W[q][i]) * c->inv_r[p] + (double)(c->st->param[j] - c->st->param[i]) * c->arb[p] + c->arc[p];
}

static inline int dp_deque(const dp_ctx *c, int q) { return c->o->mem_limit && c->keep[q]; }

static inline double rc_key(const dp_ctx *c, int q, int p, int i) {
  return c->hm1[p] * ((double)c->st->cut[i] - (double)c->keep[q][i]) - c->Ab[i];
}

static inline int rc_mem_ok(const dp_ctx *c, int q, int p, int i, int j) {
  return rc_key(c, q, p, i) <=
         (double)c->o->mem_limit - c->Ab[j] - c->hm1[p] * ((double)c->st->cut[j] + (double)c->keep[q][j]);
}

/* Time, and the plain memory term's range, of stage (i, j] in mode q on pair p. */
static inline int dp_stage_ok(const dp_ctx *c, int q, int p, int i, int j, double T) {
  if (!c->keep[q] && c->lo_mem && i < c->lo_mem[(size_t)p * (size_t)(c->n + 1) + (size_t)j]) return 0;
  return dp_stage_time(c, q, p, i, j) <= T;
}

static int dp_feasible(dp_ctx *c, double T) {
  int n = c->n, g = c->g, G1 = g + 1, NP = c->npairs;
  size_t N2 = (size_t)n + 2;
  c->checks++;
  memset(c->F, 0, (size_t)(n + 1) * (size_t)G1);
  memset(c->G, 0, (size_t)(n + 1) * (size_t)G1);
  for (int x = 0; x < c->Q * NP; x++) c->lo[x] = 0;
  c->F[0] = c->G[0] = 1;
  for (int m = 0; m <= g; m++) {
    c->cnt[(size_t)m * N2 + 0] = 0;
    c->cnt[(size_t)m * N2 + 1] = c->G[m];
  }
  if (c->rc)
    for (int x = 0; x < c->Q * NP; x++) c->dqh[x] = c->dqt[x] = 0;
  for (int j = 1; j <= n; j++) {
    unsigned char *Fj = c->F + (size_t)j * G1, *Gj = c->G + (size_t)j * G1;
    /* i = j - 1 enters every deque whose pair's previous stages it can end */
    for (int q = 0; q < c->Q; q++) {
      if (!dp_deque(c, q)) continue;
      for (int m = 1; m <= g; m++)
        for (int r = 1; r <= m && r <= c->max_r; r++) {
          int p = pair_idx(m, r), x = q * NP + p;
          if (!c->G[(size_t)(j - 1) * G1 + (m - r)]) continue;
          int *dq = c->dq + (size_t)x * (size_t)(n + 1), t = c->dqt[x];
          double k = rc_key(c, q, p, j - 1);
          while (t > c->dqh[x] && rc_key(c, q, p, dq[t - 1]) >= k) t--;
          dq[t++] = j - 1;
          c->dqt[x] = t;
        }
    }
    for (int m = 1; m <= g; m++) {
      int rmax = m < c->max_r ? m : c->max_r, f = 0;
      for (int r = 1; r <= rmax && !f; r++) {
        int mp = m - r, p = pair_idx(m, r);
        const int *cm = c->cnt + (size_t)mp * N2;
        if (cm[j] == 0) continue; /* no G[i][mp] for i < j */
        for (int q = 0; q < c->Q && !f; q++) {
          int x = q * NP + p, lo = c->lo[x];
          while (lo < j && !dp_stage_ok(c, q, p, lo, j, T)) lo++;
          c->lo[x] = lo;
          if (dp_deque(c, q)) {
            const int *dq = c->dq + (size_t)x * (size_t)(n + 1);
            int h = c->dqh[x];
            while (h < c->dqt[x] && dq[h] < lo) h++;
            c->dqh[x] = h;
            if (h < c->dqt[x] && rc_mem_ok(c, q, p, dq[h], j)) f = 1;
          } else if (lo < j && cm[j] - cm[lo] > 0) {
            f = 1;
          }
        }
      }
      Fj[m] = (unsigned char)f;
      if (f && j < n && m < g && c->bnd[(size_t)j * G1 + m] <= T) Gj[m] = 1;
    }
    for (int m = 0; m <= g; m++) c->cnt[(size_t)m * N2 + j + 1] = c->cnt[(size_t)m * N2 + j] + Gj[m];
  }
  for (int m = 1; m <= g; m++)
    if (c->F[(size_t)n * G1 + m]) return 1;
  return 0;
}

/* Sets up c for one order: the stage modes (Q, code, keep) and the tables'
 * allocations. Returns -1 on no memory (c can be freed either way). */
static int dp_ctx_init(dp_ctx *c, const pass_plan_opts *o, const pass_states *st) {
  memset(c, 0, sizeof *c);
  c->o = o;
  c->st = st;
  c->n = st->n;
  c->g = o->devices;
  c->max_r = pass_max_replicas(o);
  c->npairs = c->g * (c->g + 1) / 2;
  int n = c->n, G1 = c->g + 1, NP = c->npairs, plain = 0;
  int rcm = o->training ? o->recompute : PASS_PLAN_RC_NONE;
  c->Q = rcm == PASS_PLAN_RC_AUTO ? 3 : 1;
  for (int q = 0; q < c->Q; q++) {
    c->W[q] = malloc(sizeof(double) * (size_t)(n + 1));
    if (!c->W[q]) return -1;
  }
  if (rcm == PASS_PLAN_RC_AUTO) {
    c->code[0] = PASS_PLAN_RC_NONE;
    c->code[1] = PASS_PLAN_RC_SELECTIVE;
    c->keep[1] = st->rck[0];
    c->code[2] = PASS_PLAN_RC_FULL;
    c->keep[2] = st->rck[1];
  } else {
    c->code[0] = rcm;
    c->keep[0] = rcm ? st->keep : NULL;
  }
  for (int q = 0; q < c->Q; q++) {
    plain |= !c->keep[q];
    c->rc |= dp_deque(c, q);
  }
  c->inv_r = malloc(sizeof(double) * (size_t)NP);
  c->arb = malloc(sizeof(double) * (size_t)NP);
  c->arc = malloc(sizeof(double) * (size_t)NP);
  c->bnd = malloc(sizeof(double) * (size_t)(n + 1) * (size_t)G1);
  c->lo = malloc(sizeof(int) * (size_t)NP * (size_t)c->Q);
  c->F = malloc((size_t)(n + 1) * (size_t)G1);
  c->G = malloc((size_t)(n + 1) * (size_t)G1);
  c->cnt = malloc(sizeof(int) * (size_t)G1 * (size_t)(n + 2));
  if (o->mem_limit && plain) c->lo_mem = malloc(sizeof(int) * (size_t)NP * (size_t)(n + 1));
  if (c->rc) {
    c->hm1 = malloc(sizeof(double) * (size_t)NP);
    c->Ab = malloc(sizeof(double) * (size_t)(n + 1));
    c->dq = malloc(sizeof(int) * (size_t)NP * (size_t)c->Q * (size_t)(n + 1));
    c->dqh = malloc(sizeof(int) * (size_t)NP * (size_t)c->Q);
    c->dqt = malloc(sizeof(int) * (size_t)NP * (size_t)c->Q);
  }
  if (!c->inv_r || !c->arb || !c->arc || !c->bnd || !c->lo || !c->F || !c->G || !c->cnt ||
      (o->mem_limit && plain && !c->lo_mem) || (c->rc && (!c->hm1 || !c->Ab || !c->dq || !c->dqh || !c->dqt)))
    return -1;
  return 0;
}

static void dp_ctx_free(dp_ctx *c) {
  for (int q = 0; q < 3; q++) free(c->W[q]);
  free(c->inv_r);
  free(c->arb);
  free(c->arc);
  free(c->bnd);
  free(c->lo);
  free(c->F);
  free(c->G);
  free(c->cnt);
  free(c->lo_mem);
  free(c->hm1);
  free(c->Ab);
  free(c->dq);
  free(c->dqh);
  free(c->dqt);
}

/* Fills c's tables from the order's states: the stage-time prefixes per mode,
 * the per-pair replica shares, allreduce terms, held counts and plain memory
 * ranges, and the boundary times. */
static void dp_ctx_tables(dp_ctx *c) {
  const pass_plan_opts *o = c->o;
  const pass_states *st = c->st;
  int n = c->n, g = c->g, G1 = g + 1;
  if (c->rc) {
    double f = 2.0 + o->optimizer_state_factor;
    for (int s = 0; s <= n; s++) c->Ab[s] = (double)st->param[s] * f + (double)st->act[s];
  }
  for (int s = 0; s <= n; s++) {
    double w = st->fwd[s] + (o->training ? st->bwd[s] : 0.0);
    c->W[0][s] = w;
    for (int q = 1; q < c->Q; q++) c->W[q][s] = w + st->rcw[q - 1][s];
  }
  for (int m = 1; m <= g; m++)
    for (int r = 1; r <= m; r++) {
      int p = pair_idx(m, r);
      c->inv_r[p] = pass_replica_share(o->microbatches, r);
      c->arb[p] = c->arc[p] = 0;
      if (o->training && r > 1) {
        allreduce_coef(&o->topo, m - r, r, &c->arb[p], &c->arc[p]);
        c->arb[p] /= o->microbatches;
        c->arc[p] /= o->microbatches;
      }
      if (c->rc) c->hm1[p] = (double)(pass_stage_held(o, m - r, r) - 1);
      if (c->lo_mem) { /* the plain term (mode 0 whenever there is one) */
        int *lm = c->lo_mem + (size_t)p * (size_t)(n + 1), i = 0;
        pass_stage_agg a = {0, 0, 0, 0, m - r, r, 0, 0, 0, PASS_PLAN_RC_NONE};
        for (int j = 0; j <= n; j++) {
          for (; i < j; i++) {
            a.param_bytes = st->param[j] - st->param[i];
            a.act_bytes = st->act[j] - st->act[i];
            if (pass_stage_memory(o, &a) <= o->mem_limit) break;
          }
          lm[j] = i;
        }
      }
    }
  for (int s = 0; s <= n; s++)
    for (int m = 0; m <= g; m++)
      c->bnd[(size_t)s * G1 + m] = (m >= 1 && m < g) ? pass_boundary_time(o, m, st->cut[s], st->cut_grad[s]) : INFINITY;
}

/* The smallest feasible bottleneck T (relative 1e-10), searched from the lower
 * bound lb, in *T; F and G are left as dp_feasible fills them for it. Returns 0
 * (nothing searched) when T cannot clearly beat beat, the bottleneck of the best
 * order so far, else 1. */
static int dp_min_bottleneck(dp_ctx *c, double lb, double beat, double *T) {
  if (!dp_feasible(c, isfinite(beat) ? beat * (1 - 1e-9) : INFINITY)) return 0;
  double hi, lo;
  if (dp_feasible(c, 0.0)) {
    hi = lo = 0.0;
  } else {
    lo = lb > 0 ? lb * (1 - 1e-12) : 0.0;
    hi = lb > 0 ? lb * (1 + 1e-10) : 1e-6;
    if (isfinite(beat) && hi > beat) hi = beat * (1 - 1e-9);
    while (!dp_feasible(c, hi)) {
      lo = hi;
      hi *= 2;
      if (isinf(hi)) break;
    }
    while (hi - lo > 1e-10 * hi) {
      double mid = 0.5 * (lo + hi);
      if (mid <= lo || mid >= hi) break;
      if (dp_feasible(c, mid)) hi = mid;
      else lo = mid;
    }
  }
  dp_feasible(c, hi);
  *T = hi;
  return 1;
}

/* Reconstructs the split for bottleneck T (F and G filled for it) on the fewest
 * devices, into cuts, reps and modes in pipeline order. Backtracks from the
 * last state taking the smallest r, then the mode recomputing least, then the
 * largest i (shortest last stage). Returns the number of stages, -1 if none is
 * found. */
static int dp_backtrack(const dp_ctx *c, double T, int *cuts, int *reps, int *modes) {
  int n = c->n, g = c->g, G1 = g + 1;
  int mbest = 0;
  for (int m = 1; m <= g && !mbest; m++)
    if (c->F[(size_t)n * G1 + m]) mbest = m;
  int k = 0, j = n, m = mbest;
  while (j > 0) {
    int found = 0;
    int rmax = m < c->max_r ? m : c->max_r;
    for (int r = 1; r <= rmax && !found; r++) {
      int p = pair_idx(m, r), mp = m - r;
      for (int q = 0; q < c->Q && !found; q++)
        for (int i = j - 1; i >= 0 && dp_stage_ok(c, q, p, i, j, T); i--)
          if (c->G[(size_t)i * G1 + mp] && (!dp_deque(c, q) || rc_mem_ok(c, q, p, i, j))) {
            cuts[k] = j;
            reps[k] = r;
            modes[k] = c->code[q];
            k++;
            j = i;
            m = mp;
            found = 1;
            break;
          }
    }
    if (!found) return -1; /* cannot happen: F said feasible */
  }
  /* reverse into pipeline order */
  for (int a = 0, b = k - 1; a < b; a++, b--) {
    int x = cuts[a];
    cuts[a] = cuts[b];
    cuts[b] = x;
    x = reps[a];
    reps[a] = reps[b];
    reps[b] = x;
    x = modes[a];
    modes[a] = modes[b];
    modes[b] = x;
  }
  return k;
}

/* One order: find the smallest feasible T (relative 1e-10), reconstruct the
 * split with the fewest devices. cuts[k] = end state of stage k, reps[k] = r_k,
 * modes[k] its recompute value. Returns the number of stages, 0 if nothing fits in
 * memory, -1 on no memory. */
static int dp_solve(const pass_dag *d, const pass_plan_opts *o, const pass_states *st, double lb, double beat,
                    int *cuts, int *reps, int *modes, long *checks) {
  dp_ctx c;
  int rc = -1;
  double T;
  (void)d;
  if (dp_ctx_init(&c, o, st) == 0) {
    dp_ctx_tables(&c);
    /* beat: bottleneck of the best order so far; this order is only solved
     * if it can do clearly better. */
    rc = dp_min_bottleneck(&c, lb, beat, &T) ? dp_backtrack(&c, T, cuts, reps, modes) : 0;
  }
  *checks += c.checks;
  dp_ctx_free(&c);
  return rc;
}

/* ---- the exact DP over all down-sets (the antichain DAG) ------------------------------
 *
 * Same recurrence as dp_feasible, over the states of pass_downsets_build instead
 * of a prefix chain: F[D][m] holds if some down-set D' < D and r <= m have
 * G[D'][m-r] (F, and the boundary after D' fits T on the link into device m-r)
 * and the stage D \ D' on devices [m-r, m) fits T and memory. Every D \ D' is
 * convex and every chain of down-sets is a linear pipeline, so this covers all
 * convex linear splits.
 *
 * Enumerating the pairs (D', D) would be quadratic in the states. Instead, for
 * a fixed (m, r) the stage time is key(D) - key(D') + const with key = W/r +
 * P*allreduce_per_byte: linear and monotone under inclusion, so the best D'
 * for D is the one of largest key among the G-marked down-sets below D. That
 * maximum is propagated up the antichain DAG: H[D] = D if marked, else the best
 * of H over D's lower covers D \ {v} (v maximal in D); every D' < D lies below
 * some lower cover, so the strict maximum Hs[D] is the best over the lower
 * covers. One (m, r) costs O(states + edges). Without allreduce terms (inference,
 * or r = 1 only) the key is W for every r, and one H per m-r serves all r.
 *
 * Windows: a prefix D covered by m devices within T has W(D) <= m T, and the
 * rest needs W(V) - W(D) <= (g - m) T; states are sorted by W (antichain.h), so
 * each layer only scans a range of them.
 *
 * Memory: when the whole model as one stage fits the limit, no stage can
 * exceed it and memory is ignored. Otherwise, when the best-time D' violates
 * memory, the down-sets D' < D whose stage fits both time and memory (an
 * up-closed family, reachable from D through lower covers) are searched
 * depth-first for a marked one. With recompute memory counts the cuts and is
 * not monotone (a larger stage may fit where a smaller did not): the search
 * then walks the up-closed family of stages that fit time and checks memory at
 * each (the bound for "the whole model fits" takes the largest cut both ways).
 *
 * Every unit of work (edge, state, class comparison; a search step counts 6) is
 * counted; past the budget the DP stops and the prefix plan stands: the time
 * is bounded and the outcome is deterministic. */

typedef struct ex_ctx {
  const pass_plan_opts *o;
  const pass_downsets *ds;
  int S, g, G1, max_r, npairs, shared, nk, mem_binds, rc;
  double *inv_r, *arb, *arc; /* per (m, r) pair */
  unsigned char *F;          /* [S*G1] bit 0: F, bit 1: G */
  int *gfirst, *a, *b;       /* [G1] first G-marked state per layer, window [a, b] per layer */
  int *HU;                   /* [S] best marked down-set below, the same for every class (-1: none, -2: per class) */
  double *HK, *bk;           /* [S*nk] per class: key of the best marked down-set below; [nk] scratch */
  int *HI, *bi;              /* [S*nk] that down-set; [nk] scratch */
  int *ch_i;                 /* [S*G1] chosen D' */
  unsigned char *ch_r;       /* [S*G1] chosen r */
  int *stamp, *stk, gen;
  long work, budget;
  int over;
  long checks;
} ex_ctx;

static inline double ex_stage_time(const ex_ctx *c, int p, int i, int j) {
  return (c->ds->key[j] - c->ds->key[i]) * c->inv_r[p] + (double)(c->ds->param[j] - c->ds->param[i]) * c->arb[p] +
         c->arc[p];
}

static inline int ex_mem_ok(const ex_ctx *c, int i, int j, int m, int r) {
  pass_stage_agg a = {0,
                      0,
                      c->ds->param[j] - c->ds->param[i],
                      c->ds->act[j] - c->ds->act[i],
                      m - r,
                      r,
                      c->ds->cut[i],
                      c->ds->cut[j],
                      c->ds->keep[j] - c->ds->keep[i],
                      PASS_PLAN_RC_NONE};
  return pass_stage_memory(c->o, &a) <= c->o->mem_limit;
}

/* Depth-first search below D for a G[mp]-marked D' whose stage fits T and memory. */
static int ex_search(ex_ctx *c, int p, int mp, int m, int r, int D, int lo, double T) {
  const pass_downsets *ds = c->ds;
  int top = 0;
  if (++c->gen == 0x7fffffff) {
    memset(c->stamp, 0, sizeof(int) * (size_t)c->S);
    c->gen = 1;
  }
  for (long e = ds->lower_start[D]; e < ds->lower_start[D + 1]; e++) {
    int x = ds->lower[e];
    if (x >= lo && c->stamp[x] != c->gen) {
      c->stamp[x] = c->gen;
      c->stk[top++] = x;
    }
  }
  while (top > 0) {
    int x = c->stk[--top];
    c->work += 6; /* a step costs several walk units (memory model, scattered reads) */
    if (c->work > c->budget) {
      c->over = 1;
      return -1;
    }
    if (ex_stage_time(c, p, x, D) > T) continue; /* nor anything below */
    /* memory grows below x too, unless the exchanged tensors count (recompute): then a
     * larger stage may fit where x did not, and the walk goes on */
    int fits = ex_mem_ok(c, x, D, m, r);
    if (!fits && !c->rc) continue;
    if (fits && (c->F[(size_t)x * c->G1 + mp] & 2)) return x;
    for (long e = ds->lower_start[x]; e < ds->lower_start[x + 1]; e++) {
      int y = ds->lower[e];
      if (y >= lo && c->stamp[y] != c->gen) {
        c->stamp[y] = c->gen;
        c->stk[top++] = y;
      }
    }
  }
  return -1;
}

/* The stage (best, D] with r replicas ending at device m: does it fit T (and
 * memory, searching further below D when the best-time choice does not)? If
 * so record it for F[D][m] (later calls have smaller r and overwrite). */
static void ex_offer(ex_ctx *c, int best, int D, int mp, int r, int lo, double T) {
  int m = mp + r, p = pair_idx(m, r);
  unsigned char *f = &c->F[(size_t)D * c->G1 + m];
  if (best < 0 || ex_stage_time(c, p, best, D) > T) return;
  c->work += c->mem_binds;
  if (c->mem_binds && !ex_mem_ok(c, best, D, m, r)) {
    if (*f & 1) return; /* already feasible with more replicas */
    best = ex_search(c, p, mp, m, r, D, lo, T);
    if (best < 0) return;
  }
  *f |= 1;
  c->ch_i[(size_t)D * c->G1 + m] = best;
  c->ch_r[(size_t)D * c->G1 + m] = (unsigned char)r;
}

/* Propagate, up the antichain DAG, the best G[mp]-marked down-set below each
 * state, for each key class (one per r, or one shared), and offer the stages
 * ending at every state of the windows of layers mp + r.
 *
 * The class keys are W + c_r P (scaled by 1/r) with c_r >= 0, c_1 = 0. A
 * candidate maximising both W and W + c_max P maximises every class (the
 * maximum over candidates is convex in c, the candidate's key linear), so most
 * states keep one "uniform" best (HU >= 0, or -1: none); only where candidates
 * trade W against P (HU = -2) are per-class bests stored in HK/HI. */
static void ex_walk(ex_ctx *c, int mp, int R, double T) {
  const pass_downsets *ds = c->ds;
  /* classes 0 .. kn-1 (r = k + 1 <= R) are live at this layer; nk is the stride */
  int G1 = c->G1, nk = c->nk, kn = c->shared ? 1 : R, lo = c->gfirst[mp], hi = c->b[mp + R];
  double *bk = c->bk, cmax = 0;
  int *bi = c->bi;
  if (!c->shared)
    for (int r = 2; r <= R; r++) {
      int p = pair_idx(mp + r, r);
      if (c->arb[p] * r > cmax) cmax = c->arb[p] * r;
    }
  int r0 = 1; /* smallest r whose layer window reaches D (b grows with the layer) */
  long edges = 0, cls = 0;
  for (int D = lo; D <= hi; D++) {
    while (r0 < R && c->b[mp + r0] < D) r0++;
    int k0 = c->shared ? 0 : r0 - 1;
    /* uniform candidates: best by W and by W + cmax P */
    int b0 = -1, b1 = -1, mixed = 0;
    double k0v = -INFINITY, k1v = -INFINITY;
    for (long e = ds->lower_start[D]; e < ds->lower_start[D + 1]; e++) {
      int x = ds->lower[e];
      if (x < lo) continue;
      int h = c->HU[x];
      if (h == -2) {
        mixed = 1;
        continue;
      }
      if (h < 0) continue;
      double w = ds->key[h], w1 = w + cmax * (double)ds->param[h];
      if (w > k0v) {
        k0v = w;
        b0 = h;
      }
      if (w1 > k1v) {
        k1v = w1;
        b1 = h;
      }
    }
    edges += ds->lower_start[D + 1] - ds->lower_start[D];
    int uni = !mixed && b0 == b1;
    if (!uni) { /* per class, over every candidate */
      for (int k = k0; k < kn; k++) {
        bk[k] = -INFINITY;
        bi[k] = -1;
      }
      for (long e = ds->lower_start[D]; e < ds->lower_start[D + 1]; e++) {
        int x = ds->lower[e];
        if (x < lo) continue;
        int h = c->HU[x];
        if (h == -1) continue;
        if (h >= 0) {
          for (int k = k0; k < kn; k++) {
            int p = pair_idx(mp + k + 1, k + 1);
            double kv = ds->key[h] * c->inv_r[p] + (double)ds->param[h] * c->arb[p];
            if (kv > bk[k]) {
              bk[k] = kv;
              bi[k] = h;
            }
          }
        } else {
          const double *hk = c->HK + (size_t)x * (size_t)nk;
          const int *hx = c->HI + (size_t)x * (size_t)nk;
          for (int k = k0; k < kn; k++)
            if (hk[k] > bk[k]) {
              bk[k] = hk[k];
              bi[k] = hx[k];
            }
        }
      }
      cls += kn - k0;
    }
    for (int r = r0; r <= R; r++) {
      int m = mp + r;
      if (D >= c->a[m] && D <= c->b[m]) ex_offer(c, uni ? b0 : bi[c->shared ? 0 : r - 1], D, mp, r, lo, T);
    }
    if (c->F[(size_t)D * G1 + mp] & 2) {
      c->HU[D] = D; /* a marked down-set beats everything below it, in every class */
    } else if (uni) {
      c->HU[D] = b0;
    } else {
      c->HU[D] = -2;
      double *hk = c->HK + (size_t)D * (size_t)nk;
      int *hx = c->HI + (size_t)D * (size_t)nk;
      for (int k = k0; k < kn; k++) {
        hk[k] = bk[k];
        hx[k] = bi[k];
      }
    }
  }
  c->work += (hi - lo + 1) + edges + cls * 4;
}

/* first state with key >= w */
static int ex_lower_bound(const pass_downsets *ds, double w) {
  int lo = 0, hi = (int)ds->count;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (ds->key[mid] < w) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Returns the smallest m with F[V][m] (0: infeasible). Layers are completed in
 * order: once every layer below m has offered its stages, layer m is final. */
static int ex_feasible(ex_ctx *c, double T) {
  const pass_downsets *ds = c->ds;
  int S = c->S, g = c->g, G1 = c->G1;
  double WV = ds->key[S - 1], slack = 1e-12 * WV;
  c->checks++;
  memset(c->F, 0, (size_t)S * (size_t)G1);
  for (int m = 0; m <= g; m++) {
    c->gfirst[m] = S;
    double hiw = isinf(T) ? INFINITY : m * T * (1 + 1e-9) + slack;
    double low = m == g ? WV - slack : isinf(T) ? -INFINITY : WV - (g - m) * T * (1 + 1e-9) - slack;
    c->a[m] = m == 0 ? 0 : ex_lower_bound(ds, low);
    c->b[m] = m == 0 ? 0 : (isinf(hiw) ? S : ex_lower_bound(ds, nextafter(hiw, INFINITY))) - 1;
    if (m > 0 && c->a[m] < 1) c->a[m] = 1;
  }
  c->F[0] = 3;
  c->gfirst[0] = 0;
  c->work += S / 8 + 1;
  for (int mp = 0; mp < g; mp++) {
    if (mp > 0) {
      if (c->F[(size_t)(S - 1) * G1 + mp] & 1) return mp;
      for (int D = c->a[mp]; D <= c->b[mp] && D < S - 1; D++) {
        unsigned char *f = &c->F[(size_t)D * G1 + mp];
        if ((*f & 1) && pass_boundary_time(c->o, mp, ds->cut[D], ds->cut_grad[D]) <= T) {
          *f |= 2;
          if (c->gfirst[mp] == S) c->gfirst[mp] = D;
        }
      }
      c->work += c->b[mp] - c->a[mp] + 1;
    }
    if (c->gfirst[mp] >= S) continue;
    int R = c->max_r < g - mp ? c->max_r : g - mp;
    if (mp == 0) { /* {} is the only mark: the best down-set below anything */
      for (int r = R; r >= 1; r--) {
        for (int D = c->a[r]; D <= c->b[r]; D++) ex_offer(c, 0, D, 0, r, 0, T);
        c->work += c->b[r] - c->a[r] + 1;
      }
    } else if (c->gfirst[mp] <= c->b[mp + R]) {
      ex_walk(c, mp, R, T);
    }
    if (c->over) return 0;
    if (c->work > c->budget) {
      c->over = 1;
      return 0;
    }
  }
  return (c->F[(size_t)(S - 1) * G1 + g] & 1) ? g : 0;
}

/* The chain found by the last check ending with m devices: states chain[0..k)
 * (stage ends, pipeline order), replicas reps[]; returns k and its bottleneck. */
static int ex_chain(const ex_ctx *c, int m, int *chain, int *reps, double *bott) {
  int k = 0, D = c->S - 1;
  double b = 0;
  while (D != 0 && k <= c->g) {
    int i = c->ch_i[(size_t)D * c->G1 + m], r = c->ch_r[(size_t)D * c->G1 + m];
    double t = ex_stage_time(c, pair_idx(m, r), i, D);
    if (t > b) b = t;
    if (i != 0) {
      t = pass_boundary_time(c->o, m - r, c->ds->cut[i], c->ds->cut_grad[i]);
      if (t > b) b = t;
    }
    chain[k] = D;
    reps[k] = r;
    k++;
    D = i;
    m -= r;
  }
  for (int x = 0, y = k - 1; x < y; x++, y--) {
    int t = chain[x];
    chain[x] = chain[y];
    chain[y] = t;
    t = reps[x];
    reps[x] = reps[y];
    reps[y] = t;
  }
  *bott = b;
  return k;
}

static void ex_free(ex_ctx *c) {
  free(c->inv_r);
  free(c->arb);
  free(c->arc);
  free(c->F);
  free(c->gfirst);
  free(c->a);
  free(c->b);
  free(c->HU);
  free(c->HK);
  free(c->bk);
  free(c->HI);
  free(c->bi);
  free(c->ch_i);
  free(c->ch_r);
  free(c->stamp);
  free(c->stk);
}

/* Minimise the bottleneck over all chains of down-sets, only looking for one
 * below beat*(1-1e-9). Returns the number of stages (chain[], reps[]), 0 if
 * nothing beats `beat` (or fits), -1 on no memory, -2 over the work budget. */
static int ex_solve(const pass_plan_opts *o, const pass_downsets *ds, double lb, double beat, long budget, int *chain,
                    int *reps, long *checks, long *work) {
  ex_ctx c;
  memset(&c, 0, sizeof c);
  c.o = o;
  c.ds = ds;
  c.S = (int)ds->count;
  c.g = o->devices;
  c.G1 = c.g + 1;
  c.max_r = pass_max_replicas(o);
  c.npairs = c.g * (c.g + 1) / 2;
  c.shared = !o->training || c.max_r == 1; /* no allreduce term: the key is W for every r */
  c.budget = budget;
  c.nk = c.shared ? 1 : c.max_r;
  int S = c.S, g = c.g, G1 = c.G1, rc = -1;
  size_t SG = (size_t)S * (size_t)G1, HS = (size_t)S * (size_t)c.nk;
  c.inv_r = malloc(sizeof(double) * (size_t)c.npairs);
  c.arb = malloc(sizeof(double) * (size_t)c.npairs);
  c.arc = malloc(sizeof(double) * (size_t)c.npairs);
  c.F = malloc(SG);
  c.gfirst = malloc(sizeof(int) * (size_t)G1);
  c.a = malloc(sizeof(int) * (size_t)G1);
  c.b = malloc(sizeof(int) * (size_t)G1);
  c.HU = malloc(sizeof(int) * (size_t)S);
  c.HK = malloc(sizeof(double) * HS);
  c.HI = malloc(sizeof(int) * HS);
  c.bk = malloc(sizeof(double) * (size_t)c.nk);
  c.bi = malloc(sizeof(int) * (size_t)c.nk);
  c.ch_i = malloc(sizeof(int) * SG);
  c.ch_r = malloc(SG);
  c.rc = o->training && o->recompute;
  if (o->mem_limit) {
    /* a bound of any stage's memory: all of V on one replica of the first device (with
     * recompute, exchanging the largest cut both ways) */
    pass_stage_agg all = {0, 0, ds->param[S - 1], ds->act[S - 1], 0, 1, 0, 0, ds->keep[S - 1], PASS_PLAN_RC_NONE};
    for (int i = 0; c.rc && i < S; i++)
      if (ds->cut[i] > all.in_bytes) all.in_bytes = all.out_bytes = ds->cut[i];
    c.mem_binds = pass_stage_memory(o, &all) > o->mem_limit;
  }
  if (c.mem_binds) {
    c.stamp = calloc((size_t)S, sizeof(int));
    c.stk = malloc(sizeof(int) * (size_t)S);
  }
  if (!c.inv_r || !c.arb || !c.arc || !c.F || !c.gfirst || !c.a || !c.b || !c.HU || !c.HK || !c.HI || !c.bk || !c.bi ||
      !c.ch_i || !c.ch_r || (c.mem_binds && (!c.stamp || !c.stk)))
    goto out;
  for (int m = 1; m <= g; m++)
    for (int r = 1; r <= m; r++) {
      int p = pair_idx(m, r);
      c.inv_r[p] = pass_replica_share(o->microbatches, r);
      c.arb[p] = c.arc[p] = 0;
      if (o->training && r > 1) {
        double pb, fx;
        allreduce_coef(&o->topo, m - r, r, &pb, &fx);
        c.arb[p] = pb / o->microbatches;
        c.arc[p] = fx / o->microbatches;
      }
    }
  double T0 = isfinite(beat) ? beat * (1 - 1e-9) : INFINITY;
  int m = ex_feasible(&c, T0);
  if (c.over) {
    rc = -2;
    goto out;
  }
  if (!m) {
    rc = 0;
    goto out;
  }
  /* Bisection on T, except that every feasible check lowers hi to the actual
   * bottleneck of the chain it found and is followed by a probe just below
   * it: an infeasible probe proves hi optimal at once (the optimum is
   * usually reached within a few checks; bisection alone would spend ~25
   * more checks proving it). */
  double hi, lo = lb > 0 ? lb * (1 - 1e-12) : 0.0, v;
  int k = ex_chain(&c, m, chain, reps, &hi);
  if (hi < lo) lo = hi * (1 - 1e-12);
  int last_probe = 0, probed = 0; /* probed: hi has been probed */
  while (hi - lo > 1e-10 * hi) {
    int probe = !last_probe && !probed;
    double t = probe ? hi * (1 - 1e-10) : 0.5 * (lo + hi);
    if (t <= lo || t >= hi) break;
    m = ex_feasible(&c, t);
    if (c.over) {
      rc = -2;
      goto out;
    }
    if (m) {
      k = ex_chain(&c, m, chain, reps, &v); /* v <= t < hi: the best so far */
      hi = v;
      probed = 0;
    } else {
      lo = t;
      probed |= probe;
    }
    last_probe = probe;
  }
  rc = k; /* the chain of the last feasible check: the best one */
out:
  *checks += c.checks;
  *work += c.work;
  ex_free(&c);
  return rc;
}

/* The aggregate of stage (i, j] over st on devices [dev, dev + r), in recompute mode
 * `mode` (with AUTO: its recomputed forward and kept bytes from the nodes' rc arrays). */
static pass_stage_agg stage_agg(const pass_plan_opts *o, const pass_states *st, int i, int j, int dev, int r,
                                int mode) {
  pass_stage_agg a = {st->fwd[j] - st->fwd[i],
                      st->bwd[j] - st->bwd[i],
                      st->param[j] - st->param[i],
                      st->act[j] - st->act[i],
                      dev,
                      r,
                      st->cut[i],
                      st->cut[j],
                      st->keep[j] - st->keep[i],
                      mode};
  if (o->recompute == PASS_PLAN_RC_AUTO) {
    int q = mode == PASS_PLAN_RC_SELECTIVE ? 0 : mode == PASS_PLAN_RC_FULL ? 1 : -1;
    a.keep_bytes = q < 0 ? 0 : st->rck[q][j] - st->rck[q][i];
    if (q >= 0) a.bwd_ms += st->rcw[q][j] - st->rcw[q][i];
  }
  return a;
}

/* Evaluate a split (cuts/reps/modes over st) under the public cost model. */
static double eval_split(const pass_plan_opts *o, const pass_states *st, int k, const int *cuts, const int *reps,
                         const int *modes) {
  double b = 0;
  int prev = 0, dev = 0;
  for (int s = 0; s < k; s++) {
    pass_stage_agg a = stage_agg(o, st, prev, cuts[s], dev, reps[s], modes[s]);
    double t = pass_stage_time(o, &a);
    if (t > b) b = t;
    dev += reps[s];
    if (s + 1 < k) {
      t = pass_boundary_time(o, dev, st->cut[cuts[s]], st->cut_grad[cuts[s]]);
      if (t > b) b = t;
    }
    prev = cuts[s];
  }
  return b;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void pass_plan_free(pass_plan *p) {
  if (p->stages)
    for (int k = 0; k < p->n_stages; k++) {
      free(p->stages[k].nodes);
      free(p->stages[k].out_tensors);
    }
  if (p->streams)
    for (int k = 0; k < p->n_stages; k++) free(p->streams[k].v);
  free(p->streams);
  free(p->stages);
  free(p->order);
  memset(p, 0, sizeof *p);
}

static int build_plan(const pass_dag *d, const pass_plan_opts *o, const pass_states *st, int k, const int *cuts,
                      const int *reps, const int *modes, pass_plan *p) {
  int n = st->n;
  p->order_kind = st->kind;
  p->order = malloc(sizeof(int) * (size_t)n);
  p->stages = calloc((size_t)k, sizeof(pass_stage));
  int *stage_of = malloc(sizeof(int) * (size_t)n); /* by position */
  if (!p->order || !p->stages || !stage_of) {
    free(stage_of);
    return -1;
  }
  memcpy(p->order, st->order, sizeof(int) * (size_t)n);
  p->n_stages = k;
  int prev = 0, dev = 0;
  double bott = 0;
  for (int s = 0; s < k; s++) {
    pass_stage *S = &p->stages[s];
    S->id = s;
    S->first = prev;
    S->last = cuts[s];
    S->n_nodes = S->last - S->first;
    S->nodes = malloc(sizeof(int) * (size_t)S->n_nodes);
    if (!S->nodes) {
      free(stage_of);
      return -1;
    }
    for (int q = S->first; q < S->last; q++) {
      S->nodes[q - S->first] = st->order[q];
      stage_of[q] = s;
    }
    S->dev_first = dev;
    S->replicas = reps[s];
    pass_stage_agg a = stage_agg(o, st, prev, S->last, dev, reps[s], modes[s]);
    S->fwd_ms = a.fwd_ms;
    S->bwd_ms = o->training ? a.bwd_ms : 0.0;
    S->allreduce_ms = o->training ? pass_allreduce_ms(&o->topo, dev, a.replicas, a.param_bytes) : 0.0;
    S->compute_ms = pass_stage_time(o, &a);
    S->param_bytes = a.param_bytes;
    S->act_bytes = a.act_bytes;
    S->xch_bytes = a.in_bytes + a.out_bytes;
    S->keep_bytes = a.keep_bytes;
    S->recompute = o->training ? modes[s] : PASS_PLAN_RC_NONE;
    S->held = (int)pass_stage_held(o, dev, reps[s]);
    S->memory_bytes = pass_stage_memory(o, &a);
    if (S->compute_ms > bott) bott = S->compute_ms;
    dev += reps[s];
    if (s + 1 < k) {
      S->out_bytes = st->cut[S->last];
      S->out_grad_bytes = st->cut_grad[S->last];
      S->comm_ms = pass_boundary_time(o, dev, S->out_bytes, S->out_grad_bytes);
      if (S->comm_ms > bott) bott = S->comm_ms;
    }
    prev = cuts[s];
  }
  p->devices_used = dev;
  p->bottleneck_ms = bott;
  /* Boundary tensors: t crosses the cut after state s iff birth <= s < death. */
  for (int t = 0; t < d->n_tensors; t++) {
    const pass_dag_tensor *x = &d->tensors[t];
    int birth = x->producer < 0 ? 0 : st->pos[x->producer] + 1, death = birth;
    for (int c = 0; c < x->n_consumers; c++)
      if (st->pos[x->consumers[c]] + 1 > death) death = st->pos[x->consumers[c]] + 1;
    if (x->is_output) death = n + 1;
    if (death <= birth) continue;
    int ps = x->producer < 0 ? -1 : stage_of[st->pos[x->producer]];
    int ls = x->is_output ? k : stage_of[death - 1];
    if (!x->is_output && x->n_consumers == 0) continue;
    for (int s = 0; s + 1 < k; s++) {
      int cut = p->stages[s].last;
      if (birth <= cut && cut < death) {
        pass_stage *S = &p->stages[s];
        pass_boundary_tensor *nt = realloc(S->out_tensors, sizeof *nt * (size_t)(S->n_out_tensors + 1));
        if (!nt) {
          free(stage_of);
          return -1;
        }
        S->out_tensors = nt;
        nt[S->n_out_tensors].tensor = t;
        nt[S->n_out_tensors].producer_stage = ps;
        nt[S->n_out_tensors].last_stage = ls;
        S->n_out_tensors++;
      }
    }
  }
  free(stage_of);
  return 0;
}

/* Checks the DAG and the options, and makes the topology one host of all the
 * devices when none is given. Returns -1 with a message in err. */
static int partition_check(const pass_dag *d, pass_plan_opts *o, char *err, size_t errlen) {
  if (!d->finalized || d->n_nodes < 1) {
    snprintf(err, errlen, "planner: empty or unfinalized DAG");
    return -1;
  }
  if (o->devices < 1 || o->microbatches < 1) {
    snprintf(err, errlen, "planner: need devices >= 1 and microbatches >= 1 (got %d, %d)", o->devices, o->microbatches);
    return -1;
  }
  if (o->topo.hosts <= 0 || o->topo.gpus_per_host <= 0) {
    o->topo.hosts = 1;
    o->topo.gpus_per_host = o->devices;
  }
  if (o->devices > o->topo.hosts * o->topo.gpus_per_host) {
    snprintf(err, errlen, "planner: %d devices requested but the topology has %d x %d", o->devices, o->topo.hosts,
             o->topo.gpus_per_host);
    return -1;
  }
  return 0;
}

/* A lower bound on the bottleneck: the total work spread over all devices, or
 * the largest node's share on its busiest replica if that is more. */
static double partition_lower_bound(const pass_dag *d, const pass_plan_opts *o) {
  double W = 0, big = 0;
  for (int v = 0; v < d->n_nodes; v++) {
    double w = d->nodes[v].fwd_ms + (o->training ? d->nodes[v].bwd_ms : 0.0);
    W += w;
    if (w > big) big = w;
  }
  double lb = W / o->devices, bigb = big * pass_replica_share(o->microbatches, pass_max_replicas(o));
  if (bigb > lb) lb = bigb;
  return lb;
}

/* The search for the plan: the split being tried, the best one so far, and
 * what the exact DP did. */
typedef struct {
  int *cuts, *reps, *modes;    /* [g+1] the split being tried */
  int *bcuts, *breps, *bmodes; /* [g+1] the best split (the second halves of the allocations) */
  int bk, fit_any;             /* the best split's stages; whether any split fits */
  double bval;                 /* bottleneck of the best prefix split (INFINITY while none) */
  pass_states best_st;         /* the states of the best split's order */
  long checks;                 /* feasibility checks, all DPs together */
  pass_exact_status exact;     /* what the exact DP did */
  long downsets, n_states, ework;
  int ek; /* stages of the exact split when it beat the prefix one, else 0 */
} partition_run;

/* Allocates r's splits for g devices. Returns -1 on no memory (r can be freed either way). */
static int run_init(partition_run *r, int g) {
  memset(r, 0, sizeof *r);
  r->bval = INFINITY;
  r->exact = PASS_EXACT_OFF;
  r->cuts = malloc(sizeof(int) * (size_t)(g + 1) * 2);
  r->reps = malloc(sizeof(int) * (size_t)(g + 1) * 2);
  r->modes = malloc(sizeof(int) * (size_t)(g + 1) * 2);
  if (!r->cuts || !r->reps || !r->modes) return -1;
  r->bcuts = r->cuts + g + 1;
  r->breps = r->reps + g + 1;
  r->bmodes = r->modes + g + 1;
  return 0;
}

static void run_free(partition_run *r) {
  free(r->cuts);
  free(r->reps);
  free(r->modes);
  pass_states_free(&r->best_st);
}

/* Makes the split being tried, k stages over the states st (taken over), the best. */
static void run_keep(partition_run *r, int k, pass_states *st) {
  r->fit_any = 1;
  r->bk = k;
  memcpy(r->bcuts, r->cuts, sizeof(int) * (size_t)k);
  memcpy(r->breps, r->reps, sizeof(int) * (size_t)k);
  memcpy(r->bmodes, r->modes, sizeof(int) * (size_t)k);
  pass_states_free(&r->best_st);
  r->best_st = *st;
}

/* The prefix DP over each order selected in o->orders (all when 0), keeping
 * the best split. Returns -1 with a message in err. */
static int partition_prefix(const pass_dag *d, const pass_plan_opts *o, double lb, partition_run *r, char *err,
                            size_t errlen) {
  unsigned orders = o->orders ? o->orders : (1u << PASS_ORDER_COUNT) - 1;
  for (int kind = 0; kind < PASS_ORDER_COUNT; kind++) {
    if (!(orders & (1u << kind))) continue;
    pass_states st;
    if (pass_states_build(d, (pass_order_kind)kind, &st) != 0) {
      snprintf(err, errlen, "planner: DAG has a cycle or out of memory");
      return -1;
    }
    int k = dp_solve(d, o, &st, lb, r->bval, r->cuts, r->reps, r->modes, &r->checks);
    if (k < 0) {
      pass_states_free(&st);
      snprintf(err, errlen, "planner: out of memory");
      return -1;
    }
    if (k > 0) { /* dp_solve only returns a split clearly better than bval */
      r->bval = eval_split(o, &st, k, r->cuts, r->reps, r->modes);
      run_keep(r, k, &st);
      continue;
    }
    pass_states_free(&st);
  }
  return 0;
}

/* Enumerates the down-sets (into ds) with weights w and, when the antichain DAG
 * and one check fit the budget, runs the exact DP into chain and ereps: sets
 * r's exact, downsets, n_states, ework and ek. */
static void exact_solve(const pass_dag *d, const pass_plan_opts *o, double lb, double *w, pass_downsets *ds, int *chain,
                        int *ereps, partition_run *r) {
  int g = o->devices;
  long max_states = o->exact_max_states > 0 ? o->exact_max_states : PASS_EXACT_MAX_STATES;
  long budget = o->exact_work > 0 ? o->exact_work : PASS_EXACT_WORK;
  for (int v = 0; v < d->n_nodes; v++) w[v] = d->nodes[v].fwd_ms + (o->training ? d->nodes[v].bwd_ms : 0.0);
  long S = pass_downsets_build(d, w, max_states, PASS_EXACT_MAX_BYTES, ds);
  if (S < 2) {
    r->exact = PASS_EXACT_TOO_MANY_STATES;
    r->downsets = -1;
    return;
  }
  r->downsets = S;
  int shared = !o->training || o->no_replicate;
  int nk = shared ? 1 : g;
  /* one check: a walk per layer, each edge compared for every key class */
  double one_check = (double)(ds->edges * (nk + 1) + S * 2) * (double)g;
  double bytes = (double)S * (g + 1) * 6.0 + (double)S * 12.0 * nk;
  if (one_check > (double)budget || bytes > (double)PASS_EXACT_MAX_BYTES || g > 255) {
    r->exact = PASS_EXACT_OVER_BUDGET;
    return;
  }
  int ek = ex_solve(o, ds, lb, r->fit_any ? r->bval : INFINITY, budget, chain, ereps, &r->checks, &r->ework);
  r->exact = ek == -2 ? PASS_EXACT_OVER_BUDGET : ek == -1 ? PASS_EXACT_NO_MEMORY : PASS_EXACT_RAN;
  if (r->exact == PASS_EXACT_RAN) r->n_states = S;
  r->ek = ek < 0 ? 0 : ek; /* the prefix plan stands */
}

/* Makes the exact split (r->ek stages, end states chain, replicas ereps) the
 * best: stage k = D_k \ D_{k-1}; the concatenation (each stage in index order)
 * is a topological order whose prefixes include every D_k. Sets r->ek = -1 on
 * no memory. */
static void exact_adopt(const pass_dag *d, const pass_plan_opts *o, const pass_downsets *ds, const int *chain,
                        const int *ereps, partition_run *r) {
  int *ord = malloc(sizeof(int) * (size_t)d->n_nodes), q = 0;
  unsigned char *cur = malloc((size_t)d->n_nodes), *prev = calloc((size_t)d->n_nodes, 1);
  pass_states st;
  if (!ord || !cur || !prev) {
    r->ek = -1;
  } else {
    for (int k = 0; k < r->ek; k++) {
      pass_downset_members(ds, chain[k], cur);
      for (int x = 0; x < d->n_nodes; x++) {
        int v = ds->order[x];
        if (cur[v] && !prev[v]) ord[q++] = v;
      }
      memcpy(prev, cur, (size_t)d->n_nodes);
      r->cuts[k] = q;
      r->reps[k] = ereps[k];
      r->modes[k] = o->training ? o->recompute : PASS_PLAN_RC_NONE;
    }
    if (pass_states_from_order(d, ord, PASS_ORDER_CHAIN, &st) != 0) r->ek = -1;
    else run_keep(r, r->ek, &st);
  }
  free(ord);
  free(cur);
  free(prev);
}

/* The exact DP over all down-sets, when the antichain DAG and the work fit
 * the budget; it only returns a split clearly better than the prefix one, which
 * then becomes the best. Returns -1 on no memory. */
static int partition_exact(const pass_dag *d, const pass_plan_opts *o, double lb, partition_run *r) {
  int g = o->devices;
  double *w = malloc(sizeof(double) * (size_t)d->n_nodes);
  pass_downsets ds;
  memset(&ds, 0, sizeof ds);
  int *chain = malloc(sizeof(int) * (size_t)(g + 1)), *ereps = malloc(sizeof(int) * (size_t)(g + 1));
  if (!w || !chain || !ereps) r->exact = PASS_EXACT_NO_MEMORY;
  else exact_solve(d, o, lb, w, &ds, chain, ereps, r);
  if (r->ek > 0) exact_adopt(d, o, &ds, chain, ereps, r);
  free(w);
  free(chain);
  free(ereps);
  pass_downsets_free(&ds);
  return r->ek == -1 ? -1 : 0;
}

int pass_partition(const pass_dag *d, const pass_plan_opts *o_in, pass_plan *plan, char *err, size_t errlen) {
  double t0 = now_ms();
  memset(plan, 0, sizeof *plan);
  pass_plan_opts o = *o_in;
  if (partition_check(d, &o, err, errlen) != 0) return -1;
  double lb = partition_lower_bound(d, &o);
  int auto_rc = o.training && o.recompute == PASS_PLAN_RC_AUTO;
  partition_run r;
  if (run_init(&r, o.devices) != 0) {
    run_free(&r);
    snprintf(err, errlen, "planner: out of memory");
    return -1;
  }
  if (partition_prefix(d, &o, lb, &r, err, errlen) != 0) {
    run_free(&r);
    return -1;
  }
  /* Not with recompute chosen per stage: its modes are the prefix DP's alone. */
  if (o.states != PASS_STATES_PREFIX && !auto_rc && partition_exact(d, &o, lb, &r) != 0) {
    run_free(&r);
    snprintf(err, errlen, "planner: out of memory");
    return -1;
  }
  if (!r.fit_any) {
    run_free(&r);
    snprintf(err, errlen, "planner: the model does not fit in %llu bytes per device on %d devices",
             (unsigned long long)o.mem_limit, o.devices);
    return -1;
  }
  plan->n_nodes = d->n_nodes;
  plan->devices = o.devices;
  plan->microbatches = o.microbatches;
  plan->training = o.training;
  plan->recompute = o.training ? o.recompute : 0;
  plan->schedule = o.schedule;
  plan->async_mode = o.training ? o.async_mode : 0;
  plan->feasibility_checks = r.checks;
  plan->all_downsets = r.exact == PASS_EXACT_RAN;
  plan->state_count = r.exact == PASS_EXACT_RAN ? r.n_states : d->n_nodes + 1;
  plan->downsets = r.downsets;
  plan->exact = r.exact;
  plan->exact_improved = r.ek > 0;
  plan->exact_work = r.ework;
  int rc = build_plan(d, &o, &r.best_st, r.bk, r.bcuts, r.breps, r.bmodes, plan);
  run_free(&r);
  if (rc != 0) {
    pass_plan_free(plan);
    snprintf(err, errlen, "planner: out of memory");
    return -1;
  }
  plan->lower_bound_ms = lb;
  plan->gap = lb > 0 ? plan->bottleneck_ms / lb - 1.0 : 0.0;
  plan->planner_ms = now_ms() - t0;
  return 0;
}
