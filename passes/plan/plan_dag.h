/* plan_dag.h — the abstract DAG the planner works on.
 *
 * The planner (antichain, partition, schedule, plan_json) never looks at the IR.
 * An adapter turns an ir graph plus its profile into this DAG:
 *
 *   - a node is one operator with a cost: forward and backward time per
 *     micro-batch (ms), parameter bytes (weights the node owns) and activation
 *     bytes (what the node keeps alive per micro-batch until its backward runs);
 *   - a tensor is an edge: one producer (a node, or -1 for a graph input), any
 *     number of consumers, a size in bytes per micro-batch, and an is_output flag.
 *
 * Cut semantics (used everywhere in the planner): graph inputs enter the
 * pipeline at stage 0 and graph outputs leave it at the last stage. A tensor
 * crosses the cut after a down-set D iff it is produced in D (or is a graph
 * input) and some consumer is outside D (or it is a graph output). A tensor
 * used on both sides of several cuts is therefore sent across, and charged at,
 * every boundary between its producer and its last consumer.
 *
 * Build a DAG with the functions below (implemented in antichain.c); all names
 * are copied; ids are dense, in creation order. */
#ifndef PIPECC_PASSES_PLAN_DAG_H
#define PIPECC_PASSES_PLAN_DAG_H

#include <stddef.h>
#include <stdint.h>

typedef struct pass_dag_node {
  char *name;
  double fwd_ms;        /* forward time per micro-batch */
  double bwd_ms;        /* backward time per micro-batch (training) */
  uint64_t param_bytes; /* weights owned by the node */
  uint64_t act_bytes;   /* activations stashed per micro-batch until BWD */
  uint64_t keep_bytes;  /* with re-materialisation: what the node keeps per micro-batch all the
                           same (its outputs when the backward does not recompute it); 0 unless
                           set by pass_dag_set_keep */
  double rc_ms[2];      /* re-materialisation chosen per stage (auto): the backward time a */
  uint64_t rc_keep[2];  /* stage adds, and the bytes kept, with [0] selective, [1] full */
  int n_inputs, n_outputs;
  int *inputs;  /* tensor ids */
  int *outputs; /* tensor ids */
  int n_fused;  /* nodes a pass merged into this one (a Conv's Add and Relu), */
  char **fused; /* listed in plan.json; the planner ignores them */
} pass_dag_node;

typedef struct pass_dag_tensor {
  char *name;
  uint64_t bytes; /* per micro-batch */
  int producer;   /* node id, -1 for a graph input */
  int is_output;  /* graph output */
  int n_consumers;
  int *consumers; /* node ids, ascending, no duplicates */
} pass_dag_tensor;

typedef struct pass_dag {
  int n_nodes, n_tensors;
  pass_dag_node *nodes;
  pass_dag_tensor *tensors;
  int cap_nodes, cap_tensors;
  int finalized;
} pass_dag;

/* Start an empty DAG. */
void pass_dag_init(pass_dag *d);
/* Add a tensor; returns its id. Graph input until a node lists it as output. */
int pass_dag_add_tensor(pass_dag *d, const char *name, uint64_t bytes);
/* Mark tensor t as a graph output. */
void pass_dag_mark_output(pass_dag *d, int t);
/* Add a node consuming `in` and producing `out` (tensor ids); returns its id,
 * or -1 if an output tensor already has a producer or an id is out of range. */
int pass_dag_add_node(pass_dag *d, const char *name, double fwd_ms, double bwd_ms, uint64_t param_bytes,
                      uint64_t act_bytes, int n_in, const int *in, int n_out, const int *out);
/* Set node id's keep_bytes. Returns 0, or -1 (no such node). */
int pass_dag_set_keep(pass_dag *d, int id, uint64_t keep_bytes);
/* Set node id's rc_ms and rc_keep. Returns 0, or -1 (no such node, a time < 0). */
int pass_dag_set_recompute(pass_dag *d, int id, const double ms[2], const uint64_t keep[2]);
/* Record the names of the nodes merged into node id (copied). Returns 0, or -1. */
int pass_dag_set_fused(pass_dag *d, int id, int n, const char *const *names);
/* Build consumer lists and check the graph is acyclic. Returns 0, or -1 with a
 * message in err. Must be called before any planner pass. */
int pass_dag_finalize(pass_dag *d, char *err, size_t errlen);
void pass_dag_free(pass_dag *d);

#endif
