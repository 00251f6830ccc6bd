/* passes/train/optim.c - training: the loss, autodiff (passes/train/autodiff.c), the optimizer
 * update, and the two forms of a training program (see passes/train/autodiff.h):
 *   - pass_autodiff: one step as a pure function (inputs -> loss, grad/W, new/W);
 *   - pass_train_loss + pass_train_program: the pipelined program (forward, backward
 *     and update phases of every stage; gradient accumulators; write-backs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/train/autodiff.h"
#include "passes/train/autodiff_impl.h"
#include "passes/pass.h"
#include "passes/rnn.h"

void pass_train_opts_default(pass_train_opts *t) {
  memset(t, 0, sizeof *t);
  t->loss = "cross-entropy";
  t->labels = "labels";
  t->optimizer = "sgd";
  t->lr = 0.01;
  t->beta1 = 0.9;
  t->beta2 = 0.999;
  t->eps = 1e-8;
}

/* ---- the loss ---------------------------------------------------------------------- */

/* One-hot float [rows, C] of int labels [rows]: Cast(Equal(labels[:, None], arange(C)))
 * (element-wise ops every backend has). */
static int one_hot(ad_ctx *a, int lab, int64_t rows, int64_t C) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = 2;
  s.dims[0] = rows;
  s.dims[1] = 1;
  int l2 = ad_cast(a, ad_reshape(a, lab, &s), IR_INT64);
  int64_t *ar = malloc(sizeof(int64_t) * (size_t)(C ? C : 1));
  for (int64_t i = 0; i < C; i++) ar[i] = i;
  s.dims[0] = 1;
  s.dims[1] = C;
  int cls = ir_add_const(a->g, "loss/classes", IR_INT64, &s, ar, sizeof(int64_t) * (size_t)C);
  free(ar);
  return ad_cast(a, ad_bin(a, IR_OP_Equal, l2, cls), a->ft);
}

static int add_input(ir_graph *g, const char *name, ir_dtype dt, const ir_shape *s) {
  if (ir_find_value(g, name) >= 0) {
    ir_error(g, "--labels %s: the model already has a value of that name", name);
    return -1;
  }
  int v = ir_add_value(g, name, IR_VAL_INPUT, dt);
  g->values[v].shape = *s;
  int *in = ir_alloc_array(g->arena, (size_t)g->n_inputs + 1, sizeof(int));
  if (g->n_inputs) memcpy(in, g->inputs, sizeof(int) * (size_t)g->n_inputs);
  in[g->n_inputs++] = v;
  g->inputs = in;
  return v;
}

/* Cross-entropy of logits z [N, C] (or [..., C]) against int64 labels: the mean over
 * the rows of -log_softmax(z)[label], as ONNX ops (LogSoftmax, one_hot, Mul, ReduceSum). */
static int loss_ce(ad_ctx *a, int z, const char *labels, const char *out_name) {
  ir_graph *g = a->g;
  ir_shape zs = ad_shape(a, z), ls, z2;
  if (zs.rank < 2) {
    ir_error(g, "--loss cross-entropy: output '%s' must have rank >= 2 (batch, classes)", g->values[z].name);
    return -1;
  }
  memset(&ls, 0, sizeof ls);
  memset(&z2, 0, sizeof z2);
  int64_t C = zs.dims[zs.rank - 1], rows = 1;
  ls.rank = zs.rank - 1;
  for (int i = 0; i < ls.rank; i++) ls.dims[i] = zs.dims[i], rows *= zs.dims[i];
  int lab = add_input(g, labels, IR_INT64, &ls);
  if (lab < 0) return -1;
  z2.rank = 2;
  z2.dims[0] = rows;
  z2.dims[1] = C;
  z = ad_reshape(a, z, &z2);
  int id = ad_begin(a, IR_OP_LogSoftmax, &z, 1, 1, NULL);
  ad_attr_i(a, id, "axis", 1);
  int lsm = ad_end(a, id);
  int prod = ad_bin(a, IR_OP_Mul, one_hot(a, lab, rows, C), lsm);
  id = ad_begin(a, IR_OP_ReduceSum, &prod, 1, 1, NULL);
  ad_attr_i(a, id, "keepdims", 0);
  int s = ad_un(a, IR_OP_Neg, ad_end(a, id));
  int in2[2] = {s, ad_c_f(a, (double)rows, a->ft)};
  return ad_end(a, ad_begin(a, IR_OP_Div, in2, 2, 1, out_name));
}

/* A SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss node named as the loss is lowered
 * to LogSoftmax/one_hot/Mul/ReduceSum (no emitter has them; in inference graphs
 * passes/lower/lower_loss.c writes them out in full); its uses move to the new loss.
 * *is_sum is set for reduction "sum". */
static int lower_loss_node(ad_ctx *a, int node, int *is_sum) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int sce = nd.op == IR_OP_SoftmaxCrossEntropyLoss;
  const char *red = ir_attr_str(&nd, "reduction", "mean");
  if ((nd.n_in > 2 && nd.in[2] >= 0) || ir_attr_find(&nd, "ignore_index") ||
      (strcmp(red, "mean") && strcmp(red, "sum")) || g->values[nd.in[0]].shape.rank != 2 ||
      (nd.n_out > 1 && nd.out[1] >= 0 && !sce)) {
    ir_error_node(g, node,
                  "autodiff: only a %s of scores [N, C] with mean or sum reduction, no weights and no ignore_index, "
                  "can be the loss",
                  ir_op_name(nd.op));
    return -1;
  }
  ir_shape zs = g->values[nd.in[0]].shape;
  int lsm = nd.in[0];
  a->stage = nd.stage;
  if (sce) {
    int id = ad_begin(a, IR_OP_LogSoftmax, &lsm, 1, 1, NULL);
    ad_attr_i(a, id, "axis", 1);
    lsm = ad_end(a, id);
  }
  int prod = ad_bin(a, IR_OP_Mul, one_hot(a, nd.in[1], zs.dims[0], zs.dims[1]), lsm);
  int id = ad_begin(a, IR_OP_ReduceSum, &prod, 1, 1, NULL);
  ad_attr_i(a, id, "keepdims", 0);
  int s = ad_un(a, IR_OP_Neg, ad_end(a, id));
  *is_sum = !strcmp(red, "sum");
  int loss = *is_sum ? s : ad_bin(a, IR_OP_Div, s, ad_c_f(a, (double)zs.dims[0], a->ft));
  g->nodes[node].dead = 1;
  ir_replace_uses(g, nd.out[0], loss);
  if (nd.n_out > 1 && nd.out[1] >= 0) ir_replace_uses(g, nd.out[1], lsm);
  return loss;
}

/* Mean squared error over all elements. */
static int loss_mse(ad_ctx *a, int y, const char *labels, const char *out_name) {
  ir_shape ys = ad_shape(a, y);
  int t = add_input(a->g, labels, ad_dtype(a, y), &ys);
  if (t < 0) return -1;
  int d = ad_bin(a, IR_OP_Sub, y, t);
  int sq = ad_bin(a, IR_OP_Mul, d, d);
  int id = ad_begin(a, IR_OP_ReduceMean, &sq, 1, 1, out_name);
  ad_attr_i(a, id, "keepdims", 0);
  return ad_end(a, id);
}

/* The loss (forward nodes); sets a->ft, *y (the model output the built-in losses read,
 * -1 for a named loss) and *is_sum (the loss is a sum, not a mean, over the samples). */
static int build_loss(ad_ctx *a, const pass_train_opts *t, const char *out_name, int *y_out, int *is_sum) {
  ir_graph *g = a->g;
  a->base = "loss";
  a->tag = "fwd";
  a->cnt = 0;
  a->phase = IR_PHASE_FWD;
  a->stage = -1;
  *y_out = -1;
  *is_sum = 0;
  int ce = !strcmp(t->loss, "cross-entropy"), mse = !strcmp(t->loss, "mse");
  if (!ce && !mse) {
    int v = ir_find_value(g, t->loss);
    if (v < 0) {
      ir_error(g, "--loss %s: not cross-entropy or mse, and the model has no value of that name", t->loss);
      return -1;
    }
    if ((g->values[v].dtype != IR_FLOAT && g->values[v].dtype != IR_DOUBLE) ||
        ir_shape_numel(&g->values[v].shape) != 1) {
      ir_error(g, "--loss %s: the loss must be a float32 or float64 value of one element", t->loss);
      return -1;
    }
    a->ft = g->values[v].dtype;
    int p = g->values[v].producer;
    if (p >= 0 &&
        (g->nodes[p].op == IR_OP_SoftmaxCrossEntropyLoss || g->nodes[p].op == IR_OP_NegativeLogLikelihoodLoss))
      return lower_loss_node(a, p, is_sum);
    if (g->values[v].shape.rank == 0) return v;
    int id = ad_begin(a, IR_OP_ReduceMean, &v, 1, 1, NULL);
    ad_attr_i(a, id, "keepdims", 0);
    return ad_end(a, id);
  }
  int y = -1;
  for (int k = 0; k < g->n_outputs && y < 0; k++)
    if (g->values[g->outputs[k]].dtype == IR_FLOAT || g->values[g->outputs[k]].dtype == IR_DOUBLE) y = g->outputs[k];
  if (y < 0) {
    int narrow = 0;
    for (int k = 0; k < g->n_outputs; k++) narrow |= ir_dtype_narrow(g->values[g->outputs[k]].dtype);
    ir_error(
        g, "--loss %s: the model has no float32 or float64 output%s", t->loss,
        narrow ? " (pipecc trains float32 models: its float16/bfloat16/float8 outputs would need loss scaling; export "
                 "the float32 model to train)"
               : "");
    return -1;
  }
  a->ft = g->values[y].dtype;
  *y_out = y;
  return ce ? loss_ce(a, y, t->labels, out_name) : loss_mse(a, y, t->labels, out_name);
}

/* ---- the optimizer update ------------------------------------------------------------ */

typedef struct {
  int *v;
  int n, cap;
} vec;
static void push(vec *o, int v) {
  if (o->n == o->cap) {
    o->cap = o->cap ? 2 * o->cap : 64;
    o->v = ir_xrealloc(o->v, sizeof(int) * (size_t)o->cap);
  }
  o->v[o->n++] = v;
}

/* name of a made value: "new/<p>" etc. */
static const char *nm(ad_ctx *a, const char *pre, const char *p, const char *post) {
  return ir_sprintf(a->g->arena, "%s%s%s", pre, p, post ? post : "");
}

static int named(ad_ctx *a, ir_op op, int x, int y, const char *name) {
  int in[2] = {x, y};
  return ad_end(a, ad_begin(a, op, in, 2, 1, name));
}

/* Optimizer hyperparameters: compile-time constants (the step function), or scalar
 * params "hyper/<name>" the runtime may override (the pipelined program; one value
 * each, read by every stage that holds a copy). */
enum { HY_LR, HY_MOMENTUM, HY_WD, HY_BETA1, HY_BETA2, HY_EPS, HY_N };
static const char *const hyper_names[HY_N] = {"lr", "momentum", "weight_decay", "beta1", "beta2", "eps"};

typedef struct {
  const pass_train_opts *t;
  int as_params;
  int v[HY_N]; /* params made so far, -1 */
} hyper;

static double hyper_value(const pass_train_opts *t, int k) {
  switch (k) {
    case HY_LR: return t->lr;
    case HY_MOMENTUM: return t->momentum;
    case HY_WD: return t->weight_decay;
    case HY_BETA1: return t->beta1;
    case HY_BETA2: return t->beta2;
    default: return t->eps;
  }
}

static int hy(ad_ctx *a, hyper *h, int k) {
  double x = hyper_value(h->t, k);
  if (!h->as_params) return ad_c_f(a, x, a->ft);
  if (h->v[k] < 0) {
    ir_shape s0;
    memset(&s0, 0, sizeof s0);
    float f = (float)x;
    h->v[k] = ir_add_const(a->g, ir_sprintf(a->g->arena, "hyper/%s", hyper_names[k]), a->ft, &s0,
                           a->ft == IR_DOUBLE ? (const void *)&x : (const void *)&f, ir_dtype_size(a->ft));
    a->g->values[h->v[k]].param = IR_PARAM_HYPER;
  }
  return h->v[k];
}

/* 1 - hyperparameter k (folded at compile time in the step function). */
static int one_minus(ad_ctx *a, hyper *h, int k) {
  if (!h->as_params) return ad_c_f(a, 1 - hyper_value(h->t, k), a->ft);
  return ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), hy(a, h, k));
}

/* Optimizer state tensor "state/<p>/<what>" (zeros at the start). */
static int state(ad_ctx *a, const char *p, const char *what, const ir_shape *s) {
  int v = ir_add_zero_const(a->g, ir_sprintf(a->g->arena, "state/%s/%s", p, what), a->ft, s);
  a->g->values[v].is_initializer = 1;
  a->g->values[v].param = IR_PARAM_OPTSTATE;
  return v;
}

/* The update of trained initializer v (named p) from gradient gv, following torch.optim
 * (1.13) exactly: SGD (momentum, dampening 0, Nesterov, weight decay), Adam (L2 weight
 * decay), AdamW (decoupled weight decay). Adam's step count is per weight, as in torch.
 * Pushes the new optimizer state values (named "new/state/<p>/...") with the state
 * tensor each replaces onto st_new/st_old; returns the new weight "new/<p>". */
static int update(ad_ctx *a, const pass_train_opts *t, hyper *h, int v, int gv, vec *st_new, vec *st_old) {
  const char *p = a->g->values[v].name;
  ir_shape ps = a->g->values[v].shape, s0;
  memset(&s0, 0, sizeof s0);
  a->base = p;
  a->tag = "optim";
  a->cnt = 0;
  if (!strcmp(t->optimizer, "sgd")) {
    int d = gv;
    if (t->weight_decay) d = ad_bin(a, IR_OP_Add, d, ad_bin(a, IR_OP_Mul, v, hy(a, h, HY_WD)));
    if (t->momentum) {
      int buf = state(a, p, "momentum", &ps);
      int nb =
          named(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, buf, hy(a, h, HY_MOMENTUM)), d, nm(a, "new/state/", p, "/momentum"));
      push(st_new, nb);
      push(st_old, buf);
      d = t->nesterov ? ad_bin(a, IR_OP_Add, d, ad_bin(a, IR_OP_Mul, nb, hy(a, h, HY_MOMENTUM))) : nb;
    }
    return named(a, IR_OP_Sub, v, ad_bin(a, IR_OP_Mul, d, hy(a, h, HY_LR)), nm(a, "new/", p, NULL));
  }
  int adamw = !strcmp(t->optimizer, "adamw");
  int d = gv, p0 = v;
  if (!adamw && t->weight_decay) d = ad_bin(a, IR_OP_Add, d, ad_bin(a, IR_OP_Mul, v, hy(a, h, HY_WD)));
  if (adamw && t->weight_decay) {
    int f = h->as_params
                ? ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), ad_bin(a, IR_OP_Mul, hy(a, h, HY_LR), hy(a, h, HY_WD)))
                : ad_c_f(a, 1 - t->lr * t->weight_decay, a->ft);
    p0 = ad_bin(a, IR_OP_Mul, v, f);
  }
  int step = state(a, p, "step", &s0);
  int tnew = named(a, IR_OP_Add, step, ad_c_f(a, 1, a->ft), nm(a, "new/state/", p, "/step"));
  push(st_new, tnew);
  push(st_old, step);
  int bc1 = ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), ad_bin(a, IR_OP_Pow, hy(a, h, HY_BETA1), tnew));
  int bc2 = ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), ad_bin(a, IR_OP_Pow, hy(a, h, HY_BETA2), tnew));
  int step_size = ad_bin(a, IR_OP_Div, hy(a, h, HY_LR), bc1);
  int bc2s = ad_un(a, IR_OP_Sqrt, bc2);
  int m = state(a, p, "m", &ps), s = state(a, p, "v", &ps);
  int nm1 = named(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, m, hy(a, h, HY_BETA1)),
                  ad_bin(a, IR_OP_Mul, d, one_minus(a, h, HY_BETA1)), nm(a, "new/state/", p, "/m"));
  int nv =
      named(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, s, hy(a, h, HY_BETA2)),
            ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Mul, d, d), one_minus(a, h, HY_BETA2)), nm(a, "new/state/", p, "/v"));
  push(st_new, nm1);
  push(st_old, m);
  push(st_new, nv);
  push(st_old, s);
  int denom = ad_bin(a, IR_OP_Add, ad_bin(a, IR_OP_Div, ad_un(a, IR_OP_Sqrt, nv), bc2s), hy(a, h, HY_EPS));
  return named(a, IR_OP_Sub, p0, ad_bin(a, IR_OP_Mul, step_size, ad_bin(a, IR_OP_Div, nm1, denom)),
               nm(a, "new/", p, NULL));
}

static int check_optimizer(ir_graph *g, const pass_train_opts *t) {
  if (strcmp(t->optimizer, "sgd") && strcmp(t->optimizer, "adam") && strcmp(t->optimizer, "adamw")) {
    ir_error(g, "--optimizer %s: expected sgd, adam or adamw", t->optimizer);
    return -1;
  }
  return 0;
}

static int is_trained(const ad_ctx *a, int v) {
  const ir_value *pv = &a->g->values[v];
  return pv->kind == IR_VAL_CONST && pv->is_initializer && pv->dtype == a->ft && a->grad[v] >= 0;
}

/* Set the graph outputs, drop the nodes none of them (nor a write-back) needs, sort,
 * compact and infer shapes again. */
static int finish(ir_graph *g, const vec *outs, int verbose, const char *what) {
  for (int k = 0; k < g->n_outputs; k++) g->values[g->outputs[k]].is_output = 0;
  g->outputs = ir_alloc_array(g->arena, (size_t)outs->n, sizeof(int));
  memcpy(g->outputs, outs->v, sizeof(int) * (size_t)outs->n);
  g->n_outputs = outs->n;
  for (int k = 0; k < outs->n; k++) g->values[outs->v[k]].is_output = 1;
  char *need = ir_xcalloc((size_t)g->n_values + 1, 1);
  for (int k = 0; k < g->n_outputs; k++) need[g->outputs[k]] = 1;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].writeback >= 0) need[v] = 1;
  if (ir_toposort(g)) {
    free(need);
    return -1;
  }
  ir_remove_dead(g, need);
  free(need);
  ir_compact(g);
  pass_opts o;
  memset(&o, 0, sizeof o);
  o.training = 1;
  if (pass_shape(g, &o)) return -1;
  if (verbose) fprintf(stderr, "pipecc: %s: %d nodes\n", what, g->n_nodes);
  return g->n_errors ? -1 : 0;
}

/* ---- one step as a function ---------------------------------------------------------- */

int pass_autodiff(ir_graph *g, const pass_train_opts *t) {
  ad_ctx ctx, *a = &ctx;
  memset(&ctx, 0, sizeof ctx);
  a->g = g;
  a->stage = -1;
  if (check_optimizer(g, t) || pass_rnn_unroll(g)) return -1;
  int y, is_sum;
  int loss = build_loss(a, t, "loss", &y, &is_sum);
  if (loss < 0 || a->err) return -1;
  if (ad_backward(a, loss)) {
    free(a->need);
    free(a->grad);
    return -1;
  }

  vec outs = {0}, st_new = {0}, st_old = {0};
  push(&outs, loss);
  int n0 = a->n0, n_params = 0;
  hyper h = {t, 0, {-1, -1, -1, -1, -1, -1}};
  a->phase = IR_PHASE_UPD;
  for (int v = 0; v < n0; v++) {
    if (!is_trained(a, v)) continue;
    n_params++;
    a->base = g->values[v].name;
    a->tag = "grad";
    a->cnt = 0;
    int gv = a->grad[v];
    push(&outs, ad_end(a, ad_begin(a, IR_OP_Identity, &gv, 1, 1, nm(a, "grad/", g->values[v].name, NULL))));
    push(&outs, update(a, t, &h, v, gv, &st_new, &st_old));
  }
  free(a->need);
  free(a->grad);
  /* BatchNormalization in training mode: its updated running mean and variance, when
   * the node computes them from initializers, become "new/<initializer>" outputs */
  for (int i = 0; i < g->n_nodes && !a->err; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead || n->op != IR_OP_BatchNormalization || !ir_attr_int(n, "training_mode", 0)) continue;
    for (int k = 1; k <= 2 && k < n->n_out; k++) {
      int o = n->out[k], src = n->in[2 + k];
      if (o < 0 || src < 0 || !g->values[src].is_initializer || g->values[src].kind != IR_VAL_CONST) continue;
      a->base = n->name;
      a->tag = "running";
      a->cnt = k;
      int id = ad_begin(a, IR_OP_Identity, &o, 1, 1, nm(a, "new/", g->values[src].name, NULL));
      push(&st_new, ad_end(a, id));
      n = &g->nodes[i];
    }
  }
  for (int k = 0; k < st_new.n; k++) push(&outs, st_new.v[k]);
  int rc = a->err || g->n_errors ? -1 : finish(g, &outs, t->verbose, "autodiff: the training step");
  if (!rc && t->verbose)
    fprintf(stderr, "pipecc: autodiff: %d trained initializers, optimizer %s\n", n_params, t->optimizer);
  free(outs.v);
  free(st_new.v);
  free(st_old.v);
  return rc;
}

/* ---- the pipelined program ------------------------------------------------------------- */

int pass_train_loss(ir_graph *g, const pass_train_opts *t, pass_train_info *ti) {
  ad_ctx ctx, *a = &ctx;
  memset(&ctx, 0, sizeof ctx);
  memset(ti, 0, sizeof *ti);
  a->g = g;
  if (check_optimizer(g, t) || pass_rnn_unroll(g)) return -1;
  int y, is_sum;
  int loss = build_loss(a, t, NULL, &y, &is_sum);
  if (loss < 0 || a->err || g->n_errors) return -1;
  /* the runtime gathers the per-micro-batch losses along dim 0: shape [1] */
  ir_shape s1;
  memset(&s1, 0, sizeof s1);
  s1.rank = 1;
  s1.dims[0] = 1;
  a->base = "loss";
  a->tag = "out";
  int lout = ad_end(a, ad_begin(a, IR_OP_Reshape, (int[]){loss, ad_c_i64(a, s1.dims, 1)}, 2, 1, "loss"));
  vec outs = {0};
  push(&outs, lout);
  int ce = !strcmp(t->loss, "cross-entropy");
  if (ce && y >= 0) push(&outs, y); /* the logits: the runtime counts correct predictions */
  ti->loss_scalar = g->values[loss].name;
  ti->loss_sum = is_sum;
  ti->classify = ce && y >= 0;
  ti->labels = ir_find_value(g, t->labels) >= 0 && g->values[ir_find_value(g, t->labels)].kind == IR_VAL_INPUT
                   ? t->labels
                   : NULL;
  int rc = a->err || g->n_errors ? -1 : finish(g, &outs, t->verbose, "train: forward and loss");
  free(outs.v);
  return rc;
}

/* A forward node that reads only constants (a weight's Transpose, say) moves to the
 * earliest stage that uses its result, so that the weight, not a copy of it per
 * micro-batch, is what stages share. Nodes are visited consumers first. */
static void sink_param_nodes(ir_graph *g) {
  ir_rebuild_uses(g);
  char *param_only = ir_xcalloc((size_t)g->n_nodes + 1, 1);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    int only = 1;
    for (int k = 0; k < n->n_in && only; k++) {
      int v = n->in[k];
      if (v < 0) continue;
      const ir_value *x = &g->values[v];
      only = x->kind == IR_VAL_CONST || (x->kind == IR_VAL_ACT && x->producer >= 0 && param_only[x->producer]);
    }
    param_only[i] = (char)only;
  }
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    ir_node *n = &g->nodes[i];
    if (!param_only[i]) continue;
    int best = -1;
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0) continue;
      if (g->values[v].is_output) best = n->stage; /* a graph output stays where it is */
      for (int u = 0; u < g->values[v].n_uses; u++) {
        int c = g->use_list[g->values[v].use_off + u];
        if (best < 0 || g->nodes[c].stage < best) best = g->nodes[c].stage;
      }
    }
    if (best > n->stage) n->stage = best;
  }
  free(param_only);
}

int pass_train_program(ir_graph *g, const pass_train_opts *t, int microbatches, pass_train_info *ti) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].stage < 0) {
      ir_error_node(g, i, "internal error: train: a forward node without a stage");
      return -1;
    }
  sink_param_nodes(g);
  ad_ctx ctx, *a = &ctx;
  memset(&ctx, 0, sizeof ctx);
  a->g = g;
  int loss = ir_find_value(g, ti->loss_scalar);
  IR_ASSERT(loss >= 0);
  a->ft = g->values[loss].dtype;
  a->seed = ti->loss_sum ? 1.0 : 1.0 / (microbatches > 0 ? microbatches : 1);
  if (ad_backward(a, loss)) {
    free(a->need);
    free(a->grad);
    return -1;
  }

  vec st_new = {0}, st_old = {0};
  hyper h = {t, 1, {-1, -1, -1, -1, -1, -1}};
  int n0 = a->n0;
  ti->n_weights = 0;
  for (int v = 0; v < n0 && !a->err; v++) {
    if (!is_trained(a, v)) continue;
    int gv = a->grad[v], prod = g->values[gv].producer;
    if (prod < 0) {
      ir_error(g, "train: the gradient of '%s' does not come from a node", g->values[v].name);
      free(a->need);
      free(a->grad);
      return -1;
    }
    ti->n_weights++;
    g->values[v].param = IR_PARAM_WEIGHT;
    /* the stage whose backward computes the whole gradient updates the weight; stages
     * that also read it hold copies the runtime refreshes after every step */
    a->stage = g->nodes[prod].stage;
    a->phase = IR_PHASE_BWD;
    a->base = g->values[v].name;
    a->tag = "accumulate";
    a->cnt = 0;
    int acc = ir_add_zero_const(g, nm(a, "grad/", g->values[v].name, NULL), a->ft, &g->values[v].shape);
    g->values[acc].param = IR_PARAM_GRAD;
    int sum = ad_bin(a, IR_OP_Add, acc, gv);
    g->values[sum].writeback = acc;
    a->phase = IR_PHASE_UPD;
    st_new.n = st_old.n = 0;
    int newp = update(a, t, &h, v, acc, &st_new, &st_old);
    g->values[newp].writeback = v;
    for (int k = 0; k < st_new.n; k++) g->values[st_new.v[k]].writeback = st_old.v[k];
  }
  free(a->need);
  free(a->grad);
  free(st_new.v);
  free(st_old.v);
  if (a->err || g->n_errors) return -1;
  /* BatchNormalization in training mode writes its running statistics back after the
   * forward pass of every micro-batch, in micro-batch order, as torch does per batch */
  ir_rebuild_uses(g);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead || n->op != IR_OP_BatchNormalization || !ir_attr_int(n, "training_mode", 0)) continue;
    for (int k = 1; k <= 2 && k < n->n_out; k++) {
      int o = n->out[k], src = n->in[2 + k];
      if (o < 0 || src < 0 || !g->values[src].is_initializer || g->values[src].kind != IR_VAL_CONST) continue;
      if (g->values[src].param != IR_PARAM_NONE || g->values[src].n_uses != 1) {
        ir_error_node(g, i,
                      "train: running statistic '%s' is also used elsewhere; it must belong to one "
                      "BatchNormalization",
                      g->values[src].name);
        return -1;
      }
      g->values[src].param = IR_PARAM_BUFFER;
      g->values[o].writeback = src;
    }
  }
  if (t->recompute && pass_recompute(g, t->recompute, t->stage_recompute, t->verbose)) return -1;
  if (!t->recompute && t->weights_fresh && pass_recompute(g, PASS_RECOMPUTE_WEIGHTS, NULL, t->verbose)) return -1;
  vec outs = {0};
  for (int k = 0; k < g->n_outputs; k++) push(&outs, g->outputs[k]);
  int rc = finish(g, &outs, t->verbose, "train: the pipelined program");
  free(outs.v);
  for (int i = 0; !rc && i < g->n_nodes; i++)
    if (g->nodes[i].stage < 0) {
      ir_error_node(g, i, "internal error: train: a node without a stage");
      rc = -1;
    }
  if (!rc && t->verbose)
    fprintf(stderr, "pipecc: train: %d trained initializers, optimizer %s, %d micro-batches\n", ti->n_weights,
            t->optimizer, microbatches);
  return rc;
}
