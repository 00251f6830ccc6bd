/* codegen/cuda/emit.c - the cuda target: stage_K.cu, weights_K.bin, pipeline_main.c,
 * the device runtime, profile_main.c and a Makefile for a planned graph (layout in
 * codegen/cuda/cg_cuda.h). Stage analysis, units and the arena plan are shared with
 * the cpu target (codegen/stage.c), so both targets cut and lay out a stage the same
 * way. Nothing here depends on hash order, addresses or time: the output is
 * byte-identical for the same inputs. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/cuda/cg_cuda.h"
#include "ir/diag.h"

/* ---- helpers for the op emitters ------------------------------------------------------- */

void cu_w(cu_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(c->call, fmt, ap);
  va_end(ap);
}

void cu_decl(cu_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(c->decl, fmt, ap);
  va_end(ap);
}

int cu_fail(cu_ctx *c, const ir_node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ir_error_node(c->g, (int)(n - c->g->nodes), "cuda target: %s", msg);
  return -1;
}

void cu_scratch(cu_ctx *c, size_t n) {
  if (n > c->scratch) c->scratch = n;
}

/* ---- one stage ------------------------------------------------------------------------------ */

/* Operand expression for value v: device memory of the stage. */
static char *ptr_expr(cg_stage *st, const size_t *io_off, int v, int is_const) {
  int r = st->root[v];
  const char *t = cg_ctype(st->g->values[v].dtype);
  const char *q = is_const ? "const " : "";
  char buf[160];
  switch (st->loc[r]) {
    case CG_LOC_W: snprintf(buf, sizeof buf, "(const %s *)(W + %zu)", t, st->off[r]); break;
    case CG_LOC_IN: snprintf(buf, sizeof buf, "(%s%s *)(IO + %zu)", q, t, io_off[st->off[r]]); break;
    case CG_LOC_OUT:
      snprintf(buf, sizeof buf, "(%s%s *)(IO + %zu)", q, t, io_off[st->si->n_in[st->s] + st->off[r]]);
      break;
    case CG_LOC_A: snprintf(buf, sizeof buf, "(%s%s *)(A + %zu)", q, t, st->off[r]); break;
    default: IR_ASSERT(0 && "value without a location");
  }
  return strdup(buf);
}

static void put_unit_name(FILE *f, ir_graph *g, const cg_unit *u) {
  const ir_node *n = &g->nodes[u->root];
  char nm[120], buf[300];
  snprintf(buf, sizeof buf, "node %d '%s' (%s%s)", n->index, ir_printable(n->name, 80, nm, sizeof nm),
           u->n_nodes > 1 ? "fused " : "", ir_op_name(n->op));
  cg_put_cstr(f, buf);
}

/* Unit ui of part st; its number in the stage is base + ui (units are numbered across the
 * parts of a training stage). */
static int emit_unit(cg_stage *st, cu_ctx *c, int ui, int base, const size_t *io_off) {
  ir_graph *g = st->g;
  cg_unit *u = &st->units[ui];
  const ir_node *root = &g->nodes[u->root];
  cg_put_unit_comment(c->call, g, u, "  ");
  c->unit = base + ui;
  cu_w(c, "  PK_UNIT(%d);\n", base + ui);
  if (u->alias) {
    cu_w(c, "  /* (alias: no code) */\n");
    return 0;
  }
  memset(c->x, 0, sizeof c->x);
  memset(c->y, 0, sizeof c->y);
  int rc;
  if (cg_is_eltwise(g, root)) {
    if (u->n_ext > 64) return cu_fail(c, root, "an element-wise unit with more than 64 inputs");
    for (int e = 0; e < u->n_ext; e++) c->x[e] = ptr_expr(st, io_off, u->ext[e], 1);
    c->y[0] = ptr_expr(st, io_off, root->out[0], 0);
    rc = cu_emit_eltwise(c, u->nodes, u->n_nodes, u->ext, u->n_ext);
  } else {
    cu_op_fn fn = cu_op_emitter(root->op);
    if (root->n_in > 64 || root->n_out > 8) return cu_fail(c, root, "too many inputs or outputs");
    if (!fn) return cu_fail(c, root, "op %s is not supported", ir_op_name(root->op));
    for (int k = 0; k < root->n_in; k++)
      if (root->in[k] >= 0) c->x[k] = ptr_expr(st, io_off, root->in[k], 1);
    for (int k = 0; k < root->n_out; k++)
      if (root->out[k] >= 0) c->y[k] = ptr_expr(st, io_off, root->out[k], 0);
    rc = fn(c, root);
  }
  for (int k = 0; k < 64; k++) free((void *)c->x[k]);
  for (int k = 0; k < 8; k++) free((void *)c->y[k]);
  memset(c->x, 0, sizeof c->x);
  memset(c->y, 0, sizeof c->y);
  return rc;
}

static void put_size_array(FILE *f, const char *name, const size_t *v, int n) {
  if (!n) return;
  fprintf(f, "static const size_t %s[%d] = {", name, n);
  for (int i = 0; i < n; i++) fprintf(f, "%s%zuu", i ? ", " : "", v[i]);
  fputs("};\n", f);
}

/* The IO layout of part q: its inputs, then its outputs, 256-byte aligned; returns the
 * bytes. off/bytes get n_in + n_out entries. */
static size_t io_layout(ir_graph *g, const cg_stage_info *si, int q, size_t **off, size_t **bytes) {
  int nio = si->n_in[q] + si->n_out[q];
  *off = ir_xcalloc((size_t)nio + 1, sizeof(size_t));
  *bytes = ir_xcalloc((size_t)nio + 1, sizeof(size_t));
  size_t io = 0;
  for (int k = 0; k < nio; k++) {
    int v = k < si->n_in[q] ? si->s_in[q][k] : si->s_out[q][k - si->n_in[q]];
    (*off)[k] = io;
    (*bytes)[k] = (size_t)ir_value_bytes(&g->values[v]);
    io += ((*bytes)[k] + 255) / 256 * 256;
  }
  return io;
}

/* `static const pk_part NAME = {...}` (inside the info struct when inline) for part q. */
static void put_part(FILE *f, const cg_stage_info *si, int q, const char *pre, const char *run, int inl) {
  if (!inl) fprintf(f, "static const pk_part %s_part = ", pre);
  fprintf(f, "{%d, %d, ", si->n_in[q], si->n_out[q]);
  const char *names[4] = {"in_off", "in_bytes", "out_off", "out_bytes"};
  for (int k = 0; k < 4; k++) {
    if ((k < 2 ? si->n_in[q] : si->n_out[q])) fprintf(f, "%s_%s, ", pre, names[k]);
    else fputs("NULL, ", f);
  }
  fprintf(f, "%s}%s", run, inl ? "" : ";\n");
}

static int emit_stage(ir_graph *g, const cg_plan *p, const cg_options *o, const cg_stage_info *si, int s,
                      const char *dir) {
  int train = p->train != NULL, n_parts = train ? 3 : 1;
  static const int phases[3] = {IR_PHASE_FWD, IR_PHASE_BWD, IR_PHASE_UPD};
  static const char *const pre[3] = {"fwd", "bwd", "upd"}, *const runs[3] = {"run_fwd", "run_bwd", "run_upd"};
  cg_wlayout wl;
  cg_wlayout_build(&wl, g, p, si, s);
  cg_stage st[3];
  size_t *io_off[3] = {NULL, NULL, NULL}, *io_bytes[3] = {NULL, NULL, NULL}, io = 0, arena = 0;
  cu_ctx c = {0};
  c.g = g;
  c.o = o;
  char *dbuf = NULL, *cbuf[3] = {NULL, NULL, NULL}, *vbuf = NULL;
  size_t dlen = 0, clen[3] = {0, 0, 0}, vlen = 0;
  c.decl = open_memstream(&dbuf, &dlen);
  c.conv = open_memstream(&vbuf, &vlen);
  int rc = 0, units = 0;
  for (int q = 0; q < n_parts; q++) {
    int part = cg_part(p, s, phases[q]);
    cg_stage_open(&st[q], g, p, o, si, &wl, part, 0, 0);
    if (st[q].arena > arena) arena = st[q].arena;
    size_t pio = io_layout(g, si, part, &io_off[q], &io_bytes[q]);
    if (pio > io) io = pio;
    c.call = open_memstream(&cbuf[q], &clen[q]);
    for (int u = 0; u < st[q].n_units; u++)
      if (emit_unit(&st[q], &c, u, units, io_off[q])) rc = -1;
    units += st[q].n_units;
    for (int k = 0; k < st[q].n_wb; k++) { /* write-backs: device copies into the params */
      int v = st[q].wb[k], d = g->values[v].writeback;
      char *src = ptr_expr(&st[q], io_off[q], v, 1);
      fprintf(c.call, "  /* write back '");
      cg_put_comment(c.call, g->values[v].name, 120);
      fprintf(c.call, "' into '");
      cg_put_comment(c.call, g->values[d].name, 120);
      fprintf(c.call, "' */\n  PK_TRY(pk_memcpy(S, W + %zu, %s, %zuu));\n", wl.off[d], src, g->values[d].nbytes);
      free(src);
    }
    for (int k = 0; q == 0 && k < si->n_out[part]; k++) { /* graph outputs that no node computes */
      int v = si->s_out[part][k], j = 0;
      if (!si->passthrough[v]) continue;
      while (j < si->n_in[part] && si->s_in[part][j] != v) j++;
      int is_const = g->values[v].kind == IR_VAL_CONST;
      IR_ASSERT(is_const ? wl.off[v] != SIZE_MAX : j < si->n_in[part]);
      fprintf(c.call, "  /* graph output '");
      cg_put_comment(c.call, g->values[v].name, 120);
      fprintf(c.call, "' is %s */\n  PK_TRY(pk_memcpy(S, IO + %zu, %s + %zu, %lldu));\n",
              is_const ? "a constant" : "a graph input", io_off[q][si->n_in[part] + k], is_const ? "W" : "IO",
              is_const ? wl.off[v] : io_off[q][j], (long long)ir_value_bytes(&g->values[v]));
    }
    fclose(c.call);
  }
  fclose(c.decl);
  fclose(c.conv);

  uint64_t sum;
  unsigned char *wbuf = cg_wlayout_file(&wl, g, &sum);

  char *sbuf = NULL;
  size_t slen = 0;
  FILE *f = open_memstream(&sbuf, &slen);
  char what[64];
  snprintf(what, sizeof what, "stage_%d.cu: stage %d of %d", s, s, p->n_stages);
  cg_put_header(f, g, o, "cuda", what);
  char nm[512];
  int count = cg_stage_nodes(g, p, s, nm, sizeof nm), fq = cg_part(p, s, IR_PHASE_FWD);
  size_t scratch = cg_align_up(c.scratch);
  fprintf(f,
          "/* %d nodes, %d units; %d inputs, %d outputs; weights %zu bytes; device arena %zu bytes + scratch %zu "
          "bytes; inputs/outputs %zu bytes.\n"
          " * run_fwd() queues the units on the stage's stream over its device arena (a CUDA graph after the first\n"
          " * micro-batch); how inputs and outputs reach it: pipecc_cuda.h, the data path. Float32 GEMMs and\n"
          " * convolutions %s. */\n",
          count, units, si->n_in[fq], si->n_out[fq], wl.file_bytes, arena, scratch, io,
          o && o->no_tf32 ? "are exact float32 (--no-tf32)" : "use TF32 tensor cores");
  if (train)
    fprintf(f,
            "/* training: backward() and step() run their parts the same way; the parameter memory (%zu bytes: the "
            "weights file, then zeros) stays on the device. */\n",
            wl.total_bytes);
  fputs("#include \"pipecc_cuda.h\"\n\n", f);
  fprintf(f, "#define SCRATCH_OFF %zuu\n\n", arena);
  if (dlen) fputs(dbuf, f);
  if (c.n_conv) {
    fprintf(f, "static const pk_conv_p conv_table[%d] = {\n", c.n_conv);
    fputs(vbuf, f);
    fputs("};\n\n", f);
  }
  for (int q = 0; q < n_parts; q++) {
    fprintf(f, "/* The units of the %s part in graph order, on S->stream; 0 or 1 (error printed). */\n",
            q == 0   ? "forward"
            : q == 1 ? "backward"
                     : "update");
    fprintf(f,
            "static int %s(pk_stage *S) {\n  unsigned char *const W = S->w, *const IO = S->io, *const A = S->a;\n"
            "  (void)W;\n  (void)IO;\n  (void)A;\n",
            runs[q]);
    if (clen[q]) fputs(cbuf[q], f);
    fputs("  return 0;\n}\n\n", f);
  }
  /* unit and node names */
  int total_nodes = 0;
  if (units) {
    fprintf(f, "static const char *const unit_names[%d] = {\n", units);
    for (int q = 0; q < n_parts; q++)
      for (int u = 0; u < st[q].n_units; u++) {
        fputs("  ", f);
        put_unit_name(f, g, &st[q].units[u]);
        fputs(",\n", f);
        total_nodes += st[q].units[u].n_nodes;
      }
    fputs("};\n", f);
    fprintf(f, "static const int unit_n_nodes[%d] = {", units);
    for (int q = 0, i = 0; q < n_parts; q++)
      for (int u = 0; u < st[q].n_units; u++) fprintf(f, "%s%d", i++ ? ", " : "", st[q].units[u].n_nodes);
    fputs("};\n", f);
    fprintf(f, "static const char *const node_names[%d] = {\n", total_nodes);
    for (int q = 0; q < n_parts; q++)
      for (int u = 0; u < st[q].n_units; u++)
        for (int m = 0; m < st[q].units[u].n_nodes; m++) {
          fputs("  ", f);
          cg_put_cstr(f, g->nodes[st[q].units[u].nodes[m]].name);
          fputs(",\n", f);
        }
    fputs("};\n", f);
  }
  for (int q = 0; q < n_parts; q++) {
    int part = cg_part(p, s, phases[q]);
    char nm2[32];
    snprintf(nm2, sizeof nm2, "%s_in_off", pre[q]);
    put_size_array(f, nm2, io_off[q], si->n_in[part]);
    snprintf(nm2, sizeof nm2, "%s_in_bytes", pre[q]);
    put_size_array(f, nm2, io_bytes[q], si->n_in[part]);
    snprintf(nm2, sizeof nm2, "%s_out_off", pre[q]);
    put_size_array(f, nm2, io_off[q] + si->n_in[part], si->n_out[part]);
    snprintf(nm2, sizeof nm2, "%s_out_bytes", pre[q]);
    put_size_array(f, nm2, io_bytes[q] + si->n_in[part], si->n_out[part]);
    if (q) put_part(f, si, part, pre[q], runs[q], 0);
  }
  if (train) cg_put_grad_ranges(f, g, &wl);
  fprintf(f, "\nstatic const pk_stage_info info = {\n  %d,\n  ", s);
  cg_put_cstr(f, nm);
  fprintf(f, ",\n  %d,\n  %s,\n  %s,\n  %s,\n  %zuu,\n  %zuu,\n  %d,\n  %s,\n  ", units, units ? "unit_names" : "NULL",
          units ? "unit_n_nodes" : "NULL", units ? "node_names" : "NULL", io, arena + scratch, c.n_conv,
          c.n_conv ? "conv_table" : "NULL");
  put_part(f, si, fq, pre[0], runs[0], 1);
  if (train) {
    int ng = 0;
    for (int k = 0; k < wl.n; k++) ng += g->values[wl.vals[k]].param == IR_PARAM_GRAD;
    fprintf(f, ",\n  %zuu,\n  &bwd_part,\n  &upd_part,\n  %d,\n  grad_off,\n  grad_bytes,\n};\n\n", wl.total_bytes, ng);
  } else fputs(",\n  0u,\n  NULL,\n  NULL,\n  0,\n  NULL,\n  NULL,\n};\n\n", f);
  fprintf(f,
          "static int stage_init(void **state, const void *weights, size_t weights_len) {\n"
          "  return pk_stage_init(state, &info, %d, weights, weights_len);\n}\n\n",
          o && o->no_tf32 ? 0 : 1);
  fputs(
      "static int stage_forward(void *state, const void *const *in, void *const *out) {\n"
      "  return pk_stage_forward(state, in, out);\n}\n\n"
      "static void stage_fini(void *state) { pk_stage_fini(state); }\n\n",
      f);
  if (train)
    fputs(
        "static int stage_backward(void *state, const void *const *in, void *const *out) {\n"
        "  return pk_stage_backward(state, in, out);\n}\n\n"
        "static int stage_step(void *state) { return pk_stage_step(state); }\n\n"
        "static int stage_zero_grads(void *state) { return pk_stage_zero_grads(state); }\n\n"
        "static int stage_param_io(void *state, int write, size_t offset, void *host, size_t nbytes) {\n"
        "  return pk_stage_param_io(state, write, offset, host, nbytes);\n}\n\n",
        f);
  cg_put_stage_desc(f, g, p, si, &wl, s, "extern \"C\" const", nm, sum, "&pk_device_ops");
  fclose(f);

  if (!rc) rc = cg_write_stage_files(dir, s, "cu", sbuf, slen, wbuf, wl.file_bytes);
  free(sbuf);
  free(dbuf);
  free(vbuf);
  free(wbuf);
  for (int q = 0; q < n_parts; q++) {
    free(cbuf[q]);
    free(io_off[q]);
    free(io_bytes[q]);
    cg_stage_close(&st[q]);
  }
  cg_wlayout_free(&wl);
  return rc;
}

/* ---- the device runtime, the profiler, the Makefile ------------------------------------------- */

/* Copy a device runtime file into dir, under the usual header. */
static int copy_rt_file(ir_graph *g, const cg_options *o, const char *dir, const char *name) {
  char src[8300];
  snprintf(src, sizeof src, "%s/%s", cg_runtime()->cuda_rt, name);
  FILE *f = fopen(src, "rb");
  if (!f) {
    fprintf(stderr, "pipecc: cannot read the cuda device runtime %s: %s (set PIPECC_CUDA_RT_DIR)\n", src,
            strerror(errno));
    return -1;
  }
  char *buf = NULL, *head = NULL;
  size_t len = 0, cap = 0, n, hlen = 0;
  char chunk[65536], what[128];
  FILE *h = open_memstream(&head, &hlen);
  snprintf(what, sizeof what, "%s: the device runtime (a copy of codegen/cuda/rt/%s)", name, name);
  cg_put_header(h, g, o, "cuda", what);
  fclose(h);
  cap = hlen + 1;
  buf = ir_xrealloc(buf, cap);
  memcpy(buf, head, hlen);
  len = hlen;
  free(head);
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + n > cap) {
      cap = (len + n) * 2;
      buf = ir_xrealloc(buf, cap);
    }
    memcpy(buf + len, chunk, n);
    len += n;
  }
  fclose(f);
  int rc = cg_write_file(dir, name, buf, len);
  free(buf);
  return rc;
}

/* profile_main.c: plain C, compiled with cc; see the usage text in it. */
static const char profile_main_src[] =
    "#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n#include \"pipert.h\"\n\n"
    "extern const pipert_stage_desc pipecc_stage_0;\n"
    "int pk_stage_profile(void *state, const void *const *in, int warmup, int reps, float *unit_ms);\n"
    "const char *pk_stage_device_name(void *state, char *buf, size_t n);\n"
    "int pk_stage_units(void *state, const char *const **unit_names, const int **unit_n_nodes,\n"
    "                   const char *const **node_names);\n\n"
    "static void usage(void) {\n"
    "  fputs(\"usage: profile [--profile-out FILE.json] [--warmup N] [--reps N] [--weights-dir DIR]\\n\"\n"
    "        \"Times every node of the model (one stage, one micro-batch, random inputs) with CUDA events:\\n\"\n"
    "        \"N warm-up runs, then the median of --reps runs per node; a fused unit's time is split evenly\\n\"\n"
    "        \"over its nodes. Writes {\\\"device\\\": ..., \\\"nodes\\\": {NAME: {\\\"fwd_ms\\\": ...}}} for\\n\"\n"
    "        \"pipecc --profile FILE.json (stdout without --profile-out).\\n\", stderr);\n"
    "}\n\n"
    "static void put_json_str(FILE *f, const char *s) {\n"
    "  fputc('\"', f);\n"
    "  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {\n"
    "    if (*p == '\"' || *p == '\\\\') fprintf(f, \"\\\\%c\", *p);\n"
    "    else if (*p < 32) fprintf(f, \"\\\\u%04x\", *p);\n"
    "    else fputc(*p, f);\n"
    "  }\n"
    "  fputc('\"', f);\n"
    "}\n\n"
    "int main(int argc, char **argv) {\n"
    "  const char *out_path = NULL, *wdir = NULL;\n"
    "  int warmup = 5, reps = 20;\n"
    "  for (int i = 1; i < argc; i++) {\n"
    "    if (!strcmp(argv[i], \"--profile-out\") && i + 1 < argc) out_path = argv[++i];\n"
    "    else if (!strcmp(argv[i], \"--warmup\") && i + 1 < argc) warmup = atoi(argv[++i]);\n"
    "    else if (!strcmp(argv[i], \"--reps\") && i + 1 < argc) reps = atoi(argv[++i]);\n"
    "    else if (!strcmp(argv[i], \"--weights-dir\") && i + 1 < argc) wdir = argv[++i];\n"
    "    else {\n      usage();\n      return strcmp(argv[i], \"-h\") && strcmp(argv[i], \"--help\") ? 2 : 0;\n    }\n"
    "  }\n"
    "  if (warmup < 0 || reps < 1) {\n    usage();\n    return 2;\n  }\n"
    "  const pipert_stage_desc *d = &pipecc_stage_0;\n"
    "  void *w = NULL;\n  size_t wlen = 0;\n"
    "  if (d->weights_file) {\n"
    "    char path[4096], self[4096];\n"
    "    if (!wdir) {\n"
    "      ssize_t k = readlink(\"/proc/self/exe\", self, sizeof self - 1);\n"
    "      self[k > 0 ? k : 0] = 0;\n"
    "      char *slash = strrchr(self, '/');\n"
    "      if (slash) *slash = 0; else strcpy(self, \".\");\n"
    "      wdir = self;\n"
    "    }\n"
    "    snprintf(path, sizeof path, \"%s/%s\", wdir, d->weights_file);\n"
    "    FILE *f = fopen(path, \"rb\");\n"
    "    w = malloc(d->weights_bytes ? d->weights_bytes : 1);\n"
    "    if (!f || !w || fread(w, 1, d->weights_bytes, f) != d->weights_bytes || fgetc(f) != EOF ||\n"
    "        pipert_checksum64(w, d->weights_bytes) != d->weights_checksum) {\n"
    "      fprintf(stderr, \"profile: %s: missing or corrupt weights file\\n\", path);\n"
    "      return 2;\n"
    "    }\n"
    "    fclose(f);\n"
    "    wlen = d->weights_bytes;\n"
    "  }\n"
    "  /* inputs: floats uniform in [-1, 1) from a fixed generator, everything else 0 */\n"
    "  void **in = calloc((size_t)d->n_inputs + 1, sizeof(void *));\n"
    "  uint64_t rng = 0x9E3779B97F4A7C15ull;\n"
    "  for (int k = 0; k < d->n_inputs; k++) {\n"
    "    in[k] = calloc(1, d->inputs[k].nbytes + 1);\n"
    "    if (d->inputs[k].dtype == PIPERT_FLOAT)\n"
    "      for (size_t i = 0; i < d->inputs[k].nbytes / 4; i++) {\n"
    "        rng = rng * 6364136223846793005ull + 1442695040888963407ull;\n"
    "        ((float *)in[k])[i] = (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;\n"
    "      }\n"
    "  }\n"
    "  void *st = NULL;\n"
    "  if (d->init(&st, w, wlen)) return 1;\n"
    "  const char *const *unames, *const *nnames;\n"
    "  const int *nper;\n"
    "  int U = pk_stage_units(st, &unames, &nper, &nnames);\n"
    "  float *ms = calloc((size_t)U + 1, sizeof(float));\n"
    "  if (pk_stage_profile(st, (const void *const *)in, warmup, reps, ms)) return 1;\n"
    "  FILE *o = out_path ? fopen(out_path, \"w\") : stdout;\n"
    "  if (!o) {\n    perror(out_path);\n    return 2;\n  }\n"
    "  char dev[256];\n"
    "  fputs(\"{\\\"device\\\": \", o);\n"
    "  put_json_str(o, pk_stage_device_name(st, dev, sizeof dev));\n"
    "  /* the micro-batch it ran (dim 0 of its first input): the planner scales to its own */\n"
    "  long long batch = d->n_inputs > 0 && d->inputs[0].rank > 0 ? (long long)d->inputs[0].dims[0] : 0;\n"
    "  fprintf(o, \", \\\"warmup\\\": %d, \\\"reps\\\": %d, \\\"batch\\\": %lld, \\\"nodes\\\": {\", warmup, reps,\n"
    "          batch);\n"
    "  int first = 1, k = 0;\n"
    "  double total = 0;\n"
    "  for (int u = 0; u < U; u++) {\n"
    "    total += ms[u];\n"
    "    for (int m = 0; m < nper[u]; m++, k++) {\n"
    "      if (!nnames[k][0]) continue;\n"
    "      fputs(first ? \"\\n  \" : \",\\n  \", o);\n"
    "      first = 0;\n"
    "      put_json_str(o, nnames[k]);\n"
    "      fprintf(o, \": {\\\"fwd_ms\\\": %.6g}\", (double)ms[u] / nper[u]);\n"
    "    }\n"
    "  }\n"
    "  fprintf(o, \"\\n}, \\\"total_ms\\\": %.6g}\\n\", total);\n"
    "  if (out_path) fclose(o);\n"
    "  d->fini(st);\n"
    "  fprintf(stderr, \"profile: %d units, %.3f ms per micro-batch on %s%s%s\\n\", U, total, dev,\n"
    "          out_path ? \", wrote \" : \"\", out_path ? out_path : \"\");\n"
    "  return 0;\n"
    "}\n";

static int emit_profile_main(ir_graph *g, const cg_options *o, const char *dir) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cg_put_header(f, g, o, "cuda", "profile_main.c: per-node timing of a one-stage cuda build (make profile)");
  fputs("#define _GNU_SOURCE\n#include <unistd.h>\n", f);
  fputs(profile_main_src, f);
  fclose(f);
  int rc = cg_write_file(dir, "profile_main.c", buf, len);
  free(buf);
  return rc;
}

/* "80;90" -> "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90" */
static void gencode_flags(const char *arch, char *out, size_t n) {
  size_t o = 0;
  out[0] = 0;
  const char *p = arch && *arch ? arch : "80;90";
  while (*p) {
    while (*p == ';' || *p == ',' || *p == ' ') p++;
    if (!*p) break;
    const char *e = p;
    while (*e && *e != ';' && *e != ',' && *e != ' ') e++;
    int l = (int)(e - p);
    o += (size_t)snprintf(out + o, o < n ? n - o : 0, "%s-gencode arch=compute_%.*s,code=sm_%.*s", o ? " " : "", l, p,
                          l, p);
    p = e;
  }
}

static int emit_makefile(ir_graph *g, const cg_plan *p, const cg_options *o, const char *dir) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  char gencode[1024];
  gencode_flags(o ? o->cuda_arch : NULL, gencode, sizeof gencode);
  cg_put_header_hash(f, g, o, "cuda", "Makefile: builds ./pipeline with nvcc (make profile: the per-node profiler)");
  fprintf(
      f,
      "\nCUDA_HOME ?= /usr/local/cuda\nNVCC ?= $(CUDA_HOME)/bin/nvcc\nCUDA_ARCH = %s\n"
      "NVCCFLAGS = %s $(CUDA_ARCH) -Xcompiler -Wall\nCC = cc\nCFLAGS = -O2 -std=c11 -Wall -Wextra\n"
      "PIPERT_INCLUDE = %s\nPIPERT_LIB = %s\n"
      "LIBS = %s -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas -lnccl -lcudart "
      "-lpthread -lm\n\n",
      gencode, CGU_NVCC_FLAGS, cg_runtime()->include, cg_runtime()->lib, PIPERT_LINK_LIBS);
  fputs("STAGES =", f);
  for (int s = 0; s < p->n_stages; s++) fprintf(f, " obj/stage_%d.o", s);
  fputs("\nOBJS = $(STAGES) obj/pipecc_cuda_rt.o obj/pipeline_main.o\n\n", f);
  fputs("all: pipeline\n\n", f);
  fputs("pipeline: $(OBJS) $(PIPERT_LIB)\n\t$(NVCC) $(CUDA_ARCH) -o $@ $(OBJS) $(PIPERT_LIB) $(LIBS)\n\n", f);
  if (p->n_stages == 1)
    fputs(
        "profile: obj/stage_0.o obj/pipecc_cuda_rt.o obj/profile_main.o $(PIPERT_LIB)\n"
        "\t$(NVCC) $(CUDA_ARCH) -o $@ obj/stage_0.o obj/pipecc_cuda_rt.o obj/profile_main.o $(PIPERT_LIB) $(LIBS)\n\n",
        f);
  fputs(
      "obj/%.o: %.cu pipecc_cuda.h pipecc_cuda_limits.h\n\t@mkdir -p obj\n\t$(NVCC) $(NVCCFLAGS) -I. -I$(PIPERT_INCLUDE) -c -o "
      "$@ $<\n\n",
      f);
  fputs("obj/%.o: %.c\n\t@mkdir -p obj\n\t$(CC) $(CFLAGS) -I$(PIPERT_INCLUDE) -c -o $@ $<\n\n", f);
  fputs("clean:\n\trm -f $(OBJS) obj/profile_main.o pipeline profile\n\n.PHONY: all clean\n", f);
  fclose(f);
  int rc = cg_write_file(dir, "Makefile", buf, len);
  free(buf);
  return rc;
}

static int has_emitter(ir_op op) { return cu_op_emitter(op) != NULL; }

int cg_cuda_emit(ir_graph *g, const cg_plan *p, const cg_options *o, const char *out_dir) {
  if (cg_emit_begin(g, p, "cuda", "cg_cuda_emit", has_emitter, out_dir)) return -1;
  cg_stage_info si = {0};
  if (cg_analyse_stages(g, p, &si)) {
    cg_free_stage_info(&si);
    return -1;
  }
  int rc = 0;
  for (int s = 0; s < p->n_stages; s++)
    if (emit_stage(g, p, o, &si, s, out_dir)) rc = -1;
  if (!rc) cg_remove_stale(out_dir, p->n_stages, "cuda");
  if (!rc) rc = cg_emit_main(g, p, o, &si, "cuda", out_dir);
  if (!rc) rc = copy_rt_file(g, o, out_dir, "pipecc_cuda.h");
  if (!rc) rc = copy_rt_file(g, o, out_dir, "pipecc_cuda_limits.h");
  if (!rc) rc = copy_rt_file(g, o, out_dir, "pipecc_cuda_rt.cu");
  if (!rc && p->n_stages == 1) rc = emit_profile_main(g, o, out_dir);
  if (!rc) rc = emit_makefile(g, p, o, out_dir);
  cg_free_stage_info(&si);
  return rc;
}

/* ---- build: make in out_dir ---------------------------------------------------------------------- */

static int cg_cuda_make(const char *out_dir, const cg_options *o, const char *targets);

/* The device runtime's object (pipecc_cuda_rt.o, about 30 s of nvcc) depends only on its
 * sources and the nvcc command, not on the model: it is cached by their content in
 * $PIPECC_CACHE_DIR (default ~/.cache/pipecc; "off" disables). Fills path with the
 * cache entry; 0, or -1 when there is no cache. */
static int rt_cache_path(const char *out_dir, char *path, size_t n) {
  const char *dir = getenv("PIPECC_CACHE_DIR"), *home = getenv("HOME");
  char base[4096];
  if (dir && !strcmp(dir, "off")) return -1;
  if (dir && *dir) snprintf(base, sizeof base, "%s", dir);
  else if (home && *home) snprintf(base, sizeof base, "%s/.cache/pipecc", home);
  else return -1;
  /* key: the runtime's sources (as copied, without pipecc's header), the Makefile's nvcc
   * lines, the runtime headers it includes and nvcc itself */
  const char *rt = getenv("PIPECC_CUDA_RT_DIR");
  char rtdir[4096];
  snprintf(rtdir, sizeof rtdir, "%s", rt && *rt ? rt : PIPECC_SOURCE_DIR "/codegen/cuda/rt");
  const char *files[] = {"pipecc_cuda_rt.cu", "pipecc_cuda.h", "pipecc_cuda_limits.h", "Makefile"};
  uint64_t key = 0x70697065636375ull;
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char p[8400];
    int rt_src = i + 1 < sizeof files / sizeof *files; /* all but the Makefile */
    snprintf(p, sizeof p, "%s/%s", rt_src ? rtdir : out_dir, files[i]);
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    char line[8192];
    while (fgets(line, sizeof line, f))
      if (rt_src || !strncmp(line, "NVCC", 4) || !strncmp(line, "CUDA_", 5) || !strncmp(line, "PIPERT_INCLUDE", 14))
        key = cg_checksum64(line, strlen(line)) ^ (key * 0x100000001B3ull);
    fclose(f);
  }
  char deps[3][4200];
  snprintf(deps[0], sizeof deps[0], "%s/pipert.h", PIPERT_INCLUDE_DIR);
  snprintf(deps[1], sizeof deps[1], "%s/rt_handover.h", PIPERT_INCLUDE_DIR);
  struct stat st;
  const char *cuda = getenv("CUDA_HOME"), *nvcc = getenv("NVCC");
  /* make's NVCC ?= takes the environment's compiler (tests/cuda/sim/nvcc: the simulator) */
  if (nvcc && *nvcc) snprintf(deps[2], sizeof deps[2], "%s", nvcc);
  else snprintf(deps[2], sizeof deps[2], "%s/bin/nvcc", cuda && *cuda ? cuda : "/usr/local/cuda");
  key = cg_checksum64(deps[2], strlen(deps[2])) ^ (key * 0x100000001B3ull);
  for (int i = 0; i < 3; i++) {
    if (stat(deps[i], &st)) return -1;
    uint64_t v[2] = {(uint64_t)st.st_size, (uint64_t)st.st_mtime};
    key = cg_checksum64(v, sizeof v) ^ (key * 0x100000001B3ull);
  }
  /* the CUDA simulator's library (tests/cuda/sim): rebuilt whenever its headers change */
  const char *sim = getenv("CUDASIM_LIB");
  if (sim && *sim && !stat(sim, &st)) {
    uint64_t v[2] = {(uint64_t)st.st_size, (uint64_t)st.st_mtime};
    key = cg_checksum64(v, sizeof v) ^ (key * 0x100000001B3ull);
  }
  if (mkdir(base, 0777) && errno != EEXIST) {
    char *p = strrchr(base, '/');
    if (!p) return -1;
    *p = 0; /* ~/.cache may not exist yet */
    if (mkdir(base, 0777) && errno != EEXIST) return -1;
    *p = '/';
    if (mkdir(base, 0777) && errno != EEXIST) return -1;
  }
  snprintf(path, n, "%s/pipecc_cuda_rt-%016" PRIx64 ".o", base, key);
  return 0;
}

static int copy_file(const char *from, const char *to) {
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", to, (int)getpid());
  FILE *a = fopen(from, "rb"), *b = a ? fopen(tmp, "wb") : NULL;
  char buf[65536];
  size_t k;
  int ok = a && b;
  while (ok && (k = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, k, b) == k;
  if (a) fclose(a);
  if (b && fclose(b)) ok = 0;
  if (ok && rename(tmp, to)) ok = 0;
  if (!ok) remove(tmp);
  return ok ? 0 : -1;
}

int cg_cuda_build_dir(const char *out_dir, const cg_options *o, const char *targets) {
  char cached[4400], obj[4200];
  int have_cache = rt_cache_path(out_dir, cached, sizeof cached) == 0;
  snprintf(obj, sizeof obj, "%s/obj", out_dir);
  if (mkdir(obj, 0777) && errno != EEXIST) {
    fprintf(stderr, "pipecc: cannot create %s: %s\n", obj, strerror(errno));
    return -1;
  }
  snprintf(obj, sizeof obj, "%s/obj/pipecc_cuda_rt.o", out_dir);
  if (have_cache && !copy_file(cached, obj) && o && o->verbose) fprintf(stderr, "pipecc: %s from the cache\n", obj);
  int rc = cg_cuda_make(out_dir, o, targets);
  if (!rc && have_cache && access(cached, R_OK)) copy_file(obj, cached);
  return rc;
}

/* make TARGETS in out_dir ("pipeline", or "pipeline profile"): each object one job of
 * its own, in parallel, with a progress line, then the link; 0 or -1 (messages printed). */
static int cg_cuda_make(const char *out_dir, const cg_options *o, const char *targets) {
  int n_stages = 0;
  for (;; n_stages++) {
    char p[4300];
    struct stat st;
    snprintf(p, sizeof p, "%s/stage_%d.cu", out_dir, n_stages);
    if (stat(p, &st)) break;
  }
  int profile = strstr(targets, "profile") != NULL, n = 0;
  char **obj = calloc((size_t)n_stages + 3, sizeof(char *)), **lab = calloc((size_t)n_stages + 3, sizeof(char *));
  for (int k = 0; k < n_stages + 3; k++) {
    const char *src = k < n_stages        ? NULL
                      : k == n_stages     ? "pipecc_cuda_rt.cu"
                      : k == n_stages + 1 ? "pipeline_main.c"
                      : profile           ? "profile_main.c"
                                          : NULL;
    if (k >= n_stages && !src) continue;
    char s[64];
    if (src) snprintf(s, sizeof s, "%s", src);
    else snprintf(s, sizeof s, "stage_%d.cu", k);
    obj[n] = malloc(80);
    snprintf(obj[n], 80, "obj/%.*s.o", (int)(strchr(s, '.') - s), s);
    lab[n] = malloc(80);
    snprintf(lab[n], 80, "%s %s", strstr(s, ".cu") ? "nvcc" : "cc", s);
    n++;
  }
  int rc = cg_build_make(out_dir, o, (const char *const *)obj, (const char *const *)lab, n, targets,
                         profile ? "link pipeline and profile" : "link pipeline");
  for (int k = 0; k < n; k++) {
    free(obj[k]);
    free(lab[k]);
  }
  free(obj);
  free(lab);
  if (rc) fprintf(stderr, "pipecc: building %s with nvcc failed (see the messages above)\n", out_dir);
  return rc;
}
