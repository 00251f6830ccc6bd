#include "passes/plan/plan_ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/diag.h"
#include "passes/train/autodiff.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A stable name for a node: its ONNX name, or Op_index when empty ("~k" appended while
 * that collides with a real node name, so plan.json's names stay unique). names is the
 * sorted array of the graph's non-empty node names. */
static const char *node_label(ir_graph *g, int i, const char **names, int n_names) {
  const ir_node *n = &g->nodes[i];
  if (n->name && *n->name) return n->name;
  const char *cand = ir_sprintf(g->arena, "%s_%d", n->op_type, n->index);
  for (int k = 1; bsearch(&cand, names, (size_t)n_names, sizeof *names, cmp_str); k++)
    cand = ir_sprintf(g->arena, "%s_%d~%d", n->op_type, n->index, k);
  return cand;
}

int pass_plan_graph(ir_graph *g, const pass_profile_opts *po, const pass_plan_opts *o, pass_planned *out) {
  memset(out, 0, sizeof *out);
  int n = g->n_nodes;
  out->costs = ir_xcalloc((size_t)n + 1, sizeof(pass_node_cost));
  out->node_stage = ir_xcalloc((size_t)n + 1, sizeof(int));
  if (pass_profile(g, po, out->costs)) return -1;

  pass_dag *d = &out->dag;
  pass_dag_init(d);
  int *tensor_of = ir_xmalloc(sizeof(int) * ((size_t)g->n_values + 1));
  for (int v = 0; v < g->n_values; v++) {
    tensor_of[v] = -1;
    const ir_value *val = &g->values[v];
    if (val->kind == IR_VAL_CONST) continue;
    int64_t b = ir_value_bytes(val);
    tensor_of[v] = pass_dag_add_tensor(d, val->name, b > 0 ? (uint64_t)b : 0);
    if (val->is_output) pass_dag_mark_output(d, tensor_of[v]);
  }
  const char **names = ir_xmalloc(sizeof(char *) * ((size_t)n + 1));
  int n_names = 0;
  for (int i = 0; i < n; i++)
    if (g->nodes[i].name && *g->nodes[i].name) names[n_names++] = g->nodes[i].name;
  qsort(names, (size_t)n_names, sizeof *names, cmp_str);
  int cap = 16, *ins = ir_xmalloc(sizeof(int) * (size_t)cap), *outs = ir_xmalloc(sizeof(int) * (size_t)cap);
  for (int i = 0; i < n; i++) {
    const ir_node *nd = &g->nodes[i];
    IR_ASSERT(!nd->dead);
    if (nd->n_in > cap || nd->n_out > cap) {
      cap = nd->n_in > nd->n_out ? nd->n_in : nd->n_out;
      ins = ir_xrealloc(ins, sizeof(int) * (size_t)cap);
      outs = ir_xrealloc(outs, sizeof(int) * (size_t)cap);
    }
    int ni = 0, no = 0;
    for (int k = 0; k < nd->n_in; k++) {
      int v = nd->in[k];
      if (v < 0 || tensor_of[v] < 0) continue;
      int dup = 0;
      for (int q = 0; q < ni; q++) dup |= ins[q] == tensor_of[v];
      if (!dup) ins[ni++] = tensor_of[v];
    }
    for (int k = 0; k < nd->n_out; k++)
      if (nd->out[k] >= 0) outs[no++] = tensor_of[nd->out[k]];
    const pass_node_cost *c = &out->costs[i];
    /* re-materialisation runs a forward node again in the backward, or keeps its outputs
     * (auto: what each of selective and full would do, for the planner to choose) */
    int fixed = o->training && o->recompute && o->recompute != PASS_PLAN_RC_AUTO;
    int keeps = fixed && pass_recompute_keeps(g, nd, o->recompute);
    double bwd = o->training ? c->bwd_ms + (fixed && !keeps ? c->fwd_ms : 0.0) : 0.0;
    int id = pass_dag_add_node(d, node_label(g, i, names, n_names), c->fwd_ms, bwd, c->param_bytes, c->out_bytes, ni,
                               ins, no, outs);
    IR_ASSERT(id == i);
    if (keeps) pass_dag_set_keep(d, id, c->out_bytes);
    if (o->training && o->recompute == PASS_PLAN_RC_AUTO) {
      int ks = pass_recompute_keeps(g, nd, PASS_RECOMPUTE_SELECTIVE),
          kf = pass_recompute_keeps(g, nd, PASS_RECOMPUTE_FULL);
      double ms[2] = {ks ? 0.0 : c->fwd_ms, kf ? 0.0 : c->fwd_ms};
      uint64_t kb[2] = {ks ? c->out_bytes : 0, kf ? c->out_bytes : 0};
      int set = pass_dag_set_recompute(d, id, ms, kb);
      IR_ASSERT(set == 0);
    }
    const ir_attr *fu = ir_attr_find(nd, "pipecc.fused_nodes");
    if (fu && fu->type == IR_ATTR_STRINGS && fu->n && pass_dag_set_fused(d, id, fu->n, fu->strings)) {
      ir_error(g, "planner: out of memory");
      return -1;
    }
  }
  free(ins);
  free(outs);
  free(tensor_of);
  free(names);
  char err[512];
  if (pass_dag_finalize(d, err, sizeof err)) {
    ir_error(g, "planner: %s", err);
    return -1;
  }
  double t0 = now_ms();
  if (pass_partition(d, o, &out->plan, err, sizeof err)) {
    ir_error(g, "%s", err);
    return -1;
  }
  out->antichain_partition_ms = now_ms() - t0;
  if (pass_schedule_attach(o, &out->plan, err, sizeof err)) {
    ir_error(g, "schedule: %s", err);
    return -1;
  }
  for (int s = 0; s < out->plan.n_stages; s++)
    for (int k = 0; k < out->plan.stages[s].n_nodes; k++) out->node_stage[out->plan.stages[s].nodes[k]] = s;
  return 0;
}

void pass_planned_free(pass_planned *p) {
  pass_plan_free(&p->plan);
  pass_dag_free(&p->dag);
  free(p->costs);
  free(p->node_stage);
  memset(p, 0, sizeof *p);
}
