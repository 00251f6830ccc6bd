/* passes/shape/shape_impl.h - internals of the shape pass (passes/shape*.c).
 *
 * Every op has a shape function `int f(ir_graph *g, int node)`: it reads the node's
 * inputs (already inferred and static), attributes and constant inputs, sets dtype
 * and static shape of every present output (sh_set_out) and node->flops, and returns
 * 0, or -1 after reporting a model error with ir_error_node. Ops of a non-special
 * KIND share one function per kind (sh_unary, sh_binary, ...); IR_K_SPECIAL ops have
 * their own, sh_<OpName>. passes/shape/shape.c dispatches through a table expanded from
 * ir/ops.def.
 *
 * The driver guarantees before calling a shape function: every present input has a
 * known dtype and a static shape, and the node's input count is within the op
 * table's range (checked by the loader). */
#ifndef PIPECC_PASSES_SHAPE_IMPL_H
#define PIPECC_PASSES_SHAPE_IMPL_H
#include <stdint.h>

#include "ir/diag.h"
#include "ir/ir.h"

typedef int (*sh_fn)(ir_graph *g, int node);

/* kind families */
int sh_unary(ir_graph *g, int node);    /* IR_K_UNARY, IR_K_UNARY_BOOL (shape_elementwise.c) */
int sh_binary(ir_graph *g, int node);   /* IR_K_BINARY, IR_K_COMPARE (shape_elementwise.c) */
int sh_variadic(ir_graph *g, int node); /* IR_K_VARIADIC (shape_elementwise.c) */
int sh_reduce(ir_graph *g, int node);   /* IR_K_REDUCE (shape_reduce.c) */
int sh_pool(ir_graph *g, int node);     /* IR_K_POOL (shape_nn.c) */

/* IR_K_SPECIAL ops: sh_<Name> */
#define SH_DECL_IR_K_UNARY(name)
#define SH_DECL_IR_K_UNARY_BOOL(name)
#define SH_DECL_IR_K_BINARY(name)
#define SH_DECL_IR_K_COMPARE(name)
#define SH_DECL_IR_K_VARIADIC(name)
#define SH_DECL_IR_K_REDUCE(name)
#define SH_DECL_IR_K_POOL(name)
#define SH_DECL_IR_K_SPECIAL(name) int sh_##name(ir_graph *g, int node);
#define OP(name, kind, min_in, max_in, max_out) SH_DECL_##kind(name)
#include "ir/ops.def"
#undef OP

/* ---- dtype classes (bit masks of ir_dtype) ---- */
#define SH_BIT(t) (1u << (t))
#define SH_FLOAT8 \
  (SH_BIT(IR_FLOAT8E4M3FN) | SH_BIT(IR_FLOAT8E4M3FNUZ) | SH_BIT(IR_FLOAT8E5M2) | SH_BIT(IR_FLOAT8E5M2FNUZ) | \
   SH_BIT(IR_FLOAT8E8M0) | SH_BIT(IR_FLOAT4E2M1) | SH_BIT(IR_FLOAT6E2M3) | SH_BIT(IR_FLOAT6E3M2))
#define SH_FLOATS (SH_BIT(IR_FLOAT) | SH_BIT(IR_DOUBLE) | SH_BIT(IR_FLOAT16) | SH_BIT(IR_BFLOAT16) | SH_FLOAT8)
#define SH_SINTS (SH_BIT(IR_INT2) | SH_BIT(IR_INT4) | SH_BIT(IR_INT8) | SH_BIT(IR_INT16) | SH_BIT(IR_INT32) | SH_BIT(IR_INT64))
#define SH_UINTS (SH_BIT(IR_UINT2) | SH_BIT(IR_UINT4) | SH_BIT(IR_UINT8) | SH_BIT(IR_UINT16) | SH_BIT(IR_UINT32) | SH_BIT(IR_UINT64))
#define SH_INTS (SH_SINTS | SH_UINTS)
#define SH_NUM (SH_FLOATS | SH_INTS)
#define SH_ALL (SH_NUM | SH_BIT(IR_BOOL))
#define SH_INDEX (SH_BIT(IR_INT32) | SH_BIT(IR_INT64))

/* ---- helpers (passes/shape/shape.c) ---- */

/* Present input / output i of node, or NULL. */
ir_value *sh_in(ir_graph *g, int node, int i);
ir_value *sh_out(ir_graph *g, int node, int i);
/* Set output i (if present) to dtype/shape. Checks element and byte counts fit in
 * int64 (else reports). 0 or -1. */
int sh_set_out(ir_graph *g, int node, int i, ir_dtype dt, const ir_shape *s);
/* Element count as a double (for FLOPs); shapes are static and checked. */
double sh_numel(const ir_shape *s);
/* Shape "[2, 3]" into buf (64+ bytes). */
const char *sh_str(const ir_shape *s, char *buf, size_t n);
/* Printable value name into buf (for messages). */
const char *sh_vname(const ir_value *v, char *buf, size_t n);

/* Check v's dtype is in mask; what names the input ("X", "input 'B'"). */
int sh_check_dtype(ir_graph *g, int node, const ir_value *v, unsigned mask, const char *what);
/* Check a and b have the same dtype. */
int sh_same_dtype(ir_graph *g, int node, const ir_value *a, const ir_value *b, const char *an, const char *bn);

/* Multidirectional (numpy) broadcasting of two static shapes, pure: returns 0, or
 * the 1-based output axis (counted from the right) where they clash. */
int sh_broadcast_shapes(const ir_shape *a, const ir_shape *b, ir_shape *out);
/* Same, reporting a model error naming the two inputs. */
int sh_broadcast(ir_graph *g, int node, const ir_shape *a, const ir_shape *b, ir_shape *out, const char *an,
                 const char *bn);
/* Conv's output shape for X = x, W = wt (shape_nn.c; the bias in slot bias_slot
 * checked, -1: none) into *out; sets the node's FLOPs. 0, or -1 after reporting. */
int sh_conv_shape(ir_graph *g, int node, const ir_value *x, const ir_value *wt, int bias_slot, ir_shape *out);
/* numpy matmul's shape of a @ b (shape_nn.c) into *out, its FLOPs into *flops; 0, or
 * -1 after reporting. */
int sh_matmul_shape(ir_graph *g, int node, const ir_value *a, const ir_value *b, ir_shape *out, double *flops);
/* Can b be broadcast to a (unidirectional: a's shape wins)? 0/-1, reports. */
int sh_unibroadcast(ir_graph *g, int node, const ir_shape *a, const ir_shape *b, const char *an, const char *bn);

/* Normalise an axis into [0, rank) (ONNX accepts [-rank, rank-1]); reports. */
int sh_axis(ir_graph *g, int node, int64_t axis, int rank, const char *what, int *out);
/* Normalise a list of axes (no duplicates allowed) into out[]; reports. */
int sh_axes(ir_graph *g, int node, const int64_t *axes, int n, int rank, const char *what, int *out);

/* Read the constant integer tensor at input i (scalar or 1-D) into out[0..max).
 * A non-constant input is a model error: "input 'NAME' (value 'v') must be a constant
 * for a static shape". Sets *n to the element count. 0 or -1. */
int sh_const_ints(ir_graph *g, int node, int i, const char *what, int64_t *out, int max, int *n);
/* Same for a floating-point or integer tensor read as doubles. */
int sh_const_f64s(ir_graph *g, int node, int i, const char *what, double *out, int max, int *n);
/* Read an INTS attribute into out[0..max); returns the count, -1 if absent, -2 after
 * reporting (too long). */
int sh_attr_ints(ir_graph *g, int node, const char *name, int64_t *out, int max);

/* Checked int64 arithmetic: 0, or -1 on overflow. */
int sh_mul(int64_t a, int64_t b, int64_t *r);
int sh_add(int64_t a, int64_t b, int64_t *r);

/* Window arithmetic shared by pooling and convolution (ONNX Conv-11 / MaxPool-12 /
 * AveragePool-19). auto_pad: SH_PAD_NOTSET uses the given pads (*pb, *pe); SAME_UPPER /
 * SAME_LOWER compute them (the extra one at the end / the beginning); VALID sets
 * them to 0. Returns 0, or -1 if the padded input is smaller than the dilated kernel
 * or a parameter is out of range (k, s, d < 1, pads < 0). */
enum { SH_PAD_NOTSET, SH_PAD_SAME_UPPER, SH_PAD_SAME_LOWER, SH_PAD_VALID };
int sh_window_out(int64_t in, int64_t k, int64_t s, int64_t d, int auto_pad, int ceil_mode, int64_t *pb, int64_t *pe,
                  int64_t *out);
/* Parse an auto_pad attribute value; -1 if unknown. */
int sh_auto_pad(const char *s);

#define SH_FAIL(...) return (ir_error_node(g, node, __VA_ARGS__), -1)
#define SH_NODE (&g->nodes[node])

#endif
