#include "ir/print.h"

#include <inttypes.h>
#include <string.h>

#include "ir/diag.h"

void ir_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\t': fputs("\\t", f); break;
      case '\r': fputs("\\r", f); break;
      default:
        if (*p < 32) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
  }
  fputc('"', f);
}

static void flops_str(double fl, char *b, size_t n) {
  if (fl >= 1e9) snprintf(b, n, "%.2fG", fl / 1e9);
  else if (fl >= 1e6) snprintf(b, n, "%.2fM", fl / 1e6);
  else if (fl >= 1e3) snprintf(b, n, "%.1fK", fl / 1e3);
  else snprintf(b, n, "%.0f", fl);
}

void ir_print_text(FILE *f, const ir_graph *g) {
  char b[256], nm[128];
  double total = 0;
  fprintf(f, "# %s: producer %s %s, IR version %" PRId64 ", opset %d, %d nodes, %d values\n", g->path, g->producer_name,
          g->producer_version, g->ir_version, g->opset, g->n_nodes, g->n_values);
  for (int i = 0; i < g->n_inputs; i++) {
    const ir_value *v = &g->values[g->inputs[i]];
    fprintf(f, "input  %s: %s %s\n", ir_printable(v->name, 80, nm, sizeof nm), ir_dtype_name(v->dtype),
            ir_shape_str(&v->shape, b, sizeof b));
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    fprintf(f, "%5d %-18s %-28s ", i, n->op_type, ir_printable(n->name, 28, nm, sizeof nm));
    for (int k = 0; k < n->n_in; k++) {
      if (n->in[k] < 0) {
        fputs(k ? ", -" : "-", f);
        continue;
      }
      const ir_value *v = &g->values[n->in[k]];
      fprintf(f, "%s%s%s", k ? ", " : "", v->kind == IR_VAL_CONST ? "c" : "", ir_shape_str(&v->shape, b, sizeof b));
    }
    fputs(" -> ", f);
    for (int k = 0; k < n->n_out; k++) {
      if (n->out[k] < 0) continue;
      const ir_value *v = &g->values[n->out[k]];
      fprintf(f, "%s%s%s", k ? ", " : "", ir_dtype_name(v->dtype), ir_shape_str(&v->shape, b, sizeof b));
    }
    flops_str(n->flops, b, sizeof b);
    fprintf(f, "  flops %s\n", b);
    total += n->flops;
  }
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_value *v = &g->values[g->outputs[i]];
    fprintf(f, "output %s: %s %s\n", ir_printable(v->name, 80, nm, sizeof nm), ir_dtype_name(v->dtype),
            ir_shape_str(&v->shape, b, sizeof b));
  }
  flops_str(total, b, sizeof b);
  fprintf(f, "# total %s FLOPs\n", b);
}

static void json_shape(FILE *f, const ir_shape *s) {
  if (s->rank < 0) {
    fputs("null", f);
    return;
  }
  fputc('[', f);
  for (int i = 0; i < s->rank; i++) {
    if (i) fputs(", ", f);
    if (s->dims[i] >= 0) fprintf(f, "%" PRId64, s->dims[i]);
    else if (s->sym[i]) ir_json_str(f, s->sym[i]);
    else fputs("null", f);
  }
  fputc(']', f);
}

static void json_names(FILE *f, const ir_graph *g, const int *ids, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", f);
    if (ids[i] < 0) fputs("\"\"", f);
    else ir_json_str(f, g->values[ids[i]].name);
  }
  fputc(']', f);
}

void ir_print_json(FILE *f, const ir_graph *g) {
  static const char *kinds[] = {"activation", "input", "constant"};
  fputs("{\"model\": ", f);
  ir_json_str(f, g->path);
  fputs(", \"producer\": ", f);
  ir_json_str(f, g->producer_name);
  fprintf(f, ", \"ir_version\": %" PRId64 ", \"opset\": %d,\n \"inputs\": ", g->ir_version, g->opset);
  json_names(f, g, g->inputs, g->n_inputs);
  fputs(",\n \"outputs\": ", f);
  json_names(f, g, g->outputs, g->n_outputs);
  fputs(",\n \"values\": {", f);
  int first = 1;
  for (int i = 0; i < g->n_values; i++) {
    const ir_value *v = &g->values[i];
    fputs(first ? "\n  " : ",\n  ", f);
    first = 0;
    ir_json_str(f, v->name);
    fprintf(f, ": {\"dtype\": \"%s\", \"shape\": ", ir_dtype_name(v->dtype));
    json_shape(f, &v->shape);
    fprintf(f, ", \"kind\": \"%s\"}", kinds[v->kind]);
  }
  fputs("},\n \"nodes\": [", f);
  first = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    fputs(first ? "\n  " : ",\n  ", f);
    first = 0;
    fputs("{\"name\": ", f);
    ir_json_str(f, n->name);
    fputs(", \"op\": ", f);
    ir_json_str(f, n->op_type);
    fputs(", \"inputs\": ", f);
    json_names(f, g, n->in, n->n_in);
    fputs(", \"outputs\": ", f);
    json_names(f, g, n->out, n->n_out);
    fprintf(f, ", \"flops\": %.0f}", n->flops);
  }
  fputs("]}\n", f);
}
