/* schedule.c — instruction streams, deadlock check and simulation (see schedule.h). */
#include "passes/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {"FWD", "BWD", "SEND_ACT", "RECV_ACT",
                                       "SEND_GRAD", "RECV_GRAD", "ALLREDUCE", "STEP"};

const char *pass_op_name(pass_op op)
{
    return (unsigned)op < sizeof op_names / sizeof op_names[0] ? op_names[op] : "?";
}

int pass_stream_push(pass_stream *s, pass_op op, int mb)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        pass_instr *v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n].op = op;
    s->v[s->n].mb = mb;
    s->n++;
    return 0;
}

void pass_streams_free(pass_stream *streams, int p)
{
    for (int k = 0; k < p; k++) {
        free(streams[k].v);
        streams[k].v = NULL;
        streams[k].n = streams[k].cap = 0;
    }
}

static int emit_fwd(pass_stream *s, int k, int p, int mb)
{
    int rc = 0;
    if (k > 0) rc |= pass_stream_push(s, PASS_OP_RECV_ACT, mb);
    rc |= pass_stream_push(s, PASS_OP_FWD, mb);
    if (k < p - 1) rc |= pass_stream_push(s, PASS_OP_SEND_ACT, mb);
    return rc;
}

static int emit_bwd(pass_stream *s, int k, int p, int mb)
{
    int rc = 0;
    if (k < p - 1) rc |= pass_stream_push(s, PASS_OP_RECV_GRAD, mb);
    rc |= pass_stream_push(s, PASS_OP_BWD, mb);
    if (k > 0) rc |= pass_stream_push(s, PASS_OP_SEND_GRAD, mb);
    return rc;
}

int pass_schedule_build(pass_schedule_kind kind, int p, int m, int training, const int *replicas,
                        pass_stream *streams)
{
    int rc = 0;
    for (int k = 0; k < p; k++) {
        pass_stream *s = &streams[k];
        if (!training) {
            for (int mb = 0; mb < m; mb++) rc |= emit_fwd(s, k, p, mb);
            continue;
        }
        if (kind == PASS_SCHED_GPIPE) {
            for (int mb = 0; mb < m; mb++) rc |= emit_fwd(s, k, p, mb);
            for (int mb = 0; mb < m; mb++) rc |= emit_bwd(s, k, p, mb);
        } else {
            int w = p - k - 1 < m ? p - k - 1 : m;
            for (int mb = 0; mb < w; mb++) rc |= emit_fwd(s, k, p, mb);
            for (int i = 0; i < m - w; i++) {
                rc |= emit_fwd(s, k, p, w + i);
                rc |= emit_bwd(s, k, p, i);
            }
            for (int mb = m - w; mb < m; mb++) rc |= emit_bwd(s, k, p, mb);
        }
        if (replicas && replicas[k] > 1) rc |= pass_stream_push(s, PASS_OP_ALLREDUCE, -1);
        rc |= pass_stream_push(s, PASS_OP_STEP, -1);
    }
    return rc ? -1 : 0;
}

/* ---- execution (checker and simulator share it) ---------------------------------- */

typedef struct msg { int mb; double at; } msg;
typedef struct chan { msg *q; int head, tail, cap; double free_at; } chan;

static int chan_push(chan *c, int mb, double at)
{
    if (c->tail == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        msg *q = realloc(c->q, sizeof *q * (size_t)cap);
        if (!q) return -1;
        c->q = q;
        c->cap = cap;
    }
    c->q[c->tail].mb = mb;
    c->q[c->tail].at = at;
    c->tail++;
    return 0;
}

/* act[k]: stage k -> k+1; grad[k]: stage k+1 -> k (k = 0..p-2). */
static int run(int p, const pass_stream *st, const pass_sim_stage *cost, pass_sim_result *res,
               char *err, size_t errlen)
{
    int rc = -1;
    int nl = p > 1 ? p - 1 : 1;
    chan *act = calloc((size_t)nl, sizeof(chan)), *grad = calloc((size_t)nl, sizeof(chan));
    int *pc = calloc((size_t)p, sizeof(int)), *live = calloc((size_t)p, sizeof(int));
    int *has_bwd = calloc((size_t)p, sizeof(int));
    double *clk = calloc((size_t)p, sizeof(double));
    if (!act || !grad || !pc || !live || !has_bwd || !clk) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (int k = 0; k < p; k++)
        for (int i = 0; i < st[k].n; i++)
            if (st[k].v[i].op == PASS_OP_BWD) has_bwd[k] = 1;
    int done = 0;
    while (done < p) {
        int progress = 0;
        done = 0;
        for (int k = 0; k < p; k++) {
            while (pc[k] < st[k].n) {
                const pass_instr *in = &st[k].v[pc[k]];
                int need_next = in->op == PASS_OP_SEND_ACT || in->op == PASS_OP_RECV_GRAD;
                int need_prev = in->op == PASS_OP_RECV_ACT || in->op == PASS_OP_SEND_GRAD;
                if ((need_next && k == p - 1) || (need_prev && k == 0)) {
                    snprintf(err, errlen, "stage %d instr %d: %s mb %d has no peer stage", k, pc[k],
                             pass_op_name(in->op), in->mb);
                    goto out;
                }
                double dt = 0;
                if (in->op == PASS_OP_RECV_ACT || in->op == PASS_OP_RECV_GRAD) {
                    chan *c = in->op == PASS_OP_RECV_ACT ? &act[k - 1] : &grad[k];
                    if (c->head == c->tail) break; /* blocked */
                    msg mm = c->q[c->head++];
                    if (mm.mb != in->mb) {
                        snprintf(err, errlen, "stage %d instr %d: %s expects mb %d but the next message "
                                 "from stage %d is mb %d (order mismatch)", k, pc[k], pass_op_name(in->op),
                                 in->mb, in->op == PASS_OP_RECV_ACT ? k - 1 : k + 1, mm.mb);
                        goto out;
                    }
                    if (mm.at > clk[k]) clk[k] = mm.at;
                } else if (in->op == PASS_OP_SEND_ACT || in->op == PASS_OP_SEND_GRAD) {
                    chan *c = in->op == PASS_OP_SEND_ACT ? &act[k] : &grad[k - 1];
                    double x = cost ? (in->op == PASS_OP_SEND_ACT ? cost[k].act_xfer_ms : cost[k].grad_xfer_ms) : 0;
                    double start = clk[k] > c->free_at ? clk[k] : c->free_at;
                    c->free_at = start + x;
                    if (chan_push(c, in->mb, start + x)) { snprintf(err, errlen, "out of memory"); goto out; }
                } else if (in->op == PASS_OP_FWD) {
                    dt = cost ? cost[k].fwd_ms : 0;
                    if (++live[k] > (res ? res->peak_inflight[k] : 0) && res) res->peak_inflight[k] = live[k];
                    if (!has_bwd[k]) live[k]--;
                } else if (in->op == PASS_OP_BWD) {
                    dt = cost ? cost[k].bwd_ms : 0;
                    live[k]--;
                } else if (in->op == PASS_OP_ALLREDUCE) {
                    dt = cost ? cost[k].allreduce_ms : 0;
                } else {
                    dt = cost ? cost[k].step_ms : 0;
                }
                clk[k] += dt;
                if (res && (in->op == PASS_OP_FWD || in->op == PASS_OP_BWD)) res->busy_ms[k] += dt;
                pc[k]++;
                progress = 1;
            }
            if (pc[k] == st[k].n) done++;
        }
        if (done < p && !progress) {
            int len = snprintf(err, errlen, "deadlock:");
            for (int k = 0; k < p && len >= 0 && (size_t)len < errlen; k++)
                if (pc[k] < st[k].n)
                    len += snprintf(err + len, errlen - (size_t)len, " stage %d waits at %s mb %d;", k,
                                    pass_op_name(st[k].v[pc[k]].op), st[k].v[pc[k]].mb);
            goto out;
        }
    }
    for (int l = 0; l < p - 1; l++) {
        if (act[l].head != act[l].tail) {
            snprintf(err, errlen, "stage %d sent activations of mb %d that stage %d never receives", l,
                     act[l].q[act[l].head].mb, l + 1);
            goto out;
        }
        if (grad[l].head != grad[l].tail) {
            snprintf(err, errlen, "stage %d sent gradients of mb %d that stage %d never receives", l + 1,
                     grad[l].q[grad[l].head].mb, l);
            goto out;
        }
    }
    if (res) {
        double it = 0, busy = 0;
        for (int k = 0; k < p; k++) {
            if (clk[k] > it) it = clk[k];
            busy += res->busy_ms[k];
            res->peak_bytes[k] = (cost ? cost[k].static_bytes + (uint64_t)res->peak_inflight[k] * cost[k].act_bytes : 0);
        }
        res->iteration_ms = it;
        res->bubble_fraction = it > 0 ? 1.0 - busy / (p * it) : 0.0;
    }
    rc = 0;
out:
    if (act)
        for (int l = 0; l < nl; l++) { free(act[l].q); free(grad[l].q); }
    free(act); free(grad); free(pc); free(live); free(has_bwd); free(clk);
    return rc;
}

int pass_schedule_check(int p, const pass_stream *streams, char *err, size_t errlen)
{
    return run(p, streams, NULL, NULL, err, errlen);
}

void pass_sim_result_free(pass_sim_result *r)
{
    free(r->peak_inflight);
    free(r->peak_bytes);
    free(r->busy_ms);
    memset(r, 0, sizeof *r);
}

int pass_schedule_simulate(int p, const pass_stream *streams, const pass_sim_stage *cost, pass_sim_result *res)
{
    char err[256];
    memset(res, 0, sizeof *res);
    res->peak_inflight = calloc((size_t)p, sizeof(int));
    res->peak_bytes = calloc((size_t)p, sizeof(uint64_t));
    res->busy_ms = calloc((size_t)p, sizeof(double));
    if (!res->peak_inflight || !res->peak_bytes || !res->busy_ms || run(p, streams, cost, res, err, sizeof err)) {
        pass_sim_result_free(res);
        return -1;
    }
    return 0;
}

int pass_schedule_attach(const pass_plan_opts *o, pass_plan *plan, char *err, size_t errlen)
{
    int p = plan->n_stages;
    int *reps = malloc(sizeof(int) * (size_t)p);
    pass_sim_stage *c = calloc((size_t)p, sizeof *c);
    if (plan->streams) { pass_streams_free(plan->streams, p); free(plan->streams); }
    plan->streams = calloc((size_t)p, sizeof(pass_stream));
    if (!reps || !c || !plan->streams) goto oom;
    for (int k = 0; k < p; k++) reps[k] = plan->stages[k].replicas;
    if (pass_schedule_build(o->schedule, p, o->microbatches, o->training, reps, plan->streams)) goto oom;
    if (pass_schedule_check(p, plan->streams, err, errlen)) {
        free(reps); free(c);
        return -1;
    }
    double single = 0;
    for (int k = 0; k < p; k++) {
        const pass_stage *S = &plan->stages[k];
        int r = S->replicas;
        c[k].fwd_ms = S->fwd_ms;
        c[k].bwd_ms = S->bwd_ms;
        single += (S->fwd_ms + S->bwd_ms) * r;
        c[k].allreduce_ms = S->allreduce_ms;
        int dnext = S->dev_first + r;
        if (k + 1 < p) c[k].act_xfer_ms = pass_link_ms(&o->topo, dnext - 1, dnext, S->out_bytes);
        if (k > 0) c[k].grad_xfer_ms = pass_link_ms(&o->topo, S->dev_first, S->dev_first - 1,
                                                     plan->stages[k - 1].out_grad_bytes);
        double f = o->training ? 2.0 + o->optimizer_state_factor : 1.0;
        c[k].static_bytes = (uint64_t)((double)S->param_bytes * f);
        c[k].act_bytes = (S->act_bytes + (uint64_t)r - 1) / (uint64_t)r;
    }
    pass_sim_result res;
    if (pass_schedule_simulate(p, plan->streams, c, &res)) {
        snprintf(err, errlen, "schedule simulation failed");
        free(reps); free(c);
        return -1;
    }
    plan->predicted_iteration_ms = res.iteration_ms;
    plan->bubble_fraction = res.bubble_fraction;
    plan->single_device_ms = single * o->microbatches;
    plan->predicted_speedup = res.iteration_ms > 0 ? plan->single_device_ms / res.iteration_ms : 1.0;
    for (int k = 0; k < p; k++) plan->stages[k].peak_memory_bytes = res.peak_bytes[k];
    pass_sim_result_free(&res);
    free(reps);
    free(c);
    return 0;
oom:
    free(reps);
    free(c);
    snprintf(err, errlen, "out of memory");
    return -1;
}
