/* tools/pipecc_calibrate.c - `pipecc --calibrate` and the device a plan is costed on (see
 * pipecc_calibrate.h). */
#include "tools/pipecc_calibrate.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/c/cg_c.h"
#include "codegen/codegen.h"
#include "ir/ir.h"
#include "passes/opt/pretranspose.h"
#include "passes/opt/winograd.h"
#include "passes/pass.h"
#include "tools/pipecc_costs.h"

/* ---- where the device file is ---- */

static int default_path(char *buf, size_t n) {
  const char *e = getenv("PIPECC_DEVICE_FILE"), *x = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
  if (e && *e && strcmp(e, "none")) snprintf(buf, n, "%s", e);
  else if (x && *x == '/') snprintf(buf, n, "%s/pipecc/device.json", x);
  else if (home && *home) snprintf(buf, n, "%s/.config/pipecc/device.json", home);
  else return -1;
  return 0;
}

static int is_file_name(const char *s) {
  size_t k = strlen(s);
  return strchr(s, '/') || (k > 5 && !strcmp(s + k - 5, ".json"));
}

const pass_device *pipecc_device(const pipecc_options *o, char *note, size_t n) {
  static pass_device loaded;
  char err[4400], path[4200];
  *note = 0;
  int cpu = !strcmp(o->target, "cpu");
  const char *name = o->device_name, *e = getenv("PIPECC_DEVICE_FILE");
  if (name && !is_file_name(name)) return pass_device_find(name);
  if (name) snprintf(path, sizeof path, "%s", name);
  else if (!cpu) return pass_device_find("h100");
  else if ((e && !strcmp(e, "none")) || default_path(path, sizeof path) || (!(e && *e) && access(path, F_OK)))
    return pass_device_find("cpu"); /* no device file for this machine */
  if (pass_device_load(path, &loaded, err, sizeof err)) {
    fprintf(stderr, "%s%s\n", err, name ? "" : " (pipecc --calibrate writes it again; PIPECC_DEVICE_FILE=none ignores it)");
    return NULL;
  }
  snprintf(note, n, "device %s from %s", loaded.name, path);
  return &loaded;
}

/* ---- the micro-benchmark graph ---- */

typedef struct {
  ir_graph *g;
  int n_in, n_out;
  int in[16], out[16];
  unsigned seed;
} bench;

static int input(bench *b, const char *name, int r, const int64_t *d) {
  int v = ir_add_value(b->g, name, IR_VAL_INPUT, IR_FLOAT);
  b->g->values[v].shape = ir_shape_of(r, d);
  b->in[b->n_in++] = v;
  return v;
}

static int weight(bench *b, const char *name, int r, const int64_t *d) {
  ir_shape s = ir_shape_of(r, d);
  size_t n = 1;
  for (int i = 0; i < r; i++) n *= (size_t)d[i];
  float *w = malloc(n * sizeof *w);
  for (size_t i = 0; i < n; i++) {
    b->seed = b->seed * 1103515245u + 12345u;
    w[i] = (float)((b->seed >> 9) & 0xffff) / 65536.0f - 0.5f;
  }
  int v = ir_add_const(b->g, name, IR_FLOAT, &s, w, n * sizeof *w);
  free(w);
  return v;
}

static int node(bench *b, ir_op op, const char *name, int x, int w) {
  int y = ir_add_value(b->g, name, IR_VAL_ACT, IR_UNDEFINED), in[2] = {x, w};
  int k = ir_add_node(b->g, op, name, in, w < 0 ? 1 : 2, &y, 1);
  b->out[b->n_out++] = y;
  return k;
}

static void ints(bench *b, int k, const char *name, int n, int64_t v) {
  ir_attr *a = ir_node_add_attr(b->g, k, name, IR_ATTR_INTS);
  a->n = n;
  a->ints = ir_alloc_array(b->g->arena, (size_t)n, sizeof(int64_t));
  for (int i = 0; i < n; i++) a->ints[i] = v;
}

static int conv(bench *b, const char *name, int64_t N, int64_t C, int64_t M, int64_t HW, int64_t k, int64_t group) {
  char nm[64];
  int64_t xd[4] = {N, C, HW, HW}, wd[4] = {M, C / group, k, k};
  snprintf(nm, sizeof nm, "%s.x", name);
  int x = input(b, nm, 4, xd);
  snprintf(nm, sizeof nm, "%s.w", name);
  int n = node(b, IR_OP_Conv, name, x, weight(b, nm, 4, wd));
  if (k > 1) ints(b, n, "pads", 4, k / 2);
  if (group > 1) {
    ir_attr *a = ir_node_add_attr(b->g, n, "group", IR_ATTR_INT);
    a->i = group;
  }
  return n;
}

static int matmul(bench *b, const char *name, int64_t M, int64_t K, int64_t N) {
  char nm[64];
  int64_t ad[2] = {M, K}, bd[2] = {K, N};
  snprintf(nm, sizeof nm, "%s.a", name);
  int a = input(b, nm, 2, ad);
  snprintf(nm, sizeof nm, "%s.b", name);
  return node(b, IR_OP_MatMul, name, a, weight(b, nm, 2, bd));
}

enum { B_GEMM, B_GEMM_S, B_DIR, B_DIR_S, B_WINO, B_DW, B_ADD, B_SIG, B_MOVE, B_TINY, B_N };
static const char *const bench_name[B_N] = {"gemm",       "gemm_small", "direct", "direct_small", "winograd",
                                            "depthwise",  "add",        "sigmoid", "transpose",   "tiny"};

static ir_graph *bench_graph(int *nodes) {
  bench b = {ir_graph_new("calibrate"), 0, 0, {0}, {0}, 12345u};
  b.g->opset = 17;
  nodes[B_GEMM] = matmul(&b, "gemm", 128, 2048, 512);
  nodes[B_GEMM_S] = matmul(&b, "gemm_small", 49, 2048, 256);
  nodes[B_DIR] = conv(&b, "direct", 1, 512, 256, 16, 1, 1);
  nodes[B_DIR_S] = conv(&b, "direct_small", 1, 32, 256, 64, 1, 1);
  nodes[B_WINO] = conv(&b, "winograd", 1, 64, 64, 56, 3, 1);
  nodes[B_DW] = conv(&b, "depthwise", 4, 96, 96, 56, 3, 96);
  int64_t ed[4] = {1, 64, 128, 128}, td[3] = {16, 256, 256}, sd[2] = {1, 16};
  int x = input(&b, "add.x", 4, ed), y = input(&b, "add.y", 4, ed);
  nodes[B_ADD] = node(&b, IR_OP_Add, "add", x, y);
  nodes[B_SIG] = node(&b, IR_OP_Sigmoid, "sigmoid", input(&b, "sigmoid.x", 4, ed), -1);
  nodes[B_MOVE] = node(&b, IR_OP_Transpose, "transpose", input(&b, "transpose.x", 3, td), -1);
  ints(&b, nodes[B_MOVE], "perm", 3, 0);
  ir_attr *p = &b.g->nodes[nodes[B_MOVE]].attr[0]; /* perm 0, 2, 1 */
  p->ints[1] = 2, p->ints[2] = 1;
  nodes[B_TINY] = node(&b, IR_OP_Relu, "tiny", input(&b, "tiny.x", 2, sd), -1);
  ir_graph *g = b.g;
  g->inputs = ir_alloc_array(g->arena, (size_t)b.n_in, sizeof(int));
  memcpy(g->inputs, b.in, sizeof(int) * (size_t)b.n_in);
  g->n_inputs = b.n_in;
  g->outputs = ir_alloc_array(g->arena, (size_t)b.n_out, sizeof(int));
  memcpy(g->outputs, b.out, sizeof(int) * (size_t)b.n_out);
  g->n_outputs = b.n_out;
  return g;
}

/* ---- the run and the fit ---- */

#define CALIBRATE_RUNS 15

/* each node's time, the least of the runs so far (ms[] < 0: none yet) */
static int read_times(const char *path, const ir_graph *g, const int *nodes, double *ms) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  char *buf = NULL;
  size_t len = 0, k;
  char tmp[65536];
  while ((k = fread(tmp, 1, sizeof tmp, f)) > 0) {
    buf = realloc(buf, len + k + 1);
    memcpy(buf + len, tmp, k);
    len += k;
  }
  fclose(f);
  if (!buf) return -1;
  buf[len] = 0;
  cJSON *root = cJSON_Parse(buf);
  free(buf);
  cJSON *ns = root ? cJSON_GetObjectItemCaseSensitive(root, "nodes") : NULL;
  int bad = !ns;
  for (int b = 0; b < B_N && !bad; b++) {
    cJSON *e = cJSON_GetObjectItemCaseSensitive(ns, g->nodes[nodes[b]].name);
    cJSON *t = e ? cJSON_GetObjectItemCaseSensitive(e, "fwd_ms") : NULL;
    if (!cJSON_IsNumber(t)) bad = 1;
    else if (ms[b] < 0 || t->valuedouble < ms[b]) ms[b] = t->valuedouble;
  }
  cJSON_Delete(root);
  return bad ? -1 : 0;
}

static double vbytes(const ir_graph *g, int v) {
  int64_t b = ir_value_bytes(&g->values[v]);
  return b > 0 ? (double)b : 0;
}
static double node_bytes(ir_graph *g, int k) {
  const ir_node *n = &g->nodes[k];
  double s = 0;
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= 0) s += vbytes(g, n->in[i]);
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0) s += vbytes(g, n->out[i]);
  return s;
}

/* r = peak / (1 + h s) at two points: peak and h (h >= 0) */
static void fit2(double r1, double s1, double r2, double s2, double *peak, double *h) {
  double d = r2 * s2 - r1 * s1;
  *h = d != 0 ? (r1 - r2) / d : 0;
  if (!(*h >= 0)) *h = 0;
  *peak = r1 * (1 + *h * s1);
}

static double pos(double t, double floor_ms) { return t > floor_ms ? t : floor_ms; }

static void cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[1024];
  while (f && fgets(line, sizeof line, f)) {
    const char *c = strchr(line, ':');
    if (c && !strncmp(line, "model name", 10)) {
      snprintf(buf, n, "%s", c + 2);
      buf[strcspn(buf, "\n")] = 0;
      break;
    }
  }
  if (f) fclose(f);
}

int pipecc_calibrate(const pipecc_options *o, const char *path) {
  char out[4200], dir[4200], cpu[256], src[512], date[32];
  if (path && *path) snprintf(out, sizeof out, "%s", path);
  else if (default_path(out, sizeof out)) {
    fprintf(stderr, "pipecc: --calibrate: no $PIPECC_DEVICE_FILE, $XDG_CONFIG_HOME or $HOME to write to; --calibrate=FILE\n");
    return 2;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pipecc-calibrate.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "pipecc: --calibrate: cannot create %s: %s\n", dir, strerror(errno));
    return 2;
  }
  int nodes[B_N];
  ir_graph *g = bench_graph(nodes);
  pass_opts po = {0};
  cpu_model(cpu, sizeof cpu);
  if (!o->quiet) fprintf(stderr, "pipecc: calibrating the cpu target's kernels on one core of %s\n", cpu);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = pass_shape(g, &po) || g->n_errors || pass_winograd(g, -1) != 1 || pass_pretranspose(g, CG_C_DIRECT_K) < 0;
  char sub[4300], js[4400];
  snprintf(sub, sizeof sub, "%s/stage", dir);
  snprintf(js, sizeof js, "%s/profile.json", sub);
  double ms[B_N];
  for (int b = 0; b < B_N; b++) ms[b] = -1;
  if (rc) fprintf(stderr, "pipecc: --calibrate: internal error in the benchmark graph\n");
  pipecc_options oc = *o; /* the emitted files name the benchmark as their model */
  oc.model = "(pipecc --calibrate)";
  rc = rc || pipecc_profile_graph(g, &oc, sub) || read_times(js, g, nodes, ms);
  /* the least of CALIBRATE_RUNS runs of each node: on a shared machine, the time that
   * other work did not take */
  for (int k = 1; k < CALIBRATE_RUNS && !rc; k++) rc = pipecc_run_profiler(sub, o->pass.verbose) || read_times(js, g, nodes, ms);
  pipecc_rm_rf(dir);
  if (rc) {
    fprintf(stderr, "pipecc: --calibrate: the micro-benchmark failed; no device file written\n");
    ir_graph_free(g);
    return 3;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pass_device d = *pass_device_find("cpu");
  /* the fixed cost of a node: the tiny Relu; the others' times less it */
  double fix = ms[B_TINY];
  d.launch_us = fix * 1e3;
  double t[B_N];
  for (int b = 0; b < B_N; b++) t[b] = pos(ms[b] - fix, 1e-4);
  const ir_node *nd = g->nodes;
  /* OpenBLAS: 128 x 512 x 2048 and 49 x 256 x 2048 (a late layer's 7 x 7 map) */
  double r1 = 2.0 * 128 * 512 * 2048 / (t[B_GEMM] * 1e6), r2 = 2.0 * 49 * 256 * 2048 / (t[B_GEMM_S] * 1e6);
  fit2(r1, 1.0 / 128 + 1.0 / 512 + 1.0 / 2048, r2, 1.0 / 49 + 1.0 / 256 + 1.0 / 2048, &d.gemm_gflops,
       &d.gemm_half);
  /* pipert_gemm_direct: 1x1 Convs of K = 512 and K = 32 */
  r1 = 2.0 * 256 * 512 * 256 / (t[B_DIR] * 1e6), r2 = 2.0 * 256 * 32 * 4096 / (t[B_DIR_S] * 1e6);
  fit2(r1, 1.0 / 512, r2, 1.0 / 32, &d.direct_gflops, &d.direct_half);
  d.mem_gbps = node_bytes(g, nodes[B_ADD]) / (t[B_ADD] * 1e6);
  d.move_gbps = node_bytes(g, nodes[B_MOVE]) / (t[B_MOVE] * 1e6);
  d.ew_gelems = 64.0 * 128 * 128 / (t[B_SIG] * 1e6);
  /* depthwise: 4 x 96 channels of 56 x 56, 9 taps, less its streaming */
  double tdw = t[B_DW] - node_bytes(g, nodes[B_DW]) / (d.mem_gbps * 1e6);
  d.dw_gflops = 2.0 * 4 * 96 * 56 * 56 * 9 / (pos(tdw, t[B_DW] * 0.25) * 1e6);
  /* Winograd F(4x4, 3x3) on 64 -> 64 channels of 56 x 56: 36 GEMMs 64 x 196 x 64 at the
   * fitted OpenBLAS rate; the rest is its transforms */
  int wm = pass_winograd_m(&nd[nodes[B_WINO]]);
  double a = wm + 2, tiles = (double)((56 + wm - 1) / wm) * ((56 + wm - 1) / wm);
  double tg = a * a * 2 * 64 * 64 * tiles / (d.gemm_gflops * 1e6 / (1 + d.gemm_half * (2.0 / 64 + 1 / tiles)));
  double tb = 4.0 * a * a * tiles * (64 + 64) * 2 + node_bytes(g, nodes[B_WINO]);
  d.wino_gbps = tb / (pos(t[B_WINO] - tg, t[B_WINO] * 0.25) * 1e6);
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
  const char *core = getenv("OPENBLAS_CORETYPE");
  snprintf(src, sizeof src, "pipecc --calibrate on one core of %s%s%s, %s", cpu, core && *core ? ", OPENBLAS_CORETYPE=" : "",
           core && *core ? core : "", date);
  d.desc = "one core of this machine (the cpu target's kernels)";
  d.source = src;
  /* the fitted model against the measured times */
  pass_node_cost *c = calloc((size_t)g->n_nodes, sizeof *c);
  pass_profile_opts pro = {&d, 0, NULL};
  double worst = 0;
  const char *worst_at = "";
  if (!pass_profile(g, &pro, c))
    for (int b = 0; b < B_N; b++) {
      double e = c[nodes[b]].fwd_ms / ms[b];
      if (o->pass.verbose)
        fprintf(stderr, "pipecc: calibrate %-12s measured %8.3f ms, model %8.3f ms\n", bench_name[b], ms[b],
                c[nodes[b]].fwd_ms);
      if (e < 1) e = 1 / e;
      if (e > worst) worst = e, worst_at = bench_name[b];
    }
  free(c);
  ir_graph_free(g);
  /* written through a temporary file renamed into place */
  char dirname[4200], tmpf[4300];
  snprintf(dirname, sizeof dirname, "%s", out);
  char *sl = strrchr(dirname, '/');
  if (sl && sl != dirname) {
    *sl = 0;
    pipecc_mkdir_p(dirname);
  }
  snprintf(tmpf, sizeof tmpf, "%s.tmp.%ld", out, (long)getpid());
  FILE *f = fopen(tmpf, "w");
  if (f) pass_device_write(f, &d);
  if (!f || fclose(f) || rename(tmpf, out)) {
    fprintf(stderr, "pipecc: --calibrate: cannot write %s: %s\n", out, strerror(errno));
    unlink(tmpf);
    return 2;
  }
  if (!o->quiet) {
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr,
            "pipecc: calibrated in %.1f s: OpenBLAS %.1f GFLOP/s (half at %.0f), direct GEMM %.1f GFLOP/s (half at "
            "K = %.0f), depthwise %.1f GFLOP/s, Winograd transforms %.1f GB/s, streams %.1f GB/s, layout changes %.1f "
            "GB/s, %.2f us a node; the model within %.2fx of every benchmark (worst: %s)\n",
            s, d.gemm_gflops, d.gemm_half, d.direct_gflops, d.direct_half, d.dw_gflops, d.wino_gbps, d.mem_gbps,
            d.move_gbps, d.launch_us, worst, worst_at);
  }
  printf("%s\n", out);
  return 0;
}
