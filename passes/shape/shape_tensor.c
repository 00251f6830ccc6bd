/* passes/shape/shape_tensor.c - data movement and layout: Flatten, Reshape, Transpose,
 * Squeeze, Unsqueeze, Concat, Split, Slice, Gather, GatherElements, Expand, Tile,
 * DepthToSpace, SpaceToDepth, Trilu, CumSum, CumProd. FLOPs: 0 for pure movement (a view or a
 * copy), one per output element for Trilu, CumSum and CumProd. */
#include <inttypes.h>
#include <string.h>

#include "passes/batch.h"
#include "passes/shape/shape_impl.h"

#define SH_MAX_LIST 64 /* longest axes/shape/split list read from a constant */

static ir_shape shape_of_rank(int r) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = r;
  return s;
}

/* Flatten-21 (axis in [-r, r] since 11, [0, r] before): [prod(d[:axis]), prod(d[axis:])]. */
int sh_Flatten(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  int r = x->shape.rank;
  int64_t axis = ir_attr_int(SH_NODE, "axis", 1);
  if (axis < -(int64_t)r || axis > r || (SH_NODE->opset < 11 && axis < 0))
    SH_FAIL("axis %" PRId64 " is out of range for rank %d (allowed %d to %d)", axis, r, SH_NODE->opset < 11 ? 0 : -r,
            r);
  if (axis < 0) axis += r;
  ir_shape out = shape_of_rank(2);
  out.dims[0] = out.dims[1] = 1;
  for (int i = 0; i < r; i++) out.dims[i >= axis] *= x->shape.dims[i]; /* numel fits: input is checked */
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Reshape's or Expand's 'shape' input (1) replaced by the constant dims[0..n) that one
 * micro-batch needs (passes/batch.h). Adds a value: pointers into g->values move. */
static void micro_shape_input(ir_graph *g, int node, const int64_t *dims, int n) {
  ir_value *sv = sh_in(g, node, 1);
  char *name = ir_sprintf(g->arena, "%s.micro", sv->name ? sv->name : "shape");
  ir_shape ss = shape_of_rank(1);
  ss.dims[0] = n;
  SH_NODE->in[1] = ir_add_const(g, name, IR_INT64, &ss, dims, sizeof(int64_t) * (size_t)n);
}

/* The output shape of Reshape of x to s[0..n) (Reshape-21: 0 copies the input dim, or
 * is a real 0 with allowzero; one -1 is inferred from the element count). 0, or -1 with
 * the reason in err. */
static int reshape_resolve(const ir_value *x, const int64_t *s, int n, int allowzero, ir_shape *out, char *err,
                           size_t errlen) {
  char b[256], c[256];
  *out = shape_of_rank(n);
  int neg = -1, zero = 0;
  int64_t known = 1;
  for (int i = 0; i < n; i++) {
    int64_t v = s[i];
    if (v == -1) {
      if (neg >= 0) return snprintf(err, errlen, "input 'shape' has more than one -1"), -1;
      neg = i;
      continue;
    }
    if (v < -1) return snprintf(err, errlen, "input 'shape' has invalid dim %" PRId64, v), -1;
    if (v == 0 && !allowzero) {
      if (i >= x->shape.rank)
        return snprintf(err, errlen,
                        "input 'shape' has 0 at index %d (copy the input dim) but the input %s has rank %d", i,
                        sh_str(&x->shape, b, sizeof b), x->shape.rank),
               -1;
      v = x->shape.dims[i];
    }
    if (v == 0) zero = 1;
    out->dims[i] = v;
    if (sh_mul(known, v, &known)) return snprintf(err, errlen, "input 'shape': the element count overflows"), -1;
  }
  int64_t numel = ir_shape_numel(&x->shape);
  if (neg >= 0) {
    if (allowzero && zero) return snprintf(err, errlen, "input 'shape' has both 0 and -1 with allowzero=1"), -1;
    if (known == 0 || numel % known)
      return snprintf(err, errlen,
                      "cannot reshape %s (%" PRId64 " elements) to shape with -1 and known dims of product %" PRId64,
                      sh_str(&x->shape, b, sizeof b), numel, known),
             -1;
    out->dims[neg] = numel / known;
  } else if (known != numel) {
    return snprintf(err, errlen, "cannot reshape %s (%" PRId64 " elements) to %s (%" PRId64 " elements)",
                    sh_str(&x->shape, b, sizeof b), numel, sh_str(out, c, sizeof c), known),
           -1;
  }
  return 0;
}

/* Reshape-21 (shape input since 5; allowzero since 14). Compiling for micro-batches, a
 * shape the exporter fixed for the whole batch (PyTorch traces x.size(0) as a number)
 * is rewritten for one micro-batch (passes/batch.h). */
int sh_Reshape(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  int64_t s[SH_MAX_LIST];
  int n;
  char err[512];
  if (sh_const_ints(g, node, 1, "shape", s, SH_MAX_LIST, &n)) return -1;
  if (n > IR_MAX_RANK) SH_FAIL("input 'shape' has %d dims, pipecc supports rank up to %d", n, IR_MAX_RANK);
  int allowzero = SH_NODE->opset >= 14 && ir_attr_int(SH_NODE, "allowzero", 0);
  ir_shape out, micro;
  ir_dtype dt = x->dtype; /* ir_add_const below may move the values */
  int rc = reshape_resolve(x, s, n, allowzero, &out, err, sizeof err);
  int b = pass_batch_reshape(g, node, &micro);
  if (b < 0) return -1;
  if (b > 0 && (rc || !ir_shape_same_dims(&out, &micro))) {
    micro_shape_input(g, node, micro.dims, micro.rank);
    out = micro;
    rc = 0;
  }
  if (rc) SH_FAIL("%s", err);
  return sh_set_out(g, node, 0, dt, &out);
}

/* Transpose-21 (unchanged since 1): perm (default reversed) must be a permutation. */
int sh_Transpose(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  int r = x->shape.rank;
  int64_t perm[IR_MAX_RANK];
  int n = sh_attr_ints(g, node, "perm", perm, IR_MAX_RANK);
  if (n == -2) return -1;
  if (n < 0) {
    n = r;
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  }
  if (n != r) SH_FAIL("attribute 'perm' has %d values, the input has rank %d", n, r);
  ir_shape out = shape_of_rank(r);
  unsigned seen = 0;
  for (int i = 0; i < r; i++) {
    int64_t p = perm[i];
    if (p < 0 || p >= r || (seen & (1u << p))) SH_FAIL("attribute 'perm' is not a permutation of 0..%d", r - 1);
    seen |= 1u << p;
    out.dims[i] = x->shape.dims[p];
  }
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Axes of Squeeze/Unsqueeze: input 1 since opset 13, attribute 'axes' before.
 * *n = -1 when absent. */
static int read_axes(ir_graph *g, int node, int64_t *axes, int *n) {
  ir_node *nd = SH_NODE;
  *n = -1;
  if (nd->opset >= 13) {
    if (nd->n_in > 1 && nd->in[1] >= 0) return sh_const_ints(g, node, 1, "axes", axes, SH_MAX_LIST, n);
    return 0;
  }
  if (nd->n_in > 1 && nd->in[1] >= 0) SH_FAIL("takes 'axes' as an attribute before opset 13, not as an input");
  *n = sh_attr_ints(g, node, "axes", axes, SH_MAX_LIST);
  return *n == -2 ? -1 : 0;
}

/* Squeeze-21 (axes input since 13): drop the given dims (which must be 1), or every
 * dim of size 1 without axes. */
int sh_Squeeze(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  int64_t axes[SH_MAX_LIST];
  int n, ax[SH_MAX_LIST];
  char b[256];
  if (read_axes(g, node, axes, &n)) return -1;
  unsigned mask = 0;
  if (n < 0) {
    for (int i = 0; i < x->shape.rank; i++)
      if (x->shape.dims[i] == 1) mask |= 1u << i;
  } else {
    if (sh_axes(g, node, axes, n, x->shape.rank, "axes", ax)) return -1;
    for (int i = 0; i < n; i++) {
      if (x->shape.dims[ax[i]] != 1)
        SH_FAIL("cannot squeeze axis %d of %s: its size is not 1", ax[i], sh_str(&x->shape, b, sizeof b));
      mask |= 1u << ax[i];
    }
  }
  ir_shape out = shape_of_rank(0);
  for (int i = 0; i < x->shape.rank; i++)
    if (!(mask & (1u << i))) out.dims[out.rank++] = x->shape.dims[i];
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Unsqueeze-21 (axes input since 13): insert 1-dims at the given axes of the output. */
int sh_Unsqueeze(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  int64_t axes[SH_MAX_LIST];
  int n, ax[SH_MAX_LIST];
  if (read_axes(g, node, axes, &n)) return -1;
  if (n < 0) SH_FAIL("needs 'axes' (%s)", SH_NODE->opset >= 13 ? "input 1" : "attribute");
  int r = x->shape.rank + n;
  if (r > IR_MAX_RANK) SH_FAIL("the output would have rank %d, pipecc supports rank up to %d", r, IR_MAX_RANK);
  if (sh_axes(g, node, axes, n, r, "axes", ax)) return -1;
  unsigned mask = 0;
  for (int i = 0; i < n; i++) mask |= 1u << ax[i];
  ir_shape out = shape_of_rank(r);
  for (int i = 0, k = 0; i < r; i++) out.dims[i] = (mask & (1u << i)) ? 1 : x->shape.dims[k++];
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Concat-13: same rank and type; all dims but 'axis' equal; axis dims add up. */
int sh_Concat(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *a = sh_in(g, node, 0);
  const ir_attr *at = ir_attr_find(n, "axis");
  char b[256], c[256];
  if (!at || at->type != IR_ATTR_INT) SH_FAIL("attribute 'axis' is required");
  int ax;
  if (a->shape.rank == 0) SH_FAIL("cannot concatenate scalars");
  if (sh_axis(g, node, at->i, a->shape.rank, "axis", &ax)) return -1;
  ir_shape out = a->shape;
  for (int k = 1; k < n->n_in; k++) {
    ir_value *v = sh_in(g, node, k);
    if (!v) SH_FAIL("input %d is empty", k);
    char an[32];
    snprintf(an, sizeof an, "input %d", k);
    if (sh_same_dtype(g, node, a, v, "input 0", an)) return -1;
    int ok = v->shape.rank == a->shape.rank;
    for (int i = 0; ok && i < a->shape.rank; i++) ok = i == ax || v->shape.dims[i] == a->shape.dims[i];
    if (!ok)
      SH_FAIL("input %d %s does not match input 0 %s outside axis %d", k, sh_str(&v->shape, b, sizeof b),
              sh_str(&a->shape, c, sizeof c), ax);
    if (sh_add(out.dims[ax], v->shape.dims[ax], &out.dims[ax])) SH_FAIL("the concatenated dim overflows");
  }
  return sh_set_out(g, node, 0, a->dtype, &out);
}

/* Split-18: sizes from input 'split' (since 13) / attribute 'split' (before), else
 * num_outputs (18; the last chunk may be smaller), else equal parts over the outputs. */
int sh_Split(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  int ax;
  char b[256];
  if (x->shape.rank == 0) SH_FAIL("cannot split a scalar");
  if (sh_axis(g, node, ir_attr_int(n, "axis", 0), x->shape.rank, "axis", &ax)) return -1;
  int64_t dim = x->shape.dims[ax], split[SH_MAX_LIST];
  int ns = -1, nout = n->n_out;
  if (nout > SH_MAX_LIST) SH_FAIL("has %d outputs, at most %d supported", nout, SH_MAX_LIST);
  if (n->opset >= 13) {
    if (n->n_in > 1 && n->in[1] >= 0 && sh_const_ints(g, node, 1, "split", split, SH_MAX_LIST, &ns)) return -1;
  } else {
    ns = sh_attr_ints(g, node, "split", split, SH_MAX_LIST);
    if (ns == -2) return -1;
  }
  if (ns >= 0) {
    if (ns != nout) SH_FAIL("'split' has %d values for %d outputs", ns, nout);
    int64_t sum = 0;
    for (int i = 0; i < ns; i++) {
      if (split[i] < 0) SH_FAIL("'split' has negative size %" PRId64, split[i]);
      if (sh_add(sum, split[i], &sum)) SH_FAIL("'split' sizes overflow");
    }
    if (sum != dim)
      SH_FAIL("'split' sizes add up to %" PRId64 ", axis %d of %s has %" PRId64, sum, ax,
              sh_str(&x->shape, b, sizeof b), dim);
  } else {
    int64_t num = n->opset >= 18 ? ir_attr_int(n, "num_outputs", nout) : nout;
    if (num != nout) SH_FAIL("attribute 'num_outputs' is %" PRId64 " but the node has %d outputs", num, nout);
    if (num < 1) SH_FAIL("has no outputs");
    if (n->opset >= 18 && ir_attr_find(n, "num_outputs")) {
      int64_t chunk = (dim + num - 1) / num;
      if (chunk * (num - 1) > dim)
        SH_FAIL("cannot split axis %d of size %" PRId64 " into %" PRId64 " outputs", ax, dim, num);
      for (int i = 0; i < nout; i++) split[i] = i < nout - 1 ? chunk : dim - chunk * (num - 1);
    } else {
      if (dim % num)
        SH_FAIL("axis %d of %s (size %" PRId64 ") does not split evenly into %d outputs", ax,
                sh_str(&x->shape, b, sizeof b), dim, nout);
      for (int i = 0; i < nout; i++) split[i] = dim / num;
    }
  }
  for (int i = 0; i < nout; i++) {
    ir_shape o = x->shape;
    o.dims[ax] = split[i];
    if (sh_set_out(g, node, i, x->dtype, &o)) return -1;
  }
  return 0;
}

/* Slice-13 (starts/ends/axes/steps inputs since 10; attributes in 1-9): numpy-style
 * with negative indices and clamping. */
int sh_Slice(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  int r = x->shape.rank;
  int64_t st[SH_MAX_LIST], en[SH_MAX_LIST], axes[SH_MAX_LIST], steps[SH_MAX_LIST];
  int ns, ne, na = -1, nst = -1;
  if (n->opset >= 10) {
    if (n->n_in < 3 || n->in[1] < 0 || n->in[2] < 0) SH_FAIL("inputs 'starts' and 'ends' are required");
    if (sh_const_ints(g, node, 1, "starts", st, SH_MAX_LIST, &ns) ||
        sh_const_ints(g, node, 2, "ends", en, SH_MAX_LIST, &ne))
      return -1;
    if (n->n_in > 3 && n->in[3] >= 0 && sh_const_ints(g, node, 3, "axes", axes, SH_MAX_LIST, &na)) return -1;
    if (n->n_in > 4 && n->in[4] >= 0 && sh_const_ints(g, node, 4, "steps", steps, SH_MAX_LIST, &nst)) return -1;
  } else {
    ns = sh_attr_ints(g, node, "starts", st, SH_MAX_LIST);
    ne = sh_attr_ints(g, node, "ends", en, SH_MAX_LIST);
    na = sh_attr_ints(g, node, "axes", axes, SH_MAX_LIST);
    if (ns == -2 || ne == -2 || na == -2) return -1;
    if (ns < 0 || ne < 0) SH_FAIL("attributes 'starts' and 'ends' are required");
  }
  if (ns != ne) SH_FAIL("'starts' has %d values, 'ends' %d", ns, ne);
  if (na >= 0 && na != ns) SH_FAIL("'axes' has %d values, 'starts' %d", na, ns);
  if (nst >= 0 && nst != ns) SH_FAIL("'steps' has %d values, 'starts' %d", nst, ns);
  if (na < 0) {
    if (ns > r) SH_FAIL("'starts' has %d values, the input has rank %d", ns, r);
    for (int i = 0; i < ns; i++) axes[i] = i;
  }
  int ax[SH_MAX_LIST];
  if (sh_axes(g, node, axes, ns, r, "axes", ax)) return -1;
  ir_shape out = x->shape;
  for (int i = 0; i < ns; i++) {
    int64_t step = nst >= 0 ? steps[i] : 1, dim = x->shape.dims[ax[i]], s = st[i], e = en[i];
    if (step == 0) SH_FAIL("'steps' has a 0");
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t cnt;
    if (step > 0) {
      s = s < 0 ? 0 : s > dim ? dim : s;
      e = e < 0 ? 0 : e > dim ? dim : e;
      cnt = e <= s ? 0 : (int64_t)((uint64_t)(e - s - 1) / (uint64_t)step) + 1;
    } else {
      s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
      e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
      cnt = s <= e ? 0 : (int64_t)((uint64_t)(s - e - 1) / (0 - (uint64_t)step)) + 1;
    }
    out.dims[ax[i]] = cnt;
  }
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Gather-13: data[:axis] + indices.shape + data[axis+1:]; constant indices are
 * checked against the axis size. */
int sh_Gather(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0), *idx = sh_in(g, node, 1);
  int ax, r = x->shape.rank;
  if (sh_check_dtype(g, node, idx, SH_INDEX, "input 'indices'")) return -1;
  if (r < 1) SH_FAIL("input 'data' must have rank >= 1");
  if (sh_axis(g, node, ir_attr_int(SH_NODE, "axis", 0), r, "axis", &ax)) return -1;
  int orank = r - 1 + idx->shape.rank;
  if (orank > IR_MAX_RANK) SH_FAIL("the output would have rank %d, pipecc supports rank up to %d", orank, IR_MAX_RANK);
  ir_shape out = shape_of_rank(0);
  for (int i = 0; i < ax; i++) out.dims[out.rank++] = x->shape.dims[i];
  for (int i = 0; i < idx->shape.rank; i++) out.dims[out.rank++] = idx->shape.dims[i];
  for (int i = ax + 1; i < r; i++) out.dims[out.rank++] = x->shape.dims[i];
  int64_t cnt = ir_shape_numel(&idx->shape), dim = x->shape.dims[ax];
  if (idx->kind == IR_VAL_CONST && cnt <= 4096)
    for (int64_t k = 0; k < cnt; k++) {
      int64_t v;
      if (!ir_const_i64(idx, k, &v) && (v < -dim || v >= dim))
        SH_FAIL("index %" PRId64 " is out of range for axis %d of size %" PRId64, v, ax, dim);
    }
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* GatherElements-13: output has the indices' shape; ranks must match. */
int sh_GatherElements(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0), *idx = sh_in(g, node, 1);
  int ax;
  char b[256], c[256];
  if (sh_check_dtype(g, node, idx, SH_INDEX, "input 'indices'")) return -1;
  if (x->shape.rank < 1 || idx->shape.rank != x->shape.rank)
    SH_FAIL("input 'indices' %s must have the rank of 'data' %s (>= 1)", sh_str(&idx->shape, b, sizeof b),
            sh_str(&x->shape, c, sizeof c));
  if (sh_axis(g, node, ir_attr_int(SH_NODE, "axis", 0), x->shape.rank, "axis", &ax)) return -1;
  return sh_set_out(g, node, 0, x->dtype, &idx->shape);
}

/* Expand-13: broadcast the input with the constant 'shape' (numpy rules both ways). */
int sh_Expand(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  int64_t s[SH_MAX_LIST];
  int n;
  if (sh_const_ints(g, node, 1, "shape", s, SH_MAX_LIST, &n)) return -1;
  if (n > IR_MAX_RANK) SH_FAIL("input 'shape' has %d dims, pipecc supports rank up to %d", n, IR_MAX_RANK);
  if (pass_batch_expand(g, node, s, n)) { /* a batch fixed at export, for one micro-batch */
    micro_shape_input(g, node, s, n);
    x = sh_in(g, node, 0); /* the values moved */
  }
  ir_shape sh = shape_of_rank(n), out;
  for (int i = 0; i < n; i++) {
    if (s[i] < 0) SH_FAIL("input 'shape' has negative dim %" PRId64, s[i]);
    sh.dims[i] = s[i];
  }
  if (sh_broadcast(g, node, &x->shape, &sh, &out, "input", "shape")) return -1;
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Tile-13: out[i] = d[i] * repeats[i]. */
int sh_Tile(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  int64_t rep[SH_MAX_LIST];
  int n;
  if (sh_const_ints(g, node, 1, "repeats", rep, SH_MAX_LIST, &n)) return -1;
  if (n != x->shape.rank) SH_FAIL("input 'repeats' has %d values, the input has rank %d", n, x->shape.rank);
  ir_shape out = x->shape;
  for (int i = 0; i < n; i++) {
    if (rep[i] < 0) SH_FAIL("input 'repeats' has negative value %" PRId64, rep[i]);
    if (sh_mul(out.dims[i], rep[i], &out.dims[i])) SH_FAIL("dim %d overflows", i);
  }
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* DepthToSpace-13 / SpaceToDepth-13: [N, C, H, W] <-> [N, C/b^2, H*b, W*b]. */
static int depth_space(ir_graph *g, int node, int to_space) {
  ir_value *x = sh_in(g, node, 0);
  char b[256];
  if (x->shape.rank != 4) SH_FAIL("input must be 4-D [N, C, H, W], it has shape %s", sh_str(&x->shape, b, sizeof b));
  int64_t bs = ir_attr_int(SH_NODE, "blocksize", 0), bb;
  if (bs < 1 || sh_mul(bs, bs, &bb)) SH_FAIL("attribute 'blocksize' is required and must be >= 1");
  ir_shape out = x->shape;
  if (to_space) {
    if (x->shape.dims[1] % bb)
      SH_FAIL("channels %" PRId64 " are not divisible by blocksize^2 = %" PRId64, x->shape.dims[1], bb);
    out.dims[1] /= bb;
    if (sh_mul(out.dims[2], bs, &out.dims[2]) || sh_mul(out.dims[3], bs, &out.dims[3]))
      SH_FAIL("the output dims overflow");
  } else {
    if (x->shape.dims[2] % bs || x->shape.dims[3] % bs)
      SH_FAIL("height and width of %s are not divisible by blocksize %" PRId64, sh_str(&x->shape, b, sizeof b), bs);
    out.dims[2] /= bs;
    out.dims[3] /= bs;
    if (sh_mul(out.dims[1], bb, &out.dims[1])) SH_FAIL("the output channels overflow");
  }
  return sh_set_out(g, node, 0, x->dtype, &out);
}
int sh_DepthToSpace(ir_graph *g, int node) { return depth_space(g, node, 1); }
int sh_SpaceToDepth(ir_graph *g, int node) { return depth_space(g, node, 0); }

static int int_scalar(ir_graph *g, int node, int i, const char *what) {
  ir_value *v = sh_in(g, node, i);
  char b[256];
  if (!v) return 0;
  if (v->shape.rank > 1 || ir_shape_numel(&v->shape) != 1)
    SH_FAIL("input '%s' must be a scalar, it has shape %s", what, sh_str(&v->shape, b, sizeof b));
  return sh_check_dtype(g, node, v, SH_INDEX, what);
}

/* Trilu-14: rank >= 2, optional scalar k; same shape. */
int sh_Trilu(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0);
  char b[256];
  if (x->shape.rank < 2) SH_FAIL("input must have rank >= 2, it has shape %s", sh_str(&x->shape, b, sizeof b));
  if (int_scalar(g, node, 1, "k")) return -1;
  SH_NODE->flops = sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}

/* CumSum-14, CumProd-26: same shape; 'axis' is an int scalar (checked when constant). */
int sh_CumProd(ir_graph *g, int node) { return sh_CumSum(g, node); }

int sh_CumSum(ir_graph *g, int node) {
  ir_value *x = sh_in(g, node, 0), *a = sh_in(g, node, 1);
  if (sh_check_dtype(g, node, x, SH_NUM, "input 'x'") || int_scalar(g, node, 1, "axis")) return -1;
  int64_t v;
  int ax;
  if (a->kind == IR_VAL_CONST && !ir_const_i64(a, 0, &v) && sh_axis(g, node, v, x->shape.rank, "axis", &ax)) return -1;
  SH_NODE->flops = sh_numel(&x->shape);
  return sh_set_out(g, node, 0, x->dtype, &x->shape);
}
