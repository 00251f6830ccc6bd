/* codegen/c/eltwise.c - element-wise ops, fused into one loop per unit.
 *
 * A unit is a tree of element-wise nodes whose intermediates have one consumer and
 * the unit's output shape; its loop runs over the output shape once, loads every
 * external input with its broadcast index, computes each node's value into a local
 * of the node's output type and stores the root's value. A fused node computes
 * exactly what it would compute alone (the same C expression on the same values, no
 * contraction), so fusing never changes results. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/c/cg_c.h"

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

static int is_float(ir_dtype t) { return t == IR_FLOAT || t == IR_DOUBLE; }
static int is_signed_int(ir_dtype t) { return t == IR_INT8 || t == IR_INT16 || t == IR_INT32 || t == IR_INT64; }

/* libm name for a float function of type t: "expf" / "exp" */
static const char *fm(char *buf, const char *name, ir_dtype t) {
  snprintf(buf, 32, "%.24s%s", name, t == IR_DOUBLE ? "" : "f");
  return buf;
}

/* literal of the computation type */
static const char *lit(char *buf, double v, ir_dtype t) {
  if (is_float(t)) return cg_flit(buf, 48, v, t);
  snprintf(buf, 48, "%lld", (long long)v);
  return buf;
}

/* Emit `const T tN = ...;` for node n. a[k] are operand expressions (NULL if omitted). */
static int emit_node_expr(cg_ctx *c, const ir_node *n, const char **a, int nin) {
  ir_graph *g = c->g;
  const ir_value *y = ir_out(g, n, 0);
  const ir_value *x0 = ir_in(g, n, 0);
  ir_dtype t = y->dtype, xt = x0 ? x0->dtype : t;
  const char *T = cg_ctype(t);
  int node = (int)(n - g->nodes);
  char f1[32], f2[32], l1[48], l2[48], l3[48];
  int fl = is_float(t);
  const char *A = a[0], *B = nin > 1 ? a[1] : NULL;
  cg_w(c, "    const %s t%d = ", T, node);
  switch (n->op) {
    /* ---- unary ---- */
    case IR_OP_Abs:
      if (fl) cg_w(c, "%s(%s);\n", fm(f1, "fabs", t), A);
      else if (is_signed_int(t)) cg_w(c, "(%s)(%s < 0 ? -%s : %s);\n", T, A, A, A);
      else cg_w(c, "%s;\n", A);
      return 0;
    case IR_OP_Acos: case IR_OP_Acosh: case IR_OP_Asin: case IR_OP_Asinh: case IR_OP_Atan: case IR_OP_Atanh:
    case IR_OP_Cos: case IR_OP_Cosh: case IR_OP_Sin: case IR_OP_Sinh: case IR_OP_Tan: case IR_OP_Tanh:
    case IR_OP_Exp: case IR_OP_Log: case IR_OP_Sqrt: case IR_OP_Erf: case IR_OP_Ceil: case IR_OP_Floor: {
      char low[32];
      const char *nm = ir_op_name(n->op);
      size_t i = 0;
      for (; nm[i] && i < sizeof low - 1; i++) low[i] = (char)(nm[i] >= 'A' && nm[i] <= 'Z' ? nm[i] + 32 : nm[i]);
      low[i] = 0;
      if (!fl) {
        if (n->op == IR_OP_Ceil || n->op == IR_OP_Floor) cg_w(c, "%s;\n", A);
        else cg_w(c, "(%s)%s((double)%s);\n", T, low, A);
      } else cg_w(c, "%s(%s);\n", fm(f1, low, t), A);
      return 0;
    }
    case IR_OP_Round:
      if (fl) cg_w(c, "%s(%s);\n", fm(f1, "rint", t), A);
      else cg_w(c, "%s;\n", A);
      return 0;
    case IR_OP_Neg: cg_w(c, "(%s)(-%s);\n", T, A); return 0;
    case IR_OP_Reciprocal: cg_w(c, "%s / %s;\n", lit(l1, 1, t), A); return 0;
    case IR_OP_Sign:
      if (!fl && !is_signed_int(t)) cg_w(c, "(%s)(%s > 0);\n", T, A);
      else cg_w(c, "(%s)(%s > 0 ? 1 : (%s < 0 ? -1 : 0));\n", T, A, A);
      return 0;
    case IR_OP_Sigmoid:
      cg_w(c, "%s >= 0 ? %s / (%s + %s(-%s)) : %s(%s) / (%s + %s(%s));\n", A, lit(l1, 1, t), lit(l2, 1, t),
           fm(f1, "exp", t), A, fm(f2, "exp", t), A, l2, f2, A);
      return 0;
    case IR_OP_Relu:
      if (!fl && !is_signed_int(t)) cg_w(c, "%s;\n", A);
      else cg_w(c, "%s < 0 ? (%s)0 : %s;\n", A, T, A);
      return 0;
    case IR_OP_LeakyRelu:
      cg_w(c, "%s >= 0 ? %s : %s * %s;\n", A, A, lit(l1, ir_attr_float(n, "alpha", 0.01f), t), A);
      return 0;
    case IR_OP_Elu:
      cg_w(c, "%s >= 0 ? %s : %s * (%s(%s) - %s);\n", A, A, lit(l1, ir_attr_float(n, "alpha", 1.0f), t),
           fm(f1, "exp", t), A, lit(l2, 1, t));
      return 0;
    case IR_OP_Selu:
      cg_w(c, "%s * (%s > 0 ? %s : %s * %s(%s) - %s);\n", lit(l1, ir_attr_float(n, "gamma", 1.05070102214813232421875f), t),
           A, A, lit(l2, ir_attr_float(n, "alpha", 1.67326319217681884765625f), t), fm(f1, "exp", t), A, l2);
      return 0;
    case IR_OP_Celu: {
      lit(l1, ir_attr_float(n, "alpha", 1.0f), t);
      cg_w(c, "(%s > 0 ? %s : 0) + (%s * (%s(%s / %s) - 1) < 0 ? %s * (%s(%s / %s) - 1) : 0);\n", A, A, l1,
           fm(f1, "exp", t), A, l1, l1, f1, A, l1);
      return 0;
    }
    case IR_OP_ThresholdedRelu:
      cg_w(c, "%s > %s ? %s : (%s)0;\n", A, lit(l1, ir_attr_float(n, "alpha", 1.0f), t), A, T);
      return 0;
    case IR_OP_HardSigmoid:
      cg_w(c, "%s * %s + %s;\n", lit(l1, ir_attr_float(n, "alpha", 0.2f), t), A,
           lit(l2, ir_attr_float(n, "beta", 0.5f), t));
      cg_w(c, "    const %s u%d = t%d < 0 ? (%s)0 : (t%d > 1 ? (%s)1 : t%d);\n", T, node, node, T, node, T, node);
      cg_w(c, "    (void)u%d;\n", node);
      return 1; /* result in u<node> */
    case IR_OP_HardSwish:
      cg_w(c, "%s * %s + %s;\n", A, lit(l1, 1.0 / 6.0, t), lit(l2, 0.5, t));
      cg_w(c, "    const %s u%d = %s * (t%d < 0 ? (%s)0 : (t%d > 1 ? (%s)1 : t%d));\n", T, node, A, node, T, node, T, node);
      return 1;
    case IR_OP_Softplus:
      cg_w(c, "%s > 0 ? %s + %s(%s(-%s)) : %s(%s(%s));\n", A, A, fm(f1, "log1p", t), fm(f2, "exp", t), A, f1, f2, A);
      return 0;
    case IR_OP_Softsign: cg_w(c, "%s / (%s + %s(%s));\n", A, lit(l1, 1, t), fm(f1, "fabs", t), A); return 0;
    case IR_OP_Mish:
      cg_w(c, "%s * %s(%s > 0 ? %s + %s(%s(-%s)) : %s(%s(%s)));\n", A, fm(l3, "tanh", t), A, A, fm(f1, "log1p", t),
           fm(f2, "exp", t), A, f1, f2, A);
      return 0;
    case IR_OP_Gelu:
      if (!strcmp(ir_attr_str(n, "approximate", "none"), "tanh"))
        cg_w(c, "%s * %s * (%s + %s(%s * (%s + %s * %s * %s * %s)));\n", lit(l1, 0.5, t), A, lit(l2, 1, t),
             fm(f1, "tanh", t), lit(l3, 0.7978845608028654, t), A, lit(f2, 0.044715, t), A, A, A);
      else
        cg_w(c, "%s * %s * (%s + %s(%s * %s));\n", lit(l1, 0.5, t), A, lit(l2, 1, t), fm(f1, "erf", t), A,
             lit(l3, 0.7071067811865476, t));
      return 0;
    case IR_OP_Shrink: {
      lit(l1, ir_attr_float(n, "lambd", 0.5f), t);
      lit(l2, ir_attr_float(n, "bias", 0.0f), t);
      cg_w(c, "(%s)(%s < -%s ? %s + %s : (%s > %s ? %s - %s : 0));\n", T, A, l1, A, l2, A, l1, A, l2);
      return 0;
    }
    case IR_OP_Not: cg_w(c, "!%s;\n", A); return 0;
    case IR_OP_BitwiseNot: cg_w(c, "(%s)~%s;\n", T, A); return 0;
    case IR_OP_Identity: case IR_OP_Expand: cg_w(c, "%s;\n", A); return 0;
    case IR_OP_Clip: {
      const char *lo = NULL, *hi = NULL;
      if (n->opset < 11) {
        const ir_attr *amin = ir_attr_find(n, "min"), *amax = ir_attr_find(n, "max");
        if (amin) lo = lit(l1, amin->f, t);
        if (amax) hi = lit(l2, amax->f, t);
      } else {
        lo = nin > 1 ? a[1] : NULL;
        hi = nin > 2 ? a[2] : NULL;
      }
      cg_w(c, "%s;\n", A);
      cg_w(c, "    const %s u%d = ", T, node);
      if (lo) cg_w(c, "t%d < %s ? %s : ", node, lo, lo);
      if (hi) cg_w(c, "t%d > %s ? %s : ", node, hi, hi);
      cg_w(c, "t%d;\n", node);
      return 1;
    }
    case IR_OP_IsNaN: cg_w(c, "(uint8_t)isnan(%s);\n", A); return 0;
    case IR_OP_IsInf: {
      int neg = (int)ir_attr_int(n, "detect_negative", 1), pos = (int)ir_attr_int(n, "detect_positive", 1);
      cg_w(c, "(uint8_t)(isinf(%s) && ((%s > 0 && %d) || (%s < 0 && %d)));\n", A, A, pos, A, neg);
      return 0;
    }
    /* ---- binary ---- */
    case IR_OP_Add: cg_w(c, "(%s)(%s + %s);\n", T, A, B); return 0;
    case IR_OP_Sub: cg_w(c, "(%s)(%s - %s);\n", T, A, B); return 0;
    case IR_OP_Mul: cg_w(c, "(%s)(%s * %s);\n", T, A, B); return 0;
    case IR_OP_Div: cg_w(c, "(%s)(%s / %s);\n", T, A, B); return 0;
    case IR_OP_Pow:
      if (fl) cg_w(c, "%s(%s, (%s)%s);\n", fm(f1, "pow", t), A, T, B);
      else cg_w(c, "(%s)pow((double)%s, (double)%s);\n", T, A, B);
      return 0;
    case IR_OP_Mod:
      if (fl) cg_w(c, "%s(%s, %s);\n", fm(f1, "fmod", t), A, B);
      else if (ir_attr_int(n, "fmod", 0) || !is_signed_int(t)) cg_w(c, "(%s)(%s %% %s);\n", T, A, B);
      else {
        cg_w(c, "(%s)(%s %% %s);\n", T, A, B);
        cg_w(c, "    const %s u%d = (t%d != 0 && ((t%d < 0) != (%s < 0))) ? (%s)(t%d + %s) : t%d;\n", T, node, node, node,
             B, T, node, B, node);
        return 1;
      }
      return 0;
    case IR_OP_PRelu: cg_w(c, "%s < 0 ? (%s)(%s * %s) : %s;\n", A, T, A, B, A); return 0;
    case IR_OP_BitShift:
      cg_w(c, "(%s)(%s %s %s);\n", T, A, !strcmp(ir_attr_str(n, "direction", "LEFT"), "RIGHT") ? ">>" : "<<", B);
      return 0;
    case IR_OP_BitwiseAnd: cg_w(c, "(%s)(%s & %s);\n", T, A, B); return 0;
    case IR_OP_BitwiseOr: cg_w(c, "(%s)(%s | %s);\n", T, A, B); return 0;
    case IR_OP_BitwiseXor: cg_w(c, "(%s)(%s ^ %s);\n", T, A, B); return 0;
    case IR_OP_And: cg_w(c, "(uint8_t)(%s && %s);\n", A, B); return 0;
    case IR_OP_Or: cg_w(c, "(uint8_t)(%s || %s);\n", A, B); return 0;
    case IR_OP_Xor: cg_w(c, "(uint8_t)(!%s != !%s);\n", A, B); return 0;
    case IR_OP_Equal: cg_w(c, "(uint8_t)(%s == %s);\n", A, B); return 0;
    case IR_OP_Less: cg_w(c, "(uint8_t)(%s < %s);\n", A, B); return 0;
    case IR_OP_LessOrEqual: cg_w(c, "(uint8_t)(%s <= %s);\n", A, B); return 0;
    case IR_OP_Greater: cg_w(c, "(uint8_t)(%s > %s);\n", A, B); return 0;
    case IR_OP_GreaterOrEqual: cg_w(c, "(uint8_t)(%s >= %s);\n", A, B); return 0;
    case IR_OP_Max: case IR_OP_Min: case IR_OP_Sum: case IR_OP_Mean: {
      cg_w(c, "%s;\n", A);
      char prev[32];
      snprintf(prev, sizeof prev, "t%d", node);
      for (int k = 1; k < nin; k++) {
        if (!a[k]) continue;
        cg_w(c, "    const %s t%d_%d = ", T, node, k);
        if (n->op == IR_OP_Sum || n->op == IR_OP_Mean) cg_w(c, "(%s)(%s + %s);\n", T, prev, a[k]);
        else if (fl)
          cg_w(c, "(%s %s %s || %s != %s) ? %s : %s;\n", a[k], n->op == IR_OP_Max ? ">" : "<", prev, a[k], a[k], a[k], prev);
        else cg_w(c, "%s %s %s ? %s : %s;\n", a[k], n->op == IR_OP_Max ? ">" : "<", prev, a[k], prev);
        snprintf(prev, sizeof prev, "t%d_%d", node, k);
      }
      if (n->op == IR_OP_Mean) cg_w(c, "    const %s u%d = (%s)(%s / %s);\n", T, node, T, prev, lit(l1, nin, t));
      else cg_w(c, "    const %s u%d = %s;\n", T, node, prev);
      return 1;
    }
    case IR_OP_Where: cg_w(c, "%s ? %s : %s;\n", A, a[1], a[2]); return 0;
    case IR_OP_Cast: case IR_OP_CastLike:
      if (t == IR_BOOL) cg_w(c, "(uint8_t)(%s != 0);\n", A);
      else if (is_float(xt) && !is_float(t)) {
        /* float -> integer: truncation; NaN and out-of-range values give 0 rather than UB */
        cg_w(c, "(%s == %s && %s > -9.3e18 && %s < 9.3e18) ? (%s)(int64_t)%s : (%s)0;\n", A, A, A, A, T, A, T);
      } else cg_w(c, "(%s)%s;\n", T, A);
      return 0;
    default:
      cg_w(c, "0;\n");
      return cg_fail(c, n, "element-wise op %s is not supported", ir_op_name(n->op)) * 2;
  }
}

int cg_emit_eltwise(cg_ctx *c, const int *nodes, int n_nodes, const int *ext, int n_ext) {
  ir_graph *g = c->g;
  const ir_node *root = &g->nodes[nodes[n_nodes - 1]];
  const ir_value *y = ir_out(g, root, 0);
  int r = y->shape.rank;
  int64_t D[IR_MAX_RANK];
  int64_t st[65][IR_MAX_RANK]; /* [input][dim] broadcast strides; [n_ext] is the output */
  for (int d = 0; d < r; d++) D[d] = y->shape.dims[d];
  for (int e = 0; e <= n_ext; e++) {
    const ir_value *x = e < n_ext ? &g->values[ext[e]] : y;
    int64_t xs[IR_MAX_RANK];
    cg_strides(&x->shape, xs);
    int off = r - x->shape.rank;
    if (off < 0) return cg_fail(c, root, "input '%s' has a higher rank than the output", x->name);
    for (int d = 0; d < r; d++) {
      int xd = d - off;
      if (xd < 0 || (x->shape.dims[xd] == 1 && D[d] != 1)) st[e][d] = 0;
      else if (x->shape.dims[xd] != D[d]) return cg_fail(c, root, "input '%s' does not broadcast to the output", x->name);
      else st[e][d] = xs[xd];
    }
  }
  /* coalesce: drop size-1 dims, merge a dim into the next when every stride allows */
  int q = 0;
  int64_t QD[IR_MAX_RANK], QS[65][IR_MAX_RANK];
  for (int d = 0; d < r; d++) {
    if (D[d] == 1) continue;
    if (q > 0) {
      int ok = 1;
      for (int e = 0; e <= n_ext; e++) ok &= QS[e][q - 1] == st[e][d] * D[d];
      if (ok) {
        QD[q - 1] *= D[d];
        for (int e = 0; e <= n_ext; e++) QS[e][q - 1] = st[e][d];
        continue;
      }
    }
    QD[q] = D[d];
    for (int e = 0; e <= n_ext; e++) QS[e][q] = st[e][d];
    q++;
  }
  if (cg_numel(y) == 0) return 0;
  for (int d = 0; d < q; d++)
    cg_w(c, "%*sfor (long i%d = 0; i%d < %lld; i%d++) {\n", 2 + 2 * d, "", d, d, (long long)QD[d], d);
  if (!q) cg_w(c, "  {\n");
  /* index expressions */
  char idx[65][256];
  for (int e = 0; e <= n_ext; e++) {
    size_t o = 0;
    idx[e][0] = 0;
    for (int d = 0; d < q; d++) {
      if (!QS[e][d]) continue;
      if (QS[e][d] == 1) o += (size_t)snprintf(idx[e] + o, sizeof idx[e] - o, "%si%d", o ? " + " : "", d);
      else o += (size_t)snprintf(idx[e] + o, sizeof idx[e] - o, "%si%d * %lld", o ? " + " : "", d, (long long)QS[e][d]);
    }
    if (!o) snprintf(idx[e], sizeof idx[e], "0");
  }
  for (int e = 0; e < n_ext; e++)
    cg_w(c, "    const %s a%d = x%d[%s];\n", cg_ctype(g->values[ext[e]].dtype), e, e, idx[e]);
  char res[32] = "";
  for (int m = 0; m < n_nodes; m++) {
    const ir_node *n = &g->nodes[nodes[m]];
    char ops[16][40];
    const char *a[16];
    int nin = n->n_in > 16 ? 16 : n->n_in;
    if (n->n_in > 16) return cg_fail(c, n, "more than 16 inputs in an element-wise op");
    for (int k = 0; k < nin; k++) {
      int v = n->in[k];
      a[k] = NULL;
      if (v < 0) continue;
      int found = -1;
      for (int e = 0; e < n_ext; e++)
        if (ext[e] == v) found = e;
      if (found >= 0) snprintf(ops[k], sizeof ops[k], "a%d", found);
      else {
        /* produced by a member: its result variable */
        int p = g->values[v].producer;
        snprintf(ops[k], sizeof ops[k], "r%d", p);
      }
      a[k] = ops[k];
    }
    int rc = emit_node_expr(c, n, a, nin);
    if (rc < 0) return -1;
    int node = nodes[m];
    cg_w(c, "    const %s r%d = %c%d;\n", cg_ctype(ir_out(g, n, 0)->dtype), node, rc ? 'u' : 't', node);
    snprintf(res, sizeof res, "r%d", node);
  }
  cg_w(c, "    y0[%s] = %s;\n", idx[n_ext], res);
  for (int d = q - 1; d >= 0; d--) cg_w(c, "%*s}\n", 2 + 2 * d, "");
  if (!q) cg_w(c, "  }\n");
  return 0;
}
