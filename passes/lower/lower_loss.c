/* passes/lower/lower_loss.c - NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss in an
 * inference graph (a model that reports its loss, the ONNX node tests) written out in
 * ops every target has, after the definitions of ONNX opset 13:
 *
 *   t      = target (int64), with t == ignore_index replaced by class 0
 *   picked = GatherElements(input, Unsqueeze(t, 1), axis 1), squeezed: [N, d1, ...]
 *   w      = weight[t] (Gather), or 1; 0 where t == ignore_index
 *   loss   = -(picked * w)
 *   reduction none: loss; sum: ReduceSum(loss); mean: ReduceSum(loss) / ReduceSum(w),
 *   or ReduceMean(loss) when there is neither a weight nor an ignore_index.
 *
 * SoftmaxCrossEntropyLoss is LogSoftmax(scores, axis 1) followed by the above; its
 * optional second output is that LogSoftmax. The lowered nodes keep the loss node's
 * output names, so the pipeline's outputs are named as the model's.
 *
 * Training does not come here: a loss node named by --loss is lowered by
 * passes/train/optim.c (lower_loss_node), where the reduction also sets the gradient's scale. */
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/rewrite.h"
#include "passes/lower/lower_loss.h"

/* The sum (or mean) of every element of x (rank >= 1), a scalar. */
static int reduce_all(ad_ctx *a, ir_op op, int x) {
  int64_t axes[IR_MAX_RANK];
  int r = ad_shape(a, x).rank;
  for (int i = 0; i < r; i++) axes[i] = i;
  return ad_reduce(a, op, x, axes, r, 0);
}

static int lower(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int sce = nd.op == IR_OP_SoftmaxCrossEntropyLoss;
  const char *red = ir_attr_str(&nd, "reduction", "mean");
  if (strcmp(red, "mean") && strcmp(red, "sum") && strcmp(red, "none")) {
    ir_error_node(g, node, "reduction '%s' is not none, sum or mean", red);
    return -1;
  }
  int x = nd.in[0], t = nd.in[1], w = nd.n_in > 2 ? nd.in[2] : -1;
  int has_ii = ir_attr_find(&nd, "ignore_index") != NULL;
  int64_t ii = ir_attr_int(&nd, "ignore_index", 0);
  ir_shape xs = ad_shape(a, x), ts = ad_shape(a, t);
  ir_dtype ft = ad_dtype(a, x);
  if (xs.rank < 2 || ts.rank != xs.rank - 1) {
    ir_error_node(g, node, "needs input [N, C, d1, ...] and target [N, d1, ...]");
    return -1;
  }
  int out1 = sce && nd.n_out > 1 ? nd.out[1] : -1;
  if (sce) {
    int id = ad_begin(a, IR_OP_LogSoftmax, &x, 1, 1, NULL);
    ad_attr_i(a, id, "axis", 1);
    x = ad_end(a, id);
  }
  t = ad_cast(a, t, IR_INT64);
  int mask = -1;
  if (has_ii) { /* ignored targets read class 0, with weight 0 */
    mask = ad_bin(a, IR_OP_Equal, t, ad_c_i64_scalar(a, ii));
    int in[3] = {mask, ad_c_i64_scalar(a, 0), t};
    t = ad_op(a, IR_OP_Where, in, 3);
  }
  ir_shape us = ts; /* [N, 1, d1, ...] */
  us.rank = xs.rank;
  us.dims[0] = ts.dims[0];
  us.dims[1] = 1;
  for (int i = 1; i < ts.rank; i++) us.dims[i + 1] = ts.dims[i];
  int gin[2] = {x, ad_reshape(a, t, &us)};
  int id = ad_begin(a, IR_OP_GatherElements, gin, 2, 1, NULL);
  ad_attr_i(a, id, "axis", 1);
  int picked = ad_reshape(a, ad_end(a, id), &ts);
  int wt = -1;
  if (w >= 0) {
    int in[2] = {w, t};
    wt = ad_op(a, IR_OP_Gather, in, 2);
  }
  if (has_ii) {
    int in[3] = {mask, ad_c_f(a, 0, ft), wt >= 0 ? wt : ad_c_f(a, 1, ft)};
    wt = ad_op(a, IR_OP_Where, in, 3);
  }
  int prod = wt >= 0 ? ad_bin(a, IR_OP_Mul, picked, wt) : picked;
  int loss;
  if (!strcmp(red, "none")) loss = ad_un(a, IR_OP_Neg, prod);
  else if (!strcmp(red, "sum")) loss = reduce_all(a, IR_OP_ReduceSum, ad_un(a, IR_OP_Neg, prod));
  else if (wt < 0) loss = reduce_all(a, IR_OP_ReduceMean, ad_un(a, IR_OP_Neg, prod));
  else
    loss = ad_bin(a, IR_OP_Div, reduce_all(a, IR_OP_ReduceSum, ad_un(a, IR_OP_Neg, prod)),
                  reduce_all(a, IR_OP_ReduceSum, wt));
  if (a->err) return -1;
  ir_take_output(a->g, loss, nd.out[0]);
  if (out1 >= 0) ir_take_output(a->g, x, out1);
  return 0;
}

static int is_loss(const ir_node *n) {
  return n->op == IR_OP_NegativeLogLikelihoodLoss || n->op == IR_OP_SoftmaxCrossEntropyLoss;
}

int pass_lower_losses(ir_graph *g) { return ad_lower_nodes(g, "lowered", is_loss, lower); }
