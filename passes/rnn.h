/* passes/rnn.h - what an RNN, GRU or LSTM node means (ONNX RNN-14, GRU-14, LSTM-14; the
 * attributes are the same since opset 7, `layout` is new in 14): its sizes, direction,
 * activations, and which optional inputs and outputs it has. The shape pass
 * (passes/shape/shape_rnn.c) reads it to check the node and size its outputs; both code
 * generators (codegen/c/ops_nn.c, codegen/cuda/ops.c) read it again to emit the node, and
 * write the gate arithmetic with the shared text of codegen/rnn_expr.h.
 *
 * Gate order (ONNX): RNN i; GRU z, r, h; LSTM i, o, f, c. Weights W [D, G*H, I],
 * R [D, G*H, H], B [D, 2*G*H] (Wb then Rb), P [D, 3*H] (LSTM peepholes i, o, f).
 * layout 0: X [S, B, I], Y [S, D, B, H], Y_h/Y_c/initial_h/initial_c [D, B, H];
 * layout 1: X [B, S, I], Y [B, S, D, H], Y_h/Y_c/initial_h/initial_c [B, D, H]. */
#ifndef PIPECC_PASSES_RNN_H
#define PIPECC_PASSES_RNN_H
#include <stdint.h>

#include "ir/ir.h"

/* The activations an RNN node may name (case-insensitive in the model). */
typedef enum {
  PASS_RNN_SIGMOID,
  PASS_RNN_TANH,
  PASS_RNN_RELU,
  PASS_RNN_LEAKYRELU,
  PASS_RNN_THRESHOLDEDRELU,
  PASS_RNN_HARDSIGMOID,
  PASS_RNN_AFFINE,
  PASS_RNN_SCALEDTANH,
  PASS_RNN_ELU,
  PASS_RNN_SOFTSIGN,
  PASS_RNN_SOFTPLUS
} pass_rnn_act;

typedef struct {
  pass_rnn_act fn;
  double alpha, beta;
} pass_rnn_actv;

typedef struct {
  ir_op op; /* IR_OP_RNN, IR_OP_GRU or IR_OP_LSTM */
  int G;    /* gates: 1, 3, 4 */
  int NA;   /* activations per direction: 1, 2, 3 */
  int64_t S, B, I, H;
  int D;       /* directions: 1 or 2 */
  int reverse; /* D == 1: the one direction runs backwards */
  int layout;  /* 0 or 1 */
  int has_clip;
  double clip;             /* pre-activations clamped to [-clip, clip] when has_clip */
  int input_forget;        /* LSTM: f = 1 - i */
  int lbr;                 /* GRU: linear_before_reset */
  pass_rnn_actv act[2][3]; /* per direction: f, g, h (as many as NA) */
  /* optional inputs (1 when present): B, sequence_lens, initial_h, initial_c, P */
  int has_b, has_seq, has_h0, has_c0, has_p;
  /* optional outputs: Y, Y_h, Y_c */
  int has_y, has_yh, has_yc;
} pass_rnn;

/* Reads node's attributes and its inputs' shapes (which must be known) into *r.
 * Returns 0, or -1 after reporting the model error on the node (bad direction, an
 * activation pipecc does not support, inconsistent sizes). */
int pass_rnn_info(ir_graph *g, int node, pass_rnn *r);

/* Training: replaces every RNN, GRU and LSTM node by its recurrence written out step by
 * step in ONNX ops that autodiff differentiates (passes/train/rnn_unroll.c). Called by
 * pass_autodiff and pass_train_loss before anything else. 0, or -1 (reported). */
int pass_rnn_unroll(ir_graph *g);

#endif
