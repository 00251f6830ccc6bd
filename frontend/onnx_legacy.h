/* frontend/onnx_legacy.h - default-domain nodes of opsets 1 to 6 rewritten to the form
 * of opset 7, which the passes and emitters implement (frontend only).
 *
 * For most ops opsets 1 to 6 mean what opset 7 means. What differs, and how it is read:
 *   - consumed_inputs (a hint of opsets 1 to 5): dropped.
 *   - Add, Sub, Mul, Div, Pow, And, Or, Xor, Equal, Less, Greater with broadcast=1 and
 *     'axis': B is reshaped to B's dims followed by ones up to A's rank (numpy
 *     broadcasting, opset 7), by Shape/ConstantOfShape/Slice/Concat/Reshape nodes that
 *     fold away once shapes are known; without 'axis' the legacy suffix matching is
 *     numpy's. broadcast (and Gemm's) is dropped.
 *   - Cast-1 'to' as a string ("FLOAT"), LpPool-1/GlobalLpPool-1 float 'p' (whole
 *     numbers only), Selu-1 defaults (alpha 1.6732, gamma 1.0507), Concat-1 default
 *     axis 1, Pad-1 'paddings', Upsample-1 'height_scale'/'width_scale', Reshape-1
 *     'shape' attribute (a constant input), Split-1 'split' input (a constant: the
 *     attribute), Tile-1 (constant 'tiles' and 'axis' inputs: the 'repeats' input).
 *   - BatchNormalization, Dropout: is_test=1 or absent is inference (as the ONNX version
 *     converter reads it); is_test=0 (training mode) is refused.
 *   - RNN, GRU, LSTM: output_sequence dropped (Y is produced when the node names it).
 *   - PRelu-1/6's slope broadcasts as in opset 7 (the converter calls them compatible).
 * Refused, one line naming the node: is_test=0; Split-1 without 'axis', or with
 * 'split' both as attribute and input, or as an input that is not a constant; Tile-1
 * whose 'tiles' or 'axis' is not a one-element constant whole number; Cast-1 naming no
 * data type; a fractional LpPool-1 p; Upsample-1 without both scales; Reshape-1
 * without 'shape'. */
#ifndef PIPECC_FRONTEND_ONNX_LEGACY_H
#define PIPECC_FRONTEND_ONNX_LEGACY_H
#include "ir/ir.h"

/* Ops of the default domain that pipecc knows under another name: Scatter (opset 9,
 * deprecated in 11) is ScatterElements without 'reduction'. The op, or IR_OP_UNKNOWN. */
ir_op onnx_legacy_op(const char *domain, const char *op_type);
/* Attribute-only changes of node (its attributes converted, its inputs not yet
 * resolved), before the attribute types are checked. 0, or -1 after reporting (the
 * caller checks nothing more of the node). */
int onnx_legacy_attrs(ir_graph *g, int node);
/* Changes that read or add inputs, once every input is resolved: may add nodes and
 * values. 0, or -1 after reporting (the caller skips the node's arity check). */
int onnx_legacy_inputs(ir_graph *g, int node);

#endif
