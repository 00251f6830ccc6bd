/* pipecc_cuda.h - the device runtime shared by every stage_K.cu of a cuda build.
 *
 * pipecc copies this header and pipecc_cuda_rt.cu into the build directory. The
 * runtime is compiled ONCE per build (pipecc_cuda_rt.o) and holds everything that
 * does not depend on the model: the stage life cycle (device selection, stream,
 * cuDNN/cuBLAS handles, weights upload, device memory, CUDA graph capture, host
 * staging of inputs/outputs, errors, per-unit profiling), the cuDNN convolution
 * setup (Conv forward, ConvTranspose as backward data), the cuBLAS GEMM wrapper and
 * generic kernels (strided/padded copy, gathers, scatters, pooling, softmax, layer/
 * batch/instance normalisation, LRN, reductions, arg-max, top-k, cumulative sums,
 * resize, fills).
 * A stage_K.cu holds only its generated fused element-wise kernels, the parameter
 * tables of its nodes and the list of calls (run function), so nvcc compiles little
 * per stage.
 *
 * Data path: the host form (pk_stage_forward/backward) takes HOST buffers, copies the
 * stage inputs to the device, runs the units on the stage's stream (eagerly for the
 * first micro-batch, then replaying a CUDA graph captured on the second), copies the
 * outputs back and synchronises.
 * The device form (pk_device_ops, pipert_device_ops in pipert.h) takes DEVICE buffers:
 * stages sharing a device in one process hand over device memory without the host
 * waiting (async mode), and stages in different processes send and receive device
 * buffers with NCCL on a communication stream of their own, so transfers overlap
 * compute (runtime/transport_mpi.c). A training program's backward() runs its part the
 * same way; the weights, gradient accumulators and optimizer state stay on the device
 * (the units write new values back with device copies inside the graph); step() runs
 * the update part, after replicas all-reduce their gradients (comm_sum, ncclAllReduce);
 * param_io copies a param to or from the host.
 *
 * Devices: the plan's, modulo cudaGetDeviceCount(): in one process the stages'
 * replicas in order (stage 0's r0 replicas on devices 0 .. r0-1, stage 1's next, ...,
 * pipert_init_device), one process per replica on its local rank's device;
 * PIPECC_CUDA_DEVICE=N pins every stage to device N. So a one-GPU machine runs a
 * g-device build. Environment: PIPECC_CUDA_GRAPH=0 runs eagerly (no graph).
 *
 * Errors: one line on stderr naming the stage, the device and what failed
 * ("pipeline: stage 1 on cuda:0 (NVIDIA H100 80GB HBM3): node 54 'conv1' (Conv):
 * cudnnConvolutionForward: CUDNN_STATUS_..."); init/forward then return non-zero and
 * the runtime stops every stage. */
#ifndef PIPECC_CUDA_H
#define PIPECC_CUDA_H
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecc_cuda_limits.h"
#include "pipert.h"

#define PK_MAX_RANK 8
#define PK_THREADS 256
/* unrolls the loop that follows in device code (elsewhere, the simulator's g++: nothing) */
#ifdef __CUDA_ARCH__
#define PK_UNROLL _Pragma("unroll")
#else
#define PK_UNROLL
#endif

/* Element types (ONNX codes, as pipert). */
enum { PK_F32 = 1, PK_U8 = 2, PK_I8 = 3, PK_I16 = 5, PK_I32 = 6, PK_I64 = 7, PK_BOOL = 9, PK_F64 = 11 };

/* Convolution of one node, set up once in init (descriptors, algorithm by cuDNN's
 * heuristics, workspace size; one workspace shared by all). Spatial dims are
 * normalised to 3 (leading ones 1); pads are symmetric here (the emitter pre-pads
 * asymmetric Conv pads, and computes an asymmetric ConvTranspose unpadded and crops).
 * Conv: x [n, c, in], weight [m, c/groups, k], y [n, m, out] (cudnnConvolutionForward).
 * ConvTranspose (transposed = 1): x [n, c, in], weight [c, m/groups, k], y [n, m, out]
 * is cudnnConvolutionBackwardData of the convolution from [n, m, out] to [n, c, in]
 * with that weight as its filter; cuDNN's deterministic algorithms are preferred.
 * nhwc (2-D Conv only, passes/opt/layout.h): x and y are channels-last in memory,
 * [n, in0, in1, c], and the weight [m, k0, k1, c/groups] (cuDNN's NHWC filter format). */
typedef struct pk_conv_p {
  int dtype; /* PK_F32 | PK_F64 */
  int sr;    /* spatial rank of the node, 1..3 */
  int n, c, m, groups;
  int in[3], out[3], k[3], stride[3], dil[3], pad[3];
  int transposed;
  int nhwc;
} pk_conv_p;

/* Strided / padded copy: y[o] = x[base + sum_d j_d * xs[d]] with j_d = o_d - pb[d]
 * mapped into [0, xd[d]) by mode (NONE: no check; CONST: out of range gives value;
 * EDGE; REFLECT; WRAP). Transpose, Slice, broadcast, Pad and Tile are all this. */
enum { PK_PAD_NONE = 0, PK_PAD_CONST, PK_PAD_EDGE, PK_PAD_REFLECT, PK_PAD_WRAP };
typedef struct pk_copy_p {
  int esize; /* element bytes: 1, 2, 4, 8 */
  int rank;  /* >= 1 */
  int mode;
  int64_t base;
  int64_t ydims[PK_MAX_RANK], xs[PK_MAX_RANK], xd[PK_MAX_RANK], pb[PK_MAX_RANK];
  uint64_t value; /* CONST: the element's bit pattern */
} pk_copy_p;

/* Pooling (float): MAX / AVG / LP over a 3-D window (leading dims 1). cl > 0: x and y
 * are channels-last, [n, spatial, cl] with nc = n * cl (passes/opt/layout.h; no indices). */
enum { PK_POOL_MAX = 0, PK_POOL_AVG, PK_POOL_LP };
typedef struct pk_pool_p {
  int kind, dtype, count_include_pad, col_major_index; /* dtype: PK_F32; PK_I8, PK_U8 for max */
  double p;
  int64_t nc;
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
  int64_t cl;
} pk_pool_p;

/* Row-wise ops over [outer, A, inner]. */
enum { PK_SOFTMAX = 0, PK_LOGSOFTMAX, PK_HARDMAX };

/* Reductions over the axes with red[d] = 1 of an input of dims xd; dtype (input and
 * output): PK_F32, PK_F64, PK_I64, PK_I32, PK_I16, PK_I8, PK_U8, PK_BOOL. */
enum {
  PK_RED_SUM = 0,
  PK_RED_MEAN,
  PK_RED_MAX,
  PK_RED_MIN,
  PK_RED_PROD,
  PK_RED_L1,
  PK_RED_L2,
  PK_RED_SUMSQ,
  PK_RED_LOGSUM,
  PK_RED_LOGSUMEXP
};
typedef struct pk_reduce_p {
  int kind, dtype, rank;
  int64_t xd[PK_MAX_RANK];
  int red[PK_MAX_RANK];
} pk_reduce_p;

/* GatherElements: y[o] (o over the indices' dims ydims) = x[sum_d o_d * xs[d]], where
 * along `axis` o_d is replaced by idx[o] (negative from the end, out of range 0). */
/* bad, unit (in GatherElements, GatherND and scatters): where a kernel records an index
 * out of range, and the unit's number; set by the call (pk_stage.bad) */
typedef struct pk_gather_el_p {
  int esize, rank, axis, idx64;
  int64_t a; /* x's extent along axis */
  int64_t ydims[PK_MAX_RANK], xs[PK_MAX_RANK];
  unsigned long long *bad;
  int unit;
} pk_gather_el_p;

/* GatherND: b batches of ni index tuples of l entries; tuple j of batch bi picks the
 * slice (slice elements) at row off of batch bi's data (d elements), where off folds
 * the tuple over dims[0..l). y[(bi * ni + j) * slice + s] = x[bi * d + off * slice + s]. */
typedef struct pk_gather_nd_p {
  int esize, idx64, l;
  int64_t b, ni, slice, d;
  int64_t dims[PK_MAX_RANK];
  int first_axis; /* the data axis of dims[0] (batch_dims) */
  unsigned long long *bad;
  int unit;
} pk_gather_nd_p;

/* ScatterElements (nd = 0) and ScatterND (nd = 1): y = x, then for every update unit
 * u in order, y[target(u) * slice + s] op= upd[u * slice + s] for s < slice.
 * ScatterElements: units are the index elements (slice 1), u's coordinates over udims
 * with the index along axis, target = their offset by the data strides xs.
 * ScatterND: units are the index tuples of l entries, target = the tuple folded over
 * dims[0..l). Deterministic for every reduction: the units are sorted by (target, u)
 * in scratch (a bitonic sort of sort_n = pow2 >= nu 64-bit keys), then each target
 * is updated by one thread in unit order -- the cpu target's order, so its float sums
 * are the same; duplicates under reduction none keep the last update, as the cpu. */
enum { PK_SCATTER_NONE = 0, PK_SCATTER_ADD, PK_SCATTER_MUL, PK_SCATTER_MAX, PK_SCATTER_MIN };
typedef struct pk_scatter_p {
  int dtype, esize, reduction, idx64, nd, rank, axis, l;
  int64_t ny; /* elements of x and y */
  int64_t nu, slice, sort_n;
  int64_t udims[PK_MAX_RANK], xs[PK_MAX_RANK], dims[PK_MAX_RANK];
  unsigned long long *bad;
  int unit;
} pk_scatter_p;

/* Resize / Upsample over rank dims: nearest (any element size: a copy), multilinear, or
 * the filter of cubic and antialiased linear (float32, float64); coordinates and filter
 * weights per dim as codegen/op_params.c's cg_resize_coord and cg_resize_taps (same
 * expressions, in double, rounded op by op: no FMA contraction). Dims with resized 0
 * (not in axes) are copied. tf_crop_and_resize: an element whose coordinate lies outside
 * the input along any dim is extrapolation (extrap_bits: its bits as the element type,
 * for nearest). */
enum { PK_RESIZE_NEAREST = 0, PK_RESIZE_LINEAR, PK_RESIZE_CUBIC };
enum {
  PK_CTM_HALF_PIXEL = 0,
  PK_CTM_PYTORCH_HALF_PIXEL,
  PK_CTM_ALIGN_CORNERS,
  PK_CTM_ASYMMETRIC,
  PK_CTM_TF_HALF_PIXEL_FOR_NEAREST,
  PK_CTM_HALF_PIXEL_SYMMETRIC,
  PK_CTM_TF_CROP_AND_RESIZE
};
enum { PK_NEAREST_ROUND_PREFER_FLOOR = 0, PK_NEAREST_ROUND_PREFER_CEIL, PK_NEAREST_FLOOR, PK_NEAREST_CEIL };
typedef struct pk_resize_p {
  int dtype, esize, rank, mode, ctm, nearest;
  int filter, antialias, exclude_outside; /* filter: cubic, or linear with antialias */
  double cubic_a, extrapolation;
  uint64_t extrap_bits;
  int64_t xdims[PK_MAX_RANK], ydims[PK_MAX_RANK];
  double scales[PK_MAX_RANK];
  int resized[PK_MAX_RANK], taps[PK_MAX_RANK];
  double roi0[PK_MAX_RANK], roi1[PK_MAX_RANK]; /* tf_crop_and_resize */
} pk_resize_p;

struct pk_stage;
/* One part of a stage: the forward pass, or in a training program the backward pass
 * or the optimizer update. Its inputs and outputs live in the stage's IO region (host
 * staging), its units run on the stage's stream. */
typedef struct pk_part {
  int n_in, n_out;
  const size_t *in_off, *in_bytes, *out_off, *out_bytes; /* in the IO region */
  int (*run)(struct pk_stage *S);                        /* the units, in order, on S->stream */
} pk_part;

/* What a stage_K.cu tells the runtime about itself. */
typedef struct pk_stage_info {
  int id;
  const char *name;
  int n_units;                   /* of all parts; unit numbers are global */
  const char *const *unit_names; /* "node 54 'conv1' (Conv)": errors and profiles */
  const int *unit_n_nodes;       /* ONNX nodes per unit */
  const char *const *node_names; /* ONNX names of the units' nodes, unit after unit */
  size_t io_bytes, arena_bytes;  /* the largest part's; arena includes the scratch at its end */
  int n_conv;
  const pk_conv_p *conv;
  pk_part fwd;
  /* training programs (0 / NULL for inference): the device parameter memory (the weights
   * file, then zeros), the backward and update parts, the gradient accumulators */
  size_t param_bytes;
  const pk_part *bwd, *upd;
  int n_grads;
  const size_t *grad_off, *grad_bytes;
} pk_stage_info;

/* A stream of a stage as runtime/rt_handover.c sees it (its identity as a reader). */
struct pk_hstream {
  struct pk_stage *S;
  cudaStream_t s;
};

/* Parts queued ahead of their completion, per stage, when stages hand over by events. */
#define PK_TIMING_RING 16
/* NCCL groups queued ahead of their completion, per stage, in async mode. */
#define PK_COMM_RING 8

/* A send (reads p) or a receive (writes p) of the open NCCL group, async mode. */
struct pk_cop {
  const void *p;
  int send;
};

/* The state of one replica of a stage. Generated code reads the fields marked (gen). */
typedef struct pk_stage {
  const pk_stage_info *info;
  int device;
  char where[320];             /* "stage 1 on cuda:0 (NVIDIA ...)" */
  char dev_word[64];           /* the device's name, spaces as '_' (PIPECC_CONV_TUNE_FILE) */
  int fault_said;              /* a device fault (sticky: every later call returns it) printed */
  cudaStream_t stream;         /* (gen) */
  cudaStream_t cstream;        /* NCCL sends, receives and all-reduces (made on first use) */
  void *cudnn, *cublas, *lt;   /* cudnnHandle_t, cublasHandle_t, cublasLtHandle_t */
  struct pk_lt_plan *lt_plans; /* cuBLASLt plans of the stage's GEMM shapes */
  int tf32;                    /* TF32 tensor cores for float32 GEMM/conv */
  unsigned char *w, *io, *a;   /* (gen) device weights, stage inputs/outputs, arena */
  void *ws;
  size_t ws_bytes;
  void *sum_tmp; /* a peer replica's gradients, copied in to be summed */
  size_t sum_tmp_bytes;
  struct pk_conv_s *conv;
  struct pk_gplan *gplans;    /* cuDNN graph API plans (PIPECC_CONV_API=graph) */
  int use_graph, captured[3]; /* per part (forward, backward, update): 1 run once, 2 captured */
  cudaGraphExec_t exec[3];
  int unit; /* the unit running (errors) */
  /* run-time indices out of range (Gather and kin): the first kernel thread to find one
   * records {1, index, size, unit << 8 | axis} in bad (device); the part's end copies it
   * into bad_host, which is read once the part's work is done (sync) or at the run's end
   * (async: dev_busy) */
  unsigned long long *bad, *bad_host;
  int bad_used;    /* a unit checked indices: bad is read back */
  cudaEvent_t *ev; /* profiling: n_units + 1 events, else NULL */
  /* hand-over by events (pipert_device_ops.async): forward/backward return once queued;
   * busy time from event pairs around each part, harvested as they complete */
  int async;
  cudaStream_t ustream;    /* async mode: graph input uploads, beside the stage's work */
  struct pk_hstream hs[3]; /* the hand-over's streams: stream, ustream, cstream */
  double busy_s;
  cudaEvent_t tev[2 * PK_TIMING_RING];
  int t_first, t_n;
  /* async NCCL: a send reads its buffer on cstream, a receive writes it; the open group's
   * buffers (ordered once the group is queued), an event after each of the last groups */
  void *pcomm; /* ncclComm_t of the sends and receives: timed waits */
  struct pk_cop *cop;
  int n_cop, cap_cop;
  cudaEvent_t cev[PK_COMM_RING];
  long n_groups;
} pk_stage;

#ifdef __cplusplus
extern "C" {
#endif
/* Life cycle (pipert_stage_desc's init/forward/fini). tf32: 0 for exact float32. */
int pk_stage_init(void **state, const pk_stage_info *info, int tf32, const void *weights, size_t weights_len);
int pk_stage_forward(void *state, const void *const *in, void *const *out);
/* Training (pipert_stage_desc's backward/step/zero_grads/param_io). */
int pk_stage_backward(void *state, const void *const *in, void *const *out);
int pk_stage_step(void *state);
int pk_stage_zero_grads(void *state);
int pk_stage_param_io(void *state, int write, size_t offset, void *host, size_t nbytes);
/* The stages' device form (pipert_device_ops): sets in device memory; forward/backward
 * copy device inputs into the IO region and outputs out of it on the device. */
extern const pipert_device_ops pk_device_ops;
void pk_stage_fini(void *state);
/* Profiling: runs warmup + reps micro-batches eagerly with an event around every
 * unit; unit_ms[u] is the median time of unit u. Returns 0 or non-zero. */
int pk_stage_profile(void *state, const void *const *in, int warmup, int reps, float *unit_ms);
/* Device name of a state (for profiles). */
const char *pk_stage_device_name(void *state, char *buf, size_t n);
/* The units of a state: returns their count; names, ONNX nodes per unit and the
 * nodes' ONNX names (unit after unit). For the profiler, which is plain C. */
int pk_stage_units(void *state, const char *const **unit_names, const int **unit_n_nodes,
                   const char *const **node_names);

/* Called by generated code between units: records the profiling event of unit u. */
void pk_mark(pk_stage *S, int u);
/* Report a failed unit (message) and return 1. */
int pk_fail(pk_stage *S, const char *what, const char *detail);
/* Check the last kernel launch of unit S->unit. */
int pk_check_launch(pk_stage *S);
/* Grid size for n elements with PK_THREADS threads (grid-stride kernels). */
unsigned pk_grid(int64_t n);

/* Ops. All return 0, or 1 after printing the error line. */
int pk_conv(pk_stage *S, int idx, const void *x, const void *w, void *y);
/* y[n, c, ...] += b[c] (float / double by dtype) */
int pk_bias(pk_stage *S, int dtype, void *y, const void *b, int64_t n, int64_t c, int64_t spatial);
/* A Conv's fused epilogue, float32: y = act(y + b[channel] + r) over [n, c, spatial];
 * b and r may be NULL; act bit 0: clamp below at lo, bit 1: clamp above at hi. */
int pk_conv_epi(pk_stage *S, void *y, const void *b, const void *r, int64_t n, int64_t c, int64_t spatial, int act,
                float lo, float hi);
/* A channels-last 1x1 Conv of stride 1 (conv idx, float32) with its fused epilogue,
 * y = act(x W^T + b + r) over P = N H W positions: one cuBLASLt GEMM whose epilogue adds
 * the bias, the residual (as its C operand) and Relu; cuDNN's convolution and
 * pk_conv_epi where cuBLASLt has no algorithm or PIPECC_CONV_GEMM=0. b, r may be NULL;
 * act as pk_conv_epi's. */
int pk_conv_1x1(pk_stage *S, int idx, const void *x, const void *w, const void *b, const void *r, void *y, int64_t P,
                int64_t C, int64_t M, int act, float lo, float hi);
/* A float32 NCHW 2-D Conv (conv idx) of one group on few input channels (a network's
 * stem) with its fused epilogue, y = act(conv(x, W) + b + r): a direct kernel from
 * shared memory, exact float32 (no TF32); cuDNN's convolution and pk_conv_epi where the
 * kernel's limits (pk_dc_fits, pipecc_cuda_limits.h) do not hold or
 * PIPECC_CONV_DIRECT=0. b, r may be NULL; act as pk_conv_epi's. */
int pk_conv_direct(pk_stage *S, int idx, const void *x, const void *w, const void *b, const void *r, void *y, int act,
                   float lo, float hi);
/* Row-major GEMM, batched with strides (0: broadcast):
 * C_i = alpha * op(A_i) op(B_i) + beta * C_i, op(A) M x K, op(B) K x N, C M x N.
 * Through cuBLASLt (TF32 unless the stage runs exact float32): a plan per shape made on
 * its first call, on the stage's workspace; cuBLAS where cuBLASLt offers no algorithm. */
int pk_gemm(pk_stage *S, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
            int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, double beta, void *c, int64_t ldc,
            int64_t sc, int64_t batch);
int pk_copy(pk_stage *S, const pk_copy_p *p, const void *x, void *y);
/* A batch of 2-D transposes of esize-byte elements: x [B, R, C] -> y [B, C, R] (a
 * Transpose whose perm, with size-1 dims dropped and neighbours merged, swaps two
 * groups of dims: NCHW <-> NHWC, the last two dims), in tiles through shared memory. */
int pk_transpose(pk_stage *S, int esize, const void *x, void *y, int64_t B, int64_t R, int64_t C);
/* Contiguous copy (D2D) and copies of `rows` rows of `width` bytes with pitches (Concat, Split). */
int pk_memcpy(pk_stage *S, void *y, const void *x, size_t bytes);
int pk_memcpy2d(pk_stage *S, void *y, size_t ypitch, const void *x, size_t xpitch, size_t width, size_t rows);
int pk_fill(pk_stage *S, void *y, int esize, uint64_t value, int64_t n);
/* y[o, j, i] = x[o, idx[j], i]; idx int64 (idx64) or int32, negative from the end. */
int pk_gather(pk_stage *S, int esize, int axis, const void *x, const void *idx, int idx64, void *y, int64_t outer,
              int64_t a, int64_t ni, int64_t inner);
int pk_pool(pk_stage *S, const pk_pool_p *p, const void *x, void *y, int64_t *yi);
int pk_softmax(pk_stage *S, int kind, const float *x, float *y, int64_t outer, int64_t a, int64_t inner);
/* Attention (opsets 23 to 25), fused: one warp per query row, the keys 32 at a time
 * (one per lane: its score, scaled, softcapped, masked), an online softmax and the
 * output accumulated in registers (v_head_size at most PK_ATTN_DV, pipecc_cuda_limits.h); no score matrix is
 * held. Geometry: Q [B, Hq, Sq, D] or [B, Sq, Hq*D] (element strides q[] of batch, head,
 * position; likewise k[], v[] of the new keys and values and y[] of Y), the past
 * [B, Hkv, Sp, D]; mask element b * mB + h * mH + i * mS + j * mT for keys j < Tm (later
 * keys masked), bool (mask_bool) or float; lw, rw: the windows (-1: none); nonpad (may
 * be NULL): nonpad_kv_seqlen. present_k/v (may be NULL): the past and new keys/values
 * as [B, Hkv, T, D]. */
typedef struct pk_attn_p {
  int64_t B, Hq, Hkv, Sq, Skv, Sp, D, Dv;
  int64_t q[3], k[3], v[3], y[3];
  int64_t mB, mH, mS, mT, Tm, lw, rw;
  float scale, cap;
  int causal, mask_bool;
} pk_attn_p;
int pk_attention(pk_stage *S, const pk_attn_p *p, const float *q, const float *k, const float *v, const void *mask,
                 const float *past_k, const float *past_v, const int64_t *nonpad, float *y, float *present_k,
                 float *present_v);
/* Layer normalisation of rows of `inner` elements; scale/bias indexed by i % ns (ns
 * = inner or 1) or, for instance norm (per_row), by row % ns. mean/inv may be NULL. */
int pk_layernorm(pk_stage *S, const float *x, const float *scale, int64_t ns, const float *bias, int64_t nb, float *y,
                 float *mean, float *inv, int64_t outer, int64_t inner, double eps, int per_row);
/* Inference batch norm (running statistics), onnxruntime's formula. */
int pk_batchnorm(pk_stage *S, const float *x, const float *scale, const float *bias, const float *mean,
                 const float *var, float *y, int64_t n, int64_t c, int64_t spatial, double eps);
/* Training-mode batch norm: statistics of this micro-batch; running mean/var out (may be NULL). */
int pk_batchnorm_train(pk_stage *S, const float *x, const float *scale, const float *bias, const float *mean,
                       const float *var, float *y, float *rmean, float *rvar, int64_t n, int64_t c, int64_t spatial,
                       double eps, double momentum);
int pk_reduce(pk_stage *S, const pk_reduce_p *p, const void *x, void *y);

/* Element types below are PK_* codes; esize is the element size in bytes (1, 2, 4, 8)
 * where only bits are moved. Integer codes cover int32/int64 (and more where noted). */
int pk_gather_elements(pk_stage *S, const pk_gather_el_p *p, const void *x, const void *idx, void *y);
int pk_gather_nd(pk_stage *S, const pk_gather_nd_p *p, const void *x, const void *idx, void *y);
/* dtype: PK_F32, PK_F64, PK_I32, PK_I64 for every reduction; any esize for NONE.
 * scratch: p->sort_n * 8 bytes. */
int pk_scatter(pk_stage *S, const pk_scatter_p *p, const void *x, const void *idx, const void *upd, void *y,
               void *scratch);
/* The gradient of MaxPool through its Indices (autodiff's ScatterElements(x, idx, dy,
 * reduction add) on flat indices): y[e] = x[e] + the dy of every window of pool p (in
 * output order, as the cpu target adds them) whose idx names e. Each element visits
 * only the windows that contain it: no sort, no atomics. dtype PK_F32 or PK_F64. */
int pk_maxpool_scatter(pk_stage *S, int dtype, const pk_pool_p *p, const void *x, const int64_t *idx, const void *dy,
                       void *y);
/* Cumulative sum along a of [outer, a, inner], in order (reverse: from the end;
 * exclusive: without the element itself). dtype PK_F32, PK_F64, PK_I32, PK_I64. */
int pk_cumsum(pk_stage *S, int dtype, const void *x, void *y, int64_t outer, int64_t a, int64_t inner, int exclusive,
              int reverse);
/* Cumulative product, as pk_cumsum. */
int pk_cumprod(pk_stage *S, int dtype, const void *x, void *y, int64_t outer, int64_t a, int64_t inner, int exclusive,
               int reverse);
/* ArgMax (is_min 0) / ArgMin of [outer, a, inner] along a into int64 y[outer, inner];
 * ties: the first index, or the last with select_last. dtype PK_F32, PK_F64, PK_I32, PK_I64. */
int pk_argmax(pk_stage *S, int dtype, const void *x, int64_t *y, int64_t outer, int64_t a, int64_t inner, int is_min,
              int select_last);
/* TopK along a of [outer, a, inner]: the k largest (or smallest) in order, ties by the
 * lower index; values into y and int64 indices into yi (either may be NULL). One warp
 * per row. dtype PK_F32, PK_F64, PK_I32, PK_I64. */
int pk_topk(pk_stage *S, int dtype, const void *x, void *y, int64_t *yi, int64_t outer, int64_t a, int64_t inner,
            int64_t k, int largest);
/* Trilu on b matrices rows x cols: keep x where col - row >= k (upper) or <= k (lower), else 0. */
int pk_trilu(pk_stage *S, int esize, const void *x, void *y, int64_t b, int64_t rows, int64_t cols, int64_t k,
             int upper);
/* OneHot: idx [outer, inner] (type idx_dtype: integer or float, truncated; negative
 * from the end), values[2] = {off, on} of esize bytes, y [outer, depth, inner]. */
int pk_onehot(pk_stage *S, int idx_dtype, int esize, const void *idx, const void *values, void *y, int64_t outer,
              int64_t depth, int64_t inner);
/* Range: y[i] = start[0] + i * delta[0] (device scalars), rounded as the cpu target
 * (the product, then the sum). dtype PK_F32, PK_F64, PK_I16, PK_I32, PK_I64. */
int pk_range(pk_stage *S, int dtype, const void *start, const void *delta, void *y, int64_t n);
int pk_resize(pk_stage *S, const pk_resize_p *p, const void *x, void *y);
/* LRN across channels of [n, c, spatial]: y = x / (bias + alpha_n * sum of squares over
 * channels [ch - lo, ch + hi])^beta, accumulated in double; alpha_n = alpha / size.
 * dtype PK_F32 or PK_F64. */
int pk_lrn(pk_stage *S, int dtype, const void *x, void *y, int64_t n, int64_t c, int64_t sp, int64_t lo, int64_t hi,
           double bias, double alpha_n, double beta);
#ifdef __cplusplus
}
#endif

/* Generated code (inside run(), where S is the pk_stage *): start unit u (error
 * messages name it; profiling records its event), call an op, launch a kernel. */
#define PK_UNIT(u)              \
  do {                          \
    S->unit = (u);              \
    if (S->ev) pk_mark(S, (u)); \
  } while (0)
#define PK_TRY(call)    \
  do {                  \
    if (call) return 1; \
  } while (0)
#define PK_LAUNCH(kern, n, ...)                                       \
  do {                                                                \
    kern<<<pk_grid(n), PK_THREADS, 0, S->stream>>>((n), __VA_ARGS__); \
    if (pk_check_launch(S)) return 1;                                 \
  } while (0)
#endif
