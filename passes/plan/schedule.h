/* schedule.h — per-stage static instruction streams, a deadlock checker, and a
 * discrete-event simulation of GPipe and 1F1B.
 *
 * Streams (stage k of p, M micro-batches, training):
 *   GPipe: for mb 0..M-1: [RECV_ACT] FWD [SEND_ACT];  for mb 0..M-1: [RECV_GRAD] BWD [SEND_GRAD];
 *          [ALLREDUCE] STEP
 *   1F1B : w = min(L_k, M) warm-up forwards, then M-w steady (FWD mb w+i, BWD mb i),
 *          then the w remaining backwards; [ALLREDUCE] STEP. The lead L_k: L_{p-1} = 0,
 *          L_k = L_{k+1} + r_{k+1} rounded up to a multiple of r_k (r: replicas;
 *          p - k - 1 with one device per stage). Why: in a stall-free steady state of
 *          period T per micro-batch, a replica of stage k (r_k devices, each running
 *          every r_k-th micro-batch) starts a forward every r_k T and the backward of
 *          micro-batch i lags its forward by the round trip through the later stages,
 *          L_k T plus the forward itself; the backwards fill the gaps between the
 *          replica's forwards only when that lag is a multiple of r_k T. With any other
 *          lead they collide and the stage stalls (stage 1 of replicas 1, 2, 1 with
 *          L = 3, 2, 0: 48 T for 32 micro-batches; with 4, 2, 0: 35 T; a search over
 *          all leads found nothing better on the tests' cases, tests/planner).
 *   Inference (either): for mb: [RECV_ACT] FWD [SEND_ACT].
 * RECV_* of stage 0 / SEND_ACT of the last stage are omitted; ALLREDUCE only
 * when the stage has replicas > 1.
 *
 * Transport semantics assumed by the checker and the simulator: a SEND is
 * asynchronous (enqueued; the link delivers messages in order), a RECV blocks
 * until the matching message has arrived. */
#ifndef PIPECC_PASSES_SCHEDULE_H
#define PIPECC_PASSES_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "passes/plan/partition.h"

typedef enum pass_op {
  PASS_OP_FWD = 0,
  PASS_OP_BWD,
  PASS_OP_SEND_ACT,  /* to stage k+1 */
  PASS_OP_RECV_ACT,  /* from stage k-1 */
  PASS_OP_SEND_GRAD, /* to stage k-1 */
  PASS_OP_RECV_GRAD, /* from stage k+1 */
  PASS_OP_ALLREDUCE,
  PASS_OP_STEP
} pass_op;

struct pass_instr {
  pass_op op;
  int mb; /* micro-batch, -1 for ALLREDUCE / STEP */
};

const char *pass_op_name(pass_op op);

/* Build p streams (caller-allocated array of p, zeroed). Returns 0, -1 on no memory.
 * replicas may be NULL (all 1). */
int pass_schedule_build(pass_schedule_kind kind, int p, int m, int training, const int *replicas, pass_stream *streams);
/* Append one instruction to a stream. Returns 0, -1 on no memory. */
int pass_stream_push(pass_stream *s, pass_op op, int mb);
void pass_streams_free(pass_stream *streams, int p);

/* Check p streams: every send is received by the neighbour, in the same order
 * (same micro-batches), nothing is left unreceived, no instruction addresses a
 * neighbour that does not exist, and an execution with asynchronous sends
 * finishes (no stage waits forever). With replicas (NULL: all 1), stage k runs as
 * replicas[k] streams, replica j taking the micro-batches with mb % replicas[k] == j
 * (the runtime's rule), each pair of replicas of neighbouring stages a link of its
 * own. Returns 0, or -1 with the reason in err. */
int pass_schedule_check(int p, const pass_stream *streams, const int *replicas, char *err, size_t errlen);

/* Per-stage costs for the simulation. A stage with replicas > 1 is simulated as that
 * many devices, replica j running the stream's micro-batches with mb % replicas == j
 * (as the runtime does), each FWD/BWD taking the full time below, the ALLREDUCE
 * starting once every replica reached it and ending for all at once. */
typedef struct pass_sim_stage {
  double fwd_ms, bwd_ms; /* one micro-batch on one replica */
  int replicas;          /* 0 or 1: one device */
  double act_xfer_ms;    /* SEND_ACT of this stage to stage k+1 */
  double grad_xfer_ms;   /* SEND_GRAD of this stage to stage k-1 */
  double allreduce_ms, step_ms;
  uint64_t static_bytes; /* weights (+ grads + optimizer state) */
  uint64_t act_bytes;    /* stashed per in-flight micro-batch */
  int recompute;         /* re-materialisation: work_bytes are the activations of the micro-batch */
  uint64_t work_bytes;   /* whose backward runs, act_bytes what each other one keeps */
} pass_sim_stage;

/* One timed instruction of the simulation: FWD, BWD, ALLREDUCE (mb -1) on a replica,
 * or SEND_ACT/SEND_GRAD as the link's busy interval. */
typedef struct pass_sim_span {
  int stage, replica;
  pass_op op;
  int mb;
  double t0, t1;
} pass_sim_span;

typedef struct pass_sim_result {
  double iteration_ms;    /* time until every stage has finished its stream */
  double bubble_fraction; /* 1 - sum of FWD/BWD busy time / (devices * iteration_ms) */
  int *peak_inflight;     /* [p] micro-batches whose activations one replica holds at once */
  uint64_t *peak_bytes;   /* [p] static + peak_inflight * act_bytes (per device); with recompute,
                             static + work_bytes + (peak_inflight - 1) * act_bytes */
  double *busy_ms;        /* [p] FWD/BWD time summed over the stage's replicas */
  pass_sim_span *spans;   /* in the order they were simulated */
  int n_spans, cap_spans;
} pass_sim_result;

/* Simulate; arrays in res are allocated (free with pass_sim_result_free). Each
 * link direction carries one message at a time. Returns 0, -1 if the streams
 * do not pass pass_schedule_check. */
int pass_schedule_simulate(int p, const pass_stream *streams, const pass_sim_stage *cost, pass_sim_result *res);
void pass_sim_result_free(pass_sim_result *res);

/* The simulation costs of plan's stages (c: n_stages entries): times from the plan,
 * transfers over the link between the last device of stage k and the first of k+1. */
void pass_schedule_costs(const pass_plan_opts *o, const pass_plan *plan, pass_sim_stage *c);

/* Build, check and simulate plan's schedule; fills plan->streams,
 * predicted_iteration_ms, bubble_fraction, single_device_ms (M micro-batches
 * of the whole model on one device, no communication), predicted_speedup and
 * each stage's peak_memory_bytes. Returns 0, or -1 with err. */
int pass_schedule_attach(const pass_plan_opts *o, pass_plan *plan, char *err, size_t errlen);

#endif
