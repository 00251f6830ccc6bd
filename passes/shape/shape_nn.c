/* passes/shape/shape_nn.c - pooling, convolution, Gemm, MatMul, normalisations, Dropout.
 * FLOPs: a multiply-add counts 2 (Conv, ConvTranspose, Gemm, MatMul). */
#include <inttypes.h>
#include <string.h>

#include "passes/shape/shape_impl.h"

/* Window attributes of a pooling or convolution node over sp spatial dims. */
typedef struct {
  int64_t k[IR_MAX_RANK], s[IR_MAX_RANK], d[IR_MAX_RANK], p[2 * IR_MAX_RANK];
  int auto_pad, ceil_mode;
} window;

/* Read kernel_shape (when need_k), strides, dilations, pads, auto_pad, ceil_mode. */
static int window_attrs(ir_graph *g, int node, int sp, int need_k, window *w) {
  int n;
  memset(w, 0, sizeof *w);
  for (int i = 0; i < sp; i++) w->s[i] = w->d[i] = 1;
  if (need_k) {
    n = sh_attr_ints(g, node, "kernel_shape", w->k, IR_MAX_RANK);
    if (n == -2) return -1;
    if (n < 0) SH_FAIL("attribute 'kernel_shape' is required");
    if (n != sp) SH_FAIL("attribute 'kernel_shape' has %d values, the input has %d spatial dims", n, sp);
  }
  static const char *names[] = {"strides", "dilations"};
  int64_t *dst[] = {w->s, w->d};
  for (int a = 0; a < 2; a++) {
    n = sh_attr_ints(g, node, names[a], dst[a], IR_MAX_RANK);
    if (n == -2) return -1;
    if (n >= 0 && n != sp) SH_FAIL("attribute '%s' has %d values, the input has %d spatial dims", names[a], n, sp);
    for (int i = 0; i < sp && n >= 0; i++)
      if (dst[a][i] < 1) SH_FAIL("attribute '%s' has value %" PRId64 " (must be >= 1)", names[a], dst[a][i]);
  }
  n = sh_attr_ints(g, node, "pads", w->p, 2 * IR_MAX_RANK);
  if (n == -2) return -1;
  if (n >= 0 && n != 2 * sp)
    SH_FAIL("attribute 'pads' has %d values, expected %d (begin and end per spatial dim)", n, 2 * sp);
  for (int i = 0; i < 2 * sp && n >= 0; i++)
    if (w->p[i] < 0) SH_FAIL("attribute 'pads' has negative value %" PRId64, w->p[i]);
  const char *ap = ir_attr_str(SH_NODE, "auto_pad", "NOTSET");
  w->auto_pad = sh_auto_pad(ap);
  if (w->auto_pad < 0) {
    char b[96];
    SH_FAIL("attribute 'auto_pad' is '%s' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)",
            ir_printable(ap, 40, b, sizeof b));
  }
  w->ceil_mode = ir_attr_int(SH_NODE, "ceil_mode", 0) != 0;
  return 0;
}

/* Spatial output dims of x under window w, into out->dims[2..]. */
static int window_apply(ir_graph *g, int node, const ir_shape *x, window *w, ir_shape *out) {
  int sp = x->rank - 2;
  for (int i = 0; i < sp; i++) {
    int64_t pb = w->p[i], pe = w->p[i + sp], o;
    if (w->k[i] < 1) SH_FAIL("kernel size %" PRId64 " in spatial dim %d (must be >= 1)", w->k[i], i);
    if (sh_window_out(x->dims[2 + i], w->k[i], w->s[i], w->d[i], w->auto_pad, w->ceil_mode, &pb, &pe, &o))
      SH_FAIL("spatial dim %d: input size %" PRId64 " with pads (%" PRId64 ", %" PRId64
              ") is smaller than the kernel "
              "extent %" PRId64 " (kernel %" PRId64 ", dilation %" PRId64 ")",
              i, x->dims[2 + i], pb, pe, (w->k[i] - 1) * w->d[i] + 1, w->k[i], w->d[i]);
    if (o < 1) SH_FAIL("spatial dim %d: output size would be %" PRId64, i, o);
    w->p[i] = pb;
    w->p[i + sp] = pe;
    out->dims[2 + i] = o;
  }
  return 0;
}

/* MaxPool-12, AveragePool-19, LpPool-18 (kernel_shape, strides, dilations, pads,
 * auto_pad, ceil_mode; MaxPool's Indices output is int64), GlobalAveragePool-1,
 * GlobalMaxPool-1, GlobalLpPool-2 (spatial dims become 1). */
int sh_pool(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  unsigned types = SH_FLOATS | (n->op == IR_OP_MaxPool ? SH_BIT(IR_INT8) | SH_BIT(IR_UINT8) : 0);
  if (sh_check_dtype(g, node, x, types, "input X")) return -1;
  char b[256];
  int global = n->op == IR_OP_GlobalAveragePool || n->op == IR_OP_GlobalMaxPool || n->op == IR_OP_GlobalLpPool;
  if (x->shape.rank < (global ? 2 : 3))
    SH_FAIL("input X must be [N, C, spatial...], it has shape %s", sh_str(&x->shape, b, sizeof b));
  ir_shape out = x->shape;
  if (global) {
    for (int i = 2; i < out.rank; i++) out.dims[i] = 1;
    n->flops = sh_numel(&x->shape);
    return sh_set_out(g, node, 0, x->dtype, &out);
  }
  int sp = x->shape.rank - 2;
  window w;
  if (window_attrs(g, node, sp, 1, &w) || window_apply(g, node, &x->shape, &w, &out)) return -1;
  double ksz = 1;
  for (int i = 0; i < sp; i++) ksz *= (double)w.k[i];
  n->flops = sh_numel(&out) * ksz;
  if (sh_set_out(g, node, 0, x->dtype, &out)) return -1;
  return sh_set_out(g, node, 1, IR_INT64, &out);
}

static int check_bias(ir_graph *g, int node, const ir_value *x, int i, int64_t m) {
  ir_value *bias = sh_in(g, node, i);
  char b[256];
  if (!bias) return 0;
  if (sh_same_dtype(g, node, x, bias, "input X", "input B")) return -1;
  if (bias->shape.rank != 1 || bias->shape.dims[0] != m)
    SH_FAIL("input B has shape %s, expected [%" PRId64 "]", sh_str(&bias->shape, b, sizeof b), m);
  return 0;
}

/* Conv-11 (1-D, 2-D, 3-D, ...): X [N, C, D...], W [M, C/group, k...], B [M];
 * kernel_shape (optional, must match W), strides, dilations, pads, auto_pad, group. */
/* Conv's output shape for X = x, W = wt (a bias in slot bias_slot, -1: none checked)
 * into *res; sets the node's FLOPs. 0, or -1 after reporting. */
int sh_conv_shape(ir_graph *g, int node, const ir_value *x, const ir_value *wt, int bias_slot, ir_shape *res) {
  ir_node *n = SH_NODE;
  char b[256], c[256];
  int r = x->shape.rank;
  if (r < 3) SH_FAIL("input X must be [N, C, spatial...], it has shape %s", sh_str(&x->shape, b, sizeof b));
  if (wt->shape.rank != r)
    SH_FAIL("input W %s must have the rank of X %s", sh_str(&wt->shape, b, sizeof b), sh_str(&x->shape, c, sizeof c));
  int64_t group = ir_attr_int(n, "group", 1);
  if (group < 1) SH_FAIL("attribute 'group' is %" PRId64 " (must be >= 1)", group);
  int64_t C = x->shape.dims[1], M = wt->shape.dims[0];
  if (wt->shape.dims[1] * group != C || C % group)
    SH_FAIL("input channels %" PRId64 " of X do not match W %s with group %" PRId64 " (need W[1] * group == C)", C,
            sh_str(&wt->shape, b, sizeof b), group);
  if (M % group) SH_FAIL("output channels %" PRId64 " are not divisible by group %" PRId64, M, group);
  if (bias_slot >= 0 && check_bias(g, node, x, bias_slot, M)) return -1;
  int sp = r - 2;
  window w;
  if (window_attrs(g, node, sp, 0, &w)) return -1;
  int64_t ks[IR_MAX_RANK];
  int nk = sh_attr_ints(g, node, "kernel_shape", ks, IR_MAX_RANK);
  if (nk == -2) return -1;
  for (int i = 0; i < sp; i++) {
    w.k[i] = wt->shape.dims[2 + i];
    if (nk >= 0 && (nk != sp || ks[i] != w.k[i]))
      SH_FAIL("attribute 'kernel_shape' does not match the spatial dims of W %s", sh_str(&wt->shape, b, sizeof b));
  }
  ir_shape out = x->shape;
  out.dims[1] = M;
  if (window_apply(g, node, &x->shape, &w, &out)) return -1;
  double ksz = (double)(C / group);
  for (int i = 0; i < sp; i++) ksz *= (double)w.k[i];
  n->flops = 2 * sh_numel(&out) * ksz + (bias_slot >= 0 && sh_in(g, node, bias_slot) ? sh_numel(&out) : 0);
  *res = out;
  return 0;
}

int sh_Conv(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0), *wt = sh_in(g, node, 1);
  ir_shape out;
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || sh_same_dtype(g, node, x, wt, "input X", "input W") ||
      sh_conv_shape(g, node, x, wt, 2, &out))
    return -1;
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* ConvTranspose-11: X [N, C, D...], W [C, M/group, k...]; output_shape (spatial dims)
 * or out = stride*(in-1) + output_padding + (k-1)*dilation + 1 - pad_begin - pad_end;
 * SAME_UPPER/SAME_LOWER give in*stride. */
int sh_ConvTranspose(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0), *wt = sh_in(g, node, 1);
  char b[256], c[256];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || sh_same_dtype(g, node, x, wt, "input X", "input W"))
    return -1;
  int r = x->shape.rank;
  if (r < 3) SH_FAIL("input X must be [N, C, spatial...], it has shape %s", sh_str(&x->shape, b, sizeof b));
  if (wt->shape.rank != r)
    SH_FAIL("input W %s must have the rank of X %s", sh_str(&wt->shape, b, sizeof b), sh_str(&x->shape, c, sizeof c));
  int64_t group = ir_attr_int(n, "group", 1);
  if (group < 1) SH_FAIL("attribute 'group' is %" PRId64 " (must be >= 1)", group);
  int64_t C = x->shape.dims[1];
  if (wt->shape.dims[0] != C)
    SH_FAIL("input channels %" PRId64 " of X do not match W %s (need W[0] == C)", C, sh_str(&wt->shape, b, sizeof b));
  if (C % group) SH_FAIL("input channels %" PRId64 " are not divisible by group %" PRId64, C, group);
  int64_t M;
  if (sh_mul(wt->shape.dims[1], group, &M)) SH_FAIL("output channel count overflows");
  if (check_bias(g, node, x, 2, M)) return -1;
  int sp = r - 2;
  window w;
  if (window_attrs(g, node, sp, 0, &w)) return -1;
  int64_t ks[IR_MAX_RANK], op[IR_MAX_RANK] = {0}, os[IR_MAX_RANK + 2];
  int nk = sh_attr_ints(g, node, "kernel_shape", ks, IR_MAX_RANK);
  int nop = sh_attr_ints(g, node, "output_padding", op, IR_MAX_RANK);
  int nos = sh_attr_ints(g, node, "output_shape", os, IR_MAX_RANK + 2);
  if (nk == -2 || nop == -2 || nos == -2) return -1;
  if (nop >= 0 && nop != sp)
    SH_FAIL("attribute 'output_padding' has %d values, the input has %d spatial dims", nop, sp);
  if (nos >= 0 && nos != sp && nos != r)
    SH_FAIL("attribute 'output_shape' has %d values, the input has %d spatial dims", nos, sp);
  ir_shape out = x->shape;
  out.dims[1] = M;
  double ksz = (double)(M / group);
  for (int i = 0; i < sp; i++) {
    int64_t k = wt->shape.dims[2 + i], in = x->shape.dims[2 + i], o;
    if (nk >= 0 && (nk != sp || ks[i] != k))
      SH_FAIL("attribute 'kernel_shape' does not match the spatial dims of W %s", sh_str(&wt->shape, b, sizeof b));
    if (op[i] < 0) SH_FAIL("attribute 'output_padding' has negative value %" PRId64, op[i]);
    ksz *= (double)k;
    if (nos >= 0) {
      o = os[nos - sp + i];
    } else if (w.auto_pad == SH_PAD_SAME_UPPER || w.auto_pad == SH_PAD_SAME_LOWER) {
      if (sh_mul(in, w.s[i], &o)) SH_FAIL("spatial dim %d: output size overflows", i);
    } else {
      int64_t pb = w.auto_pad == SH_PAD_VALID ? 0 : w.p[i], pe = w.auto_pad == SH_PAD_VALID ? 0 : w.p[i + sp], t;
      int64_t ek;
      if (k < 1) SH_FAIL("kernel size %" PRId64 " in spatial dim %d (must be >= 1)", k, i);
      if (sh_mul(k - 1, w.d[i], &ek) || sh_mul(w.s[i], in > 0 ? in - 1 : 0, &t) || sh_add(t, op[i], &t) ||
          sh_add(t, ek + 1, &t))
        SH_FAIL("spatial dim %d: output size overflows", i);
      o = t - pb - pe;
      if (in == 0) o = 0;
    }
    if (o < 0 || (o == 0 && in > 0))
      SH_FAIL("spatial dim %d: output size would be %" PRId64 " (pads too large?)", i, o);
    out.dims[2 + i] = o;
  }
  n->flops = 2 * sh_numel(&x->shape) * ksz;
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Gemm-13: A [M, K] (or [K, M] with transA), B [K, N] (or [N, K] with transB),
 * optional C broadcast unidirectionally to [M, N]. */
int sh_Gemm(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *a = sh_in(g, node, 0), *bb = sh_in(g, node, 1), *c = sh_in(g, node, 2);
  char s1[256], s2[256];
  unsigned types = SH_FLOATS | SH_BIT(IR_INT32) | SH_BIT(IR_INT64) | SH_BIT(IR_UINT32) | SH_BIT(IR_UINT64);
  if (sh_check_dtype(g, node, a, types, "input A") || sh_same_dtype(g, node, a, bb, "input A", "input B")) return -1;
  if (c && sh_same_dtype(g, node, a, c, "input A", "input C")) return -1;
  if (a->shape.rank != 2 || bb->shape.rank != 2)
    SH_FAIL("inputs A %s and B %s must be 2-D", sh_str(&a->shape, s1, sizeof s1), sh_str(&bb->shape, s2, sizeof s2));
  int ta = ir_attr_int(n, "transA", 0) != 0, tb = ir_attr_int(n, "transB", 0) != 0;
  int64_t M = a->shape.dims[ta], K = a->shape.dims[!ta], K2 = bb->shape.dims[tb], N = bb->shape.dims[!tb];
  if (K != K2)
    SH_FAIL("inner dims differ: A %s%s and B %s%s", sh_str(&a->shape, s1, sizeof s1), ta ? " (transposed)" : "",
            sh_str(&bb->shape, s2, sizeof s2), tb ? " (transposed)" : "");
  ir_shape out = {0};
  out.rank = 2;
  out.dims[0] = M;
  out.dims[1] = N;
  if (c && sh_unibroadcast(g, node, &out, &c->shape, "A*B", "C")) return -1;
  n->flops = 2.0 * (double)M * (double)N * (double)K + (c ? (double)M * (double)N : 0);
  return sh_set_out(g, node, 0, a->dtype, &out);
}

/* numpy matmul's shape of a @ b: 1-D operands get a dim prepended (A) / appended (B)
 * that is removed from the result; batch dims broadcast. */
int sh_matmul_shape(ir_graph *g, int node, const ir_value *a, const ir_value *bb, ir_shape *res, double *flops) {
  char s1[256], s2[256];
  ir_shape sa = a->shape, sb = bb->shape;
  if (sa.rank < 1 || sb.rank < 1)
    SH_FAIL("inputs must have rank >= 1 (A %s, B %s)", sh_str(&sa, s1, sizeof s1), sh_str(&sb, s2, sizeof s2));
  int a1 = sa.rank == 1, b1 = sb.rank == 1;
  if (a1) sa.rank = 2, sa.dims[1] = sa.dims[0], sa.dims[0] = 1;
  if (b1) sb.rank = 2, sb.dims[1] = 1;
  int64_t M = sa.dims[sa.rank - 2], K = sa.dims[sa.rank - 1], K2 = sb.dims[sb.rank - 2], N = sb.dims[sb.rank - 1];
  if (K != K2)
    SH_FAIL("inner dims differ: A %s and B %s", sh_str(&a->shape, s1, sizeof s1), sh_str(&bb->shape, s2, sizeof s2));
  ir_shape ba = sa, bt = sb, out;
  ba.rank -= 2;
  bt.rank -= 2;
  if (sh_broadcast_shapes(&ba, &bt, &out))
    SH_FAIL("batch dims of A %s and B %s cannot be broadcast", sh_str(&a->shape, s1, sizeof s1),
            sh_str(&bb->shape, s2, sizeof s2));
  double batch = sh_numel(&out);
  if (!a1) out.dims[out.rank++] = M;
  if (!b1) out.dims[out.rank++] = N;
  *flops = 2.0 * batch * (double)M * (double)N * (double)K;
  *res = out;
  return 0;
}

/* MatMul-13: numpy matmul (sh_matmul_shape). */
int sh_MatMul(ir_graph *g, int node) {
  ir_value *a = sh_in(g, node, 0), *bb = sh_in(g, node, 1);
  unsigned types = SH_FLOATS | SH_BIT(IR_INT32) | SH_BIT(IR_INT64) | SH_BIT(IR_UINT32) | SH_BIT(IR_UINT64);
  if (sh_check_dtype(g, node, a, types, "input A") || sh_same_dtype(g, node, a, bb, "input A", "input B")) return -1;
  ir_shape out;
  if (sh_matmul_shape(g, node, a, bb, &out, &SH_NODE->flops)) return -1;
  return sh_set_out(g, node, 0, a->dtype, &out);
}

static int check_vec(ir_graph *g, int node, int i, const char *what, int64_t c, const ir_value *like) {
  ir_value *v = sh_in(g, node, i);
  char b[256];
  if (!v) return 0;
  if (v->shape.rank != 1 || v->shape.dims[0] != c)
    SH_FAIL("input '%s' has shape %s, expected [%" PRId64 "] (the channel count)", what, sh_str(&v->shape, b, sizeof b),
            c);
  if (like && sh_same_dtype(g, node, like, v, "the statistics", what)) return -1;
  return sh_check_dtype(g, node, v, SH_FLOATS, what);
}

/* BatchNormalization-15 (also 9 and 14): X [N, C, ...]; scale, B, mean, var [C].
 * Outputs 1 and 2 (running mean and var with training_mode since 14; mean and var
 * before) are [C] with the dtype of 'input_mean'. */
int sh_BatchNormalization(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0), *mean = sh_in(g, node, 3);
  char b[256];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X")) return -1;
  if (x->shape.rank < 2) SH_FAIL("input X must be [N, C, ...], it has shape %s", sh_str(&x->shape, b, sizeof b));
  int64_t C = x->shape.dims[1];
  static const char *nm[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; i++)
    if (check_vec(g, node, i, nm[i], C, i == 4 ? mean : NULL)) return -1;
  if (n->opset < 15 && sh_same_dtype(g, node, x, sh_in(g, node, 1), "input X", "scale")) return -1;
  n->flops = 4 * sh_numel(&x->shape);
  ir_shape vc = {0};
  vc.rank = 1;
  vc.dims[0] = C;
  if (sh_set_out(g, node, 0, x->dtype, &x->shape)) return -1;
  for (int i = 1; i < n->n_out; i++)
    if (sh_set_out(g, node, i, mean->dtype, &vc)) return -1;
  return 0;
}

/* InstanceNormalization-6: X [N, C, D...], scale and B [C]. */
int sh_InstanceNormalization(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  char b[256];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input")) return -1;
  if (x->shape.rank < 3) SH_FAIL("input must be [N, C, D...], it has shape %s", sh_str(&x->shape, b, sizeof b));
  if (check_vec(g, node, 1, "scale", x->shape.dims[1], x) || check_vec(g, node, 2, "B", x->shape.dims[1], x)) return -1;
  SH_NODE->flops = 5 * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* LayerNormalization-17: normalise over dims [axis, rank); Scale and B broadcast to
 * them. Mean and InvStdDev: X's shape with dims from axis on set to 1, dtype from
 * stash_type (default float). */
int sh_LayerNormalization(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X")) return -1;
  int r = x->shape.rank, ax;
  if (r < 1) SH_FAIL("input X must have rank >= 1");
  if (sh_axis(g, node, ir_attr_int(n, "axis", -1), r, "axis", &ax)) return -1;
  ir_shape norm = {0};
  for (int i = ax; i < r; i++) norm.dims[norm.rank++] = x->shape.dims[i];
  for (int i = 1; i < 3; i++) {
    ir_value *v = sh_in(g, node, i);
    if (!v) continue;
    if (sh_same_dtype(g, node, x, v, "input X", i == 1 ? "Scale" : "B")) return -1;
    /* onnxruntime also accepts Scale/B broadcastable to all of X */
    if (sh_unibroadcast(g, node, v->shape.rank <= norm.rank ? &norm : &x->shape, &v->shape, "the normalised dims",
                        i == 1 ? "Scale" : "B"))
      return -1;
  }
  int64_t st = ir_attr_int(n, "stash_type", 1);
  if (st <= IR_UNDEFINED || st >= IR_DTYPE_COUNT || !(SH_BIT(st) & SH_FLOATS))
    SH_FAIL("attribute 'stash_type' is %" PRId64 ", not a floating-point type", st);
  n->flops = 8 * sh_numel(&x->shape);
  if (sh_set_out(g, node, 0, x->dtype, &x->shape)) return -1;
  ir_shape st_shape = x->shape;
  for (int i = ax; i < r; i++) st_shape.dims[i] = 1;
  if (sh_set_out(g, node, 1, (ir_dtype)st, &st_shape)) return -1;
  return sh_set_out(g, node, 2, (ir_dtype)st, &st_shape);
}

/* LRN-13: output has X's shape; 'size' is required. */
int sh_LRN(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  char b[256];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X")) return -1;
  if (x->shape.rank < 2) SH_FAIL("input X must be [N, C, ...], it has shape %s", sh_str(&x->shape, b, sizeof b));
  int64_t size = ir_attr_int(SH_NODE, "size", 0);
  if (size < 1) SH_FAIL("attribute 'size' is required and must be >= 1");
  SH_NODE->flops = (double)(size + 4) * sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* Dropout-13 (ratio and training_mode inputs since 12): output has data's shape; the
 * mask is bool since opset 10 (data's type in Dropout-7). */
int sh_Dropout(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  char b[256];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input 'data'")) return -1;
  ir_value *ratio = sh_in(g, node, 1), *tm = sh_in(g, node, 2);
  if (ratio && (ir_shape_numel(&ratio->shape) != 1 || !(SH_BIT(ratio->dtype) & SH_FLOATS)))
    SH_FAIL("input 'ratio' must be a floating-point scalar, it is %s %s", ir_dtype_name(ratio->dtype),
            sh_str(&ratio->shape, b, sizeof b));
  if (tm && (ir_shape_numel(&tm->shape) != 1 || tm->dtype != IR_BOOL))
    SH_FAIL("input 'training_mode' must be a bool scalar, it is %s %s", ir_dtype_name(tm->dtype),
            sh_str(&tm->shape, b, sizeof b));
  n->flops = sh_numel(&x->shape);
  if (sh_set_out(g, node, 0, x->dtype, &x->shape)) return -1;
  return sh_set_out(g, node, 1, n->opset >= 10 ? IR_BOOL : x->dtype, &x->shape);
}
