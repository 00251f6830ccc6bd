/* codegen/op_params.h - attribute arithmetic of ops that both targets (codegen/c,
 * codegen/cuda) emit: what the node means, before either target decides how to compute
 * it. Errors are reported on the node as "<target> target: ..." and return -1. */
#ifndef PIPECC_CODEGEN_OP_PARAMS_H
#define PIPECC_CODEGEN_OP_PARAMS_H
#include <stdint.h>

#include "ir/ir.h"

/* Spatial parameters of Conv, ConvTranspose and pooling normalised to 3 dims (leading
 * dims of size 1): input/output sizes, kernel, strides, dilations, begin/end pads. */
typedef struct {
  int sr; /* spatial rank of the node, 1..3 */
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
} cg_win3;

/* The window of node n from x (N, C, spatial...) to y; kernel: sr kernel dims.
 * strides/dilations/pads/auto_pad as ONNX; for ConvTranspose (transposed = 1, x and y
 * swapped by the caller) SAME pads follow its rules (output_padding). */
int cg_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y,
              const int64_t *kernel, int transposed, cg_win3 *w);

/* The window of a pooling node (AveragePool, MaxPool, LpPool: kernel_shape and
 * cg_window; the Global* forms: the whole spatial extent, one output). */
int cg_pool_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y, cg_win3 *w);

/* Softmax, LogSoftmax, Hardmax: opset >= 13 along one axis (default -1); before 13 on
 * the input coerced to 2-D at axis (default 1). The input as [outer, A, inner], the
 * function taken over A. */
int cg_softmax_params(ir_graph *g, const char *target, const ir_node *n, int64_t *outer, int64_t *A, int64_t *inner);

/* LayerNormalization: the input as [outer, inner] split at axis (default -1), and the
 * element counts of Scale and B (0 without B), each inner or 1. */
int cg_layernorm_params(ir_graph *g, const char *target, const ir_node *n, int64_t *outer, int64_t *inner, int64_t *ns,
                        int64_t *nbias);

/* Concat/Split: the attribute axis (default 0) of v normalised, and v as
 * [outer, dims[axis], inner] around it. */
int cg_axis_split(ir_graph *g, const char *target, const ir_node *n, const ir_value *v, int *axis, int64_t *outer,
                  int64_t *inner);

/* Shape (opset 15 start/end): the range [start, end) of the input's r dims. */
void cg_shape_range(const ir_node *n, int r, int64_t *start, int64_t *end);

/* Reduce*: red[d] = 1 for every reduced axis of the input (red zeroed by the caller),
 * from the axes input or attribute; all axes when none is given. Returns 1 when none
 * is given and noop_with_empty_axes is set (the node is a copy), 0, or -1. */
int cg_reduce_axes(ir_graph *g, const char *target, const ir_node *n, int *red);

/* Pad (opset 2-10 attributes, 11+ inputs pads/constant_value/axes, which must be
 * constants): begin pads into pads[0..r), end pads into pads[r..2r) for input rank r
 * (pads zeroed by the caller), the constant value and the mode attribute. */
int cg_pad_params(ir_graph *g, const char *target, const ir_node *n, int64_t *pads, double *value, const char **mode);

/* Slice (opset 1-9 attributes, 10+ constant inputs starts/ends/axes/steps): per axis of
 * the input (rank r) the first index st[d], clamped as ONNX, and the step sp[d]
 * (0 and 1 for axes not sliced). */
int cg_slice_params(ir_graph *g, const char *target, const ir_node *n, int64_t *st, int64_t *sp);

/* MatMul (numpy semantics): A is [batch..] M x K (M = 1 for a vector), B [batch..] K x N;
 * nb broadcast batch dims bd[] (NB elements in all) with element strides sa[]/sb[] of
 * A's and B's matrices (0 where that side broadcasts). Each matrix as BLAS reads it
 * (row-major): ta/tb transposed or not, lda/ldb its leading dimension (K and N for
 * contiguous operands). pa/pb: the operand is read through the permutation of a
 * Transpose folded into the MatMul (passes/opt/fuse.h, pass_fuse_matmul_transpose): its
 * batch is not contiguous, and only the cpu target's batched loop reads it. */
typedef struct {
  int64_t M, K, N, NB;
  int nb;
  int64_t bd[IR_MAX_RANK], sa[IR_MAX_RANK], sb[IR_MAX_RANK];
  int ta, tb, pa, pb;
  int64_t lda, ldb;
} cg_matmul;
int cg_matmul_params(ir_graph *g, const char *target, const ir_node *n, cg_matmul *mm);

/* ConvTranspose: cg_window (transposed = 1) of x -> y; when output_shape is given
 * without pads (and auto_pad NOTSET), the total padding follows from it, split as
 * onnxruntime does (the smaller half first). */
int cg_conv_transpose_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y,
                             const int64_t *kernel, cg_win3 *w);

/* Resize (opset 10+) and Upsample, as Resize-19, over any number of dims: modes nearest,
 * linear (bilinear, trilinear) and cubic (cubic_coeff_a, exclude_outside); antialias
 * (linear and cubic: the filter stretched by 1 / scale when downscaling); the coordinate
 * transformation modes, tf_crop_and_resize with the roi input and extrapolation_value;
 * the nearest modes; axes (the other dims are copied); keep_aspect_ratio_policy (one
 * scale for all axes). Upsample and Resize-10 are asymmetric with floor. */
enum { CG_RESIZE_NEAREST = 0, CG_RESIZE_LINEAR, CG_RESIZE_CUBIC };
enum {
  CG_CTM_HALF_PIXEL = 0,
  CG_CTM_PYTORCH_HALF_PIXEL,
  CG_CTM_ALIGN_CORNERS,
  CG_CTM_ASYMMETRIC,
  CG_CTM_TF_HALF_PIXEL_FOR_NEAREST,
  CG_CTM_HALF_PIXEL_SYMMETRIC,
  CG_CTM_TF_CROP_AND_RESIZE
};
enum { CG_NEAREST_ROUND_PREFER_FLOOR = 0, CG_NEAREST_ROUND_PREFER_CEIL, CG_NEAREST_FLOOR, CG_NEAREST_CEIL };
typedef struct {
  int mode;         /* CG_RESIZE_* */
  int ctm, nearest; /* CG_CTM_*, CG_NEAREST_* */
  int filter;       /* cubic, or linear with antialias: the weights of cg_resize_taps */
  int antialias, exclude_outside;
  double cubic_a, extrapolation;
  double scales[IR_MAX_RANK]; /* per input dim: the scales input, Upsample's attribute, or out/in */
  int resized[IR_MAX_RANK];   /* 0: copied (not in axes, or the filter leaves it as it is) */
  int taps[IR_MAX_RANK];      /* filter: input indices that weigh in per output index */
  double roi[2][IR_MAX_RANK]; /* tf_crop_and_resize: start and end per dim */
} cg_resize;
int cg_resize_params(ir_graph *g, const char *target, const ir_node *n, cg_resize *rp);
/* Input coordinate of output index o along dim d (input size in, output size out)
 * before clamping, as the ONNX reference computes it; o itself for a dim not resized.
 * The cuda runtime (resize_coord) evaluates the same expressions in the same order. */
double cg_resize_coord(const cg_resize *rp, int d, int64_t o, int64_t in, int64_t out);
/* tf_crop_and_resize: coordinate xo lies outside the input (the output element is
 * extrapolation_value). */
int cg_resize_outside(const cg_resize *rp, double xo, int64_t in);
/* Filter weights at coordinate xo along dim d: w[0 .. rp->taps[d]) of the input indices
 * *first, *first + 1, ... (they may lie outside [0, in): those read the edge element).
 * The cuda runtime (resize_tap) computes each weight in the same order. */
void cg_resize_taps(const cg_resize *rp, int d, double xo, int64_t in, int64_t *first, double *w);

#endif
