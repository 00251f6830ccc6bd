#include "ir/ops.h"
#include <stdlib.h>
#include <string.h>

const ir_op_info ir_op_table[IR_OP_COUNT] = {
#define OP(name, kind, min_in, max_in, max_out) [IR_OP_##name] = {#name, kind, min_in, max_in, max_out},
#include "ir/ops.def"
#undef OP
};

static int sorted[IR_OP_COUNT];
static int sorted_ready;

static int cmp_idx(const void *a, const void *b) {
  return strcmp(ir_op_table[*(const int *)a].name, ir_op_table[*(const int *)b].name);
}

ir_op ir_op_lookup(const char *domain, const char *op_type) {
  if (domain && !strcmp(domain, "ai.onnx.preview")) /* the one op of that domain pipecc reads */
    return op_type && !strcmp(op_type, "FlexAttention") ? IR_OP_FlexAttention : IR_OP_UNKNOWN;
  if (domain && *domain && strcmp(domain, "ai.onnx") != 0) return IR_OP_UNKNOWN;
  if (op_type && !strcmp(op_type, "FlexAttention")) return IR_OP_UNKNOWN; /* not of the default domain */
  if (!sorted_ready) {
    for (int i = 0; i < IR_OP_COUNT; i++) sorted[i] = i;
    qsort(sorted, IR_OP_COUNT, sizeof(int), cmp_idx);
    sorted_ready = 1;
  }
  int lo = 0, hi = IR_OP_COUNT - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2, c = strcmp(op_type, ir_op_table[sorted[mid]].name);
    if (c == 0) return (ir_op)sorted[mid];
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return IR_OP_UNKNOWN;
}
