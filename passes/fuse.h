/* passes/fuse.h - fuse: fold the element-wise consumers of a float32 Conv into the Conv
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

#endif
