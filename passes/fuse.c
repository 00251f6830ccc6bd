/* passes/fuse.c - Conv + Add + Relu/Clip chains into one Conv (see passes/fuse.h). */
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

int pass_fused_act(const ir_node *n, float *lo, float *hi) {
  const char *act = ir_attr_str(n, "pipecc.act", "");
  *lo = -INFINITY;
  *hi = INFINITY;
  if (!strcmp(act, "Relu")) {
    *lo = 0.0f;
    return 1;
  }
  if (!strcmp(act, "Clip")) {
    const ir_attr *a = ir_attr_find(n, "pipecc.clip");
    if (a && a->type == IR_ATTR_FLOATS && a->n == 2) *lo = a->floats[0], *hi = a->floats[1];
    return 2;
  }
  return 0;
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
      names->strings[names->n++] =
          d->name && *d->name ? ir_strdup(g->arena, d->name) : ir_sprintf(g->arena, "%s_%d", d->op_type, d->index);
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
    if (act >= 0) {
      add_str_attr(g, i, "pipecc.act", g->nodes[act].op == IR_OP_Relu ? "Relu" : "Clip");
      if (g->nodes[act].op == IR_OP_Clip) {
        ir_attr *a = ir_node_add_attr(g, i, "pipecc.clip", IR_ATTR_FLOATS);
        a->n = 2;
        a->floats = ir_alloc_array(g->arena, 2, sizeof(float));
        a->floats[0] = lo;
        a->floats[1] = hi;
      }
    }
    add_str_attr(g, i, "pipecc.fused", desc);
    fused++;
  }
  if (!fused) return 0;
  /* a residual produced after the Conv in file order: sort again */
  if (ir_toposort(g)) return -1;
  ir_compact(g);
  return fused;
}
