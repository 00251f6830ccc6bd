/* codegen/cuda/ops_vision.c - RoiAlign and DeformConv for the cuda target. */
#include "codegen/cuda/cg_cuda.h"

cu_op_fn cu_op_emitter_vision(ir_op op);
cu_op_fn cu_op_emitter_vision(ir_op op) {
  switch (op) {
    default: return NULL;
  }
}
