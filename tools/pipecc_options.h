/* tools/pipecc_options.h - the pipecc command line: every option in one struct, parsed
 * and checked by pipecc_options_parse (tools/pipecc_options.c, with the usage text
 * beside the parser). */
#ifndef PIPECC_TOOLS_PIPECC_OPTIONS_H
#define PIPECC_TOOLS_PIPECC_OPTIONS_H
#include <stdint.h>
#include <stdio.h>

#include "passes/pass.h"
#include "passes/plan/partition.h"
#include "passes/plan/profile.h"
#include "passes/train/autodiff.h"

#define PIPECC_MAX_DUMPS 16

typedef struct {
  /* input */
  const char *model;
  pass_opts pass; /* bindings (--shape, -d, --const, --seq, --none), verbose, training */

  /* planning */
  int devices;      /* -g */
  int microbatches; /* -m N; 0: the default (see m_auto, m_max) */
  int m_auto;       /* -m auto: the micro-batch search on either target */
  int m_max;        /* -m max: the largest count on either target */
  pass_schedule_kind schedule;
  const char *async_schedule; /* --schedule pipedream|async|spectrain|2bw (planned as 1F1B), else NULL */
  const char *device_name, *profile_path, *link_name, *inter_link_name;
  int hosts, gpus_per_host;                        /* --topology; 0: one host */
  double intra_bw, intra_lat, inter_bw, inter_lat; /* < 0: the link's own */
  uint64_t mem_limit;                              /* 0: the device's */
  int no_replicate, no_tf32;
  const char *calibrate; /* --calibrate[=FILE]: "" or FILE; NULL: not asked (tools/pipecc_calibrate.h) */
  int cost_model; /* --cost-model: the analytical costs, not measured ones (tools/pipecc_costs.h) */

  /* training */
  int train;      /* --train or --train-step */
  int train_step; /* --train-step: one step as a function */
  int train_prog; /* --train: the pipelined training program */
  pass_train_opts train_opts;

  /* output */
  const char *out_dir, *target, *emit, *cuda_arch;
  int target_given, plan_only, emit_only, profile_run, jobs;
  int no_fuse, winograd, layout_nchw, layout_all;
  int want_plan; /* plan and emit (not --emit=ir) */

  /* debugging */
  const char *dumps[PIPECC_MAX_DUMPS]; /* -d PASS */
  int n_dumps, time_passes;
  int quiet;      /* -q: errors only */
  int split_even; /* --split even (or PIPECC_SPLIT=even): g stages of about equal FLOPs */

  char *cmdline; /* the command line, for the header of every emitted file */
} pipecc_options;

/* Parses and checks argv into *o (which it owns until pipecc_options_free). Returns -1
 * to go on, or the exit status to stop with: 0 after --help or --version, 2 after one
 * line on stderr naming the bad option. */
int pipecc_options_parse(int argc, char **argv, pipecc_options *o);
void pipecc_options_free(pipecc_options *o);
void pipecc_usage(FILE *f);
/* --list-ops: every op and what the cpu and cuda targets and training do with it, one
 * tab-separated line each after a header (tools/pipecc_ops.c). 0, or 1 on a write error. */
int pipecc_list_ops(FILE *f);

#endif
