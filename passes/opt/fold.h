/* passes/opt/fold.h - the constant evaluator behind pass_fold (passes/opt/fold.c).
 *
 * fold_eval computes the outputs of one node whose inputs are all constants (or of a
 * Shape/Size node whose input shape is static). Every op of an element-wise kind in
 * ir/ops.def (unary, binary, comparison, variadic), Where, Cast and CastLike goes
 * through one driver: the inputs broadcast to the output's shape and dtype (as shape
 * inference set them) and one scalar function per element, which declines what it cannot
 * compute exactly. The structural and index ops have their own functions (Shape, Size,
 * Gather, Unsqueeze, Squeeze, Concat, Slice, Reshape, Flatten, ConstantOfShape, Range,
 * Expand, Transpose, Tile, Pad, GatherElements, GatherND, ScatterND, ScatterElements,
 * Trilu, ArgMax/ArgMin, CumSum, EyeLike, OneHot, Compress, ReduceSum/Prod/Max/Min;
 * Split in fold.c), most writing an output of the shape inference gave it. Values are
 * float32, float64, bool and the signed and unsigned integer types up to 32 bits plus
 * int64.
 *
 * Folding must never change a result, so the evaluator declines (returns 0) whenever it
 * is not sure to compute exactly what a runtime computes: integer division by zero or
 * overflow, float-to-int casts out of range, NaN in Max/Min/Clip/Sign, a Clip whose min
 * exceeds its max, float sums of more than two terms (Sum, CumSum, ReduceSum of
 * floats), transcendental functions other than Pow (libm decides their last bit), a
 * scatter that writes an element twice, unsupported dtypes, tensors over FOLD_MAX_ELEMS
 * elements, invalid attributes (the shape pass reports those). */
#ifndef PIPECC_PASSES_FOLD_H
#define PIPECC_PASSES_FOLD_H
#include <stdint.h>

#include "ir/ir.h"

/* Largest tensor (input or output) the evaluator reads or writes, in elements. */
#define FOLD_MAX_ELEMS (1 << 20)

/* One element: integers and bool in i (wrapped to the dtype's range), float32 and
 * float64 in f (a float32 value is held exactly as a double). */
typedef union {
  int64_t i;
  double f;
} fold_el;

typedef struct {
  ir_dtype dt;
  int rank;
  int64_t dims[IR_MAX_RANK];
  int64_t n;  /* element count */
  fold_el *d; /* n elements (malloc'd) */
} fold_tensor;

/* 1 if the evaluator can hold values of this dtype. */
int fold_dtype_ok(ir_dtype dt);
/* Evaluate the single-output node `node` into *out (malloc'd data, free with
 * fold_tensor_free). Returns 1 on success, 0 if the node is not foldable. */
int fold_eval(ir_graph *g, int node, fold_tensor *out);
void fold_tensor_free(fold_tensor *t);
/* Turn value v into a constant holding t (data copied into the graph's arena). */
void fold_tensor_store(ir_graph *g, const fold_tensor *t, int v);

#endif
