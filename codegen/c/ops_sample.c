/* codegen/c/ops_sample.c - GridSample and Det for the CPU target. */
#include "codegen/c/cg_c.h"

cg_op_fn cg_op_emitter_sample(ir_op op);
cg_op_fn cg_op_emitter_sample(ir_op op) {
  switch (op) {
    default: return NULL;
  }
}
