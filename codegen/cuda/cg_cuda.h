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
 *   pipecc_cuda_limits.h  the limits of the runtime's own kernels (plain C): the emitter
 *                     picks a kernel by them, the runtime checks them again
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
 * Stage analysis, units and the arena plan are shared with the cpu target
 * (codegen/stage.h): one node, or a fused element-wise tree. An op
 * emitter writes, for its node, file-scope tables into `decl` and the calls into
 * `call` (inside run(), after PK_UNIT(u)), using the operand expressions x[k] / y[k]
 * ("(const float *)(A + 4096)"). */
#ifndef PIPECC_CODEGEN_CUDA_CG_CUDA_H
#define PIPECC_CODEGEN_CUDA_CG_CUDA_H
#include <stdint.h>
#include <stdio.h>

#include "codegen/c/cg_c.h" /* cg_ctype, cg_flit, cg_numel, cg_strides, cg_is_eltwise, cg_is_alias */
#include "codegen/codegen.h"
#include "codegen/emit_common.h"
#include "codegen/stage.h"
#include "ir/ir.h"

#define CGU_NVCC_FLAGS "-O3 -std=c++17"

/* ---- the cuda emitter ------------------------------------------------------------------ */

typedef struct cu_ctx {
  ir_graph *g;
  const cg_options *o;
  FILE *decl; /* file scope of stage_K.cu */
  FILE *call; /* body of run() */
  FILE *conv; /* entries of the convolution table */
  int n_conv;
  int unit;          /* index of the unit being emitted */
  const char *x[64]; /* operand expressions of the node's inputs (NULL: omitted) */
  const char *y[8];  /* ... and outputs */
  size_t scratch;    /* largest scratch any unit asked for */
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
