/* partition.c — bottleneck-optimal pipeline split over prefix states (see partition.h). */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "passes/partition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void pass_plan_opts_default(pass_plan_opts *o, int devices)
{
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

int pass_device_host(const pass_topology *t, int dev)
{
    return t->gpus_per_host > 0 ? dev / t->gpus_per_host : 0;
}

static double xfer(double gbps, double lat, uint64_t bytes)
{
    return lat + (gbps > 0 ? (double)bytes / (gbps * 1e6) : 0.0);
}

double pass_link_ms(const pass_topology *t, int a, int b, uint64_t bytes)
{
    if (pass_device_host(t, a) == pass_device_host(t, b))
        return xfer(t->intra_gbps, t->intra_lat_ms, bytes);
    return xfer(t->inter_gbps, t->inter_lat_ms, bytes);
}

static void allreduce_coef(const pass_topology *t, int first, int r, double *per_byte, double *fixed)
{
    *per_byte = *fixed = 0;
    if (r <= 1) return;
    int intra = pass_device_host(t, first) == pass_device_host(t, first + r - 1);
    double bw = intra ? t->intra_gbps : t->inter_gbps;
    double lat = intra ? t->intra_lat_ms : t->inter_lat_ms;
    *per_byte = bw > 0 ? 2.0 * (r - 1) / r / (bw * 1e6) : 0.0;
    *fixed = 2.0 * (r - 1) * lat;
}

double pass_allreduce_ms(const pass_topology *t, int first, int r, uint64_t bytes)
{
    double pb, fx;
    allreduce_coef(t, first, r, &pb, &fx);
    return r <= 1 ? 0.0 : (double)bytes * pb + fx;
}

double pass_stage_time(const pass_plan_opts *o, const pass_stage_agg *s)
{
    double c = (s->fwd_ms + (o->training ? s->bwd_ms : 0.0)) / s->replicas;
    if (o->training && s->replicas > 1)
        c += pass_allreduce_ms(&o->topo, s->dev_first, s->replicas, s->param_bytes) / o->microbatches;
    return c;
}

double pass_boundary_time(const pass_plan_opts *o, int dev_next, uint64_t bytes, uint64_t grad_bytes)
{
    double x = pass_link_ms(&o->topo, dev_next - 1, dev_next, bytes);
    if (o->training) x += pass_link_ms(&o->topo, dev_next, dev_next - 1, grad_bytes);
    return x;
}

uint64_t pass_stage_memory(const pass_plan_opts *o, const pass_stage_agg *s)
{
    double f = o->training ? 2.0 + o->optimizer_state_factor : 1.0;
    uint64_t stat = (uint64_t)((double)s->param_bytes * f);
    uint64_t inflight = 1;
    if (o->training) {
        inflight = (uint64_t)o->microbatches;
        if (o->schedule == PASS_SCHED_1F1B) {
            uint64_t after = (uint64_t)(o->devices - (s->dev_first + s->replicas));
            if (1 + after < inflight) inflight = 1 + after;
        }
    }
    uint64_t r = (uint64_t)s->replicas;
    return stat + inflight * ((s->act_bytes + r - 1) / r);
}

/* ---- the DP ----------------------------------------------------------------------- */

typedef struct dp_ctx {
    const pass_plan_opts *o;
    const pass_states *st;
    int n, g, npairs, max_r;
    double *W;              /* [n+1] prefix of fwd + training*bwd */
    double *inv_r, *arb, *arc;  /* per (m, r) pair */
    double *bnd;            /* [(n+1)*(g+1)] boundary time after state i, next stage at device m */
    int *lo_mem;            /* [npairs*(n+1)] smallest i meeting memory for a stage ending at j; NULL = no limit */
    int *lo;                /* [npairs] two-pointer state */
    unsigned char *F, *G;   /* [(n+1)*(g+1)] */
    int *cnt;               /* [(g+1)*(n+2)] prefix counts of G over i, per m */
    long checks;
} dp_ctx;

static inline int pair_idx(int m, int r) { return m * (m - 1) / 2 + (r - 1); }

static inline double dp_stage_time(const dp_ctx *c, int p, int i, int j)
{
    return (c->W[j] - c->W[i]) * c->inv_r[p] + (double)(c->st->param[j] - c->st->param[i]) * c->arb[p] + c->arc[p];
}

static inline int dp_stage_ok(const dp_ctx *c, int p, int i, int j, double T)
{
    if (c->lo_mem && i < c->lo_mem[(size_t)p * (size_t)(c->n + 1) + (size_t)j]) return 0;
    return dp_stage_time(c, p, i, j) <= T;
}

static int dp_feasible(dp_ctx *c, double T)
{
    int n = c->n, g = c->g, G1 = g + 1;
    size_t N2 = (size_t)n + 2;
    c->checks++;
    memset(c->F, 0, (size_t)(n + 1) * (size_t)G1);
    memset(c->G, 0, (size_t)(n + 1) * (size_t)G1);
    for (int p = 0; p < c->npairs; p++) c->lo[p] = 0;
    c->F[0] = c->G[0] = 1;
    for (int m = 0; m <= g; m++) {
        c->cnt[(size_t)m * N2 + 0] = 0;
        c->cnt[(size_t)m * N2 + 1] = c->G[m];
    }
    for (int j = 1; j <= n; j++) {
        unsigned char *Fj = c->F + (size_t)j * G1, *Gj = c->G + (size_t)j * G1;
        for (int m = 1; m <= g; m++) {
            int rmax = m < c->max_r ? m : c->max_r, f = 0;
            for (int r = 1; r <= rmax && !f; r++) {
                int mp = m - r, p = pair_idx(m, r);
                const int *cm = c->cnt + (size_t)mp * N2;
                if (cm[j] == 0) continue; /* no G[i][mp] for i < j */
                int lo = c->lo[p];
                while (lo < j && !dp_stage_ok(c, p, lo, j, T)) lo++;
                c->lo[p] = lo;
                if (lo < j && cm[j] - cm[lo] > 0) f = 1;
            }
            Fj[m] = (unsigned char)f;
            if (f && j < n && m < g && c->bnd[(size_t)j * G1 + m] <= T) Gj[m] = 1;
        }
        for (int m = 0; m <= g; m++)
            c->cnt[(size_t)m * N2 + j + 1] = c->cnt[(size_t)m * N2 + j] + Gj[m];
    }
    for (int m = 1; m <= g; m++)
        if (c->F[(size_t)n * G1 + m]) return 1;
    return 0;
}

/* One order: find the smallest feasible T (relative 1e-10), reconstruct the
 * split with the fewest devices. cuts[k] = end state of stage k, reps[k] = r_k.
 * Returns the number of stages, 0 if nothing fits in memory, -1 on no memory. */
static int dp_solve(const pass_dag *d, const pass_plan_opts *o, const pass_states *st, double lb,
                    double beat, int *cuts, int *reps, long *checks)
{
    dp_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.st = st;
    c.n = st->n;
    c.g = o->devices;
    c.max_r = o->no_replicate ? 1 : c.g;
    c.npairs = c.g * (c.g + 1) / 2;
    int n = c.n, g = c.g, G1 = g + 1, rc = -1;
    (void)d;
    c.W = malloc(sizeof(double) * (size_t)(n + 1));
    c.inv_r = malloc(sizeof(double) * (size_t)c.npairs);
    c.arb = malloc(sizeof(double) * (size_t)c.npairs);
    c.arc = malloc(sizeof(double) * (size_t)c.npairs);
    c.bnd = malloc(sizeof(double) * (size_t)(n + 1) * (size_t)G1);
    c.lo = malloc(sizeof(int) * (size_t)c.npairs);
    c.F = malloc((size_t)(n + 1) * (size_t)G1);
    c.G = malloc((size_t)(n + 1) * (size_t)G1);
    c.cnt = malloc(sizeof(int) * (size_t)G1 * (size_t)(n + 2));
    if (o->mem_limit) c.lo_mem = malloc(sizeof(int) * (size_t)c.npairs * (size_t)(n + 1));
    if (!c.W || !c.inv_r || !c.arb || !c.arc || !c.bnd || !c.lo || !c.F || !c.G || !c.cnt ||
        (o->mem_limit && !c.lo_mem))
        goto out;
    for (int s = 0; s <= n; s++) c.W[s] = st->fwd[s] + (o->training ? st->bwd[s] : 0.0);
    for (int m = 1; m <= g; m++)
        for (int r = 1; r <= m; r++) {
            int p = pair_idx(m, r);
            c.inv_r[p] = 1.0 / r;
            c.arb[p] = c.arc[p] = 0;
            if (o->training && r > 1) {
                allreduce_coef(&o->topo, m - r, r, &c.arb[p], &c.arc[p]);
                c.arb[p] /= o->microbatches;
                c.arc[p] /= o->microbatches;
            }
            if (c.lo_mem) {
                int *lm = c.lo_mem + (size_t)p * (size_t)(n + 1), i = 0;
                pass_stage_agg a = {0, 0, 0, 0, m - r, r};
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
            c.bnd[(size_t)s * G1 + m] = (m >= 1 && m < g) ? pass_boundary_time(o, m, st->cut[s], st->cut_grad[s]) : INFINITY;

    /* beat: bottleneck of the best order so far; this order is only solved
     * if it can do clearly better. */
    if (!dp_feasible(&c, isfinite(beat) ? beat * (1 - 1e-9) : INFINITY)) { rc = 0; goto out; }
    double hi, lo;
    if (dp_feasible(&c, 0.0)) {
        hi = lo = 0.0;
    } else {
        lo = lb > 0 ? lb * (1 - 1e-12) : 0.0;
        hi = lb > 0 ? lb * (1 + 1e-10) : 1e-6;
        if (isfinite(beat) && hi > beat) hi = beat * (1 - 1e-9);
        while (!dp_feasible(&c, hi)) {
            lo = hi;
            hi *= 2;
            if (isinf(hi)) break;
        }
        while (hi - lo > 1e-10 * hi) {
            double mid = 0.5 * (lo + hi);
            if (mid <= lo || mid >= hi) break;
            if (dp_feasible(&c, mid)) hi = mid;
            else lo = mid;
        }
    }
    dp_feasible(&c, hi);
    int mbest = 0;
    for (int m = 1; m <= g && !mbest; m++)
        if (c.F[(size_t)n * G1 + m]) mbest = m;
    /* Backtrack: smallest r, then the largest i (shortest last stage). */
    int k = 0, j = n, m = mbest;
    while (j > 0) {
        int found = 0;
        int rmax = m < c.max_r ? m : c.max_r;
        for (int r = 1; r <= rmax && !found; r++) {
            int p = pair_idx(m, r), mp = m - r;
            for (int i = j - 1; i >= 0 && dp_stage_ok(&c, p, i, j, hi); i--)
                if (c.G[(size_t)i * G1 + mp]) {
                    cuts[k] = j;
                    reps[k] = r;
                    k++;
                    j = i;
                    m = mp;
                    found = 1;
                    break;
                }
        }
        if (!found) { rc = -1; goto out; } /* cannot happen: F said feasible */
    }
    /* reverse into pipeline order */
    for (int a = 0, b = k - 1; a < b; a++, b--) {
        int x = cuts[a]; cuts[a] = cuts[b]; cuts[b] = x;
        x = reps[a]; reps[a] = reps[b]; reps[b] = x;
    }
    rc = k;
out:
    *checks += c.checks;
    free(c.W); free(c.inv_r); free(c.arb); free(c.arc); free(c.bnd); free(c.lo);
    free(c.F); free(c.G); free(c.cnt); free(c.lo_mem);
    return rc;
}

/* Evaluate a split (cuts/reps over st) under the public cost model. */
static double eval_split(const pass_plan_opts *o, const pass_states *st, int k, const int *cuts, const int *reps)
{
    double b = 0;
    int prev = 0, dev = 0;
    for (int s = 0; s < k; s++) {
        pass_stage_agg a = {st->fwd[cuts[s]] - st->fwd[prev], st->bwd[cuts[s]] - st->bwd[prev],
                            st->param[cuts[s]] - st->param[prev], st->act[cuts[s]] - st->act[prev],
                            dev, reps[s]};
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

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void pass_plan_free(pass_plan *p)
{
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

static int build_plan(const pass_dag *d, const pass_plan_opts *o, const pass_states *st, int k,
                      const int *cuts, const int *reps, pass_plan *p)
{
    int n = st->n;
    p->order_kind = st->kind;
    p->order = malloc(sizeof(int) * (size_t)n);
    p->stages = calloc((size_t)k, sizeof(pass_stage));
    int *stage_of = malloc(sizeof(int) * (size_t)n); /* by position */
    if (!p->order || !p->stages || !stage_of) { free(stage_of); return -1; }
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
        if (!S->nodes) { free(stage_of); return -1; }
        for (int q = S->first; q < S->last; q++) {
            S->nodes[q - S->first] = st->order[q];
            stage_of[q] = s;
        }
        S->dev_first = dev;
        S->replicas = reps[s];
        pass_stage_agg a = {st->fwd[S->last] - st->fwd[prev], st->bwd[S->last] - st->bwd[prev],
                            st->param[S->last] - st->param[prev], st->act[S->last] - st->act[prev],
                            dev, reps[s]};
        S->fwd_ms = a.fwd_ms / a.replicas;
        S->bwd_ms = o->training ? a.bwd_ms / a.replicas : 0.0;
        S->allreduce_ms = o->training ? pass_allreduce_ms(&o->topo, dev, a.replicas, a.param_bytes) : 0.0;
        S->compute_ms = pass_stage_time(o, &a);
        S->param_bytes = a.param_bytes;
        S->act_bytes = a.act_bytes;
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
                if (!nt) { free(stage_of); return -1; }
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

int pass_partition(const pass_dag *d, const pass_plan_opts *o_in, pass_plan *plan, char *err, size_t errlen)
{
    double t0 = now_ms();
    memset(plan, 0, sizeof *plan);
    pass_plan_opts o = *o_in;
    if (!d->finalized || d->n_nodes < 1) {
        snprintf(err, errlen, "planner: empty or unfinalized DAG");
        return -1;
    }
    if (o.devices < 1 || o.microbatches < 1) {
        snprintf(err, errlen, "planner: need devices >= 1 and microbatches >= 1 (got %d, %d)",
                 o.devices, o.microbatches);
        return -1;
    }
    if (o.topo.hosts <= 0 || o.topo.gpus_per_host <= 0) {
        o.topo.hosts = 1;
        o.topo.gpus_per_host = o.devices;
    }
    if (o.devices > o.topo.hosts * o.topo.gpus_per_host) {
        snprintf(err, errlen, "planner: %d devices requested but the topology has %d x %d",
                 o.devices, o.topo.hosts, o.topo.gpus_per_host);
        return -1;
    }
    unsigned orders = o.orders ? o.orders : (1u << PASS_ORDER_COUNT) - 1;
    double W = 0, big = 0;
    for (int v = 0; v < d->n_nodes; v++) {
        double w = d->nodes[v].fwd_ms + (o.training ? d->nodes[v].bwd_ms : 0.0);
        W += w;
        if (w > big) big = w;
    }
    double lb = W / o.devices;
    if (o.no_replicate && big > lb) lb = big;

    int g = o.devices;
    int *cuts = malloc(sizeof(int) * (size_t)(g + 1) * 2), *reps = malloc(sizeof(int) * (size_t)(g + 1) * 2);
    if (!cuts || !reps) { free(cuts); free(reps); snprintf(err, errlen, "planner: out of memory"); return -1; }
    int *bcuts = cuts + g + 1, *breps = reps + g + 1;
    int bk = 0, fit_any = 0;
    double bval = INFINITY;
    pass_states best_st;
    memset(&best_st, 0, sizeof best_st);
    long checks = 0;
    for (int kind = 0; kind < PASS_ORDER_COUNT; kind++) {
        if (!(orders & (1u << kind))) continue;
        pass_states st;
        if (pass_states_build(d, (pass_order_kind)kind, &st) != 0) {
            free(cuts); free(reps); pass_states_free(&best_st);
            snprintf(err, errlen, "planner: DAG has a cycle or out of memory");
            return -1;
        }
        int k = dp_solve(d, &o, &st, lb, bval, cuts, reps, &checks);
        if (k < 0) {
            pass_states_free(&st); pass_states_free(&best_st); free(cuts); free(reps);
            snprintf(err, errlen, "planner: out of memory");
            return -1;
        }
        if (k > 0) {
            fit_any = 1;
            double v = eval_split(&o, &st, k, cuts, reps);
            {   /* dp_solve only returns a split clearly better than bval */
                bval = v;
                bk = k;
                memcpy(bcuts, cuts, sizeof(int) * (size_t)k);
                memcpy(breps, reps, sizeof(int) * (size_t)k);
                pass_states_free(&best_st);
                best_st = st;
                continue;
            }
        }
        pass_states_free(&st);
    }
    if (!fit_any) {
        free(cuts); free(reps); pass_states_free(&best_st);
        snprintf(err, errlen, "planner: the model does not fit in %llu bytes per device on %d devices",
                 (unsigned long long)o.mem_limit, o.devices);
        return -1;
    }
    plan->n_nodes = d->n_nodes;
    plan->devices = o.devices;
    plan->microbatches = o.microbatches;
    plan->training = o.training;
    plan->schedule = o.schedule;
    plan->feasibility_checks = checks;
    int rc = build_plan(d, &o, &best_st, bk, bcuts, breps, plan);
    pass_states_free(&best_st);
    free(cuts);
    free(reps);
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
