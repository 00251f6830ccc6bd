/* passes/opt/fold_eval.c - evaluate one node on constant inputs (see passes/opt/fold.h).
 *
 * Every element is held as an int64 (integers, bool) or a double (float32, float64,
 * float16, bfloat16) and the result is brought back to its dtype: integers wrap like
 * two's-complement C, a float result is rounded to its type. For + - * / and sqrt, one
 * double operation rounded to float gives exactly the float32 IEEE result (double has
 * more than twice float's precision), so float32 arithmetic is exact here. Ops follow the
 * ONNX spec of the node's opset (attributes that became inputs are read from either
 * place). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/opt/fold.h"
#include "runtime/pipert.h"

/* ---- tensors ---- */

int fold_dtype_ok(ir_dtype dt) {
  switch (dt) {
    case IR_FLOAT:
    case IR_DOUBLE:
    case IR_FLOAT16:
    case IR_BFLOAT16:
    case IR_BOOL:
    case IR_INT8:
    case IR_INT16:
    case IR_INT32:
    case IR_INT64:
    case IR_UINT8:
    case IR_UINT16:
    case IR_UINT32: return 1;
    default: return 0;
  }
}

static int is_fp(ir_dtype dt) { return dt == IR_FLOAT || dt == IR_DOUBLE || dt == IR_FLOAT16 || dt == IR_BFLOAT16; }
static int is_int(ir_dtype dt) { return fold_dtype_ok(dt) && !is_fp(dt) && dt != IR_BOOL; }
static int is_signed(ir_dtype dt) { return dt == IR_INT8 || dt == IR_INT16 || dt == IR_INT32 || dt == IR_INT64; }

void fold_tensor_free(fold_tensor *t) {
  free(t->d);
  t->d = NULL;
}

/* Allocate t with the given dtype and shape; -1 if too large. */
static int t_new(fold_tensor *t, ir_dtype dt, int rank, const int64_t *dims) {
  memset(t, 0, sizeof *t);
  if (rank < 0 || rank > IR_MAX_RANK) return -1;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    if (dims[i] && n > FOLD_MAX_ELEMS / dims[i]) return -1;
    n *= dims[i];
    t->dims[i] = dims[i];
  }
  if (n > FOLD_MAX_ELEMS) return -1;
  t->dt = dt;
  t->rank = rank;
  t->n = n;
  t->d = calloc((size_t)(n ? n : 1), sizeof(fold_el));
  if (!t->d) return -1;
  return 0;
}

static int64_t wrap(ir_dtype dt, int64_t x) {
  switch (dt) {
    case IR_INT8: return (int8_t)(uint8_t)x;
    case IR_INT16: return (int16_t)(uint16_t)x;
    case IR_INT32: return (int32_t)(uint32_t)x;
    case IR_UINT8: return (uint8_t)x;
    case IR_UINT16: return (uint16_t)x;
    case IR_UINT32: return (uint32_t)x;
    case IR_BOOL: return x != 0;
    default: return x;
  }
}
/* x rounded to dtype dt (to nearest, ties to even). float16 and bfloat16 are rounded from
 * the double directly: an operation's double result rounded once more is the correctly
 * rounded one (53 >= 2*11+2 bits), as the kernels' float result rounded to 16 bits is
 * (24 >= 2*11+2), so both agree for + - * / and sqrt. */
static double fround(ir_dtype dt, double x) {
  switch (dt) {
    case IR_FLOAT: return (double)(float)x;
    case IR_FLOAT16: return pipert_f16_to_f(pipert_f_to_f16(x));
    case IR_BFLOAT16: return pipert_bf16_to_f(pipert_f_to_bf16(x));
    default: return x;
  }
}

/* Smallest / largest value of an integer dtype. */
static void int_range(ir_dtype dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
    case IR_INT8:
      *lo = INT8_MIN;
      *hi = INT8_MAX;
      break;
    case IR_INT16:
      *lo = INT16_MIN;
      *hi = INT16_MAX;
      break;
    case IR_INT32:
      *lo = INT32_MIN;
      *hi = INT32_MAX;
      break;
    case IR_UINT8:
      *lo = 0;
      *hi = UINT8_MAX;
      break;
    case IR_UINT16:
      *lo = 0;
      *hi = UINT16_MAX;
      break;
    case IR_UINT32:
      *lo = 0;
      *hi = UINT32_MAX;
      break;
    case IR_BOOL:
      *lo = 0;
      *hi = 1;
      break;
    default:
      *lo = INT64_MIN;
      *hi = INT64_MAX;
      break;
  }
}

/* Load constant value v. */
static int t_load(const ir_value *v, fold_tensor *t) {
  if (v->kind != IR_VAL_CONST || !fold_dtype_ok(v->dtype) || !ir_shape_static(&v->shape)) return -1;
  if (t_new(t, v->dtype, v->shape.rank, v->shape.dims)) return -1;
  size_t es = ir_dtype_size(v->dtype);
  if (!v->data || v->nbytes != (size_t)t->n * es) {
    fold_tensor_free(t);
    return -1;
  }
  const unsigned char *p = v->data;
  for (int64_t k = 0; k < t->n; k++, p += es) {
    switch (v->dtype) {
      case IR_FLOAT: {
        float x;
        memcpy(&x, p, 4);
        t->d[k].f = x;
        break;
      }
      case IR_FLOAT16:
      case IR_BFLOAT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        t->d[k].f = v->dtype == IR_FLOAT16 ? pipert_f16_to_f(x) : pipert_bf16_to_f(x);
        break;
      }
      case IR_DOUBLE: {
        double x;
        memcpy(&x, p, 8);
        t->d[k].f = x;
        break;
      }
      case IR_INT64: {
        int64_t x;
        memcpy(&x, p, 8);
        t->d[k].i = x;
        break;
      }
      case IR_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        t->d[k].i = x;
        break;
      }
      case IR_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        t->d[k].i = x;
        break;
      }
      case IR_INT8: {
        int8_t x;
        memcpy(&x, p, 1);
        t->d[k].i = x;
        break;
      }
      case IR_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        t->d[k].i = x;
        break;
      }
      case IR_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        t->d[k].i = x;
        break;
      }
      case IR_UINT8: t->d[k].i = *p; break;
      case IR_BOOL: t->d[k].i = *p != 0; break;
      default: IR_ASSERT(0);
    }
  }
  return 0;
}

void fold_tensor_store(ir_graph *g, const fold_tensor *t, int vi) {
  ir_value *v = &g->values[vi];
  size_t es = ir_dtype_size(t->dt);
  unsigned char *p = ir_alloc_array(g->arena, (size_t)(t->n ? t->n : 1), es);
  for (int64_t k = 0; k < t->n; k++) {
    unsigned char *q = p + (size_t)k * es;
    switch (t->dt) {
      case IR_FLOAT: {
        float x = (float)t->d[k].f;
        memcpy(q, &x, 4);
        break;
      }
      case IR_DOUBLE: memcpy(q, &t->d[k].f, 8); break;
      case IR_FLOAT16:
      case IR_BFLOAT16: {
        uint16_t x = t->dt == IR_FLOAT16 ? pipert_f_to_f16(t->d[k].f) : pipert_f_to_bf16(t->d[k].f);
        memcpy(q, &x, 2);
        break;
      }
      case IR_INT64: memcpy(q, &t->d[k].i, 8); break;
      case IR_INT32:
      case IR_UINT32: {
        uint32_t x = (uint32_t)t->d[k].i;
        memcpy(q, &x, 4);
        break;
      }
      case IR_INT16:
      case IR_UINT16: {
        uint16_t x = (uint16_t)t->d[k].i;
        memcpy(q, &x, 2);
        break;
      }
      case IR_INT8:
      case IR_UINT8:
      case IR_BOOL: *q = (unsigned char)t->d[k].i; break;
      default: IR_ASSERT(0);
    }
  }
  v->kind = IR_VAL_CONST;
  v->dtype = t->dt;
  memset(&v->shape, 0, sizeof v->shape);
  v->shape.rank = t->rank;
  for (int i = 0; i < t->rank; i++) v->shape.dims[i] = t->dims[i];
  v->data = p;
  v->nbytes = (size_t)t->n * es;
  v->producer = -1;
  v->is_initializer = 0;
}

/* ---- helpers ---- */

typedef struct {
  ir_graph *g;
  const ir_node *n;
  fold_tensor in[8];
  int n_in;
} ctx;

/* Input k as a loaded tensor (NULL if omitted). */
static const fold_tensor *IN(ctx *c, int k) { return k < c->n_in && c->in[k].d ? &c->in[k] : NULL; }

/* Integer list from a constant int32/int64 tensor; -1 if not such a 0-D/1-D tensor. */
static int t_ints(const fold_tensor *t, int64_t *buf, int max) {
  if (!t || !is_int(t->dt) || t->rank > 1 || t->n > max) return -1;
  for (int64_t k = 0; k < t->n; k++) buf[k] = t->d[k].i;
  return (int)t->n;
}

/* INTS attribute name, or (from opset `from` on) integer input k: count, -1 if absent
 * everywhere, -2 if malformed. */
static int ints_arg(ctx *c, const char *name, int from, int k, int64_t *buf, int max) {
  if (c->n->opset >= from) {
    const fold_tensor *t = IN(c, k);
    if (!t) return -1;
    int r = t_ints(t, buf, max);
    return r < 0 ? -2 : r;
  }
  const int64_t *v;
  int n = ir_attr_ints(c->n, name, &v);
  if (n < 0) return -1;
  if (n > max) return -2;
  for (int i = 0; i < n; i++) buf[i] = v[i];
  return n;
}

/* Normalise axis a for rank r (ONNX: -r <= a < r). -1 if out of range. */
static int norm_axis(int64_t a, int r) {
  if (a < 0) a += r;
  return (a >= 0 && a < r) ? (int)a : -1;
}

static void strides(int rank, const int64_t *dims, int64_t *st) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    st[d] = s;
    s *= dims[d];
  }
}

/* Walk the elements of an output of shape (rank, dims) in row-major order; for each,
 * off holds base + sum idx[d] * st[d]. */
#define FOR_EACH_INDEX(rank, dims, n, base, st, k, off, ...) \
  do {                                                       \
    int64_t idx_[IR_MAX_RANK] = {0}, off = (base);           \
    for (int64_t k = 0; k < (n); k++) {                      \
      __VA_ARGS__;                                           \
      for (int d_ = (rank)-1; d_ >= 0; d_--) {               \
        off += (st)[d_];                                     \
        if (++idx_[d_] < (dims)[d_]) break;                  \
        off -= (st)[d_] * (dims)[d_];                        \
        idx_[d_] = 0;                                        \
      }                                                      \
    }                                                        \
  } while (0)

/* Multidirectional (numpy) broadcast of n shapes. -1 if incompatible. */
static int bcast_shape(const fold_tensor *const *ts, int n, int *rank, int64_t *dims) {
  int r = 0;
  for (int i = 0; i < n; i++)
    if (ts[i]->rank > r) r = ts[i]->rank;
  for (int d = 0; d < r; d++) {
    int64_t v = 1;
    for (int i = 0; i < n; i++) {
      int id = d - (r - ts[i]->rank);
      if (id < 0) continue;
      int64_t x = ts[i]->dims[id];
      if (x == 1) continue;
      if (v != 1 && v != x) return -1;
      v = x;
    }
    dims[d] = v;
  }
  *rank = r;
  return 0;
}

/* Strides that read t broadcast to (rank, dims): 0 along broadcast dims. */
static void bcast_strides(const fold_tensor *t, int rank, int64_t *st) {
  int64_t ist[IR_MAX_RANK];
  strides(t->rank, t->dims, ist);
  for (int d = 0; d < rank; d++) {
    int id = d - (rank - t->rank);
    st[d] = (id >= 0 && t->dims[id] != 1) ? ist[id] : 0;
  }
}

/* ---- ops ---- */

static int op_shape(ctx *c, fold_tensor *o) {
  const ir_value *x = ir_in(c->g, c->n, 0);
  if (!x || !ir_shape_static(&x->shape)) return 0;
  int r = x->shape.rank;
  int64_t start = ir_attr_int(c->n, "start", 0), end = ir_attr_int(c->n, "end", r);
  if (c->n->opset < 15) start = 0, end = r;
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  int64_t len = end > start ? end - start : 0;
  if (t_new(o, IR_INT64, 1, &len)) return 0;
  for (int64_t k = 0; k < len; k++) o->d[k].i = x->shape.dims[start + k];
  return 1;
}

static int op_size(ctx *c, fold_tensor *o) {
  const ir_value *x = ir_in(c->g, c->n, 0);
  if (!x) return 0;
  int64_t n = ir_shape_numel(&x->shape);
  if (n < 0 || t_new(o, IR_INT64, 0, NULL)) return 0;
  o->d[0].i = n;
  return 1;
}

/* Same data, new shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity). */
static int reshaped(const fold_tensor *x, int rank, const int64_t *dims, fold_tensor *o) {
  if (t_new(o, x->dt, rank, dims) || o->n != x->n) return 0;
  memcpy(o->d, x->d, sizeof(fold_el) * (size_t)x->n);
  return 1;
}

static int op_reshape(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *s = IN(c, 1);
  int64_t sh[IR_MAX_RANK];
  int r;
  if (!x || !s || s->dt != IR_INT64 || s->rank != 1 || (r = t_ints(s, sh, IR_MAX_RANK)) < 0) return 0;
  int allowzero = c->n->opset >= 14 ? (int)ir_attr_int(c->n, "allowzero", 0) : 0;
  int infer = -1;
  int64_t known = 1;
  for (int d = 0; d < r; d++) {
    if (sh[d] == 0 && !allowzero) {
      if (d >= x->rank) return 0;
      sh[d] = x->dims[d];
    }
    if (sh[d] == -1) {
      if (infer >= 0) return 0;
      infer = d;
    } else if (sh[d] < 0) return 0;
    else {
      if (sh[d] && known > INT64_MAX / sh[d]) return 0;
      known *= sh[d];
    }
  }
  if (infer >= 0) {
    if (!known || x->n % known) return 0;
    sh[infer] = x->n / known;
  } else if (known != x->n) return 0;
  return reshaped(x, r, sh, o);
}

static int op_flatten(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  if (!x) return 0;
  int64_t a = ir_attr_int(c->n, "axis", 1);
  if (a < 0) a += x->rank;
  if (a < 0 || a > x->rank) return 0;
  int64_t sh[2] = {1, 1};
  for (int d = 0; d < x->rank; d++) sh[d >= a] *= x->dims[d];
  return reshaped(x, 2, sh, o);
}

static int op_squeeze(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  int64_t axes[IR_MAX_RANK];
  if (!x) return 0;
  int na = ints_arg(c, "axes", 13, 1, axes, IR_MAX_RANK);
  if (na == -2) return 0;
  char drop[IR_MAX_RANK] = {0};
  if (na < 0) {
    for (int d = 0; d < x->rank; d++) drop[d] = x->dims[d] == 1;
  } else {
    for (int k = 0; k < na; k++) {
      int a = norm_axis(axes[k], x->rank);
      if (a < 0 || x->dims[a] != 1 || drop[a]) return 0;
      drop[a] = 1;
    }
  }
  int64_t sh[IR_MAX_RANK];
  int r = 0;
  for (int d = 0; d < x->rank; d++)
    if (!drop[d]) sh[r++] = x->dims[d];
  return reshaped(x, r, sh, o);
}

static int op_unsqueeze(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  int64_t axes[IR_MAX_RANK];
  if (!x) return 0;
  int na = ints_arg(c, "axes", 13, 1, axes, IR_MAX_RANK);
  if (na < 0) return 0;
  int r = x->rank + na;
  if (r > IR_MAX_RANK) return 0;
  char ins[IR_MAX_RANK] = {0};
  for (int k = 0; k < na; k++) {
    int a = norm_axis(axes[k], r);
    if (a < 0 || ins[a]) return 0;
    ins[a] = 1;
  }
  int64_t sh[IR_MAX_RANK];
  for (int d = 0, j = 0; d < r; d++) sh[d] = ins[d] ? 1 : x->dims[j++];
  return reshaped(x, r, sh, o);
}

static int op_identity(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  return x && reshaped(x, x->rank, x->dims, o);
}

static int op_gather(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *ix = IN(c, 1);
  if (!x || !ix || (ix->dt != IR_INT64 && ix->dt != IR_INT32)) return 0;
  int ax = norm_axis(ir_attr_int(c->n, "axis", 0), x->rank);
  if (ax < 0 || x->rank + ix->rank - 1 > IR_MAX_RANK) return 0;
  int64_t sh[IR_MAX_RANK], outer = 1, inner = 1, D = x->dims[ax];
  int r = 0;
  for (int d = 0; d < ax; d++) sh[r++] = x->dims[d], outer *= x->dims[d];
  for (int d = 0; d < ix->rank; d++) sh[r++] = ix->dims[d];
  for (int d = ax + 1; d < x->rank; d++) sh[r++] = x->dims[d], inner *= x->dims[d];
  for (int64_t j = 0; j < ix->n; j++)
    if (ix->d[j].i < -D || ix->d[j].i >= D) return 0;
  if (t_new(o, x->dt, r, sh)) return 0;
  int64_t w = 0;
  for (int64_t a = 0; a < outer; a++)
    for (int64_t j = 0; j < ix->n; j++) {
      int64_t i = ix->d[j].i < 0 ? ix->d[j].i + D : ix->d[j].i;
      memcpy(o->d + w, x->d + (a * D + i) * inner, sizeof(fold_el) * (size_t)inner);
      w += inner;
    }
  return 1;
}

static int op_concat(ctx *c, fold_tensor *o) {
  if (c->n_in < 1 || !IN(c, 0)) return 0;
  const fold_tensor *x0 = IN(c, 0);
  int ax = norm_axis(ir_attr_int(c->n, "axis", INT64_MIN), x0->rank);
  if (ax < 0) return 0;
  int64_t sh[IR_MAX_RANK];
  memcpy(sh, x0->dims, sizeof sh);
  sh[ax] = 0;
  for (int k = 0; k < c->n_in; k++) {
    const fold_tensor *x = IN(c, k);
    if (!x || x->rank != x0->rank || x->dt != x0->dt) return 0;
    for (int d = 0; d < x->rank; d++)
      if (d != ax && x->dims[d] != x0->dims[d]) return 0;
    sh[ax] += x->dims[ax];
  }
  if (t_new(o, x0->dt, x0->rank, sh)) return 0;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; d++) outer *= sh[d];
  for (int d = ax + 1; d < x0->rank; d++) inner *= sh[d];
  int64_t w = 0;
  for (int64_t a = 0; a < outer; a++)
    for (int k = 0; k < c->n_in; k++) {
      const fold_tensor *x = IN(c, k);
      int64_t chunk = x->dims[ax] * inner;
      memcpy(o->d + w, x->d + a * chunk, sizeof(fold_el) * (size_t)chunk);
      w += chunk;
    }
  return 1;
}

static int op_slice(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  if (!x) return 0;
  int64_t starts[IR_MAX_RANK], ends[IR_MAX_RANK], axes[IR_MAX_RANK], steps[IR_MAX_RANK];
  int ns, ne, na, nst = -1;
  if (c->n->opset < 10) {
    ns = ints_arg(c, "starts", 1000, 0, starts, IR_MAX_RANK);
    ne = ints_arg(c, "ends", 1000, 0, ends, IR_MAX_RANK);
    na = ints_arg(c, "axes", 1000, 0, axes, IR_MAX_RANK);
  } else {
    ns = t_ints(IN(c, 1), starts, IR_MAX_RANK);
    ne = t_ints(IN(c, 2), ends, IR_MAX_RANK);
    na = IN(c, 3) ? t_ints(IN(c, 3), axes, IR_MAX_RANK) : -1;
    nst = IN(c, 4) ? t_ints(IN(c, 4), steps, IR_MAX_RANK) : -1;
    if ((c->n_in > 3 && c->n->in[3] >= 0 && na < 0) || (c->n_in > 4 && c->n->in[4] >= 0 && nst < 0)) return 0;
  }
  if (ns < 0 || ne != ns) return 0;
  if (na < 0) {
    if (ns > x->rank) return 0;
    na = ns;
    for (int k = 0; k < ns; k++) axes[k] = k;
  }
  if (nst < 0) {
    nst = ns;
    for (int k = 0; k < ns; k++) steps[k] = 1;
  }
  if (na != ns || nst != ns) return 0;
  int64_t st[IR_MAX_RANK], sp[IR_MAX_RANK], sh[IR_MAX_RANK];
  char seen[IR_MAX_RANK] = {0};
  for (int d = 0; d < x->rank; d++) st[d] = 0, sp[d] = 1, sh[d] = x->dims[d];
  for (int k = 0; k < ns; k++) {
    int a = norm_axis(axes[k], x->rank);
    if (a < 0 || seen[a] || steps[k] == 0) return 0;
    seen[a] = 1;
    int64_t D = x->dims[a], s = starts[k], e = ends[k], step = steps[k];
    if (s < 0) s += D;
    if (e < 0) e += D;
    if (step > 0) {
      s = s < 0 ? 0 : s > D ? D : s;
      e = e < 0 ? 0 : e > D ? D : e;
    } else {
      s = s < 0 ? 0 : s > D - 1 ? D - 1 : s;
      e = e < -1 ? -1 : e > D - 1 ? D - 1 : e;
    }
    int64_t len; /* ceil((e - s) / step) without overflow (|step| may be huge) */
    if (step > 0) len = e > s ? (e - s - 1) / step + 1 : 0;
    else if (step == INT64_MIN) len = s > e ? 1 : 0;
    else len = s > e ? (s - e - 1) / (-step) + 1 : 0;
    st[a] = s;
    sp[a] = step;
    sh[a] = len;
  }
  if (t_new(o, x->dt, x->rank, sh)) return 0;
  int64_t ist[IR_MAX_RANK], wst[IR_MAX_RANK], base = 0;
  strides(x->rank, x->dims, ist);
  for (int d = 0; d < x->rank; d++) {
    wst[d] = sp[d] * ist[d];
    if (sh[d]) base += st[d] * ist[d];
  }
  FOR_EACH_INDEX(x->rank, sh, o->n, base, wst, k, off, o->d[k] = x->d[off]);
  return 1;
}

static int op_transpose(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  if (!x) return 0;
  int64_t perm[IR_MAX_RANK];
  int np = ints_arg(c, "perm", 1000, 0, perm, IR_MAX_RANK);
  if (np == -2 || (np >= 0 && np != x->rank)) return 0;
  if (np < 0)
    for (int d = 0; d < x->rank; d++) perm[d] = x->rank - 1 - d;
  char seen[IR_MAX_RANK] = {0};
  int64_t sh[IR_MAX_RANK], ist[IR_MAX_RANK], wst[IR_MAX_RANK];
  strides(x->rank, x->dims, ist);
  for (int d = 0; d < x->rank; d++) {
    if (perm[d] < 0 || perm[d] >= x->rank || seen[perm[d]]) return 0;
    seen[perm[d]] = 1;
    sh[d] = x->dims[perm[d]];
    wst[d] = ist[perm[d]];
  }
  if (t_new(o, x->dt, x->rank, sh)) return 0;
  FOR_EACH_INDEX(x->rank, sh, o->n, 0, wst, k, off, o->d[k] = x->d[off]);
  return 1;
}

static int op_expand(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *s = IN(c, 1);
  if (!x || !s || s->dt != IR_INT64 || s->rank != 1 || s->n > IR_MAX_RANK) return 0;
  fold_tensor shp = {.dt = IR_INT64, .rank = (int)s->n};
  for (int d = 0; d < shp.rank; d++) {
    if (s->d[d].i < 0) return 0;
    shp.dims[d] = s->d[d].i;
  }
  const fold_tensor *ts[2] = {x, &shp};
  int r;
  int64_t sh[IR_MAX_RANK], st[IR_MAX_RANK];
  if (bcast_shape(ts, 2, &r, sh) || t_new(o, x->dt, r, sh)) return 0;
  bcast_strides(x, r, st);
  FOR_EACH_INDEX(r, sh, o->n, 0, st, k, off, o->d[k] = x->d[off]);
  return 1;
}

static int op_tile(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *rp = IN(c, 1);
  int64_t rep[IR_MAX_RANK];
  if (!x || !rp || rp->dt != IR_INT64 || t_ints(rp, rep, IR_MAX_RANK) != x->rank || rp->rank != 1) return 0;
  int64_t sh[IR_MAX_RANK];
  for (int d = 0; d < x->rank; d++) {
    if (rep[d] < 0 || (rep[d] && x->dims[d] > FOLD_MAX_ELEMS / rep[d])) return 0;
    sh[d] = x->dims[d] * rep[d];
  }
  if (t_new(o, x->dt, x->rank, sh)) return 0;
  int64_t ist[IR_MAX_RANK];
  strides(x->rank, x->dims, ist);
  for (int64_t k = 0; k < o->n; k++) {
    int64_t rem = k, off = 0;
    for (int d = x->rank - 1; d >= 0; d--) {
      int64_t i = rem % sh[d];
      rem /= sh[d];
      off += (i % x->dims[d]) * ist[d];
    }
    o->d[k] = x->d[off];
  }
  return 1;
}

/* Cast one element of dtype from to dtype to; 0 if it cannot be done exactly the way a
 * C/C++ runtime does it (NaN or out-of-range float to integer). */
static int cast_el(ir_dtype from, fold_el x, ir_dtype to, fold_el *y) {
  if (is_fp(from)) {
    double v = x.f;
    if (is_fp(to)) y->f = fround(to, v);
    else if (to == IR_BOOL) y->i = v != 0 || isnan(v);
    else {
      int64_t lo, hi;
      int_range(to, &lo, &hi);
      if (isnan(v)) return 0;
      double t = trunc(v);
      /* (double)hi may round up (INT64_MAX): compare against 2^63 strictly */
      if (t < (double)lo || t >= (double)hi + 1.0) return 0;
      if (to == IR_INT64 && t >= 9223372036854775808.0) return 0;
      y->i = (int64_t)t;
    }
  } else {
    int64_t v = x.i;
    if (to == IR_FLOAT) y->f = (double)(float)v;
    else if (to == IR_DOUBLE) y->f = (double)v;
    else if (is_fp(to)) y->f = fround(to, (double)(float)v); /* as the kernels: through float */
    else y->i = wrap(to, v);
  }
  return 1;
}

static int op_constant_of_shape(ctx *c, fold_tensor *o) {
  const fold_tensor *s = IN(c, 0);
  if (!s || s->dt != IR_INT64 || s->rank != 1 || s->n > IR_MAX_RANK) return 0;
  int64_t sh[IR_MAX_RANK];
  for (int d = 0; d < s->n; d++) {
    if (s->d[d].i < 0) return 0;
    sh[d] = s->d[d].i;
  }
  const ir_attr *a = ir_attr_find(c->n, "value");
  fold_tensor val = {0};
  if (a) {
    if (a->type != IR_ATTR_TENSOR || a->tensor < 0 || t_load(&c->g->values[a->tensor], &val)) return 0;
    if (val.n != 1) return fold_tensor_free(&val), 0;
  } else {
    if (t_new(&val, IR_FLOAT, 0, NULL)) return 0;
    val.d[0].f = 0;
  }
  int ok = !t_new(o, val.dt, (int)s->n, sh);
  for (int64_t k = 0; ok && k < o->n; k++) o->d[k] = val.d[0];
  fold_tensor_free(&val);
  return ok;
}

static int op_range(ctx *c, fold_tensor *o) {
  const fold_tensor *s = IN(c, 0), *l = IN(c, 1), *dl = IN(c, 2);
  if (!s || !l || !dl || s->n != 1 || l->n != 1 || dl->n != 1 || s->rank > 1 || l->dt != s->dt || dl->dt != s->dt)
    return 0;
  ir_dtype dt = s->dt;
  int64_t n;
  if (is_fp(dt)) {
    double st = s->d[0].f, lim = l->d[0].f, de = dl->d[0].f;
    if (de == 0 || !isfinite(st) || !isfinite(lim) || !isfinite(de)) return 0;
    double cnt = ceil(fround(dt, lim - st) / de);
    if (cnt > FOLD_MAX_ELEMS) return 0;
    n = cnt > 0 ? (int64_t)cnt : 0;
    if (t_new(o, dt, 1, &n)) return 0;
    /* Runtimes compute start + i*delta or accumulate: fold only where both agree. */
    double acc = st;
    for (int64_t i = 0; i < n; i++) {
      double mul = fround(dt, st + fround(dt, (double)i * de));
      if (mul != acc) return fold_tensor_free(o), 0;
      o->d[i].f = acc;
      acc = fround(dt, acc + de);
    }
    return 1;
  }
  if (!is_signed(dt)) return 0;
  int64_t st = s->d[0].i, lim = l->d[0].i, de = dl->d[0].i;
  if (de == 0) return 0;
  /* exact ceil((lim - st) / de) in 128 bits */
  __int128 diff = (__int128)lim - st, q = diff / de;
  if ((diff % de != 0) && ((diff < 0) == (de < 0))) q++;
  if (q > FOLD_MAX_ELEMS) return 0;
  n = q > 0 ? (int64_t)q : 0;
  if (t_new(o, dt, 1, &n)) return 0;
  for (int64_t i = 0; i < n; i++) o->d[i].i = st + i * de; /* stays within [st, lim) */
  return 1;
}

/* ---- element-wise ---- */

enum {
  B_ADD,
  B_SUB,
  B_MUL,
  B_DIV,
  B_POW,
  B_MOD,
  B_AND,
  B_OR,
  B_XOR,
  B_EQ,
  B_LT,
  B_LE,
  B_GT,
  B_GE,
  B_MAX,
  B_MIN,
  B_BAND,
  B_BOR,
  B_BXOR,
  B_SHIFT,
  B_PRELU
};

/* One binary op on elements of dtype dt (the first input's); 0 if not exact. flags: 1
 * Mod's fmod, 2 BitShift to the right. */
static int bin_el(int op, ir_dtype dt, ir_dtype dt2, fold_el a, fold_el b, int flags, fold_el *r) {
  int fmod_attr = flags & 1;
  if (is_fp(dt)) {
    double x = a.f, y = is_fp(dt2) ? b.f : (double)b.i;
    switch (op) {
      case B_ADD: r->f = fround(dt, x + y); return 1;
      case B_SUB: r->f = fround(dt, x - y); return 1;
      case B_MUL: r->f = fround(dt, x * y); return 1;
      case B_DIV: r->f = fround(dt, x / y); return 1;
      case B_POW:
        /* onnxruntime squares by multiplication and may cube as x*x*x: decline 3 */
        if (y == 2) r->f = fround(dt, x * x);
        else if (y == 3) return 0;
        else if (y == 1) r->f = x;
        else if (dt != IR_DOUBLE) r->f = fround(dt, (double)powf((float)x, (float)y)); /* the kernels' float pow */
        else r->f = pow(x, y);
        return 1;
      case B_MOD:
        if (!fmod_attr) return 0;
        r->f = fround(dt, fmod(x, y));
        return 1;
      case B_EQ: r->i = x == y; return 1;
      case B_LT: r->i = x < y; return 1;
      case B_LE: r->i = x <= y; return 1;
      case B_GT: r->i = x > y; return 1;
      case B_GE: r->i = x >= y; return 1;
      case B_MAX:
        if (isnan(x) || isnan(y)) return 0;
        r->f = x > y ? x : y;
        return 1;
      case B_MIN:
        if (isnan(x) || isnan(y)) return 0;
        r->f = x < y ? x : y;
        return 1;
      case B_PRELU: /* a zero or NaN: the runtimes test x < 0 or x > 0 */
        if (x == 0 || isnan(x)) return 0;
        r->f = x < 0 ? fround(dt, x * y) : x;
        return 1;
      default: return 0;
    }
  }
  if (is_fp(dt2)) return 0; /* integer Pow with a float exponent */
  int64_t x = a.i, y = b.i, lo, hi;
  int_range(dt, &lo, &hi);
  uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
  switch (op) {
    case B_ADD: r->i = wrap(dt, (int64_t)(ux + uy)); return 1;
    case B_SUB: r->i = wrap(dt, (int64_t)(ux - uy)); return 1;
    case B_MUL: r->i = wrap(dt, (int64_t)(ux * uy)); return 1;
    case B_DIV:
      if (y == 0 || (x == lo && y == -1 && is_signed(dt))) return 0;
      r->i = x / y; /* C: truncates toward zero, as onnxruntime */
      return 1;
    case B_MOD:
      if (y == 0) return 0;
      if (y == -1) r->i = 0;
      else {
        int64_t m = x % y;
        if (!fmod_attr && m != 0 && ((m < 0) != (y < 0))) m += y; /* sign of the divisor */
        r->i = m;
      }
      return 1;
    case B_POW: {
      if (y < 0) return 0;
      /* exact integer power, declining anything past 2^53 (runtimes may go via double) */
      const __int128 lim = (__int128)1 << 53;
      __int128 p = 1;
      for (int64_t k = 0; k < y; k++) {
        p *= x;
        if (p > lim || p < -lim) return 0;
        if (p == 0 || p == 1) break;
        if (p == -1) { /* x == -1 */
          p = (y % 2) ? -1 : 1;
          break;
        }
      }
      if (p < lo || p > hi) return 0;
      r->i = (int64_t)p;
      return 1;
    }
    case B_AND: r->i = x && y; return 1;
    case B_OR: r->i = x || y; return 1;
    case B_XOR: r->i = (x != 0) != (y != 0); return 1;
    case B_EQ: r->i = x == y; return 1;
    case B_LT: r->i = x < y; return 1;
    case B_LE: r->i = x <= y; return 1;
    case B_GT: r->i = x > y; return 1;
    case B_GE: r->i = x >= y; return 1;
    case B_MAX: r->i = x > y ? x : y; return 1;
    case B_MIN: r->i = x < y ? x : y; return 1;
    case B_BAND: r->i = wrap(dt, (int64_t)(ux & uy)); return 1;
    case B_BOR: r->i = wrap(dt, (int64_t)(ux | uy)); return 1;
    case B_BXOR: r->i = wrap(dt, (int64_t)(ux ^ uy)); return 1;
    case B_SHIFT: { /* a shift by a negative amount or the width or more: left to the runtime */
      int bits = (int)ir_dtype_size(dt) * 8;
      if (y < 0 || y >= bits) return 0;
      if (flags & 2) r->i = is_signed(dt) ? x >> y : (int64_t)(ux >> y); /* signed (BitShift-28): arithmetic */
      else r->i = wrap(dt, (int64_t)(ux << y));
      return 1;
    }
    case B_PRELU: r->i = x < 0 ? wrap(dt, (int64_t)(ux * uy)) : x; return 1;
    default: return 0;
  }
}

/* ---- element-wise: one driver for every op of an element-wise kind ---- */

/* What the driver needs of the node, read once: its scalar function's operands. */
typedef struct {
  ir_op op;
  int bop;      /* the bin_el code of a binary, comparison or variadic op; -1 for others */
  int n_data;   /* inputs whose values are read (CastLike's second gives only a type) */
  ir_dtype dt;  /* the first input's */
  ir_dtype dt2; /* the second input's, IR_UNDEFINED when omitted */
  ir_dtype to;  /* the output's (shape inference set it) */
  int fmod;     /* Mod's fmod */
  int has_lo, has_hi;
  double lo, hi; /* Clip's bounds (as attributes before opset 11) */
  double alpha;  /* LeakyRelu, ThresholdedRelu; Shrink's lambd */
  double beta;   /* Shrink's bias */
  int right;     /* BitShift to the right */
} el_node;

static int bin_code(ir_op op) {
  switch (op) {
    case IR_OP_Add:
    case IR_OP_Sum: return B_ADD;
    case IR_OP_Sub: return B_SUB;
    case IR_OP_Mul: return B_MUL;
    case IR_OP_Div: return B_DIV;
    case IR_OP_Pow: return B_POW;
    case IR_OP_Mod: return B_MOD;
    case IR_OP_And: return B_AND;
    case IR_OP_Or: return B_OR;
    case IR_OP_Xor: return B_XOR;
    case IR_OP_Equal: return B_EQ;
    case IR_OP_Less: return B_LT;
    case IR_OP_LessOrEqual: return B_LE;
    case IR_OP_Greater: return B_GT;
    case IR_OP_GreaterOrEqual: return B_GE;
    case IR_OP_Max: return B_MAX;
    case IR_OP_Min: return B_MIN;
    case IR_OP_BitwiseAnd: return B_BAND;
    case IR_OP_BitwiseOr: return B_BOR;
    case IR_OP_BitwiseXor: return B_BXOR;
    case IR_OP_BitShift: return B_SHIFT;
    case IR_OP_PRelu: return B_PRELU;
    default: return -1;
  }
}

/* 1 if op is evaluated by op_eltwise. */
static int is_eltwise(ir_op op) {
  if (op == IR_OP_Where || op == IR_OP_Cast || op == IR_OP_CastLike) return 1;
  if (op == IR_OP_Mean || op < 0 || op >= IR_OP_COUNT) return 0; /* Mean: a float division of a sum */
  ir_kind k = ir_op_table[op].kind;
  return k == IR_K_UNARY || k == IR_K_UNARY_BOOL || k == IR_K_BINARY || k == IR_K_COMPARE || k == IR_K_VARIADIC;
}

/* Reads the node's dtypes and attributes into e; 0 where the evaluator cannot compute it
 * exactly as the runtimes do (the dtype checks of each family). */
static int el_prepare(ctx *c, el_node *e) {
  const ir_node *n = c->n;
  const ir_value *y = ir_out(c->g, n, 0);
  memset(e, 0, sizeof *e);
  e->op = n->op;
  e->bop = bin_code(n->op);
  e->n_data = n->op == IR_OP_CastLike ? 1 : c->n_in;
  if (!y || !IN(c, 0) || !fold_dtype_ok(y->dtype)) return 0;
  e->to = y->dtype;
  e->dt = IN(c, 0)->dt;
  e->dt2 = IN(c, 1) ? IN(c, 1)->dt : IR_UNDEFINED;
  if (n->op == IR_OP_Cast || n->op == IR_OP_CastLike) return 1;
  if (n->op == IR_OP_Where) return e->dt == IR_BOOL && IN(c, 1) && IN(c, 2) && IN(c, 1)->dt == IN(c, 2)->dt;
  for (int k = 1; k < e->n_data; k++)
    if (IN(c, k) && IN(c, k)->dt != e->dt && n->op != IR_OP_Pow) return 0;
  int fp = is_fp(e->dt);
  if (e->bop >= 0) {
    int b = e->bop;
    if (c->n_in < 1 || (ir_op_table[n->op].kind != IR_K_VARIADIC && c->n_in != 2)) return 0;
    for (int k = 0; k < c->n_in; k++)
      if (!IN(c, k)) return 0;
    if ((b == B_AND || b == B_OR || b == B_XOR) && e->dt != IR_BOOL) return 0;
    if (e->dt == IR_BOOL && !(b == B_AND || b == B_OR || b == B_XOR || b == B_EQ)) return 0;
    if ((b == B_BAND || b == B_BOR || b == B_BXOR || b == B_SHIFT) && !is_int(e->dt)) return 0;
    if (b == B_SHIFT && is_signed(e->dt)) return 0; /* ONNX: unsigned types only */
    if (b == B_PRELU && !fp && !is_signed(e->dt)) return 0;
    /* a float sum of 3+ terms depends on the order of additions */
    if (b == B_ADD && fp && c->n_in > 2) return 0;
    e->fmod = (int)ir_attr_int(n, "fmod", 0);
    e->right = !strcmp(ir_attr_str(n, "direction", "LEFT"), "RIGHT");
    return 1;
  }
  switch (n->op) {
    case IR_OP_Not: return e->dt == IR_BOOL;
    case IR_OP_Neg: return fp || is_signed(e->dt);
    case IR_OP_Abs:
    case IR_OP_Relu:
    case IR_OP_Sign:
    case IR_OP_Identity: return e->dt != IR_BOOL || n->op == IR_OP_Identity;
    case IR_OP_Round:
    case IR_OP_Sqrt:
    case IR_OP_Floor:
    case IR_OP_Ceil:
    case IR_OP_Reciprocal:
    case IR_OP_IsNaN:
    case IR_OP_IsInf: return fp;
    case IR_OP_BitwiseNot: return is_int(e->dt);
    case IR_OP_LeakyRelu:
    case IR_OP_ThresholdedRelu:
      e->alpha = ir_attr_float(n, "alpha", n->op == IR_OP_LeakyRelu ? 0.01f : 1.0f);
      return fp;
    case IR_OP_Shrink:
      e->alpha = ir_attr_float(n, "lambd", 0.5f);
      e->beta = ir_attr_float(n, "bias", 0.0f);
      return fp;
    case IR_OP_Clip:
      if (e->dt == IR_BOOL) return 0;
      if (n->opset < 11) {
        const ir_attr *amin = ir_attr_find(n, "min"), *amax = ir_attr_find(n, "max");
        if ((e->has_lo = amin != NULL)) e->lo = fround(e->dt, amin->f);
        if ((e->has_hi = amax != NULL)) e->hi = fround(e->dt, amax->f);
        return fp;
      }
      for (int k = 1; k < 3 && k < c->n_in; k++) {
        const fold_tensor *b = IN(c, k);
        if (!b) continue;
        if (b->n != 1) return 0; /* ONNX: scalars */
        double v = fp ? b->d[0].f : (double)b->d[0].i;
        if (fp && isnan(v)) return 0;
        if (!fp && (double)b->d[0].i != v) return 0; /* int64 bounds past 2^53 */
        *(k == 1 ? &e->has_lo : &e->has_hi) = 1;
        *(k == 1 ? &e->lo : &e->hi) = v;
      }
      /* min > max: the runtimes differ (the spec sets every value to max) */
      return !(e->has_lo && e->has_hi && e->lo > e->hi);
    default: return 0; /* the transcendental functions and the rest: the runtime's libm decides */
  }
}

/* One element of a unary op, Clip, Where or a cast; 0 if not exact. */
static int el_one(const el_node *e, const fold_el *a, fold_el *r) {
  ir_dtype dt = e->dt;
  int fp = is_fp(dt);
  fold_el x = a[0];
  switch (e->op) {
    case IR_OP_Cast:
    case IR_OP_CastLike: return cast_el(dt, x, e->to, r);
    case IR_OP_Where:
      *r = a[0].i ? a[1] : a[2];
      /* onnxruntime's Where may turn a selected -0.0 into +0.0: leave those to the runtime */
      return !(is_fp(e->to) && r->f == 0 && signbit(r->f));
    case IR_OP_Identity: *r = x; return 1;
    case IR_OP_Not: r->i = !x.i; return 1;
    case IR_OP_Neg:
      if (fp) r->f = -x.f;
      else r->i = wrap(dt, (int64_t)(0 - (uint64_t)x.i));
      return 1;
    case IR_OP_Abs:
      if (fp) r->f = fabs(x.f);
      else r->i = wrap(dt, x.i < 0 ? (int64_t)(0 - (uint64_t)x.i) : x.i);
      return 1;
    case IR_OP_Relu: /* as the kernels: NaN stays */
      if (fp) r->f = x.f < 0 ? 0 : x.f;
      else r->i = is_signed(dt) && x.i < 0 ? 0 : x.i;
      return 1;
    case IR_OP_Sign:
      if (fp) {
        if (isnan(x.f)) return 0;
        r->f = x.f > 0 ? 1 : x.f < 0 ? -1 : 0;
      } else r->i = x.i > 0 ? 1 : x.i < 0 ? -1 : 0;
      return 1;
    case IR_OP_Sqrt: r->f = fround(dt, sqrt(x.f)); return 1;
    case IR_OP_Floor: r->f = floor(x.f); return 1;
    case IR_OP_Ceil: r->f = ceil(x.f); return 1;
    case IR_OP_Round: r->f = nearbyint(x.f); return 1; /* half to even, the default rounding mode */
    case IR_OP_Reciprocal: r->f = fround(dt, 1.0 / x.f); return 1;
    case IR_OP_IsNaN: r->i = isnan(x.f) != 0; return 1;
    case IR_OP_IsInf: r->i = isinf(x.f) != 0; return 1; /* detect_negative/positive: op_eltwise */
    case IR_OP_BitwiseNot: r->i = wrap(dt, (int64_t) ~(uint64_t)x.i); return 1;
    case IR_OP_LeakyRelu:
      if (isnan(x.f)) return 0;
      r->f = x.f >= 0 ? x.f : fround(dt, fround(dt, e->alpha) * x.f);
      return 1;
    case IR_OP_ThresholdedRelu:
      if (isnan(x.f)) return 0;
      r->f = x.f > fround(dt, e->alpha) ? x.f : 0;
      return 1;
    case IR_OP_Shrink: {
      if (isnan(x.f)) return 0;
      double l = fround(dt, e->alpha), b = fround(dt, e->beta);
      r->f = x.f < -l ? fround(dt, x.f + b) : x.f > l ? fround(dt, x.f - b) : 0;
      return 1;
    }
    case IR_OP_Clip: {
      double v = fp ? x.f : (double)x.i;
      if (fp && isnan(v)) return 0;
      if (!fp && (double)x.i != v) return 0;
      int below = e->has_lo && v < e->lo, above = e->has_hi && v > e->hi;
      /* a zero against a bound of the other zero's sign: the runtimes' min/max differ */
      if (fp && v == 0 && ((e->has_lo && e->lo == 0) || (e->has_hi && e->hi == 0))) {
        double bd = e->has_lo && e->lo == 0 ? e->lo : e->hi;
        if (signbit(bd) != signbit(v)) return 0;
      }
      if (fp) r->f = below ? e->lo : above ? e->hi : v;
      else r->i = below ? (int64_t)e->lo : above ? (int64_t)e->hi : x.i;
      return 1;
    }
    default: return 0;
  }
}

/* Every op of an element-wise kind, Where, Cast and CastLike: the inputs broadcast to
 * the output's shape, one scalar function applied per element (a variadic op folds its
 * operands left to right). */
static int op_eltwise(ctx *c, fold_tensor *o) {
  el_node e;
  if (c->n_in < 1 || !el_prepare(c, &e)) return 0;
  const fold_tensor *ts[8] = {0}, *pres[8];
  int np = 0;
  for (int k = 0; k < e.n_data; k++)
    if ((ts[k] = IN(c, k))) pres[np++] = ts[k];
  int r;
  int64_t sh[IR_MAX_RANK] = {0}, st[8][IR_MAX_RANK] = {{0}}, ix[IR_MAX_RANK] = {0}, off[8] = {0};
  if (bcast_shape(pres, np, &r, sh) || t_new(o, e.to, r, sh)) return 0;
  for (int k = 0; k < e.n_data; k++)
    if (ts[k]) bcast_strides(ts[k], r, st[k]);
  int det_neg = (int)ir_attr_int(c->n, "detect_negative", 1), det_pos = (int)ir_attr_int(c->n, "detect_positive", 1);
  fold_el a[8] = {{0}};
  for (int64_t i = 0; i < o->n; i++) {
    for (int k = 0; k < e.n_data; k++)
      if (ts[k]) a[k] = ts[k]->d[off[k]];
    int ok;
    if (e.bop >= 0) {
      fold_el acc = a[0];
      ok = 1;
      for (int k = 1; k < e.n_data && ok; k++)
        ok = bin_el(e.bop, e.dt, ts[k]->dt, acc, a[k], e.fmod | e.right << 1, &acc);
      o->d[i] = acc;
    } else {
      ok = el_one(&e, a, &o->d[i]);
      if (ok && e.op == IR_OP_IsInf && o->d[i].i) o->d[i].i = a[0].f > 0 ? det_pos != 0 : det_neg != 0;
    }
    if (!ok) return fold_tensor_free(o), 0;
    for (int d = r - 1; d >= 0; d--) {
      for (int k = 0; k < e.n_data; k++) off[k] += st[k][d];
      if (++ix[d] < sh[d]) break;
      for (int k = 0; k < e.n_data; k++) off[k] -= st[k][d] * sh[d];
      ix[d] = 0;
    }
  }
  return 1;
}

static int op_reduce(ctx *c, ir_op op, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  if (!x || x->dt == IR_BOOL) return 0;
  /* Sum/Prod of floats depend on the order of operations: integers only */
  if ((op == IR_OP_ReduceSum || op == IR_OP_ReduceProd) && is_fp(x->dt)) return 0;
  int64_t axes[IR_MAX_RANK];
  int from = op == IR_OP_ReduceSum ? 13 : 18;
  int na = ints_arg(c, "axes", from, 1, axes, IR_MAX_RANK);
  if (na == -2) return 0;
  int keep = (int)ir_attr_int(c->n, "keepdims", 1);
  int noop = (int)ir_attr_int(c->n, "noop_with_empty_axes", 0);
  char red[IR_MAX_RANK] = {0};
  if (na <= 0) {
    if (noop && c->n->opset >= from) return op_identity(c, o);
    for (int d = 0; d < x->rank; d++) red[d] = 1;
  } else
    for (int k = 0; k < na; k++) {
      int a = norm_axis(axes[k], x->rank);
      if (a < 0) return 0;
      red[a] = 1;
    }
  int64_t kdims[IR_MAX_RANK], sh[IR_MAX_RANK] = {0}, kst[IR_MAX_RANK], wst[IR_MAX_RANK];
  int r = 0;
  for (int d = 0; d < x->rank; d++) {
    kdims[d] = red[d] ? 1 : x->dims[d];
    if (!red[d] || keep) sh[r++] = kdims[d];
  }
  if (t_new(o, x->dt, r, sh)) return 0;
  strides(x->rank, kdims, kst);
  for (int d = 0; d < x->rank; d++) wst[d] = red[d] ? 0 : kst[d];
  if (x->n == 0 && o->n) {
    if (op == IR_OP_ReduceMax || op == IR_OP_ReduceMin) return fold_tensor_free(o), 0;
    for (int64_t k = 0; k < o->n; k++) o->d[k].i = op == IR_OP_ReduceProd;
    return 1;
  }
  char *seen = calloc((size_t)(o->n ? o->n : 1), 1);
  int bop = op == IR_OP_ReduceSum ? B_ADD : op == IR_OP_ReduceProd ? B_MUL : op == IR_OP_ReduceMax ? B_MAX : B_MIN;
  int ok = 1;
  FOR_EACH_INDEX(x->rank, x->dims, x->n, 0, wst, k, off, {
    if (!ok) break;
    if (!seen[off]) seen[off] = 1, o->d[off] = x->d[k];
    else ok = bin_el(bop, x->dt, x->dt, o->d[off], x->d[k], 0, &o->d[off]);
  });
  free(seen);
  if (!ok) fold_tensor_free(o);
  return ok;
}

/* ---- index and layout ops: the output allocated at the shape inference gave it ---- */

/* o with the dtype and static shape of the node's output 0; 0 if it cannot hold it. */
static int t_out(ctx *c, fold_tensor *o) {
  const ir_value *y = ir_out(c->g, c->n, 0);
  if (!y || !fold_dtype_ok(y->dtype) || !ir_shape_static(&y->shape)) return 0;
  return !t_new(o, y->dtype, y->shape.rank, y->shape.dims);
}

/* The multi-index of flat position k in a tensor of shape (rank, dims). */
static void unravel(int64_t k, int rank, const int64_t *dims, int64_t *ix) {
  for (int d = rank - 1; d >= 0; d--) {
    ix[d] = dims[d] ? k % dims[d] : 0;
    k = dims[d] ? k / dims[d] : 0;
  }
}

static int64_t ravel(int rank, const int64_t *dims, const int64_t *ix) {
  int64_t k = 0;
  for (int d = 0; d < rank; d++) k = k * dims[d] + ix[d];
  return k;
}

/* Pad-21 (2-10: attributes pads and value): constant, edge, reflect, wrap; negative pads
 * crop. */
static int op_pad(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  if (!x) return 0;
  int r = x->rank, na = r, ax[IR_MAX_RANK];
  int64_t pads[2 * IR_MAX_RANK], axes[IR_MAX_RANK], begin[IR_MAX_RANK] = {0};
  int np =
      c->n->opset >= 11 ? t_ints(IN(c, 1), pads, 2 * IR_MAX_RANK) : ints_arg(c, "pads", 1000, 0, pads, 2 * IR_MAX_RANK);
  if (c->n->opset >= 18 && IN(c, 3)) {
    if ((na = t_ints(IN(c, 3), axes, IR_MAX_RANK)) < 0) return 0;
    for (int i = 0; i < na; i++)
      if ((ax[i] = norm_axis(axes[i], r)) < 0) return 0;
  } else
    for (int i = 0; i < r; i++) ax[i] = i;
  if (np != 2 * na) return 0;
  for (int i = 0; i < na; i++) begin[ax[i]] = pads[i];
  fold_el val = {0};
  if (c->n->opset >= 11 && IN(c, 2)) {
    if (IN(c, 2)->n != 1) return 0;
    val = IN(c, 2)->d[0];
  } else if (c->n->opset < 11) {
    if (!is_fp(x->dt)) return 0;
    val.f = fround(x->dt, ir_attr_float(c->n, "value", 0.0f));
  }
  const char *mode = ir_attr_str(c->n, "mode", "constant");
  int m = !strcmp(mode, "constant")  ? 0
          : !strcmp(mode, "edge")    ? 1
          : !strcmp(mode, "reflect") ? 2
          : !strcmp(mode, "wrap")    ? 3
                                     : -1;
  if (m < 0 || !t_out(c, o) || o->rank != r || o->dt != x->dt) return fold_tensor_free(o), 0;
  int64_t ix[IR_MAX_RANK];
  for (int64_t k = 0; k < o->n; k++) {
    unravel(k, r, o->dims, ix);
    int inside = 1;
    for (int d = 0; d < r && inside; d++) {
      int64_t s = ix[d] - begin[d], D = x->dims[d];
      if (s >= 0 && s < D) {
        ix[d] = s;
        continue;
      }
      if (m == 0) inside = 0;
      else if (!D || (m == 2 && D < 2)) return fold_tensor_free(o), 0;
      else if (m == 1) ix[d] = s < 0 ? 0 : D - 1;
      else if (m == 3) ix[d] = ((s % D) + D) % D;
      else { /* reflect, period 2(D-1) */ int64_t p = 2 * (D - 1), t = ((s % p) + p) % p;
        ix[d] = t < D ? t : p - t;
      }
    }
    o->d[k] = inside ? x->d[ravel(r, x->dims, ix)] : val;
  }
  return 1;
}

/* An index into a dim of size D, negative counting from the end; -1 if out of range. */
static int64_t index_in(int64_t i, int64_t D) {
  if (i < 0) i += D;
  return i >= 0 && i < D ? i : -1;
}

/* GatherElements-13: out[i] = x[i with axis replaced by indices[i]]. */
static int op_gather_elements(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *ix = IN(c, 1);
  if (!x || !ix || !is_int(ix->dt) || ix->rank != x->rank) return 0;
  int a = norm_axis(ir_attr_int(c->n, "axis", 0), x->rank);
  if (a < 0 || !t_out(c, o) || o->n != ix->n) return fold_tensor_free(o), 0;
  int64_t p[IR_MAX_RANK];
  for (int64_t k = 0; k < ix->n; k++) {
    unravel(k, ix->rank, ix->dims, p);
    if ((p[a] = index_in(ix->d[k].i, x->dims[a])) < 0) return fold_tensor_free(o), 0;
    o->d[k] = x->d[ravel(x->rank, x->dims, p)];
  }
  return 1;
}

/* GatherND-13: indices [..., k] pick slices of data after batch_dims leading dims. */
static int op_gather_nd(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *ix = IN(c, 1);
  if (!x || !ix || ix->dt != IR_INT64 || ix->rank < 1) return 0;
  int bd = (int)ir_attr_int(c->n, "batch_dims", 0), kk = (int)ix->dims[ix->rank - 1];
  if (bd < 0 || bd + kk > x->rank || !t_out(c, o)) return fold_tensor_free(o), 0;
  int64_t slice = 1, batch = 1, per_batch = 1;
  for (int d = bd + kk; d < x->rank; d++) slice *= x->dims[d];
  for (int d = 0; d < bd; d++) batch *= x->dims[d];
  for (int d = bd; d < ix->rank - 1; d++) per_batch *= ix->dims[d];
  int64_t xb = x->n / (batch ? batch : 1), w = 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t q = 0; q < per_batch; q++) {
      const fold_el *t = ix->d + (b * per_batch + q) * kk;
      int64_t off = 0;
      for (int j = 0; j < kk; j++) {
        int64_t i = index_in(t[j].i, x->dims[bd + j]);
        if (i < 0) return fold_tensor_free(o), 0;
        off = off * x->dims[bd + j] + i;
      }
      if (w + slice > o->n) return fold_tensor_free(o), 0;
      memcpy(o->d + w, x->d + b * xb + off * slice, sizeof(fold_el) * (size_t)slice);
      w += slice;
    }
  return w == o->n ? 1 : (fold_tensor_free(o), 0);
}

/* ScatterND-18 and ScatterElements-18 without a reduction: a copy of data with the
 * updates written; an element written twice is declined (the spec leaves it open). */
static int op_scatter(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *ix = IN(c, 1), *up = IN(c, 2);
  if (!x || !ix || !up || !is_int(ix->dt) || up->dt != x->dt) return 0;
  if (strcmp(ir_attr_str(c->n, "reduction", "none"), "none") || !t_out(c, o) || o->n != x->n)
    return fold_tensor_free(o), 0;
  memcpy(o->d, x->d, sizeof(fold_el) * (size_t)x->n);
  char *seen = calloc((size_t)(x->n ? x->n : 1), 1);
  int ok = seen != NULL;
  int64_t p[IR_MAX_RANK];
  if (c->n->op == IR_OP_ScatterElements) {
    int a = norm_axis(ir_attr_int(c->n, "axis", 0), x->rank);
    ok &= a >= 0 && ix->rank == x->rank && up->n == ix->n;
    for (int64_t k = 0; ok && k < ix->n; k++) {
      unravel(k, ix->rank, ix->dims, p);
      ok = (p[a] = index_in(ix->d[k].i, x->dims[a])) >= 0;
      int64_t at = ok ? ravel(x->rank, x->dims, p) : 0;
      ok = ok && !seen[at];
      if (ok) seen[at] = 1, o->d[at] = up->d[k];
    }
  } else {
    int kk = ix->rank ? (int)ix->dims[ix->rank - 1] : -1;
    int64_t slice = 1, nq = kk > 0 ? ix->n / kk : 0;
    ok &= kk >= 1 && kk <= x->rank;
    for (int d = kk; ok && d < x->rank; d++) slice *= x->dims[d];
    ok &= nq * slice == up->n;
    for (int64_t q = 0; ok && q < nq; q++) {
      int64_t off = 0;
      for (int j = 0; ok && j < kk; j++) {
        int64_t i = index_in(ix->d[q * kk + j].i, x->dims[j]);
        ok = i >= 0;
        off = off * x->dims[j] + i;
      }
      for (int64_t e = 0; ok && e < slice; e++) {
        ok = !seen[off * slice + e];
        seen[off * slice + e] = 1;
        o->d[off * slice + e] = up->d[q * slice + e];
      }
    }
  }
  free(seen);
  if (!ok) fold_tensor_free(o);
  return ok;
}

/* Trilu-14: keep the upper (or lower) triangle of the last two dims from diagonal k. */
static int op_trilu(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *kt = IN(c, 1);
  if (!x || x->rank < 2 || (kt && (kt->n != 1 || !is_int(kt->dt))) || !t_out(c, o)) return fold_tensor_free(o), 0;
  int64_t k = kt ? kt->d[0].i : 0, R = x->dims[x->rank - 2], Cn = x->dims[x->rank - 1];
  int upper = (int)ir_attr_int(c->n, "upper", 1);
  for (int64_t e = 0; e < x->n; e++) {
    int64_t j = e % Cn, i = e / Cn % R;
    int keep = upper ? j - i >= k : j - i <= k;
    if (keep) o->d[e] = x->d[e];
    else if (is_fp(x->dt)) o->d[e].f = 0;
    else o->d[e].i = 0;
  }
  return 1;
}

/* ArgMax/ArgMin-13: the first (or, select_last_index, last) extreme along axis; NaN is
 * declined. */
static int op_argext(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0);
  if (!x || x->dt == IR_BOOL) return 0;
  int a = norm_axis(ir_attr_int(c->n, "axis", 0), x->rank), last = (int)ir_attr_int(c->n, "select_last_index", 0);
  if (a < 0 || !x->dims[a] || !t_out(c, o) || o->dt != IR_INT64) return fold_tensor_free(o), 0;
  int64_t D = x->dims[a], inner = 1;
  for (int d = a + 1; d < x->rank; d++) inner *= x->dims[d];
  int mx = c->n->op == IR_OP_ArgMax, fp = is_fp(x->dt);
  for (int64_t q = 0; q < o->n; q++) {
    int64_t base = q / inner * D * inner + q % inner, best = 0;
    for (int64_t i = 0; i < D; i++) {
      fold_el v = x->d[base + i * inner], b = x->d[base + best * inner];
      if (fp && isnan(v.f)) return fold_tensor_free(o), 0;
      double dv = fp ? v.f : (double)v.i, db = fp ? b.f : (double)b.i;
      int better = fp ? (mx ? dv > db : dv < db) : (mx ? v.i > b.i : v.i < b.i);
      int tie = fp ? dv == db : v.i == b.i;
      if (better || (last && tie)) best = i;
    }
    o->d[q].i = best;
  }
  return 1;
}

/* CumSum-14 and CumProd-26 of integers (a float result depends on its order): exclusive and
 * reverse. */
static int op_cumsum(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *at = IN(c, 1);
  if (!x || !is_int(x->dt) || !at || at->n != 1 || !is_int(at->dt)) return 0;
  int a = norm_axis(at->d[0].i, x->rank);
  if (a < 0 || t_new(o, x->dt, x->rank, x->dims)) return 0;
  int excl = (int)ir_attr_int(c->n, "exclusive", 0), rev = (int)ir_attr_int(c->n, "reverse", 0);
  int64_t D = x->dims[a], inner = 1;
  for (int d = a + 1; d < x->rank; d++) inner *= x->dims[d];
  for (int64_t q = 0; D && q < x->n / D; q++) {
    int64_t base = q / inner * D * inner + q % inner;
    uint64_t acc = c->n->op == IR_OP_CumProd;
    for (int64_t t = 0; t < D; t++) {
      int64_t i = rev ? D - 1 - t : t, e = base + i * inner;
      if (excl) o->d[e].i = wrap(x->dt, (int64_t)acc);
      if (c->n->op == IR_OP_CumProd) acc *= (uint64_t)x->d[e].i;
      else acc += (uint64_t)x->d[e].i;
      if (!excl) o->d[e].i = wrap(x->dt, (int64_t)acc);
    }
  }
  return 1;
}

/* EyeLike-9: ones on diagonal k of a 2-D shape, of dtype 'dtype' (default the input's). */
static int op_eye_like(ctx *c, fold_tensor *o) {
  if (!t_out(c, o) || o->rank != 2) return fold_tensor_free(o), 0;
  int64_t k = ir_attr_int(c->n, "k", 0);
  for (int64_t e = 0; e < o->n; e++) {
    int one = e % o->dims[1] - e / o->dims[1] == k;
    if (is_fp(o->dt)) o->d[e].f = one;
    else o->d[e].i = one;
  }
  return 1;
}

/* OneHot-11: values[1] where the index (negative from the end of depth) matches, values[0]
 * elsewhere; the depth axis at 'axis'. */
static int op_one_hot(ctx *c, fold_tensor *o) {
  const fold_tensor *ix = IN(c, 0), *dp = IN(c, 1), *vals = IN(c, 2);
  if (!ix || !dp || !vals || dp->n != 1 || vals->n != 2 || ix->dt == IR_BOOL || !t_out(c, o) || o->dt != vals->dt)
    return fold_tensor_free(o), 0;
  int a = norm_axis(ir_attr_int(c->n, "axis", -1), o->rank);
  int64_t depth = is_fp(dp->dt) ? (int64_t)dp->d[0].f : dp->d[0].i, p[IR_MAX_RANK], q[IR_MAX_RANK];
  if (a < 0 || depth != o->dims[a]) return fold_tensor_free(o), 0;
  for (int64_t e = 0; e < o->n; e++) {
    unravel(e, o->rank, o->dims, p);
    for (int d = 0, j = 0; d < o->rank; d++)
      if (d != a) q[j++] = p[d];
    fold_el iv = ix->d[ravel(ix->rank, ix->dims, q)];
    if (is_fp(ix->dt) && (iv.f != trunc(iv.f) || !isfinite(iv.f))) return fold_tensor_free(o), 0;
    int64_t i = is_fp(ix->dt) ? (int64_t)iv.f : iv.i;
    if (i < 0) i += depth;
    o->d[e] = vals->d[i == p[a]];
  }
  return 1;
}

/* Compress-11: the slices along axis (the flattened input without one) whose condition
 * is true. */
static int op_compress(ctx *c, fold_tensor *o) {
  const fold_tensor *x = IN(c, 0), *cd = IN(c, 1);
  if (!x || !cd || cd->dt != IR_BOOL || !t_out(c, o)) return fold_tensor_free(o), 0;
  const ir_attr *aa = ir_attr_find(c->n, "axis");
  int a = aa ? norm_axis(aa->i, x->rank) : -1;
  if (aa && a < 0) return fold_tensor_free(o), 0;
  int64_t D = a >= 0 ? x->dims[a] : x->n, inner = 1, outer = 1, w = 0;
  for (int d = 0; a >= 0 && d < x->rank; d++)
    if (d != a) *(d < a ? &outer : &inner) *= x->dims[d];
  for (int64_t u = 0; u < outer; u++)
    for (int64_t i = 0; i < D && i < cd->n; i++)
      if (cd->d[i].i) {
        if (w + inner > o->n) return fold_tensor_free(o), 0;
        memcpy(o->d + w, x->d + (u * D + i) * inner, sizeof(fold_el) * (size_t)inner);
        w += inner;
      }
  return w == o->n ? 1 : (fold_tensor_free(o), 0);
}

/* ---- dispatch ---- */

int fold_eval(ir_graph *g, int node, fold_tensor *out) {
  const ir_node *n = &g->nodes[node];
  memset(out, 0, sizeof *out);
  if (n->n_out != 1 || n->out[0] < 0) return 0;
  if (n->op == IR_OP_Shape) return op_shape(&(ctx){g, n, {{0}}, 0}, out);
  if (n->op == IR_OP_Size) return op_size(&(ctx){g, n, {{0}}, 0}, out);
  if (n->n_in > 8) return 0;
  ctx c = {g, n, {{0}}, n->n_in};
  int ok = 1;
  for (int k = 0; k < n->n_in && ok; k++)
    if (n->in[k] >= 0 && t_load(&g->values[n->in[k]], &c.in[k])) ok = 0;
  if (ok) {
    switch (n->op) {
      case IR_OP_Identity: ok = op_identity(&c, out); break;
      case IR_OP_Reshape: ok = op_reshape(&c, out); break;
      case IR_OP_Flatten: ok = op_flatten(&c, out); break;
      case IR_OP_Squeeze: ok = op_squeeze(&c, out); break;
      case IR_OP_Unsqueeze: ok = op_unsqueeze(&c, out); break;
      case IR_OP_Gather: ok = op_gather(&c, out); break;
      case IR_OP_Concat: ok = op_concat(&c, out); break;
      case IR_OP_Slice: ok = op_slice(&c, out); break;
      case IR_OP_Transpose: ok = op_transpose(&c, out); break;
      case IR_OP_Expand: ok = op_expand(&c, out); break;
      case IR_OP_Tile: ok = op_tile(&c, out); break;
      case IR_OP_ConstantOfShape: ok = op_constant_of_shape(&c, out); break;
      case IR_OP_Range: ok = op_range(&c, out); break;
      case IR_OP_Pad: ok = op_pad(&c, out); break;
      case IR_OP_GatherElements: ok = op_gather_elements(&c, out); break;
      case IR_OP_GatherND: ok = op_gather_nd(&c, out); break;
      case IR_OP_ScatterND:
      case IR_OP_ScatterElements: ok = op_scatter(&c, out); break;
      case IR_OP_Trilu: ok = op_trilu(&c, out); break;
      case IR_OP_ArgMax:
      case IR_OP_ArgMin: ok = op_argext(&c, out); break;
      case IR_OP_CumSum:
      case IR_OP_CumProd: ok = op_cumsum(&c, out); break;
      case IR_OP_EyeLike: ok = op_eye_like(&c, out); break;
      case IR_OP_OneHot: ok = op_one_hot(&c, out); break;
      case IR_OP_Compress: ok = op_compress(&c, out); break;
      case IR_OP_ReduceSum:
      case IR_OP_ReduceProd:
      case IR_OP_ReduceMax:
      case IR_OP_ReduceMin: ok = op_reduce(&c, n->op, out); break;
      default: ok = is_eltwise(n->op) && op_eltwise(&c, out); break;
    }
  }
  for (int k = 0; k < c.n_in; k++) fold_tensor_free(&c.in[k]);
  if (!ok) fold_tensor_free(out);
  return ok;
}
