/* codegen/eltwise_expr.c - the element-wise code both targets generate the same way
 * (see codegen/eltwise_expr.h): the C expression of every element-wise op, the
 * broadcast/coalesced loop shape of a fused unit, and the member evaluation. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/c/cg_c.h" /* cg_ctype, cg_flit, cg_strides */
#include "codegen/eltwise_expr.h"
#include "ir/diag.h"

static void ew(const cg_expr_writer *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ew(const cg_expr_writer *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  c->write(c->ctx, fmt, ap);
  va_end(ap);
}

static int ew_fail(const cg_expr_writer *c, const ir_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ew_fail(const cg_expr_writer *c, const ir_node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ir_error_node(c->g, (int)(n - c->g->nodes), "%s target: %s", c->target, msg);
  return -1;
}

static int is_float(ir_dtype t) { return t == IR_FLOAT || t == IR_DOUBLE; }
static int is_signed_int(ir_dtype t) { return t == IR_INT8 || t == IR_INT16 || t == IR_INT32 || t == IR_INT64; }
/* A narrow type's conversions in runtime/pipert.h: pipert_<name>_to_f, pipert_f_to_<name> */
static const char *narrow_fn(ir_dtype t) {
  switch (t) {
    case IR_FLOAT16: return "f16";
    case IR_BFLOAT16: return "bf16";
    case IR_FLOAT8E4M3FN: return "f8e4m3fn";
    case IR_FLOAT8E4M3FNUZ: return "f8e4m3fnuz";
    case IR_FLOAT8E5M2: return "f8e5m2";
    case IR_FLOAT8E8M0: return "f8e8m0";
    case IR_FLOAT4E2M1: return "f4e2m1";
    case IR_FLOAT6E2M3: return "f6e2m3";
    case IR_FLOAT6E3M2: return "f6e3m2";
    default: return "f8e5m2fnuz";
  }
}

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

/* The node whose statement `    const T t<node> = ` cg_eltwise_node_expr has begun: what
 * the writers of the op families below need to finish it. Each writer writes the
 * expression (and any `u<node>` after it) and returns as cg_eltwise_node_expr does. */
typedef struct {
  const cg_expr_writer *c;
  const ir_node *n;
  const char **a; /* the operand expressions (NULL: an omitted input) */
  int nin;
  const char *A, *B; /* a[0]; a[1] or NULL */
  ir_dtype t, xt;    /* the output's type; the first input's (t without inputs) */
  const char *T;     /* the C type of t */
  int node;          /* the node's index: the names t<node>, u<node> */
  int fl;            /* t is a float type */
} ew_node;

/* An op no writer knows: a placeholder expression and the error */
static int ew_unsupported(const ew_node *e) {
  ew(e->c, "0;\n");
  return ew_fail(e->c, e->n, "element-wise op %s is not supported", ir_op_name(e->n->op)) * 2;
}

/* Abs, the libm functions of one argument (trigonometric, hyperbolic, exp, log, sqrt,
 * erf, ceil, floor), Round, Neg, Reciprocal, Sign */
static int ew_unary_math(const ew_node *e) {
  const cg_expr_writer *c = e->c;
  const ir_node *n = e->n;
  const char *A = e->A, *T = e->T;
  ir_dtype t = e->t;
  int fl = e->fl;
  char f1[32], l1[48];
  switch (n->op) {
    case IR_OP_Abs:
      if (fl) ew(c, "%s(%s);\n", fm(f1, "fabs", t), A);
      else if (is_signed_int(t)) ew(c, "(%s)(%s < 0 ? -%s : %s);\n", T, A, A, A);
      else ew(c, "%s;\n", A);
      return 0;
    case IR_OP_Acos:
    case IR_OP_Acosh:
    case IR_OP_Asin:
    case IR_OP_Asinh:
    case IR_OP_Atan:
    case IR_OP_Atanh:
    case IR_OP_Cos:
    case IR_OP_Cosh:
    case IR_OP_Sin:
    case IR_OP_Sinh:
    case IR_OP_Tan:
    case IR_OP_Tanh:
    case IR_OP_Exp:
    case IR_OP_Log:
    case IR_OP_Sqrt:
    case IR_OP_Erf:
    case IR_OP_Ceil:
    case IR_OP_Floor: {
      if (t == IR_FLOAT && (n->op == IR_OP_Exp || n->op == IR_OP_Erf) && !strcmp(c->target, "cpu")) {
        /* the cpu target's branch-free versions (the stage prelude, codegen/c/emit.c): they
         * vectorise, libm's do not */
        ew(c, "%s(%s);\n", n->op == IR_OP_Exp ? "pk_expf" : "pk_erff", A);
        return 0;
      }
      char low[32];
      const char *nm = ir_op_name(n->op);
      size_t i = 0;
      for (; nm[i] && i < sizeof low - 1; i++) low[i] = (char)(nm[i] >= 'A' && nm[i] <= 'Z' ? nm[i] + 32 : nm[i]);
      low[i] = 0;
      if (!fl) {
        if (n->op == IR_OP_Ceil || n->op == IR_OP_Floor) ew(c, "%s;\n", A);
        else ew(c, "(%s)%s((double)%s);\n", T, low, A);
      } else ew(c, "%s(%s);\n", fm(f1, low, t), A);
      return 0;
    }
    case IR_OP_Round:
      if (fl) ew(c, "%s(%s);\n", fm(f1, "rint", t), A);
      else ew(c, "%s;\n", A);
      return 0;
    case IR_OP_Neg: ew(c, "(%s)(-%s);\n", T, A); return 0;
    case IR_OP_Reciprocal: ew(c, "%s / %s;\n", lit(l1, 1, t), A); return 0;
    case IR_OP_Sign:
      if (!fl && !is_signed_int(t)) ew(c, "(%s)(%s > 0);\n", T, A);
      else ew(c, "(%s)(%s > 0 ? 1 : (%s < 0 ? -1 : 0));\n", T, A, A);
      return 0;
    default: return ew_unsupported(e);
  }
}

/* The activations: Sigmoid, the Relu family, Softplus, Softsign, Mish, Gelu, Shrink,
 * Clip */
static int ew_activation(const ew_node *e) {
  const cg_expr_writer *c = e->c;
  const ir_node *n = e->n;
  const char **a = e->a;
  const char *A = e->A, *T = e->T;
  ir_dtype t = e->t;
  int nin = e->nin, node = e->node, fl = e->fl;
  char f1[32], f2[32], l1[48], l2[48], l3[48];
  switch (n->op) {
    case IR_OP_Sigmoid:
      if (t == IR_FLOAT && !strcmp(c->target, "cpu")) {
        /* branch-free, through the stage prelude's pk_expf (codegen/c/emit.c), so that it
         * vectorises: e = e^-|x|, 1 / (1 + e) for x >= 0, e / (1 + e) below; the same
         * formulas as the libm branch that other targets take (EfficientNet's SiLU is
         * x * Sigmoid(x) on every activation) */
        ew(c, "pk_expf(-fabsf(%s));\n", A);
        ew(c, "    const %s u%d = (%s >= 0 ? 1.0f : t%d) / (1.0f + t%d);\n", T, node, A, node, node);
        ew(c, "    (void)u%d;\n", node);
        return 1; /* result in u<node> */
      }
      ew(c, "%s >= 0 ? %s / (%s + %s(-%s)) : %s(%s) / (%s + %s(%s));\n", A, lit(l1, 1, t), lit(l2, 1, t),
         fm(f1, "exp", t), A, fm(f2, "exp", t), A, l2, f2, A);
      return 0;
    case IR_OP_Relu:
      if (!fl && !is_signed_int(t)) ew(c, "%s;\n", A);
      else ew(c, "%s < 0 ? (%s)0 : %s;\n", A, T, A);
      return 0;
    case IR_OP_LeakyRelu:
      ew(c, "%s >= 0 ? %s : %s * %s;\n", A, A, lit(l1, ir_attr_float(n, "alpha", 0.01f), t), A);
      return 0;
    case IR_OP_Elu:
      ew(c, "%s >= 0 ? %s : %s * (%s(%s) - %s);\n", A, A, lit(l1, ir_attr_float(n, "alpha", 1.0f), t), fm(f1, "exp", t),
         A, lit(l2, 1, t));
      return 0;
    case IR_OP_Selu:
      ew(c, "%s * (%s > 0 ? %s : %s * %s(%s) - %s);\n",
         lit(l1, ir_attr_float(n, "gamma", 1.05070102214813232421875f), t), A, A,
         lit(l2, ir_attr_float(n, "alpha", 1.67326319217681884765625f), t), fm(f1, "exp", t), A, l2);
      return 0;
    case IR_OP_Celu: {
      lit(l1, ir_attr_float(n, "alpha", 1.0f), t);
      ew(c, "(%s > 0 ? %s : 0) + (%s * (%s(%s / %s) - 1) < 0 ? %s * (%s(%s / %s) - 1) : 0);\n", A, A, l1,
         fm(f1, "exp", t), A, l1, l1, f1, A, l1);
      return 0;
    }
    case IR_OP_ThresholdedRelu:
      ew(c, "%s > %s ? %s : (%s)0;\n", A, lit(l1, ir_attr_float(n, "alpha", 1.0f), t), A, T);
      return 0;
    case IR_OP_HardSigmoid:
      ew(c, "%s * %s + %s;\n", lit(l1, ir_attr_float(n, "alpha", 0.2f), t), A,
         lit(l2, ir_attr_float(n, "beta", 0.5f), t));
      ew(c, "    const %s u%d = t%d < 0 ? (%s)0 : (t%d > 1 ? (%s)1 : t%d);\n", T, node, node, T, node, T, node);
      ew(c, "    (void)u%d;\n", node);
      return 1; /* result in u<node> */
    case IR_OP_HardSwish:
      ew(c, "%s * %s + %s;\n", A, lit(l1, 1.0 / 6.0, t), lit(l2, 0.5, t));
      ew(c, "    const %s u%d = %s * (t%d < 0 ? (%s)0 : (t%d > 1 ? (%s)1 : t%d));\n", T, node, A, node, T, node, T,
         node);
      return 1;
    case IR_OP_Softplus:
      ew(c, "%s > 0 ? %s + %s(%s(-%s)) : %s(%s(%s));\n", A, A, fm(f1, "log1p", t), fm(f2, "exp", t), A, f1, f2, A);
      return 0;
    case IR_OP_Softsign: ew(c, "%s / (%s + %s(%s));\n", A, lit(l1, 1, t), fm(f1, "fabs", t), A); return 0;
    case IR_OP_Mish:
      ew(c, "%s * %s(%s > 0 ? %s + %s(%s(-%s)) : %s(%s(%s)));\n", A, fm(l3, "tanh", t), A, A, fm(f1, "log1p", t),
         fm(f2, "exp", t), A, f1, f2, A);
      return 0;
    case IR_OP_Gelu:
      if (!strcmp(ir_attr_str(n, "approximate", "none"), "tanh"))
        ew(c, "%s * %s * (%s + %s(%s * (%s + %s * %s * %s * %s)));\n", lit(l1, 0.5, t), A, lit(l2, 1, t),
           fm(f1, "tanh", t), lit(l3, 0.7978845608028654, t), A, lit(f2, 0.044715, t), A, A, A);
      else
        ew(c, "%s * %s * (%s + %s(%s * %s));\n", lit(l1, 0.5, t), A, lit(l2, 1, t), fm(f1, "erf", t), A,
           lit(l3, 0.7071067811865476, t));
      return 0;
    case IR_OP_Shrink: {
      lit(l1, ir_attr_float(n, "lambd", 0.5f), t);
      lit(l2, ir_attr_float(n, "bias", 0.0f), t);
      ew(c, "(%s)(%s < -%s ? %s + %s : (%s > %s ? %s - %s : 0));\n", T, A, l1, A, l2, A, l1, A, l2);
      return 0;
    }
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
      /* max(x, min), then min(that, max): a min above max gives max, as the spec says */
      ew(c, "%s;\n", A);
      ew(c, "    const %s v%d = ", T, node);
      if (lo) ew(c, "t%d < %s ? %s : ", node, lo, lo);
      ew(c, "t%d;\n", node);
      ew(c, "    const %s u%d = ", T, node);
      if (hi) ew(c, "v%d > %s ? %s : ", node, hi, hi);
      ew(c, "v%d;\n", node);
      return 1;
    }
    default: return ew_unsupported(e);
  }
}

/* The arithmetic of two operands: Add, Sub, Mul, Div, Pow, Mod, PRelu */
static int ew_arith(const ew_node *e) {
  const cg_expr_writer *c = e->c;
  const ir_node *n = e->n;
  const char *A = e->A, *B = e->B, *T = e->T;
  ir_dtype t = e->t;
  int node = e->node, fl = e->fl;
  char f1[32];
  switch (n->op) {
    case IR_OP_Add: ew(c, "(%s)(%s + %s);\n", T, A, B); return 0;
    case IR_OP_Sub: ew(c, "(%s)(%s - %s);\n", T, A, B); return 0;
    case IR_OP_Mul: ew(c, "(%s)(%s * %s);\n", T, A, B); return 0;
    case IR_OP_Div: ew(c, "(%s)(%s / %s);\n", T, A, B); return 0;
    case IR_OP_Pow: {
      /* a constant exponent 2 as one multiplication on the cpu target: the correctly
       * rounded square, where libm's powf is a call that does not vectorise */
      const ir_value *x1 = ir_in(c->g, n, 1);
      double ev = 0;
      if (t == IR_FLOAT && !strcmp(c->target, "cpu") && x1 && x1->kind == IR_VAL_CONST && cg_numel(x1) == 1 &&
          !ir_const_f64(x1, 0, &ev) && ev == 2.0) {
        ew(c, "%s * %s;\n    (void)%s;\n", A, A, B);
        return 0;
      }
    }
      if (fl) ew(c, "%s(%s, (%s)%s);\n", fm(f1, "pow", t), A, T, B);
      else ew(c, "(%s)pow((double)%s, (double)%s);\n", T, A, B);
      return 0;
    case IR_OP_Mod:
      if (fl && ir_attr_int(n, "fmod", 0)) {
        ew(c, "%s(%s, %s);\n", fm(f1, "fmod", t), A, B);
      } else if (fl) { /* Mod-28's fmod=0: A - floor(A / B) * B, the sign of B (zero too) */
        char f2[32];
        ew(c, "%s(%s, %s);\n", fm(f1, "fmod", t), A, B);
        ew(c, "    const %s u%d = t%d == 0 ? %s((%s)0, %s) : ((t%d < 0) != (%s < 0)) ? (%s)(t%d + %s) : t%d;\n", T,
           node, node, fm(f2, "copysign", t), T, B, node, B, T, node, B, node);
        return 1;
      } else if (ir_attr_int(n, "fmod", 0) || !is_signed_int(t)) ew(c, "(%s)(%s %% %s);\n", T, A, B);
      else {
        ew(c, "(%s)(%s %% %s);\n", T, A, B);
        ew(c, "    const %s u%d = (t%d != 0 && ((t%d < 0) != (%s < 0))) ? (%s)(t%d + %s) : t%d;\n", T, node, node, node,
           B, T, node, B, node);
        return 1;
      }
      return 0;
    case IR_OP_PRelu: ew(c, "%s < 0 ? (%s)(%s * %s) : %s;\n", A, T, A, B, A); return 0;
    default: return ew_unsupported(e);
  }
}

/* The bitwise ops: BitShift, BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot */
static int ew_bitwise(const ew_node *e) {
  const cg_expr_writer *c = e->c;
  const ir_node *n = e->n;
  const char *A = e->A, *B = e->B, *T = e->T;
  switch (n->op) {
    case IR_OP_BitShift: { /* a shift by a negative amount or past the bits: what the fill alone gives */
      int right = !strcmp(ir_attr_str(n, "direction", "LEFT"), "RIGHT");
      if (right && is_signed_int(e->t))
        ew(c, "(uint64_t)%s < 8 * sizeof(%s) ? (%s)(%s >> %s) : (%s)(%s < 0 ? -1 : 0);\n", B, T, T, A, B, T, A);
      else if (right) ew(c, "(uint64_t)%s < 8 * sizeof(%s) ? (%s)(%s >> %s) : (%s)0;\n", B, T, T, A, B, T);
      else /* left: in the unsigned type of T's width, so that a signed T wraps */
        ew(c, "(uint64_t)%s < 8 * sizeof(%s) ? (%s)((uint64_t)%s << %s) : (%s)0;\n", B, T, T, A, B, T);
      return 0;
    }
    case IR_OP_BitwiseAnd: ew(c, "(%s)(%s & %s);\n", T, A, B); return 0;
    case IR_OP_BitwiseOr: ew(c, "(%s)(%s | %s);\n", T, A, B); return 0;
    case IR_OP_BitwiseXor: ew(c, "(%s)(%s ^ %s);\n", T, A, B); return 0;
    case IR_OP_BitwiseNot: ew(c, "(%s)~%s;\n", T, A); return 0;
    default: return ew_unsupported(e);
  }
}

/* The ops with a bool (uint8_t) result: the logic (Not, And, Or, Xor), the comparisons,
 * IsNaN and IsInf */
static int ew_logic(const ew_node *e) {
  const cg_expr_writer *c = e->c;
  const ir_node *n = e->n;
  const char *A = e->A, *B = e->B;
  switch (n->op) {
    case IR_OP_Not: ew(c, "!%s;\n", A); return 0;
    case IR_OP_And: ew(c, "(uint8_t)(%s && %s);\n", A, B); return 0;
    case IR_OP_Or: ew(c, "(uint8_t)(%s || %s);\n", A, B); return 0;
    case IR_OP_Xor: ew(c, "(uint8_t)(!%s != !%s);\n", A, B); return 0;
    case IR_OP_Equal: ew(c, "(uint8_t)(%s == %s);\n", A, B); return 0;
    case IR_OP_Less: ew(c, "(uint8_t)(%s < %s);\n", A, B); return 0;
    case IR_OP_LessOrEqual: ew(c, "(uint8_t)(%s <= %s);\n", A, B); return 0;
    case IR_OP_Greater: ew(c, "(uint8_t)(%s > %s);\n", A, B); return 0;
    case IR_OP_GreaterOrEqual: ew(c, "(uint8_t)(%s >= %s);\n", A, B); return 0;
    case IR_OP_IsNaN: ew(c, "(uint8_t)isnan(%s);\n", A); return 0;
    case IR_OP_IsInf: {
      int neg = (int)ir_attr_int(n, "detect_negative", 1), pos = (int)ir_attr_int(n, "detect_positive", 1);
      ew(c, "(uint8_t)(isinf(%s) && ((%s > 0 && %d) || (%s < 0 && %d)));\n", A, A, pos, A, neg);
      return 0;
    }
    default: return ew_unsupported(e);
  }
}

/* Max, Min, Sum, Mean of any number of operands: one t<node>_<k> per further operand,
 * the result in u<node> */
static int ew_variadic(const ew_node *e) {
  const cg_expr_writer *c = e->c;
  const ir_node *n = e->n;
  const char **a = e->a;
  const char *A = e->A, *T = e->T;
  ir_dtype t = e->t;
  int nin = e->nin, node = e->node, fl = e->fl;
  char l1[48];
  ew(c, "%s;\n", A);
  char prev[32];
  snprintf(prev, sizeof prev, "t%d", node);
  for (int k = 1; k < nin; k++) {
    if (!a[k]) continue;
    ew(c, "    const %s t%d_%d = ", T, node, k);
    if (n->op == IR_OP_Sum || n->op == IR_OP_Mean) ew(c, "(%s)(%s + %s);\n", T, prev, a[k]);
    else if (fl)
      ew(c, "(%s %s %s || %s != %s) ? %s : %s;\n", a[k], n->op == IR_OP_Max ? ">" : "<", prev, a[k], a[k], a[k], prev);
    else ew(c, "%s %s %s ? %s : %s;\n", a[k], n->op == IR_OP_Max ? ">" : "<", prev, a[k], prev);
    snprintf(prev, sizeof prev, "t%d_%d", node, k);
  }
  if (n->op == IR_OP_Mean) ew(c, "    const %s u%d = (%s)(%s / %s);\n", T, node, T, prev, lit(l1, nin, t));
  else ew(c, "    const %s u%d = %s;\n", T, node, prev);
  return 1;
}

/* Cast and CastLike, from the first input's type to the output's */
static int ew_cast(const ew_node *e) {
  const cg_expr_writer *c = e->c;
  const ir_node *n = e->n;
  const char *A = e->A, *T = e->T;
  ir_dtype t = e->t, xt = e->xt;
  /* float16, bfloat16, float8, float4, float6 (bit patterns, runtime/pipert.h): read as
   * float (exact), written by one rounding from the source's value; to float8 by Cast's
   * saturate (CastLike's too, default 1; ONNX: it applies to float8 only), to float8e8m0
   * by saturate and round_mode (Cast-24) */
  char wide[96];
  if (ir_dtype_narrow(xt)) {
    snprintf(wide, sizeof wide, "pipert_%s_to_f(%s)", narrow_fn(xt), A);
    A = wide;
    xt = IR_FLOAT;
  }
  int lo, hi;
  if (t == IR_FLOAT8E8M0) {
    const char *rm = ir_attr_str(n, "round_mode", "up");
    ew(c, "pipert_f_to_f8e8m0((double)%s, %d, %d);\n", A, ir_attr_int(n, "saturate", 1) != 0,
       !strcmp(rm, "down") ? 1 : !strcmp(rm, "nearest") ? 2 : 0);
  } else if (ir_dtype_narrow(t) && ir_dtype_packed_bits(t))
    ew(c, "pipert_f_to_%s((double)%s);\n", narrow_fn(t), A); /* float4, float6: no saturate */
  else if (ir_dtype_narrow(t) && ir_dtype_size(t) == 1)
    ew(c, "pipert_f_to_%s((double)%s, %d);\n", narrow_fn(t), A, ir_attr_int(n, "saturate", 1) != 0);
  else if (ir_dtype_narrow(t)) ew(c, "pipert_f_to_%s((double)%s);\n", narrow_fn(t), A);
  else if (t == IR_BOOL) ew(c, "(uint8_t)(%s != 0);\n", A);
  else if (ir_dtype_small_int(t, &lo, &hi)) {
    /* to int4, uint4, int2, uint2 (one value per byte). From an integer or bool: the low
     * bits, sign-extended for int4 and int2 (ONNX: higher bits discarded). From a float:
     * truncated to an integer, then the same low bits (outside the range is undefined in
     * ONNX; onnx 1.23's reference wraps so with the ml_dtypes it pins, 0.5); NaN and
     * values past int64's range give 0. */
    int w = lo ? -2 * lo : hi + 1; /* 2^bits */
    ew(c, lo ? "(%s)(((" : "(%s)((uint64_t)", T); /* the int64 value, then its low bits */
    if (is_float(xt)) ew(c, "((%s == %s && %s > -9.2e18 && %s < 9.2e18) ? (int64_t)%s : (int64_t)0)", A, A, A, A, A);
    else ew(c, "(int64_t)%s", A);
    if (lo) ew(c, " & %d) ^ %d) - %d);\n", w - 1, w / 2, w / 2);
    else ew(c, " & %du);\n", w - 1);
  } else if (is_float(xt) && !is_float(t)) {
    /* float -> integer: truncation; NaN and out-of-range values give 0 rather than UB */
    ew(c, "(%s == %s && %s > -9.3e18 && %s < 9.3e18) ? (%s)(int64_t)%s : (%s)0;\n", A, A, A, A, T, A, T);
  } else ew(c, "(%s)%s;\n", T, A);
  return 0;
}

int cg_eltwise_node_expr(const cg_expr_writer *c, const ir_node *n, const char **a, int nin) {
  ir_graph *g = c->g;
  const ir_value *y = ir_out(g, n, 0);
  const ir_value *x0 = ir_in(g, n, 0);
  ew_node e = {c,
               n,
               a,
               nin,
               a[0],
               nin > 1 ? a[1] : NULL,
               y->dtype,
               x0 ? x0->dtype : y->dtype,
               cg_ctype(y->dtype),
               (int)(n - g->nodes),
               is_float(y->dtype)};
  ew(c, "    const %s t%d = ", e.T, e.node);
  switch (n->op) {
    case IR_OP_Abs:
    case IR_OP_Acos:
    case IR_OP_Acosh:
    case IR_OP_Asin:
    case IR_OP_Asinh:
    case IR_OP_Atan:
    case IR_OP_Atanh:
    case IR_OP_Cos:
    case IR_OP_Cosh:
    case IR_OP_Sin:
    case IR_OP_Sinh:
    case IR_OP_Tan:
    case IR_OP_Tanh:
    case IR_OP_Exp:
    case IR_OP_Log:
    case IR_OP_Sqrt:
    case IR_OP_Erf:
    case IR_OP_Ceil:
    case IR_OP_Floor:
    case IR_OP_Round:
    case IR_OP_Neg:
    case IR_OP_Reciprocal:
    case IR_OP_Sign: return ew_unary_math(&e);
    case IR_OP_Sigmoid:
    case IR_OP_Relu:
    case IR_OP_LeakyRelu:
    case IR_OP_Elu:
    case IR_OP_Selu:
    case IR_OP_Celu:
    case IR_OP_ThresholdedRelu:
    case IR_OP_HardSigmoid:
    case IR_OP_HardSwish:
    case IR_OP_Softplus:
    case IR_OP_Softsign:
    case IR_OP_Mish:
    case IR_OP_Gelu:
    case IR_OP_Shrink:
    case IR_OP_Clip: return ew_activation(&e);
    case IR_OP_Add:
    case IR_OP_Sub:
    case IR_OP_Mul:
    case IR_OP_Div:
    case IR_OP_Pow:
    case IR_OP_Mod:
    case IR_OP_PRelu: return ew_arith(&e);
    case IR_OP_BitShift:
    case IR_OP_BitwiseAnd:
    case IR_OP_BitwiseOr:
    case IR_OP_BitwiseXor:
    case IR_OP_BitwiseNot: return ew_bitwise(&e);
    case IR_OP_Not:
    case IR_OP_And:
    case IR_OP_Or:
    case IR_OP_Xor:
    case IR_OP_Equal:
    case IR_OP_Less:
    case IR_OP_LessOrEqual:
    case IR_OP_Greater:
    case IR_OP_GreaterOrEqual:
    case IR_OP_IsNaN:
    case IR_OP_IsInf: return ew_logic(&e);
    case IR_OP_Max:
    case IR_OP_Min:
    case IR_OP_Sum:
    case IR_OP_Mean: return ew_variadic(&e);
    case IR_OP_Cast:
    case IR_OP_CastLike: return ew_cast(&e);
    case IR_OP_Identity:
    case IR_OP_Expand: ew(c, "%s;\n", e.A); return 0;
    case IR_OP_Where: ew(c, "%s ? %s : %s;\n", e.A, a[1], a[2]); return 0;
    default: return ew_unsupported(&e);
  }
}

int cg_eltwise_layout(const cg_expr_writer *c, const int *nodes, int n_nodes, const int *ext, int n_ext, int64_t *QD,
                      int64_t (*QS)[IR_MAX_RANK]) {
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
    if (off < 0) return ew_fail(c, root, "input '%s' has a higher rank than the output", x->name);
    for (int d = 0; d < r; d++) {
      int xd = d - off;
      if (xd < 0 || (x->shape.dims[xd] == 1 && D[d] != 1)) st[e][d] = 0;
      else if (x->shape.dims[xd] != D[d])
        return ew_fail(c, root, "input '%s' does not broadcast to the output", x->name);
      else st[e][d] = xs[xd];
    }
  }
  /* coalesce: drop size-1 dims, merge a dim into the next when every stride allows */
  int q = 0;
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
  return q;
}

void cg_eltwise_index(char *buf, size_t n, int q, const int64_t *qs, const char *suffix) {
  size_t o = 0;
  buf[0] = 0;
  for (int d = 0; d < q; d++) {
    if (!qs[d]) continue;
    if (qs[d] == 1) o += (size_t)snprintf(buf + o, n - o, "%si%d", o ? " + " : "", d);
    else o += (size_t)snprintf(buf + o, n - o, "%si%d * %lld%s", o ? " + " : "", d, (long long)qs[d], suffix);
  }
  if (!o) snprintf(buf, n, "0");
}

int cg_eltwise_members(const cg_expr_writer *c, const int *nodes, int n_nodes, const int *ext, int n_ext, char *res,
                       size_t res_len) {
  ir_graph *g = c->g;
  res[0] = 0;
  for (int m = 0; m < n_nodes; m++) {
    const ir_node *n = &g->nodes[nodes[m]];
    char ops[16][40];
    const char *a[16];
    if (n->n_in > 16) return ew_fail(c, n, "more than 16 inputs in an element-wise op");
    int nin = n->n_in;
    for (int k = 0; k < nin; k++) {
      int v = n->in[k];
      a[k] = NULL;
      if (v < 0) continue;
      int found = -1;
      for (int e = 0; e < n_ext; e++)
        if (ext[e] == v) found = e;
      if (found >= 0) snprintf(ops[k], sizeof ops[k], "a%d", found);
      else snprintf(ops[k], sizeof ops[k], "r%d", g->values[v].producer); /* produced by a member */
      a[k] = ops[k];
    }
    int rc = cg_eltwise_node_expr(c, n, a, nin);
    if (rc < 0) return -1;
    ew(c, "    const %s r%d = %c%d;\n", cg_ctype(ir_out(g, n, 0)->dtype), nodes[m], rc ? 'u' : 't', nodes[m]);
    snprintf(res, res_len, "r%d", nodes[m]);
  }
  return 0;
}
