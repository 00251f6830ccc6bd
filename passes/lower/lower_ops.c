/* passes/lower/lower_ops.c - ops that are other ops: their shape rules and their lowering
 * (pass_lower_ops), after shape inference, so that no target needs a kernel and
 * autodiff needs no rule of their own.
 *
 *   GroupNormalization-18/21(X, scale, bias): X [N, C, ...] as [N, G, C/G * ...], each
 *     group normalised (mean, then the mean of the squared deviations; epsilon added to
 *     the variance), back to X's shape, then scale and bias per channel (21: [C]) or per
 *     group (18: [G]).
 *   MeanVarianceNormalization-13(X): (X - mean) / (sqrt(mean(X^2) - mean^2) + 1e-9) over
 *     `axes` (default [0, 2, 3]), as the ONNX function body computes it.
 *   LpNormalization-1/22(X): X / ||X||_p along `axis` (default -1), p 1 (ReduceSum of
 *     Abs) or 2 (ReduceL2), computed in float for float16 and bfloat16; where the norm is zero the
 *     output is zero (LpNormalization-22's text).
 *   EyeLike(x): a constant of x's shape, ones on diagonal k, of type `dtype` (default
 *     x's).
 *   CenterCropPad-18: Slice (the dims to crop), then Pad with zeros (the dims to pad).
 *   MaxUnpool-9/11: ScatterElements of X into zeros, per sample ([N, C x spatial]), I
 *     modulo a sample's size (see lower_maxunpool: micro-batches). With output_shape the
 *     indices address the output_shape tensor, as onnxruntime and PyTorch read them (the
 *     ONNX reference scatters into the default size and pads; onnx/onnx#2398).
 *   ReverseSequence-10: GatherElements along the time axis, the indices a constant when
 *     sequence_lens is one, else computed by Less/Sub/Where.
 *   Col2Im-18: ConvTranspose with a constant one-hot weight, C groups (1 to 3 spatial
 *     dims).
 *   Compress-9/11: Gather of constant indices (condition must be a constant).
 *   AffineGrid-20: a constant base grid MatMul theta transposed, reshaped.
 *   RMSNormalization-23, Swish-24, RotaryEmbedding-23: passes/lower/lower_llm.c.
 *   SwiGLU-28, TensorScatter-24, CausalConvWithState-27, LinearAttention-27:
 *     passes/lower/lower_llm_state.c.
 * Nodes that would mix the samples of a micro-batch are refused (batch_on). */
#include <stdlib.h>
#include <string.h>

#include "passes/rewrite.h"
#include "passes/lower/lower_llm.h"
#include "passes/lower/lower_llm_state.h"
#include "passes/batch.h"
#include "passes/pass.h"
#include "passes/shape/shape_impl.h"

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

int sh_LpNormalization(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  int64_t p = ir_attr_int(SH_NODE, "p", 2);
  int ax;
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input")) return -1;
  if (p != 1 && p != 2) SH_FAIL("attribute 'p' is %lld: 1 or 2 expected", (long long)p);
  if (sh_axis(g, node, ir_attr_int(SH_NODE, "axis", -1), x->shape.rank, "axis", &ax)) return -1;
  SH_NODE->flops = 3 * sh_numel(&x->shape);
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

/* A dim that holds the batch: n itself, or, compiled for micro-batches, the whole batch
 * (n x M) that a constant fixed at export names (passes/batch.h). */
static int batch_dim_ok(const ir_graph *g, int64_t given, int64_t n) {
  return given == n || (g->batch_full && g->microbatches > 1 && given == n * g->microbatches);
}

/* CenterCropPad-18(input_data, shape): along `axes` (default all), the dims of `shape`
 * (a constant); a larger input is cropped to a centred window starting at
 * floor((dim - want) / 2), a smaller one padded with zeros, floor((want - dim) / 2)
 * before it. */
static int ccp_axes(ir_graph *g, int node, int *ax, int64_t *want) {
  const ir_value *x = sh_in(g, node, 0);
  int64_t raw[IR_MAX_RANK];
  int n = sh_attr_ints(g, node, "axes", raw, IR_MAX_RANK), ns;
  if (n == -2 || sh_const_ints(g, node, 1, "shape", want, IR_MAX_RANK, &ns)) return -1;
  if (n < 0) {
    n = x->shape.rank;
    for (int i = 0; i < n; i++) raw[i] = i;
  }
  if (sh_axes(g, node, raw, n, x->shape.rank, "axes", ax)) return -1;
  if (ns != n) SH_FAIL("input 'shape' has %d values for %d axes", ns, n);
  for (int i = 0; i < n; i++)
    if (want[i] < 0) SH_FAIL("input 'shape' holds a negative size %lld", (long long)want[i]);
  return n;
}

int sh_CenterCropPad(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  int ax[IR_MAX_RANK];
  int64_t want[IR_MAX_RANK];
  int n = ccp_axes(g, node, ax, want);
  if (n < 0) return -1;
  ir_shape out = x->shape;
  for (int i = 0; i < n; i++) out.dims[ax[i]] = want[i];
  SH_NODE->flops = 0;
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* MaxUnpool-11(X, I, output_shape?): Y of output_shape (a constant, N and C as X's), or
 * spatially (in - 1) * stride + kernel - pad_begin - pad_end; Y is zero but at I. */
int sh_MaxUnpool(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0), *ix = sh_in(g, node, 1);
  int r = x->shape.rank, sp = r - 2;
  char b[64], c[64];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || sh_check_dtype(g, node, ix, SH_BIT(IR_INT64), "input I"))
    return -1;
  if (r < 3) SH_FAIL("input X of shape %s: [N, C, spatial...] expected", sh_str(&x->shape, b, sizeof b));
  if (!ir_shape_same_dims(&x->shape, &ix->shape))
    SH_FAIL("input I %s must have the shape of X %s", sh_str(&ix->shape, b, sizeof b), sh_str(&x->shape, c, sizeof c));
  int64_t k[IR_MAX_RANK], s[IR_MAX_RANK], p[2 * IR_MAX_RANK], os[IR_MAX_RANK];
  int nk = sh_attr_ints(g, node, "kernel_shape", k, IR_MAX_RANK), ns = sh_attr_ints(g, node, "strides", s, IR_MAX_RANK),
      np = sh_attr_ints(g, node, "pads", p, 2 * IR_MAX_RANK), nos;
  if (nk == -2 || ns == -2 || np == -2) return -1;
  if (nk != sp) SH_FAIL("attribute 'kernel_shape' must have %d values (one per spatial dim)", sp);
  if (ns >= 0 && ns != sp) SH_FAIL("attribute 'strides' has %d values, the input has %d spatial dims", ns, sp);
  if (np >= 0 && np != 2 * sp) SH_FAIL("attribute 'pads' has %d values, expected %d", np, 2 * sp);
  ir_shape out = x->shape;
  if (sh_in(g, node, 2)) {
    if (sh_const_ints(g, node, 2, "output_shape", os, IR_MAX_RANK, &nos)) return -1;
    if (nos != r) SH_FAIL("input 'output_shape' has %d values, X has rank %d", nos, r);
    if (!batch_dim_ok(g, os[0], x->shape.dims[0]) || os[1] != x->shape.dims[1])
      SH_FAIL("input 'output_shape' [%lld, %lld, ...] must keep N and C of X %s", (long long)os[0], (long long)os[1],
              sh_str(&x->shape, b, sizeof b));
    for (int i = 0; i < sp; i++) {
      if (os[2 + i] < 1) SH_FAIL("input 'output_shape' holds size %lld", (long long)os[2 + i]);
      out.dims[2 + i] = os[2 + i];
    }
  } else {
    for (int i = 0; i < sp; i++) {
      int64_t st = ns >= 0 ? s[i] : 1, pb = np >= 0 ? p[i] : 0, pe = np >= 0 ? p[sp + i] : 0, t;
      if (k[i] < 1 || st < 1 || pb < 0 || pe < 0)
        SH_FAIL("kernel_shape, strides and pads must be positive (pads >= 0)");
      if (sh_mul(x->shape.dims[2 + i] > 0 ? x->shape.dims[2 + i] - 1 : 0, st, &t) || sh_add(t, k[i] - pb - pe, &t))
        SH_FAIL("spatial dim %d: output size overflows", i);
      if (t < 1) SH_FAIL("spatial dim %d: output size would be %lld (pads too large?)", i, (long long)t);
      out.dims[2 + i] = t;
    }
  }
  SH_NODE->flops = sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* ReverseSequence-10(input, sequence_lens): per slice b along batch_axis (default 1),
 * the first sequence_lens[b] steps along time_axis (default 0) reversed. */
int sh_ReverseSequence(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0), *l = sh_in(g, node, 1);
  int64_t ba = ir_attr_int(SH_NODE, "batch_axis", 1), ta = ir_attr_int(SH_NODE, "time_axis", 0);
  char b[64];
  if (sh_check_dtype(g, node, l, SH_INDEX, "input 'sequence_lens'")) return -1;
  if (x->shape.rank < 2) SH_FAIL("input of shape %s: rank >= 2 expected", sh_str(&x->shape, b, sizeof b));
  if ((ba != 0 && ba != 1) || (ta != 0 && ta != 1) || ba == ta)
    SH_FAIL("attributes batch_axis %lld and time_axis %lld must be 0 and 1", (long long)ba, (long long)ta);
  if (l->shape.rank != 1 || l->shape.dims[0] != x->shape.dims[ba])
    SH_FAIL("input 'sequence_lens' of shape %s: [%lld] expected (the batch dim of the input)",
            sh_str(&l->shape, b, sizeof b), (long long)x->shape.dims[ba]);
  if (l->kind == IR_VAL_CONST)
    for (int64_t i = 0; i < l->shape.dims[0]; i++) {
      int64_t v;
      if (!ir_const_i64(l, i, &v) && (v < 0 || v > x->shape.dims[ta]))
        SH_FAIL("sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)i, (long long)v,
                (long long)x->shape.dims[ta]);
    }
  SH_NODE->flops = 0;
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* Col2Im-18 geometry: image_shape and block_shape (constants), dilations, pads,
 * strides; the blocks' count along each spatial dim into nb[]. Returns the spatial
 * rank, or -1 (reported). */
typedef struct {
  int sp;
  int64_t img[IR_MAX_RANK], blk[IR_MAX_RANK], dil[IR_MAX_RANK], str[IR_MAX_RANK], pad[2 * IR_MAX_RANK], nb[IR_MAX_RANK];
} c2i_geom;

static int c2i_geometry(ir_graph *g, int node, c2i_geom *q) {
  const ir_value *x = sh_in(g, node, 0);
  int ni, nbk;
  char b[64];
  if (sh_const_ints(g, node, 1, "image_shape", q->img, IR_MAX_RANK, &ni) ||
      sh_const_ints(g, node, 2, "block_shape", q->blk, IR_MAX_RANK, &nbk))
    return -1;
  if (ni != nbk || ni < 1 || ni > IR_MAX_RANK - 2)
    SH_FAIL("inputs 'image_shape' (%d values) and 'block_shape' (%d) must have one value per spatial dim", ni, nbk);
  int sp = q->sp = ni;
  int nd = sh_attr_ints(g, node, "dilations", q->dil, IR_MAX_RANK),
      ns = sh_attr_ints(g, node, "strides", q->str, IR_MAX_RANK),
      np = sh_attr_ints(g, node, "pads", q->pad, 2 * IR_MAX_RANK);
  if (nd == -2 || ns == -2 || np == -2) return -1;
  if ((nd >= 0 && nd != sp) || (ns >= 0 && ns != sp) || (np >= 0 && np != 2 * sp))
    SH_FAIL("attributes dilations, strides (%d values each) and pads (%d) do not match the spatial rank", sp, 2 * sp);
  if (x->shape.rank != 3)
    SH_FAIL("input of shape %s: [N, C * prod(block_shape), L] expected", sh_str(&x->shape, b, sizeof b));
  int64_t K = 1, L = 1;
  for (int i = 0; i < sp; i++) {
    if (nd < 0) q->dil[i] = 1;
    if (ns < 0) q->str[i] = 1;
    if (np < 0) q->pad[i] = q->pad[sp + i] = 0;
    if (q->img[i] < 1 || q->blk[i] < 1 || q->dil[i] < 1 || q->str[i] < 1 || q->pad[i] < 0 || q->pad[sp + i] < 0 ||
        q->img[i] > INT32_MAX || q->blk[i] > INT32_MAX || q->dil[i] > INT32_MAX || q->str[i] > INT32_MAX ||
        q->pad[i] > INT32_MAX || q->pad[sp + i] > INT32_MAX)
      SH_FAIL("spatial dim %d: image, block, dilation and stride must be >= 1 and pads >= 0 (and below 2^31)", i);
    int64_t span = q->img[i] + q->pad[i] + q->pad[sp + i] - (q->blk[i] - 1) * q->dil[i] - 1;
    if (span < 0) SH_FAIL("spatial dim %d: the dilated block is larger than the padded image", i);
    q->nb[i] = span / q->str[i] + 1;
    if (sh_mul(K, q->blk[i], &K) || sh_mul(L, q->nb[i], &L)) SH_FAIL("block or block count overflows");
  }
  if (x->shape.dims[1] % K)
    SH_FAIL("input dim 1 (%lld) is not a multiple of prod(block_shape) = %lld", (long long)x->shape.dims[1],
            (long long)K);
  if (x->shape.dims[2] != L)
    SH_FAIL("input dim 2 (%lld) must be the block count %lld that image, block, pads, dilations and strides give",
            (long long)x->shape.dims[2], (long long)L);
  return sp;
}

int sh_Col2Im(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  c2i_geom q;
  if (sh_check_dtype(g, node, x, SH_NUM & ~SH_FLOAT8, "input") || c2i_geometry(g, node, &q) < 0) return -1;
  int64_t K = 1;
  for (int i = 0; i < q.sp; i++) K *= q.blk[i];
  ir_shape out = {0};
  out.rank = 2 + q.sp;
  out.dims[0] = x->shape.dims[0];
  out.dims[1] = x->shape.dims[1] / K;
  for (int i = 0; i < q.sp; i++) out.dims[2 + i] = q.img[i];
  SH_NODE->flops = sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Compress-11(input, condition): the slices along `axis` (or the elements of the
 * flattened input, no axis) whose condition is true; condition (bool) must be a
 * constant, as it sets the output's size; it may be shorter than the dim (the rest is
 * dropped). The kept indices into idx (NULL: count only); the count, or -1. */
static int64_t compress_pick(ir_graph *g, int node, int *axis, int64_t *idx) {
  const ir_node *n = SH_NODE;
  const ir_value *x = sh_in(g, node, 0), *cv = sh_in(g, node, 1);
  char b[64];
  const ir_attr *aa = ir_attr_find(n, "axis");
  int64_t dim = ir_shape_numel(&x->shape), cnt = 0;
  *axis = -1;
  if (aa) {
    if (sh_axis(g, node, ir_attr_int(n, "axis", 0), x->shape.rank, "axis", axis)) return -1;
    dim = x->shape.dims[*axis];
  }
  if (sh_check_dtype(g, node, cv, SH_BIT(IR_BOOL), "input 'condition'")) return -1;
  if (cv->kind != IR_VAL_CONST)
    SH_FAIL(
        "input 'condition' (value '%s') must be a constant for a static shape (the output's size depends on its "
        "values)",
        sh_vname(cv, b, sizeof b));
  int64_t len = ir_shape_numel(&cv->shape);
  if (cv->shape.rank != 1) SH_FAIL("input 'condition' of shape %s: 1-D expected", sh_str(&cv->shape, b, sizeof b));
  if (len > dim)
    SH_FAIL("input 'condition' has %lld values, more than the %lld it selects from", (long long)len, (long long)dim);
  for (int64_t i = 0; i < len; i++) {
    int64_t v;
    if (ir_const_i64(cv, i, &v)) SH_FAIL("input 'condition': cannot read element %lld", (long long)i);
    if (!v) continue;
    if (idx) idx[cnt] = i;
    cnt++;
  }
  return cnt;
}

int sh_Compress(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  int axis;
  int64_t cnt = compress_pick(g, node, &axis, NULL);
  if (cnt < 0) return -1;
  ir_shape out = x->shape;
  if (axis < 0) out.rank = 1, out.dims[0] = cnt;
  else out.dims[axis] = cnt;
  SH_NODE->flops = 0;
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* AffineGrid-20(theta [N, 2, 3] or [N, 3, 4], size [N, C, H, W] or [N, C, D, H, W], a
 * constant): grid [N, H, W, 2] or [N, D, H, W, 3], theta times (x, y[, z], 1), the
 * coordinates evenly spaced in [-1, 1] (pixel centres with align_corners=0). */
static int affine_size(ir_graph *g, int node, int64_t *sz) {
  const ir_value *th = sh_in(g, node, 0);
  char b[64];
  int n;
  if (sh_check_dtype(g, node, th, SH_FLOATS & ~SH_FLOAT8, "input 'theta'") ||
      sh_const_ints(g, node, 1, "size", sz, IR_MAX_RANK, &n))
    return -1;
  int sp = n - 2;
  if (n != 4 && n != 5) SH_FAIL("input 'size' has %d values: [N, C, H, W] or [N, C, D, H, W] expected", n);
  if (th->shape.rank != 3 || th->shape.dims[1] != sp || th->shape.dims[2] != sp + 1)
    SH_FAIL("input 'theta' of shape %s: [N, %d, %d] expected for %d-D", sh_str(&th->shape, b, sizeof b), sp, sp + 1,
            sp);
  if (!batch_dim_ok(g, sz[0], th->shape.dims[0]))
    SH_FAIL("input 'size' names batch %lld, 'theta' has %lld", (long long)sz[0], (long long)th->shape.dims[0]);
  for (int i = 2; i < n; i++)
    if (sz[i] < 1) SH_FAIL("input 'size' holds size %lld", (long long)sz[i]);
  return sp;
}

int sh_AffineGrid(ir_graph *g, int node) {
  const ir_value *th = sh_in(g, node, 0);
  int64_t sz[IR_MAX_RANK];
  int sp = affine_size(g, node, sz);
  if (sp < 0) return -1;
  ir_shape out = {0};
  out.rank = sp + 2;
  out.dims[0] = th->shape.dims[0];
  for (int i = 0; i < sp; i++) out.dims[1 + i] = sz[2 + i];
  out.dims[sp + 1] = sp;
  SH_NODE->flops = 2 * sh_numel(&out) * (sp + 1);
  return sh_set_out(g, node, 0, th->dtype, &out);
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
  int y = ad_bin(a, IR_OP_Div, d,
                 ad_un(a, IR_OP_Sqrt, ad_bin(a, IR_OP_Add, var, ad_c_f(a, ir_attr_float(&nd, "epsilon", 1e-5f), t))));
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

static int lower_lpnorm(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT; /* float16: in float */
  int axi;
  if (sh_axis(g, node, ir_attr_int(&nd, "axis", -1), ad_shape(a, nd.in[0]).rank, "axis", &axi)) return -1;
  int64_t ax = axi;
  int bax = pass_batch_axis(g, nd.in[0]);
  if (bax >= 0 && bax == ax) {
    g->diag_hint = NULL; /* the batch fixed in a constant is not why */
    ir_error_node(g, node,
                  "normalises along axis %lld, which carries the batch, so %d micro-batches would not add up to "
                  "the batch; compile with -m 1 (the batch in one micro-batch)",
                  (long long)ax, g->microbatches);
    return -1;
  }
  int x = ad_cast(a, nd.in[0], t);
  int nrm = ir_attr_int(&nd, "p", 2) == 1 ? ad_reduce(a, IR_OP_ReduceSum, ad_un(a, IR_OP_Abs, x), &ax, 1, 1)
                                           : ad_reduce(a, IR_OP_ReduceL2, x, &ax, 1, 1);
  int zero = ad_c_f(a, 0, t);
  int in[3] = {ad_bin(a, IR_OP_Equal, nrm, zero), zero, ad_bin(a, IR_OP_Div, x, nrm)};
  return ad_take_output(a, node, 0, ad_cast(a, ad_op(a, IR_OP_Where, in, 3), xt));
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

/* the node's output 0 becomes y (an Identity when y is an input of the node) */
static int finish(ad_ctx *a, int node, int y) { return ad_take_output(a, node, 0, y); }
/* Refuse a node whose input `in` carries the micro-batch on another axis than `ok`
 * (reported; the lowering would mix the samples). */
static int batch_on(ad_ctx *a, int node, int in, int ok, const char *why) {
  int ax = pass_batch_axis(a->g, in);
  if (ax < 0 || ax == ok) return 0;
  const char *hint = a->g->diag_hint; /* the batch fixed in a constant is not why */
  a->g->diag_hint = NULL;
  ir_error_node(a->g, node,
                "its input carries the batch on axis %d, and %s, so %d micro-batches would not add up to the "
                "batch; compile with -m 1 (the batch in one micro-batch)",
                ax, why, a->g->microbatches);
  a->g->diag_hint = hint;
  return -1;
}

/* CenterCropPad: Slice the dims to crop, then Pad (zeros) the dims to pad. */
static int lower_ccp(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  ir_shape xs = ad_shape(a, nd.in[0]), ys = ad_shape(a, nd.out[0]);
  int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], pads[2 * IR_MAX_RANK] = {0};
  int ns = 0, np = 0, r = xs.rank, y = nd.in[0];
  for (int d = 0; d < r; d++) {
    int64_t have = xs.dims[d], want = ys.dims[d];
    if (have > want) {
      st[ns] = (have - want) / 2;
      en[ns] = st[ns] + want;
      ax[ns++] = d;
    } else if (have < want) {
      pads[d] = (want - have) / 2;
      pads[r + d] = want - have - pads[d];
      np++;
    }
  }
  if (ns) {
    int in[4] = {y, ad_c_i64(a, st, ns), ad_c_i64(a, en, ns), ad_c_i64(a, ax, ns)};
    y = ad_op(a, IR_OP_Slice, in, 4);
  }
  if (np) y = ad_bin(a, IR_OP_Pad, y, ad_c_i64(a, pads, 2 * r));
  return finish(a, node, y);
}

/* MaxUnpool, per sample: X and I as [N, S] (S = C x spatial), I taken modulo the output
 * sample's size So, scattered into zeros [N, So] along axis 1, reshaped to Y. MaxPool's
 * indices count over the whole tensor but never leave their sample; the emitted MaxPool
 * counts them from the first sample of its micro-batch, and indices fed to the model
 * count from the first of the whole batch: modulo So, both give the place in the sample. */
static int lower_maxunpool(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  if (batch_on(a, node, nd.in[0], 0, "MaxUnpool scatters within each sample of axis 0")) return -1;
  ir_shape xs = ad_shape(a, nd.in[0]), ys = ad_shape(a, nd.out[0]);
  ir_dtype t = ad_dtype(a, nd.in[0]);
  int64_t N = xs.dims[0], Sx[2] = {N, 0}, Sy[2] = {N, 0};
  if (ir_shape_numel(&ys) == 0 || ir_shape_numel(&xs) == 0) return finish(a, node, ad_zeros(a, &ys, t));
  Sx[1] = ir_shape_numel(&xs) / N;
  Sy[1] = ir_shape_numel(&ys) / N;
  ir_shape fx = ir_shape_of(2, Sx), fy = ir_shape_of(2, Sy);
  int idx = ad_bin(a, IR_OP_Mod, ad_reshape(a, nd.in[1], &fx), ad_c_i64_scalar(a, Sy[1]));
  int in[3] = {ad_zeros(a, &fy, t), idx, ad_reshape(a, nd.in[0], &fx)};
  int id = ad_begin(a, IR_OP_ScatterElements, in, 3, 1, NULL);
  ad_attr_i(a, id, "axis", 1);
  return finish(a, node, ad_reshape(a, ad_end(a, id), &ys));
}

/* ReverseSequence: GatherElements along the time axis with index
 * t < len[b] ? len[b] - 1 - t : t, as a constant when sequence_lens is one, else
 * computed (Less, Sub, Where on [T, B] or [B, T]), then expanded to the input's shape. */
static int lower_revseq(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int ta = (int)ir_attr_int(&nd, "time_axis", 0), ba = 1 - ta;
  if (batch_on(a, node, nd.in[0], ba, "ReverseSequence gathers along its time axis")) return -1;
  ir_shape xs = ad_shape(a, nd.in[0]);
  const ir_value *lv = &g->values[nd.in[1]];
  int64_t T = xs.dims[ta], B = xs.dims[ba], d2[2];
  d2[ta] = T, d2[ba] = B;
  ir_shape s2 = ir_shape_of(2, d2);
  int idx;
  if (lv->kind == IR_VAL_CONST) {
    int64_t *v = calloc((size_t)(T * B > 0 ? T * B : 1), sizeof(int64_t));
    for (int64_t b = 0; b < B; b++) {
      int64_t len = 0;
      if (ir_const_i64(lv, b, &len)) len = 0;
      for (int64_t t = 0; t < T; t++) v[ta == 0 ? t * B + b : b * T + t] = t < len ? len - 1 - t : t;
    }
    idx = ad_c_tensor(a, IR_INT64, &s2, v, sizeof(int64_t) * (size_t)(T * B));
    free(v);
  } else {
    int64_t *tv = malloc(sizeof(int64_t) * (size_t)(T > 0 ? T : 1)), dt[2], dl[2];
    for (int64_t t = 0; t < T; t++) tv[t] = t;
    dt[ta] = T, dt[ba] = 1, dl[ta] = 1, dl[ba] = B;
    ir_shape st = ir_shape_of(2, dt), sl = ir_shape_of(2, dl);
    int tc = ad_reshape(a, ad_c_i64(a, tv, (int)T), &st);
    free(tv);
    /* lengths beyond T (invalid) are taken as T, so that no index leaves the input */
    int len = ad_bin(a, IR_OP_Min, ad_reshape(a, ad_cast(a, nd.in[1], IR_INT64), &sl), ad_c_i64_scalar(a, T));
    int rev = ad_bin(a, IR_OP_Sub, ad_bin(a, IR_OP_Sub, len, ad_c_i64_scalar(a, 1)), tc);
    int w[3] = {ad_bin(a, IR_OP_Less, tc, len), rev, tc};
    idx = ad_op(a, IR_OP_Where, w, 3);
  }
  ir_shape sr = s2;
  sr.rank = xs.rank;
  for (int d = 2; d < xs.rank; d++) sr.dims[d] = 1;
  idx = ad_expand(a, ad_reshape(a, idx, &sr), &xs);
  int in[2] = {nd.in[0], idx};
  int id = ad_begin(a, IR_OP_GatherElements, in, 2, 1, NULL);
  ad_attr_i(a, id, "axis", ta);
  return finish(a, node, ad_end(a, id));
}

/* Col2Im: input [N, C*K, L] as [N, C*K, L1, ...], a ConvTranspose with C groups and the
 * one-hot weight [C*K, 1, block...] (channel c*K + k puts its value at block position k),
 * output_padding making up what the strides' floor lost; computed in float or double. */
static int lower_col2im(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  c2i_geom q;
  if (c2i_geometry(g, node, &q) < 0) return -1;
  if (q.sp > 3) {
    ir_error_node(g, node, "Col2Im over %d spatial dims: pipecc supports 1 to 3 (ConvTranspose's)", q.sp);
    return -1;
  }
  ir_shape xs = ad_shape(a, nd.in[0]), ys = ad_shape(a, nd.out[0]);
  ir_dtype xt = ad_dtype(a, nd.in[0]),
           t = xt == IR_FLOAT || xt == IR_FLOAT16 || xt == IR_BFLOAT16 ? IR_FLOAT : IR_DOUBLE;
  int sp = q.sp;
  int64_t K = 1, CK = xs.dims[1], op[IR_MAX_RANK];
  for (int i = 0; i < sp; i++) K *= q.blk[i];
  ir_shape s4 = xs, ws;
  s4.rank = 2 + sp;
  for (int i = 0; i < sp; i++) {
    s4.dims[2 + i] = q.nb[i];
    op[i] = q.img[i] - ((q.nb[i] - 1) * q.str[i] + (q.blk[i] - 1) * q.dil[i] + 1 - q.pad[i] - q.pad[sp + i]);
  }
  memset(&ws, 0, sizeof ws);
  ws.rank = 2 + sp;
  ws.dims[0] = CK;
  ws.dims[1] = 1;
  for (int i = 0; i < sp; i++) ws.dims[2 + i] = q.blk[i];
  size_t es = ir_dtype_size(t), nw = (size_t)(CK * K);
  unsigned char *w = calloc(nw ? nw : 1, es);
  float f1 = 1;
  double d1 = 1;
  for (int64_t ch = 0; ch < CK; ch++)
    memcpy(w + (size_t)(ch * K + ch % K) * es, t == IR_FLOAT ? (void *)&f1 : (void *)&d1, es);
  int wc = ad_c_tensor(a, t, &ws, w, nw * es);
  free(w);
  int in[2] = {ad_reshape(a, ad_cast(a, nd.in[0], t), &s4), wc};
  int id = ad_begin(a, IR_OP_ConvTranspose, in, 2, 1, NULL);
  ad_attr_i(a, id, "group", ys.dims[1]);
  ad_attr_is(a, id, "kernel_shape", q.blk, sp);
  ad_attr_is(a, id, "strides", q.str, sp);
  ad_attr_is(a, id, "dilations", q.dil, sp);
  ad_attr_is(a, id, "pads", q.pad, 2 * sp);
  ad_attr_is(a, id, "output_padding", op, sp);
  return finish(a, node, ad_cast(a, ad_end(a, id), xt));
}

/* Compress: Gather of the constant kept indices along axis (of the flattened input
 * without one). */
static int lower_compress(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  const ir_value *cv = &g->values[nd.in[1]];
  int64_t len = ir_shape_numel(&cv->shape), *idx = malloc(sizeof(int64_t) * (size_t)(len > 0 ? len : 1));
  int axis, x = nd.in[0];
  int64_t cnt = compress_pick(g, node, &axis, idx);
  if (cnt < 0) return free(idx), -1;
  ir_shape is = ir_shape_of(1, &cnt);
  int ic = ad_c_tensor(a, IR_INT64, &is, idx, sizeof(int64_t) * (size_t)cnt);
  free(idx);
  if (axis < 0) {
    ir_shape xs = ad_shape(a, x);
    int64_t n = ir_shape_numel(&xs);
    ir_shape fs = ir_shape_of(1, &n);
    x = ad_reshape(a, x, &fs);
  }
  int in[2] = {x, ic};
  int id = ad_begin(a, IR_OP_Gather, in, 2, 1, NULL);
  ad_attr_i(a, id, "axis", axis < 0 ? 0 : axis);
  return finish(a, node, ad_end(a, id));
}

/* AffineGrid: the constant base grid [P, sp+1] (rows (x, y[, z], 1), x along the last
 * dim) times theta transposed ([N, sp+1, sp]), as [N, spatial..., sp]; computed in
 * float (double for double). Coordinate i of n: -1 + 2i/(n-1) with align_corners, else
 * (2i+1)/n - 1; 0 when n is 1. */
static double grid_coord(int64_t i, int64_t n, int align) {
  if (n <= 1) return 0;
  return align ? -1.0 + 2.0 * (double)i / (double)(n - 1) : (2.0 * (double)i + 1.0) / (double)n - 1.0;
}

static int lower_affine_grid(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int64_t sz[IR_MAX_RANK];
  int sp = affine_size(g, node, sz);
  if (sp < 0) return -1;
  int align = ir_attr_int(&nd, "align_corners", 0) != 0;
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT;
  ir_shape ys = ad_shape(a, nd.out[0]);
  int64_t D = sp == 3 ? sz[2] : 1, H = sz[sp], W = sz[sp + 1], P = D * H * W, bd[2] = {P, sp + 1};
  size_t es = ir_dtype_size(t), nb = (size_t)(P * (sp + 1));
  unsigned char *base = malloc(nb * es);
  for (int64_t d = 0, r = 0; d < D; d++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t w = 0; w < W; w++, r++) {
        double row[4] = {grid_coord(w, W, align), grid_coord(h, H, align), sp == 3 ? grid_coord(d, D, align) : 1, 1};
        for (int k = 0; k <= sp; k++) {
          size_t at = (size_t)(r * (sp + 1) + k);
          if (t == IR_DOUBLE) memcpy(base + at * es, &row[k], es);
          else {
            float f = (float)row[k];
            memcpy(base + at * es, &f, es);
          }
        }
      }
  ir_shape bs = ir_shape_of(2, bd);
  int bc = ad_c_tensor(a, t, &bs, base, nb * es);
  free(base);
  const int64_t perm[3] = {0, 2, 1};
  int m = ad_bin(a, IR_OP_MatMul, bc, ad_transpose(a, ad_cast(a, nd.in[0], t), perm, 3));
  return finish(a, node, ad_cast(a, ad_reshape(a, m, &ys), xt));
}

static int lower(ad_ctx *a, int node) {
  if (llm_is_lowered(&a->g->nodes[node])) return llm_lower(a, node);
  if (llm_state_is_lowered(&a->g->nodes[node])) return llm_state_lower(a, node);
  switch (a->g->nodes[node].op) {
    case IR_OP_GroupNormalization: return lower_groupnorm(a, node);
    case IR_OP_MeanVarianceNormalization: return lower_mvn(a, node);
    case IR_OP_LpNormalization: return lower_lpnorm(a, node);
    case IR_OP_CenterCropPad: return lower_ccp(a, node);
    case IR_OP_MaxUnpool: return lower_maxunpool(a, node);
    case IR_OP_ReverseSequence: return lower_revseq(a, node);
    case IR_OP_Col2Im: return lower_col2im(a, node);
    case IR_OP_Compress: return lower_compress(a, node);
    case IR_OP_AffineGrid: return lower_affine_grid(a, node);
    default: return lower_eyelike(a, node);
  }
}

/* the graph and mode pass_lower_ops runs on (is_lowered sees one node) */
static const ir_graph *lower_graph;
static int lower_training;

static int is_lowered(const ir_node *n) {
  if (lower_graph && llm_attention_fused(lower_graph, n, lower_training)) return 0;
  if (llm_is_lowered(n) || llm_state_is_lowered(n)) return 1;
  switch (n->op) {
    case IR_OP_GroupNormalization:
    case IR_OP_MeanVarianceNormalization:
    case IR_OP_LpNormalization:
    case IR_OP_EyeLike:
    case IR_OP_CenterCropPad:
    case IR_OP_MaxUnpool:
    case IR_OP_ReverseSequence:
    case IR_OP_Col2Im:
    case IR_OP_Compress:
    case IR_OP_AffineGrid: return 1;
    default: return 0;
  }
}

int pass_lower_ops(ir_graph *g, const pass_opts *o) {
  lower_graph = g;
  lower_training = o && o->training;
  int rc = ad_lower_nodes(g, "lower", is_lowered, lower) < 0 ? -1 : 0;
  lower_graph = NULL;
  return rc;
}
