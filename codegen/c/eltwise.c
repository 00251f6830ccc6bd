/* codegen/c/eltwise.c - element-wise ops, fused into one loop per unit.
 *
 * A unit is a group of element-wise nodes whose intermediates are read inside the unit
 * only and have the unit's output shape (a float MatMul may lead it: emit_gemm_unit);
 * its loop runs over the output shape once, loads every
 * external input with its broadcast index, computes each node's value into a local
 * of the node's output type and stores the root's value. A fused node computes
 * exactly what it would compute alone (the same C expression on the same values, no
 * contraction), so fusing never changes results. The per-node expressions, the loop
 * shape and the member evaluation are codegen/eltwise_expr.c's (shared with cuda). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "codegen/eltwise_expr.h"
#include "ir/diag.h"

int cg_is_eltwise(const ir_graph *g, const ir_node *n) {
  (void)g;
  if (n->op < 0 || n->op >= IR_OP_COUNT) return 0;
  switch (ir_op_table[n->op].kind) {
    case IR_K_UNARY:
    case IR_K_UNARY_BOOL:
    case IR_K_BINARY:
    case IR_K_COMPARE:
    case IR_K_VARIADIC: return 1;
    default: return n->op == IR_OP_Where || n->op == IR_OP_Cast || n->op == IR_OP_CastLike || n->op == IR_OP_Expand;
  }
}

static void write_body(void *ctx, const char *fmt, va_list ap) { vfprintf(((cg_ctx *)ctx)->body, fmt, ap); }

/* A unit with a MatMul member mn (codegen/stage.h, gemm_units; one at most, anywhere in
 * graph order) and element-wise members mem: the GEMMs of
 * cg_gemm_rows rows into scratch, each block followed by the element-wise members over
 * its rows when the loop shape allows (one dim, or rows of N), else all blocks first
 * into a full-size scratch and one loop after. The MatMul's output is the last of the
 * loop's inputs, read from the scratch; its A and B are inputs of the function only. */
static int emit_gemm_unit(cg_ctx *c, const ir_node *mn, const int *mem, int n_mem, const int *ext, int n_ext) {
  ir_graph *g = c->g;
  const char *YT = cg_ctype(ir_out(g, &g->nodes[mem[n_mem - 1]], 0)->dtype);
  cg_matmul mm;
  if (cg_matmul_params(g, "cpu", mn, &mm)) return -1;
  if (mm.pa || mm.pb) return cg_fail(c, mn, "a Transpose folded into a MatMul of a fused unit");
  int64_t M = mm.NB * mm.M, N = mm.N, K = mm.K, MB = cg_gemm_rows(M, N);
  int ia = -1, ib = -1;
  int ext2[65], n2 = 0;
  const char *src[65];
  char names[65][16];
  for (int e = 0; e < n_ext; e++) {
    if (ext[e] == mn->in[0]) ia = e;
    if (ext[e] == mn->in[1]) ib = e;
    int used = 0; /* read by an element-wise member too */
    for (int m = 0; m < n_mem; m++) {
      const ir_node *en = &g->nodes[mem[m]];
      int nin = en->op == IR_OP_Expand || en->op == IR_OP_CastLike ? 1 : en->n_in;
      for (int k = 0; k < nin; k++) used |= en->in[k] == ext[e];
    }
    if (!used) continue;
    snprintf(names[n2], sizeof names[n2], "x%d", e);
    src[n2] = names[n2];
    ext2[n2++] = ext[e];
  }
  IR_ASSERT(ia >= 0 && ib >= 0 && n2 < 65);
  src[n2] = "blk";
  ext2[n2++] = mn->out[0];
  cg_expr_writer w = {g, "cpu", c, write_body};
  int64_t QD[IR_MAX_RANK], QS[66][IR_MAX_RANK];
  int q = cg_eltwise_layout(&w, mem, n_mem, ext2, n2, QD, QS);
  if (q < 0) return -1;
  const int64_t *qv = QS[n2 - 1];
  int rows = (q == 1 && qv[0] == 1) || (q == 2 && QD[1] == N && qv[0] == N && qv[1] == 1);
  /* the rows of a block in the loop's first dim: r0 * step elements of it */
  int64_t step = q == 1 ? N : 1;
  cg_scratch(c, (size_t)((rows ? MB : M) * N) * sizeof(float));
  cg_w(c, "  /* GEMM blocks of %lld rows, %s */\n", (long long)MB,
       rows ? "the element-wise work after each" : "then the element-wise work");
  cg_w(c, "  float *blk = (float *)scr;\n");
  char a[16], b[16];
  snprintf(a, sizeof a, "x%d", ia);
  snprintf(b, sizeof b, "x%d", ib);
  cg_gemm_blocks_open(c, M, N, K, MB, a, b, "blk", !rows);
  const char *ind = rows ? "    " : "  ";
  if (rows) {
    for (int e = 0; e < n2; e++) {
      int64_t off = e == n2 - 1 ? 0 : QS[e][0] * step; /* the block's first row (the GEMM block: its own) */
      cg_w(c, "    const %s *p%d = %s", cg_ctype(g->values[ext2[e]].dtype), e, src[e]);
      if (off) cg_w(c, " + r0 * %lld", (long long)off);
      cg_w(c, ";\n");
    }
    cg_w(c, "    %s *py = y0 + r0 * %lld;\n", YT, (long long)(QS[n2][0] * step));
  } else {
    cg_w(c, "  }\n");
    for (int e = 0; e < n2; e++) cg_w(c, "  const %s *p%d = %s;\n", cg_ctype(g->values[ext2[e]].dtype), e, src[e]);
    cg_w(c, "  %s *py = y0;\n", YT);
  }
  for (int d = 0; d < q; d++) {
    if (d == 0 && rows)
      cg_w(c, step == 1 ? "%sfor (long i0 = 0; i0 < nr; i0++) {\n" : "%sfor (long i0 = 0; i0 < nr * %lld; i0++) {\n",
           ind, (long long)step);
    else cg_w(c, "%s%*sfor (long i%d = 0; i%d < %lld; i%d++) {\n", ind, 2 * d, "", d, d, (long long)QD[d], d);
  }
  char idx[66][256];
  for (int e = 0; e <= n2; e++) cg_eltwise_index(idx[e], sizeof idx[e], q, QS[e], "");
  for (int e = 0; e < n2; e++)
    cg_w(c, "%s    const %s a%d = p%d[%s];\n", ind, cg_ctype(g->values[ext2[e]].dtype), e, e, idx[e]);
  char res[32];
  if (cg_eltwise_members(&w, mem, n_mem, ext2, n2, res, sizeof res)) return -1;
  cg_w(c, "%s    py[%s] = %s;\n", ind, idx[n2], res);
  for (int d = q - 1; d >= 0; d--) cg_w(c, "%s%*s}\n", ind, 2 * d, "");
  if (rows) cg_w(c, "  }\n");
  return 0;
}

int cg_emit_eltwise(cg_ctx *c, const int *nodes, int n_nodes, const int *ext, int n_ext) {
  ir_graph *g = c->g;
  for (int i = 0; i < n_nodes; i++) {
    if (g->nodes[nodes[i]].op != IR_OP_MatMul) continue;
    /* the element-wise members, in graph order (those before the MatMul do not read it) */
    int *mem = ir_xmalloc(sizeof(int) * (size_t)n_nodes), n_mem = 0;
    for (int m = 0; m < n_nodes; m++)
      if (m != i) mem[n_mem++] = nodes[m];
    int rc = emit_gemm_unit(c, &g->nodes[nodes[i]], mem, n_mem, ext, n_ext);
    free(mem);
    return rc;
  }
  const ir_value *y = ir_out(g, &g->nodes[nodes[n_nodes - 1]], 0);
  cg_expr_writer w = {g, "cpu", c, write_body};
  int64_t QD[IR_MAX_RANK], QS[65][IR_MAX_RANK];
  int q = cg_eltwise_layout(&w, nodes, n_nodes, ext, n_ext, QD, QS);
  if (q < 0) return -1;
  if (cg_numel(y) == 0) return 0;
  /* index expressions */
  char idx[65][256];
  for (int e = 0; e <= n_ext; e++) cg_eltwise_index(idx[e], sizeof idx[e], q, QS[e], "");
  /* with a zero_ext, twice: x<zero_ext> NULL read as zeros (the same value a cleared sum
   * holds: the same bits), then read */
  const int in = c->zero_ext >= 0 ? 4 : 2; /* the loops' indent */
  for (int pass = c->zero_ext >= 0 ? 0 : 1; pass < 2; pass++) {
    if (c->zero_ext >= 0) cg_w(c, pass ? "  } else {\n" : "  if (!x%d) {\n", c->zero_ext);
    for (int d = 0; d < q; d++) {
      if (c->ivdep) cg_w(c, "%*sPK_IVDEP\n", in + 2 * d, "");
      cg_w(c, "%*sfor (long i%d = 0; i%d < %lld; i%d++) {\n", in + 2 * d, "", d, d, (long long)QD[d], d);
    }
    if (!q) cg_w(c, "%*s{\n", in, "");
    const int body = in + 2;
    for (int e = 0; e < n_ext; e++) {
      const char *t = cg_ctype(g->values[ext[e]].dtype);
      if (!pass && e == c->zero_ext) cg_w(c, "%*sconst %s a%d = (%s)0;\n", body, "", t, e, t);
      else cg_w(c, "%*sconst %s a%d = x%d[%s];\n", body, "", t, e, e, idx[e]);
    }
    char res[32];
    FILE *keep = c->body;
    char *mt = NULL;
    size_t ml = 0;
    if (in > 2) c->body = open_memstream(&mt, &ml); /* the members' lines, indented 2 more */
    int rc = cg_eltwise_members(&w, nodes, n_nodes, ext, n_ext, res, sizeof res);
    if (in > 2) {
      fclose(c->body);
      c->body = keep;
      for (char *l = mt; l && *l;) {
        char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) + 1 : strlen(l);
        cg_w(c, "  %.*s", (int)n, l);
        l += n;
      }
      free(mt);
    }
    if (rc) return -1;
    cg_w(c, "%*sy0[%s] = %s;\n", body, "", idx[n_ext], res);
    for (int d = q - 1; d >= 0; d--) cg_w(c, "%*s}\n", in + 2 * d, "");
    if (!q) cg_w(c, "%*s}\n", in, "");
  }
  if (c->zero_ext >= 0) cg_w(c, "  }\n");
  return 0;
}
