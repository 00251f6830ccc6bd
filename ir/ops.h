/* ir/ops.h - the op enum and per-op facts, expanded from ir/ops.def. */
#ifndef PIPECC_IR_OPS_H
#define PIPECC_IR_OPS_H

typedef enum {
  IR_K_UNARY,      /* element-wise, output = input shape and dtype */
  IR_K_UNARY_BOOL, /* element-wise, bool output */
  IR_K_BINARY,     /* element-wise with multidirectional broadcasting */
  IR_K_COMPARE,    /* broadcasting, bool output */
  IR_K_VARIADIC,   /* broadcasting over N inputs */
  IR_K_REDUCE,     /* reductions over axes */
  IR_K_POOL,       /* pooling windows */
  IR_K_SPECIAL     /* its own rule */
} ir_kind;

typedef enum {
#define OP(name, kind, min_in, max_in, max_out) IR_OP_##name,
#include "ir/ops.def"
#undef OP
  IR_OP_COUNT,
  IR_OP_UNKNOWN = -1
} ir_op;

typedef struct {
  const char *name;
  ir_kind kind;
  int min_inputs, max_inputs; /* max -1: variadic */
  int max_outputs;            /* -1: variadic */
} ir_op_info;

extern const ir_op_info ir_op_table[IR_OP_COUNT];

/* Op for a (domain, op_type) pair; IR_OP_UNKNOWN if unsupported.
 * domain "" and "ai.onnx" are the default domain. */
ir_op ir_op_lookup(const char *domain, const char *op_type);
static inline const char *ir_op_name(ir_op op) { return (op >= 0 && op < IR_OP_COUNT) ? ir_op_table[op].name : "?"; }
#endif
