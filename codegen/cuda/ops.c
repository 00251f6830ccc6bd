/* codegen/cuda/ops.c - the non-element-wise ops of the cuda target. Each emitter
 * writes its node's parameter table (file scope) and the calls into the device
 * runtime (pipecc_cuda.h) that run it:
 *   Conv                    cuDNN (table entry set up once in init; groups, dilations,
 *                           pads; asymmetric pads pre-padded into scratch), bias kernel
 *                           or the fused epilogue pass; channels-last 1x1 stride-1 Convs
 *                           as cuBLASLt GEMMs with bias, residual and Relu in the
 *                           GEMM's epilogue (pk_conv_1x1)
 *   ConvTranspose           cuDNN backward data with the node's weight as the filter
 *                           (asymmetric pads or output padding cuDNN cannot express:
 *                           computed unpadded into scratch, then cropped), bias kernel
 *   Gemm, MatMul            cuBLAS strided-batched GEMM (TF32 unless --no-tf32)
 *   pooling, Softmax family, LayerNormalization, InstanceNormalization,
 *   BatchNormalization (inference and training mode), Reduce*   runtime kernels
 *   Transpose               a batch of 2-D transposes in tiles (pk_transpose) where the
 *                           perm swaps two groups of dims, else a strided copy
 *   Slice, Pad, Tile, Gather, Concat, Split, DepthToSpace, SpaceToDepth,
 *   copies, Shape, Size, ConstantOfShape, Dropout   strided copies / memcpy2D / fills
 *   GatherElements, GatherND, ScatterElements, ScatterND, OneHot, CumSum, CumProd, ArgMax,
 *   ArgMin, TopK, Trilu, Range, Resize, Upsample, LRN   runtime kernels (scatters
 *                           deterministic: see pk_scatter; MaxPool's gradient through its
 *                           Indices as pk_maxpool_scatter)
 * Shapes are constants in the emitted code. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/cg_cuda.h"
#include "codegen/cuda/rt/pipecc_cuda_limits.h"
#include "codegen/op_params.h"
#include "codegen/rnn_expr.h"
#include "passes/lower/lower_llm.h"
#include "passes/opt/fuse.h"
#include "passes/opt/layout.h"
#include "passes/rnn.h"

#define LL(x) ((long long)(x))

static int norm_axis(int64_t a, int r) { return (int)(a < 0 ? a + r : a); }
static const char *dt_name(ir_dtype t) { return t == IR_DOUBLE ? "PK_F64" : "PK_F32"; }

/* The runtime's element type code of t, NULL where the runtime has none. */
static const char *pk_type(ir_dtype t) {
  switch (t) {
    case IR_FLOAT: return "PK_F32";
    case IR_DOUBLE: return "PK_F64";
    case IR_INT32: return "PK_I32";
    case IR_INT64: return "PK_I64";
    case IR_INT16: return "PK_I16";
    case IR_INT8: return "PK_I8";
    case IR_UINT8: return "PK_U8";
    case IR_BOOL: return "PK_BOOL";
    default: return NULL;
  }
}

/* float32, float64, int32 or int64: the types of the runtime's numeric kernels. */
static int need_numeric(cu_ctx *c, const ir_node *n, ir_dtype t) {
  if (t == IR_FLOAT || t == IR_DOUBLE || t == IR_INT32 || t == IR_INT64) return 0;
  return cu_fail(c, n, "%s on %s is not supported by the cuda target", ir_op_name(n->op), ir_dtype_name(t));
}

/* Indices must be int32 or int64: returns 1 for int64, 0 for int32, -1 after the error. */
static int index_type(cu_ctx *c, const ir_node *n, const ir_value *ix) {
  if (ix->dtype == IR_INT64) return 1;
  if (ix->dtype == IR_INT32) return 0;
  return cu_fail(c, n, "indices must be int32 or int64");
}

/* [outer, dims[axis], inner] around axis of v. */
static void split_at(const ir_value *v, int axis, int64_t *outer, int64_t *a, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= v->shape.dims[i];
  for (int i = axis + 1; i < v->shape.rank; i++) *inner *= v->shape.dims[i];
  *a = v->shape.dims[axis];
}

/* A constant input's integers (cg_const_ints of the cpu target): count, or -1. */
static int const_ints(cu_ctx *c, const ir_node *n, int slot, int64_t *out, int max) {
  cg_ctx cc = {0};
  cc.g = c->g;
  return cg_const_ints(&cc, n, slot, out, max);
}

/* Values are float32 for the runtime kernels (pooling, normalisation, reductions). */
static int need_float(cu_ctx *c, const ir_node *n, ir_dtype t) {
  if (t == IR_FLOAT) return 0;
  return cu_fail(c, n, "%s on %s is not supported by the cuda target (float32 only)", ir_op_name(n->op),
                 ir_dtype_name(t));
}

static void put_i64s(cu_ctx *c, const int64_t *v, int n) {
  cu_decl(c, "{");
  for (int i = 0; i < n; i++) cu_decl(c, "%s%lld", i ? ", " : "", LL(v[i]));
  if (!n) cu_decl(c, "0");
  cu_decl(c, "}");
}

/* A pk_copy_p table named cp<node> and its call. */
static void emit_copy_call(cu_ctx *c, const ir_node *n, int tag, int esize, int rank, int mode, int64_t base,
                           const int64_t *ydims, const int64_t *xs, const int64_t *xd, const int64_t *pb,
                           uint64_t value, const char *x, const char *y) {
  int64_t one[IR_MAX_RANK], zero[IR_MAX_RANK];
  for (int i = 0; i < IR_MAX_RANK; i++) one[i] = 1, zero[i] = 0;
  if (rank == 0) {
    rank = 1;
    ydims = one, xs = zero;
  }
  int node = (int)(n - c->g->nodes);
  cu_decl(c, "static const pk_copy_p cp%d_%d = {%d, %d, %d, %lld, ", node, tag, esize, rank, mode, LL(base));
  put_i64s(c, ydims, rank);
  cu_decl(c, ", ");
  put_i64s(c, xs, rank);
  cu_decl(c, ", ");
  put_i64s(c, xd ? xd : one, rank);
  cu_decl(c, ", ");
  put_i64s(c, pb ? pb : zero, rank);
  cu_decl(c, ", 0x%llxull};\n", (unsigned long long)value);
  cu_w(c, "  PK_TRY(pk_copy(S, &cp%d_%d, %s, %s));\n", node, tag, x, y);
}

/* ---- windows: Conv, pooling (codegen/op_params.c, shared with the cpu target) ---- */

static int window(cu_ctx *c, const ir_node *n, const ir_value *x, const ir_value *y, const int64_t *kernel,
                  cg_win3 *w) {
  return cg_window(c->g, "cuda", n, x, y, kernel, 0, w);
}

/* One entry of the stage's convolution table (set up in init). */
static void put_conv_entry(cu_ctx *c, const ir_node *n, ir_dtype t, const cg_win3 *w, int64_t N, int64_t C, int64_t M,
                           int64_t G, int transposed) {
  fprintf(c->conv,
          "  {%s, %d, %lld, %lld, %lld, %lld, {%lld, %lld, %lld}, {%lld, %lld, %lld}, {%lld, %lld, %lld}, "
          "{%lld, %lld, %lld}, {%lld, %lld, %lld}, {%lld, %lld, %lld}, %d, %d}, /* node %d */\n",
          dt_name(t), w->sr, LL(N), LL(C), LL(M), LL(G), LL(w->in[0]), LL(w->in[1]), LL(w->in[2]), LL(w->out[0]),
          LL(w->out[1]), LL(w->out[2]), LL(w->k[0]), LL(w->k[1]), LL(w->k[2]), LL(w->s[0]), LL(w->s[1]), LL(w->s[2]),
          LL(w->d[0]), LL(w->d[1]), LL(w->d[2]), LL(w->pb[0]), LL(w->pb[1]), LL(w->pb[2]), transposed,
          pass_layout_is_nhwc(n), n->index);
}

/* A channels-last 2-D float Conv that is a plain GEMM over its positions: 1x1 kernel,
 * stride 1, no padding, one group (pk_conv_1x1). */
static int conv_is_gemm(int nhwc, ir_dtype t, int64_t G, const cg_win3 *w) {
  if (!nhwc || t != IR_FLOAT || G != 1) return 0;
  for (int j = 0; j < 3; j++)
    if (w->k[j] != 1 || w->s[j] != 1 || w->pb[j] || w->pe[j]) return 0;
  return 1;
}

/* A float32 NCHW Conv of one group on at most 4 input channels (a network's stem), 1-D or
 * 2-D, no dilation, inside pk_conv_direct's limits (pk_dc_fits, codegen/cuda/rt/pipecc_cuda_limits.h):
 * pk_conv_direct. With 16 output channels or fewer cuDNN keeps it (the kernel computes 32
 * at a time). */
static int conv_is_direct(int nhwc, ir_dtype t, int64_t N, int64_t C, int64_t M, int64_t G, const cg_win3 *w) {
  if (nhwc || t != IR_FLOAT || G != 1 || w->sr > 2 || C > 4 || M <= 16) return 0;
  for (int j = 0; j < 3; j++)
    if (w->d[j] != 1 || w->s[j] < 1) return 0;
  return pk_dc_fits(N, C, M, w->k[1], w->k[2], w->s[1], w->s[2]);
}

/* v's shape [N, H, W, C] as [N, C, H, W] */
static ir_value nchw_view(const ir_value *v) {
  ir_value r = *v;
  r.shape = pass_layout_permuted(&v->shape, 0);
  return r;
}

static int emit_conv(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *wt = ir_in(g, n, 1), *b = ir_in(g, n, 2), *y = ir_out(g, n, 0);
  ir_dtype t = y->dtype;
  /* channels-last (passes/opt/layout.h): x, y and the residual [N, H, W, C], the filter
   * [M, kh, kw, C/group]; the window and the table entry see them as NCHW */
  int nhwc = pass_layout_is_nhwc(n);
  ir_value *xmem = x, xv, yv, wv;
  if (nhwc) {
    if (x->shape.rank != 4 || y->shape.rank != 4 || wt->shape.rank != 4 || t != IR_FLOAT)
      return cu_fail(c, n, "a channels-last Conv must be 2-D float32");
    xv = nchw_view(x), yv = nchw_view(y), wv = nchw_view(wt);
    x = &xv, y = &yv, wt = &wv;
  }
  if (t != IR_FLOAT && t != IR_DOUBLE) return cu_fail(c, n, "Conv on %s is not supported", ir_dtype_name(t));
  int64_t kernel[3] = {1, 1, 1};
  for (int i = 0; i < x->shape.rank - 2 && i < 3; i++) kernel[i] = wt->shape.dims[2 + i];
  cg_win3 w;
  if (window(c, n, x, y, kernel, &w)) return -1;
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], M = y->shape.dims[1], G = ir_attr_int(n, "group", 1);
  if (G < 1 || C % G || M % G) return cu_fail(c, n, "group %lld does not divide the channels", LL(G));
  if (wt->shape.dims[1] != C / G || wt->shape.dims[0] != M)
    return cu_fail(c, n, "weight shape does not match the input");
  if (cg_numel(y) == 0) return 0;
  if (cg_numel(x) >= ((int64_t)1 << 31) || cg_numel(y) >= ((int64_t)1 << 31))
    return cu_fail(c, n, "tensors of 2^31 elements or more are not supported by cuDNN here");
  const char *xin = c->x[0];
  char padded[96];
  int asym = 0;
  for (int j = 0; j < 3; j++) asym |= w.pb[j] != w.pe[j];
  if (asym) {
    /* cuDNN pads symmetrically: pad the input into scratch first */
    int r = xmem->shape.rank;
    int64_t yd[IR_MAX_RANK], xs[IR_MAX_RANK], pb[IR_MAX_RANK] = {0};
    cg_strides(&xmem->shape, xs);
    for (int d = 0; d < r; d++) yd[d] = xmem->shape.dims[d];
    for (int j = 3 - w.sr; j < 3; j++) {
      int d = (nhwc ? 1 : 2) + j - (3 - w.sr); /* the spatial dims in memory */
      yd[d] += w.pb[j] + w.pe[j];
      pb[d] = w.pb[j];
      w.in[j] += w.pb[j] + w.pe[j];
      w.pb[j] = w.pe[j] = 0;
    }
    int64_t cnt = 1;
    for (int d = 0; d < r; d++) cnt *= yd[d];
    size_t es = ir_dtype_size(t);
    cu_scratch(c, (size_t)cnt * es);
    snprintf(padded, sizeof padded, "(%s *)(A + SCRATCH_OFF)", cg_ctype(t));
    emit_copy_call(c, n, 0, (int)es, r, 1 /* PK_PAD_CONST, value 0 */, 0, yd, xs, xmem->shape.dims, pb, 0, xin, padded);
    xin = padded;
  }
  put_conv_entry(c, n, t, &w, N, C, M, G, 0);
  cu_w(c, "  /* N=%lld C=%lld M=%lld group=%lld in=%lldx%lldx%lld out=%lldx%lldx%lld kernel=%lldx%lldx%lld%s */\n",
       LL(N), LL(C), LL(M), LL(G), LL(w.in[0]), LL(w.in[1]), LL(w.in[2]), LL(w.out[0]), LL(w.out[1]), LL(w.out[2]),
       LL(w.k[0]), LL(w.k[1]), LL(w.k[2]), nhwc ? ", channels-last (NHWC, filter KRSC)" : "");
  /* the epilogue passes/opt/fuse.c folded in (Add of a residual, Relu/Clip): one pass with the
   * bias, whose channel is (i / sp) % M: channels-last is sp = 1 over N * spatial rows */
  int64_t sp = w.out[0] * w.out[1] * w.out[2];
  float lo, hi;
  int act = pass_fused_act(n, &lo, &hi), bits = 0;
  const char *res = n->n_in > 3 && n->in[3] >= 0 ? c->x[3] : NULL;
  if (act == 1) bits = 1;
  if (act == 2) bits = (isfinite(lo) ? 1 : 0) | (isfinite(hi) ? 2 : 0);
  if ((act || res) && t != IR_FLOAT) return cu_fail(c, n, "a fused epilogue on a %s Conv", ir_dtype_name(t));
  const char *fused = act || res ? ir_attr_str(n, "pipecc.fused", NULL) : NULL;
  if (fused) {
    cu_w(c, "  /* fused: ");
    cg_put_comment(c->call, fused, 600);
    cu_w(c, " */\n");
  }
  char l1[48], l2[48];
  cg_flit(l1, sizeof l1, bits & 1 ? lo : 0, IR_FLOAT);
  cg_flit(l2, sizeof l2, bits & 2 ? hi : 0, IR_FLOAT);
  if (conv_is_gemm(nhwc, t, G, &w)) {
    cu_w(c,
         "  /* 1x1, stride 1, channels-last: the GEMM y[N*H*W, M] = x[N*H*W, C] W[M, C]^T, bias, residual and Relu "
         "in cuBLASLt's epilogue */\n");
    cu_w(c, "  PK_TRY(pk_conv_1x1(S, %d, %s, %s, %s, %s, %s, %lld, %lld, %lld, %d, %s, %s));\n", c->n_conv, xin,
         c->x[1], b ? c->x[2] : "NULL", res ? res : "NULL", c->y[0], LL(N * sp), LL(C), LL(M), bits, l1, l2);
    c->n_conv++;
    return 0;
  }
  if (conv_is_direct(nhwc, t, N, C, M, G, &w)) {
    cu_w(c,
         "  /* few input channels: a direct kernel, the bias, residual and Relu/Clip in it (pk_conv_direct; "
         "PIPECC_CONV_DIRECT=0: cuDNN) */\n");
    cu_w(c, "  PK_TRY(pk_conv_direct(S, %d, %s, %s, %s, %s, %s, %d, %s, %s));\n", c->n_conv, xin, c->x[1],
         b ? c->x[2] : "NULL", res ? res : "NULL", c->y[0], bits, l1, l2);
    c->n_conv++;
    return 0;
  }
  cu_w(c, "  PK_TRY(pk_conv(S, %d, %s, %s, %s));\n", c->n_conv, xin, c->x[1], c->y[0]);
  c->n_conv++;
  if (act || res) {
    cu_w(c, "  PK_TRY(pk_conv_epi(S, %s, %s, %s, %lld, %lld, %lld, %d, %s, %s));\n", c->y[0], b ? c->x[2] : "NULL",
         res ? res : "NULL", LL(nhwc ? N * sp : N), LL(M), LL(nhwc ? 1 : sp), bits, l1, l2);
  } else if (b)
    cu_w(c, "  PK_TRY(pk_bias(S, %s, %s, %s, %lld, %lld, %lld));\n", dt_name(t), c->y[0], c->x[2],
         LL(nhwc ? N * sp : N), LL(M), LL(nhwc ? 1 : sp));
  return 0;
}

/* ConvTranspose: cudnnConvolutionBackwardData (see pk_conv_p). cuDNN pads both ends
 * alike and derives the forward output size from the padded one; where that does not
 * give this node's input size (asymmetric pads, output padding of a stride or more),
 * the whole unpadded result (in - 1) * s + (k - 1) * d + 1 goes to scratch and a copy
 * crops pads[begin] off the front, zeros where the output runs past it. */
static int emit_conv_transpose(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *wt = ir_in(g, n, 1), *b = ir_in(g, n, 2), *y = ir_out(g, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE) return cu_fail(c, n, "ConvTranspose on %s is not supported", ir_dtype_name(t));
  int64_t kernel[3] = {1, 1, 1};
  for (int i = 0; i < x->shape.rank - 2 && i < 3; i++) kernel[i] = wt->shape.dims[2 + i];
  cg_win3 w;
  if (cg_conv_transpose_window(g, "cuda", n, x, y, kernel, &w)) return -1;
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], M = y->shape.dims[1], G = ir_attr_int(n, "group", 1);
  if (G < 1 || C % G || M % G) return cu_fail(c, n, "group %lld does not divide the channels", LL(G));
  if (wt->shape.dims[0] != C || wt->shape.dims[1] != M / G)
    return cu_fail(c, n, "weight shape does not match the input");
  for (int j = 0; j < 3; j++)
    if (w.s[j] < 1 || w.d[j] < 1) return cu_fail(c, n, "strides and dilations must be positive");
  if (cg_numel(y) == 0) return 0;
  size_t es = ir_dtype_size(t);
  if (cg_numel(x) == 0) { /* no input: the bias (or zeros) */
    cu_w(c, "  PK_TRY(pk_fill(S, %s, %d, 0, %lld));\n", c->y[0], (int)es, LL(cg_numel(y)));
  } else {
    int direct = 1;
    int64_t full[3];
    for (int j = 0; j < 3; j++) {
      int64_t keff = (w.k[j] - 1) * w.d[j] + 1, span = w.out[j] + 2 * w.pb[j] - keff;
      direct &= w.pb[j] == w.pe[j] && span >= 0 && span / w.s[j] + 1 == w.in[j];
      full[j] = (w.in[j] - 1) * w.s[j] + keff;
    }
    int64_t fullnum = N * M * full[0] * full[1] * full[2];
    if (cg_numel(x) >= ((int64_t)1 << 31) || cg_numel(y) >= ((int64_t)1 << 31) ||
        (!direct && fullnum >= ((int64_t)1 << 31)))
      return cu_fail(c, n, "tensors of 2^31 elements or more are not supported by cuDNN here");
    cu_w(c, "  /* N=%lld C=%lld M=%lld group=%lld in=%lldx%lldx%lld out=%lldx%lldx%lld kernel=%lldx%lldx%lld%s */\n",
         LL(N), LL(C), LL(M), LL(G), LL(w.in[0]), LL(w.in[1]), LL(w.in[2]), LL(w.out[0]), LL(w.out[1]), LL(w.out[2]),
         LL(w.k[0]), LL(w.k[1]), LL(w.k[2]), direct ? "" : ", unpadded into scratch, then cropped");
    if (direct) {
      put_conv_entry(c, n, t, &w, N, C, M, G, 1);
      cu_w(c, "  PK_TRY(pk_conv(S, %d, %s, %s, %s));\n", c->n_conv, c->x[0], c->x[1], c->y[0]);
    } else {
      cg_win3 wf = w;
      for (int j = 0; j < 3; j++) wf.out[j] = full[j], wf.pb[j] = wf.pe[j] = 0;
      put_conv_entry(c, n, t, &wf, N, C, M, G, 1);
      cu_scratch(c, (size_t)fullnum * es);
      char tmp[96];
      snprintf(tmp, sizeof tmp, "(%s *)(A + SCRATCH_OFF)", cg_ctype(t));
      cu_w(c, "  PK_TRY(pk_conv(S, %d, %s, %s, %s));\n", c->n_conv, c->x[0], c->x[1], tmp);
      int r = y->shape.rank;
      int64_t fd[IR_MAX_RANK], fs[IR_MAX_RANK], pb[IR_MAX_RANK] = {0};
      fd[0] = N, fd[1] = M;
      for (int d = 2; d < r; d++) {
        int j = 3 - w.sr + d - 2;
        fd[d] = full[j];
        pb[d] = -w.pb[j]; /* y[o] = full[o + pads_begin] */
      }
      int64_t acc = 1;
      for (int d = r - 1; d >= 0; d--) fs[d] = acc, acc *= fd[d];
      emit_copy_call(c, n, 0, (int)es, r, 1 /* PK_PAD_CONST, value 0 */, 0, y->shape.dims, fs, fd, pb, 0, tmp, c->y[0]);
    }
    c->n_conv++;
  }
  if (b)
    cu_w(c, "  PK_TRY(pk_bias(S, %s, %s, %s, %lld, %lld, %lld));\n", dt_name(t), c->y[0], c->x[2], LL(N), LL(M),
         LL(w.out[0] * w.out[1] * w.out[2]));
  return 0;
}

/* ---- Gemm, MatMul ---------------------------------------------------------------------- */

static int emit_gemm(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *a = ir_in(g, n, 0), *b = ir_in(g, n, 1), *cc = ir_in(g, n, 2), *y = ir_out(g, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE) return cu_fail(c, n, "Gemm on %s is not supported", ir_dtype_name(t));
  if (a->shape.rank != 2 || b->shape.rank != 2) return cu_fail(c, n, "Gemm needs 2-D inputs");
  int ta = (int)ir_attr_int(n, "transA", 0), tb = (int)ir_attr_int(n, "transB", 0);
  double alpha = ir_attr_float(n, "alpha", 1.0f), beta = ir_attr_float(n, "beta", 1.0f);
  int64_t M = ta ? a->shape.dims[1] : a->shape.dims[0], K = ta ? a->shape.dims[0] : a->shape.dims[1];
  int64_t N = tb ? b->shape.dims[0] : b->shape.dims[1];
  if (M * N == 0) return 0;
  int use_c = cc && beta != 0.0;
  size_t es = ir_dtype_size(t);
  if (use_c) {
    /* Y = broadcast(C), then Y = alpha A B + beta Y */
    int r = cc->shape.rank;
    int64_t d0 = r >= 2 ? cc->shape.dims[r - 2] : 1, d1 = r >= 1 ? cc->shape.dims[r - 1] : 1;
    int64_t yd[2] = {M, N}, xs[2] = {d0 != 1 ? d1 : 0, d1 != 1 ? 1 : 0};
    emit_copy_call(c, n, 0, (int)es, 2, 0, 0, yd, xs, NULL, NULL, 0, c->x[2], c->y[0]);
  }
  if (K == 0) {
    if (!use_c) cu_w(c, "  PK_TRY(pk_fill(S, %s, %d, 0, %lld));\n", c->y[0], (int)es, LL(M * N));
    return 0;
  }
  cu_w(c,
       "  PK_TRY(pk_gemm(S, %s, %d, %d, %lld, %lld, %lld, %.17g, %s, %lld, 0, %s, %lld, 0, %.17g, %s, %lld, 0, 1));\n",
       dt_name(t), ta, tb, LL(M), LL(N), LL(K), alpha, c->x[0], LL(ta ? M : K), c->x[1], LL(tb ? K : N),
       use_c ? beta : 0.0, c->y[0], LL(N));
  return 0;
}

static int emit_matmul(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *y = ir_out(g, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE) return cu_fail(c, n, "MatMul on %s is not supported", ir_dtype_name(t));
  cg_matmul mm;
  if (cg_matmul_params(c->g, "cuda", n, &mm)) return -1;
  if (mm.pa || mm.pb) return cu_fail(c, n, "a Transpose folded into a MatMul (the cpu target's pass)");
  int64_t M = mm.M, K = mm.K, N = mm.N, NB = mm.NB;
  int nb = mm.nb;
  const int64_t *bd = mm.bd, *sa = mm.sa, *sb = mm.sb;
  if (cg_numel(y) == 0) return 0;
  size_t es = ir_dtype_size(t);
  if (K == 0) {
    cu_w(c, "  PK_TRY(pk_fill(S, %s, %d, 0, %lld));\n", c->y[0], (int)es, LL(cg_numel(y)));
    return 0;
  }
  int a_full = 1, a_zero = 1, b_full = 1, b_zero = 1;
  for (int i = 0; i < nb; i++) {
    if (bd[i] == 1) continue;
    a_full &= sa[i] != 0, a_zero &= sa[i] == 0;
    b_full &= sb[i] != 0, b_zero &= sb[i] == 0;
  }
  const char *T = dt_name(t);
  if (b_zero && a_full) {
    /* B is one matrix and A's batch is contiguous: one GEMM with M' = batch * M */
    cu_w(c, "  PK_TRY(pk_gemm(S, %s, 0, 0, %lld, %lld, %lld, 1, %s, %lld, 0, %s, %lld, 0, 0, %s, %lld, 0, 1));\n", T,
         LL(NB * M), LL(N), LL(K), c->x[0], LL(K), c->x[1], LL(N), c->y[0], LL(N));
    return 0;
  }
  if ((a_full || a_zero) && (b_full || b_zero)) {
    cu_w(
        c,
        "  PK_TRY(pk_gemm(S, %s, 0, 0, %lld, %lld, %lld, 1, %s, %lld, %lld, %s, %lld, %lld, 0, %s, %lld, %lld, %lld));\n",
        T, LL(M), LL(N), LL(K), c->x[0], LL(K), LL(a_zero ? 0 : M * K), c->x[1], LL(N), LL(b_zero ? 0 : K * N), c->y[0],
        LL(N), LL(M * N), LL(NB));
    return 0;
  }
  /* mixed broadcasting: one GEMM per batch element */
  cu_w(c, "  for (long long bi = 0; bi < %lld; bi++) {\n    long long rem = bi, ao = 0, bo = 0;\n", LL(NB));
  for (int i = nb - 1; i >= 0; i--)
    cu_w(c, "    { const long long q = rem %% %lld; rem /= %lld; ao += q * %lld; bo += q * %lld; }\n", LL(bd[i]),
         LL(bd[i]), LL(sa[i]), LL(sb[i]));
  cu_w(
      c,
      "    PK_TRY(pk_gemm(S, %s, 0, 0, %lld, %lld, %lld, 1, %s + ao, %lld, 0, %s + bo, %lld, 0, 0, %s + bi * %lld, %lld, 0, 1));\n",
      T, LL(M), LL(N), LL(K), c->x[0], LL(K), c->x[1], LL(N), c->y[0], LL(M * N), LL(N));
  cu_w(c, "  }\n");
  return 0;
}

/* ---- pooling ------------------------------------------------------------------------------ */

static int emit_pool(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0), *yi = ir_out(g, n, 1);
  int is_max = n->op == IR_OP_MaxPool || n->op == IR_OP_GlobalMaxPool;
  if (!(is_max && (y->dtype == IR_INT8 || y->dtype == IR_UINT8)) && need_float(c, n, y->dtype)) return -1;
  /* channels-last (passes/opt/layout.h): the window sees NCHW; the kernel walks channels innermost */
  int64_t cl = 0;
  ir_value xv, yv;
  if (pass_layout_is_nhwc(n)) {
    if (x->shape.rank != 4 || y->shape.rank != 4 || yi) return cu_fail(c, n, "a channels-last pooling must be 2-D");
    xv = nchw_view(x), yv = nchw_view(y);
    x = &xv, y = &yv;
    cl = x->shape.dims[1];
  }
  int sr = x->shape.rank - 2;
  cg_win3 w;
  if (cg_pool_window(c->g, "cuda", n, x, y, &w)) return -1;
  if (cg_numel(y) == 0) return 0;
  int is_lp = n->op == IR_OP_LpPool || n->op == IR_OP_GlobalLpPool;
  int col_major = (int)ir_attr_int(n, "storage_order", 0);
  if (yi && col_major && sr != 2) return cu_fail(c, n, "storage_order=1 is supported for 2-D pooling only");
  if (yi && yi->dtype != IR_INT64) return cu_fail(c, n, "Indices must be int64");
  int node = (int)(n - g->nodes);
  cu_decl(c, "static const pk_pool_p pool%d = {%s, %s, %d, %d, %.17g, %lld, ", node,
          is_max  ? "PK_POOL_MAX"
          : is_lp ? "PK_POOL_LP"
                  : "PK_POOL_AVG",
          pk_type(y->dtype), (int)ir_attr_int(n, "count_include_pad", 0), col_major, (double)ir_attr_int(n, "p", 2),
          LL(x->shape.dims[0] * x->shape.dims[1]));
  put_i64s(c, w.in, 3), cu_decl(c, ", ");
  put_i64s(c, w.out, 3), cu_decl(c, ", ");
  put_i64s(c, w.k, 3), cu_decl(c, ", ");
  put_i64s(c, w.s, 3), cu_decl(c, ", ");
  put_i64s(c, w.d, 3), cu_decl(c, ", ");
  put_i64s(c, w.pb, 3), cu_decl(c, ", ");
  put_i64s(c, w.pe, 3), cu_decl(c, ", %lld};\n", LL(cl));
  cu_w(c, "  PK_TRY(pk_pool(S, &pool%d, %s, %s, %s));\n", node, c->x[0], c->y[0], yi ? c->y[1] : "NULL");
  return 0;
}

/* ---- normalisation --------------------------------------------------------------------------- */

static int emit_batchnorm(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  if (need_float(c, n, y->dtype)) return -1;
  for (int k = 1; k < 5; k++)
    if (ir_in(g, n, k)->dtype != IR_FLOAT) return cu_fail(c, n, "scale, bias, mean and var must be float32");
  double eps = ir_attr_float(n, "epsilon", 1e-5f), mom = ir_attr_float(n, "momentum", 0.9f);
  int64_t N = x->shape.dims[0], C = x->shape.rank > 1 ? x->shape.dims[1] : 1, Sp = 1;
  for (int i = 2; i < x->shape.rank; i++) Sp *= x->shape.dims[i];
  if (pass_layout_is_nhwc(n)) { /* [N, H, W, C] (passes/opt/layout.h): rows of C channels */
    if (x->shape.rank != 4 || ir_attr_int(n, "training_mode", 0))
      return cu_fail(c, n, "a channels-last BatchNormalization must be 4-D inference");
    N = x->shape.dims[0] * x->shape.dims[1] * x->shape.dims[2], C = x->shape.dims[3], Sp = 1;
  }
  if (cg_numel(y) == 0) return 0;
  if (!ir_attr_int(n, "training_mode", 0))
    cu_w(c, "  PK_TRY(pk_batchnorm(S, %s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %.9g));\n", c->x[0], c->x[1], c->x[2],
         c->x[3], c->x[4], c->y[0], LL(N), LL(C), LL(Sp), eps);
  else
    cu_w(c, "  PK_TRY(pk_batchnorm_train(S, %s, %s, %s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %.9g, %.9g));\n", c->x[0],
         c->x[1], c->x[2], c->x[3], c->x[4], c->y[0], ir_out(g, n, 1) ? c->y[1] : "NULL",
         ir_out(g, n, 2) ? c->y[2] : "NULL", LL(N), LL(C), LL(Sp), eps, mom);
  return 0;
}

static int emit_layernorm(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *bi = ir_in(g, n, 2), *y = ir_out(g, n, 0);
  ir_value *ym = ir_out(g, n, 1), *yr = ir_out(g, n, 2);
  if (need_float(c, n, y->dtype)) return -1;
  if ((ym && ym->dtype != IR_FLOAT) || (yr && yr->dtype != IR_FLOAT))
    return cu_fail(c, n, "Mean and InvStdDev must be float32");
  double eps = ir_attr_float(n, "epsilon", 1e-5f);
  int64_t outer, inner, ns, nb;
  if (cg_layernorm_params(c->g, "cuda", n, &outer, &inner, &ns, &nb)) return -1;
  if (cg_numel(y) == 0) return 0;
  cu_w(c, "  PK_TRY(pk_layernorm(S, %s, %s, %lld, %s, %lld, %s, %s, %s, %lld, %lld, %.9g, 0));\n", c->x[0], c->x[1],
       LL(ns), bi ? c->x[2] : "NULL", LL(nb), c->y[0], ym ? c->y[1] : "NULL", yr ? c->y[2] : "NULL", LL(outer),
       LL(inner), eps);
  return 0;
}

static int emit_instnorm(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0);
  if (need_float(c, n, y->dtype)) return -1;
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], Sp = 1;
  for (int i = 2; i < x->shape.rank; i++) Sp *= x->shape.dims[i];
  if (cg_numel(y) == 0) return 0;
  cu_w(c, "  PK_TRY(pk_layernorm(S, %s, %s, %lld, %s, %lld, %s, NULL, NULL, %lld, %lld, %.9g, 1));\n", c->x[0], c->x[1],
       LL(C), c->x[2], LL(C), c->y[0], LL(N * C), LL(Sp), (double)ir_attr_float(n, "epsilon", 1e-5f));
  return 0;
}

static int emit_softmax(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *y = ir_out(g, n, 0);
  if (need_float(c, n, y->dtype)) return -1;
  int64_t outer, A, inner;
  if (cg_softmax_params(c->g, "cuda", n, &outer, &A, &inner)) return -1;
  if (cg_numel(y) == 0) return 0;
  const char *kind = n->op == IR_OP_Softmax ? "PK_SOFTMAX" : n->op == IR_OP_LogSoftmax ? "PK_LOGSOFTMAX" : "PK_HARDMAX";
  cu_w(c, "  PK_TRY(pk_softmax(S, %s, %s, %s, %lld, %lld, %lld));\n", kind, c->x[0], c->y[0], LL(outer), LL(A),
       LL(inner));
  return 0;
}

/* Attention (inference without the qk output; passes/lower/lower_llm.c): pk_attention,
 * the fused kernel of the runtime */
static int emit_attention(cu_ctx *c, const ir_node *n) {
  llm_attn_plan p;
  if (llm_attn_plan_of(c->g, (int)(n - c->g->nodes), &p)) return -1;
  const llm_attn_dims *d = &p.d;
  if (ir_in(c->g, n, 0)->dtype != IR_FLOAT)
    return cu_fail(c, n, "Attention on %s is not supported by the cuda target",
                   ir_dtype_name(ir_in(c->g, n, 0)->dtype));
  if (d->Dv > PK_ATTN_DV)
    return cu_fail(c, n, "Attention with a value head size of %lld: the cuda kernel takes up to %d", LL(d->Dv),
                   PK_ATTN_DV);
  int64_t st[4][3];
  const int64_t S[4] = {d->Sq, d->Skv, d->Skv, d->Sq}, H[4] = {d->Hq, d->Hkv, d->Hkv, d->Hq},
                E[4] = {d->D, d->D, d->Dv, d->Dv};
  for (int t = 0; t < 4; t++) {
    st[t][0] = S[t] * H[t] * E[t];
    st[t][1] = d->three_d ? E[t] : S[t] * E[t];
    st[t][2] = d->three_d ? H[t] * E[t] : E[t];
  }
  char sc[48], cp[48];
  snprintf(sc, sizeof sc, "%.9e", (double)(float)p.scale);
  snprintf(cp, sizeof cp, "%.9e", (double)(float)p.cap);
  cu_w(c, "  {\n    static const pk_attn_p ap = {%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld,\n", LL(d->B), LL(d->Hq),
       LL(d->Hkv), LL(d->Sq), LL(d->Skv), LL(d->Sp), LL(d->D), LL(d->Dv));
  cu_w(c, "      ");
  for (int t = 0; t < 4; t++) cu_w(c, "{%lld, %lld, %lld}, ", LL(st[t][0]), LL(st[t][1]), LL(st[t][2]));
  cu_w(c, "\n      %lld, %lld, %lld, %lld, %lld, %lld, %lld, %sf, %sf, %d, %d};\n", LL(p.mB), LL(p.mH), LL(p.mS),
       LL(p.mT), LL(p.Tm), LL(p.lw), LL(p.rw), sc, cp, p.causal, p.mask_bool);
  cu_w(c, "    PK_TRY(pk_attention(S, &ap, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s));\n  }\n", c->x[0], c->x[1], c->x[2],
       c->x[3] ? c->x[3] : "NULL", c->x[4] ? c->x[4] : "NULL", c->x[5] ? c->x[5] : "NULL",
       c->x[6] ? c->x[6] : "NULL", c->y[0] ? c->y[0] : "NULL", c->y[1] ? c->y[1] : "NULL", c->y[2] ? c->y[2] : "NULL");
  return 0;
}

/* ---- data movement ----------------------------------------------------------------------------- */

static int emit_copy(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  if (ir_value_bytes(x) != ir_value_bytes(y)) return cu_fail(c, n, "input and output sizes differ");
  cu_w(c, "  PK_TRY(pk_memcpy(S, %s, %s, %lldu));\n", c->y[0], c->x[0], LL(ir_value_bytes(y)));
  return 0;
}

static int emit_dropout(cu_ctx *c, const ir_node *n) {
  ir_value *y = ir_out(c->g, n, 0), *mask = ir_out(c->g, n, 1);
  /* inference semantics: the output is the input, the mask all true */
  if (y) cu_w(c, "  PK_TRY(pk_memcpy(S, %s, %s, %lldu));\n", c->y[0], c->x[0], LL(ir_value_bytes(y)));
  if (mask) cu_w(c, "  PK_TRY(pk_fill(S, %s, 1, 1, %lld));\n", c->y[1], LL(cg_numel(mask)));
  return 0;
}

static int emit_shape(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  if (y->dtype != IR_INT64) return cu_fail(c, n, "output must be int64");
  if (n->op == IR_OP_Size) {
    cu_w(c, "  PK_TRY(pk_fill(S, %s, 8, %lldull, 1));\n", c->y[0], LL(cg_numel(x)));
    return 0;
  }
  int r = x->shape.rank;
  int64_t s, e;
  cg_shape_range(n, r, &s, &e);
  int k = 0;
  for (int64_t i = s; i < e; i++, k++)
    cu_w(c, "  PK_TRY(pk_fill(S, %s + %d, 8, %lldull, 1));\n", c->y[0], k, LL(x->shape.dims[i]));
  if (k != cg_numel(y)) return cu_fail(c, n, "output size does not match the shape slice");
  return 0;
}

static int emit_constant_of_shape(cu_ctx *c, const ir_node *n) {
  ir_value *y = ir_out(c->g, n, 0);
  const ir_attr *a = ir_attr_find(n, "value");
  uint64_t bits = 0;
  size_t es = ir_dtype_size(y->dtype);
  if (a && a->type == IR_ATTR_TENSOR && a->tensor >= 0) {
    const ir_value *v = &c->g->values[a->tensor];
    if (v->data && v->nbytes >= es && es <= 8) memcpy(&bits, v->data, es);
  }
  cu_w(c, "  PK_TRY(pk_fill(S, %s, %d, 0x%llxull, %lld));\n", c->y[0], (int)es, (unsigned long long)bits,
       LL(cg_numel(y)));
  return 0;
}

static int emit_concat(cu_ctx *c, const ir_node *n) {
  ir_value *y = ir_out(c->g, n, 0);
  int r = y->shape.rank, axis;
  int64_t outer, inner;
  if (cg_axis_split(c->g, "cuda", n, y, &axis, &outer, &inner)) return -1;
  int64_t es = (int64_t)ir_dtype_size(y->dtype), tot = y->shape.dims[axis] * inner, off = 0;
  for (int k = 0; k < n->n_in; k++) {
    ir_value *x = ir_in(c->g, n, k);
    if (!x) continue;
    int64_t chunk = x->shape.rank == r ? x->shape.dims[axis] * inner : 0;
    if (chunk && outer)
      cu_w(c, "  PK_TRY(pk_memcpy2d(S, (char *)%s + %lld, %lld, %s, %lld, %lld, %lld));\n", c->y[0], LL(off * es),
           LL(tot * es), c->x[k], LL(chunk * es), LL(chunk * es), LL(outer));
    off += chunk;
  }
  if (off != tot) return cu_fail(c, n, "input sizes do not add up to the output");
  return 0;
}

static int emit_split(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0);
  int axis;
  int64_t outer, inner;
  if (cg_axis_split(c->g, "cuda", n, x, &axis, &outer, &inner)) return -1;
  int64_t es = (int64_t)ir_dtype_size(x->dtype), tot = x->shape.dims[axis] * inner, off = 0;
  for (int k = 0; k < n->n_out; k++) {
    ir_value *y = ir_out(c->g, n, k);
    if (!y) continue;
    int64_t chunk = y->shape.dims[axis] * inner;
    if (chunk && outer)
      cu_w(c, "  PK_TRY(pk_memcpy2d(S, %s, %lld, (const char *)%s + %lld, %lld, %lld, %lld));\n", c->y[k],
           LL(chunk * es), c->x[0], LL(off * es), LL(tot * es), LL(chunk * es), LL(outer));
    off += chunk;
  }
  return 0;
}

static int emit_slice(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  int64_t st[IR_MAX_RANK], sp[IR_MAX_RANK];
  if (cg_slice_params(c->g, "cuda", n, st, sp)) return -1;
  if (!cg_numel(y)) return 0;
  int64_t xs[IR_MAX_RANK] = {0}, is[IR_MAX_RANK] = {0}, base = 0;
  cg_strides(&x->shape, xs);
  for (int d = 0; d < r; d++) {
    base += st[d] * xs[d];
    is[d] = sp[d] * xs[d];
  }
  emit_copy_call(c, n, 0, (int)ir_dtype_size(x->dtype), r, 0, base, y->shape.dims, is, NULL, NULL, 0, c->x[0], c->y[0]);
  return 0;
}

static int emit_gather(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *ix = ir_in(c->g, n, 1), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", 0), r);
  if (axis < 0 || axis >= r) return cu_fail(c, n, "axis out of range");
  if (ix->dtype != IR_INT64 && ix->dtype != IR_INT32) return cu_fail(c, n, "indices must be int32 or int64");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= x->shape.dims[i];
  for (int i = axis + 1; i < r; i++) inner *= x->shape.dims[i];
  if (!cg_numel(y)) return 0;
  cu_w(c, "  PK_TRY(pk_gather(S, %d, %d, %s, %s, %d, %s, %lld, %lld, %lld, %lld));\n", (int)ir_dtype_size(x->dtype),
       axis, c->x[0], c->x[1], ix->dtype == IR_INT64, c->y[0], LL(outer), LL(x->shape.dims[axis]), LL(cg_numel(ix)),
       LL(inner));
  return 0;
}

/* A Transpose of x (dims xd, rank r; perm valid) that is a batch of 2-D transposes once
 * size-1 dims are dropped and dims that stay next to each other are merged: x [B, R, C]
 * -> y [B, C, R] (B may be 1; NCHW -> NHWC is [N, C, HW] -> [N, HW, C]): 1 with B, R, C.
 * 2 when it only moves size-1 dims (the same bytes in the same order), else 0. */
static int transpose_as_2d(const int64_t *xd, int r, const int64_t *perm, int64_t *B, int64_t *R, int64_t *C) {
  int cid[IR_MAX_RANK], k = 0, ng = 0, first[IR_MAX_RANK], last = -2;
  int64_t size[IR_MAX_RANK];
  for (int d = 0; d < r; d++) cid[d] = xd[d] == 1 ? -1 : k++;
  /* the output's dims as runs of consecutive input dims (ids among those not of size 1) */
  for (int d = 0; d < r; d++) {
    int i = cid[perm[d]];
    if (i < 0) continue;
    if (i == last + 1 && ng) size[ng - 1] *= xd[perm[d]];
    else first[ng] = i, size[ng++] = xd[perm[d]];
    last = i;
  }
  if (ng <= 1) return 2;
  if (ng == 2 && first[0] > first[1]) return *B = 1, *R = size[1], *C = size[0], 1;
  if (ng == 3 && first[0] < first[2] && first[2] < first[1]) return *B = size[0], *R = size[2], *C = size[1], 1;
  return 0;
}

static int emit_transpose(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  int64_t perm[IR_MAX_RANK], xs[IR_MAX_RANK] = {0}, st[IR_MAX_RANK] = {0};
  const int64_t *pv;
  int np = ir_attr_ints(n, "perm", &pv);
  for (int d = 0; d < r; d++) perm[d] = np == r ? pv[d] : r - 1 - d;
  if (!cg_numel(y)) return 0;
  cg_strides(&x->shape, xs);
  for (int d = 0; d < r; d++) {
    if (perm[d] < 0 || perm[d] >= r) return cu_fail(c, n, "bad perm");
    st[d] = xs[perm[d]];
  }
  int64_t B, R, C;
  int kind = transpose_as_2d(x->shape.dims, r, perm, &B, &R, &C);
  if (kind == 2) {
    cu_w(c, "  PK_TRY(pk_memcpy(S, %s, %s, %lldu)); /* moves size-1 dims only */\n", c->y[0], c->x[0],
         LL(ir_value_bytes(y)));
    return 0;
  }
  if (kind == 1) {
    cu_w(c, "  PK_TRY(pk_transpose(S, %d, %s, %s, %lld, %lld, %lld)); /* [%lld, %lld, %lld] -> [%lld, %lld, %lld] */\n",
         (int)ir_dtype_size(x->dtype), c->x[0], c->y[0], LL(B), LL(R), LL(C), LL(B), LL(R), LL(C), LL(B), LL(C), LL(R));
    return 0;
  }
  emit_copy_call(c, n, 0, (int)ir_dtype_size(x->dtype), r, 0, 0, y->shape.dims, st, NULL, NULL, 0, c->x[0], c->y[0]);
  return 0;
}

/* the bit pattern of v as an element of type t */
static uint64_t value_bits(double v, ir_dtype t) {
  uint64_t bits = 0;
  switch (t) {
    case IR_FLOAT: {
      float f = (float)v;
      memcpy(&bits, &f, 4);
      break;
    }
    case IR_DOUBLE: memcpy(&bits, &v, 8); break;
    case IR_INT8:
    case IR_INT16:
    case IR_INT32:
    case IR_INT64: {
      int64_t i = (int64_t)v;
      memcpy(&bits, &i, 8);
      if (ir_dtype_size(t) < 8) bits &= (1ull << (8 * ir_dtype_size(t))) - 1;
      break;
    }
    default: bits = (uint64_t)v; break;
  }
  return bits;
}

static int emit_pad(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  int64_t pads[2 * IR_MAX_RANK] = {0};
  double value = 0;
  const char *mode;
  if (cg_pad_params(c->g, "cuda", n, pads, &value, &mode)) return -1;
  int m = !strcmp(mode, "constant")  ? 1
          : !strcmp(mode, "edge")    ? 2
          : !strcmp(mode, "reflect") ? 3
          : !strcmp(mode, "wrap")    ? 4
                                     : -1;
  if (m < 0) return cu_fail(c, n, "Pad mode '%s' is not supported", mode);
  if (!cg_numel(y)) return 0;
  if (!cg_numel(x) && m != 1) return cu_fail(c, n, "Pad mode '%s' of an empty tensor", mode);
  int64_t xs[IR_MAX_RANK];
  cg_strides(&x->shape, xs);
  emit_copy_call(c, n, 0, (int)ir_dtype_size(x->dtype), r, m, 0, y->shape.dims, xs, x->shape.dims, pads,
                 value_bits(value, x->dtype), c->x[0], c->y[0]);
  return 0;
}

static int emit_tile(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  if (!cg_numel(y)) return 0;
  int64_t xs[IR_MAX_RANK];
  cg_strides(&x->shape, xs);
  emit_copy_call(c, n, 0, (int)ir_dtype_size(x->dtype), r, 4 /* PK_PAD_WRAP */, 0, y->shape.dims, xs, x->shape.dims,
                 NULL, 0, c->x[0], c->y[0]);
  return 0;
}

static int emit_reduce(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  int red[IR_MAX_RANK] = {0};
  int noop = cg_reduce_axes(c->g, "cuda", n, red);
  if (noop < 0) return -1;
  if (noop) return emit_copy(c, n);
  const char *dt = pk_type(x->dtype);
  if (!dt || y->dtype != x->dtype)
    return cu_fail(c, n, "%s from %s to %s is not supported by the cuda target", ir_op_name(n->op),
                   ir_dtype_name(x->dtype), ir_dtype_name(y->dtype));
  if (!cg_numel(y)) return 0;
  const char *kind;
  switch (n->op) {
    case IR_OP_ReduceMean: kind = "PK_RED_MEAN"; break;
    case IR_OP_ReduceMax: kind = "PK_RED_MAX"; break;
    case IR_OP_ReduceMin: kind = "PK_RED_MIN"; break;
    case IR_OP_ReduceProd: kind = "PK_RED_PROD"; break;
    case IR_OP_ReduceL1: kind = "PK_RED_L1"; break;
    case IR_OP_ReduceL2: kind = "PK_RED_L2"; break;
    case IR_OP_ReduceSumSquare: kind = "PK_RED_SUMSQ"; break;
    case IR_OP_ReduceLogSum: kind = "PK_RED_LOGSUM"; break;
    case IR_OP_ReduceLogSumExp: kind = "PK_RED_LOGSUMEXP"; break;
    default: kind = "PK_RED_SUM"; break;
  }
  int node = (int)(n - c->g->nodes);
  int rr = r ? r : 1;
  int64_t xd[IR_MAX_RANK], rd[IR_MAX_RANK];
  for (int d = 0; d < rr; d++) {
    xd[d] = r ? x->shape.dims[d] : 1;
    rd[d] = r ? red[d] : 1;
  }
  cu_decl(c, "static const pk_reduce_p red%d = {%s, %s, %d, ", node, kind, dt, rr);
  put_i64s(c, xd, rr);
  cu_decl(c, ", ");
  put_i64s(c, rd, rr);
  cu_decl(c, "};\n");
  cu_w(c, "  PK_TRY(pk_reduce(S, &red%d, %s, %s));\n", node, c->x[0], c->y[0]);
  return 0;
}

/* ---- index ops ------------------------------------------------------------------------------ */

static int emit_gather_elements(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *ix = ir_in(c->g, n, 1), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", 0), r);
  if (axis < 0 || axis >= r || ix->shape.rank != r) return cu_fail(c, n, "axis or indices rank out of range");
  int i64 = index_type(c, n, ix);
  if (i64 < 0) return -1;
  if (!cg_numel(y)) return 0;
  int64_t xs[IR_MAX_RANK];
  cg_strides(&x->shape, xs);
  int node = (int)(n - c->g->nodes);
  cu_decl(c, "static const pk_gather_el_p ge%d = {%d, %d, %d, %d, %lld, ", node, (int)ir_dtype_size(x->dtype), r, axis,
          i64, LL(x->shape.dims[axis]));
  put_i64s(c, ix->shape.dims, r), cu_decl(c, ", ");
  put_i64s(c, xs, r), cu_decl(c, "};\n");
  cu_w(c, "  PK_TRY(pk_gather_elements(S, &ge%d, %s, %s, %s));\n", node, c->x[0], c->x[1], c->y[0]);
  return 0;
}

static int emit_gather_nd(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *ix = ir_in(c->g, n, 1), *y = ir_out(c->g, n, 0);
  int b = (int)ir_attr_int(n, "batch_dims", 0), qr = ix->shape.rank;
  if (qr < 1) return cu_fail(c, n, "indices must have rank >= 1");
  int L = (int)ix->shape.dims[qr - 1];
  if (b < 0 || b + L > x->shape.rank) return cu_fail(c, n, "indices do not fit the data");
  int i64 = index_type(c, n, ix);
  if (i64 < 0) return -1;
  int64_t B = 1, nI = 1, slice = 1, D = 1;
  for (int i = 0; i < b; i++) B *= x->shape.dims[i];
  for (int i = b; i < qr - 1; i++) nI *= ix->shape.dims[i];
  for (int i = b + L; i < x->shape.rank; i++) slice *= x->shape.dims[i];
  for (int i = b; i < x->shape.rank; i++) D *= x->shape.dims[i];
  if (!cg_numel(y)) return 0;
  int node = (int)(n - c->g->nodes);
  cu_decl(c, "static const pk_gather_nd_p gn%d = {%d, %d, %d, %lld, %lld, %lld, %lld, ", node,
          (int)ir_dtype_size(x->dtype), i64, L, LL(B), LL(nI), LL(slice), LL(D));
  put_i64s(c, x->shape.dims + b, L), cu_decl(c, ", %d};\n", b);
  cu_w(c, "  PK_TRY(pk_gather_nd(S, &gn%d, %s, %s, %s));\n", node, c->x[0], c->x[1], c->y[0]);
  return 0;
}

static int scatter_reduction(cu_ctx *c, const ir_node *n, const ir_value *y) {
  const char *red = ir_attr_str(n, "reduction", "none");
  int r = !strcmp(red, "none")  ? 0
          : !strcmp(red, "add") ? 1
          : !strcmp(red, "mul") ? 2
          : !strcmp(red, "max") ? 3
          : !strcmp(red, "min") ? 4
                                : -1;
  if (r < 0) return cu_fail(c, n, "reduction '%s' is not supported", red);
  if (r && need_numeric(c, n, y->dtype)) return -1;
  return r;
}

/* The MaxPool whose Indices output idx is (through reshapes), or NULL. */
static const ir_node *maxpool_of_indices(ir_graph *g, int v) {
  for (int hops = 0; v >= 0 && hops < 16; hops++) {
    int p = g->values[v].producer;
    if (p < 0) return NULL;
    const ir_node *pn = &g->nodes[p];
    if (pn->op == IR_OP_MaxPool) return pn->n_out > 1 && pn->out[1] == v ? pn : NULL;
    if (!cg_is_alias(pn)) return NULL;
    v = pn->in[0];
  }
  return NULL;
}

/* autodiff's MaxPool gradient: ScatterElements(x [1, numel(X)], Indices [1, numel(Y)],
 * dY [1, numel(Y)], axis 1, add) with the pool's own flat indices */
static int emit_maxpool_scatter(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *ix = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  if (strcmp(ir_attr_str(n, "reduction", "none"), "add") || x->shape.rank != 2 || x->shape.dims[0] != 1 ||
      norm_axis(ir_attr_int(n, "axis", 0), 2) != 1 || ix->dtype != IR_INT64 || ix->shape.rank != 2 ||
      (y->dtype != IR_FLOAT && y->dtype != IR_DOUBLE))
    return 1;
  const ir_node *mp = maxpool_of_indices(g, n->in[1]);
  if (!mp || ir_attr_int(mp, "storage_order", 0)) return 1;
  ir_value *px = ir_in(g, mp, 0), *py = ir_out(g, mp, 0);
  if (cg_numel(px) != cg_numel(x) || cg_numel(py) != cg_numel(ix) || px->shape.rank < 3) return 1;
  cg_win3 w;
  if (cg_pool_window(g, "cuda", mp, px, py, &w)) return -1;
  int node = (int)(n - g->nodes);
  cu_w(c, "  /* the gradient of MaxPool node %d: each element gathers the windows that picked it */\n", mp->index);
  cu_decl(c, "static const pk_pool_p msc%d = {PK_POOL_MAX, %s, 0, 0, 0, %lld, ", node, dt_name(x->dtype),
          LL(px->shape.dims[0] * px->shape.dims[1]));
  put_i64s(c, w.in, 3), cu_decl(c, ", ");
  put_i64s(c, w.out, 3), cu_decl(c, ", ");
  put_i64s(c, w.k, 3), cu_decl(c, ", ");
  put_i64s(c, w.s, 3), cu_decl(c, ", ");
  put_i64s(c, w.d, 3), cu_decl(c, ", ");
  put_i64s(c, w.pb, 3), cu_decl(c, ", ");
  put_i64s(c, w.pe, 3), cu_decl(c, ", 0};\n");
  cu_w(c, "  PK_TRY(pk_maxpool_scatter(S, %s, &msc%d, %s, %s, %s, %s));\n", dt_name(y->dtype), node, c->x[0], c->x[1],
       c->x[2], c->y[0]);
  return 0;
}

static int emit_scatter(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *ix = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  int red = scatter_reduction(c, n, y);
  if (red < 0) return -1;
  int i64 = index_type(c, n, ix);
  if (i64 < 0) return -1;
  int nd = n->op == IR_OP_ScatterND, r = x->shape.rank, qr = ix->shape.rank, axis = 0, L = 0;
  int64_t nu, slice = 1, xs[IR_MAX_RANK] = {0}, dims[IR_MAX_RANK] = {0};
  if (!cg_numel(y)) return 0;
  if (!nd) {
    int rc = emit_maxpool_scatter(c, n);
    if (rc <= 0) return rc;
    axis = norm_axis(ir_attr_int(n, "axis", 0), r);
    if (axis < 0 || axis >= r || qr != r) return cu_fail(c, n, "axis or indices rank out of range");
    nu = cg_numel(ix);
    cg_strides(&x->shape, xs);
    for (int d = 0; d < r; d++) dims[d] = x->shape.dims[d];
  } else {
    if (qr < 1) return cu_fail(c, n, "indices must have rank >= 1");
    L = (int)ix->shape.dims[qr - 1];
    if (L > r) return cu_fail(c, n, "indices do not fit the data");
    nu = 1;
    for (int i = 0; i < qr - 1; i++) nu *= ix->shape.dims[i];
    for (int i = L; i < r; i++) slice *= x->shape.dims[i];
    for (int i = 0; i < L; i++) dims[i] = x->shape.dims[i];
  }
  int64_t sort_n = 1;
  while (sort_n < nu) sort_n *= 2;
  cu_scratch(c, (size_t)sort_n * 8);
  const char *T = pk_type(y->dtype);
  int node = (int)(n - g->nodes);
  cu_decl(c, "static const pk_scatter_p sc%d = {%s, %d, %d, %d, %d, %d, %d, %d, %lld, %lld, %lld, %lld, ", node,
          T ? T : "0", (int)ir_dtype_size(y->dtype), red, i64, nd, nd ? 0 : r, axis, L, LL(cg_numel(y)), LL(nu),
          LL(slice), LL(sort_n));
  put_i64s(c, ix->shape.dims, nd ? 0 : r), cu_decl(c, ", ");
  put_i64s(c, xs, nd ? 0 : r), cu_decl(c, ", ");
  put_i64s(c, dims, nd ? L : r), cu_decl(c, "};\n");
  cu_w(c, "  PK_TRY(pk_scatter(S, &sc%d, %s, %s, %s, %s, A + SCRATCH_OFF));\n", node, c->x[0], c->x[1], c->x[2],
       c->y[0]);
  return 0;
}

static int emit_onehot(cu_ctx *c, const ir_node *n) {
  ir_value *ix = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  double depth_d;
  ir_value *dv = ir_in(c->g, n, 1);
  if (!dv || dv->kind != IR_VAL_CONST || ir_const_f64(dv, 0, &depth_d))
    return cu_fail(c, n, "depth must be a constant");
  int64_t depth = (int64_t)depth_d;
  int r = y->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", -1), r);
  if (axis < 0 || axis >= r) return cu_fail(c, n, "axis out of range");
  const char *it = pk_type(ix->dtype);
  if (!it || ix->dtype == IR_BOOL)
    return cu_fail(c, n, "indices of type %s are not supported", ir_dtype_name(ix->dtype));
  int64_t outer, a, inner;
  split_at(y, axis, &outer, &a, &inner);
  if (a != depth) return cu_fail(c, n, "output size along axis differs from depth");
  if (!cg_numel(y)) return 0;
  cu_w(c, "  PK_TRY(pk_onehot(S, %s, %d, %s, %s, %s, %lld, %lld, %lld));\n", it, (int)ir_dtype_size(y->dtype), c->x[0],
       c->x[2], c->y[0], LL(outer), LL(depth), LL(inner));
  return 0;
}

/* ---- along an axis: CumSum, ArgMax/ArgMin, TopK ---------------------------------------------------- */

static int emit_cumsum(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  int64_t av;
  if (const_ints(c, n, 1, &av, 1) != 1) return cu_fail(c, n, "axis must be a constant");
  int axis = norm_axis(av, r);
  if (axis < 0 || axis >= r) return cu_fail(c, n, "axis out of range");
  if (need_numeric(c, n, y->dtype)) return -1;
  int64_t outer, a, inner;
  split_at(x, axis, &outer, &a, &inner);
  if (!cg_numel(y)) return 0;
  cu_w(c, "  PK_TRY(pk_%s(S, %s, %s, %s, %lld, %lld, %lld, %d, %d));\n", n->op == IR_OP_CumProd ? "cumprod" : "cumsum",
       pk_type(y->dtype), c->x[0], c->y[0], LL(outer), LL(a), LL(inner), (int)ir_attr_int(n, "exclusive", 0),
       (int)ir_attr_int(n, "reverse", 0));
  return 0;
}

static int emit_argmax(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", 0), r);
  if (axis < 0 || axis >= r) return cu_fail(c, n, "axis out of range");
  if (need_numeric(c, n, x->dtype)) return -1;
  if (y->dtype != IR_INT64) return cu_fail(c, n, "output must be int64");
  int64_t outer, a, inner;
  split_at(x, axis, &outer, &a, &inner);
  if (!cg_numel(y)) return 0;
  cu_w(c, "  PK_TRY(pk_argmax(S, %s, %s, %s, %lld, %lld, %lld, %d, %d));\n", pk_type(x->dtype), c->x[0], c->y[0],
       LL(outer), LL(a), LL(inner), n->op == IR_OP_ArgMin, (int)ir_attr_int(n, "select_last_index", 0));
  return 0;
}

static int emit_topk(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0), *yi = ir_out(c->g, n, 1);
  int r = x->shape.rank;
  int axis = norm_axis(ir_attr_int(n, "axis", -1), r);
  if (axis < 0 || axis >= r) return cu_fail(c, n, "axis out of range");
  if (need_numeric(c, n, x->dtype)) return -1;
  if (yi && yi->dtype != IR_INT64) return cu_fail(c, n, "Indices must be int64");
  if (!y && !yi) return 0;
  int64_t outer, a, inner, K = (y ? y : yi)->shape.dims[axis];
  split_at(x, axis, &outer, &a, &inner);
  if (K > a) return cu_fail(c, n, "k (%lld) is larger than the axis (%lld)", LL(K), LL(a));
  if (!K || !outer || !inner) return 0;
  cu_w(c, "  PK_TRY(pk_topk(S, %s, %s, %s, %s, %lld, %lld, %lld, %lld, %d));\n", pk_type(x->dtype), c->x[0],
       y ? c->y[0] : "NULL", yi ? c->y[1] : "NULL", LL(outer), LL(a), LL(inner), LL(K),
       ir_attr_int(n, "largest", 1) != 0);
  return 0;
}

/* ---- Trilu, DepthToSpace, SpaceToDepth, Range, Resize, LRN ------------------------------------ */

static int emit_trilu(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  if (r < 2) return cu_fail(c, n, "Trilu needs rank >= 2");
  int64_t k = 0;
  if (ir_in(c->g, n, 1) && const_ints(c, n, 1, &k, 1) != 1) return cu_fail(c, n, "k must be a constant");
  int64_t R = x->shape.dims[r - 2], C = x->shape.dims[r - 1];
  if (!cg_numel(y)) return 0;
  cu_w(c, "  PK_TRY(pk_trilu(S, %d, %s, %s, %lld, %lld, %lld, %lld, %d));\n", (int)ir_dtype_size(x->dtype), c->x[0],
       c->y[0], LL(cg_numel(x) / (R * C)), LL(R), LL(C), LL(k), ir_attr_int(n, "upper", 1) != 0);
  return 0;
}

/* Both are permutations of a 6-D view: a strided copy. */
static int emit_depth_space(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  if (x->shape.rank != 4) return cu_fail(c, n, "needs a 4-D input");
  int64_t b = ir_attr_int(n, "blocksize", 1);
  if (b < 1) return cu_fail(c, n, "blocksize must be positive");
  if (!cg_numel(y)) return 0;
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], H = x->shape.dims[2], W = x->shape.dims[3];
  int64_t HW = H * W;
  if (n->op == IR_OP_DepthToSpace) {
    int crd = !strcmp(ir_attr_str(n, "mode", "DCR"), "CRD");
    int64_t Co = C / (b * b);
    /* y [N, Co, H, b(i), W, b(j)] = x[n, DCR: (i * b + j) * Co + c | CRD: (c * b + i) * b + j, h, w] */
    int64_t yd[6] = {N, Co, H, b, W, b};
    int64_t xs_dcr[6] = {C * HW, HW, W, b * Co * HW, 1, Co * HW}, xs_crd[6] = {C * HW, b * b * HW, W, b * HW, 1, HW};
    emit_copy_call(c, n, 0, (int)ir_dtype_size(x->dtype), 6, 0, 0, yd, crd ? xs_crd : xs_dcr, NULL, NULL, 0, c->x[0],
                   c->y[0]);
  } else {
    /* DCR: y [N, b(i), b(j), C, H/b, W/b], CRD (SpaceToDepth-28): y [N, C, b(i), b(j), H/b, W/b]
     * = x[n, c, h * b + i, w * b + j] */
    int crd = !strcmp(ir_attr_str(n, "mode", "DCR"), "CRD");
    int64_t yd[6] = {N, b, b, C, H / b, W / b}, xs[6] = {C * HW, W, 1, HW, b * W, b};
    int64_t yd_crd[6] = {N, C, b, b, H / b, W / b}, xs_crd[6] = {C * HW, HW, W, 1, b * W, b};
    emit_copy_call(c, n, 0, (int)ir_dtype_size(x->dtype), 6, 0, 0, crd ? yd_crd : yd, crd ? xs_crd : xs, NULL, NULL,
                   0, c->x[0], c->y[0]);
  }
  return 0;
}

static int emit_range(cu_ctx *c, const ir_node *n) {
  ir_value *y = ir_out(c->g, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE && t != IR_INT16 && t != IR_INT32 && t != IR_INT64)
    return cu_fail(c, n, "Range on %s is not supported", ir_dtype_name(t));
  if (!cg_numel(y)) return 0;
  cu_w(c, "  PK_TRY(pk_range(S, %s, %s, %s, %s, %lld));\n", pk_type(t), c->x[0], c->x[2], c->y[0], LL(cg_numel(y)));
  return 0;
}

/* extrapolation_value as the bits of one element of type t (little-endian): floats,
 * or integers (two's complement, the low bytes of the truncated value) */
static int extrap_bits(ir_dtype t, double v, uint64_t *bits) {
  *bits = 0;
  switch (t) {
    case IR_FLOAT: {
      float f = (float)v;
      memcpy(bits, &f, sizeof f);
      return 0;
    }
    case IR_DOUBLE: memcpy(bits, &v, sizeof v); return 0;
    case IR_BOOL: *bits = v != 0; return 0;
    case IR_INT8:
    case IR_INT16:
    case IR_INT32:
    case IR_INT64:
    case IR_UINT8:
    case IR_UINT16:
    case IR_UINT32:
    case IR_UINT64:
      if (v > -9.2e18 && v < 9.2e18) *bits = (uint64_t)(int64_t)v;
      return 0;
    default: return -1;
  }
}

static int emit_resize(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  int r = x->shape.rank;
  cg_resize rp;
  if (cg_resize_params(c->g, "cuda", n, &rp)) return -1;
  if (rp.mode != CG_RESIZE_NEAREST && y->dtype != IR_FLOAT && y->dtype != IR_DOUBLE)
    return cu_fail(c, n, "%s Resize on %s is not supported", rp.mode == CG_RESIZE_CUBIC ? "cubic" : "linear",
                   ir_dtype_name(y->dtype));
  uint64_t bits = 0;
  if (rp.ctm == CG_CTM_TF_CROP_AND_RESIZE && extrap_bits(y->dtype, rp.extrapolation, &bits))
    return cu_fail(c, n, "tf_crop_and_resize on %s is not supported", ir_dtype_name(y->dtype));
  if (!cg_numel(y)) return 0;
  if (!cg_numel(x)) return cu_fail(c, n, "Resize of an empty tensor");
  static const char *const ctm[] = {
      "PK_CTM_HALF_PIXEL",        "PK_CTM_PYTORCH_HALF_PIXEL",        "PK_CTM_ALIGN_CORNERS",
      "PK_CTM_ASYMMETRIC",        "PK_CTM_TF_HALF_PIXEL_FOR_NEAREST", "PK_CTM_HALF_PIXEL_SYMMETRIC",
      "PK_CTM_TF_CROP_AND_RESIZE"};
  static const char *const nm[] = {"PK_NEAREST_ROUND_PREFER_FLOOR", "PK_NEAREST_ROUND_PREFER_CEIL", "PK_NEAREST_FLOOR",
                                   "PK_NEAREST_CEIL"};
  static const char *const mode[] = {"PK_RESIZE_NEAREST", "PK_RESIZE_LINEAR", "PK_RESIZE_CUBIC"};
  int node = (int)(n - c->g->nodes);
  const char *T = pk_type(y->dtype);
  char lit[2][64];
  cu_decl(c, "static const pk_resize_p rs%d = {%s, %d, %d, %s, %s, %s, %d, %d, %d, %s, %s, 0x%llxull, ", node,
          T ? T : "0", (int)ir_dtype_size(y->dtype), r, mode[rp.mode], ctm[rp.ctm], nm[rp.nearest], rp.filter,
          rp.antialias, rp.exclude_outside, cg_flit(lit[0], sizeof lit[0], rp.cubic_a, IR_DOUBLE),
          cg_flit(lit[1], sizeof lit[1], rp.extrapolation, IR_DOUBLE), (unsigned long long)bits);
  put_i64s(c, x->shape.dims, r), cu_decl(c, ", ");
  put_i64s(c, y->shape.dims, r), cu_decl(c, ", {");
  for (int d = 0; d < r; d++) cu_decl(c, "%s%.17g", d ? ", " : "", rp.scales[d]);
  cu_decl(c, "}, {");
  for (int d = 0; d < r; d++) cu_decl(c, "%s%d", d ? ", " : "", rp.resized[d]);
  cu_decl(c, "}, {");
  for (int d = 0; d < r; d++) cu_decl(c, "%s%d", d ? ", " : "", rp.taps[d]);
  for (int k = 0; k < 2; k++) {
    cu_decl(c, "}, {");
    for (int d = 0; d < r; d++) cu_decl(c, "%s%.17g", d ? ", " : "", rp.roi[k][d]);
  }
  cu_decl(c, "}};\n");
  cu_w(c, "  PK_TRY(pk_resize(S, &rs%d, %s, %s));\n", node, c->x[0], c->y[0]);
  return 0;
}

static int emit_lrn(cu_ctx *c, const ir_node *n) {
  ir_value *x = ir_in(c->g, n, 0), *y = ir_out(c->g, n, 0);
  if (y->dtype != IR_FLOAT && y->dtype != IR_DOUBLE)
    return cu_fail(c, n, "LRN on %s is not supported", ir_dtype_name(y->dtype));
  int64_t size = ir_attr_int(n, "size", 1);
  if (size < 1) return cu_fail(c, n, "size must be positive");
  double alpha = ir_attr_float(n, "alpha", 1e-4f), beta = ir_attr_float(n, "beta", 0.75f),
         bias = ir_attr_float(n, "bias", 1.0f);
  int64_t N = x->shape.dims[0], C = x->shape.rank > 1 ? x->shape.dims[1] : 1, Sp = 1;
  for (int i = 2; i < x->shape.rank; i++) Sp *= x->shape.dims[i];
  int64_t lo = (size - 1) / 2, hi = (size - 1) - lo; /* floor / ceil of (size-1)/2 */
  if (!cg_numel(y)) return 0;
  cu_w(c, "  PK_TRY(pk_lrn(S, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %.17g, %.17g, %.17g));\n", dt_name(y->dtype),
       c->x[0], c->y[0], LL(N), LL(C), LL(Sp), LL(lo), LL(hi), bias, alpha / (double)size, beta);
  return 0;
}

/* ---- RNN, GRU, LSTM ------------------------------------------------------------------------ */

static void rnn_write(void *ctx, const char *fmt, va_list ap) { vfprintf(((cu_ctx *)ctx)->decl, fmt, ap); }

/* Per direction: pk_gemm for the input projection of every step, then per step pk_gemm
 * with R and a launch of the node's generated kernel (codegen/rnn_expr.h) over [B, H];
 * all queued on the stage's stream (nothing waits on the host, so CUDA graph capture
 * records the loop). Kernel k<node>_d<d>, phase 0: initial state, 1: GRU's r * h,
 * 2: the gates, 3: Y_h / Y_c. Working buffers in scratch. */
static int emit_rnn(cu_ctx *c, const ir_node *n) {
  pass_rnn r;
  int node = (int)(n - c->g->nodes);
  if (pass_rnn_info(c->g, node, &r)) return -1;
  ir_dtype t = ir_in(c->g, n, 0)->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE)
    return cu_fail(c, n, "%s on %s is not supported by the cuda target", ir_op_name(n->op), ir_dtype_name(t));
  const char *T = cg_ctype(t), *DT = dt_name(t);
  int64_t S = r.S, B = r.B, I = r.I, H = r.H, GH = r.G * H, cols = cg_rnn_step_cols(&r);
  size_t es = ir_dtype_size(t);
  if ((!r.has_y && !r.has_yh && !r.has_yc) || B == 0) return 0;
  cu_scratch(c, (size_t)(S * B * GH + B * GH + 3 * B * H) * es);
  ir_value *sl = ir_in(c->g, n, 4);
  const char *SLT = sl ? cg_ctype(sl->dtype) : "int";
  /* operands, typed NULLs for the ones left out */
  char nul[5][48], args[1024];
  const char *ops[8];
  static const int in_slot[5] = {3, 4, 5, 6, 7};
  for (int k = 0; k < 5; k++) {
    int sl_k = in_slot[k];
    snprintf(nul[k], sizeof nul[k], "(const %s *)0", k == 1 ? SLT : T);
    ops[k] = sl_k < n->n_in && n->in[sl_k] >= 0 ? c->x[sl_k] : nul[k];
  }
  char ynul[48];
  snprintf(ynul, sizeof ynul, "(%s *)0", T);
  for (int k = 0; k < 3; k++) ops[5 + k] = k < n->n_out && n->out[k] >= 0 ? c->y[k] : ynul;
  snprintf(args, sizeof args, "xw, hr, hs, cs, rh, %s, %s, %s, %s, %s, %s, %s, %s", ops[0], ops[1], ops[2], ops[3],
           ops[4], ops[5], ops[6], ops[7]);

  cg_expr_writer w = {c->g, "cuda", c, rnn_write};
  for (int d = 0; d < r.D; d++) {
    cu_decl(c, "/* node %d: %s '", n->index, ir_op_name(n->op));
    cg_put_comment(c->decl, n->name, 200);
    cu_decl(c, "', direction %d */\n", d);
    cu_decl(c,
            "__global__ void __launch_bounds__(PK_THREADS) k%d_%s_d%d(unsigned n, int phase, long t, %s *xw, %s *hr, "
            "%s *hs, %s *cs, %s *rh, const %s *x3, const %s *x4, const %s *x5, const %s *x6, const %s *x7, %s *y0, "
            "%s *y1, %s *y2) {\n",
            node, ir_op_name(n->op), d, T, T, T, T, T, T, SLT, T, T, T, T, T, T);
    cu_decl(c,
            "  (void)t; (void)xw; (void)hr; (void)hs; (void)cs; (void)rh; (void)x3; (void)x4; (void)x5; (void)x6;\n"
            "  (void)x7; (void)y0; (void)y1; (void)y2;\n");
    cu_decl(c, "  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {\n");
    cu_decl(c, "    const long b = i / %lldu, j = i %% %lldu;\n", LL(H), LL(H));
    cu_decl(c, "    if (phase == 0) {\n");
    cg_rnn_phase(&w, &r, d, CG_RNN_INIT, t, "      ");
    if (cols != GH) {
      cu_decl(c, "    } else if (phase == 1) {\n");
      cg_rnn_phase(&w, &r, d, CG_RNN_RESET, t, "      ");
    }
    cu_decl(c, "    } else if (phase == 2) {\n");
    cg_rnn_phase(&w, &r, d, CG_RNN_GATES, t, "      ");
    cu_decl(c, "    } else {\n");
    cg_rnn_phase(&w, &r, d, CG_RNN_FINI, t, "      ");
    cu_decl(c, "    }\n  }\n}\n\n");
  }

  cu_w(
      c,
      "  {\n    %s *xw = (%s *)(A + SCRATCH_OFF), *hr = xw + %lld, *hs = hr + %lld, *cs = hs + %lld, *rh = cs + %lld;\n",
      T, T, LL(S * B * GH), LL(B * GH), LL(B * H), LL(B * H));
  if (r.has_y && r.has_seq)
    cu_w(c, "    PK_TRY(pk_fill(S, %s, %d, 0, %lld));\n", c->y[0], (int)es, LL(S * r.D * B * H));
  char kn[64];
  for (int d = 0; d < r.D; d++) {
    int rev = d == 1 || r.reverse;
    snprintf(kn, sizeof kn, "k%d_%s_d%d", node, ir_op_name(n->op), d);
    if (S > 0) {
      if (I > 0)
        cu_w(
            c,
            "    PK_TRY(pk_gemm(S, %s, 0, 1, %lld, %lld, %lld, 1, %s, %lld, 0, (%s) + %lld, %lld, 0, 0, xw, %lld, 0, 1));\n",
            DT, LL(S * B), LL(GH), LL(I), c->x[0], LL(I), c->x[1], LL(d * GH * I), LL(I), LL(GH));
      else cu_w(c, "    PK_TRY(pk_fill(S, xw, %d, 0, %lld));\n", (int)es, LL(S * B * GH));
    }
    cu_w(c, "    PK_LAUNCH(%s, %lldu, 0, 0L, %s);\n", kn, LL(B * H), args);
    if (S > 0) {
      cu_w(c, "    for (long s = 0; s < %lld; s++) {\n", LL(S));
      if (rev) cu_w(c, "      const long t = %lld - s;\n", LL(S - 1));
      else cu_w(c, "      const long t = s;\n");
      cu_w(
          c,
          "      PK_TRY(pk_gemm(S, %s, 0, 1, %lld, %lld, %lld, 1, hs, %lld, 0, (%s) + %lld, %lld, 0, 0, hr, %lld, 0, 1));\n",
          DT, LL(B), LL(cols), LL(H), LL(H), c->x[2], LL(d * GH * H), LL(H), LL(GH));
      if (cols != GH) {
        cu_w(c, "      PK_LAUNCH(%s, %lldu, 1, t, %s);\n", kn, LL(B * H), args);
        cu_w(
            c,
            "      PK_TRY(pk_gemm(S, %s, 0, 1, %lld, %lld, %lld, 1, rh, %lld, 0, (%s) + %lld, %lld, 0, 0, hr + %lld, %lld, 0, 1));\n",
            DT, LL(B), LL(H), LL(H), LL(H), c->x[2], LL(d * GH * H + 2 * H * H), LL(H), LL(2 * H), LL(GH));
      }
      cu_w(c, "      PK_LAUNCH(%s, %lldu, 2, t, %s);\n    }\n", kn, LL(B * H), args);
    }
    if (r.has_yh || r.has_yc) cu_w(c, "    PK_LAUNCH(%s, %lldu, 3, 0L, %s);\n", kn, LL(B * H), args);
  }
  cu_w(c, "  }\n");
  return 0;
}

cu_op_fn cu_op_emitter_sample(ir_op op);
cu_op_fn cu_op_emitter_vision(ir_op op);

cu_op_fn cu_op_emitter(ir_op op) {
  cu_op_fn f = cu_op_emitter_sample(op);
  if (!f) f = cu_op_emitter_vision(op);
  if (f) return f;
  switch (op) {
    case IR_OP_Conv: return emit_conv;
    case IR_OP_Gemm: return emit_gemm;
    case IR_OP_MatMul: return emit_matmul;
    case IR_OP_RNN:
    case IR_OP_GRU:
    case IR_OP_LSTM: return emit_rnn;
    case IR_OP_MaxPool:
    case IR_OP_AveragePool:
    case IR_OP_LpPool:
    case IR_OP_GlobalAveragePool:
    case IR_OP_GlobalMaxPool:
    case IR_OP_GlobalLpPool: return emit_pool;
    case IR_OP_BatchNormalization: return emit_batchnorm;
    case IR_OP_InstanceNormalization: return emit_instnorm;
    case IR_OP_LayerNormalization: return emit_layernorm;
    case IR_OP_Softmax:
    case IR_OP_LogSoftmax:
    case IR_OP_Hardmax: return emit_softmax;
    case IR_OP_Attention: return emit_attention;
    case IR_OP_Reshape:
    case IR_OP_Flatten:
    case IR_OP_Squeeze:
    case IR_OP_Unsqueeze:
    case IR_OP_Identity:
    case IR_OP_BitCast: return emit_copy;
    case IR_OP_Dropout: return emit_dropout;
    case IR_OP_Shape:
    case IR_OP_Size: return emit_shape;
    case IR_OP_ConstantOfShape: return emit_constant_of_shape;
    case IR_OP_Concat: return emit_concat;
    case IR_OP_Split: return emit_split;
    case IR_OP_Slice: return emit_slice;
    case IR_OP_Gather: return emit_gather;
    case IR_OP_Transpose: return emit_transpose;
    case IR_OP_Pad: return emit_pad;
    case IR_OP_Tile: return emit_tile;
    case IR_OP_ReduceMean:
    case IR_OP_ReduceSum:
    case IR_OP_ReduceMax:
    case IR_OP_ReduceMin:
    case IR_OP_ReduceProd:
    case IR_OP_ReduceL1:
    case IR_OP_ReduceL2:
    case IR_OP_ReduceLogSum:
    case IR_OP_ReduceLogSumExp:
    case IR_OP_ReduceSumSquare: return emit_reduce;
    case IR_OP_ConvTranspose: return emit_conv_transpose;
    case IR_OP_GatherElements: return emit_gather_elements;
    case IR_OP_GatherND: return emit_gather_nd;
    case IR_OP_ScatterElements:
    case IR_OP_ScatterND: return emit_scatter;
    case IR_OP_OneHot: return emit_onehot;
    case IR_OP_CumSum:
    case IR_OP_CumProd: return emit_cumsum;
    case IR_OP_ArgMax:
    case IR_OP_ArgMin: return emit_argmax;
    case IR_OP_TopK: return emit_topk;
    case IR_OP_Trilu: return emit_trilu;
    case IR_OP_DepthToSpace:
    case IR_OP_SpaceToDepth: return emit_depth_space;
    case IR_OP_Range: return emit_range;
    case IR_OP_Resize:
    case IR_OP_Upsample: return emit_resize;
    case IR_OP_LRN: return emit_lrn;
    default: return NULL;
  }
}
