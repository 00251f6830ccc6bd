/* tools/pipecc_ops.c - `pipecc --list-ops`: every op of ir/ops.def and what each target
 * and training do with it, one tab-separated line per op, from the same predicates the
 * compiler decides by (the emitters' dispatch, the element-wise writer, the control-flow
 * expander, autodiff). tools/gen_supported.py turns it into docs/supported.md. */
#include <stdio.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "codegen/cuda/cg_cuda.h"
#include "passes/lower/control.h"
#include "passes/train/autodiff.h"
#include "tools/pipecc_options.h"

/* How a target runs op: "kernel" (its own emitter), "fused" (the element-wise writer,
 * fused with its neighbours), "view" (no code: an alias of its input), "expanded"
 * (control flow and sequences, expanded into the graph at compile time), "rewritten"
 * (into other ops by the front end before code generation). */
static const char *how(ir_op op, int cuda) {
  ir_node n;
  memset(&n, 0, sizeof n);
  n.op = op;
  n.n_out = 1;
  if (control_is(op)) return "expanded";
  if (cg_is_alias(&n)) return "view";
  if (cg_is_eltwise(NULL, &n)) return "fused";
  if (cuda ? cu_op_emitter(op) != NULL : cg_op_emitter(op) != NULL) return "kernel";
  return "rewritten";
}

int pipecc_list_ops(FILE *f) {
  static const char *const grad[] = {[AD_REFUSED] = "no", [AD_GRAD] = "gradient", [AD_NO_GRAD] = "no gradient flows"};
  fprintf(f, "op\tcpu\tcuda\ttrain\n");
  for (int op = 0; op < IR_OP_COUNT; op++) {
    const char *c = how((ir_op)op, 0), *g = how((ir_op)op, 1);
    const char *t =
        !strcmp(c, "rewritten") || !strcmp(c, "expanded") ? "as rewritten" : grad[ad_op_gradient((ir_op)op)];
    fprintf(f, "%s\t%s\t%s\t%s\n", ir_op_name((ir_op)op), c, g, t);
  }
  return ferror(f) ? 1 : 0;
}
