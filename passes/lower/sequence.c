/* passes/lower/sequence.c - ONNX sequences as lists of tensors known at compile time.
 *
 * A pipeline stage is straight-line code over tensors of static shapes, so a sequence
 * is never a run-time object: the fold pass evaluates each sequence op as it reaches it
 * (through control_expand, like If and Loop) and a sequence value becomes the list of
 * the tensor values it holds (IR_VAL_SEQ, ir_value.seq). What reads an element becomes
 * an ordinary node:
 *
 *   SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase: a new list.
 *   SequenceAt: an Identity of the element; SequenceLength: a constant.
 *   ConcatFromSequence: Concat of the elements (Unsqueeze of each first with new_axis).
 *   SplitToSequence: Split (and Squeeze with keepdims 0: no split, or a scalar split of
 *     1 as onnxruntime reads it), its outputs the list.
 *
 * Positions must be constants (after folding): TorchScript's list.append in a loop
 * unrolled by passes/lower/control.c, followed by torch.stack or torch.cat, folds this way.
 * SequenceMap (a body per element) is in passes/lower/control.c; Identity of a sequence, and
 * the sequences that are graph inputs and outputs, are in passes/opt/fold.c.
 *
 * Optionals are lists of none or one value in the same way: an empty one is a value of
 * kind IR_VAL_NONE, one that holds a tensor or a sequence is that value itself.
 *   Optional: its input copied, or without one IR_VAL_NONE; OptionalHasElement: a
 *   constant; OptionalGetElement: a copy of the value (an empty one is an error line).
 * An optional graph input holds its value unless --none names it (passes/bind.c). */
#include <stdlib.h>
#include <string.h>

#include "passes/lower/control_impl.h"

int seq_op_is(ir_op op) {
  switch (op) {
    case IR_OP_SequenceEmpty:
    case IR_OP_SequenceConstruct:
    case IR_OP_SequenceInsert:
    case IR_OP_SequenceAt:
    case IR_OP_SequenceErase:
    case IR_OP_SequenceLength:
    case IR_OP_ConcatFromSequence:
    case IR_OP_SplitToSequence:
    case IR_OP_Optional:
    case IR_OP_OptionalHasElement:
    case IR_OP_OptionalGetElement: return 1;
    default: return 0;
  }
}

/* input k: a sequence (want 1) or a tensor (want 0); the value, or -1 (reported) */
static int input(xp *x, int k, int want) {
  int v = k < x->nd.n_in ? res(x, x->nd.in[k]) : -1;
  if (v < 0) XFAIL("input %d is missing", k);
  if (val(x, v)->kind == IR_VAL_NONE) {
    char nm[96];
    XFAIL("input %d '%s' is an optional without a value", k, ir_printable(val(x, v)->name, 60, nm, sizeof nm));
  }
  if ((val(x, v)->kind == IR_VAL_SEQ) != want) {
    char nm[96];
    XFAIL("input %d '%s' is %s; a %s is expected here", k, ir_printable(val(x, v)->name, 60, nm, sizeof nm),
          want ? "a tensor" : "a sequence", want ? "sequence" : "tensor");
  }
  return v;
}

/* The optional position input k as an index into a list of n (n + 1 places when
 * inserting); dflt when omitted. 0, or -1 (reported). */
static int position(xp *x, int k, int64_t n, int insert, int64_t dflt, int64_t *pos) {
  int v = k < x->nd.n_in ? res(x, x->nd.in[k]) : -1;
  if (v < 0) {
    *pos = dflt;
    return 0;
  }
  const ir_value *p = val(x, v);
  char nm[96];
  ir_printable(p->name, 60, nm, sizeof nm);
  if (p->kind != IR_VAL_CONST || ir_shape_numel(&p->shape) != 1 || ir_const_i64(p, 0, pos))
    XFAIL(
        "position '%s' is not a constant of one integer: pipecc keeps sequences as lists known at compile time, so "
        "positions must follow from constants and static shapes",
        nm);
  int64_t hi = insert ? n : n - 1;
  if (*pos < -n || *pos > hi)
    XFAIL("position %lld is out of range for a sequence of %lld tensors", (long long)*pos, (long long)n);
  if (*pos < 0) *pos += n;
  return 0;
}

/* output 0 becomes the sequence elems[n] of element type dt */
static int set_seq(xp *x, const int *elems, int64_t n, ir_dtype dt) {
  if (x->nd.n_out >= 1 && x->nd.out[0] >= 0) ir_set_seq(x->g, x->nd.out[0], elems, (int)n, dt);
  return 0;
}

/* tensor v may join a sequence of element type dt (IR_UNDEFINED: any) */
static int check_elem(xp *x, int v, ir_dtype dt) {
  const ir_value *t = val(x, v);
  if (dt != IR_UNDEFINED && t->dtype != dt) {
    char nm[96];
    XFAIL("tensor '%s' of type %s joins a sequence of %s", ir_printable(t->name, 60, nm, sizeof nm),
          ir_dtype_name(t->dtype), ir_dtype_name(dt));
  }
  return 0;
}

/* output 0 written as a copy of v */
static int out_copy(xp *x, int v) {
  if (x->nd.n_out < 1 || x->nd.out[0] < 0) return 0;
  return cx_make(x, IR_OP_Identity, &v, 1, x->nd.out[0], NULL, 0) < 0 ? -1 : 0;
}

static int seq_construct(xp *x) {
  int n = x->nd.n_in - x->nd.n_implicit;
  int *e = ir_xmalloc(sizeof(int) * ((size_t)n + 1));
  int rc = 0;
  for (int k = 0; k < n && !rc; k++)
    if ((e[k] = input(x, k, 0)) < 0 || check_elem(x, e[k], val(x, e[0])->dtype)) rc = -1;
  if (!rc) rc = set_seq(x, e, n, val(x, e[0])->dtype);
  free(e);
  return rc;
}

static int seq_insert(xp *x, int erase) {
  int s = input(x, 0, 1), t = erase ? 0 : input(x, 1, 0);
  if (s < 0 || t < 0) return -1;
  const ir_value *S = val(x, s);
  int64_t n = S->seq_n, pos;
  if (erase && !n) XFAIL("erases from an empty sequence");
  if (position(x, erase ? 1 : 2, n, !erase, erase ? n - 1 : n, &pos)) return -1;
  ir_dtype dt = S->dtype;
  if (!erase) {
    /* an empty one takes any type (a SequenceEmpty may keep its default float) */
    if (check_elem(x, t, n ? val(x, S->seq[0])->dtype : IR_UNDEFINED)) return -1;
    dt = val(x, t)->dtype;
  }
  int *e = ir_xmalloc(sizeof(int) * ((size_t)n + 2));
  int m = 0;
  for (int64_t i = 0; i <= n; i++) {
    if (i == pos && !erase) e[m++] = t;
    if (i < n && !(i == pos && erase)) e[m++] = S->seq[i];
  }
  int rc = set_seq(x, e, m, dt);
  free(e);
  return rc;
}

static int seq_at(xp *x) {
  int s = input(x, 0, 1);
  if (s < 0) return -1;
  int64_t pos, n = val(x, s)->seq_n;
  if (position(x, 1, n, 0, 0, &pos)) return -1;
  return out_copy(x, val(x, s)->seq[pos]);
}

static int seq_length(xp *x) {
  int s = input(x, 0, 1);
  if (s < 0) return -1;
  int64_t n = val(x, s)->seq_n;
  return out_copy(x, cx_i64(x, &n, 1, 1));
}

static int concat_from_seq(xp *x) {
  int s = input(x, 0, 1);
  if (s < 0) return -1;
  const ir_attr *ax = ir_attr_find(&x->nd, "axis");
  if (!ax) XFAIL("has no attribute 'axis'");
  int64_t axis = ax->i, new_axis = ir_attr_int(&x->nd, "new_axis", 0), n = val(x, s)->seq_n;
  if (new_axis != 0 && new_axis != 1) XFAIL("new_axis is %lld; 0 or 1 expected", (long long)new_axis);
  if (!n) XFAIL("concatenates an empty sequence, whose result has no shape");
  int *e = ir_xmalloc(sizeof(int) * (size_t)n);
  memcpy(e, val(x, s)->seq, sizeof(int) * (size_t)n);
  int rc = 0;
  if (new_axis) { /* stacked: each element unsqueezed at the new axis, which may be last */
    int r = val(x, e[0])->shape.rank + 1;
    if (axis < -r || axis >= r) {
      free(e);
      XFAIL("axis %lld is out of range for rank %d with new_axis", (long long)axis, r);
    }
    if (axis < 0) axis += r;
    int c = cx_i64(x, &axis, 1, 0);
    for (int64_t i = 0; i < n && !rc; i++)
      if ((e[i] = cx_make(x, IR_OP_Unsqueeze, (int[]){e[i], c}, 2, -1, NULL, 0)) < 0) rc = -1;
  }
  if (!rc && x->nd.n_out >= 1 && x->nd.out[0] >= 0)
    rc = cx_make(x, IR_OP_Concat, e, (int)n, x->nd.out[0], "axis", axis) < 0 ? -1 : 0;
  free(e);
  return rc;
}

static int split_to_seq(xp *x) {
  int t = input(x, 0, 0);
  if (t < 0) return -1;
  const ir_value *T = val(x, t);
  char sh[160];
  if (!ir_shape_static(&T->shape) || T->shape.rank < 1)
    XFAIL("splits a tensor of shape %s; a static shape of rank 1 or more is needed",
          ir_shape_str(&T->shape, sh, sizeof sh));
  int r = T->shape.rank;
  int64_t axis = ir_attr_int(&x->nd, "axis", 0);
  if (axis < -r || axis >= r) XFAIL("axis %lld is out of range for rank %d", (long long)axis, r);
  if (axis < 0) axis += r;
  int64_t D = T->shape.dims[axis], keep = ir_attr_int(&x->nd, "keepdims", 1);
  int sv = x->nd.n_in > 1 ? res(x, x->nd.in[1]) : -1;
  int64_t *len = NULL, n = 0;
  if (sv < 0) { /* pieces of one */
    n = D;
    len = ir_xmalloc(sizeof(int64_t) * ((size_t)n + 1));
    for (int64_t i = 0; i < n; i++) len[i] = 1;
  } else {
    const ir_value *S = val(x, sv);
    char nm[96];
    ir_printable(S->name, 60, nm, sizeof nm);
    int64_t m = ir_shape_numel(&S->shape);
    if (S->kind != IR_VAL_CONST || S->shape.rank > 1 || m < 0)
      XFAIL("split '%s' is not a constant scalar or vector: the number of pieces must be known at compile time", nm);
    int64_t s = 0;
    if (S->shape.rank == 0) ir_const_i64(S, 0, &s);
    /* keepdims applies without split, and (as in onnxruntime, which the PyTorch exporter's
     * torch.unbind relies on) with a scalar split of 1 */
    if (S->shape.rank != 0 || s != 1) keep = 1;
    if (S->shape.rank == 0) { /* pieces of that size, the last one shorter */
      if (s <= 0) XFAIL("split is %lld; a positive size is needed", (long long)s);
      n = (D + s - 1) / s;
      len = ir_xmalloc(sizeof(int64_t) * ((size_t)n + 1));
      for (int64_t i = 0; i < n; i++) len[i] = i < n - 1 || D % s == 0 ? s : D % s;
    } else {
      n = m;
      len = ir_xmalloc(sizeof(int64_t) * ((size_t)n + 1));
      int64_t sum = 0;
      for (int64_t i = 0; i < n; i++) {
        ir_const_i64(S, i, &len[i]);
        if (len[i] < 0) {
          long long bad = (long long)len[i];
          free(len);
          XFAIL("split has a negative length %lld", bad);
        }
        sum += len[i];
      }
      if (sum != D) {
        free(len);
        XFAIL("split lengths add up to %lld; the dim along axis %lld is %lld", (long long)sum, (long long)axis,
              (long long)D);
      }
    }
  }
  if (n < 1) {
    free(len);
    XFAIL("splits a dim of 0 along axis %lld: the sequence would be empty", (long long)axis);
  }
  if (n > 65536) {
    free(len);
    XFAIL("would make a sequence of %lld tensors; pipecc takes up to 65536", (long long)n);
  }
  int *e = ir_xmalloc(sizeof(int) * (size_t)n);
  for (int64_t i = 0; i < n; i++) e[i] = -1;
  int rc = 0;
  if (n == 1) e[0] = t;
  else rc = cx_make_n(x, IR_OP_Split, (int[]){t, cx_i64(x, len, (int)n, 0)}, 2, e, (int)n, "axis", axis);
  if (!rc && !keep) {
    int c = cx_i64(x, &axis, 1, 0);
    for (int64_t i = 0; i < n && !rc; i++)
      if ((e[i] = cx_make(x, IR_OP_Squeeze, (int[]){e[i], c}, 2, -1, NULL, 0)) < 0) rc = -1;
  }
  if (!rc) rc = set_seq(x, e, n, T->dtype);
  free(e);
  free(len);
  return rc;
}

/* Optional (opt 0), OptionalHasElement (1), OptionalGetElement (2) */
static int optional_op(xp *x, int which) {
  int v = x->nd.n_in >= 1 ? res(x, x->nd.in[0]) : -1; /* OptionalHasElement may have none */
  int none = v < 0 || val(x, v)->kind == IR_VAL_NONE;
  if (x->nd.n_out < 1 || x->nd.out[0] < 0) return 0;
  if (which == 1) {
    unsigned char has = !none;
    ir_shape s = {0};
    return out_copy(x, ir_add_const(x->g, cx_tagged(x, "has"), IR_BOOL, &s, &has, 1));
  }
  if (none) {
    if (which == 0) {
      ir_set_none(x->g, x->nd.out[0]);
      return 0;
    }
    char nm[96];
    if (v < 0) XFAIL("has no input");
    XFAIL("input '%s' is an optional without a value", ir_printable(val(x, v)->name, 60, nm, sizeof nm));
  }
  return out_copy(x, v); /* a tensor or a sequence: the value an optional holds is the value */
}

int seq_expand(xp *x) {
  switch (x->nd.op) {
    case IR_OP_SequenceEmpty: {
      int64_t dt = ir_attr_int(&x->nd, "dtype", IR_FLOAT);
      if (dt <= 0 || dt >= IR_DTYPE_COUNT || dt == IR_STRING) XFAIL("dtype %lld is not supported", (long long)dt);
      return set_seq(x, NULL, 0, (ir_dtype)dt);
    }
    case IR_OP_SequenceConstruct: return seq_construct(x);
    case IR_OP_SequenceInsert: return seq_insert(x, 0);
    case IR_OP_SequenceErase: return seq_insert(x, 1);
    case IR_OP_SequenceAt: return seq_at(x);
    case IR_OP_SequenceLength: return seq_length(x);
    case IR_OP_ConcatFromSequence: return concat_from_seq(x);
    case IR_OP_SplitToSequence: return split_to_seq(x);
    case IR_OP_Optional: return optional_op(x, 0);
    case IR_OP_OptionalHasElement: return optional_op(x, 1);
    case IR_OP_OptionalGetElement: return optional_op(x, 2);
    default: XFAIL("is not a sequence op (internal error)");
  }
}
