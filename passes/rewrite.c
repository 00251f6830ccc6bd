/* passes/rewrite.c - making nodes for the passes that rewrite the graph (see rewrite.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/diag.h"
#include "passes/pass.h"
#include "passes/rewrite.h"
#include "passes/shape/shape_impl.h"

static const char *node_name(ad_ctx *a) {
  int k = a->cnt++;
  return k ? ir_sprintf(a->g->arena, "%s/%s_%d", a->base, a->tag, k)
           : ir_sprintf(a->g->arena, "%s/%s", a->base, a->tag);
}

int ad_begin(ad_ctx *a, ir_op op, const int *in, int n_in, int n_out, const char *out_name) {
  ir_graph *g = a->g;
  const char *nm = node_name(a);
  int outs[4];
  IR_ASSERT(n_out >= 1 && n_out <= 4);
  for (int k = 0; k < n_out; k++)
    outs[k] =
        ir_add_value(g, k == 0 && out_name ? out_name : ir_sprintf(g->arena, "%s:%d", nm, k), IR_VAL_ACT, IR_UNDEFINED);
  int id = ir_add_node(g, op, nm, in, n_in, outs, n_out);
  g->nodes[id].opset = AD_OPSET;
  g->nodes[id].stage = a->stage;
  g->nodes[id].phase = a->phase;
  return id;
}

static ir_attr *add_attr(ad_ctx *a, int node, const char *name, ir_attr_type t) {
  return ir_node_add_attr(a->g, node, name, t);
}
void ad_attr_i(ad_ctx *a, int node, const char *name, int64_t v) { add_attr(a, node, name, IR_ATTR_INT)->i = v; }
void ad_attr_f(ad_ctx *a, int node, const char *name, double v) {
  add_attr(a, node, name, IR_ATTR_FLOAT)->f = (float)v;
}
void ad_attr_s(ad_ctx *a, int node, const char *name, const char *v) {
  ir_attr *at = add_attr(a, node, name, IR_ATTR_STRING);
  at->s = ir_strdup(a->g->arena, v);
  at->slen = strlen(v);
}
void ad_attr_is(ad_ctx *a, int node, const char *name, const int64_t *v, int n) {
  ir_attr *at = add_attr(a, node, name, IR_ATTR_INTS);
  at->n = n;
  at->ints = ir_alloc_array(a->g->arena, (size_t)n, sizeof(int64_t));
  if (n) memcpy(at->ints, v, sizeof(int64_t) * (size_t)n);
}

int ad_end(ad_ctx *a, int node) {
  if (pass_shape_node(a->g, node)) a->err = 1;
  return a->g->nodes[node].out[0];
}

int ad_lower_nodes(ir_graph *g, const char *tag, int (*want)(const ir_node *n), int (*lower)(ad_ctx *a, int node)) {
  int n = g->n_nodes, done = 0;
  ad_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.g = g;
  ctx.tag = tag;
  ctx.stage = -1;
  ctx.phase = IR_PHASE_FWD;
  for (int i = 0; i < n; i++) {
    if (g->nodes[i].dead || !want(&g->nodes[i])) continue;
    ctx.base = g->nodes[i].name && g->nodes[i].name[0] ? g->nodes[i].name : ir_op_name(g->nodes[i].op);
    ctx.stage = g->nodes[i].stage;
    ctx.phase = g->nodes[i].phase;
    if (lower(&ctx, i) || ctx.err) return -1;
    g->nodes[i].dead = 1;
    done++;
  }
  if (!done) return 0;
  if (ir_toposort(g)) return -1;
  ir_compact(g);
  ir_rebuild_uses(g);
  return g->n_errors ? -1 : done;
}

int ad_op(ad_ctx *a, ir_op op, const int *in, int n_in) { return ad_end(a, ad_begin(a, op, in, n_in, 1, NULL)); }
int ad_un(ad_ctx *a, ir_op op, int x) { return ad_op(a, op, &x, 1); }
int ad_bin(ad_ctx *a, ir_op op, int x, int y) {
  int in[2] = {x, y};
  return ad_op(a, op, in, 2);
}

int ad_cast(ad_ctx *a, int x, ir_dtype to) {
  if (a->g->values[x].dtype == to) return x;
  int id = ad_begin(a, IR_OP_Cast, &x, 1, 1, NULL);
  ad_attr_i(a, id, "to", to);
  return ad_end(a, id);
}

int ad_c_tensor(ad_ctx *a, ir_dtype dt, const ir_shape *s, const void *data, size_t nbytes) {
  return ir_add_const(a->g, ir_sprintf(a->g->arena, "%s/%s/c", a->base, a->tag), dt, s, data, nbytes);
}
int ad_c_i64(ad_ctx *a, const int64_t *v, int n) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = 1;
  s.dims[0] = n;
  return ad_c_tensor(a, IR_INT64, &s, v, sizeof(int64_t) * (size_t)n);
}
int ad_c_f(ad_ctx *a, double v, ir_dtype dt) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  if (dt == IR_DOUBLE) return ad_c_tensor(a, dt, &s, &v, sizeof v);
  float f = (float)v;
  return ad_c_tensor(a, IR_FLOAT, &s, &f, sizeof f);
}
int ad_c_i64_scalar(ad_ctx *a, int64_t v) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  return ad_c_tensor(a, IR_INT64, &s, &v, sizeof v);
}

ir_shape ad_shape(ad_ctx *a, int v) { return a->g->values[v].shape; }
ir_dtype ad_dtype(ad_ctx *a, int v) { return a->g->values[v].dtype; }

int ad_reshape(ad_ctx *a, int x, const ir_shape *s) {
  ir_shape xs = ad_shape(a, x);
  int same = xs.rank == s->rank;
  for (int i = 0; same && i < s->rank; i++) same = xs.dims[i] == s->dims[i];
  if (same) return x;
  return ad_bin(a, IR_OP_Reshape, x, ad_c_i64(a, s->dims, s->rank));
}
int ad_lead(ad_ctx *a, int x, int rank) {
  ir_shape s = ad_shape(a, x);
  if (s.rank != 1 || s.dims[0] <= 1) return x;
  s.rank = rank;
  for (int d = 1; d < rank; d++) s.dims[d] = 1;
  return ad_reshape(a, x, &s);
}

int ad_transpose(ad_ctx *a, int x, const int64_t *perm, int r) {
  int id = ad_begin(a, IR_OP_Transpose, &x, 1, 1, NULL);
  ad_attr_is(a, id, "perm", perm, r);
  return ad_end(a, id);
}
/* ReduceSum (axes as input) or ReduceMean (axes attribute, opset < 18) */
int ad_reduce(ad_ctx *a, ir_op op, int x, const int64_t *axes, int n, int keep) {
  if (n == 0) return x;
  int id;
  if (op == IR_OP_ReduceSum) {
    int in[2] = {x, ad_c_i64(a, axes, n)};
    id = ad_begin(a, op, in, 2, 1, NULL);
  } else {
    id = ad_begin(a, op, &x, 1, 1, NULL);
    ad_attr_is(a, id, "axes", axes, n);
  }
  ad_attr_i(a, id, "keepdims", keep);
  return ad_end(a, id);
}
int ad_expand(ad_ctx *a, int x, const ir_shape *s) { return ad_bin(a, IR_OP_Expand, x, ad_c_i64(a, s->dims, s->rank)); }
int ad_zeros(ad_ctx *a, const ir_shape *s, ir_dtype dt) {
  unsigned char z[16] = {0}; /* zero bytes: 0 in every type */
  ir_shape sc;
  memset(&sc, 0, sizeof sc);
  return ad_expand(a, ad_c_tensor(a, dt, &sc, z, ir_dtype_size(dt)), s);
}

/* Sum gradient gv (shape of a broadcast result) down to the shape s of an operand. */
int ad_unbroadcast(ad_ctx *a, int gv, const ir_shape *s) {
  ir_shape gs = ad_shape(a, gv);
  int64_t axes[IR_MAX_RANK];
  int n = 0, d = gs.rank - s->rank;
  for (int i = 0; i < gs.rank; i++)
    if (i < d || (s->dims[i - d] == 1 && gs.dims[i] != 1)) axes[n++] = i;
  int r = ad_reduce(a, IR_OP_ReduceSum, gv, axes, n, 1);
  return ad_reshape(a, r, s);
}

int ad_take_output(ad_ctx *a, int node, int k, int v) {
  ir_node nd = a->g->nodes[node];
  if (k >= nd.n_out || nd.out[k] < 0) return a->err ? -1 : 0;
  for (int i = 0; i < nd.n_in; i++)
    if (nd.in[i] == v) v = ad_un(a, IR_OP_Identity, v);
  if (a->err) return -1;
  ir_take_output(a->g, v, nd.out[k]);
  return 0;
}
