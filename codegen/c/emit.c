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
 * (codegen/stage.c, shared with the cuda target, plans units and locations;
 * codegen/emit_common.c writes the headers, descriptors and pipeline_main.c.)
 * Nothing here depends on hash order, addresses or time, so the output is
 * byte-identical for the same inputs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "codegen/emit_common.h"
#include "codegen/stage.h"
#include "ir/diag.h"
#include "runtime/pipert.h" /* pipert_to_bits */

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

void cg_index_check(cg_ctx *c, const ir_node *n, int ind, const char *k, const char *raw, int64_t size,
                    const char *what) {
  /* PIPECC_INDEX_CHECKS=0: no test at all (an index out of range is then undefined), for
   * measuring what the tests cost (tools/bench_index_check.py) */
  const char *env = getenv("PIPECC_INDEX_CHECKS");
  if (env && !strcmp(env, "0")) return;
  char label[400], nm[200];
  snprintf(label, sizeof label, "node %d '%s' (%s)", n->index, ir_printable(n->name ? n->name : "", 120, nm, sizeof nm),
           ir_op_name(n->op));
  cg_w(c, "%*sif (%s < 0 || %s >= %lld) {\n%*s  pipert_bad_input(", ind, "", k, k, (long long)size, ind, "");
  cg_put_cstr(c->body, label);
  cg_w(c, ", \"index %%lld is out of range for %s of size %lld\", (long long)(%s));\n%*s  return 1;\n%*s}\n", what,
       (long long)size, raw, ind, "", ind, "");
  c->unit_checks = 1;
}

int cg_const_indices(cg_ctx *c, const ir_node *n, const ir_value *ix, int64_t size, const char *what) {
  if (ix->kind != IR_VAL_CONST) return 1;
  int64_t cnt = cg_numel(ix);
  for (int64_t i = 0; i < cnt; i++) {
    int64_t k;
    if (ir_const_i64(ix, i, &k)) return 1;
    if (k < -size || k >= size)
      return cg_fail(c, n, "index %lld (element %lld of the indices) is out of range for %s of size %lld", (long long)k,
                     (long long)i, what, (long long)size);
  }
  return 0;
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
    case IR_FLOAT16:
    case IR_BFLOAT16: return "uint16_t"; /* bit patterns: only moved, computed in float */
    case IR_FLOAT8E4M3FN:
    case IR_FLOAT8E4M3FNUZ:
    case IR_FLOAT8E5M2:
    case IR_FLOAT8E5M2FNUZ:
    case IR_FLOAT4E2M1:
    case IR_FLOAT8E8M0:
    case IR_FLOAT6E2M3:
    case IR_FLOAT6E3M2: return "uint8_t";
    case IR_UINT4:
    case IR_UINT2: return "uint8_t"; /* one value per byte */
    case IR_INT4:
    case IR_INT2: return "int8_t";
    default: return NULL;
  }
}

const char *cg_flit(char *buf, size_t n, double v, ir_dtype t) {
  if (ir_dtype_narrow(t)) /* as wide as the type: "0x3c00", "0x38" */
    snprintf(buf, n, "0x%0*x", (int)ir_dtype_size(t) * 2, (unsigned)pipert_to_bits(v, t, 1));
  else if (v != v) snprintf(buf, n, "NAN");
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
    case IR_OP_Reshape:
    case IR_OP_Flatten:
    case IR_OP_Squeeze:
    case IR_OP_Unsqueeze:
    case IR_OP_Identity: return 1;
    case IR_OP_Dropout: return n->n_out < 2 || n->out[1] < 0;
    default: return 0;
  }
}

/* Pointer expression for value v at a call site. */
static void put_ptr(FILE *f, cg_stage *st, int v, int is_const) {
  int r = st->root[v];
  const char *t = cg_ctype(st->g->values[v].dtype);
  switch (st->loc[r]) {
    case CG_LOC_W: /* a trained weight: through WV, the version the runtime points at (weights_at) */
      fprintf(f, "(const %s *)(%s + %zu)", t, st->g->values[r].param == IR_PARAM_WEIGHT ? "WV" : "W", st->off[r]);
      break;
    case CG_LOC_IN: fprintf(f, "(const %s *)in[%zu]", t, st->off[r]); break;
    case CG_LOC_OUT: fprintf(f, "(%s%s *)out[%zu]", is_const ? "const " : "", t, st->off[r]); break;
    case CG_LOC_A: fprintf(f, "(%s%s *)(A + %zu)", is_const ? "const " : "", t, st->off[r]); break;
    case CG_LOC_P: fprintf(f, "(%s%s *)(s->w + %zu)", is_const ? "const " : "", t, st->off[r]); break;
    default: IR_ASSERT(0 && "value without a location");
  }
}

typedef struct {
  char name[16];
  int value; /* -1: scratch */
  int is_out;
  int shared; /* an element-wise unit's input that its output is written over, or that output */
  int fresh;  /* that input is a gradient sum read as zeros where the stage is fresh (NULL) */
} param;

/* A backward unit's input e, a gradient sum it adds to in place: it may read it as zeros
 * (passed NULL) while the stage is fresh, the gradients cleared by not being read
 * (stage_zero_grads). Only where no other unit of the part reads the sum, and float. */
static int fresh_sum(const cg_stage *st, int ui, int x) {
  const ir_graph *g = st->g;
  int r = st->root[x];
  if (st->phase != IR_PHASE_BWD || g->values[r].param != IR_PARAM_GRAD ||
      (g->values[r].dtype != IR_FLOAT && g->values[r].dtype != IR_DOUBLE))
    return 0;
  for (int u = 0; u < st->n_units; u++)
    if (u != ui && cg_unit_reads(st, &st->units[u], r, NULL, NULL)) return 0;
  return 1;
}

/* 1 if value x is read where y is written: y is written in place over param x */
static int shares_memory(const cg_stage *st, int x, int y) {
  int rx = st->root[x], ry = st->root[y];
  return st->loc[ry] == CG_LOC_P && (st->loc[rx] == CG_LOC_W || st->loc[rx] == CG_LOC_P) && st->off[rx] == st->off[ry];
}

static int ident_used(const char *body, const char *id) {
  size_t n = strlen(id);
  for (const char *p = strstr(body, id); p; p = strstr(p + 1, id)) {
    int before =
        p > body && (p[-1] == '_' || (p[-1] >= '0' && p[-1] <= '9') || ((p[-1] | 32) >= 'a' && (p[-1] | 32) <= 'z'));
    char c = p[n];
    int after = c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
    if (!before && !after) return 1;
  }
  return 0;
}

/* Units compiled as PK_VEC clones (the stage prelude): float loops that vectorise (Conv:
 * the depthwise stencil, the epilogues, im2col and the Winograd transforms; Gemm: the
 * bias broadcast; MaxPool: the rows' maxima; GlobalAveragePool, BatchNormalization in
 * training and the sums of reductions: their lanes). */
static int vec_clones(const ir_node *root, int eltwise) {
  switch (root->op) {
    case IR_OP_Softmax:
    case IR_OP_LogSoftmax:
    case IR_OP_LayerNormalization:
    case IR_OP_Attention:
    case IR_OP_Conv:
    case IR_OP_Gemm:
    case IR_OP_GlobalAveragePool:
    case IR_OP_MaxPool:
    case IR_OP_ReduceSum:
    case IR_OP_ReduceMean:
    case IR_OP_ReduceSumSquare:
    case IR_OP_ReduceL1:
    case IR_OP_ReduceL2:
    case IR_OP_ReduceLogSum:
    case IR_OP_BatchNormalization: return 1;
    default: return eltwise;
  }
}

/* Emit the function for unit u into f, and its call into call. Returns 0 or -1. */
static int emit_unit(cg_stage *st, cg_ctx *c, int ui, FILE *f, FILE *call) {
  ir_graph *g = st->g;
  cg_unit *u = &st->units[ui];
  const ir_node *root = &g->nodes[u->root];
  if (u->alias) {
    cg_put_unit_comment(call, g, u, "  ");
    if (!st->p->train) fprintf(call, "  PK_UNIT(%d);\n", ui);
    fprintf(call, "  /* (alias: no code) */\n");
    return 0;
  }
  param ps[64 + 8];
  memset(ps, 0, sizeof ps);
  int np = 0;
  char *body = NULL;
  size_t blen = 0;
  c->body = open_memstream(&body, &blen);
  c->unit_scratch = 0;
  c->unit_checks = 0;
  c->ivdep = 0;
  c->zero_ext = -1;
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
    for (int e = 0; e < np - 1; e++) c->ivdep |= ps[e].shared = shares_memory(st, ps[e].value, root->out[0]);
    ps[np - 1].shared = c->ivdep;
    for (int e = 0; e < np - 1 && c->zero_ext < 0; e++) {
      int same = 0; /* (one input of the unit holds the sum, no alias of it) */
      for (int k = 0; k < np - 1; k++) same += st->root[ps[k].value] == st->root[ps[e].value];
      if (ps[e].shared && same == 1 && c->fresh && fresh_sum(st, ui, ps[e].value)) {
        ps[e].fresh = 1;
        c->zero_ext = e;
        c->fresh[st->root[ps[e].value]] = 1;
      }
    }
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
  cg_put_unit_comment(f, g, u, "");
  fprintf(f, "%sstatic %s %s(", vec_clones(root, eltwise) ? "PK_VEC " : "", c->unit_checks ? "int" : "void", fname);
  int first = 1;
  for (int i = 0; i < np; i++) {
    if (!ident_used(body, ps[i].name)) continue;
    if (!first) fputs(", ", f);
    first = 0;
    if (ps[i].value < 0) fprintf(f, "void *restrict %s", ps[i].name);
    else
      fprintf(f, "%s%s *%s%s", ps[i].is_out ? "" : "const ", cg_ctype(g->values[ps[i].value].dtype),
              ps[i].shared ? "" : "restrict ", ps[i].name);
  }
  if (first) fputs("void", f);
  fputs(") {\n", f);
  fputs(body, f);
  fputs(c->unit_checks ? "  return 0;\n}\n\n" : "}\n\n", f);

  cg_put_unit_comment(call, g, u, "  ");
  if (!st->p->train) fprintf(call, "  PK_UNIT(%d);\n", ui);
  fprintf(call, "  %s%s(", c->unit_checks ? "if (" : "", fname);
  first = 1;
  for (int i = 0; i < np; i++) {
    if (!ident_used(body, ps[i].name)) continue;
    if (!first) fputs(", ", call);
    first = 0;
    if (ps[i].value < 0) fputs("A + SCRATCH_OFF", call);
    else {
      if (ps[i].fresh) fputs("s->fresh ? NULL : ", call);
      put_ptr(call, st, ps[i].value, !ps[i].is_out);
    }
  }
  fputs(c->unit_checks ? ")) return PIPERT_STATUS_BAD_INPUT;\n" : ");\n", call);
  free(body);
  return 0;
}

/* Copy the part's write-backs into their params (after its last unit). */
static void put_writebacks(FILE *f, cg_stage *st) {
  ir_graph *g = st->g;
  for (int k = 0; k < st->n_wb; k++) {
    int v = st->wb[k], d = g->values[v].writeback;
    fprintf(f, "  /* write back '");
    cg_put_comment(f, g->values[v].name, 120);
    fprintf(f, "' into '");
    cg_put_comment(f, g->values[d].name, 120);
    fprintf(f, "' */\n  memcpy(s->w + %zu, ", st->wl->off[d]);
    put_ptr(f, st, v, 1);
    fprintf(f, ", %zuu);\n", g->values[d].nbytes);
  }
}

/* grad_fresh[N_GRADS], in grad_off's order: 1 for the sums the backward reads as zeros
 * while the stage is fresh (fresh_sum) */
static void put_grad_fresh(FILE *f, const ir_graph *g, const cg_wlayout *wl, const char *fresh) {
  int n = 0;
  fputs("static const unsigned char grad_fresh[] = {", f);
  for (int k = 0; k < wl->n; k++)
    if (g->values[wl->vals[k]].param == IR_PARAM_GRAD) fprintf(f, "%s%d", n++ ? ", " : "", fresh[wl->vals[k]]);
  fputs(n ? "};\n" : "0};\n", f);
}

/* One function of the stage: the units of part q, then its write-backs. */
static void put_part_fn(FILE *f, cg_stage *st, const char *sig, const char *body) {
  fputs(sig, f);
  fputs(
      " {\n  stage_state *s = state;\n  const unsigned char *W = s->w;\n  unsigned char *A = s->a;\n", f);
  /* the update reads the latest weights; an inference build has no versions */
  fprintf(f, "  const unsigned char *WV = %s;\n  (void)W;\n  (void)WV;\n  (void)A;\n",
          strstr(sig, "stage_step") || !st->p->train ? "W" : "s->wv");
  if (strstr(sig, "in, ")) fputs("  (void)in;\n  (void)out;\n", f);
  fputs(body, f);
  put_writebacks(f, st);
}

/* The gradients are cleared by marking the stage fresh: the sums the backward adds to in
 * place (grad_fresh) read as zeros in its next call, the others are set to zero. Where
 * the sums are read or written before that (param_io), they are set to zero first. */
static const char train_fns[] =
    "static int stage_zero_grads(void *state) {\n"
    "  stage_state *s = state;\n"
    "  for (int k = 0; k < N_GRADS; k++)\n"
    "    if (!grad_fresh[k]) memset(s->w + grad_off[k], 0, grad_bytes[k]);\n"
    "  s->fresh = 1;\n"
    "  return 0;\n}\n\n"
    "static void stage_unfresh(stage_state *s, size_t off, size_t n) {\n"
    "  int hit = 0;\n"
    "  for (int k = 0; k < N_GRADS; k++) hit |= grad_fresh[k] && off < grad_off[k] + grad_bytes[k] && grad_off[k] < off + n;\n"
    "  if (!hit) return;\n"
    "  for (int k = 0; k < N_GRADS; k++)\n"
    "    if (grad_fresh[k]) memset(s->w + grad_off[k], 0, grad_bytes[k]);\n"
    "  s->fresh = 0;\n}\n\n"
    "static int stage_param_io(void *state, int write, size_t off, void *host, size_t n) {\n"
    "  stage_state *s = state;\n"
    "  if (off > PARAM_BYTES || n > PARAM_BYTES - off) return 1;\n"
    "  if (s->fresh) stage_unfresh(s, off, n);\n"
    "  if (write) memcpy(s->w + off, host, n);\n"
    "  else memcpy(host, s->w + off, n);\n"
    "  return 0;\n}\n\n"
    "static int stage_weights_at(void *state, const void *host) {\n"
    "  stage_state *s = state;\n"
    "  s->wv = host ? (const unsigned char *)host : s->w;\n"
    "  return 0;\n}\n\n"
    "static const void *stage_param_memory(void *state) { return ((stage_state *)state)->w; }\n\n";

/* The start of every stage file after the includes. PK_VEC marks the unit functions whose
 * loops are worth vectorising wider than the portable baseline (element-wise units,
 * Softmax, normalisation, Conv): GCC (11 or later, x86-64) compiles them for x86-64-v4
 * (AVX-512), x86-64-v3 (AVX2, FMA) and the baseline and picks one at load time
 * (target_clones). The clones compute the same bits: the code is element-wise or reduces
 * in an order fixed by the source, -ffp-contract=off holds for each, and the only fused
 * multiply-adds are the explicit PK_FMA of pk_expf/pk_erff, fmaf (correctly rounded on
 * every clone; an instruction where the clone has FMA, a libm call in the baseline one);
 * without clones PK_FMA is a multiplication and an addition. pk_expf and pk_erff are
 * branch-free float exp and erf (within 1 and 2.5 ulp of the exact values over all
 * floats but exp's subnormal range; NaN in, NaN out) that vectorise where libm's expf and erff stay scalar: exp as
 * 2^n e^r (|r| <= ln2/2, Cody-Waite reduction, the degree-7 Taylor polynomial, 2^n as two
 * powers of two so that results up to 2^128 come out), 0 below x = -87 (results under
 * 2^-125 flush to zero: a lane that made a subnormal would cost a microcode assist, and
 * Softmax rows under a causal mask are half -inf; pk_expf_le0 is the same function for
 * x <= 0, Softmax's x - max, with one power of two and no upper clamp: the same bits
 * over every such float, a third fewer instructions); erf as x P(x^2) below 1 and
 * 1 - Q((x - 2.5) / 1.5) from 1 to 4, P a least-squares fit of erf(x)/x (relative error
 * 1.2e-9), Q the degree-15 Chebyshev least-squares fit of erfc over [1, 4] in monomial
 * form (within 1.3 ulp of erf there, evaluated in float), +-1 beyond. Q takes 15
 * multiply-adds where e^(-x^2) times a fit of erfc(x) e^(x^2) took an exp and 12: GELU
 * computes both sides for every lane, and its erf is most of its work. Stages whose Convs
 * call pipert_gemm_direct also include runtime/pipert_gemm.h, which picks its AVX-512,
 * AVX2 or portable variant at the call, all with correctly rounded fused multiply-adds
 * in the same order: the same bits on each as well. PK_IVDEP before a loop says that
 * its iterations are independent (no store of one is read by another), which the
 * compiler could not prove of two arrays in one scratch buffer, so that GCC vectorises
 * the loop without run-time overlap checks (clang's equivalent warns wherever it does
 * not vectorise, as under the sanitizers' -O1: clang gets none). */
static const char vec_prelude[] =
    "#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && __GNUC__ >= 11\n"
    "#define PK_VEC __attribute__((target_clones(\"arch=x86-64-v4\", \"arch=x86-64-v3\", \"default\")))\n"
    "#define PK_FMA(a, b, c) __builtin_fmaf(a, b, c)\n"
    "#else\n#define PK_VEC\n#define PK_FMA(a, b, c) ((a) * (b) + (c))\n#endif\n"
    "#if defined(__GNUC__) && !defined(__clang__)\n#define PK_IVDEP _Pragma(\"GCC ivdep\")\n#else\n"
    "#define PK_IVDEP\n#endif\n"
    "#ifdef __GNUC__\n#define PK_INLINE static inline __attribute__((always_inline, unused))\n#else\n"
    "#define PK_INLINE static inline\n#endif\n\n"
    "/* e^xc = p 2^nf for xc in [-87, 89] (not NaN): nf = rint(xc / ln2), p = e^r by the\n"
    " * degree-7 Taylor polynomial of r = xc - nf ln2 (Cody-Waite) */\n"
    "PK_INLINE float pk_exp_p(float xc, float *nf_out) {\n"
    "  const float nf = (xc * 1.44269502f + 12582912.0f) - 12582912.0f; /* rint(x / ln2) */\n"
    "  float r = PK_FMA(nf, -0.693359375f, xc);\n"
    "  r = PK_FMA(nf, 2.12194440e-4f, r);\n"
    "  float p = 1.0f / 5040.0f;\n"
    "  p = PK_FMA(p, r, 1.0f / 720.0f);\n  p = PK_FMA(p, r, 1.0f / 120.0f);\n  p = PK_FMA(p, r, 1.0f / 24.0f);\n"
    "  p = PK_FMA(p, r, 1.0f / 6.0f);\n  p = PK_FMA(p, r, 0.5f);\n  p = PK_FMA(p, r, 1.0f);\n  p = PK_FMA(p, r, 1.0f);\n"
    "  *nf_out = nf;\n"
    "  return p;\n}\n\n"
    "PK_INLINE float pk_expf(float x) {\n"
    "  float xc = x < -87.0f ? -87.0f : x;\n"
    "  xc = xc > 89.0f ? 89.0f : xc;\n"
    "  xc = xc == xc ? xc : 0.0f; /* NaN (returned below): not converted to an integer */\n"
    "  float nf;\n"
    "  const float p = pk_exp_p(xc, &nf);\n"
    "  const int32_t n = (int32_t)nf, n1 = n >> 1; /* 2^n = 2^n1 2^(n - n1), each a normal float */\n"
    "  const uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n - n1 + 127) << 23;\n"
    "  float s1, s2;\n  memcpy(&s1, &b1, 4);\n  memcpy(&s2, &b2, 4);\n"
    "  const float y = x < -87.0f ? 0.0f : p * s1 * s2;\n"
    "  return x != x ? x : y;\n}\n\n"
    "/* pk_expf for x <= 0 or NaN (Softmax's x - max): the same bits, without the clamp at\n"
    " * 89 and the split of 2^n (n >= -126 here: one normal power of two) */\n"
    "PK_INLINE float pk_expf_le0(float x) {\n"
    "  float xc = x < -87.0f ? -87.0f : x;\n"
    "  xc = xc == xc ? xc : 0.0f;\n"
    "  float nf;\n"
    "  const float p = pk_exp_p(xc, &nf);\n"
    "  const uint32_t b = (uint32_t)((int32_t)nf + 127) << 23;\n"
    "  float s;\n  memcpy(&s, &b, 4);\n"
    "  const float y = x < -87.0f ? 0.0f : p * s;\n"
    "  return x != x ? x : y;\n}\n\n"
    "PK_INLINE float pk_erff(float x) {\n"
    "  const float a = fabsf(x), s = a * a;\n"
    "  float p = 7.854026510e-05f;\n"
    "  p = PK_FMA(p, s, -8.010247719e-04f);\n  p = PK_FMA(p, s, 5.188334510e-03f);\n"
    "  p = PK_FMA(p, s, -2.685381607e-02f);\n  p = PK_FMA(p, s, 1.128358527e-01f);\n"
    "  p = PK_FMA(p, s, -3.761262584e-01f);\n  p = PK_FMA(p, s, 1.128379166e+00f);\n"
    "  const float lo = a * p;\n"
    "  float ac = a < 1.0f ? 1.0f : a;\n  ac = ac > 4.0f ? 4.0f : ac;\n"
    "  const float t = (ac - 2.5f) * 0.666666687f;\n"
    "  float q = 1.580641838e-04f;\n"
    "  q = PK_FMA(q, t, -2.590251970e-04f);\n  q = PK_FMA(q, t, -6.889530923e-04f);\n"
    "  q = PK_FMA(q, t, 2.036759863e-03f);\n  q = PK_FMA(q, t, -6.495899870e-04f);\n"
    "  q = PK_FMA(q, t, -4.673087038e-03f);\n  q = PK_FMA(q, t, 9.727170691e-03f);\n"
    "  q = PK_FMA(q, t, -6.633254699e-03f);\n  q = PK_FMA(q, t, -9.298021905e-03f);\n"
    "  q = PK_FMA(q, t, 3.186663985e-02f);\n  q = PK_FMA(q, t, -4.644897580e-02f);\n"
    "  q = PK_FMA(q, t, 4.365181923e-02f);\n  q = PK_FMA(q, t, -2.818186767e-02f);\n"
    "  q = PK_FMA(q, t, 1.225280575e-02f);\n  q = PK_FMA(q, t, -3.267420223e-03f);\n"
    "  q = PK_FMA(q, t, 4.069523129e-04f);\n"
    "  const float hi = 1.0f - q;\n"
    "  const float r = copysignf(a < 1.0f ? lo : hi, x);\n"
    "  return x != x ? x : r;\n}\n\n";

static int emit_stage(ir_graph *g, const cg_plan *p, const cg_options *o, const cg_stage_info *si, int s,
                      const char *dir) {
  int train = p->train != NULL, n_parts = train ? 3 : 1;
  const int phases[3] = {IR_PHASE_FWD, IR_PHASE_BWD, IR_PHASE_UPD};
  cg_wlayout wl;
  cg_wlayout_build(&wl, g, p, si, s);
  cg_stage st[3];
  cg_ctx c = {0};
  c.g = g;
  if (train) c.fresh = ir_xcalloc((size_t)g->n_values + 1, 1);
  char *fbuf = NULL, *cbuf[3] = {NULL, NULL, NULL};
  size_t flen = 0, clen[3] = {0, 0, 0}, arena = 0;
  FILE *fns = open_memstream(&fbuf, &flen);
  int rc = 0, units = 0;
  for (int q = 0; q < n_parts; q++) {
    cg_stage_open(&st[q], g, p, o, si, &wl, cg_part(p, s, phases[q]), 1, 1);
    if (st[q].arena > arena) arena = st[q].arena;
    units += st[q].n_units;
    FILE *calls = open_memstream(&cbuf[q], &clen[q]);
    for (int u = 0; u < st[q].n_units; u++)
      if (emit_unit(&st[q], &c, u, fns, calls)) rc = -1;
    if (!train) fprintf(calls, "  PK_UNIT(%d);\n", st[q].n_units); /* the end of the last unit */
    fclose(calls);
  }
  fclose(fns);

  uint64_t sum;
  unsigned char *wbuf = cg_wlayout_file(&wl, g, &sum);

  char *sbuf = NULL;
  size_t slen = 0;
  FILE *f = open_memstream(&sbuf, &slen);
  char what[64];
  snprintf(what, sizeof what, "stage_%d.c: stage %d of %d", s, s, p->n_stages);
  cg_put_header(f, g, o, "cpu", what);
  char nm[512];
  int count = cg_stage_nodes(g, p, s, nm, sizeof nm);
  int fq = cg_part(p, s, IR_PHASE_FWD);
  fprintf(f,
          "/* %d nodes, %d units; %d inputs, %d outputs; weights %zu bytes; arena %zu bytes + scratch %zu bytes */\n",
          count, units, si->n_in[fq], si->n_out[fq], wl.file_bytes, arena, cg_align_up(c.scratch));
  if (train) {
    int bq = cg_part(p, s, IR_PHASE_BWD);
    fprintf(f,
            "/* training: backward %d inputs, %d outputs; parameter memory %zu bytes (the weights file, then "
            "zeros) */\n",
            si->n_in[bq], si->n_out[bq], wl.total_bytes);
  }
  fputs(
      "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n#include <cblas.h>\n\n"
      "#include \"pipert.h\"\n",
      f);
  if (c.gemm_direct) /* pipert_gemm_direct: the GEMM of Convs with small K and of small batched MatMuls */
    fputs("#include \"pipert_gemm.h\" /* pipert_gemm_direct */\n", f);
  if (c.dw_blocked) /* pipert_dw: depthwise Convs of small maps */
    fputs("#include \"pipert_dw.h\" /* pipert_dw */\n", f);
  fputs("\n", f);
  fputs(vec_prelude, f);
  fputs(
      ""
      "/* PK_UNIT(u): unit u starts (timed in the profiler build, -DPIPECC_PROFILE) */\n"
      "#ifdef PIPECC_PROFILE\n#define PK_UNIT(u) pipert_profile_mark(u)\n#else\n#define PK_UNIT(u) ((void)0)\n#endif\n\n",
      f);
  size_t total = arena + cg_align_up(c.scratch);
  fprintf(f, "#define ARENA_BYTES %zuu\n#define SCRATCH_OFF %zuu\n", total ? total : CG_ALIGN, arena);
  if (train) {
    fprintf(f, "#define PARAM_BYTES %zuu\n", wl.total_bytes ? wl.total_bytes : CG_ALIGN);
    fprintf(f, "#define N_GRADS %d\n", cg_put_grad_ranges(f, g, &wl));
    put_grad_fresh(f, g, &wl, c.fresh);
  }
  fputs("\n", f);
  if (flen) fputs(fbuf, f);
  if (train) {
    /* the parameters are written: a copy of the weights file, then zeros */
    /* wv: where the forward and backward read the trained weights (weights_at), w's own
     * by default */
    fputs(
        "typedef struct {\n  unsigned char *w;\n  const unsigned char *wv;\n  unsigned char *a;\n"
        "  int fresh; /* the gradient sums of grad_fresh read as zeros (stage_zero_grads) */\n} stage_state;\n\n",
        f);
    fputs(
        "static int stage_init(void **state, const void *weights, size_t weights_len) {\n"
        "  stage_state *s = calloc(1, sizeof *s);\n"
        "  if (!s) return 1;\n"
        "  s->w = aligned_alloc(64, PARAM_BYTES);\n"
        "  s->a = aligned_alloc(64, ARENA_BYTES);\n"
        "  if (!s->w || !s->a || weights_len > PARAM_BYTES) {\n    free(s->w);\n    free(s->a);\n    free(s);\n"
        "    return 1;\n  }\n"
        "  if (weights_len) memcpy(s->w, weights, weights_len);\n"
        "  memset(s->w + weights_len, 0, PARAM_BYTES - weights_len);\n"
        "  s->wv = s->w;\n"
        "  memset(s->a, 0, ARENA_BYTES);\n"
        "  *state = s;\n  return 0;\n}\n\n",
        f);
    fputs(
        "static void stage_fini(void *state) {\n  stage_state *s = state;\n  if (!s) return;\n  free(s->w);\n"
        "  free(s->a);\n  free(s);\n}\n\n",
        f);
  } else {
    fputs("typedef struct {\n  const unsigned char *w;\n  unsigned char *a;\n} stage_state;\n\n", f);
    fputs(
        "static int stage_init(void **state, const void *weights, size_t weights_len) {\n"
        "  (void)weights_len;\n"
        "  stage_state *s = calloc(1, sizeof *s);\n"
        "  if (!s) return 1;\n"
        "  s->w = weights;\n"
        "  s->a = aligned_alloc(64, ARENA_BYTES);\n"
        "  if (!s->a) {\n    free(s);\n    return 1;\n  }\n"
        "  memset(s->a, 0, ARENA_BYTES);\n"
        "  *state = s;\n  return 0;\n}\n\n",
        f);
    fputs(
        "static void stage_fini(void *state) {\n  stage_state *s = state;\n  if (!s) return;\n  free(s->a);\n  free(s);\n}\n\n",
        f);
  }
  put_part_fn(f, &st[0], "static int stage_forward(void *state, const void *const *in, void *const *out)",
              clen[0] ? cbuf[0] : "");
  for (int k = 0; k < si->n_out[fq]; k++) {
    int v = si->s_out[fq][k];
    if (!si->passthrough[v]) continue;
    fprintf(f, "  /* graph output '");
    cg_put_comment(f, g->values[v].name, 200);
    fprintf(f, "' is a %s */\n  memcpy(out[%d], ", g->values[v].kind == IR_VAL_CONST ? "constant" : "graph input", k);
    put_ptr(f, &st[0], v, 1);
    fprintf(f, ", %lldu);\n", (long long)ir_value_bytes(&g->values[v]));
  }
  fputs("  return 0;\n}\n\n", f);
  if (train) {
    put_part_fn(f, &st[1], "static int stage_backward(void *state, const void *const *in, void *const *out)",
                clen[1] ? cbuf[1] : "");
    fputs("  s->fresh = 0;\n  return 0;\n}\n\n", f);
    put_part_fn(f, &st[2], "static int stage_step(void *state)", clen[2] ? cbuf[2] : "");
    fputs("  return 0;\n}\n\n", f);
    fputs(train_fns, f);
  }
  cg_put_stage_desc(f, g, p, si, &wl, s, "const", nm, sum, NULL);
  fclose(f);

  if (!rc) rc = cg_write_stage_files(dir, s, "c", sbuf, slen, wbuf, wl.file_bytes);
  free(sbuf);
  free(fbuf);
  for (int q = 0; q < n_parts; q++) {
    free(cbuf[q]);
    cg_stage_close(&st[q]);
  }
  free(wbuf);
  free(c.fresh);
  cg_wlayout_free(&wl);
  return rc;
}

/* One-stage inference builds also get the per-node profiler (profile_main.c, make profile). */
static int profiled(const cg_plan *p) { return p->n_stages == 1 && !p->train; }

static int emit_makefile(ir_graph *g, const cg_plan *p, const cg_options *o, const char *dir) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cg_put_header_hash(f, g, o, "cpu", "Makefile: builds ./pipeline (pipecc runs the same commands itself)");
  fprintf(f, "\nCC = %s\nCFLAGS = %s\nPIPERT_INCLUDE = %s\nPIPERT_LIB = %s\nLIBS = %s %s\n\n", CG_C_CC, CG_C_CFLAGS,
          cg_runtime()->include, cg_runtime()->lib, PIPERT_LINK_LIBS, CG_C_LIBS);
  fputs("OBJS =", f);
  for (int s = 0; s < p->n_stages; s++) fprintf(f, " obj/stage_%d.o", s);
  fputs(" obj/pipeline_main.o\n\n", f);
  fputs("pipeline: $(OBJS) $(PIPERT_LIB)\n\t$(CC) -o $@ $(OBJS) $(PIPERT_LIB) $(LIBS)\n\n", f);
  if (profiled(p))
    fputs(
        "profile: obj/stage_0_prof.o obj/profile_main.o $(PIPERT_LIB)\n"
        "\t$(CC) -o $@ obj/stage_0_prof.o obj/profile_main.o $(PIPERT_LIB) $(LIBS)\n\n"
        "obj/stage_0_prof.o: stage_0.c\n\t@mkdir -p obj\n\t$(CC) $(CFLAGS) -DPIPECC_PROFILE -I$(PIPERT_INCLUDE) -c -o $@ "
        "$<\n\n",
        f);
  fputs("obj/%.o: %.c\n\t@mkdir -p obj\n\t$(CC) $(CFLAGS) -I$(PIPERT_INCLUDE) -c -o $@ $<\n\n", f);
  fputs(profiled(p)
            ? "clean:\n\trm -f $(OBJS) obj/stage_0_prof.o obj/profile_main.o pipeline profile\n\n.PHONY: clean\n"
            : "clean:\n\trm -f $(OBJS) pipeline\n\n.PHONY: clean\n",
        f);
  fclose(f);
  int rc = cg_write_file(dir, "Makefile", buf, len);
  free(buf);
  return rc;
}

static int has_emitter(ir_op op) { return cg_op_emitter(op) != NULL; }

int cg_c_emit(ir_graph *g, const cg_plan *p, const cg_options *o, const char *out_dir) {
  if (cg_emit_begin(g, p, "cpu", "cg_c_emit", has_emitter, out_dir)) return -1;
  cg_stage_info si = {0};
  if (cg_analyse_stages(g, p, &si)) {
    cg_free_stage_info(&si);
    return -1;
  }
  int rc = 0;
  for (int s = 0; s < p->n_stages; s++)
    if (emit_stage(g, p, o, &si, s, out_dir)) rc = -1;
  if (!rc) cg_remove_stale(out_dir, p->n_stages, "cpu");
  if (!rc) rc = cg_emit_main(g, p, o, &si, "cpu", out_dir);
  if (!rc && profiled(p)) rc = cg_c_emit_profile_main(g, p, o, &si, out_dir);
  if (!rc) rc = emit_makefile(g, p, o, out_dir);
  cg_free_stage_info(&si);
  return rc;
}
