/* passes/lower/einsum.c - Einsum: its shape rule (sh_Einsum) and its lowering to Transpose,
 * Reshape, Gather, Expand, ReduceSum and MatMul (pass_lower_einsum), so that no target
 * needs an Einsum kernel and autodiff needs no Einsum rule.
 *
 * The equation (ONNX Einsum-12, numpy's): operands' subscripts of letters and at most
 * one "..." each, "->" and the output's; without "->" the output is the ellipsis dims
 * then the letters that occur once, in ASCII order. Ellipsis dims broadcast (aligned
 * right); a letter has one size everywhere.
 *
 * Lowering, per operand: a letter repeated in it takes the diagonal (the two axes last,
 * merged, Gather of every (n+1)-th element); an operand with "..." gets the ellipsis
 * dims it lacks or holds as 1 expanded (one without meets them only in the MatMul); a
 * letter no other operand nor the output has is summed. Then the operands are combined
 * left to right, each pair as one batched MatMul: the letters both have and a later
 * operand or the output needs are the batch, the others both have are contracted, each
 * side's own letters are M and N (merged by Reshape). A last Transpose puts the
 * output's order. */
#include <string.h>

#include "passes/rewrite.h"
#include "passes/pass.h"
#include "passes/shape/shape_impl.h"

#define EQ_MAX_OPS 16
#define EQ_LABELS (52 + IR_MAX_RANK) /* letters a-z, A-Z, then the ellipsis dims */

typedef struct {
  int n_ops;
  int lab[EQ_MAX_OPS][IR_MAX_RANK]; /* per operand axis: its label */
  int rank[EQ_MAX_OPS];
  int has_ell[EQ_MAX_OPS]; /* the operand's subscripts hold "..." */
  int out[IR_MAX_RANK], out_rank;
  int64_t size[EQ_LABELS];
} eq_t;

static int letter(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? 26 + c - 'A' : -1; }

/* Parses n's equation against its inputs' shapes into *e. 0, or -1 after reporting. */
static int parse(ir_graph *g, int node, eq_t *e) {
  const ir_node *n = &g->nodes[node];
  const char *eq = ir_attr_str(n, "equation", NULL);
  char b[96];
  memset(e, 0, sizeof *e);
  if (!eq) {
    ir_error_node(g, node, "needs attribute 'equation'");
    return -1;
  }
  if (n->n_in > EQ_MAX_OPS) {
    ir_error_node(g, node, "has %d operands; pipecc takes at most %d", n->n_in, EQ_MAX_OPS);
    return -1;
  }
  int E = 0; /* ellipsis rank: the largest any operand gives it */
  const char *p = eq;
  int op = 0, seen_arrow = 0, count[52] = {0};
  int tmp[EQ_MAX_OPS][2 * IR_MAX_RANK], ntmp[EQ_MAX_OPS] = {0}, ell[EQ_MAX_OPS];
  for (int i = 0; i < EQ_MAX_OPS; i++) ell[i] = -1;
  int outl[2 * IR_MAX_RANK], nout = 0, out_ell = -1;
  for (;; p++) {
    char c = *p;
    if (c == ' ') continue;
    int *dst = seen_arrow ? outl : tmp[op], *nd = seen_arrow ? &nout : &ntmp[op];
    if (c == ',' || c == '-' || !c) {
      if (!seen_arrow) {
        if (op >= n->n_in) goto bad;
        const ir_value *x = sh_in(g, node, op);
        int letters = ntmp[op] - (ell[op] >= 0);
        int er = x ? x->shape.rank - letters : -1;
        if (!x || er < 0 || (ell[op] < 0 && er != 0)) {
          ir_error_node(g, node, "operand %d has rank %d, but the equation '%s' gives it %d subscripts", op,
                        x ? x->shape.rank : 0, ir_printable(eq, 60, b, sizeof b), letters);
          return -1;
        }
        if (er > E) E = er;
        op++;
      }
      if (!c) break;
      if (c == '-') {
        if (seen_arrow || p[1] != '>') goto bad;
        seen_arrow = 1;
        p++;
      }
      continue;
    }
    if (c == '.') {
      if (p[1] != '.' || p[2] != '.') goto bad;
      int *ep = seen_arrow ? &out_ell : &ell[op];
      if (*ep >= 0) goto bad;
      *ep = *nd;
      dst[(*nd)++] = -1;
      p += 2;
      continue;
    }
    int l = letter(c);
    if (l < 0 || *nd >= 2 * IR_MAX_RANK) goto bad;
    dst[(*nd)++] = l;
    if (!seen_arrow) count[l]++;
  }
  if (op != n->n_in) {
    ir_error_node(g, node, "the equation '%s' names %d operands, the node has %d", ir_printable(eq, 60, b, sizeof b),
                  op, n->n_in);
    return -1;
  }
  e->n_ops = op;
  for (int i = 0; i < EQ_LABELS; i++) e->size[i] = -1;
  /* operands: the ellipsis expanded to its dims (labels 52 + its place among E, right aligned) */
  for (int k = 0; k < op; k++) {
    const ir_value *x = sh_in(g, node, k);
    int r = 0, er = x->shape.rank - (ntmp[k] - (ell[k] >= 0));
    for (int i = 0; i < ntmp[k]; i++) {
      if (tmp[k][i] >= 0) {
        e->lab[k][r++] = tmp[k][i];
        continue;
      }
      for (int j = 0; j < er; j++) e->lab[k][r++] = 52 + E - er + j;
    }
    e->rank[k] = r;
    e->has_ell[k] = ell[k] >= 0;
    for (int i = 0; i < r; i++) {
      int l = e->lab[k][i];
      int64_t d = x->shape.dims[i];
      if (l >= 52) { /* ellipsis dims broadcast */
        if (e->size[l] < 0 || e->size[l] == 1) e->size[l] = d;
        else if (d != 1 && d != e->size[l]) goto mismatch;
      } else if (e->size[l] < 0) {
        e->size[l] = d;
      } else if (e->size[l] != d) {
        goto mismatch;
      }
    }
  }
  if (seen_arrow) {
    for (int i = 0; i < nout; i++) {
      if (outl[i] < 0) {
        for (int j = 0; j < E; j++) e->out[e->out_rank++] = 52 + j;
        continue;
      }
      if (!count[outl[i]]) {
        ir_error_node(g, node, "output subscript '%c' of '%s' is in no operand",
                      outl[i] < 26 ? 'a' + outl[i] : 'A' + outl[i] - 26, ir_printable(eq, 60, b, sizeof b));
        return -1;
      }
      for (int j = 0; j < i; j++)
        if (outl[j] == outl[i]) goto bad;
      e->out[e->out_rank++] = outl[i];
    }
    if (out_ell < 0 && E > 0) { /* numpy: the ellipsis dims must be in an explicit output */
      ir_error_node(g, node, "the equation '%s' drops the ellipsis dims from its output",
                    ir_printable(eq, 60, b, sizeof b));
      return -1;
    }
  } else { /* implicit: the ellipsis dims, then the letters that occur once, ASCII order */
    for (int j = 0; j < E; j++) e->out[e->out_rank++] = 52 + j;
    for (int c = 'A'; c <= 'z'; c++) {
      int l = letter((char)c);
      if (l >= 0 && count[l] == 1) e->out[e->out_rank++] = l;
    }
  }
  if (e->out_rank > IR_MAX_RANK) {
    ir_error_node(g, node, "the output would have rank %d (at most %d)", e->out_rank, IR_MAX_RANK);
    return -1;
  }
  return 0;
bad:
  ir_error_node(g, node, "cannot read the equation '%s'", ir_printable(eq, 60, b, sizeof b));
  return -1;
mismatch:
  ir_error_node(g, node, "the equation '%s' gives one subscript two sizes across its operands",
                ir_printable(eq, 60, b, sizeof b));
  return -1;
}

int sh_Einsum(ir_graph *g, int node) {
  eq_t e;
  if (parse(g, node, &e)) return -1;
  ir_dtype dt = sh_in(g, node, 0)->dtype;
  for (int k = 1; k < e.n_ops; k++)
    if (sh_in(g, node, k)->dtype != dt) {
      ir_error_node(g, node, "operands of different data types");
      return -1;
    }
  if (!(SH_NUM & SH_BIT(dt))) {
    ir_error_node(g, node, "operands of type %s (numbers only)", ir_dtype_name(dt));
    return -1;
  }
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = e.out_rank;
  double macs = 1;
  for (int i = 0; i < e.out_rank; i++) s.dims[i] = e.size[e.out[i]];
  for (int l = 0; l < EQ_LABELS; l++)
    if (e.size[l] > 0) macs *= (double)e.size[l];
  g->nodes[node].flops = 2 * macs; /* every label combination once (before lowering) */
  return sh_set_out(g, node, 0, dt, &s);
}

/* ---- lowering ---------------------------------------------------------------------- */

typedef struct {
  int v;                /* value */
  int lab[IR_MAX_RANK]; /* its axes' labels */
  int r;
} term;

static int find(const term *t, int l) {
  for (int i = 0; i < t->r; i++)
    if (t->lab[i] == l) return i;
  return -1;
}

/* t's axes in the order of labels ls[0..n) (all of t's). */
static void permute(ad_ctx *a, term *t, const int *ls, int n) {
  int64_t perm[IR_MAX_RANK];
  int same = 1;
  for (int i = 0; i < n; i++) {
    perm[i] = find(t, ls[i]);
    same &= perm[i] == i;
  }
  if (!same) t->v = ad_transpose(a, t->v, perm, n);
  memcpy(t->lab, ls, sizeof(int) * (size_t)n);
  t->r = n;
}

/* The diagonal of the first label t holds twice. */
static int diagonal(ad_ctx *a, term *t, const eq_t *e) {
  for (int i = 0; i < t->r; i++)
    for (int j = i + 1; j < t->r; j++) {
      if (t->lab[i] != t->lab[j]) continue;
      int l = t->lab[i], ls[IR_MAX_RANK], n = 0;
      for (int k = 0; k < t->r; k++)
        if (k != i && k != j) ls[n++] = t->lab[k];
      ls[n] = l;
      /* the two axes last: Transpose by positions, as the labels repeat */
      int64_t perm[IR_MAX_RANK];
      int m = 0;
      for (int k = 0; k < t->r; k++)
        if (k != i && k != j) perm[m++] = k;
      perm[m++] = i;
      perm[m++] = j;
      int x = ad_transpose(a, t->v, perm, m);
      ir_shape s = ad_shape(a, x);
      int64_t d = e->size[l];
      s.dims[s.rank - 2] = d * d;
      s.rank--;
      x = ad_reshape(a, x, &s);
      int64_t idx[4096];
      if (d > 4096) return -1;
      for (int64_t q = 0; q < d; q++) idx[q] = q * (d + 1);
      int in[2] = {x, ad_c_i64(a, idx, (int)d)};
      int id = ad_begin(a, IR_OP_Gather, in, 2, 1, NULL);
      ad_attr_i(a, id, "axis", s.rank - 1);
      t->v = ad_end(a, id);
      memcpy(t->lab, ls, sizeof(int) * (size_t)(n + 1));
      t->r = n + 1;
      return 1;
    }
  return 0;
}

/* Does any operand after k, or the output, hold label l? */
static int needed(const eq_t *e, const term *ts, int k, int l) {
  for (int i = 0; i < e->out_rank; i++)
    if (e->out[i] == l) return 1;
  for (int j = k + 1; j < e->n_ops; j++)
    if (find(&ts[j], l) >= 0) return 1;
  return 0;
}

static int64_t prod(const eq_t *e, const int *ls, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= e->size[ls[i]];
  return p;
}

/* x = x (.) y over operand k: one batched MatMul */
static void combine(ad_ctx *a, term *x, term *y, const eq_t *e, const term *ts, int k) {
  int bat[IR_MAX_RANK], con[IR_MAX_RANK], xo[IR_MAX_RANK], yo[IR_MAX_RANK];
  int nb = 0, nc = 0, nx = 0, ny = 0;
  for (int i = 0; i < x->r; i++) {
    int l = x->lab[i];
    if (find(y, l) < 0) xo[nx++] = l;
    else if (needed(e, ts, k, l)) bat[nb++] = l;
    else con[nc++] = l;
  }
  for (int i = 0; i < y->r; i++)
    if (find(x, y->lab[i]) < 0) yo[ny++] = y->lab[i];
  int ls[IR_MAX_RANK], n = 0;
  /* x: [batch, own, contracted] -> [batch, M, K]; y: [batch, contracted, own] -> [batch, K, N] */
  for (int i = 0; i < nb; i++) ls[n++] = bat[i];
  for (int i = 0; i < nx; i++) ls[n++] = xo[i];
  for (int i = 0; i < nc; i++) ls[n++] = con[i];
  permute(a, x, ls, n);
  n = 0;
  for (int i = 0; i < nb; i++) ls[n++] = bat[i];
  for (int i = 0; i < nc; i++) ls[n++] = con[i];
  for (int i = 0; i < ny; i++) ls[n++] = yo[i];
  permute(a, y, ls, n);
  ir_shape sx, sy, so;
  memset(&sx, 0, sizeof sx);
  for (int i = 0; i < nb; i++) sx.dims[i] = e->size[bat[i]];
  sy = sx;
  sx.rank = sy.rank = nb + 2;
  sx.dims[nb] = prod(e, xo, nx);
  sx.dims[nb + 1] = sy.dims[nb] = prod(e, con, nc);
  sy.dims[nb + 1] = prod(e, yo, ny);
  int mx = ad_reshape(a, x->v, &sx), my = ad_reshape(a, y->v, &sy);
  int mm = ad_bin(a, IR_OP_MatMul, mx, my);
  memset(&so, 0, sizeof so);
  n = 0;
  for (int i = 0; i < nb; i++) ls[n++] = bat[i];
  for (int i = 0; i < nx; i++) ls[n++] = xo[i];
  for (int i = 0; i < ny; i++) ls[n++] = yo[i];
  so.rank = n;
  for (int i = 0; i < n; i++) so.dims[i] = e->size[ls[i]];
  x->v = ad_reshape(a, mm, &so);
  memcpy(x->lab, ls, sizeof(int) * (size_t)n);
  x->r = n;
}

static int lower(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  eq_t e;
  if (parse(g, node, &e)) return -1;
  ir_node nd = g->nodes[node];
  term ts[EQ_MAX_OPS];
  memset(ts, 0, sizeof ts);
  for (int k = 0; k < e.n_ops; k++) {
    ts[k].v = nd.in[k];
    ts[k].r = e.rank[k];
    memcpy(ts[k].lab, e.lab[k], sizeof ts[k].lab);
  }
  int E = 0; /* the ellipsis dims */
  for (int l = 52; l < EQ_LABELS; l++) E += e.size[l] >= 0;
  for (int k = 0; k < e.n_ops; k++) {
    term *t = &ts[k];
    int rc;
    while ((rc = diagonal(a, t, &e)) > 0) {
    }
    if (rc < 0) {
      ir_error_node(g, node, "a diagonal longer than 4096");
      return -1;
    }
    /* ellipsis dims: an operand with "..." holds all of them at full size (broadcast);
     * one without takes them as its own labels in the MatMul (not copied per dim) */
    int ell = 0, full = 1;
    for (int i = 0; i < t->r; i++)
      if (t->lab[i] >= 52) ell++, full &= ad_shape(a, t->v).dims[i] == e.size[t->lab[i]];
    if (E && e.has_ell[k] && (ell < E || !full)) {
      int ls[IR_MAX_RANK], n = 0;
      ir_shape s2;
      memset(&s2, 0, sizeof s2);
      /* the ellipsis dims first, then the letters in their order */
      for (int l = 52; l < 52 + E; l++) ls[n++] = l;
      for (int i = 0; i < t->r; i++)
        if (t->lab[i] < 52) ls[n++] = t->lab[i];
      if (n > IR_MAX_RANK) {
        ir_error_node(g, node, "an operand would need rank %d to broadcast", n);
        return -1;
      }
      int keep[IR_MAX_RANK], nk = 0;
      for (int i = 0; i < t->r; i++)
        if (t->lab[i] >= 52) keep[nk++] = t->lab[i];
      for (int i = 0; i < t->r; i++)
        if (t->lab[i] < 52) keep[nk++] = t->lab[i];
      permute(a, t, keep, nk);
      ir_shape s1 = ad_shape(a, t->v);
      /* missing leading ellipsis dims as 1, then expanded */
      ir_shape r1;
      memset(&r1, 0, sizeof r1);
      r1.rank = n;
      for (int i = 0; i < n; i++) {
        int have = i - (E - ell);
        r1.dims[i] = have < 0 ? 1 : s1.dims[have];
        s2.dims[i] = e.size[ls[i]];
      }
      s2.rank = n;
      if (r1.rank != s1.rank) t->v = ad_reshape(a, t->v, &r1);
      t->v = ad_expand(a, t->v, &s2);
      memcpy(t->lab, ls, sizeof(int) * (size_t)n);
      t->r = n;
    }
  }
  /* labels only one operand holds and the output lacks: summed first */
  for (int k = 0; k < e.n_ops; k++) {
    term *t = &ts[k];
    int64_t axes[IR_MAX_RANK];
    int n = 0, keep[IR_MAX_RANK], nk = 0;
    for (int i = 0; i < t->r; i++) {
      int l = t->lab[i], other = 0;
      for (int j = 0; j < e.n_ops; j++)
        if (j != k && find(&ts[j], l) >= 0) other = 1;
      for (int j = 0; j < e.out_rank; j++) other |= e.out[j] == l;
      if (other) keep[nk++] = l;
      else axes[n++] = i;
    }
    if (n) {
      t->v = ad_reduce(a, IR_OP_ReduceSum, t->v, axes, n, 0);
      memcpy(t->lab, keep, sizeof(int) * (size_t)nk);
      t->r = nk;
    }
  }
  term acc = ts[0];
  /* every label of acc stays needed: each is in the output or a later operand, since a
   * label of one operand only was summed above and a contracted one is needed no more */
  for (int k = 1; k < e.n_ops; k++) combine(a, &acc, &ts[k], &e, ts, k);
  permute(a, &acc, e.out, e.out_rank);
  if (a->err) return -1;
  int y = acc.v;
  for (int k = 0; k < e.n_ops; k++) /* the output is a new value, never an operand renamed */
    if (y == nd.in[k]) y = ad_un(a, IR_OP_Identity, y);
  ir_take_output(a->g, y, nd.out[0]);
  return a->err ? -1 : 0;
}

static int is_einsum(const ir_node *n) { return n->op == IR_OP_Einsum; }

int pass_lower_einsum(ir_graph *g, const pass_opts *o) {
  (void)o;
  return ad_lower_nodes(g, "einsum", is_einsum, lower) < 0 ? -1 : 0;
}
