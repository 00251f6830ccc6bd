/* passes/shape/shape_generate.c - ops whose output shape comes from metadata or constant
 * values: Shape, Size, ConstantOfShape, Range, OneHot. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "passes/shape/shape_impl.h"

/* Shape-21 (start/end since 15, clamped to [0, rank]): int64 [end - start]. */
int sh_Shape(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  int64_t r = x->shape.rank, s = ir_attr_int(SH_NODE, "start", 0), e = ir_attr_int(SH_NODE, "end", r);
  if (SH_NODE->opset < 15) s = 0, e = r;
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = s < 0 ? 0 : s > r ? r : s;
  e = e < 0 ? 0 : e > r ? r : e;
  ir_shape out = {0};
  out.rank = 1;
  out.dims[0] = e > s ? e - s : 0;
  return sh_set_out(g, node, 0, IR_INT64, &out);
}

/* Size-21: int64 scalar. */
int sh_Size(ir_graph *g, int node) {
  ir_shape out = {0};
  return sh_set_out(g, node, 0, IR_INT64, &out);
}

/* ConstantOfShape-21 (since 9): shape from the constant int64 input; dtype from the
 * one-element tensor attribute 'value' (default float32). */
int sh_ConstantOfShape(ir_graph *g, int node) {
  ir_value *in = sh_in(g, node, 0);
  int64_t s[64];
  int n;
  if (sh_check_dtype(g, node, in, SH_BIT(IR_INT64), "input")) return -1;
  if (sh_const_ints(g, node, 0, "input", s, 64, &n)) return -1;
  if (in->shape.rank != 1) SH_FAIL("input must be 1-D");
  if (n > IR_MAX_RANK) SH_FAIL("input has %d dims, pipecc supports rank up to %d", n, IR_MAX_RANK);
  ir_dtype dt = IR_FLOAT;
  const ir_attr *a = ir_attr_find(SH_NODE, "value");
  if (a) {
    if (a->type != IR_ATTR_TENSOR || a->tensor < 0 || a->tensor >= g->n_values ||
        g->values[a->tensor].kind != IR_VAL_CONST)
      SH_FAIL("attribute 'value' must be a tensor");
    const ir_value *t = &g->values[a->tensor];
    if (ir_shape_numel(&t->shape) != 1) SH_FAIL("attribute 'value' must hold exactly one element");
    dt = t->dtype;
  }
  ir_shape out = {0};
  out.rank = n;
  for (int i = 0; i < n; i++) {
    if (s[i] < 0) SH_FAIL("input has negative dim %" PRId64, s[i]);
    out.dims[i] = s[i];
  }
  return sh_set_out(g, node, 0, dt, &out);
}

/* Range-11: start, limit, delta are constant scalars of one type;
 * count = max(ceil((limit - start) / delta), 0). */
int sh_Range(ir_graph *g, int node) {
  static const char *nm[] = {"start", "limit", "delta"};
  ir_value *v[3];
  char b[256];
  for (int i = 0; i < 3; i++) {
    v[i] = sh_in(g, node, i);
    if (sh_check_dtype(g, node, v[i], SH_FLOATS | SH_SINTS, nm[i])) return -1;
    if (i && sh_same_dtype(g, node, v[0], v[i], nm[0], nm[i])) return -1;
    if (v[i]->shape.rank > 1 || ir_shape_numel(&v[i]->shape) != 1)
      SH_FAIL("input '%s' must be a scalar, it has shape %s", nm[i], sh_str(&v[i]->shape, b, sizeof b));
    if (v[i]->kind != IR_VAL_CONST) {
      char vn[96];
      SH_FAIL("input '%s' (value '%s') must be a constant for a static shape", nm[i], sh_vname(v[i], vn, sizeof vn));
    }
  }
  int64_t cnt;
  if (SH_BIT(v[0]->dtype) & SH_SINTS) {
    int64_t s, l, d;
    if (ir_const_i64(v[0], 0, &s) || ir_const_i64(v[1], 0, &l) || ir_const_i64(v[2], 0, &d))
      SH_FAIL("cannot read the inputs");
    if (d == 0) SH_FAIL("input 'delta' is 0");
    __int128 span = (__int128)l - s;
    __int128 c = d > 0 ? (span + d - 1) / d : (span + d + 1) / d;
    if (span == 0 || (span > 0) != (d > 0)) c = 0;
    if (c > INT64_MAX) SH_FAIL("the output length overflows");
    cnt = (int64_t)c;
  } else {
    double s, l, d;
    if (ir_const_f64(v[0], 0, &s) || ir_const_f64(v[1], 0, &l) || ir_const_f64(v[2], 0, &d))
      SH_FAIL("cannot read the inputs");
    if (d == 0 || !isfinite(s) || !isfinite(l) || !isfinite(d)) SH_FAIL("inputs must be finite and 'delta' non-zero");
    double c = ceil((l - s) / d);
    if (c >= 9.2e18) SH_FAIL("the output length overflows");
    cnt = c > 0 ? (int64_t)c : 0;
  }
  ir_shape out = {0};
  out.rank = 1;
  out.dims[0] = cnt;
  SH_NODE->flops = (double)cnt;
  return sh_set_out(g, node, 0, v[0]->dtype, &out);
}

/* OneHot-11: indices shape with 'depth' (a constant scalar) inserted at axis
 * (default -1, range [-r-1, r]); dtype of 'values' (2 elements). */
int sh_OneHot(ir_graph *g, int node) {
  ir_value *idx = sh_in(g, node, 0), *dep = sh_in(g, node, 1), *val = sh_in(g, node, 2);
  char b[256];
  if (sh_check_dtype(g, node, idx, SH_NUM, "input 'indices'") || sh_check_dtype(g, node, dep, SH_NUM, "input 'depth'"))
    return -1;
  if (dep->shape.rank > 1 || ir_shape_numel(&dep->shape) != 1)
    SH_FAIL("input 'depth' must be a scalar, it has shape %s", sh_str(&dep->shape, b, sizeof b));
  if (val->shape.rank != 1 || val->shape.dims[0] != 2)
    SH_FAIL("input 'values' must have shape [2], it has %s", sh_str(&val->shape, b, sizeof b));
  if (dep->kind != IR_VAL_CONST) {
    char vn[96];
    SH_FAIL("input 'depth' (value '%s') must be a constant for a static shape", sh_vname(dep, vn, sizeof vn));
  }
  double d;
  if (ir_const_f64(dep, 0, &d)) SH_FAIL("cannot read input 'depth'");
  if (!(d >= 1) || d > 9e18) SH_FAIL("input 'depth' is %g, it must be >= 1", d);
  int r = idx->shape.rank + 1, ax;
  if (r > IR_MAX_RANK) SH_FAIL("the output would have rank %d, pipecc supports rank up to %d", r, IR_MAX_RANK);
  if (sh_axis(g, node, ir_attr_int(SH_NODE, "axis", -1), r, "axis", &ax)) return -1;
  ir_shape out = {0};
  for (int i = 0, k = 0; i < r; i++) out.dims[out.rank++] = i == ax ? (int64_t)d : idx->shape.dims[k++];
  SH_NODE->flops = 0;
  return sh_set_out(g, node, 0, val->dtype, &out);
}
