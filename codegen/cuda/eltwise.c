/* codegen/cuda/eltwise.c - fused element-wise units as generated __global__ kernels.
 *
 * A unit (a tree of element-wise nodes, see codegen/c/cg_c.h) becomes one grid-stride
 * kernel over its output: each thread decomposes its linear output index over the
 * coalesced output dims (compile-time sizes), loads every external input with its
 * broadcast offset, evaluates the nodes in order into locals and stores the root's
 * value. Indices are 32-bit unless the output has 2^31 elements or more. The per-node
 * C expressions are the cpu target's (codegen/eltwise_expr.c: same literals, same libm
 * names, which CUDA provides as device functions). */
#include <stdarg.h>
#include <stdio.h>

#include "codegen/cuda/cg_cuda.h"
#include "codegen/eltwise_expr.h"

static void write_call(void *ctx, const char *fmt, va_list ap) { vfprintf(((cu_ctx *)ctx)->call, fmt, ap); }

int cu_emit_eltwise(cu_ctx *c, const int *nodes, int n_nodes, const int *ext, int n_ext) {
  ir_graph *g = c->g;
  const ir_node *root = &g->nodes[nodes[n_nodes - 1]];
  const ir_value *y = ir_out(g, root, 0);
  if (n_ext > 64) return cu_fail(c, root, "an element-wise unit with more than 64 inputs");
  cg_expr_writer w = {g, "cuda", c, write_call};
  int64_t QD[IR_MAX_RANK], QS[65][IR_MAX_RANK];
  int q = cg_eltwise_layout(&w, nodes, n_nodes, ext, n_ext, QD, QS);
  if (q < 0) return -1;
  int64_t total = cg_numel(y);
  if (total == 0) return 0;
  const char *I = total >= ((int64_t)1 << 31) ? "int64_t" : "unsigned";
  char kname[64];
  snprintf(kname, sizeof kname, "k%d_%s", nodes[n_nodes - 1], n_nodes > 1 ? "fused" : ir_op_name(root->op));

  /* the kernel, into the file scope */
  FILE *saved = c->call;
  c->call = c->decl;
  for (int m = 0; m < n_nodes; m++) {
    const ir_node *n = &g->nodes[nodes[m]];
    cu_w(c, "/* node %d: %s '", n->index, ir_op_name(n->op));
    cg_put_comment(c->decl, n->name, 200);
    cu_w(c, "' */\n");
  }
  cu_w(c, "__global__ void __launch_bounds__(PK_THREADS) %s(%s n", kname, I);
  for (int e = 0; e < n_ext; e++) cu_w(c, ", const %s *__restrict__ x%d", cg_ctype(g->values[ext[e]].dtype), e);
  cu_w(c, ", %s *__restrict__ y0) {\n", cg_ctype(y->dtype));
  cu_w(c, "  for (%s i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {\n", I);
  /* coordinates: i0 outermost */
  if (q > 1) cu_w(c, "    %s rem = i;\n", I);
  for (int d = q - 1; d >= 1; d--) {
    cu_w(c, "    const %s i%d = rem %% %lldu;\n", I, d, (long long)QD[d]);
    if (d > 1) cu_w(c, "    rem /= %lldu;\n", (long long)QD[d]);
  }
  if (q > 1) cu_w(c, "    const %s i0 = rem / %lldu;\n", I, (long long)QD[1]);
  else if (q == 1) cu_w(c, "    const %s i0 = i;\n", I);
  for (int d = 0; d < q; d++) cu_w(c, "    (void)i%d;\n", d);
  char idx[256];
  for (int e = 0; e < n_ext; e++) {
    cg_eltwise_index(idx, sizeof idx, q, QS[e], "u");
    cu_w(c, "    const %s a%d = x%d[%s];\n", cg_ctype(g->values[ext[e]].dtype), e, e, idx);
  }
  char res[32];
  int rc = cg_eltwise_members(&w, nodes, n_nodes, ext, n_ext, res, sizeof res);
  cu_w(c, "    y0[i] = %s;\n  }\n}\n\n", res[0] ? res : "0");
  c->call = saved;
  if (rc) return -1;

  /* the launch */
  cu_w(c, "  PK_LAUNCH(%s, (%s)%lldu", kname, I, (long long)total);
  for (int e = 0; e < n_ext; e++) cu_w(c, ", %s", c->x[e]);
  cu_w(c, ", %s);\n", c->y[0]);
  return 0;
}
