/* passes/shape/shape_reduce.c - reductions (Reduce*, ArgMax, ArgMin) and the axis-wise
 * normalisations Softmax, LogSoftmax, Hardmax. */
#include <string.h>

#include "passes/shape/shape_impl.h"

/* Reduce over `mask` axes of in; keepdims keeps them as 1. */
static void reduce_shape(const ir_shape *in, unsigned mask, int keepdims, ir_shape *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < in->rank; i++) {
    if (!(mask & (1u << i))) out->dims[out->rank++] = in->dims[i];
    else if (keepdims) out->dims[out->rank++] = 1;
  }
}

/* ArgMax-13 / ArgMin-13: one axis (attribute, default 0), keepdims, int64 output. */
static int sh_arg(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  if (sh_check_dtype(g, node, x, SH_NUM, "input 'data'")) return -1;
  int ax;
  if (x->shape.rank < 1) SH_FAIL("input 'data' must have rank >= 1");
  if (sh_axis(g, node, ir_attr_int(SH_NODE, "axis", 0), x->shape.rank, "axis", &ax)) return -1;
  ir_shape out;
  reduce_shape(&x->shape, 1u << ax, ir_attr_int(SH_NODE, "keepdims", 1) != 0, &out);
  SH_NODE->flops = sh_numel(&x->shape);
  return sh_set_out(g, node, 0, IR_INT64, &out);
}

/* ReduceSum-13 and the other Reduce*-18: axes come from input 1 (ReduceSum since 13,
 * the others since 18) or from attribute 'axes' before; keepdims (default 1);
 * noop_with_empty_axes (with the axes input): no axes means identity instead of
 * reducing everything. */
int sh_reduce(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  if (n->op == IR_OP_ArgMax || n->op == IR_OP_ArgMin) return sh_arg(g, node);
  ir_value *x = sh_in(g, node, 0);
  unsigned types = SH_NUM;
  if (n->op == IR_OP_ReduceMax || n->op == IR_OP_ReduceMin) types |= SH_BIT(IR_BOOL);
  if (sh_check_dtype(g, node, x, types, "input 'data'")) return -1;
  int axes_input = n->op == IR_OP_ReduceSum ? n->opset >= 13 : n->opset >= 18;
  int64_t axes[64];
  int na = -1;
  if (axes_input) {
    if (n->n_in > 1 && n->in[1] >= 0) {
      if (sh_const_ints(g, node, 1, "axes", axes, 64, &na)) return -1;
    }
  } else {
    if (n->n_in > 1 && n->in[1] >= 0)
      SH_FAIL("takes 'axes' as an attribute before opset %d, not as an input", n->op == IR_OP_ReduceSum ? 13 : 18);
    na = sh_attr_ints(g, node, "axes", axes, 64);
    if (na == -2) return -1;
  }
  unsigned mask = 0;
  if (na <= 0) {
    if (axes_input && ir_attr_int(n, "noop_with_empty_axes", 0)) {
      n->flops = 0;
      return sh_set_out(g, node, 0, x->dtype, &x->shape);
    }
    mask = x->shape.rank ? (1u << x->shape.rank) - 1 : 0;
  } else {
    int ax[64];
    if (sh_axes(g, node, axes, na, x->shape.rank, "axes", ax)) return -1;
    for (int i = 0; i < na; i++) mask |= 1u << ax[i];
  }
  ir_shape out;
  reduce_shape(&x->shape, mask, ir_attr_int(n, "keepdims", 1) != 0, &out);
  double per = (n->op == IR_OP_ReduceL2 || n->op == IR_OP_ReduceSumSquare || n->op == IR_OP_ReduceLogSumExp) ? 2 : 1;
  n->flops = per * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Softmax-13 / LogSoftmax-13 / Hardmax-13 (axis default -1) and their opset 1-12
 * versions (axis default 1, input coerced to 2-D there): the output has the
 * input's shape either way; only the axis is checked. */
static int sh_softmax_like(ir_graph *g, int node, double per) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input")) return -1;
  int ax;
  int64_t dflt = n->opset >= 13 ? -1 : 1;
  int r = x->shape.rank;
  if (n->opset < 13 && r == 0) SH_FAIL("input must have rank >= 1");
  if (n->opset >= 13 || r > 0) {
    /* opset < 13 accepts axis == rank too (coerce to [N, 1]) */
    int64_t a = ir_attr_int(n, "axis", dflt);
    if (!(n->opset < 13 && a == r) && sh_axis(g, node, a, r ? r : 1, "axis", &ax)) return -1;
  }
  n->flops = per * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

int sh_Softmax(ir_graph *g, int node) { return sh_softmax_like(g, node, 5); }
int sh_LogSoftmax(ir_graph *g, int node) { return sh_softmax_like(g, node, 5); }
int sh_Hardmax(ir_graph *g, int node) { return sh_softmax_like(g, node, 1); }
