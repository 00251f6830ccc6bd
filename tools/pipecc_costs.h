/* tools/pipecc_costs.h - the costs a plan balances: measured on this machine by default,
 * where the target runs here (the cpu target; a graph planned over several devices), or
 * the analytical cost model (passes/plan/profile.h).
 *
 * Measured costs come from the per-node profiler pipecc already builds for --profile-run
 * (codegen/c/profile.c, runtime/pipert_profile.h): the optimised graph at the plan's
 * micro-batch size is emitted as one stage into DIR/.pipecc-profile, compiled with
 * -DPIPECC_PROFILE and run once (1 warm-up, 3 timed runs, one thread); the folder is
 * removed afterwards. The profile JSON is cached in $XDG_CACHE_HOME/pipecc/profiles
 * (default ~/.cache/pipecc/profiles), written atomically (a temporary file renamed),
 * under a key that hashes:
 *   - the model file's bytes;
 *   - the optimised IR at the micro-batch size (its nodes, shapes and constants: the
 *     bindings and the flags that change the emitted code show in it), and those flags
 *     (--no-fuse, --winograd, --no-tf32);
 *   (bytes past 1 MiB, a file or a constant, are hashed by their length and 64 samples:
 *   a node's time does not depend on weight values, and the structure is hashed in full)
 *   - the machine: /proc/cpuinfo's model name and flags, $OPENBLAS_CORETYPE;
 *   - pipecc's version and the C compiler and flags of the stage code.
 * A hit reads the file and profiles nothing.
 *
 * The analytical path is taken with --cost-model or PIPECC_COSTS=model in the
 * environment, for --train (the profiler times forward nodes), for the cuda target, for
 * --device NAME other than cpu (a plan for that device), for --split even, and for
 * -g 1 (one device: nothing to balance); --profile FILE takes that file. A profiler that
 * fails to build or run gives a warning, and the plan is made on the cost model. */
#ifndef PIPECC_TOOLS_PIPECC_COSTS_H
#define PIPECC_TOOLS_PIPECC_COSTS_H
#include <stddef.h>

#include "tools/pipecc_driver.h"

typedef struct {
  char path[4352]; /* the profile JSON to plan with; empty: the cost model */
  char dir[4200];  /* a profiling folder to remove once planned (cache not writable); empty: none */
  char line[4800]; /* what the plan used, for the one line pipecc prints */
} pipecc_costs;

/* Decides the costs of r's plan and, on a cache miss, profiles. Returns 0 (c filled). */
int pipecc_costs_get(pipecc_run *r, pipecc_costs *c);
/* The graph as one stage into dir (removed first), built with the profiler and run:
 * dir/profile.json. Returns 0, or -1 after saying why. */
int pipecc_profile_graph(ir_graph *g, const pipecc_options *o, const char *dir);
/* Runs dir/profile again (1 warm-up, 3 timed runs), rewriting dir/profile.json. 0 or -1. */
int pipecc_run_profiler(const char *dir, int verbose);
/* mkdir -p; rm -rf (no links followed). */
int pipecc_mkdir_p(const char *dir);
void pipecc_rm_rf(const char *dir);
/* Removes c->dir if set. */
void pipecc_costs_done(pipecc_costs *c);

#endif
