/* passes/opt/pretranspose.c - a Gemm's constant B stored transposed (pretranspose.h). */
#include "passes/opt/pretranspose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"

static int fits(ir_graph *g, const ir_node *n, int64_t max_k) {
  if (n->dead || n->op != IR_OP_Gemm || n->n_in < 2 || ir_attr_int(n, "transB", 0) != 1) return 0;
  const ir_value *a = ir_in(g, n, 0), *b = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  if (!a || !b || !y || y->dtype != IR_FLOAT || b->dtype != IR_FLOAT || b->kind != IR_VAL_CONST) return 0;
  if (b->shape.rank != 2 || !ir_shape_static(&b->shape) || b->data_nchw) return 0;
  return b->shape.dims[1] >= 1 && b->shape.dims[1] <= max_k && b->shape.dims[0] >= 1;
}

int pass_pretranspose(ir_graph *g, int64_t max_k) {
  int done = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (!fits(g, n, max_k)) continue;
    const ir_value *b = ir_in(g, n, 1);
    const int64_t N = b->shape.dims[0], K = b->shape.dims[1];
    char name[600];
    snprintf(name, sizeof name, "%.500s.T", b->name);
    ir_shape s = {0};
    s.rank = 2;
    s.dims[0] = K;
    s.dims[1] = N;
    int v;
    if (b->zero_init || !b->data) {
      v = ir_add_zero_const(g, name, IR_FLOAT, &s);
    } else {
      const size_t bytes = (size_t)(N * K) * sizeof(float);
      IR_ASSERT(b->nbytes == bytes);
      float *src = malloc(bytes), *t = malloc(bytes);
      if (!src || !t) {
        free(src);
        free(t);
        fprintf(stderr, "pipecc: out of memory transposing the weights of Gemm '%s'\n", n->name);
        return -1;
      }
      memcpy(src, b->data, bytes); /* (the data may be unaligned) */
      for (int64_t r = 0; r < N; r++)
        for (int64_t k = 0; k < K; k++) t[k * N + r] = src[r * K + k];
      v = ir_add_const(g, name, IR_FLOAT, &s, t, bytes);
      free(src);
      free(t);
    }
    n = &g->nodes[i];
    n->in[1] = v; /* (ir_add_const grows the value table: b is not used past it) */
    /* the node's own copy of its attributes first: nodes unrolled from one loop body
     * share one array, and the others' B is still stored [N, K] */
    ir_node_add_attr(g, i, "pipecc.pretransposed", IR_ATTR_INT)->i = 1;
    ir_attr *at = (ir_attr *)ir_attr_find(&g->nodes[i], "transB");
    at->i = 0;
    done++;
  }
  if (done) {
    ir_rebuild_uses(g);
    ir_compact(g);
  }
  return done;
}
