/* passes/shape/shape_index.c - indexed gather/scatter (ScatterElements, ScatterND,
 * GatherND), TopK, and the training losses NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss. */
#include <inttypes.h>
#include <string.h>

#include "passes/shape/shape_impl.h"

/* ScatterElements-18: indices and updates have one shape, of data's rank; the output
 * is data. */
int sh_ScatterElements(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0), *idx = sh_in(g, node, 1), *up = sh_in(g, node, 2);
  char a[256], b[256];
  int ax;
  if (sh_check_dtype(g, node, idx, SH_INDEX, "input 'indices'") ||
      sh_same_dtype(g, node, x, up, "input 'data'", "input 'updates'"))
    return -1;
  if (x->shape.rank < 1 || idx->shape.rank != x->shape.rank ||
      ir_shape_numel(&idx->shape) != ir_shape_numel(&up->shape) || idx->shape.rank != up->shape.rank)
    SH_FAIL("'indices' %s and 'updates' %s must have one shape, of the rank of 'data'",
            sh_str(&idx->shape, a, sizeof a), sh_str(&up->shape, b, sizeof b));
  if (sh_axis(g, node, ir_attr_int(SH_NODE, "axis", 0), x->shape.rank, "axis", &ax)) return -1;
  SH_NODE->flops = sh_numel(&up->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* ScatterND-18: indices [..., k] with k <= rank(data); updates =
 * indices.shape[:-1] + data.shape[k:]; the output is data. */
int sh_ScatterND(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0), *idx = sh_in(g, node, 1), *up = sh_in(g, node, 2);
  char a[256], b[256];
  if (sh_check_dtype(g, node, idx, SH_BIT(IR_INT64), "input 'indices'") ||
      sh_same_dtype(g, node, x, up, "input 'data'", "input 'updates'"))
    return -1;
  int q = idx->shape.rank, r = x->shape.rank;
  if (r < 1 || q < 1) SH_FAIL("'data' and 'indices' must have rank >= 1");
  int64_t k = idx->shape.dims[q - 1];
  if (k > r)
    SH_FAIL("'indices' %s indexes %" PRId64 " dims of 'data' of rank %d", sh_str(&idx->shape, a, sizeof a), k, r);
  ir_shape want = {0};
  for (int i = 0; i < q - 1; i++) want.dims[want.rank++] = idx->shape.dims[i];
  for (int i = (int)k; i < r; i++) {
    if (want.rank >= IR_MAX_RANK) SH_FAIL("'updates' would have rank > %d", IR_MAX_RANK);
    want.dims[want.rank++] = x->shape.dims[i];
  }
  int ok = want.rank == up->shape.rank;
  for (int i = 0; ok && i < want.rank; i++) ok = want.dims[i] == up->shape.dims[i];
  if (!ok) SH_FAIL("'updates' has shape %s, expected %s", sh_str(&up->shape, a, sizeof a), sh_str(&want, b, sizeof b));
  SH_NODE->flops = sh_numel(&up->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* GatherND-13: out = indices.shape[:-1] + data.shape[batch_dims + k:], k = indices.shape[-1]. */
int sh_GatherND(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0), *idx = sh_in(g, node, 1);
  char a[256], b[256];
  if (sh_check_dtype(g, node, idx, SH_BIT(IR_INT64), "input 'indices'")) return -1;
  int q = idx->shape.rank, r = x->shape.rank;
  int64_t bd = ir_attr_int(SH_NODE, "batch_dims", 0);
  if (r < 1 || q < 1) SH_FAIL("'data' and 'indices' must have rank >= 1");
  if (bd < 0 || bd >= q || bd >= r) SH_FAIL("attribute 'batch_dims' %" PRId64 " must be below both ranks", bd);
  for (int i = 0; i < bd; i++)
    if (x->shape.dims[i] != idx->shape.dims[i])
      SH_FAIL("batch dims of 'data' %s and 'indices' %s differ", sh_str(&x->shape, a, sizeof a),
              sh_str(&idx->shape, b, sizeof b));
  int64_t k = idx->shape.dims[q - 1];
  if (k < 1 || k > r - bd)
    SH_FAIL("'indices' %s indexes %" PRId64 " dims; 'data' %s has %d after the batch dims",
            sh_str(&idx->shape, a, sizeof a), k, sh_str(&x->shape, b, sizeof b), (int)(r - bd));
  ir_shape out = {0};
  for (int i = 0; i < q - 1; i++) out.dims[out.rank++] = idx->shape.dims[i];
  for (int i = (int)(bd + k); i < r; i++) {
    if (out.rank >= IR_MAX_RANK) SH_FAIL("the output would have rank > %d", IR_MAX_RANK);
    out.dims[out.rank++] = x->shape.dims[i];
  }
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* TopK-11 (K input since 10, attribute 'k' in 1): values and int64 indices with
 * dim 'axis' (default -1) replaced by K. */
int sh_TopK(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  int64_t k;
  int ax, cnt;
  if (sh_check_dtype(g, node, x, SH_NUM, "input X")) return -1;
  if (n->opset >= 10) {
    if (n->n_in < 2 || n->in[1] < 0) SH_FAIL("input 'K' is required");
    if (sh_const_ints(g, node, 1, "K", &k, 1, &cnt)) return -1;
    if (cnt != 1) SH_FAIL("input 'K' must hold one value");
  } else {
    k = ir_attr_int(n, "k", -1);
  }
  if (x->shape.rank < 1) SH_FAIL("input X must have rank >= 1");
  if (sh_axis(g, node, ir_attr_int(n, "axis", -1), x->shape.rank, "axis", &ax)) return -1;
  if (k < 0 || k > x->shape.dims[ax]) SH_FAIL("K is %" PRId64 ", axis %d has size %" PRId64, k, ax, x->shape.dims[ax]);
  ir_shape out = x->shape;
  out.dims[ax] = k;
  n->flops = sh_numel(&x->shape);
  if (sh_set_out(g, node, 0, x->dtype, &out)) return -1;
  return sh_set_out(g, node, 1, IR_INT64, &out);
}

/* Shared by the losses: input [N, C, d...], target [N, d...], weight [C];
 * reduction none -> target's shape, mean/sum -> scalar. */
static int loss_shape(ir_graph *g, int node, const char *in_name, ir_shape *out) {
  ir_value *x = sh_in(g, node, 0), *t = sh_in(g, node, 1), *w = sh_in(g, node, 2);
  char a[256], b[256];
  if (sh_check_dtype(g, node, x, SH_FLOATS, in_name) || sh_check_dtype(g, node, t, SH_INDEX, "target")) return -1;
  int r = x->shape.rank;
  int ok = r >= 2 && t->shape.rank == r - 1 && t->shape.dims[0] == x->shape.dims[0];
  for (int i = 2; ok && i < r; i++) ok = t->shape.dims[i - 1] == x->shape.dims[i];
  if (!ok)
    SH_FAIL("%s %s and target %s must be [N, C, d...] and [N, d...]", in_name, sh_str(&x->shape, a, sizeof a),
            sh_str(&t->shape, b, sizeof b));
  if (w && (w->shape.rank != 1 || w->shape.dims[0] != x->shape.dims[1]))
    SH_FAIL("weight %s must be [C] = [%" PRId64 "]", sh_str(&w->shape, a, sizeof a), x->shape.dims[1]);
  if (w && sh_same_dtype(g, node, x, w, in_name, "weight")) return -1;
  const char *red = ir_attr_str(SH_NODE, "reduction", "mean");
  memset(out, 0, sizeof *out);
  if (!strcmp(red, "none")) *out = t->shape;
  else if (strcmp(red, "mean") && strcmp(red, "sum")) {
    ir_printable(red, 40, a, sizeof a);
    SH_FAIL("attribute 'reduction' is '%s' (expected none, sum or mean)", a);
  }
  SH_NODE->flops = 3 * sh_numel(&x->shape);
  return 0;
}

/* NegativeLogLikelihoodLoss-13. */
int sh_NegativeLogLikelihoodLoss(ir_graph *g, int node) {
  ir_shape out;
  if (loss_shape(g, node, "input", &out)) return -1;
  return sh_set_out(g, node, 0, sh_in(g, node, 0)->dtype, &out);
}

/* SoftmaxCrossEntropyLoss-13: output 1 (log_prob) has the scores' shape. */
int sh_SoftmaxCrossEntropyLoss(ir_graph *g, int node) {
  ir_shape out;
  ir_value *x = sh_in(g, node, 0);
  if (loss_shape(g, node, "scores", &out)) return -1;
  SH_NODE->flops += 5 * sh_numel(&x->shape);
  if (sh_set_out(g, node, 0, x->dtype, &out)) return -1;
  return sh_set_out(g, node, 1, x->dtype, &x->shape);
}
