/* passes/lower/control_impl.h - what the expansion of control flow (passes/lower/control.c) and of
 * sequence ops (passes/lower/sequence.c) share: the state of one expansion and the helpers
 * that make nodes and constants, each visited (passes/lower/control.h) as it is made. */
#ifndef PIPECC_PASSES_CONTROL_IMPL_H
#define PIPECC_PASSES_CONTROL_IMPL_H
#include "ir/diag.h"
#include "passes/lower/control.h"

/* Nodes all expansions of one graph may make. */
#define CONTROL_MAX_NODES (1L << 20)
/* the opset of the nodes the expansion makes itself (Unsqueeze takes its axes as input) */
#define CONTROL_OPSET 17

typedef struct {
  control_env *e;
  ir_graph *g;
  int node;         /* the node expanded (dead from the start) */
  ir_node nd;       /* a copy of it: the node array moves as nodes are made */
  const char *base; /* name prefix of everything made */
  int tags;         /* numbers the nodes and constants made */
  int err;
} xp;

#define XFAIL(...) return (ir_error_node(x->g, x->node, __VA_ARGS__), x->err = 1, -1)

static inline int res(xp *x, int v) { return v < 0 ? v : x->e->resolve(x->e->ctx, v); }
static inline const ir_value *val(xp *x, int v) { return &x->g->values[v]; }

/* base/tagN: a unique name for something the expansion makes */
const char *cx_tagged(xp *x, const char *tag);
/* A node made by the expansion: one output (out, or a new value), visited. Returns the
 * output value (resolved), or -1 (reported). */
int cx_make(xp *x, ir_op op, const int *in, int n_in, int out, const char *attr, int64_t ai);
/* The same with n_out outputs: out[k] < 0 gets a new value; on return out[] holds the
 * outputs (resolved). 0, or -1 (reported). */
int cx_make_n(xp *x, ir_op op, const int *in, int n_in, int *out, int n_out, const char *attr, int64_t ai);
/* An int64 constant: a scalar (n 1) or a vector of n. */
int cx_i64(xp *x, const int64_t *v, int n, int scalar);
/* "float32 [2, 3]" into buf */
const char *cx_typed(const ir_value *v, char *buf, size_t n);

/* passes/lower/sequence.c: 1 for the sequence ops evaluated at compile time, and their
 * evaluation (the node x->node, dead): 0, or -1 (reported). */
int seq_op_is(ir_op op);
int seq_expand(xp *x);

#endif
