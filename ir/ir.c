#include "ir/ir.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ir/diag.h"
#include "runtime/pipert.h" /* pipert_from_bits */

/* ---- dtypes ---- */

static const struct {
  const char *np, *onnx;
  size_t size;
} dtypes[IR_DTYPE_COUNT] = {
    [IR_UNDEFINED] = {"undefined", "UNDEFINED", 0},
    [IR_FLOAT] = {"float32", "FLOAT", 4},
    [IR_UINT8] = {"uint8", "UINT8", 1},
    [IR_INT8] = {"int8", "INT8", 1},
    [IR_UINT16] = {"uint16", "UINT16", 2},
    [IR_INT16] = {"int16", "INT16", 2},
    [IR_INT32] = {"int32", "INT32", 4},
    [IR_INT64] = {"int64", "INT64", 8},
    [IR_STRING] = {"string", "STRING", 0},
    [IR_BOOL] = {"bool", "BOOL", 1},
    [IR_FLOAT16] = {"float16", "FLOAT16", 2},
    [IR_DOUBLE] = {"float64", "DOUBLE", 8},
    [IR_UINT32] = {"uint32", "UINT32", 4},
    [IR_UINT64] = {"uint64", "UINT64", 8},
    [IR_COMPLEX64] = {"complex64", "COMPLEX64", 8},
    [IR_COMPLEX128] = {"complex128", "COMPLEX128", 16},
    [IR_BFLOAT16] = {"bfloat16", "BFLOAT16", 2},
    [IR_FLOAT8E4M3FN] = {"float8e4m3fn", "FLOAT8E4M3FN", 1},
    [IR_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", "FLOAT8E4M3FNUZ", 1},
    [IR_FLOAT8E5M2] = {"float8e5m2", "FLOAT8E5M2", 1},
    [IR_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", "FLOAT8E5M2FNUZ", 1},
    [IR_UINT4] = {"uint4", "UINT4", 1},
    [IR_INT4] = {"int4", "INT4", 1},
    [IR_FLOAT4E2M1] = {"float4e2m1", "FLOAT4E2M1", 1},
    [IR_FLOAT8E8M0] = {"float8e8m0", "FLOAT8E8M0", 1},
    [IR_UINT2] = {"uint2", "UINT2", 1},
    [IR_INT2] = {"int2", "INT2", 1},
    [IR_FLOAT6E2M3] = {"float6e2m3", "FLOAT6E2M3", 1},
    [IR_FLOAT6E3M2] = {"float6e3m2", "FLOAT6E3M2", 1},
};

size_t ir_dtype_size(ir_dtype t) { return (t > 0 && t < IR_DTYPE_COUNT) ? dtypes[t].size : 0; }
const char *ir_dtype_name(ir_dtype t) { return (t >= 0 && t < IR_DTYPE_COUNT) ? dtypes[t].np : "undefined"; }

const char *ir_unheld_dtype_name(int64_t t) {
  if (t == IR_STRING) return "string";
  if (t == IR_COMPLEX64 || t == IR_COMPLEX128) return "complex";
  return "invalid";
}
int ir_dtype_parse(const char *s) {
  for (int i = 1; i < IR_DTYPE_COUNT; i++)
    if (!strcmp(s, dtypes[i].np) || !strcmp(s, dtypes[i].onnx)) return i;
  if (!strcmp(s, "float")) return IR_FLOAT;
  if (!strcmp(s, "double")) return IR_DOUBLE;
  return -1;
}
int ir_dtype_narrow(ir_dtype t) {
  return t == IR_FLOAT16 || t == IR_BFLOAT16 || (t >= IR_FLOAT8E4M3FN && t <= IR_FLOAT8E5M2FNUZ) ||
         t == IR_FLOAT4E2M1 || t == IR_FLOAT8E8M0 || t == IR_FLOAT6E2M3 || t == IR_FLOAT6E3M2;
}
int ir_dtype_small_int(ir_dtype t, int *lo, int *hi) {
  int l, h;
  switch (t) {
    case IR_INT4: l = -8, h = 7; break;
    case IR_UINT4: l = 0, h = 15; break;
    case IR_INT2: l = -2, h = 1; break;
    case IR_UINT2: l = 0, h = 3; break;
    default: return 0;
  }
  if (lo) *lo = l;
  if (hi) *hi = h;
  return 1;
}
int ir_dtype_packed_bits(ir_dtype t) {
  switch (t) {
    case IR_INT4:
    case IR_UINT4:
    case IR_FLOAT4E2M1: return 4;
    case IR_INT2:
    case IR_UINT2: return 2;
    case IR_FLOAT6E2M3:
    case IR_FLOAT6E3M2: return 6;
    default: return 0;
  }
}
int ir_dtype_is_float(ir_dtype t) { return t == IR_FLOAT || t == IR_DOUBLE || ir_dtype_narrow(t); }

/* ---- shapes ---- */

int ir_shape_static(const ir_shape *s) {
  if (s->rank < 0) return 0;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return 0;
  return 1;
}

ir_shape ir_shape_of(int rank, const int64_t *dims) {
  ir_shape s;
  memset(&s, 0, sizeof s);
  s.rank = rank;
  for (int i = 0; i < rank; i++) s.dims[i] = dims[i];
  return s;
}

int64_t ir_shape_numel(const ir_shape *s) {
  if (!ir_shape_static(s)) return -1;
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->dims[i] && n > INT64_MAX / s->dims[i]) return -1;
    n *= s->dims[i];
  }
  return n;
}

int ir_shape_same_dims(const ir_shape *a, const ir_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

char *ir_shape_str(const ir_shape *s, char *buf, size_t n) {
  size_t o = 0;
  if (!n) return buf;
  buf[0] = 0;
  if (s->rank < 0) {
    snprintf(buf, n, "[?...]");
    return buf;
  }
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int i = 0; i < s->rank && o < n; i++) {
    const char *sep = i ? ", " : "";
    if (s->dims[i] >= 0) o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, sep, s->dims[i]);
    else if (s->dims[i] == IR_DIM_SYM && s->sym[i]) {
      char nm[40];
      o += (size_t)snprintf(buf + o, n - o, "%s%s", sep, ir_printable(s->sym[i], 24, nm, sizeof nm));
    } else o += (size_t)snprintf(buf + o, n - o, "%s?", sep);
  }
  if (o < n) snprintf(buf + o, n - o, "]");
  return buf;
}

/* ---- string map: open addressing, power-of-two table ---- */

struct ir_strmap {
  const char **keys;
  int *vals;
  size_t cap, len;
  /* names map only: base name -> last numeric suffix handed out by ir_add_value, so
   * that N clashes on one name cost O(N), not O(N^2) */
  struct ir_strmap *suffix;
};

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static ir_strmap *strmap_new(void) {
  ir_strmap *m = ir_xcalloc(1, sizeof *m);
  m->cap = 1024;
  m->keys = ir_xcalloc(m->cap, sizeof *m->keys);
  m->vals = ir_xcalloc(m->cap, sizeof *m->vals);
  return m;
}
static void strmap_free(ir_strmap *m) {
  if (!m) return;
  strmap_free(m->suffix);
  free(m->keys);
  free(m->vals);
  free(m);
}
static int strmap_get(const ir_strmap *m, const char *k) {
  size_t i = hash_str(k) & (m->cap - 1);
  while (m->keys[i]) {
    if (!strcmp(m->keys[i], k)) return m->vals[i];
    i = (i + 1) & (m->cap - 1);
  }
  return -1;
}
static void strmap_put(ir_strmap *m, const char *k, int v) {
  if ((m->len + 1) * 2 > m->cap) {
    ir_strmap n = {ir_xcalloc(m->cap * 2, sizeof(char *)), ir_xcalloc(m->cap * 2, sizeof(int)), m->cap * 2, 0,
                   m->suffix};
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) strmap_put(&n, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    *m = n;
  }
  size_t i = hash_str(k) & (m->cap - 1);
  while (m->keys[i]) {
    if (!strcmp(m->keys[i], k)) {
      m->vals[i] = v;
      return;
    }
    i = (i + 1) & (m->cap - 1);
  }
  m->keys[i] = k;
  m->vals[i] = v;
  m->len++;
}

/* ---- graph ---- */

struct ir_mapping {
  void *addr;
  size_t len;
  const char *file; /* NULL: the model file; else external data, relative to its folder */
  ir_mapping *next;
};

ir_graph *ir_graph_new(const char *path) {
  ir_graph *g = ir_xcalloc(1, sizeof *g);
  g->arena = ir_arena_new();
  g->path = ir_strdup(g->arena, path ? path : "<memory>");
  const char *slash = strrchr(g->path, '/');
  g->dir = slash ? ir_strndup(g->arena, g->path, (size_t)(slash - g->path)) : ".";
  if (slash == g->path) g->dir = "/";
  g->names = strmap_new();
  g->producer_name = g->producer_version = g->graph_name = "";
  return g;
}

void ir_graph_add_mapping(ir_graph *g, void *addr, size_t len, const char *file) {
  ir_mapping *m = ir_xmalloc(sizeof *m);
  m->addr = addr;
  m->len = len;
  m->file = file ? ir_strdup(g->arena, file) : NULL;
  m->next = g->maps;
  g->maps = m;
}

int ir_graph_locate(const ir_graph *g, const void *p, size_t n, const char **file, uint64_t *offset) {
  const char *c = p;
  for (const ir_mapping *m = g->maps; m && c; m = m->next) {
    const char *a = m->addr;
    if (c >= a && c - a <= (ptrdiff_t)m->len && n <= m->len - (size_t)(c - a)) {
      *file = m->file;
      *offset = (uint64_t)(c - a);
      return 0;
    }
  }
  return -1;
}

const void *ir_graph_model_bytes(const ir_graph *g, size_t *len) {
  for (const ir_mapping *m = g->maps; m; m = m->next)
    if (!m->file) {
      *len = m->len;
      return m->addr;
    }
  *len = 0;
  return NULL;
}

void ir_graph_free(ir_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_bodies; i++) ir_graph_free(g->bodies[i]);
  free(g->bodies);
  for (ir_mapping *m = g->maps, *n; m; m = n) {
    n = m->next;
    munmap(m->addr, m->len);
    free(m);
  }
  free(g->nodes);
  free(g->values);
  free(g->use_list);
  strmap_free(g->names);
  ir_arena_free(g->arena);
  free(g);
}

int ir_find_value(const ir_graph *g, const char *name) { return strmap_get(g->names, name); }

int ir_add_value(ir_graph *g, const char *name, ir_val_kind kind, ir_dtype dt) {
  if (g->n_values == g->cap_values) {
    g->cap_values = g->cap_values ? g->cap_values * 2 : 256;
    g->values = ir_xrealloc(g->values, sizeof(ir_value) * (size_t)g->cap_values);
  }
  const char *nm = name && *name ? name : "v";
  if (strmap_get(g->names, nm) >= 0 || !name || !*name) {
    ir_strmap *sfx = g->names->suffix ? g->names->suffix : (g->names->suffix = strmap_new());
    int last = strmap_get(sfx, nm);
    const char *base = last >= 0 ? NULL : ir_strdup(g->arena, nm);
    for (int k = last >= 0 ? last + 1 : 1;; k++) {
      char *cand = ir_sprintf(g->arena, "%s__%d", nm, k);
      if (strmap_get(g->names, cand) < 0) {
        strmap_put(sfx, base ? base : nm, k); /* an existing key keeps its stored pointer */
        nm = cand;
        break;
      }
    }
  } else {
    nm = ir_strdup(g->arena, nm);
  }
  int id = g->n_values++;
  ir_value *v = &g->values[id];
  memset(v, 0, sizeof *v);
  v->name = nm;
  v->kind = kind;
  v->writeback = -1;
  v->dtype = dt;
  v->shape.rank = -1;
  v->producer = -1;
  strmap_put(g->names, nm, id);
  return id;
}

void ir_set_seq(ir_graph *g, int v, const int *elems, int n, ir_dtype dt) {
  int *e = ir_alloc_array(g->arena, (size_t)n + 1, sizeof(int));
  if (n) memcpy(e, elems, sizeof(int) * (size_t)n);
  ir_value *o = &g->values[v];
  o->kind = IR_VAL_SEQ;
  o->producer = -1;
  o->dtype = dt;
  o->seq = e;
  o->seq_n = n;
}

void ir_set_none(ir_graph *g, int v) {
  ir_value *o = &g->values[v];
  o->kind = IR_VAL_NONE;
  o->producer = -1;
  o->seq = NULL;
  o->seq_n = 0;
}

int ir_add_const(ir_graph *g, const char *name, ir_dtype dt, const ir_shape *shape, const void *data, size_t nbytes) {
  ir_shape sh = *shape; /* shape may point into g->values, which ir_add_value may move */
  int id = ir_add_value(g, name, IR_VAL_CONST, dt);
  ir_value *v = &g->values[id];
  v->shape = sh;
  void *d = ir_alloc(g->arena, nbytes);
  if (nbytes) memcpy(d, data, nbytes);
  v->data = d;
  v->nbytes = nbytes;
  return id;
}

int ir_add_zero_const(ir_graph *g, const char *name, ir_dtype dt, const ir_shape *shape) {
  ir_shape sh = *shape; /* shape may point into g->values, which ir_add_value may move */
  int id = ir_add_value(g, name, IR_VAL_CONST, dt);
  ir_value *v = &g->values[id];
  v->shape = sh;
  int64_t b = ir_value_bytes(v);
  v->nbytes = b > 0 ? (size_t)b : 0;
  v->zero_init = 1;
  return id;
}

int ir_add_node(ir_graph *g, ir_op op, const char *name, const int *in, int n_in, const int *out, int n_out) {
  if (g->n_nodes == g->cap_nodes) {
    g->cap_nodes = g->cap_nodes ? g->cap_nodes * 2 : 256;
    g->nodes = ir_xrealloc(g->nodes, sizeof(ir_node) * (size_t)g->cap_nodes);
  }
  int id = g->n_nodes++;
  ir_node *n = &g->nodes[id];
  memset(n, 0, sizeof *n);
  n->name = ir_strdup(g->arena, name ? name : "");
  n->op = op;
  n->op_type = ir_op_name(op);
  n->domain = "";
  n->opset = g->opset;
  n->index = id;
  n->stage = -1;
  n->n_in = n_in;
  n->n_out = n_out;
  n->in = ir_alloc_array(g->arena, (size_t)n_in, sizeof(int));
  n->out = ir_alloc_array(g->arena, (size_t)n_out, sizeof(int));
  if (n_in) memcpy(n->in, in, sizeof(int) * (size_t)n_in);
  if (n_out) memcpy(n->out, out, sizeof(int) * (size_t)n_out);
  for (int i = 0; i < n_out; i++)
    if (out[i] >= 0) g->values[out[i]].producer = id;
  return id;
}

/* ---- attributes ---- */

ir_attr *ir_node_add_attr(ir_graph *g, int node, const char *name, ir_attr_type t) {
  ir_node *n = &g->nodes[node];
  ir_attr *na = ir_alloc_array(g->arena, (size_t)n->n_attr + 1, sizeof(ir_attr));
  if (n->n_attr) memcpy(na, n->attr, sizeof(ir_attr) * (size_t)n->n_attr);
  n->attr = na;
  ir_attr *at = &na[n->n_attr++];
  memset(at, 0, sizeof *at);
  at->name = ir_strdup(g->arena, name);
  at->type = t;
  at->tensor = -1;
  return at;
}

const ir_attr *ir_attr_find(const ir_node *n, const char *name) {
  for (int i = 0; i < n->n_attr; i++)
    if (!strcmp(n->attr[i].name, name)) return &n->attr[i];
  return NULL;
}
int64_t ir_attr_int(const ir_node *n, const char *name, int64_t dflt) {
  const ir_attr *a = ir_attr_find(n, name);
  return a && a->type == IR_ATTR_INT ? a->i : dflt;
}
float ir_attr_float(const ir_node *n, const char *name, float dflt) {
  const ir_attr *a = ir_attr_find(n, name);
  if (a && a->type == IR_ATTR_FLOAT) return a->f;
  if (a && a->type == IR_ATTR_INT) return (float)a->i;
  return dflt;
}
const char *ir_attr_str(const ir_node *n, const char *name, const char *dflt) {
  const ir_attr *a = ir_attr_find(n, name);
  return a && a->type == IR_ATTR_STRING ? a->s : dflt;
}
int ir_attr_ints(const ir_node *n, const char *name, const int64_t **v) {
  const ir_attr *a = ir_attr_find(n, name);
  if (!a || a->type != IR_ATTR_INTS) {
    *v = NULL;
    return -1;
  }
  *v = a->ints;
  return a->n;
}
int ir_transpose_perm(const ir_node *t, int r, int64_t *perm) {
  const int64_t *p;
  int np = ir_attr_ints(t, "perm", &p);
  if (np >= 0 && np != r) return -1;
  for (int d = 0; d < r; d++) perm[d] = np < 0 ? r - 1 - d : p[d];
  return r;
}

void ir_permuted_view(const ir_shape *s, const int64_t *perm, int64_t *dims, int64_t *str) {
  int64_t st[IR_MAX_RANK], acc = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    st[d] = acc;
    acc *= s->dims[d];
  }
  for (int d = 0; d < s->rank; d++) {
    int64_t p = perm ? perm[d] : d;
    dims[d] = s->dims[p];
    str[d] = st[p];
  }
}

int ir_reduce_axes(ir_graph *g, const ir_node *n, int64_t *axes, int max) {
  const ir_value *av = ir_in(g, n, 1);
  if (av) {
    int64_t cnt = ir_shape_numel(&av->shape);
    if (av->kind != IR_VAL_CONST || cnt > max) return -2;
    for (int64_t i = 0; i < cnt; i++)
      if (ir_const_i64(av, i, &axes[i])) return -2;
    return (int)cnt;
  }
  const int64_t *v;
  int na = ir_attr_ints(n, "axes", &v);
  if (na > max) return -2;
  for (int i = 0; i < na; i++) axes[i] = v[i];
  return na;
}

ir_value *ir_in(ir_graph *g, const ir_node *n, int i) {
  return (i >= 0 && i < n->n_in && n->in[i] >= 0) ? &g->values[n->in[i]] : NULL;
}
ir_value *ir_out(ir_graph *g, const ir_node *n, int i) {
  return (i >= 0 && i < n->n_out && n->out[i] >= 0) ? &g->values[n->out[i]] : NULL;
}

/* ---- uses, order, compaction ---- */

void ir_take_output(ir_graph *g, int to, int from) {
  ir_replace_uses(g, from, to);
  const char *nm = g->values[to].name;
  g->values[to].name = g->values[from].name;
  g->values[from].name = nm;
}

void ir_replace_uses(ir_graph *g, int from, int to) {
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] == from) n->in[k] = to;
  }
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k] == from) {
      /* The graph output keeps its name: the value `to` takes it over when it is an
       * intermediate; otherwise the output just points at `to`. */
      g->outputs[k] = to;
      g->values[to].is_output = 1;
    }
}

void ir_rebuild_uses(ir_graph *g) {
  int total = 0;
  for (int v = 0; v < g->n_values; v++) g->values[v].n_uses = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) g->values[n->in[k]].n_uses++, total++;
  }
  int off = 0;
  for (int v = 0; v < g->n_values; v++) {
    g->values[v].use_off = off;
    off += g->values[v].n_uses;
    g->values[v].n_uses = 0;
  }
  g->use_list = ir_xrealloc(g->use_list, sizeof(int) * (size_t)(total ? total : 1));
  g->n_use_list = total;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_in; k++) {
      if (n->in[k] < 0) continue;
      ir_value *v = &g->values[n->in[k]];
      /* a node using the same value twice is listed once */
      if (v->n_uses && g->use_list[v->use_off + v->n_uses - 1] == i) continue;
      g->use_list[v->use_off + v->n_uses++] = i;
    }
  }
}

/* Name a node on a cycle, with the cycle itself, once Kahn's algorithm has stopped:
 * every node left has a predecessor that is left too (left = indeg > 0), so walking
 * back through such predecessors must come round; the first node met twice is on it. */
static void report_cycle(ir_graph *g, const int *indeg) {
  int n = g->n_nodes, start = -1;
  for (int i = 0; i < n && start < 0; i++)
    if (!g->nodes[i].dead && indeg[i] > 0) start = i;
  IR_ASSERT(start >= 0);
  int *seen = ir_xcalloc((size_t)n + 1, sizeof(int)), *pred = ir_xmalloc(sizeof(int) * ((size_t)n + 1));
  int cur = start, step = 0;
  while (!seen[cur]) {
    seen[cur] = ++step;
    const ir_node *nd = &g->nodes[cur];
    int p = -1;
    for (int k = 0; k < nd->n_in && p < 0; k++) {
      int v = nd->in[k];
      int q = v >= 0 ? g->values[v].producer : -1;
      if (q >= 0 && !g->nodes[q].dead && indeg[q] > 0) p = q;
    }
    IR_ASSERT(p >= 0);
    pred[cur] = p;
    cur = p;
  }
  /* cur is on the cycle. back[] walks it against the data flow: cur, pred, pred of that... */
  int len = 0;
  for (int x = cur;;) {
    seen[len++] = x; /* reuse seen[] as back[] */
    x = pred[x];
    if (x == cur) break;
  }
  int *cyc = ir_xmalloc(sizeof(int) * ((size_t)len + 1)); /* data-flow order from cur */
  cyc[0] = cur;
  for (int i = 1; i < len; i++) cyc[i] = seen[len - i];
  char path[400];
  size_t o = 0;
  path[0] = 0;
  for (int i = 0; i <= len && o + 60 < sizeof path; i++) {
    int x = i < len ? cyc[i] : cyc[0];
    char nm[48];
    if (i == 4 && len > 5) {
      o += (size_t)snprintf(path + o, sizeof path - o, " -> ... (%d nodes)", len);
      break;
    }
    o += (size_t)snprintf(path + o, sizeof path - o, "%s'%s'", i ? " -> " : "",
                          ir_printable(g->nodes[x].name, 30, nm, sizeof nm));
  }
  ir_error_node(g, cyc[0], "the graph has a cycle through this node: %s", path);
  free(cyc);
  free(seen);
  free(pred);
}

int ir_toposort(ir_graph *g) {
  int n = g->n_nodes;
  /* successor lists (one entry per input slot fed by a live node), so that the sort
   * is linear in nodes + edges whatever the fan-in */
  int *indeg = ir_xcalloc((size_t)n + 1, sizeof(int));
  int *off = ir_xcalloc((size_t)n + 2, sizeof(int));
  size_t edges = 0;
  for (int i = 0; i < n; i++) {
    ir_node *nd = &g->nodes[i];
    if (nd->dead) continue;
    for (int k = 0; k < nd->n_in; k++) {
      int v = nd->in[k];
      int p = v >= 0 ? g->values[v].producer : -1;
      if (p >= 0 && !g->nodes[p].dead) indeg[i]++, off[p + 1]++, edges++;
    }
  }
  for (int i = 0; i < n; i++) off[i + 1] += off[i];
  int *succ = ir_xmalloc(sizeof(int) * (edges + 1));
  int *fill = ir_xmalloc(sizeof(int) * ((size_t)n + 1));
  memcpy(fill, off, sizeof(int) * ((size_t)n + 1));
  for (int i = 0; i < n; i++) {
    ir_node *nd = &g->nodes[i];
    if (nd->dead) continue;
    for (int k = 0; k < nd->n_in; k++) {
      int v = nd->in[k];
      int p = v >= 0 ? g->values[v].producer : -1;
      if (p >= 0 && !g->nodes[p].dead) succ[fill[p]++] = i;
    }
  }
  free(fill);
  /* Kahn with a FIFO over ascending indices: close to file order, and linear. */
  int *order = ir_xmalloc(sizeof(int) * ((size_t)n + 1));
  int head = 0, tail = 0, live = 0;
  for (int i = 0; i < n; i++) {
    if (g->nodes[i].dead) continue;
    live++;
    if (!indeg[i]) order[tail++] = i;
  }
  while (head < tail) {
    int i = order[head++];
    for (int e = off[i]; e < off[i + 1]; e++)
      if (--indeg[succ[e]] == 0) order[tail++] = succ[e];
  }
  free(succ);
  free(off);
  if (tail != live) {
    report_cycle(g, indeg);
    free(indeg);
    free(order);
    return -1;
  }
  /* permute nodes into order and renumber producers */
  ir_node *nn = ir_xmalloc(sizeof(ir_node) * ((size_t)live + 1));
  for (int i = 0; i < live; i++) nn[i] = g->nodes[order[i]];
  free(g->nodes);
  g->nodes = nn;
  g->n_nodes = g->cap_nodes = live;
  if (!g->cap_nodes) g->cap_nodes = 1;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == IR_VAL_ACT) g->values[v].producer = -1;
  for (int i = 0; i < live; i++)
    for (int o = 0; o < g->nodes[i].n_out; o++)
      if (g->nodes[i].out[o] >= 0) g->values[g->nodes[i].out[o]].producer = i;
  free(indeg);
  free(order);
  ir_rebuild_uses(g);
  return 0;
}

int ir_remove_dead(ir_graph *g, char *need) {
  int n_dead = 0;
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    int live = 0;
    for (int k = 0; k < n->n_out && !live; k++) live = n->out[k] >= 0 && need[n->out[k]];
    if (!live) {
      n->dead = 1;
      n_dead++;
      continue;
    }
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) need[n->in[k]] = 1;
  }
  return n_dead;
}

void ir_compact(ir_graph *g) {
  /* nodes: drop dead, keep order */
  int w = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead) g->nodes[w++] = g->nodes[i];
  g->n_nodes = w;
  /* values: keep those used, produced by a live node, inputs, or outputs */
  char *keep = ir_xcalloc((size_t)g->n_values + 1, 1);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) keep[n->in[k]] = 1;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) keep[n->out[k]] = 1;
    for (int k = 0; k < n->n_attr; k++) /* e.g. ConstantOfShape's value */
      if (n->attr[k].type == IR_ATTR_TENSOR && n->attr[k].tensor >= 0) keep[n->attr[k].tensor] = 1;
  }
  for (int k = 0; k < g->n_inputs; k++) keep[g->inputs[k]] = 1;
  for (int k = 0; k < g->n_outputs; k++) keep[g->outputs[k]] = 1;
  for (int v = 0; v < g->n_values; v++) /* a param a kept value is written back into */
    if (keep[v] && g->values[v].writeback >= 0) keep[g->values[v].writeback] = 1;
  int *remap = ir_xmalloc(sizeof(int) * ((size_t)g->n_values + 1));
  int nv = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (keep[v]) {
      remap[v] = nv;
      g->values[nv++] = g->values[v];
    } else remap[v] = -1;
  }
  g->n_values = nv;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) n->in[k] = remap[n->in[k]];
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) n->out[k] = remap[n->out[k]];
    for (int k = 0; k < n->n_attr; k++)
      if (n->attr[k].type == IR_ATTR_TENSOR) n->attr[k].tensor = n->attr[k].tensor >= 0 ? remap[n->attr[k].tensor] : -1;
  }
  for (int k = 0; k < g->n_inputs; k++) g->inputs[k] = remap[g->inputs[k]];
  for (int k = 0; k < g->n_outputs; k++) g->outputs[k] = remap[g->outputs[k]];
  for (int v = 0; v < nv; v++)
    if (g->values[v].writeback >= 0) g->values[v].writeback = remap[g->values[v].writeback];
  /* rebuild the name map (the suffix counters stay) */
  ir_strmap *sfx = g->names->suffix;
  g->names->suffix = NULL;
  strmap_free(g->names);
  g->names = strmap_new();
  g->names->suffix = sfx;
  for (int v = 0; v < g->n_values; v++) {
    strmap_put(g->names, g->values[v].name, v);
    g->values[v].producer = -1;
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int o = 0; o < g->nodes[i].n_out; o++)
      if (g->nodes[i].out[o] >= 0) g->values[g->nodes[i].out[o]].producer = i;
  free(keep);
  free(remap);
  ir_rebuild_uses(g);
}

/* ---- constants ---- */

/* Where element i of constant v lies in its data (see data_nchw). */
static int64_t const_at(const ir_value *v, int64_t i) {
  if (!v->data_nchw || v->shape.rank != 4) return i;
  int64_t H = v->shape.dims[1], W = v->shape.dims[2], C = v->shape.dims[3];
  int64_t c = i % C, w = i / C % W, h = i / (C * W) % H, n = i / (C * W * H);
  return ((n * C + c) * H + h) * W + w;
}

void ir_const_copy(const ir_value *v, void *dst) {
  if (!v->nbytes) return;
  if (v->zero_init || !v->data) {
    memset(dst, 0, v->nbytes);
    return;
  }
  if (!v->data_nchw || v->shape.rank != 4) {
    memcpy(dst, v->data, v->nbytes);
    return;
  }
  size_t es = ir_dtype_size(v->dtype);
  int64_t N = v->shape.dims[0], H = v->shape.dims[1], W = v->shape.dims[2], C = v->shape.dims[3], HW = H * W;
  const unsigned char *src = v->data;
  unsigned char *o = dst;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) { /* read a plane in order, scatter it channel-strided */
      const unsigned char *s = src + (size_t)((n * C + c) * HW) * es;
      unsigned char *d = o + (size_t)(n * HW * C + c) * es;
      for (int64_t q = 0; q < HW; q++) memcpy(d + (size_t)(q * C) * es, s + (size_t)q * es, es);
    }
}

int ir_const_i64(const ir_value *v, int64_t i, int64_t *out) {
  size_t es = ir_dtype_size(v->dtype);
  if (v->kind != IR_VAL_CONST || (!v->data && !v->zero_init) || !es || i < 0 || (uint64_t)(i + 1) * es > v->nbytes)
    return -1;
  if (v->zero_init) {
    *out = 0;
    return 0;
  }
  const unsigned char *p = (const unsigned char *)v->data + (size_t)const_at(v, i) * es;
  switch (v->dtype) {
    case IR_INT64: {
      int64_t x;
      memcpy(&x, p, 8);
      *out = x;
      return 0;
    }
    case IR_INT32: {
      int32_t x;
      memcpy(&x, p, 4);
      *out = x;
      return 0;
    }
    case IR_INT16: {
      int16_t x;
      memcpy(&x, p, 2);
      *out = x;
      return 0;
    }
    case IR_INT8:
    case IR_INT2:
    case IR_INT4: {
      int8_t x;
      memcpy(&x, p, 1);
      *out = x;
      return 0;
    }
    case IR_UINT8:
    case IR_UINT4:
    case IR_UINT2:
    case IR_BOOL: *out = *p; return 0;
    case IR_UINT16: {
      uint16_t x;
      memcpy(&x, p, 2);
      *out = x;
      return 0;
    }
    case IR_UINT32: {
      uint32_t x;
      memcpy(&x, p, 4);
      *out = x;
      return 0;
    }
    case IR_UINT64: {
      uint64_t x;
      memcpy(&x, p, 8);
      *out = (int64_t)x;
      return 0;
    }
    case IR_FLOAT: {
      float x;
      memcpy(&x, p, 4);
      *out = (int64_t)x;
      return 0;
    }
    case IR_DOUBLE: {
      double x;
      memcpy(&x, p, 8);
      *out = (int64_t)x;
      return 0;
    }
    default: return -1;
  }
}

int ir_const_f64(const ir_value *v, int64_t i, double *out) {
  size_t es = ir_dtype_size(v->dtype);
  if (v->kind != IR_VAL_CONST || (!v->data && !v->zero_init) || !es || i < 0 || (uint64_t)(i + 1) * es > v->nbytes)
    return -1;
  if (v->zero_init) {
    *out = 0;
    return 0;
  }
  const unsigned char *p = (const unsigned char *)v->data + (size_t)const_at(v, i) * es;
  switch (v->dtype) {
    case IR_FLOAT: {
      float x;
      memcpy(&x, p, 4);
      *out = x;
      return 0;
    }
    case IR_DOUBLE: {
      double x;
      memcpy(&x, p, 8);
      *out = x;
      return 0;
    }
    /* the narrow types: their bit patterns' values (runtime/pipert.h), exact */
    case IR_FLOAT16:
    case IR_BFLOAT16: {
      uint16_t x;
      memcpy(&x, p, 2);
      *out = pipert_from_bits(x, v->dtype);
      return 0;
    }
    case IR_FLOAT8E4M3FN:
    case IR_FLOAT8E4M3FNUZ:
    case IR_FLOAT8E5M2:
    case IR_FLOAT8E5M2FNUZ:
    case IR_FLOAT4E2M1:
    case IR_FLOAT8E8M0:
    case IR_FLOAT6E2M3:
    case IR_FLOAT6E3M2: *out = pipert_from_bits(*p, v->dtype); return 0;
    default: {
      int64_t x;
      if (ir_const_i64(v, i, &x)) return -1;
      *out = (v->dtype == IR_UINT64) ? (double)(uint64_t)x : (double)x;
      return 0;
    }
  }
}

int64_t ir_graph_batch(const ir_graph *g, int64_t none) {
  for (int k = 0; k < g->n_inputs; k++)
    if (g->values[g->inputs[k]].shape.rank > 0) return g->values[g->inputs[k]].shape.dims[0];
  return none;
}

int64_t ir_value_bytes(const ir_value *v) {
  int64_t n = ir_shape_numel(&v->shape);
  size_t es = ir_dtype_size(v->dtype);
  if (n < 0 || !es) return -1;
  if (n > INT64_MAX / (int64_t)es) return -1;
  return n * (int64_t)es;
}
