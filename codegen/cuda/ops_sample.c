/* codegen/cuda/ops_sample.c - GridSample and Det for the cuda target: a generated
 * kernel per node, one thread per output element (GridSample: an element of Y; Det: a
 * matrix, its LU working copy in scratch), whose statements are the cpu target's
 * (codegen/c/ops_sample.c: cg_gridsample_body, cg_det_body), so both targets compute
 * the same thing in the same order. */
#include <stdio.h>

#include "codegen/cuda/cg_cuda.h"

#define LL(x) ((long long)(x))

/* The kernel's head: comment, signature, grid-stride loop over i (a long). */
static void kernel_head(cu_ctx *c, const ir_node *n, const char *I, const char *params) {
  cu_decl(c, "/* node %d: %s '", n->index, ir_op_name(n->op));
  cg_put_comment(c->decl, n->name, 200);
  cu_decl(c, "' */\n");
  cu_decl(c, "__global__ void __launch_bounds__(PK_THREADS) k%d_%s(%s n, %s) {\n", (int)(n - c->g->nodes),
          ir_op_name(n->op), I, params);
  cu_decl(c, "  for (%s ii = blockIdx.x * blockDim.x + threadIdx.x; ii < n; ii += gridDim.x * blockDim.x) {\n", I);
  cu_decl(c, "    const long i = (long)ii;\n");
}

static int emit_gridsample(cu_ctx *c, const ir_node *n) {
  if (cg_sample_check(c->g, "cuda", n)) return -1;
  ir_value *x = ir_in(c->g, n, 0), *gr = ir_in(c->g, n, 1), *y = ir_out(c->g, n, 0);
  int64_t total = cg_numel(y), Q = 1;
  if (!total) return 0;
  for (int d = 2; d < x->shape.rank; d++) Q *= x->shape.dims[d];
  if (!Q) return cu_fail(c, n, "GridSample of an empty input");
  const char *I = total >= ((int64_t)1 << 31) ? "int64_t" : "unsigned", *T = cg_ctype(y->dtype);
  char params[256];
  snprintf(params, sizeof params, "const %s *__restrict__ x0, const %s *__restrict__ x1, %s *__restrict__ y0", T,
           cg_ctype(gr->dtype), T);
  kernel_head(c, n, I, params);
  cg_gridsample_body(c->g, n, c->decl, "    ");
  cu_decl(c, "  }\n}\n\n");
  cu_w(c, "  PK_LAUNCH(k%d_GridSample, (%s)%lldu, %s, %s, %s);\n", (int)(n - c->g->nodes), I, LL(total), c->x[0],
       c->x[1], c->y[0]);
  return 0;
}

static int emit_det(cu_ctx *c, const ir_node *n) {
  if (cg_sample_check(c->g, "cuda", n)) return -1;
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int64_t B = cg_numel(y), M = x->shape.dims[x->shape.rank - 1];
  if (!B) return 0;
  int64_t MM = M * M;
  cu_scratch(c, (size_t)(B * (MM > 0 ? MM : 1)) * sizeof(double));
  const char *I = B >= ((int64_t)1 << 31) ? "int64_t" : "unsigned", *T = cg_ctype(y->dtype);
  char params[256], a[64];
  snprintf(params, sizeof params, "const %s *__restrict__ x0, %s *__restrict__ y0, double *__restrict__ scr", T, T);
  kernel_head(c, n, I, params);
  snprintf(a, sizeof a, "scr + i * %lld", LL(M * M));
  cg_det_body(c->g, n, c->decl, "    ", a);
  cu_decl(c, "  }\n}\n\n");
  cu_w(c, "  PK_LAUNCH(k%d_Det, (%s)%lldu, %s, %s, (double *)(A + SCRATCH_OFF));\n", (int)(n - c->g->nodes), I, LL(B),
       c->x[0], c->y[0]);
  return 0;
}

cu_op_fn cu_op_emitter_sample(ir_op op);
cu_op_fn cu_op_emitter_sample(ir_op op) {
  switch (op) {
    case IR_OP_GridSample: return emit_gridsample;
    case IR_OP_Det: return emit_det;
    default: return NULL;
  }
}
