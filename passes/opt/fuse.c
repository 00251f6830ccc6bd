/* passes/opt/fuse.c - Conv + Add + Relu/Clip chains into one Conv, a 1x1 Conv into the
 * depthwise Conv that reads it, Transposes into the batched MatMuls that read them, and
 * layer normalisation written out in element-wise ops into one LayerNormalization (see
 * passes/opt/fuse.h). */
#include "passes/opt/fuse.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The single live consumer of value v, or -1 (none, several, or a graph output). */
static int only_consumer(const ir_graph *g, int v) {
  const ir_value *val = &g->values[v];
  if (val->is_output || val->n_uses != 1) return -1;
  int c = g->use_list[val->use_off];
  return g->nodes[c].dead ? -1 : c;
}

/* A constant float bound of Clip: 0 with *out set, 1 when absent, -1 not constant. */
static int clip_bound(ir_graph *g, const ir_node *n, int slot, const char *attr, float *out) {
  if (n->opset < 11) {
    const ir_attr *a = ir_attr_find(n, attr);
    if (!a) return 1;
    *out = a->f;
    return 0;
  }
  const ir_value *v = ir_in(g, n, slot);
  if (!v) return 1;
  double d;
  if (v->kind != IR_VAL_CONST || v->dtype != IR_FLOAT || ir_const_f64(v, 0, &d)) return -1;
  *out = (float)d;
  return 0;
}

static void add_str_attr(ir_graph *g, int node, const char *name, const char *s) {
  ir_attr *a = ir_node_add_attr(g, node, name, IR_ATTR_STRING);
  a->s = ir_strdup(g->arena, s);
  a->slen = strlen(s);
}

/* Records activation act (1 Relu, 2 Clip with bounds lo, hi) on node as attribute
 * act_name (and clip_name): what fused_act reads back. */
static void set_act(ir_graph *g, int node, const char *act_name, const char *clip_name, int act, float lo, float hi) {
  if (!act) return;
  add_str_attr(g, node, act_name, act == 1 ? "Relu" : "Clip");
  if (act != 2) return;
  ir_attr *a = ir_node_add_attr(g, node, clip_name, IR_ATTR_FLOATS);
  a->n = 2;
  a->floats = ir_alloc_array(g->arena, 2, sizeof(float));
  a->floats[0] = lo;
  a->floats[1] = hi;
}

/* A fused node's name for plan.json: its own, or Op_index when unnamed. */
static const char *node_label(ir_graph *g, const ir_node *d) {
  return d->name && *d->name ? ir_strdup(g->arena, d->name) : ir_sprintf(g->arena, "%s_%d", d->op_type, d->index);
}

/* Appends names[0..n) to node's pipecc.fused_nodes (plan.json's list of the nodes a
 * fused node absorbed), creating the attribute when the node has none. */
static void fused_nodes_append(ir_graph *g, int node, const char *const *names, int n) {
  ir_attr *na = (ir_attr *)ir_attr_find(&g->nodes[node], "pipecc.fused_nodes");
  int n0 = na ? na->n : 0;
  const char **all = ir_alloc_array(g->arena, (size_t)(n0 + n), sizeof(char *));
  for (int k = 0; k < n0; k++) all[k] = na->strings[k];
  for (int k = 0; k < n; k++) all[n0 + k] = names[k];
  if (!na) na = ir_node_add_attr(g, node, "pipecc.fused_nodes", IR_ATTR_STRINGS);
  na->strings = all;
  na->n = n0 + n;
}

/* The activation named by attribute act_name (bounds in clip_name): 0, 1 Relu, 2 Clip. */
static int fused_act(const ir_node *n, const char *act_name, const char *clip_name, float *lo, float *hi) {
  const char *act = ir_attr_str(n, act_name, "");
  *lo = -INFINITY;
  *hi = INFINITY;
  if (!strcmp(act, "Relu")) {
    *lo = 0.0f;
    return 1;
  }
  if (!strcmp(act, "Clip")) {
    const ir_attr *a = ir_attr_find(n, clip_name);
    if (a && a->type == IR_ATTR_FLOATS && a->n == 2) *lo = a->floats[0], *hi = a->floats[1];
    return 2;
  }
  return 0;
}

int pass_fused_act(const ir_node *n, float *lo, float *hi) { return fused_act(n, "pipecc.act", "pipecc.clip", lo, hi); }

int pass_fused_expand_act(const ir_node *n, float *lo, float *hi) {
  return fused_act(n, "pipecc.expand_act", "pipecc.expand_clip", lo, hi);
}

int pass_fuse_conv(ir_graph *g) {
  ir_rebuild_uses(g);
  int fused = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *cv = &g->nodes[i];
    if (cv->dead || cv->op != IR_OP_Conv || cv->n_in > 3 || cv->n_out != 1 || cv->out[0] < 0) continue;
    if (ir_attr_find(cv, "pipecc.act")) continue;
    const ir_value *x = ir_in(g, cv, 0), *y = ir_out(g, cv, 0);
    if (!x || !y || y->dtype != IR_FLOAT || x->shape.rank < 3 || x->shape.rank > 4) continue;
    int cur = cv->out[0], add = -1, act = -1, res = -1;
    float lo = -INFINITY, hi = INFINITY;
    int c = only_consumer(g, cur);
    if (c >= 0 && g->nodes[c].op == IR_OP_Add && g->nodes[c].n_in == 2 && g->nodes[c].n_out == 1) {
      const ir_node *an = &g->nodes[c];
      int other = an->in[0] == cur ? an->in[1] : an->in[0];
      const ir_value *ov = other >= 0 ? &g->values[other] : NULL;
      if (ov && other != cur && ov->dtype == IR_FLOAT && ir_shape_same_dims(&ov->shape, &y->shape) && an->out[0] >= 0 &&
          ir_shape_same_dims(&g->values[an->out[0]].shape, &y->shape)) {
        add = c;
        res = other;
        cur = an->out[0];
        c = only_consumer(g, cur);
      }
    }
    if (c >= 0 && g->nodes[c].n_out == 1 && g->nodes[c].out[0] >= 0 &&
        g->values[g->nodes[c].out[0]].dtype == IR_FLOAT) {
      const ir_node *an = &g->nodes[c];
      if (an->op == IR_OP_Relu && an->n_in == 1) {
        act = c;
        lo = 0.0f;
      } else if (an->op == IR_OP_Clip && an->in[0] == cur) {
        float l = -INFINITY, h = INFINITY;
        int rl = clip_bound(g, an, 1, "min", &l), rh = clip_bound(g, an, 2, "max", &h);
        if (rl >= 0 && rh >= 0 && l <= h) {
          act = c;
          lo = l;
          hi = h;
        }
      }
      if (act >= 0) cur = g->nodes[act].out[0];
    }
    if (add < 0 && act < 0) continue;
    /* rewrite: x, W, B, residual -> the chain's last value */
    char desc[512] = "";
    size_t dl = 0;
    int parts[2] = {add, act};
    /* the absorbed nodes' names (Op_index when unnamed), listed in plan.json */
    ir_attr *names = ir_node_add_attr(g, i, "pipecc.fused_nodes", IR_ATTR_STRINGS);
    names->strings = ir_alloc_array(g->arena, 2, sizeof(char *));
    for (int k = 0; k < 2; k++) {
      if (parts[k] < 0) continue;
      ir_node *d = &g->nodes[parts[k]];
      dl += (size_t)snprintf(desc + dl, dl < sizeof desc ? sizeof desc - dl : 0, "%s%s '%.200s'", dl ? ", " : "",
                             ir_op_name(d->op), d->name);
      names->strings[names->n++] = node_label(g, d);
      cv->flops += d->flops;
      d->dead = 1;
    }
    int *in = ir_alloc_array(g->arena, 4, sizeof(int));
    for (int k = 0; k < 4; k++) in[k] = k < cv->n_in ? cv->in[k] : -1;
    in[3] = res;
    cv->in = in;
    cv->n_in = res >= 0 ? 4 : (cv->n_in > 3 ? 3 : cv->n_in);
    cv->out[0] = cur;
    g->values[cur].producer = i;
    if (act >= 0) set_act(g, i, "pipecc.act", "pipecc.clip", g->nodes[act].op == IR_OP_Relu ? 1 : 2, lo, hi);
    add_str_attr(g, i, "pipecc.fused", desc);
    fused++;
  }
  if (!fused) return 0;
  /* a residual produced after the Conv in file order: sort again */
  if (ir_toposort(g)) return -1;
  ir_compact(g);
  return fused;
}

/* ---- expansion 1x1 Conv into the depthwise Conv that reads it ----------------------- */

/* An attribute INTS whose every element equals v (absent counts as equal). */
static int ints_all(const ir_node *n, const char *name, int64_t v) {
  const ir_attr *a = ir_attr_find(n, name);
  if (!a) return 1;
  if (a->type != IR_ATTR_INTS) return 0;
  for (int k = 0; k < a->n; k++)
    if (a->ints[k] != v) return 0;
  return 1;
}

/* A 2-D float Conv with 2 or 3 inputs (no fused residual) and its output used. */
static int plain_conv2d(ir_graph *g, const ir_node *n) {
  if (n->dead || n->op != IR_OP_Conv || n->n_in < 2 || n->n_in > 3 || n->n_out != 1 || n->out[0] < 0) return 0;
  const ir_value *x = ir_in(g, n, 0), *w = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  return x && w && y && x->dtype == IR_FLOAT && y->dtype == IR_FLOAT && x->shape.rank == 4 && w->shape.rank == 4 &&
         y->shape.rank == 4 && !ir_attr_find(n, "pipecc.winograd") && !ir_attr_find(n, "pipecc.expand");
}

int pass_fuse_expand_dw(ir_graph *g, int64_t min_positions) {
  ir_rebuild_uses(g);
  int fused = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *dw = &g->nodes[i];
    if (!plain_conv2d(g, dw) || dw->in[0] < 0) continue;
    const ir_value *dx = ir_in(g, dw, 0), *dwt = ir_in(g, dw, 1), *dy = ir_out(g, dw, 0);
    int64_t C = dx->shape.dims[1];
    if (ir_attr_int(dw, "group", 1) != C || dy->shape.dims[1] != C || dwt->shape.dims[0] != C ||
        dwt->shape.dims[1] != 1 || dwt->shape.dims[2] * dwt->shape.dims[3] > PASS_DW_MAX_TAPS)
      continue;
    int a = dx->producer;
    if (a < 0 || only_consumer(g, dw->in[0]) != i) continue;
    ir_node *ex = &g->nodes[a];
    if (!plain_conv2d(g, ex) || ex->in[0] < 0) continue;
    const ir_value *ew = ir_in(g, ex, 1), *exx = ir_in(g, ex, 0);
    if (ir_attr_int(ex, "group", 1) != 1 || ew->shape.dims[0] != C || ew->shape.dims[2] != 1 ||
        ew->shape.dims[3] != 1 || !ints_all(ex, "strides", 1) || !ints_all(ex, "pads", 0) ||
        !strncmp(ir_attr_str(ex, "auto_pad", "NOTSET"), "SAME_", 5) || exx->shape.dims[0] != dx->shape.dims[0] ||
        exx->shape.dims[2] != dx->shape.dims[2] || exx->shape.dims[3] != dx->shape.dims[3])
      continue;
    /* small maps stay in cache anyway, and their 1x1 Convs run batched over images */
    if (dx->shape.dims[2] * dx->shape.dims[3] < min_positions) continue;
    /* dw inputs become: x of the 1x1, W, B, (no residual), W of the 1x1, B of the 1x1 */
    int *in = ir_alloc_array(g->arena, 6, sizeof(int));
    in[0] = ex->in[0];
    in[1] = dw->in[1];
    in[2] = dw->n_in > 2 ? dw->in[2] : -1;
    in[3] = -1;
    in[4] = ex->in[1];
    in[5] = ex->n_in > 2 ? ex->in[2] : -1;
    dw->in = in;
    dw->n_in = in[5] >= 0 ? 6 : 5;
    float lo, hi;
    int act = pass_fused_act(ex, &lo, &hi);
    set_act(g, i, "pipecc.expand_act", "pipecc.expand_clip", act, lo, hi);
    /* the comment: the 1x1 Conv and what was fused into it */
    char desc[800];
    const char *ef = ir_attr_str(ex, "pipecc.fused", NULL);
    snprintf(desc, sizeof desc, "Conv '%.200s'%s%.500s%s", ex->name, ef ? " (with " : "", ef ? ef : "", ef ? ")" : "");
    add_str_attr(g, i, "pipecc.expand", desc);
    /* plan.json lists every absorbed node: the dw's own, the 1x1, the 1x1's */
    const ir_attr *ef2 = ir_attr_find(ex, "pipecc.fused_nodes");
    const char *exl = node_label(g, ex);
    fused_nodes_append(g, i, &exl, 1);
    if (ef2) fused_nodes_append(g, i, (const char *const *)ef2->strings, ef2->n);
    dw->flops += g->nodes[a].flops;
    g->nodes[a].dead = 1;
    fused++;
  }
  if (!fused) return 0;
  ir_rebuild_uses(g);
  ir_compact(g);
  return fused;
}

/* ---- Transpose into a batched MatMul -------------------------------------------------- */

/* The perm of Transpose node t (default: reversed) into perm; its rank (2 or more), or -1. */
static int transpose_perm(ir_graph *g, const ir_node *t, int64_t *perm) {
  const ir_value *x = ir_in(g, t, 0);
  return x && x->shape.rank >= 2 ? ir_transpose_perm(t, x->shape.rank, perm) : -1;
}

/* Whether the last two dims of x read through perm have a unit stride (or size 1): the
 * matrix BLAS can take in place, transposed or not. */
static int perm_blas_ok(const ir_value *x, const int64_t *perm, int r) {
  int64_t dims[IR_MAX_RANK], s[IR_MAX_RANK];
  ir_permuted_view(&x->shape, perm, dims, s);
  return dims[r - 1] == 1 || s[r - 1] == 1 || dims[r - 2] == 1 || s[r - 2] == 1;
}

int pass_fuse_matmul_transpose(ir_graph *g) {
  ir_rebuild_uses(g);
  int fused = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *mm = &g->nodes[i];
    if (mm->dead || mm->op != IR_OP_MatMul || mm->n_in != 2 || mm->n_out != 1 || mm->out[0] < 0) continue;
    const ir_value *y = ir_out(g, mm, 0), *b = ir_in(g, mm, 1);
    if (!y || !b || (y->dtype != IR_FLOAT && y->dtype != IR_DOUBLE)) continue;
    if (ir_attr_find(mm, "pipecc.perm_a") || ir_attr_find(mm, "pipecc.perm_b")) continue;
    /* only where the MatMul runs one GEMM per matrix anyway: B has a batch of matrices
     * (with one B matrix, A's contiguous rows make one tall GEMM, which a folded
     * Transpose would break up) */
    int64_t nbb = 1;
    for (int d = 0; d + 2 < b->shape.rank; d++) nbb *= b->shape.dims[d];
    if (b->shape.rank < 3 || nbb < 2) continue;
    for (int k = 0; k < 2; k++) {
      int v = mm->in[k];
      int t = v >= 0 ? g->values[v].producer : -1;
      if (t < 0 || only_consumer(g, v) != i) continue;
      ir_node *tn = &g->nodes[t];
      if (tn->dead || tn->op != IR_OP_Transpose || tn->n_in != 1 || tn->in[0] < 0) continue;
      const ir_value *x = ir_in(g, tn, 0);
      int64_t perm[IR_MAX_RANK];
      int r = transpose_perm(g, tn, perm);
      if (r < 2 || x->dtype != y->dtype || !perm_blas_ok(x, perm, r)) continue;
      ir_attr *pa = ir_node_add_attr(g, i, k ? "pipecc.perm_b" : "pipecc.perm_a", IR_ATTR_INTS);
      pa->n = r;
      pa->ints = ir_alloc_array(g->arena, (size_t)r, sizeof(int64_t));
      for (int d = 0; d < r; d++) pa->ints[d] = perm[d];
      mm->in[k] = tn->in[0];
      /* the comment and plan.json's list of absorbed nodes */
      char desc[600];
      const char *old = ir_attr_str(mm, "pipecc.fused", NULL);
      snprintf(desc, sizeof desc, "%.300s%sTranspose '%.200s' (read in place)", old ? old : "", old ? ", " : "",
               tn->name);
      ir_attr *da = (ir_attr *)ir_attr_find(mm, "pipecc.fused");
      if (!da) da = ir_node_add_attr(g, i, "pipecc.fused", IR_ATTR_STRING);
      da->s = ir_strdup(g->arena, desc);
      da->slen = strlen(desc);
      const char *tl = node_label(g, tn);
      fused_nodes_append(g, i, &tl, 1);
      mm->flops += tn->flops;
      tn->dead = 1;
      fused++;
    }
  }
  if (!fused) return 0;
  ir_rebuild_uses(g);
  ir_compact(g);
  return fused;
}

/* ---- layer normalisation written out ---------------------------------------------------- */

/* The first reduced axis of ReduceMean node n when it reduces exactly the trailing axes
 * [ax, rank) of its input with keepdims 1; -1 otherwise. */
static int trailing_mean_axis(ir_graph *g, const ir_node *n) {
  if (n->dead || n->op != IR_OP_ReduceMean || n->n_out != 1 || n->out[0] < 0) return -1;
  const ir_value *x = ir_in(g, n, 0);
  if (!x || ir_attr_int(n, "keepdims", 1) != 1) return -1;
  int r = x->shape.rank, red[IR_MAX_RANK] = {0}, na = 0;
  if (r < 1) return -1;
  int64_t axes[IR_MAX_RANK];
  na = ir_reduce_axes(g, n, axes, IR_MAX_RANK);
  if (na <= 0) return -1; /* all axes, or none with noop_with_empty_axes: not this pattern */
  for (int i = 0; i < na; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    if (a < 0 || a >= r || red[a]) return -1;
    red[a] = 1;
  }
  int ax = r - na;
  for (int d = ax; d < r; d++)
    if (!red[d]) return -1;
  return ax;
}

/* A float constant with one element, into *v. */
static int const_scalar(const ir_graph *g, int v, double *out) {
  if (v < 0) return -1;
  const ir_value *c = &g->values[v];
  int64_t ne = 1;
  for (int d = 0; d < c->shape.rank; d++) ne *= c->shape.dims[d];
  if (c->kind != IR_VAL_CONST || ne != 1 || (c->dtype != IR_FLOAT && c->dtype != IR_DOUBLE)) return -1;
  return ir_const_f64(c, 0, out);
}

/* Binary node b reads value v on one side: the other input, or -1. */
static int other_input(const ir_node *b, int v) {
  if (b->n_in != 2) return -1;
  if (b->in[0] == v) return b->in[1];
  if (b->in[1] == v) return b->in[0];
  return -1;
}

/* A Scale or B of LayerNormalization over x's axes [ax, rank): a float value with one
 * element or with the normalised dims (leading 1s allowed), so that the Mul or Add
 * broadcasts it over the rows only. */
static int norm_param_ok(const ir_value *x, int ax, const ir_value *p) {
  if (p->dtype != x->dtype) return 0;
  int64_t ne = 1;
  for (int d = 0; d < p->shape.rank; d++) ne *= p->shape.dims[d];
  if (ne == 1 && p->shape.rank <= x->shape.rank) return 1;
  int nn = x->shape.rank - ax;
  if (p->shape.rank > x->shape.rank) return 0;
  for (int d = 0; d < p->shape.rank; d++) {
    int from_end = p->shape.rank - d; /* 1 for the last dim */
    int64_t want = from_end <= nn ? x->shape.dims[x->shape.rank - from_end] : 1;
    if (p->shape.dims[d] != want) return 0;
  }
  return 1;
}

int pass_fuse_layernorm(ir_graph *g) {
  ir_rebuild_uses(g);
  int fused = 0, n0 = g->n_nodes;
  for (int i = 0; i < n0; i++) {
    ir_node *m1 = &g->nodes[i];
    int ax = trailing_mean_axis(g, m1);
    if (ax < 0 || m1->in[0] < 0) continue;
    int x = m1->in[0];
    const ir_value *xv = &g->values[x];
    if (xv->dtype != IR_FLOAT) continue;
    /* d = x - mean */
    int sub = only_consumer(g, m1->out[0]);
    if (sub < 0 || g->nodes[sub].op != IR_OP_Sub || g->nodes[sub].n_in != 2 || g->nodes[sub].in[0] != x ||
        g->nodes[sub].in[1] != m1->out[0] || g->nodes[sub].out[0] < 0)
      continue;
    int d = g->nodes[sub].out[0];
    if (!ir_shape_same_dims(&g->values[d].shape, &xv->shape) || g->values[d].is_output) continue;
    /* d's readers: the square (Pow(d, 2) or Mul(d, d)) and the Div, nothing else */
    int sq = -1, div = -1, bad = 0;
    const ir_value *dv = &g->values[d];
    for (int u = 0; u < dv->n_uses; u++) {
      int c = g->use_list[dv->use_off + u];
      const ir_node *cn = &g->nodes[c];
      double two;
      if (cn->dead) continue;
      if (c == sq || c == div) continue;
      if (cn->op == IR_OP_Pow && cn->n_in == 2 && cn->in[0] == d && !const_scalar(g, cn->in[1], &two) && two == 2.0 &&
          sq < 0)
        sq = c;
      else if (cn->op == IR_OP_Mul && cn->n_in == 2 && cn->in[0] == d && cn->in[1] == d && sq < 0) sq = c;
      else if (cn->op == IR_OP_Div && cn->n_in == 2 && cn->in[0] == d && cn->in[1] != d && div < 0) div = c;
      else bad = 1;
    }
    if (bad || sq < 0 || div < 0 || g->nodes[sq].out[0] < 0 || g->nodes[div].out[0] < 0) continue;
    /* var = mean(d^2), + eps, sqrt, d / that */
    int m2 = only_consumer(g, g->nodes[sq].out[0]);
    if (m2 < 0 || trailing_mean_axis(g, &g->nodes[m2]) != ax) continue;
    int add_eps = only_consumer(g, g->nodes[m2].out[0]);
    double eps;
    if (add_eps < 0 || g->nodes[add_eps].op != IR_OP_Add || g->nodes[add_eps].out[0] < 0 ||
        const_scalar(g, other_input(&g->nodes[add_eps], g->nodes[m2].out[0]), &eps) || !(eps >= 0))
      continue;
    int sqr = only_consumer(g, g->nodes[add_eps].out[0]);
    if (sqr < 0 || g->nodes[sqr].op != IR_OP_Sqrt || g->nodes[sqr].out[0] < 0) continue;
    if (only_consumer(g, g->nodes[sqr].out[0]) != div || g->nodes[div].in[1] != g->nodes[sqr].out[0]) continue;
    int nv = g->nodes[div].out[0];
    if (!ir_shape_same_dims(&g->values[nv].shape, &xv->shape)) continue;
    /* * gamma (required: LayerNormalization has a Scale), + beta (optional) */
    int mul = only_consumer(g, nv);
    if (mul < 0 || g->nodes[mul].op != IR_OP_Mul || g->nodes[mul].out[0] < 0) continue;
    int gamma = other_input(&g->nodes[mul], nv);
    if (gamma < 0 || gamma == nv || !norm_param_ok(xv, ax, &g->values[gamma]) ||
        !ir_shape_same_dims(&g->values[g->nodes[mul].out[0]].shape, &xv->shape))
      continue;
    int last = mul, beta = -1;
    int add_b = only_consumer(g, g->nodes[mul].out[0]);
    if (add_b >= 0 && g->nodes[add_b].op == IR_OP_Add && g->nodes[add_b].out[0] >= 0) {
      int b = other_input(&g->nodes[add_b], g->nodes[mul].out[0]);
      if (b >= 0 && b != g->nodes[mul].out[0] && norm_param_ok(xv, ax, &g->values[b]) &&
          ir_shape_same_dims(&g->values[g->nodes[add_b].out[0]].shape, &xv->shape)) {
        beta = b;
        last = add_b;
      }
    }
    /* one LayerNormalization, in the place of the chain's last node (its name and
     * index: every node of the model stays accounted for in plan.json), writes its value */
    int chain[8] = {i, sub, sq, m2, add_eps, sqr, div, last == add_b ? mul : -1};
    int y = g->nodes[last].out[0];
    const char *nm = g->nodes[last].name;
    int in[3] = {x, gamma, beta}, index = g->nodes[last].index;
    double flops = g->nodes[last].flops;
    g->nodes[last].dead = 1;
    int ln = ir_add_node(g, IR_OP_LayerNormalization, nm, in, beta >= 0 ? 3 : 2, &y, 1);
    ir_node *lnn = &g->nodes[ln];
    lnn->index = index;
    lnn->flops = flops;
    ir_attr *a = ir_node_add_attr(g, ln, "axis", IR_ATTR_INT);
    a->i = ax;
    a = ir_node_add_attr(g, ln, "epsilon", IR_ATTR_FLOAT);
    a->f = (float)eps;
    lnn->opset = 17;
    ir_attr *names = ir_node_add_attr(g, ln, "pipecc.fused_nodes", IR_ATTR_STRINGS);
    names->strings = ir_alloc_array(g->arena, 8, sizeof(char *));
    char desc[900];
    size_t dl = 0;
    for (int k = 0; k < 8; k++) {
      if (chain[k] < 0) continue;
      ir_node *cn = &g->nodes[chain[k]];
      names->strings[names->n++] = node_label(g, cn);
      dl += (size_t)snprintf(desc + dl, dl < sizeof desc ? sizeof desc - dl : 0, "%s%s '%.80s'", dl ? ", " : "",
                             ir_op_name(cn->op), cn->name);
      lnn->flops += cn->flops;
      cn->dead = 1;
    }
    add_str_attr(g, ln, "pipecc.fused", desc);
    fused++;
  }
  if (!fused) return 0;
  if (ir_toposort(g)) return -1;
  ir_rebuild_uses(g);
  ir_compact(g);
  return fused;
}
