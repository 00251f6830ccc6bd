/* pipert_profile.h - per-node timing of a one-stage cpu build (`pipecc --target cpu
 * --profile-run`, DIR/profile), in libpipert (runtime/rt_profile.c).
 *
 * Stage code marks the start of unit u with PK_UNIT(u) and the end of forward() with
 * PK_UNIT(n_units); compiled with -DPIPECC_PROFILE the marks call
 * pipert_profile_mark, otherwise they are no-ops. A unit is one node or a fused
 * element-wise tree (codegen/stage.h); its time is split evenly over its nodes.
 *
 * DIR/profile is profile_main.c (emitted: the unit table) + stage_0.c built with
 * -DPIPECC_PROFILE + libpipert; its main is pipert_profile_main:
 *
 *   profile [--profile-out FILE.json] [--warmup N] [--reps N] [--weights-dir DIR] [-v]
 *
 * runs forward() on one micro-batch of fixed pseudo-random inputs (floats uniform in
 * [-1, 1), other types 0) with one BLAS thread, N warm-up runs then --reps timed runs,
 * and writes the median time of every node in the format `pipecc --profile` reads:
 *   {"device": "...", "warmup": N, "reps": R, "nodes": {NAME: {"fwd_ms": X}}, "total_ms": T}
 * (stdout without --profile-out). -v lists the units by time on stderr. */
#ifndef PIPERT_PROFILE_H
#define PIPERT_PROFILE_H

#ifdef __cplusplus
extern "C" {
#endif

struct pipert_stage_desc;

/* The unit table of stage 0: unit u has unit_n_nodes[u] nodes, whose names are the
 * next unit_n_nodes[u] entries of node_names ("" for an unnamed node); unit_labels[u]
 * describes the unit ("node 47: Conv '/conv1/Conv'"). */
typedef struct pipert_profile_units {
  int n_units;
  const int *unit_n_nodes;
  const char *const *node_names;
  const char *const *unit_labels;
} pipert_profile_units;

void pipert_profile_mark(int unit);
int pipert_profile_main(int argc, char **argv, const struct pipert_stage_desc *d, const pipert_profile_units *u);

#ifdef __cplusplus
}
#endif
#endif
