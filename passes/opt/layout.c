/* passes/opt/layout.c - channels-last activations around 2-D float Convs (see passes/opt/layout.h). */
#include "passes/opt/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pass_layout_is_nhwc(const ir_node *n) { return !strcmp(ir_attr_str(n, "pipecc.layout", ""), "NHWC"); }

/* Nodes whose code reads the layout ("pipecc.layout" marks them): pooling over the two
 * spatial dims and inference BatchNormalization, channels innermost. */
static int marked_follower(ir_graph *g, const ir_node *n) {
  const ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  if (!x || !y || n->n_out != 1 || x->shape.rank != 4 || x->dtype != IR_FLOAT) return 0;
  switch (n->op) {
    case IR_OP_MaxPool:
    case IR_OP_AveragePool:
    case IR_OP_LpPool:
    case IR_OP_GlobalMaxPool:
    case IR_OP_GlobalAveragePool:
    case IR_OP_GlobalLpPool: return 1;
    case IR_OP_BatchNormalization: return !ir_attr_int(n, "training_mode", 0);
    default: return 0;
  }
}

/* The two permutations: NCHW -> NHWC, and back (Transpose perms and shapes alike). */
static const int64_t PERM_NHWC[4] = {0, 2, 3, 1}, PERM_NCHW[4] = {0, 3, 1, 2};

ir_shape pass_layout_permuted(const ir_shape *s, int to_nhwc) {
  ir_shape r = *s;
  for (int d = 0; d < 4; d++) {
    int from = (int)(to_nhwc ? PERM_NHWC[d] : PERM_NCHW[d]);
    r.dims[d] = s->dims[from];
    r.sym[d] = s->sym[from];
  }
  return r;
}

typedef struct {
  ir_graph *g;
  int nv0;       /* values before the pass: the tables below cover these */
  int *twin;     /* the NHWC value holding the same tensor, or -1 */
  int *cperm;    /* a constant's permuted copy, or -1 */
  char *pending; /* produced channels-last; no node writes the NCHW value yet */
} lay_ctx;

static void set_perm(ir_graph *g, int node, int to_nhwc) {
  ir_attr *a = ir_node_add_attr(g, node, "perm", IR_ATTR_INTS);
  a->n = 4;
  a->ints = ir_alloc_array(g->arena, 4, sizeof(int64_t));
  memcpy(a->ints, to_nhwc ? PERM_NHWC : PERM_NCHW, sizeof PERM_NHWC);
}

static int add_transpose(lay_ctx *L, int from, int to, int to_nhwc) {
  ir_graph *g = L->g;
  const char *nm = g->values[to_nhwc ? from : to].name;
  char *name = ir_sprintf(g->arena, "%s.%s", nm ? nm : "", to_nhwc ? "to_nhwc" : "to_nchw");
  int t = ir_add_node(g, IR_OP_Transpose, name, &from, 1, &to, 1);
  g->nodes[t].opset = 13;
  set_perm(g, t, to_nhwc);
  return t;
}

/* The NHWC twin of activation v, made by a Transpose on first use. */
static int to_nhwc(lay_ctx *L, int v) {
  if (v < L->nv0 && L->twin[v] >= 0) return L->twin[v];
  ir_graph *g = L->g;
  char *name = ir_sprintf(g->arena, "%s.nhwc", g->values[v].name ? g->values[v].name : "");
  int t = ir_add_value(g, name, IR_VAL_ACT, g->values[v].dtype);
  g->values[t].shape = pass_layout_permuted(&g->values[v].shape, 1);
  g->values[t].writeback = -1;
  add_transpose(L, v, t, 1);
  if (v < L->nv0) L->twin[v] = t;
  return t;
}

/* A Transpose back to NCHW writes v again, for NCHW readers and graph outputs. */
static void materialize(lay_ctx *L, int v) {
  if (v < 0 || v >= L->nv0 || !L->pending[v]) return;
  L->pending[v] = 0;
  add_transpose(L, L->twin[v], v, 0);
}

/* Constant v (rank 1..4, padded to 4 with leading ones) permuted to channels-last. */
static int perm_const(lay_ctx *L, int v) {
  if (v < L->nv0 && L->cperm[v] >= 0) return L->cperm[v];
  ir_graph *g = L->g;
  const ir_value *c = &g->values[v];
  ir_shape s4 = c->shape;
  int r = c->shape.rank;
  s4.rank = 4;
  for (int d = 0; d < 4; d++) {
    s4.dims[d] = d < 4 - r ? 1 : c->shape.dims[d - (4 - r)];
    s4.sym[d] = NULL;
  }
  ir_shape ps = pass_layout_permuted(&s4, 1);
  char *name = ir_sprintf(g->arena, "%s.nhwc", c->name ? c->name : "");
  /* the same bytes, read through data_nchw (no copy: --plan-only never touches them);
   * a permutation that moves only dims of 1 keeps the order */
  int moves = s4.dims[1] > 1 && s4.dims[2] * s4.dims[3] > 1;
  const void *data = c->data;
  size_t nbytes = c->nbytes;
  int zero = c->zero_init;
  int t = ir_add_value(g, name, IR_VAL_CONST, c->dtype); /* c may move */
  ir_value *nv = &g->values[t];
  nv->shape = ps;
  nv->data = data;
  nv->nbytes = nbytes;
  nv->zero_init = zero;
  nv->data_nchw = moves && !zero && data;
  g->values[t].writeback = -1;
  if (v < L->nv0) L->cperm[v] = t;
  return t;
}

/* Pad's pads [b0, b1, b2, b3, e0, e1, e2, e3] in the order [0, 2, 3, 1] at both ends */
static void permute_pads(ir_graph *g, int node) {
  static const int order[4] = {0, 2, 3, 1};
  int64_t old[8], nw[8];
  ir_node *n = &g->nodes[node];
  if (n->opset >= 11) {
    const ir_value *pv = ir_in(g, n, 1);
    for (int k = 0; k < 8; k++) ir_const_i64(pv, k, &old[k]);
  } else {
    const int64_t *pa;
    ir_attr_ints(n, "pads", &pa);
    memcpy(old, pa, sizeof old);
  }
  for (int d = 0; d < 4; d++) nw[d] = old[order[d]], nw[4 + d] = old[4 + order[d]];
  if (n->opset >= 11) {
    ir_shape s = {1, {8}, {NULL}};
    char *name = ir_sprintf(g->arena, "%s.nhwc", g->values[n->in[1]].name ? g->values[n->in[1]].name : "pads");
    int t = ir_add_const(g, name, IR_INT64, &s, nw, sizeof nw);
    g->nodes[node].in[1] = t;
  } else {
    for (int a = 0; a < n->n_attr; a++)
      if (!strcmp(n->attr[a].name, "pads")) {
        int64_t *v = ir_alloc_array(g->arena, 8, sizeof(int64_t));
        memcpy(v, nw, sizeof nw);
        n->attr[a].ints = v;
      }
  }
}

static int conv_fits(ir_graph *g, const ir_node *n, int any_channels) {
  if (n->op != IR_OP_Conv || n->n_in < 2 || n->n_out != 1 || n->out[0] < 0 || pass_layout_is_nhwc(n)) return 0;
  const ir_value *x = ir_in(g, n, 0), *w = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  if (!x || !w || !y || x->kind == IR_VAL_CONST || x->dtype != IR_FLOAT || y->dtype != IR_FLOAT) return 0;
  if (w->kind != IR_VAL_CONST || w->dtype != IR_FLOAT || w->shape.rank != 4) return 0;
  if (x->shape.rank != 4 || !ir_shape_static(&x->shape) || !ir_shape_static(&y->shape)) return 0;
  int64_t G = ir_attr_int(n, "group", 1), C = x->shape.dims[1], M = y->shape.dims[1];
  if (G < 1 || C % G || M % G || w->shape.dims[0] != M || w->shape.dims[1] * G != C) return 0;
  if (!any_channels && (C % 4 || M % 4)) return 0;
  const ir_value *r = n->n_in > 3 ? ir_in(g, n, 3) : NULL;
  if (r && (r->kind == IR_VAL_CONST || !ir_shape_same_dims(&r->shape, &y->shape))) return 0;
  return 1;
}

/* Which inputs of node n follow the layout (bit k: input k), or -1 if n cannot run
 * channels-last. Constants of rank 0 broadcast either way and are left out. */
static int layout_slots(ir_graph *g, const ir_node *n) {
  if (n->n_out != 1 || n->out[0] < 0 || n->n_in > 30) return -1;
  const ir_value *y = ir_out(g, n, 0);
  if (y->shape.rank != 4 || !ir_shape_static(&y->shape)) return -1;
  if (marked_follower(g, n)) return 1;
  ir_kind k = n->op >= 0 && n->op < IR_OP_COUNT ? ir_op_table[n->op].kind : IR_K_SPECIAL;
  if (k == IR_K_UNARY) {
    const ir_value *x = ir_in(g, n, 0);
    return x && ir_shape_same_dims(&x->shape, &y->shape) ? 1 : -1;
  }
  if (k == IR_K_BINARY || k == IR_K_VARIADIC || k == IR_K_COMPARE) {
    int bits = 0;
    for (int i = 0; i < n->n_in; i++) {
      const ir_value *v = ir_in(g, n, i);
      if (!v) continue;
      if (v->kind == IR_VAL_CONST) {
        if (v->shape.rank == 0) continue;
        if (v->shape.rank > 4 || !ir_shape_static(&v->shape)) return -1;
      } else if (v->shape.rank != 4) {
        return -1;
      }
      bits |= 1 << i;
    }
    return bits;
  }
  if (n->op == IR_OP_Pad) { /* constant pads of 8 entries; no axes input */
    const ir_value *x = ir_in(g, n, 0), *pv = n->opset >= 11 ? ir_in(g, n, 1) : NULL;
    if (!x || x->shape.rank != 4 || n->n_in > 3) return -1;
    if (n->opset >= 11) {
      if (!pv || pv->kind != IR_VAL_CONST || ir_shape_numel(&pv->shape) != 8) return -1;
    } else {
      const int64_t *pa;
      if (ir_attr_ints(n, "pads", &pa) != 8) return -1;
    }
    return 1;
  }
  if (n->op == IR_OP_Concat) {
    int64_t axis = ir_attr_int(n, "axis", 1);
    if (axis != 1 && axis != -3) return -1;
    for (int i = 0; i < n->n_in; i++) {
      const ir_value *v = ir_in(g, n, i);
      if (!v || v->shape.rank != 4) return -1;
    }
    return (int)((1u << n->n_in) - 1);
  }
  return -1;
}

int pass_layout_nhwc(ir_graph *g, int any_channels) {
  ir_rebuild_uses(g);
  lay_ctx L = {g, g->n_values, NULL, NULL, NULL};
  L.twin = malloc(sizeof(int) * (size_t)(L.nv0 + 1));
  L.cperm = malloc(sizeof(int) * (size_t)(L.nv0 + 1));
  L.pending = calloc((size_t)L.nv0 + 1, 1);
  if (!L.twin || !L.cperm || !L.pending) {
    free(L.twin), free(L.cperm), free(L.pending);
    fprintf(stderr, "pipecc: out of memory in the layout pass\n");
    return -1;
  }
  for (int v = 0; v < L.nv0; v++) L.twin[v] = L.cperm[v] = -1;
  int n0 = g->n_nodes, convs = 0;
  for (int i = 0; i < n0; i++) {
    if (g->nodes[i].dead) continue;
    int conv = conv_fits(g, &g->nodes[i], any_channels), slots = 0;
    if (conv) {
      slots = 1 | (g->nodes[i].n_in > 3 ? 8 : 0);
    } else {
      slots = layout_slots(g, &g->nodes[i]);
      int follows = 0;
      for (int k = 0; slots > 0 && k < g->nodes[i].n_in; k++) {
        int v = g->nodes[i].in[k];
        if ((slots >> k & 1) && v >= 0 && v < L.nv0 && L.twin[v] >= 0) follows = 1;
      }
      if (!follows) slots = -1;
    }
    if (slots < 0) { /* stays NCHW: its inputs must exist in NCHW */
      for (int k = 0; k < g->nodes[i].n_in; k++) materialize(&L, g->nodes[i].in[k]);
      continue;
    }
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      int nv = v;
      if (conv && k == 1) nv = perm_const(&L, v);
      else if (!(slots >> k & 1)) materialize(&L, v);
      else if (g->values[v].kind == IR_VAL_CONST) nv = perm_const(&L, v);
      else nv = to_nhwc(&L, v);
      g->nodes[i].in[k] = nv; /* g->nodes may have moved: index again */
    }
    int y = g->nodes[i].out[0];
    char *name = ir_sprintf(g->arena, "%s.nhwc", g->values[y].name ? g->values[y].name : "");
    int t = ir_add_value(g, name, IR_VAL_ACT, g->values[y].dtype);
    g->values[t].shape = pass_layout_permuted(&g->values[y].shape, 1);
    g->values[t].writeback = -1;
    g->values[t].producer = i;
    g->values[y].producer = -1;
    g->nodes[i].out[0] = t;
    L.twin[y] = t;
    L.pending[y] = 1;
    if (conv || marked_follower(g, &g->nodes[i])) {
      ir_attr *a = ir_node_add_attr(g, i, "pipecc.layout", IR_ATTR_STRING);
      a->s = ir_strdup(g->arena, "NHWC");
      a->slen = 4;
      convs += conv;
    } else if (g->nodes[i].op == IR_OP_Pad) {
      permute_pads(g, i);
    } else if (g->nodes[i].op == IR_OP_Concat) {
      ir_node *n = &g->nodes[i];
      for (int a = 0; a < n->n_attr; a++)
        if (!strcmp(n->attr[a].name, "axis")) n->attr[a].i = 3;
    }
  }
  for (int k = 0; k < g->n_outputs; k++) materialize(&L, g->outputs[k]);
  free(L.twin), free(L.cperm), free(L.pending);
  if (!convs) return 0; /* only a Conv starts a channels-last region: nothing was added */
  if (ir_toposort(g)) return -1;
  ir_compact(g);
  ir_rebuild_uses(g);
  return convs;
}
