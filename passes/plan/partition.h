/* partition.h — split a pass_dag into a linear pipeline of stages over g devices.
 *
 * Split space. A stage split is a chain of nested down-sets {} = D0 < D1 < ...
 * < Dp = V (stage k = Dk \ Dk-1: convex, data only flows forward); each stage
 * k gets r_k >= 1 data-parallel replicas (r_k = 1 with no_replicate), sum r_k
 * <= g, and the stages occupy devices 0,1,2,... contiguously in pipeline order
 * (host-major numbering: device d is GPU d % gpus_per_host of host d /
 * gpus_per_host). No stage is empty, g = 1 gives one stage. Two state spaces:
 *   - prefix orders: the Dk are prefixes of a topological order (antichain.h),
 *     for each of the orders in pass_plan_opts.orders (default: index, dfs,
 *     level): stages are contiguous ranges of one order;
 *   - all down-sets (states = PASS_STATES_AUTO, the default, when affordable):
 *     the Dk are any down-sets, i.e. every convex linear split.
 *
 * Cost model (per micro-batch, steady state; communication overlaps compute as
 * in PipeDream, so the pipeline's period is the slowest of its stages and links):
 *   stage time     = (fwd + bwd*training) * ceil(M/r)/M  +  training*(r>1)*allreduce(P, r)/M
 *                    (replica j runs the micro-batches with mb % r == j; r <= min(g, M))
 *   allreduce      = ring: 2(r-1)/r * P / bw + 2(r-1) * lat, over the intra-host link
 *                    if the r devices share a host, else the inter-host link
 *   boundary time  = lat + cut/bw  (+ lat + cut_grad/bw when training), over the link
 *                    between the last device of stage k and the first of stage k+1
 *   bottleneck     = max(max stage time, max boundary time)
 *   memory/device  = P*(1 + training*(1 + optimizer_state_factor))
 *                    + held * A,  must be <= mem_limit (if set), where held, the
 *                    micro-batches one replica holds at once (replicas take whole
 *                    micro-batches in turn), is 1 (inference), ceil(M/r) (GPipe),
 *                    min(ceil(M/r), floor(L/r) + 1) (1F1B; L = a + r - 1 with a =
 *                    g - f - r the devices after the stage, plus a - 1 when stages
 *                    may be replicated and a > 1: an upper bound of the stage's lead
 *                    in schedule.h, exact for one device per stage with all g used)
 *   with P, A, fwd, bwd the sums over the stage's nodes, cut the boundary bytes.
 *
 * Algorithm, prefix orders. For each order: bisection on the bottleneck T.
 * feasible(T) is a DP over (state j, devices m): F[j][m] = some i < j, r <= m
 * with F[i][m-r], boundary(i, at device m-r) <= T and stage(i..j, r, devices
 * [m-r, m)) <= T and memory ok. Stage time and memory are monotone in the
 * stage's extent, so for fixed (r, m) the valid i form a range [lo, j-1] whose
 * lo only grows with j: two pointers plus prefix counts answer each (j, m, r)
 * in O(1) amortised: O(n g^2) per check, ~40 checks (relative precision
 * 1e-10). Orders are solved one after another; a later order is only solved
 * when it can beat the best bottleneck so far by more than 1e-9 (one check).
 *
 * Algorithm, all down-sets (partition.c, "exact DP"). The antichain DAG is
 * enumerated (pass_downsets_build, at most exact_max_states states) and the
 * same DP runs over its states, ordered by work: for fixed (m, r) the stage
 * time is key(D) - key(D') + const with key linear and monotone under
 * inclusion, so the best D' below D is propagated up the antichain DAG's edges
 * instead of enumerating pairs: O(states + edges) per layer, with windows on
 * the work of each layer. The first check asks for a split clearly better
 * (1e-9) than the prefix result; only if one exists does a search follow
 * (bisection, each feasible check lowering T to its split's bottleneck and
 * followed by a probe just below it). The work is counted; past exact_work
 * (or when one check alone would exceed it) the prefix plan stands.
 *
 * Guarantee. The returned bottleneck is optimal (to relative 1e-9) under this
 * cost model over
 *   - ALL convex linear splits when plan.all_downsets (plan.json "states":
 *     "all-downsets"): every model whose antichain DAG has at most
 *     exact_max_states states and fits the work budget;
 *   - the prefix orders otherwise ("prefix-orders"), with tests/planner
 *     measuring the gap of that mode to the all-convex optimum.
 * Within the winning space, the split with the fewest devices found is
 * returned. Planning time is bounded either way: the enumeration by its state
 * and memory caps, the exact DP by its work budget (deterministic: the same
 * DAG and options give the same plan on any machine). */
#ifndef PIPECC_PASSES_PARTITION_H
#define PIPECC_PASSES_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "passes/plan/antichain.h"
#include "passes/plan/plan_dag.h"

typedef struct pass_topology {
  int hosts, gpus_per_host;        /* 0,0: one host holding all devices */
  double intra_gbps, intra_lat_ms; /* link between GPUs of one host (GB/s = 1e9 B/s) */
  double inter_gbps, inter_lat_ms; /* link between hosts */
} pass_topology;

typedef enum pass_schedule_kind { PASS_SCHED_GPIPE = 0, PASS_SCHED_1F1B = 1 } pass_schedule_kind;

/* Which split space the planner searches (pass_plan_opts.states). */
typedef enum pass_states_mode {
  PASS_STATES_AUTO = 0,  /* prefix orders, then all down-sets when within the budget */
  PASS_STATES_PREFIX = 1 /* prefix orders only */
} pass_states_mode;

/* Why the all-down-sets DP did or did not decide the plan (pass_plan.exact). */
typedef enum pass_exact_status {
  PASS_EXACT_RAN = 0,         /* ran to the end: optimal over all convex linear splits */
  PASS_EXACT_OFF,             /* disabled (PASS_STATES_PREFIX) */
  PASS_EXACT_TOO_MANY_STATES, /* more down-sets than exact_max_states (or its memory cap), or
                                 costs it cannot order (negative, not finite) */
  PASS_EXACT_OVER_BUDGET,     /* the DP would exceed / exceeded exact_work */
  PASS_EXACT_NO_MEMORY
} pass_exact_status;

/* pass_plan_opts.recompute and pass_stage.recompute (the values of autodiff.h's
 * PASS_RECOMPUTE_*): AUTO lets the planner choose each stage's mode. */
enum { PASS_PLAN_RC_NONE = 0, PASS_PLAN_RC_FULL = 1, PASS_PLAN_RC_SELECTIVE = 2, PASS_PLAN_RC_AUTO = 3 };

/* The asynchronous training schedules (docs/training.md), planned as 1F1B without a
 * flush: a stage holds N-k micro-batches whatever M, and N-k (pipedream), 1 (async),
 * 2 (spectrain: the latest and its prediction) or 2 (2bw) versions of its weights. */
enum { PASS_ASYNC_NONE = 0, PASS_ASYNC_PIPEDREAM, PASS_ASYNC_VANILLA, PASS_ASYNC_SPECTRAIN, PASS_ASYNC_2BW };
const char *pass_async_name(int mode); /* "pipedream", ...; NULL for NONE */
int pass_async_from_name(const char *name); /* PASS_ASYNC_*, NONE when unknown or NULL */
/* Stage k of N: weight versions it keeps; how many updates behind the latest the weights
 * its forward / backward read are (spectrain: 0, the prediction's distance ahead in
 * *ahead_fwd / *ahead_bwd, else 0). */
int pass_async_versions(int mode, int N, int k);
void pass_async_staleness(int mode, int N, int k, int *fwd, int *bwd, int *ahead_fwd, int *ahead_bwd);

typedef struct pass_plan_opts {
  int devices;             /* g >= 1 */
  int microbatches;        /* M >= 1 */
  int training;            /* 0: inference */
  int recompute;           /* training with re-materialisation (PASS_PLAN_RC_*): FULL or
                            * SELECTIVE: each recomputed node's backward time includes
                            * its forward again (pass_plan_graph), and a held micro-batch
                            * costs only the tensors the stage exchanges and its nodes'
                            * keep_bytes (pass_stage_memory). AUTO: each stage none,
                            * selective or full, from the nodes' rc_ms and rc_keep, as
                            * fits time and memory best; the prefix DP only */
  int no_replicate;        /* one device per stage */
  const char *device_word; /* what the report calls a device ("GPU", "core"); NULL: "device" */
  const char *io_json;     /* plan.json members written as they are after "version" (the driver's
                            * pipecc version, target, inputs and outputs); NULL: none */
  pass_schedule_kind schedule;
  int async_mode;                /* PASS_ASYNC_* (schedule 1F1B, training, no replicas) */
  pass_topology topo;
  uint64_t mem_limit;            /* bytes per device, 0 = unlimited */
  double optimizer_state_factor; /* optimizer bytes per parameter byte (Adam 2, SGD+momentum 1) */
  unsigned orders;               /* bitmask of 1u<<pass_order_kind to try; 0 = all */
  pass_states_mode states;       /* AUTO: also the exact DP over all down-sets, when affordable */
  long exact_max_states;         /* down-sets enumerated at most; 0 = PASS_EXACT_MAX_STATES */
  long exact_work;               /* work units of the exact DP at most; 0 = PASS_EXACT_WORK */
  /* pipecc's search of the default micro-batch count (plan.json reports it): the counts
   * tried and their predicted iteration times (< 0: did not compile); 0 = no search */
  int mb_search_n;
  const int *mb_search_m;
  const double *mb_search_ms;
} pass_plan_opts;

#define PASS_EXACT_MAX_STATES 60000L
#define PASS_EXACT_WORK 10000000L /* ~1.5-2 ns each: <= ~20 ms of one core */
#define PASS_EXACT_MAX_BYTES ((size_t)64 << 20)

/* Defaults: M = 4*g, inference, 1F1B, one host (NVLink-like 100 GB/s, 0.01 ms;
 * inter-host 12.5 GB/s, 0.02 ms), no memory limit, Adam (2). */
void pass_plan_opts_default(pass_plan_opts *o, int devices);

/* One tensor crossing one boundary. */
typedef struct pass_boundary_tensor {
  int tensor;         /* tensor id in the DAG */
  int producer_stage; /* -1 for a graph input */
  int last_stage;     /* last stage consuming it, n_stages for a graph output */
} pass_boundary_tensor;

typedef struct pass_stage {
  int id;
  int first, last; /* node positions [first, last) in the plan's order */
  int n_nodes;
  int *nodes;                      /* node ids, in order */
  int dev_first, replicas;         /* devices [dev_first, dev_first + replicas) */
  double fwd_ms, bwd_ms;           /* one micro-batch on one replica (every replica runs whole
                                      micro-batches; the stage's period is compute_ms) */
  double allreduce_ms;             /* one all-reduce of the stage's weights (0 if r = 1 or inference) */
  double compute_ms;               /* stage time of the cost model */
  double comm_ms;                  /* outgoing boundary time (0 for the last stage) */
  uint64_t param_bytes, act_bytes; /* sums over nodes (act per micro-batch, not / r) */
  uint64_t xch_bytes;              /* forward tensors received + sent per micro-batch (graph inputs
                                      and outputs included): what a held micro-batch keeps with
                                      recompute */
  uint64_t keep_bytes;             /* sum of the nodes' keep_bytes: with recompute, what a held
                                      micro-batch keeps besides xch_bytes */
  int recompute;                   /* the stage's re-materialisation (PASS_PLAN_RC_NONE, FULL or
                                      SELECTIVE; training) */
  int held;                        /* micro-batches the memory term has one replica hold at once
                                      (pass_stage_held: a bound under 1F1B) */
  uint64_t memory_bytes;           /* cost-model memory per device */
  uint64_t peak_memory_bytes;      /* simulated by pass_schedule_attach */
  /* boundary to the next stage */
  uint64_t out_bytes, out_grad_bytes;
  int n_out_tensors;
  pass_boundary_tensor *out_tensors;
} pass_stage;

typedef struct pass_instr pass_instr;
typedef struct pass_stream {
  int n, cap;
  pass_instr *v;
} pass_stream;

typedef struct pass_plan {
  int n_nodes;
  pass_order_kind order_kind;
  int *order; /* topological order the stages are ranges of */
  int n_stages;
  pass_stage *stages;
  int devices, devices_used, microbatches, training, recompute; /* recompute: pass_plan_opts'
                                                                   (training) */
  pass_schedule_kind schedule;
  int async_mode; /* pass_plan_opts' */
  double bottleneck_ms;  /* max over stage and boundary times */
  double lower_bound_ms; /* max(total work / g, largest node * ceil(M/r)/M, r = most replicas) */
  double gap;            /* bottleneck / lower bound - 1 */
  double planner_ms;     /* wall time of pass_partition */
  long feasibility_checks;
  int all_downsets; /* 1: the exact DP over every down-set ran: the bottleneck is
                       optimal over ALL convex linear splits; 0: over prefix orders */
  long state_count; /* down-sets (all_downsets) or prefix states of one order (n + 1) */
  long downsets;    /* down-sets enumerated, -1 if over the cap, 0 if not tried */
  pass_exact_status exact;
  int exact_improved; /* the plan comes from the exact DP (beat the prefix orders) */
  long exact_work;    /* work units the exact DP spent (deterministic; ~1-2 ns each) */
  /* filled by pass_schedule_attach (schedule.h) */
  pass_stream *streams; /* [n_stages] */
  double predicted_iteration_ms, bubble_fraction, single_device_ms, predicted_speedup;
} pass_plan;

/* Plan d. Returns 0, or -1 with a message in err (bad options, does not fit in
 * memory). The schedule fields are left empty: call pass_schedule_attach. */
int pass_partition(const pass_dag *d, const pass_plan_opts *o, pass_plan *plan, char *err, size_t errlen);
void pass_plan_free(pass_plan *plan);

/* ---- the cost model, shared by the DP, the plan and the tests ---------------- */

/* Aggregate of one stage. */
typedef struct pass_stage_agg {
  double fwd_ms, bwd_ms;
  uint64_t param_bytes, act_bytes;
  int dev_first, replicas;
  uint64_t in_bytes, out_bytes; /* per micro-batch, the forward tensors crossing the cut before
                                 * the stage (graph inputs for the first) and after it (graph
                                 * outputs for the last); read by the memory term with recompute */
  uint64_t keep_bytes;          /* sum of the nodes' keep_bytes (recompute) */
  int recompute;                /* the stage's mode when the options' is AUTO */
} pass_stage_agg;

int pass_device_host(const pass_topology *t, int dev);
/* Transfer of bytes between devices a and b (lat + bytes/bw). */
double pass_link_ms(const pass_topology *t, int a, int b, uint64_t bytes);
/* Ring all-reduce of bytes over devices [first, first+r). */
double pass_allreduce_ms(const pass_topology *t, int first, int r, uint64_t bytes);
double pass_stage_time(const pass_plan_opts *o, const pass_stage_agg *s);
/* Replicas take whole micro-batches in turn (replica j runs those with mb % r == j,
 * as the runtime does): the busiest one runs ceil(M / r) of the M, so a stage's
 * period per micro-batch is its time on one device times ceil(M / r) / M. */
double pass_replica_share(int microbatches, int replicas);
/* The most replicas a stage may get: 1 with no_replicate, else min(devices, M)
 * (more replicas than micro-batches would idle). */
int pass_max_replicas(const pass_plan_opts *o);
/* Boundary whose receiving stage starts at device dev_next (sender: dev_next-1). */
double pass_boundary_time(const pass_plan_opts *o, int dev_next, uint64_t bytes, uint64_t grad_bytes);
/* Micro-batches one replica of a stage on devices [dev_first, dev_first + replicas) holds
 * at once between their forward and their backward: 1 for inference. */
uint64_t pass_stage_held(const pass_plan_opts *o, int dev_first, int replicas);
/* Memory per device of a stage whose devices end at dev_first + replicas: the weights
 * (with gradients and optimizer state when training; with an asynchronous schedule, each
 * further weight version it keeps, the stages counted as the devices) plus held x
 * act_bytes; with
 * recompute, act_bytes (the micro-batch whose backward runs, its forward recomputed)
 * plus (held - 1) x (in_bytes + out_bytes + keep_bytes), what each other held
 * micro-batch keeps. */
uint64_t pass_stage_memory(const pass_plan_opts *o, const pass_stage_agg *s);

#endif
