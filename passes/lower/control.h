/* passes/lower/control.h - If, Loop, Scan and the sequence ops expanded into the graph
 * (passes/lower/control.c, passes/lower/sequence.c), as
 * the fold pass walks it: every control-flow node becomes ordinary nodes, since the
 * stages of a pipeline are straight-line code.
 *
 *   If: a condition known at compile time picks its branch; one computed at run time
 *     computes both branches and selects each output with Where (the branches must then
 *     give each output the same type and shape).
 *   Loop: unrolled; the trip count must be known at compile time (constants and static
 *     shapes), or the condition must turn false at compile time (a while loop over a
 *     counter). A condition that stays known stops the unrolling where it turns false.
 *     One computed at run time masks the remaining iterations: each iteration's body
 *     reads the last body's values (so counters in them still fold, and stop the
 *     unrolling once the condition is false whatever the data), and the loop's results
 *     take them by Where only while the condition has held; this needs no scan outputs
 *     and carried values of a fixed shape.
 *   Scan (8, and 9 on): unrolled over the scanned axis, whose length the static shapes give.
 *   Sequences are lists of tensors known at compile time (ir_value.seq): a Loop may carry
 *     one (TorchScript's list.append) unless its condition is computed at run time; an If
 *     computed at run time selects sequences of one length tensor by tensor; SequenceMap
 *     instantiates its body once per element; the other sequence ops are evaluated
 *     (passes/lower/sequence.c).
 *
 * The expander makes the nodes and hands each to the walk's visitor as soon as it
 * exists (shape inference, folding, Identity forwarding, and the expansion of nested
 * control flow), so a condition or trip count computed inside a body is known, folded,
 * when the next iteration needs it. */
#ifndef PIPECC_PASSES_CONTROL_H
#define PIPECC_PASSES_CONTROL_H
#include "ir/ir.h"

typedef struct {
  ir_graph *g;
  /* the walk's step for one new node whose inputs were visited: 0, or -1 (reported) */
  int (*visit)(void *ctx, int node);
  /* the value that now stands for v (Identity forwarding), v itself if none */
  int (*resolve)(void *ctx, int v);
  void *ctx;
  long n_made; /* nodes made so far, against the budget */
  int counter; /* numbers the expansions, for unique names */
} control_env;

/* 1 for If, Loop, Scan, SequenceMap and the sequence ops. */
int control_is(ir_op op);
/* Expand the control-flow or sequence node `node`, whose inputs have been visited: it
 * ends dead, its tensor outputs written by Identity nodes of the expansion's results,
 * its sequence outputs made lists (IR_VAL_SEQ). 0, or -1 (reported). */
int control_expand(control_env *e, int node);

#endif
