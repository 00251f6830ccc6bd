/* Schedule streams, deadlock checker and simulation sanity:
 *  - every built schedule passes the checker (p 1..8, M 1..12, GPipe/1F1B,
 *    training/inference, with replicas);
 *  - equal stages, free communication: GPipe bubble = (p-1)/(m+p-1) and
 *    iteration = (m+p-1)(f+b); 1F1B has the same time, holds min(p-k, m)
 *    micro-batches on stage k versus m for GPipe;
 *  - the checker catches broken streams (order mismatch, deadlock, unmatched
 *    send, missing peer);
 *  - replicated stages (worked by hand): replica j runs mb % r == j, a stage's
 *    all-reduce ends for its replicas at once; the planner caps r at M;
 *  - pass_schedule_attach on a planned model: speedup <= devices, peak memory
 *    within the cost-model memory. */
#include <math.h>

#include "tests/planner/planner_test.h"

static void build(pass_schedule_kind k, int p, int m, int training, pass_stream *s) {
  memset(s, 0, sizeof(pass_stream) * (size_t)p);
  int reps[8];
  for (int i = 0; i < p; i++) reps[i] = 1 + (i % 2);
  if (pass_schedule_build(k, p, m, training, reps, s)) abort();
}

static void test_all_valid(void) {
  char err[256];
  for (int kind = 0; kind < 2; kind++)
    for (int tr = 0; tr <= 1; tr++)
      for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 12; m++) {
          pass_stream s[8];
          build((pass_schedule_kind)kind, p, m, tr, s);
          int reps[8];
          for (int i = 0; i < p; i++) reps[i] = 1 + (i % 2);
          CHECK(pass_schedule_check(p, s, NULL, err, sizeof err) == 0, "kind %d p %d m %d: %s", kind, p, m, err);
          CHECK(pass_schedule_check(p, s, reps, err, sizeof err) == 0, "kind %d p %d m %d, replicas: %s", kind, p, m,
                err);
          pass_streams_free(s, p);
        }
}

static void test_bubble(void) {
  for (int kind = 0; kind < 2; kind++)
    for (int tr = 0; tr <= 1; tr++)
      for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 16; m++) {
          pass_stream s[8];
          memset(s, 0, sizeof s);
          pass_schedule_build((pass_schedule_kind)kind, p, m, tr, NULL, s);
          pass_sim_stage c[8];
          memset(c, 0, sizeof c);
          for (int k = 0; k < p; k++) {
            c[k].fwd_ms = 1.0;
            c[k].bwd_ms = 2.0;
            c[k].act_bytes = 100;
            c[k].static_bytes = 1000;
          }
          pass_sim_result r;
          CHECK(pass_schedule_simulate(p, s, c, &r) == 0, "simulate");
          double per = tr ? 3.0 : 1.0;
          double want_bubble = (double)(p - 1) / (m + p - 1);
          CHECK(fabs(r.iteration_ms - (m + p - 1) * per) < 1e-9, "kind %d tr %d p %d m %d: iteration %g want %g", kind,
                tr, p, m, r.iteration_ms, (m + p - 1) * per);
          CHECK(fabs(r.bubble_fraction - want_bubble) < 1e-9, "kind %d p %d m %d: bubble %g want %g", kind, p, m,
                r.bubble_fraction, want_bubble);
          for (int k = 0; k < p; k++) {
            int want = !tr ? 1 : kind == PASS_SCHED_GPIPE ? m : (p - k < m ? p - k : m);
            CHECK(r.peak_inflight[k] == want, "kind %d tr %d p %d m %d stage %d: in flight %d want %d", kind, tr, p, m,
                  k, r.peak_inflight[k], want);
            CHECK(r.peak_bytes[k] == 1000 + 100 * (uint64_t)want, "peak bytes");
          }
          pass_sim_result_free(&r);
          pass_streams_free(s, p);
        }
}

static int find(const pass_stream *s, pass_op op, int mb) {
  for (int i = 0; i < s->n; i++)
    if (s->v[i].op == op && s->v[i].mb == mb) return i;
  return -1;
}

static void test_broken(void) {
  char err[256];
  pass_stream s[4];
  /* 1. two receives swapped: order mismatch */
  build(PASS_SCHED_GPIPE, 3, 4, 1, s);
  int a = find(&s[1], PASS_OP_RECV_ACT, 1), b = find(&s[1], PASS_OP_RECV_ACT, 2);
  s[1].v[a].mb = 2;
  s[1].v[b].mb = 1;
  CHECK(pass_schedule_check(3, s, NULL, err, sizeof err) != 0 && strstr(err, "order"), "swap not caught: %s", err);
  printf("caught: %s\n", err);
  pass_streams_free(s, 3);
  /* 2. stage 0 waits for the gradient of mb 0 before sending mb 1's activations,
   *    while stage 1 needs mb 1 ... in GPipe stage 1 runs all forwards first: deadlock */
  build(PASS_SCHED_GPIPE, 2, 2, 1, s);
  int send1 = find(&s[0], PASS_OP_SEND_ACT, 1), recvg0 = find(&s[0], PASS_OP_RECV_GRAD, 0);
  pass_instr tmp = s[0].v[recvg0];
  memmove(&s[0].v[send1 + 1], &s[0].v[send1], sizeof(pass_instr) * (size_t)(recvg0 - send1));
  s[0].v[send1] = tmp;
  CHECK(pass_schedule_check(2, s, NULL, err, sizeof err) != 0 && strstr(err, "deadlock"), "deadlock not caught: %s",
        err);
  printf("caught: %s\n", err);
  pass_streams_free(s, 2);
  /* 3. a receive dropped: the send is never received */
  build(PASS_SCHED_1F1B, 4, 6, 1, s);
  int r = find(&s[3], PASS_OP_RECV_ACT, 5);
  memmove(&s[3].v[r], &s[3].v[r + 1], sizeof(pass_instr) * (size_t)(s[3].n - r - 1));
  s[3].n--;
  CHECK(pass_schedule_check(4, s, NULL, err, sizeof err) != 0, "dropped receive not caught");
  printf("caught: %s\n", err);
  pass_streams_free(s, 4);
  /* 4. a send dropped: the receiver sees the wrong micro-batch */
  build(PASS_SCHED_1F1B, 4, 6, 1, s);
  int sg = find(&s[2], PASS_OP_SEND_GRAD, 3);
  memmove(&s[2].v[sg], &s[2].v[sg + 1], sizeof(pass_instr) * (size_t)(s[2].n - sg - 1));
  s[2].n--;
  CHECK(pass_schedule_check(4, s, NULL, err, sizeof err) != 0, "dropped send not caught");
  printf("caught: %s\n", err);
  pass_streams_free(s, 4);
  /* 5. the last send dropped: the receiver waits forever */
  build(PASS_SCHED_1F1B, 3, 4, 1, s);
  sg = find(&s[1], PASS_OP_SEND_GRAD, 3);
  memmove(&s[1].v[sg], &s[1].v[sg + 1], sizeof(pass_instr) * (size_t)(s[1].n - sg - 1));
  s[1].n--;
  CHECK(pass_schedule_check(3, s, NULL, err, sizeof err) != 0 && strstr(err, "deadlock"), "lost send not caught: %s",
        err);
  printf("caught: %s\n", err);
  pass_streams_free(s, 3);
  /* 6. the last stage sends activations to nobody */
  build(PASS_SCHED_GPIPE, 2, 1, 0, s);
  pass_stream_push(&s[1], PASS_OP_SEND_ACT, 0);
  CHECK(pass_schedule_check(2, s, NULL, err, sizeof err) != 0 && strstr(err, "peer"), "missing peer not caught: %s",
        err);
  printf("caught: %s\n", err);
  pass_streams_free(s, 2);
}

static const pass_sim_span *span_of(const pass_sim_result *r, int stage, pass_op op, int mb) {
  for (int i = 0; i < r->n_spans; i++)
    if (r->spans[i].stage == stage && r->spans[i].op == op && r->spans[i].mb == mb) return &r->spans[i];
  return NULL;
}

/* Replicas run whole micro-batches in turn (mb % r == j), as the runtime does: worked
 * by hand, free communication. */
static void test_replicas(void) {
  /* one stage, 2 replicas, 3 micro-batches of 1 ms: replica 0 runs 0 and 2, so 2 ms
   * (a stage that divides micro-batches among replicas would take 1.5) */
  pass_stream s[2];
  int reps[2] = {2, 1};
  memset(s, 0, sizeof s);
  CHECK(pass_schedule_build(PASS_SCHED_1F1B, 1, 3, 0, reps, s) == 0, "build");
  pass_sim_stage c[2];
  memset(c, 0, sizeof c);
  c[0].fwd_ms = 1.0, c[0].replicas = 2, c[0].act_bytes = 10;
  pass_sim_result r;
  CHECK(pass_schedule_simulate(1, s, c, &r) == 0, "simulate");
  CHECK(fabs(r.iteration_ms - 2.0) < 1e-12, "one stage r=2 M=3: iteration %g want 2", r.iteration_ms);
  CHECK(fabs(r.bubble_fraction - 0.25) < 1e-12, "bubble %g want 0.25 (3 of 4 device-ms busy)", r.bubble_fraction);
  const pass_sim_span *x = span_of(&r, 0, PASS_OP_FWD, 2);
  CHECK(x && x->replica == 0 && fabs(x->t0 - 1.0) < 1e-12, "mb 2 on replica 0 at 1 ms");
  x = span_of(&r, 0, PASS_OP_FWD, 1);
  CHECK(x && x->replica == 1 && fabs(x->t0) < 1e-12, "mb 1 on replica 1 at 0 ms");
  CHECK(r.peak_bytes[0] == 10, "inference holds one micro-batch per replica: %llu",
        (unsigned long long)r.peak_bytes[0]);
  pass_sim_result_free(&r);
  pass_streams_free(s, 1);
  /* stage 0 (1 ms, one device) feeds stage 1 (2 ms, 2 replicas), 4 micro-batches:
   * stage 1's replica 0 runs mb 0 over 1-3 and mb 2 over 3-5, replica 1 mb 1 over 2-4
   * and mb 3 over 4-6: 6 ms (one 1-ms device in its place would finish at 5) */
  reps[0] = 1, reps[1] = 2;
  CHECK(pass_schedule_build(PASS_SCHED_1F1B, 2, 4, 0, reps, s) == 0, "build");
  memset(c, 0, sizeof c);
  c[0].fwd_ms = 1.0, c[1].fwd_ms = 2.0, c[1].replicas = 2;
  CHECK(pass_schedule_simulate(2, s, c, &r) == 0, "simulate");
  CHECK(fabs(r.iteration_ms - 6.0) < 1e-12, "r=1 -> r=2, M=4: iteration %g want 6", r.iteration_ms);
  x = span_of(&r, 1, PASS_OP_FWD, 3);
  CHECK(x && x->replica == 1 && fabs(x->t0 - 4.0) < 1e-12 && fabs(x->t1 - 6.0) < 1e-12, "mb 3 on replica 1 over 4-6");
  CHECK(fabs(r.busy_ms[1] - 8.0) < 1e-12, "stage 1 busy %g want 8 (summed over replicas)", r.busy_ms[1]);
  pass_sim_result_free(&r);
  pass_streams_free(s, 2);
  /* training, GPipe, stage 1 replicated: its all-reduce starts when the later replica
   * reaches it and ends for both at once; replica 1 (mb 1) finishes its backward
   * later than replica 0 */
  CHECK(pass_schedule_build(PASS_SCHED_GPIPE, 2, 2, 1, reps, s) == 0, "build");
  memset(c, 0, sizeof c);
  c[0].fwd_ms = 1.0, c[0].bwd_ms = 1.0;
  c[1].fwd_ms = 1.0, c[1].bwd_ms = 3.0, c[1].replicas = 2, c[1].allreduce_ms = 0.5;
  CHECK(pass_schedule_simulate(2, s, c, &r) == 0, "simulate");
  /* replica 0: fwd mb0 1-2, bwd 2-5; replica 1: fwd mb1 2-3, bwd 3-6; all-reduce 6-6.5 */
  int n_ar = 0;
  for (int i = 0; i < r.n_spans; i++)
    if (r.spans[i].op == PASS_OP_ALLREDUCE) {
      n_ar++;
      CHECK(r.spans[i].stage == 1 && fabs(r.spans[i].t0 - 6.0) < 1e-12 && fabs(r.spans[i].t1 - 6.5) < 1e-12,
            "all-reduce of replica %d over %g-%g, want 6-6.5", r.spans[i].replica, r.spans[i].t0, r.spans[i].t1);
    }
  CHECK(n_ar == 2, "%d all-reduce spans, want one per replica", n_ar);
  /* stage 0: fwd 0-1, 1-2; bwd mb0 after replica 0's gradient (5): 5-6, mb1 6-7 */
  CHECK(fabs(r.iteration_ms - 7.0) < 1e-12, "iteration %g want 7", r.iteration_ms);
  pass_sim_result_free(&r);
  pass_streams_free(s, 2);
}

/* 1F1B with a replicated middle stage (replicas 1, 2, 1; each stage's period 1: one
 * device per micro-batch 1/3 forward, 2/3 backward, the replicated one twice that per
 * replica): the leads 4, 2, 0 keep every device busy in the steady state, 32
 * micro-batches in (32 + 4 - 1) periods, the fill of 4 devices; leads of one per later
 * device (3, 2, 0) made stage 1's backwards collide with its forwards: 48.3. */
static int leads(const pass_stream *s) {
  int n = 0;
  for (int i = 0; i < s->n && s->v[i].op != PASS_OP_BWD; i++) n += s->v[i].op == PASS_OP_FWD;
  return n;
}

static void test_replicated_1f1b(void) {
  pass_stream s[3];
  int reps[3] = {1, 2, 1};
  memset(s, 0, sizeof s);
  CHECK(pass_schedule_build(PASS_SCHED_1F1B, 3, 32, 1, reps, s) == 0, "build");
  /* forwards before the first backward: the lead plus one */
  CHECK(leads(&s[0]) == 5 && leads(&s[1]) == 3 && leads(&s[2]) == 1, "leads %d %d %d, want 4 2 0", leads(&s[0]) - 1,
        leads(&s[1]) - 1, leads(&s[2]) - 1);
  char err[256];
  CHECK(pass_schedule_check(3, s, reps, err, sizeof err) == 0, "%s", err);
  pass_sim_stage c[3];
  memset(c, 0, sizeof c);
  for (int k = 0; k < 3; k++) {
    c[k].replicas = reps[k];
    c[k].fwd_ms = reps[k] / 3.0;
    c[k].bwd_ms = 2.0 * reps[k] / 3.0;
  }
  pass_sim_result r;
  CHECK(pass_schedule_simulate(3, s, c, &r) == 0, "simulate");
  CHECK(r.iteration_ms <= 35.0 + 1e-9, "iteration %g want <= 35 (32 micro-batches + fill of 4 devices)",
        r.iteration_ms);
  /* a replica of stage 1 holds its share of the lead plus one: 2 */
  CHECK(r.peak_inflight[1] == 2 && r.peak_inflight[0] == 5, "in flight %d %d, want 5 2", r.peak_inflight[0],
        r.peak_inflight[1]);
  pass_sim_result_free(&r);
  pass_streams_free(s, 3);
}

/* The planner never gives a stage more replicas than micro-batches, and its stage time
 * is the busiest replica's: ceil(M / r) micro-batches of M. */
static void test_replica_cap(void) {
  pass_plan_opts o;
  pass_plan_opts_default(&o, 8);
  o.microbatches = 4;
  pass_stage_agg a = {3.0, 0.0, 0, 0, 0, 3, 0, 0, 0, 0};
  CHECK(fabs(pass_stage_time(&o, &a) - 3.0 * 2 / 4) < 1e-12, "r=3 M=4: %g want 1.5", pass_stage_time(&o, &a));
  a.replicas = 8;
  CHECK(fabs(pass_stage_time(&o, &a) - 3.0 / 4) < 1e-12, "r=8 M=4: %g want 0.75", pass_stage_time(&o, &a));
  CHECK(pass_max_replicas(&o) == 4, "max replicas %d want 4", pass_max_replicas(&o));
  for (int M = 1; M <= 3; M++)
    for (int it = 0; it < 20; it++) {
      pass_dag d;
      random_dag(&d, rng_int(2, 30), it % SHAPE_COUNT);
      pass_plan_opts_default(&o, 8);
      o.microbatches = M;
      o.training = it % 2;
      pass_plan p;
      char err[256];
      CHECK(pass_partition(&d, &o, &p, err, sizeof err) == 0, "%s", err);
      for (int k = 0; k < p.n_stages; k++)
        CHECK(p.stages[k].replicas <= M, "M=%d: stage %d has %d replicas", M, k, p.stages[k].replicas);
      pass_plan_free(&p);
      pass_dag_free(&d);
    }
}

static void test_attach(void) {
  for (int it = 0; it < 200; it++) {
    pass_dag d;
    random_dag(&d, rng_int(4, 60), it % SHAPE_COUNT);
    pass_plan_opts o;
    pass_plan_opts_default(&o, rng_int(1, 8));
    o.training = it % 2;
    o.schedule = (it / 2) % 2 ? PASS_SCHED_1F1B : PASS_SCHED_GPIPE;
    o.microbatches = rng_int(1, 16);
    o.no_replicate = rng_int(0, 1);
    o.recompute = o.training && rng_int(0, 1);
    pass_plan p;
    char err[256];
    CHECK(pass_partition(&d, &o, &p, err, sizeof err) == 0, "%s", err);
    CHECK(pass_schedule_attach(&o, &p, err, sizeof err) == 0, "%s", err);
    CHECK(pass_schedule_check(p.n_stages, p.streams, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(p.predicted_speedup <= p.devices_used * (1 + 1e-9), "speedup %g > %d devices", p.predicted_speedup,
          p.devices_used);
    CHECK(p.predicted_iteration_ms >= o.microbatches * p.bottleneck_ms * (1 - 1e-9) - 1e-9 || p.n_stages == 1,
          "iteration %g below M * bottleneck %g", p.predicted_iteration_ms, o.microbatches * p.bottleneck_ms);
    for (int k = 0; k < p.n_stages; k++)
      CHECK(p.stages[k].replicas <= pass_max_replicas(&o), "stage %d: %d replicas, M %d", k, p.stages[k].replicas,
            o.microbatches);
    for (int k = 0; k < p.n_stages; k++) {
      const pass_stage *S = &p.stages[k];
      CHECK(S->peak_memory_bytes <= S->memory_bytes, "stage %d simulated peak %llu > model %llu", k,
            (unsigned long long)S->peak_memory_bytes, (unsigned long long)S->memory_bytes);
      /* the model: weights x (1, or 2 + optimizer state when training), then held x
       * activations, or with recompute one micro-batch's plus (held - 1) x exchanged */
      uint64_t stat = S->param_bytes * (o.training ? 4 : 1);
      uint64_t want = o.recompute ? stat + S->act_bytes + (uint64_t)(S->held - 1) * (S->xch_bytes + S->keep_bytes)
                                  : stat + (uint64_t)S->held * S->act_bytes;
      CHECK(S->held >= 1 && (o.training || S->held == 1) && S->memory_bytes == want,
            "stage %d: memory %llu, held %d, want %llu", k, (unsigned long long)S->memory_bytes, S->held,
            (unsigned long long)want);
    }
    pass_plan_free(&p);
    pass_dag_free(&d);
  }
}

int main(void) {
  test_all_valid();
  test_bubble();
  test_broken();
  test_replicas();
  test_replica_cap();
  test_replicated_1f1b();
  test_attach();
  printf("%s\n", g_failures ? "FAIL" : "PASS");
  return g_failures ? 1 : 0;
}
