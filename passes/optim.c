/* passes/optim.c - the training step: loss, autodiff (passes/autodiff.c), optimizer
 * update, outputs. See passes/autodiff.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/autodiff.h"
#include "passes/autodiff_impl.h"
#include "passes/pass.h"

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

/* One-hot float [rows, C] of int labels [rows]: Cast(Equal(labels[:, None], arange(C)))
 * (element-wise ops every backend has). */
static int one_hot(ad_ctx *a, int lab, int64_t rows, int64_t C) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = 2;
  s.dims[0] = rows;
  s.dims[1] = 1;
  int l2 = ad_reshape(a, lab, &s);
  if (ad_dtype(a, l2) != IR_INT64) {
    int id = ad_begin(a, IR_OP_Cast, &l2, 1, 1, NULL);
    ad_attr_i(a, id, "to", IR_INT64);
    l2 = ad_end(a, id);
  }
  int64_t *ar = malloc(sizeof(int64_t) * (size_t)(C ? C : 1));
  for (int64_t i = 0; i < C; i++) ar[i] = i;
  s.dims[0] = 1;
  s.dims[1] = C;
  int cls = ir_add_const(a->g, "loss/classes", IR_INT64, &s, ar, sizeof(int64_t) * (size_t)C);
  free(ar);
  int eq = ad_bin(a, IR_OP_Equal, l2, cls);
  int id = ad_begin(a, IR_OP_Cast, &eq, 1, 1, NULL);
  ad_attr_i(a, id, "to", a->ft);
  return ad_end(a, id);
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
static int loss_ce(ad_ctx *a, int z, const char *labels) {
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
  return ad_end(a, ad_begin(a, IR_OP_Div, in2, 2, 1, "loss"));
}

/* A SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss node named as the loss is lowered
 * to LogSoftmax/one_hot/Mul/ReduceSum (no emitter has them); its uses move to the new loss. */
static int lower_loss_node(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  int sce = nd.op == IR_OP_SoftmaxCrossEntropyLoss;
  const char *red = ir_attr_str(&nd, "reduction", "mean");
  if ((nd.n_in > 2 && nd.in[2] >= 0) || ir_attr_find(&nd, "ignore_index") || (strcmp(red, "mean") && strcmp(red, "sum")) ||
      g->values[nd.in[0]].shape.rank != 2 || (nd.n_out > 1 && nd.out[1] >= 0 && !sce)) {
    ir_error_node(g, node, "autodiff: only a %s of scores [N, C] with mean or sum reduction, no weights and no ignore_index, "
                  "can be the loss", ir_op_name(nd.op));
    return -1;
  }
  ir_shape zs = g->values[nd.in[0]].shape;
  int lsm = nd.in[0];
  if (sce) {
    int id = ad_begin(a, IR_OP_LogSoftmax, &lsm, 1, 1, NULL);
    ad_attr_i(a, id, "axis", 1);
    lsm = ad_end(a, id);
  }
  int prod = ad_bin(a, IR_OP_Mul, one_hot(a, nd.in[1], zs.dims[0], zs.dims[1]), lsm);
  int id = ad_begin(a, IR_OP_ReduceSum, &prod, 1, 1, NULL);
  ad_attr_i(a, id, "keepdims", 0);
  int s = ad_un(a, IR_OP_Neg, ad_end(a, id));
  int loss = !strcmp(red, "mean") ? ad_bin(a, IR_OP_Div, s, ad_c_f(a, (double)zs.dims[0], a->ft)) : s;
  g->nodes[node].dead = 1;
  ir_replace_uses(g, nd.out[0], loss);
  if (nd.n_out > 1 && nd.out[1] >= 0) ir_replace_uses(g, nd.out[1], lsm);
  return loss;
}

/* Mean squared error over all elements. */
static int loss_mse(ad_ctx *a, int y, const char *labels) {
  ir_shape ys = ad_shape(a, y);
  int t = add_input(a->g, labels, ad_dtype(a, y), &ys);
  if (t < 0) return -1;
  int d = ad_bin(a, IR_OP_Sub, y, t);
  int sq = ad_bin(a, IR_OP_Mul, d, d);
  int id = ad_begin(a, IR_OP_ReduceMean, &sq, 1, 1, "loss");
  ad_attr_i(a, id, "keepdims", 0);
  return ad_end(a, id);
}

static int build_loss(ad_ctx *a, const pass_train_opts *t) {
  ir_graph *g = a->g;
  a->base = "loss";
  a->tag = "fwd";
  a->cnt = 0;
  int ce = !strcmp(t->loss, "cross-entropy"), mse = !strcmp(t->loss, "mse");
  if (!ce && !mse) {
    int v = ir_find_value(g, t->loss);
    if (v < 0) {
      ir_error(g, "--loss %s: not cross-entropy or mse, and the model has no value of that name", t->loss);
      return -1;
    }
    if ((g->values[v].dtype != IR_FLOAT && g->values[v].dtype != IR_DOUBLE) || ir_shape_numel(&g->values[v].shape) != 1) {
      ir_error(g, "--loss %s: the loss must be a float32 or float64 value of one element", t->loss);
      return -1;
    }
    a->ft = g->values[v].dtype;
    int p = g->values[v].producer;
    if (p >= 0 && (g->nodes[p].op == IR_OP_SoftmaxCrossEntropyLoss || g->nodes[p].op == IR_OP_NegativeLogLikelihoodLoss))
      return lower_loss_node(a, p);
    if (g->values[v].shape.rank == 0) return v;
    int id = ad_begin(a, IR_OP_ReduceMean, &v, 1, 1, NULL);
    ad_attr_i(a, id, "keepdims", 0);
    return ad_end(a, id);
  }
  int y = -1;
  for (int k = 0; k < g->n_outputs && y < 0; k++)
    if (g->values[g->outputs[k]].dtype == IR_FLOAT || g->values[g->outputs[k]].dtype == IR_DOUBLE) y = g->outputs[k];
  if (y < 0) {
    ir_error(g, "--loss %s: the model has no float32 or float64 output", t->loss);
    return -1;
  }
  a->ft = g->values[y].dtype;
  return ce ? loss_ce(a, y, t->labels) : loss_mse(a, y, t->labels);
}

static int state(ad_ctx *a, const char *p, const char *what, const ir_shape *s) {
  int64_t n = ir_shape_numel(s);
  size_t es = ir_dtype_size(a->ft);
  void *z = calloc((size_t)(n ? n : 1), es);
  int v = ir_add_const(a->g, ir_sprintf(a->g->arena, "state/%s%s%s", p ? p : "", p ? "/" : "", what), a->ft, s, z,
                       es * (size_t)n);
  free(z);
  a->g->values[v].is_initializer = 1;
  return v;
}

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

int pass_autodiff(ir_graph *g, const pass_train_opts *t) {
  ad_ctx ctx, *a = &ctx;
  memset(&ctx, 0, sizeof ctx);
  a->g = g;
  int sgd = !strcmp(t->optimizer, "sgd"), adam = !strcmp(t->optimizer, "adam"), adamw = !strcmp(t->optimizer, "adamw");
  if (!sgd && !adam && !adamw) {
    ir_error(g, "--optimizer %s: expected sgd, adam or adamw", t->optimizer);
    return -1;
  }
  int loss = build_loss(a, t);
  if (loss < 0 || a->err) return -1;
  if (ad_backward(a, loss)) return -1;

  vec outs = {0}, st_outs = {0};
  push(&outs, loss);
  int n0 = a->n0, n_params = 0;
  int bc1 = -1, bc2s = -1, step_size = -1;
  a->cnt = 0;
  if (adam || adamw) {
    ir_shape s0;
    memset(&s0, 0, sizeof s0);
    a->base = "optim";
    a->tag = "step";
    int step = state(a, NULL, "step", &s0);
    int tnew = named(a, IR_OP_Add, step, ad_c_f(a, 1, a->ft), "new/state/step");
    bc1 = ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), ad_bin(a, IR_OP_Pow, ad_c_f(a, t->beta1, a->ft), tnew));
    int bc2 = ad_bin(a, IR_OP_Sub, ad_c_f(a, 1, a->ft), ad_bin(a, IR_OP_Pow, ad_c_f(a, t->beta2, a->ft), tnew));
    step_size = ad_bin(a, IR_OP_Div, ad_c_f(a, t->lr, a->ft), bc1);
    bc2s = ad_un(a, IR_OP_Sqrt, bc2);
    push(&st_outs, tnew);
  }
  for (int v = 0; v < n0; v++) {
    const ir_value *pv = &g->values[v];
    if (!(pv->kind == IR_VAL_CONST && pv->is_initializer && pv->dtype == a->ft) || a->grad[v] < 0) continue;
    const char *p = pv->name;
    ir_shape ps = pv->shape;
    n_params++;
    a->base = p;
    a->tag = "grad";
    a->cnt = 0;
    int gv = a->grad[v];
    int gout = ad_end(a, ad_begin(a, IR_OP_Identity, &gv, 1, 1, nm(a, "grad/", p, NULL)));
    push(&outs, gout);
    a->tag = "optim";
    a->cnt = 0;
    int newp;
    if (sgd) {
      int d = gv;
      if (t->weight_decay) d = ad_bin(a, IR_OP_Add, d, ad_bin(a, IR_OP_Mul, v, ad_c_f(a, t->weight_decay, a->ft)));
      if (t->momentum) {
        int buf = state(a, p, "momentum", &ps);
        int nb = named(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, buf, ad_c_f(a, t->momentum, a->ft)), d,
                       nm(a, "new/state/", p, "/momentum"));
        push(&st_outs, nb);
        d = t->nesterov ? ad_bin(a, IR_OP_Add, d, ad_bin(a, IR_OP_Mul, nb, ad_c_f(a, t->momentum, a->ft))) : nb;
      }
      newp = named(a, IR_OP_Sub, v, ad_bin(a, IR_OP_Mul, d, ad_c_f(a, t->lr, a->ft)), nm(a, "new/", p, NULL));
    } else {
      int d = gv, p0 = v;
      if (adam && t->weight_decay) d = ad_bin(a, IR_OP_Add, d, ad_bin(a, IR_OP_Mul, v, ad_c_f(a, t->weight_decay, a->ft)));
      if (adamw && t->weight_decay) p0 = ad_bin(a, IR_OP_Mul, v, ad_c_f(a, 1 - t->lr * t->weight_decay, a->ft));
      int m = state(a, p, "m", &ps), s = state(a, p, "v", &ps);
      int nm1 = named(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, m, ad_c_f(a, t->beta1, a->ft)),
                      ad_bin(a, IR_OP_Mul, d, ad_c_f(a, 1 - t->beta1, a->ft)), nm(a, "new/state/", p, "/m"));
      int nv = named(a, IR_OP_Add, ad_bin(a, IR_OP_Mul, s, ad_c_f(a, t->beta2, a->ft)),
                     ad_bin(a, IR_OP_Mul, ad_bin(a, IR_OP_Mul, d, d), ad_c_f(a, 1 - t->beta2, a->ft)),
                     nm(a, "new/state/", p, "/v"));
      push(&st_outs, nm1);
      push(&st_outs, nv);
      int denom = ad_bin(a, IR_OP_Add, ad_bin(a, IR_OP_Div, ad_un(a, IR_OP_Sqrt, nv), bc2s), ad_c_f(a, t->eps, a->ft));
      newp = named(a, IR_OP_Sub, p0, ad_bin(a, IR_OP_Mul, step_size, ad_bin(a, IR_OP_Div, nm1, denom)),
                   nm(a, "new/", p, NULL));
    }
    push(&outs, newp);
  }
  (void)bc1;
  free(a->need);
  free(a->grad);
  if (a->err || g->n_errors) {
    free(outs.v);
    free(st_outs.v);
    return -1;
  }
  /* BatchNormalization in training mode: its updated running mean and variance, when
   * the node computes them from initializers, become "new/<initializer>" outputs */
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead || n->op != IR_OP_BatchNormalization || !ir_attr_int(n, "training_mode", 0)) continue;
    for (int k = 1; k <= 2 && k < n->n_out; k++) {
      int o = n->out[k], src = n->in[2 + k];
      if (o < 0 || src < 0 || !g->values[src].is_initializer || g->values[src].kind != IR_VAL_CONST) continue;
      a->base = n->name;
      a->tag = "running";
      a->cnt = k;
      int id = ad_begin(a, IR_OP_Identity, &o, 1, 1, nm(a, "new/", g->values[src].name, NULL));
      push(&st_outs, ad_end(a, id));
      n = &g->nodes[i];
    }
  }
  for (int k = 0; k < st_outs.n; k++) push(&outs, st_outs.v[k]);
  for (int k = 0; k < g->n_outputs; k++) g->values[g->outputs[k]].is_output = 0;
  g->outputs = ir_alloc_array(g->arena, (size_t)outs.n, sizeof(int));
  memcpy(g->outputs, outs.v, sizeof(int) * (size_t)outs.n);
  g->n_outputs = outs.n;
  for (int k = 0; k < outs.n; k++) g->values[outs.v[k]].is_output = 1;
  free(outs.v);
  free(st_outs.v);

  /* drop what the step does not need (other model outputs), sort, check */
  char *need = ir_xcalloc((size_t)g->n_values + 1, 1);
  for (int k = 0; k < g->n_outputs; k++) need[g->outputs[k]] = 1;
  if (ir_toposort(g)) {
    free(need);
    return -1;
  }
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    int live = 0;
    for (int k = 0; k < n->n_out && !live; k++) live = n->out[k] >= 0 && need[n->out[k]];
    if (!live) {
      n->dead = 1;
      continue;
    }
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) need[n->in[k]] = 1;
  }
  free(need);
  ir_compact(g);
  pass_opts o;
  memset(&o, 0, sizeof o);
  o.training = 1;
  if (pass_shape(g, &o)) return -1;
  if (t->verbose)
    fprintf(stderr, "pipecc: autodiff: %d trained initializers, %d nodes in the training step, optimizer %s\n",
            n_params, g->n_nodes, t->optimizer);
  return g->n_errors ? -1 : 0;
}
