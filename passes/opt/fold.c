/* passes/opt/fold.c - constant folding, Identity and (inference) Dropout removal, dead code.
 *
 * One walk over the nodes in topological order. Each live node first gets its outputs
 * inferred (pass_shape_node: Shape needs its input's shape); then
 *   - Identity, and Dropout when it is an identity (inference, or training_mode off),
 *     is removed: its output becomes an alias of its input. A graph output keeps its
 *     name: the input's producer writes the output value directly, or the output takes
 *     over the input's constant data; only a copy of a graph input or of another graph
 *     output stays as an Identity.
 *   - a node whose inputs are all constants, or a Shape/Size whose input shape is
 *     static, is evaluated (passes/opt/fold_eval.c; Split here) and its outputs become
 *     constants in place (same values, same names), the node dead. Ops, dtypes or
 *     sizes the evaluator does not cover are left alone. When compiling for training, nodes reading a
 *     trainable float initializer are never folded, so gradients still reach it.
 * If, Loop, Scan and the sequence ops are expanded as the walk reaches them
 * (passes/lower/control.h): the nodes made go through the same steps at once, so conditions and
 * trip counts computed in a body fold before the next iteration needs them. A sequence
 * graph output becomes one output per tensor at the end of the walk. Then every node whose outputs nobody
 * needs is dropped and the graph compacted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/lower/control.h"
#include "passes/opt/fold.h"
#include "passes/pass.h"

typedef struct {
  ir_graph *g;
  const pass_opts *o;
  int *fwd; /* value -> the value that replaces it, -1 if none */
  int n_fwd, cap_fwd;
  int n_values_used; /* values whose n_uses ir_rebuild_uses counted (made later: unknown) */
  int n_folded, n_identity, n_dropout, n_control;
  int warned_training_mode;
  control_env ce;
} fold_ctx;

static int resolve(const fold_ctx *c, int v) {
  while (v >= 0 && v < c->n_fwd && c->fwd[v] >= 0) v = c->fwd[v];
  return v;
}

static void set_fwd(fold_ctx *c, int v, int to) {
  if (v >= c->cap_fwd) {
    int cap = c->cap_fwd * 2 > v + 1 ? c->cap_fwd * 2 : v + 1;
    c->fwd = ir_xrealloc(c->fwd, sizeof(int) * (size_t)cap);
    c->cap_fwd = cap;
  }
  while (c->n_fwd <= v) c->fwd[c->n_fwd++] = -1;
  c->fwd[v] = to;
}

/* Remove the single-input single-output copy `node` (y = x). Returns 1 if removed, 0 if
 * it has to stay (a graph output copying a graph input or another graph output). */
static int forward(fold_ctx *c, int node, int x, int y) {
  ir_graph *g = c->g;
  ir_value *X = &g->values[x], *Y = &g->values[y];
  if (!Y->is_output) {
    set_fwd(c, y, x);
    g->nodes[node].dead = 1;
    return 1;
  }
  if (X->kind == IR_VAL_CONST) {
    /* the output takes over the constant's data (no copy) */
    Y->kind = IR_VAL_CONST;
    Y->dtype = X->dtype;
    Y->shape = X->shape;
    Y->data = X->data;
    Y->nbytes = X->nbytes;
    Y->producer = -1;
    Y->is_initializer = 0;
    g->nodes[node].dead = 1;
    return 1;
  }
  if (X->kind == IR_VAL_ACT && !X->is_output && X->producer >= 0 && !g->nodes[X->producer].dead) {
    /* the producer of x writes the graph output y directly */
    ir_node *p = &g->nodes[X->producer];
    for (int k = 0; k < p->n_out; k++)
      if (p->out[k] == x) p->out[k] = y;
    Y->producer = X->producer;
    Y->dtype = X->dtype;
    Y->shape = X->shape;
    X->producer = -1;
    g->nodes[node].dead = 1;
    ir_replace_uses(g, x, y); /* consumers of x already visited */
    set_fwd(c, x, y);         /* and those still to come */
    return 1;
  }
  return 0;
}

/* 1 if the constant input v of a node may not be folded into a new constant. */
static int trainable(const fold_ctx *c, const ir_value *v) {
  return c->o->training && v->is_initializer && ir_dtype_is_float(v->dtype);
}

/* Dropout: 1 if handled (removed or turned into an Identity), 0 to keep it. */
static int fold_dropout(fold_ctx *c, int node) {
  ir_graph *g = c->g;
  ir_node *n = &g->nodes[node];
  if (n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0) return 0;
  const ir_value *tm = ir_in(g, n, 2);
  int64_t tmv = 0;
  int tm_const = !tm || (tm->kind == IR_VAL_CONST && !ir_const_i64(tm, 0, &tmv));
  if (c->o->training) {
    /* Dropout-12+ is an identity unless training_mode is on; older ones follow the run */
    if (n->opset < 12 || !tm_const || tmv) return 0;
  } else if (tm && (!tm_const || tmv) && !c->warned_training_mode) {
    c->warned_training_mode = 1;
    ir_warn_node(g, node, "Dropout has training_mode %s; compiling for inference, Dropout is removed",
                 tm_const ? "= true" : "set at run time");
  }
  int x = n->in[0], m = n->n_out > 1 ? n->out[1] : -1;
  if (m >= 0 && (m >= c->n_values_used || g->values[m].n_uses || g->values[m].is_output)) {
    /* the mask is a constant of x's shape: all true from Dropout-12 on (the spec's
     * inference mode); onnxruntime returns it all false for Dropout-7..11 */
    const ir_value *X = &g->values[x];
    fold_tensor t = {0};
    int64_t numel = ir_shape_numel(&X->shape);
    if (numel < 0 || numel > FOLD_MAX_ELEMS || X->shape.rank > IR_MAX_RANK) return 0;
    t.dt = IR_BOOL;
    t.rank = X->shape.rank;
    for (int d = 0; d < t.rank; d++) t.dims[d] = X->shape.dims[d];
    t.n = numel;
    t.d = malloc(sizeof(fold_el) * (size_t)(numel ? numel : 1));
    IR_ASSERT(t.d);
    for (int64_t k = 0; k < numel; k++) t.d[k].i = n->opset >= 12;
    fold_tensor_store(g, &t, m);
    fold_tensor_free(&t);
  }
  /* from here on it is an Identity */
  n->op = IR_OP_Identity;
  n->op_type = ir_op_name(IR_OP_Identity);
  n->n_in = 1;
  n->n_out = 1;
  n->n_attr = 0;
  c->n_dropout++;
  forward(c, node, x, n->out[0]); /* or it stays as that Identity */
  return 1;
}

static int foldable(const fold_ctx *c, const ir_node *n) {
  const ir_graph *g = c->g;
  if (n->n_out != 1 || n->out[0] < 0) return 0;
  if (n->op == IR_OP_Shape || n->op == IR_OP_Size) {
    const ir_value *x = n->n_in >= 1 && n->in[0] >= 0 ? &g->values[n->in[0]] : NULL;
    return x && ir_shape_static(&x->shape);
  }
  int any = 0;
  for (int k = 0; k < n->n_in; k++) {
    if (n->in[k] < 0) continue;
    const ir_value *v = &g->values[n->in[k]];
    if (v->kind != IR_VAL_CONST || trainable(c, v)) return 0;
    any = 1;
  }
  return any;
}

/* Split of a constant (its outputs inferred): each output becomes a constant, the bytes
 * of its slice. 1 if folded. */
static int fold_split(fold_ctx *c, int node) {
  ir_graph *g = c->g;
  ir_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_in; k++) {
    const ir_value *v = n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
    if (v && (v->kind != IR_VAL_CONST || trainable(c, v))) return 0;
  }
  const ir_value *x = &g->values[n->in[0]];
  int64_t numel = ir_shape_numel(&x->shape);
  int64_t axis = ir_attr_int(n, "axis", 0);
  if (axis < 0) axis += x->shape.rank;
  if (numel < 0 || numel > FOLD_MAX_ELEMS || axis < 0 || axis >= x->shape.rank) return 0;
  size_t es = ir_dtype_size(x->dtype);
  int64_t outer = 1, inner = (int64_t)es, D = x->shape.dims[axis];
  for (int d = 0; d < axis; d++) outer *= x->shape.dims[d];
  for (int d = (int)axis + 1; d < x->shape.rank; d++) inner *= x->shape.dims[d];
  unsigned char *src = ir_xmalloc(x->nbytes + 1);
  ir_const_copy(x, src);
  int64_t off = 0;
  for (int k = 0; k < n->n_out; k++) {
    int ov = n->out[k];
    if (ov < 0) continue;
    ir_value *o = &g->values[ov];
    int64_t len = o->shape.rank == x->shape.rank ? o->shape.dims[axis] : -1;
    if (len < 0 || off + len > D) { /* shapes not as expected: leave the node */
      free(src);
      return 0;
    }
    off += len;
  }
  off = 0;
  for (int k = 0; k < n->n_out; k++) {
    int ov = n->out[k];
    if (ov < 0) continue;
    ir_value *o = &g->values[ov];
    int64_t len = o->shape.dims[axis];
    size_t nb = (size_t)(outer * len * inner);
    unsigned char *p = ir_alloc(g->arena, nb ? nb : 1);
    for (int64_t i = 0; i < outer; i++) memcpy(p + i * len * inner, src + (i * D + off) * inner, (size_t)(len * inner));
    o->kind = IR_VAL_CONST;
    o->data = p;
    o->nbytes = nb;
    o->producer = -1;
    o->is_initializer = 0;
    off += len;
  }
  free(src);
  n->dead = 1;
  return 1;
}

/* 1 (0) when constant v holds only true (false) values, else -1. */
static int const_truth(const ir_value *v) {
  if (v->kind != IR_VAL_CONST) return -1;
  int64_t n = ir_shape_numel(&v->shape), e, first = -1;
  for (int64_t k = 0; k < n; k++) {
    if (ir_const_i64(v, k, &e)) return -1;
    if (k == 0) first = e != 0;
    else if ((e != 0) != first) return -1;
  }
  return (int)first;
}

/* And/Or with one constant operand, Where with a constant condition: the answer when
 * the constant decides it (an operand, when it already has the output's type and shape,
 * or a constant). Loops whose condition is computed at run time rely on it: their
 * counter's half of the condition folds and stops the unrolling. 1 if simplified. */
static int simplify(fold_ctx *c, int node) {
  ir_graph *g = c->g;
  ir_node *n = &g->nodes[node];
  if (n->n_out != 1 || n->out[0] < 0) return 0;
  const ir_value *y = &g->values[n->out[0]];
  if (n->op == IR_OP_Where && n->n_in == 3) {
    int t = const_truth(&g->values[n->in[0]]);
    if (t < 0) return 0;
    int pick = n->in[t ? 1 : 2];
    const ir_value *p = &g->values[pick];
    if (p->dtype != y->dtype || !ir_shape_same_dims(&p->shape, &y->shape)) return 0;
    return forward(c, node, pick, n->out[0]);
  }
  if ((n->op != IR_OP_And && n->op != IR_OP_Or) || n->n_in != 2) return 0;
  for (int k = 0; k < 2; k++) {
    int t = const_truth(&g->values[n->in[k]]);
    if (t < 0) continue;
    int other = n->in[1 - k];
    if (t == (n->op == IR_OP_And)) { /* x and true, x or false: x */
      const ir_value *o = &g->values[other];
      if (!ir_shape_same_dims(&o->shape, &y->shape)) return 0;
      return forward(c, node, other, n->out[0]);
    }
    /* x and false, x or true: all false / all true */
    int64_t numel = ir_shape_numel(&y->shape);
    if (numel < 0 || numel > FOLD_MAX_ELEMS) return 0;
    fold_tensor f = {0};
    f.dt = IR_BOOL;
    f.rank = y->shape.rank;
    for (int d = 0; d < f.rank; d++) f.dims[d] = y->shape.dims[d];
    f.n = numel;
    f.d = ir_xmalloc(sizeof(fold_el) * (size_t)(numel ? numel : 1));
    for (int64_t e = 0; e < numel; e++) f.d[e].i = t;
    fold_tensor_store(g, &f, n->out[0]);
    fold_tensor_free(&f);
    g->nodes[node].dead = 1;
    return 1;
  }
  return 0;
}

static int live_nodes(const ir_graph *g) {
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++) k += !g->nodes[i].dead;
  return k;
}

/* One node of the walk (its inputs visited). 0, or -1 (reported). */
static int visit(fold_ctx *c, int i) {
  ir_graph *g = c->g;
  ir_node *n = &g->nodes[i];
  if (n->dead) return 0;
  for (int k = 0; k < n->n_in; k++) n->in[k] = resolve(c, n->in[k]);
  if (n->op == IR_OP_Identity && n->n_in == 1 && n->in[0] >= 0 &&
      (g->values[n->in[0]].kind == IR_VAL_SEQ || g->values[n->in[0]].kind == IR_VAL_NONE)) {
    n->dead = 1; /* a sequence copied: the same list; an empty optional: another */
    const ir_value *s = &g->values[n->in[0]];
    if (n->n_out == 1 && n->out[0] >= 0) {
      if (s->kind == IR_VAL_NONE) ir_set_none(g, n->out[0]);
      else ir_set_seq(g, n->out[0], s->seq, s->seq_n, s->dtype);
    }
    return 0;
  }
  if (control_is(n->op)) {
    c->n_control++;
    return control_expand(&c->ce, i);
  }
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && (g->values[n->in[k]].kind == IR_VAL_SEQ || g->values[n->in[k]].kind == IR_VAL_NONE)) {
      char nm[96];
      ir_error_node(g, i, "input %d '%s' is %s; %s takes tensors", k,
                    ir_printable(g->values[n->in[k]].name, 60, nm, sizeof nm),
                    g->values[n->in[k]].kind == IR_VAL_SEQ ? "a sequence" : "an optional without a value", n->op_type);
      return -1;
    }
  if (pass_shape_node(g, i)) return -1;
  n = &g->nodes[i];
  if (n->op == IR_OP_Identity && n->n_in == 1 && n->in[0] >= 0 && n->n_out == 1 && n->out[0] >= 0) {
    if (forward(c, i, n->in[0], n->out[0])) c->n_identity++;
    return 0;
  }
  if (n->op == IR_OP_Dropout && fold_dropout(c, i)) return 0;
  if (n->op == IR_OP_Split && n->n_in >= 1 && n->in[0] >= 0) {
    c->n_folded += fold_split(c, i);
    return 0;
  }
  if (!foldable(c, n)) {
    c->n_folded += simplify(c, i);
    return 0;
  }
  fold_tensor t;
  if (!fold_eval(g, i, &t)) return 0;
  fold_tensor_store(g, &t, n->out[0]);
  fold_tensor_free(&t);
  g->nodes[i].dead = 1;
  c->n_folded++;
  return 0;
}

static int visit_cb(void *ctx, int node) { return visit(ctx, node); }
static int resolve_cb(void *ctx, int v) { return resolve(ctx, v); }

/* A graph output that is a sequence becomes one output per element, NAME.0, NAME.1, ...
 * (each a copy of its element, visited: forwarded where it can be). 0, or -1. */
static int flatten_outputs(fold_ctx *c) {
  ir_graph *g = c->g;
  int n = 0, any = 0;
  for (int k = 0; k < g->n_outputs; k++) {
    const ir_value *v = &g->values[resolve(c, g->outputs[k])];
    if (v->kind == IR_VAL_NONE) {
      char nm[96];
      ir_error(g,
               "graph output '%s' is an optional without a value: a pipeline gives tensors, so an output must hold one",
               ir_printable(g->values[g->outputs[k]].name, 60, nm, sizeof nm));
      return -1;
    }
    n += v->kind == IR_VAL_SEQ ? v->seq_n : 1;
    any |= v->kind == IR_VAL_SEQ;
  }
  if (!any) return 0;
  int *outs = ir_alloc_array(g->arena, (size_t)n + 1, sizeof(int)), m = 0;
  for (int k = 0; k < g->n_outputs; k++) {
    int sv = resolve(c, g->outputs[k]);
    if (g->values[sv].kind != IR_VAL_SEQ) {
      outs[m++] = g->outputs[k];
      continue;
    }
    g->values[g->outputs[k]].is_output = 0;
    g->values[sv].is_output = 0;
    for (int i = 0; i < g->values[sv].seq_n; i++) {
      const ir_value *s = &g->values[sv];
      int e = resolve(c, s->seq[i]);
      int y = ir_add_value(g, ir_sprintf(g->arena, "%s.%d", g->values[g->outputs[k]].name, i), IR_VAL_ACT,
                           g->values[e].dtype);
      g->values[y].is_output = 1;
      int id = ir_add_node(g, IR_OP_Identity, g->values[y].name, &e, 1, &y, 1);
      g->nodes[id].opset = g->opset;
      outs[m++] = y;
      if (visit(c, id)) return -1;
    }
  }
  g->outputs = outs;
  g->n_outputs = m;
  if (!m) {
    ir_error(g, "every graph output is an empty sequence: the model gives no tensor");
    return -1;
  }
  c->n_control++; /* nodes were appended: sort again */
  return 0;
}

int pass_fold(ir_graph *g, const pass_opts *o) {
  fold_ctx c = {0};
  c.g = g;
  c.o = o;
  c.ce = (control_env){g, visit_cb, resolve_cb, &c, 0, 0};
  int before = live_nodes(g), rc = 0;
  ir_rebuild_uses(g);
  c.n_values_used = g->n_values;
  /* the nodes made by expanding control flow are visited as they are made */
  for (int i = 0, n0 = g->n_nodes; i < n0; i++)
    if (visit(&c, i)) {
      rc = -1;
      break;
    }
  if (!rc) rc = flatten_outputs(&c);
  free(c.fwd);
  if (rc) return rc;
  if (c.n_control && ir_toposort(g)) return -1; /* the made nodes were appended */

  /* dead code: in reverse topological order, a node lives if a live node or the graph
   * needs one of its outputs */
  char *need = ir_xcalloc((size_t)g->n_values + 1, 1);
  for (int k = 0; k < g->n_outputs; k++) need[g->outputs[k]] = 1;
  int n_dead = ir_remove_dead(g, need);
  free(need);
  ir_compact(g);
  if (o->verbose)
    fprintf(stderr,
            "pipecc: fold: %d nodes -> %d (%d folded, %d Identity, %d Dropout, %d dead, %d If/Loop/Scan expanded)\n",
            before, g->n_nodes, c.n_folded, c.n_identity, c.n_dropout, n_dead, c.n_control);
  return g->n_errors ? -1 : 0;
}

int pass_keep_one_node(ir_graph *g) {
  if (live_nodes(g) || !g->n_outputs) return 0;
  int from = g->outputs[0];
  const ir_value *f = &g->values[from];
  int to = ir_add_value(g, f->name, IR_VAL_ACT, f->dtype);
  ir_take_output(g, to, from); /* the copy takes the output's name and place */
  int id = ir_add_node(g, IR_OP_Identity, "", (int[]){from}, 1, (int[]){to}, 1);
  if (pass_shape_node(g, id)) return -1;
  ir_compact(g);
  return 1;
}
