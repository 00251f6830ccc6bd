/* passes/bind.c - bind symbolic dims of graph inputs (trtexec-style --shape, -d DIM=N). */
#include <string.h>

#include "ir/diag.h"
#include "passes/pass.h"

int pass_bind(ir_graph *g, const pass_opts *o) {
  int errs = g->n_errors;
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
        ir_error(g, "graph input '%s' %s: dim %d '%s' is symbolic: bind it with -d %s=N or --shape %s:...", nm, sh, d, sy,
                 sy, nm);
      } else {
        ir_error(g, "graph input '%s' %s: dim %d is unknown: give the shape with --shape %s:...", nm, sh, d, nm);
      }
      break;
    }
    if (ir_shape_static(&val->shape) && ir_value_bytes(val) < 0)
      ir_error(g, "graph input '%s': its byte size overflows", nm);
  }
  return g->n_errors > errs ? -1 : 0;
}
