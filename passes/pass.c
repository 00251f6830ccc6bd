#include "passes/pass.h"

#include <string.h>

const pass_info pass_frontend_pipeline[] = {
    {"bind", pass_bind, "bind symbolic input dims from --shape and -d"},
    {"fold", pass_fold,
     "fold constants and shape arithmetic; expand If, Loop, Scan and sequence ops; drop Identity and (inference) "
     "Dropout"},
    {"shape", pass_shape, "infer the static shape and dtype of every value, and node FLOPs"},
    {"einsum", pass_lower_einsum, "write Einsum as Transpose, Reshape, ReduceSum and batched MatMul"},
    {"quant", pass_lower_quant, "write QuantizeLinear and DequantizeLinear as Cast, Div, Round, Clip, Sub and Mul"},
    {"lower", pass_lower_ops,
     "write GroupNormalization, MeanVarianceNormalization, LpNormalization, EyeLike, CenterCropPad, MaxUnpool, ReverseSequence, "
     "Col2Im, Compress and AffineGrid in other ops"},
    {"signal", pass_lower_signal, "write DFT, STFT, window functions and MelWeightMatrix in other ops"},
    {"widen", pass_widen_half, "compute float16, bfloat16 and float8 in float: Casts around the nodes that compute"},
    {NULL, NULL, NULL},
};

const pass_info *pass_find(const char *name) {
  for (const pass_info *p = pass_frontend_pipeline; p->name; p++)
    if (!strcmp(p->name, name)) return p;
  return NULL;
}
