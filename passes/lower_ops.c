/* passes/lower_ops.c - ops that are other ops: their shape rules and their lowering
 * (pass_lower_ops), after shape inference, so that no target needs a kernel and
 * autodiff needs no rule of their own.
 *
 *   GroupNormalization-18/21(X, scale, bias): X [N, C, ...] as [N, G, C/G * ...], each
 *     group normalised (mean, then the mean of the squared deviations; epsilon added to
 *     the variance), back to X's shape, then scale and bias per channel (21: [C]) or per
 *     group (18: [G]).
 *   MeanVarianceNormalization-13(X): (X - mean) / (sqrt(mean(X^2) - mean^2) + 1e-9) over
 *     `axes` (default [0, 2, 3]), as the ONNX function body computes it.
 *   EyeLike(x): a constant of x's shape, ones on diagonal k, of type `dtype` (default
 *     x's). */
#include <stdlib.h>
#include <string.h>

#include "passes/autodiff_impl.h"
#include "passes/pass.h"
#include "passes/shape_impl.h"

int sh_GroupNormalization(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  int64_t G = ir_attr_int(SH_NODE, "num_groups", 0);
  char b[64];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X")) return -1;
  if (x->shape.rank < 2) SH_FAIL("input X of shape %s: [N, C, ...] expected", sh_str(&x->shape, b, sizeof b));
  int64_t C = x->shape.dims[1], want = SH_NODE->opset >= 21 ? C : G;
  if (G < 1 || C % G) SH_FAIL("num_groups %lld does not divide the %lld channels", (long long)G, (long long)C);
  for (int i = 1; i < 3; i++) {
    const ir_value *v = sh_in(g, node, i);
    if (sh_same_dtype(g, node, x, v, "input X", i == 1 ? "scale" : "bias")) return -1;
    if (v->shape.rank != 1 || v->shape.dims[0] != want)
      SH_FAIL("%s of shape %s: [%lld] expected (%s, opset %d)", i == 1 ? "scale" : "bias",
              sh_str(&v->shape, b, sizeof b), (long long)want, SH_NODE->opset >= 21 ? "per channel" : "per group",
              SH_NODE->opset);
  }
  SH_NODE->flops = 8 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* MVN's axes: the attribute, else [0, 2, 3]; normalised into ax, count returned (-1
 * after reporting). */
static int mvn_axes(ir_graph *g, int node, int64_t *ax) {
  const ir_value *x = sh_in(g, node, 0);
  int n = sh_attr_ints(g, node, "axes", ax, IR_MAX_RANK);
  if (n == -2) return -1;
  if (n < 0) {
    n = 3;
    ax[0] = 0, ax[1] = 2, ax[2] = 3;
  }
  for (int i = 0; i < n; i++) {
    int a;
    if (sh_axis(g, node, ax[i], x->shape.rank, "axes", &a)) return -1;
    ax[i] = a;
  }
  return n;
}

int sh_MeanVarianceNormalization(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  int64_t ax[IR_MAX_RANK];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || mvn_axes(g, node, ax) < 0) return -1;
  SH_NODE->flops = 6 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

int sh_EyeLike(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  int64_t dt = ir_attr_int(SH_NODE, "dtype", x->dtype);
  char b[64];
  if (x->shape.rank != 2) SH_FAIL("input of shape %s: 2-D expected", sh_str(&x->shape, b, sizeof b));
  if (dt <= IR_UNDEFINED || dt >= IR_DTYPE_COUNT || !(SH_BIT(dt) & (SH_NUM | SH_BIT(IR_BOOL))))
    SH_FAIL("attribute 'dtype' is %lld, not a number type", (long long)dt);
  return sh_set_out(g, node, 0, (ir_dtype)dt, &x->shape);
}

/* ---- lowering ----------------------------------------------------------------------- */

/* mean of x over axes (kept) */
static int mean(ad_ctx *a, int x, const int64_t *axes, int n) { return ad_reduce(a, IR_OP_ReduceMean, x, axes, n, 1); }

static int lower_groupnorm(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  ir_shape xs = ad_shape(a, nd.in[0]), gs;
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT; /* float16: in float */
  int64_t G = ir_attr_int(&nd, "num_groups", 1), two = 2;
  memset(&gs, 0, sizeof gs);
  gs.rank = 3;
  gs.dims[0] = xs.dims[0];
  gs.dims[1] = G;
  gs.dims[2] = ir_shape_numel(&xs) / (xs.dims[0] ? xs.dims[0] : 1) / G;
  int xr = ad_reshape(a, ad_cast(a, nd.in[0], t), &gs);
  int d = ad_bin(a, IR_OP_Sub, xr, mean(a, xr, &two, 1));
  int var = mean(a, ad_bin(a, IR_OP_Mul, d, d), &two, 1);
  int y = ad_bin(a, IR_OP_Div, d, ad_un(a, IR_OP_Sqrt, ad_bin(a, IR_OP_Add, var, ad_c_f(a, ir_attr_float(&nd, "epsilon", 1e-5f), t))));
  int per_channel = nd.opset >= 21, lr = per_channel ? xs.rank - 1 : 2; /* scale, bias: [C or G, 1, ...] */
  if (per_channel) y = ad_reshape(a, y, &xs);
  int sc = ad_lead(a, ad_cast(a, nd.in[1], t), lr), bi = ad_lead(a, ad_cast(a, nd.in[2], t), lr);
  y = ad_bin(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, y, sc), bi);
  if (!per_channel) y = ad_reshape(a, y, &xs);
  y = ad_cast(a, y, xt);
  if (a->err) return -1;
  ir_take_output(g, y, nd.out[0]);
  return 0;
}

static int lower_mvn(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int64_t ax[IR_MAX_RANK];
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT; /* float16: in float */
  int n = mvn_axes(g, node, ax), x = ad_cast(a, nd.in[0], t);
  if (n < 0) return -1;
  int m = mean(a, x, ax, n);
  int var = ad_bin(a, IR_OP_Sub, mean(a, ad_bin(a, IR_OP_Mul, x, x), ax, n), ad_bin(a, IR_OP_Mul, m, m));
  int sd = ad_bin(a, IR_OP_Add, ad_un(a, IR_OP_Sqrt, var), ad_c_f(a, 1e-9, t));
  int y = ad_cast(a, ad_bin(a, IR_OP_Div, ad_bin(a, IR_OP_Sub, x, m), sd), xt);
  if (a->err) return -1;
  ir_take_output(g, y, nd.out[0]);
  return 0;
}

static int lower_eyelike(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  const ir_value *y = &g->values[nd.out[0]];
  ir_shape s = y->shape;
  int64_t k = ir_attr_int(&nd, "k", 0), R = s.dims[0], C = s.dims[1], n = R * C;
  size_t es = ir_dtype_size(y->dtype);
  unsigned char one[8] = {0};
  float f1 = 1;
  double d1 = 1;
  if (y->dtype == IR_FLOAT) memcpy(one, &f1, sizeof f1);
  else if (y->dtype == IR_DOUBLE) memcpy(one, &d1, sizeof d1);
  else if (y->dtype == IR_FLOAT16) one[1] = 0x3c; /* little-endian 0x3c00 */
  else if (y->dtype == IR_BFLOAT16) one[1] = 0x3f, one[0] = 0x80;
  else one[0] = 1; /* integers and bool, little-endian */
  unsigned char *data = calloc((size_t)(n > 0 ? n : 1), es);
  for (int64_t i = 0; i < R; i++)
    if (i + k >= 0 && i + k < C) memcpy(data + (size_t)(i * C + i + k) * es, one, es);
  int c = ir_add_const(g, ir_sprintf(g->arena, "%s/eye", a->base), y->dtype, &s, data, es * (size_t)n);
  free(data);
  ir_take_output(g, ad_un(a, IR_OP_Identity, c), nd.out[0]);
  return a->err ? -1 : 0;
}

static int lower(ad_ctx *a, int node) {
  switch (a->g->nodes[node].op) {
    case IR_OP_GroupNormalization: return lower_groupnorm(a, node);
    case IR_OP_MeanVarianceNormalization: return lower_mvn(a, node);
    default: return lower_eyelike(a, node);
  }
}

static int is_lowered(const ir_node *n) {
  return n->op == IR_OP_GroupNormalization || n->op == IR_OP_MeanVarianceNormalization || n->op == IR_OP_EyeLike;
}

int pass_lower_ops(ir_graph *g, const pass_opts *o) {
  (void)o;
  return ad_lower_nodes(g, "lower", is_lowered, lower) < 0 ? -1 : 0;
}

int sh_CenterCropPad(ir_graph *g, int node) { SH_FAIL("CenterCropPad is not implemented yet"); }
int sh_MaxUnpool(ir_graph *g, int node) { SH_FAIL("MaxUnpool is not implemented yet"); }
int sh_ReverseSequence(ir_graph *g, int node) { SH_FAIL("ReverseSequence is not implemented yet"); }
int sh_Col2Im(ir_graph *g, int node) { SH_FAIL("Col2Im is not implemented yet"); }
int sh_Compress(ir_graph *g, int node) { SH_FAIL("Compress is not implemented yet"); }
int sh_AffineGrid(ir_graph *g, int node) { SH_FAIL("AffineGrid is not implemented yet"); }
