#include "frontend/onnx_load.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/onnx_legacy.h"
#include "frontend/wire.h"
#include "ir/diag.h"

#define MAX_FUNCTION_DEPTH 16
/* Inlining budget: a model whose functions call each other several times per level
 * would otherwise expand exponentially (a "billion laughs" model). */
#define MAX_INLINED_NODES (1 << 18)
#define MAX_INLINE_ARENA ((size_t)256 << 20)
/* If/Loop/Scan bodies nested deeper than this are refused. */
#define MAX_BODY_DEPTH 16

typedef struct ext_file {
  const char *rel;
  const uint8_t *data;
  size_t len;
  struct ext_file *next;
} ext_file;

/* A node waiting for its inputs to be resolved by name. */
typedef struct {
  int node;
  const char **in_names;
} pending;

/* Renaming scope for an inlined function body. */
typedef struct scope {
  const struct scope *parent;
  const Onnx__FunctionProto *fn;
  const Onnx__NodeProto *call; /* the calling node */
  const char *prefix;          /* unique prefix for internal names */
  const char *const *actual_in, *const *actual_out;
  const struct scope *call_scope; /* scope the call itself lives in */
  int depth;
} scope;

typedef struct {
  ir_graph *g;
  const uint8_t *base; /* the original bytes (raw_data lives here) */
  size_t base_len;
  const wire_result *wire;
  const Onnx__ModelProto *m;
  const char *dir; /* NULL: external data refused */
  ext_file *ext;
  pending *pend;
  int n_pend, cap_pend;
  /* unsupported ops, reported together */
  int *unsupported;
  int n_unsupported, cap_unsupported;
  /* nodes already reported (not checked again for arity) */
  int *bad;
  int n_bad, cap_bad;
  int fn_counter;
  int n_inlined;
  size_t arena_at_start;
  int inline_failed; /* reported: recursion or budget; stop converting */
  /* converting a body (If/Loop/Scan): how deep, and the values it captures */
  int body_depth;
  int *captured;
  int n_captured, cap_captured;
} ctx;

/* ---------- helpers ---------- */

static void push_int(int **a, int *n, int *cap, int v) {
  if (*n == *cap) {
    *cap = *cap ? *cap * 2 : 16;
    *a = ir_xrealloc(*a, sizeof(int) * (size_t)*cap);
  }
  (*a)[(*n)++] = v;
}
static void mark_bad(ctx *c, int node) { push_int(&c->bad, &c->n_bad, &c->cap_bad, node); }

static int opset_of(ctx *c, const char *domain) {
  int def = !domain || !*domain || !strcmp(domain, "ai.onnx");
  for (int i = 0; i < c->g->n_opsets; i++) {
    const char *d = c->g->opsets[i].domain;
    int ddef = !*d || !strcmp(d, "ai.onnx");
    if ((def && ddef) || (!def && !strcmp(d, domain))) return (int)c->g->opsets[i].version;
  }
  return -1;
}

static const Onnx__FunctionProto *find_function(ctx *c, const char *domain, const char *name) {
  for (size_t i = 0; i < c->m->n_functions; i++) {
    const Onnx__FunctionProto *f = c->m->functions[i];
    if (!strcmp(f->name, name) && !strcmp(f->domain ? f->domain : "", domain ? domain : "")) return f;
  }
  return NULL;
}

/* Map a name used inside a (possibly nested) function body to the graph-level name. */
static const char *map_name(ctx *c, const scope *s, const char *name) {
  if (!s || !*name) return name;
  for (size_t i = 0; i < s->fn->n_input; i++)
    if (!strcmp(s->fn->input[i], name)) return s->actual_in[i];
  for (size_t i = 0; i < s->fn->n_output; i++)
    if (!strcmp(s->fn->output[i], name)) return s->actual_out[i];
  return ir_sprintf(c->g->arena, "%s%s", s->prefix, name);
}

static int shape_from_dims(ctx *c, int node, const char *what, const int64_t *dims, size_t n, ir_shape *sh) {
  if (n > IR_MAX_RANK) {
    char nm[96];
    ir_error_node(c->g, node, "tensor '%s' has rank %zu; pipecc supports rank up to %d",
                  ir_printable(what, 60, nm, sizeof nm), n, IR_MAX_RANK);
    return -1;
  }
  sh->rank = (int)n;
  for (size_t i = 0; i < n; i++) {
    if (dims[i] < 0) {
      char nm[96];
      ir_error_node(c->g, node, "tensor '%s' has a negative dimension %lld", ir_printable(what, 60, nm, sizeof nm),
                    (long long)dims[i]);
      return -1;
    }
    sh->dims[i] = dims[i];
    sh->sym[i] = NULL;
  }
  if (ir_shape_numel(sh) < 0) {
    char nm[96];
    ir_error_node(c->g, node, "tensor '%s': the product of its dimensions overflows",
                  ir_printable(what, 60, nm, sizeof nm));
    return -1;
  }
  return 0;
}

/* Resolve and map an external data file; NULL after reporting. */
static const ext_file *open_external(ctx *c, int node, const char *tname, const char *loc) {
  char nm[96], lc[200];
  ir_printable(tname, 60, nm, sizeof nm);
  ir_printable(loc, 120, lc, sizeof lc);
  for (ext_file *e = c->ext; e; e = e->next)
    if (!strcmp(e->rel, loc)) return e;
  if (!c->dir) {
    ir_error_node(c->g, node, "tensor '%s': external data '%s' cannot be read from an in-memory model", nm, lc);
    return NULL;
  }
  if (!*loc || loc[0] == '/') {
    ir_error_node(c->g, node,
                  "tensor '%s': external data location '%s' must be a relative path inside the model's folder", nm, lc);
    return NULL;
  }
  /* no '..' component at all: a location names a file below the model's folder */
  for (const char *p = loc; *p;) {
    const char *q = strchr(p, '/');
    size_t len = q ? (size_t)(q - p) : strlen(p);
    if ((len == 2 && p[0] == '.' && p[1] == '.') || memchr(p, '\\', len)) {
      ir_error_node(c->g, node, "tensor '%s': external data location '%s' escapes the model's folder", nm, lc);
      return NULL;
    }
    p += len + (q ? 1 : 0);
    if (!q) break;
  }
  char *full = ir_sprintf(c->g->arena, "%s/%s", c->dir, loc);
  char rdir[PATH_MAX], rfile[PATH_MAX];
  if (!realpath(c->dir, rdir)) {
    ir_error_node(c->g, node, "tensor '%s': cannot resolve the model's folder: %s", nm, strerror(errno));
    return NULL;
  }
  if (!realpath(full, rfile)) {
    ir_error_node(c->g, node, "tensor '%s': external data file '%s' not found: %s", nm, lc, strerror(errno));
    return NULL;
  }
  size_t dl = strlen(rdir);
  if (strncmp(rfile, rdir, dl) != 0 || (rfile[dl] != '/' && strcmp(rdir, "/") != 0)) {
    ir_error_node(c->g, node, "tensor '%s': external data file '%s' resolves outside the model's folder (symlink?)", nm,
                  lc);
    return NULL;
  }
  /* O_NONBLOCK: opening a FIFO must not wait for a writer */
  int fd = open(rfile, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ir_error_node(c->g, node, "tensor '%s': external data '%s' is not a readable regular file", nm, lc);
    if (fd >= 0) close(fd);
    return NULL;
  }
  ext_file *e = ir_alloc(c->g->arena, sizeof *e);
  e->rel = ir_strdup(c->g->arena, loc);
  e->len = (size_t)st.st_size;
  if (e->len) {
    void *p = mmap(NULL, e->len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ir_error_node(c->g, node, "tensor '%s': cannot map external data '%s': %s", nm, lc, strerror(errno));
      close(fd);
      return NULL;
    }
    ir_graph_add_mapping(c->g, p, e->len, loc);
    e->data = p;
  } else {
    e->data = (const uint8_t *)"";
  }
  close(fd);
  e->next = c->ext;
  c->ext = e;
  return e;
}

static int parse_u64(const char *s, uint64_t *v) {
  if (!*s) return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-') return -1;
  *v = x;
  return 0;
}

/* Fill a constant value from a TensorProto. raw: this tensor's raw_data cut out of the
 * wire (initializers), or NULL to use t->raw_data. Returns the value index or -1. */
static int tensor_value(ctx *c, int node, const Onnx__TensorProto *t, const char *name, const wire_span *raw,
                        int is_init) {
  ir_graph *g = c->g;
  char nm[96];
  ir_printable(name, 60, nm, sizeof nm);
  int dt = t->has_data_type ? t->data_type : 0;
  if (dt <= 0 || dt >= IR_DTYPE_COUNT || dt == IR_STRING || dt == IR_COMPLEX64 || dt == IR_COMPLEX128) {
    ir_error_node(g, node, "tensor '%s' has data type %d (%s), which pipecc does not support", nm, dt,
                  ir_unheld_dtype_name(dt));
    return -1;
  }
  if (t->segment) {
    ir_error_node(g, node, "tensor '%s' is segmented, which pipecc does not support", nm);
    return -1;
  }
  ir_shape sh;
  if (shape_from_dims(c, node, name, t->dims, t->n_dims, &sh)) return -1;
  int64_t numel = ir_shape_numel(&sh);
  size_t es = ir_dtype_size((ir_dtype)dt);
  if ((uint64_t)numel > SIZE_MAX / es || (uint64_t)numel * es > (uint64_t)INT64_MAX) {
    ir_error_node(g, node, "tensor '%s': byte size overflows", nm);
    return -1;
  }
  size_t nbytes = (size_t)numel * es;
  /* int4, uint4 and float4e2m1 are packed two to a byte in the file, int2 and uint2 four,
   * the float6 types four in three bytes, low bits first (ir_dtype_packed_bits); pipecc
   * holds them one value per byte (unpacked below) */
  int packed = ir_dtype_packed_bits((ir_dtype)dt);
  size_t fbytes = packed ? ((size_t)numel * (size_t)packed + 7) / 8 : nbytes;
  const void *data = NULL;

  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    const char *loc = NULL;
    uint64_t off = 0, len = UINT64_MAX;
    for (size_t i = 0; i < t->n_external_data; i++) {
      const Onnx__StringStringEntryProto *kv = t->external_data[i];
      if (!strcmp(kv->key, "location")) loc = kv->value;
      else if (!strcmp(kv->key, "offset")) {
        if (parse_u64(kv->value, &off)) {
          char vb[64];
          ir_error_node(g, node, "tensor '%s': external data offset '%s' is not a number", nm,
                        ir_printable(kv->value, 40, vb, sizeof vb));
          return -1;
        }
      } else if (!strcmp(kv->key, "length")) {
        if (parse_u64(kv->value, &len)) {
          char vb[64];
          ir_error_node(g, node, "tensor '%s': external data length '%s' is not a number", nm,
                        ir_printable(kv->value, 40, vb, sizeof vb));
          return -1;
        }
      }
    }
    if (!loc) {
      ir_error_node(g, node, "tensor '%s': external data without a location", nm);
      return -1;
    }
    const ext_file *e = open_external(c, node, name, loc);
    if (!e) return -1;
    if (len == UINT64_MAX) len = fbytes;
    if (len != fbytes) {
      ir_error_node(g, node, "tensor '%s': external data length %llu does not match its shape (%zu bytes)", nm,
                    (unsigned long long)len, fbytes);
      return -1;
    }
    if (off > e->len || len > e->len - off) {
      char lc[120];
      ir_error_node(g, node,
                    "tensor '%s': external data offset %llu + length %llu runs past the end of '%s' (%zu bytes)", nm,
                    (unsigned long long)off, (unsigned long long)len, ir_printable(loc, 80, lc, sizeof lc), e->len);
      return -1;
    }
    data = e->data + off;
  } else if ((raw && raw->present) || (!raw && t->has_raw_data)) {
    size_t rl = raw ? raw->len : t->raw_data.len;
    if (rl != fbytes) {
      ir_error_node(g, node, "tensor '%s': raw_data has %zu bytes, its shape and type need %zu", nm, rl, fbytes);
      return -1;
    }
    data = raw ? (const void *)(c->base + raw->offset) : (const void *)t->raw_data.data;
    if (!raw && nbytes && !packed) { /* t is freed with the ModelProto: keep a copy */
      void *d = ir_alloc(g->arena, nbytes);
      memcpy(d, data, nbytes);
      data = d;
    }
  } else {
    /* typed fields */
    size_t have;
    switch (dt) {
      case IR_FLOAT: have = t->n_float_data; break;
      case IR_INT64: have = t->n_int64_data; break;
      case IR_DOUBLE: have = t->n_double_data; break;
      case IR_UINT32:
      case IR_UINT64: have = t->n_uint64_data; break;
      default: have = t->n_int32_data; break;
    }
    if (have != (packed ? fbytes : (size_t)numel)) {
      ir_error_node(g, node, "tensor '%s' holds %zu values, its shape needs %lld", nm, have,
                    (long long)(packed ? fbytes : (size_t)numel));
      return -1;
    }
    uint8_t *d = ir_alloc(g->arena, nbytes);
    for (size_t i = 0; i < have; i++) {
      uint8_t *o = d + i * es;
      switch (dt) {
        case IR_FLOAT: memcpy(o, &t->float_data[i], 4); break;
        case IR_INT64: memcpy(o, &t->int64_data[i], 8); break;
        case IR_DOUBLE: memcpy(o, &t->double_data[i], 8); break;
        case IR_UINT32: {
          uint32_t x = (uint32_t)t->uint64_data[i];
          memcpy(o, &x, 4);
          break;
        }
        case IR_UINT64: memcpy(o, &t->uint64_data[i], 8); break;
        case IR_INT32: memcpy(o, &t->int32_data[i], 4); break;
        case IR_INT16:
        case IR_UINT16:
        case IR_FLOAT16:
        case IR_BFLOAT16: {
          uint16_t x = (uint16_t)t->int32_data[i];
          memcpy(o, &x, 2);
          break;
        }
        default: *o = (uint8_t)t->int32_data[i]; break; /* INT8, UINT8, BOOL, float8 bit patterns, packed bytes */
      }
    }
    data = d;
  }
  if (packed && numel) {
    const uint8_t *p = data;
    int8_t *u = ir_alloc(g->arena, nbytes);
    int sgn = dt == IR_INT4 || dt == IR_INT2; /* sign-extended */
    for (int64_t i = 0; i < numel; i++) {
      size_t bit = (size_t)i * (size_t)packed;
      unsigned w = p[bit / 8] | (bit / 8 + 1 < fbytes ? (unsigned)p[bit / 8 + 1] << 8 : 0u);
      int q = (int)((w >> (bit % 8)) & ((1u << packed) - 1u));
      u[i] = (int8_t)(sgn && q >= 1 << (packed - 1) ? q - (1 << packed) : q);
    }
    data = u;
  }
  int v = ir_add_value(g, name, IR_VAL_CONST, (ir_dtype)dt);
  if (strcmp(g->values[v].name, name) != 0 && is_init) {
    ir_error_node(g, node, "tensor '%s' is defined twice", nm);
    return -1;
  }
  g->values[v].shape = sh;
  g->values[v].data = data;
  g->values[v].nbytes = nbytes;
  g->values[v].is_initializer = is_init;
  return v;
}

static int value_info_input(ctx *c, const Onnx__ValueInfoProto *vi) {
  ir_graph *g = c->g;
  char nm[96];
  ir_printable(vi->name, 60, nm, sizeof nm);
  if (!*vi->name) {
    ir_error(g, "a graph input has no name");
    return -1;
  }
  if (ir_find_value(g, vi->name) >= 0) {
    ir_error(g, "graph input '%s' is defined twice", nm);
    return -1;
  }
  const Onnx__TypeProto *tp = vi->type;
  int seq = 0, opt = 0;
  if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE && tp->optional_type &&
      tp->optional_type->elem_type) { /* holds its value unless --none names it (passes/bind.c) */
    tp = tp->optional_type->elem_type;
    opt = 1;
  }
  if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && tp->sequence_type &&
      tp->sequence_type->elem_type) { /* a sequence of tensors: the element's type */
    tp = tp->sequence_type->elem_type;
    seq = 1;
  }
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) {
    ir_error(g,
             "graph input '%s' is not a tensor, a sequence of tensors or an optional of one (maps are not supported)",
             nm);
    return -1;
  }
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  int dt = tt->has_elem_type ? tt->elem_type : 0;
  if (dt <= 0 || dt >= IR_DTYPE_COUNT || dt == IR_STRING) {
    ir_error(g, "graph input '%s' has element type %d (%s), which pipecc does not support", nm, dt,
             ir_unheld_dtype_name(dt));
    return -1;
  }
  int v = ir_add_value(g, vi->name, IR_VAL_INPUT, (ir_dtype)dt);
  g->values[v].is_optional = opt;
  if (seq) { /* its length comes from --seq (passes/bind.c); the shape is the elements' */
    g->values[v].kind = IR_VAL_SEQ;
    g->values[v].seq_n = -1;
  }
  ir_shape *sh = &g->values[v].shape;
  if (tt->shape) {
    if (tt->shape->n_dim > IR_MAX_RANK) {
      ir_error(g, "graph input '%s' has rank %zu; pipecc supports rank up to %d", nm, tt->shape->n_dim, IR_MAX_RANK);
      return -1;
    }
    sh->rank = (int)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
      const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
      if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
        if (d->dim_value < 0) {
          ir_error(g, "graph input '%s' has a negative dimension %lld", nm, (long long)d->dim_value);
          return -1;
        }
        sh->dims[i] = d->dim_value;
      } else {
        sh->dims[i] = IR_DIM_SYM;
        sh->sym[i] = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && *d->dim_param
                         ? ir_strdup(g->arena, d->dim_param)
                         : NULL;
      }
    }
  }
  return v;
}

/* A body's formal input: typed or not (a Loop body's carried values may leave the type
 * out); its actual value decides when the body is expanded (passes/lower/control.c). */
static int body_input(ctx *c, const Onnx__ValueInfoProto *vi) {
  ir_graph *g = c->g;
  char nm[96];
  ir_printable(vi->name, 60, nm, sizeof nm);
  if (!*vi->name) {
    ir_error(g, "a body input has no name");
    return -1;
  }
  if (ir_find_value(g, vi->name) >= 0) {
    ir_error(g, "body input '%s' is defined twice", nm);
    return -1;
  }
  const Onnx__TypeProto *tp = vi->type;
  int dt = IR_UNDEFINED;
  if (tp && (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ||
             tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE))
    tp = NULL; /* a sequence (a Loop's carried list) or an optional: its actual value decides */
  if (tp && tp->value_case != ONNX__TYPE_PROTO__VALUE__NOT_SET) {
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) {
      ir_error(g, "body input '%s' is not a tensor, a sequence or an optional (maps are not supported)", nm);
      return -1;
    }
    if (tp->tensor_type->has_elem_type) dt = tp->tensor_type->elem_type;
    if (dt < 0 || dt >= IR_DTYPE_COUNT || dt == IR_STRING) {
      ir_error(g, "body input '%s' has element type %d (%s), which pipecc does not support", nm, dt,
               ir_unheld_dtype_name(dt));
      return -1;
    }
  }
  int v = ir_add_value(g, vi->name, IR_VAL_INPUT, (ir_dtype)dt);
  g->values[v].shape.rank = -1;
  return v;
}

/* A name a body reads but does not define: a value of an enclosing graph, which the
 * body takes as a captured input (ir_graph.n_captured). */
static int capture(ctx *c, const char *name) {
  int v = ir_add_value(c->g, name, IR_VAL_INPUT, IR_UNDEFINED);
  c->g->values[v].shape.rank = -1;
  push_int(&c->captured, &c->n_captured, &c->cap_captured, v);
  return v;
}

static int convert_graph(ctx *c, const Onnx__GraphProto *gp, int body);

/* Convert the body gp of node (If/Loop/Scan) into a graph of its own, owned by c->g. */
static ir_graph *load_body(ctx *c, int node, const Onnx__GraphProto *gp, const char *attr) {
  ir_graph *g = c->g;
  if (c->body_depth + 1 > MAX_BODY_DEPTH) {
    ir_error_node(g, node, "If/Loop/Scan bodies nest deeper than %d", MAX_BODY_DEPTH);
    return NULL;
  }
  ir_graph *b = ir_graph_new(g->path);
  b->dir = g->dir;
  g->bodies = ir_xrealloc(g->bodies, sizeof(ir_graph *) * (size_t)(g->n_bodies + 1));
  g->bodies[g->n_bodies++] = b;
  b->ir_version = g->ir_version;
  b->producer_name = g->producer_name;
  b->producer_version = g->producer_version;
  b->opsets = g->opsets;
  b->n_opsets = g->n_opsets;
  b->opset = g->opset;
  char nn[96];
  char on[96];
  b->diag_hint =
      ir_sprintf(b->arena, " (in %s '%s' of %s node %d '%s')", attr, ir_printable(gp->name, 40, nn, sizeof nn),
                 g->nodes[node].op_type, g->nodes[node].index, ir_printable(g->nodes[node].name, 40, on, sizeof on));
  ctx sub = {0};
  sub.g = b;
  sub.base = c->base;
  sub.base_len = c->base_len;
  sub.wire = c->wire;
  sub.m = c->m;
  sub.dir = c->dir;
  sub.body_depth = c->body_depth + 1;
  int rc = convert_graph(&sub, gp, 1);
  if (!rc) { /* the captured values follow the formal inputs */
    int nf = b->n_inputs;
    int *in = ir_alloc_array(b->arena, (size_t)(nf + sub.n_captured), sizeof(int));
    if (nf) memcpy(in, b->inputs, sizeof(int) * (size_t)nf);
    for (int k = 0; k < sub.n_captured; k++) in[nf + k] = sub.captured[k];
    b->inputs = in;
    b->n_inputs = nf + sub.n_captured;
    b->n_captured = sub.n_captured;
  }
  free(sub.pend);
  free(sub.unsupported);
  free(sub.bad);
  free(sub.captured);
  if (rc || b->n_errors) {
    g->n_errors += b->n_errors ? b->n_errors : 1;
    return NULL;
  }
  return b;
}

static void attr_convert(ctx *c, int node, const Onnx__AttributeProto *a, ir_attr *o) {
  ir_graph *g = c->g;
  o->name = ir_strdup(g->arena, a->name);
  o->tensor = -1;
  int type = a->has_type ? (int)a->type : 0;
  if (!type) { /* old producers leave type out: infer it */
    if (a->n_ints) type = IR_ATTR_INTS;
    else if (a->n_floats) type = IR_ATTR_FLOATS;
    else if (a->n_strings) type = IR_ATTR_STRINGS;
    else if (a->t) type = IR_ATTR_TENSOR;
    else if (a->g) type = IR_ATTR_GRAPH;
    else if (a->has_s) type = IR_ATTR_STRING;
    else if (a->has_f) type = IR_ATTR_FLOAT;
    else if (a->has_i) type = IR_ATTR_INT;
  }
  o->type = (ir_attr_type)type;
  switch (type) {
    case IR_ATTR_FLOAT: o->f = a->f; break;
    case IR_ATTR_INT: o->i = a->i; break;
    case IR_ATTR_STRING:
      o->s = ir_strndup(g->arena, (const char *)a->s.data, a->s.len);
      o->slen = a->s.len;
      break;
    case IR_ATTR_FLOATS:
      o->n = (int)a->n_floats;
      o->floats = ir_alloc_array(g->arena, a->n_floats, sizeof(float));
      if (a->n_floats) memcpy(o->floats, a->floats, a->n_floats * sizeof(float));
      break;
    case IR_ATTR_INTS:
      o->n = (int)a->n_ints;
      o->ints = ir_alloc_array(g->arena, a->n_ints, sizeof(int64_t));
      if (a->n_ints) memcpy(o->ints, a->ints, a->n_ints * sizeof(int64_t));
      break;
    case IR_ATTR_STRINGS:
      o->n = (int)a->n_strings;
      o->strings = ir_alloc_array(g->arena, a->n_strings, sizeof(char *));
      for (size_t i = 0; i < a->n_strings; i++)
        o->strings[i] = ir_strndup(g->arena, (const char *)a->strings[i].data, a->strings[i].len);
      break;
    case IR_ATTR_TENSOR:
      if (a->t) {
        const char *nm = ir_sprintf(g->arena, "%s/%s", g->nodes[node].name, a->name);
        o->tensor = tensor_value(c, node, a->t, nm, NULL, 0);
      }
      break;
    case IR_ATTR_GRAPH: /* bodies of the ops that have them; other ops are reported unsupported */
      if (a->g && (g->nodes[node].op == IR_OP_If || g->nodes[node].op == IR_OP_Loop ||
                   g->nodes[node].op == IR_OP_Scan || g->nodes[node].op == IR_OP_SequenceMap ||
                   g->nodes[node].op == IR_OP_FlexAttention))
        o->graph = load_body(c, node, a->g, o->name);
      else if (!a->g) ir_error_node(g, node, "attribute '%s' holds no graph", o->name);
      break;
    case IR_ATTR_TYPE_PROTO: /* Optional's 'type': an empty optional needs no more */
      if (g->nodes[node].op != IR_OP_Optional) {
        char an[96];
        ir_error_node(g, node, "attribute '%s' holds a type, which %s does not take",
                      ir_printable(a->name, 60, an, sizeof an), g->nodes[node].op_type);
      }
      break;
    default: {
      char an[96];
      ir_error_node(g, node, "attribute '%s' has unsupported type %d", ir_printable(a->name, 60, an, sizeof an), type);
    }
  }
}

/* The attribute types of the ONNX schemas of the supported ops, default domain, opsets
 * 7 to 21: each of these names has one type in all of them ("value" has two and is not
 * listed). Made with onnx.defs.get_schema over the rows of ir/ops.def; a new op whose
 * attribute shares a name here with another type must drop that name from the table.
 * Opsets 1 to 6 differ in 'p' (LpPool-1) and 'to' (Cast-1), which onnx_legacy_attrs
 * converts before the check. Sorted by name (bsearch). */
static const struct attr_type {
  const char *name;
  ir_attr_type type;
} attr_types[] = {
    {"allowzero", IR_ATTR_INT},
    {"alpha", IR_ATTR_FLOAT},
    {"antialias", IR_ATTR_INT},
    {"approximate", IR_ATTR_STRING},
    {"auto_pad", IR_ATTR_STRING},
    {"axes", IR_ATTR_INTS},
    {"axis", IR_ATTR_INT},
    {"batch_dims", IR_ATTR_INT},
    {"beta", IR_ATTR_FLOAT},
    {"bias", IR_ATTR_FLOAT},
    {"block_size", IR_ATTR_INT},
    {"blocksize", IR_ATTR_INT},
    {"ceil_mode", IR_ATTR_INT},
    {"coordinate_transformation_mode", IR_ATTR_STRING},
    {"count_include_pad", IR_ATTR_INT},
    {"cubic_coeff_a", IR_ATTR_FLOAT},
    {"detect_negative", IR_ATTR_INT},
    {"detect_positive", IR_ATTR_INT},
    {"dilations", IR_ATTR_INTS},
    {"direction", IR_ATTR_STRING},
    {"end", IR_ATTR_INT},
    {"ends", IR_ATTR_INTS},
    {"epsilon", IR_ATTR_FLOAT},
    {"exclude_outside", IR_ATTR_INT},
    {"exclusive", IR_ATTR_INT},
    {"extrapolation_value", IR_ATTR_FLOAT},
    {"fmod", IR_ATTR_INT},
    {"gamma", IR_ATTR_FLOAT},
    {"group", IR_ATTR_INT},
    {"ignore_index", IR_ATTR_INT},
    {"k", IR_ATTR_INT},
    {"keep_aspect_ratio_policy", IR_ATTR_STRING},
    {"keepdims", IR_ATTR_INT},
    {"kernel_shape", IR_ATTR_INTS},
    {"lambd", IR_ATTR_FLOAT},
    {"largest", IR_ATTR_INT},
    {"max", IR_ATTR_FLOAT},
    {"min", IR_ATTR_FLOAT},
    {"mode", IR_ATTR_STRING},
    {"momentum", IR_ATTR_FLOAT},
    {"nearest_mode", IR_ATTR_STRING},
    {"noop_with_empty_axes", IR_ATTR_INT},
    {"num_outputs", IR_ATTR_INT},
    {"output_dtype", IR_ATTR_INT},
    {"output_padding", IR_ATTR_INTS},
    {"output_shape", IR_ATTR_INTS},
    {"p", IR_ATTR_INT},
    {"pads", IR_ATTR_INTS},
    {"perm", IR_ATTR_INTS},
    {"ratio", IR_ATTR_FLOAT},
    {"reduction", IR_ATTR_STRING},
    {"reverse", IR_ATTR_INT},
    {"saturate", IR_ATTR_INT},
    {"scales", IR_ATTR_FLOATS},
    {"seed", IR_ATTR_INT},
    {"select_last_index", IR_ATTR_INT},
    {"size", IR_ATTR_INT},
    {"sorted", IR_ATTR_INT},
    {"spatial", IR_ATTR_INT},
    {"split", IR_ATTR_INTS},
    {"start", IR_ATTR_INT},
    {"starts", IR_ATTR_INTS},
    {"stash_type", IR_ATTR_INT},
    {"storage_order", IR_ATTR_INT},
    {"strides", IR_ATTR_INTS},
    {"to", IR_ATTR_INT},
    {"training_mode", IR_ATTR_INT},
    {"transA", IR_ATTR_INT},
    {"transB", IR_ATTR_INT},
    {"upper", IR_ATTR_INT},
};

static int cmp_attr_type(const void *k, const void *e) { return strcmp(k, ((const struct attr_type *)e)->name); }

static const char *attr_type_name(int t) {
  static const char *const names[] = {"undefined", "a float", "an int", "a string", "a tensor",
                                      "a graph",   "floats",  "ints",   "strings"};
  return t >= 0 && t <= IR_ATTR_STRINGS ? names[t] : "of another type";
}

/* A supported op's attribute of the wrong type (perm given as floats, say) is an error;
 * the passes would otherwise take it for absent and use the default. */
static void check_attr_type(ir_graph *g, int node, const ir_attr *a) {
  const struct attr_type *e =
      bsearch(a->name, attr_types, sizeof attr_types / sizeof *attr_types, sizeof *attr_types, cmp_attr_type);
  if (!e || e->type == a->type || a->type < IR_ATTR_FLOAT || a->type > IR_ATTR_STRINGS)
    return; /* odd types: reported */
  char an[96];
  ir_error_node(g, node, "attribute '%s' must be %s, it is %s", ir_printable(a->name, 60, an, sizeof an),
                attr_type_name(e->type), attr_type_name(a->type));
}

/* Find a caller attribute for ref_attr_name, walking out through nested scopes. */
static const Onnx__AttributeProto *resolve_ref(const scope *s, const char *ref) {
  for (; s; s = s->call_scope) {
    for (size_t i = 0; i < s->call->n_attribute; i++)
      if (!strcmp(s->call->attribute[i]->name, ref)) {
        const Onnx__AttributeProto *a = s->call->attribute[i];
        if (*a->ref_attr_name) {
          ref = a->ref_attr_name;
          break; /* continue in the outer scope */
        }
        return a;
      }
  }
  return NULL;
}

static void add_unsupported(ctx *c, int node) {
  if (c->n_unsupported == c->cap_unsupported) {
    c->cap_unsupported = c->cap_unsupported ? c->cap_unsupported * 2 : 16;
    c->unsupported = ir_xrealloc(c->unsupported, sizeof(int) * (size_t)c->cap_unsupported);
  }
  c->unsupported[c->n_unsupported++] = node;
}

static void add_nodes(ctx *c, Onnx__NodeProto **nodes, size_t n, const scope *s);

static void add_one_node(ctx *c, const Onnx__NodeProto *np, const scope *s, int file_index) {
  ir_graph *g = c->g;
  const char *domain = np->domain ? np->domain : "";
  const Onnx__FunctionProto *fn = NULL;
  ir_op op = ir_op_lookup(domain, np->op_type);
  if (op == IR_OP_UNKNOWN) op = onnx_legacy_op(domain, np->op_type); /* renamed ops (Scatter) */
  if (op == IR_OP_UNKNOWN || (*domain && strcmp(domain, "ai.onnx"))) fn = find_function(c, domain, np->op_type);

  if (fn) { /* inline a model-local function */
    if (c->inline_failed) return;
    int depth = s ? s->depth + 1 : 1;
    char fnm[96];
    ir_printable(fn->name, 60, fnm, sizeof fnm);
    if (depth > MAX_FUNCTION_DEPTH) {
      ir_error(g, "function '%s' calls itself (or functions nest deeper than %d)", fnm, MAX_FUNCTION_DEPTH);
      c->inline_failed = 1;
      return;
    }
    if (c->n_inlined > MAX_INLINED_NODES || ir_arena_used(g->arena) - c->arena_at_start > MAX_INLINE_ARENA) {
      ir_error(g, "inlining model-local functions (here '%s') would create more than %d nodes or %zu MB of names", fnm,
               MAX_INLINED_NODES, MAX_INLINE_ARENA >> 20);
      c->inline_failed = 1;
      return;
    }
    const char **ain = ir_alloc_array(g->arena, fn->n_input, sizeof(char *));
    const char **aout = ir_alloc_array(g->arena, fn->n_output, sizeof(char *));
    /* unique through the counter; the caller's name only helps reading, so it is cut */
    const char *prefix =
        ir_sprintf(g->arena, "%s%.64s#%d/", s ? s->prefix : "", *np->name ? np->name : fn->name, c->fn_counter++);
    for (size_t i = 0; i < fn->n_input; i++) ain[i] = i < np->n_input ? map_name(c, s, np->input[i]) : "";
    for (size_t i = 0; i < fn->n_output; i++)
      aout[i] = i < np->n_output ? map_name(c, s, np->output[i]) : ir_sprintf(g->arena, "%s%s", prefix, fn->output[i]);
    scope inner = {s, fn, np, prefix, ain, aout, s, depth};
    add_nodes(c, fn->node, fn->n_node, &inner);
    return;
  }

  if (s) c->n_inlined++;
  const char *name = s ? ir_sprintf(g->arena, "%s%s", s->prefix, np->name) : np->name;
  int outs[64];
  int n_out = (int)np->n_output;
  if (n_out > 64) n_out = 64;

  /* Constant nodes become constant values directly. */
  if (!strcmp(np->op_type, "Constant") && (!*domain || !strcmp(domain, "ai.onnx"))) {
    int tmp = ir_add_node(g, IR_OP_Identity, name, NULL, 0, NULL, 0); /* for messages */
    ir_node *nd = &g->nodes[tmp];
    nd->op_type = "Constant";
    nd->op = IR_OP_UNKNOWN;
    nd->index = file_index;
    nd->opset = opset_of(c, domain);
    nd->dead = 1;
    if (np->n_output != 1 || !*np->output[0]) {
      ir_error_node(g, tmp, "a Constant node must have exactly one output");
      return;
    }
    const char *oname = map_name(c, s, np->output[0]);
    if (ir_find_value(g, oname) >= 0) {
      char on[96];
      ir_error_node(g, tmp, "output '%s' is already produced elsewhere", ir_printable(oname, 60, on, sizeof on));
      return;
    }
    int v = -1;
    if (np->n_attribute != 1) {
      ir_error_node(g, tmp, "a Constant node needs exactly one attribute, it has %zu", np->n_attribute);
    } else {
      const Onnx__AttributeProto *a = np->attribute[0];
      if (*a->ref_attr_name) a = s ? resolve_ref(s, a->ref_attr_name) : NULL;
      ir_shape sh = {0};
      char an[96];
      if (!a) ir_error_node(g, tmp, "the attribute reference of a Constant node cannot be resolved");
      else if (!strcmp(a->name, "value") && a->t) v = tensor_value(c, tmp, a->t, oname, NULL, 0);
      else if (!strcmp(a->name, "value_float")) v = ir_add_const(g, oname, IR_FLOAT, &sh, &a->f, 4);
      else if (!strcmp(a->name, "value_int")) v = ir_add_const(g, oname, IR_INT64, &sh, &a->i, 8);
      else if (!strcmp(a->name, "value_floats")) {
        sh.rank = 1;
        sh.dims[0] = (int64_t)a->n_floats;
        v = ir_add_const(g, oname, IR_FLOAT, &sh, a->floats, a->n_floats * 4);
      } else if (!strcmp(a->name, "value_ints")) {
        sh.rank = 1;
        sh.dims[0] = (int64_t)a->n_ints;
        v = ir_add_const(g, oname, IR_INT64, &sh, a->ints, a->n_ints * 8);
      } else if (!strcmp(a->name, "value")) ir_error_node(g, tmp, "Constant attribute 'value' holds no tensor");
      else
        ir_error_node(g, tmp, "Constant attribute '%s' is not supported (string and sparse constants are not)",
                      ir_printable(a->name, 60, an, sizeof an));
    }
    /* a placeholder, so that consumers are not reported as dangling too */
    if (v < 0) ir_add_value(g, oname, IR_VAL_ACT, IR_UNDEFINED);
    return;
  }

  for (int i = 0; i < n_out; i++) {
    const char *on = map_name(c, s, np->output[i]);
    if (!*on) {
      outs[i] = -1;
      continue;
    }
    if (ir_find_value(g, on) >= 0) {
      outs[i] = -2; /* reported below, once the node exists */
      continue;
    }
    outs[i] = ir_add_value(g, on, IR_VAL_ACT, IR_UNDEFINED);
  }
  int id = ir_add_node(g, op, name, NULL, 0, NULL, 0);
  ir_node *nd = &g->nodes[id];
  nd->op_type = ir_strdup(g->arena, np->op_type);
  nd->domain = ir_strdup(g->arena, domain);
  nd->index = file_index;
  nd->opset = opset_of(c, domain);
  /* trailing omitted outputs are dropped */
  while (n_out > 0 && outs[n_out - 1] == -1) n_out--;
  nd->n_out = n_out;
  nd->out = ir_alloc_array(g->arena, (size_t)n_out, sizeof(int));
  for (int i = 0; i < n_out; i++) {
    if (outs[i] == -2) {
      char on[96];
      ir_error_node(g, id, "output '%s' is already produced by another node, input or initializer",
                    ir_printable(map_name(c, s, np->output[i]), 60, on, sizeof on));
      mark_bad(c, id);
      outs[i] = -1;
    }
    nd->out[i] = outs[i];
    if (outs[i] >= 0) g->values[outs[i]].producer = id;
  }
  if (np->n_output > 64) {
    ir_error_node(g, id, "too many outputs (%zu)", np->n_output);
    mark_bad(c, id);
  }
  /* an op of a domain missing from opset_import is listed with the unsupported ops */
  if (op == IR_OP_UNKNOWN || nd->opset < 0) add_unsupported(c, id);

  /* attributes */
  nd->n_attr = (int)np->n_attribute;
  nd->attr = ir_alloc_array(g->arena, np->n_attribute, sizeof(ir_attr));
  for (size_t i = 0; i < np->n_attribute; i++) {
    const Onnx__AttributeProto *a = np->attribute[i];
    if (*a->ref_attr_name) {
      const Onnx__AttributeProto *r = s ? resolve_ref(s, a->ref_attr_name) : NULL;
      if (!r) { /* an unset reference means the attribute is absent */
        if (!s) {
          char an[96], rn[96];
          ir_error_node(g, id, "attribute '%s' refers to '%s' outside a function",
                        ir_printable(a->name, 40, an, sizeof an), ir_printable(a->ref_attr_name, 40, rn, sizeof rn));
        }
        nd->n_attr--;
        continue;
      }
      int k = (int)i - ((int)np->n_attribute - nd->n_attr);
      attr_convert(c, id, r, &nd->attr[k]);
      nd->attr[k].name = ir_strdup(g->arena, a->name);
      continue;
    }
    attr_convert(c, id, a, &nd->attr[(int)i - ((int)np->n_attribute - nd->n_attr)]);
  }
  /* opsets 1 to 6: the opset 7 form (frontend/onnx_legacy.h) */
  if (op != IR_OP_UNKNOWN && nd->opset < 7 && onnx_legacy_attrs(g, id)) mark_bad(c, id);
  else if (op != IR_OP_UNKNOWN)
    for (int i = 0; i < nd->n_attr; i++) check_attr_type(g, id, &nd->attr[i]);
  /* opsets 22 and later: the forms that changed more than their types (frontend/onnx_forms.c) */
  if (op != IR_OP_UNKNOWN && nd->opset > 21 && onnx_form_check(g, id)) mark_bad(c, id);

  /* inputs are resolved once every node has its outputs */
  if (c->n_pend == c->cap_pend) {
    c->cap_pend = c->cap_pend ? c->cap_pend * 2 : 256;
    c->pend = ir_xrealloc(c->pend, sizeof(pending) * (size_t)c->cap_pend);
  }
  /* a body's captured values become implicit inputs of its node */
  size_t n_imp = 0;
  for (int i = 0; i < nd->n_attr; i++)
    if (nd->attr[i].type == IR_ATTR_GRAPH && nd->attr[i].graph) n_imp += (size_t)nd->attr[i].graph->n_captured;
  const char **in_names = ir_alloc_array(g->arena, np->n_input + n_imp, sizeof(char *));
  for (size_t i = 0; i < np->n_input; i++) in_names[i] = map_name(c, s, np->input[i]);
  size_t j = np->n_input;
  for (int i = 0; i < nd->n_attr; i++) {
    const ir_graph *b = nd->attr[i].type == IR_ATTR_GRAPH ? nd->attr[i].graph : NULL;
    for (int k = 0; b && k < b->n_captured; k++)
      in_names[j++] = map_name(c, s, b->values[b->inputs[b->n_inputs - b->n_captured + k]].name);
  }
  nd->n_in = (int)(np->n_input + n_imp);
  nd->n_implicit = (int)n_imp;
  nd->in = ir_alloc_array(g->arena, np->n_input + n_imp, sizeof(int));
  c->pend[c->n_pend++] = (pending){id, in_names};
}

static void add_nodes(ctx *c, Onnx__NodeProto **nodes, size_t n, const scope *s) {
  for (size_t i = 0; i < n; i++) add_one_node(c, nodes[i], s, s ? c->g->n_nodes : (int)i);
}

static int cmp_unsupported(const void *a, const void *b, void *gp) {
  const ir_graph *g = gp;
  const ir_node *x = &g->nodes[*(const int *)a], *y = &g->nodes[*(const int *)b];
  int d = strcmp(x->domain, y->domain);
  if (!d) d = strcmp(x->op_type, y->op_type);
  if (!d) d = x->index - y->index;
  return d;
}

static void report_unsupported(ctx *c) {
  ir_graph *g = c->g;
  if (!c->n_unsupported) return;
  qsort_r(c->unsupported, (size_t)c->n_unsupported, sizeof(int), cmp_unsupported, g);
  /* one line: "unsupported ops: Foo (opset 13): node 5 'a', node 9 'b'; Bar (domain x, opset 1): ..." */
  size_t cap = 4096, len = 0;
  char *msg = ir_xmalloc(cap);
  msg[0] = 0;
  int types = 0;
  for (int i = 0; i < c->n_unsupported;) {
    const ir_node *a = &g->nodes[c->unsupported[i]];
    int j = i;
    while (j < c->n_unsupported && !strcmp(g->nodes[c->unsupported[j]].op_type, a->op_type) &&
           !strcmp(g->nodes[c->unsupported[j]].domain, a->domain))
      j++;
    if (len > 200) { /* keep the line short: count the rest */
      int more_types = 0, more_nodes = c->n_unsupported - i;
      for (int k = i; k < c->n_unsupported; k++)
        if (k == i || strcmp(g->nodes[c->unsupported[k]].op_type, g->nodes[c->unsupported[k - 1]].op_type) ||
            strcmp(g->nodes[c->unsupported[k]].domain, g->nodes[c->unsupported[k - 1]].domain))
          more_types++;
      char tail[96];
      snprintf(tail, sizeof tail, "; and %d more op type%s (%d node%s)", more_types, more_types > 1 ? "s" : "",
               more_nodes, more_nodes > 1 ? "s" : "");
      size_t tl = strlen(tail);
      if (len + tl + 1 > cap) msg = ir_xrealloc(msg, cap = len + tl + 1);
      memcpy(msg + len, tail, tl + 1);
      len += tl;
      types += more_types;
      break;
    }
    char op[80], dom[80], ver[32], buf[1024];
    ir_printable(a->op_type, 40, op, sizeof op);
    ir_printable(a->domain, 40, dom, sizeof dom);
    if (a->opset < 0) snprintf(ver, sizeof ver, "not in opset_import");
    else snprintf(ver, sizeof ver, "opset %d", a->opset);
    int o = snprintf(buf, sizeof buf, "%s%s (%s%s%s%s): ", types ? "; " : "", op, *a->domain ? "domain " : "", dom,
                     *a->domain ? ", " : "", ver);
    for (int k = i; k < j && k < i + 3; k++) {
      char nm[80];
      o += snprintf(buf + o, sizeof buf - (size_t)o, "%snode %d '%s'", k > i ? ", " : "",
                    g->nodes[c->unsupported[k]].index,
                    ir_printable(g->nodes[c->unsupported[k]].name, 40, nm, sizeof nm));
      if (o >= (int)sizeof buf) o = (int)sizeof buf - 1;
    }
    if (j - i > 3) snprintf(buf + o, sizeof buf - (size_t)o, " and %d more", j - i - 3);
    size_t bl = strlen(buf);
    if (len + bl + 1 > cap) {
      while (len + bl + 1 > cap) cap *= 2;
      msg = ir_xrealloc(msg, cap);
    }
    memcpy(msg + len, buf, bl + 1);
    len += bl;
    types++;
    i = j;
  }
  ir_error(g, "%d unsupported op%s (%d type%s): %s", c->n_unsupported, c->n_unsupported > 1 ? "s" : "", types,
           types > 1 ? "s" : "", msg);
  free(msg);
}

static void check_arity(ctx *c) {
  ir_graph *g = c->g;
  unsigned char *skip = ir_xcalloc((size_t)g->n_nodes + 1, 1);
  for (int k = 0; k < c->n_bad; k++) skip[c->bad[k]] = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead || n->op == IR_OP_UNKNOWN || skip[i]) continue;
    const ir_op_info *oi = &ir_op_table[n->op];
    int nin = n->n_in - n->n_implicit;
    if (nin > oi->min_inputs)
      while (nin > oi->min_inputs && n->in[nin - 1] < 0) nin--; /* trailing omitted optionals */
    if (nin < oi->min_inputs || (oi->max_inputs >= 0 && nin > oi->max_inputs)) {
      if (oi->max_inputs < 0) ir_error_node(g, i, "expects at least %d inputs, has %d", oi->min_inputs, nin);
      else if (oi->min_inputs == oi->max_inputs)
        ir_error_node(g, i, "expects %d input%s, has %d", oi->min_inputs, oi->min_inputs > 1 ? "s" : "", nin);
      else ir_error_node(g, i, "expects %d to %d inputs, has %d", oi->min_inputs, oi->max_inputs, nin);
      continue;
    }
    for (int k = 0; k < oi->min_inputs && k < nin; k++)
      /* Clip's bounds, Loop's trip count and condition, Scan-8's sequence_lens may be empty */
      if (n->in[k] < 0 && n->op != IR_OP_Clip && n->op != IR_OP_Loop && n->op != IR_OP_Scan) {
        ir_error_node(g, i, "required input %d is empty", k);
        break;
      }
    if (oi->max_outputs >= 0 && n->n_out > oi->max_outputs)
      ir_error_node(g, i, "has %d outputs, at most %d allowed", n->n_out, oi->max_outputs);
    else if ((n->op == IR_OP_RNN || n->op == IR_OP_GRU || n->op == IR_OP_LSTM) && n->n_out > 1 && n->out[0] < 0) {
      /* Y left out (only Y_h / Y_c wanted): the passes expect a node's first output, so
       * it gets an internal value that nothing reads */
      int v = ir_add_value(g, ir_sprintf(g->arena, "%s.unused_Y", n->name && *n->name ? n->name : "rnn"), IR_VAL_ACT,
                           IR_UNDEFINED);
      g->values[v].producer = i;
      g->nodes[i].out[0] = v;
    } else if (n->n_out < 1 || n->out[0] < 0) ir_error_node(g, i, "has no output");
  }
  free(skip);
}

/* The nodes, values, inputs and outputs of graph gp into c->g: the model's graph, or
 * (body) an If/Loop/Scan body, whose names not defined inside are captured (capture). */
static int convert_graph(ctx *c, const Onnx__GraphProto *gp, int body) {
  ir_graph *g = c->g;
  g->graph_name = ir_strdup(g->arena, gp->name);
  if (gp->n_sparse_initializer) {
    ir_error(g, "sparse initializers are not supported");
    return -1;
  }
  if (!body && gp->n_initializer != c->wire->n_raw) {
    ir_error(g, "internal inconsistency between the wire scan and the decoded graph");
    return -1;
  }
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *t = gp->initializer[i];
    if (!*t->name) {
      ir_error(g, "initializer %zu has no name", i);
      continue;
    }
    /* a body's initializers were decoded with it (the wire scan strips only the graph's) */
    tensor_value(c, -1, t, t->name, body ? NULL : &c->wire->raw[i], 1);
  }
  if (g->n_errors) return -1;
  g->inputs = ir_alloc_array(g->arena, gp->n_input, sizeof(int));
  for (size_t i = 0; i < gp->n_input; i++) {
    int v = ir_find_value(g, gp->input[i]->name);
    if (v >= 0 && g->values[v].is_initializer) continue; /* IR < 4 lists initializers as inputs */
    v = body ? body_input(c, gp->input[i]) : value_info_input(c, gp->input[i]);
    if (v >= 0) g->inputs[g->n_inputs++] = v;
  }
  if (g->n_errors) return -1;
  c->arena_at_start = ir_arena_used(g->arena);
  add_nodes(c, gp->node, gp->n_node, NULL);
  if (c->inline_failed) return -1; /* what follows would only repeat it */
  /* resolve inputs */
  for (int p = 0; p < c->n_pend; p++) {
    ir_node *nd = &g->nodes[c->pend[p].node];
    for (int k = 0; k < nd->n_in; k++) {
      const char *nm = c->pend[p].in_names[k];
      if (!*nm) {
        nd->in[k] = -1;
        continue;
      }
      int v = ir_find_value(g, nm);
      if (v < 0 && body) v = capture(c, nm); /* a value of an enclosing graph */
      if (v < 0) {
        char vn[96];
        ir_error_node(g, c->pend[p].node, "input '%s' is not produced by any node, graph input or initializer",
                      ir_printable(nm, 60, vn, sizeof vn));
        mark_bad(c, c->pend[p].node);
        nd->in[k] = -1;
        continue;
      }
      nd->in[k] = v;
    }
  }
  if (g->opset < 7) /* opsets 1 to 6: what reads or adds inputs (frontend/onnx_legacy.h) */
    for (int i = 0, n = g->n_nodes; i < n; i++)
      if (!g->nodes[i].dead && onnx_legacy_inputs(g, i)) mark_bad(c, i);
  report_unsupported(c);
  check_arity(c);
  /* graph outputs */
  g->outputs = ir_alloc_array(g->arena, gp->n_output, sizeof(int));
  for (size_t i = 0; i < gp->n_output; i++) {
    int v = ir_find_value(g, gp->output[i]->name);
    char vn[96];
    if (v < 0 && body && *gp->output[i]->name) v = capture(c, gp->output[i]->name);
    if (body && v >= 0) { /* a body's outputs may repeat a value or name an input */
      g->outputs[g->n_outputs++] = v;
      continue;
    }
    if (v < 0) {
      ir_error(g, "graph output '%s' is not produced by any node",
               ir_printable(gp->output[i]->name, 60, vn, sizeof vn));
      continue;
    }
    for (int k = 0; k < g->n_outputs; k++)
      if (g->outputs[k] == v) {
        ir_error(g, "graph output '%s' is listed twice", ir_printable(gp->output[i]->name, 60, vn, sizeof vn));
        v = -1;
        break;
      }
    if (v < 0) continue;
    g->values[v].is_output = 1;
    g->outputs[g->n_outputs++] = v;
  }
  if (!g->n_outputs && !g->n_errors && !body) ir_error(g, "the graph has no outputs");
  if (g->n_errors) return -1;
  /* Constant nodes left dead placeholders (for messages); toposort drops them. */
  if (ir_toposort(g)) return -1;
  return 0;
}

static ir_graph *convert(ctx *c) {
  ir_graph *g = c->g;
  const Onnx__ModelProto *m = c->m;
  if (!m->has_ir_version || !m->graph) {
    ir_error(g, "not an ONNX model (no %s)", !m->has_ir_version ? "ir_version" : "graph");
    return NULL;
  }
  if (m->ir_version < 3 || m->ir_version > onnx_max_ir_version()) {
    ir_error(g, "unsupported IR version %lld (pipecc reads IR versions 3 to %d)", (long long)m->ir_version,
             onnx_max_ir_version());
    return NULL;
  }
  g->ir_version = m->ir_version;
  g->producer_name = ir_strdup(g->arena, m->producer_name);
  g->producer_version = ir_strdup(g->arena, m->producer_version);
  g->n_opsets = (int)m->n_opset_import;
  g->opsets = ir_alloc_array(g->arena, m->n_opset_import, sizeof(ir_opset));
  g->opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    g->opsets[i].domain = ir_strdup(g->arena, o->domain ? o->domain : "");
    g->opsets[i].version = o->version;
    if (!*g->opsets[i].domain || !strcmp(g->opsets[i].domain, "ai.onnx")) {
      if (o->version < 1 || o->version > onnx_max_opset()) {
        ir_error(g, "unsupported default-domain opset %lld (pipecc reads opsets 1 to %d)", (long long)o->version,
                 onnx_max_opset());
        return NULL;
      }
      g->opset = (int)o->version;
    }
  }
  if (g->opset < 0) {
    ir_error(g, "the model imports no default-domain opset");
    return NULL;
  }
  if (convert_graph(c, m->graph, 0)) return NULL;
  return g;
}

ir_graph *onnx_load_buffer(const void *buf, size_t len, const char *path, const char *dir) {
  ir_graph *g = ir_graph_new(path);
  wire_result w;
  const char *err;
  if (len == 0) {
    ir_error(g, "empty file, not an ONNX model");
    ir_graph_free(g);
    return NULL;
  }
  if (wire_prepare(buf, len, &w, &err)) {
    ir_error(g, "not a valid ONNX model: %s", err);
    ir_graph_free(g);
    return NULL;
  }
  Onnx__ModelProto *m = wire_unpack_model(&w);
  if (!m) {
    ir_error(g, "not a valid ONNX model: protobuf decoding failed");
    wire_result_free(&w);
    ir_graph_free(g);
    return NULL;
  }
  ctx c = {0};
  c.g = g;
  c.base = buf;
  c.base_len = len;
  c.wire = &w;
  c.m = m;
  c.dir = dir;
  ir_graph *r = convert(&c);
  wire_free_model(m);
  wire_result_free(&w);
  free(c.pend);
  free(c.unsupported);
  free(c.bad);
  if (!r) {
    ir_graph_free(g);
    return NULL;
  }
  return g;
}

ir_graph *onnx_load_file(const char *path) {
  ir_graph tmp = {0};
  tmp.path = path;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    ir_error(&tmp, "cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ir_error(&tmp, "not a regular file");
    close(fd);
    return NULL;
  }
  size_t len = (size_t)st.st_size;
  void *p = NULL;
  if (len) {
    p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ir_error(&tmp, "cannot map the file: %s", strerror(errno));
      close(fd);
      return NULL;
    }
    madvise(p, len, MADV_RANDOM); /* weights are skipped, not read */
  }
  close(fd);
  char *d = strdup(path), *slash = strrchr(d, '/');
  const char *dir = ".";
  if (slash == d) dir = "/";
  else if (slash) {
    *slash = 0;
    dir = d;
  }
  ir_graph *g = onnx_load_buffer(p ? p : "", len, path, dir);
  free(d);
  if (!g) {
    if (p) munmap(p, len);
    return NULL;
  }
  if (p) ir_graph_add_mapping(g, p, len, NULL);
  return g;
}
