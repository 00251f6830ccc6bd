/* codegen/cuda/ops_vision.c - RoiAlign and DeformConv for the cuda target: kernels
 * generated into the stage .cu whose per-element code is the cpu target's
 * (codegen/c/ops_vision.c).
 *   RoiAlign    one thread per output element (k<node>_RoiAlign)
 *   DeformConv  per image: the sampled columns [C * kH * kW, oH * oW] into scratch
 *               (k<node>_DeformConv_col, one thread per element), then pk_gemm batched
 *               over the groups (W_g [Mg, K] x col_g [K, oH * oW]); the bias last
 *               (pk_bias) */
#include <stdio.h>

#include "codegen/cuda/cg_cuda.h"

#define LL(x) ((long long)(x))

/* codegen/c/ops_vision.c */

static const char *dt_name(ir_dtype t) { return t == IR_DOUBLE ? "PK_F64" : "PK_F32"; }

static void kernel_head(cu_ctx *c, const ir_node *n) {
  cu_decl(c, "/* node %d: %s '", n->index, ir_op_name(n->op));
  cg_put_comment(c->decl, n->name, 200);
  cu_decl(c, "' */\n");
}

static int emit_roialign(cu_ctx *c, const ir_node *n) {
  if (cg_vision_check(c->g, "cuda", n)) return -1;
  ir_value *y = ir_out(c->g, n, 0), *bi = ir_in(c->g, n, 2);
  int64_t total = cg_numel(y);
  if (total == 0) return 0;
  const char *T = cg_ctype(y->dtype), *I = cg_ctype(bi->dtype);
  int node = (int)(n - c->g->nodes);
  kernel_head(c, n);
  cu_decl(c,
          "__global__ void __launch_bounds__(PK_THREADS) k%d_RoiAlign(long long n, const %s *x0, const %s *x1, "
          "const %s *x2, %s *y0) {\n",
          node, T, T, I, T);
  cu_decl(c,
          "  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {\n");
  cg_roialign_body(c->g, n, c->decl, "    ");
  cu_decl(c, "  }\n}\n\n");
  cu_w(c, "  PK_LAUNCH(k%d_RoiAlign, %lldLL, %s, %s, %s, %s);\n", node, LL(total), c->x[0], c->x[1], c->x[2], c->y[0]);
  return 0;
}

static int emit_deform_conv(cu_ctx *c, const ir_node *n) {
  if (cg_vision_check(c->g, "cuda", n)) return -1;
  ir_value *x = ir_in(c->g, n, 0), *wt = ir_in(c->g, n, 1), *y = ir_out(c->g, n, 0);
  ir_dtype t = y->dtype;
  const char *T = cg_ctype(t);
  size_t es = ir_dtype_size(t);
  if (cg_numel(y) == 0) return 0;
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], M = y->shape.dims[1], G = ir_attr_int(n, "group", 1);
  int64_t P = y->shape.dims[2] * y->shape.dims[3], KK = wt->shape.dims[2] * wt->shape.dims[3];
  int64_t Mg = M / G, K = C / G * KK, rows = C * KK;
  int has_b = n->n_in > 3 && n->in[3] >= 0, has_mask = n->n_in > 4 && n->in[4] >= 0;
  if (K == 0) { /* no input channels: the bias, or zeros */
    cu_w(c, "  PK_TRY(pk_fill(S, %s, %d, 0, %lld));\n", c->y[0], (int)es, LL(cg_numel(y)));
    if (has_b)
      cu_w(c, "  PK_TRY(pk_bias(S, %s, %s, %s, %lld, %lld, %lld));\n", dt_name(t), c->y[0], c->x[3], LL(N), LL(M),
           LL(P));
    return 0;
  }
  int node = (int)(n - c->g->nodes);
  kernel_head(c, n);
  cu_decl(c,
          "__global__ void __launch_bounds__(PK_THREADS) k%d_DeformConv_col(long long n, long img, const %s *x0, "
          "const %s *x2, const %s *x4, %s *col) {\n",
          node, T, T, T, T);
  cu_decl(c, "  (void)x4;\n");
  cu_decl(c,
          "  for (long q = blockIdx.x * (long)blockDim.x + threadIdx.x; q < n; q += (long)gridDim.x * blockDim.x) {\n");
  cg_deform_body(c->g, n, c->decl, "    ");
  cu_decl(c, "  }\n}\n\n");
  cu_scratch(c, (size_t)(rows * P) * es);
  char nul[48];
  snprintf(nul, sizeof nul, "(const %s *)0", T);
  cu_w(c, "  /* N=%lld C=%lld M=%lld group=%lld offset_group=%lld columns %lldx%lld */\n", LL(N), LL(C), LL(M), LL(G),
       LL(ir_attr_int(n, "offset_group", 1)), LL(rows), LL(P));
  cu_w(c, "  {\n    %s *col = (%s *)(A + SCRATCH_OFF);\n", T, T);
  cu_w(c, "    for (long img = 0; img < %lld; img++) {\n", LL(N));
  cu_w(c, "      PK_LAUNCH(k%d_DeformConv_col, %lldLL, img, %s, %s, %s, col);\n", node, LL(rows * P), c->x[0], c->x[2],
       has_mask ? c->x[4] : nul);
  cu_w(
      c,
      "      PK_TRY(pk_gemm(S, %s, 0, 0, %lld, %lld, %lld, 1, %s, %lld, %lld, col, %lld, %lld, 0, (%s) + img * %lld, %lld, "
      "%lld, %lld));\n",
      dt_name(t), LL(Mg), LL(P), LL(K), c->x[1], LL(K), LL(Mg * K), LL(P), LL(K * P), c->y[0], LL(M * P), LL(P),
      LL(Mg * P), LL(G));
  cu_w(c, "    }\n  }\n");
  if (has_b)
    cu_w(c, "  PK_TRY(pk_bias(S, %s, %s, %s, %lld, %lld, %lld));\n", dt_name(t), c->y[0], c->x[3], LL(N), LL(M), LL(P));
  return 0;
}

cu_op_fn cu_op_emitter_vision(ir_op op);
cu_op_fn cu_op_emitter_vision(ir_op op) {
  switch (op) {
    case IR_OP_RoiAlign: return emit_roialign;
    case IR_OP_DeformConv: return emit_deform_conv;
    default: return NULL;
  }
}
