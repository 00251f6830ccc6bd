/* passes/plan/profile.c - device table, roofline costs, measured profiles. */
#include "passes/plan/profile.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/stage.h"
#include "ir/diag.h"

/* Peak dense rates from the vendors' data sheets (SXM parts); efficiencies are the
 * usual fractions large cuDNN/cuBLAS kernels reach. "cpu" is one core of this kind of
 * host running OpenBLAS (AVX2/FMA): about 45 GFLOP/s sgemm and 8 GB/s per core. */
const pass_device pass_devices[] = {
    {"h100", "NVIDIA H100 SXM 80GB", 67.0, 494.7, 989.4, 3350, 80, 4.0, 0.60, 0.80},
    {"h200", "NVIDIA H200 SXM 141GB", 67.0, 494.7, 989.4, 4800, 141, 4.0, 0.60, 0.80},
    {"a100", "NVIDIA A100 SXM 80GB", 19.5, 156.0, 312.0, 2039, 80, 4.0, 0.65, 0.80},
    {"v100", "NVIDIA V100 SXM2 32GB", 15.7, 0, 125.0, 900, 32, 5.0, 0.65, 0.80},
    {"cpu", "one core of the host CPU (OpenBLAS, AVX2)", 0.045, 0, 0, 8, 16, 0.5, 1.0, 1.0},
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
  }
  free(owned);
  if (o->profile_path && load_profile(g, o->profile_path, costs)) return -1;
  return 0;
}
