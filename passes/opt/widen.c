/* passes/opt/widen.c - float16, bfloat16 and float8 computed in float (pass_widen_half).
 *
 * Both targets hold float16 and bfloat16 tensors as uint16_t bit patterns, the float8
 * ones as uint8_t bit patterns (ir_dtype_narrow), and compute nothing in them: a node
 * that computes (anything but the ops pass_widen_keeps names, which only move, select
 * or cast elements) gets its narrow inputs through a Cast to float, computes in float,
 * and its narrow outputs go through a Cast back (to float8: saturating, Cast's
 * default). Each node rounds once, from its float result, as onnxruntime's float16
 * kernels that compute in float do; a chain of such nodes rounds after every node, as
 * the model says.
 * A narrow constant a computing node reads becomes a float constant here (exact), so
 * the weights of a float16 model are float32 weights in its stages (and, training,
 * float32 master weights).
 *
 * It runs after shape inference in the frontend, and again after the training passes
 * (the loss and backward nodes they add may compute on narrow values). */
#include <stdlib.h>
#include <string.h>

#include "passes/rewrite.h"
#include "passes/pass.h"

int pass_widen_keeps(ir_op op) {
  switch (op) {
    case IR_OP_Cast:
    case IR_OP_CastLike:
    case IR_OP_BitCast:
    case IR_OP_Identity:
    case IR_OP_Reshape:
    case IR_OP_Flatten:
    case IR_OP_Squeeze:
    case IR_OP_Unsqueeze:
    case IR_OP_Transpose:
    case IR_OP_Concat:
    case IR_OP_Split:
    case IR_OP_Slice:
    case IR_OP_Gather:
    case IR_OP_Expand:
    case IR_OP_Tile:
    case IR_OP_Where:
    case IR_OP_Shape:
    case IR_OP_Size:
    case IR_OP_DepthToSpace:
    case IR_OP_SpaceToDepth:
    case IR_OP_ConstantOfShape: return 1;
    default: return 0;
  }
}

static int computes_narrow(const ir_graph *g, const ir_node *n) {
  if (n->dead || pass_widen_keeps(n->op)) return 0;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && ir_dtype_narrow(g->values[n->in[k]].dtype)) return 1;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && ir_dtype_narrow(g->values[n->out[k]].dtype)) return 1;
  return 0;
}

/* A Cast of x to `to` (into the value `out`, else a new one named after x), named
 * after the widened node; its output. */
static int cast(ad_ctx *a, int x, ir_dtype to, int out) {
  ir_graph *g = a->g;
  int node;
  if (out < 0) {
    node = ad_begin(a, IR_OP_Cast, &x, 1, 1, ir_sprintf(g->arena, "%s/f32", g->values[x].name));
  } else {
    node = ir_add_node(g, IR_OP_Cast, ir_sprintf(g->arena, "%s/narrow", a->base), &x, 1, &out, 1);
    g->nodes[node].opset = AD_OPSET;
    g->nodes[node].stage = a->stage;
    g->nodes[node].phase = a->phase;
  }
  ad_attr_i(a, node, "to", to);
  return ad_end(a, node);
}

/* x as float: a float constant (x's elements, exact) or a Cast, one per value. */
static int widened(ad_ctx *a, int x, int *memo) {
  ir_graph *g = a->g;
  if (memo[x] >= 0) return memo[x];
  const ir_value *v = &g->values[x];
  if (v->kind == IR_VAL_CONST && (v->data || v->zero_init)) {
    int64_t n = 1;
    for (int d = 0; d < v->shape.rank; d++) n *= v->shape.dims[d];
    float *f = calloc((size_t)(n ? n : 1), sizeof *f);
    for (int64_t i = 0; i < n; i++) {
      double e = 0;
      ir_const_f64(v, i, &e);
      f[i] = (float)e; /* exact: float16, bfloat16 and float8 values are floats */
    }
    ir_shape s = v->shape;
    int c = ir_add_const(g, ir_sprintf(g->arena, "%s/f32", v->name), IR_FLOAT, &s, f, sizeof *f * (size_t)n);
    free(f);
    g->values[c].is_initializer = g->values[x].is_initializer;
    g->values[c].param = g->values[x].param;
    memo[x] = c;
  } else {
    memo[x] = cast(a, x, IR_FLOAT, -1);
  }
  return memo[x];
}

int pass_widen_half(ir_graph *g, const pass_opts *o) {
  (void)o;
  int n0 = g->n_nodes, nv = g->n_values, done = 0;
  int *memo = malloc(sizeof *memo * (size_t)(nv ? nv : 1));
  for (int v = 0; v < nv; v++) memo[v] = -1;
  ad_ctx a;
  memset(&a, 0, sizeof a);
  a.g = g;
  a.tag = "widen";
  for (int i = 0; i < n0 && !a.err; i++) {
    if (!computes_narrow(g, &g->nodes[i])) continue;
    a.base = g->nodes[i].name && g->nodes[i].name[0] ? g->nodes[i].name : ir_op_name(g->nodes[i].op);
    a.stage = g->nodes[i].stage;
    a.phase = g->nodes[i].phase;
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int x = g->nodes[i].in[k];
      if (x >= 0 && x < nv && ir_dtype_narrow(g->values[x].dtype)) {
        int w = widened(&a, x, memo);
        g->nodes[i].in[k] = w;
      }
    }
    for (int k = 0; k < g->nodes[i].n_out; k++) {
      int y = g->nodes[i].out[k];
      if (y < 0 || !ir_dtype_narrow(g->values[y].dtype)) continue;
      ir_dtype t = g->values[y].dtype;
      int f = ir_add_value(g, ir_sprintf(g->arena, "%s/f32", g->values[y].name), IR_VAL_ACT, IR_FLOAT);
      g->values[f].shape = g->values[y].shape;
      g->values[f].producer = i;
      g->nodes[i].out[k] = f;
      cast(&a, f, t, y); /* y keeps its name, uses and place among the graph outputs */
    }
    done++;
  }
  free(memo);
  if (a.err) return -1;
  if (!done) return 0;
  if (ir_toposort(g)) return -1;
  ir_compact(g);
  ir_rebuild_uses(g);
  return g->n_errors ? -1 : 0;
}
