/* codegen/c/emit.c - the CPU target: stage_K.c, weights_K.bin, pipeline_main.c and a
 * Makefile for a planned graph (see codegen/codegen.h and runtime/pipert.h).
 *
 * Per stage: the stage's nodes in graph order are grouped into units (fused
 * element-wise trees, see cg_c.h); every value the stage touches gets a location:
 *   constant          -> weights_K.bin at a 64-byte aligned offset (W + off)
 *   stage input k     -> in[k]  (an earlier stage's output or a graph input)
 *   stage output k    -> out[k] (written in place by its producer)
 *   anything else     -> the state's arena, offsets planned by liveness (first fit),
 *                        or the memory of its input for aliasing nodes (Reshape...).
 * Nothing here depends on hash order, addresses or time, so the output is
 * byte-identical for the same inputs. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/c/cg_c.h"
#include "ir/diag.h"

#define ALIGN 64
static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* ---- helpers shared with the op emitters ---------------------------------------- */

void cg_w(cg_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(c->body, fmt, ap);
  va_end(ap);
}

void cg_scratch(cg_ctx *c, size_t n) {
  if (n > c->unit_scratch) c->unit_scratch = n;
}

int cg_fail(cg_ctx *c, const ir_node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ir_error_node(c->g, (int)(n - c->g->nodes), "cpu target: %s", msg);
  return -1;
}

const char *cg_ctype(ir_dtype t) {
  switch (t) {
    case IR_FLOAT: return "float";
    case IR_DOUBLE: return "double";
    case IR_INT8: return "int8_t";
    case IR_UINT8: return "uint8_t";
    case IR_INT16: return "int16_t";
    case IR_UINT16: return "uint16_t";
    case IR_INT32: return "int32_t";
    case IR_UINT32: return "uint32_t";
    case IR_INT64: return "int64_t";
    case IR_UINT64: return "uint64_t";
    case IR_BOOL: return "uint8_t";
    default: return NULL;
  }
}

const char *cg_flit(char *buf, size_t n, double v, ir_dtype t) {
  if (v != v) snprintf(buf, n, "NAN");
  else if (v == 1.0 / 0.0) snprintf(buf, n, "INFINITY");
  else if (v == -1.0 / 0.0) snprintf(buf, n, "(-INFINITY)");
  else if (t == IR_DOUBLE) snprintf(buf, n, "%.17g", v);
  else {
    /* %.9g reads back exactly as a float; make sure it looks like a float literal */
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.9g", (double)(float)v);
    int has = strchr(tmp, '.') || strchr(tmp, 'e') || strchr(tmp, 'n') || strchr(tmp, 'i');
    snprintf(buf, n, "%s%s%sf%s", tmp[0] == '-' ? "(" : "", tmp, has ? "" : ".0", tmp[0] == '-' ? ")" : "");
  }
  if (t == IR_DOUBLE && v == v && v != 1.0 / 0.0 && v != -1.0 / 0.0) {
    if (!strchr(buf, '.') && !strchr(buf, 'e') && !strchr(buf, 'n') && !strchr(buf, 'i')) strcat(buf, ".0");
    if (buf[0] == '-') {
      char tmp[64];
      snprintf(tmp, sizeof tmp, "(%s)", buf);
      snprintf(buf, n, "%s", tmp);
    }
  }
  return buf;
}

ir_value *cg_in(cg_ctx *c, const ir_node *n, int slot) { return ir_in(c->g, n, slot); }
ir_value *cg_out(cg_ctx *c, const ir_node *n, int slot) { return ir_out(c->g, n, slot); }

int64_t cg_numel(const ir_value *v) {
  int64_t e = 1;
  for (int i = 0; i < v->shape.rank; i++) e *= v->shape.dims[i];
  return e;
}

void cg_strides(const ir_shape *s, int64_t *st) {
  int64_t acc = 1;
  for (int i = s->rank - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= s->dims[i];
  }
}

int cg_const_ints(cg_ctx *c, const ir_node *n, int slot, int64_t *out, int max) {
  ir_value *v = cg_in(c, n, slot);
  if (!v || v->kind != IR_VAL_CONST) return -1;
  int64_t cnt = cg_numel(v);
  if (cnt > max) return -1;
  for (int64_t i = 0; i < cnt; i++)
    if (ir_const_i64(v, i, &out[i])) return -1;
  return (int)cnt;
}

int cg_const_f64(cg_ctx *c, const ir_node *n, int slot, double *out) {
  ir_value *v = cg_in(c, n, slot);
  if (!v || v->kind != IR_VAL_CONST || cg_numel(v) < 1) return -1;
  return ir_const_f64(v, 0, out);
}

int cg_is_alias(const ir_node *n) {
  switch (n->op) {
    case IR_OP_Reshape: case IR_OP_Flatten: case IR_OP_Squeeze: case IR_OP_Unsqueeze:
    case IR_OP_Identity:
      return 1;
    case IR_OP_Dropout:
      return n->n_out < 2 || n->out[1] < 0;
    default:
      return 0;
  }
}

/* ---- text helpers --------------------------------------------------------------- */

/* A C string literal for s. */
static void put_cstr(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 32 || *p >= 127 || *p == '?') fprintf(f, "\\%03o", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

/* Text safe inside a C comment (no "*\/", no newlines), cut to max bytes. */
static void put_comment(FILE *f, const char *s, size_t max) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && n < max; p++, n++) {
    if (*p == '*' && p[1] == '/') fputs("*_", f), p++;
    else if (*p == '/' && p[1] == '*') fputs("/_", f), p++;
    else if (*p < 32 || *p == 127) fputc('?', f);
    else fputc(*p, f);
  }
  if (*s && strlen(s) > max) fputs("...", f);
}

static void put_header(FILE *f, const ir_graph *g, const cg_options *o, const char *what) {
  fprintf(f, "/* %s\n * Generated by pipecc %s (cpu target); do not edit.\n * Command: ", what, PIPECC_VERSION);
  put_comment(f, o && o->command_line ? o->command_line : "pipecc", 4000);
  fputs("\n * Model: ", f);
  put_comment(f, o && o->model_path ? o->model_path : (g->path ? g->path : "?"), 1000);
  fputs(" (producer ", f);
  put_comment(f, g->producer_name && *g->producer_name ? g->producer_name : "unknown", 200);
  if (g->producer_version && *g->producer_version) {
    fputc(' ', f);
    put_comment(f, g->producer_version, 200);
  }
  fprintf(f, ", opset %d) */\n", g->opset);
}

static void put_header_hash(FILE *f, const ir_graph *g, const cg_options *o, const char *what) {
  /* same information for Makefiles */
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  put_header(m, g, o, what);
  fclose(m);
  fputs("# ", f);
  for (char *p = buf; *p; p++) {
    if (*p == '\n') {
      if (p[1]) fputs("\n# ", f);
      else fputc('\n', f);
    } else if (*p == '$') fputs("$$", f);
    else fputc(*p, f);
  }
  free(buf);
}

/* ---- stage analysis --------------------------------------------------------------- */

enum { LOC_NONE = 0, LOC_W, LOC_IN, LOC_OUT, LOC_A };

typedef struct {
  int root;           /* node index of the unit's root */
  int *nodes;         /* members in graph order (root last) */
  int n_nodes;
  int *ext;           /* eltwise units: distinct external input values */
  int n_ext;
  int alias;          /* emits no code: its output lives in its input's memory */
} unit;

typedef struct {
  int n_stages;
  int *vstage;        /* [n_values] stage producing the value; -1 graph input, -2 constant */
  int *last_stage;    /* [n_values] last stage using it (or n_stages for graph outputs) */
  int **s_in, *n_in;  /* per stage: input values */
  int **s_out, *n_out;/* per stage: output values */
  int *out_index;     /* [n_values] index in its producing stage's outputs, else -1 */
  char *passthrough;  /* [n_values] a graph output that is a constant or a graph input:
                       * the last stage copies it to its output */
} stage_info;

static void push(int **arr, int *n, int v) {
  if ((*n & (*n - 1)) == 0) *arr = ir_xrealloc(*arr, sizeof(int) * (size_t)(*n ? *n * 2 : 1));
  (*arr)[(*n)++] = v;
}

static int analyse_stages(ir_graph *g, const cg_plan *p, stage_info *si) {
  int S = p->n_stages, nv = g->n_values;
  si->n_stages = S;
  si->vstage = ir_xmalloc(sizeof(int) * (size_t)(nv + 1));
  si->last_stage = ir_xmalloc(sizeof(int) * (size_t)(nv + 1));
  si->out_index = ir_xmalloc(sizeof(int) * (size_t)(nv + 1));
  si->passthrough = ir_xcalloc((size_t)nv + 1, 1);
  si->s_in = ir_xcalloc((size_t)S, sizeof(int *));
  si->s_out = ir_xcalloc((size_t)S, sizeof(int *));
  si->n_in = ir_xcalloc((size_t)S, sizeof(int));
  si->n_out = ir_xcalloc((size_t)S, sizeof(int));
  for (int v = 0; v < nv; v++) {
    ir_value *val = &g->values[v];
    si->vstage[v] = val->kind == IR_VAL_CONST ? -2 : val->kind == IR_VAL_INPUT ? -1 : -3;
    si->last_stage[v] = -1;
    si->out_index[v] = -1;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) si->vstage[n->out[k]] = p->node_stage[i];
  }
  /* every stage's set of used values, as marks per stage */
  char *used = ir_xcalloc((size_t)nv + 1, 1);
  for (int s = 0; s < S; s++) {
    memset(used, 0, (size_t)nv + 1);
    for (int i = 0; i < g->n_nodes; i++) {
      const ir_node *n = &g->nodes[i];
      if (n->dead || p->node_stage[i] != s) continue;
      for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0 || used[v]) continue;
        used[v] = 1;
        if (si->vstage[v] == -2) continue;
        if (si->vstage[v] == -3) {
          ir_error_node(g, i, "input '%s' has no producer", g->values[v].name);
          free(used);
          return -1;
        }
        if (si->vstage[v] > s) {
          ir_error_node(g, i, "internal error: the plan is not a linear pipeline (input from stage %d in stage %d)",
                        si->vstage[v], s);
          free(used);
          return -1;
        }
        if (s > si->last_stage[v]) si->last_stage[v] = s;
      }
    }
    for (int v = 0; v < nv; v++)
      if (used[v] && (si->vstage[v] == -1 || (si->vstage[v] >= 0 && si->vstage[v] < s))) push(&si->s_in[s], &si->n_in[s], v);
  }
  free(used);
  for (int k = 0; k < g->n_outputs; k++) {
    int v = g->outputs[k];
    if (si->vstage[v] == -3) {
      ir_error(g, "graph output '%s' has no producer", g->values[v].name);
      return -1;
    }
    if (si->vstage[v] < 0 && !si->passthrough[v]) {
      si->passthrough[v] = 1;
      if (si->vstage[v] == -1) {
        int have = 0;
        for (int k = 0; k < si->n_in[S - 1]; k++) have |= si->s_in[S - 1][k] == v;
        if (!have) {
          push(&si->s_in[S - 1], &si->n_in[S - 1], v);
          for (int k = si->n_in[S - 1] - 1; k > 0 && si->s_in[S - 1][k] < si->s_in[S - 1][k - 1]; k--) {
            int t = si->s_in[S - 1][k];
            si->s_in[S - 1][k] = si->s_in[S - 1][k - 1];
            si->s_in[S - 1][k - 1] = t;
          }
        }
      }
    }
    si->last_stage[v] = S;
  }
  for (int v = 0; v < nv; v++) {
    int s = si->passthrough[v] ? S - 1 : si->vstage[v];
    if (s >= 0 && si->last_stage[v] > s) {
      si->out_index[v] = si->n_out[s];
      push(&si->s_out[s], &si->n_out[s], v);
    }
  }
  return 0;
}

static void free_stage_info(stage_info *si) {
  for (int s = 0; s < si->n_stages; s++) {
    free(si->s_in[s]);
    free(si->s_out[s]);
  }
  free(si->s_in);
  free(si->s_out);
  free(si->n_in);
  free(si->n_out);
  free(si->vstage);
  free(si->last_stage);
  free(si->out_index);
  free(si->passthrough);
}

/* ---- arena planning ----------------------------------------------------------------- */

typedef struct { size_t off, size; } block;
typedef struct { block *b; int n, cap; size_t peak; } alloc_state;

static size_t arena_alloc(alloc_state *a, size_t size) {
  size = align_up(size ? size : 1);
  size_t off = 0;
  int at = 0;
  for (; at < a->n; at++) {
    if (a->b[at].off >= off + size) break;
    size_t end = a->b[at].off + a->b[at].size;
    if (end > off) off = end;
  }
  if (a->n == a->cap) {
    a->cap = a->cap ? a->cap * 2 : 16;
    a->b = ir_xrealloc(a->b, sizeof(block) * (size_t)a->cap);
  }
  memmove(&a->b[at + 1], &a->b[at], sizeof(block) * (size_t)(a->n - at));
  a->b[at].off = off;
  a->b[at].size = size;
  a->n++;
  if (off + size > a->peak) a->peak = off + size;
  return off;
}

static void arena_free(alloc_state *a, size_t off) {
  for (int i = 0; i < a->n; i++)
    if (a->b[i].off == off) {
      memmove(&a->b[i], &a->b[i + 1], sizeof(block) * (size_t)(a->n - i - 1));
      a->n--;
      return;
    }
  IR_ASSERT(0 && "arena_free: no such block");
}

/* ---- one stage ------------------------------------------------------------------------- */

typedef struct {
  ir_graph *g;
  const cg_plan *p;
  const cg_options *o;
  const stage_info *si;
  int s;
  /* per value */
  int *loc;
  size_t *off;        /* LOC_W/LOC_A: byte offset; LOC_IN/LOC_OUT: index */
  int *root;          /* alias root */
  int *def_unit, *last_unit;
  unit *units;
  int n_units;
  int *w_vals;
  int n_w;
  size_t w_bytes;
} stage_ctx;

static int same_shape(const ir_shape *a, const ir_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* Group the stage's nodes into units. */
static void build_units(stage_ctx *st) {
  ir_graph *g = st->g;
  int N = g->n_nodes;
  int *group = ir_xmalloc(sizeof(int) * (size_t)(N + 1)); /* node -> root of its unit, -1 not in stage */
  for (int i = 0; i < N; i++) group[i] = (!g->nodes[i].dead && st->p->node_stage[i] == st->s) ? i : -1;
  for (int i = 0; i < N; i++) {
    if (group[i] < 0) continue;
    const ir_node *n = &g->nodes[i];
    if (!cg_is_eltwise(g, n)) continue;
    const ir_value *y = ir_out(g, n, 0);
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < 0) continue;
      const ir_value *x = &g->values[v];
      int pnode = x->producer;
      if (x->kind != IR_VAL_ACT || pnode < 0 || group[pnode] != pnode) continue; /* other stage, or already merged */
      if (!cg_is_eltwise(g, &g->nodes[pnode]) || x->n_uses != 1 || x->is_output) continue;
      if (st->si->last_stage[v] > st->s) continue;
      if (!same_shape(&x->shape, &y->shape)) continue;
      /* merge the producer's unit into this node's */
      int old = pnode;
      for (int j = 0; j <= pnode; j++)
        if (group[j] == old) group[j] = i;
    }
  }
  st->units = ir_xcalloc((size_t)N + 1, sizeof(unit));
  st->n_units = 0;
  for (int i = 0; i < N; i++) {
    if (group[i] != i) continue;
    unit *u = &st->units[st->n_units++];
    u->root = i;
    for (int j = 0; j <= i; j++)
      if (group[j] == i) push(&u->nodes, &u->n_nodes, j);
    const ir_node *n = &g->nodes[i];
    if (u->n_nodes == 1 && cg_is_alias(n) && n->in[0] >= 0 && st->si->out_index[n->out[0]] < 0) u->alias = 1;
    if (cg_is_eltwise(g, n)) {
      /* external inputs: values not produced inside the unit, in order of appearance */
      for (int m = 0; m < u->n_nodes; m++) {
        const ir_node *mn = &g->nodes[u->nodes[m]];
        int nin = mn->n_in;
        if (mn->op == IR_OP_Expand || mn->op == IR_OP_CastLike) nin = 1; /* the shape / the type: compile time */
        for (int k = 0; k < nin; k++) {
          int v = mn->in[k];
          if (v < 0) continue;
          int pnode = g->values[v].producer;
          if (g->values[v].kind == IR_VAL_ACT && pnode >= 0 && group[pnode] == i) continue;
          int dup = 0;
          for (int e = 0; e < u->n_ext; e++) dup |= u->ext[e] == v;
          if (!dup) push(&u->ext, &u->n_ext, v);
        }
      }
    }
  }
  free(group);
}

/* Locations: weights, stage inputs/outputs, alias roots, liveness, arena offsets.
 * Returns the arena bytes needed for values. */
static size_t plan_memory(stage_ctx *st) {
  ir_graph *g = st->g;
  const stage_info *si = st->si;
  int nv = g->n_values, s = st->s;
  for (int v = 0; v < nv; v++) {
    st->root[v] = v;
    st->def_unit[v] = -1;
    st->last_unit[v] = -1;
  }
  for (int k = 0; k < si->n_in[s]; k++) {
    st->loc[si->s_in[s][k]] = LOC_IN;
    st->off[si->s_in[s][k]] = (size_t)k;
  }
  char *wmark = ir_xcalloc((size_t)nv + 1, 1);
  for (int k = 0; k < si->n_out[s]; k++) {
    int v = si->s_out[s][k];
    if (si->passthrough[v]) {
      if (g->values[v].kind == IR_VAL_CONST) wmark[v] = 1; /* copied out of the weights */
      continue;
    }
    st->loc[v] = LOC_OUT;
    st->off[v] = (size_t)k;
  }
  /* constants: in value order */
  for (int u = 0; u < st->n_units; u++)
    for (int m = 0; m < st->units[u].n_nodes; m++) {
      const ir_node *n = &g->nodes[st->units[u].nodes[m]];
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && g->values[n->in[k]].kind == IR_VAL_CONST) wmark[n->in[k]] = 1;
    }
  st->w_bytes = 0;
  for (int v = 0; v < nv; v++) {
    if (!wmark[v]) continue;
    st->loc[v] = LOC_W;
    st->off[v] = st->w_bytes;
    push(&st->w_vals, &st->n_w, v);
    st->w_bytes += align_up(g->values[v].nbytes);
  }
  free(wmark);
  /* liveness over units */
  for (int u = 0; u < st->n_units; u++) {
    unit *un = &st->units[u];
    for (int m = 0; m < un->n_nodes; m++) {
      const ir_node *n = &g->nodes[un->nodes[m]];
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0) st->last_unit[n->in[k]] = u;
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0) {
          st->def_unit[n->out[k]] = u;
          if (st->last_unit[n->out[k]] < u) st->last_unit[n->out[k]] = u;
        }
    }
    if (un->alias) {
      const ir_node *n = &g->nodes[un->root];
      st->root[n->out[0]] = st->root[n->in[0]];
    }
  }
  for (int v = 0; v < nv; v++)
    if (st->root[v] != v && st->last_unit[v] > st->last_unit[st->root[v]]) st->last_unit[st->root[v]] = st->last_unit[v];
  /* arena: allocate outputs of each unit, then free what died at it */
  alloc_state a = {0};
  int **dying = ir_xcalloc((size_t)st->n_units + 1, sizeof(int *));
  int *n_dying = ir_xcalloc((size_t)st->n_units + 1, sizeof(int));
  for (int u = 0; u < st->n_units; u++) {
    unit *un = &st->units[u];
    const ir_node *n = &g->nodes[un->root];
    if (un->alias) continue;
    /* fused members' outputs never reach memory; only the root's outputs do */
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0 || st->loc[v] != LOC_NONE) continue;
      st->loc[v] = LOC_A;
      st->off[v] = arena_alloc(&a, (size_t)ir_value_bytes(&g->values[v]));
      push(&dying[st->last_unit[v]], &n_dying[st->last_unit[v]], v);
    }
    for (int d = 0; d < n_dying[u]; d++) arena_free(&a, st->off[dying[u][d]]);
  }
  for (int u = 0; u < st->n_units; u++) free(dying[u]);
  free(dying);
  free(n_dying);
  free(a.b);
  return align_up(a.peak);
}

/* Pointer expression for value v at a call site. */
static void put_ptr(FILE *f, stage_ctx *st, int v, int is_const) {
  int r = st->root[v];
  const char *t = cg_ctype(st->g->values[v].dtype);
  switch (st->loc[r]) {
    case LOC_W: fprintf(f, "(const %s *)(W + %zu)", t, st->off[r]); break;
    case LOC_IN: fprintf(f, "(const %s *)in[%zu]", t, st->off[r]); break;
    case LOC_OUT: fprintf(f, "(%s%s *)out[%zu]", is_const ? "const " : "", t, st->off[r]); break;
    case LOC_A: fprintf(f, "(%s%s *)(A + %zu)", is_const ? "const " : "", t, st->off[r]); break;
    default: IR_ASSERT(0 && "value without a location");
  }
}

typedef struct {
  char name[16];
  int value;    /* -1: scratch */
  int is_out;
} param;

static int ident_used(const char *body, const char *id) {
  size_t n = strlen(id);
  for (const char *p = strstr(body, id); p; p = strstr(p + 1, id)) {
    int before = p > body && (p[-1] == '_' || (p[-1] >= '0' && p[-1] <= '9') || ((p[-1] | 32) >= 'a' && (p[-1] | 32) <= 'z'));
    char c = p[n];
    int after = c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
    if (!before && !after) return 1;
  }
  return 0;
}

static void put_unit_comment(FILE *f, ir_graph *g, const unit *u, const char *indent) {
  for (int m = 0; m < u->n_nodes; m++) {
    const ir_node *n = &g->nodes[u->nodes[m]];
    fprintf(f, "%s/* node %d: %s '", indent, n->index, ir_op_name(n->op));
    put_comment(f, n->name, 200);
    fputs("' */\n", f);
  }
}

/* Emit the function for unit u into f, and its call into call. Returns 0 or -1. */
static int emit_unit(stage_ctx *st, cg_ctx *c, int ui, FILE *f, FILE *call) {
  ir_graph *g = st->g;
  unit *u = &st->units[ui];
  const ir_node *root = &g->nodes[u->root];
  if (u->alias) {
    put_unit_comment(call, g, u, "  ");
    fprintf(call, "  /* (alias: no code) */\n");
    return 0;
  }
  param ps[64 + 8];
  int np = 0;
  char *body = NULL;
  size_t blen = 0;
  c->body = open_memstream(&body, &blen);
  c->unit_scratch = 0;
  int rc;
  int eltwise = cg_is_eltwise(g, root);
  if (eltwise) {
    if (u->n_ext > 64) {
      fclose(c->body);
      free(body);
      return cg_fail(c, root, "an element-wise unit with more than 64 inputs");
    }
    for (int e = 0; e < u->n_ext; e++) {
      snprintf(ps[np].name, sizeof ps[np].name, "x%d", e);
      ps[np].value = u->ext[e];
      ps[np++].is_out = 0;
    }
    snprintf(ps[np].name, sizeof ps[np].name, "y0");
    ps[np].value = root->out[0];
    ps[np++].is_out = 1;
    rc = cg_emit_eltwise(c, u->nodes, u->n_nodes, u->ext, u->n_ext);
  } else {
    cg_op_fn fn = cg_op_emitter(root->op);
    if (root->n_in > 64 || root->n_out > 8) rc = cg_fail(c, root, "too many inputs or outputs");
    else if (!fn) rc = cg_fail(c, root, "op %s is not supported", ir_op_name(root->op));
    else {
      for (int k = 0; k < root->n_in; k++) {
        if (root->in[k] < 0) continue;
        snprintf(ps[np].name, sizeof ps[np].name, "x%d", k);
        ps[np].value = root->in[k];
        ps[np++].is_out = 0;
      }
      for (int k = 0; k < root->n_out; k++) {
        if (root->out[k] < 0) continue;
        snprintf(ps[np].name, sizeof ps[np].name, "y%d", k);
        ps[np].value = root->out[k];
        ps[np++].is_out = 1;
      }
      rc = fn(c, root);
    }
  }
  fclose(c->body);
  c->body = NULL;
  if (rc) {
    free(body);
    return -1;
  }
  snprintf(ps[np].name, sizeof ps[np].name, "scr");
  ps[np].value = -1;
  ps[np++].is_out = 0;
  if (c->unit_scratch > c->scratch) c->scratch = c->unit_scratch;

  char fname[64];
  snprintf(fname, sizeof fname, "n%d_%s", u->root, eltwise && u->n_nodes > 1 ? "fused" : ir_op_name(root->op));
  put_unit_comment(f, g, u, "");
  fprintf(f, "static void %s(", fname);
  int first = 1;
  for (int i = 0; i < np; i++) {
    if (!ident_used(body, ps[i].name)) continue;
    if (!first) fputs(", ", f);
    first = 0;
    if (ps[i].value < 0) fprintf(f, "void *restrict %s", ps[i].name);
    else
      fprintf(f, "%s%s *restrict %s", ps[i].is_out ? "" : "const ", cg_ctype(g->values[ps[i].value].dtype), ps[i].name);
  }
  if (first) fputs("void", f);
  fputs(") {\n", f);
  fputs(body, f);
  fputs("}\n\n", f);

  put_unit_comment(call, g, u, "  ");
  fprintf(call, "  %s(", fname);
  first = 1;
  for (int i = 0; i < np; i++) {
    if (!ident_used(body, ps[i].name)) continue;
    if (!first) fputs(", ", call);
    first = 0;
    if (ps[i].value < 0) fputs("A + SCRATCH_OFF", call);
    else put_ptr(call, st, ps[i].value, !ps[i].is_out);
  }
  fputs(");\n", call);
  free(body);
  return 0;
}

static void put_tensor_descs(FILE *f, ir_graph *g, const char *name, const int *vals, int n) {
  if (!n) return;
  fprintf(f, "static const pipert_tensor_desc %s[%d] = {\n", name, n);
  for (int k = 0; k < n; k++) {
    const ir_value *v = &g->values[vals[k]];
    fputs("  {", f);
    put_cstr(f, v->name);
    int rank = v->shape.rank;
    fprintf(f, ", %d, %d, {", (int)v->dtype, rank ? rank : 1);
    if (!rank) fputs("1", f);
    for (int i = 0; i < rank; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", v->shape.dims[i]);
    fprintf(f, "}, %" PRId64 "u},\n", ir_value_bytes(v));
  }
  fputs("};\n", f);
}

static int write_file(const char *dir, const char *name, const void *data, size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f)) {
    fprintf(stderr, "pipecc: %s: %s\n", path, strerror(errno));
    if (f) fclose(f);
    return -1;
  }
  return 0;
}

static int emit_stage(ir_graph *g, const cg_plan *p, const cg_options *o, const stage_info *si, int s,
                      const char *dir) {
  stage_ctx st = {0};
  int nv = g->n_values;
  st.g = g;
  st.p = p;
  st.o = o;
  st.si = si;
  st.s = s;
  st.loc = ir_xcalloc((size_t)nv + 1, sizeof(int));
  st.off = ir_xcalloc((size_t)nv + 1, sizeof(size_t));
  st.root = ir_xcalloc((size_t)nv + 1, sizeof(int));
  st.def_unit = ir_xcalloc((size_t)nv + 1, sizeof(int));
  st.last_unit = ir_xcalloc((size_t)nv + 1, sizeof(int));
  build_units(&st);
  size_t arena = plan_memory(&st);

  cg_ctx c = {0};
  c.g = g;
  char *fbuf = NULL, *cbuf = NULL;
  size_t flen = 0, clen = 0;
  FILE *fns = open_memstream(&fbuf, &flen), *calls = open_memstream(&cbuf, &clen);
  int rc = 0;
  for (int u = 0; u < st.n_units; u++)
    if (emit_unit(&st, &c, u, fns, calls)) rc = -1;
  fclose(fns);
  fclose(calls);

  /* weights */
  unsigned char *wbuf = ir_xcalloc(st.w_bytes + 1, 1);
  for (int k = 0; k < st.n_w; k++) {
    const ir_value *v = &g->values[st.w_vals[k]];
    if (v->nbytes) memcpy(wbuf + st.off[st.w_vals[k]], v->data, v->nbytes);
  }
  uint64_t sum = cg_checksum64(wbuf, st.w_bytes);

  char *sbuf = NULL;
  size_t slen = 0;
  FILE *f = open_memstream(&sbuf, &slen);
  char what[64];
  snprintf(what, sizeof what, "stage_%d.c: stage %d of %d", s, s, p->n_stages);
  put_header(f, g, o, what);
  int first_node = -1, last_node = -1, count = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead && p->node_stage[i] == s) {
      if (first_node < 0) first_node = i;
      last_node = i;
      count++;
    }
  fprintf(f, "/* %d nodes, %d units; %d inputs, %d outputs; weights %zu bytes; arena %zu bytes + scratch %zu bytes */\n",
          count, st.n_units, si->n_in[s], si->n_out[s], st.w_bytes, arena, align_up(c.scratch));
  fputs("#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n#include <cblas.h>\n\n"
        "#include \"pipert.h\"\n\n",
        f);
  size_t total = arena + align_up(c.scratch);
  fprintf(f, "#define ARENA_BYTES %zuu\n#define SCRATCH_OFF %zuu\n\n", total ? total : ALIGN, arena);
  if (flen) fputs(fbuf, f);
  fputs("typedef struct {\n  const unsigned char *w;\n  unsigned char *a;\n} stage_state;\n\n", f);
  fputs("static int stage_init(void **state, const void *weights, size_t weights_len) {\n"
        "  (void)weights_len;\n"
        "  stage_state *s = calloc(1, sizeof *s);\n"
        "  if (!s) return 1;\n"
        "  s->w = weights;\n"
        "  s->a = aligned_alloc(64, ARENA_BYTES);\n"
        "  if (!s->a) {\n    free(s);\n    return 1;\n  }\n"
        "  memset(s->a, 0, ARENA_BYTES);\n"
        "  *state = s;\n  return 0;\n}\n\n",
        f);
  fputs("static void stage_fini(void *state) {\n  stage_state *s = state;\n  if (!s) return;\n  free(s->a);\n  free(s);\n}\n\n", f);
  fputs("static int stage_forward(void *state, const void *const *in, void *const *out) {\n"
        "  stage_state *s = state;\n  const unsigned char *W = s->w;\n  unsigned char *A = s->a;\n"
        "  (void)W;\n  (void)A;\n  (void)in;\n  (void)out;\n",
        f);
  if (clen) fputs(cbuf, f);
  for (int k = 0; k < si->n_out[s]; k++) {
    int v = si->s_out[s][k];
    if (!si->passthrough[v]) continue;
    fprintf(f, "  /* graph output '");
    put_comment(f, g->values[v].name, 200);
    fprintf(f, "' is a %s */\n  memcpy(out[%d], ", g->values[v].kind == IR_VAL_CONST ? "constant" : "graph input", k);
    put_ptr(f, &st, v, 1);
    fprintf(f, ", %lldu);\n", (long long)ir_value_bytes(&g->values[v]));
  }
  fputs("  return 0;\n}\n\n", f);
  put_tensor_descs(f, g, "stage_inputs", si->s_in[s], si->n_in[s]);
  put_tensor_descs(f, g, "stage_outputs", si->s_out[s], si->n_out[s]);
  fprintf(f, "\nconst pipert_stage_desc pipecc_stage_%d = {\n  PIPERT_ABI_VERSION,\n  %d,\n  ", s, s);
  char nm[512];
  if (first_node >= 0) {
    char a[200], b[200];
    snprintf(nm, sizeof nm, "stage_%d (%s .. %s)", s, ir_printable(g->nodes[first_node].name, 60, a, sizeof a),
             ir_printable(g->nodes[last_node].name, 60, b, sizeof b));
  } else snprintf(nm, sizeof nm, "stage_%d", s);
  put_cstr(f, nm);
  fprintf(f, ",\n  %d,\n  %d,\n  %s,\n  %s,\n", si->n_in[s], si->n_out[s], si->n_in[s] ? "stage_inputs" : "NULL",
          si->n_out[s] ? "stage_outputs" : "NULL");
  if (st.w_bytes) fprintf(f, "  \"weights_%d.bin\",\n  %zuu,\n  0x%016" PRIx64 "ull,\n", s, st.w_bytes, sum);
  else fputs("  NULL,\n  0u,\n  0u,\n", f);
  fputs("  stage_init,\n  stage_forward,\n  stage_fini,\n};\n", f);
  fclose(f);

  char fn[64];
  if (!rc) {
    snprintf(fn, sizeof fn, "stage_%d.c", s);
    rc = write_file(dir, fn, sbuf, slen);
  }
  if (!rc) {
    snprintf(fn, sizeof fn, "weights_%d.bin", s);
    if (st.w_bytes) rc = write_file(dir, fn, wbuf, st.w_bytes);
    else {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dir, fn);
      remove(path);
    }
  }
  free(sbuf);
  free(fbuf);
  free(cbuf);
  free(wbuf);
  for (int u = 0; u < st.n_units; u++) {
    free(st.units[u].nodes);
    free(st.units[u].ext);
  }
  free(st.units);
  free(st.w_vals);
  free(st.loc);
  free(st.off);
  free(st.root);
  free(st.def_unit);
  free(st.last_unit);
  return rc;
}

static int emit_main(ir_graph *g, const cg_plan *p, const cg_options *o, const stage_info *si, const char *dir) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f;
  f = open_memstream(&buf, &len);
  put_header(f, g, o, "pipeline_main.c: the pipeline description and main()");
  fputs("#include <stddef.h>\n\n#include \"pipert.h\"\n\n", f);
  for (int s = 0; s < p->n_stages; s++) fprintf(f, "extern const pipert_stage_desc pipecc_stage_%d;\n", s);
  fputs("\n", f);
  for (int s = 0; s < p->n_stages; s++) {
    if (si->n_in[s]) {
      fprintf(f, "static const pipert_ref input_src_%d[%d] = {", s, si->n_in[s]);
      for (int k = 0; k < si->n_in[s]; k++) {
        int v = si->s_in[s][k];
        if (si->vstage[v] == -1) {
          int idx = 0;
          for (int i = 0; i < g->n_inputs; i++)
            if (g->inputs[i] == v) idx = i;
          fprintf(f, "%s{PIPERT_GRAPH_INPUT, %d}", k ? ", " : "", idx);
        } else fprintf(f, "%s{%d, %d}", k ? ", " : "", si->vstage[v], si->out_index[v]);
      }
      fputs("};\n", f);
    }
    if (p->programs && p->programs[s] && p->program_len && p->program_len[s] > 0) {
      fprintf(f, "static const pipert_instr program_%d[%d] = {", s, p->program_len[s]);
      for (int i = 0; i < p->program_len[s]; i++)
        fprintf(f, "%s{%d, %d}", i ? ", " : "", p->programs[s][i].op, p->programs[s][i].mb);
      fputs("};\n", f);
    }
  }
  fprintf(f, "\nstatic const pipert_stage_plan stages[%d] = {\n", p->n_stages);
  for (int s = 0; s < p->n_stages; s++) {
    int has_prog = p->programs && p->programs[s] && p->program_len && p->program_len[s] > 0;
    char in_src[32], prog[32];
    snprintf(in_src, sizeof in_src, si->n_in[s] ? "input_src_%d" : "NULL", s);
    snprintf(prog, sizeof prog, has_prog ? "program_%d" : "NULL", s);
    fprintf(f, "  {&pipecc_stage_%d, %s, %d, %s, %d},\n", s, in_src, p->replicas ? p->replicas[s] : 1, prog,
            has_prog ? p->program_len[s] : 0);
  }
  fputs("};\n\n", f);
  put_tensor_descs(f, g, "graph_inputs", g->inputs, g->n_inputs);
  put_tensor_descs(f, g, "graph_outputs", g->outputs, g->n_outputs);
  fprintf(f, "static const pipert_ref output_src[%d] = {", g->n_outputs ? g->n_outputs : 1);
  for (int k = 0; k < g->n_outputs; k++) {
    int v = g->outputs[k];
    fprintf(f, "%s{%d, %d}", k ? ", " : "", si->passthrough[v] ? p->n_stages - 1 : si->vstage[v], si->out_index[v]);
  }
  if (!g->n_outputs) fputs("{0, 0}", f);
  fputs("};\n\n", f);
  fputs("static const pipert_pipeline pipeline = {\n  PIPERT_ABI_VERSION,\n  ", f);
  const char *mname = g->graph_name && *g->graph_name ? g->graph_name : "model";
  if (o && o->model_path) {
    const char *b = strrchr(o->model_path, '/');
    mname = b ? b + 1 : o->model_path;
  }
  put_cstr(f, mname);
  char bub[64];
  snprintf(bub, sizeof bub, "%.6g", p->predicted_bubble);
  if (!strchr(bub, '.') && !strchr(bub, 'e') && !strchr(bub, 'n')) strcat(bub, ".0");
  fprintf(f, ",\n  %d,\n  stages,\n  %d,\n  %s,\n  %d,\n  %s,\n  output_src,\n  %d,\n  0,\n  %s,\n  ", p->n_stages,
          g->n_inputs, g->n_inputs ? "graph_inputs" : "NULL", g->n_outputs, g->n_outputs ? "graph_outputs" : "NULL",
          p->microbatches > 0 ? p->microbatches : 1, bub);
  put_cstr(f, p->schedule ? p->schedule : "gpipe");
  fputs(",\n};\n\nint main(int argc, char **argv) { return pipert_main(argc, argv, &pipeline); }\n", f);
  fclose(f);
  int rc = write_file(dir, "pipeline_main.c", buf, len);
  free(buf);
  return rc;
}

static int emit_makefile(ir_graph *g, const cg_plan *p, const cg_options *o, const char *dir) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  put_header_hash(f, g, o, "Makefile: builds ./pipeline (pipecc runs the same commands itself)");
  fprintf(f, "\nCC = %s\nCFLAGS = %s\nPIPERT_INCLUDE = %s\nPIPERT_LIB = %s\nLIBS = %s %s\n\n", CG_C_CC, CG_C_CFLAGS,
          PIPERT_INCLUDE_DIR, PIPERT_LIB, PIPERT_LINK_LIBS, CG_C_LIBS);
  fputs("OBJS =", f);
  for (int s = 0; s < p->n_stages; s++) fprintf(f, " stage_%d.o", s);
  fputs(" pipeline_main.o\n\n", f);
  fputs("pipeline: $(OBJS) $(PIPERT_LIB)\n\t$(CC) -o $@ $(OBJS) $(PIPERT_LIB) $(LIBS)\n\n", f);
  fputs("%.o: %.c\n\t$(CC) $(CFLAGS) -I$(PIPERT_INCLUDE) -c -o $@ $<\n\n", f);
  fputs("clean:\n\trm -f $(OBJS) pipeline\n\n.PHONY: clean\n", f);
  fclose(f);
  int rc = write_file(dir, "Makefile", buf, len);
  free(buf);
  return rc;
}

static int check_graph(ir_graph *g, const cg_plan *p) {
  int bad = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    if (p->node_stage[i] < 0 || p->node_stage[i] >= p->n_stages) {
      ir_error_node(g, i, "internal error: node assigned to stage %d of %d", p->node_stage[i], p->n_stages);
      bad = 1;
      continue;
    }
    if (n->op == IR_OP_UNKNOWN) continue; /* reported by the emitter lookup below */
    for (int side = 0; side < 2; side++) {
      int cnt = side ? n->n_out : n->n_in;
      const int *vs = side ? n->out : n->in;
      for (int k = 0; k < cnt; k++) {
        if (vs[k] < 0) continue;
        const ir_value *v = &g->values[vs[k]];
        if (!ir_shape_static(&v->shape)) {
          ir_error_node(g, i, "cpu target: %s '%s' has no static shape (shape inference did not run or failed)",
                        side ? "output" : "input", v->name);
          bad = 1;
        } else if (!cg_ctype(v->dtype)) {
          ir_error_node(g, i, "cpu target: %s '%s' has dtype %s, which the cpu target does not support",
                        side ? "output" : "input", v->name, ir_dtype_name(v->dtype));
          bad = 1;
        }
      }
    }
  }
  /* all unsupported ops at once */
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    if (n->op == IR_OP_UNKNOWN) {
      ir_error_node(g, i, "cpu target: op %s%s%s is not supported", *n->domain ? n->domain : "",
                    *n->domain ? "." : "", n->op_type);
      bad = 1;
    } else if (!cg_is_eltwise(g, n) && !cg_is_alias(n) && !cg_op_emitter(n->op)) {
      ir_error_node(g, i, "cpu target: op %s is not supported yet", ir_op_name(n->op));
      bad = 1;
    }
  }
  return bad ? -1 : 0;
}

int cg_c_emit(ir_graph *g, const cg_plan *p, const cg_options *o, const char *out_dir) {
  if (!p || p->n_stages < 1 || !p->node_stage) {
    fprintf(stderr, "pipecc: internal error: cg_c_emit without a plan\n");
    return -1;
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v >= 0 && g->values[v].producer >= i) {
        fprintf(stderr, "pipecc: internal error: cg_c_emit needs a topologically sorted graph\n");
        return -1;
      }
    }
  ir_rebuild_uses(g);
  if (check_graph(g, p)) return -1;
  if (mkdir(out_dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "pipecc: cannot create %s: %s\n", out_dir, strerror(errno));
    return -1;
  }
  stage_info si = {0};
  if (analyse_stages(g, p, &si)) {
    free_stage_info(&si);
    return -1;
  }
  int rc = 0;
  for (int s = 0; s < p->n_stages; s++)
    if (emit_stage(g, p, o, &si, s, out_dir)) rc = -1;
  if (!rc) rc = emit_main(g, p, o, &si, out_dir);
  if (!rc) rc = emit_makefile(g, p, o, out_dir);
  free_stage_info(&si);
  return rc;
}
