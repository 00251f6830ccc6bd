/* passes/shape/shape.c - shape inference: driver, dispatch table and shared helpers.
 * The per-op rules live in shape_elementwise.c, shape_reduce.c, shape_nn.c,
 * shape_tensor.c and shape_generate.c. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "passes/batch.h"
#include "passes/pass.h"
#include "passes/shape/shape_impl.h"

/* ---- dispatch: one row per op of ir/ops.def ---- */

#define SH_FN_IR_K_UNARY(name) sh_unary
#define SH_FN_IR_K_UNARY_BOOL(name) sh_unary
#define SH_FN_IR_K_BINARY(name) sh_binary
#define SH_FN_IR_K_COMPARE(name) sh_binary
#define SH_FN_IR_K_VARIADIC(name) sh_variadic
#define SH_FN_IR_K_REDUCE(name) sh_reduce
#define SH_FN_IR_K_POOL(name) sh_pool
#define SH_FN_IR_K_SPECIAL(name) sh_##name

static const sh_fn shape_table[] = {
#define OP(name, kind, min_in, max_in, max_out) SH_FN_##kind(name),
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof shape_table / sizeof shape_table[0] == IR_OP_COUNT,
               "shape_table needs one row per op of ir/ops.def");

/* ---- helpers ---- */

ir_value *sh_in(ir_graph *g, int node, int i) { return ir_in(g, &g->nodes[node], i); }
ir_value *sh_out(ir_graph *g, int node, int i) { return ir_out(g, &g->nodes[node], i); }

const char *sh_str(const ir_shape *s, char *buf, size_t n) { return ir_shape_str(s, buf, n); }
const char *sh_vname(const ir_value *v, char *buf, size_t n) { return ir_printable(v->name, 60, buf, n); }

double sh_numel(const ir_shape *s) {
  double n = 1;
  for (int i = 0; i < s->rank; i++) n *= (double)s->dims[i];
  return n;
}

int sh_set_out(ir_graph *g, int node, int i, ir_dtype dt, const ir_shape *s) {
  ir_value *v = sh_out(g, node, i);
  if (!v) return 0;
  char b[256], vn[96];
  IR_ASSERT(s->rank >= 0 && s->rank <= IR_MAX_RANK);
  for (int k = 0; k < s->rank; k++) IR_ASSERT(s->dims[k] >= 0);
  ir_shape sh = *s;
  for (int k = 0; k < IR_MAX_RANK; k++) sh.sym[k] = NULL;
  if (ir_shape_numel(&sh) < 0)
    SH_FAIL("output %d '%s' would have shape %s: its element count overflows int64", i, sh_vname(v, vn, sizeof vn),
            sh_str(&sh, b, sizeof b));
  if (dt == IR_STRING || dt <= IR_UNDEFINED || dt >= IR_DTYPE_COUNT)
    SH_FAIL("output %d '%s' would have data type %s, which pipecc does not support", i, sh_vname(v, vn, sizeof vn),
            dt == IR_STRING ? "string" : "undefined");
  int64_t es = (int64_t)ir_dtype_size(dt);
  if (es && ir_shape_numel(&sh) > INT64_MAX / es)
    SH_FAIL("output %d '%s' would have shape %s: its byte size overflows int64", i, sh_vname(v, vn, sizeof vn),
            sh_str(&sh, b, sizeof b));
  if (v->kind == IR_VAL_CONST) return 0; /* folded already: keep its data's shape */
  v->dtype = dt;
  v->shape = sh;
  return 0;
}

int sh_check_dtype(ir_graph *g, int node, const ir_value *v, unsigned mask, const char *what) {
  if (v->dtype > IR_UNDEFINED && v->dtype < IR_DTYPE_COUNT && (mask & SH_BIT(v->dtype))) return 0;
  const char *kind = mask == SH_FLOATS         ? "a floating-point type"
                     : mask == SH_BIT(IR_BOOL) ? "bool"
                     : mask == SH_INDEX        ? "int32 or int64"
                     : mask == SH_INTS         ? "an integer type"
                     : mask == SH_NUM          ? "a numeric type"
                                               : "a supported type";
  SH_FAIL("%s has data type %s, expected %s", what, ir_dtype_name(v->dtype), kind);
}

int sh_same_dtype(ir_graph *g, int node, const ir_value *a, const ir_value *b, const char *an, const char *bn) {
  if (a->dtype == b->dtype) return 0;
  SH_FAIL("%s (%s) and %s (%s) must have the same data type", an, ir_dtype_name(a->dtype), bn, ir_dtype_name(b->dtype));
}

int sh_broadcast_shapes(const ir_shape *a, const ir_shape *b, ir_shape *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  ir_shape o;
  memset(&o, 0, sizeof o);
  o.rank = r;
  for (int i = 1; i <= r; i++) {
    int64_t x = i <= a->rank ? a->dims[a->rank - i] : 1, y = i <= b->rank ? b->dims[b->rank - i] : 1;
    if (x == y || y == 1) o.dims[r - i] = x;
    else if (x == 1) o.dims[r - i] = y;
    else return i;
  }
  *out = o;
  return 0;
}

int sh_broadcast(ir_graph *g, int node, const ir_shape *a, const ir_shape *b, ir_shape *out, const char *an,
                 const char *bn) {
  int k = sh_broadcast_shapes(a, b, out);
  if (!k) return 0;
  char sa[256], sb[256];
  SH_FAIL("cannot broadcast %s %s with %s %s (dim %" PRId64 " vs %" PRId64 ")", an, sh_str(a, sa, sizeof sa), bn,
          sh_str(b, sb, sizeof sb), a->rank >= k ? a->dims[a->rank - k] : 1, b->rank >= k ? b->dims[b->rank - k] : 1);
}

int sh_unibroadcast(ir_graph *g, int node, const ir_shape *a, const ir_shape *b, const char *an, const char *bn) {
  ir_shape o;
  if (b->rank <= a->rank && !sh_broadcast_shapes(a, b, &o)) {
    int same = 1;
    for (int i = 0; i < a->rank; i++) same &= o.dims[i] == a->dims[i];
    if (same) return 0;
  }
  char sa[256], sb[256];
  SH_FAIL("%s %s cannot be broadcast to %s %s", bn, sh_str(b, sb, sizeof sb), an, sh_str(a, sa, sizeof sa));
}

int sh_axis(ir_graph *g, int node, int64_t axis, int rank, const char *what, int *out) {
  if (axis < -(int64_t)rank || axis >= rank) {
    if (rank == 0) SH_FAIL("%s %" PRId64 " is out of range for a rank-0 input", what, axis);
    SH_FAIL("%s %" PRId64 " is out of range for rank %d (allowed %d to %d)", what, axis, rank, -rank, rank - 1);
  }
  *out = (int)(axis < 0 ? axis + rank : axis);
  return 0;
}

int sh_axes(ir_graph *g, int node, const int64_t *axes, int n, int rank, const char *what, int *out) {
  unsigned seen = 0;
  for (int i = 0; i < n; i++) {
    if (sh_axis(g, node, axes[i], rank, what, &out[i])) return -1;
    if (seen & (1u << out[i])) SH_FAIL("%s has axis %d more than once", what, out[i]);
    seen |= 1u << out[i];
  }
  return 0;
}

static int const_input(ir_graph *g, int node, int i, const char *what, int max, int *n, const ir_value **pv) {
  const ir_value *v = sh_in(g, node, i);
  char vn[96], b[256];
  IR_ASSERT(v);
  if (v->kind != IR_VAL_CONST)
    SH_FAIL("input '%s' (value '%s') must be a constant for a static shape", what, sh_vname(v, vn, sizeof vn));
  if (v->shape.rank > 1)
    SH_FAIL("input '%s' must be a scalar or 1-D, it has shape %s", what, sh_str(&v->shape, b, sizeof b));
  int64_t cnt = ir_shape_numel(&v->shape);
  if (cnt < 0 || cnt > max) SH_FAIL("input '%s' has %" PRId64 " elements, at most %d supported", what, cnt, max);
  *n = (int)cnt;
  *pv = v;
  return 0;
}

int sh_const_ints(ir_graph *g, int node, int i, const char *what, int64_t *out, int max, int *n) {
  const ir_value *v;
  if (const_input(g, node, i, what, max, n, &v)) return -1;
  if (!(SH_BIT(v->dtype) & SH_INTS))
    SH_FAIL("input '%s' has data type %s, expected an integer type", what, ir_dtype_name(v->dtype));
  for (int k = 0; k < *n; k++)
    if (ir_const_i64(v, k, &out[k])) SH_FAIL("input '%s': cannot read element %d of its data", what, k);
  return 0;
}

int sh_const_f64s(ir_graph *g, int node, int i, const char *what, double *out, int max, int *n) {
  const ir_value *v;
  if (const_input(g, node, i, what, max, n, &v)) return -1;
  for (int k = 0; k < *n; k++)
    if (ir_const_f64(v, k, &out[k])) SH_FAIL("input '%s': cannot read element %d of its data", what, k);
  return 0;
}

int sh_attr_ints(ir_graph *g, int node, const char *name, int64_t *out, int max) {
  const int64_t *v;
  int n = ir_attr_ints(SH_NODE, name, &v);
  if (n < 0) {
    /* a single INT where INTS is expected: accept it as a list of one */
    const ir_attr *a = ir_attr_find(SH_NODE, name);
    if (a && a->type == IR_ATTR_INT && max >= 1) {
      out[0] = a->i;
      return 1;
    }
    return -1;
  }
  if (n > max) return ir_error_node(g, node, "attribute '%s' has %d values, at most %d allowed", name, n, max), -2;
  for (int i = 0; i < n; i++) out[i] = v[i];
  return n;
}

int sh_mul(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r) ? -1 : 0; }
int sh_add(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r) ? -1 : 0; }

int sh_auto_pad(const char *s) {
  if (!s || !strcmp(s, "NOTSET") || !*s) return SH_PAD_NOTSET;
  if (!strcmp(s, "SAME_UPPER")) return SH_PAD_SAME_UPPER;
  if (!strcmp(s, "SAME_LOWER")) return SH_PAD_SAME_LOWER;
  if (!strcmp(s, "VALID")) return SH_PAD_VALID;
  return -1;
}

int sh_window_out(int64_t in, int64_t k, int64_t s, int64_t d, int auto_pad, int ceil_mode, int64_t *pb, int64_t *pe,
                  int64_t *out) {
  const int64_t lim = (int64_t)1 << 40;
  if (k < 1 || s < 1 || d < 1 || in < 0 || k > lim || s > lim || d > lim) return -1;
  int64_t ek = (k - 1) * d + 1; /* dilated kernel extent */
  if (auto_pad == SH_PAD_SAME_UPPER || auto_pad == SH_PAD_SAME_LOWER) {
    int64_t o = (in + s - 1) / s;
    int64_t total = (o - 1) * s + ek - in;
    if (total < 0) total = 0;
    *pb = auto_pad == SH_PAD_SAME_UPPER ? total / 2 : total - total / 2;
    *pe = total - *pb;
    *out = o;
    return 0;
  }
  if (auto_pad == SH_PAD_VALID) *pb = *pe = 0;
  if (*pb < 0 || *pe < 0 || *pb > lim || *pe > lim || in > INT64_MAX / 4) return -1;
  int64_t span = in + *pb + *pe - ek;
  if (span < 0) return -1;
  int64_t o = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
  /* ceil mode: the last window must start inside the input or the left padding */
  if (ceil_mode && (o - 1) * s >= in + *pb) o--;
  *out = o;
  return 0;
}

/* ---- driver ---- */

int pass_shape_node(ir_graph *g, int node) {
  ir_node *n = &g->nodes[node];
  if (n->dead) return 0;
  for (int k = 0; k < n->n_out; k++) {
    ir_value *v = sh_out(g, node, k);
    if (v && v->kind != IR_VAL_CONST) v->shape.rank = -1;
  }
  n->flops = 0;
  if (n->op < 0 || n->op >= IR_OP_COUNT) {
    ir_error_node(g, node, "op is not supported");
    return -1;
  }
  for (int k = 0; k < n->n_in; k++) {
    ir_value *v = sh_in(g, node, k);
    if (!v) continue;
    if (ir_shape_static(&v->shape) && v->dtype > IR_UNDEFINED && v->dtype < IR_DTYPE_COUNT) {
      if (v->dtype == IR_STRING || v->dtype == IR_COMPLEX64 || v->dtype == IR_COMPLEX128) {
        char vn[96];
        ir_error_node(g, node, "input %d '%s' has data type %s, which pipecc does not support", k,
                      sh_vname(v, vn, sizeof vn), ir_dtype_name(v->dtype));
        return -1;
      }
      continue;
    }
    /* an earlier error left this input unknown: stay quiet, don't cascade */
    if (g->n_errors) return -1;
    char vn[96], b[256];
    ir_error_node(g, node, "input %d '%s' has no static shape (%s %s)", k, sh_vname(v, vn, sizeof vn),
                  ir_dtype_name(v->dtype), sh_str(&v->shape, b, sizeof b));
    return -1;
  }
  pass_batch_consts(g, node); /* micro-batches: constants expanded for the whole batch */
  int errs = g->n_errors;
  int rc = shape_table[n->op](g, node);
  if (rc || g->n_errors > errs) {
    for (int k = 0; k < n->n_out; k++) {
      ir_value *v = sh_out(g, node, k);
      if (v && v->kind != IR_VAL_CONST) v->shape.rank = -1;
    }
    return -1;
  }
  pass_batch_node(g, node);
  return 0;
}

int pass_shape(ir_graph *g, const pass_opts *o) {
  (void)o;
  int errs = g->n_errors;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead) pass_shape_node(g, i);
  if (g->n_errors > errs) return -1;
  /* every value a live node reads or the graph outputs must now be static */
  char vn[96], b[256];
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_in + n->n_out; k++) {
      int id = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
      if (id < 0) continue;
      const ir_value *v = &g->values[id];
      if (ir_shape_static(&v->shape) && v->dtype != IR_UNDEFINED) continue;
      ir_error_node(g, i, "value '%s' has no static shape after shape inference (%s %s)", sh_vname(v, vn, sizeof vn),
                    ir_dtype_name(v->dtype), sh_str(&v->shape, b, sizeof b));
      return -1;
    }
  }
  for (int k = 0; k < g->n_outputs; k++) {
    const ir_value *v = &g->values[g->outputs[k]];
    if (ir_shape_static(&v->shape) && v->dtype != IR_UNDEFINED) continue;
    ir_error(g, "graph output '%s' has no static shape after shape inference (%s %s)", sh_vname(v, vn, sizeof vn),
             ir_dtype_name(v->dtype), sh_str(&v->shape, b, sizeof b));
    return -1;
  }
  return 0;
}
