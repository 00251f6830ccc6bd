/* passes/opt/fuse.h - fuse: fold the element-wise consumers of a float32 Conv into the Conv
 * (the cpu target applies them to each block of GEMM output while it is still in cache,
 * the cuda target in one kernel with the bias after cuDNN's convolution, instead of
 * separate passes over the whole tensor):
 *
 *   Conv -> Add(other) -> Relu | Clip      Conv -> Add(other)      Conv -> Relu | Clip
 *
 * The Conv node gets the residual `other` as a 4th input, its output becomes the chain's
 * last value, and it carries
 *   "pipecc.act"   STRING "Relu" or "Clip" (absent: no activation),
 *   "pipecc.clip"  FLOATS [lo, hi] for Clip (constant bounds, lo <= hi),
 *   "pipecc.fused" STRING the fused nodes for comments ("Add '/a/Add', Relu '/a/Relu'").
 * The fused nodes die; their names and FLOPs go to the Conv. Fused only when every
 * intermediate has one consumer, is no graph output, and the Add needs no broadcast
 * (other has the Conv's shape and dtype). 1-D and 2-D float convolutions only.
 *
 * It runs before planning, so a fused chain is one node in every plan: the arithmetic
 * cannot depend on how nodes are cut into stages. For the cpu and cuda targets, only for
 * inference graphs (a training step's backward reads the intermediates). */
#ifndef PIPECC_PASSES_FUSE_H
#define PIPECC_PASSES_FUSE_H

#include "ir/ir.h"

/* Returns the number of chains fused (0 when nothing matched). */
int pass_fuse_conv(ir_graph *g);

/* The fused epilogue of a Conv node: act 0 none, 1 Relu, 2 Clip (lo, hi set). */
int pass_fused_act(const ir_node *n, float *lo, float *hi);

/* The most taps (kh * kw) of a depthwise Conv the cpu target runs as a direct stencil. */
#define PASS_DW_MAX_TAPS 49

/* fuse_expand_dw (cpu inference, after pass_fuse_conv): a MobileNet-style expansion
 *
 *   Conv 1x1 (stride 1, no padding, group 1, [-> Relu | Clip]) -> depthwise Conv
 *
 * whose intermediate has min_positions or more positions per channel (H * W) and no
 * other reader becomes the depthwise Conv alone, with inputs
 *   0 the 1x1's input, 1 the depthwise W, 2 its B (-1 if none), 3 -1 (no residual),
 *   4 the 1x1's W, 5 its B (absent if none)
 * and attributes "pipecc.expand" (a comment naming the 1x1 Conv) and the 1x1's
 * activation as "pipecc.expand_act" / "pipecc.expand_clip" (read them with
 * pass_fused_expand_act). codegen/c computes the expansion a block of channels at a
 * time into scratch that stays in L2 and runs the stencil over it, so the expanded
 * map (MobileNetV2's first: 96 x 112 x 112 floats per image) never goes to memory.
 * The same GEMMs and element order as the two Convs apart, so the same bits. The 1x1
 * Conv's name, FLOPs and fused nodes go to the depthwise Conv. Returns the number of
 * pairs fused. */
int pass_fuse_expand_dw(ir_graph *g, int64_t min_positions);

/* The 1x1 Conv's activation in a fused expansion: 0 none, 1 Relu, 2 Clip (lo, hi). */
int pass_fused_expand_act(const ir_node *n, float *lo, float *hi);

/* fuse_matmul_transpose (cpu inference): a float Transpose whose only reader is a
 * MatMul with a batch of B matrices (attention's Q K^T and P V, whose heads arrive as
 * Transposes of the projections) is read in place: the MatMul's input becomes the
 * Transpose's input, and it carries the perm as "pipecc.perm_a" or "pipecc.perm_b"
 * (INTS). Fused only where the permuted matrices have a unit stride in one of their
 * two dims, so that BLAS takes each as it lies (transposed or not, the other stride its
 * leading dimension; codegen/op_params.h, cg_matmul). The copy goes: a [seq, heads,
 * dim] -> [heads, dim, seq] Transpose reads one element per cache line, 2.7 ns each.
 * The Transpose's name goes to the MatMul. Returns the number of Transposes fused. */
int pass_fuse_matmul_transpose(ir_graph *g);

/* fuse_layernorm (inference, both targets): layer normalisation as exporters write it
 * out below opset 17,
 *
 *   d = x - ReduceMean(x)    (the trailing axes [axis, rank), keepdims)
 *   y = d / Sqrt(ReduceMean(Pow(d, 2) | Mul(d, d)) + eps) * gamma [+ beta]
 *
 * (eps a constant scalar; gamma, beta one element or the normalised dims; every
 * intermediate read inside the chain only) becomes one LayerNormalization(x, gamma,
 * [beta]) with that axis and epsilon, writing the chain's last value: one pass over the
 * rows instead of nine. The arithmetic is LayerNormalization's (a reciprocal square
 * root times d, where the chain divides), as onnxruntime's own fusion of the chain
 * does. It runs before planning, so every plan computes the same. The node takes the
 * name and file index of the chain's last node and lists the others in
 * "pipecc.fused_nodes" and "pipecc.fused". Returns the number of chains fused. */
int pass_fuse_layernorm(ir_graph *g);

#endif
