/* antichain.c — pass_dag builder, topological orders, prefix states and cut sizes. */
#include "passes/antichain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s ? s : "");
    char *p = malloc(n + 1);
    if (p) memcpy(p, s ? s : "", n + 1);
    return p;
}

void pass_dag_init(pass_dag *d)
{
    memset(d, 0, sizeof *d);
}

int pass_dag_add_tensor(pass_dag *d, const char *name, uint64_t bytes)
{
    if (d->n_tensors == d->cap_tensors) {
        int cap = d->cap_tensors ? 2 * d->cap_tensors : 64;
        pass_dag_tensor *t = realloc(d->tensors, (size_t)cap * sizeof *t);
        if (!t) return -1;
        d->tensors = t;
        d->cap_tensors = cap;
    }
    pass_dag_tensor *t = &d->tensors[d->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = dup_str(name);
    t->bytes = bytes;
    t->producer = -1;
    d->finalized = 0;
    return d->n_tensors++;
}

void pass_dag_mark_output(pass_dag *d, int t)
{
    if (t >= 0 && t < d->n_tensors) d->tensors[t].is_output = 1;
}

int pass_dag_add_node(pass_dag *d, const char *name, double fwd_ms, double bwd_ms,
                      uint64_t param_bytes, uint64_t act_bytes,
                      int n_in, const int *in, int n_out, const int *out)
{
    for (int i = 0; i < n_in; i++)
        if (in[i] < 0 || in[i] >= d->n_tensors) return -1;
    for (int i = 0; i < n_out; i++)
        if (out[i] < 0 || out[i] >= d->n_tensors || d->tensors[out[i]].producer >= 0) return -1;
    if (d->n_nodes == d->cap_nodes) {
        int cap = d->cap_nodes ? 2 * d->cap_nodes : 64;
        pass_dag_node *nn = realloc(d->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return -1;
        d->nodes = nn;
        d->cap_nodes = cap;
    }
    int id = d->n_nodes;
    pass_dag_node *n = &d->nodes[id];
    memset(n, 0, sizeof *n);
    n->name = dup_str(name);
    n->fwd_ms = fwd_ms;
    n->bwd_ms = bwd_ms;
    n->param_bytes = param_bytes;
    n->act_bytes = act_bytes;
    n->n_inputs = n_in;
    n->n_outputs = n_out;
    n->inputs = malloc(sizeof(int) * (size_t)(n_in ? n_in : 1));
    n->outputs = malloc(sizeof(int) * (size_t)(n_out ? n_out : 1));
    if (!n->inputs || !n->outputs) return -1;
    if (n_in) memcpy(n->inputs, in, sizeof(int) * (size_t)n_in);
    if (n_out) memcpy(n->outputs, out, sizeof(int) * (size_t)n_out);
    for (int i = 0; i < n_out; i++) d->tensors[out[i]].producer = id;
    d->n_nodes++;
    d->finalized = 0;
    return id;
}

int pass_dag_finalize(pass_dag *d, char *err, size_t errlen)
{
    for (int t = 0; t < d->n_tensors; t++) {
        free(d->tensors[t].consumers);
        d->tensors[t].consumers = NULL;
        d->tensors[t].n_consumers = 0;
    }
    int *cnt = calloc((size_t)d->n_tensors + 1, sizeof(int));
    if (!cnt) return -1;
    /* Nodes are visited in id order, so consumer lists come out ascending; a
     * node listing a tensor twice is recorded once. */
    for (int v = 0; v < d->n_nodes; v++)
        for (int i = 0; i < d->nodes[v].n_inputs; i++) cnt[d->nodes[v].inputs[i]]++;
    for (int t = 0; t < d->n_tensors; t++) {
        d->tensors[t].consumers = malloc(sizeof(int) * (size_t)(cnt[t] ? cnt[t] : 1));
        if (!d->tensors[t].consumers) { free(cnt); return -1; }
    }
    for (int v = 0; v < d->n_nodes; v++)
        for (int i = 0; i < d->nodes[v].n_inputs; i++) {
            pass_dag_tensor *t = &d->tensors[d->nodes[v].inputs[i]];
            if (t->n_consumers && t->consumers[t->n_consumers - 1] == v) continue;
            t->consumers[t->n_consumers++] = v;
        }
    free(cnt);
    d->finalized = 1;
    int *order = malloc(sizeof(int) * (size_t)(d->n_nodes ? d->n_nodes : 1));
    if (!order) return -1;
    int rc = pass_topo_order(d, PASS_ORDER_INDEX, order);
    free(order);
    if (rc != 0) {
        if (err && errlen) snprintf(err, errlen, "planner DAG has a cycle");
        d->finalized = 0;
        return -1;
    }
    return 0;
}

void pass_dag_free(pass_dag *d)
{
    for (int v = 0; v < d->n_nodes; v++) {
        free(d->nodes[v].name);
        free(d->nodes[v].inputs);
        free(d->nodes[v].outputs);
    }
    for (int t = 0; t < d->n_tensors; t++) {
        free(d->tensors[t].name);
        free(d->tensors[t].consumers);
    }
    free(d->nodes);
    free(d->tensors);
    memset(d, 0, sizeof *d);
}

/* ---- topological orders ---------------------------------------------------- */

/* Binary min-heap of node ids (PASS_ORDER_INDEX). */
static void heap_push(int *h, int *n, int v)
{
    int i = (*n)++;
    h[i] = v;
    while (i > 0 && h[(i - 1) / 2] > h[i]) {
        int p = (i - 1) / 2, x = h[p];
        h[p] = h[i];
        h[i] = x;
        i = p;
    }
}

static int heap_pop(int *h, int *n)
{
    int top = h[0];
    h[0] = h[--(*n)];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && h[l] < h[m]) m = l;
        if (r < *n && h[r] < h[m]) m = r;
        if (m == i) break;
        int x = h[m];
        h[m] = h[i];
        h[i] = x;
        i = m;
    }
    return top;
}

static int topo_kahn(const pass_dag *d, pass_order_kind kind, int *order);

int pass_topo_order(const pass_dag *d, pass_order_kind kind, int *order)
{
    if (kind != PASS_ORDER_LEVEL) return topo_kahn(d, kind, order);
    int n = d->n_nodes, rc = -1;
    int *tmp = malloc(sizeof(int) * ((size_t)n + 1)), *depth = malloc(sizeof(int) * ((size_t)n + 1));
    int *cnt = calloc((size_t)n + 2, sizeof(int));
    if (tmp && depth && cnt && topo_kahn(d, PASS_ORDER_INDEX, tmp) == 0) {
        for (int q = 0; q < n; q++) {
            int v = tmp[q], dv = 0;
            for (int i = 0; i < d->nodes[v].n_inputs; i++) {
                int p = d->tensors[d->nodes[v].inputs[i]].producer;
                if (p >= 0 && depth[p] + 1 > dv) dv = depth[p] + 1;
            }
            depth[v] = dv;
            cnt[dv + 1]++;
        }
        for (int k = 1; k <= n + 1; k++) cnt[k] += cnt[k - 1];
        for (int v = 0; v < n; v++) order[cnt[depth[v]]++] = v; /* stable: by depth, then id */
        rc = 0;
    }
    free(tmp);
    free(depth);
    free(cnt);
    return rc;
}

static int topo_kahn(const pass_dag *d, pass_order_kind kind, int *order)
{
    int n = d->n_nodes;
    int *indeg = calloc((size_t)n + 1, sizeof(int));
    int *ready = malloc(sizeof(int) * ((size_t)n + 1));
    if (!indeg || !ready) { free(indeg); free(ready); return -1; }
    /* in-degree counts distinct producer nodes per input tensor occurrence;
     * duplicates are harmless as long as decrements mirror increments. */
    for (int v = 0; v < n; v++)
        for (int i = 0; i < d->nodes[v].n_inputs; i++)
            if (d->tensors[d->nodes[v].inputs[i]].producer >= 0) indeg[v]++;
    int nr = 0, k = 0;
    for (int v = 0; v < n; v++)
        if (!indeg[v]) {
            if (kind == PASS_ORDER_INDEX) heap_push(ready, &nr, v);
            else ready[nr++] = v;
        }
    if (kind == PASS_ORDER_DFS) /* stack: pop smallest id first */
        for (int i = 0; i < nr / 2; i++) {
            int x = ready[i];
            ready[i] = ready[nr - 1 - i];
            ready[nr - 1 - i] = x;
        }
    while (nr > 0) {
        int v = kind == PASS_ORDER_INDEX ? heap_pop(ready, &nr) : ready[--nr];
        order[k++] = v;
        /* Successors in descending id order so that, on the stack, the smallest
         * id is on top. Collect them first. */
        int base = nr;
        for (int o = 0; o < d->nodes[v].n_outputs; o++) {
            const pass_dag_tensor *t = &d->tensors[d->nodes[v].outputs[o]];
            for (int c = 0; c < t->n_consumers; c++) {
                int u = t->consumers[c];
                const pass_dag_node *un = &d->nodes[u];
                for (int i = 0; i < un->n_inputs; i++)
                    if (un->inputs[i] == d->nodes[v].outputs[o] && --indeg[u] == 0) {
                        if (kind == PASS_ORDER_INDEX) heap_push(ready, &nr, u);
                        else ready[nr++] = u;
                    }
            }
        }
        if (kind == PASS_ORDER_DFS && nr - base > 1) {
            /* sort the newly readied ids descending (few of them: insertion sort) */
            for (int i = base + 1; i < nr; i++) {
                int x = ready[i], j = i;
                while (j > base && ready[j - 1] < x) { ready[j] = ready[j - 1]; j--; }
                ready[j] = x;
            }
        }
    }
    free(indeg);
    free(ready);
    return k == n ? 0 : -1;
}

/* ---- prefix states ---------------------------------------------------------- */

void pass_states_free(pass_states *st)
{
    free(st->order);
    free(st->pos);
    free(st->fwd);
    free(st->bwd);
    free(st->param);
    free(st->act);
    free(st->cut);
    free(st->cut_grad);
    memset(st, 0, sizeof *st);
}

int pass_states_build(const pass_dag *d, pass_order_kind kind, pass_states *st)
{
    int n = d->n_nodes;
    memset(st, 0, sizeof *st);
    st->n = n;
    st->kind = kind;
    size_t s1 = (size_t)n + 1;
    st->order = malloc(sizeof(int) * s1);
    st->pos = malloc(sizeof(int) * s1);
    st->fwd = malloc(sizeof(double) * s1);
    st->bwd = malloc(sizeof(double) * s1);
    st->param = malloc(sizeof(uint64_t) * s1);
    st->act = malloc(sizeof(uint64_t) * s1);
    st->cut = calloc(s1 + 1, sizeof(uint64_t));
    st->cut_grad = calloc(s1 + 1, sizeof(uint64_t));
    if (!st->order || !st->pos || !st->fwd || !st->bwd || !st->param || !st->act || !st->cut ||
        !st->cut_grad || pass_topo_order(d, kind, st->order) != 0) {
        pass_states_free(st);
        return -1;
    }
    st->fwd[0] = st->bwd[0] = 0;
    st->param[0] = st->act[0] = 0;
    for (int p = 0; p < n; p++) {
        const pass_dag_node *v = &d->nodes[st->order[p]];
        st->pos[st->order[p]] = p;
        st->fwd[p + 1] = st->fwd[p] + v->fwd_ms;
        st->bwd[p + 1] = st->bwd[p] + v->bwd_ms;
        st->param[p + 1] = st->param[p] + v->param_bytes;
        st->act[p + 1] = st->act[p] + v->act_bytes;
    }
    /* Tensor t lives on cuts s in [birth, death): birth = first state holding
     * its producer, death = first state holding all consumers (n+1 for a graph
     * output: it crosses every cut up to the end). Difference array, signed
     * arithmetic done modulo 2^64 which is exact for the final sums. */
    for (int t = 0; t < d->n_tensors; t++) {
        const pass_dag_tensor *x = &d->tensors[t];
        int birth = x->producer < 0 ? 0 : st->pos[x->producer] + 1;
        int death = birth;
        for (int c = 0; c < x->n_consumers; c++) {
            int e = st->pos[x->consumers[c]] + 1;
            if (e > death) death = e;
        }
        if (x->is_output) death = n + 1;
        if (death <= birth) continue;
        st->cut[birth] += x->bytes;
        st->cut[death] -= x->bytes;
        if (x->producer >= 0) {
            st->cut_grad[birth] += x->bytes;
            st->cut_grad[death] -= x->bytes;
        }
    }
    for (int s = 1; s <= n; s++) {
        st->cut[s] += st->cut[s - 1];
        st->cut_grad[s] += st->cut_grad[s - 1];
    }
    return 0;
}

/* ---- arbitrary down-sets ---------------------------------------------------- */

int pass_is_downset(const pass_dag *d, const unsigned char *in_set)
{
    for (int v = 0; v < d->n_nodes; v++) {
        if (!in_set[v]) continue;
        for (int i = 0; i < d->nodes[v].n_inputs; i++) {
            int p = d->tensors[d->nodes[v].inputs[i]].producer;
            if (p >= 0 && !in_set[p]) return 0;
        }
    }
    return 1;
}

int pass_tensor_crosses(const pass_dag *d, int t, const unsigned char *in_set)
{
    const pass_dag_tensor *x = &d->tensors[t];
    if (x->producer >= 0 && !in_set[x->producer]) return 0;
    if (x->is_output) return 1;
    for (int c = 0; c < x->n_consumers; c++)
        if (!in_set[x->consumers[c]]) return 1;
    return 0;
}

uint64_t pass_cut_bytes(const pass_dag *d, const unsigned char *in_set, uint64_t *grad_bytes)
{
    uint64_t b = 0, g = 0;
    for (int t = 0; t < d->n_tensors; t++)
        if (pass_tensor_crosses(d, t, in_set)) {
            b += d->tensors[t].bytes;
            if (d->tensors[t].producer >= 0) g += d->tensors[t].bytes;
        }
    if (grad_bytes) *grad_bytes = g;
    return b;
}

int pass_augmented_antichain(const pass_dag *d, const unsigned char *in_set, int *out)
{
    int k = 0;
    for (int v = 0; v < d->n_nodes; v++) {
        if (!in_set[v]) continue;
        int hit = 0;
        for (int o = 0; o < d->nodes[v].n_outputs && !hit; o++)
            if (pass_tensor_crosses(d, d->nodes[v].outputs[o], in_set)) hit = 1;
        if (hit) out[k++] = v;
    }
    return k;
}

static int popcount64(uint64_t x)
{
    int c = 0;
    while (x) { x &= x - 1; c++; }
    return c;
}

static int cmp_downset(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    int px = popcount64(x), py = popcount64(y);
    if (px != py) return px < py ? -1 : 1;
    return x < y ? -1 : x > y;
}

long pass_downsets_enumerate(const pass_dag *d, uint64_t *out, long max)
{
    int n = d->n_nodes;
    if (n > 64) return -1;
    uint64_t pred[64];
    for (int v = 0; v < n; v++) {
        pred[v] = 0;
        for (int i = 0; i < d->nodes[v].n_inputs; i++) {
            int p = d->tensors[d->nodes[v].inputs[i]].producer;
            if (p >= 0) pred[v] |= 1ull << p;
        }
    }
    /* Breadth-first from {}: add one node whose predecessors are all in. Each
     * down-set is reached; duplicates are removed by sorting per level. */
    long cnt = 0;
    if (max < 1) return -1;
    out[cnt++] = 0;
    long lvl_begin = 0, lvl_end = 1;
    while (lvl_begin < lvl_end) {
        long start = cnt;
        for (long i = lvl_begin; i < lvl_end; i++) {
            uint64_t D = out[i];
            for (int v = 0; v < n; v++) {
                uint64_t bit = 1ull << v;
                if ((D & bit) || (pred[v] & ~D)) continue;
                if (cnt >= max) return -1;
                out[cnt++] = D | bit;
            }
        }
        qsort(out + start, (size_t)(cnt - start), sizeof(uint64_t), cmp_downset);
        long w = start;
        for (long i = start; i < cnt; i++)
            if (w == start || out[w - 1] != out[i]) out[w++] = out[i];
        cnt = w;
        lvl_begin = start;
        lvl_end = cnt;
    }
    return cnt;
}
