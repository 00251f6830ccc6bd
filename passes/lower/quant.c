/* passes/lower/quant.c - QuantizeLinear and DequantizeLinear: their shape rules and their
 * lowering to Cast, Sub, Mul, Div, Round, Add and Clip (pass_lower_quant), as the ONNX
 * reference computes them, so no target needs a kernel of its own.
 *
 *   DequantizeLinear(x, scale, zp): y = (float(x) - float(zp)) * scale in float32, then
 *     a Cast to scale's type (float16/bfloat16: one rounding).
 *   QuantizeLinear(x, scale, zp): y = clip(round_half_even(x / scale) + zp) as the output
 *     type (zp's, else output_dtype, else uint8); x / scale in x's type. To float8: a
 *     Cast of x / scale with the node's saturate (zp is 0).
 *
 * scale and zp are scalars (or one element), per-axis (1-D along `axis`, reshaped to
 * broadcast) or, opset 21, blocked (x's rank, `block_size` elements of x per element
 * along `axis`: a Gather repeats them). Opsets 10 (per tensor), 13 (axis), 19 and 21.
 *
 *   MatMulInteger(a, b, a_zp, b_zp): int32 (a - a_zp) @ (b - b_zp), a_zp per row of a
 *     or scalar, b_zp per column of b or scalar; computed in float64 (exact).
 *   QLinearMatMul(a, as, azp, b, bs, bzp, ys, yzp): that product times as * bs / ys (in
 *     the scales' type), plus yzp, in float64 (exact: as the reference's int32 * float
 *     promotes), rounded half to even, saturated to yzp's type.
 *   ConvInteger(x, w, x_zp, w_zp), QLinearConv(x, xs, xzp, w, ws, wzp, ys, yzp, B): the
 *     same with a float64 Conv (zero points subtracted first, so padding is the zero
 *     point; w_zp, ws per output channel or scalar; B int32 per output channel).
 *   DynamicQuantizeLinear(x): uint8 y, float scale = (max(x, 0) - min(x, 0)) / 255 (1
 *     when both are 0), zp = round(clip(-min / scale, 0, 255)). */
#include <stdlib.h>
#include <string.h>

#include "passes/rewrite.h"
#include "passes/pass.h"
#include "passes/shape/shape_impl.h"

#define Q_FLOATS (SH_BIT(IR_FLOAT) | SH_BIT(IR_FLOAT16) | SH_BIT(IR_BFLOAT16))

static int quant_int(ir_dtype t) {
  return t == IR_INT8 || t == IR_UINT8 || t == IR_INT16 || t == IR_UINT16 || ir_dtype_small_int(t, NULL, NULL);
}
/* the float8 types (but float8e8m0, a scale type), float4e2m1 and the float6 types:
 * quantized by a Cast of x / scale (saturating for float8) */
static int quant_f8(ir_dtype t) { return ir_dtype_narrow(t) && ir_dtype_size(t) == 1 && t != IR_FLOAT8E8M0; }

/* The layout of scale (and zp) against x: 0 ok (*axis normalised), -1 after reporting. */
static int check_scale(ir_graph *g, int node, const char *what, int *axis) {
  const ir_value *x = sh_in(g, node, 0), *s = sh_in(g, node, 1);
  int r = x->shape.rank;
  int64_t ax = ir_attr_int(SH_NODE, "axis", 1), bs = ir_attr_int(SH_NODE, "block_size", 0);
  int64_t n = (int64_t)sh_numel(&s->shape);
  char b1[64], b2[64];
  if (s->shape.rank == 0 || (n == 1 && !bs)) return *axis = 0, 0;
  if (ax < -r || ax >= r) SH_FAIL("axis %lld is out of range for %s of rank %d", (long long)ax, what, r);
  *axis = (int)(ax < 0 ? ax + r : ax);
  if (!bs) {
    if (s->shape.rank != 1 || s->shape.dims[0] != x->shape.dims[*axis])
      SH_FAIL("scale of shape %s must be a scalar or 1-D of %s's dim %d (%lld)", sh_str(&s->shape, b1, sizeof b1), what,
              *axis, (long long)x->shape.dims[*axis]);
    return 0;
  }
  if (bs < 0) SH_FAIL("block_size %lld must be positive", (long long)bs);
  int ok = s->shape.rank == r;
  for (int d = 0; ok && d < r; d++)
    ok = d == *axis ? s->shape.dims[d] == (x->shape.dims[d] + bs - 1) / bs : s->shape.dims[d] == x->shape.dims[d];
  if (!ok)
    SH_FAIL("scale of shape %s does not block %s of shape %s by %lld along axis %d", sh_str(&s->shape, b1, sizeof b1),
            what, sh_str(&x->shape, b2, sizeof b2), (long long)bs, *axis);
  return 0;
}

static int check_zp(ir_graph *g, int node, ir_dtype want) {
  const ir_value *s = sh_in(g, node, 1), *z = sh_in(g, node, 2);
  char b1[64], b2[64];
  if (!z) return 0;
  if (z->dtype != want) SH_FAIL("zero point of type %s; %s expected", ir_dtype_name(z->dtype), ir_dtype_name(want));
  if (sh_numel(&z->shape) != sh_numel(&s->shape) || (sh_numel(&s->shape) > 1 && z->shape.rank != s->shape.rank))
    SH_FAIL("zero point of shape %s, scale of shape %s", sh_str(&z->shape, b1, sizeof b1),
            sh_str(&s->shape, b2, sizeof b2));
  return 0;
}

int sh_DequantizeLinear(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0), *s = sh_in(g, node, 1);
  int axis;
  if (!quant_int(x->dtype) && x->dtype != IR_INT32 && !quant_f8(x->dtype))
    SH_FAIL("x of type %s is not supported (int8, uint8, int16, uint16, int4, uint4, int2, uint2, int32, float8, float4, float6)", ir_dtype_name(x->dtype));
  if (sh_check_dtype(g, node, s, Q_FLOATS, "scale") || check_scale(g, node, "x", &axis) || check_zp(g, node, x->dtype))
    return -1;
  SH_NODE->flops = 2 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, s->dtype, &x->shape);
}

/* QuantizeLinear's output type: zp's, else output_dtype (21), else uint8. */
static ir_dtype q_type(ir_graph *g, int node) {
  const ir_value *z = sh_in(g, node, 2);
  int64_t od = ir_attr_int(SH_NODE, "output_dtype", 0);
  return z ? z->dtype : od ? (ir_dtype)od : IR_UINT8;
}

int sh_QuantizeLinear(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0), *s = sh_in(g, node, 1), *z = sh_in(g, node, 2);
  int axis;
  ir_dtype t = q_type(g, node);
  int64_t od = ir_attr_int(SH_NODE, "output_dtype", 0);
  if (z && od && od != z->dtype)
    SH_FAIL("output_dtype %lld and the zero point's type %s disagree", (long long)od, ir_dtype_name(z->dtype));
  if (!quant_int(t) && !quant_f8(t))
    SH_FAIL("quantizing to %s is not supported (int8, uint8, int16, uint16, int4, uint4, int2, uint2, float8, "
            "float4e2m1, float6)",
            t > IR_UNDEFINED && t < IR_DTYPE_COUNT ? ir_dtype_name(t) : "an unknown type");
  if (sh_check_dtype(g, node, x, Q_FLOATS, "x") || sh_check_dtype(g, node, s, Q_FLOATS, "scale") ||
      check_scale(g, node, "x", &axis) || check_zp(g, node, t))
    return -1;
  SH_NODE->flops = 4 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, t, &x->shape);
}

/* int8 / uint8 operand slot ia with an optional zero point in slot iz (per row, rows
 * = dim -2 of the operand, when rows_axis; else per column, or a scalar). */
static int check_q8(ir_graph *g, int node, int ia, int iz, const char *what) {
  const ir_value *a = sh_in(g, node, ia), *z = iz >= 0 ? sh_in(g, node, iz) : NULL;
  char b[64];
  if (a->dtype != IR_INT8 && a->dtype != IR_UINT8)
    SH_FAIL("%s of type %s: int8 or uint8 expected", what, ir_dtype_name(a->dtype));
  if (z && z->dtype != a->dtype)
    SH_FAIL("the zero point of %s has type %s, %s %s", what, ir_dtype_name(z->dtype), what, ir_dtype_name(a->dtype));
  if (z && z->shape.rank > 1)
    SH_FAIL("the zero point of %s has shape %s: a scalar or 1-D", what, sh_str(&z->shape, b, sizeof b));
  return 0;
}

int sh_MatMulInteger(ir_graph *g, int node) {
  ir_shape out;
  if (check_q8(g, node, 0, 2, "A") || check_q8(g, node, 1, 3, "B") ||
      sh_matmul_shape(g, node, sh_in(g, node, 0), sh_in(g, node, 1), &out, &SH_NODE->flops))
    return -1;
  return sh_set_out(g, node, 0, IR_INT32, &out);
}

int sh_QLinearMatMul(ir_graph *g, int node) {
  ir_shape out;
  const ir_value *yz = sh_in(g, node, 7);
  if (check_q8(g, node, 0, 2, "A") || check_q8(g, node, 3, 5, "B") || check_q8(g, node, 7, -1, "y_zero_point") ||
      sh_check_dtype(g, node, sh_in(g, node, 1), Q_FLOATS, "a_scale") ||
      sh_check_dtype(g, node, sh_in(g, node, 4), Q_FLOATS, "b_scale") ||
      sh_check_dtype(g, node, sh_in(g, node, 6), Q_FLOATS, "y_scale") ||
      sh_matmul_shape(g, node, sh_in(g, node, 0), sh_in(g, node, 3), &out, &SH_NODE->flops))
    return -1;
  return sh_set_out(g, node, 0, yz->dtype, &out);
}

int sh_ConvInteger(ir_graph *g, int node) {
  ir_shape out;
  if (check_q8(g, node, 0, 2, "X") || check_q8(g, node, 1, 3, "W") ||
      sh_conv_shape(g, node, sh_in(g, node, 0), sh_in(g, node, 1), -1, &out))
    return -1;
  return sh_set_out(g, node, 0, IR_INT32, &out);
}

int sh_QLinearConv(ir_graph *g, int node) {
  ir_shape out;
  const ir_value *yz = sh_in(g, node, 7), *bias = sh_in(g, node, 8), *w = sh_in(g, node, 3);
  char b[64];
  if (check_q8(g, node, 0, 2, "X") || check_q8(g, node, 3, 5, "W") || check_q8(g, node, 7, -1, "y_zero_point") ||
      sh_check_dtype(g, node, sh_in(g, node, 1), Q_FLOATS, "x_scale") ||
      sh_check_dtype(g, node, sh_in(g, node, 4), Q_FLOATS, "w_scale") ||
      sh_check_dtype(g, node, sh_in(g, node, 6), Q_FLOATS, "y_scale") ||
      sh_conv_shape(g, node, sh_in(g, node, 0), w, -1, &out))
    return -1;
  if (bias && (bias->dtype != IR_INT32 || bias->shape.rank != 1 || bias->shape.dims[0] != w->shape.dims[0]))
    SH_FAIL("bias B of type %s, shape %s: int32 [%lld] expected", ir_dtype_name(bias->dtype),
            sh_str(&bias->shape, b, sizeof b), (long long)w->shape.dims[0]);
  return sh_set_out(g, node, 0, yz->dtype, &out);
}

int sh_DynamicQuantizeLinear(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  ir_shape sc;
  memset(&sc, 0, sizeof sc);
  if (sh_check_dtype(g, node, x, SH_BIT(IR_FLOAT), "x")) return -1;
  SH_NODE->flops = 6 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, IR_UINT8, &x->shape) || sh_set_out(g, node, 1, IR_FLOAT, &sc) ||
         sh_set_out(g, node, 2, IR_UINT8, &sc);
}

/* ---- lowering ----------------------------------------------------------------------- */

/* scale or zp (v) shaped to broadcast against x: as is (scalar, one element), reshaped
 * (per axis) or repeated along the axis (blocked). */
static int layout(ad_ctx *a, int node, int v) {
  ir_graph *g = a->g;
  const ir_node *n = &g->nodes[node];
  ir_shape xs = ad_shape(a, n->in[0]), vs = ad_shape(a, v);
  int64_t bs = ir_attr_int(n, "block_size", 0), ax = ir_attr_int(n, "axis", 1);
  if (vs.rank == 0 || (ir_shape_numel(&vs) == 1 && !bs)) return v;
  int axis = (int)(ax < 0 ? ax + xs.rank : ax);
  if (!bs) return ad_lead(a, v, xs.rank - axis);
  int64_t D = xs.dims[axis];
  int64_t *idx = malloc(sizeof *idx * (size_t)(D ? D : 1));
  for (int64_t i = 0; i < D; i++) idx[i] = i / bs;
  int in[2] = {v, ad_c_i64(a, idx, (int)D)};
  free(idx);
  int gn = ad_begin(a, IR_OP_Gather, in, 2, 1, NULL);
  ad_attr_i(a, gn, "axis", axis);
  return ad_end(a, gn);
}

/* operand (slot ia) minus its zero point (slot iz, may be absent), in float64: the zero
 * point laid out by ad_lead(zrank): 2 for one per row (the operand's dim -2), 1 as given
 * (scalar, or per column).
 * float64 holds every int8 product and their sums exactly (below 2^53: K < 2^37), and
 * both targets have float64 GEMMs (the cuda target no integer one). */
static int centred(ad_ctx *a, const ir_node *nd, int ia, int iz, int zrank) {
  int v = ad_cast(a, nd->in[ia], IR_DOUBLE);
  if (iz >= nd->n_in || nd->in[iz] < 0) return v;
  return ad_bin(a, IR_OP_Sub, v, ad_lead(a, ad_cast(a, nd->in[iz], IR_DOUBLE), zrank));
}

static int clip_to(ad_ctx *a, int v, ir_dtype t, ir_dtype ft) {
  int slo, shi;
  int small = ir_dtype_small_int(t, &slo, &shi);
  double lo = small ? slo : t == IR_INT8 ? -128 : t == IR_INT16 ? -32768 : 0;
  double hi = small ? shi : t == IR_INT8 ? 127 : t == IR_UINT8 ? 255 : t == IR_INT16 ? 32767 : 65535;
  int in[3] = {v, ad_c_f(a, lo, ft), ad_c_f(a, hi, ft)};
  return ad_cast(a, ad_op(a, IR_OP_Clip, in, 3), t);
}

/* The float64 product p as the node's output: int32 (s < 0), or requantized: times the
 * scale s (x_scale * w_scale / y_scale in the scales' type), plus y_zero_point (slot 7),
 * rounded half to even and saturated to its type. */
static int finish(ad_ctx *a, const ir_node *nd, int p, int s) {
  if (s < 0) {
    p = ad_cast(a, p, IR_INT32);
  } else {
    int d = ad_bin(a, IR_OP_Mul, p, ad_cast(a, s, IR_DOUBLE));
    d = ad_un(a, IR_OP_Round, ad_bin(a, IR_OP_Add, d, ad_cast(a, nd->in[7], IR_DOUBLE)));
    p = clip_to(a, d, a->g->values[nd->out[0]].dtype, IR_DOUBLE);
  }
  if (a->err) return -1;
  ir_take_output(a->g, p, nd->out[0]);
  return 0;
}

static int lower_matmul(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int qa = nd.op == IR_OP_QLinearMatMul;
  int p = ad_bin(a, IR_OP_MatMul, centred(a, &nd, 0, 2, 2), centred(a, &nd, qa ? 3 : 1, qa ? 5 : 3, 1));
  int s = qa ? ad_bin(a, IR_OP_Div, ad_bin(a, IR_OP_Mul, ad_lead(a, nd.in[1], 2), nd.in[4]), nd.in[6]) : -1;
  return finish(a, &nd, p, s);
}

static int lower_conv(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int ql = nd.op == IR_OP_QLinearConv, iw = ql ? 3 : 1, izw = ql ? 5 : 3, r = ad_shape(a, nd.in[0]).rank;
  int in[3] = {centred(a, &nd, 0, 2, 1), ad_cast(a, nd.in[iw], IR_DOUBLE), -1}, n_in = 2;
  if (izw < nd.n_in && nd.in[izw] >= 0)
    in[1] = ad_bin(a, IR_OP_Sub, in[1], ad_lead(a, ad_cast(a, nd.in[izw], IR_DOUBLE), r - 1));
  if (ql && nd.n_in > 8 && nd.in[8] >= 0) in[n_in++] = ad_cast(a, nd.in[8], IR_DOUBLE);
  int cn = ad_begin(a, IR_OP_Conv, in, n_in, 1, NULL);
  g->nodes[cn].attr = nd.attr; /* the node's window attributes (auto_pad, pads, strides, ...) */
  g->nodes[cn].n_attr = nd.n_attr;
  int p = ad_end(a, cn);
  int s = ql ? ad_bin(a, IR_OP_Div, ad_bin(a, IR_OP_Mul, nd.in[1], ad_lead(a, nd.in[4], r - 1)), nd.in[6]) : -1;
  return finish(a, &nd, p, s);
}

static int lower_dynamic(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int x = nd.in[0], r = ad_shape(a, x).rank;
  int64_t axes[IR_MAX_RANK];
  for (int i = 0; i < r; i++) axes[i] = i;
  int zero = ad_c_f(a, 0, IR_FLOAT);
  int hi = ad_bin(a, IR_OP_Max, r ? ad_reduce(a, IR_OP_ReduceMax, x, axes, r, 0) : x, zero);
  int lo = ad_bin(a, IR_OP_Min, r ? ad_reduce(a, IR_OP_ReduceMin, x, axes, r, 0) : x, zero);
  int w[3] = {ad_bin(a, IR_OP_Equal, hi, lo), ad_c_f(a, 1, IR_FLOAT), ad_bin(a, IR_OP_Sub, hi, lo)};
  int scale = ad_bin(a, IR_OP_Div, ad_op(a, IR_OP_Where, w, 3), ad_c_f(a, 255, IR_FLOAT));
  int c[3] = {ad_bin(a, IR_OP_Sub, zero, ad_bin(a, IR_OP_Div, lo, scale)), zero, ad_c_f(a, 255, IR_FLOAT)};
  int zp = ad_un(a, IR_OP_Round, ad_op(a, IR_OP_Clip, c, 3));
  int y =
      clip_to(a, ad_bin(a, IR_OP_Add, ad_un(a, IR_OP_Round, ad_bin(a, IR_OP_Div, x, scale)), zp), IR_UINT8, IR_FLOAT);
  int outs[3] = {y, scale, ad_cast(a, zp, IR_UINT8)};
  if (a->err) return -1;
  for (int k = 0; k < 3; k++)
    if (k < nd.n_out && nd.out[k] >= 0) ir_take_output(g, outs[k], nd.out[k]);
  return 0;
}

static int lower(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  if (nd.op == IR_OP_MatMulInteger || nd.op == IR_OP_QLinearMatMul) return lower_matmul(a, node);
  if (nd.op == IR_OP_DynamicQuantizeLinear) return lower_dynamic(a, node);
  if (nd.op == IR_OP_ConvInteger || nd.op == IR_OP_QLinearConv) return lower_conv(a, node);
  int x = nd.in[0], s = nd.in[1], z = nd.n_in > 2 ? nd.in[2] : -1, y;
  ir_dtype out = g->values[nd.out[0]].dtype;
  if (nd.op == IR_OP_DequantizeLinear) {
    int xf = ad_cast(a, x, IR_FLOAT);
    if (z >= 0) xf = ad_bin(a, IR_OP_Sub, xf, ad_cast(a, layout(a, node, z), IR_FLOAT));
    y = ad_cast(a, ad_bin(a, IR_OP_Mul, xf, ad_cast(a, layout(a, node, s), IR_FLOAT)), out);
  } else {
    ir_dtype xt = ad_dtype(a, x);
    int q = ad_bin(a, IR_OP_Div, x, ad_cast(a, layout(a, node, s), xt));
    if (quant_f8(out)) {
      /* float8: the zero point is 0 (the reference ignores it); float4 and float6: added
       * (in x's type) before the cast, as the reference does (-0 + 0 is +0) */
      if (z >= 0 && ir_dtype_packed_bits(out)) q = ad_bin(a, IR_OP_Add, q, ad_cast(a, layout(a, node, z), xt));
      int c = ad_begin(a, IR_OP_Cast, &q, 1, 1, NULL);
      ad_attr_i(a, c, "to", out);
      ad_attr_i(a, c, "saturate", ir_attr_int(&nd, "saturate", 1));
      y = ad_end(a, c);
    } else {
      q = ad_cast(a, ad_un(a, IR_OP_Round, q), IR_FLOAT);
      if (z >= 0) q = ad_bin(a, IR_OP_Add, q, ad_cast(a, layout(a, node, z), IR_FLOAT));
      y = clip_to(a, q, out, IR_FLOAT);
    }
  }
  if (a->err) return -1;
  if (y == x) y = ad_un(a, IR_OP_Identity, y);
  ir_take_output(g, y, nd.out[0]);
  return 0;
}

static int is_quant(const ir_node *n) {
  return n->op == IR_OP_QuantizeLinear || n->op == IR_OP_DequantizeLinear || n->op == IR_OP_MatMulInteger ||
         n->op == IR_OP_QLinearMatMul || n->op == IR_OP_DynamicQuantizeLinear || n->op == IR_OP_ConvInteger ||
         n->op == IR_OP_QLinearConv;
}

int pass_lower_quant(ir_graph *g, const pass_opts *o) {
  (void)o;
  return ad_lower_nodes(g, "quant", is_quant, lower) < 0 ? -1 : 0;
}
