/* tests/fold/fold_dump.c - run pipecc's front-end passes (bind, fold, shape) on a model
 * and print, as JSON on stdout, the live nodes' op types and every graph output with
 * its kind, dtype, shape and, when it is a constant, its values. The fold tests compare
 * those values with onnxruntime's outputs.
 *
 *   fold_dump MODEL.onnx [-d DIM=N]... [--training]
 *
 * Floats print with enough digits to round-trip (%.9g for float32, %.17g for float64);
 * NaN and infinities print as the strings "nan", "inf", "-inf". Exit status 2 when the
 * model is rejected (like pipecc). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_load.h"
#include "ir/diag.h"
#include "ir/print.h"
#include "passes/pass.h"

static void print_float(double x, int single) {
  if (isnan(x)) printf("\"nan\"");
  else if (isinf(x)) printf(x > 0 ? "\"inf\"" : "\"-inf\"");
  else {
    char b[64];
    snprintf(b, sizeof b, single ? "%.9g" : "%.17g", x);
    /* keep it a JSON float: "-0" would read back as the integer 0 */
    printf("%s%s", b, strpbrk(b, ".eEn") ? "" : ".0");
  }
}

int main(int argc, char **argv) {
  const char *model = NULL;
  pass_opts o = {0};
  o.dims = calloc((size_t)argc, sizeof *o.dims);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-d") && i + 1 < argc) {
      char *v = argv[++i], *eq = strchr(v, '=');
      if (!eq) return 2;
      o.dims[o.n_dims].name = strndup(v, (size_t)(eq - v));
      o.dims[o.n_dims++].value = strtoll(eq + 1, NULL, 10);
    } else if (!strcmp(argv[i], "--training")) {
      o.training = 1;
    } else model = argv[i];
  }
  if (!model) {
    fprintf(stderr, "usage: fold_dump MODEL.onnx [-d DIM=N]... [--training]\n");
    return 2;
  }
  ir_graph *g = onnx_load_file(model);
  if (!g) return 2;
  for (const pass_info *p = pass_frontend_pipeline; p->name; p++)
    if (p->fn(g, &o) || g->n_errors) return 2;

  printf("{\"nodes\": [");
  int first = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].dead) continue;
    printf(first ? "" : ", ");
    first = 0;
    ir_json_str(stdout, g->nodes[i].op_type);
  }
  printf("],\n \"outputs\": {");
  for (int k = 0; k < g->n_outputs; k++) {
    const ir_value *v = &g->values[g->outputs[k]];
    printf(k ? ",\n  " : "\n  ");
    ir_json_str(stdout, v->name);
    printf(": {\"kind\": \"%s\", \"dtype\": \"%s\", \"shape\": [",
           v->kind == IR_VAL_CONST   ? "constant"
           : v->kind == IR_VAL_INPUT ? "input"
                                     : "activation",
           ir_dtype_name(v->dtype));
    for (int d = 0; d < v->shape.rank; d++) printf(d ? ", %lld" : "%lld", (long long)v->shape.dims[d]);
    printf("]");
    if (v->kind == IR_VAL_CONST) {
      printf(", \"values\": [");
      int64_t n = ir_shape_numel(&v->shape);
      for (int64_t e = 0; e < n; e++) {
        if (e) printf(", ");
        if (v->dtype == IR_FLOAT || v->dtype == IR_DOUBLE || v->dtype == IR_FLOAT16 || v->dtype == IR_BFLOAT16) {
          double x = 0; /* float16 and bfloat16 values are exact in float */
          if (ir_const_f64(v, e, &x)) return 3;
          print_float(x, v->dtype != IR_DOUBLE);
        } else {
          int64_t x = 0;
          if (ir_const_i64(v, e, &x)) return 3;
          printf("%lld", (long long)x);
        }
      }
      printf("]");
    }
    printf("}");
  }
  printf("}}\n");
  ir_graph_free(g);
  for (int k = 0; k < o.n_dims; k++) free((char *)o.dims[k].name);
  free(o.dims);
  return 0;
}
