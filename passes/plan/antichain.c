/* antichain.c — pass_dag builder, topological orders, prefix states and cut sizes. */
#include "passes/plan/antichain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s) {
  size_t n = strlen(s ? s : "");
  char *p = malloc(n + 1);
  if (p) memcpy(p, s ? s : "", n + 1);
  return p;
}

void pass_dag_init(pass_dag *d) { memset(d, 0, sizeof *d); }

int pass_dag_add_tensor(pass_dag *d, const char *name, uint64_t bytes) {
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

void pass_dag_mark_output(pass_dag *d, int t) {
  if (t >= 0 && t < d->n_tensors) d->tensors[t].is_output = 1;
}

int pass_dag_add_node(pass_dag *d, const char *name, double fwd_ms, double bwd_ms, uint64_t param_bytes,
                      uint64_t act_bytes, int n_in, const int *in, int n_out, const int *out) {
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

int pass_dag_finalize(pass_dag *d, char *err, size_t errlen) {
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
    if (!d->tensors[t].consumers) {
      free(cnt);
      return -1;
    }
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

int pass_dag_set_keep(pass_dag *d, int id, uint64_t keep_bytes) {
  if (id < 0 || id >= d->n_nodes) return -1;
  d->nodes[id].keep_bytes = keep_bytes;
  return 0;
}

int pass_dag_set_recompute(pass_dag *d, int id, const double ms[2], const uint64_t keep[2]) {
  if (id < 0 || id >= d->n_nodes || !(ms[0] >= 0) || !(ms[1] >= 0)) return -1;
  for (int q = 0; q < 2; q++) {
    d->nodes[id].rc_ms[q] = ms[q];
    d->nodes[id].rc_keep[q] = keep[q];
  }
  return 0;
}

int pass_dag_set_fused(pass_dag *d, int id, int n, const char *const *names) {
  if (id < 0 || id >= d->n_nodes || n < 0) return -1;
  pass_dag_node *v = &d->nodes[id];
  char **f = calloc((size_t)n + 1, sizeof *f);
  if (!f) return -1;
  for (int k = 0; k < n; k++)
    if (!(f[k] = dup_str(names[k]))) {
      while (k--) free(f[k]);
      free(f);
      return -1;
    }
  for (int k = 0; k < v->n_fused; k++) free(v->fused[k]);
  free(v->fused);
  v->fused = f;
  v->n_fused = n;
  return 0;
}

void pass_dag_free(pass_dag *d) {
  for (int v = 0; v < d->n_nodes; v++) {
    free(d->nodes[v].name);
    free(d->nodes[v].inputs);
    free(d->nodes[v].outputs);
    for (int k = 0; k < d->nodes[v].n_fused; k++) free(d->nodes[v].fused[k]);
    free(d->nodes[v].fused);
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
static void heap_push(int *h, int *n, int v) {
  int i = (*n)++;
  h[i] = v;
  while (i > 0 && h[(i - 1) / 2] > h[i]) {
    int p = (i - 1) / 2, x = h[p];
    h[p] = h[i];
    h[i] = x;
    i = p;
  }
}

static int heap_pop(int *h, int *n) {
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

int pass_topo_order(const pass_dag *d, pass_order_kind kind, int *order) {
  if ((int)kind < 0 || kind >= PASS_ORDER_COUNT) return -1;
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

static int topo_kahn(const pass_dag *d, pass_order_kind kind, int *order) {
  int n = d->n_nodes;
  int *indeg = calloc((size_t)n + 1, sizeof(int));
  int *ready = malloc(sizeof(int) * ((size_t)n + 1));
  if (!indeg || !ready) {
    free(indeg);
    free(ready);
    return -1;
  }
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
        while (j > base && ready[j - 1] < x) {
          ready[j] = ready[j - 1];
          j--;
        }
        ready[j] = x;
      }
    }
  }
  free(indeg);
  free(ready);
  return k == n ? 0 : -1;
}

/* ---- prefix states ---------------------------------------------------------- */

void pass_states_free(pass_states *st) {
  free(st->order);
  free(st->pos);
  free(st->fwd);
  free(st->bwd);
  free(st->param);
  free(st->act);
  free(st->keep);
  for (int q = 0; q < 2; q++) {
    free(st->rcw[q]);
    free(st->rck[q]);
  }
  free(st->cut);
  free(st->cut_grad);
  memset(st, 0, sizeof *st);
}

static int states_alloc(int n, pass_order_kind kind, pass_states *st) {
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
  st->keep = malloc(sizeof(uint64_t) * s1);
  int rc_ok = 1;
  for (int q = 0; q < 2; q++) {
    st->rcw[q] = malloc(sizeof(double) * s1);
    st->rck[q] = malloc(sizeof(uint64_t) * s1);
    rc_ok &= st->rcw[q] && st->rck[q];
  }
  st->cut = calloc(s1 + 1, sizeof(uint64_t));
  st->cut_grad = calloc(s1 + 1, sizeof(uint64_t));
  if (!st->order || !st->pos || !st->fwd || !st->bwd || !st->param || !st->act || !st->keep || !rc_ok || !st->cut ||
      !st->cut_grad) {
    pass_states_free(st);
    return -1;
  }
  return 0;
}

static void states_fill(const pass_dag *d, pass_states *st);

int pass_states_build(const pass_dag *d, pass_order_kind kind, pass_states *st) {
  if (states_alloc(d->n_nodes, kind, st) != 0) return -1;
  if (pass_topo_order(d, kind, st->order) != 0) {
    pass_states_free(st);
    return -1;
  }
  states_fill(d, st);
  return 0;
}

int pass_states_from_order(const pass_dag *d, const int *order, pass_order_kind kind, pass_states *st) {
  if (states_alloc(d->n_nodes, kind, st) != 0) return -1;
  memcpy(st->order, order, sizeof(int) * (size_t)d->n_nodes);
  states_fill(d, st);
  return 0;
}

static void states_fill(const pass_dag *d, pass_states *st) {
  int n = st->n;
  st->fwd[0] = st->bwd[0] = 0;
  st->param[0] = st->act[0] = st->keep[0] = 0;
  for (int q = 0; q < 2; q++) {
    st->rcw[q][0] = 0;
    st->rck[q][0] = 0;
  }
  for (int p = 0; p < n; p++) {
    const pass_dag_node *v = &d->nodes[st->order[p]];
    st->pos[st->order[p]] = p;
    st->fwd[p + 1] = st->fwd[p] + v->fwd_ms;
    st->bwd[p + 1] = st->bwd[p] + v->bwd_ms;
    st->param[p + 1] = st->param[p] + v->param_bytes;
    st->act[p + 1] = st->act[p] + v->act_bytes;
    st->keep[p + 1] = st->keep[p] + v->keep_bytes;
    for (int q = 0; q < 2; q++) {
      st->rcw[q][p + 1] = st->rcw[q][p] + v->rc_ms[q];
      st->rck[q][p + 1] = st->rck[q][p] + v->rc_keep[q];
    }
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
}

/* ---- arbitrary down-sets ---------------------------------------------------- */

int pass_is_downset(const pass_dag *d, const unsigned char *in_set) {
  for (int v = 0; v < d->n_nodes; v++) {
    if (!in_set[v]) continue;
    for (int i = 0; i < d->nodes[v].n_inputs; i++) {
      int p = d->tensors[d->nodes[v].inputs[i]].producer;
      if (p >= 0 && !in_set[p]) return 0;
    }
  }
  return 1;
}

int pass_tensor_crosses(const pass_dag *d, int t, const unsigned char *in_set) {
  const pass_dag_tensor *x = &d->tensors[t];
  if (x->producer >= 0 && !in_set[x->producer]) return 0;
  if (x->is_output) return 1;
  for (int c = 0; c < x->n_consumers; c++)
    if (!in_set[x->consumers[c]]) return 1;
  return 0;
}

uint64_t pass_cut_bytes(const pass_dag *d, const unsigned char *in_set, uint64_t *grad_bytes) {
  uint64_t b = 0, g = 0;
  for (int t = 0; t < d->n_tensors; t++)
    if (pass_tensor_crosses(d, t, in_set)) {
      b += d->tensors[t].bytes;
      if (d->tensors[t].producer >= 0) g += d->tensors[t].bytes;
    }
  if (grad_bytes) *grad_bytes = g;
  return b;
}

int pass_augmented_antichain(const pass_dag *d, const unsigned char *in_set, int *out) {
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

static int popcount64(uint64_t x) {
  int c = 0;
  while (x) {
    x &= x - 1;
    c++;
  }
  return c;
}

static int cmp_downset(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  int px = popcount64(x), py = popcount64(y);
  if (px != py) return px < py ? -1 : 1;
  return x < y ? -1 : x > y;
}

long pass_downsets_enumerate(const pass_dag *d, uint64_t *out, long max) {
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

/* ---- the antichain DAG: every down-set, under a budget ------------------------ */

void pass_downsets_free(pass_downsets *ds) {
  free(ds->order);
  free(ds->pos);
  free(ds->parent);
  free(ds->added);
  free(ds->size);
  free(ds->key);
  free(ds->param);
  free(ds->act);
  free(ds->keep);
  free(ds->cut);
  free(ds->cut_grad);
  free(ds->lower_start);
  free(ds->lower);
  memset(ds, 0, sizeof *ds);
}

void pass_downset_members(const pass_downsets *ds, long s, unsigned char *in) {
  memset(in, 0, (size_t)ds->n);
  for (; s > 0; s = ds->parent[s]) in[ds->added[s]] = 1;
}

/* Next set bit of b (words w) at position >= from, or -1. */
static int next_bit(const uint64_t *b, int w, int from) {
  int k = from >> 6;
  if (k >= w) return -1;
  uint64_t x = b[k] & (~0ull << (from & 63));
  for (;;) {
    if (x) return (k << 6) + __builtin_ctzll(x);
    if (++k >= w) return -1;
    x = b[k];
  }
}

/* Distinct predecessor / successor positions per position (CSR). */
static int ds_adjacency(const pass_dag *d, const int *pos, const int *order, int **pst, int **pl, int **sst, int **sl) {
  int n = d->n_nodes;
  long np = 0;
  int *mark = malloc(sizeof(int) * ((size_t)n + 1));
  *pst = calloc((size_t)n + 2, sizeof(int));
  *sst = calloc((size_t)n + 2, sizeof(int));
  if (!mark || !*pst || !*sst) {
    free(mark);
    return -1;
  }
  for (int q = 0; q < n; q++) mark[q] = -1;
  for (int q = 0; q < n; q++) {
    const pass_dag_node *v = &d->nodes[order[q]];
    for (int i = 0; i < v->n_inputs; i++) {
      int pr = d->tensors[v->inputs[i]].producer;
      if (pr < 0 || mark[pos[pr]] == q) continue;
      mark[pos[pr]] = q;
      (*pst)[q + 1]++;
      (*sst)[pos[pr] + 1]++;
      np++;
    }
  }
  for (int q = 0; q < n; q++) {
    (*pst)[q + 1] += (*pst)[q];
    (*sst)[q + 1] += (*sst)[q];
  }
  *pl = malloc(sizeof(int) * (size_t)(np ? np : 1));
  *sl = malloc(sizeof(int) * (size_t)(np ? np : 1));
  int *fill = calloc((size_t)n + 1, sizeof(int));
  if (!*pl || !*sl || !fill) {
    free(mark);
    free(fill);
    return -1;
  }
  for (int q = 0; q < n; q++) mark[q] = -1;
  int k = 0;
  for (int q = 0; q < n; q++) {
    const pass_dag_node *v = &d->nodes[order[q]];
    for (int i = 0; i < v->n_inputs; i++) {
      int pr = d->tensors[v->inputs[i]].producer;
      if (pr < 0 || mark[pos[pr]] == q) continue;
      mark[pos[pr]] = q;
      (*pl)[k++] = pos[pr];
      (*sl)[(*sst)[pos[pr]] + fill[pos[pr]]++] = q;
    }
  }
  free(mark);
  free(fill);
  return 0;
}

/* The states in generation order, as the reverse search records them. */
typedef struct {
  long cap, count;       /* states allotted, recorded */
  int *par, *add, *size; /* [cap] parent state (-1 for {}), position added to it (-1 for {}), nodes */
  double *key;           /* [cap] sum of the weights, added in position order */
  uint64_t *cut, *cutg;  /* [cap] bytes crossing the cut after the state; of them, not graph inputs */
  int *mx_start, *mx;    /* maximal positions per state (CSR: [cap + 1], [ecap]) */
  long mxn, ecap;        /* entries of mx used, allotted (grown if needed) */
} ds_gen;

/* The reverse search's current down-set D, with the counts that say which
 * positions can be added to it and which are maximal in it. */
typedef struct {
  const pass_dag *d;
  const double *weight;
  const int *order;         /* [n] position -> node */
  int n, W;                 /* nodes; 64-bit words of a position set */
  int *pst, *pl, *sst, *sl; /* distinct predecessor / successor positions per position (CSR) */
  uint64_t *D, *R, *MX;     /* [W] D; ready positions outside D; maximal positions of D */
  int *cnt, *cnts;          /* [n] per position: predecessors in D, successors in D */
  int *cons_in;             /* [tensors] consumers in D */
  int *stack, *sid;         /* [n + 1] positions added from {} to D; the states recorded on the way */
  int depth, last;          /* nodes in D; the position added or removed last */
  uint64_t cut0;            /* cut of {}: graph inputs that are consumed or are outputs */
} ds_walk;

/* Whether input i of v repeats one of its earlier inputs (a tensor counts once per node). */
static int input_repeats(const pass_dag_node *v, int i) {
  int t = v->inputs[i], dup = 0;
  for (int k = 0; k < i; k++) dup |= v->inputs[k] == t;
  return dup;
}

/* Allocates the generation arrays for cap states (g zeroed first). Returns -1 on no memory. */
static int ds_gen_alloc(ds_gen *g, long cap) {
  memset(g, 0, sizeof *g);
  g->cap = cap;
  g->ecap = 4 * cap + 64;
  g->par = malloc(sizeof(int) * (size_t)cap);
  g->add = malloc(sizeof(int) * (size_t)cap);
  g->size = malloc(sizeof(int) * (size_t)cap);
  g->mx_start = malloc(sizeof(int) * ((size_t)cap + 1));
  g->key = malloc(sizeof(double) * (size_t)cap);
  g->cut = malloc(8 * (size_t)cap);
  g->cutg = malloc(8 * (size_t)cap);
  g->mx = malloc(sizeof(int) * (size_t)g->ecap);
  if (!g->par || !g->add || !g->size || !g->mx_start || !g->key || !g->cut || !g->cutg || !g->mx) return -1;
  return 0;
}

static void ds_gen_free(ds_gen *g) {
  free(g->par);
  free(g->add);
  free(g->size);
  free(g->mx);
  free(g->mx_start);
  free(g->key);
  free(g->cut);
  free(g->cutg);
}

/* Allocates the walk (w zeroed by the caller) and places it at {}: ready are
 * the positions without predecessors. Returns -1 on no memory. */
static int ds_walk_init(ds_walk *w, const pass_dag *d, const double *weight, const int *order, const int *pos) {
  int n = d->n_nodes, W = (n + 63) / 64;
  w->d = d;
  w->weight = weight;
  w->order = order;
  w->n = n;
  w->W = W;
  w->D = calloc((size_t)W, 8);
  w->R = calloc((size_t)W, 8);
  w->MX = calloc((size_t)W, 8);
  w->cnt = calloc((size_t)n, sizeof(int));
  w->cnts = calloc((size_t)n, sizeof(int));
  w->cons_in = calloc((size_t)d->n_tensors + 1, sizeof(int));
  w->stack = malloc(sizeof(int) * ((size_t)n + 1));
  w->sid = malloc(sizeof(int) * ((size_t)n + 1));
  if (!w->D || !w->R || !w->MX || !w->cnt || !w->cnts || !w->cons_in || !w->stack || !w->sid) return -1;
  if (ds_adjacency(d, pos, order, &w->pst, &w->pl, &w->sst, &w->sl) != 0) return -1;
  for (int q = 0; q < n; q++)
    if (w->pst[q + 1] == w->pst[q]) w->R[q >> 6] |= 1ull << (q & 63);
  w->cut0 = 0;
  for (int t = 0; t < d->n_tensors; t++)
    if (d->tensors[t].producer < 0 && (d->tensors[t].is_output || d->tensors[t].n_consumers > 0))
      w->cut0 += d->tensors[t].bytes;
  w->depth = 0;
  w->last = -1;
  return 0;
}

static void ds_walk_free(ds_walk *w) {
  free(w->pst);
  free(w->pl);
  free(w->sst);
  free(w->sl);
  free(w->D);
  free(w->R);
  free(w->MX);
  free(w->cnt);
  free(w->cnts);
  free(w->cons_in);
  free(w->stack);
  free(w->sid);
}

/* Records the walk's D as the next state: its parent and added position, key,
 * cut sizes (updated from the parent's) and maximal positions. Returns -1 past
 * the cap of states or when the edges cannot grow. */
static int ds_record(ds_gen *g, ds_walk *w) {
  const pass_dag *d = w->d;
  int depth = w->depth;
  if (g->count >= g->cap) return -1;
  long s = g->count++;
  if (depth == 0) {
    g->par[s] = -1;
    g->add[s] = -1;
    g->key[s] = 0;
    g->cut[s] = w->cut0;
    g->cutg[s] = 0;
  } else {
    int p = w->sid[depth - 1], x = w->stack[depth - 1];
    const pass_dag_node *v = &d->nodes[w->order[x]];
    uint64_t c = g->cut[p], cg = g->cutg[p];
    for (int i = 0; i < v->n_inputs; i++) {
      if (input_repeats(v, i)) continue;
      int t = v->inputs[i];
      const pass_dag_tensor *tt = &d->tensors[t];
      if (w->cons_in[t] == tt->n_consumers && !tt->is_output) { /* v was its last consumer outside */
        c -= tt->bytes;
        if (tt->producer >= 0) cg -= tt->bytes;
      }
    }
    for (int o = 0; o < v->n_outputs; o++) {
      const pass_dag_tensor *tt = &d->tensors[v->outputs[o]];
      if (tt->is_output || tt->n_consumers > 0) {
        c += tt->bytes;
        cg += tt->bytes;
      }
    }
    g->par[s] = p;
    g->add[s] = x;
    /* x follows all of D: a position-order sum */
    g->key[s] = g->key[p] + (w->weight ? w->weight[w->order[x]] : v->fwd_ms);
    g->cut[s] = c;
    g->cutg[s] = cg;
  }
  g->size[s] = depth;
  w->sid[depth] = (int)s;
  g->mx_start[s] = (int)g->mxn;
  for (int q = next_bit(w->MX, w->W, 0); q >= 0; q = next_bit(w->MX, w->W, q + 1)) {
    if (g->mxn >= g->ecap) {
      int *nm = realloc(g->mx, sizeof(int) * (size_t)g->ecap * 2);
      if (!nm) return -1;
      g->mx = nm;
      g->ecap *= 2;
    }
    g->mx[g->mxn++] = q;
  }
  return 0;
}

/* Adds the ready position x to D: its successors may become ready, its
 * predecessors stop being maximal, and its inputs gain a consumer inside. */
static void ds_push(ds_walk *w, int x) {
  const pass_dag_node *v = &w->d->nodes[w->order[x]];
  for (int i = 0; i < v->n_inputs; i++)
    if (!input_repeats(v, i)) w->cons_in[v->inputs[i]]++;
  for (int e = w->sst[x]; e < w->sst[x + 1]; e++) {
    int u = w->sl[e];
    if (++w->cnt[u] == w->pst[u + 1] - w->pst[u]) w->R[u >> 6] |= 1ull << (u & 63);
  }
  for (int e = w->pst[x]; e < w->pst[x + 1]; e++) {
    int u = w->pl[e];
    if (w->cnts[u]++ == 0) w->MX[u >> 6] &= ~(1ull << (u & 63));
  }
  w->MX[x >> 6] |= 1ull << (x & 63);
  w->D[x >> 6] |= 1ull << (x & 63);
  w->R[x >> 6] &= ~(1ull << (x & 63));
  w->stack[w->depth++] = x;
  w->last = x;
}

/* Removes the position added last from D, undoing ds_push; it becomes the
 * last position tried, so the search continues after it. */
static void ds_pop(ds_walk *w) {
  int y = w->stack[--w->depth];
  const pass_dag_node *v = &w->d->nodes[w->order[y]];
  for (int i = 0; i < v->n_inputs; i++)
    if (!input_repeats(v, i)) w->cons_in[v->inputs[i]]--;
  for (int e = w->sst[y]; e < w->sst[y + 1]; e++) {
    int u = w->sl[e];
    if (w->cnt[u] == w->pst[u + 1] - w->pst[u]) w->R[u >> 6] &= ~(1ull << (u & 63));
    w->cnt[u]--;
  }
  for (int e = w->pst[y]; e < w->pst[y + 1]; e++) {
    int u = w->pl[e];
    if (--w->cnts[u] == 0) w->MX[u >> 6] |= 1ull << (u & 63);
  }
  w->MX[y >> 6] &= ~(1ull << (y & 63));
  w->D[y >> 6] &= ~(1ull << (y & 63));
  w->R[y >> 6] |= 1ull << (y & 63);
  w->last = y;
}

/* Reverse search from {}: children of D add a ready node positioned after all
 * of D, so every down-set is recorded once. Returns -1 as ds_record does. */
static int ds_search(ds_gen *g, ds_walk *w) {
  for (;;) {
    if (ds_record(g, w) != 0) return -1;
    /* next child of the current set, else backtrack */
    int x;
    for (;;) {
      x = next_bit(w->R, w->W, w->last + 1);
      if (x >= 0 || w->depth == 0) break;
      ds_pop(w);
    }
    if (x < 0) break;
    ds_push(w, x);
  }
  g->mx_start[g->count] = (int)g->mxn;
  return 0;
}

/* lowg[e] = the state D \ {v} for the e-th maximal position v recorded
 * (state D = the one whose mx range holds e), in generation numbering.
 * Returns -1 on no memory. */
static int ds_lower_covers(const ds_gen *g, int *lowg) {
  long count = g->count;
  const int *par = g->par, *add = g->add, *mx_start = g->mx_start, *mx = g->mx;
  int rc = -1;
  /* Children per state (CSR; generated in increasing position of the added node). */
  int *ch_start = calloc((size_t)count + 2, sizeof(int));
  int *ch = malloc(sizeof(int) * (size_t)count);
  if (!ch_start || !ch) goto out;
  for (long s = 1; s < count; s++) ch_start[par[s] + 2]++;
  for (long s = 0; s < count; s++) ch_start[s + 2] += ch_start[s + 1];
  for (long s = 1; s < count; s++) ch[ch_start[par[s] + 1]++] = (int)s; /* now ch_start[p] .. ch_start[p+1] */
  /* Edges: D \ {v} for v maximal in D. With u the node added last (D = P + u):
   * v = u gives P; otherwise v is maximal in P and D \ {v} = (P \ {v}) + u, a
   * canonical child of P \ {v} (u follows all of it and is ready in it). */
  for (long s = 1; s < count; s++) {
    int p = par[s], k = mx_start[p], u = add[s];
    for (int e = mx_start[s]; e < mx_start[s + 1]; e++) {
      int v = mx[e];
      if (v == u) {
        lowg[e] = p;
        continue;
      }
      while (k < mx_start[p + 1] && mx[k] < v) k++;
      if (k >= mx_start[p + 1] || mx[k] != v) goto out; /* cannot happen */
      int X = lowg[k], lo = ch_start[X], hi = ch_start[X + 1] - 1, found = -1;
      while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, a = add[ch[mid]];
        if (a == u) {
          found = ch[mid];
          break;
        }
        if (a < u) lo = mid + 1;
        else hi = mid - 1;
      }
      if (found < 0) goto out; /* cannot happen */
      lowg[e] = found;
    }
  }
  rc = 0;
out:
  free(ch_start);
  free(ch);
  return rc;
}

/* *perm_out[i] = the state listed i-th: sorted by (key, size), stable, with a
 * counting sort by size, then LSD radix on the key's bits (non-negative doubles
 * order like their bit patterns). n: the most nodes a state has. Returns -1 on
 * no memory. */
static int ds_sort(const ds_gen *g, int n, int **perm_out) {
  long count = g->count;
  int *perm = malloc(sizeof(int) * (size_t)count), *tmp = malloc(sizeof(int) * (size_t)count);
  int *c = calloc((size_t)n + 2, sizeof(int));
  if (!perm || !tmp || !c) {
    free(perm);
    free(tmp);
    free(c);
    return -1;
  }
  for (long s = 0; s < count; s++) c[g->size[s] + 1]++;
  for (int k = 0; k <= n; k++) c[k + 1] += c[k];
  for (long s = 0; s < count; s++) perm[c[g->size[s]]++] = (int)s;
  free(c);
  for (int shift = 0; shift < 64; shift += 8) {
    long b[257];
    memset(b, 0, sizeof b);
    for (long i = 0; i < count; i++) {
      uint64_t kb;
      memcpy(&kb, &g->key[perm[i]], 8);
      b[((kb >> shift) & 255) + 1]++;
    }
    int uniform = 0;
    for (int k = 0; k < 256; k++) uniform |= b[k + 1] == count;
    if (uniform) continue;
    for (int k = 0; k < 256; k++) b[k + 1] += b[k];
    for (long i = 0; i < count; i++) {
      uint64_t kb;
      memcpy(&kb, &g->key[perm[i]], 8);
      tmp[b[(kb >> shift) & 255]++] = perm[i];
    }
    int *t = perm;
    perm = tmp;
    tmp = t;
  }
  free(tmp);
  *perm_out = perm;
  return 0;
}

/* Fills ds's per-state arrays and edges from the generated states, listed in
 * the order perm, with the lower covers lowg (ds->order already set). The sums
 * of bytes follow the parent, which is listed earlier. Returns -1 on no memory. */
static int ds_fill(const pass_dag *d, const ds_gen *g, const int *perm, const int *lowg, pass_downsets *ds) {
  long count = g->count, mxn = g->mxn;
  int *inv = malloc(sizeof(int) * (size_t)count);
  if (!inv) return -1;
  for (long i = 0; i < count; i++) inv[perm[i]] = (int)i;
  ds->count = count;
  ds->parent = malloc(sizeof(int) * (size_t)count);
  ds->added = malloc(sizeof(int) * (size_t)count);
  ds->size = malloc(sizeof(int) * (size_t)count);
  ds->key = malloc(sizeof(double) * (size_t)count);
  ds->param = malloc(8 * (size_t)count);
  ds->act = malloc(8 * (size_t)count);
  ds->keep = malloc(8 * (size_t)count);
  ds->cut = malloc(8 * (size_t)count);
  ds->cut_grad = malloc(8 * (size_t)count);
  ds->lower_start = malloc(sizeof(int) * ((size_t)count + 1));
  ds->lower = malloc(sizeof(int) * (size_t)(mxn ? mxn : 1));
  ds->edges = mxn;
  if (!ds->parent || !ds->added || !ds->size || !ds->key || !ds->param || !ds->act || !ds->keep || !ds->cut ||
      !ds->cut_grad || !ds->lower_start || !ds->lower) {
    free(inv);
    return -1;
  }
  long e = 0;
  for (long i = 0; i < count; i++) {
    int s = perm[i];
    ds->size[i] = g->size[s];
    ds->key[i] = g->key[s];
    ds->cut[i] = g->cut[s];
    ds->cut_grad[i] = g->cutg[s];
    if (g->par[s] < 0) {
      ds->parent[i] = ds->added[i] = -1;
      ds->param[i] = ds->act[i] = ds->keep[i] = 0;
    } else {
      int pi = inv[g->par[s]], v = ds->order[g->add[s]]; /* the parent is listed earlier */
      ds->parent[i] = pi;
      ds->added[i] = v;
      ds->param[i] = ds->param[pi] + d->nodes[v].param_bytes;
      ds->act[i] = ds->act[pi] + d->nodes[v].act_bytes;
      ds->keep[i] = ds->keep[pi] + d->nodes[v].keep_bytes;
    }
    ds->lower_start[i] = (int)e;
    for (int k = g->mx_start[s]; k < g->mx_start[s + 1]; k++) ds->lower[e++] = inv[lowg[k]];
  }
  ds->lower_start[count] = (int)e;
  free(inv);
  return 0;
}

long pass_downsets_build(const pass_dag *d, const double *weight, long max_states, size_t max_bytes,
                         pass_downsets *ds) {
  memset(ds, 0, sizeof *ds);
  int n = d->n_nodes;
  if (n < 1 || max_states < 2 || max_states > 0x3fffffffL) return -1;
  for (int v = 0; v < n; v++) {
    double w = weight ? weight[v] : d->nodes[v].fwd_ms;
    if (!(w >= 0) || !isfinite(w) || !(d->nodes[v].fwd_ms >= 0) || !(d->nodes[v].bwd_ms >= 0)) return -1;
  }
  /* Bytes per state while building: generation arrays 36, children 8, sort 12,
   * output 84, and ~4 edges of 12 bytes. Arrays are allocated at the cap once:
   * pages never touched cost nothing. */
  const size_t per_state = 36 + 8 + 12 + 84 + 48;
  long cap = max_states;
  if (max_bytes && (size_t)cap > max_bytes / per_state) cap = (long)(max_bytes / per_state);
  if (cap < 2) return -1;

  long rc = -1;
  ds_gen g;
  ds_walk w;
  memset(&w, 0, sizeof w);
  int *order = malloc(sizeof(int) * (size_t)n), *pos = malloc(sizeof(int) * (size_t)n);
  int *lowg = NULL, *perm = NULL;
  if (ds_gen_alloc(&g, cap) != 0 || !order || !pos || pass_topo_order(d, PASS_ORDER_INDEX, order) != 0) goto out;
  for (int q = 0; q < n; q++) pos[order[q]] = q;
  if (ds_walk_init(&w, d, weight, order, pos) != 0 || ds_search(&g, &w) != 0) goto out;
  lowg = malloc(sizeof(int) * (size_t)(g.mxn ? g.mxn : 1));
  if (!lowg || ds_lower_covers(&g, lowg) != 0 || ds_sort(&g, n, &perm) != 0) goto out;
  ds->n = n;
  ds->order = order;
  order = NULL;
  ds->pos = pos;
  pos = NULL;
  if (ds_fill(d, &g, perm, lowg, ds) != 0) goto out;
  rc = g.count;
out:
  if (rc < 0) pass_downsets_free(ds);
  ds_gen_free(&g);
  ds_walk_free(&w);
  free(order);
  free(pos);
  free(lowg);
  free(perm);
  return rc;
}
