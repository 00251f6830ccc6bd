/* planner_test.h — shared helpers for the planner tests: checks, a random DAG
 * generator and synthetic model builders. Header-only (static functions). */
#ifndef PIPECC_TESTS_PLANNER_TEST_H
#define PIPECC_TESTS_PLANNER_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan/antichain.h"
#include "passes/plan/partition.h"
#include "passes/plan/plan_dag.h"
#include "passes/plan/schedule.h"

static int g_failures __attribute__((unused));

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      g_failures++;                                                            \
    }                                                                          \
  } while (0)

static uint64_t rng_state __attribute__((unused)) = 0x9E3779B97F4A7C15ull;
static inline uint64_t rng_next(void) {
  uint64_t x = rng_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  rng_state = x;
  return x * 0x2545F4914F6CDD1Dull;
}
static inline int rng_int(int lo, int hi) /* inclusive */
{
  return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
}
static inline double rng_real(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next() >> 11) / 9007199254740992.0;
}

/* Add a node with one output tensor; returns the output tensor id. */
static inline int add_op(pass_dag *d, const char *name, double fwd, uint64_t params, uint64_t out_bytes, int n_in,
                         const int *in) {
  char tn[128];
  snprintf(tn, sizeof tn, "%s:out", name);
  int t = pass_dag_add_tensor(d, tn, out_bytes);
  if (pass_dag_add_node(d, name, fwd, 2.0 * fwd, params, out_bytes, n_in, in, 1, &t) < 0) abort();
  return t;
}

/* Random DAG of n nodes of one of several shapes. */
enum { SHAPE_CHAIN, SHAPE_DIAMOND, SHAPE_BRANCHES, SHAPE_SKIP, SHAPE_SINKS, SHAPE_RANDOM, SHAPE_COUNT };

static inline void random_dag(pass_dag *d, int n, int shape) {
  pass_dag_init(d);
  int n_inputs = shape == SHAPE_RANDOM || shape == SHAPE_SINKS ? rng_int(1, 2) : 1;
  int in[2];
  for (int i = 0; i < n_inputs; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "input%d", i);
    in[i] = pass_dag_add_tensor(d, nm, (uint64_t)rng_int(1, 200) * 1000);
  }
  int *outs = malloc(sizeof(int) * (size_t)n);
  for (int v = 0; v < n; v++) {
    int ins[4], k = 0;
    char nm[32];
    snprintf(nm, sizeof nm, "n%d", v);
    if (v == 0) {
      ins[k++] = in[0];
    } else {
      switch (shape) {
        case SHAPE_CHAIN: ins[k++] = outs[v - 1]; break;
        case SHAPE_DIAMOND: /* fan out from block start, join every 4 */
          if (v % 4 == 3) {
            ins[k++] = outs[v - 1];
            ins[k++] = outs[v - 2];
            if (v >= 4) ins[k++] = outs[v - 3];
          } else ins[k++] = outs[(v / 4) * 4 > 0 ? (v / 4) * 4 - 1 : 0];
          break;
        case SHAPE_BRANCHES: { /* b parallel chains from node 0, joined by the last node */
          int b = 3;
          if (v == n - 1) {
            for (int q = 1; q <= b && v - q >= 1; q++) ins[k++] = outs[v - q];
          } else ins[k++] = v <= b ? outs[0] : outs[v - b];
          break;
        }
        case SHAPE_SKIP:
          ins[k++] = outs[v - 1];
          if (v >= 2 && rng_int(0, 1)) ins[k++] = outs[rng_int(0, v - 2)];
          break;
        case SHAPE_SINKS: ins[k++] = outs[rng_int(0, v - 1)]; break;
        default:
          ins[k++] = outs[rng_int(0, v - 1)];
          if (rng_int(0, 2) == 0) {
            int u = rng_int(0, v - 1);
            if (outs[u] != ins[0]) ins[k++] = outs[u];
          }
          break;
      }
      if (n_inputs > 1 && rng_int(0, 3) == 0) ins[k++] = in[1];
    }
    double fwd = rng_real(0.5, 10.0);
    uint64_t params = (uint64_t)rng_int(0, 50) * 100000;
    uint64_t bytes = (uint64_t)rng_int(1, 400) * 10000;
    outs[v] = add_op(d, nm, fwd, params, bytes, k, ins);
  }
  /* sinks (no consumer) become outputs; some other tensors too */
  int *used = calloc((size_t)d->n_tensors, sizeof(int));
  for (int v = 0; v < d->n_nodes; v++)
    for (int i = 0; i < d->nodes[v].n_inputs; i++) used[d->nodes[v].inputs[i]] = 1;
  for (int v = 0; v < n; v++)
    if (!used[outs[v]] || rng_int(0, 9) == 0) pass_dag_mark_output(d, outs[v]);
  free(used);
  free(outs);
  char err[128];
  if (pass_dag_finalize(d, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    abort();
  }
}

/* Plan invariants: non-empty stages covering each node once, nested down-sets
 * (linear pipeline, convex stages), contiguous devices, replica rules. */
static inline void check_plan_invariants(const pass_dag *d, const pass_plan_opts *o, const pass_plan *p) {
  int n = d->n_nodes;
  int *stage_of = malloc(sizeof(int) * (size_t)n);
  unsigned char *in = calloc((size_t)n, 1);
  for (int v = 0; v < n; v++) stage_of[v] = -1;
  CHECK(p->n_stages >= 1 && p->n_stages <= o->devices, "stages %d devices %d", p->n_stages, o->devices);
  if (o->devices == 1) CHECK(p->n_stages == 1, "g=1 gave %d stages", p->n_stages);
  int dev = 0;
  for (int k = 0; k < p->n_stages; k++) {
    const pass_stage *S = &p->stages[k];
    CHECK(S->n_nodes > 0, "stage %d empty", k);
    CHECK(S->dev_first == dev, "stage %d devices not contiguous", k);
    CHECK(S->replicas >= 1, "replicas");
    if (o->no_replicate) CHECK(S->replicas == 1, "no_replicate but stage %d has %d replicas", k, S->replicas);
    dev += S->replicas;
    uint64_t gb, cin = pass_cut_bytes(d, in, &gb), keep = 0;
    int q = S->recompute == PASS_PLAN_RC_SELECTIVE ? 0 : S->recompute == PASS_PLAN_RC_FULL ? 1 : -1;
    if (!o->training || o->recompute != PASS_PLAN_RC_AUTO)
      CHECK(S->recompute == (o->training ? o->recompute : 0), "stage %d: recompute %d", k, S->recompute);
    for (int i = 0; i < S->n_nodes; i++) {
      if (o->training && o->recompute == PASS_PLAN_RC_AUTO) keep += q < 0 ? 0 : d->nodes[S->nodes[i]].rc_keep[q];
      else keep += d->nodes[S->nodes[i]].keep_bytes;
      int v = S->nodes[i];
      CHECK(stage_of[v] == -1, "node %d in two stages", v);
      stage_of[v] = k;
      in[v] = 1;
    }
    CHECK(pass_is_downset(d, in), "stages 0..%d are not a down-set (not linear/convex)", k);
    CHECK(S->keep_bytes == keep, "stage %d keeps %llu bytes, its nodes %llu", k, (unsigned long long)S->keep_bytes,
          (unsigned long long)keep);
    CHECK(S->xch_bytes == cin + pass_cut_bytes(d, in, &gb), "stage %d exchanges %llu bytes, not the cuts' %llu", k,
          (unsigned long long)S->xch_bytes, (unsigned long long)(cin + pass_cut_bytes(d, in, &gb)));
    if (o->mem_limit)
      CHECK(S->memory_bytes <= o->mem_limit, "stage %d memory %llu > limit", k, (unsigned long long)S->memory_bytes);
  }
  CHECK(dev <= o->devices && dev == p->devices_used, "devices used %d", dev);
  for (int v = 0; v < n; v++) CHECK(stage_of[v] >= 0, "node %d in no stage", v);
  /* convexity directly: no edge goes from a later stage to an earlier one, so
   * no path can leave a stage and re-enter it. */
  for (int v = 0; v < n; v++)
    for (int i = 0; i < d->nodes[v].n_inputs; i++) {
      int u = d->tensors[d->nodes[v].inputs[i]].producer;
      if (u >= 0) CHECK(stage_of[u] <= stage_of[v], "edge %d->%d goes backwards", u, v);
    }
  free(stage_of);
  free(in);
}

#endif
