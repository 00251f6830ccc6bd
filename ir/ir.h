/* ir/ir.h - the graph every pass works on.
 *
 * A graph is a DAG of nodes (ONNX ops) over values (tensors). Nodes and values live
 * in growable arrays and are referred to by index, never by pointer, so passes may
 * add nodes and values freely. A value has one producer (a node, or none for graph
 * inputs and constants) and any number of consumers (rebuilt by ir_rebuild_uses).
 *
 * Shapes are static after binding: every dim is a known int64 >= 0. Before binding,
 * a dim may be symbolic (dims[i] == IR_DIM_SYM, sym[i] names it) or unknown
 * (IR_DIM_UNKNOWN, before shape inference). rank == -1 means the rank is unknown.
 *
 * Constant tensors (initializers, Constant nodes, folded results) carry their bytes
 * in `data`: either in place in the mmapped model or external-data file (weights are
 * never copied), or in the graph's arena (folded constants). Data is stored in ONNX
 * raw_data layout: little-endian, row-major, packed, and may be unaligned: read it
 * with ir_const_* helpers or memcpy.
 *
 * Errors about the model go through ir_error / ir_error_node (ir/diag.h). */
#ifndef PIPECC_IR_IR_H
#define PIPECC_IR_IR_H
#include <stddef.h>
#include <stdint.h>

#include "ir/arena.h"
#include "ir/ops.h"

#define IR_MAX_RANK 8
#define IR_DIM_UNKNOWN (-1) /* not inferred yet */
#define IR_DIM_SYM (-2)     /* symbolic, named by sym[i], bound with --shape / -d */

/* ONNX TensorProto.DataType codes. */
typedef enum {
  IR_UNDEFINED = 0,
  IR_FLOAT = 1,
  IR_UINT8 = 2,
  IR_INT8 = 3,
  IR_UINT16 = 4,
  IR_INT16 = 5,
  IR_INT32 = 6,
  IR_INT64 = 7,
  IR_STRING = 8,
  IR_BOOL = 9,
  IR_FLOAT16 = 10,
  IR_DOUBLE = 11,
  IR_UINT32 = 12,
  IR_UINT64 = 13,
  IR_COMPLEX64 = 14,
  IR_COMPLEX128 = 15,
  IR_BFLOAT16 = 16,
  IR_FLOAT8E4M3FN = 17,
  IR_FLOAT8E4M3FNUZ = 18,
  IR_FLOAT8E5M2 = 19,
  IR_FLOAT8E5M2FNUZ = 20,
  IR_UINT4 = 21, /* held unpacked: one value per byte (uint8_t), packed only in ONNX files */
  IR_INT4 = 22,  /* held unpacked: one value per byte (int8_t, sign-extended) */
  /* the types of IR version 11 and later, held unpacked, one value per byte: the floats as
   * bit patterns (uint8_t), int2 sign-extended (int8_t) */
  IR_FLOAT4E2M1 = 23,
  IR_FLOAT8E8M0 = 24,
  IR_UINT2 = 25,
  IR_INT2 = 26,
  IR_FLOAT6E2M3 = 27,
  IR_FLOAT6E3M2 = 28,
  IR_DTYPE_COUNT
} ir_dtype;

/* Element size in bytes, 0 for undefined/string. */
size_t ir_dtype_size(ir_dtype t);
/* NumPy-style name: "float32", "int64", "bool", ... ("undefined" if unknown). */
const char *ir_dtype_name(ir_dtype t);
/* The name of an ONNX element type pipecc does not hold, for error lines: "string",
 * "complex", or "invalid". */
const char *ir_unheld_dtype_name(int64_t onnx_type);
/* Name to code, -1 if unknown; accepts numpy names and ONNX names ("FLOAT"). */
int ir_dtype_parse(const char *s);
/* 1 for float16, bfloat16, the float8 types (float8e8m0 included), float4e2m1 and the
 * float6 types: both targets hold them as bit patterns and compute in float
 * (passes/opt/widen.c). */
int ir_dtype_narrow(ir_dtype t);
/* 1 for int4, uint4, int2 and uint2 (held one value per byte); *lo, *hi (either may be
 * NULL): their range. */
int ir_dtype_small_int(ir_dtype t, int *lo, int *hi);
/* Bits per value in an ONNX file: 4 for int4, uint4 and float4e2m1 (two to a byte), 2 for
 * int2 and uint2 (four), 6 for the float6 types (four in three bytes), all low bits
 * first; 0 for the types stored whole. */
int ir_dtype_packed_bits(ir_dtype t);
/* 1 for the floating-point types: float32, float64 and the narrow ones. */
int ir_dtype_is_float(ir_dtype t);

typedef struct {
  int rank;                     /* -1: unknown rank */
  int64_t dims[IR_MAX_RANK];    /* >= 0, or IR_DIM_UNKNOWN / IR_DIM_SYM */
  const char *sym[IR_MAX_RANK]; /* name of a symbolic dim (arena), else NULL */
} ir_shape;

/* 1 if the rank and every dim are known. */
int ir_shape_static(const ir_shape *s);
/* Number of elements; -1 if not static or on overflow past INT64_MAX. */
int64_t ir_shape_numel(const ir_shape *s);
/* The static shape of rank dims (no symbolic names). */
ir_shape ir_shape_of(int rank, const int64_t *dims);
/* 1 if a and b have the same rank and the same dims (symbolic names not compared). */
int ir_shape_same_dims(const ir_shape *a, const ir_shape *b);
/* "[2, 3, 224, 224]" / "[batch, 3, ?, ?]" into buf (always NUL-terminated). */
char *ir_shape_str(const ir_shape *s, char *buf, size_t n);

typedef enum {
  IR_VAL_ACT = 0, /* produced by a node */
  IR_VAL_INPUT,   /* graph input fed at run time */
  IR_VAL_CONST,   /* initializer, Constant node or folded: has data */
  IR_VAL_SEQ,     /* an ONNX sequence, known at compile time as the list of its tensors
                   * (seq[seq_n], value indices; dtype: the elements' type). The fold pass
                   * evaluates every sequence op (passes/lower/sequence.c), so none remains after
                   * it; a sequence graph input (seq_n -1 until bound by --seq) or output
                   * becomes one tensor input or output per element, NAME.0, NAME.1, ... */
  IR_VAL_NONE     /* an ONNX optional without a value (Optional with no input, a graph input
                   * named by --none). An optional holding a value is that value itself, so
                   * optionals are known at compile time too: the fold pass evaluates
                   * Optional, OptionalHasElement and OptionalGetElement (passes/lower/sequence.c)
                   * and refuses an empty one reaching any other op or a graph output */
} ir_val_kind;

/* Training: the role of a mutable constant (initializer or state) of a training
 * program, which the stage code holds in writable memory and the runtime saves,
 * restores and synchronises (passes/train.h). */
typedef enum {
  IR_PARAM_NONE = 0,
  IR_PARAM_WEIGHT,   /* a trained initializer */
  IR_PARAM_BUFFER,   /* an initializer the forward pass updates (BatchNorm running stats) */
  IR_PARAM_OPTSTATE, /* optimizer state (momentum, Adam's m, v, step), zero at start */
  IR_PARAM_GRAD,     /* gradient accumulator of a weight over the micro-batches of a step */
  IR_PARAM_HYPER     /* a hyperparameter (lr, momentum, ...) the runtime may override */
} ir_param_kind;

typedef struct {
  const char *name;
  ir_val_kind kind;
  ir_dtype dtype;
  ir_shape shape;
  int producer;       /* node index, -1 for inputs and constants */
  int is_output;      /* a graph output */
  int is_initializer; /* came from graph.initializer (a trainable weight when float) */
  int is_optional;    /* a graph input declared optional(...): --none may make it empty */
  const void *data;   /* IR_VAL_CONST: nbytes of raw little-endian data (maybe unaligned); NULL
                       * with zero_init set: nbytes of zeros that take no memory */
  size_t nbytes;
  int zero_init;       /* IR_VAL_CONST whose contents are all zero bytes, not stored (data NULL) */
  int data_nchw;       /* IR_VAL_CONST of rank 4 [d0, d1, d2, d3] whose data holds the elements in the
                        * order [d0, d3, d1, d2]: a channels-last view of an NCHW constant that
                        * passes/opt/layout.c made without copying; ir_const_* and the weight files
                        * (ir_const_copy) read through it */
  ir_param_kind param; /* training: the role of a mutable constant, else IR_PARAM_NONE */
  int writeback;       /* training: the param (value index) this value is copied into at the end of
                        * its phase (the new weight, state or running statistic), else -1 */
  /* compiling for micro-batches (passes/batch.h): the dim of the axis that carries the
   * batch is batch_outer x batch x batch_inner elements, row-major (0 means 1) */
  int64_t batch_outer, batch_inner;
  /* IR_VAL_SEQ: its elements (arena), seq_n of them */
  int *seq;
  int seq_n;
  /* consumers, valid after ir_rebuild_uses: node indices use_list[use_off..+n_uses] */
  int use_off, n_uses;
} ir_value;

typedef enum {
  IR_ATTR_UNDEFINED = 0,
  IR_ATTR_FLOAT = 1,
  IR_ATTR_INT = 2,
  IR_ATTR_STRING = 3,
  IR_ATTR_TENSOR = 4,
  IR_ATTR_GRAPH = 5,
  IR_ATTR_FLOATS = 6,
  IR_ATTR_INTS = 7,
  IR_ATTR_STRINGS = 8,
  IR_ATTR_TYPE_PROTO = 13 /* a type (Optional's 'type'): kept as no more than that */
} ir_attr_type;

typedef struct {
  const char *name;
  ir_attr_type type;
  int64_t i;
  float f;
  const char *s;
  size_t slen; /* STRING: bytes, NUL-terminated too */
  int n;       /* FLOATS/INTS/STRINGS count */
  int64_t *ints;
  float *floats;
  const char **strings;
  int tensor;             /* TENSOR: index of an IR_VAL_CONST value holding it */
  struct ir_graph *graph; /* GRAPH: the body (If's branches, Loop's and Scan's body), a graph
                           * of its own owned by the node's graph; see ir_graph.n_captured */
} ir_attr;

typedef struct {
  const char *name;    /* ONNX node name ("" if none) */
  const char *op_type; /* as in the file */
  const char *domain;  /* "" for the default domain */
  ir_op op;            /* IR_OP_UNKNOWN if unsupported */
  int opset;           /* version of the node's domain in the model's opset_import */
  int index;           /* position in the ONNX file's node list (for messages) */
  int n_in, n_out;
  int *in;  /* value indices; -1 for an omitted optional input */
  int *out; /* value indices; -1 for an omitted optional output */
  int n_attr;
  ir_attr *attr;
  int n_implicit; /* If/Loop/Scan: the last n_implicit inputs are the outside values their
                   * bodies read by name (each GRAPH attribute's captured inputs, in
                   * attribute order), so that they are ordinary edges of this graph */
  int dead;       /* removed by a pass; skipped everywhere, compacted by ir_compact */
  double flops;   /* forward FLOPs, set by the shape pass */
  /* training programs (passes/train.h): the pipeline stage the node runs in (-1: not
   * assigned) and its phase: IR_PHASE_FWD once per micro-batch, IR_PHASE_BWD once per
   * micro-batch in reverse, IR_PHASE_UPD once per optimizer step */
  int stage;
  int phase;
} ir_node;

enum { IR_PHASE_FWD = 0, IR_PHASE_BWD = 1, IR_PHASE_UPD = 2 };

typedef struct {
  const char *domain;
  int64_t version;
} ir_opset;

typedef struct ir_mapping ir_mapping; /* an mmapped file, unmapped with the graph */
typedef struct ir_strmap ir_strmap;

typedef struct ir_graph {
  ir_arena *arena;
  const char *path; /* model file as given on the command line */
  const char *dir;  /* its folder, for external data */
  const char *producer_name, *producer_version, *graph_name;
  int64_t ir_version;
  int opset; /* default-domain opset */
  ir_opset *opsets;
  int n_opsets;

  ir_node *nodes;
  int n_nodes, cap_nodes;
  ir_value *values;
  int n_values, cap_values;
  int *inputs;
  int n_inputs; /* IR_VAL_INPUT values, in file order */
  int *outputs;
  int n_outputs; /* graph outputs, in file order */

  int *use_list;
  int n_use_list;   /* see ir_value.use_off */
  ir_strmap *names; /* value name -> index */
  ir_mapping *maps; /* mmapped files */
  int n_errors;     /* model errors reported so far */
  /* Compiling for micro-batches (tools/pipecc.c): the same model inferred at the whole
   * batch, read by name (passes/batch.h), and how many micro-batches a batch is split
   * in; NULL and 0 otherwise. */
  const struct ir_graph *batch_full;
  int microbatches;
  const char *diag_hint; /* appended to every error message while set */
  /* A body (ir_attr.graph): inputs are the formal inputs, then n_captured values of
   * enclosing graphs that its nodes read by name (named as outside); outputs are the
   * formal outputs and may repeat a value or name an input or constant. */
  int n_captured;
  struct ir_graph **bodies;
  int n_bodies; /* bodies of this graph's nodes, freed with it */
} ir_graph;

ir_graph *ir_graph_new(const char *path);
void ir_graph_free(ir_graph *g);

/* Add a value with a unique name (a clash gets a numeric suffix). Returns its index. */
int ir_add_value(ir_graph *g, const char *name, ir_val_kind kind, ir_dtype dt);
/* Index of the value named name, -1 if none. */
int ir_find_value(const ir_graph *g, const char *name);
/* Add a constant value whose data is copied into the arena. */
int ir_add_const(ir_graph *g, const char *name, ir_dtype dt, const ir_shape *shape, const void *data, size_t nbytes);
/* Add a constant of zeros (zero_init: no data is stored, ir_const_* read zeros). */
int ir_add_zero_const(ir_graph *g, const char *name, ir_dtype dt, const ir_shape *shape);
/* Add a node; in/out are copied. Sets the outputs' producer. Returns its index. */
int ir_add_node(ir_graph *g, ir_op op, const char *name, const int *in, int n_in, const int *out, int n_out);

/* Attribute lookup: NULL if absent. */
const ir_attr *ir_attr_find(const ir_node *n, const char *name);
/* Append an attribute of type t named name to node (arena copies; the value fields
 * zeroed, tensor -1) and return it for the caller to fill. */
ir_attr *ir_node_add_attr(ir_graph *g, int node, const char *name, ir_attr_type t);
int64_t ir_attr_int(const ir_node *n, const char *name, int64_t dflt);
float ir_attr_float(const ir_node *n, const char *name, float dflt);
const char *ir_attr_str(const ir_node *n, const char *name, const char *dflt);
/* INTS attribute: returns count and sets *v, or -1 (and *v = NULL) if absent. */
int ir_attr_ints(const ir_node *n, const char *name, const int64_t **v);
/* Transpose's perm for an input of rank r into perm[r]: the attribute, or reversed when
 * it is absent. Returns r, or -1 when the attribute does not have r values (shape
 * inference, sh_Transpose, has checked that it is a permutation). */
int ir_transpose_perm(const ir_node *t, int r, int64_t *perm);
/* The dims and element strides of a dense row-major tensor of shape s read through perm
 * (s->rank entries, each in range; NULL: as it is): dims[d] = s->dims[perm[d]] and
 * str[d] the stride of that dim. */
void ir_permuted_view(const ir_shape *s, const int64_t *perm, int64_t *dims, int64_t *str);
/* Reduce*'s axes as given (the constant input 1 from opset 13/18, else the attribute
 * 'axes') into axes[0..max): their count; -1 when none is given; -2 when the input is
 * not a constant or there are more than max. */
int ir_reduce_axes(ir_graph *g, const ir_node *n, int64_t *axes, int max);

/* Input/output value of a node, or NULL when omitted / out of range. */
ir_value *ir_in(ir_graph *g, const ir_node *n, int i);
ir_value *ir_out(ir_graph *g, const ir_node *n, int i);

/* Value v becomes the sequence of the n tensors elems[] (copied into the arena), of
 * element type dt (IR_VAL_SEQ, no producer). */
void ir_set_seq(ir_graph *g, int v, const int *elems, int n, ir_dtype dt);
/* Value v becomes an optional without a value (IR_VAL_NONE, no producer). */
void ir_set_none(ir_graph *g, int v);

/* Replace every use of value `from` (node inputs, graph outputs) by `to`. */
void ir_replace_uses(ir_graph *g, int from, int to);
/* Value `to` takes the place of `from`: its uses (ir_replace_uses) and its name (from
 * gets to's; ir_compact, which drops from once unused, rebuilds the name map). */
void ir_take_output(ir_graph *g, int to, int from);
/* Recompute consumers (use_off/n_uses/use_list). */
void ir_rebuild_uses(ir_graph *g);
/* Topologically sort live nodes (stable: file order where free). Returns 0, or reports
 * a cycle (naming a node on it) and returns -1. */
int ir_toposort(ir_graph *g);
/* Drop dead nodes and values no live node or output uses; keeps indices dense. */
void ir_compact(ir_graph *g);
/* Dead code: visiting the (topologically sorted) live nodes from the last, mark dead
 * every node none of whose outputs is needed, and mark the inputs of the others needed.
 * need[n_values] is seeded by the caller (graph outputs and whatever else must stay).
 * Returns the number of nodes marked dead. */
int ir_remove_dead(ir_graph *g, char *need);

/* Constant access (values of kind IR_VAL_CONST). Element i converted to int64/double.
 * Returns 0 on success, -1 if v is not a constant of a numeric dtype or i out of range. */
int ir_const_i64(const ir_value *v, int64_t i, int64_t *out);
int ir_const_f64(const ir_value *v, int64_t i, double *out);

/* Register an mmapped file to be unmapped by ir_graph_free: the model (file NULL) or
 * an external data file (its path relative to the model's folder). */
void ir_graph_add_mapping(ir_graph *g, void *addr, size_t len, const char *file);
/* Where bytes p[0..n) of a constant lie in the model's files: 0 with *file (NULL for the
 * model file) and *offset, or -1 when they are not in a mapped file (folded, or read
 * from typed fields). */
int ir_graph_locate(const ir_graph *g, const void *p, size_t n, const char **file, uint64_t *offset);
/* The model file's bytes (NULL if the graph was not loaded from a file). */
const void *ir_graph_model_bytes(const ir_graph *g, size_t *len);

/* Copy constant v's nbytes of raw data, in the order of its own dims (data_nchw
 * permuted; zero_init: zeros), into dst. */
void ir_const_copy(const ir_value *v, void *dst);

/* Size in bytes of a static tensor, -1 on overflow or unknown. */
int64_t ir_value_bytes(const ir_value *v);
/* The batch: dim 0 of the first graph input that has a dim 0, or `none` when no input has. */
int64_t ir_graph_batch(const ir_graph *g, int64_t none);

#endif
