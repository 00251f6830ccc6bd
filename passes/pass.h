/* passes/pass.h - the pass manager: every pass is a function Graph -> Graph that can be
 * run, timed and dumped alone (`pipecc -d PASS`, `--time-passes`).
 *
 * A pass returns 0, or -1 after reporting model errors through ir/diag.h (pipecc then
 * exits with status 2). Internal bugs assert. */
#ifndef PIPECC_PASSES_PASS_H
#define PIPECC_PASSES_PASS_H
#include <stdint.h>

#include "ir/ir.h"

typedef struct {
  const char *name; /* graph input name */
  ir_shape shape;   /* static */
} pass_shape_binding;

typedef struct {
  const char *name; /* symbolic dim name (dim_param) */
  int64_t value;
} pass_dim_binding;

typedef struct {
  const char *name; /* graph input name */
  double *values;   /* --const NAME=V,V,...: the input's elements, row-major (malloc'd) */
  int n;
} pass_const_binding;

typedef struct {
  pass_shape_binding *shapes;
  int n_shapes; /* --shape NAME:AxBxC */
  pass_const_binding *consts;
  int n_consts; /* --const NAME=V,V,...: the input becomes a constant */
  pass_dim_binding *dims;
  int n_dims; /* -d DIM=VALUE (on the command line: --dim / -D too) */
  pass_dim_binding *seqs;
  int n_seqs; /* --seq NAME=N: sequence input NAME holds N tensors */
  const char **nones;
  int n_nones;  /* --none NAME: optional input NAME holds no value */
  int training; /* keep Dropout/BatchNorm training semantics */
  int verbose;
} pass_opts;

typedef int (*pass_fn)(ir_graph *g, const pass_opts *o);

typedef struct {
  const char *name;
  pass_fn fn;
  const char *help;
} pass_info;

/* The passes of the front half, in order, terminated by {NULL}. */
extern const pass_info pass_frontend_pipeline[];
const pass_info *pass_find(const char *name);

/* bind: an optional input named by --none becomes an empty optional (IR_VAL_NONE), not an
 * input; a sequence input NAME of --seq NAME=N becomes N tensor inputs NAME.0 ... (in its
 * place; the sequence value lists them); apply --shape / -d to graph inputs; every input dim must end up static; then
 * --const turns inputs into constants holding the values given. */
int pass_bind(ir_graph *g, const pass_opts *o);
/* fold: evaluate constant subgraphs (incl. Shape->Gather->Unsqueeze->Concat->Reshape
 * chains), remove Identity, remove Dropout for inference, drop dead nodes. Runs shape
 * inference node by node as it goes (it needs input shapes to fold Shape). */
int pass_fold(ir_graph *g, const pass_opts *o);
/* A graph that folding left with no node (every output a constant or a graph input:
 * Shape, Size, ConstantOfShape of static shapes) gets one Identity copying its first
 * output, so that the planner has a stage to place; the other outputs pass through that
 * stage as any constant or input output does. Returns 1 when it added the node, else 0. */
int pass_keep_one_node(ir_graph *g);
/* einsum: Einsum nodes written as Transpose/Reshape/Gather/Expand/ReduceSum/MatMul
 * (passes/lower/einsum.c), after shape inference. */
int pass_lower_einsum(ir_graph *g, const pass_opts *o);
/* quant: QuantizeLinear/DequantizeLinear written as Cast/Div/Round/Add/Clip and
 * Cast/Sub/Mul (passes/lower/quant.c), after shape inference. */
int pass_lower_quant(ir_graph *g, const pass_opts *o);
/* lower: GroupNormalization, MeanVarianceNormalization and EyeLike written in other
 * ops (passes/lower/lower_ops.c), after shape inference. */
int pass_lower_ops(ir_graph *g, const pass_opts *o);
/* signal: DFT, STFT, the window functions and MelWeightMatrix written in other ops
 * (passes/lower/lower_signal.c), after shape inference. */
int pass_lower_signal(ir_graph *g, const pass_opts *o);
/* widen: float16, bfloat16 and float8 computed in float (passes/opt/widen.c): every node
 * but those pass_widen_keeps names reads narrow inputs through a Cast to float (a
 * narrow constant becomes a float constant) and writes narrow outputs through a Cast
 * back. */
int pass_widen_half(ir_graph *g, const pass_opts *o);
/* The ops that may read and write the narrow types (ir_dtype_narrow; bit patterns: they
 * move, select or cast elements); the targets' only ops on those types. */
int pass_widen_keeps(ir_op op);
/* shape: infer dtype and static shape of every value and the FLOPs of every node;
 * reports what cannot be made static. */
int pass_shape(ir_graph *g, const pass_opts *o);
/* Infer the outputs of one node from its inputs (which must be inferred already).
 * Sets dtype/shape of outputs and node->flops. 0, or -1 after reporting. */
int pass_shape_node(ir_graph *g, int node);

#endif
