/* passes/bind.c - bind symbolic dims of graph inputs (trtexec-style --shape, -d DIM=N),
 * and turn the inputs given by --const into constants. */
#include <math.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/pass.h"

/* --const NAME=V,...: graph input NAME becomes a constant holding the values (as many
 * as its static shape has elements, each exact in its type). */
/* The position of graph input `name` among g->inputs (its value in *v), or -1. */
static int input_at(const ir_graph *g, const char *name, int *v) {
  *v = ir_find_value(g, name);
  for (int i = 0; *v >= 0 && i < g->n_inputs; i++)
    if (g->inputs[i] == *v) return i;
  return -1;
}

/* The graph input at position `at` is no longer taken. */
static void drop_input(ir_graph *g, int at) {
  memmove(&g->inputs[at], &g->inputs[at + 1], sizeof(int) * (size_t)(g->n_inputs - at - 1));
  g->n_inputs--;
}

static void bind_const(ir_graph *g, const pass_const_binding *b) {
  char nm[96];
  ir_printable(b->name, 60, nm, sizeof nm);
  int v, at = input_at(g, b->name, &v);
  if (at < 0) {
    ir_error(g, "--const names '%s', which is not a graph input", nm);
    return;
  }
  ir_value *val = &g->values[v];
  int64_t n = ir_shape_numel(&val->shape);
  char sh[256];
  if (n != b->n) {
    ir_error(g, "--const %s gives %d value%s; graph input '%s' %s holds %lld", nm, b->n, b->n == 1 ? "" : "s", nm,
             ir_shape_str(&val->shape, sh, sizeof sh), (long long)n);
    return;
  }
  ir_dtype dt = val->dtype;
  size_t es = ir_dtype_size(dt);
  if (!es || ir_dtype_narrow(dt) || ir_dtype_small_int(dt, NULL, NULL)) {
    ir_error(g, "--const %s: graph input of type %s; --const takes float32, float64, bool and integer inputs", nm,
             ir_dtype_name(dt));
    return;
  }
  unsigned char *d = ir_alloc(g->arena, (size_t)n * es + 1);
  for (int64_t i = 0; i < n; i++) {
    double x = b->values[i];
    unsigned char *q = d + (size_t)i * es;
    if (dt == IR_FLOAT) {
      float f = (float)x;
      memcpy(q, &f, 4);
      continue;
    }
    if (dt == IR_DOUBLE) {
      memcpy(q, &x, 8);
      continue;
    }
    /* integers and bool: exact */
    int uns = dt == IR_UINT8 || dt == IR_UINT16 || dt == IR_UINT32 || dt == IR_UINT64 || dt == IR_BOOL;
    double lo = dt == IR_BOOL ? 0 : uns ? 0 : -ldexp(1, (int)es * 8 - 1);
    double hi = dt == IR_BOOL ? 1 : uns ? ldexp(1, (int)es * 8) - 1 : ldexp(1, (int)es * 8 - 1) - 1;
    if (x != floor(x) || x < lo || x > hi || fabs(x) > 9007199254740992.0) {
      ir_error(g, "--const %s: %g is not a value of type %s", nm, x, ir_dtype_name(dt));
      return;
    }
    int64_t iv = (int64_t)x;
    uint64_t u = (uint64_t)iv;
    for (size_t k = 0; k < es; k++) q[k] = (unsigned char)(u >> (8 * k)); /* little-endian */
  }
  val->kind = IR_VAL_CONST;
  val->data = d;
  val->nbytes = (size_t)n * es;
  val->producer = -1;
  drop_input(g, at);
}

/* Optional inputs named by --none hold no value: no longer inputs, empty optionals. */
static void bind_nones(ir_graph *g, const pass_opts *o) {
  for (int k = 0; k < o->n_nones; k++) {
    int v, at = input_at(g, o->nones[k], &v);
    char nm[96];
    ir_printable(o->nones[k], 60, nm, sizeof nm);
    if (at < 0 || !g->values[v].is_optional) {
      ir_error(g, "--none names '%s', which is not an optional graph input", nm);
      return;
    }
    ir_set_none(g, v);
    drop_input(g, at);
  }
}

/* Sequence inputs: each named by --seq NAME=N becomes N tensor inputs NAME.0 ... of its
 * element type and shape, in its place among the inputs; the sequence lists them. */
static void bind_seqs(ir_graph *g, const pass_opts *o) {
  for (int k = 0; k < o->n_seqs; k++) {
    int v = ir_find_value(g, o->seqs[k].name);
    char nm[96];
    ir_printable(o->seqs[k].name, 60, nm, sizeof nm);
    if (v < 0 || g->values[v].kind != IR_VAL_SEQ || g->values[v].seq_n >= 0) {
      ir_error(g, "--seq names '%s', which is not a sequence graph input", nm);
      return;
    }
    if (o->seqs[k].value > 65536) {
      ir_error(g, "--seq %s=%lld: pipecc takes sequences of up to 65536 tensors", nm, (long long)o->seqs[k].value);
      return;
    }
    g->values[v].seq_n = (int)o->seqs[k].value;
  }
  int n = 0;
  for (int i = 0; i < g->n_inputs; i++) {
    const ir_value *s = &g->values[g->inputs[i]];
    if (s->kind != IR_VAL_SEQ) {
      n++;
      continue;
    }
    if (s->seq_n < 0) {
      char nm[96];
      ir_printable(s->name, 60, nm, sizeof nm);
      ir_error(g,
               "graph input '%s' is a sequence: give its length with --seq %s=N (its tensors become inputs %s.0 ... "
               "%s.N-1)",
               nm, nm, nm, nm);
      return;
    }
    n += s->seq_n;
  }
  int *in = ir_alloc_array(g->arena, (size_t)n + 1, sizeof(int)), m = 0;
  for (int i = 0; i < g->n_inputs; i++) {
    int sv = g->inputs[i];
    if (g->values[sv].kind != IR_VAL_SEQ) {
      in[m++] = sv;
      continue;
    }
    int len = g->values[sv].seq_n;
    int *el = ir_alloc_array(g->arena, (size_t)len + 1, sizeof(int));
    for (int e = 0; e < len; e++) {
      int t = ir_add_value(g, ir_sprintf(g->arena, "%s.%d", g->values[sv].name, e), IR_VAL_INPUT, g->values[sv].dtype);
      g->values[t].shape = g->values[sv].shape;
      el[e] = in[m++] = t;
    }
    g->values[sv].seq = el;
  }
  g->inputs = in;
  g->n_inputs = n;
}

int pass_bind(ir_graph *g, const pass_opts *o) {
  int errs = g->n_errors;
  bind_nones(g, o);
  if (g->n_errors == errs) bind_seqs(g, o);
  if (g->n_errors > errs) return -1;
  for (int k = 0; k < o->n_shapes; k++) {
    int v = ir_find_value(g, o->shapes[k].name);
    char nm[96];
    ir_printable(o->shapes[k].name, 60, nm, sizeof nm);
    if (v < 0 || g->values[v].kind != IR_VAL_INPUT) {
      char list[512] = "";
      size_t len = 0;
      for (int i = 0; i < g->n_inputs && len + 70 < sizeof list; i++) {
        char in[64];
        len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'", i ? ", " : "",
                                ir_printable(g->values[g->inputs[i]].name, 50, in, sizeof in));
      }
      ir_error(g, "--shape names '%s', which is not a graph input (inputs: %s)", nm, list);
      continue;
    }
    ir_value *val = &g->values[v];
    const ir_shape *s = &o->shapes[k].shape;
    if (val->shape.rank >= 0 && val->shape.rank != s->rank) {
      ir_error(g, "--shape %s has rank %d, the model's input has rank %d", nm, s->rank, val->shape.rank);
      continue;
    }
    for (int i = 0; i < s->rank && val->shape.rank >= 0; i++)
      if (val->shape.dims[i] >= 0 && val->shape.dims[i] != s->dims[i]) {
        ir_error(g, "--shape %s: dim %d is fixed to %lld in the model, not %lld", nm, i, (long long)val->shape.dims[i],
                 (long long)s->dims[i]);
        break;
      }
    const char *sym[IR_MAX_RANK];
    for (int i = 0; i < IR_MAX_RANK; i++) sym[i] = val->shape.rank > i ? val->shape.sym[i] : NULL;
    val->shape = *s;
    for (int i = 0; i < s->rank; i++) val->shape.sym[i] = sym[i];
  }
  for (int i = 0; i < g->n_inputs; i++) {
    ir_value *val = &g->values[g->inputs[i]];
    for (int d = 0; d < val->shape.rank; d++) {
      if (val->shape.dims[d] != IR_DIM_SYM || !val->shape.sym[d]) continue;
      for (int k = 0; k < o->n_dims; k++)
        if (!strcmp(o->dims[k].name, val->shape.sym[d])) val->shape.dims[d] = o->dims[k].value;
    }
  }
  for (int k = 0; k < o->n_dims; k++) {
    int used = 0;
    for (int i = 0; i < g->n_inputs && !used; i++) {
      ir_value *val = &g->values[g->inputs[i]];
      for (int d = 0; d < val->shape.rank; d++)
        if (val->shape.sym[d] && !strcmp(val->shape.sym[d], o->dims[k].name)) used = 1;
    }
    if (!used) {
      char nm[96];
      ir_warn(g, "-d %s: no graph input has a dim of that name", ir_printable(o->dims[k].name, 60, nm, sizeof nm));
    }
  }
  for (int i = 0; i < g->n_inputs; i++) {
    ir_value *val = &g->values[g->inputs[i]];
    char nm[96], sh[256];
    ir_printable(val->name, 60, nm, sizeof nm);
    if (val->shape.rank < 0) {
      ir_error(g, "graph input '%s' has no shape in the model: give one with --shape %s:AxBxC", nm, nm);
      continue;
    }
    for (int d = 0; d < val->shape.rank; d++) {
      if (val->shape.dims[d] >= 0) continue;
      ir_shape_str(&val->shape, sh, sizeof sh);
      if (val->shape.sym[d]) {
        char sy[64];
        ir_printable(val->shape.sym[d], 40, sy, sizeof sy);
        ir_error(g, "graph input '%s' %s: dim %d '%s' is symbolic: bind it with -d %s=N or --shape %s:...", nm, sh, d,
                 sy, sy, nm);
      } else {
        ir_error(g, "graph input '%s' %s: dim %d is unknown: give the shape with --shape %s:...", nm, sh, d, nm);
      }
      break;
    }
    if (ir_shape_static(&val->shape) && ir_value_bytes(val) < 0)
      ir_error(g, "graph input '%s': its byte size overflows", nm);
  }
  if (g->n_errors > errs) return -1;
  for (int k = 0; k < o->n_consts; k++) bind_const(g, &o->consts[k]);
  return g->n_errors > errs ? -1 : 0;
}
