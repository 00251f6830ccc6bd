/* passes/opt/winograd.h - winograd: prepare 2-D 3x3 stride-1 float Convs for Winograd
 * minimal filtering F(m x m, 3 x 3) (Lavin and Gray, "Fast Algorithms for Convolutional
 * Neural Networks", 2016) on the cpu target, by transforming their filters ahead of time.
 *
 * With a = m + 2, every filter g (3 x 3) becomes U = G g G^T (a x a), computed in double
 * precision and rounded once; the Conv's weight input is replaced by a new constant
 * "<W>.winograd<m>" of shape [a*a, M, C] (U's element (i, j) of filter (m, c) at
 * [(i*a + j), m, c]) and the node carries "pipecc.winograd" INT m. codegen/c/winograd.c
 * emits the rest: input tiles V = B^T d B, a*a GEMMs [M x C] x [C x tiles] (OpenBLAS), and
 * Y = A^T (.) A per output tile: 9 m^2 / a^2 times fewer GEMM FLOPs than im2col (2.25
 * for m = 2, 4 for m = 4) at the price of a*a / 9 times the filter bytes and some
 * rounding in the transforms (more for m = 4, whose matrices hold 1/6, 1/24 and 8).
 *
 * Which Convs: a static 4-D float input, a constant float weight [M, C, 3, 3], group 1,
 * strides and dilations 1, C and M at least 8, an output at least 2 x 2. mode 2 or 4
 * uses that m everywhere; mode -1 (auto) takes m = 4 where the output is at least 4 x 4
 * and its tiles over the batch (the GEMMs' columns) number at least 32, else m = 2 where
 * its tiles do, else leaves the Conv to im2col (winograd.c has the measurements; on
 * ResNet-50 m = 4's rel-L2 against onnxruntime was 4.7e-7 against 4.2e-7 for m = 2 and
 * for im2col). Only for inference graphs
 * (training changes the filters every step); it runs before planning, so every stage
 * count computes the same bits. */
#ifndef PIPECC_PASSES_WINOGRAD_H
#define PIPECC_PASSES_WINOGRAD_H

#include "ir/ir.h"

/* Returns the number of Convs prepared, or -1 after an error. */
int pass_winograd(ir_graph *g, int mode);

/* The m of a prepared Conv, 0 if it was not prepared. */
int pass_winograd_m(const ir_node *n);

/* The transform matrices for m = 2 or 4: B^T (a x a), G (a x 3), A^T (m x a), row-major. */
void pass_winograd_mats(int m, const double **BT, const double **G, const double **AT);

#endif
