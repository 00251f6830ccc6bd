/* codegen/cuda/ops_sample.c - GridSample and Det for the cuda target. */
#include "codegen/cuda/cg_cuda.h"

cu_op_fn cu_op_emitter_sample(ir_op op);
cu_op_fn cu_op_emitter_sample(ir_op op) {
  switch (op) {
    default: return NULL;
  }
}
