/* codegen/c/split.c - a simple stage assignment used until the planner is connected:
 * contiguous node ranges in topological order (hence convex stages) with roughly
 * equal cost, where a node's cost is its FLOPs plus one (so FLOP-free nodes count). */
#include "codegen/codegen.h"

int cg_fallback_split(const ir_graph *g, int n_stages, int *node_stage) {
  int live = 0;
  double total = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead) {
      live++;
      total += (g->nodes[i].flops > 0 ? g->nodes[i].flops : 0) + 1;
    }
  if (n_stages < 1 || live < n_stages) return -1;
  double acc = 0;
  int s = 0, seen = 0, in_stage = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].dead) {
      node_stage[i] = s;
      continue;
    }
    double cost = (g->nodes[i].flops > 0 ? g->nodes[i].flops : 0) + 1;
    /* move to the next stage when this one has its share (by the node's midpoint),
     * or when every remaining node is needed to give each later stage one node */
    int left = live - seen;
    if (s < n_stages - 1 && in_stage > 0 &&
        ((acc + cost / 2) > total * (s + 1) / n_stages || left <= n_stages - 1 - s)) {
      s++;
      in_stage = 0;
    }
    node_stage[i] = s;
    acc += cost;
    seen++;
    in_stage++;
  }
  return s == n_stages - 1 ? 0 : -1;
}
