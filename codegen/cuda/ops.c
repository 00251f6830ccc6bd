/* codegen/cuda/ops.c - the non-element-wise ops of the cuda target. Each emitter
 * writes its node's parameter table (file scope) and the calls into the device
 * runtime (pipecc_cuda.h) that run it:
 *   Conv                    cuDNN (table entry set up once in init; groups, dilations,
 *                           pads; asymmetric pads pre-padded into scratch), bias kernel
 *   Gemm, MatMul            cuBLAS strided-batched GEMM (TF32 unless --no-tf32)
 *   pooling, Softmax family, LayerNormalization, InstanceNormalization,
 *   BatchNormalization (inference and training mode), Reduce*   runtime kernels
 *   Transpose, Slice, Pad, Tile, Gather, Concat, Split, copies, Shape, Size,
 *   ConstantOfShape, Dropout   strided copies / memcpy2D / fills
 * Shapes are constants in the emitted code. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/cg_cuda.h"
#include "codegen/op_params.h"

#define LL(x) ((long long)(x))

static int norm_axis(int64_t a, int r) { return (int)(a < 0 ? a + r : a); }
static const char *dt_name(ir_dtype t) { return t == IR_DOUBLE ? "PK_F64" : "PK_F32"; }

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

static int emit_conv(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *wt = ir_in(g, n, 1), *b = ir_in(g, n, 2), *y = ir_out(g, n, 0);
  ir_dtype t = y->dtype;
  if (t != IR_FLOAT && t != IR_DOUBLE) return cu_fail(c, n, "Conv on %s is not supported", ir_dtype_name(t));
  int64_t kernel[3] = {1, 1, 1};
  for (int i = 0; i < x->shape.rank - 2 && i < 3; i++) kernel[i] = wt->shape.dims[2 + i];
  cg_win3 w;
  if (window(c, n, x, y, kernel, &w)) return -1;
  int64_t N = x->shape.dims[0], C = x->shape.dims[1], M = y->shape.dims[1], G = ir_attr_int(n, "group", 1);
  if (G < 1 || C % G || M % G) return cu_fail(c, n, "group %lld does not divide the channels", LL(G));
  if (wt->shape.dims[1] != C / G || wt->shape.dims[0] != M) return cu_fail(c, n, "weight shape does not match the input");
  if (cg_numel(y) == 0) return 0;
  if (cg_numel(x) >= ((int64_t)1 << 31) || cg_numel(y) >= ((int64_t)1 << 31))
    return cu_fail(c, n, "tensors of 2^31 elements or more are not supported by cuDNN here");
  const char *xin = c->x[0];
  char padded[96];
  int asym = 0;
  for (int j = 0; j < 3; j++) asym |= w.pb[j] != w.pe[j];
  if (asym) {
    /* cuDNN pads symmetrically: pad the input into scratch first */
    int r = x->shape.rank;
    int64_t yd[IR_MAX_RANK], xs[IR_MAX_RANK], pb[IR_MAX_RANK] = {0};
    cg_strides(&x->shape, xs);
    for (int d = 0; d < r; d++) yd[d] = x->shape.dims[d];
    for (int j = 3 - w.sr; j < 3; j++) {
      int d = 2 + j - (3 - w.sr);
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
    emit_copy_call(c, n, 0, (int)es, r, 1 /* PK_PAD_CONST, value 0 */, 0, yd, xs, x->shape.dims, pb, 0, xin, padded);
    xin = padded;
  }
  fprintf(c->conv, "  {%s, %d, %lld, %lld, %lld, %lld, {%lld, %lld, %lld}, {%lld, %lld, %lld}, {%lld, %lld, %lld}, "
          "{%lld, %lld, %lld}, {%lld, %lld, %lld}, {%lld, %lld, %lld}}, /* node %d */\n",
          dt_name(t), w.sr, LL(N), LL(C), LL(M), LL(G), LL(w.in[0]), LL(w.in[1]), LL(w.in[2]), LL(w.out[0]),
          LL(w.out[1]), LL(w.out[2]), LL(w.k[0]), LL(w.k[1]), LL(w.k[2]), LL(w.s[0]), LL(w.s[1]), LL(w.s[2]),
          LL(w.d[0]), LL(w.d[1]), LL(w.d[2]), LL(w.pb[0]), LL(w.pb[1]), LL(w.pb[2]), n->index);
  cu_w(c, "  /* N=%lld C=%lld M=%lld group=%lld in=%lldx%lldx%lld out=%lldx%lldx%lld kernel=%lldx%lldx%lld */\n", LL(N),
       LL(C), LL(M), LL(G), LL(w.in[0]), LL(w.in[1]), LL(w.in[2]), LL(w.out[0]), LL(w.out[1]), LL(w.out[2]), LL(w.k[0]),
       LL(w.k[1]), LL(w.k[2]));
  cu_w(c, "  PK_TRY(pk_conv(S, %d, %s, %s, %s));\n", c->n_conv, xin, c->x[1], c->y[0]);
  c->n_conv++;
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
  cu_w(c, "  PK_TRY(pk_gemm(S, %s, %d, %d, %lld, %lld, %lld, %.17g, %s, %lld, 0, %s, %lld, 0, %.17g, %s, %lld, 0, 1));\n",
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
    cu_w(c, "  PK_TRY(pk_gemm(S, %s, 0, 0, %lld, %lld, %lld, 1, %s, %lld, %lld, %s, %lld, %lld, 0, %s, %lld, %lld, %lld));\n",
         T, LL(M), LL(N), LL(K), c->x[0], LL(K), LL(a_zero ? 0 : M * K), c->x[1], LL(N), LL(b_zero ? 0 : K * N),
         c->y[0], LL(N), LL(M * N), LL(NB));
    return 0;
  }
  /* mixed broadcasting: one GEMM per batch element */
  cu_w(c, "  for (long long bi = 0; bi < %lld; bi++) {\n    long long rem = bi, ao = 0, bo = 0;\n", LL(NB));
  for (int i = nb - 1; i >= 0; i--)
    cu_w(c, "    { const long long q = rem %% %lld; rem /= %lld; ao += q * %lld; bo += q * %lld; }\n", LL(bd[i]),
         LL(bd[i]), LL(sa[i]), LL(sb[i]));
  cu_w(c, "    PK_TRY(pk_gemm(S, %s, 0, 0, %lld, %lld, %lld, 1, %s + ao, %lld, 0, %s + bo, %lld, 0, 0, %s + bi * %lld, %lld, 0, 1));\n",
       T, LL(M), LL(N), LL(K), c->x[0], LL(K), c->x[1], LL(N), c->y[0], LL(M * N), LL(N));
  cu_w(c, "  }\n");
  return 0;
}

/* ---- pooling ------------------------------------------------------------------------------ */

static int emit_pool(cu_ctx *c, const ir_node *n) {
  ir_graph *g = c->g;
  ir_value *x = ir_in(g, n, 0), *y = ir_out(g, n, 0), *yi = ir_out(g, n, 1);
  if (need_float(c, n, y->dtype)) return -1;
  int sr = x->shape.rank - 2;
  cg_win3 w;
  if (cg_pool_window(c->g, "cuda", n, x, y, &w)) return -1;
  if (cg_numel(y) == 0) return 0;
  int is_max = n->op == IR_OP_MaxPool || n->op == IR_OP_GlobalMaxPool;
  int is_lp = n->op == IR_OP_LpPool || n->op == IR_OP_GlobalLpPool;
  int col_major = (int)ir_attr_int(n, "storage_order", 0);
  if (yi && col_major && sr != 2) return cu_fail(c, n, "storage_order=1 is supported for 2-D pooling only");
  if (yi && yi->dtype != IR_INT64) return cu_fail(c, n, "Indices must be int64");
  int node = (int)(n - g->nodes);
  cu_decl(c, "static const pk_pool_p pool%d = {%s, %d, %d, %.17g, %lld, ", node,
          is_max ? "PK_POOL_MAX" : is_lp ? "PK_POOL_LP" : "PK_POOL_AVG", (int)ir_attr_int(n, "count_include_pad", 0),
          col_major, (double)ir_attr_int(n, "p", 2), LL(x->shape.dims[0] * x->shape.dims[1]));
  put_i64s(c, w.in, 3), cu_decl(c, ", ");
  put_i64s(c, w.out, 3), cu_decl(c, ", ");
  put_i64s(c, w.k, 3), cu_decl(c, ", ");
  put_i64s(c, w.s, 3), cu_decl(c, ", ");
  put_i64s(c, w.d, 3), cu_decl(c, ", ");
  put_i64s(c, w.pb, 3), cu_decl(c, ", ");
  put_i64s(c, w.pe, 3), cu_decl(c, "};\n");
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
  if ((ym && ym->dtype != IR_FLOAT) || (yr && yr->dtype != IR_FLOAT)) return cu_fail(c, n, "Mean and InvStdDev must be float32");
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
  cu_w(c, "  PK_TRY(pk_softmax(S, %s, %s, %s, %lld, %lld, %lld));\n", kind, c->x[0], c->y[0], LL(outer), LL(A), LL(inner));
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
      cu_w(c, "  PK_TRY(pk_memcpy2d(S, %s, %lld, (const char *)%s + %lld, %lld, %lld, %lld));\n", c->y[k], LL(chunk * es),
           c->x[0], LL(off * es), LL(tot * es), LL(chunk * es), LL(outer));
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
  cu_w(c, "  PK_TRY(pk_gather(S, %d, %s, %s, %d, %s, %lld, %lld, %lld, %lld));\n", (int)ir_dtype_size(x->dtype), c->x[0],
       c->x[1], ix->dtype == IR_INT64, c->y[0], LL(outer), LL(x->shape.dims[axis]), LL(cg_numel(ix)), LL(inner));
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
  emit_copy_call(c, n, 0, (int)ir_dtype_size(x->dtype), r, 0, 0, y->shape.dims, st, NULL, NULL, 0, c->x[0], c->y[0]);
  return 0;
}

/* the bit pattern of v as an element of type t */
static uint64_t value_bits(double v, ir_dtype t) {
  uint64_t bits = 0;
  switch (t) {
    case IR_FLOAT: { float f = (float)v; memcpy(&bits, &f, 4); break; }
    case IR_DOUBLE: memcpy(&bits, &v, 8); break;
    case IR_INT8: case IR_INT16: case IR_INT32: case IR_INT64: {
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
  int m = !strcmp(mode, "constant") ? 1 : !strcmp(mode, "edge") ? 2 : !strcmp(mode, "reflect") ? 3 : !strcmp(mode, "wrap") ? 4 : -1;
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
  if (need_float(c, n, y->dtype) || need_float(c, n, x->dtype)) return -1;
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
  cu_decl(c, "static const pk_reduce_p red%d = {%s, %d, ", node, kind, rr);
  put_i64s(c, xd, rr);
  cu_decl(c, ", ");
  put_i64s(c, rd, rr);
  cu_decl(c, "};\n");
  cu_w(c, "  PK_TRY(pk_reduce(S, &red%d, %s, %s));\n", node, c->x[0], c->y[0]);
  return 0;
}

cu_op_fn cu_op_emitter(ir_op op) {
  switch (op) {
    case IR_OP_Conv: return emit_conv;
    case IR_OP_Gemm: return emit_gemm;
    case IR_OP_MatMul: return emit_matmul;
    case IR_OP_MaxPool: case IR_OP_AveragePool: case IR_OP_LpPool:
    case IR_OP_GlobalAveragePool: case IR_OP_GlobalMaxPool: case IR_OP_GlobalLpPool:
      return emit_pool;
    case IR_OP_BatchNormalization: return emit_batchnorm;
    case IR_OP_InstanceNormalization: return emit_instnorm;
    case IR_OP_LayerNormalization: return emit_layernorm;
    case IR_OP_Softmax: case IR_OP_LogSoftmax: case IR_OP_Hardmax: return emit_softmax;
    case IR_OP_Reshape: case IR_OP_Flatten: case IR_OP_Squeeze: case IR_OP_Unsqueeze: case IR_OP_Identity:
      return emit_copy;
    case IR_OP_Dropout: return emit_dropout;
    case IR_OP_Shape: case IR_OP_Size: return emit_shape;
    case IR_OP_ConstantOfShape: return emit_constant_of_shape;
    case IR_OP_Concat: return emit_concat;
    case IR_OP_Split: return emit_split;
    case IR_OP_Slice: return emit_slice;
    case IR_OP_Gather: return emit_gather;
    case IR_OP_Transpose: return emit_transpose;
    case IR_OP_Pad: return emit_pad;
    case IR_OP_Tile: return emit_tile;
    case IR_OP_ReduceMean: case IR_OP_ReduceSum: case IR_OP_ReduceMax: case IR_OP_ReduceMin: case IR_OP_ReduceProd:
    case IR_OP_ReduceL1: case IR_OP_ReduceL2: case IR_OP_ReduceLogSum: case IR_OP_ReduceLogSumExp:
    case IR_OP_ReduceSumSquare:
      return emit_reduce;
    default: return NULL;
  }
}
