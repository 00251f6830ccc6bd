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
  int sr;                 /* spatial rank of the node, 1..3 */
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
} cg_win3;

/* The window of node n from x (N, C, spatial...) to y; kernel: sr kernel dims.
 * strides/dilations/pads/auto_pad as ONNX; for ConvTranspose (transposed = 1, x and y
 * swapped by the caller) SAME pads follow its rules (output_padding). */
int cg_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y,
              const int64_t *kernel, int transposed, cg_win3 *w);

/* The window of a pooling node (AveragePool, MaxPool, LpPool: kernel_shape and
 * cg_window; the Global* forms: the whole spatial extent, one output). */
int cg_pool_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y,
                   cg_win3 *w);

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
 * A's and B's matrices (0 where that side broadcasts). */
typedef struct {
  int64_t M, K, N, NB;
  int nb;
  int64_t bd[IR_MAX_RANK], sa[IR_MAX_RANK], sb[IR_MAX_RANK];
} cg_matmul;
int cg_matmul_params(ir_graph *g, const char *target, const ir_node *n, cg_matmul *mm);

/* ConvTranspose: cg_window (transposed = 1) of x -> y; when output_shape is given
 * without pads (and auto_pad NOTSET), the total padding follows from it, split as
 * onnxruntime does (the smaller half first). */
int cg_conv_transpose_window(ir_graph *g, const char *target, const ir_node *n, const ir_value *x, const ir_value *y,
                             const int64_t *kernel, cg_win3 *w);

/* Resize (opset 10+) and Upsample: nearest or linear (bilinear, trilinear) over any
 * number of dims. Coordinate transformation modes and nearest modes as ONNX; Upsample
 * and Resize-10 are asymmetric with floor. Not supported (an error): cubic,
 * antialias, tf_crop_and_resize, axes, keep_aspect_ratio_policy other than stretch. */
enum { CG_CTM_HALF_PIXEL = 0, CG_CTM_PYTORCH_HALF_PIXEL, CG_CTM_ALIGN_CORNERS, CG_CTM_ASYMMETRIC,
       CG_CTM_TF_HALF_PIXEL_FOR_NEAREST, CG_CTM_HALF_PIXEL_SYMMETRIC };
enum { CG_NEAREST_ROUND_PREFER_FLOOR = 0, CG_NEAREST_ROUND_PREFER_CEIL, CG_NEAREST_FLOOR, CG_NEAREST_CEIL };
typedef struct {
  int linear;                 /* 0: nearest */
  int ctm, nearest;           /* CG_CTM_*, CG_NEAREST_* */
  double scales[IR_MAX_RANK]; /* per input dim: the scales input, Upsample's attribute, or out/in */
} cg_resize;
int cg_resize_params(ir_graph *g, const char *target, const ir_node *n, cg_resize *rp);
/* Input coordinate of output index o along one dim (input size in, output size out,
 * scale s) before clamping, as the ONNX reference computes it. The cuda runtime
 * (k_resize) evaluates the same expressions in the same order. */
double cg_resize_coord(int ctm, int64_t o, double s, int64_t in, int64_t out);

#endif
