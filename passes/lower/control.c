/* passes/lower/control.c - If, Loop, Scan, SequenceMap and FlexAttention (ai.onnx.preview, its
 * score_mod and prob_mod bodies) expanded into ordinary nodes (see
 * control.h; the other sequence ops are in passes/lower/sequence.c).
 *
 * A body (ir_attr.graph, frontend/onnx_load.c) is instantiated by copying its nodes into
 * the graph under a name prefix: its formal inputs and captured values map to the
 * node's actual inputs (the captured ones are the node's implicit inputs), its
 * constants to constants of the graph sharing their data, its other values to new
 * values. Every node made is visited at once (control_env.visit: shape inference and
 * folding, and the expansion of control flow nested in it), so the next iteration sees
 * what the last one folded. The expansion's results reach the node's own outputs
 * through Identity nodes, which the walk then forwards. */
#include "passes/lower/control.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/lower/control_impl.h"
#include "passes/shape/shape_impl.h"

/* Iterations of a Loop without a trip count (its condition decides, folded at every
 * iteration). */
#define CONTROL_MAX_ITERS 100000

int control_is(ir_op op) {
  return op == IR_OP_If || op == IR_OP_Loop || op == IR_OP_Scan || op == IR_OP_SequenceMap ||
         op == IR_OP_FlexAttention || seq_op_is(op);
}

/* Never reached: the fold pass expands every If, Loop, Scan and sequence op before shape
 * inference proper (pass_shape) runs. */
static int sh_control(ir_graph *g, int node) {
  SH_FAIL("%s was not expanded (internal error: the fold pass expands control flow and sequence ops)",
          SH_NODE->op_type);
}
int sh_If(ir_graph *g, int node) { return sh_control(g, node); }
int sh_Loop(ir_graph *g, int node) { return sh_control(g, node); }
int sh_Scan(ir_graph *g, int node) { return sh_control(g, node); }
int sh_SequenceMap(ir_graph *g, int node) { return sh_control(g, node); }
int sh_FlexAttention(ir_graph *g, int node) { return sh_control(g, node); }
int sh_SequenceEmpty(ir_graph *g, int node) { return sh_control(g, node); }
int sh_SequenceConstruct(ir_graph *g, int node) { return sh_control(g, node); }
int sh_SequenceInsert(ir_graph *g, int node) { return sh_control(g, node); }
int sh_SequenceAt(ir_graph *g, int node) { return sh_control(g, node); }
int sh_SequenceErase(ir_graph *g, int node) { return sh_control(g, node); }
int sh_SequenceLength(ir_graph *g, int node) { return sh_control(g, node); }
int sh_ConcatFromSequence(ir_graph *g, int node) { return sh_control(g, node); }
int sh_SplitToSequence(ir_graph *g, int node) { return sh_control(g, node); }
int sh_Optional(ir_graph *g, int node) { return sh_control(g, node); }
int sh_OptionalHasElement(ir_graph *g, int node) { return sh_control(g, node); }
int sh_OptionalGetElement(ir_graph *g, int node) { return sh_control(g, node); }

const char *cx_tagged(xp *x, const char *tag) { return ir_sprintf(x->g->arena, "%s/%s%d", x->base, tag, x->tags++); }

/* A node made by the expansion: one output (out, or a new value), visited. Returns the
 * output value (resolved), or -1 (reported). */
int cx_make(xp *x, ir_op op, const int *in, int n_in, int out, const char *attr, int64_t ai) {
  int o = out;
  return cx_make_n(x, op, in, n_in, &o, 1, attr, ai) ? -1 : o;
}

int cx_make_n(xp *x, ir_op op, const int *in, int n_in, int *out, int n_out, const char *attr, int64_t ai) {
  if (x->err) return -1;
  ir_graph *g = x->g;
  if (++x->e->n_made > CONTROL_MAX_NODES)
    XFAIL("expanding control flow would make more than %ld nodes", (long)CONTROL_MAX_NODES);
  const char *nm = cx_tagged(x, ir_op_name(op));
  for (int k = 0; k < n_out; k++)
    if (out[k] < 0)
      out[k] = ir_add_value(g, n_out > 1 ? ir_sprintf(g->arena, "%s.%d", nm, k) : nm, IR_VAL_ACT, IR_UNDEFINED);
  int id = ir_add_node(g, op, nm, in, n_in, out, n_out);
  g->nodes[id].opset = CONTROL_OPSET;
  g->nodes[id].index = x->nd.index;
  if (attr) ir_node_add_attr(g, id, attr, IR_ATTR_INT)->i = ai;
  if (x->e->visit(x->e->ctx, id)) {
    x->err = 1;
    return -1;
  }
  for (int k = 0; k < n_out; k++) out[k] = res(x, out[k]);
  return 0;
}

int cx_i64(xp *x, const int64_t *v, int n, int scalar) {
  ir_shape s = {0};
  s.rank = scalar ? 0 : 1;
  s.dims[0] = n;
  return ir_add_const(x->g, cx_tagged(x, "c"), IR_INT64, &s, v, sizeof(int64_t) * (size_t)n);
}

/* v as a scalar (a condition of one element, of shape [1] say) */
static int scalar(xp *x, int v) {
  if (val(x, v)->shape.rank == 0) return v;
  return cx_make(x, IR_OP_Reshape, (int[]){v, cx_i64(x, NULL, 0, 0)}, 2, -1, NULL, 0);
}

/* prefix + name, without doubling the '/' when the name starts with one (PyTorch's
 * "/a/Gemm" under "/If/then/" reads "/If/then/a/Gemm") */
static const char *join(ir_graph *g, const char *pfx, const char *name) {
  size_t n = strlen(pfx);
  return ir_sprintf(g->arena, "%s%s", pfx, n && pfx[n - 1] == '/' && name[0] == '/' ? name + 1 : name);
}

/* A constant of a body, as a constant of the graph sharing its data (once per node). */
static int body_const(xp *x, const ir_graph *b, int bv, int *cmap) {
  if (cmap[bv] >= 0) return cmap[bv];
  const ir_value *v = &b->values[bv];
  int c = ir_add_value(x->g, join(x->g, ir_sprintf(x->g->arena, "%s/", x->base), v->name), IR_VAL_CONST, v->dtype);
  ir_value *cv = &x->g->values[c];
  cv->shape = v->shape;
  cv->data = v->data;
  cv->nbytes = v->nbytes;
  cv->zero_init = v->zero_init;
  cv->data_nchw = v->data_nchw;
  return cmap[bv] = c;
}

static int body_value(xp *x, const ir_graph *b, int bv, const int *map, int *cmap) {
  if (map[bv] >= 0) return res(x, map[bv]);
  if (b->values[bv].kind == IR_VAL_CONST) return body_const(x, b, bv, cmap);
  return -1; /* the frontend resolves every name of a body: not reached */
}

/* Body b's nodes made under prefix pfx: actual[] holds a value per input of b (formal,
 * then captured), cmap[b->n_values] caches its constants; outs[b->n_outputs] gets its
 * outputs. 0, or -1 (reported). */
static int instantiate(xp *x, const ir_graph *b, const char *pfx, const int *actual, int *cmap, int *outs) {
  ir_graph *g = x->g;
  int *map = ir_xmalloc(sizeof(int) * ((size_t)b->n_values + 1));
  for (int v = 0; v < b->n_values; v++) map[v] = -1;
  for (int i = 0; i < b->n_inputs; i++) map[b->inputs[i]] = actual[i];
  for (int i = 0; i < b->n_nodes && !x->err; i++) {
    const ir_node *bn = &b->nodes[i];
    if (bn->dead) continue;
    if (++x->e->n_made > CONTROL_MAX_NODES) {
      ir_error_node(g, x->node, "expanding control flow would make more than %ld nodes", (long)CONTROL_MAX_NODES);
      x->err = 1;
      break;
    }
    int *in = ir_xmalloc(sizeof(int) * ((size_t)bn->n_in + 1));
    int *out = ir_xmalloc(sizeof(int) * ((size_t)bn->n_out + 1));
    for (int k = 0; k < bn->n_in; k++) in[k] = bn->in[k] < 0 ? -1 : body_value(x, b, bn->in[k], map, cmap);
    for (int k = 0; k < bn->n_out; k++)
      out[k] =
          bn->out[k] < 0
              ? -1
              : (map[bn->out[k]] = ir_add_value(g, join(g, pfx, b->values[bn->out[k]].name), IR_VAL_ACT, IR_UNDEFINED));
    int id = ir_add_node(g, bn->op, join(g, pfx, bn->name), in, bn->n_in, out, bn->n_out);
    free(in);
    free(out);
    ir_node *n = &g->nodes[id];
    n->op_type = bn->op_type;
    n->domain = bn->domain;
    n->opset = bn->opset;
    n->index = x->nd.index;
    n->n_implicit = bn->n_implicit;
    n->n_attr = bn->n_attr;
    n->attr = bn->attr; /* shared: passes do not change attributes in place */
    for (int k = 0; k < bn->n_attr; k++)
      if (bn->attr[k].type == IR_ATTR_TENSOR && bn->attr[k].tensor >= 0) { /* its constant, of the graph */
        ir_attr *a = ir_alloc_array(g->arena, (size_t)bn->n_attr, sizeof(ir_attr));
        memcpy(a, bn->attr, sizeof(ir_attr) * (size_t)bn->n_attr);
        for (int j = 0; j < bn->n_attr; j++)
          if (a[j].type == IR_ATTR_TENSOR && a[j].tensor >= 0) a[j].tensor = body_const(x, b, a[j].tensor, cmap);
        g->nodes[id].attr = a;
        break;
      }
    if (x->e->visit(x->e->ctx, id)) x->err = 1;
  }
  for (int j = 0; j < b->n_outputs && !x->err; j++) outs[j] = body_value(x, b, b->outputs[j], map, cmap);
  free(map);
  return x->err ? -1 : 0;
}

/* The body of attribute `name` and where its captured values start among the node's
 * inputs (the implicit inputs follow the bodies in attribute order). */
static const ir_graph *body_of(xp *x, const char *name, int *cap_at) {
  int off = x->nd.n_in - x->nd.n_implicit;
  for (int i = 0; i < x->nd.n_attr; i++) {
    const ir_attr *a = &x->nd.attr[i];
    if (a->type != IR_ATTR_GRAPH || !a->graph) continue;
    if (!strcmp(a->name, name)) {
      *cap_at = off;
      return a->graph;
    }
    off += a->graph->n_captured;
  }
  return NULL;
}

/* actual inputs of body b: the n formal ones given, then its captured values */
static int *actuals(xp *x, const ir_graph *b, int cap_at, const int *formal, int n) {
  int *a = ir_xmalloc(sizeof(int) * ((size_t)b->n_inputs + 1));
  for (int i = 0; i < n; i++) a[i] = formal[i];
  for (int k = 0; k < b->n_captured; k++) a[n + k] = res(x, x->nd.in[cap_at + k]);
  return a;
}

/* The node's output k (if wanted) written as a copy of v. */
static int write_out(xp *x, int k, int v) {
  if (k >= x->nd.n_out || x->nd.out[k] < 0) return 0;
  return cx_make(x, IR_OP_Identity, &v, 1, x->nd.out[k], NULL, 0) < 0 ? -1 : 0;
}

/* "float32 [2, 3]" into buf */
const char *cx_typed(const ir_value *v, char *buf, size_t n) {
  char sh[128];
  snprintf(buf, n, "%s %s", ir_dtype_name(v->dtype), ir_shape_str(&v->shape, sh, sizeof sh));
  return buf;
}

static int same_type(const ir_value *a, const ir_value *b) {
  return a->dtype == b->dtype && ir_shape_same_dims(&a->shape, &b->shape);
}

/* vals[n] (each of the same type and shape) stacked along a new axis `axis` of the
 * result (negative: from the end), into the node's output k. */
static int stack(xp *x, const int *vals, int n, int64_t axis, int k, const char *what) {
  if (k >= x->nd.n_out || x->nd.out[k] < 0) return 0;
  char b1[160], b2[160];
  if (n < 1) XFAIL("%s %d stacks no values", what, k);
  const ir_value *v0 = val(x, vals[0]);
  for (int t = 1; t < n; t++)
    if (!same_type(v0, val(x, vals[t])))
      XFAIL("%s %d changes between iterations: %s, then %s", what, k, cx_typed(v0, b1, sizeof b1),
            cx_typed(val(x, vals[t]), b2, sizeof b2));
  int r = v0->shape.rank + 1;
  if (axis < -r || axis >= r) XFAIL("%s axis %lld is out of range for rank %d", what, (long long)axis, r);
  if (axis < 0) axis += r;
  if (r > IR_MAX_RANK) XFAIL("%s would have rank %d; pipecc supports up to %d", what, r, IR_MAX_RANK);
  int ax = cx_i64(x, &axis, 1, 0);
  int *u = ir_xmalloc(sizeof(int) * (size_t)n);
  for (int t = 0; t < n && !x->err; t++) u[t] = cx_make(x, IR_OP_Unsqueeze, (int[]){vals[t], ax}, 2, -1, NULL, 0);
  int rc = x->err ? -1 : cx_make(x, IR_OP_Concat, u, n, x->nd.out[k], "axis", axis) < 0 ? -1 : 0;
  free(u);
  return rc;
}

/* ---- If ---------------------------------------------------------------------------- */

static int expand_if(xp *x) {
  int ct, ce;
  const ir_graph *tb = body_of(x, "then_branch", &ct), *eb = body_of(x, "else_branch", &ce);
  if (!tb || !eb) XFAIL("needs both then_branch and else_branch");
  if (tb->n_inputs != tb->n_captured || eb->n_inputs != eb->n_captured) XFAIL("a branch of If takes no inputs");
  if (tb->n_outputs != eb->n_outputs)
    XFAIL("then_branch gives %d outputs, else_branch %d", tb->n_outputs, eb->n_outputs);
  if (x->nd.n_out > tb->n_outputs) XFAIL("has %d outputs, its branches give %d", x->nd.n_out, tb->n_outputs);
  int cond = res(x, x->nd.in[0]);
  const ir_value *c = val(x, cond);
  int64_t n = ir_shape_numel(&c->shape);
  if (n != 1) XFAIL("the condition has %lld elements; it must have one", (long long)n);
  int *cm = ir_xmalloc(sizeof(int) * ((size_t)(tb->n_values + eb->n_values) + 1));
  for (int i = 0; i < tb->n_values + eb->n_values; i++) cm[i] = -1;
  int *to = ir_xmalloc(sizeof(int) * ((size_t)tb->n_outputs + 1));
  int *eo = ir_xmalloc(sizeof(int) * ((size_t)tb->n_outputs + 1));
  int rc = 0;
  int64_t cv = 0;
  if (c->kind == IR_VAL_CONST && !ir_const_i64(c, 0, &cv)) { /* known: one branch */
    const ir_graph *b = cv ? tb : eb;
    int *a = actuals(x, b, cv ? ct : ce, NULL, 0);
    rc = instantiate(x, b, ir_sprintf(x->g->arena, "%s/%s/", x->base, cv ? "then" : "else"), a, cm, to);
    free(a);
    for (int k = 0; k < x->nd.n_out && !rc; k++) rc = write_out(x, k, to[k]);
  } else { /* run time: both, then Where */
    int *a = actuals(x, tb, ct, NULL, 0);
    rc = instantiate(x, tb, ir_sprintf(x->g->arena, "%s/then/", x->base), a, cm, to);
    free(a);
    a = actuals(x, eb, ce, NULL, 0);
    if (!rc) rc = instantiate(x, eb, ir_sprintf(x->g->arena, "%s/else/", x->base), a, cm + tb->n_values, eo);
    free(a);
    int s = rc ? -1 : scalar(x, cond);
    if (s < 0) rc = -1;
    for (int k = 0; k < x->nd.n_out && !rc; k++) {
      if (x->nd.out[k] < 0) continue;
      const ir_value *tv = val(x, to[k]), *ev = val(x, eo[k]);
      char b1[160], b2[160];
      if (tv->kind == IR_VAL_NONE || ev->kind == IR_VAL_NONE) { /* optionals: empty in both, or refused */
        if (tv->kind != ev->kind) {
          ir_error_node(x->g, x->node,
                        "the condition is computed at run time and output %d is an optional with a value in one "
                        "branch and without one in the other: pipecc keeps optionals known at compile time (give "
                        "the condition with --const)",
                        k);
          rc = -1;
          break;
        }
        ir_set_none(x->g, x->nd.out[k]);
        continue;
      }
      if (tv->kind == IR_VAL_SEQ || ev->kind == IR_VAL_SEQ) { /* sequences: Where per element */
        if (tv->kind != ev->kind || tv->seq_n != ev->seq_n) {
          ir_error_node(x->g, x->node,
                        "the condition is computed at run time and the branches give output %d as %s: pipecc "
                        "computes both branches and selects, which needs sequences of one length (or give the "
                        "condition with --const)",
                        k, tv->kind != ev->kind ? "a sequence and a tensor" : "sequences of different lengths");
          rc = -1;
          break;
        }
        int n = tv->seq_n, *el = ir_xmalloc(sizeof(int) * ((size_t)n + 1));
        for (int i = 0; i < n && !rc; i++) {
          int a = val(x, to[k])->seq[i], b = val(x, eo[k])->seq[i];
          if (!same_type(val(x, a), val(x, b))) {
            ir_error_node(x->g, x->node,
                          "the condition is computed at run time and the branches give tensor %d of sequence output "
                          "%d as %s and %s: pipecc computes both branches and selects, which needs the same type and "
                          "shape",
                          i, k, cx_typed(val(x, a), b1, sizeof b1), cx_typed(val(x, b), b2, sizeof b2));
            rc = -1;
          } else if ((el[i] = cx_make(x, IR_OP_Where, (int[]){s, a, b}, 3, -1, NULL, 0)) < 0) rc = -1;
        }
        if (!rc) ir_set_seq(x->g, x->nd.out[k], el, n, val(x, to[k])->dtype);
        free(el);
        if (rc) break;
        continue;
      }
      if (!same_type(tv, ev)) {
        ir_error_node(x->g, x->node,
                      "the condition is computed at run time and the branches give output %d as %s and %s: pipecc "
                      "computes both branches and selects, which needs the same type and shape",
                      k, cx_typed(tv, b1, sizeof b1), cx_typed(ev, b2, sizeof b2));
        rc = -1;
        break;
      }
      rc = cx_make(x, IR_OP_Where, (int[]){s, to[k], eo[k]}, 3, x->nd.out[k], NULL, 0) < 0 ? -1 : 0;
    }
  }
  free(cm);
  free(to);
  free(eo);
  return rc;
}

/* ---- Loop -------------------------------------------------------------------------- */

/* -1 (reported) when one of the node's inputs from..to-1 is empty: a Loop's carried
 * values and a Scan's states and scan inputs are required (an empty optional value comes
 * from an Optional node, not from an empty name) */
static int empty_input(xp *x, int from, int to, const char *what) {
  for (int k = from; k < to; k++)
    if (x->nd.in[k] < 0) XFAIL("input %d (%s %d) is empty; it must name a value", k, what, k - from);
  return 0;
}

static int expand_loop(xp *x) {
  int cap;
  const ir_graph *b = body_of(x, "body", &cap);
  if (!b) XFAIL("has no body");
  int nexp = x->nd.n_in - x->nd.n_implicit, N = nexp - 2, nf = b->n_inputs - b->n_captured;
  if (nf != N + 2)
    XFAIL("its body takes %d inputs; the Loop gives %d (the iteration number, the condition and %d carried values)", nf,
          N + 2, N);
  int K = b->n_outputs - 1 - N;
  if (K < 0) XFAIL("its body gives %d outputs; it must give the condition and the %d carried values", b->n_outputs, N);
  if (x->nd.n_out > N + K)
    XFAIL("has %d outputs; its body gives %d carried values and %d scan outputs", x->nd.n_out, N, K);
  if (empty_input(x, 2, 2 + N, "carried value")) return -1;
  int64_t M = -1;
  if (x->nd.in[0] >= 0) {
    const ir_value *m = val(x, res(x, x->nd.in[0]));
    if (m->kind != IR_VAL_CONST || ir_const_i64(m, 0, &M)) {
      char nm[96];
      XFAIL(
          "the trip count '%s' is computed at run time; pipecc unrolls loops, so it must follow from constants "
          "and static shapes",
          ir_printable(m->name, 60, nm, sizeof nm));
    }
    if (M < 0) M = 0;
  }
  int cond = x->nd.in[1] >= 0 ? res(x, x->nd.in[1]) : -1;
  if (cond < 0) {
    uint8_t one = 1;
    cond = ir_add_const(x->g, cx_tagged(x, "true"), IR_BOOL, &(ir_shape){0}, &one, 1);
  }
  /* v: the carried values; raw: what the body computed last, which the next iteration
   * reads (the same until the condition is computed at run time: then v keeps each
   * iteration's values only where it held, and raw runs on, its counters still folding) */
  int *v = ir_xmalloc(sizeof(int) * ((size_t)N + 1)), *raw = ir_xmalloc(sizeof(int) * ((size_t)N + 1));
  for (int k = 0; k < N; k++) v[k] = raw[k] = res(x, x->nd.in[2 + k]);
  int *cm = ir_xmalloc(sizeof(int) * ((size_t)b->n_values + 1));
  for (int i = 0; i < b->n_values; i++) cm[i] = -1;
  int *outs = ir_xmalloc(sizeof(int) * ((size_t)b->n_outputs + 1));
  int *formal = ir_xmalloc(sizeof(int) * ((size_t)N + 3));
  int *scans = NULL, cap_scans = 0;
  int64_t t = 0;
  int masked = 0, rc = 0;
  char b1[160], b2[160];
  for (;; t++) {
    if (M >= 0 && t >= M) break;
    const ir_value *cv = val(x, cond);
    int64_t c = 0;
    if (masked && cv->kind == IR_VAL_CONST && !ir_const_i64(cv, 0, &c) && !c) break; /* the rest would keep all */
    if (t >= CONTROL_MAX_ITERS) {
      ir_error_node(x->g, x->node, "would unroll more than %d iterations (trip count %lld; its condition %s)",
                    CONTROL_MAX_ITERS, (long long)M, cv->kind == IR_VAL_CONST ? "still true" : "computed at run time");
      rc = -1;
      break;
    }
    if (!masked) {
      if (ir_shape_numel(&cv->shape) != 1) {
        ir_error_node(x->g, x->node, "the condition has %lld elements; it must have one",
                      (long long)ir_shape_numel(&cv->shape));
        rc = -1;
        break;
      }
      if (cv->kind == IR_VAL_CONST && !ir_const_i64(cv, 0, &c)) {
        if (!c) break;
      } else {
        if (M < 0) {
          ir_error_node(x->g, x->node,
                        "has no trip count and a condition computed at run time; pipecc unrolls loops, so one of "
                        "them must be known at compile time");
          rc = -1;
          break;
        }
        if (K) {
          ir_error_node(x->g, x->node,
                        "its condition is computed at run time, so the length of its %d scan output%s would be "
                        "decided at run time; pipecc needs static shapes",
                        K, K > 1 ? "s" : "");
          rc = -1;
          break;
        }
        masked = 1; /* from here on every iteration runs, its results kept while cond holds */
        if ((cond = scalar(x, cond)) < 0) {
          rc = -1;
          break;
        }
      }
    }
    formal[0] = cx_i64(x, &t, 1, 1);
    formal[1] = cond;
    for (int k = 0; k < N; k++) formal[2 + k] = raw[k];
    int *a = actuals(x, b, cap, formal, N + 2);
    rc = instantiate(x, b, ir_sprintf(x->g->arena, "%s/%lld/", x->base, (long long)t), a, cm, outs);
    free(a);
    if (rc) break;
    if (masked) {
      for (int k = 0; k < N && !rc; k++) {
        const ir_value *nv = val(x, outs[1 + k]), *ov = val(x, v[k]);
        if (nv->kind == IR_VAL_SEQ || ov->kind == IR_VAL_SEQ || nv->kind == IR_VAL_NONE || ov->kind == IR_VAL_NONE) {
          ir_error_node(x->g, x->node,
                        "carried value %d is a sequence or an optional and the condition is computed at run time: "
                        "pipecc keeps sequences and optionals known at compile time, so how many iterations change "
                        "it must be known",
                        k);
          rc = -1;
          break;
        }
        if (!same_type(nv, ov)) {
          ir_error_node(x->g, x->node,
                        "carried value %d changes from %s to %s while the condition is computed at run time: pipecc "
                        "runs every iteration and keeps the values while it holds, which needs the same type and shape",
                        k, cx_typed(ov, b1, sizeof b1), cx_typed(nv, b2, sizeof b2));
          rc = -1;
          break;
        }
        if ((v[k] = cx_make(x, IR_OP_Where, (int[]){cond, outs[1 + k], v[k]}, 3, -1, NULL, 0)) < 0) rc = -1;
        raw[k] = outs[1 + k];
      }
      int nc = rc ? -1 : scalar(x, outs[0]);
      if (nc < 0 || (cond = cx_make(x, IR_OP_And, (int[]){cond, nc}, 2, -1, NULL, 0)) < 0) rc = -1;
      if (rc) break;
    } else {
      cond = outs[0];
      for (int k = 0; k < N; k++) v[k] = raw[k] = outs[1 + k];
      if (K) {
        if ((t + 1) * K > cap_scans) {
          cap_scans = (int)((t + 1) * K * 2);
          scans = ir_xrealloc(scans, sizeof(int) * (size_t)cap_scans);
        }
        for (int j = 0; j < K; j++) scans[t * K + j] = outs[1 + N + j];
      }
    }
  }
  for (int k = 0; k < N && !rc; k++) rc = write_out(x, k, v[k]);
  for (int j = 0; j < K && !rc; j++) {
    if (N + j >= x->nd.n_out || x->nd.out[N + j] < 0) continue;
    if (!t) {
      ir_error_node(x->g, x->node, "runs no iteration, so the shape of its scan output %d is unknown", j);
      rc = -1;
      break;
    }
    int *col = ir_xmalloc(sizeof(int) * (size_t)t);
    for (int64_t i = 0; i < t; i++) col[i] = scans[i * K + j];
    rc = stack(x, col, (int)t, 0, N + j, "scan output");
    free(col);
  }
  free(v);
  free(raw);
  free(cm);
  free(outs);
  free(formal);
  free(scans);
  return rc;
}

/* ---- Scan -------------------------------------------------------------------------- */

/* INTS attribute `name` of n entries (default 0 each) into out. */
static int scan_attr(xp *x, const char *name, int n, int64_t *out) {
  const int64_t *p;
  int k = ir_attr_ints(&x->nd, name, &p);
  for (int i = 0; i < n; i++) out[i] = k >= 0 && i < k ? p[i] : 0;
  if (k >= 0 && k != n) XFAIL("attribute %s has %d entries; %d expected", name, k, n);
  return 0;
}

/* x[i] along axis (removed): Gather with a scalar index */
static int take(xp *x, int v, int64_t i, int64_t axis) {
  return cx_make(x, IR_OP_Gather, (int[]){v, cx_i64(x, &i, 1, 1)}, 2, -1, "axis", axis);
}

static int expand_scan(xp *x) {
  int cap;
  const ir_graph *b = body_of(x, "body", &cap);
  if (!b) XFAIL("has no body");
  int v8 = x->nd.opset < 9; /* Scan-8: a batch axis first, optional sequence_lens */
  int64_t Mi = ir_attr_int(&x->nd, "num_scan_inputs", -1);
  int nexp = x->nd.n_in - x->nd.n_implicit, first = v8 ? 1 : 0;
  int N = nexp - first - (int)Mi, nf = b->n_inputs - b->n_captured;
  if (Mi < 1 || N < 0) XFAIL("num_scan_inputs is %lld; it must be 1 to the number of inputs", (long long)Mi);
  if (nf != N + Mi)
    XFAIL("its body takes %d inputs; the Scan gives %d states and %lld scan inputs", nf, N, (long long)Mi);
  int K = b->n_outputs - N;
  if (K < 0) XFAIL("its body gives %d outputs, fewer than its %d states", b->n_outputs, N);
  if (x->nd.n_out > N + K) XFAIL("has %d outputs; its body gives %d states and %d scan outputs", x->nd.n_out, N, K);
  int64_t in_ax[64], in_dir[64], out_ax[64], out_dir[64];
  if (Mi > 64 || K > 64) XFAIL("more than 64 scan inputs or outputs");
  if (empty_input(x, first, first + N, "state") || empty_input(x, first + N, first + N + (int)Mi, "scan input"))
    return -1;
  if (scan_attr(x, v8 ? "directions" : "scan_input_directions", (int)Mi, in_dir) ||
      scan_attr(x, "scan_input_axes", (int)Mi, in_ax) || scan_attr(x, "scan_output_axes", K, out_ax) ||
      scan_attr(x, "scan_output_directions", K, out_dir))
    return -1;
  int *xs = ir_xmalloc(sizeof(int) * (size_t)(Mi + 1)), *st0 = ir_xmalloc(sizeof(int) * ((size_t)N + 1));
  for (int k = 0; k < N; k++) st0[k] = res(x, x->nd.in[first + k]);
  int64_t L = -1, B = 1;
  int rc = 0;
  for (int j = 0; j < Mi && !rc; j++) {
    xs[j] = res(x, x->nd.in[first + N + j]);
    const ir_shape *s = &val(x, xs[j])->shape;
    int64_t ax = v8 ? 1 : in_ax[j];
    if (ax < -s->rank || ax >= s->rank || (v8 && s->rank < 2)) {
      ir_error_node(x->g, x->node, "scan input %d of rank %d has no axis %lld", j, s->rank, (long long)ax);
      rc = -1;
      break;
    }
    in_ax[j] = ax < 0 ? ax + s->rank : ax;
    if (v8) {
      if (j && s->dims[0] != B) {
        ir_error_node(x->g, x->node, "scan inputs have batch sizes %lld and %lld", (long long)B, (long long)s->dims[0]);
        rc = -1;
        break;
      }
      B = s->dims[0];
    }
    if (L >= 0 && s->dims[in_ax[j]] != L) {
      ir_error_node(x->g, x->node, "scan inputs have sequence lengths %lld and %lld", (long long)L,
                    (long long)s->dims[in_ax[j]]);
      rc = -1;
      break;
    }
    L = s->dims[in_ax[j]];
  }
  if (!rc && v8 && x->nd.in[0] >= 0) { /* sequence_lens: only the full length of every sequence */
    const ir_value *sl = val(x, res(x, x->nd.in[0]));
    int64_t n = ir_shape_numel(&sl->shape), l = 0;
    for (int64_t i = 0; i < n && !rc; i++)
      if (sl->kind != IR_VAL_CONST || ir_const_i64(sl, i, &l) || l != L) {
        ir_error_node(x->g, x->node,
                      "sequence_lens must be a constant equal to the sequence length %lld for every sequence; pipecc "
                      "unrolls the scan",
                      (long long)L);
        rc = -1;
      }
  }
  if (!rc && L == 0 && K) XFAIL("scans sequences of length 0, so the shapes of its scan outputs are unknown");
  int *cm = ir_xmalloc(sizeof(int) * ((size_t)b->n_values + 1));
  for (int i = 0; i < b->n_values; i++) cm[i] = -1;
  int *outs = ir_xmalloc(sizeof(int) * ((size_t)b->n_outputs + 1));
  int *formal = ir_xmalloc(sizeof(int) * ((size_t)(N + Mi) + 1));
  int *st = ir_xmalloc(sizeof(int) * ((size_t)N + 1));
  int *fin = ir_xmalloc(sizeof(int) * ((size_t)(N * B) + 1));    /* [B][N] final states */
  int *sc = ir_xmalloc(sizeof(int) * ((size_t)(B * L * K) + 1)); /* [B][L][K] scan values */
  int *xb = ir_xmalloc(sizeof(int) * (size_t)(Mi + 1));
  for (int64_t bi = 0; bi < B && !rc; bi++) {
    for (int k = 0; k < N && !rc; k++)
      if ((st[k] = v8 ? take(x, st0[k], bi, 0) : st0[k]) < 0) rc = -1;
    for (int j = 0; j < Mi && !rc; j++)
      if ((xb[j] = v8 ? take(x, xs[j], bi, 0) : xs[j]) < 0) rc = -1;
    for (int64_t t = 0; t < L && !rc; t++) {
      for (int k = 0; k < N; k++) formal[k] = st[k];
      for (int j = 0; j < Mi && !rc; j++)
        if ((formal[N + j] = take(x, xb[j], in_dir[j] ? L - 1 - t : t, v8 ? 0 : in_ax[j])) < 0) rc = -1;
      if (rc) break;
      int *a = actuals(x, b, cap, formal, N + (int)Mi);
      const char *pfx = v8 && B > 1 ? ir_sprintf(x->g->arena, "%s/%lld.%lld/", x->base, (long long)bi, (long long)t)
                                    : ir_sprintf(x->g->arena, "%s/%lld/", x->base, (long long)t);
      rc = instantiate(x, b, pfx, a, cm, outs);
      free(a);
      for (int k = 0; k < N && !rc; k++) st[k] = outs[k];
      for (int k = 0; k < K && !rc; k++) sc[(bi * L + t) * K + k] = outs[N + k];
    }
    for (int k = 0; k < N && !rc; k++) fin[bi * N + k] = st[k];
  }
  /* outputs: the final states; each scan output stacked along its axis (Scan-8: over the
   * steps, then over the batch) */
  int *col = ir_xmalloc(sizeof(int) * ((size_t)(B * L) + 1));
  for (int k = 0; k < N && !rc; k++) {
    if (!v8) {
      rc = write_out(x, k, fin[k]);
      continue;
    }
    for (int64_t bi = 0; bi < B; bi++) col[bi] = fin[bi * N + k];
    rc = stack(x, col, (int)B, 0, k, "state");
  }
  for (int k = 0; k < K && !rc; k++) {
    if (N + k >= x->nd.n_out || x->nd.out[N + k] < 0) continue;
    if (!v8) {
      for (int64_t t = 0; t < L; t++) col[t] = sc[(out_dir[k] ? L - 1 - t : t) * K + k];
      rc = stack(x, col, (int)L, out_ax[k], N + k, "scan output");
      continue;
    }
    /* Scan-8: [B, L, ...]: each sequence stacked over its steps, then the batch */
    int *rows = ir_xmalloc(sizeof(int) * ((size_t)B + 1));
    for (int64_t bi = 0; bi < B && !rc; bi++) {
      for (int64_t t = 0; t < L; t++) col[t] = sc[(bi * L + t) * K + k];
      int *u = ir_xmalloc(sizeof(int) * ((size_t)L + 1));
      int64_t zero = 0;
      int ax = cx_i64(x, &zero, 1, 0);
      for (int64_t t = 0; t < L && !rc; t++)
        if ((u[t] = cx_make(x, IR_OP_Unsqueeze, (int[]){col[t], ax}, 2, -1, NULL, 0)) < 0) rc = -1;
      if (!rc && (rows[bi] = cx_make(x, IR_OP_Concat, u, (int)L, -1, "axis", 0)) < 0) rc = -1;
      free(u);
    }
    if (!rc) rc = stack(x, rows, (int)B, 0, N + k, "scan output");
    free(rows);
  }
  free(col);
  free(xs);
  free(st0);
  free(cm);
  free(outs);
  free(formal);
  free(st);
  free(fin);
  free(sc);
  free(xb);
  return rc;
}

/* ---- SequenceMap ------------------------------------------------------------------- */

/* The body once per position of the input sequences (the tensor inputs the same each
 * time); each output a sequence of what the body gave. */
static int expand_seqmap(xp *x) {
  int cap;
  const ir_graph *b = body_of(x, "body", &cap);
  if (!b) XFAIL("has no body");
  int nexp = x->nd.n_in - x->nd.n_implicit, nf = b->n_inputs - b->n_captured;
  if (nf != nexp) XFAIL("its body takes %d inputs; the SequenceMap gives %d", nf, nexp);
  if (x->nd.n_out > b->n_outputs) XFAIL("has %d outputs; its body gives %d", x->nd.n_out, b->n_outputs);
  int *in = ir_xmalloc(sizeof(int) * ((size_t)nexp + 1));
  int64_t L = -1;
  for (int j = 0; j < nexp; j++) {
    in[j] = res(x, x->nd.in[j]);
    if (in[j] < 0) {
      free(in);
      XFAIL("input %d is empty", j);
    }
    const ir_value *v = val(x, in[j]);
    if (v->kind != IR_VAL_SEQ) {
      if (j == 0) {
        free(in);
        XFAIL("input 0 is not a sequence");
      }
      continue;
    }
    if (L >= 0 && v->seq_n != L) {
      free(in);
      XFAIL("its input sequences have lengths %lld and %d", (long long)L, v->seq_n);
    }
    L = v->seq_n;
  }
  int *cm = ir_xmalloc(sizeof(int) * ((size_t)b->n_values + 1));
  for (int i = 0; i < b->n_values; i++) cm[i] = -1;
  int *outs = ir_xmalloc(sizeof(int) * ((size_t)b->n_outputs + 1));
  int *formal = ir_xmalloc(sizeof(int) * ((size_t)nexp + 1));
  int no = x->nd.n_out;
  int *col = ir_xmalloc(sizeof(int) * ((size_t)(L * no) + 1));
  int rc = 0;
  for (int64_t t = 0; t < L && !rc; t++) {
    for (int j = 0; j < nexp; j++) {
      const ir_value *v = val(x, in[j]);
      formal[j] = v->kind == IR_VAL_SEQ ? v->seq[t] : in[j];
    }
    int *a = actuals(x, b, cap, formal, nexp);
    rc = instantiate(x, b, ir_sprintf(x->g->arena, "%s/%lld/", x->base, (long long)t), a, cm, outs);
    free(a);
    for (int k = 0; k < no && !rc; k++) {
      if (val(x, outs[k])->kind == IR_VAL_SEQ || val(x, outs[k])->kind == IR_VAL_NONE) {
        ir_error_node(x->g, x->node, "its body gives %s as output %d; SequenceMap outputs tensors",
                      val(x, outs[k])->kind == IR_VAL_SEQ ? "a sequence" : "an optional without a value", k);
        rc = -1;
      }
      col[k * L + t] = outs[k];
    }
  }
  for (int k = 0; k < no && !rc; k++) {
    if (x->nd.out[k] >= 0)
      ir_set_seq(x->g, x->nd.out[k], col + k * L, (int)L, L > 0 ? val(x, col[k * L])->dtype : IR_FLOAT);
  }
  free(col);
  free(formal);
  free(outs);
  free(cm);
  free(in);
  return rc;
}

/* ---- FlexAttention (ai.onnx.preview) ----------------------------------------------------- */

/* x transposed by perm (rank 4) */
static int cx_perm4(xp *x, int v, const int64_t *perm) {
  if (x->err) return -1;
  ir_graph *g = x->g;
  ++x->e->n_made;
  const char *nm = cx_tagged(x, "Transpose");
  int o = ir_add_value(g, nm, IR_VAL_ACT, IR_UNDEFINED);
  int id = ir_add_node(g, IR_OP_Transpose, nm, &v, 1, &o, 1);
  g->nodes[id].opset = CONTROL_OPSET;
  g->nodes[id].index = x->nd.index;
  ir_attr *a = ir_node_add_attr(g, id, "perm", IR_ATTR_INTS);
  a->n = 4;
  a->ints = ir_alloc_array(g->arena, 4, sizeof(int64_t));
  memcpy(a->ints, perm, 4 * sizeof(int64_t));
  if (x->e->visit(x->e->ctx, id)) {
    x->err = 1;
    return -1;
  }
  return res(x, o);
}

/* a float scalar constant cast to dt */
static int cx_scalar(xp *x, float f, ir_dtype dt) {
  ir_shape s = {0};
  int c = ir_add_const(x->g, cx_tagged(x, "c"), IR_FLOAT, &s, &f, sizeof f);
  return dt == IR_FLOAT ? c : cx_make(x, IR_OP_Cast, &c, 1, -1, "to", dt);
}

/* A modifier body of one input and one output of its input's type and shape. */
static int flex_mod(xp *x, const char *name, int v) {
  int cap;
  const ir_graph *b = body_of(x, name, &cap);
  if (!b) return v;
  char b1[160], b2[160];
  if (b->n_inputs - b->n_captured != 1 || b->n_outputs != 1) XFAIL("%s takes one input and gives one output", name);
  int *cm = ir_xmalloc(sizeof(int) * ((size_t)b->n_values + 1)), out = -1;
  for (int i = 0; i < b->n_values; i++) cm[i] = -1;
  int *a = actuals(x, b, cap, &v, 1);
  int rc = instantiate(x, b, ir_sprintf(x->g->arena, "%s/%s/", x->base, name), a, cm, &out);
  free(a);
  free(cm);
  if (rc) return -1;
  if (val(x, out)->kind != IR_VAL_ACT && val(x, out)->kind != IR_VAL_CONST && val(x, out)->kind != IR_VAL_INPUT)
    XFAIL("%s gives no tensor", name);
  if (!same_type(val(x, out), val(x, v)))
    XFAIL("%s gives %s for %s; its output must keep its input's type and shape", name,
          cx_typed(val(x, out), b1, sizeof b1), cx_typed(val(x, v), b2, sizeof b2));
  return out;
}

/* Q [B, Hq, L, E], K [B, Hkv, S, E], V [B, Hkv, S, Ev]: scores (Q sqrt(scale)) (K sqrt(scale))^T
 * in Q's type (each key/value head serving Hq/Hkv query heads), in softmax_precision (float
 * unless the inputs are double), score_mod, Softmax over the keys, prob_mod, times V; Y in
 * V's type. */
static int expand_flex(xp *x) {
  char b1[160], b2[160], b3[160];
  if (x->nd.n_in < 3) XFAIL("needs Q, K and V");
  int q = res(x, x->nd.in[0]), k = res(x, x->nd.in[1]), v = res(x, x->nd.in[2]);
  const ir_value *Q = val(x, q), *K = val(x, k), *V = val(x, v);
  const ir_shape *qs = &Q->shape, *ks = &K->shape, *vs = &V->shape;
  if (qs->rank != 4 || ks->rank != 4 || vs->rank != 4 || ks->dims[0] != qs->dims[0] || vs->dims[0] != qs->dims[0] ||
      ks->dims[3] != qs->dims[3] || vs->dims[1] != ks->dims[1] || vs->dims[2] != ks->dims[2] || ks->dims[1] < 1 ||
      qs->dims[1] % ks->dims[1])
    XFAIL("Q %s, K %s and V %s: [B, Hq, L, E], [B, Hkv, S, E] and [B, Hkv, S, Ev] with Hq a multiple of Hkv expected",
          cx_typed(Q, b1, sizeof b1), cx_typed(K, b2, sizeof b2), cx_typed(V, b3, sizeof b3));
  ir_dtype qt = Q->dtype, vt = V->dtype;
  if (qt != IR_FLOAT && qt != IR_DOUBLE && qt != IR_FLOAT16 && qt != IR_BFLOAT16)
    XFAIL("Q of type %s: a floating-point type expected", ir_dtype_name(qt));
  if (K->dtype != qt || vt != qt) XFAIL("Q, K and V must have one type");
  ir_dtype t = qt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT;
  int64_t sp = ir_attr_int(&x->nd, "softmax_precision", 0);
  if (sp) {
    if (sp != IR_FLOAT && sp != IR_DOUBLE && sp != IR_FLOAT16 && sp != IR_BFLOAT16)
      XFAIL("softmax_precision %lld: float, double, float16 or bfloat16 expected", (long long)sp);
    t = (ir_dtype)sp;
  }
  int64_t B = qs->dims[0], Hq = qs->dims[1], Hkv = ks->dims[1], S = ks->dims[2], E = ks->dims[3], Ev = vs->dims[3];
  if (Hq > Hkv) { /* K and V repeated, each head for Hq/Hkv query heads in order */
    int64_t r = Hq / Hkv, k5[5] = {B, Hkv, 1, S, E}, ke[5] = {B, Hkv, r, S, E}, k4[4] = {B, Hq, S, E};
    int64_t v5[5] = {B, Hkv, 1, S, Ev}, ve[5] = {B, Hkv, r, S, Ev}, v4[4] = {B, Hq, S, Ev};
    k = cx_make(x, IR_OP_Reshape, (int[]){k, cx_i64(x, k5, 5, 0)}, 2, -1, NULL, 0);
    k = cx_make(x, IR_OP_Expand, (int[]){k, cx_i64(x, ke, 5, 0)}, 2, -1, NULL, 0);
    k = cx_make(x, IR_OP_Reshape, (int[]){k, cx_i64(x, k4, 4, 0)}, 2, -1, NULL, 0);
    v = cx_make(x, IR_OP_Reshape, (int[]){v, cx_i64(x, v5, 5, 0)}, 2, -1, NULL, 0);
    v = cx_make(x, IR_OP_Expand, (int[]){v, cx_i64(x, ve, 5, 0)}, 2, -1, NULL, 0);
    v = cx_make(x, IR_OP_Reshape, (int[]){v, cx_i64(x, v4, 4, 0)}, 2, -1, NULL, 0);
  }
  double scale = ir_attr_find(&x->nd, "scale") ? ir_attr_float(&x->nd, "scale", 0.0f) : 1.0 / sqrt((double)E);
  int ss = cx_scalar(x, sqrtf((float)scale), qt);
  const int64_t tr[4] = {0, 1, 3, 2};
  int kt = cx_perm4(x, cx_make(x, IR_OP_Mul, (int[]){k, ss}, 2, -1, NULL, 0), tr);
  int s = cx_make(x, IR_OP_MatMul, (int[]){cx_make(x, IR_OP_Mul, (int[]){q, ss}, 2, -1, NULL, 0), kt}, 2, -1, NULL, 0);
  if (x->err) return -1;
  if (qt != t) s = cx_make(x, IR_OP_Cast, &s, 1, -1, "to", t);
  if (x->err || (s = flex_mod(x, "score_mod", s)) < 0) return -1;
  int p = cx_make(x, IR_OP_Softmax, &s, 1, -1, "axis", -1);
  if (x->err || (p = flex_mod(x, "prob_mod", p)) < 0) return -1;
  int vf = vt == t ? v : cx_make(x, IR_OP_Cast, &v, 1, -1, "to", t);
  int y = cx_make(x, IR_OP_MatMul, (int[]){p, vf}, 2, -1, NULL, 0);
  if (x->err) return -1;
  if (t != vt) y = cx_make(x, IR_OP_Cast, &y, 1, -1, "to", vt);
  if (x->err) return -1;
  return write_out(x, 0, y);
}

int control_expand(control_env *e, int node) {
  ir_graph *g = e->g;
  xp x = {e, g, node, g->nodes[node], NULL, 0, 0};
  const char *nm = x.nd.name && *x.nd.name ? x.nd.name : NULL;
  x.base = nm ? ir_sprintf(g->arena, "%s", nm) : ir_sprintf(g->arena, "%s#%d", x.nd.op_type, e->counter);
  e->counter++;
  g->nodes[node].dead = 1; /* its outputs get written by the expansion */
  int rc;
  switch (x.nd.op) {
    case IR_OP_If: rc = expand_if(&x); break;
    case IR_OP_Loop: rc = expand_loop(&x); break;
    case IR_OP_Scan: rc = expand_scan(&x); break;
    case IR_OP_SequenceMap: rc = expand_seqmap(&x); break;
    case IR_OP_FlexAttention: rc = expand_flex(&x); break;
    default: rc = seq_expand(&x); break;
  }
  return rc || x.err ? -1 : 0;
}
