/* codegen/c/eltwise.c - element-wise ops, fused into one loop per unit.
 *
 * A unit is a tree of element-wise nodes whose intermediates have one consumer and
 * the unit's output shape; its loop runs over the output shape once, loads every
 * external input with its broadcast index, computes each node's value into a local
 * of the node's output type and stores the root's value. A fused node computes
 * exactly what it would compute alone (the same C expression on the same values, no
 * contraction), so fusing never changes results. The per-node expressions, the loop
 * shape and the member evaluation are codegen/eltwise_expr.c's (shared with cuda). */
#include <stdarg.h>
#include <stdio.h>

#include "codegen/c/cg_c.h"
#include "codegen/eltwise_expr.h"

int cg_is_eltwise(const ir_graph *g, const ir_node *n) {
  (void)g;
  if (n->op < 0 || n->op >= IR_OP_COUNT) return 0;
  switch (ir_op_table[n->op].kind) {
    case IR_K_UNARY: case IR_K_UNARY_BOOL: case IR_K_BINARY: case IR_K_COMPARE: case IR_K_VARIADIC:
      return 1;
    default:
      return n->op == IR_OP_Where || n->op == IR_OP_Cast || n->op == IR_OP_CastLike || n->op == IR_OP_Expand;
  }
}

static void write_body(void *ctx, const char *fmt, va_list ap) { vfprintf(((cg_ctx *)ctx)->body, fmt, ap); }

int cg_emit_eltwise(cg_ctx *c, const int *nodes, int n_nodes, const int *ext, int n_ext) {
  ir_graph *g = c->g;
  const ir_value *y = ir_out(g, &g->nodes[nodes[n_nodes - 1]], 0);
  cg_expr_writer w = {g, "cpu", c, write_body};
  int64_t QD[IR_MAX_RANK], QS[65][IR_MAX_RANK];
  int q = cg_eltwise_layout(&w, nodes, n_nodes, ext, n_ext, QD, QS);
  if (q < 0) return -1;
  if (cg_numel(y) == 0) return 0;
  for (int d = 0; d < q; d++)
    cg_w(c, "%*sfor (long i%d = 0; i%d < %lld; i%d++) {\n", 2 + 2 * d, "", d, d, (long long)QD[d], d);
  if (!q) cg_w(c, "  {\n");
  /* index expressions */
  char idx[65][256];
  for (int e = 0; e <= n_ext; e++) cg_eltwise_index(idx[e], sizeof idx[e], q, QS[e], "");
  for (int e = 0; e < n_ext; e++)
    cg_w(c, "    const %s a%d = x%d[%s];\n", cg_ctype(g->values[ext[e]].dtype), e, e, idx[e]);
  char res[32];
  if (cg_eltwise_members(&w, nodes, n_nodes, ext, n_ext, res, sizeof res)) return -1;
  cg_w(c, "    y0[%s] = %s;\n", idx[n_ext], res);
  for (int d = q - 1; d >= 0; d--) cg_w(c, "%*s}\n", 2 + 2 * d, "");
  if (!q) cg_w(c, "  }\n");
  return 0;
}
