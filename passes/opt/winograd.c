/* passes/opt/winograd.c - filters of 3x3 Convs transformed for Winograd F(m x m, 3 x 3)
 * (see passes/opt/winograd.h). */
#include "passes/opt/winograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double BT2[16] = {1, 0, -1, 0, 0, 1, 1, 0, 0, -1, 1, 0, 0, 1, 0, -1};
static const double G2[12] = {1, 0, 0, 0.5, 0.5, 0.5, 0.5, -0.5, 0.5, 0, 0, 1};
static const double AT2[8] = {1, 1, 1, 0, 0, 1, -1, -1};
static const double BT4[36] = {4, 0,  -5, 0, 1, 0, 0, -4, -4, 1,  1, 0, 0, 4, -4, -1, 1, 0,
                               0, -2, -1, 2, 1, 0, 0, 2,  -1, -2, 1, 0, 0, 4, 0,  -5, 0, 1};
static const double G4[18] = {1.0 / 4,  0,        0,       -1.0 / 6, -1.0 / 6,  -1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6,
                              1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 24, -1.0 / 12, 1.0 / 6,  0,        0,       1};
static const double AT4[24] = {1, 1, 1, 1, 1, 0, 0, 1, -1, 2, -2, 0, 0, 1, 1, 4, 4, 0, 0, 1, -1, 8, -8, 1};

void pass_winograd_mats(int m, const double **BT, const double **G, const double **AT) {
  *BT = m == 4 ? BT4 : BT2;
  *G = m == 4 ? G4 : G2;
  *AT = m == 4 ? AT4 : AT2;
}

int pass_winograd_m(const ir_node *n) { return (int)ir_attr_int(n, "pipecc.winograd", 0); }

/* all entries of INTS attribute `name` equal 1 (or it is absent) */
static int all_ones(const ir_node *n, const char *name) {
  const int64_t *v;
  int k = ir_attr_ints(n, name, &v);
  for (int i = 0; i < k; i++)
    if (v[i] != 1) return 0;
  return 1;
}

static int fits(ir_graph *g, const ir_node *n) {
  if (n->dead || n->op != IR_OP_Conv || n->n_in < 2 || n->n_out != 1 || n->out[0] < 0) return 0;
  if (pass_winograd_m(n)) return 0;
  const ir_value *x = ir_in(g, n, 0), *w = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  if (!x || !w || !y || y->dtype != IR_FLOAT || w->dtype != IR_FLOAT || w->kind != IR_VAL_CONST) return 0;
  if (x->shape.rank != 4 || !ir_shape_static(&x->shape) || !ir_shape_static(&y->shape)) return 0;
  if (w->shape.rank != 4 || w->shape.dims[2] != 3 || w->shape.dims[3] != 3) return 0;
  if (ir_attr_int(n, "group", 1) != 1 || !all_ones(n, "strides") || !all_ones(n, "dilations")) return 0;
  if (w->shape.dims[1] != x->shape.dims[1] || w->shape.dims[0] != y->shape.dims[1]) return 0;
  if (w->shape.dims[0] < 8 || w->shape.dims[1] < 8) return 0;
  return y->shape.dims[2] >= 2 && y->shape.dims[3] >= 2;
}

/* The tiles of one GEMM (codegen/c/winograd.c): every m x m tile of every image */
static int64_t tiles(const ir_value *x, const ir_value *y, int m) {
  return x->shape.dims[0] * ((y->shape.dims[2] + m - 1) / m) * ((y->shape.dims[3] + m - 1) / m);
}

/* mode -1: the largest m whose GEMMs have at least WINO_MIN_TILES columns, else 0 (im2col).
 * Fewer columns leave the GEMMs' vectors of 16 positions mostly empty: at micro-batch 1,
 * ResNet-18's 3x3 Convs on 7 x 7 maps (4 tiles of 4 x 4, 16 of 2 x 2) took 6.2 ms with
 * m = 4 and 2.8 with m = 2 against 2.4 by im2col, those on 14 x 14 maps (16 tiles of
 * 4 x 4) 2.0 ms with m = 4 against 1.5 with m = 2 (49 tiles); with 49 tiles of 4 x 4
 * (28 x 28) m = 4 was the fastest (1.05 ms against 1.65 and 1.8), and so it was at
 * batch 8 on ResNet-50's 14 x 14 maps (128 tiles), level with m = 2 on its 7 x 7 ones
 * (32 tiles: 9.1 to 9.6 ms against 8.8 to 9.1, and 11.3 by im2col). One core of an Intel
 * Xeon with AVX-512, OpenBLAS SkylakeX, 2026-12-02 (tools/profile_vs_ort.py's profiles). */
#define WINO_MIN_TILES 32
static int auto_m(const ir_value *x, const ir_value *y) {
  if (y->shape.dims[2] >= 4 && y->shape.dims[3] >= 4 && tiles(x, y, 4) >= WINO_MIN_TILES) return 4;
  return tiles(x, y, 2) >= WINO_MIN_TILES ? 2 : 0;
}

int pass_winograd(ir_graph *g, int mode) {
  if (mode == 0) return 0;
  int done = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (!fits(g, n)) continue;
    const ir_value *w = ir_in(g, n, 1), *y = ir_out(g, n, 0);
    int m = mode > 0 ? mode : auto_m(ir_in(g, n, 0), y);
    if (!m) continue;
    int a = m + 2;
    int64_t M = w->shape.dims[0], C = w->shape.dims[1], MC = M * C;
    const double *BT, *G, *AT;
    pass_winograd_mats(m, &BT, &G, &AT);
    float *u = malloc((size_t)(a * a * MC) * sizeof(float));
    if (!u) {
      fprintf(stderr, "pipecc: out of memory transforming the filters of Conv '%s'\n", n->name);
      return -1;
    }
    for (int64_t mc = 0; mc < MC; mc++) {
      double f[9], t[6][3];
      for (int k = 0; k < 9; k++) ir_const_f64(w, mc * 9 + k, &f[k]);
      for (int r = 0; r < a; r++) /* t = G f */
        for (int j = 0; j < 3; j++) t[r][j] = G[r * 3] * f[j] + G[r * 3 + 1] * f[3 + j] + G[r * 3 + 2] * f[6 + j];
      for (int r = 0; r < a; r++) /* U = t G^T */
        for (int j = 0; j < a; j++)
          u[(r * a + j) * MC + mc] = (float)(t[r][0] * G[j * 3] + t[r][1] * G[j * 3 + 1] + t[r][2] * G[j * 3 + 2]);
    }
    char name[600];
    snprintf(name, sizeof name, "%.500s.winograd%d", w->name, m);
    ir_shape s = {0};
    s.rank = 3;
    s.dims[0] = a * a;
    s.dims[1] = M;
    s.dims[2] = C;
    int v = ir_add_const(g, name, IR_FLOAT, &s, u, (size_t)(a * a * MC) * sizeof(float));
    free(u);
    n->in[1] = v; /* (ir_add_const grows the value table; w and y are not used past it) */
    ir_attr *at = ir_node_add_attr(g, i, "pipecc.winograd", IR_ATTR_INT);
    at->i = m;
    done++;
  }
  if (done) {
    ir_rebuild_uses(g);
    ir_compact(g);
  }
  return done;
}
