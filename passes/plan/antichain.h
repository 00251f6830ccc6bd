/* antichain.h — down-sets, augmented antichains and cut sizes of a pass_dag.
 *
 * A stage split of a DAG into a linear pipeline is exactly a chain of nested
 * down-sets  {} = D0 < D1 < ... < Dp = V  (stage k = Dk \ Dk-1). Every such
 * stage is convex, and data only flows forward. Two state spaces:
 *
 *   - prefix states (pass_states): the prefix down-sets of a topological
 *     order, state s = the first s nodes, s = 0..n. These n+1 states form a
 *     chain; every split into contiguous ranges of the order is a valid convex
 *     linear pipeline. Cut sizes of all n+1 states are computed in
 *     O(nodes + edges) with a difference array over tensor lifetimes.
 *   - the antichain DAG (pass_downsets): every down-set, with its edges
 *     D \ {v} -> D, enumerated under a state and memory budget (exponential on
 *     wide graphs: ~10^4 states for Inception-v3, 10^2 for ResNets, 4^12 for
 *     twelve parallel chains of three).
 *
 * pass_downsets_enumerate lists every down-set of a graph of <= 64 nodes as
 * bitmasks (tests, reference optima). The augmented antichain of a down-set D
 * (PipeDream) is the set of nodes of D with a consumer outside D;
 * pass_augmented_antichain returns it. */
#ifndef PIPECC_PASSES_ANTICHAIN_H
#define PIPECC_PASSES_ANTICHAIN_H

#include "passes/plan/plan_dag.h"

typedef enum pass_order_kind {
  PASS_ORDER_INDEX = 0, /* Kahn, smallest node id first (= creation order if topological) */
  PASS_ORDER_DFS = 1,   /* Kahn, most recently readied node first: finishes a branch
                           before starting the next, keeping cuts small */
  PASS_ORDER_LEVEL = 2, /* by depth (longest path from a graph input), then id: advances all
                           parallel branches together (cuts across every branch) */
  PASS_ORDER_COUNT = 3, /* the orders above (the prefix DP tries them) */
  PASS_ORDER_CHAIN = 4  /* not an order the DP tries: the stages of a plan found over all
                           down-sets, concatenated (each stage in index order) */
} pass_order_kind;

/* Prefix states along one topological order. Arrays indexed by state s = 0..n
 * hold prefix sums over order[0..s-1]. */
typedef struct pass_states {
  int n; /* nodes */
  pass_order_kind kind;
  int *order;            /* [n]   order[pos] = node id */
  int *pos;              /* [n]   pos[node] = position in order */
  double *fwd, *bwd;     /* [n+1] prefix sums of fwd_ms, bwd_ms */
  uint64_t *param, *act; /* [n+1] prefix sums of param_bytes, act_bytes */
  uint64_t *keep;        /* [n+1] prefix sums of keep_bytes */
  double *rcw[2];        /* [n+1] prefix sums of rc_ms[q] */
  uint64_t *rck[2];      /* [n+1] prefix sums of rc_keep[q] */
  uint64_t *cut;         /* [n+1] bytes crossing the cut after state s */
  uint64_t *cut_grad;    /* [n+1] same, excluding graph inputs (no gradient flows back) */
} pass_states;

/* Write a topological order of d into order[n_nodes] (kind < PASS_ORDER_COUNT).
 * Returns 0, -1 on a cycle. */
int pass_topo_order(const pass_dag *d, pass_order_kind kind, int *order);

/* Build the prefix states of order kind. Returns 0 or -1 (cycle / no memory). */
int pass_states_build(const pass_dag *d, pass_order_kind kind, pass_states *st);
/* Same, for a given topological order[n_nodes] (copied); st->kind = kind.
 * Returns 0 or -1 (no memory). */
int pass_states_from_order(const pass_dag *d, const int *order, pass_order_kind kind, pass_states *st);
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

/* The antichain DAG of any DAG: every down-set (its states), with costs, cut
 * sizes and its edges, enumerated under a budget.
 *
 * Down-sets are generated once each by reverse search over the index order:
 * the parent of D != {} is D minus its node of largest position (always a
 * maximal node), and the children of D add a ready node positioned after all
 * of D. No duplicate is ever produced, so nothing is hashed or compared; a
 * state is stored as (parent, added node): 8 bytes, whatever the graph size
 * (pass_downset_members expands it). Sums and cut sizes are updated
 * incrementally, O(degree) per state.
 *
 * Edges. A down-set is determined by its antichain of maximal nodes; for each
 * maximal v of D, lower[lower_start[s] .. lower_start[s+1]) holds the state
 * D \ {v}: the antichain DAG's edges D \ {v} -> D, reversed. They are derived
 * without search: with D = P + u, v = u gives P, any other v is maximal in P
 * and D \ {v} is the child (P \ {v}) + u. Every down-set D' < D is reachable
 * from D along these edges through down-sets containing D'.
 *
 * Order. States are listed by increasing key (sum of weight[v], added in
 * position order, which makes the floating-point sum exactly monotone under
 * inclusion: D' < D implies key(D') <= key(D)), then size: a topological order
 * of the antichain DAG, so every lower[] entry of s is < s. State 0 is {}, the
 * last one is V.
 *
 * Budget. The enumeration stops (returns -1, ds empty) past max_states states
 * or max_bytes of memory (0: no byte cap), or if a weight or time is negative
 * or not finite. Cost: O(states * (degree + n/64)) time, ~180 bytes a state
 * while building (arrays are sized for the cap up front; untouched pages cost
 * nothing), ~68 + 4 per edge kept. */
typedef struct pass_downsets {
  int n;                    /* nodes */
  long count;               /* states */
  int *order, *pos;         /* [n] the index order (reverse search) and its inverse */
  int *parent;              /* [count] parent state (-1 for {}) */
  int *added;               /* [count] node id added to the parent (-1 for {}) */
  int *size;                /* [count] nodes in the down-set */
  double *key;              /* [count] sum of weight (fwd_ms when weight is NULL) */
  uint64_t *param, *act;    /* [count] sums of param_bytes, act_bytes */
  uint64_t *keep;           /* [count] sums of keep_bytes */
  uint64_t *cut, *cut_grad; /* [count] bytes crossing the cut after the down-set (plan_dag.h) */
  int *lower_start;         /* [count + 1] */
  int *lower;               /* [edges] states D \ {v}, v maximal in D */
  long edges;
} pass_downsets;

long pass_downsets_build(const pass_dag *d, const double *weight, long max_states, size_t max_bytes, pass_downsets *ds);
void pass_downsets_free(pass_downsets *ds);
/* in[v] = 1 for the nodes of state s, 0 otherwise (in has n entries). O(n). */
void pass_downset_members(const pass_downsets *ds, long s, unsigned char *in);

#endif
