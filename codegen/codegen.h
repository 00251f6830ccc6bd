/* codegen/codegen.h - the contract between the planner and the code emitters.
 *
 * The graph handed to an emitter has static shapes for ONE MICRO-BATCH (pipecc binds
 * dim 0 of every graph input to batch / microbatches before the front passes), is
 * topologically sorted, and has no dead nodes. The plan assigns each node to a stage;
 * stages are convex and form a linear pipeline (stage s only reads values produced by
 * stages < s, graph inputs, or constants). An emitter writes one source file per stage,
 * the stage's weights file, pipeline_main.c and the build files into out_dir
 * (see runtime/pipert.h for what they must define). */
#ifndef PIPECC_CODEGEN_H
#define PIPECC_CODEGEN_H
#include <stdint.h>

#include "ir/ir.h"

typedef struct {
  int op; /* PIPERT_OP_* (runtime/pipert.h) */
  int mb;
} cg_instr;

/* A pipelined training program (passes/train/autodiff.h, form 2): every node carries its
 * phase (ir_node.phase); mutable constants their role (ir_value.param) and values
 * copied into them at the end of their phase (ir_value.writeback). */
typedef struct {
  int loss_sum;          /* the loss sums over samples (else a mean) */
  int classify;          /* graph output 1 is the logits */
  const char *labels;    /* the labels graph input, NULL if none */
  const char *optimizer; /* "sgd", "adam", "adamw" */
} cg_train;

typedef struct {
  int n_stages;
  const int *node_stage;           /* [g->n_nodes]: stage of each node, 0..n_stages-1 */
  const int *replicas;             /* [n_stages], >= 1; NULL: all 1 */
  const cg_instr *const *programs; /* [n_stages] instruction streams for one round; NULL: default */
  const int *program_len;          /* [n_stages] */
  int microbatches;                /* M */
  double predicted_bubble;
  const char *schedule;  /* "gpipe" | "1f1b" */
  const cg_train *train; /* NULL: inference */
} cg_plan;

typedef struct {
  const char *command_line; /* written at the top of every emitted file */
  const char *model_path;
  int emit_only; /* write sources, do not build */
  int jobs;      /* parallel compile jobs for the build (0: nproc) */
  int verbose;
  int no_tf32;           /* cuda: exact float32 GEMMs */
  const char *cuda_arch; /* cuda: e.g. "80;90" */
  int quiet;             /* -q: no progress lines, errors only */
} cg_options;

/* The cpu target's direct GEMM (runtime/pipert_gemm.h) takes float GEMMs that sum at
 * most this many products per output: Convs (codegen/c/cg_c.h says which) and MatMuls
 * and Gemms of one B matrix (ops_nn.c; passes/opt/pretranspose.h stores a constant B of a
 * Gemm with transB transposed for it). */
#define CG_C_DIRECT_K 1024

/* Where the runtime that every pipeline links is: its headers, libpipert.a and the cuda
 * device runtime's sources. Found relative to the pipecc executable (PREFIX/bin/pipecc:
 * PREFIX/include/pipecc, PREFIX/lib/pipecc/libpipert.a, PREFIX/share/pipecc/cuda/rt, as
 * `cmake --install` lays them out), or under $PIPECC_HOME (a prefix) when set, else the
 * build and source trees pipecc was built in; $PIPECC_CUDA_RT_DIR overrides the cuda
 * sources. `where` says which ("installed", "PIPECC_HOME", "build tree"). */
typedef struct {
  char include[4096], lib[4096], cuda_rt[4096];
  const char *where;
} cg_runtime_paths;
const cg_runtime_paths *cg_runtime(void);

/* CPU target (codegen/c). Returns 0, or -1 after printing an error. */
int cg_c_emit(ir_graph *g, const cg_plan *p, const cg_options *o, const char *out_dir);
/* CUDA target (codegen/cuda): emit; build with make/nvcc (targets "pipeline", "profile"). */
int cg_cuda_emit(ir_graph *g, const cg_plan *p, const cg_options *o, const char *out_dir);
int cg_cuda_build_dir(const char *out_dir, const cg_options *o, const char *targets);
/* Build out_dir/pipeline from what an emitter wrote (parallel, with progress). */
int cg_build(const char *out_dir, const cg_options *o);
/* make each of the n objects in out_dir (a Makefile there), in parallel, then `make
 * targets` (the link) alone, with cg_build's progress lines: labels[k] for objects[k],
 * link_label for the last. 0, or -1 after printing the failing job's output. */
int cg_build_make(const char *out_dir, const cg_options *o, const char *const *objects, const char *const *labels,
                  int n, const char *targets, const char *link_label);
/* Build out_dir/profile, the per-node profiler of a one-stage cpu build
 * (runtime/pipert_profile.h). 0, or -1 after printing an error. */
int cg_build_profile(const char *out_dir, const cg_options *o);

/* Stage assignment used until the planner is connected: contiguous node ranges in
 * topological order (always convex) with roughly equal FLOPs. Fills node_stage
 * [g->n_nodes]; returns 0, or -1 when there are fewer live nodes than stages. */
int cg_fallback_split(const ir_graph *g, int n_stages, int *node_stage);

/* 64-bit checksum of the weights files, the same function as pipert_checksum64. */
uint64_t cg_checksum64(const void *data, size_t len);
#endif
