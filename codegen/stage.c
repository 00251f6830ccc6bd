/* codegen/stage.c - stage boundaries, units and the memory plan shared by the cpu and
 * cuda emitters (see codegen/stage.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/c/cg_c.h" /* cg_is_eltwise, cg_is_alias */
#include "codegen/stage.h"
#include "ir/diag.h"

size_t cg_align_up(size_t n) { return (n + CG_ALIGN - 1) / CG_ALIGN * CG_ALIGN; }

void cg_push(int **arr, int *n, int v) {
  if ((*n & (*n - 1)) == 0) *arr = ir_xrealloc(*arr, sizeof(int) * (size_t)(*n ? *n * 2 : 1));
  (*arr)[(*n)++] = v;
}

/* ---- parts -------------------------------------------------------------------------- */

int cg_n_parts(const cg_plan *p) { return p->train ? 3 * p->n_stages : p->n_stages; }

int cg_part(const cg_plan *p, int stage, int phase) {
  if (!p->train) return stage;
  int S = p->n_stages;
  return phase == IR_PHASE_FWD ? stage : phase == IR_PHASE_BWD ? 2 * S - 1 - stage : 2 * S + stage;
}

int cg_part_stage(const cg_plan *p, int part) {
  int S = p->n_stages;
  return !p->train || part < S ? part : part < 2 * S ? 2 * S - 1 - part : part - 2 * S;
}

int cg_part_phase(const cg_plan *p, int part) {
  int S = p->n_stages;
  return !p->train || part < S ? IR_PHASE_FWD : part < 2 * S ? IR_PHASE_BWD : IR_PHASE_UPD;
}

int cg_node_part(const ir_graph *g, const cg_plan *p, int node) {
  return cg_part(p, p->node_stage[node], p->train ? g->nodes[node].phase : IR_PHASE_FWD);
}

/* ---- stage analysis --------------------------------------------------------------- */

/* A training program's parts may only exchange values along the pipeline's edges. */
static int check_training_flow(ir_graph *g, const cg_plan *p, const cg_stage_info *si) {
  for (int q = 0; q < si->n_stages; q++) {
    int st = cg_part_stage(p, q), ph = cg_part_phase(p, q);
    if (ph == IR_PHASE_UPD && (si->n_in[q] || si->n_out[q])) {
      int v = si->n_in[q] ? si->s_in[q][0] : si->s_out[q][0];
      ir_error(g, "internal error: train: the update of stage %d %s '%s', which is not a parameter", st,
               si->n_in[q] ? "reads" : "computes", g->values[v].name);
      return -1;
    }
    for (int k = 0; ph == IR_PHASE_BWD && k < si->n_in[q]; k++) {
      int v = si->s_in[q][k], src = si->vstage[v];
      if (src >= 0 && cg_part_phase(p, src) == IR_PHASE_FWD && cg_part_stage(p, src) > st) {
        ir_error(g,
                 "internal error: train: the backward of stage %d reads '%s', computed by the forward of "
                 "the later stage %d",
                 st, g->values[v].name, cg_part_stage(p, src));
        return -1;
      }
    }
  }
  return 0;
}

int cg_analyse_stages(ir_graph *g, const cg_plan *p, cg_stage_info *si) {
  int S = cg_n_parts(p), nv = g->n_values;
  si->n_stages = S;
  si->vstage = ir_xmalloc(sizeof(int) * (size_t)(nv + 1));
  si->last_stage = ir_xmalloc(sizeof(int) * (size_t)(nv + 1));
  si->out_index = ir_xmalloc(sizeof(int) * (size_t)(nv + 1));
  si->passthrough = ir_xcalloc((size_t)nv + 1, 1);
  si->s_in = ir_xcalloc((size_t)S, sizeof(int *));
  si->s_out = ir_xcalloc((size_t)S, sizeof(int *));
  si->n_in = ir_xcalloc((size_t)S, sizeof(int));
  si->n_out = ir_xcalloc((size_t)S, sizeof(int));
  for (int v = 0; v < nv; v++) {
    ir_value *val = &g->values[v];
    si->vstage[v] = val->kind == IR_VAL_CONST ? -2 : val->kind == IR_VAL_INPUT ? -1 : -3;
    si->last_stage[v] = -1;
    si->out_index[v] = -1;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) si->vstage[n->out[k]] = cg_node_part(g, p, i);
  }
  /* every stage's set of used values, as marks per stage */
  char *used = ir_xcalloc((size_t)nv + 1, 1);
  for (int s = 0; s < S; s++) {
    memset(used, 0, (size_t)nv + 1);
    for (int i = 0; i < g->n_nodes; i++) {
      const ir_node *n = &g->nodes[i];
      if (n->dead || cg_node_part(g, p, i) != s) continue;
      for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0 || used[v]) continue;
        used[v] = 1;
        if (si->vstage[v] == -2) continue;
        if (si->vstage[v] == -3) {
          ir_error_node(g, i, "input '%s' has no producer", g->values[v].name);
          free(used);
          return -1;
        }
        if (si->vstage[v] > s) {
          ir_error_node(g, i, "internal error: the plan is not a linear pipeline (input from stage %d in stage %d)",
                        si->vstage[v], s);
          free(used);
          return -1;
        }
        if (s > si->last_stage[v]) si->last_stage[v] = s;
      }
    }
    for (int v = 0; v < nv; v++)
      if (used[v] && (si->vstage[v] == -1 || (si->vstage[v] >= 0 && si->vstage[v] < s)))
        cg_push(&si->s_in[s], &si->n_in[s], v);
  }
  free(used);
  for (int k = 0; k < g->n_outputs; k++) {
    int v = g->outputs[k];
    if (si->vstage[v] == -3) {
      ir_error(g, "graph output '%s' has no producer", g->values[v].name);
      return -1;
    }
    if (si->vstage[v] < 0 && !si->passthrough[v]) {
      si->passthrough[v] = 1;
      if (si->vstage[v] == -1) {
        int have = 0;
        for (int k = 0; k < si->n_in[S - 1]; k++) have |= si->s_in[S - 1][k] == v;
        if (!have) {
          cg_push(&si->s_in[S - 1], &si->n_in[S - 1], v);
          for (int k = si->n_in[S - 1] - 1; k > 0 && si->s_in[S - 1][k] < si->s_in[S - 1][k - 1]; k--) {
            int t = si->s_in[S - 1][k];
            si->s_in[S - 1][k] = si->s_in[S - 1][k - 1];
            si->s_in[S - 1][k - 1] = t;
          }
        }
      }
    }
    si->last_stage[v] = S;
  }
  for (int v = 0; v < nv; v++) {
    int s = si->passthrough[v] ? S - 1 : si->vstage[v];
    if (s >= 0 && si->last_stage[v] > s) {
      si->out_index[v] = si->n_out[s];
      cg_push(&si->s_out[s], &si->n_out[s], v);
    }
  }
  return p->train ? check_training_flow(g, p, si) : 0;
}

void cg_free_stage_info(cg_stage_info *si) {
  for (int s = 0; s < si->n_stages; s++) {
    free(si->s_in[s]);
    free(si->s_out[s]);
  }
  free(si->s_in);
  free(si->s_out);
  free(si->n_in);
  free(si->n_out);
  free(si->vstage);
  free(si->last_stage);
  free(si->out_index);
  free(si->passthrough);
}

/* ---- parameter memory -------------------------------------------------------------- */

size_t cg_wlayout_value_bytes(const ir_value *v) { return v && v->kind == IR_VAL_CONST ? cg_align_up(v->nbytes) : 0; }

void cg_wlayout_build(cg_wlayout *wl, ir_graph *g, const cg_plan *p, const cg_stage_info *si, int stage) {
  int nv = g->n_values;
  memset(wl, 0, sizeof *wl);
  wl->off = ir_xmalloc(sizeof(size_t) * ((size_t)nv + 1));
  char *mark = ir_xcalloc((size_t)nv + 1, 1);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead || p->node_stage[i] != stage) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && g->values[n->in[k]].kind == IR_VAL_CONST) mark[n->in[k]] = 1;
    for (int k = 0; p->train && k < n->n_out; k++)
      if (n->out[k] >= 0 && g->values[n->out[k]].writeback >= 0) mark[g->values[n->out[k]].writeback] = 1;
  }
  /* graph outputs that are constants: copied out of the weights by the last part */
  for (int q = 0; q < si->n_stages; q++)
    if (cg_part_stage(p, q) == stage)
      for (int k = 0; k < si->n_out[q]; k++) {
        int v = si->s_out[q][k];
        if (si->passthrough[v] && g->values[v].kind == IR_VAL_CONST) mark[v] = 1;
      }
  for (int v = 0; v < nv; v++) wl->off[v] = SIZE_MAX;
  /* file-backed constants first; in a training program zero_init ones after the file */
  for (int pass = 0; pass < 2; pass++) {
    for (int v = 0; v < nv; v++) {
      if (!mark[v] || (p->train && g->values[v].zero_init) != pass) continue;
      wl->off[v] = wl->total_bytes;
      cg_push(&wl->vals, &wl->n, v);
      wl->total_bytes += cg_wlayout_value_bytes(&g->values[v]);
    }
    if (!pass) wl->file_bytes = wl->total_bytes;
  }
  free(mark);
}

void cg_wlayout_free(cg_wlayout *wl) {
  free(wl->off);
  free(wl->vals);
  memset(wl, 0, sizeof *wl);
}

unsigned char *cg_wlayout_file(const cg_wlayout *wl, const ir_graph *g, uint64_t *sum) {
  unsigned char *wbuf = ir_xcalloc(wl->file_bytes + 1, 1);
  for (int k = 0; k < wl->n; k++) {
    const ir_value *v = &g->values[wl->vals[k]];
    if (wl->off[wl->vals[k]] < wl->file_bytes && v->nbytes && v->data)
      ir_const_copy(v, wbuf + wl->off[wl->vals[k]]); /* zero_init: zeros (calloc) */
  }
  *sum = cg_checksum64(wbuf, wl->file_bytes);
  return wbuf;
}

/* ---- arena planning ----------------------------------------------------------------- */

typedef struct {
  size_t off, size;
} block;
typedef struct {
  block *b;
  int n, cap;
  size_t peak;
} alloc_state;

static size_t arena_alloc(alloc_state *a, size_t size) {
  size = cg_align_up(size ? size : 1);
  size_t off = 0;
  int at = 0;
  for (; at < a->n; at++) {
    if (a->b[at].off >= off + size) break;
    size_t end = a->b[at].off + a->b[at].size;
    if (end > off) off = end;
  }
  if (a->n == a->cap) {
    a->cap = a->cap ? a->cap * 2 : 16;
    a->b = ir_xrealloc(a->b, sizeof(block) * (size_t)a->cap);
  }
  memmove(&a->b[at + 1], &a->b[at], sizeof(block) * (size_t)(a->n - at));
  a->b[at].off = off;
  a->b[at].size = size;
  a->n++;
  if (off + size > a->peak) a->peak = off + size;
  return off;
}

static void arena_free(alloc_state *a, size_t off) {
  for (int i = 0; i < a->n; i++)
    if (a->b[i].off == off) {
      memmove(&a->b[i], &a->b[i + 1], sizeof(block) * (size_t)(a->n - i - 1));
      a->n--;
      return;
    }
  IR_ASSERT(0 && "arena_free: no such block");
}

/* ---- one stage ------------------------------------------------------------------------- */

/* Group the stage's nodes into units. */
static void build_units(cg_stage *st, int gemm_units) {
  ir_graph *g = st->g;
  int N = g->n_nodes;
  int *group = ir_xmalloc(sizeof(int) * (size_t)(N + 1)); /* node -> root of its unit, -1 not in stage */
  /* per unit root, an upper bound of its external inputs: both code generators take at
   * most 64 (a chain of 70 gradient Adds, say, becomes two units) */
  int *n_ext = ir_xcalloc((size_t)N + 1, sizeof(int));
  /* per unit root, whether a MatMul has joined it (one at most: codegen/c/eltwise.c) */
  char *has_mm = ir_xcalloc((size_t)N + 1, 1);
  for (int i = 0; i < N; i++) {
    const ir_node *n = &g->nodes[i];
    group[i] = (!n->dead && cg_node_part(g, st->p, i) == st->s) ? i : -1;
    n_ext[i] = n->op == IR_OP_Expand || n->op == IR_OP_CastLike ? 1 : n->n_in;
  }
  for (int i = 0; i < N; i++) {
    if (group[i] < 0) continue;
    const ir_node *n = &g->nodes[i];
    if (!cg_is_eltwise(g, n)) continue;
    const ir_value *y = ir_out(g, n, 0);
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < 0) continue;
      const ir_value *x = &g->values[v];
      int pnode = x->producer;
      if (x->kind != IR_VAL_ACT || pnode < 0 || group[pnode] != pnode) continue; /* other stage, or already merged */
      if (!cg_is_eltwise(g, &g->nodes[pnode]) || x->n_uses != 1 || x->is_output || x->writeback >= 0) continue;
      if (st->si->last_stage[v] > st->s) continue;
      if (!ir_shape_same_dims(&x->shape, &y->shape)) continue;
      if (n_ext[i] + n_ext[pnode] - 1 > 64) continue;
      /* merge the producer's unit into this node's */
      n_ext[i] += n_ext[pnode] - 1;
      int old = pnode;
      for (int j = 0; j <= pnode; j++)
        if (group[j] == old) group[j] = i;
    }
  }
  /* A unit whose output is read only by one other unit (several of its members, as
   * GELU's x * 0.5 * (1 + erf(x / sqrt 2)) reads x twice) joins that unit, its output
   * then a local of the loop like the other members': one pass over memory less. */
  int *cons = ir_xmalloc(sizeof(int) * (size_t)(g->n_values + 1));
  for (int changed = 1; changed;) {
    changed = 0;
    for (int v = 0; v < g->n_values; v++)
      cons[v] = -1; /* -1 no reader, -2 several units or not an
                     * element-wise reader, else the root */
    for (int j = 0; j < N; j++) {
      const ir_node *n = &g->nodes[j];
      if (n->dead) continue;
      for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0) continue;
        /* (read by a MatMul member, a value is needed whole: it stays out) */
        int r = group[j] >= 0 && cg_is_eltwise(g, n) ? group[j] : -2;
        cons[v] = cons[v] == -1 || cons[v] == r ? r : -2;
      }
    }
    for (int r = 0; r < N; r++) {
      if (group[r] != r || !cg_is_eltwise(g, &g->nodes[r])) continue;
      int v = g->nodes[r].out[0];
      if (v < 0) continue;
      const ir_value *x = &g->values[v];
      int R = cons[v] >= 0 ? group[cons[v]] : -1; /* (the root now: it may have joined a later unit) */
      if (R < 0 || R == r || x->kind != IR_VAL_ACT || x->is_output || x->writeback >= 0) continue;
      if (st->si->last_stage[v] > st->s || !cg_is_eltwise(g, &g->nodes[R])) continue;
      if (!ir_shape_same_dims(&x->shape, &ir_out(g, &g->nodes[R], 0)->shape)) continue;
      if (n_ext[R] + n_ext[r] > 64 || (has_mm[R] && has_mm[r])) continue;
      n_ext[R] += n_ext[r];
      has_mm[R] |= has_mm[r];
      for (int j = 0; j <= r; j++)
        if (group[j] == r) group[j] = R;
      changed = 1;
    }
    /* a MatMul into the one element-wise unit that reads its output (cg_stage_open) */
    for (int r = 0; gemm_units && !st->p->train && r < N; r++) {
      const ir_node *n = &g->nodes[r];
      if (group[r] != r || n->op != IR_OP_MatMul || n->n_in < 2 || n->out[0] < 0) continue;
      if (ir_attr_find(n, "pipecc.perm_a") || ir_attr_find(n, "pipecc.perm_b")) continue; /* strided operands */
      const ir_value *a = ir_in(g, n, 0), *b = ir_in(g, n, 1), *x = ir_out(g, n, 0);
      int v = n->out[0], R = cons[v] >= 0 ? group[cons[v]] : -1;
      if (!a || !b || a->dtype != IR_FLOAT || b->dtype != IR_FLOAT || a->shape.rank < 2 || b->shape.rank != 2) continue;
      if (b->shape.dims[0] <= 0 || ir_value_bytes(x) <= 0) continue;
      if (R < 0 || R == r || x->kind != IR_VAL_ACT || x->is_output || x->writeback >= 0) continue;
      if (st->si->last_stage[v] > st->s || !cg_is_eltwise(g, &g->nodes[R])) continue;
      if (!ir_shape_same_dims(&x->shape, &ir_out(g, &g->nodes[R], 0)->shape)) continue;
      if (n_ext[R] + 2 > 64 || has_mm[R]) continue;
      n_ext[R] += 2;
      has_mm[R] = 1;
      group[r] = R;
      changed = 1;
    }
  }
  free(cons);
  free(has_mm);
  st->units = ir_xcalloc((size_t)N + 1, sizeof(cg_unit));
  st->n_units = 0;
  for (int i = 0; i < N; i++) {
    if (group[i] != i) continue;
    cg_unit *u = &st->units[st->n_units++];
    u->root = i;
    for (int j = 0; j <= i; j++)
      if (group[j] == i) cg_push(&u->nodes, &u->n_nodes, j);
    const ir_node *n = &g->nodes[i];
    if (u->n_nodes == 1 && cg_is_alias(n) && n->in[0] >= 0 && st->si->out_index[n->out[0]] < 0) u->alias = 1;
    if (cg_is_eltwise(g, n)) {
      /* external inputs: values not produced inside the unit, in order of appearance */
      for (int m = 0; m < u->n_nodes; m++) {
        const ir_node *mn = &g->nodes[u->nodes[m]];
        int nin = mn->n_in;
        if (mn->op == IR_OP_Expand || mn->op == IR_OP_CastLike) nin = 1; /* the shape / the type: compile time */
        for (int k = 0; k < nin; k++) {
          int v = mn->in[k];
          if (v < 0) continue;
          int pnode = g->values[v].producer;
          if (g->values[v].kind == IR_VAL_ACT && pnode >= 0 && group[pnode] == i) continue;
          int dup = 0;
          for (int e = 0; e < u->n_ext; e++) dup |= u->ext[e] == v;
          if (!dup) cg_push(&u->ext, &u->n_ext, v);
        }
      }
    }
  }
  free(group);
  free(n_ext);
}

/* An update part's units in depth-first order from its last ones: each weight's
 * momentum (say) is updated right before the weight that reads it, while it is still
 * in cache, instead of every momentum before every weight. The same units, each after
 * the units it reads: the same bits. */
static void visit_unit(const cg_stage *st, const int *val_unit, char *seen, int u, cg_unit *out, int *n) {
  if (seen[u]) return;
  seen[u] = 1;
  const cg_unit *un = &st->units[u];
  for (int m = 0; m < un->n_nodes; m++) {
    const ir_node *nd = &st->g->nodes[un->nodes[m]];
    for (int k = 0; k < nd->n_in; k++)
      if (nd->in[k] >= 0 && val_unit[nd->in[k]] >= 0 && val_unit[nd->in[k]] != u)
        visit_unit(st, val_unit, seen, val_unit[nd->in[k]], out, n);
  }
  out[(*n)++] = *un;
}
static void order_update_units(cg_stage *st) {
  ir_graph *g = st->g;
  int nu = st->n_units, n = 0;
  int *val_unit = ir_xmalloc(sizeof(int) * ((size_t)g->n_values + 1));
  char *seen = ir_xcalloc((size_t)nu + 1, 1), *read = ir_xcalloc((size_t)nu + 1, 1);
  for (int v = 0; v < g->n_values; v++) val_unit[v] = -1;
  for (int u = 0; u < nu; u++)
    for (int m = 0; m < st->units[u].n_nodes; m++) {
      const ir_node *nd = &g->nodes[st->units[u].nodes[m]];
      for (int k = 0; k < nd->n_out; k++)
        if (nd->out[k] >= 0) val_unit[nd->out[k]] = u;
    }
  for (int u = 0; u < nu; u++)
    for (int m = 0; m < st->units[u].n_nodes; m++) {
      const ir_node *nd = &g->nodes[st->units[u].nodes[m]];
      for (int k = 0; k < nd->n_in; k++)
        if (nd->in[k] >= 0 && val_unit[nd->in[k]] >= 0 && val_unit[nd->in[k]] != u) read[val_unit[nd->in[k]]] = 1;
    }
  cg_unit *out = ir_xcalloc((size_t)nu + 1, sizeof(cg_unit));
  for (int u = 0; u < nu; u++)
    if (!read[u]) visit_unit(st, val_unit, seen, u, out, &n);
  for (int u = 0; u < nu; u++) visit_unit(st, val_unit, seen, u, out, &n);
  IR_ASSERT(n == nu);
  memcpy(st->units, out, sizeof(cg_unit) * (size_t)nu);
  free(out);
  free(val_unit);
  free(seen);
  free(read);
}

/* stage.h */
int cg_unit_reads(const cg_stage *st, const cg_unit *u, int d, int *same_shape_only, const ir_shape *y) {
  const ir_graph *g = st->g;
  int reads = 0;
  for (int m = 0; m < u->n_nodes; m++) {
    const ir_node *n = &g->nodes[u->nodes[m]];
    for (int k = 0; k < n->n_in; k++) {
      int x = n->in[k];
      if (x < 0 || st->root[x] != d) continue;
      reads = 1;
      const ir_shape *xs = &g->values[x].shape;
      if (y && (xs->rank != y->rank || memcmp(xs->dims, y->dims, sizeof(int64_t) * (size_t)xs->rank)))
        *same_shape_only = 0;
    }
  }
  return reads;
}

/* Value v, param d's new value, written straight into d's memory (no copy at the end of
 * the part): when no unit after v's own reads d, and v's unit, if it reads d, is
 * element-wise with no MatMul and reads d only in v's shape, so each element of d is read
 * in the iteration that writes it (codegen/c/emit.c drops restrict from that pair and
 * marks the loops PK_IVDEP). The same values in the same order: the same bits. */
static int inplace_writeback(const cg_stage *st, int v) {
  const ir_graph *g = st->g;
  const ir_value *x = &g->values[v];
  int d = x->writeback, U = st->def_unit[v];
  if (d < 0 || U < 0 || st->loc[v] != CG_LOC_NONE || st->root[v] != v || st->wl->off[d] == SIZE_MAX) return 0;
  const ir_value *dv = &g->values[d];
  if (dv->data_nchw || dv->dtype != x->dtype || dv->nbytes != (size_t)ir_value_bytes(x) || !dv->nbytes) return 0;
  for (int w = 0; w < g->n_values; w++)
    if (w != v && g->values[w].writeback == d && st->def_unit[w] >= 0) return 0;
  for (int u = U + 1; u < st->n_units; u++)
    if (cg_unit_reads(st, &st->units[u], d, NULL, NULL)) return 0;
  const cg_unit *un = &st->units[U];
  const ir_node *root = &g->nodes[un->root];
  int same = 1;
  if (!cg_unit_reads(st, un, d, &same, &x->shape)) return 1;
  if (un->alias || !cg_is_eltwise(g, root) || root->out[0] != v || !same) return 0;
  for (int m = 0; m < un->n_nodes; m++)
    if (g->nodes[un->nodes[m]].op == IR_OP_MatMul) return 0;
  return 1;
}

/* Locations: weights, stage inputs/outputs, alias roots, liveness, arena offsets.
 * Returns the arena bytes needed for values. */
static size_t plan_memory(cg_stage *st) {
  ir_graph *g = st->g;
  const cg_stage_info *si = st->si;
  int nv = g->n_values, s = st->s;
  for (int v = 0; v < nv; v++) {
    st->root[v] = v;
    st->def_unit[v] = -1;
    st->last_unit[v] = -1;
  }
  for (int k = 0; k < si->n_in[s]; k++) {
    st->loc[si->s_in[s][k]] = CG_LOC_IN;
    st->off[si->s_in[s][k]] = (size_t)k;
  }
  for (int k = 0; k < si->n_out[s]; k++) {
    int v = si->s_out[s][k];
    if (si->passthrough[v]) continue; /* a constant is copied out of the weights */
    st->loc[v] = CG_LOC_OUT;
    st->off[v] = (size_t)k;
  }
  /* constants: in the stage's parameter memory */
  for (int v = 0; v < nv; v++)
    if (st->wl->off[v] != SIZE_MAX && g->values[v].kind == IR_VAL_CONST) {
      st->loc[v] = CG_LOC_W;
      st->off[v] = st->wl->off[v];
    }
  /* liveness over units */
  for (int u = 0; u < st->n_units; u++) {
    cg_unit *un = &st->units[u];
    for (int m = 0; m < un->n_nodes; m++) {
      const ir_node *n = &g->nodes[un->nodes[m]];
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0) st->last_unit[n->in[k]] = u;
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0) {
          st->def_unit[n->out[k]] = u;
          if (st->last_unit[n->out[k]] < u) st->last_unit[n->out[k]] = u;
        }
    }
    if (un->alias) {
      const ir_node *n = &g->nodes[un->root];
      st->root[n->out[0]] = st->root[n->in[0]];
    }
  }
  /* write-backs are written in place, or copied into their params after the last unit */
  for (int v = 0; v < nv; v++)
    if (g->values[v].writeback >= 0 && st->def_unit[v] >= 0) {
      if (st->inplace && inplace_writeback(st, v)) {
        st->loc[v] = CG_LOC_P;
        st->off[v] = st->wl->off[g->values[v].writeback];
        continue;
      }
      st->last_unit[v] = st->n_units - 1;
      cg_push(&st->wb, &st->n_wb, v);
    }
  for (int v = 0; v < nv; v++)
    if (st->root[v] != v && st->last_unit[v] > st->last_unit[st->root[v]])
      st->last_unit[st->root[v]] = st->last_unit[v];
  /* arena: allocate outputs of each unit, then free what died at it */
  alloc_state a = {0};
  int **dying = ir_xcalloc((size_t)st->n_units + 1, sizeof(int *));
  int *n_dying = ir_xcalloc((size_t)st->n_units + 1, sizeof(int));
  for (int u = 0; u < st->n_units; u++) {
    cg_unit *un = &st->units[u];
    const ir_node *n = &g->nodes[un->root];
    if (un->alias) continue;
    /* fused members' outputs never reach memory; only the root's outputs do */
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0 || st->loc[v] != CG_LOC_NONE) continue;
      st->loc[v] = CG_LOC_A;
      st->off[v] = arena_alloc(&a, (size_t)ir_value_bytes(&g->values[v]));
      cg_push(&dying[st->last_unit[v]], &n_dying[st->last_unit[v]], v);
    }
    for (int d = 0; d < n_dying[u]; d++) arena_free(&a, st->off[dying[u][d]]);
  }
  for (int u = 0; u < st->n_units; u++) free(dying[u]);
  free(dying);
  free(n_dying);
  free(a.b);
  return cg_align_up(a.peak);
}

void cg_stage_open(cg_stage *st, ir_graph *g, const cg_plan *p, const cg_options *o, const cg_stage_info *si,
                   const cg_wlayout *wl, int s, int gemm_units, int inplace) {
  int nv = g->n_values;
  memset(st, 0, sizeof *st);
  st->g = g;
  st->p = p;
  st->o = o;
  st->si = si;
  st->wl = wl;
  st->s = s;
  st->inplace = inplace;
  st->stage = cg_part_stage(p, s);
  st->phase = cg_part_phase(p, s);
  st->loc = ir_xcalloc((size_t)nv + 1, sizeof(int));
  st->off = ir_xcalloc((size_t)nv + 1, sizeof(size_t));
  st->root = ir_xcalloc((size_t)nv + 1, sizeof(int));
  st->def_unit = ir_xcalloc((size_t)nv + 1, sizeof(int));
  st->last_unit = ir_xcalloc((size_t)nv + 1, sizeof(int));
  build_units(st, gemm_units);
  if (st->phase == IR_PHASE_UPD) order_update_units(st);
  st->arena = plan_memory(st);
}

void cg_stage_close(cg_stage *st) {
  for (int u = 0; u < st->n_units; u++) {
    free(st->units[u].nodes);
    free(st->units[u].ext);
  }
  free(st->units);
  free(st->wb);
  free(st->loc);
  free(st->off);
  free(st->root);
  free(st->def_unit);
  free(st->last_unit);
  memset(st, 0, sizeof *st);
}

int cg_stage_nodes(const ir_graph *g, const cg_plan *p, int stage, char *nm, size_t nm_len) {
  int first = -1, last = -1, count = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead && p->node_stage[i] == stage && (!p->train || g->nodes[i].phase == IR_PHASE_FWD)) {
      if (first < 0) first = i;
      last = i;
    }
  for (int i = 0; i < g->n_nodes; i++) count += !g->nodes[i].dead && p->node_stage[i] == stage;
  if (first >= 0) {
    char a[200], b[200];
    snprintf(nm, nm_len, "stage_%d (%s .. %s)", stage, ir_printable(g->nodes[first].name, 60, a, sizeof a),
             ir_printable(g->nodes[last].name, 60, b, sizeof b));
  } else snprintf(nm, nm_len, "stage_%d", stage);
  return count;
}
