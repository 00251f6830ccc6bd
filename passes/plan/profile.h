/* passes/plan/profile.h - the cost of every node: analytical (FLOPs and bytes on a device's
 * roofline) or measured (a profile JSON from a run on the target).
 *
 * Measured profile format (written by `pipecc --profile-run`, read with --profile):
 *   {"device": "H100-SXM", "nodes": {"ONNX node name": {"fwd_ms": 0.12, "bwd_ms": 0.25}}}
 * A node missing from the file falls back to the cost model, with one warning that
 * counts them. bwd_ms may be left out (then the model's backward/forward ratio is used). */
#ifndef PIPECC_PASSES_PROFILE_H
#define PIPECC_PASSES_PROFILE_H
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

typedef struct {
  const char *name; /* --device NAME */
  const char *desc;
  double fp32_tflops; /* dense peak rates */
  double tf32_tflops; /* 0: no TF32 (then fp32 is used) */
  double bf16_tflops;
  double mem_gbps;    /* GB/s (1e9 bytes) */
  double mem_gib;     /* device memory */
  double launch_us;   /* fixed cost per node (kernel launch / call overhead) */
  double compute_eff; /* fraction of peak reached by large GEMM/conv */
  double mem_eff;     /* fraction of bandwidth reached by streaming kernels */
  /* The kernels the cpu target emits (cpu_kernels = 1), each at its own rate (GFLOP/s,
   * GB/s), measured by `pipecc --calibrate` (tools/pipecc_calibrate.h) or defaults:
   *   gemm_gflops  OpenBLAS sgemm on large matrices; an M x N x K GEMM reaches
   *                gemm_gflops / (1 + gemm_half (1/M + 1/N + 1/K));
   *   direct_gflops pipert_gemm_direct (K <= CG_C_DIRECT_K), at direct_gflops / (1 + direct_half / K);
   *   dw_gflops    the depthwise stencil, and the arithmetic of pools, reductions and
   *                element-wise nodes (with mem_gbps, their streams);
   *   wino_gbps    Winograd's input and output transforms, bytes of tiles moved;
   *   move_gbps    layout changes (Transpose, Concat, Slice, Gather, Pad, ...) and im2col;
   *   ew_gelems    elements per second (1e9) of Sigmoid, Tanh, Exp, Erf, Gelu, Softmax, ...
   * Every node adds launch_us; an alias (Reshape, Flatten, ...) costs nothing.
   * Zero rates on a GPU device: the roofline of the peak rates and efficiencies above. */
  int cpu_kernels;
  double gemm_gflops, gemm_half, direct_gflops, direct_half, dw_gflops, wino_gbps, move_gbps, ew_gelems;
  const char *source; /* where the figures come from */
} pass_device;

typedef struct {
  const char *name; /* --link NAME */
  const char *desc;
  double gbps; /* GB/s one direction */
  double lat_us;
} pass_link;

extern const pass_device pass_devices[];
extern const int pass_n_devices;
extern const pass_link pass_links[];
extern const int pass_n_links;
const pass_device *pass_device_find(const char *name);
/* A device file (JSON, written by `pipecc --calibrate` or pass_device_write): fills *d
 * (its strings owned by the process). Returns 0, or -1 with one line naming the file in
 * err. */
int pass_device_load(const char *path, pass_device *d, char *err, size_t n);
/* Writes d as a device file. */
void pass_device_write(FILE *f, const pass_device *d);
const pass_link *pass_link_find(const char *name);

typedef struct {
  double fwd_flops, bwd_flops;
  uint64_t bytes_read, bytes_written; /* forward, activations and weights */
  uint64_t param_bytes;               /* weights-file bytes of the constants it reads first (cg_wlayout_value_bytes) */
  uint64_t out_bytes;                 /* bytes of its outputs (the activation it stashes) */
  double fwd_ms, bwd_ms;
  int measured; /* times came from a profile file */
} pass_node_cost;

typedef struct {
  const pass_device *device;
  int tf32;                 /* use TF32 rates for float32 Conv/Gemm/MatMul */
  const char *profile_path; /* measured profile, or NULL */
} pass_profile_opts;

/* Fill costs[g->n_nodes]. Returns 0, or -1 after reporting (bad profile file). */
int pass_profile(ir_graph *g, const pass_profile_opts *o, pass_node_cost *costs);
/* FLOPs of the backward of a node given its forward FLOPs (dX + dW). */
double pass_bwd_flops(const ir_graph *g, int node);
#endif
