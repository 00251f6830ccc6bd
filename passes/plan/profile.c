/* passes/plan/profile.c - device table, roofline costs, measured profiles. */
#include "passes/plan/profile.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "codegen/codegen.h"
#include "codegen/stage.h"
#include "passes/opt/fuse.h"
#include "passes/opt/winograd.h"
#include "ir/diag.h"

/* the cpu device's kernel rates (see pass_device) */
#define CPU_GEMM 105.0
#define CPU_GEMM_HALF 22.0
#define CPU_DIRECT 96.0
#define CPU_DIRECT_HALF 4.0
#define CPU_DW 38.0
#define CPU_WINO 8.5
#define CPU_MOVE 5.5
#define CPU_EW 1.7
#define CPU_SOURCE "pipecc --calibrate on one core of an AMD EPYC (AVX2, OpenBLAS Cooperlake), 2026-12-02"

/* Peak dense rates from the vendors' data sheets (SXM parts: FP32, dense TF32 and BF16
 * tensor-core peaks, HBM bandwidth); efficiencies are the usual fractions large
 * cuDNN/cuBLAS kernels reach. These are public specifications, not measurements. "cpu"
 * is one core of this kind of host with the kernels the cpu target emits, its rates
 * measured by `pipecc --calibrate` on an AMD EPYC core (AVX2/FMA, OpenBLAS core
 * Cooperlake); `pipecc --calibrate` writes this machine's own figures (device files:
 * tools/pipecc_calibrate.h). */
#define GPU_SPEC "public specifications (vendor data sheets), not measured"
const pass_device pass_devices[] = {
    {"h100", "NVIDIA H100 SXM 80GB", 67.0, 494.7, 989.4, 3350, 80, 4.0, 0.60, 0.80, 0, 0, 0, 0, 0, 0, 0, 0, 0, GPU_SPEC},
    {"h200", "NVIDIA H200 SXM 141GB", 67.0, 494.7, 989.4, 4800, 141, 4.0, 0.60, 0.80, 0, 0, 0, 0, 0, 0, 0, 0, 0,
     GPU_SPEC},
    {"a100", "NVIDIA A100 SXM 80GB", 19.5, 156.0, 312.0, 2039, 80, 4.0, 0.65, 0.80, 0, 0, 0, 0, 0, 0, 0, 0, 0, GPU_SPEC},
    {"v100", "NVIDIA V100 SXM2 32GB", 15.7, 0, 125.0, 900, 32, 5.0, 0.65, 0.80, 0, 0, 0, 0, 0, 0, 0, 0, 0, GPU_SPEC},
    {"cpu", "one core of the host CPU (OpenBLAS, AVX2)", 0.045, 0, 0, 18.0, 16, 0.4, 1.0, 1.0, 1, CPU_GEMM, CPU_GEMM_HALF,
     CPU_DIRECT, CPU_DIRECT_HALF, CPU_DW, CPU_WINO, CPU_MOVE, CPU_EW, CPU_SOURCE},
};
const int pass_n_devices = (int)(sizeof pass_devices / sizeof pass_devices[0]);

const pass_link pass_links[] = {
    {"nvlink4", "NVLink 4 (H100/H200), per direction", 450, 5},
    {"nvlink3", "NVLink 3 (A100), per direction", 300, 5},
    {"pcie4", "PCIe 4.0 x16", 25, 10},
    {"pcie5", "PCIe 5.0 x16", 50, 10},
    {"ib-ndr", "InfiniBand NDR 400 Gb/s", 50, 5},
    {"ib-hdr", "InfiniBand HDR 200 Gb/s", 25, 5},
    {"eth100", "Ethernet 100 Gb/s", 12.5, 20},
    {"shm", "shared memory between threads of one host", 10, 1},
};
const int pass_n_links = (int)(sizeof pass_links / sizeof pass_links[0]);

const pass_device *pass_device_find(const char *name) {
  for (int i = 0; i < pass_n_devices; i++)
    if (!strcasecmp(pass_devices[i].name, name)) return &pass_devices[i];
  /* accept a few spellings: H100-SXM, A100-80GB, ... */
  for (int i = 0; i < pass_n_devices; i++)
    if (!strncasecmp(pass_devices[i].name, name, strlen(pass_devices[i].name))) return &pass_devices[i];
  return NULL;
}

const pass_link *pass_link_find(const char *name) {
  for (int i = 0; i < pass_n_links; i++)
    if (!strcasecmp(pass_links[i].name, name)) return &pass_links[i];
  return NULL;
}

static int is_matmul_like(ir_op op) {
  return op == IR_OP_Conv || op == IR_OP_ConvTranspose || op == IR_OP_Gemm || op == IR_OP_MatMul;
}

double pass_bwd_flops(const ir_graph *g, int node) {
  const ir_node *n = &g->nodes[node];
  if (is_matmul_like(n->op)) {
    /* dX always; dW when the weight is a trainable initializer (or an activation) */
    return 2.0 * n->flops;
  }
  return n->flops; /* element-wise and data movement: about one pass over the data */
}

static uint64_t vbytes(const ir_value *v) {
  int64_t b = ir_value_bytes(v);
  return b > 0 ? (uint64_t)b : 0;
}

static double roofline_ms(const pass_device *d, int tf32, const ir_node *n, double flops, uint64_t bytes) {
  double peak = d->fp32_tflops;
  if (is_matmul_like(n->op) && tf32 && d->tf32_tflops > 0) peak = d->tf32_tflops;
  double eff = is_matmul_like(n->op) ? d->compute_eff : d->compute_eff * 0.5;
  double t_c = flops / (peak * 1e12 * eff);
  double t_m = (double)bytes / (d->mem_gbps * 1e9 * d->mem_eff);
  return (t_c > t_m ? t_c : t_m) * 1e3 + d->launch_us * 1e-3;
}

/* ---- the emitted code's cost (cpu_kernels): the kernel codegen/c picks for each node ---- */

static double dims_prod(const ir_shape *s, int from, int to) {
  double p = 1;
  for (int i = from; i < to && i < s->rank; i++) p *= (double)(s->dims[i] > 0 ? s->dims[i] : 1);
  return p;
}

static double gemm_ms(const pass_device *d, double M, double N, double K, double batch) {
  if (M < 1 || N < 1 || K < 1) return 0;
  double f = 2 * M * N * K * batch;
  if (K <= CG_C_DIRECT_K) return f / (d->direct_gflops * 1e9 / (1 + d->direct_half / K)) * 1e3;
  return f / (d->gemm_gflops * 1e9 / (1 + d->gemm_half * (1 / M + 1 / N + 1 / K))) * 1e3;
}
static double blas_ms(const pass_device *d, double M, double N, double K, double batch) {
  if (M < 1 || N < 1 || K < 1) return 0;
  return 2 * M * N * K * batch / (d->gemm_gflops * 1e9 / (1 + d->gemm_half * (1 / M + 1 / N + 1 / K))) * 1e3;
}
static double bw_ms(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e9) * 1e3 : 0; }

static int is_move(ir_op op) {
  switch (op) {
    case IR_OP_Transpose:
    case IR_OP_Concat:
    case IR_OP_Slice:
    case IR_OP_Split:
    case IR_OP_Gather:
    case IR_OP_Pad:
    case IR_OP_Expand:
    case IR_OP_Tile:
    case IR_OP_Resize:
    case IR_OP_DepthToSpace:
    case IR_OP_SpaceToDepth: return 1;
    default: return 0;
  }
}

/* Conv: Winograd (passes/opt/winograd.h), the 1x1 + depthwise pair (pipecc.expand), the
 * depthwise stencil, pipert_gemm_direct (K <= CG_C_DIRECT_K over CG_C_DIRECT_OS positions
 * or more; a 1x1 Conv of small images over all of them, CG_C_SEG_OS) or im2col + OpenBLAS,
 * batched over images for small maps; a fused epilogue
 * runs on the GEMM's blocks in cache (its residual is read once). */
static double conv_ms(const pass_device *d, ir_graph *g, const ir_node *n, double in_b, double out_b) {
  const ir_value *x = ir_in(g, n, 0), *w = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  if (!x || !w || !y || x->shape.rank < 3 || y->shape.rank != x->shape.rank) return -1;
  int sp = x->shape.rank - 2;
  double N = (double)x->shape.dims[0], C = (double)x->shape.dims[1], M = (double)y->shape.dims[1];
  double G = (double)ir_attr_int(n, "group", 1), OS = dims_prod(&y->shape, 2, y->shape.rank),
         IS = dims_prod(&x->shape, 2, x->shape.rank);
  if (G < 1) G = 1;
  const ir_value *res = ir_in(g, n, 3);
  double t_epi = res ? bw_ms((double)vbytes(res), d->mem_gbps) : 0;
  if (ir_attr_find(n, "pipecc.expand")) { /* x [N, K, H, W] -> 1x1 (input 4) -> depthwise (input 1) */
    const ir_value *we = ir_in(g, n, 4);
    if (!we || we->shape.rank != 4 || w->shape.rank != 4) return -1;
    double K = C, taps = dims_prod(&w->shape, 2, 4);
    double t1 = IS >= CG_C_DIRECT_OS ? gemm_ms(d, M, IS, K, N) : blas_ms(d, M, IS, K, N);
    return t1 + 2 * N * M * OS * taps / (d->dw_gflops * 1e9) * 1e3 + bw_ms(in_b + out_b, d->mem_gbps) + t_epi;
  }
  int wm = pass_winograd_m(n);
  if (wm && sp == 2) {
    double a = wm + 2, oh = (double)y->shape.dims[2], ow = (double)y->shape.dims[3];
    double tiles = N * (double)((int64_t)(oh + wm - 1) / wm) * (double)((int64_t)(ow + wm - 1) / wm);
    double t_g = a * a * blas_ms(d, M, tiles, C, 1);
    double tb = 4.0 * a * a * tiles * (C + M) * 2 + in_b + out_b;
    return t_g + bw_ms(tb, d->wino_gbps) + t_epi;
  }
  double ks = dims_prod(&w->shape, 2, w->shape.rank), Cg = C / G, Mg = M / G, K = Cg * ks;
  int one = 1;
  const int64_t *v;
  for (int i = 2; i < w->shape.rank; i++) one &= w->shape.dims[i] == 1;
  int k = ir_attr_ints(n, "strides", &v);
  for (int i = 0; i < k; i++) one &= v[i] == 1;
  k = ir_attr_ints(n, "pads", &v);
  for (int i = 0; i < k; i++) one &= v[i] == 0;
  if (G == C && G == M && sp == 2 && ks <= PASS_DW_MAX_TAPS)
    return 2 * N * C * OS * ks / (d->dw_gflops * 1e9) * 1e3 + bw_ms(in_b + out_b, d->mem_gbps) + t_epi;
  /* im2col: a gather of the taps (at the rate of layout changes), read by the GEMM */
  double col = one ? 0 : 4.0 * K * OS * N * 2;
  /* pipert_gemm_direct_seg: the images as one GEMM, read and written in place */
  if (one && N > 1 && OS >= 16 && OS < CG_C_SEG_OS && K <= CG_C_SEG_K) return gemm_ms(d, Mg, OS * N, K, G) + t_epi;
  if (K <= CG_C_DIRECT_K && OS >= CG_C_DIRECT_OS) return gemm_ms(d, Mg, OS, K, N * G) + bw_ms(col, d->move_gbps) + t_epi;
  double nb = 1;
  if (OS < 1024 && N > 1) { /* emit_conv_batched: NB images per GEMM, direct where K allows */
    nb = (double)(16 << 20) / ((K + Mg) * OS * 4); /* about CONV_BATCH_BYTES per block */
    if (nb > N) nb = N;
    if (nb < 1) nb = 1;
  }
  if (nb >= 2) {
    col = 4.0 * K * OS * N * 2 + out_b * 2; /* the block's columns, its output scattered back */
    return gemm_ms(d, Mg, OS * nb, K, N * G / nb) + bw_ms(col, d->move_gbps) + t_epi;
  }
  /* OpenBLAS per image (and group), then the epilogue in a pass of its own */
  double t_pass = ir_attr_find(n, "pipecc.fused") ? bw_ms(out_b * 2, d->mem_gbps) : 0;
  return blas_ms(d, Mg, OS, K, N * G) + bw_ms(col, d->move_gbps) + t_epi + t_pass;
}

static double matmul_ms(const pass_device *d, ir_graph *g, const ir_node *n) {
  const ir_value *a = ir_in(g, n, 0), *b = ir_in(g, n, 1), *y = ir_out(g, n, 0);
  if (!a || !b || !y || a->shape.rank < 1 || b->shape.rank < 1 || y->shape.rank < 1) return -1;
  double M, N, K, batch = 1;
  if (n->op == IR_OP_Gemm) {
    if (a->shape.rank != 2 || b->shape.rank != 2) return -1;
    int ta = (int)ir_attr_int(n, "transA", 0), tb = (int)ir_attr_int(n, "transB", 0);
    M = (double)a->shape.dims[ta ? 1 : 0], K = (double)a->shape.dims[ta ? 0 : 1], N = (double)b->shape.dims[tb ? 0 : 1];
  } else {
    K = (double)a->shape.dims[a->shape.rank - 1];
    N = b->shape.rank >= 2 ? (double)b->shape.dims[b->shape.rank - 1] : 1;
    M = a->shape.rank >= 2 ? (double)a->shape.dims[a->shape.rank - 2] : 1;
    batch = dims_prod(&y->shape, 0, y->shape.rank) / (M * N > 0 ? M * N : 1);
    if (b->shape.rank <= 2) M *= batch, batch = 1; /* one B: one GEMM of batch * M rows */
    else if (M * N * K <= CG_C_DIRECT_MATMUL) return 2 * M * N * K * batch / (d->direct_gflops * 1e9 / (1 + d->direct_half / K)) * 1e3;
  }
  return gemm_ms(d, M, N, K, batch);
}

/* element-wise ops whose element costs a libm call or a polynomial (timed as Sigmoid) */
static int is_transcendental(ir_op op) {
  switch (op) {
    case IR_OP_Erf:
    case IR_OP_Exp:
    case IR_OP_Log:
    case IR_OP_Tanh:
    case IR_OP_Sigmoid:
    case IR_OP_Gelu:
    case IR_OP_Softmax:
    case IR_OP_LogSoftmax:
    case IR_OP_Pow: return 1;
    default: return 0;
  }
}

static double emitted_ms(const pass_device *d, ir_graph *g, const ir_node *n, double flops, uint64_t in_b,
                         uint64_t out_b) {
  if (cg_is_alias(n)) return 0;
  double t = -1;
  if (n->op == IR_OP_Conv) t = conv_ms(d, g, n, (double)in_b, (double)out_b);
  else if ((n->op == IR_OP_Gemm || n->op == IR_OP_MatMul) && ir_out(g, n, 0) &&
           ir_dtype_is_float(ir_out(g, n, 0)->dtype))
    t = matmul_ms(d, g, n);
  if (t >= 0) { /* no faster than its operands stream (a GEMV: one row of A) */
    double tm = bw_ms((double)(in_b + out_b), d->mem_gbps);
    if (tm > t) t = tm;
  }
  if (t < 0 && is_matmul_like(n->op)) t = flops / (d->gemm_gflops * 1e9) * 1e3 + bw_ms((double)(in_b + out_b), d->mem_gbps);
  else if (t < 0 && is_move(n->op)) t = bw_ms((double)(in_b + out_b), d->move_gbps);
  else if (t < 0) { /* streams, pools, reductions: vector arithmetic as the stencil's, or libm */
    const ir_value *y = ir_out(g, n, 0);
    double el = y && ir_value_bytes(y) > 0 ? (double)ir_value_bytes(y) / (double)ir_dtype_size(y->dtype) : 0;
    double tc = is_transcendental(n->op) ? el / (d->ew_gelems * 1e9) * 1e3 : flops / (d->dw_gflops * 1e9) * 1e3;
    double tm = bw_ms((double)(in_b + out_b), d->mem_gbps);
    t = tc > tm ? tc : tm;
  }
  return t + d->launch_us * 1e-3;
}

static int load_profile(ir_graph *g, const char *path, pass_node_cost *c) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open the profile\n", path);
    g->n_errors++;
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (len < 0 || len > (1l << 30)) {
    fclose(f);
    fprintf(stderr, "%s: unreadable or too large profile\n", path);
    g->n_errors++;
    return -1;
  }
  char *buf = ir_xmalloc((size_t)len + 1);
  size_t got = fread(buf, 1, (size_t)len, f);
  fclose(f);
  buf[got] = 0;
  cJSON *root = cJSON_Parse(buf);
  free(buf);
  cJSON *nodes = root ? cJSON_GetObjectItemCaseSensitive(root, "nodes") : NULL;
  if (!root || !cJSON_IsObject(nodes)) {
    fprintf(stderr, "%s: not a pipecc profile (expected {\"device\": ..., \"nodes\": {NAME: {\"fwd_ms\": ...}}})\n",
            path);
    cJSON_Delete(root);
    g->n_errors++;
    return -1;
  }
  /* times measured at another micro-batch size than the plan's: scaled by the ratio (the
   * work of nearly every node is proportional to it) */
  double scale = 1;
  cJSON *pb = cJSON_GetObjectItemCaseSensitive(root, "batch");
  int64_t plan_batch = ir_graph_batch(g, 0);
  if (cJSON_IsNumber(pb) && pb->valuedouble >= 1 && plan_batch > 0 && (double)plan_batch != pb->valuedouble) {
    scale = (double)plan_batch / pb->valuedouble;
    fprintf(stderr, "%s: note: measured at a micro-batch of %.0f, the plan's hold %lld: its times are scaled by %g\n",
            path, pb->valuedouble, (long long)plan_batch, scale);
  }
  int missing = 0, bad = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    cJSON *e = *n->name ? cJSON_GetObjectItemCaseSensitive(nodes, n->name) : NULL;
    cJSON *fw = e ? cJSON_GetObjectItemCaseSensitive(e, "fwd_ms") : NULL;
    cJSON *bw = e ? cJSON_GetObjectItemCaseSensitive(e, "bwd_ms") : NULL;
    if (!e) {
      missing++;
      continue;
    }
    if (!cJSON_IsNumber(fw) || fw->valuedouble < 0 || (bw && (!cJSON_IsNumber(bw) || bw->valuedouble < 0))) {
      char nm[96];
      fprintf(stderr, "%s: node '%s': fwd_ms/bwd_ms must be non-negative numbers\n", path,
              ir_printable(n->name, 60, nm, sizeof nm));
      bad++;
      continue;
    }
    double ratio = c[i].fwd_ms > 0 ? c[i].bwd_ms / c[i].fwd_ms : 1.0;
    c[i].fwd_ms = fw->valuedouble * scale;
    c[i].bwd_ms = (bw ? bw->valuedouble : fw->valuedouble * ratio) * scale;
    c[i].measured = 1;
  }
  cJSON_Delete(root);
  if (bad) {
    g->n_errors++;
    return -1;
  }
  if (missing)
    fprintf(stderr, "%s: warning: %d node%s not in the profile; using the cost model for them\n", path, missing,
            missing > 1 ? "s" : "");
  return 0;
}

int pass_profile(ir_graph *g, const pass_profile_opts *o, pass_node_cost *costs) {
  const pass_device *d = o->device ? o->device : pass_device_find("h100");
  /* a constant read by several nodes is loaded once by a stage: its first reader owns it */
  char *owned = ir_xcalloc((size_t)g->n_values + 1, 1);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    pass_node_cost *c = &costs[i];
    memset(c, 0, sizeof *c);
    if (n->dead) continue;
    for (int k = 0; k < n->n_in; k++) {
      const ir_value *v = ir_in(g, n, k);
      if (!v) continue;
      c->bytes_read += vbytes(v);
      if (v->kind == IR_VAL_CONST && !owned[n->in[k]]) { /* as codegen lays out weights_K.bin */
        owned[n->in[k]] = 1;
        c->param_bytes += cg_wlayout_value_bytes(v);
      }
    }
    for (int k = 0; k < n->n_out; k++) {
      const ir_value *v = ir_out(g, n, k);
      if (v) c->out_bytes += vbytes(v);
    }
    c->bytes_written = c->out_bytes;
    c->fwd_flops = n->flops;
    c->bwd_flops = pass_bwd_flops(g, i);
    c->fwd_ms = roofline_ms(d, o->tf32, n, c->fwd_flops, c->bytes_read + c->bytes_written);
    /* backward reads the stashed activation and the output gradient, writes dX (and dW) */
    c->bwd_ms = roofline_ms(d, o->tf32, n, c->bwd_flops, 2 * (c->bytes_read + c->bytes_written));
    if (d->cpu_kernels) { /* the emitted kernel's time; backward in the roofline's proportion */
      double f = emitted_ms(d, g, n, c->fwd_flops, c->bytes_read, c->bytes_written);
      c->bwd_ms = c->fwd_ms > 0 ? c->bwd_ms * f / c->fwd_ms : c->bwd_ms;
      c->fwd_ms = f;
    }
  }
  free(owned);
  if (o->profile_path && load_profile(g, o->profile_path, costs)) return -1;
  return 0;
}

/* ---- device files ---- */

#define DEV_FIELDS(X) \
  X(fp32_tflops) X(tf32_tflops) X(bf16_tflops) X(mem_gbps) X(mem_gib) X(launch_us) X(compute_eff) X(mem_eff)
#define CPU_FIELDS(X) \
  X(gemm_gflops) X(gemm_half) X(direct_gflops) X(direct_half) X(dw_gflops) X(wino_gbps) X(move_gbps) X(ew_gelems)

void pass_device_write(FILE *f, const pass_device *d) {
  fprintf(f, "{\n  \"pipecc_device\": 1,\n  \"name\": \"%s\",\n  \"desc\": \"%s\",\n  \"source\": \"%s\",\n", d->name,
          d->desc, d->source ? d->source : "");
  fprintf(f, "  \"cpu_kernels\": %d", d->cpu_kernels);
#define W(F) fprintf(f, ",\n  \"" #F "\": %.6g", d->F);
  DEV_FIELDS(W)
  if (d->cpu_kernels) {
    CPU_FIELDS(W)
  }
#undef W
  fprintf(f, "\n}\n");
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = ir_xmalloc(n);
  memcpy(p, s, n);
  return p;
}

int pass_device_load(const char *path, pass_device *d, char *err, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, n, "%s: cannot open the device file", path);
    return -1;
  }
  char buf[16384];
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  int big = !feof(f);
  fclose(f);
  buf[got] = 0;
  cJSON *root = big ? NULL : cJSON_Parse(buf);
  cJSON *tag = root ? cJSON_GetObjectItemCaseSensitive(root, "pipecc_device") : NULL;
  cJSON *nm = root ? cJSON_GetObjectItemCaseSensitive(root, "name") : NULL;
  if (!cJSON_IsNumber(tag) || !cJSON_IsString(nm)) {
    snprintf(err, n, "%s: not a pipecc device file (expected {\"pipecc_device\": 1, \"name\": ..., rates})", path);
    cJSON_Delete(root);
    return -1;
  }
  memset(d, 0, sizeof *d);
  const pass_device *base = pass_device_find(nm->valuestring);
  if (base) *d = *base; /* a field left out keeps the built-in device's figure */
  d->name = dup_str(nm->valuestring);
  cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "desc");
  d->desc = dup_str(cJSON_IsString(s) ? s->valuestring : nm->valuestring);
  s = cJSON_GetObjectItemCaseSensitive(root, "source");
  d->source = dup_str(cJSON_IsString(s) ? s->valuestring : path);
  s = cJSON_GetObjectItemCaseSensitive(root, "cpu_kernels");
  if (cJSON_IsNumber(s)) d->cpu_kernels = s->valueint != 0;
  const char *bad = NULL;
#define R(F)                                                    \
  s = cJSON_GetObjectItemCaseSensitive(root, #F);               \
  if (s && (!cJSON_IsNumber(s) || !(s->valuedouble >= 0))) bad = #F; \
  else if (s) d->F = s->valuedouble;
  DEV_FIELDS(R)
  CPU_FIELDS(R)
#undef R
  cJSON_Delete(root);
  if (!bad && d->cpu_kernels && !(d->gemm_gflops > 0 && d->direct_gflops > 0 && d->dw_gflops > 0 &&
                                  d->wino_gbps > 0 && d->move_gbps > 0 && d->mem_gbps > 0))
    bad = "gemm_gflops, direct_gflops, dw_gflops, wino_gbps, move_gbps and mem_gbps (cpu_kernels needs them above 0)";
  if (!bad && !d->cpu_kernels && !(d->fp32_tflops > 0 && d->mem_gbps > 0 && d->compute_eff > 0 && d->mem_eff > 0))
    bad = "fp32_tflops, mem_gbps, compute_eff and mem_eff (above 0)";
  if (bad) {
    snprintf(err, n, "%s: bad %s: must be a non-negative number", path, bad);
    return -1;
  }
  return 0;
}
