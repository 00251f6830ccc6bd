/* passes/plan/plan_ir.h - plan an IR graph: profile -> planner DAG -> partition -> schedule.
 *
 * The planner itself (antichain.c, partition.c, schedule.c) works on an abstract DAG
 * (plan_dag.h); this is the adapter from the IR. DAG node k is IR node k (the graph
 * is compacted: no dead nodes); DAG tensors are the graph inputs and node outputs
 * (constants are not tensors: each stage holds its own copy of the weights it reads). */
#ifndef PIPECC_PASSES_PLAN_IR_H
#define PIPECC_PASSES_PLAN_IR_H
#include "ir/ir.h"
#include "passes/plan/partition.h"
#include "passes/plan/plan_dag.h"
#include "passes/plan/profile.h"
#include "passes/plan/schedule.h"

typedef struct {
  pass_dag dag;
  pass_plan plan;
  pass_node_cost *costs; /* [n_nodes] */
  int *node_stage;       /* [n_nodes] */
  double antichain_partition_ms;
} pass_planned;

/* Returns 0, or -1 after printing one error line (naming the model). */
int pass_plan_graph(ir_graph *g, const pass_profile_opts *po, const pass_plan_opts *o, pass_planned *out);
void pass_planned_free(pass_planned *p);
#endif
