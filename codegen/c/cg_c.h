/* codegen/c/cg_c.h - internals of the CPU emitter (codegen/c), shared by its files.
 *
 * A stage is emitted as a list of units in graph order. A unit is one node, or a
 * fused group of element-wise nodes (each intermediate has the same shape as the unit's
 * output and is read inside the unit only, possibly by several members), possibly led by
 * a float MatMul whose GEMM row blocks it consumes (codegen/stage.h, gemm_units). Every
 * unit becomes one static function in
 * stage_K.c whose parameters are the unit's input and output tensors (and a scratch
 * pointer); forward() calls them in order with pointers into the weights, the stage
 * inputs/outputs or the activation arena.
 *
 * An op emitter writes the BODY of its unit's function with cg_w(); it refers to
 * the tensors as x<slot> (input slot, const T *) and y<slot> (output slot, T *), and
 * to scratch memory as `scr` (void *, 64-byte aligned, size requested with
 * cg_scratch). Parameters the body does not mention are dropped from the signature.
 * Emitters read shapes from the IR (all static) and compile-time constants (Reshape
 * shapes, Slice starts, ...) from constant values; they report a model they cannot
 * compile with cg_fail (the node, an error line) and return -1. */
#ifndef PIPECC_CODEGEN_C_CG_C_H
#define PIPECC_CODEGEN_C_CG_C_H
#include <stdint.h>
#include <stdio.h>

#include "codegen/codegen.h"
#include "codegen/op_params.h"
#include "codegen/stage.h"
#include "ir/ir.h"

/* How the emitted sources are compiled (the Makefile and cg_build use the same):
 * -O2 without -march: a portable binary whose heavy work is in OpenBLAS (which picks
 * its kernels at run time); -ffp-contract=off and no -ffast-math keep every node's
 * arithmetic exactly as written, so results do not depend on how nodes are grouped.
 * -fvect-cost-model=dynamic: -O2's default (very cheap) leaves loops whose trip count is
 * not a known multiple of the vector width scalar (the bias fills, epilogues and
 * Winograd transforms); vectorising element-wise code does not change its results.
 * -fno-trapping-math: without it GCC will not turn a float comparison into a select in a
 * loop (the comparison "could trap"), which leaves clamps, ReLU-like selects and the
 * prelude's pk_expf/pk_erff scalar; it changes no value, only whether FP exception flags
 * may be raised speculatively (nothing reads them). */
#ifndef CG_C_CC
#define CG_C_CC "cc"
#endif
/* Extra compile and link flags of the pipecc build itself that the emitted code must
 * share: the sanitizers in a PIPECC_SANITIZE build (libpipert is instrumented then). */
#ifndef CG_C_EXTRA
#define CG_C_EXTRA ""
#endif
/* GCC's vectoriser cost model (below); the sanitizer build, whose compiler may be clang,
 * sets it to what that compiler takes */
#ifndef CG_C_VECT
#define CG_C_VECT "-fvect-cost-model=dynamic"
#endif
#define CG_C_CFLAGS \
  "-O2 " CG_C_VECT " -std=c11 -ffp-contract=off -fno-fast-math -fno-trapping-math -Wall -Wextra " CG_C_EXTRA
#define CG_C_LIBS CG_C_EXTRA " -lopenblas -lpthread -lm"

/* Float Convs whose GEMM sums at most CG_C_DIRECT_K (codegen/codegen.h) products per
 * output over at least CG_C_DIRECT_OS positions per image run it through
 * runtime/pipert_gemm.h (no packing, the bias and epilogue applied in registers),
 * image by image. Since its whole vectors load and store
 * without masks it beats sgemm on 14x14 maps and K up to 1024 too (docs/cpu.md has the
 * measurements). On 7x7 maps (49 positions) the two are even, and below that one GEMM
 * over a batch of images is faster (ops_nn.c, emit_conv_batched: through the same
 * kernel where K allows). */
#define CG_C_DIRECT_OS 196
/* A float 1x1 Conv (stride 1, no padding) of several images of fewer than CG_C_SEG_OS
 * positions each, summing at most CG_C_SEG_K products per output, is one
 * pipert_gemm_direct_seg over the images, which it reads and writes in place: no
 * images copied together and no output scattered back, no masked tail per image (on
 * an Intel Xeon with AVX-512, 2026-12-02, 8 images, against those copies or one call
 * per image: MNASNet's and ResNet-50's 7x7 and 14x14 1x1 Convs 1.04-1.29x, K = 1152
 * and 2048, until then OpenBLAS's, 1.12-1.29x; but 40 x 784 by 120 0.90x, hence the
 * bound on the positions). */
#define CG_C_SEG_OS 512
#define CG_C_SEG_K 2048
/* A float MatMul with a batch of B matrices multiplies each pair through
 * pipert_gemm_direct too where M * N * K is at most this (attention's heads: 64 x 64 by
 * 32 at 90 GFLOP/s against OpenBLAS's 54 on an AVX2 AMD EPYC, warm caches); larger ones,
 * where BLAS's blocking pays, through cblas_sgemm. */
#define CG_C_DIRECT_MATMUL (1 << 21)

typedef struct cg_ctx {
  ir_graph *g;
  FILE *body;     /* the current unit's function body */
  size_t scratch; /* largest scratch (bytes) any unit of the stage asked for */
  size_t unit_scratch;
  int gemm_direct; /* a unit calls pipert_gemm_direct: the stage includes pipert_gemm.h */
  int dw_blocked;  /* a unit calls pipert_dw: the stage includes pipert_dw.h */
  int unit_checks; /* the unit checks its input (cg_index_check): it returns non-zero on bad input */
  int ivdep;       /* an element-wise unit writes its output over an input, element by element (an
                    * in-place write-back, codegen/stage.h): its loops are marked PK_IVDEP */
  int zero_ext;    /* >= 0: the element-wise unit's input x<zero_ext>, a gradient sum, may be NULL,
                    * which reads as zeros (the first backward of a batch, stage_state.fresh) */
  char *fresh;     /* [n_values] the GRAD params whose sum reads as zeros that way (set by the units) */
} cg_ctx;

/* Write formatted text to the current body. */
void cg_w(cg_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Ask for n bytes of scratch for the current unit. */
void cg_scratch(cg_ctx *c, size_t n);
/* Report an error about node n (ir_error_node) and return -1. */
int cg_fail(cg_ctx *c, const ir_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Indices read at run time: the emitted test that index k (after wrapping a negative
 * one, as ONNX does) lies in [0, size), which otherwise makes the unit name the node, the
 * index `raw` (an expression) and `what` through pipert_bad_input and return non-zero
 * (the stage's forward or backward then returns PIPERT_STATUS_BAD_INPUT). ind: its
 * indentation. */
void cg_index_check(cg_ctx *c, const ir_node *n, int ind, const char *k, const char *raw, int64_t size,
                    const char *what);
/* Constant indices checked at compile time: 0, or -1 after cg_fail naming the first
 * index outside [-size, size). Non-constant ones: 1 (check them with cg_index_check). */
int cg_const_indices(cg_ctx *c, const ir_node *n, const ir_value *ix, int64_t size, const char *what);

/* C element type for a dtype ("float", "int64_t", "uint8_t" for bool, "uint16_t" bit
 * patterns for float16 and bfloat16, "uint8_t" ones for float8), NULL if unsupported. */
const char *cg_ctype(ir_dtype t);
/* A float/double literal that reads back exactly ("1.5f", "-INFINITY", "NAN"); for
 * float16, bfloat16 and float8 the nearest value's bit pattern ("0x3c00", "0x38"). */
const char *cg_flit(char *buf, size_t n, double v, ir_dtype t);

/* Value helpers (NULL / -1 when the slot is omitted). */
ir_value *cg_in(cg_ctx *c, const ir_node *n, int slot);
ir_value *cg_out(cg_ctx *c, const ir_node *n, int slot);
int64_t cg_numel(const ir_value *v);
/* Row-major strides of a shape (elements). */
void cg_strides(const ir_shape *s, int64_t *st);
/* Compile-time integer contents of input `slot` (a constant): returns count (<= max),
 * or -1 if the input is missing or not a constant. */
int cg_const_ints(cg_ctx *c, const ir_node *n, int slot, int64_t *out, int max);
int cg_const_f64(cg_ctx *c, const ir_node *n, int slot, double *out);

/* Element-wise ops (kinds UNARY, UNARY_BOOL, BINARY, COMPARE, VARIADIC, and Where,
 * Cast, CastLike, Expand): fusable. */
int cg_is_eltwise(const ir_graph *g, const ir_node *n);
/* Emit a fused element-wise unit: nodes[0..n_nodes) in graph order, the last one
 * being the root whose output the unit stores. Inputs are referred to as x<k> where
 * k indexes ext_in[] (distinct external values); the output is y0. */
int cg_emit_eltwise(cg_ctx *c, const int *nodes, int n_nodes, const int *ext_in, int n_ext);

/* A float MatMul of one B matrix, M rows (all of A's batch) by N columns, runs as GEMMs
 * of cg_gemm_rows(M, N) rows at a time (about 1 MiB of output each, so that a fused
 * unit's element-wise work finds its block in L2), alone (ops_nn.c) or as a member of an
 * element-wise unit (eltwise.c): the same calls either way, so the same bits. With K at
 * most CG_C_DIRECT_K the GEMMs are pipert_gemm_direct's (B, the weights, read in place
 * rather than packed again on every call: 8-12% faster than cblas_sgemm on the
 * transformer models' projections, 107-114 against 97-102 GFLOP/s on one AVX-512 core),
 * and since each output is one dot product in k order, the bits do not depend on the
 * blocks at all; above, cblas_sgemm's. */
int64_t cg_gemm_rows(int64_t M, int64_t N);
/* Emits the start of that loop, `for (long r0 ...) { const long nr = ...; GEMM(...);`
 * for blocks of MB rows of the M x K matrix a times the K x N matrix b (C expressions),
 * into y + r0 * N (y_whole: y holds all M rows) or into y (one block's rows); the caller
 * adds the block's other work and closes the loop. */
void cg_gemm_blocks_open(cg_ctx *c, int64_t M, int64_t N, int64_t K, int64_t MB, const char *a, const char *b,
                         const char *y, int y_whole);

/* Op emitters (one node): codegen/c/ops_nn.c, ops_data.c. Return 0 or -1. */
/* the fused Attention (codegen/c/ops_attn.c) */
int cg_emit_attention(cg_ctx *c, const ir_node *n);
typedef int (*cg_op_fn)(cg_ctx *c, const ir_node *n);
cg_op_fn cg_op_emitter(ir_op op);

/* The epilogue passes/opt/fuse.c folded into a Conv: a residual (input 3) added, then Relu
 * (act 1) or Clip to [lo, hi] (act 2). cg_conv_epi_emit writes the statements that apply
 * it to the float variable v, the residual element being the expression r: the same
 * expressions, in the same order, as the separate Add and Relu/Clip nodes
 * (codegen/eltwise_expr.c), so fused and unfused builds give the same bits. */
typedef struct {
  int act, res;
  float lo, hi;
} cg_conv_epi;
void cg_conv_epi_emit(cg_ctx *c, const cg_conv_epi *e, const char *ind, const char *v, const char *r);

/* Emits `const double NAME = sum over k < n of EXPR` (EXPR in terms of k) at indent ind,
 * in 8 double lanes combined pairwise: a fixed order that vectorises (ops_nn.c). */
void cg_emit_dlane_sum(cg_ctx *c, const char *ind, const char *name, int64_t n, const char *expr);

/* Emits, at indent ind, the split of a row src of S * n elements by phase: dst[ph * n + j]
 * = src[j * S + ph] for ph < S and j < n (dst and src C expressions, which must not
 * overlap), so that a loop over every S-th element of the row reads a contiguous run
 * (Winograd's input transform, a strided MaxPool's windows). */
void cg_emit_phase_split(cg_ctx *c, const char *ind, const char *dst, const char *src, int64_t S, int64_t n);

/* A Conv that passes/opt/winograd.c prepared for F(m x m, 3 x 3) (codegen/c/winograd.c):
 * cg_winograd_fits checks that its window allows it (2-D float, 3x3, strides and
 * dilations 1, one group); cg_emit_conv_winograd writes the body, x1 being the
 * transformed filters [a*a, M, C]. 0 or -1. */
int cg_winograd_fits(const cg_win3 *w, int64_t G, int64_t C, int64_t M, ir_dtype t);
int cg_emit_conv_winograd(cg_ctx *c, const ir_node *n, const cg_win3 *w, int m, int64_t N, int64_t C, int64_t M,
                          int has_bias, const cg_conv_epi *e);

/* profile_main.c of a one-stage inference plan (codegen/c/profile.c): stage 0's unit
 * table, in the order emit.c marks the units with PK_UNIT(u). 0 or -1. */
int cg_c_emit_profile_main(ir_graph *g, const cg_plan *p, const cg_options *o, const cg_stage_info *si,
                           const char *dir);

/* Nodes whose output can share its input's memory (Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity, inference Dropout). */
int cg_is_alias(const ir_node *n);

/* The per-element code of the ops with kernels of their own that both targets share
 * (codegen/c/ops_sample.c, codegen/c/ops_vision.c; the cuda target puts the same
 * statements into its kernels, codegen/cuda/ops_sample.c and ops_vision.c). The checks
 * report "TARGET target: ..." and return -1 for what neither target supports. */
int cg_sample_check(ir_graph *g, const char *target, const ir_node *n);
void cg_gridsample_body(ir_graph *g, const ir_node *n, FILE *f, const char *ind);
void cg_det_body(ir_graph *g, const ir_node *n, FILE *f, const char *ind, const char *a);
int cg_vision_check(ir_graph *g, const char *target, const ir_node *n);
void cg_roialign_body(ir_graph *g, const ir_node *n, FILE *f, const char *ind);
void cg_deform_body(ir_graph *g, const ir_node *n, FILE *f, const char *ind);

#endif
