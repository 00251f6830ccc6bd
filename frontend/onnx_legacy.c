/* frontend/onnx_legacy.c - opset 1 to 6 nodes in their opset 7 form (see onnx_legacy.h).
 * The differences were listed with onnx.defs.get_schema(op, max_inclusive_version=N)
 * over the rows of ir/ops.def. */
#include "frontend/onnx_legacy.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/diag.h"

/* Nodes added here are of opset 15: Shape's 'start' attribute. */
#define NEW_OPSET 15

static void drop_attr(ir_node *n, const char *name) {
  for (int i = 0; i < n->n_attr;)
    if (!strcmp(n->attr[i].name, name)) {
      memmove(&n->attr[i], &n->attr[i + 1], sizeof(ir_attr) * (size_t)(n->n_attr - i - 1));
      n->n_attr--;
    } else {
      i++;
    }
}

/* A whole number (|x| < 2^53) held by a one-element constant v; 0 when it is not. */
static int const_whole(const ir_graph *g, int v, int64_t *out) {
  double x;
  if (v < 0 || g->values[v].kind != IR_VAL_CONST || ir_shape_numel(&g->values[v].shape) != 1 ||
      ir_const_f64(&g->values[v], 0, &x) || x != floor(x) || fabs(x) >= 9007199254740992.0)
    return 0;
  *out = (int64_t)x;
  return 1;
}

ir_op onnx_legacy_op(const char *domain, const char *op_type) {
  if (domain && *domain && strcmp(domain, "ai.onnx")) return IR_OP_UNKNOWN;
  if (!strcmp(op_type, "Scatter")) return IR_OP_ScatterElements;
  return IR_OP_UNKNOWN;
}

int onnx_legacy_attrs(ir_graph *g, int node) {
  ir_node *n = &g->nodes[node];
  ir_attr *a;
  if (n->op == IR_OP_UNKNOWN || n->opset >= 7) return 0;
  drop_attr(n, "consumed_inputs");
  switch (n->op) {
    case IR_OP_Cast: /* Cast-1 names the type */
      if ((a = (ir_attr *)ir_attr_find(n, "to")) && a->type == IR_ATTR_STRING) {
        int dt = ir_dtype_parse(a->s);
        if (dt <= 0) {
          char b[64];
          ir_error_node(g, node, "attribute 'to' is '%s', which names no data type",
                        ir_printable(a->s, 40, b, sizeof b));
          return -1;
        }
        a->type = IR_ATTR_INT;
        a->i = dt;
      }
      break;
    case IR_OP_LpPool:
    case IR_OP_GlobalLpPool: /* p is a float in opset 1, an int since 2 */
      if ((a = (ir_attr *)ir_attr_find(n, "p")) && a->type == IR_ATTR_FLOAT) {
        if (!(a->f >= 1 && a->f <= 1e6f && a->f == floorf(a->f))) {
          ir_error_node(g, node, "attribute 'p' is %g: pipecc supports whole-number p only", (double)a->f);
          return -1;
        }
        a->type = IR_ATTR_INT;
        a->i = (int64_t)a->f;
      }
      break;
    case IR_OP_Selu: /* the defaults of Selu-1, rounded differently from Selu-6's */
      if (n->opset < 6) {
        if (!ir_attr_find(n, "alpha")) ir_node_add_attr(g, node, "alpha", IR_ATTR_FLOAT)->f = 1.6732f;
        if (!ir_attr_find(n, "gamma")) ir_node_add_attr(g, node, "gamma", IR_ATTR_FLOAT)->f = 1.0507f;
      }
      break;
    case IR_OP_Concat: /* required since opset 4 */
      if (n->opset < 4 && !ir_attr_find(n, "axis")) ir_node_add_attr(g, node, "axis", IR_ATTR_INT)->i = 1;
      break;
    case IR_OP_Pad: /* Pad-1's paddings are Pad-2's pads, same order */
      if (n->opset < 2 && !ir_attr_find(n, "pads") && (a = (ir_attr *)ir_attr_find(n, "paddings"))) a->name = "pads";
      break;
    case IR_OP_Split: /* Split-1 gives axis no default (Split-2: 0) */
      if (n->opset < 2 && !ir_attr_find(n, "axis")) {
        ir_error_node(g, node, "Split-1 without attribute 'axis' (opset 1 gives it no default)");
        return -1;
      }
      break;
    case IR_OP_Upsample: /* Upsample-1: 4-D NCHW, two scales */
      if (!ir_attr_find(n, "scales")) {
        const ir_attr *h = ir_attr_find(n, "height_scale"), *w = ir_attr_find(n, "width_scale");
        if (!h || !w || h->type != IR_ATTR_FLOAT || w->type != IR_ATTR_FLOAT) {
          ir_error_node(g, node, "Upsample-1 needs float attributes 'height_scale' and 'width_scale'");
          return -1;
        }
        float hs = h->f, ws = w->f;
        drop_attr(n, "height_scale");
        drop_attr(n, "width_scale");
        a = ir_node_add_attr(g, node, "scales", IR_ATTR_FLOATS);
        a->n = 4;
        a->floats = ir_alloc_array(g->arena, 4, sizeof(float));
        a->floats[0] = a->floats[1] = 1;
        a->floats[2] = hs;
        a->floats[3] = ws;
      }
      break;
    case IR_OP_BatchNormalization:
    case IR_OP_Dropout:
      /* is_test defaults to 0 (training), yet the ONNX version converter, moving a model
       * to opset 7, takes an absent is_test for inference and refuses an explicit 0 */
      if (ir_attr_find(n, "is_test") && ir_attr_int(n, "is_test", 1) == 0) {
        ir_error_node(g, node,
                      "is_test=0 (the training mode of opset < 7) is not supported: set is_test=1 or leave it out");
        return -1;
      }
      drop_attr(n, "is_test");
      break;
    case IR_OP_Gemm: /* C broadcasts unidirectionally since opset 7: broadcast=0 is the narrower case */
      drop_attr(n, "broadcast");
      break;
    case IR_OP_RNN:
    case IR_OP_GRU:
    case IR_OP_LSTM: /* Y is produced when the node names it */ drop_attr(n, "output_sequence"); break;
    default: break;
  }
  return 0;
}

/* The output of a node added for legacy node `at` (named after it, its file index for
 * messages). Adds a node: pointers into g->nodes move. */
static int add_node(ir_graph *g, int at, ir_op op, const char *what, const int *in, int n_in) {
  int index = g->nodes[at].index;
  const char *name = ir_sprintf(g->arena, "%.64s/legacy_%s", g->nodes[at].name, what);
  int out = ir_add_value(g, name, IR_VAL_ACT, IR_UNDEFINED);
  int id = ir_add_node(g, op, name, in, n_in, &out, 1);
  g->nodes[id].opset = NEW_OPSET;
  g->nodes[id].index = index;
  return out;
}

static int add_i64(ir_graph *g, int at, const char *what, const int64_t *v, int n) {
  ir_shape s = {0};
  s.rank = 1;
  s.dims[0] = n;
  return ir_add_const(g, ir_sprintf(g->arena, "%.64s/legacy_%s", g->nodes[at].name, what), IR_INT64, &s, v,
                      sizeof(int64_t) * (size_t)n);
}

/* [1] * (rank(x) - start), start < 0 counting from the end, clamped as Shape-15 clamps:
 * Shape(x, start) -> its length -> that many ones. Folds once x's rank is known. */
static int ones_tail(ir_graph *g, int at, int x, int64_t start) {
  int dims = add_node(g, at, IR_OP_Shape, "tail_dims", &x, 1);
  ir_node_add_attr(g, g->values[dims].producer, "start", IR_ATTR_INT)->i = start;
  int len = add_node(g, at, IR_OP_Shape, "tail_len", &dims, 1);
  const int64_t one = 1;
  int v = add_i64(g, at, "one", &one, 1);
  int ones = add_node(g, at, IR_OP_ConstantOfShape, "tail_ones", &len, 1);
  ir_node_add_attr(g, g->values[ones].producer, "value", IR_ATTR_TENSOR)->tensor = v;
  return ones;
}

/* Legacy broadcasting of B onto A from 'axis' = numpy broadcasting of B reshaped to
 * B's dims followed by rank(A) - axis - rank(B) ones: Shape(A, axis) has rank(B) + that
 * many dims, so the ones are a Slice from rank(B) of as many ones as it has. */
static int legacy_broadcast(ir_graph *g, int node) {
  ir_node *n = &g->nodes[node];
  const ir_attr *ax = ir_attr_find(n, "axis");
  int bc = ir_attr_int(n, "broadcast", 0) != 0, has_axis = ax && ax->type == IR_ATTR_INT;
  int64_t axis = has_axis ? ax->i : 0;
  drop_attr(n, "broadcast");
  drop_attr(n, "axis");
  if (!bc || !has_axis || n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0) return 0;
  int a = n->in[0], b = n->in[1];
  int bdims = add_node(g, node, IR_OP_Shape, "b_dims", &b, 1);
  int brank = add_node(g, node, IR_OP_Shape, "b_rank", &bdims, 1);
  const int64_t end = INT64_MAX;
  int sl[3] = {ones_tail(g, node, a, axis), brank, add_i64(g, node, "end", &end, 1)};
  int cat[2] = {bdims, add_node(g, node, IR_OP_Slice, "b_ones", sl, 3)};
  int shape = add_node(g, node, IR_OP_Concat, "b_shape", cat, 2);
  ir_node_add_attr(g, g->values[shape].producer, "axis", IR_ATTR_INT)->i = 0;
  int rs[2] = {b, shape};
  int b2 = add_node(g, node, IR_OP_Reshape, "b", rs, 2);
  g->nodes[node].in[1] = b2;
  return 0;
}

/* Reshape-1: the 'shape' attribute becomes Reshape-5's constant input. */
static int reshape_attr(ir_graph *g, int node) {
  ir_node *n = &g->nodes[node];
  const int64_t *s;
  int ns = ir_attr_ints(n, "shape", &s);
  if (n->n_in >= 2) return 0; /* already the opset 5 form */
  if (ns < 0) {
    ir_error_node(g, node, "Reshape-1 needs attribute 'shape'");
    return -1;
  }
  int sv = add_i64(g, node, "shape", s, ns);
  n = &g->nodes[node];
  int *in = ir_alloc_array(g->arena, 2, sizeof(int));
  in[0] = n->n_in ? n->in[0] : -1;
  in[1] = sv;
  n->in = in;
  n->n_in = 2;
  drop_attr(n, "shape");
  return 0;
}

/* Split-1: the lengths as a second input (a constant) become the 'split' attribute. */
static int split_input(ir_graph *g, int node) {
  ir_node *n = &g->nodes[node];
  if (n->n_in < 2 || n->in[1] < 0) return 0;
  const ir_value *v = &g->values[n->in[1]];
  int64_t cnt = ir_shape_numel(&v->shape);
  if (ir_attr_find(n, "split")) {
    ir_error_node(g, node, "Split-1 gives 'split' both as an attribute and as input 1");
    return -1;
  }
  if (v->kind != IR_VAL_CONST || v->shape.rank != 1 || cnt < 1 || cnt > 4096) {
    ir_error_node(g, node, "Split-1 input 'split' must be a constant list of lengths");
    return -1;
  }
  int64_t *len = ir_alloc_array(g->arena, (size_t)cnt, sizeof(int64_t));
  for (int64_t i = 0; i < cnt; i++) {
    double x;
    if (ir_const_f64(v, i, &x) || x != floor(x) || x < 0 || x > 9007199254740992.0) {
      ir_error_node(g, node, "Split-1 input 'split' must hold whole, non-negative lengths");
      return -1;
    }
    len[i] = (int64_t)x;
  }
  ir_attr *a = ir_node_add_attr(g, node, "split", IR_ATTR_INTS);
  a->n = (int)cnt;
  a->ints = len;
  g->nodes[node].n_in = 1;
  return 0;
}

/* Tile-1 (input, tiles, axis): Tile-6's repeats = ones, tiles at axis, ones to the rank. */
static int tile_inputs(ir_graph *g, int node) {
  ir_node *n = &g->nodes[node];
  int64_t tiles, axis;
  if (n->n_in != 3 || n->in[0] < 0) {
    ir_error_node(g, node, "Tile-1 takes three inputs (input, tiles, axis), it has %d", n->n_in);
    return -1;
  }
  if (!const_whole(g, n->in[1], &tiles) || !const_whole(g, n->in[2], &axis)) {
    ir_error_node(g, node, "Tile-1 inputs 'tiles' and 'axis' must be constants holding one whole number each");
    return -1;
  }
  if (tiles < 0 || axis < 0 || axis >= IR_MAX_RANK) {
    ir_error_node(g, node, "Tile-1: tiles %lld at axis %lld is out of range", (long long)tiles, (long long)axis);
    return -1;
  }
  int64_t head[IR_MAX_RANK];
  for (int i = 0; i < axis; i++) head[i] = 1;
  head[axis] = tiles;
  int x = n->in[0];
  int cat[2] = {add_i64(g, node, "repeats_head", head, (int)axis + 1), ones_tail(g, node, x, axis + 1)};
  int rep = add_node(g, node, IR_OP_Concat, "repeats", cat, 2);
  ir_node_add_attr(g, g->values[rep].producer, "axis", IR_ATTR_INT)->i = 0;
  n = &g->nodes[node];
  n->in[1] = rep;
  n->n_in = 2;
  return 0;
}

int onnx_legacy_inputs(ir_graph *g, int node) {
  const ir_node *n = &g->nodes[node];
  if (n->op == IR_OP_UNKNOWN || n->opset >= 7) return 0;
  switch (n->op) {
    case IR_OP_Add:
    case IR_OP_Sub:
    case IR_OP_Mul:
    case IR_OP_Div:
    case IR_OP_Pow:
    case IR_OP_And:
    case IR_OP_Or:
    case IR_OP_Xor:
    case IR_OP_Equal:
    case IR_OP_Less:
    case IR_OP_Greater: return legacy_broadcast(g, node);
    case IR_OP_Reshape: return n->opset < 5 ? reshape_attr(g, node) : 0;
    case IR_OP_Split: return n->opset < 2 ? split_input(g, node) : 0;
    case IR_OP_Tile: return n->opset < 6 ? tile_inputs(g, node) : 0;
    default: return 0;
  }
}
