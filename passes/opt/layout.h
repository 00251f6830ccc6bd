/* passes/opt/layout.h - layout: channels-last (NHWC) activations around 2-D float Convs,
 * for the cuda target's inference graphs.
 *
 * cuDNN's tensor-core convolution kernels work on channels-last data; given NCHW
 * tensors they transpose input, filter and output around every call (or pick slower
 * kernels), which is where a float32 ResNet-50 with TF32 spends much of its time
 * (docs/cuda.md). This pass gives the graph that layout once, ahead of time:
 *
 *  - A Conv with a 4-D float32 input, a constant 4-D filter and channel counts that are
 *    multiples of 4 (cuDNN's tensor-core kernels want that; the stem Conv of an image
 *    model, C = 3, keeps NCHW unless any_channels, `--layout nhwc-all`, which moves the
 *    region's Transpose onto the 3-channel input) gets "pipecc.layout" = "NHWC": its
 *    input, its fused residual (input 3, passes/opt/fuse.h) and its output become values of
 *    permuted shape [N, H, W, C], and its filter a new constant "<W>.nhwc" [M, kh, kw,
 *    C/group] (cuDNN's NHWC filter format, KRSC) whose bytes are the original's, read
 *    through ir_value.data_nchw: no copy at compile time (the weight files get the
 *    permuted order). codegen/cuda describes them to cuDNN as such (1x1 stride-1 ones
 *    run as cuBLASLt GEMMs, pk_conv_1x1).
 *  - Nodes the layout does not change the meaning of follow their producers: element-wise
 *    ops (unary on input 0; broadcasting ones on every input: a constant operand is
 *    permuted the same way, after padding its rank to 4), Concat along the channels
 *    (axis 1 becomes 3) and Pad with constant pads (permuted too). So do 2-D pooling
 *    (Max, Average, Lp and their Global forms, without an Indices output) and inference
 *    BatchNormalization, whose code reads the layout: they get "pipecc.layout" = "NHWC"
 *    too. Such a node turns NHWC when one of its 4-D inputs already is.
 *  - Everything else reads NCHW: a Transpose (perm 0,3,1,2) restores a value under its
 *    own name where an NCHW node or a graph output needs it, and a Transpose (perm
 *    0,2,3,1) "<v>.nhwc" feeds an NHWC node from an NCHW value; one of each per value at
 *    most, shared by every reader.
 *
 * It runs before planning, so the planner costs the transposes and every stage count
 * computes the same graph. Inference only (training programs keep NCHW; their Convs'
 * gradients are cuDNN's NCHW ones). `pipecc --layout nchw` leaves the graph alone. */
#ifndef PIPECC_PASSES_LAYOUT_H
#define PIPECC_PASSES_LAYOUT_H

#include "ir/ir.h"

/* Returns the number of Convs turned channels-last, or -1 after an error. any_channels:
 * Convs whose channel counts are not multiples of 4 too. */
int pass_layout_nhwc(ir_graph *g, int any_channels);

/* s (rank 4) permuted NCHW -> NHWC ([d0, d2, d3, d1]) or, to_nhwc 0, back ([d0, d3, d1, d2]). */
ir_shape pass_layout_permuted(const ir_shape *s, int to_nhwc);

/* 1 if node n (a Conv, a pooling or a BatchNormalization) was turned channels-last by
 * pass_layout_nhwc: its 4-D input 0 and output 0 are [N, H, W, C]. */
int pass_layout_is_nhwc(const ir_node *n);

#endif
