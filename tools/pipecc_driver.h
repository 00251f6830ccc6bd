/* tools/pipecc_driver.h - the phases of one pipecc run, in the order main() calls them
 * (tools/pipecc.c). Each phase returns 0 to go on, or the exit status to stop with (2: a
 * user or model error, said in one line; 3: an internal error). */
#ifndef PIPECC_TOOLS_PIPECC_DRIVER_H
#define PIPECC_TOOLS_PIPECC_DRIVER_H
#include "codegen/codegen.h"
#include "ir/ir.h"
#include "passes/plan/plan_ir.h"
#include "passes/train/autodiff.h"
#include "tools/pipecc_options.h"

#define PIPECC_MAX_CANDIDATES 64

typedef struct {
  pipecc_options *o;

  /* the micro-batch count (phase plan_microbatches) */
  int m;                                   /* being compiled for; 0 until bind picks the default */
  int trial;                               /* the default count is on trial: a failure gives it up */
  int search;                              /* the count is one of the search's candidates */
  int cand[PIPECC_MAX_CANDIDATES], n_cand; /* the search's counts, largest first */
  double cand_ms[PIPECC_MAX_CANDIDATES];   /* their predicted batch times; -1: no plan */
  char why[256];                           /* why a count on trial was given up */
  char cand_why[256];                      /* why the largest count that failed did */

  /* the model and its plan */
  ir_graph *g, *g_full; /* g_full: the model at the whole batch (passes/batch.h) */
  pass_planned pl;
  int have_pl;
  pass_plan_opts po;
  const pass_device *dev;
  pass_train_info tinfo;
  double t0;        /* when the model was loaded, for --time-passes' total */
  char dev_note[4400]; /* the device file the cost model used (tools/pipecc_calibrate.h), or "" */
  char costs[4800]; /* which costs the plan used (tools/pipecc_costs.h), printed above its table */

  /* the stages emitted (the plan's, or --split's) */
  cg_plan cp;
  cg_train ct;
  int *reps, *even_stage, *even_reps, *train_stage, *stage_recompute;
  cg_instr **progs;
  int *prog_len, n_progs;
} pipecc_run;

/* Loads the model and compiles it as far as the plan (for --emit=ir, as far as the
 * front end): at -m's count, or at the default one, which is on trial (a model that does
 * not split into it is compiled for one micro-batch, with a note) or, on cuda, chosen
 * by the micro-batch search. */
int pipecc_plan_microbatches(pipecc_run *r);
/* --emit=ir, --emit=ir-json, -d PASS without -o: prints the IR. */
int pipecc_print_ir(pipecc_run *r);
/* Writes DIR/plan.json and DIR/report.html; prints the plan table. */
int pipecc_write_plan(pipecc_run *r);
/* The stages to emit: the plan's, or --split even's. */
void pipecc_assign_stages(pipecc_run *r);
/* --train: the backward and update phases of every stage, and their instruction streams. */
int pipecc_train_program(pipecc_run *r);
/* Writes the stage sources, weights and build files into DIR. */
int pipecc_emit(pipecc_run *r);
/* Compiles DIR/pipeline (and DIR/profile for --profile-run). */
int pipecc_build(pipecc_run *r);
/* The closing lines: how to run what was built; --time-passes' total. */
void pipecc_report_done(const pipecc_run *r, int rc);
void pipecc_run_free(pipecc_run *r);

#endif
