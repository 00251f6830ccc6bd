/* antichain.h — down-sets, augmented antichains and cut sizes of a pass_dag.
 *
 * A stage split of a DAG into a linear pipeline is exactly a chain of nested
 * down-sets  {} = D0 < D1 < ... < Dp = V  (stage k = Dk \ Dk-1). Every such
 * stage is convex, and data only flows forward. The full antichain DAG (all
 * down-sets, PipeDream) can have 10^5+ states on branchy models, so the
 * planner uses the prefix down-sets of a topological order: state s = the
 * first s nodes of the order, s = 0..n. These n+1 states form a chain; every
 * prefix is a down-set, so every split into contiguous ranges of the order is
 * a valid convex linear pipeline. Cut sizes of all n+1 states are computed in
 * O(nodes + edges) with a difference array over tensor lifetimes.
 *
 * For small graphs (tests, reference optima) pass_downsets_enumerate lists
 * every down-set, i.e. the states of the full antichain DAG. The augmented
 * antichain of a down-set D (PipeDream) is the set of nodes of D with a
 * consumer outside D; pass_augmented_antichain returns it. */
#ifndef PIPECC_PASSES_ANTICHAIN_H
#define PIPECC_PASSES_ANTICHAIN_H

#include "passes/plan_dag.h"

typedef enum pass_order_kind {
    PASS_ORDER_INDEX = 0,   /* Kahn, smallest node id first (= creation order if topological) */
    PASS_ORDER_DFS = 1,     /* Kahn, most recently readied node first: finishes a branch
                               before starting the next, keeping cuts small */
    PASS_ORDER_LEVEL = 2,   /* by depth (longest path from a graph input), then id: advances all
                               parallel branches together (cuts across every branch) */
    PASS_ORDER_COUNT = 3
} pass_order_kind;

/* Prefix states along one topological order. Arrays indexed by state s = 0..n
 * hold prefix sums over order[0..s-1]. */
typedef struct pass_states {
    int n;                   /* nodes */
    pass_order_kind kind;
    int *order;              /* [n]   order[pos] = node id */
    int *pos;                /* [n]   pos[node] = position in order */
    double *fwd, *bwd;       /* [n+1] prefix sums of fwd_ms, bwd_ms */
    uint64_t *param, *act;   /* [n+1] prefix sums of param_bytes, act_bytes */
    uint64_t *cut;           /* [n+1] bytes crossing the cut after state s */
    uint64_t *cut_grad;      /* [n+1] same, excluding graph inputs (no gradient flows back) */
} pass_states;

/* Write a topological order of d into order[n_nodes]. Returns 0, -1 on a cycle. */
int pass_topo_order(const pass_dag *d, pass_order_kind kind, int *order);

/* Build the prefix states of order kind. Returns 0 or -1 (cycle / no memory). */
int pass_states_build(const pass_dag *d, pass_order_kind kind, pass_states *st);
void pass_states_free(pass_states *st);

/* Is in_set (in_set[node] != 0) a down-set (closed under predecessors)? */
int pass_is_downset(const pass_dag *d, const unsigned char *in_set);

/* Bytes crossing the cut after the down-set in_set (definition in plan_dag.h),
 * computed directly from the tensors; *grad_bytes (may be NULL) gets the part
 * not coming from graph inputs. */
uint64_t pass_cut_bytes(const pass_dag *d, const unsigned char *in_set, uint64_t *grad_bytes);

/* Does tensor t cross the cut between the down-set in_set and the rest? */
int pass_tensor_crosses(const pass_dag *d, int t, const unsigned char *in_set);

/* Augmented antichain of the down-set in_set: nodes in it having a consumer
 * outside it (or producing a graph output). Writes ids ascending into out,
 * returns the count. */
int pass_augmented_antichain(const pass_dag *d, const unsigned char *in_set, int *out);

/* All down-sets of a DAG with at most 64 nodes, as bitmasks (bit v = node v),
 * in order of increasing size then value (a topological order of the antichain
 * DAG: D < D' implies D listed first). Returns the count, or -1 if there are
 * more than max (or n_nodes > 64). */
long pass_downsets_enumerate(const pass_dag *d, uint64_t *out, long max);

#endif
