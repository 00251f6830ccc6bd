/* passes/batch.h - compiling for micro-batches: which axis of each value carries the
 * batch, and whether every node commutes with splitting it.
 *
 * pipecc compiles a stage for one micro-batch: dim 0 of every graph input is divided
 * by the number of micro-batches M before folding and shape inference, and the runtime
 * joins the micro-batches' outputs along dim 0. That is right only where every node
 * treats the samples of a batch independently. Two things break it, both common in
 * models PyTorch exported with a fixed batch size:
 *
 *   - constants that hold the batch size: the tracer writes x.size(0) as a number, so
 *     ShuffleNet's channel shuffle reshapes to [B, 2, C/2, H, W] and nn.MultiheadAttention
 *     to [L, B*heads, d]; at a micro-batch the element count no longer matches, or (a -1
 *     in the shape) it matches and the samples silently end up in the wrong places;
 *   - nodes that work across the batch axis: a softmax, a cumulative sum or a
 *     recurrence along it, a concatenation or split of it, a reduction over it.
 *
 * tools/pipecc.c therefore also infers the model at the whole batch (g->batch_full) and
 * compares shapes value by value (by name): a value whose shape differs carries the
 * batch on the one axis where the whole batch's dim is M times the micro-batch's. That
 * axis may hold more than the batch (a Reshape of [L, B, E] to [L*B, E]): the factors
 * before and after it are tracked through Reshape and Flatten, so a later Reshape finds
 * the batch again, and two inputs that hold it in different orders are caught. */
#ifndef PIPECC_PASSES_BATCH_H
#define PIPECC_PASSES_BATCH_H

#include "ir/ir.h"

/* The axis of value v (of g) that carries the batch: >= 0; -1 when v does not depend on
 * the batch (same shape at the whole batch); -2 when its shapes differ in some other way
 * (not one axis M times smaller); -3 when unknown (no whole-batch graph, v not in it,
 * or a shape not static). */
int pass_batch_axis(const ir_graph *g, int v);

/* After node's shapes are inferred: where the batch lies in each of its outputs
 * (ir_value.batch_outer/batch_inner): through Reshape and Flatten, the output axis that
 * holds the input's batch elements; otherwise as in the input that carries it. */
void pass_batch_node(ir_graph *g, int node);

/* For sh_Reshape: the shape the Reshape node must produce at a micro-batch, derived
 * from its output at the whole batch (a shape fixed at export names the whole batch).
 * 1 with *out set; 0 when nothing is known or the input does not depend on the batch;
 * -1 (reported, naming the node; the caller's g->diag_hint says what to do) when no
 * axis of the output can hold the batch. */
int pass_batch_reshape(ir_graph *g, int node, ir_shape *out);

/* g->diag_hint while the micro-batch graph is folded and inferred (the whole batch
 * passed there already, so what fails is a constant that holds the batch size) */
#define PASS_BATCH_HINT                                                                                          \
  "; the whole batch passes here, so the model fixes its batch size in a constant: compile with -m 1 or export " \
  "with a dynamic batch axis"

/* A constant input (slot) of node whose dim `axis` holds the whole batch fixed at
 * export (M x want) while the node expects a micro-batch of `want` there: when every
 * sample's slice is the same (a zero or broadcast initial state), the input is replaced
 * by a constant of the first `want` slices and 1 is returned; else 0 (nothing changed;
 * the caller's shape check reports it). */
int pass_batch_const(ir_graph *g, int node, int slot, int axis, int64_t want);

/* For sh_Expand: where the target shape s[0..n) holds the whole batch on the axis
 * facing the input's batch (x.expand(B, ...) traced with B a number), s is set to the
 * micro-batch there and 1 returned; else 0. */
int pass_batch_expand(ir_graph *g, int node, int64_t *s, int n);

/* For sh_Resize: where its constant 'sizes' s[0..na) (for the input axes ax) hold the
 * whole batch on the input's batch axis (F.interpolate(size=...) traced with the batch a
 * number), s is set to the micro-batch there and 1 returned; else 0. */
int pass_batch_sizes(ir_graph *g, int node, int64_t *s, const int *ax, int na);

/* Before node's shapes are inferred: the constant operands of an element-wise op,
 * Concat or Where whose axis facing another input's batch holds the whole batch (a
 * class token or mask expanded for the batch at export) are cut to the micro-batch by
 * pass_batch_const when every sample's slice is the same. A Gather along the axis
 * that holds its data's batch (flattened: sample j's elements j*C to (j+1)*C-1) with
 * constant indices fixed at export for the whole batch that enumerate each sample's own
 * elements (sample j's indices are sample 0's plus j*C: as_strided after a mean, as
 * dynamo writes it) gets the indices of the micro-batch's first samples; so does a
 * GatherND whose constant (b, ...) tuples enumerate the batch (dynamo at a fixed batch). */
void pass_batch_consts(ir_graph *g, int node);

/* After shape inference at the micro-batch: report (naming the node, or the graph
 * output) every node whose outputs do not carry the batch consistently, that works
 * along the batch axis, or a graph output not split along axis 0: the first such, as
 * what follows from it would repeat it. 1 after reporting, else 0 (also when
 * g->batch_full is NULL). */
int pass_batch_check(ir_graph *g);

#endif
