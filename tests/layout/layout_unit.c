/* tests/layout/layout_unit.c - passes/opt/layout.c on hand-built graphs: which nodes turn
 * channels-last, the permuted filters and constants (read through data_nchw), the
 * transposes at the region's edges, and the graphs it must leave alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/opt/layout.h"

#include "../lib/unit_check.h"

static ir_shape S4(int64_t a, int64_t b, int64_t c, int64_t d) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = 4;
  s.dims[0] = a, s.dims[1] = b, s.dims[2] = c, s.dims[3] = d;
  return s;
}

static int act(ir_graph *g, const char *name, ir_shape s) {
  int v = ir_add_value(g, name, IR_VAL_ACT, IR_FLOAT);
  g->values[v].shape = s;
  return v;
}

static int fconst(ir_graph *g, const char *name, ir_shape s, float base) {
  int64_t n = ir_shape_numel(&s);
  float *d = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) d[i] = base + (float)i;
  int v = ir_add_const(g, name, IR_FLOAT, &s, d, sizeof(float) * (size_t)n);
  free(d);
  return v;
}

static void ints(ir_graph *g, int node, const char *name, int n, const int64_t *v) {
  ir_attr *a = ir_node_add_attr(g, node, name, IR_ATTR_INTS);
  a->n = n;
  a->ints = ir_alloc_array(g->arena, (size_t)n, sizeof(int64_t));
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

static int find_node(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead && !strcmp(g->nodes[i].name, name)) return i;
  return -1;
}

static int count_op(const ir_graph *g, ir_op op) {
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++) k += !g->nodes[i].dead && g->nodes[i].op == op;
  return k;
}

static int is_perm(const ir_graph *g, int node, int a, int b, int c, int d) {
  const int64_t *p;
  return ir_attr_ints(&g->nodes[node], "perm", &p) == 4 && p[0] == a && p[1] == b && p[2] == c && p[3] == d;
}

/* x [2, 8, 5, 5] -> Conv (W [12, 8, 3, 3], pads 1) -> Add (bias [12, 1, 1]) -> Relu ->
 * MaxPool 2x2 -> y (graph output), and Relu -> Reshape (an NCHW reader) -> z */
static void test_chain(void) {
  ir_graph *g = ir_graph_new("chain.onnx");
  g->opset = 17;
  int x = ir_add_value(g, "x", IR_VAL_INPUT, IR_FLOAT);
  g->values[x].shape = S4(2, 8, 5, 5);
  int W = fconst(g, "W", S4(12, 8, 3, 3), 0.0f);
  ir_shape bs = {3, {12, 1, 1}, {NULL}};
  int B = fconst(g, "bias", bs, 100.0f);
  int c = act(g, "c", S4(2, 12, 5, 5)), a = act(g, "a", S4(2, 12, 5, 5)), r = act(g, "r", S4(2, 12, 5, 5));
  int y = act(g, "y", S4(2, 12, 2, 2));
  ir_shape zs = {2, {2, 300}, {NULL}};
  int z = act(g, "z", zs);
  ir_shape ss = {1, {2}, {NULL}};
  int64_t shp[2] = {2, 300};
  int sv = ir_add_const(g, "shape", IR_INT64, &ss, shp, sizeof shp);
  int in_c[2] = {x, W}, in_a[2] = {c, B}, in_z[2] = {r, sv};
  int nc = ir_add_node(g, IR_OP_Conv, "conv", in_c, 2, &c, 1);
  int64_t pads[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
  ints(g, nc, "pads", 4, pads);
  ir_add_node(g, IR_OP_Add, "add", in_a, 2, &a, 1);
  ir_add_node(g, IR_OP_Relu, "relu", &a, 1, &r, 1);
  int np = ir_add_node(g, IR_OP_MaxPool, "pool", &r, 1, &y, 1);
  ints(g, np, "kernel_shape", 2, k2);
  ints(g, np, "strides", 2, k2);
  ir_add_node(g, IR_OP_Reshape, "reshape", in_z, 2, &z, 1);
  g->values[y].is_output = g->values[z].is_output = 1;
  int outs[2] = {y, z};
  g->outputs = outs;
  g->n_outputs = 2;
  int ins[1] = {x};
  g->inputs = ins;
  g->n_inputs = 1;

  CHECK(pass_layout_nhwc(g, 0) == 1);
  int ic = find_node(g, "conv"), ia = find_node(g, "add"), ir = find_node(g, "relu"), ip = find_node(g, "pool");
  int is = find_node(g, "reshape");
  CHECK(ic >= 0 && ia >= 0 && ir >= 0 && ip >= 0 && is >= 0);
  if (ic < 0 || ia < 0 || ir < 0 || ip < 0 || is < 0) goto out;
  CHECK(pass_layout_is_nhwc(&g->nodes[ic]));
  CHECK(pass_layout_is_nhwc(&g->nodes[ip]));
  CHECK(!pass_layout_is_nhwc(&g->nodes[ia])); /* element-wise: permuted shapes, no mark */
  /* the Conv reads x through a Transpose 0,2,3,1 and writes [2, 5, 5, 12] */
  const ir_value *cx = ir_in(g, &g->nodes[ic], 0), *cy = ir_out(g, &g->nodes[ic], 0);
  CHECK(cx->producer >= 0 && g->nodes[cx->producer].op == IR_OP_Transpose && is_perm(g, cx->producer, 0, 2, 3, 1));
  CHECK(cx->shape.dims[1] == 5 && cx->shape.dims[3] == 8);
  CHECK(cy->shape.dims[1] == 5 && cy->shape.dims[2] == 5 && cy->shape.dims[3] == 12);
  /* the filter [12, 3, 3, 8]: element (m, kh, kw, c) is W[m][c][kh][kw] = m*72 + c*9 + kh*3 + kw */
  const ir_value *w = ir_in(g, &g->nodes[ic], 1);
  CHECK(w->kind == IR_VAL_CONST && w->shape.dims[1] == 3 && w->shape.dims[2] == 3 && w->shape.dims[3] == 8);
  int bad = 0;
  float *copy = malloc(w->nbytes);
  ir_const_copy(w, copy);
  for (int m = 0; m < 12; m++)
    for (int kh = 0; kh < 3; kh++)
      for (int kw = 0; kw < 3; kw++)
        for (int ch = 0; ch < 8; ch++) {
          double v = -1;
          int64_t i = ((m * 3 + kh) * 3 + kw) * 8 + ch;
          ir_const_f64(w, i, &v);
          double want = m * 72 + ch * 9 + kh * 3 + kw;
          bad += v != want || copy[i] != (float)want;
        }
  free(copy);
  CHECK(bad == 0);
  /* the Add's bias [12, 1, 1] became [1, 1, 1, 12], same bytes in the same order */
  const ir_value *b = ir_in(g, &g->nodes[ia], 1);
  CHECK(b->shape.rank == 4 && b->shape.dims[3] == 12 && b->shape.dims[1] == 1 && !b->data_nchw);
  double b5 = 0;
  CHECK(!ir_const_f64(b, 5, &b5) && b5 == 105.0);
  /* the pool's output goes back to y through a Transpose 0,3,1,2; the Reshape reads r
   * in NCHW, restored once by another */
  const ir_value *yv = &g->values[g->outputs[0]];
  CHECK(!strcmp(yv->name, "y") && yv->producer >= 0 && is_perm(g, yv->producer, 0, 3, 1, 2));
  const ir_value *rin = ir_in(g, &g->nodes[is], 0);
  CHECK(!strcmp(rin->name, "r") && rin->producer >= 0 && is_perm(g, rin->producer, 0, 3, 1, 2));
  CHECK(rin->shape.dims[1] == 12);
  CHECK(count_op(g, IR_OP_Transpose) == 3);
out:
  ir_graph_free(g);
}

/* Convs the pass must leave alone: 3 input channels, a non-constant filter, 1-D */
static void test_leave_alone(void) {
  ir_graph *g = ir_graph_new("stem.onnx");
  g->opset = 17;
  int x = ir_add_value(g, "x", IR_VAL_INPUT, IR_FLOAT);
  g->values[x].shape = S4(1, 3, 8, 8);
  int W = fconst(g, "W", S4(16, 3, 3, 3), 0.0f);
  int y = act(g, "y", S4(1, 16, 6, 6));
  int in[2] = {x, W};
  ir_add_node(g, IR_OP_Conv, "stem", in, 2, &y, 1);
  g->values[y].is_output = 1;
  g->outputs = &y;
  g->n_outputs = 1;
  g->inputs = &x;
  g->n_inputs = 1;
  int nodes = g->n_nodes;
  CHECK(pass_layout_nhwc(g, 0) == 0);
  CHECK(g->n_nodes == nodes && count_op(g, IR_OP_Transpose) == 0);
  CHECK(!pass_layout_is_nhwc(&g->nodes[find_node(g, "stem")]));
  /* --layout nhwc-all: the same stem channels-last, a Transpose into it and one out */
  CHECK(pass_layout_nhwc(g, 1) == 1);
  CHECK(pass_layout_is_nhwc(&g->nodes[find_node(g, "stem")]));
  CHECK(count_op(g, IR_OP_Transpose) == 2);
  ir_graph_free(g);
}

int main(void) {
  test_chain();
  test_leave_alone();
  if (fails) {
    fprintf(stderr, "layout_unit: %d checks failed\n", fails);
    return 1;
  }
  printf("layout_unit: all checks passed\n");
  return 0;
}
