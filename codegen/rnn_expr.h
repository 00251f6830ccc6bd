/* codegen/rnn_expr.h - the per-element code of RNN, GRU and LSTM nodes, shared by the
 * cpu target (codegen/c/ops_nn.c: loops over the batch b and the hidden unit j) and the
 * cuda target (codegen/cuda/ops.c: one generated kernel per node and direction whose
 * threads take the (b, j) pairs), so that both compute the same expressions.
 *
 * Both targets run a node the same way, per direction d:
 *   xw = X W_d^T                 one GEMM over all S*B rows of X, [S*B, G*H]
 *   CG_RNN_INIT                  the state hs (and cs) from initial_h (initial_c) or 0
 *   per step t (backwards for a reverse direction):
 *     hr = hs R_d^T              GEMM [B, H] x [H, G*H] (a GRU without
 *                                linear_before_reset: only its z and r columns, then
 *     CG_RNN_RESET               rh = r * hs, and hr's h columns = rh Rh_d^T)
 *     CG_RNN_GATES               the gates from xw, hr, the biases and peepholes; the
 *                                new state into hs (cs) and Y
 *   CG_RNN_FINI                  Y_h (Y_c) from the state
 * The text written for a phase is a block of statements that reads the variables
 * t, b, j (long) and the pointers xw, hr, hs, cs, rh (the node's working buffers),
 * x3 (B), x4 (sequence_lens), x5 (initial_h), x6 (initial_c), x7 (P), y0 (Y), y1 (Y_h),
 * y2 (Y_c): only those the node has. Rows of xw are X's rows (t*B + b for layout 0,
 * b*S + t for layout 1). With sequence_lens, a step t >= len[b] leaves the state of b
 * alone and Y there keeps the zeros the caller filled it with. */
#ifndef PIPECC_CODEGEN_RNN_EXPR_H
#define PIPECC_CODEGEN_RNN_EXPR_H

#include "codegen/eltwise_expr.h"
#include "passes/rnn.h"

enum { CG_RNN_INIT, CG_RNN_RESET, CG_RNN_GATES, CG_RNN_FINI };

/* Writes phase `phase` of direction d (0 or 1) for element type t, each line indented
 * by ind. */
void cg_rnn_phase(const cg_expr_writer *w, const pass_rnn *r, int d, int phase, ir_dtype t, const char *ind);

/* The columns of R the step GEMM covers: G*H, or 2*H for a GRU without
 * linear_before_reset (its h columns come from the second GEMM after CG_RNN_RESET). */
static inline int64_t cg_rnn_step_cols(const pass_rnn *r) {
  return r->op == IR_OP_GRU && !r->lbr ? 2 * r->H : r->G * r->H;
}
#endif
