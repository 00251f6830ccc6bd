/* codegen/cuda/ops_sample.c - the sampling ops for the cuda target: GridSample,
 * RoiAlign, DeformConv, Det. */
#include "codegen/cuda/cg_cuda.h"

cu_op_fn cu_op_emitter_sample(ir_op op);
cu_op_fn cu_op_emitter_sample(ir_op op) {
  switch (op) {
    default: return NULL;
  }
}
