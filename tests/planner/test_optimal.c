/* Random-DAG optimality: the DP's bottleneck equals a brute-force enumeration
 * of the same split space (contiguous ranges of each tried topological order,
 * every replica assignment, devices placed contiguously), under the same cost
 * model. Also measures (prints, does not assert) the gap to the optimum over
 * ALL convex linear splits (chains of arbitrary down-sets), computed by an
 * exhaustive DP over every pair of nested down-sets. */
#include <math.h>

#include "tests/planner/planner_test.h"

/* Direct (non-prefix-sum) aggregate of a node set. */
static void agg_of(const pass_dag *d, const unsigned char *set, pass_stage_agg *a)
{
    a->fwd_ms = a->bwd_ms = 0;
    a->param_bytes = a->act_bytes = 0;
    for (int v = 0; v < d->n_nodes; v++)
        if (set[v]) {
            a->fwd_ms += d->nodes[v].fwd_ms;
            a->bwd_ms += d->nodes[v].bwd_ms;
            a->param_bytes += d->nodes[v].param_bytes;
            a->act_bytes += d->nodes[v].act_bytes;
        }
}

/* Brute force over one order: all cut sets x all replica vectors. */
static double best_r;
static void try_reps(const pass_dag *d, const pass_plan_opts *o, int p, unsigned char **sets,
                     unsigned char **prefix, int *reps, int k, int used)
{
    if (k == p) {
        double b = 0;
        int dev = 0;
        for (int s = 0; s < p; s++) {
            pass_stage_agg a;
            agg_of(d, sets[s], &a);
            a.dev_first = dev;
            a.replicas = reps[s];
            if (o->mem_limit && pass_stage_memory(o, &a) > o->mem_limit) return;
            double t = pass_stage_time(o, &a);
            if (t > b) b = t;
            dev += reps[s];
            if (s + 1 < p) {
                uint64_t gb, cb = pass_cut_bytes(d, prefix[s], &gb);
                t = pass_boundary_time(o, dev, cb, gb);
                if (t > b) b = t;
            }
        }
        if (b < best_r) best_r = b;
        return;
    }
    int rmax = o->no_replicate ? 1 : o->devices - used - (p - k - 1);
    for (int r = 1; r <= rmax; r++) {
        reps[k] = r;
        try_reps(d, o, p, sets, prefix, reps, k + 1, used + r);
    }
}

static double brute_force_order(const pass_dag *d, const pass_plan_opts *o, pass_order_kind kind)
{
    int n = d->n_nodes, order[64];
    if (pass_topo_order(d, kind, order)) abort();
    unsigned char *sets[8], *prefix[8];
    for (int s = 0; s < 8; s++) { sets[s] = calloc((size_t)n, 1); prefix[s] = calloc((size_t)n, 1); }
    best_r = INFINITY;
    for (uint32_t mask = 0; mask < (1u << (n - 1)); mask++) {
        int p = __builtin_popcount(mask) + 1;
        if (p > o->devices || p > 8) continue;
        int s = 0;
        for (int q = 0; q < n; q++) {
            for (int t = 0; t < 8; t++) { if (t == s) sets[t][order[q]] = 1; else sets[t][order[q]] = 0; }
            for (int t = 0; t < 8; t++) prefix[t][order[q]] = t >= s;
            if (q + 1 < n && (mask >> q) & 1) s++;
        }
        int reps[8];
        try_reps(d, o, p, sets, prefix, reps, 0, 0);
    }
    for (int s = 0; s < 8; s++) { free(sets[s]); free(prefix[s]); }
    return best_r;
}

/* Exact optimum over all chains of down-sets (all convex linear splits). */
static double all_convex_optimum(const pass_dag *d, const pass_plan_opts *o)
{
    int n = d->n_nodes, g = o->devices;
    long cap = 1 << 16;
    uint64_t *ds = malloc(sizeof(uint64_t) * (size_t)cap);
    long S = pass_downsets_enumerate(d, ds, cap);
    if (S < 0) abort();
    double *fw = malloc(sizeof(double) * (size_t)S), *bw = malloc(sizeof(double) * (size_t)S);
    uint64_t *P = malloc(sizeof(uint64_t) * (size_t)S), *A = malloc(sizeof(uint64_t) * (size_t)S);
    uint64_t *cut = malloc(sizeof(uint64_t) * (size_t)S), *cutg = malloc(sizeof(uint64_t) * (size_t)S);
    double *best = malloc(sizeof(double) * (size_t)S * (size_t)(g + 1));
    unsigned char set[64];
    for (long i = 0; i < S; i++) {
        for (int v = 0; v < n; v++) set[v] = (ds[i] >> v) & 1;
        pass_stage_agg a;
        agg_of(d, set, &a);
        fw[i] = a.fwd_ms; bw[i] = a.bwd_ms; P[i] = a.param_bytes; A[i] = a.act_bytes;
        cut[i] = pass_cut_bytes(d, set, &cutg[i]);
        for (int m = 0; m <= g; m++) best[i * (g + 1) + m] = INFINITY;
    }
    best[0] = 0; /* {} with 0 devices */
    for (long j = 1; j < S; j++)
        for (long i = 0; i < j; i++) {
            if (ds[i] & ~ds[j]) continue;
            if (ds[i] == ds[j]) continue;
            for (int m = 1; m <= g; m++) {
                int rmax = o->no_replicate ? 1 : m;
                for (int r = 1; r <= rmax; r++) {
                    double prev = best[i * (g + 1) + (m - r)];
                    if (!isfinite(prev)) continue;
                    pass_stage_agg a = {fw[j] - fw[i], bw[j] - bw[i], P[j] - P[i], A[j] - A[i], m - r, r};
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
    free(ds); free(fw); free(bw); free(P); free(A); free(cut); free(cutg); free(best);
    return r;
}

static const char *shape_names[] = {"chain", "diamond", "branches", "skip", "sinks", "random"};

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 3000;
    int n_exact = 0, n_gap = 0, n_cmp = 0, n_infeasible = 0;
    double sum_gap = 0, max_gap = 0, sum_lbgap = 0;
    int per_shape_gap[SHAPE_COUNT] = {0}, per_shape_cnt[SHAPE_COUNT] = {0};
    for (int it = 0; it < iters; it++) {
        int shape = it % SHAPE_COUNT;
        int n = rng_int(2, 10);
        pass_dag d;
        random_dag(&d, n, shape);
        pass_plan_opts o;
        pass_plan_opts_default(&o, rng_int(1, 4));
        o.microbatches = rng_int(1, 8);
        o.training = rng_int(0, 1);
        o.no_replicate = rng_int(0, 2) == 0;
        o.schedule = rng_int(0, 1) ? PASS_SCHED_1F1B : PASS_SCHED_GPIPE;
        if (rng_int(0, 1)) {
            o.topo.gpus_per_host = rng_int(1, 4);
            o.topo.hosts = (o.devices + o.topo.gpus_per_host - 1) / o.topo.gpus_per_host;
        }
        /* make communication matter: slow links sometimes */
        if (rng_int(0, 1)) { o.topo.intra_gbps = rng_real(0.5, 5); o.topo.inter_gbps = rng_real(0.1, 1); }
        o.orders = (unsigned)rng_int(0, 7);
        if (rng_int(0, 2) == 0) {
            uint64_t tot = 0;
            for (int v = 0; v < n; v++) tot += d.nodes[v].param_bytes * 4 + d.nodes[v].act_bytes * 8;
            o.mem_limit = tot / (uint64_t)rng_int(1, 6) + 1;
        }
        pass_plan plan;
        char err[256];
        int rc = pass_partition(&d, &o, &plan, err, sizeof err);
        double bf = INFINITY;
        unsigned orders = o.orders ? o.orders : 7;
        for (int k = 0; k < PASS_ORDER_COUNT; k++)
            if (orders & (1u << k)) {
                double v = brute_force_order(&d, &o, (pass_order_kind)k);
                if (v < bf) bf = v;
            }
        if (!isfinite(bf)) {
            CHECK(rc != 0, "iter %d: brute force finds nothing fits but the DP planned", it);
            n_infeasible++;
            if (rc == 0) pass_plan_free(&plan);
            pass_dag_free(&d);
            continue;
        }
        CHECK(rc == 0, "iter %d: DP failed (%s) but brute force found %g", it, err, bf);
        if (rc != 0) { pass_dag_free(&d); continue; }
        check_plan_invariants(&d, &o, &plan);
        CHECK(fabs(plan.bottleneck_ms - bf) <= 1e-7 * fmax(1.0, bf),
              "iter %d (%s, n=%d, g=%d, train=%d, norep=%d, mem=%llu, orders=%u): DP %.12g != brute force %.12g",
              it, shape_names[shape], n, o.devices, o.training, o.no_replicate,
              (unsigned long long)o.mem_limit, o.orders, plan.bottleneck_ms, bf);
        CHECK(plan.bottleneck_ms >= plan.lower_bound_ms * (1 - 1e-9), "bottleneck below lower bound");
        sum_lbgap += plan.gap;
        /* the gap is measured for the default planner (all orders) */
        double dp_all = plan.bottleneck_ms;
        if (o.orders) {
            pass_plan p2;
            pass_plan_opts o2 = o;
            o2.orders = 0;
            CHECK(pass_partition(&d, &o2, &p2, err, sizeof err) == 0, "%s", err);
            dp_all = p2.bottleneck_ms;
            pass_plan_free(&p2);
        }
        double all = all_convex_optimum(&d, &o);
        CHECK(all <= dp_all * (1 + 1e-9), "iter %d: all-convex optimum %g above DP %g", it, all, dp_all);
        double gap = all > 0 ? dp_all / all - 1 : 0;
        n_cmp++;
        per_shape_cnt[shape]++;
        if (gap <= 1e-9) n_exact++;
        else { n_gap++; per_shape_gap[shape]++; }
        sum_gap += gap;
        if (gap > max_gap) max_gap = gap;
        pass_plan_free(&plan);
        pass_dag_free(&d);
    }
    printf("planner optimality: %d random DAGs, %d compared with brute force (all equal unless reported), "
           "%d infeasible in memory on both sides\n", iters, n_cmp, n_infeasible);
    printf("mean gap to lower bound (total work/g, largest node): %.1f%%\n", 100 * sum_lbgap / (n_cmp ? n_cmp : 1));
    printf("vs optimum over ALL convex linear splits: %d/%d identical, %d worse; mean gap %.3f%%, max gap %.2f%%\n",
           n_exact, n_cmp, n_gap, 100 * sum_gap / (n_cmp ? n_cmp : 1), 100 * max_gap);
    for (int s = 0; s < SHAPE_COUNT; s++)
        printf("  %-8s: %d/%d with a gap\n", shape_names[s], per_shape_gap[s], per_shape_cnt[s]);
    printf("%s\n", g_failures ? "FAIL" : "PASS");
    return g_failures ? 1 : 0;
}
