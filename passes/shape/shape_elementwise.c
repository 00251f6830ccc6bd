/* passes/shape/shape_elementwise.c - element-wise ops: unary, binary and compare with
 * multidirectional broadcasting, variadic Max/Min/Sum/Mean, Where, Cast, CastLike, BitCast.
 * FLOPs: one per output element (variadic: one per input pair). */
#include <string.h>

#include "passes/shape/shape_impl.h"

/* Accepted input types of a unary op (ONNX operator docs, latest version <= 21). */
static unsigned unary_types(ir_op op) {
  switch (op) {
    case IR_OP_Identity: return SH_ALL;
    case IR_OP_Not: return SH_BIT(IR_BOOL);
    case IR_OP_BitwiseNot: return SH_INTS;
    case IR_OP_Abs:
    case IR_OP_Neg:
    case IR_OP_Sign:
    case IR_OP_Relu:
    case IR_OP_Erf:
    case IR_OP_Shrink:
    case IR_OP_Clip:
    case IR_OP_IsNaN:
    case IR_OP_IsInf: return SH_NUM;
    default: return SH_FLOATS;
  }
}

/* Unary element-wise (Abs-13, Relu-14, Sigmoid-13, Gelu-20, IsNaN-20, IsInf-20, Not-1,
 * BitwiseNot-18, Identity-21, ...): output has the input's shape; IsNaN/IsInf give bool.
 * Clip-13: min/max are attributes before opset 11, optional scalar inputs since. */
int sh_unary(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  if (sh_check_dtype(g, node, x, unary_types(n->op), "input")) return -1;
  if (n->op == IR_OP_Clip) {
    static const char *nm[] = {"", "min", "max"};
    for (int k = 1; k < n->n_in; k++) {
      ir_value *b = sh_in(g, node, k);
      if (!b) continue;
      char s[256];
      if (ir_shape_numel(&b->shape) != 1 || b->shape.rank > 1)
        SH_FAIL("input '%s' must be a scalar, it has shape %s", nm[k], sh_str(&b->shape, s, sizeof s));
      if (sh_same_dtype(g, node, x, b, "input", nm[k])) return -1;
    }
  }
  ir_dtype dt = ir_op_table[n->op].kind == IR_K_UNARY_BOOL ? IR_BOOL : x->dtype;
  n->flops = n->op == IR_OP_Identity ? 0 : sh_numel(&x->shape);
  return sh_set_out(g, node, 0, dt, &x->shape);
}

/* Binary element-wise with multidirectional broadcasting (Add-14, Sub-14, Mul-14,
 * Div-14, Pow-15, Mod-28 (floats with fmod=0 too), BitShift-28 (signed too), BitwiseAnd/Or/Xor-18, And/Or/Xor-7,
 * Equal-19, Less-13, LessOrEqual-16, Greater-13, GreaterOrEqual-16) and PRelu-16
 * (slope broadcast unidirectionally to X). Pow's exponent may have another type;
 * comparisons give bool. */
int sh_binary(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *a = sh_in(g, node, 0), *b = sh_in(g, node, 1);
  unsigned types = SH_NUM;
  switch (n->op) {
    case IR_OP_And:
    case IR_OP_Or:
    case IR_OP_Xor: types = SH_BIT(IR_BOOL); break;
    case IR_OP_BitShift: types = SH_INTS; break; /* signed since BitShift-28 */
    case IR_OP_BitwiseAnd:
    case IR_OP_BitwiseOr:
    case IR_OP_BitwiseXor: types = SH_INTS; break;
    case IR_OP_Equal: types = SH_ALL; break;
    default: break;
  }
  if (sh_check_dtype(g, node, a, types, "input A")) return -1;
  if (n->op == IR_OP_Pow) {
    if (sh_check_dtype(g, node, b, SH_NUM, "input B")) return -1;
  } else if (sh_same_dtype(g, node, a, b, "input A", "input B")) {
    return -1;
  }
  ir_shape out;
  if (n->op == IR_OP_PRelu) {
    if (sh_unibroadcast(g, node, &a->shape, &b->shape, "X", "slope")) return -1;
    out = a->shape;
  } else if (sh_broadcast(g, node, &a->shape, &b->shape, &out, "A", "B")) {
    return -1;
  }
  ir_dtype dt = ir_op_table[n->op].kind == IR_K_COMPARE ? IR_BOOL : a->dtype;
  n->flops = sh_numel(&out);
  return sh_set_out(g, node, 0, dt, &out);
}

/* Max-13, Min-13, Sum-13, Mean-13: N inputs of one type, broadcast together. */
int sh_variadic(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *a = sh_in(g, node, 0);
  if (!a) SH_FAIL("input 0 is empty");
  if (sh_check_dtype(g, node, a, SH_NUM, "input 0")) return -1;
  ir_shape out = a->shape;
  int cnt = 1;
  for (int k = 1; k < n->n_in; k++) {
    ir_value *b = sh_in(g, node, k);
    if (!b) SH_FAIL("input %d is empty", k);
    char an[32], bn[32];
    snprintf(an, sizeof an, "input 0");
    snprintf(bn, sizeof bn, "input %d", k);
    if (sh_same_dtype(g, node, a, b, an, bn)) return -1;
    ir_shape o2;
    if (sh_broadcast(g, node, &out, &b->shape, &o2, "the inputs before it", bn)) return -1;
    out = o2;
    cnt++;
  }
  n->flops = sh_numel(&out) * (cnt - 1 + (n->op == IR_OP_Mean));
  return sh_set_out(g, node, 0, a->dtype, &out);
}

/* Where-16: condition (bool), X, Y broadcast together; output has X's type. */
int sh_Where(ir_graph *g, int node) {
  ir_value *c = sh_in(g, node, 0), *x = sh_in(g, node, 1), *y = sh_in(g, node, 2);
  if (sh_check_dtype(g, node, c, SH_BIT(IR_BOOL), "input 'condition'")) return -1;
  if (sh_check_dtype(g, node, x, SH_ALL, "input X") || sh_same_dtype(g, node, x, y, "input X", "input Y")) return -1;
  ir_shape t, out;
  if (sh_broadcast(g, node, &c->shape, &x->shape, &t, "condition", "X")) return -1;
  if (sh_broadcast(g, node, &t, &y->shape, &out, "condition and X", "Y")) return -1;
  SH_NODE->flops = sh_numel(&out);
  return sh_set_out(g, node, 0, x->dtype, &out);
}

static int cast_target(ir_graph *g, int node, int64_t to) {
  if (to <= IR_UNDEFINED || to >= IR_DTYPE_COUNT)
    SH_FAIL("attribute 'to' is %lld, not a valid data type", (long long)to);
  if (to == IR_STRING || to == IR_COMPLEX64 || to == IR_COMPLEX128)
    SH_FAIL("cast to %s is not supported", ir_dtype_name((ir_dtype)to));
  return 0;
}

/* Cast-21 (same shape rule since Cast-6): dtype from attribute 'to'. */
int sh_Cast(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  const ir_attr *a = ir_attr_find(SH_NODE, "to");
  if (!a || a->type != IR_ATTR_INT) SH_FAIL("attribute 'to' is required");
  if (cast_target(g, node, a->i)) return -1;
  SH_NODE->flops = sh_numel(&x->shape);
  return sh_set_out(g, node, 0, (ir_dtype)a->i, &x->shape);
}

/* BitCast-26: the same bytes read as the type 'to', of the same width (4-bit types, held
 * one value per byte, are refused); same shape. */
int sh_BitCast(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  const ir_attr *a = ir_attr_find(SH_NODE, "to");
  if (!a || a->type != IR_ATTR_INT) SH_FAIL("attribute 'to' is required");
  if (a->i >= IR_DTYPE_COUNT && a->i >= 23 && a->i <= 28)
    SH_FAIL("bitcast to %s (data type %lld) is not supported", ir_unheld_dtype_name(a->i), (long long)a->i);
  if (a->i <= IR_UNDEFINED || a->i >= IR_DTYPE_COUNT)
    SH_FAIL("attribute 'to' is %lld, not a valid data type", (long long)a->i);
  ir_dtype to = (ir_dtype)a->i;
  if (to == IR_STRING || x->dtype == IR_STRING) SH_FAIL("bitcast of strings is not defined");
  if (to == IR_UINT4 || to == IR_INT4 || x->dtype == IR_UINT4 || x->dtype == IR_INT4)
    SH_FAIL("bitcast between %s and %s is not supported (4-bit types)", ir_dtype_name(x->dtype), ir_dtype_name(to));
  if (ir_dtype_size(to) != ir_dtype_size(x->dtype))
    SH_FAIL("bitcast from %s to %s: the widths differ", ir_dtype_name(x->dtype), ir_dtype_name(to));
  return sh_set_out(g, node, 0, to, &x->shape);
}

/* CastLike-21: dtype of input 'target_type'. */
int sh_CastLike(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0), *t = sh_in(g, node, 1);
  if (cast_target(g, node, t->dtype)) return -1;
  SH_NODE->flops = sh_numel(&x->shape);
  return sh_set_out(g, node, 0, t->dtype, &x->shape);
}
