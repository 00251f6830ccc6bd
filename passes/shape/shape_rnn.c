/* passes/shape/shape_rnn.c - the recurrent ops RNN, GRU and LSTM: their meaning (passes/rnn.h)
 * and their shape rules. FLOPs: the input and recurrent GEMMs (a multiply-add counts 2)
 * plus the gate arithmetic, about 10 operations per gate element. */
#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "passes/batch.h"
#include "passes/rnn.h"
#include "passes/shape/shape_impl.h"

static const struct {
  const char *name;
  pass_rnn_act fn;
  int uses_alpha, uses_beta;
  double alpha, beta; /* onnxruntime's defaults */
} acts[] = {
    {"Sigmoid", PASS_RNN_SIGMOID, 0, 0, 0, 0},
    {"Tanh", PASS_RNN_TANH, 0, 0, 0, 0},
    {"Relu", PASS_RNN_RELU, 0, 0, 0, 0},
    {"LeakyRelu", PASS_RNN_LEAKYRELU, 1, 0, 0.01, 0},
    {"ThresholdedRelu", PASS_RNN_THRESHOLDEDRELU, 1, 0, 1.0, 0},
    {"HardSigmoid", PASS_RNN_HARDSIGMOID, 1, 1, 0.2, 0.5},
    {"Affine", PASS_RNN_AFFINE, 1, 1, 1.0, 0.0},
    {"ScaledTanh", PASS_RNN_SCALEDTANH, 1, 1, 1.0, 1.0},
    {"Elu", PASS_RNN_ELU, 1, 0, 1.0, 0},
    {"Softsign", PASS_RNN_SOFTSIGN, 0, 0, 0, 0},
    {"Softplus", PASS_RNN_SOFTPLUS, 0, 0, 0, 0},
};

static int read_acts(ir_graph *g, int node, pass_rnn *r) {
  ir_node *n = SH_NODE;
  static const char *dflt[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
  const char *const *names = dflt[r->NA - 1];
  int cnt = r->NA;
  const ir_attr *a = ir_attr_find(n, "activations");
  if (a) {
    if (a->type != IR_ATTR_STRINGS) SH_FAIL("attribute 'activations' must be a list of strings");
    if (a->n != r->NA * r->D && a->n != r->NA)
      SH_FAIL("attribute 'activations' has %d names, expected %d (%d per direction)", a->n, r->NA * r->D, r->NA);
    names = a->strings;
    cnt = a->n;
  }
  const ir_attr *al = ir_attr_find(n, "activation_alpha"), *be = ir_attr_find(n, "activation_beta");
  int na = al && al->type == IR_ATTR_FLOATS ? al->n : 0, nb = be && be->type == IR_ATTR_FLOATS ? be->n : 0;
  int ia = 0, ib = 0;
  for (int d = 0; d < r->D; d++)
    for (int k = 0; k < r->NA; k++) {
      const char *nm = names[cnt == r->NA ? k : d * r->NA + k];
      size_t i = 0;
      while (i < sizeof acts / sizeof acts[0] && strcasecmp(nm, acts[i].name)) i++;
      if (i == sizeof acts / sizeof acts[0]) {
        char b[96];
        SH_FAIL(
            "activation '%s' is not supported (pipecc supports Sigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu, "
            "HardSigmoid, Affine, ScaledTanh, Elu, Softsign, Softplus)",
            ir_printable(nm, 40, b, sizeof b));
      }
      pass_rnn_actv *v = &r->act[d][k];
      v->fn = acts[i].fn;
      v->alpha = acts[i].alpha;
      v->beta = acts[i].beta;
      /* alpha and beta are consumed in the order of the activations that take them
       * (onnxruntime); the same list serves both directions when only NA names are given */
      if (acts[i].uses_alpha && ia < na) v->alpha = al->floats[ia++];
      if (acts[i].uses_beta && ib < nb) v->beta = be->floats[ib++];
    }
  return 0;
}

static int check_dims(ir_graph *g, int node, int i, const char *what, int rank, const int64_t *dims) {
  ir_value *v = sh_in(g, node, i);
  char a[256], b[256];
  if (!v) return 0;
  int ok = v->shape.rank == rank;
  for (int k = 0; ok && k < rank; k++) ok = v->shape.dims[k] == dims[k];
  if (!ok) {
    ir_shape e = {0};
    e.rank = rank;
    for (int k = 0; k < rank; k++) e.dims[k] = dims[k];
    SH_FAIL("input %s has shape %s, expected %s", what, sh_str(&v->shape, a, sizeof a), sh_str(&e, b, sizeof b));
  }
  return 0;
}

int pass_rnn_info(ir_graph *g, int node, pass_rnn *r) {
  ir_node *n = SH_NODE;
  memset(r, 0, sizeof *r);
  r->op = n->op;
  r->G = n->op == IR_OP_LSTM ? 4 : n->op == IR_OP_GRU ? 3 : 1;
  r->NA = n->op == IR_OP_LSTM ? 3 : n->op == IR_OP_GRU ? 2 : 1;
  ir_value *x = sh_in(g, node, 0), *w = sh_in(g, node, 1), *rw = sh_in(g, node, 2);
  char b[256];
  if (!x || !w || !rw) SH_FAIL("inputs X, W and R are required");
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || sh_same_dtype(g, node, x, w, "input X", "input W") ||
      sh_same_dtype(g, node, x, rw, "input X", "input R"))
    return -1;
  const char *dir = ir_attr_str(n, "direction", "forward");
  if (!strcmp(dir, "forward")) r->D = 1;
  else if (!strcmp(dir, "reverse")) r->D = 1, r->reverse = 1;
  else if (!strcmp(dir, "bidirectional")) r->D = 2;
  else
    SH_FAIL("attribute 'direction' is '%s' (expected forward, reverse or bidirectional)",
            ir_printable(dir, 40, b, sizeof b));
  r->layout = (int)ir_attr_int(n, "layout", 0);
  if (r->layout != 0 && r->layout != 1) SH_FAIL("attribute 'layout' is %d (expected 0 or 1)", r->layout);
  if (x->shape.rank != 3) SH_FAIL("input X must be 3-D, it has shape %s", sh_str(&x->shape, b, sizeof b));
  r->S = x->shape.dims[r->layout ? 1 : 0];
  r->B = x->shape.dims[r->layout ? 0 : 1];
  r->I = x->shape.dims[2];
  if (rw->shape.rank != 3) SH_FAIL("input R must be 3-D, it has shape %s", sh_str(&rw->shape, b, sizeof b));
  r->H = ir_attr_int(n, "hidden_size", rw->shape.dims[2]);
  if (r->H < 1) SH_FAIL("attribute 'hidden_size' is %" PRId64 " (must be >= 1)", r->H);
  int64_t GH = r->G * r->H;
  int64_t wd[3] = {r->D, GH, r->I}, rd[3] = {r->D, GH, r->H}, bd[2] = {r->D, 2 * GH}, pd[2] = {r->D, 3 * r->H};
  int64_t hd[3] = {r->layout ? r->B : r->D, r->layout ? r->D : r->B, r->H}, sd[1] = {r->B};
  /* a state or length fixed at export for the whole batch, the same for every sample */
  for (int i = 4; i < n->n_in && i < 7; i++)
    if (pass_batch_const(g, node, i, i == 4 ? 0 : r->layout ? 0 : 1, r->B)) x = sh_in(g, node, 0); /* values moved */
  if (check_dims(g, node, 1, "W", 3, wd) || check_dims(g, node, 2, "R", 3, rd) || check_dims(g, node, 3, "B", 2, bd) ||
      check_dims(g, node, 4, "sequence_lens", 1, sd) || check_dims(g, node, 5, "initial_h", 3, hd))
    return -1;
  if (n->op == IR_OP_LSTM && (check_dims(g, node, 6, "initial_c", 3, hd) || check_dims(g, node, 7, "P", 2, pd)))
    return -1;
  static const char *fl[] = {NULL, NULL, NULL, "input B", NULL, "input initial_h", "input initial_c", "input P"};
  for (int i = 3; i < n->n_in && i < 8; i++) {
    ir_value *v = sh_in(g, node, i);
    if (!v) continue;
    if (i == 4) {
      if (sh_check_dtype(g, node, v, SH_INDEX, "input sequence_lens")) return -1;
    } else if (sh_same_dtype(g, node, x, v, "input X", fl[i])) return -1;
  }
  r->has_b = sh_in(g, node, 3) != NULL;
  r->has_seq = sh_in(g, node, 4) != NULL;
  r->has_h0 = sh_in(g, node, 5) != NULL;
  r->has_c0 = n->op == IR_OP_LSTM && sh_in(g, node, 6) != NULL;
  r->has_p = n->op == IR_OP_LSTM && sh_in(g, node, 7) != NULL;
  r->has_y = sh_out(g, node, 0) != NULL;
  r->has_yh = sh_out(g, node, 1) != NULL;
  r->has_yc = n->op == IR_OP_LSTM && sh_out(g, node, 2) != NULL;
  const ir_attr *clip = ir_attr_find(n, "clip");
  if (clip) {
    if (clip->type != IR_ATTR_FLOAT || !(clip->f > 0)) SH_FAIL("attribute 'clip' must be a positive float");
    r->has_clip = 1;
    r->clip = clip->f;
  }
  r->input_forget = n->op == IR_OP_LSTM && ir_attr_int(n, "input_forget", 0) != 0;
  r->lbr = n->op == IR_OP_GRU && ir_attr_int(n, "linear_before_reset", 0) != 0;
  return read_acts(g, node, r);
}

/* RNN-14, GRU-14, LSTM-14 (also 7): see passes/rnn.h for the shapes. */
static int sh_recurrent(ir_graph *g, int node) {
  pass_rnn r;
  if (pass_rnn_info(g, node, &r)) return -1;
  ir_dtype t = sh_in(g, node, 0)->dtype;
  double steps = (double)r.S * (double)r.B * r.D;
  SH_NODE->flops = steps * r.G * r.H * (2.0 * (double)(r.I + r.H) + 10.0);
  ir_shape y = {0}, h = {0};
  y.rank = 4;
  h.rank = 3;
  if (r.layout) {
    int64_t yd[4] = {r.B, r.S, r.D, r.H}, hd[3] = {r.B, r.D, r.H};
    memcpy(y.dims, yd, sizeof yd);
    memcpy(h.dims, hd, sizeof hd);
  } else {
    int64_t yd[4] = {r.S, r.D, r.B, r.H}, hd[3] = {r.D, r.B, r.H};
    memcpy(y.dims, yd, sizeof yd);
    memcpy(h.dims, hd, sizeof hd);
  }
  if (sh_set_out(g, node, 0, t, &y) || sh_set_out(g, node, 1, t, &h)) return -1;
  return r.op == IR_OP_LSTM ? sh_set_out(g, node, 2, t, &h) : 0;
}

int sh_RNN(ir_graph *g, int node) { return sh_recurrent(g, node); }
int sh_GRU(ir_graph *g, int node) { return sh_recurrent(g, node); }
int sh_LSTM(ir_graph *g, int node) { return sh_recurrent(g, node); }
