/* passes/fuse.c - Conv + Add + Relu/Clip chains into one Conv, and a 1x1 Conv into the
 * depthwise Conv that reads it (see passes/fuse.h). */
#include "passes/fuse.h"

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

int pass_fused_act(const ir_node *n, float *lo, float *hi) {
  return fused_act(n, "pipecc.act", "pipecc.clip", lo, hi);
}

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
      if (ov && other != cur && ov->dtype == IR_FLOAT && ir_shape_same_dims(&ov->shape, &y->shape) &&
          an->out[0] >= 0 && ir_shape_same_dims(&g->values[an->out[0]].shape, &y->shape)) {
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
    const ir_attr *of = ir_attr_find(dw, "pipecc.fused_nodes"), *ef2 = ir_attr_find(ex, "pipecc.fused_nodes");
    int n0 = of ? of->n : 0, n1 = ef2 ? ef2->n : 0;
    const char **names = ir_alloc_array(g->arena, (size_t)(n0 + n1 + 1), sizeof(char *));
    for (int k = 0; k < n0; k++) names[k] = of->strings[k];
    names[n0] = node_label(g, ex);
    for (int k = 0; k < n1; k++) names[n0 + 1 + k] = ef2->strings[k];
    ir_attr *na = of ? (ir_attr *)of : ir_node_add_attr(g, i, "pipecc.fused_nodes", IR_ATTR_STRINGS);
    na->strings = names;
    na->n = n0 + n1 + 1;
    dw->flops += g->nodes[a].flops;
    g->nodes[a].dead = 1;
    fused++;
  }
  if (!fused) return 0;
  ir_rebuild_uses(g);
  ir_compact(g);
  return fused;
}
