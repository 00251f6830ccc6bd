/* tests/shape/shape_unit.c - edge cases of the shape pass: broadcasting, conv/pool
 * window arithmetic, model errors without cascades, overflow, and the speed of a
 * 100,000-node graph. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/diag.h"
#include "passes/pass.h"
#include "passes/shape/shape_impl.h"

#include "../lib/unit_check.h"

static ir_shape S(int r, ...) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = r;
  va_list ap;
  va_start(ap, r);
  for (int i = 0; i < r; i++) s.dims[i] = va_arg(ap, long long);
  va_end(ap);
  return s;
}

static int same(const ir_shape *a, const ir_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static void test_broadcast(void) {
  ir_shape o, a, b, want;
  a = S(3, 2LL, 3LL, 1LL), b = S(1, 4LL), want = S(3, 2LL, 3LL, 4LL);
  CHECK(!sh_broadcast_shapes(&a, &b, &o) && same(&o, &want));
  a = S(0), b = S(2, 5LL, 1LL), want = S(2, 5LL, 1LL);
  CHECK(!sh_broadcast_shapes(&a, &b, &o) && same(&o, &want));
  a = S(1, 0LL), b = S(2, 3LL, 1LL), want = S(2, 3LL, 0LL);
  CHECK(!sh_broadcast_shapes(&a, &b, &o) && same(&o, &want));
  a = S(1, 0LL), b = S(1, 2LL);
  CHECK(sh_broadcast_shapes(&a, &b, &o) == 1);
  a = S(3, 2LL, 3LL, 4LL), b = S(3, 5LL, 3LL, 4LL);
  CHECK(sh_broadcast_shapes(&a, &b, &o) == 3);
}

static int64_t win(int64_t in, int64_t k, int64_t s, int64_t d, int ap, int ceil, int64_t pb, int64_t pe) {
  int64_t o = -7;
  if (sh_window_out(in, k, s, d, ap, ceil, &pb, &pe, &o)) return -1;
  return o;
}

static void test_window(void) {
  CHECK(win(224, 7, 2, 1, SH_PAD_NOTSET, 0, 3, 3) == 112); /* resnet stem */
  CHECK(win(112, 3, 2, 1, SH_PAD_NOTSET, 0, 1, 1) == 56);  /* resnet maxpool */
  CHECK(win(6, 3, 2, 1, SH_PAD_NOTSET, 0, 0, 0) == 2);
  CHECK(win(6, 3, 2, 1, SH_PAD_NOTSET, 1, 0, 0) == 3);  /* ceil_mode */
  CHECK(win(4, 2, 2, 1, SH_PAD_NOTSET, 1, 0, 1) == 2);  /* ceil: last window would start in the pad */
  CHECK(win(7, 3, 1, 2, SH_PAD_NOTSET, 0, 0, 0) == 3);  /* dilation 2: extent 5 */
  CHECK(win(2, 3, 1, 1, SH_PAD_NOTSET, 0, 0, 0) == -1); /* kernel larger than the input */
  CHECK(win(2, 3, 1, 1, SH_PAD_NOTSET, 0, 1, 0) == 1);
  CHECK(win(5, 3, 0, 1, SH_PAD_NOTSET, 0, 0, 0) == -1); /* stride 0 */
  CHECK(win(5, 3, 2, 1, SH_PAD_VALID, 0, 9, 9) == 2);   /* VALID ignores pads */
  int64_t pb = 0, pe = 0, o;
  CHECK(!sh_window_out(6, 3, 2, 1, SH_PAD_SAME_UPPER, 0, &pb, &pe, &o) && o == 3 && pb == 0 && pe == 1);
  pb = pe = 0;
  CHECK(!sh_window_out(6, 3, 2, 1, SH_PAD_SAME_LOWER, 0, &pb, &pe, &o) && o == 3 && pb == 1 && pe == 0);
  pb = pe = 0;
  CHECK(!sh_window_out(5, 1, 3, 1, SH_PAD_SAME_UPPER, 0, &pb, &pe, &o) && o == 2 && pb == 0 && pe == 0);
  CHECK(win((int64_t)1 << 50, 3, 1, 1, SH_PAD_NOTSET, 0, 0, 0) == -1 || 1); /* no overflow, any answer */
}

/* ---- small graphs ---- */

static int input(ir_graph *g, const char *name, ir_dtype dt, ir_shape s) {
  int v = ir_add_value(g, name, IR_VAL_INPUT, dt);
  g->values[v].shape = s;
  return v;
}
static int act(ir_graph *g, const char *name) { return ir_add_value(g, name, IR_VAL_ACT, IR_UNDEFINED); }
static int node1(ir_graph *g, ir_op op, int a, int b, int out) {
  int in[2] = {a, b};
  return ir_add_node(g, op, "n", in, b < 0 ? 1 : 2, &out, 1);
}

static void test_errors(void) {
  ir_diag_quiet = 1;
  ir_graph *g = ir_graph_new("unit.onnx");
  g->opset = 17;
  int x = input(g, "x", IR_FLOAT, S(2, 2LL, 3LL)), y = input(g, "y", IR_FLOAT, S(1, 4LL));
  int a = act(g, "a"), r = act(g, "r"), m = act(g, "m");
  node1(g, IR_OP_Add, x, y, a);   /* broadcast error */
  node1(g, IR_OP_Relu, a, -1, r); /* skipped: its input is unknown */
  node1(g, IR_OP_Mul, r, x, m);   /* skipped too */
  g->outputs = ir_alloc_array(g->arena, 1, sizeof(int));
  g->outputs[0] = m;
  g->n_outputs = 1;
  pass_opts o = {0};
  CHECK(pass_shape(g, &o) == -1);
  CHECK(g->n_errors == 1);
  ir_graph_free(g);

  /* Reshape with a non-constant shape, and one with a constant shape */
  g = ir_graph_new("unit.onnx");
  g->opset = 17;
  x = input(g, "x", IR_FLOAT, S(2, 4LL, 6LL));
  int sh_in = input(g, "s", IR_INT64, S(1, 2LL));
  int64_t dims[2] = {-1, 3};
  ir_shape s1 = S(1, 2LL);
  int sc = ir_add_const(g, "c", IR_INT64, &s1, dims, sizeof dims);
  a = act(g, "a");
  int b = act(g, "b");
  int n0 = node1(g, IR_OP_Reshape, x, sh_in, a);
  int n1 = node1(g, IR_OP_Reshape, x, sc, b);
  CHECK(pass_shape_node(g, n0) == -1 && g->n_errors == 1);
  CHECK(pass_shape_node(g, n1) == 0);
  ir_shape want = S(2, 8LL, 3LL);
  CHECK(same(&g->values[b].shape, &want) && g->values[b].dtype == IR_FLOAT);
  ir_graph_free(g);

  /* Tile whose product overflows int64 */
  g = ir_graph_new("unit.onnx");
  g->opset = 17;
  x = input(g, "x", IR_FLOAT, S(2, 1LL << 20, 1LL << 20));
  int64_t rep[2] = {1LL << 20, 1LL << 20};
  sc = ir_add_const(g, "rep", IR_INT64, &s1, rep, sizeof rep);
  a = act(g, "a");
  n0 = node1(g, IR_OP_Tile, x, sc, a);
  CHECK(pass_shape_node(g, n0) == -1 && g->n_errors == 1);
  ir_graph_free(g);

  /* MatMul: 1-D operands and batch broadcasting */
  g = ir_graph_new("unit.onnx");
  g->opset = 17;
  x = input(g, "x", IR_FLOAT, S(4, 2LL, 1LL, 3LL, 4LL));
  y = input(g, "y", IR_FLOAT, S(3, 5LL, 4LL, 6LL));
  int v = input(g, "v", IR_FLOAT, S(1, 4LL));
  a = act(g, "a");
  b = act(g, "b");
  n0 = node1(g, IR_OP_MatMul, x, y, a);
  n1 = node1(g, IR_OP_MatMul, x, v, b);
  CHECK(pass_shape_node(g, n0) == 0 && pass_shape_node(g, n1) == 0);
  want = S(4, 2LL, 5LL, 3LL, 6LL);
  CHECK(same(&g->values[a].shape, &want));
  CHECK(g->nodes[n0].flops == 2.0 * 10 * 3 * 6 * 4);
  want = S(3, 2LL, 1LL, 3LL);
  CHECK(same(&g->values[b].shape, &want));
  ir_graph_free(g);
  ir_diag_quiet = 0;
}

/* A chain of 100,000 element-wise and MatMul nodes must infer in well under a second. */
static void test_speed(void) {
  ir_graph *g = ir_graph_new("big.onnx");
  g->opset = 17;
  int x = input(g, "x", IR_FLOAT, S(3, 8LL, 64LL, 64LL));
  ir_shape ws = S(2, 64LL, 64LL);
  static float w[64 * 64];
  int wc = ir_add_const(g, "w", IR_FLOAT, &ws, w, sizeof w);
  int cur = x;
  for (int i = 0; i < 100000; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "t%d", i); /* unique: ir_add_value probes suffixes on a clash */
    int o = act(g, nm);
    if (i % 3 == 0) node1(g, IR_OP_MatMul, cur, wc, o);
    else if (i % 3 == 1) node1(g, IR_OP_Add, cur, x, o);
    else node1(g, IR_OP_Relu, cur, -1, o);
    cur = o;
  }
  g->outputs = ir_alloc_array(g->arena, 1, sizeof(int));
  g->outputs[0] = cur;
  g->n_outputs = 1;
  pass_opts o = {0};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(pass_shape(g, &o) == 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  printf("shape inference of 100000 nodes: %.1f ms\n", ms);
  CHECK(ms < 500);
  ir_shape want = S(3, 8LL, 64LL, 64LL);
  CHECK(same(&g->values[cur].shape, &want));
  ir_graph_free(g);
}

int main(void) {
  test_broadcast();
  test_window();
  test_errors();
  test_speed();
  if (fails) {
    fprintf(stderr, "shape_unit: %d checks failed\n", fails);
    return 1;
  }
  printf("shape_unit: all checks passed\n");
  return 0;
}
