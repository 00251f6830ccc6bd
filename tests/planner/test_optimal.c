/* Random-DAG optimality, under one cost model, against two references:
 *
 *   1. prefix-order mode (PASS_STATES_PREFIX): the DP's bottleneck equals a
 *      brute-force enumeration of the same split space (contiguous ranges of
 *      each tried topological order, every replica assignment, devices placed
 *      contiguously);
 *   2. the default mode (PASS_STATES_AUTO): on every random DAG here (all small
 *      enough for the exact DP over all down-sets) the exact DP must engage and
 *      the planner's bottleneck must equal (to 1e-9 relative) the optimum over
 *      ALL convex linear splits, computed by an exhaustive DP over every pair of
 *      nested down-sets (all_convex_optimum, independent of the planner's code).
 *
 * The gap of prefix-order mode alone to that optimum is printed, not asserted. */
#include <math.h>

#include "tests/planner/planner_test.h"

/* Direct (non-prefix-sum) aggregate of a node set. */
static void agg_of(const pass_dag *d, const unsigned char *set, pass_stage_agg *a) {
  a->fwd_ms = a->bwd_ms = 0;
  a->param_bytes = a->act_bytes = a->keep_bytes = 0;
  a->recompute = PASS_PLAN_RC_NONE;
  for (int v = 0; v < d->n_nodes; v++)
    if (set[v]) {
      a->keep_bytes += d->nodes[v].keep_bytes;
      a->fwd_ms += d->nodes[v].fwd_ms;
      a->bwd_ms += d->nodes[v].bwd_ms;
      a->param_bytes += d->nodes[v].param_bytes;
      a->act_bytes += d->nodes[v].act_bytes;
    }
}

/* Brute force over one order: all cut sets x all replica vectors. */
static double best_r;
static unsigned char no_nodes[64];
static void try_reps(const pass_dag *d, const pass_plan_opts *o, int p, unsigned char **sets, unsigned char **prefix,
                     int *reps, int k, int used) {
  if (k == p) {
    /* recompute chosen per stage (AUTO): every stage in each of none, selective, full */
    int auto_rc = o->training && o->recompute == PASS_PLAN_RC_AUTO, combos = 1;
    for (int s = 0; auto_rc && s < p; s++) combos *= 3;
    for (int cmb = 0; cmb < combos; cmb++) {
      double b = 0;
      int dev = 0, fits = 1;
      for (int s = 0, x = cmb; s < p && fits; s++, x /= 3) {
        pass_stage_agg a;
        uint64_t gb;
        agg_of(d, sets[s], &a);
        a.dev_first = dev;
        a.replicas = reps[s];
        a.in_bytes = pass_cut_bytes(d, s ? prefix[s - 1] : no_nodes, &gb);
        a.out_bytes = pass_cut_bytes(d, prefix[s], &gb);
        a.recompute = PASS_PLAN_RC_NONE;
        if (auto_rc) {
          int q = x % 3 - 1; /* -1 none, 0 selective, 1 full */
          a.recompute = q < 0 ? PASS_PLAN_RC_NONE : q ? PASS_PLAN_RC_FULL : PASS_PLAN_RC_SELECTIVE;
          a.keep_bytes = 0;
          for (int v = 0; q >= 0 && v < d->n_nodes; v++)
            if (sets[s][v]) {
              a.bwd_ms += d->nodes[v].rc_ms[q];
              a.keep_bytes += d->nodes[v].rc_keep[q];
            }
        }
        if (o->mem_limit && pass_stage_memory(o, &a) > o->mem_limit) fits = 0;
        double t = pass_stage_time(o, &a);
        if (t > b) b = t;
        dev += reps[s];
        if (s + 1 < p) {
          uint64_t gb, cb = pass_cut_bytes(d, prefix[s], &gb);
          t = pass_boundary_time(o, dev, cb, gb);
          if (t > b) b = t;
        }
      }
      if (fits && b < best_r) best_r = b;
    }
    return;
  }
  /* the split space: r <= min(g, M) (pass_max_replicas; a replica past the M-th would idle,
   * and only move the cost model's boundary link, which its micro-batches never use) */
  int rmax = o->devices - used - (p - k - 1);
  if (rmax > pass_max_replicas(o)) rmax = pass_max_replicas(o);
  for (int r = 1; r <= rmax; r++) {
    reps[k] = r;
    try_reps(d, o, p, sets, prefix, reps, k + 1, used + r);
  }
}

static double brute_force_order(const pass_dag *d, const pass_plan_opts *o, pass_order_kind kind) {
  int n = d->n_nodes, order[64];
  if (pass_topo_order(d, kind, order)) abort();
  unsigned char *sets[8], *prefix[8];
  for (int s = 0; s < 8; s++) {
    sets[s] = calloc((size_t)n, 1);
    prefix[s] = calloc((size_t)n, 1);
  }
  best_r = INFINITY;
  for (uint32_t mask = 0; mask < (1u << (n - 1)); mask++) {
    int p = __builtin_popcount(mask) + 1;
    if (p > o->devices || p > 8) continue;
    int s = 0;
    for (int q = 0; q < n; q++) {
      for (int t = 0; t < 8; t++) {
        if (t == s) sets[t][order[q]] = 1;
        else sets[t][order[q]] = 0;
      }
      for (int t = 0; t < 8; t++) prefix[t][order[q]] = t >= s;
      if (q + 1 < n && (mask >> q) & 1) s++;
    }
    int reps[8];
    try_reps(d, o, p, sets, prefix, reps, 0, 0);
  }
  for (int s = 0; s < 8; s++) {
    free(sets[s]);
    free(prefix[s]);
  }
  return best_r;
}

/* The brute force's best over the orders o tries (o->orders, 0 = all). */
static double brute_force_orders(const pass_dag *d, const pass_plan_opts *o) {
  double bf = INFINITY;
  unsigned orders = o->orders ? o->orders : (1u << PASS_ORDER_COUNT) - 1;
  for (int k = 0; k < PASS_ORDER_COUNT; k++)
    if (orders & (1u << k)) {
      double v = brute_force_order(d, o, (pass_order_kind)k);
      if (v < bf) bf = v;
    }
  return bf;
}

/* Exact optimum over all chains of down-sets (all convex linear splits). */
static double all_convex_optimum(const pass_dag *d, const pass_plan_opts *o) {
  int n = d->n_nodes, g = o->devices;
  long cap = 1 << 16;
  uint64_t *ds = malloc(sizeof(uint64_t) * (size_t)cap);
  long S = pass_downsets_enumerate(d, ds, cap);
  if (S < 0) abort();
  double *fw = malloc(sizeof(double) * (size_t)S), *bw = malloc(sizeof(double) * (size_t)S);
  uint64_t *P = malloc(sizeof(uint64_t) * (size_t)S), *A = malloc(sizeof(uint64_t) * (size_t)S);
  uint64_t *K = malloc(sizeof(uint64_t) * (size_t)S);
  uint64_t *cut = malloc(sizeof(uint64_t) * (size_t)S), *cutg = malloc(sizeof(uint64_t) * (size_t)S);
  double *best = malloc(sizeof(double) * (size_t)S * (size_t)(g + 1));
  unsigned char set[64];
  for (long i = 0; i < S; i++) {
    for (int v = 0; v < n; v++) set[v] = (ds[i] >> v) & 1;
    pass_stage_agg a;
    agg_of(d, set, &a);
    fw[i] = a.fwd_ms;
    bw[i] = a.bwd_ms;
    P[i] = a.param_bytes;
    A[i] = a.act_bytes;
    K[i] = a.keep_bytes;
    cut[i] = pass_cut_bytes(d, set, &cutg[i]);
    for (int m = 0; m <= g; m++) best[i * (g + 1) + m] = INFINITY;
  }
  best[0] = 0; /* {} with 0 devices */
  for (long j = 1; j < S; j++)
    for (long i = 0; i < j; i++) {
      if (ds[i] & ~ds[j]) continue;
      if (ds[i] == ds[j]) continue;
      for (int m = 1; m <= g; m++) {
        int rmax = m < pass_max_replicas(o) ? m : pass_max_replicas(o); /* as try_reps */
        for (int r = 1; r <= rmax; r++) {
          double prev = best[i * (g + 1) + (m - r)];
          if (!isfinite(prev)) continue;
          pass_stage_agg a = {fw[j] - fw[i], bw[j] - bw[i], P[j] - P[i], A[j] - A[i],      m - r, r,
                              cut[i],        cut[j],        K[j] - K[i], PASS_PLAN_RC_NONE};
          if (o->mem_limit && pass_stage_memory(o, &a) > o->mem_limit) continue;
          double v = pass_stage_time(o, &a);
          if (prev > v) v = prev;
          if (i > 0) {
            double t = pass_boundary_time(o, m - r, cut[i], cutg[i]);
            if (t > v) v = t;
          }
          if (v < best[j * (g + 1) + m]) best[j * (g + 1) + m] = v;
        }
      }
    }
  double r = INFINITY;
  for (int m = 1; m <= g; m++)
    if (best[(S - 1) * (g + 1) + m] < r) r = best[(S - 1) * (g + 1) + m];
  free(ds);
  free(fw);
  free(bw);
  free(P);
  free(A);
  free(K);
  free(cut);
  free(cutg);
  free(best);
  return r;
}

/* A memory limit that binds in many ways: the memory of a random stage (a random pair of
 * nested down-sets on random devices). */
static uint64_t random_stage_memory(const pass_dag *d, const pass_plan_opts *o) {
  long cap = 1 << 16;
  uint64_t *ds = malloc(sizeof(uint64_t) * (size_t)cap), r = 1;
  long S = pass_downsets_enumerate(d, ds, cap);
  if (S < 2) abort();
  for (int tries = 0; tries < 100; tries++) {
    long i = rng_int(0, (int)S - 2), j = rng_int((int)i + 1, (int)S - 1);
    if (ds[i] & ~ds[j]) continue;
    unsigned char si[64], sj[64], st[64];
    for (int v = 0; v < d->n_nodes; v++) {
      si[v] = (ds[i] >> v) & 1;
      sj[v] = (ds[j] >> v) & 1;
      st[v] = sj[v] && !si[v];
    }
    pass_stage_agg a;
    uint64_t gb;
    agg_of(d, st, &a);
    a.replicas = 1;
    a.dev_first = rng_int(0, o->devices - 1);
    a.in_bytes = pass_cut_bytes(d, si, &gb);
    a.out_bytes = pass_cut_bytes(d, sj, &gb);
    r = pass_stage_memory(o, &a);
    break;
  }
  free(ds);
  return r;
}

static const char *shape_names[] = {"chain", "diamond", "branches", "skip", "sinks", "random"};

/* The tallies of comparisons 1 and 2 over the random DAGs, printed at the end */
typedef struct {
  int n_exact, n_gap, n_cmp, n_infeasible, n_exact_cmp, n_improved;
  int n_exact_infeasible, n_big, n_big_gap, n_rc_mem;
  double sum_gap, max_gap, sum_lbgap, big_sum_gap, big_max_gap;
  long max_states;
  int per_shape_gap[SHAPE_COUNT], per_shape_cnt[SHAPE_COUNT];
} dag_tally;

/* Random options for a random DAG of n nodes: devices (1-8 for a big one, else 1-4),
 * micro-batches, training, replication, schedule, topology, slow links, orders,
 * recompute and sometimes a memory limit */
static void random_opts(const pass_dag *d, int n, int big, pass_plan_opts *o, dag_tally *st) {
  pass_plan_opts_default(o, big ? rng_int(1, 8) : rng_int(1, 4));
  o->microbatches = rng_int(1, 8);
  o->training = rng_int(0, 1);
  o->no_replicate = rng_int(0, 2) == 0;
  o->schedule = rng_int(0, 1) ? PASS_SCHED_1F1B : PASS_SCHED_GPIPE;
  if (rng_int(0, 1)) {
    o->topo.gpus_per_host = rng_int(1, 4);
    o->topo.hosts = (o->devices + o->topo.gpus_per_host - 1) / o->topo.gpus_per_host;
  }
  /* make communication matter: slow links sometimes */
  if (rng_int(0, 1)) {
    o->topo.intra_gbps = rng_real(0.5, 5);
    o->topo.inter_gbps = rng_real(0.1, 1);
  }
  o->orders = (unsigned)rng_int(0, 7);
  /* re-materialisation: a held micro-batch costs the stage's cut bytes, which are not
   * monotone in its extent (the DPs' deque and unpruned search) */
  o->recompute = o->training && rng_int(0, 1);
  if (rng_int(0, 2) == 0) {
    uint64_t tot = 0;
    for (int v = 0; v < n; v++) tot += d->nodes[v].param_bytes * 4 + d->nodes[v].act_bytes * 8;
    o->mem_limit = tot / (uint64_t)rng_int(1, 6) + 1;
    if (o->recompute) {
      st->n_rc_mem++;
      if (rng_int(0, 1)) o->mem_limit = random_stage_memory(d, o);
    }
  }
}

/* 1. prefix-order mode vs brute force over the same orders (small graphs) */
static void check_prefix_mode(int it, int shape, int n, const pass_dag *d, const pass_plan_opts *o, dag_tally *st) {
  char err[256];
  pass_plan_opts op = *o;
  op.states = PASS_STATES_PREFIX;
  pass_plan plan;
  int rc = pass_partition(d, &op, &plan, err, sizeof err);
  double bf = brute_force_orders(d, &op);
  if (!isfinite(bf)) {
    CHECK(rc != 0, "iter %d: brute force finds nothing fits but the DP planned", it);
    st->n_infeasible++;
    if (rc == 0) pass_plan_free(&plan);
  } else {
    CHECK(rc == 0, "iter %d: DP failed (%s) but brute force found %g", it, err, bf);
    if (rc == 0) {
      check_plan_invariants(d, &op, &plan);
      CHECK(!plan.all_downsets && plan.exact == PASS_EXACT_OFF && plan.order_kind < PASS_ORDER_COUNT,
            "iter %d: prefix mode ran the exact DP", it);
      CHECK(fabs(plan.bottleneck_ms - bf) <= 1e-7 * fmax(1.0, bf),
            "iter %d (%s, n=%d, g=%d, train=%d, norep=%d, mem=%llu, orders=%u): DP %.12g != brute force %.12g", it,
            shape_names[shape], n, op.devices, op.training, op.no_replicate, (unsigned long long)op.mem_limit,
            op.orders, plan.bottleneck_ms, bf);
      CHECK(plan.bottleneck_ms >= plan.lower_bound_ms * (1 - 1e-9), "bottleneck below lower bound");
      st->sum_lbgap += plan.gap;
      st->n_cmp++;
      pass_plan_free(&plan);
    }
  }
}

/* The bottleneck of prefix-order mode over all orders, INFINITY when it plans nothing */
static double prefix_all_orders(const pass_dag *d, const pass_plan_opts *o) {
  char err[256];
  double dp_all = INFINITY;
  pass_plan p2;
  pass_plan_opts o2 = *o;
  o2.orders = 0;
  o2.states = PASS_STATES_PREFIX;
  if (pass_partition(d, &o2, &p2, err, sizeof err) == 0) {
    dp_all = p2.bottleneck_ms;
    pass_plan_free(&p2);
  }
  return dp_all;
}

/* 2. the default mode: exact over all down-sets, equal to the all-convex optimum all.
 * Returns 1 when the planner planned, 0 when it did not (the checks after it skipped). */
static int check_exact_mode(int it, int shape, int n, const pass_dag *d, const pass_plan_opts *o, double all,
                            dag_tally *st) {
  char err[256];
  pass_plan pe;
  int rce = pass_partition(d, o, &pe, err, sizeof err);
  if (!isfinite(all)) {
    CHECK(rce != 0, "iter %d: no convex split fits in memory but the planner planned", it);
    st->n_exact_infeasible++;
    if (rce == 0) pass_plan_free(&pe);
    return 0;
  }
  CHECK(rce == 0, "iter %d: planner failed (%s) but a convex split fits (%g)", it, err, all);
  if (rce != 0) return 0;
  check_plan_invariants(d, o, &pe);
  CHECK(pe.all_downsets && pe.exact == PASS_EXACT_RAN && pe.state_count == pe.downsets,
        "iter %d: exact mode did not engage (status %d, %ld down-sets)", it, (int)pe.exact, pe.downsets);
  CHECK(
      fabs(pe.bottleneck_ms - all) <= 1e-9 * all + 1e-12,
      "iter %d (%s, n=%d, g=%d, train=%d, norep=%d, mem=%llu, orders=%u, M=%d): planner %.15g != all-convex optimum %.15g",
      it, shape_names[shape], n, o->devices, o->training, o->no_replicate, (unsigned long long)o->mem_limit, o->orders,
      o->microbatches, pe.bottleneck_ms, all);
  CHECK(pe.bottleneck_ms >= pe.lower_bound_ms * (1 - 1e-9), "bottleneck below lower bound");
  CHECK(pass_schedule_attach(o, &pe, err, sizeof err) == 0, "iter %d: schedule: %s", it, err);
  if (pe.downsets > st->max_states) st->max_states = pe.downsets;
  st->n_exact_cmp++;
  st->n_improved += pe.exact_improved;
  if (pe.exact_improved) CHECK(pe.order_kind == PASS_ORDER_CHAIN, "improved plan not marked as a down-set chain");
  pass_plan_free(&pe);
  return 1;
}

/* budgets: past the state cap or the work budget the prefix plan (dp_all) stands */
static void check_budgets(int it, int n, const pass_dag *d, const pass_plan_opts *o, double all, double dp_all) {
  char err[256];
  pass_plan pe;
  pass_plan_opts ob = *o;
  ob.exact_max_states = it % 2 ? 2 : 0;
  ob.exact_work = it % 2 ? 0 : rng_int(1, 400);
  CHECK(pass_partition(d, &ob, &pe, err, sizeof err) == 0, "iter %d: %s", it, err);
  check_plan_invariants(d, &ob, &pe);
  if (pe.exact == PASS_EXACT_RAN) {
    CHECK(fabs(pe.bottleneck_ms - all) <= 1e-9 * all + 1e-12, "iter %d: small budget, wrong optimum", it);
  } else {
    CHECK(pe.exact == (it % 2 ? PASS_EXACT_TOO_MANY_STATES : PASS_EXACT_OVER_BUDGET) && !pe.all_downsets &&
              pe.state_count == n + 1 && !pe.exact_improved,
          "iter %d: budget status %d", it, (int)pe.exact);
    CHECK(pe.bottleneck_ms == dp_all, "iter %d: over budget, but not the prefix plan (%g vs %g)", it, pe.bottleneck_ms,
          dp_all);
  }
  pass_plan_free(&pe);
}

/* gap of prefix-order mode alone (dp_all) to the all-convex optimum all */
static void tally_prefix_gap(int it, int big, int shape, double all, double dp_all, dag_tally *st) {
  CHECK(all <= dp_all * (1 + 1e-9), "iter %d: all-convex optimum %g above DP %g", it, all, dp_all);
  double gap = all > 0 ? dp_all / all - 1 : 0;
  if (big) {
    st->n_big++;
    if (gap > 1e-9) st->n_big_gap++;
    st->big_sum_gap += gap;
    if (gap > st->big_max_gap) st->big_max_gap = gap;
  } else {
    st->per_shape_cnt[shape]++;
    if (gap <= 1e-9) st->n_exact++;
    else {
      st->n_gap++;
      st->per_shape_gap[shape]++;
    }
    st->sum_gap += gap;
    if (gap > st->max_gap) st->max_gap = gap;
  }
}

/* Comparisons 1 and 2 on random DAG number it: 2-10 nodes before iters (both
 * references), 11-15 from there on (the all-convex reference only) */
static void check_random_dag(int it, int iters, dag_tally *st) {
  int big = it >= iters;
  int shape = it % SHAPE_COUNT;
  int n = big ? rng_int(11, 15) : rng_int(2, 10);
  pass_dag d;
  random_dag(&d, n, shape);
  pass_plan_opts o;
  random_opts(&d, n, big, &o, st);
  double all = all_convex_optimum(&d, &o);
  if (!big) check_prefix_mode(it, shape, n, &d, &o, st);
  double dp_all = isfinite(all) ? prefix_all_orders(&d, &o) : INFINITY; /* prefix-order mode, all orders */
  if (check_exact_mode(it, shape, n, &d, &o, all, st)) {
    if (it % 7 == 0 && isfinite(dp_all) && o.orders == 0) check_budgets(it, n, &d, &o, all, dp_all);
    if (isfinite(dp_all)) tally_prefix_gap(it, big, shape, all, dp_all, st);
  }
  pass_dag_free(&d);
}

/* 3. re-materialisation under binding memory limits. A held micro-batch then costs the
 * stage's cut bytes, so a longer stage can need less memory than a shorter one (its
 * first cut smaller): the prefix DP's sliding-window minimum and the exact DP's
 * unpruned search are what find such stages. Several held micro-batches (M >= 3,
 * GPipe often) make that common; both modes must equal their references. */
static void check_recompute_limits(int rc_iters) {
  int rc_bound = 0, rc_infeasible = 0;
  for (int it = 0; it < rc_iters; it++) {
    int n = rng_int(3, 10), shape = it % SHAPE_COUNT;
    pass_dag d;
    random_dag(&d, n, shape);
    /* selective recompute: some nodes keep their outputs */
    for (int v = 0; v < n; v++)
      if (rng_int(0, 2) == 0) pass_dag_set_keep(&d, v, d.nodes[v].act_bytes);
    pass_plan_opts o;
    pass_plan_opts_default(&o, rng_int(2, 4));
    o.microbatches = rng_int(3, 8);
    o.training = o.recompute = 1;
    o.no_replicate = rng_int(0, 1);
    o.schedule = rng_int(0, 2) ? PASS_SCHED_GPIPE : PASS_SCHED_1F1B;
    o.orders = (unsigned)rng_int(0, 7);
    double free_opt = all_convex_optimum(&d, &o);
    o.mem_limit = random_stage_memory(&d, &o);
    for (int k = rng_int(0, 2); k > 0; k--) { /* the largest of up to 3: fewer infeasible */
      uint64_t x = random_stage_memory(&d, &o);
      if (x > o.mem_limit) o.mem_limit = x;
    }
    double all = all_convex_optimum(&d, &o);
    char err[256];
    pass_plan pe;
    pass_plan_opts op = o;
    op.states = PASS_STATES_PREFIX;
    double bf = brute_force_orders(&d, &op);
    int rcp = pass_partition(&d, &op, &pe, err, sizeof err);
    CHECK((rcp == 0) == isfinite(bf), "recompute iter %d: prefix DP %s, brute force %g", it, rcp ? err : "planned", bf);
    if (rcp == 0) {
      check_plan_invariants(&d, &op, &pe);
      CHECK(fabs(pe.bottleneck_ms - bf) <= 1e-7 * fmax(1.0, bf),
            "recompute iter %d (n=%d, g=%d, M=%d, mem=%llu): prefix DP %.12g != brute force %.12g", it, n, o.devices,
            o.microbatches, (unsigned long long)o.mem_limit, pe.bottleneck_ms, bf);
      pass_plan_free(&pe);
    }
    int rce = pass_partition(&d, &o, &pe, err, sizeof err);
    CHECK((rce == 0) == isfinite(all), "recompute iter %d: planner %s, all-convex optimum %g", it,
          rce ? err : "planned", all);
    if (rce == 0) {
      check_plan_invariants(&d, &o, &pe);
      CHECK(pe.exact == PASS_EXACT_RAN, "recompute iter %d: exact DP status %d", it, (int)pe.exact);
      CHECK(fabs(pe.bottleneck_ms - all) <= 1e-9 * all + 1e-12,
            "recompute iter %d (n=%d, g=%d, M=%d, mem=%llu): planner %.15g != all-convex optimum %.15g", it, n,
            o.devices, o.microbatches, (unsigned long long)o.mem_limit, pe.bottleneck_ms, all);
      CHECK(pass_schedule_attach(&o, &pe, err, sizeof err) == 0, "recompute iter %d: schedule: %s", it, err);
      pass_plan_free(&pe);
    }
    if (!isfinite(all)) rc_infeasible++;
    else if (all > free_opt * (1 + 1e-9)) rc_bound++;
    pass_dag_free(&d);
  }
  printf(
      "recompute under a memory limit: %d random DAGs of 3-10 nodes (M 3-8), both modes equal to their "
      "references; the limit raised the optimum in %d, nothing fit in %d\n",
      rc_iters, rc_bound, rc_infeasible);
}

/* Recompute chosen per stage (AUTO) without a memory limit: the plan of no recompute
 * (none everywhere, the fastest mode). Returns the largest stage memory of that plan. */
static uint64_t check_auto_no_limit(int it, const pass_dag *d, pass_plan_opts *o) {
  char err[256];
  pass_plan pe, pn;
  pass_plan_opts on = *o;
  on.recompute = PASS_PLAN_RC_NONE;
  on.states = o->states = PASS_STATES_PREFIX;
  CHECK(pass_partition(d, o, &pe, err, sizeof err) == 0 && pass_partition(d, &on, &pn, err, sizeof err) == 0,
        "auto iter %d: %s", it, err);
  CHECK(pe.bottleneck_ms == pn.bottleneck_ms, "auto iter %d: no limit, %.12g != plain %.12g", it, pe.bottleneck_ms,
        pn.bottleneck_ms);
  uint64_t plain_mem = 0;
  for (int k = 0; k < pe.n_stages; k++) {
    CHECK(pe.stages[k].recompute == 0, "auto iter %d: recomputes without a limit", it);
    if (pe.stages[k].memory_bytes > plain_mem) plain_mem = pe.stages[k].memory_bytes;
  }
  pass_plan_free(&pe);
  pass_plan_free(&pn);
  return plain_mem;
}

/* 4. recompute chosen per stage (AUTO): each stage none, selective or full, whichever
 * fits time and memory best; the prefix DP against brute force over every mode of
 * every stage (the exact DP does not run). Nodes: a few keep their outputs in both
 * modes (Dropout), some in selective only (the costly ones), the rest recompute. */
static void check_auto_recompute(int auto_iters) {
  int auto_mixed = 0, auto_some = 0, auto_infeasible = 0;
  for (int it = 0; it < auto_iters; it++) {
    int n = rng_int(3, 8), shape = it % SHAPE_COUNT;
    pass_dag d;
    random_dag(&d, n, shape);
    for (int v = 0; v < n; v++) {
      double f = d.nodes[v].fwd_ms;
      uint64_t a = d.nodes[v].act_bytes;
      int kind = rng_int(0, 7) == 0 ? 0 : rng_int(0, 2) == 0 ? 1 : 2;
      double ms[2] = {kind == 2 ? f : 0, kind ? f : 0};
      uint64_t keep[2] = {kind == 2 ? 0 : a, kind ? 0 : a};
      CHECK(pass_dag_set_recompute(&d, v, ms, keep) == 0, "pass_dag_set_recompute");
    }
    pass_plan_opts o;
    pass_plan_opts_default(&o, rng_int(2, 4));
    o.microbatches = rng_int(3, 8);
    o.training = 1;
    o.recompute = PASS_PLAN_RC_AUTO;
    o.no_replicate = rng_int(0, 1);
    o.schedule = rng_int(0, 2) ? PASS_SCHED_GPIPE : PASS_SCHED_1F1B;
    o.orders = (unsigned)rng_int(0, 7);
    char err[256];
    pass_plan pe;
    uint64_t plain_mem = check_auto_no_limit(it, &d, &o);
    /* limits: below what the plain plan needs, or from stages under the plain and the
     * recompute terms */
    o.mem_limit = rng_int(0, 1) ? (uint64_t)((double)plain_mem * rng_real(0.6, 1.0)) : 0;
    for (int k = o.mem_limit ? 0 : rng_int(1, 3); k > 0; k--) {
      pass_plan_opts ol = o;
      ol.recompute = rng_int(0, 1) ? PASS_PLAN_RC_FULL : PASS_PLAN_RC_NONE;
      uint64_t x = random_stage_memory(&d, &ol);
      if (x > o.mem_limit) o.mem_limit = x;
    }
    double bf = brute_force_orders(&d, &o);
    int rcp = pass_partition(&d, &o, &pe, err, sizeof err);
    CHECK((rcp == 0) == isfinite(bf), "auto iter %d: prefix DP %s, brute force %g", it, rcp ? err : "planned", bf);
    if (rcp == 0) {
      check_plan_invariants(&d, &o, &pe);
      CHECK(fabs(pe.bottleneck_ms - bf) <= 1e-7 * fmax(1.0, bf),
            "auto iter %d (n=%d, g=%d, M=%d, mem=%llu): prefix DP %.12g != brute force %.12g", it, n, o.devices,
            o.microbatches, (unsigned long long)o.mem_limit, pe.bottleneck_ms, bf);
      CHECK(pass_schedule_attach(&o, &pe, err, sizeof err) == 0, "auto iter %d: schedule: %s", it, err);
      int seen[4] = {0};
      for (int k = 0; k < pe.n_stages; k++) seen[pe.stages[k].recompute & 3] = 1;
      auto_mixed += seen[0] + seen[1] + seen[2] > 1;
      auto_some += seen[1] | seen[2];
      pass_plan_opts oa = o; /* the default mode: the same (no exact DP with AUTO) */
      oa.states = PASS_STATES_AUTO;
      pass_plan pa;
      CHECK(pass_partition(&d, &oa, &pa, err, sizeof err) == 0 && pa.exact == PASS_EXACT_OFF &&
                pa.bottleneck_ms == pe.bottleneck_ms,
            "auto iter %d: default mode differs", it);
      pass_plan_free(&pa);
      pass_plan_free(&pe);
    } else {
      auto_infeasible++;
    }
    pass_dag_free(&d);
  }
  printf(
      "recompute chosen per stage: %d random DAGs of 3-8 nodes, prefix DP equal to brute force over every "
      "stage's mode; %d plans recompute somewhere, %d mix modes, nothing fit in %d\n",
      auto_iters, auto_some, auto_mixed, auto_infeasible);
}

/* The summary of comparisons 1 and 2 over iters small and the big random DAGs */
static void print_dag_tally(int iters, const dag_tally *st) {
  int n_pc = st->n_exact + st->n_gap;
  printf(
      "planner optimality: %d random DAGs of 2-10 nodes, %d compared with brute force over the orders "
      "(prefix mode, all equal unless reported), %d infeasible in memory on both sides\n",
      iters, st->n_cmp, st->n_infeasible);
  printf("mean gap to lower bound (total work/g, largest node): %.1f%%\n",
         100 * st->sum_lbgap / (st->n_cmp ? st->n_cmp : 1));
  printf(
      "default mode (exact over all down-sets, up to %ld states here): %d/%d equal to the optimum over ALL "
      "convex linear splits (%d better than prefix orders), %d infeasible on both sides\n",
      st->max_states, st->n_exact_cmp, st->n_exact_cmp, st->n_improved, st->n_exact_infeasible);
  printf(
      "prefix-order mode alone vs that optimum, 2-10 nodes: %d/%d identical, %d worse; mean gap %.3f%%, "
      "max gap %.2f%%\n",
      st->n_exact, n_pc, st->n_gap, 100 * st->sum_gap / (n_pc ? n_pc : 1), 100 * st->max_gap);
  for (int s = 0; s < SHAPE_COUNT; s++)
    printf("  %-8s: %d/%d with a gap\n", shape_names[s], st->per_shape_gap[s], st->per_shape_cnt[s]);
  printf("prefix-order mode alone vs that optimum, 11-15 nodes: %d/%d identical; mean gap %.3f%%, max gap %.2f%%\n",
         st->n_big - st->n_big_gap, st->n_big, 100 * st->big_sum_gap / (st->n_big ? st->n_big : 1),
         100 * st->big_max_gap);
  printf("%d of them trained with recompute under a memory limit\n", st->n_rc_mem);
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 3000;    /* n = 2..10: both references */
  int big_iters = argc > 2 ? atoi(argv[2]) : 300; /* n = 11..15: the all-convex reference only */
  dag_tally st = {0};
  for (int it = 0; it < iters + big_iters; it++) check_random_dag(it, iters, &st);
  check_recompute_limits(argc > 3 ? atoi(argv[3]) : 6000);
  check_auto_recompute(argc > 4 ? atoi(argv[4]) : 3000);
  print_dag_tally(iters, &st);
  printf("%s\n", g_failures ? "FAIL" : "PASS");
  return g_failures ? 1 : 0;
}
