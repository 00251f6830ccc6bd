/* codegen/cuda/cg_cuda.h - internals of the CUDA emitter (codegen/cuda).
 *
 * A cuda build directory (see codegen/codegen.h for the contract) holds:
 *   stage_K.cu        one per stage: its fused element-wise __global__ kernels, the
 *                     parameter tables of its other nodes (convolutions, pooling, copies)
 *                     and run(), the list of calls in graph order; it defines
 *                     `pipecc_stage_K` (pipert_stage_desc) with init/forward/fini that
 *                     call the device runtime
 *   pipecc_cuda.h, pipecc_cuda_rt.cu  the device runtime (copied from codegen/cuda/rt;
 *                     compiled once per build): stage life cycle, cuDNN, cuBLAS, generic
 *                     kernels; pipecc_cuda.h documents the run-time behaviour
 *   weights_K.bin     the stage's constants, 64-byte aligned, uploaded once by init
 *   pipeline_main.c   the pipert_pipeline (same as the cpu target)
 *   profile_main.cu   (one-stage builds) the per-node profiler, `make profile`
 *   Makefile          nvcc for the .cu files (-gencode per cg_options.cuda_arch), cc for
 *                     pipeline_main.c, linked with libpipert, cuDNN, cuBLAS(Lt), cudart
 *
 * Stage layout on the device: W (weights_K.bin), IO (the stage's inputs and outputs at
 * fixed offsets; forward() copies host inputs in and outputs out), A (the activation
 * arena planned by liveness exactly as the cpu target does, scratch at its end).
 *
 * Units are the cpu target's: one node, or a fused element-wise tree (cg_c.h). An op
 * emitter writes, for its node, file-scope tables into `decl` and the calls into
 * `call` (inside run(), after PK_UNIT(u)), using the operand expressions x[k] / y[k]
 * ("(const float *)(A + 4096)"). */
#ifndef PIPECC_CODEGEN_CUDA_CG_CUDA_H
#define PIPECC_CODEGEN_CUDA_CG_CUDA_H
#include <stdint.h>
#include <stdio.h>

#include "codegen/c/cg_c.h" /* cg_ctype, cg_flit, cg_numel, cg_strides, cg_is_eltwise, cg_is_alias */
#include "codegen/codegen.h"
#include "ir/ir.h"

#define CGU_ALIGN 64
#define CGU_NVCC_FLAGS "-O3 -std=c++17"

/* ---- copies of codegen/c/emit.c internals (shared.c). TODO(share with codegen/c) ---- */
enum { LOC_NONE = 0, LOC_W, LOC_IN, LOC_OUT, LOC_A };

typedef struct {
  int root;           /* node index of the unit's root */
  int *nodes;         /* members in graph order (root last) */
  int n_nodes;
  int *ext;           /* eltwise units: distinct external input values */
  int n_ext;
  int alias;          /* emits no code: its output lives in its input's memory */
} unit;

typedef struct {
  int n_stages;
  int *vstage;        /* [n_values] stage producing the value; -1 graph input, -2 constant */
  int *last_stage;    /* [n_values] last stage using it (or n_stages for graph outputs) */
  int **s_in, *n_in;  /* per stage: input values */
  int **s_out, *n_out;/* per stage: output values */
  int *out_index;     /* [n_values] index in its producing stage's outputs, else -1 */
} stage_info;

typedef struct {
  ir_graph *g;
  const cg_plan *p;
  const cg_options *o;
  const stage_info *si;
  int s;
  /* per value */
  int *loc;
  size_t *off;        /* LOC_W/LOC_A: byte offset; LOC_IN/LOC_OUT: index */
  int *root;          /* alias root */
  int *def_unit, *last_unit;
  unit *units;
  int n_units;
  int *w_vals;
  int n_w;
  size_t w_bytes;
} stage_ctx;

size_t cgu_align_up(size_t n);
void cgu_put_cstr(FILE *f, const char *s);
void cgu_put_comment(FILE *f, const char *s, size_t max);
void cgu_put_header(FILE *f, const ir_graph *g, const cg_options *o, const char *what);
void cgu_put_header_hash(FILE *f, const ir_graph *g, const cg_options *o, const char *what);
void cgu_push(int **arr, int *n, int v);
int cgu_analyse_stages(ir_graph *g, const cg_plan *p, stage_info *si);
void cgu_free_stage_info(stage_info *si);
void cgu_build_units(stage_ctx *st);
size_t cgu_plan_memory(stage_ctx *st);
void cgu_put_unit_comment(FILE *f, ir_graph *g, const unit *u, const char *indent);
void cgu_put_tensor_descs(FILE *f, ir_graph *g, const char *name, const int *vals, int n);
int cgu_write_file(const char *dir, const char *name, const void *data, size_t len);
int cgu_emit_main(ir_graph *g, const cg_plan *p, const cg_options *o, const stage_info *si, const char *dir);

/* ---- the cuda emitter ------------------------------------------------------------------ */

typedef struct cu_ctx {
  ir_graph *g;
  const cg_options *o;
  FILE *decl;          /* file scope of stage_K.cu */
  FILE *call;          /* body of run() */
  FILE *conv;          /* entries of the convolution table */
  int n_conv;
  int unit;            /* index of the unit being emitted */
  const char *x[64];   /* operand expressions of the node's inputs (NULL: omitted) */
  const char *y[8];    /* ... and outputs */
  size_t scratch;      /* largest scratch any unit asked for */
} cu_ctx;

/* Write to the run() body / the file scope. */
void cu_w(cu_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cu_decl(cu_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Report an error about node n ("cuda target: ...") and return -1. */
int cu_fail(cu_ctx *c, const ir_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cu_scratch(cu_ctx *c, size_t n);

/* Fused element-wise unit: a __global__ kernel k<root>_<Op> into decl and its launch
 * into call (codegen/cuda/eltwise.c). ext[] are the external input values, whose
 * operand expressions are x[0..n_ext). */
int cu_emit_eltwise(cu_ctx *c, const int *nodes, int n_nodes, const int *ext, int n_ext);

/* Non-element-wise op emitters (codegen/cuda/ops.c); NULL if the op is not supported. */
typedef int (*cu_op_fn)(cu_ctx *c, const ir_node *n);
cu_op_fn cu_op_emitter(ir_op op);

#endif
