/* frontend/onnx_forms.c - nodes of default-domain opsets 22 and later (onnx_forms.h, made
 * from the onnx package's schemas by tools/gen_opset_forms.py). A form that only widens
 * its types reads as the form before it: the element types themselves are checked where
 * tensors are read and typed. The forms that changed more are decided here, each by the
 * attribute it added. */
#include "frontend/onnx_load.h"

#include <string.h>

#include "ir/diag.h"

static const struct form {
  const char *op;
  int version, changed;
} forms[] = {
#define FORM(op, version, changed) {#op, version, changed},
#include "frontend/onnx_forms.h"
#undef FORM
};

int onnx_max_opset(void) { return ONNX_FORMS_MAX_OPSET; }
int onnx_max_ir_version(void) { return ONNX_FORMS_MAX_IR_VERSION; }

/* An attribute added with a form pipecc reads only at the value that keeps the earlier
 * form's meaning: 0 when absent or at that value, else -1 after the error line. */
static int int_at(ir_graph *g, int node, int version, const char *attr, int64_t keep, const char *meaning) {
  const ir_node *n = &g->nodes[node];
  if (!ir_attr_find(n, attr) || ir_attr_int(n, attr, keep) == keep) return 0;
  ir_error_node(g, node, "%s-%d with %s=%lld is not supported (pipecc reads %s=%lld: %s)", n->op_type, version, attr,
                (long long)ir_attr_int(n, attr, keep), attr, (long long)keep, meaning);
  return -1;
}

static int str_at(ir_graph *g, int node, int version, const char *attr, const char *keep, const char *meaning) {
  const ir_node *n = &g->nodes[node];
  const char *v = ir_attr_str(n, attr, keep);
  if (!strcmp(v, keep)) return 0;
  char vb[64];
  ir_error_node(g, node, "%s-%d with %s='%s' is not supported (pipecc reads %s='%s': %s)", n->op_type, version, attr,
                ir_printable(v, 40, vb, sizeof vb), attr, keep, meaning);
  return -1;
}

int onnx_form_check(ir_graph *g, int node) {
  const ir_node *n = &g->nodes[node];
  if (n->opset <= 21) return 0;
  const struct form *f = NULL; /* the node's form: the newest of version <= its opset */
  for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
    if (!strcmp(forms[i].op, n->op_type) && forms[i].version <= n->opset) f = &forms[i];
  if (!f || !f->changed) return 0;
  int v = f->version;
  switch (n->op) {
    case IR_OP_Cast:
    case IR_OP_CastLike: return 0; /* round_mode: conversions to float8e8m0 only (codegen/eltwise_expr.c) */
    case IR_OP_QuantizeLinear: return int_at(g, node, v, "precision", 0, "the precision of y_zero_point's type");
    case IR_OP_DequantizeLinear: return int_at(g, node, v, "output_dtype", 0, "the output of x_scale's type");
    case IR_OP_Attention: return 0; /* 24: nonpad_kv_seqlen, 25: the windows; refused by its shape rule */
    case IR_OP_Range: return int_at(g, node, v, "stash_type", 1, "float16 and bfloat16 computed in float");
    case IR_OP_SpaceToDepth: /* 28: mode, DCR (earlier opsets' order) or CRD (DepthToSpace's) */
      if (!strcmp(ir_attr_str(n, "mode", "DCR"), "CRD")) return 0;
      return str_at(g, node, v, "mode", "DCR", "or 'CRD'");
    default:
      ir_error_node(g, node, "%s-%d (opset %d) is not supported: pipecc reads %s's forms up to opset 21", n->op_type, v,
                    n->opset, n->op_type);
      return -1;
  }
}
