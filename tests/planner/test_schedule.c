/* Schedule streams, deadlock checker and simulation sanity:
 *  - every built schedule passes the checker (p 1..8, M 1..12, GPipe/1F1B,
 *    training/inference, with replicas);
 *  - equal stages, free communication: GPipe bubble = (p-1)/(m+p-1) and
 *    iteration = (m+p-1)(f+b); 1F1B has the same time, holds min(p-k, m)
 *    micro-batches on stage k versus m for GPipe;
 *  - the checker catches broken streams (order mismatch, deadlock, unmatched
 *    send, missing peer);
 *  - pass_schedule_attach on a planned model: speedup <= devices, peak memory
 *    within the cost-model memory. */
#include <math.h>

#include "tests/planner/planner_test.h"

static void build(pass_schedule_kind k, int p, int m, int training, pass_stream *s)
{
    memset(s, 0, sizeof(pass_stream) * (size_t)p);
    int reps[8];
    for (int i = 0; i < p; i++) reps[i] = 1 + (i % 2);
    if (pass_schedule_build(k, p, m, training, reps, s)) abort();
}

static void test_all_valid(void)
{
    char err[256];
    for (int kind = 0; kind < 2; kind++)
        for (int tr = 0; tr <= 1; tr++)
            for (int p = 1; p <= 8; p++)
                for (int m = 1; m <= 12; m++) {
                    pass_stream s[8];
                    build((pass_schedule_kind)kind, p, m, tr, s);
                    CHECK(pass_schedule_check(p, s, err, sizeof err) == 0, "kind %d p %d m %d: %s", kind, p, m, err);
                    pass_streams_free(s, p);
                }
}

static void test_bubble(void)
{
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
                    CHECK(fabs(r.iteration_ms - (m + p - 1) * per) < 1e-9, "kind %d tr %d p %d m %d: iteration %g want %g",
                          kind, tr, p, m, r.iteration_ms, (m + p - 1) * per);
                    CHECK(fabs(r.bubble_fraction - want_bubble) < 1e-9, "kind %d p %d m %d: bubble %g want %g", kind, p,
                          m, r.bubble_fraction, want_bubble);
                    for (int k = 0; k < p; k++) {
                        int want = !tr ? 1 : kind == PASS_SCHED_GPIPE ? m : (p - k < m ? p - k : m);
                        CHECK(r.peak_inflight[k] == want, "kind %d tr %d p %d m %d stage %d: in flight %d want %d", kind,
                              tr, p, m, k, r.peak_inflight[k], want);
                        CHECK(r.peak_bytes[k] == 1000 + 100 * (uint64_t)want, "peak bytes");
                    }
                    pass_sim_result_free(&r);
                    pass_streams_free(s, p);
                }
}

static int find(const pass_stream *s, pass_op op, int mb)
{
    for (int i = 0; i < s->n; i++)
        if (s->v[i].op == op && s->v[i].mb == mb) return i;
    return -1;
}

static void test_broken(void)
{
    char err[256];
    pass_stream s[4];
    /* 1. two receives swapped: order mismatch */
    build(PASS_SCHED_GPIPE, 3, 4, 1, s);
    int a = find(&s[1], PASS_OP_RECV_ACT, 1), b = find(&s[1], PASS_OP_RECV_ACT, 2);
    s[1].v[a].mb = 2;
    s[1].v[b].mb = 1;
    CHECK(pass_schedule_check(3, s, err, sizeof err) != 0 && strstr(err, "order"), "swap not caught: %s", err);
    printf("caught: %s\n", err);
    pass_streams_free(s, 3);
    /* 2. stage 0 waits for the gradient of mb 0 before sending mb 1's activations,
     *    while stage 1 needs mb 1 ... in GPipe stage 1 runs all forwards first: deadlock */
    build(PASS_SCHED_GPIPE, 2, 2, 1, s);
    int send1 = find(&s[0], PASS_OP_SEND_ACT, 1), recvg0 = find(&s[0], PASS_OP_RECV_GRAD, 0);
    pass_instr tmp = s[0].v[recvg0];
    memmove(&s[0].v[send1 + 1], &s[0].v[send1], sizeof(pass_instr) * (size_t)(recvg0 - send1));
    s[0].v[send1] = tmp;
    CHECK(pass_schedule_check(2, s, err, sizeof err) != 0 && strstr(err, "deadlock"), "deadlock not caught: %s", err);
    printf("caught: %s\n", err);
    pass_streams_free(s, 2);
    /* 3. a receive dropped: the send is never received */
    build(PASS_SCHED_1F1B, 4, 6, 1, s);
    int r = find(&s[3], PASS_OP_RECV_ACT, 5);
    memmove(&s[3].v[r], &s[3].v[r + 1], sizeof(pass_instr) * (size_t)(s[3].n - r - 1));
    s[3].n--;
    CHECK(pass_schedule_check(4, s, err, sizeof err) != 0, "dropped receive not caught");
    printf("caught: %s\n", err);
    pass_streams_free(s, 4);
    /* 4. a send dropped: the receiver sees the wrong micro-batch */
    build(PASS_SCHED_1F1B, 4, 6, 1, s);
    int sg = find(&s[2], PASS_OP_SEND_GRAD, 3);
    memmove(&s[2].v[sg], &s[2].v[sg + 1], sizeof(pass_instr) * (size_t)(s[2].n - sg - 1));
    s[2].n--;
    CHECK(pass_schedule_check(4, s, err, sizeof err) != 0, "dropped send not caught");
    printf("caught: %s\n", err);
    pass_streams_free(s, 4);
    /* 5. the last send dropped: the receiver waits forever */
    build(PASS_SCHED_1F1B, 3, 4, 1, s);
    sg = find(&s[1], PASS_OP_SEND_GRAD, 3);
    memmove(&s[1].v[sg], &s[1].v[sg + 1], sizeof(pass_instr) * (size_t)(s[1].n - sg - 1));
    s[1].n--;
    CHECK(pass_schedule_check(3, s, err, sizeof err) != 0 && strstr(err, "deadlock"), "lost send not caught: %s", err);
    printf("caught: %s\n", err);
    pass_streams_free(s, 3);
    /* 6. the last stage sends activations to nobody */
    build(PASS_SCHED_GPIPE, 2, 1, 0, s);
    pass_stream_push(&s[1], PASS_OP_SEND_ACT, 0);
    CHECK(pass_schedule_check(2, s, err, sizeof err) != 0 && strstr(err, "peer"), "missing peer not caught: %s", err);
    printf("caught: %s\n", err);
    pass_streams_free(s, 2);
}

static void test_attach(void)
{
    for (int it = 0; it < 200; it++) {
        pass_dag d;
        random_dag(&d, rng_int(4, 60), it % SHAPE_COUNT);
        pass_plan_opts o;
        pass_plan_opts_default(&o, rng_int(1, 8));
        o.training = it % 2;
        o.schedule = (it / 2) % 2 ? PASS_SCHED_1F1B : PASS_SCHED_GPIPE;
        o.microbatches = rng_int(1, 16);
        o.no_replicate = rng_int(0, 1);
        pass_plan p;
        char err[256];
        CHECK(pass_partition(&d, &o, &p, err, sizeof err) == 0, "%s", err);
        CHECK(pass_schedule_attach(&o, &p, err, sizeof err) == 0, "%s", err);
        CHECK(pass_schedule_check(p.n_stages, p.streams, err, sizeof err) == 0, "%s", err);
        CHECK(p.predicted_speedup <= p.devices_used * (1 + 1e-9), "speedup %g > %d devices", p.predicted_speedup,
              p.devices_used);
        CHECK(p.predicted_iteration_ms >= o.microbatches * p.bottleneck_ms * (1 - 1e-9) - 1e-9 ||
                  p.n_stages == 1,
              "iteration %g below M * bottleneck %g", p.predicted_iteration_ms, o.microbatches * p.bottleneck_ms);
        for (int k = 0; k < p.n_stages; k++)
            CHECK(p.stages[k].peak_memory_bytes <= p.stages[k].memory_bytes, "stage %d simulated peak %llu > model %llu",
                  k, (unsigned long long)p.stages[k].peak_memory_bytes, (unsigned long long)p.stages[k].memory_bytes);
        pass_plan_free(&p);
        pass_dag_free(&d);
    }
}

int main(void)
{
    test_all_valid();
    test_bubble();
    test_broken();
    test_attach();
    printf("%s\n", g_failures ? "FAIL" : "PASS");
    return g_failures ? 1 : 0;
}
