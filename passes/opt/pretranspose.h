/* passes/opt/pretranspose.h - pretranspose (cpu inference): a float Gemm with transB = 1
 * whose B is a constant [N, K] with K at most max_k (CG_C_DIRECT_K) gets B stored
 * transposed ahead of time: its input 1 becomes a new constant "<B>.T" [K, N] and
 * transB 0, the product unchanged. PyTorch exports nn.Linear outside a MatMul (the
 * classifiers of CNNs, attention's output projection) so; the cpu target's direct GEMM
 * (runtime/pipert_gemm.h) reads a weight matrix's rows in place along the outputs, and
 * with transB it would have to transpose B on every call. Only for inference graphs
 * (training changes the weights every step); it runs before planning, so every stage
 * count computes the same bits. */
#ifndef PIPECC_PASSES_PRETRANSPOSE_H
#define PIPECC_PASSES_PRETRANSPOSE_H

#include <stdint.h>

#include "ir/ir.h"

/* Returns the number of Gemms whose B was transposed, or -1 after an error. */
int pass_pretranspose(ir_graph *g, int64_t max_k);

#endif
