/* codegen/c/ops_vision.c - RoiAlign and DeformConv for the CPU target. */
#include "codegen/c/cg_c.h"

cg_op_fn cg_op_emitter_vision(ir_op op);
cg_op_fn cg_op_emitter_vision(ir_op op) {
  switch (op) {
    default: return NULL;
  }
}
