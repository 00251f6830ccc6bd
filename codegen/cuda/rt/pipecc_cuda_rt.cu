/* pipecc_cuda_rt.cu - the device runtime of a pipecc cuda build (see pipecc_cuda.h).
 * Compiled once per build; independent of the model. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <type_traits>

#include "pipecc_cuda.h"
#include "rt_handover.h"

/* ---- errors ------------------------------------------------------------------------ */

/* "pipeline: stage K on cuda:D (NAME): [UNIT: ]WHAT: DETAIL", the unit named while one runs */
extern "C" int pk_fail(pk_stage *S, const char *what, const char *detail) {
  int in_unit = S->unit >= 0 && S->unit < S->info->n_units;
  fprintf(stderr, "pipeline: %s: %s%s%s: %s\n", S->where, in_unit ? S->info->unit_names[S->unit] : "",
          in_unit ? ": " : "", what, detail ? detail : "failed");
  return 1;
}

static int cu_ok(pk_stage *S, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  /* a kernel's fault shows at the next wait on the device, which in async mode may be
   * another stage's */
  int fault = e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorIllegalInstruction ||
              e == cudaErrorMisalignedAddress || e == cudaErrorAssert || e == cudaErrorHardwareStackError;
  if (fault && S->fault_said) return 0; /* said once: the calls after it return the same */
  S->fault_said |= fault;
  if (fault && S->async) {
    char detail[320];
    snprintf(detail, sizeof detail,
             "%s (stages hand over asynchronously, so the fault may be an earlier stage's: "
             "PIPERT_SYNC_SETS=1 names it)",
             cudaGetErrorString(e));
    pk_fail(S, what, detail);
  } else {
    pk_fail(S, what, cudaGetErrorString(e));
  }
  return 0;
}
static int dnn_ok(pk_stage *S, cudnnStatus_t e, const char *what) {
  if (e == CUDNN_STATUS_SUCCESS) return 1;
  pk_fail(S, what, cudnnGetErrorString(e));
  return 0;
}
static int blas_ok(pk_stage *S, cublasStatus_t e, const char *what) {
  if (e == CUBLAS_STATUS_SUCCESS) return 1;
  pk_fail(S, what, cublasGetStatusString(e));
  return 0;
}

/* A copy on the stage's stream, complete when this returns. Not cudaMemcpy: that runs on
 * the legacy default stream, which the stage's non-blocking stream does not wait for, and
 * from pageable host memory it may return before the data has reached the device (the
 * first GPU runs read half-uploaded inputs and labels this way). */
static int dev_wait(pk_stage *S, cudaStream_t s, cudaEvent_t e, const char *what);
static int stream_copy(pk_stage *S, void *dst, const void *src, size_t n, cudaMemcpyKind kind, const char *what) {
  /* a copy into pageable host memory returns only once done, so it would wait for the
   * stream's earlier work without dev_wait's timeout (a hung stage beside NCCL peers
   * would hang this rank): wait for that work first */
  if (kind == cudaMemcpyDeviceToHost && !dev_wait(S, S->stream, NULL, "cudaStreamSynchronize")) return 0;
  return cu_ok(S, cudaMemcpyAsync(dst, src, n, kind, S->stream), what) &&
         dev_wait(S, S->stream, NULL, "cudaStreamSynchronize");
}

extern "C" int pk_check_launch(pk_stage *S) {
  cudaError_t e = cudaGetLastError();
  return cu_ok(S, e, "kernel launch") ? 0 : 1;
}

extern "C" unsigned pk_grid(int64_t n) {
  int64_t b = (n + PK_THREADS - 1) / PK_THREADS;
  if (b < 1) b = 1;
  if (b > 65536) b = 65536;
  return (unsigned)b;
}

#define GRID_LOOP(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---- convolution (cuDNN) ---------------------------------------------------------------- */

/* PIPECC_CONV_TUNE: how many of the heuristic's legacy algorithms are timed per Conv */
#define PK_TUNE_ALGOS 4

/* x, y: the input and output of cuDNN's forward convolution; for a ConvTranspose
 * (transposed) the node's output is x (backward data's dx) and its input y (dy). */
struct pk_conv_s {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnConvolutionFwdAlgo_t algo;
  cudnnConvolutionBwdDataAlgo_t balgo;
  int transposed;
  size_t ws;
  cudnnDataType_t dt;
  /* the graph API's plan (PIPECC_CONV_API=graph; the stage's gplans own it) and the
   * variant pack of the last pointers it ran with */
  cudnnBackendDescriptor_t plan, vp;
  cudnnBackendDescriptor_t gplan; /* the graph API's plan where one finalized (plan: in use) */
  size_t gws;
  const void *vp_x, *vp_w;
  void *vp_y, *vp_ws;
  int misaligned; /* the legacy API ran a call for want of alignment (reported once) */
  int key[40];    /* everything the descriptors hold (conv_algo_fwd's memo key) */
  /* PIPECC_CONV_TUNE: the legacy algorithms the heuristic ranks first that qualify (as
   * conv_algo_fwd's pick), timed on the first call beside the graph API's plan and the
   * call's own kernel; tuned once decided, not_own where cuDNN beat that kernel */
  int n_cand;
  cudnnConvolutionFwdAlgo_t cand[PK_TUNE_ALGOS];
  cudnnMathType_t cand_math[PK_TUNE_ALGOS];
  size_t cand_ws[PK_TUNE_ALGOS];
  int tuned, not_own;
  cudnnMathType_t math; /* the descriptor's math (set for the chosen algorithm) */
};

/* Workspace limit for one convolution's algorithm. */
#define PK_CONV_WS_LIMIT ((size_t)1 << 30)

/* Forward algorithm, once per distinct convolution of the process (stages sharing a
 * process share the choice; ResNet-50's 53 Convs have 23 distinct shapes).
 *   heuristic (the default): cuDNN's heuristic ranking (cudnnGetConvolutionForward-
 *     Algorithm_v7, as PyTorch without benchmark mode); no start-up timing, the same
 *     choice on every run.
 *   PIPECC_CONV_ALGO=search: cudnnFindConvolutionForwardAlgorithm runs every algorithm
 *     once at start-up and ranks them by measured time (for ResNet-50 it did not beat
 *     the heuristic: docs/cuda.md).
 * Either way: the first result that fits the workspace limit and is not ALLOW_CONVERSION
 * (float16 down-conversion). With --no-tf32 the descriptor keeps FMA math, which is what
 * the chosen algorithm then runs with. PIPECC_CONV_TUNE keeps the first PK_TUNE_ALGOS
 * such results as candidates for conv_tune, which times them where they run. */
struct pk_algo_memo {
  int key[40];
  int n; /* the qualifying algorithms in the heuristic's (or the search's) order, the first chosen */
  cudnnConvolutionFwdAlgo_t algo[PK_TUNE_ALGOS];
  cudnnMathType_t math[PK_TUNE_ALGOS];
  struct pk_algo_memo *next;
};
static pthread_mutex_t algo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pk_algo_memo *algo_memo;

static int conv_search(void) {
  const char *v = getenv("PIPECC_CONV_ALGO");
  return v && !strcmp(v, "search");
}

/* PIPECC_CONV_TUNE (off when unset, empty or 0): time each forward float32 Conv's ways on
 * its first call and keep the fastest (conv_tune); "last" keeps the last way instead (a
 * test of the ways' plumbing, not a speed choice). PIPECC_CONV_TUNE_FILE=PATH keeps the
 * decisions in PATH: those found there are applied untimed, new ones appended; with the
 * file and without PIPECC_CONV_TUNE, its decisions are applied and nothing is timed. */
enum { TUNE_OFF, TUNE_FASTEST, TUNE_LAST, TUNE_FILE };
static const char *conv_tune_file(void) {
  const char *f = getenv("PIPECC_CONV_TUNE_FILE");
  return f && *f ? f : NULL;
}
static int conv_tune_mode(void) {
  const char *v = getenv("PIPECC_CONV_TUNE");
  if (!v || !*v || !strcmp(v, "0")) return conv_tune_file() ? TUNE_FILE : TUNE_OFF;
  return strcmp(v, "last") ? TUNE_FASTEST : TUNE_LAST;
}

static int conv_algo_fwd(pk_stage *S, struct pk_conv_s *c, cudnnMathType_t math, const int *key) {
  cudnnHandle_t h = (cudnnHandle_t)S->cudnn;
  int search = conv_search();
  pthread_mutex_lock(&algo_lock);
  struct pk_algo_memo *m = algo_memo;
  while (m && memcmp(m->key, key, sizeof m->key)) m = m->next;
  struct pk_algo_memo local;
  if (!m) {
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnStatus_t st = search ? cudnnFindConvolutionForwardAlgorithm(h, c->x, c->w, c->conv, c->y,
                                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf)
                              : cudnnGetConvolutionForwardAlgorithm_v7(h, c->x, c->w, c->conv, c->y,
                                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf);
    const char *what = search ? "cudnnFindConvolutionForwardAlgorithm" : "cudnnGetConvolutionForwardAlgorithm_v7";
    if (!dnn_ok(S, st, what)) {
      pthread_mutex_unlock(&algo_lock);
      return 1;
    }
    memset(&local, 0, sizeof local);
    for (int i = 0; i < found && local.n < PK_TUNE_ALGOS; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= PK_CONV_WS_LIMIT &&
          perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
        local.algo[local.n] = perf[i].algo;
        local.math[local.n++] = perf[i].mathType;
      }
    if (!local.n) {
      pthread_mutex_unlock(&algo_lock);
      return pk_fail(S, what, "no usable algorithm");
    }
    memcpy(local.key, key, sizeof local.key);
    m = (struct pk_algo_memo *)malloc(sizeof *m);
    if (m) {
      *m = local;
      m->next = algo_memo;
      algo_memo = m;
    } else {
      m = &local;
    }
  }
  /* the candidates: all of them when tuning, else the first */
  c->n_cand = conv_tune_mode() ? m->n : 1;
  for (int i = 0; i < c->n_cand; i++) c->cand[i] = m->algo[i], c->cand_math[i] = m->math[i];
  pthread_mutex_unlock(&algo_lock);
  /* each candidate's workspace (under its math type); the first is the choice until tuned */
  for (int i = c->n_cand - 1; i >= 0; i--) {
    cudnnMathType_t cm = math == CUDNN_DEFAULT_MATH ? c->cand_math[i] : math;
    if (!dnn_ok(S, cudnnSetConvolutionMathType(c->conv, cm), "cudnnSetConvolutionMathType") ||
        !dnn_ok(S, cudnnGetConvolutionForwardWorkspaceSize(h, c->x, c->w, c->conv, c->y, c->cand[i], &c->cand_ws[i]),
                "cudnnGetConvolutionForwardWorkspaceSize"))
      return 1;
    if (c->cand_ws[i] > S->ws_bytes) S->ws_bytes = c->cand_ws[i];
    c->cand_math[i] = cm;
  }
  c->algo = c->cand[0];
  c->math = c->cand_math[0];
  c->ws = c->cand_ws[0];
  return 0;
}

/* Backward data (ConvTranspose): as conv_algo_fwd, deterministic algorithms first
 * (CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 may add in any order). */
static int conv_algo_bwd_data(pk_stage *S, struct pk_conv_s *c, cudnnMathType_t math) {
  cudnnHandle_t h = (cudnnHandle_t)S->cudnn;
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int found = 0;
  if (!dnn_ok(S,
              cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->w, c->y, c->conv, c->x,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7"))
    return 1;
  int pick = -1;
  for (int pass = 0; pass < 2 && pick < 0; pass++)
    for (int i = 0; i < found && pick < 0; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= PK_CONV_WS_LIMIT &&
          perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
          (pass || perf[i].determinism == CUDNN_DETERMINISTIC))
        pick = i;
  if (pick < 0) return pk_fail(S, "cudnnGetConvolutionBackwardDataAlgorithm_v7", "no usable algorithm");
  c->balgo = perf[pick].algo;
  if (math == CUDNN_DEFAULT_MATH &&
      !dnn_ok(S, cudnnSetConvolutionMathType(c->conv, perf[pick].mathType), "cudnnSetConvolutionMathType"))
    return 1;
  if (!dnn_ok(S, cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w, c->y, c->conv, c->x, c->balgo, &c->ws),
              "cudnnGetConvolutionBackwardDataWorkspaceSize"))
    return 1;
  if (c->ws > S->ws_bytes) S->ws_bytes = c->ws;
  return 0;
}

/* ---- convolution through cuDNN's graph (backend) API ----------------------------------- */
/* PIPECC_CONV_API=graph: a forward float32 Conv runs an execution plan of cuDNN's backend
 * API: the one-operation graph x * w -> y, the engine configurations of heuristics mode A
 * in their order, the first whose plan finalizes, whose workspace fits PK_CONV_WS_LIMIT
 * and whose numerical notes allow it (never down-converted inputs or reduced-precision
 * reductions; no tensor cores with --no-tf32). This is the API PyTorch's convolutions go
 * through; its heuristics see engines the legacy API's do not. The tensors are declared
 * 16-byte aligned; a call whose pointers are not, or a Conv for which no plan finalizes,
 * runs the legacy algorithm chosen beside it. Plans are per stage (a plan belongs to a
 * cuDNN handle), one per distinct convolution. */
struct pk_gplan {
  int key[40];
  cudnnBackendDescriptor_t d[6]; /* plan, engine config, heuristics, graph, op, conv */
  cudnnBackendDescriptor_t t[3]; /* x, w, y */
  size_t ws;
  int ok;
  struct pk_gplan *next;
};

#define PK_GALIGN 16
enum { GUID_X = 1, GUID_W = 2, GUID_Y = 3 };

static int conv_graph_wanted(void) {
  const char *v = getenv("PIPECC_CONV_API");
  return v && !strcmp(v, "graph");
}

static void gplan_free(struct pk_gplan *g) {
  for (int i = 0; i < 6; i++)
    if (g->d[i]) cudnnBackendDestroyDescriptor(g->d[i]);
  for (int i = 0; i < 3; i++)
    if (g->t[i]) cudnnBackendDestroyDescriptor(g->t[i]);
  free(g);
}

/* a call that must succeed: else its text in *why and return 1 */
#define GB(call)                          \
  do {                                    \
    if ((call) != CUDNN_STATUS_SUCCESS) { \
      *why = #call;                       \
      return 1;                           \
    }                                     \
  } while (0)

static int gtensor(cudnnBackendDescriptor_t *t, int64_t uid, int n, const int64_t *dims, const int64_t *strides,
                   const char **why) {
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  int64_t al = PK_GALIGN;
  GB(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
  GB(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  GB(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, n, dims));
  GB(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, n, strides));
  GB(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  GB(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al));
  GB(cudnnBackendFinalize(*t));
  return 0;
}

/* Builds g's plan for the convolution (dims and strides of x, w, y; nd spatial dims).
 * 0: g->d[0] is a plan; 1: none (why names the call that failed, or the filter). */
static int gplan_build(pk_stage *S, struct pk_gplan *g, int nd, const int64_t *xd, const int64_t *xs, const int64_t *wd,
                       const int64_t *ws, const int64_t *yd, const int64_t *ys, const int64_t *pad, const int64_t *str,
                       const int64_t *dil, const char **why) {
  cudnnHandle_t h = (cudnnHandle_t)S->cudnn;
  if (gtensor(&g->t[0], GUID_X, nd + 2, xd, xs, why) || gtensor(&g->t[1], GUID_W, nd + 2, wd, ws, why) ||
      gtensor(&g->t[2], GUID_Y, nd + 2, yd, ys, why))
    return 1;
  cudnnBackendDescriptor_t *conv = &g->d[5], *op = &g->d[4], *graph = &g->d[3], *heur = &g->d[2];
  cudnnDataType_t ct = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t n = nd;
  GB(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, conv));
  GB(cudnnBackendSetAttribute(*conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct));
  GB(cudnnBackendSetAttribute(*conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  GB(cudnnBackendSetAttribute(*conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &n));
  GB(cudnnBackendSetAttribute(*conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, n, dil));
  GB(cudnnBackendSetAttribute(*conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, n, str));
  GB(cudnnBackendSetAttribute(*conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, n, pad));
  GB(cudnnBackendSetAttribute(*conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, n, pad));
  GB(cudnnBackendFinalize(*conv));
  float alpha = 1, beta = 0;
  GB(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, op));
  GB(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                              &g->t[0]));
  GB(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                              &g->t[1]));
  GB(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                              &g->t[2]));
  GB(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                              conv));
  GB(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
  GB(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
  GB(cudnnBackendFinalize(*op));
  GB(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph));
  GB(cudnnBackendSetAttribute(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  GB(cudnnBackendSetAttribute(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, op));
  GB(cudnnBackendFinalize(*graph));
  cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
  GB(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, heur));
  GB(cudnnBackendSetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, graph));
  GB(cudnnBackendSetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
  GB(cudnnBackendFinalize(*heur));
  int64_t count = 0;
  GB(cudnnBackendGetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL));
  if (count > 64) count = 64;
  if (count < 1) {
    *why = "heuristics mode A offered no engine configuration";
    return 1;
  }
  cudnnBackendDescriptor_t cfg[64] = {NULL};
  int rc = 1;
  *why = "no engine configuration finalized with an allowed numerical behaviour and workspace";
  for (int64_t i = 0; i < count; i++)
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]) != CUDNN_STATUS_SUCCESS) count = i;
  int64_t got = 0;
  if (cudnnBackendGetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg) !=
      CUDNN_STATUS_SUCCESS)
    got = 0;
  for (int64_t i = 0; i < got && rc; i++) {
    /* the engine's numerical notes */
    cudnnBackendDescriptor_t eng = NULL;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nn = 0, ne = 0;
    int allowed = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) == CUDNN_STATUS_SUCCESS &&
                  cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ne,
                                           &eng) == CUDNN_STATUS_SUCCESS &&
                  cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                           CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes) == CUDNN_STATUS_SUCCESS;
    for (int64_t k = 0; allowed && k < nn; k++)
      allowed = notes[k] != CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS &&
                notes[k] != CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION &&
                (S->tf32 || notes[k] != CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
    if (eng) cudnnBackendDestroyDescriptor(eng);
    if (!allowed) continue;
    cudnnBackendDescriptor_t plan = NULL;
    int64_t wsz = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &cfg[i]) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &ne, &wsz) ==
            CUDNN_STATUS_SUCCESS &&
        wsz >= 0 && (size_t)wsz <= PK_CONV_WS_LIMIT) {
      g->d[0] = plan;
      g->d[1] = cfg[i];
      cfg[i] = NULL;
      g->ws = (size_t)wsz;
      rc = 0;
    } else if (plan) {
      cudnnBackendDestroyDescriptor(plan);
    }
  }
  for (int64_t i = 0; i < count; i++)
    if (cfg[i]) cudnnBackendDestroyDescriptor(cfg[i]);
  return rc;
}
#undef GB

/* c's graph plan (c->plan NULL where there is none); key as conv_algo_fwd's */
static int conv_graph_setup(pk_stage *S, struct pk_conv_s *c, const int *key, int nd, const int *xd, const int *xs,
                            const int *wd, int nhwc, const int *yd, const int *ys, const int *pad, const int *str,
                            const int *dil) {
  struct pk_gplan *g = S->gplans;
  while (g && memcmp(g->key, key, sizeof g->key)) g = g->next;
  if (!g) {
    g = (struct pk_gplan *)calloc(1, sizeof *g);
    if (!g) return pk_fail(S, "convolution", "out of host memory");
    memcpy(g->key, key, sizeof g->key);
    int64_t x64[5], xs64[5], w64[5], ws64[5], y64[5], ys64[5], p64[3], s64[3], d64[3];
    for (int i = 0; i < nd + 2; i++) x64[i] = xd[i], xs64[i] = xs[i], w64[i] = wd[i], y64[i] = yd[i], ys64[i] = ys[i];
    for (int i = 0; i < nd; i++) p64[i] = pad[i], s64[i] = str[i], d64[i] = dil[i];
    /* the filter packed: [k, c/g, taps...] (KCRS) or channels innermost (KRSC) */
    ws64[nd + 1] = 1;
    for (int i = nd; i >= 0; i--) ws64[i] = ws64[i + 1] * w64[i + 1];
    if (nhwc) {
      ws64[1] = 1;
      ws64[nd + 1] = w64[1];
      for (int i = nd; i >= 2; i--) ws64[i] = ws64[i + 1] * w64[i + 1];
      ws64[0] = ws64[2] * w64[2];
    }
    const char *why = NULL;
    g->ok = gplan_build(S, g, nd, x64, xs64, w64, ws64, y64, ys64, p64, s64, d64, &why) == 0;
    if (!g->ok && getenv("PIPECC_CONV_VERBOSE"))
      fprintf(stderr, "pipeline: %s: convolution %d: the graph API's plan: %s; the legacy API runs it\n", S->where,
              (int)(c - S->conv), why ? why : "failed");
    g->next = S->gplans;
    S->gplans = g;
  }
  c->gplan = g->ok ? g->d[0] : NULL;
  c->plan = conv_graph_wanted() ? c->gplan : NULL; /* else only conv_tune's candidate */
  c->gws = g->ws;
  if (c->gplan && c->gws > S->ws_bytes) S->ws_bytes = c->gws;
  return 0;
}

static int conv_graph_exec(pk_stage *S, struct pk_conv_s *c, const void *x, const void *w, void *y) {
  if (!c->vp || c->vp_x != x || c->vp_w != w || c->vp_y != y || c->vp_ws != S->ws) {
    if (c->vp) cudnnBackendDestroyDescriptor(c->vp);
    c->vp = NULL;
    int64_t uid[3] = {GUID_X, GUID_W, GUID_Y};
    void *ptr[3] = {(void *)x, (void *)w, y};
    void *ws = S->ws;
    cudnnBackendDescriptor_t vp = NULL;
    if (!dnn_ok(S, cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp),
                "cudnnBackendCreateDescriptor(variant pack)"))
      return 1;
    if (!dnn_ok(S, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uid),
                "cudnnBackendSetAttribute(variant pack ids)") ||
        !dnn_ok(S, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptr),
                "cudnnBackendSetAttribute(variant pack pointers)") ||
        !dnn_ok(S, cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws),
                "cudnnBackendSetAttribute(variant pack workspace)") ||
        !dnn_ok(S, cudnnBackendFinalize(vp), "cudnnBackendFinalize(variant pack)")) {
      cudnnBackendDestroyDescriptor(vp);
      return 1;
    }
    c->vp = vp, c->vp_x = x, c->vp_w = w, c->vp_y = y, c->vp_ws = S->ws;
  }
  return dnn_ok(S, cudnnBackendExecute((cudnnHandle_t)S->cudnn, c->plan, c->vp), "cudnnBackendExecute") ? 0 : 1;
}

static int conv_setup(pk_stage *S, struct pk_conv_s *c, const pk_conv_p *p) {
  c->dt = p->dtype == PK_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  /* 4-D descriptors for 1-D and 2-D convolutions (a leading 1), 5-D for 3-D */
  int nd = p->sr == 3 ? 3 : 2, off = 3 - nd;
  int xd[5], yd[5], wd[5], xs[5], ys[5], pad[3], str[3], dil[3];
  /* cuDNN's forward direction: x [n, cx, sx] -> y [n, cy, sy], filter [cy, cx/groups, k] */
  int tr = c->transposed = p->transposed;
  int cx = tr ? p->m : p->c, cy = tr ? p->c : p->m;
  const int *sx = tr ? p->out : p->in, *sy = tr ? p->in : p->out;
  xd[0] = p->n, xd[1] = cx, yd[0] = p->n, yd[1] = cy, wd[0] = cy, wd[1] = cx / p->groups;
  for (int i = 0; i < nd; i++) {
    xd[2 + i] = sx[off + i];
    yd[2 + i] = sy[off + i];
    wd[2 + i] = p->k[off + i];
    pad[i] = p->pad[off + i];
    str[i] = p->stride[off + i];
    dil[i] = p->dil[off + i];
  }
  xs[nd + 1] = ys[nd + 1] = 1;
  for (int i = nd; i >= 0; i--) {
    xs[i] = xs[i + 1] * xd[i + 1];
    ys[i] = ys[i + 1] * yd[i + 1];
  }
  int nhwc = p->nhwc && nd == 2 && !tr;
  if (p->nhwc && !nhwc) return pk_fail(S, "convolution", "channels-last is supported for 2-D Conv only");
  if (nhwc) { /* the same dims, channels innermost: cuDNN takes these strides as NHWC */
    xs[1] = ys[1] = 1;
    xs[3] = xd[1], ys[3] = yd[1];
    xs[2] = xs[3] * xd[3], ys[2] = ys[3] * yd[3];
    xs[0] = xs[2] * xd[2], ys[0] = ys[2] * yd[2];
  }
  if (!dnn_ok(S, cudnnCreateTensorDescriptor(&c->x), "cudnnCreateTensorDescriptor") ||
      !dnn_ok(S, cudnnCreateTensorDescriptor(&c->y), "cudnnCreateTensorDescriptor") ||
      !dnn_ok(S, cudnnCreateFilterDescriptor(&c->w), "cudnnCreateFilterDescriptor") ||
      !dnn_ok(S, cudnnCreateConvolutionDescriptor(&c->conv), "cudnnCreateConvolutionDescriptor"))
    return 1;
  if (!dnn_ok(S, cudnnSetTensorNdDescriptor(c->x, c->dt, nd + 2, xd, xs), "cudnnSetTensorNdDescriptor(x)") ||
      !dnn_ok(S, cudnnSetTensorNdDescriptor(c->y, c->dt, nd + 2, yd, ys), "cudnnSetTensorNdDescriptor(y)") ||
      !dnn_ok(S, cudnnSetFilterNdDescriptor(c->w, c->dt, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, nd + 2, wd),
              "cudnnSetFilterNdDescriptor") ||
      !dnn_ok(S, cudnnSetConvolutionNdDescriptor(c->conv, nd, pad, str, dil, CUDNN_CROSS_CORRELATION, c->dt),
              "cudnnSetConvolutionNdDescriptor") ||
      !dnn_ok(S, cudnnSetConvolutionGroupCount(c->conv, p->groups), "cudnnSetConvolutionGroupCount"))
    return 1;
  /* TF32 allowed: default math; exact float32: FMA math only */
  cudnnMathType_t math = (S->tf32 || p->dtype != PK_F32) ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  if (!dnn_ok(S, cudnnSetConvolutionMathType(c->conv, math), "cudnnSetConvolutionMathType")) return 1;
  int outd[5];
  if (!dnn_ok(S, cudnnGetConvolutionNdForwardOutputDim(c->conv, c->x, c->w, nd + 2, outd),
              "cudnnGetConvolutionNdForwardOutputDim"))
    return 1;
  for (int i = 0; i < nd + 2; i++)
    if (outd[i] != yd[i]) return pk_fail(S, "convolution", "cuDNN's output shape differs from the model's");
  /* the memo's key: everything the descriptors hold */
  int key[40] = {nd, (int)c->dt, (int)math, p->groups};
  for (int i = 0; i < nd + 2; i++) key[4 + i] = xd[i], key[9 + i] = yd[i], key[14 + i] = wd[i];
  for (int i = 0; i < nd; i++) key[19 + i] = pad[i], key[22 + i] = str[i], key[25 + i] = dil[i];
  key[28] = nhwc;
  memcpy(c->key, key, sizeof c->key);
  if (tr) return conv_algo_bwd_data(S, c, math);
  if (conv_algo_fwd(S, c, math, key)) return 1;
  if (p->dtype == PK_F32 && (conv_graph_wanted() || conv_tune_mode()))
    return conv_graph_setup(S, c, key, nd, xd, xs, wd, nhwc, yd, ys, pad, str, dil);
  return 0;
}

/* cuDNN's forward convolution c: through the graph API's plan when c->plan (and the
 * pointers are aligned as declared), else the legacy algorithm c->algo */
static int conv_exec(pk_stage *S, struct pk_conv_s *c, const void *x, const void *w, void *y) {
  float onef = 1, zerof = 0;
  double one = 1, zero = 0;
  const void *al = c->dt == CUDNN_DATA_DOUBLE ? (const void *)&one : (const void *)&onef;
  const void *be = c->dt == CUDNN_DATA_DOUBLE ? (const void *)&zero : (const void *)&zerof;
  if (c->plan) {
    if (!(((uintptr_t)x | (uintptr_t)w | (uintptr_t)y | (uintptr_t)S->ws) % PK_GALIGN))
      return conv_graph_exec(S, c, x, w, y);
    if (!c->misaligned && getenv("PIPECC_CONV_VERBOSE"))
      fprintf(stderr, "pipeline: %s: convolution %d: a pointer not %d-byte aligned: the legacy API runs it\n", S->where,
              (int)(c - S->conv), PK_GALIGN);
    c->misaligned = 1;
  }
  return dnn_ok(S,
                cudnnConvolutionForward((cudnnHandle_t)S->cudnn, al, c->x, x, c->w, w, c->conv, c->algo, S->ws, c->ws,
                                        be, c->y, y),
                "cudnnConvolutionForward")
             ? 0
             : 1;
}

/* ---- PIPECC_CONV_TUNE: the fastest way of each Conv, timed where it runs ---------------- */
/* On a Conv's first call (the part's warm-up run, outside any graph capture) its ways run
 * on its own operands and stream and are timed with events: the call's own kernel
 * (pk_conv_direct's, pk_conv_1x1's GEMM) where it applies, then cuDNN's convolution
 * through each candidate legacy algorithm and through the graph API's plan, each followed
 * by what the call does after cuDNN (the epilogue pass). A way runs once to warm up, then
 * 3 x 3 times; its time is the least mean of 3. The fastest is kept for every later call
 * (and so captured in the part's graph), and runs once more last, so the output is its
 * own. A decision is shared by the Convs of the process with the same descriptors and
 * call (stages sharing a process, replicas, repeated blocks): they are not timed again.
 * Timing differs run to run, so tuned runs may choose otherwise and differ in the last
 * bits (as PyTorch with cudnn.benchmark); the default runs no timing. PIPECC_CONV_VERBOSE
 * prints each timed Conv's ways and times. */
enum { WAY_OWN = -1, WAY_GRAPH = PK_TUNE_ALGOS };

/* A decision on device dev: a Conv's ('c': its descriptors, call kind and flags; a = 0
 * its own kernel, 1 the graph API, 2 the legacy algorithm b with math type c) or a GEMM
 * plan's ('g': its shape, alignments, epilogue and compute type; a = the algorithm's
 * index among the b the heuristic offered). The memo of the process, loaded from
 * PIPECC_CONV_TUNE_FILE once, where new decisions are appended as lines
 * "c|g DEV N KEY... A B C" ('#' lines are comments). */
#define PK_TUNE_KEY 48
struct pk_tune_memo {
  char type;
  char dev[64];
  int nkey;
  long long key[PK_TUNE_KEY];
  int a, b, c;
  struct pk_tune_memo *next;
};
static pthread_mutex_t tune_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pk_tune_memo *tune_memo;
static int tune_loaded;

static struct pk_tune_memo *tune_find(char type, const char *dev, const long long *key, int nkey) {
  for (struct pk_tune_memo *m = tune_memo; m; m = m->next)
    if (m->type == type && m->nkey == nkey && !strcmp(m->dev, dev) && !memcmp(m->key, key, sizeof *key * (size_t)nkey))
      return m;
  return NULL;
}

static struct pk_tune_memo *tune_push(char type, const char *dev, const long long *key, int nkey, int a, int b, int c) {
  struct pk_tune_memo *m = (struct pk_tune_memo *)calloc(1, sizeof *m);
  if (!m) return NULL;
  m->type = type;
  snprintf(m->dev, sizeof m->dev, "%.63s", dev);
  m->nkey = nkey;
  memcpy(m->key, key, sizeof *key * (size_t)nkey);
  m->a = a, m->b = b, m->c = c;
  m->next = tune_memo;
  tune_memo = m;
  return m;
}

/* Under tune_lock: the file's decisions into the memo, once. A line that does not parse
 * is reported (file and line) and the rest of the file ignored. */
static void tune_load(void) {
  const char *path = conv_tune_file();
  if (tune_loaded || !path) return;
  tune_loaded = 1;
  FILE *f = fopen(path, "r");
  if (!f) return; /* not written yet */
  char line[2048];
  for (int no = 1; fgets(line, sizeof line, f); no++) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char type = 0, dev[64];
    int nkey = 0, at = 0, used = 0;
    long long key[PK_TUNE_KEY];
    int a, b, c,
        ok = sscanf(line, " %c %63s %d%n", &type, dev, &nkey, &at) == 3 && (type == 'c' || type == 'g') && nkey > 0 &&
             nkey <= PK_TUNE_KEY;
    for (int i = 0; ok && i < nkey; i++, at += used) ok = sscanf(line + at, " %lld%n", &key[i], &used) == 1;
    ok = ok && sscanf(line + at, " %d %d %d", &a, &b, &c) == 3;
    if (!ok) {
      fprintf(stderr,
              "pipeline: %s:%d: not a tuning decision (PIPECC_CONV_TUNE_FILE); the rest of the file is ignored\n", path,
              no);
      break;
    }
    if (!tune_find(type, dev, key, nkey)) tune_push(type, dev, key, nkey, a, b, c);
  }
  fclose(f);
}

/* Under tune_lock: a new decision into the memo and appended to the file (if any). */
static void tune_keep(char type, const char *dev, const long long *key, int nkey, int a, int b, int c) {
  tune_push(type, dev, key, nkey, a, b, c);
  const char *path = conv_tune_file();
  if (!path) return;
  char line[2048];
  int at = snprintf(line, sizeof line, "%c %s %d", type, dev, nkey);
  for (int i = 0; i < nkey && at < (int)sizeof line; i++)
    at += snprintf(line + at, sizeof line - (size_t)at, " %lld", key[i]);
  if (at < (int)sizeof line) snprintf(line + at, sizeof line - (size_t)at, " %d %d %d\n", a, b, c);
  FILE *f = fopen(path, "a");
  int bad = !f;
  if (f) {
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) == 0) /* a new file: what its lines are */
      bad |= fputs(
                 "# pipecc: Conv ways kept by PIPECC_CONV_TUNE: 'c DEVICE 43 descriptors.. call way algorithm "
                 "math' (way 0 own kernel, 1 graph API, 2 legacy algorithm), 'g DEVICE 20 GEMM shape.. algorithm "
                 "count 0'\n",
                 f) < 0;
    bad |= fputs(line, f) < 0;
    bad |= fclose(f) != 0;
  }
  static int said;
  if (bad && !said) fprintf(stderr, "pipeline: %s: cannot write the tuning decisions (PIPECC_CONV_TUNE_FILE)\n", path);
  said |= bad;
}

static const char *algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "implicit GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "implicit precomp GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "direct";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT tiling";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "Winograd";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "Winograd nonfused";
    default: return "algorithm";
  }
}

static const char *way_name(const struct pk_conv_s *c, int way, int kind, char *buf, size_t n) {
  if (way == WAY_OWN) return kind == 1 ? "direct kernel" : "cuBLASLt GEMM";
  if (way == WAY_GRAPH) return "cuDNN graph API";
  snprintf(buf, n, "cuDNN %s%s", algo_name(c->cand[way]),
           c->cand_math[way] == CUDNN_TENSOR_OP_MATH ? " (tensor cores)" : "");
  return buf;
}

/* c's way (WAY_OWN, candidate i, WAY_GRAPH) for its later calls */
static int conv_set_way(pk_stage *S, struct pk_conv_s *c, int way) {
  c->not_own = way != WAY_OWN;
  c->plan = way == WAY_GRAPH ? c->gplan : NULL;
  int i = way >= 0 && way < c->n_cand ? way : 0;
  c->algo = c->cand[i];
  c->ws = c->cand_ws[i];
  if (c->math != c->cand_math[i]) {
    if (!dnn_ok(S, cudnnSetConvolutionMathType(c->conv, c->cand_math[i]), "cudnnSetConvolutionMathType")) return 1;
    c->math = c->cand_math[i];
  }
  return 0;
}

/* Times n ways: set(k) makes way k current (non-zero on failure), run() runs it. Each runs
 * once to warm up, then 3 x 3 times between events; its time (ms[k]) is the least mean
 * of 3. *best: the fastest, or with "last" the last. Non-zero on failure. */
template <typename Set, typename Run>
static int tune_ways(pk_stage *S, int n, int mode, const Set &set, const Run &run, float *ms, int *best) {
  cudaEvent_t e[2] = {NULL, NULL};
  int rc = !cu_ok(S, cudaEventCreate(&e[0]), "cudaEventCreate(tune)") ||
           !cu_ok(S, cudaEventCreate(&e[1]), "cudaEventCreate(tune)");
  *best = 0;
  for (int k = 0; k < n && !rc; k++) {
    rc = set(k) || run();
    ms[k] = 3.4e38f;
    for (int t = 0; t < 3 && !rc; t++) {
      float el = 0;
      rc = !cu_ok(S, cudaEventRecord(e[0], S->stream), "cudaEventRecord(tune)");
      for (int r = 0; r < 3 && !rc; r++) rc = run();
      rc = rc || !cu_ok(S, cudaEventRecord(e[1], S->stream), "cudaEventRecord(tune)") ||
           !dev_wait(S, NULL, e[1], "cudaEventSynchronize(tune)") ||
           !cu_ok(S, cudaEventElapsedTime(&el, e[0], e[1]), "cudaEventElapsedTime(tune)");
      if (!rc && el / 3 < ms[k]) ms[k] = el / 3;
    }
    if (!rc && (mode == TUNE_LAST ? k == n - 1 : ms[k] < ms[*best])) *best = k;
  }
  for (int i = 0; i < 2; i++)
    if (e[i]) cudaEventDestroy(e[i]);
  return rc;
}

/* whether S's stream is capturing a graph (then nothing is timed: the untimed way) */
static int tune_capturing(pk_stage *S) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(S->stream, &cs) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return cs != cudaStreamCaptureStatusNone;
}

/* Decides conv idx's way on its first call where PIPECC_CONV_TUNE asks (see above): own
 * runs the call's own kernel (NULL: it has none here), rest what follows cuDNN's
 * convolution. kind and flags tell calls apart in the memo. On return the output holds the
 * chosen way's result when ran is set; else nothing ran (not tuned: the caller runs its
 * way). */
template <typename Own, typename Rest>
static int conv_tune(pk_stage *S, int idx, int kind, int flags, const Own *own, const Rest &rest, const void *x,
                     const void *w, void *y, int *ran) {
  struct pk_conv_s *c = &S->conv[idx];
  *ran = 0;
  if (c->tuned) return 0;
  c->tuned = 1;
  int mode = conv_tune_mode();
  if (!mode || c->transposed || c->dt != CUDNN_DATA_FLOAT || tune_capturing(S)) return 0;
  long long key[43];
  for (int i = 0; i < 40; i++) key[i] = c->key[i];
  key[40] = kind, key[41] = flags, key[42] = own != NULL;
  const char *dev = S->dev_word;
  /* held while timing: one decision per key, and no two stages of the process timing at
   * once (a stage's stream waits only for work already queued, so none waits on this) */
  pthread_mutex_lock(&tune_lock);
  tune_load();
  struct pk_tune_memo *m = tune_find('c', dev, key, 43);
  int way = -2;
  if (m && m->a == 0 && own) way = WAY_OWN;
  if (m && m->a == 1) way = c->gplan ? WAY_GRAPH : 0;
  for (int i = 0; m && m->a == 2 && i < c->n_cand; i++)
    if ((int)c->cand[i] == m->b && (int)c->cand_math[i] == m->c) way = i;
  if (way != -2 || mode == TUNE_FILE) { /* decided before (or nothing to time: the untimed way) */
    pthread_mutex_unlock(&tune_lock);
    return way == -2 ? 0 : conv_set_way(S, c, way);
  }
  /* the ways, in order: own, the candidates, the graph plan (aligned pointers only) */
  int ways[PK_TUNE_ALGOS + 2], n = 0;
  if (own) ways[n++] = WAY_OWN;
  for (int i = 0; i < c->n_cand; i++) ways[n++] = i;
  if (c->gplan && !(((uintptr_t)x | (uintptr_t)w | (uintptr_t)y | (uintptr_t)S->ws) % PK_GALIGN)) ways[n++] = WAY_GRAPH;
  float ms[PK_TUNE_ALGOS + 2] = {0};
  int best = 0;
  auto set = [&](int k) { return conv_set_way(S, c, ways[k]); };
  auto run = [&]() { return c->not_own ? (conv_exec(S, c, x, w, y) || rest()) : (*own)(); };
  if (tune_ways(S, n, mode, set, run, ms, &best)) {
    pthread_mutex_unlock(&tune_lock);
    return 1;
  }
  if (getenv("PIPECC_CONV_VERBOSE")) {
    char line[1024];
    int at = snprintf(line, sizeof line, "pipeline: %s: convolution %d%s%s: ", S->where, idx,
                      S->unit >= 0 && S->unit < S->info->n_units ? " in " : "",
                      S->unit >= 0 && S->unit < S->info->n_units ? S->info->unit_names[S->unit] : "");
    char name[64];
    for (int k = 0; k < n && at < (int)sizeof line; k++)
      at += snprintf(line + at, sizeof line - (size_t)at, "%s%s %.4f ms", k ? ", " : "",
                     way_name(c, ways[k], kind, name, sizeof name), ms[k]);
    if (at < (int)sizeof line)
      snprintf(line + at, sizeof line - (size_t)at, "; kept: %s", way_name(c, ways[best], kind, name, sizeof name));
    fprintf(stderr, "%s\n", line);
  }
  int kb = ways[best];
  if (kb == WAY_OWN) tune_keep('c', dev, key, 43, 0, 0, 0);
  else if (kb == WAY_GRAPH) tune_keep('c', dev, key, 43, 1, 0, 0);
  else tune_keep('c', dev, key, 43, 2, (int)c->cand[kb], (int)c->cand_math[kb]);
  pthread_mutex_unlock(&tune_lock);
  if (conv_set_way(S, c, ways[best])) return 1;
  *ran = 1;
  return run();
}

extern "C" int pk_conv(pk_stage *S, int idx, const void *x, const void *w, void *y) {
  struct pk_conv_s *c = &S->conv[idx];
  if (c->transposed) {
    double one = 1, zero = 0;
    float onef = 1, zerof = 0;
    const void *al = c->dt == CUDNN_DATA_DOUBLE ? (const void *)&one : (const void *)&onef;
    const void *be = c->dt == CUDNN_DATA_DOUBLE ? (const void *)&zero : (const void *)&zerof;
    return dnn_ok(S,
                  cudnnConvolutionBackwardData((cudnnHandle_t)S->cudnn, al, c->w, w, c->y, x, c->conv, c->balgo, S->ws,
                                               c->ws, be, c->x, y),
                  "cudnnConvolutionBackwardData")
               ? 0
               : 1;
  }
  if (!c->tuned) {
    auto none = []() { return 0; };
    int ran = 0;
    if (conv_tune(S, idx, 0, 0, (const decltype(none) *)NULL, none, x, w, y, &ran)) return 1;
    if (ran) return 0;
  }
  return conv_exec(S, c, x, w, y);
}

template <typename T>
__global__ void k_bias(T *y, const T *b, int64_t c, int64_t sp, int64_t total) {
  GRID_LOOP(i, total) y[i] += b[(i / sp) % c];
}

extern "C" int pk_bias(pk_stage *S, int dtype, void *y, const void *b, int64_t n, int64_t c, int64_t sp) {
  int64_t t = n * c * sp;
  if (dtype == PK_F64)
    k_bias<double><<<pk_grid(t), PK_THREADS, 0, S->stream>>>((double *)y, (const double *)b, c, sp, t);
  else k_bias<float><<<pk_grid(t), PK_THREADS, 0, S->stream>>>((float *)y, (const float *)b, c, sp, t);
  return pk_check_launch(S);
}

/* A Conv's fused epilogue (passes/opt/fuse.h): y = act(y + b[channel] + r), one pass instead
 * of a bias kernel, an Add and a Relu/Clip. float32 only (the pass fuses nothing else);
 * the emitter keeps tensors under 2^31 elements, so the index arithmetic is 32-bit.
 * act: bit 0 clamps below at lo, bit 1 above at hi (Relu: bit 0, lo 0). The same
 * operations in the same order as the separate nodes (Conv's bias, Add, then Relu/Clip). */
__global__ void k_conv_epi(float *y, const float *b, const float *r, unsigned c, unsigned sp, unsigned total, int act,
                           float lo, float hi) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    unsigned u = (unsigned)i;
    float v = y[u];
    if (b) v += b[(u / sp) % c];
    if (r) v = v + r[u];
    if (act & 1) v = v < lo ? lo : v;
    if (act & 2) v = v > hi ? hi : v;
    y[u] = v;
  }
}

extern "C" int pk_conv_epi(pk_stage *S, void *y, const void *b, const void *r, int64_t n, int64_t c, int64_t sp,
                           int act, float lo, float hi) {
  int64_t t = n * c * sp;
  if (t <= 0) return 0;
  if (t >= ((int64_t)1 << 31)) return pk_fail(S, "fused Conv epilogue", "2^31 elements or more");
  k_conv_epi<<<pk_grid(t), PK_THREADS, 0, S->stream>>>((float *)y, (const float *)b, (const float *)r, (unsigned)c,
                                                       (unsigned)sp, (unsigned)t, act, lo, hi);
  return pk_check_launch(S);
}

/* ---- direct Conv on few input channels ------------------------------------------------------ */

/* A network's stem (ResNet's 7x7 Conv of stride 2 on 3 channels: 147 products per
 * output) is a GEMM with K = 147 over 32 * 112 * 112 positions that cuDNN runs far from
 * the FP32 limit (3.8 G multiply-adds at batch 32, about 0.11 ms at an H200's FP32 rate;
 * docs/cuda.md has cuDNN's measured time). Here each block
 * computes an 8 x 32 tile of output positions of one image for 32 output channels from
 * shared memory: the input tile with its border (zeros outside the image), each row
 * stored in the phases of the column stride (a tap's 32 columns are then 32 consecutive
 * floats: no bank conflicts), and the 32 channels' weights tap-major (a warp reads one
 * float4 at a time, the same for every lane). Each of the 128 threads keeps 4 positions
 * (rows r, r + 2, r + 4, r + 6 of one column) x 16 channels in registers: a tap costs 4
 * float4 and 4 float loads for 64 FMAs. The epilogue is k_conv_epi's (the bias, the
 * residual, then the clamps, in that order) and the output is written once, a warp's 32
 * columns at a time. float32 products summed in tap order: within float32 rounding of
 * cuDNN's result, not bit for bit. */
struct pk_dc_p {
  int c, h, w, m, oh, ow, kh, kw, sh, sw, ph, pw, mchunks, taps, iht, iwq, act;
  float lo, hi;
};

__global__ void __launch_bounds__(128)
    k_conv_direct(pk_dc_p p, const float *__restrict__ x, const float *__restrict__ wt, const float *__restrict__ b,
                  const float *__restrict__ r, float *__restrict__ y) {
  __shared__ float4 s_w4[PK_DC_TAPS * PK_DC_MB / 4];
  __shared__ float s_x[PK_DC_XT];
  float *s_w = (float *)s_w4;
  const int n = blockIdx.z / p.mchunks, m0 = (blockIdx.z - n * p.mchunks) * PK_DC_MB;
  const int oh0 = blockIdx.y * PK_DC_TH, ow0 = blockIdx.x * PK_DC_TW;
  const int ih0 = oh0 * p.sh - p.ph, iw0 = ow0 * p.sw - p.pw;
  /* weights [m][c][kh][kw] -> s_w[tap][m - m0]: consecutive threads read consecutive taps */
  for (int i = threadIdx.x; i < p.taps * PK_DC_MB; i += blockDim.x) {
    int mm = i / p.taps, t = i - mm * p.taps;
    s_w[t * PK_DC_MB + mm] = m0 + mm < p.m ? wt[(size_t)(m0 + mm) * p.taps + t] : 0.0f;
  }
  /* the input tile: row rr of channel cc at (cc * iht + rr) * sw * iwq, column q at phase
   * q % sw, index q / sw */
  const int iwt = p.iwq * p.sw, plane = p.iht * iwt;
  const float *xn = x + (size_t)n * p.c * p.h * p.w;
  for (int i = threadIdx.x; i < p.c * plane; i += blockDim.x) {
    int cc = i / plane, rem = i - cc * plane, rr = rem / iwt, q = rem - rr * iwt;
    int ih = ih0 + rr, iw = iw0 + q;
    s_x[cc * plane + rr * iwt + (q % p.sw) * p.iwq + q / p.sw] =
        ih >= 0 && ih < p.h && iw >= 0 && iw < p.w ? xn[((size_t)cc * p.h + ih) * p.w + iw] : 0.0f;
  }
  __syncthreads();
  const int mg = threadIdx.x >> 6, col = threadIdx.x & 31, row = (threadIdx.x >> 5) & 1;
  float acc[4][16];
  PK_UNROLL
  for (int q = 0; q < 4; q++) PK_UNROLL
  for (int k = 0; k < 16; k++) acc[q][k] = 0.0f;
  const float4 *wv = s_w4 + mg * 4;
  for (int cc = 0; cc < p.c; cc++)
    for (int i = 0; i < p.kh; i++) {
      const float *xr = s_x + cc * plane + (row * p.sh + i) * iwt + col;
      /* tap j's columns: phase j % sw, index j / sw, kept without a division */
      for (int j = 0, jph = 0, joff = 0; j < p.kw; j++, wv += PK_DC_MB / 4) {
        const float *xj = xr + joff;
        if (++jph == p.sw) jph = 0, joff += 1 - (p.sw - 1) * p.iwq;
        else joff += p.iwq;
        float4 w0 = wv[0], w1 = wv[1], w2 = wv[2], w3 = wv[3];
        float wk[16] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w, w2.x, w2.y, w2.z, w2.w, w3.x, w3.y, w3.z, w3.w};
        PK_UNROLL
        for (int q = 0; q < 4; q++) {
          float v = xj[2 * q * p.sh * iwt]; /* row + 2q */
          PK_UNROLL
          for (int k = 0; k < 16; k++) acc[q][k] = fmaf(v, wk[k], acc[q][k]);
        }
      }
    }
  const int ow = ow0 + col;
  if (ow >= p.ow) return;
  PK_UNROLL
  for (int q = 0; q < 4; q++) {
    int oh = oh0 + row + 2 * q;
    if (oh >= p.oh) break;
    PK_UNROLL
    for (int k = 0; k < 16; k++) {
      int m = m0 + mg * 16 + k;
      if (m >= p.m) break;
      size_t o = (((size_t)n * p.m + m) * p.oh + oh) * p.ow + ow;
      float v = acc[q][k];
      if (b) v += b[m];
      if (r) v = v + r[o];
      if (p.act & 1) v = v < p.lo ? p.lo : v;
      if (p.act & 2) v = v > p.hi ? p.hi : v;
      y[o] = v;
    }
  }
}

/* What follows cuDNN's convolution where it fused nothing: the bias, the residual and the
 * clamps in one pk_conv_epi pass, or the bias alone; y seen as [n, ch, spatial]. */
static int conv_rest(pk_stage *S, const void *b, const void *r, void *y, int64_t n, int64_t ch, int64_t spatial,
                     int act, float lo, float hi) {
  if (act || r) return pk_conv_epi(S, y, b, r, n, ch, spatial, act, lo, hi);
  return b ? pk_bias(S, PK_F32, y, b, n, ch, spatial) : 0;
}

/* cuDNN's convolution idx, then conv_rest: the fallback of pk_conv_direct and
 * pk_conv_1x1 where their own path does not apply. */
static int conv_cudnn_epi(pk_stage *S, int idx, const void *x, const void *w, const void *b, const void *r, void *y,
                          int64_t n, int64_t ch, int64_t spatial, int act, float lo, float hi) {
  if (pk_conv(S, idx, x, w, y)) return 1;
  return conv_rest(S, b, r, y, n, ch, spatial, act, lo, hi);
}

/* A call with its own kernel (own) and cuDNN's way after it: tuned on the first call
 * (conv_tune; kind 1 direct, 2 GEMM), then the way kept. */
template <typename Own>
static int conv_own_or_cudnn(pk_stage *S, int idx, int kind, const Own &own, const void *x, const void *w,
                             const void *b, const void *r, void *y, int64_t n, int64_t ch, int64_t spatial, int act,
                             float lo, float hi) {
  struct pk_conv_s *c = &S->conv[idx];
  auto rest = [&]() { return conv_rest(S, b, r, y, n, ch, spatial, act, lo, hi); };
  if (!c->tuned) {
    int ran = 0, flags = act | (r ? 4 : 0) | (b ? 8 : 0) | (((uintptr_t)b & 15) ? 16 : 0);
    if (conv_tune(S, idx, kind, flags, &own, rest, x, w, y, &ran)) return 1;
    if (ran) return 0;
  }
  if (c->not_own) return conv_exec(S, c, x, w, y) || rest();
  return own();
}

static int conv_direct_off(void) {
  const char *v = getenv("PIPECC_CONV_DIRECT");
  return v && !strcmp(v, "0");
}

extern "C" int pk_conv_direct(pk_stage *S, int idx, const void *x, const void *w, const void *b, const void *r, void *y,
                              int act, float lo, float hi) {
  const pk_conv_p *c = &S->info->conv[idx];
  pk_dc_p p;
  p.c = c->c, p.h = c->in[1], p.w = c->in[2], p.m = c->m, p.oh = c->out[1], p.ow = c->out[2];
  p.kh = c->k[1], p.kw = c->k[2], p.sh = c->stride[1], p.sw = c->stride[2], p.ph = c->pad[1], p.pw = c->pad[2];
  p.mchunks = (c->m + PK_DC_MB - 1) / PK_DC_MB, p.taps = c->c * p.kh * p.kw;
  p.act = act, p.lo = lo, p.hi = hi;
  int ok = c->dtype == PK_F32 && c->sr <= 2 && !c->nhwc && !c->transposed && c->groups == 1 && c->k[0] == 1 &&
           c->dil[1] == 1 && c->dil[2] == 1 && pk_dc_fits(c->n, p.c, p.m, p.kh, p.kw, p.sh, p.sw) && !conv_direct_off();
  if (ok) p.iht = (int)pk_dc_tile_rows(p.kh, p.sh), p.iwq = (int)pk_dc_tile_cols(p.kw, p.sw);
  if (!ok) return conv_cudnn_epi(S, idx, x, w, b, r, y, c->n, c->m, (int64_t)p.oh * p.ow, act, lo, hi);
  auto own = [&]() {
    dim3 grid((unsigned)((p.ow + PK_DC_TW - 1) / PK_DC_TW), (unsigned)((p.oh + PK_DC_TH - 1) / PK_DC_TH),
              (unsigned)(c->n * p.mchunks));
    k_conv_direct<<<grid, 128, 0, S->stream>>>(p, (const float *)x, (const float *)w, (const float *)b,
                                               (const float *)r, (float *)y);
    return pk_check_launch(S);
  };
  return conv_own_or_cudnn(S, idx, 1, own, x, w, b, r, y, c->n, c->m, (int64_t)p.oh * p.ow, act, lo, hi);
}

/* ---- GEMM (cuBLAS) ------------------------------------------------------------------------ */

/* One GEMM shape of a stage through cuBLASLt: the descriptor, the layouts and the
 * algorithm cuBLASLt's heuristic picked, made on its first call and kept. The shape
 * includes the alignment of the operands (al: a, b, c; every batch's start counted),
 * which the algorithm is chosen for: cuBLASLt assumes 256 bytes unless told. */
struct pk_lt_plan {
  int dtype, ta, tb;
  int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
  uint32_t al[3];
  uint32_t epi; /* cublasLtEpilogue_t (pk_conv_1x1); DEFAULT for pk_gemm */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  int usable; /* 0: cuBLASLt offered no algorithm; cuBLAS is used */
  /* PIPECC_CONV_TUNE: the heuristic's first algorithms (algo is the first until timed) */
  cublasLtMatmulAlgo_t algos[PK_TUNE_ALGOS];
  int n_algos, tuned;
  struct pk_lt_plan *next;
};

static void lt_plan_free(struct pk_lt_plan *p) {
  if (p->op) cublasLtMatmulDescDestroy(p->op);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
  free(p);
}

static cublasLtMatrixLayout_t lt_layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                        int64_t batch) {
  cublasLtMatrixLayout_t l = NULL;
  if (batch > 0x7fffffff) return NULL; /* BATCH_COUNT is an int32: cuBLAS reports the size */
  if (cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld) != CUBLAS_STATUS_SUCCESS) return NULL;
  int32_t b = (int32_t)batch;
  if (cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride) !=
          CUBLAS_STATUS_SUCCESS) {
    cublasLtMatrixLayoutDestroy(l);
    return NULL;
  }
  return l;
}

/* The largest power of two up to 256 dividing the address of every batch's operand. */
static uint32_t lt_align(const void *p, int64_t stride, int64_t batch, int64_t esize) {
  uint64_t v = (uint64_t)(uintptr_t)p | (batch > 1 ? (uint64_t)stride * (uint64_t)esize : 0);
  uint32_t a = 256;
  while (a > 1 && (v & (a - 1))) a >>= 1;
  return a;
}

/* The plan for these parameters (made once): row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, so cuBLASLt's A is our B and its B our A. */
static struct pk_lt_plan *lt_plan(pk_stage *S, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                                  int64_t sa, int64_t ldb, int64_t sb, int64_t ldc, int64_t sc, int64_t batch,
                                  const uint32_t al[3], uint32_t epi) {
  for (struct pk_lt_plan *p = S->lt_plans; p; p = p->next)
    if (p->dtype == dtype && p->ta == ta && p->tb == tb && p->m == m && p->n == n && p->k == k && p->lda == lda &&
        p->ldb == ldb && p->ldc == ldc && p->sa == sa && p->sb == sb && p->sc == sc && p->batch == batch &&
        p->al[0] == al[0] && p->al[1] == al[1] && p->al[2] == al[2] && p->epi == epi)
      return p;
  struct pk_lt_plan *p = (struct pk_lt_plan *)calloc(1, sizeof *p);
  if (!p) return NULL;
  *p = (struct pk_lt_plan){dtype, ta, tb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch, {al[0], al[1], al[2]}, epi};
  int f64 = dtype == PK_F64;
  cudaDataType t = f64 ? CUDA_R_64F : CUDA_R_32F;
  cublasComputeType_t ct = f64 ? CUBLAS_COMPUTE_64F : S->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res[PK_TUNE_ALGOS];
  int found = 0, want = conv_tune_mode() ? PK_TUNE_ALGOS : 1;
  if (cublasLtMatmulDescCreate(&p->op, ct, t) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) == CUBLAS_STATUS_SUCCESS &&
      (epi == CUBLASLT_EPILOGUE_DEFAULT || cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                                          sizeof epi) == CUBLAS_STATUS_SUCCESS) &&
      (p->la = lt_layout(t, tb ? k : n, tb ? n : k, ldb, sb, batch)) &&
      (p->lb = lt_layout(t, ta ? m : k, ta ? k : m, lda, sa, batch)) && (p->lc = lt_layout(t, n, m, ldc, sc, batch)) &&
      cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
    uint64_t ws = S->ws_bytes;
    /* cuBLASLt's A is our b, its B our a; C and D are c */
    uint32_t need[4] = {al[1], al[0], al[2], al[2]};
    int pref_ok = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                       sizeof ws) == CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 4; i++)
      pref_ok =
          pref_ok && cublasLtMatmulPreferenceSetAttribute(
                         pref, (cublasLtMatmulPreferenceAttributes_t)(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i),
                         &need[i], sizeof need[i]) == CUBLAS_STATUS_SUCCESS;
    if (!pref_ok || cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)S->lt, p->op, p->la, p->lb, p->lc, p->lc, pref,
                                                   want, res, &found) != CUBLAS_STATUS_SUCCESS)
      found = 0;
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; i < found && i < PK_TUNE_ALGOS; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS) p->algos[p->n_algos++] = res[i].algo;
  if (p->n_algos > 0) {
    p->algo = p->algos[0];
    p->usable = 1;
  }
  p->next = S->lt_plans;
  S->lt_plans = p;
  return p;
}

extern "C" int pk_gemm(pk_stage *S, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                       const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, double beta,
                       void *c, int64_t ldc, int64_t sc, int64_t batch) {
  float af = (float)alpha, bf = (float)beta;
  const void *pa = dtype == PK_F64 ? (const void *)&alpha : (const void *)&af;
  const void *pb = dtype == PK_F64 ? (const void *)&beta : (const void *)&bf;
  int64_t es = dtype == PK_F64 ? 8 : 4;
  uint32_t al[3] = {lt_align(a, sa, batch, es), lt_align(b, sb, batch, es), lt_align(c, sc, batch, es)};
  struct pk_lt_plan *p =
      S->lt ? lt_plan(S, dtype, ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch, al, CUBLASLT_EPILOGUE_DEFAULT)
            : NULL;
  if (p && p->usable)
    return blas_ok(S,
                   cublasLtMatmul((cublasLtHandle_t)S->lt, p->op, pa, b, p->la, a, p->lb, pb, c, p->lc, c, p->lc,
                                  &p->algo, S->ws, S->ws_bytes, S->stream),
                   "cublasLtMatmul")
               ? 0
               : 1;
  /* no cuBLASLt algorithm for this shape: cuBLAS (column-major, operands swapped) */
  cublasHandle_t h = (cublasHandle_t)S->cublas;
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff || batch > 0x7fffffff)
    return pk_fail(S, "cublasGemmStridedBatchedEx", "dimension too large");
  cudaDataType t = dtype == PK_F64 ? CUDA_R_64F : CUDA_R_32F;
  cublasComputeType_t ct = dtype == PK_F64 ? CUBLAS_COMPUTE_64F
                           : S->tf32       ? CUBLAS_COMPUTE_32F_FAST_TF32
                                           : CUBLAS_COMPUTE_32F;
  return blas_ok(S,
                 cublasGemmStridedBatchedEx(h, ob, oa, (int)n, (int)m, (int)k, pa, b, t, (int)ldb, sb, a, t, (int)lda,
                                            sa, pb, c, t, (int)ldc, sc, (int)batch, ct, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx")
             ? 0
             : 1;
}

/* ---- 1x1 Convs as GEMMs ------------------------------------------------------------------ */

/* A channels-last 1x1 Conv of stride 1 is the GEMM Y[P, M] = X[P, C] W[M, C]^T (P = N H W
 * positions, W the KRSC filter): cuBLASLt's Hopper GEMM kernels beat cuDNN's convolution
 * kernels there (ResNet-50 at batch 32 on an H100: torch.compile runs these Convs as
 * matmuls), and its epilogue takes the fused chain (passes/opt/fuse.h) in the same kernel:
 * D = relu(W X + beta R + bias) with the residual R as the C operand (beta 1), so the
 * output is written once instead of written, read back and rewritten by k_conv_epi.
 * Relu is cuBLASLt's max(v, 0); a Clip's bounds, and a bias not 16-byte aligned, take a
 * pk_conv_epi pass after the GEMM. Where cuBLASLt offers no algorithm for the shape and
 * epilogue, or PIPECC_CONV_GEMM=0, cuDNN's convolution idx and the epilogue pass run, as
 * for any other Conv. Sums in another order than cuDNN's: results agree within TF32 or
 * float32 rounding, not bit for bit. */
static int conv_gemm_off(void) {
  const char *v = getenv("PIPECC_CONV_GEMM");
  return v && !strcmp(v, "0");
}

/* PIPECC_CONV_TUNE: the GEMM plan p's algorithms (cuBLASLt's heuristic offers up to
 * PK_TUNE_ALGOS) timed as conv_tune times a Conv's ways, by the call run (its epilogue
 * pass included); the fastest (or with "last" the last) kept in p->algo. Once per plan,
 * before conv_tune weighs the GEMM against cuDNN. */
template <typename Run>
static int lt_tune(pk_stage *S, int idx, struct pk_lt_plan *p, const Run &run) {
  int mode = conv_tune_mode();
  if (!mode || p->n_algos < 2 || tune_capturing(S)) return 0;
  long long key[20] = {p->dtype, p->ta, p->tb, p->m,     p->n,     p->k,     p->lda,   p->ldb, p->ldc,
                       p->sa,    p->sb, p->sc, p->batch, p->al[0], p->al[1], p->al[2], p->epi, S->tf32};
  const char *dev = S->dev_word;
  pthread_mutex_lock(&tune_lock);
  tune_load();
  struct pk_tune_memo *m = tune_find('g', dev, key, 20);
  int hit = m && m->b == p->n_algos && m->a >= 0 && m->a < p->n_algos;
  if (hit) p->algo = p->algos[m->a];
  if (hit || mode == TUNE_FILE) { /* decided before (or nothing to time: the heuristic's first) */
    pthread_mutex_unlock(&tune_lock);
    return 0;
  }
  float ms[PK_TUNE_ALGOS] = {0};
  int best = 0;
  auto set = [&](int k) {
    p->algo = p->algos[k];
    return 0;
  };
  int rc = tune_ways(S, p->n_algos, mode, set, run, ms, &best);
  if (!rc) tune_keep('g', dev, key, 20, best, p->n_algos, 0);
  pthread_mutex_unlock(&tune_lock);
  p->algo = p->algos[best];
  if (rc) return 1;
  if (getenv("PIPECC_CONV_VERBOSE")) {
    char line[512];
    int at =
        snprintf(line, sizeof line, "pipeline: %s: convolution %d as a GEMM: cuBLASLt's algorithms", S->where, idx);
    for (int k = 0; k < p->n_algos && at < (int)sizeof line; k++)
      at += snprintf(line + at, sizeof line - (size_t)at, " %d %.4f ms%s", k + 1, ms[k], k + 1 < p->n_algos ? "," : "");
    fprintf(stderr, "%s; the GEMM keeps algorithm %d\n", line, best + 1);
  }
  return 0;
}

extern "C" int pk_conv_1x1(pk_stage *S, int idx, const void *x, const void *w, const void *b, const void *r, void *y,
                           int64_t P, int64_t C, int64_t M, int act, float lo, float hi) {
  int relu = act == 1 && lo == 0.0f;
  int bias_in = b && !((uintptr_t)b & 15);
  uint32_t epi = bias_in ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                         : (relu && !b ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  struct pk_lt_plan *p = NULL;
  if (S->lt && !conv_gemm_off() && P > 0 && C > 0 && M > 0) {
    /* C (the residual) and D share a layout: the alignment of both */
    uint32_t ay = lt_align(y, 0, 1, 4), ar = r ? lt_align(r, 0, 1, 4) : ay;
    uint32_t al[3] = {lt_align(x, 0, 1, 4), lt_align(w, 0, 1, 4), ar < ay ? ar : ay};
    p = lt_plan(S, PK_F32, 0, 1, P, M, C, C, 0, C, 0, M, 0, 1, al, epi);
  }
  if (!p || !p->usable) return conv_cudnn_epi(S, idx, x, w, b, r, y, P, M, 1, act, lo, hi);
  auto own = [&]() {
    if (bias_in && !blas_ok(S, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b),
                            "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"))
      return 1;
    float one = 1.0f, beta = r ? 1.0f : 0.0f;
    /* row-major Y = X W^T is column-major Y^T = W X^T: cuBLASLt's A is W, its B is X */
    if (!blas_ok(S,
                 cublasLtMatmul((cublasLtHandle_t)S->lt, p->op, &one, w, p->la, x, p->lb, &beta, r ? r : y, p->lc, y,
                                p->lc, &p->algo, S->ws, S->ws_bytes, S->stream),
                 "cublasLtMatmul"))
      return 1;
    /* what the epilogue did not take: a Clip, or the bias and activation after a misaligned bias */
    const void *rest_b = b && !bias_in ? b : NULL;
    int rest_act = (epi == CUBLASLT_EPILOGUE_RELU || epi == CUBLASLT_EPILOGUE_RELU_BIAS) ? 0 : act;
    return rest_b || rest_act ? pk_conv_epi(S, y, rest_b, NULL, P, M, 1, rest_act, lo, hi) : 0;
  };
  if (!p->tuned) {
    p->tuned = 1;
    if (lt_tune(S, idx, p, own)) return 1;
  }
  return conv_own_or_cudnn(S, idx, 2, own, x, w, b, r, y, P, M, 1, act, lo, hi);
}

/* ---- data movement ---------------------------------------------------------------------------- */

template <typename T>
__global__ void k_copy(pk_copy_p p, const T *__restrict__ x, T *__restrict__ y, int64_t total) {
  GRID_LOOP(i, total) {
    int64_t r = i, off = p.base;
    bool in = true;
    for (int d = p.rank - 1; d >= 0; d--) {
      int64_t o = r % p.ydims[d];
      r /= p.ydims[d];
      int64_t j = o - p.pb[d], D = p.xd[d];
      if (p.mode != PK_PAD_NONE && (j < 0 || j >= D)) {
        switch (p.mode) {
          case PK_PAD_CONST: in = false; break;
          case PK_PAD_EDGE: j = j < 0 ? 0 : D - 1; break;
          case PK_PAD_REFLECT:
            if (D == 1) j = 0;
            else
              while (j < 0 || j >= D) j = j < 0 ? -j : 2 * (D - 1) - j;
            break;
          default: j = ((j % D) + D) % D; break;
        }
      }
      off += j * p.xs[d];
    }
    T v;
    if (in) v = x[off];
    else memcpy(&v, &p.value, sizeof(T));
    y[i] = v;
  }
}

extern "C" int pk_copy(pk_stage *S, const pk_copy_p *p, const void *x, void *y) {
  int64_t t = 1;
  for (int d = 0; d < p->rank; d++) t *= p->ydims[d];
  if (t == 0) return 0;
  unsigned g = pk_grid(t);
  switch (p->esize) {
    case 1: k_copy<uint8_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint8_t *)x, (uint8_t *)y, t); break;
    case 2: k_copy<uint16_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint16_t *)x, (uint16_t *)y, t); break;
    case 4: k_copy<uint32_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint32_t *)x, (uint32_t *)y, t); break;
    default: k_copy<uint64_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint64_t *)x, (uint64_t *)y, t); break;
  }
  return pk_check_launch(S);
}

/* x [B, R, C] -> y [B, C, R] in 32 x 32 tiles through shared memory (a column of the
 * tile padded by one element: no bank conflicts), read and written a warp's 32
 * consecutive elements at a time; 256 threads a tile, a block's tiles in a grid-stride
 * loop. k_copy's element-by-element form reads one of these with a stride of R
 * elements (NCHW -> NHWC after a stem: 0.058 ms for 25.7 MB each way on an H200). */
template <typename T>
__global__ void __launch_bounds__(256)
    k_transpose(const T *__restrict__ x, T *__restrict__ y, int64_t B, int64_t R, int64_t C) {
  __shared__ T tile[32][33];
  const int64_t tr = (R + 31) >> 5, tc = (C + 31) >> 5, tiles = B * tr * tc;
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    int64_t b = t / (tr * tc), rem = t - b * tr * tc, r0 = (rem / tc) << 5, c0 = (rem % tc) << 5;
    const T *xb = x + b * R * C;
    T *yb = y + b * R * C;
    for (int k = ty; k < 32; k += 8)
      if (r0 + k < R && c0 + tx < C) tile[k][tx] = xb[(r0 + k) * C + c0 + tx];
    __syncthreads();
    for (int k = ty; k < 32; k += 8)
      if (c0 + k < C && r0 + tx < R) yb[(c0 + k) * R + r0 + tx] = tile[tx][k];
    __syncthreads();
  }
}

extern "C" int pk_transpose(pk_stage *S, int esize, const void *x, void *y, int64_t B, int64_t R, int64_t C) {
  if (B <= 0 || R <= 0 || C <= 0) return 0;
  int64_t tiles = B * ((R + 31) / 32) * ((C + 31) / 32);
  unsigned g = (unsigned)(tiles < 65536 * 8 ? tiles : 65536 * 8);
  switch (esize) {
    case 1: k_transpose<uint8_t><<<g, 256, 0, S->stream>>>((const uint8_t *)x, (uint8_t *)y, B, R, C); break;
    case 2: k_transpose<uint16_t><<<g, 256, 0, S->stream>>>((const uint16_t *)x, (uint16_t *)y, B, R, C); break;
    case 4: k_transpose<uint32_t><<<g, 256, 0, S->stream>>>((const uint32_t *)x, (uint32_t *)y, B, R, C); break;
    case 8: k_transpose<uint64_t><<<g, 256, 0, S->stream>>>((const uint64_t *)x, (uint64_t *)y, B, R, C); break;
    default: return pk_fail(S, "Transpose", "element size not supported");
  }
  return pk_check_launch(S);
}

extern "C" int pk_memcpy(pk_stage *S, void *y, const void *x, size_t bytes) {
  if (!bytes || x == y) return 0;
  return cu_ok(S, cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, S->stream), "cudaMemcpyAsync") ? 0 : 1;
}

extern "C" int pk_memcpy2d(pk_stage *S, void *y, size_t ypitch, const void *x, size_t xpitch, size_t width,
                           size_t rows) {
  if (!width || !rows) return 0;
  return cu_ok(S, cudaMemcpy2DAsync(y, ypitch, x, xpitch, width, rows, cudaMemcpyDeviceToDevice, S->stream),
               "cudaMemcpy2DAsync")
             ? 0
             : 1;
}

template <typename T>
__global__ void k_fill(T *y, T v, int64_t n) {
  GRID_LOOP(i, n) y[i] = v;
}

extern "C" int pk_fill(pk_stage *S, void *y, int esize, uint64_t value, int64_t n) {
  if (n <= 0) return 0;
  unsigned g = pk_grid(n);
  switch (esize) {
    case 1: k_fill<uint8_t><<<g, PK_THREADS, 0, S->stream>>>((uint8_t *)y, (uint8_t)value, n); break;
    case 2: k_fill<uint16_t><<<g, PK_THREADS, 0, S->stream>>>((uint16_t *)y, (uint16_t)value, n); break;
    case 4: k_fill<uint32_t><<<g, PK_THREADS, 0, S->stream>>>((uint32_t *)y, (uint32_t)value, n); break;
    default: k_fill<uint64_t><<<g, PK_THREADS, 0, S->stream>>>((uint64_t *)y, value, n); break;
  }
  return pk_check_launch(S);
}

/* Index k of an axis of n (negative from the end), or 0 after recording k in bad (the
 * first one a thread sees: {1, k, n, unit << 8 | axis}; pk_stage.bad) when it lies
 * outside: the stage then fails with one line naming the unit and the index. */
__device__ __forceinline__ int64_t check_idx(int64_t k, int64_t n, unsigned long long *bad, int unit, int axis) {
  int64_t w = k < 0 ? k + n : k;
  if (w >= 0 && w < n) return w;
  if (bad && !bad[0]) {
    bad[1] = (unsigned long long)k;
    bad[2] = (unsigned long long)n;
    bad[3] = (unsigned long long)unit << 8 | (unsigned)axis;
    bad[0] = 1;
  }
  return 0;
}

template <typename T>
__global__ void k_gather(const T *__restrict__ x, const void *__restrict__ idx, int idx64, T *__restrict__ y, int64_t a,
                         int64_t ni, int64_t inner, int64_t total, unsigned long long *bad, int unit, int axis) {
  GRID_LOOP(t, total) {
    int64_t i = t % inner, r = t / inner, j = r % ni, o = r / ni;
    int64_t k = idx64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
    y[t] = x[(o * a + check_idx(k, a, bad, unit, axis)) * inner + i];
  }
}

extern "C" int pk_gather(pk_stage *S, int esize, int axis, const void *x, const void *idx, int idx64, void *y,
                         int64_t outer, int64_t a, int64_t ni, int64_t inner) {
  int64_t t = outer * ni * inner;
  if (t == 0) return 0;
  unsigned g = pk_grid(t);
  S->bad_used = 1;
  switch (esize) {
    case 1:
      k_gather<uint8_t><<<g, PK_THREADS, 0, S->stream>>>((const uint8_t *)x, idx, idx64, (uint8_t *)y, a, ni, inner, t,
                                                         S->bad, S->unit, axis);
      break;
    case 2:
      k_gather<uint16_t><<<g, PK_THREADS, 0, S->stream>>>((const uint16_t *)x, idx, idx64, (uint16_t *)y, a, ni, inner,
                                                          t, S->bad, S->unit, axis);
      break;
    case 4:
      k_gather<uint32_t><<<g, PK_THREADS, 0, S->stream>>>((const uint32_t *)x, idx, idx64, (uint32_t *)y, a, ni, inner,
                                                          t, S->bad, S->unit, axis);
      break;
    default:
      k_gather<uint64_t><<<g, PK_THREADS, 0, S->stream>>>((const uint64_t *)x, idx, idx64, (uint64_t *)y, a, ni, inner,
                                                          t, S->bad, S->unit, axis);
      break;
  }
  return pk_check_launch(S);
}

/* the range of T in device code (std::numeric_limits' functions are host-only) */
template <typename T>
struct pk_lim;
#define PK_LIM(T, LO, HI)                                   \
  template <>                                               \
  struct pk_lim<T> {                                        \
    static __device__ __forceinline__ T lo() { return LO; } \
    static __device__ __forceinline__ T hi() { return HI; } \
  }
PK_LIM(float, -INFINITY, INFINITY);
PK_LIM(double, -INFINITY, INFINITY);
PK_LIM(int64_t, INT64_MIN, INT64_MAX);
PK_LIM(int32_t, INT32_MIN, INT32_MAX);
PK_LIM(int16_t, INT16_MIN, INT16_MAX);
PK_LIM(int8_t, INT8_MIN, INT8_MAX);
PK_LIM(uint8_t, 0, UINT8_MAX);
PK_LIM(bool, false, true);
#undef PK_LIM

/* ---- pooling ---------------------------------------------------------------------------------- */

/* T: float; int8 or uint8 for max pooling (exact in float) */
template <typename T>
__global__ void k_pool(pk_pool_p p, const T *__restrict__ x, T *__restrict__ y, int64_t *__restrict__ yi,
                       int64_t total) {
  int64_t IS = p.in[0] * p.in[1] * p.in[2], cs = p.cl ? p.cl : 1; /* cs: x's stride between taps */
  GRID_LOOP(t, total) {
    int64_t ch = p.cl ? t % p.cl : 0, q = p.cl ? t / p.cl : t; /* channels-last: channel innermost */
    int64_t ow = q % p.out[2], r = q / p.out[2], oh = r % p.out[1];
    r /= p.out[1];
    int64_t od = r % p.out[0], nc = r / p.out[0];
    const T *xp = p.cl ? x + nc * IS * p.cl + ch : x + nc * IS;
    int64_t d0 = od * p.s[0] - p.pb[0], h0 = oh * p.s[1] - p.pb[1], w0 = ow * p.s[2] - p.pb[2];
    float m = -INFINITY;
    int64_t mi = 0, cnt = 0, pcnt = 0;
    double s = 0;
    for (int64_t kd = 0; kd < p.k[0]; kd++) {
      int64_t id = d0 + kd * p.d[0];
      for (int64_t kh = 0; kh < p.k[1]; kh++) {
        int64_t ih = h0 + kh * p.d[1];
        for (int64_t kw = 0; kw < p.k[2]; kw++) {
          int64_t iw = w0 + kw * p.d[2];
          pcnt += id >= -p.pb[0] && id < p.in[0] + p.pe[0] && ih >= -p.pb[1] && ih < p.in[1] + p.pe[1] &&
                  iw >= -p.pb[2] && iw < p.in[2] + p.pe[2]; /* on the input or its pads */
          if (id < 0 || id >= p.in[0] || ih < 0 || ih >= p.in[1] || iw < 0 || iw >= p.in[2]) continue;
          int64_t ii = (id * p.in[1] + ih) * p.in[2] + iw;
          float v = (float)xp[ii * cs];
          if (p.kind == PK_POOL_MAX) {
            if (v > m) {
              m = v;
              mi = p.col_major_index ? iw * p.in[1] + ih : ii;
            }
          } else if (p.kind == PK_POOL_LP) {
            double a = fabs((double)v);
            s += p.p == 1 ? a : p.p == 2 ? a * a : pow(a, p.p);
            cnt++;
          } else {
            s += v;
            cnt++;
          }
        }
      }
    }
    if (p.kind == PK_POOL_MAX) {
      /* a window wholly in the padding: the smallest T (-inf for float) */
      y[t] = m == -INFINITY ? pk_lim<T>::lo() : (T)m;
      if (yi) yi[t] = nc * IS + mi;
    } else if (p.kind == PK_POOL_LP) {
      y[t] = (float)(p.p == 1 ? s : p.p == 2 ? sqrt(s) : pow(s, 1.0 / p.p));
    } else {
      /* count_include_pad: the taps on the input or its pads, not those of a ceil_mode
       * window past the end pad (onnxruntime, PyTorch, onnx 1.23's reference) */
      y[t] = (float)(s / (double)(p.count_include_pad ? (pcnt ? pcnt : 1) : (cnt ? cnt : 1)));
    }
  }
}

/* 2-D float max pooling without indices (the MaxPool after an image model's stem): k_pool
 * with 32-bit index arithmetic and no per-kind branches. k_pool's int64 divisions and
 * generic 3-D loop cost it about 3x what the memory traffic needs on ResNet-50's MaxPool
 * (0.31 ms at batch 32 on an H100 against PyTorch's 0.10). The same taps in the same
 * order and the same comparison, so the same results as k_pool. */
struct pk_pool2 {
  unsigned cl, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw;
  int ph, pw;
};

__global__ void k_maxpool2d(pk_pool2 p, const float *__restrict__ x, float *__restrict__ y, unsigned total) {
  unsigned cs = p.cl ? p.cl : 1, is = p.ih * p.iw;
  for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    unsigned ch = p.cl ? t % p.cl : 0, q = p.cl ? t / p.cl : t;
    unsigned ow = q % p.ow;
    q /= p.ow;
    unsigned oh = q % p.oh, nc = q / p.oh;
    const float *xp = x + (size_t)nc * is * cs + ch;
    int h0 = (int)(oh * p.sh) - p.ph, w0 = (int)(ow * p.sw) - p.pw;
    float m = -INFINITY;
    for (unsigned kh = 0; kh < p.kh; kh++) {
      int ih = h0 + (int)(kh * p.dh);
      if (ih < 0 || ih >= (int)p.ih) continue;
      for (unsigned kw = 0; kw < p.kw; kw++) {
        int iw = w0 + (int)(kw * p.dw);
        if (iw < 0 || iw >= (int)p.iw) continue;
        float v = xp[((unsigned)ih * p.iw + (unsigned)iw) * cs];
        if (v > m) m = v;
      }
    }
    y[t] = m;
  }
}

extern "C" int pk_pool(pk_stage *S, const pk_pool_p *p, const void *x, void *y, int64_t *yi) {
  int64_t t = p->nc * p->out[0] * p->out[1] * p->out[2];
  if (t == 0) return 0;
  if (p->cl && (yi || p->nc % p->cl)) return pk_fail(S, "pooling", "channels-last pooling without indices only");
  if (p->dtype != PK_F32 && p->kind != PK_POOL_MAX) return pk_fail(S, "pooling", "only max pooling takes bytes");
  unsigned g = pk_grid(t);
  int64_t xn = p->nc * p->in[0] * p->in[1] * p->in[2];
  if (p->dtype == PK_F32 && p->kind == PK_POOL_MAX && !yi && p->in[0] == 1 && p->out[0] == 1 && p->k[0] == 1 &&
      t < ((int64_t)1 << 31) && xn < ((int64_t)1 << 31) && p->k[1] * p->d[1] < (1 << 20) &&
      p->k[2] * p->d[2] < (1 << 20) && p->out[1] * p->s[1] < (1 << 30) && p->out[2] * p->s[2] < (1 << 30) &&
      p->pb[1] < (1 << 20) && p->pb[2] < (1 << 20)) {
    pk_pool2 q = {(unsigned)p->cl,   (unsigned)p->in[1], (unsigned)p->in[2], (unsigned)p->out[1], (unsigned)p->out[2],
                  (unsigned)p->k[1], (unsigned)p->k[2],  (unsigned)p->s[1],  (unsigned)p->s[2],   (unsigned)p->d[1],
                  (unsigned)p->d[2], (int)p->pb[1],      (int)p->pb[2]};
    k_maxpool2d<<<g, PK_THREADS, 0, S->stream>>>(q, (const float *)x, (float *)y, (unsigned)t);
    return pk_check_launch(S);
  }
  switch (p->dtype) {
    case PK_F32: k_pool<float><<<g, PK_THREADS, 0, S->stream>>>(*p, (const float *)x, (float *)y, yi, t); break;
    case PK_I8: k_pool<int8_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const int8_t *)x, (int8_t *)y, yi, t); break;
    case PK_U8: k_pool<uint8_t><<<g, PK_THREADS, 0, S->stream>>>(*p, (const uint8_t *)x, (uint8_t *)y, yi, t); break;
    default: return pk_fail(S, "pooling", "element type not supported here");
  }
  return pk_check_launch(S);
}

/* ---- softmax ------------------------------------------------------------------------------------ */

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* inner == 1: one warp per row */
__global__ void k_softmax_rows(int kind, const float *__restrict__ x, float *__restrict__ y, int64_t rows, int64_t a) {
  int lane = threadIdx.x & 31;
  int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (; row < rows; row += nw) {
    const float *xp = x + row * a;
    float *yp = y + row * a;
    float m = -INFINITY;
    for (int64_t k = lane; k < a; k += 32) m = fmaxf(m, xp[k]);
    m = warp_max(m);
    if (kind == PK_HARDMAX) {
      /* first index of the maximum */
      int64_t first = a;
      for (int64_t k = lane; k < a; k += 32)
        if (xp[k] == m && k < first) first = k;
      for (int o = 16; o > 0; o >>= 1) {
        int64_t other = __shfl_xor_sync(0xffffffffu, first, o);
        first = other < first ? other : first;
      }
      for (int64_t k = lane; k < a; k += 32) yp[k] = k == first ? 1.0f : 0.0f;
      continue;
    }
    float s = 0;
    for (int64_t k = lane; k < a; k += 32) s += expf(xp[k] - m);
    s = warp_sum(s);
    if (kind == PK_SOFTMAX) {
      float inv = 1.0f / s;
      for (int64_t k = lane; k < a; k += 32) yp[k] = expf(xp[k] - m) * inv;
    } else {
      float ls = logf(s);
      for (int64_t k = lane; k < a; k += 32) yp[k] = xp[k] - m - ls;
    }
  }
}

/* inner > 1: one thread per (outer, inner) column */
__global__ void k_softmax_cols(int kind, const float *__restrict__ x, float *__restrict__ y, int64_t outer, int64_t a,
                               int64_t inner) {
  GRID_LOOP(t, outer * inner) {
    int64_t i = t % inner, o = t / inner;
    const float *xp = x + o * a * inner + i;
    float *yp = y + o * a * inner + i;
    float m = xp[0];
    int64_t mk = 0;
    for (int64_t k = 1; k < a; k++)
      if (xp[k * inner] > m) m = xp[k * inner], mk = k;
    if (kind == PK_HARDMAX) {
      for (int64_t k = 0; k < a; k++) yp[k * inner] = k == mk ? 1.0f : 0.0f;
      continue;
    }
    float s = 0;
    for (int64_t k = 0; k < a; k++) s += expf(xp[k * inner] - m);
    if (kind == PK_SOFTMAX)
      for (int64_t k = 0; k < a; k++) yp[k * inner] = expf(xp[k * inner] - m) / s;
    else {
      float ls = logf(s);
      for (int64_t k = 0; k < a; k++) yp[k * inner] = xp[k * inner] - m - ls;
    }
  }
}

extern "C" int pk_softmax(pk_stage *S, int kind, const float *x, float *y, int64_t outer, int64_t a, int64_t inner) {
  if (outer * a * inner == 0) return 0;
  if (inner == 1) k_softmax_rows<<<pk_grid(outer * 32), PK_THREADS, 0, S->stream>>>(kind, x, y, outer, a);
  else k_softmax_cols<<<pk_grid(outer * inner), PK_THREADS, 0, S->stream>>>(kind, x, y, outer, a, inner);
  return pk_check_launch(S);
}

/* ---- attention ---------------------------------------------------------------------------------- */

/* one warp per query row (b, h, i): lane l scores key j0 + l, the warp's max and sum
 * update the running max m and sum l, and each lane accumulates output dims lane,
 * lane + 32, ... from the 32 keys' probabilities (shuffled to every lane, in key order) */
__global__ void k_attention(pk_attn_p p, const float *__restrict__ q, const float *__restrict__ k,
                            const float *__restrict__ v, const void *__restrict__ mask, const float *__restrict__ pk,
                            const float *__restrict__ pv, const int64_t *__restrict__ nonpad, float *__restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = p.B * p.Hq * p.Sq, T = p.Sp + p.Skv, G = p.Hq / p.Hkv;
  for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < rows;
       row += ((int64_t)gridDim.x * blockDim.x) >> 5) {
    const int64_t i = row % p.Sq, h = (row / p.Sq) % p.Hq, b = row / (p.Sq * p.Hq), hk = h / G;
    const int64_t off = nonpad ? nonpad[b] - p.Sq : p.Sp, pos = i + off;
    int64_t jlo = 0, jhi = nonpad ? (nonpad[b] < 0 ? 0 : nonpad[b] > T ? T : nonpad[b]) : T;
    if (p.causal && jhi > pos + 1) jhi = pos + 1;
    if (p.rw >= 0 && jhi > pos + p.rw + 1) jhi = pos + p.rw + 1;
    if (p.lw >= 0 && jlo < pos - p.lw) jlo = pos - p.lw;
    const float *qr = q + b * p.q[0] + h * p.q[1] + i * p.q[2];
    float acc[PK_ATTN_DV / 32];
    for (int t = 0; t < PK_ATTN_DV / 32; t++) acc[t] = 0;
    float m = -INFINITY, l = 0;
    for (int64_t j0 = jlo; j0 < jhi; j0 += 32) {
      const int64_t j = j0 + lane;
      float s = -INFINITY;
      if (j < jhi) {
        const float *kr = j < p.Sp ? pk + ((b * p.Hkv + hk) * p.Sp + j) * p.D
                                   : k + b * p.k[0] + hk * p.k[1] + (j - p.Sp) * p.k[2];
        float dot = 0;
        for (int64_t e = 0; e < p.D; e++) dot = fmaf(qr[e], kr[e], dot);
        s = dot * p.scale;
        if (p.cap > 0) s = tanhf(s / p.cap) * p.cap;
        if (mask) {
          const int64_t mo = b * p.mB + h * p.mH + i * p.mS + j * p.mT;
          if (j >= p.Tm) s = -INFINITY;
          else if (p.mask_bool) s = ((const unsigned char *)mask)[mo] ? s : -INFINITY;
          else s = s + ((const float *)mask)[mo];
        }
      }
      const float cm = warp_max(s);
      if (!(cm > -INFINITY)) continue; /* the whole warp: no key of these 32 */
      const float mn = fmaxf(m, cm), cr = expf(m - mn), e = s > -INFINITY ? expf(s - mn) : 0.0f;
      l = l * cr + warp_sum(e);
      for (int t = 0; t < PK_ATTN_DV / 32; t++) acc[t] *= cr;
      for (int kk = 0; kk < 32; kk++) {
        const float w = __shfl_xor_sync(0xffffffffu, e, lane ^ kk); /* lane kk's */
        const int64_t jj = j0 + kk;
        if (jj >= jhi) break;
        if (w == 0) continue;
        const float *vr = jj < p.Sp ? pv + ((b * p.Hkv + hk) * p.Sp + jj) * p.Dv
                                    : v + b * p.v[0] + hk * p.v[1] + (jj - p.Sp) * p.v[2];
        for (int t = 0; t < PK_ATTN_DV / 32; t++) {
          const int64_t d = lane + 32 * t;
          if (d < p.Dv) acc[t] = fmaf(w, vr[d], acc[t]);
        }
      }
      m = mn;
    }
    float *yr = y + b * p.y[0] + h * p.y[1] + i * p.y[2];
    for (int t = 0; t < PK_ATTN_DV / 32; t++) {
      const int64_t d = lane + 32 * t;
      if (d < p.Dv) yr[d] = l > 0 ? acc[t] / l : 0.0f;
    }
  }
}

/* present_key / present_value: [B, Hkv, T, D] from the past and the new rows */
__global__ void k_attention_present(pk_attn_p p, const float *__restrict__ x, const float *__restrict__ past,
                                    int is_v, int64_t D, float *__restrict__ y) {
  const int64_t T = p.Sp + p.Skv, *st = is_v ? p.v : p.k;
  GRID_LOOP(t, p.B * p.Hkv * T * D) {
    const int64_t e = t % D, j = (t / D) % T, hk = (t / (D * T)) % p.Hkv, b = t / (D * T * p.Hkv);
    y[t] = j < p.Sp ? past[((b * p.Hkv + hk) * p.Sp + j) * D + e] : x[b * st[0] + hk * st[1] + (j - p.Sp) * st[2] + e];
  }
}

extern "C" int pk_attention(pk_stage *S, const pk_attn_p *p, const float *q, const float *k, const float *v,
                            const void *mask, const float *past_k, const float *past_v, const int64_t *nonpad, float *y,
                            float *present_k, float *present_v) {
  const int64_t T = p->Sp + p->Skv;
  if (present_k && p->B * p->Hkv * T * p->D > 0) {
    k_attention_present<<<pk_grid(p->B * p->Hkv * T * p->D), PK_THREADS, 0, S->stream>>>(*p, k, past_k, 0, p->D,
                                                                                         present_k);
    if (pk_check_launch(S)) return 1;
  }
  if (present_v && p->B * p->Hkv * T * p->Dv > 0) {
    k_attention_present<<<pk_grid(p->B * p->Hkv * T * p->Dv), PK_THREADS, 0, S->stream>>>(*p, v, past_v, 1, p->Dv,
                                                                                          present_v);
    if (pk_check_launch(S)) return 1;
  }
  if (!y || p->B * p->Hq * p->Sq * p->Dv == 0) return 0;
  k_attention<<<pk_grid(p->B * p->Hq * p->Sq * 32), PK_THREADS, 0, S->stream>>>(*p, q, k, v, mask, past_k, past_v, nonpad,
                                                                               y);
  return pk_check_launch(S);
}

/* ---- normalisation ------------------------------------------------------------------------------ */

/* block-wide sum of PK_THREADS threads */
__device__ float block_sum(float v, float *sh) {
  v = warp_sum(v);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float t = 0;
  for (int i = 0; i < PK_THREADS / 32; i++) t += sh[i];
  return t;
}

/* one block per row; two passes (mean, then variance) */
__global__ void k_layernorm(const float *__restrict__ x, const float *__restrict__ scale, int64_t ns,
                            const float *__restrict__ bias, int64_t nb, float *__restrict__ y, float *mean_out,
                            float *inv_out, int64_t outer, int64_t inner, float eps, int per_row) {
  __shared__ float sh[PK_THREADS / 32];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const float *xp = x + row * inner;
    float *yp = y + row * inner;
    float s = 0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) s += xp[i];
    float mean = block_sum(s, sh) / (float)inner;
    float q = 0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      float d = xp[i] - mean;
      q += d * d;
    }
    float inv = rsqrtf(block_sum(q, sh) / (float)inner + eps);
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      int64_t si = per_row ? row % ns : (ns == 1 ? 0 : i), bi = per_row ? row % nb : (nb == 1 ? 0 : i);
      float v = (xp[i] - mean) * inv * scale[si];
      yp[i] = bias ? v + bias[bi] : v;
    }
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[row] = mean;
      if (inv_out) inv_out[row] = inv;
    }
  }
}

extern "C" int pk_layernorm(pk_stage *S, const float *x, const float *scale, int64_t ns, const float *bias, int64_t nb,
                            float *y, float *mean, float *inv, int64_t outer, int64_t inner, double eps, int per_row) {
  if (outer * inner == 0) return 0;
  int64_t g = outer < 65536 ? outer : 65536;
  k_layernorm<<<(unsigned)g, PK_THREADS, 0, S->stream>>>(x, scale, ns, bias, nb, y, mean, inv, outer, inner, (float)eps,
                                                         per_row);
  return pk_check_launch(S);
}

__global__ void k_batchnorm(const float *__restrict__ x, const float *__restrict__ scale,
                            const float *__restrict__ bias, const float *__restrict__ mean,
                            const float *__restrict__ var, float *__restrict__ y, int64_t c, int64_t sp, float eps,
                            int64_t total) {
  GRID_LOOP(i, total) {
    int64_t ch = (i / sp) % c;
    float a = scale[ch] / sqrtf(var[ch] + eps);
    float b = bias[ch] - mean[ch] * a;
    y[i] = x[i] * a + b;
  }
}

extern "C" int pk_batchnorm(pk_stage *S, const float *x, const float *scale, const float *bias, const float *mean,
                            const float *var, float *y, int64_t n, int64_t c, int64_t sp, double eps) {
  int64_t t = n * c * sp;
  if (t == 0) return 0;
  k_batchnorm<<<pk_grid(t), PK_THREADS, 0, S->stream>>>(x, scale, bias, mean, var, y, c, sp, (float)eps, t);
  return pk_check_launch(S);
}

/* one block per channel */
__global__ void k_batchnorm_train(const float *__restrict__ x, const float *__restrict__ scale,
                                  const float *__restrict__ bias, const float *__restrict__ rm_in,
                                  const float *__restrict__ rv_in, float *__restrict__ y, float *rm, float *rv,
                                  int64_t n, int64_t c, int64_t sp, float eps, float mom) {
  __shared__ float sh[PK_THREADS / 32];
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    int64_t cnt = n * sp;
    float s = 0;
    for (int64_t t = threadIdx.x; t < cnt; t += blockDim.x) s += x[((t / sp) * c + ch) * sp + t % sp];
    float mean = block_sum(s, sh) / (float)cnt;
    float q = 0;
    for (int64_t t = threadIdx.x; t < cnt; t += blockDim.x) {
      float d = x[((t / sp) * c + ch) * sp + t % sp] - mean;
      q += d * d;
    }
    float var = block_sum(q, sh) / (float)cnt;
    float inv = rsqrtf(var + eps);
    for (int64_t t = threadIdx.x; t < cnt; t += blockDim.x) {
      int64_t k = ((t / sp) * c + ch) * sp + t % sp;
      y[k] = (x[k] - mean) * inv * scale[ch] + bias[ch];
    }
    if (threadIdx.x == 0) {
      if (rm) rm[ch] = rm_in[ch] * mom + mean * (1 - mom);
      if (rv) rv[ch] = rv_in[ch] * mom + var * (1 - mom);
    }
  }
}

extern "C" int pk_batchnorm_train(pk_stage *S, const float *x, const float *scale, const float *bias, const float *mean,
                                  const float *var, float *y, float *rmean, float *rvar, int64_t n, int64_t c,
                                  int64_t sp, double eps, double momentum) {
  if (n * c * sp == 0) return 0;
  int64_t g = c < 65536 ? c : 65536;
  k_batchnorm_train<<<(unsigned)g, PK_THREADS, 0, S->stream>>>(x, scale, bias, mean, var, y, rmean, rvar, n, c, sp,
                                                               (float)eps, (float)momentum);
  return pk_check_launch(S);
}

/* ---- reductions: one warp per output element, or one thread where the count is small ---------------- */

/* float32 reduces in float32; every other type in double, as the cpu target does for all
 * (integer results truncated toward zero, as onnxruntime's: a mean of -4 / 3 is -1; and
 * clamped to the type's range) */
__device__ __forceinline__ float red_abs(float v) { return fabsf(v); }
__device__ __forceinline__ double red_abs(double v) { return fabs(v); }
__device__ __forceinline__ float red_exp(float v) { return expf(v); }
__device__ __forceinline__ double red_exp(double v) { return exp(v); }
__device__ __forceinline__ float red_log(float v) { return logf(v); }
__device__ __forceinline__ double red_log(double v) { return log(v); }
__device__ __forceinline__ float red_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double red_sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float red_fmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double red_fmax(double a, double b) { return fmax(a, b); }

template <typename A>
__device__ __forceinline__ A red_init(int kind) {
  return kind == PK_RED_MAX ? (A)-INFINITY : kind == PK_RED_MIN ? (A)INFINITY : kind == PK_RED_PROD ? (A)1 : (A)0;
}

/* a combined with the input value v (mx: LogSumExp's maximum) */
template <typename A>
__device__ __forceinline__ A red_step(int kind, A a, A v, A mx) {
  switch (kind) {
    case PK_RED_MAX: return (v > a || v != v) ? v : a;
    case PK_RED_MIN: return (v < a || v != v) ? v : a;
    case PK_RED_PROD: return a * v;
    case PK_RED_L1: return a + red_abs(v);
    case PK_RED_L2:
    case PK_RED_SUMSQ: return a + v * v;
    case PK_RED_LOGSUMEXP: return a + red_exp(v - mx);
    default: return a + v;
  }
}

/* two partial results combined */
template <typename A>
__device__ __forceinline__ A red_join(int kind, A a, A b) {
  switch (kind) {
    case PK_RED_MAX: return (b > a || b != b) ? b : a;
    case PK_RED_MIN: return (b < a || b != b) ? b : a;
    case PK_RED_PROD: return a * b;
    default: return a + b;
  }
}

template <typename A>
__device__ __forceinline__ A red_final(int kind, A a, A mx, int64_t cnt) {
  switch (kind) {
    case PK_RED_MEAN: return a / (A)cnt;
    case PK_RED_L2: return red_sqrt(a);
    case PK_RED_LOGSUM: return red_log(a);
    case PK_RED_LOGSUMEXP: return red_log(a) + mx;
    default: return a;
  }
}

/* the result stored as T: floats as they are; integers clamped to T's range (an empty
 * max is the smallest T, not an undefined conversion of -inf), NaN as 0; bool: a > 0 */
template <typename T, typename A>
__device__ __forceinline__ T red_store(A a) {
  if (std::is_floating_point<T>::value) return (T)a;
  if (std::is_same<T, bool>::value) return (T)(a > 0); /* an empty max (-inf) false, an empty min (inf) true */
  if (a != a) return (T)0;
  if (a <= (A)pk_lim<T>::lo()) return pk_lim<T>::lo();
  if (a >= (A)pk_lim<T>::hi()) return pk_lim<T>::hi();
  return (T)a;
}

/* the offset of output w's first input (kept dims from w), and of its k-th reduced input */
__device__ __forceinline__ int64_t red_base(const pk_reduce_p &p, const int64_t *xs, int64_t w) {
  int64_t base = 0;
  for (int d = p.rank - 1; d >= 0; d--)
    if (!p.red[d]) {
      base += (w % p.xd[d]) * xs[d];
      w /= p.xd[d];
    }
  return base;
}

__device__ __forceinline__ int64_t red_off(const pk_reduce_p &p, const int64_t *xs, int64_t base, int64_t k) {
  for (int d = p.rank - 1; d >= 0; d--)
    if (p.red[d]) base += (k % p.xd[d]) * xs[d], k /= p.xd[d];
  return base;
}

template <typename T, typename A>
__global__ void k_reduce(pk_reduce_p p, const T *__restrict__ x, T *__restrict__ y, int64_t nout, int64_t cnt) {
  int lane = threadIdx.x & 31;
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  int64_t xs[PK_MAX_RANK];
  int64_t acc = 1;
  for (int d = p.rank - 1; d >= 0; d--) xs[d] = acc, acc *= p.xd[d];
  for (; w < nout; w += nw) {
    int64_t base = red_base(p, xs, w);
    A mx = -INFINITY;
    if (p.kind == PK_RED_LOGSUMEXP) {
      for (int64_t k = lane; k < cnt; k += 32) mx = red_fmax(mx, (A)x[red_off(p, xs, base, k)]);
      for (int o = 16; o > 0; o >>= 1) mx = red_fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    A a = red_init<A>(p.kind);
    for (int64_t k = lane; k < cnt; k += 32) a = red_step<A>(p.kind, a, (A)x[red_off(p, xs, base, k)], mx);
    for (int o = 16; o > 0; o >>= 1) a = red_join<A>(p.kind, a, __shfl_xor_sync(0xffffffffu, a, o));
    if (lane == 0) y[w] = red_store<T, A>(red_final<A>(p.kind, a, mx, cnt));
  }
}

/* cnt <= 32: a warp per output would leave most lanes idle (a MatMul's weight gradient
 * summed over a few broadcast batch rows: millions of outputs of 4 inputs each), so one
 * thread per output, in input order; adjacent outputs read adjacent inputs when the
 * reduced dims are the outer ones */
template <typename T, typename A>
__global__ void k_reduce_thread(pk_reduce_p p, const T *__restrict__ x, T *__restrict__ y, int64_t nout, int64_t cnt) {
  int64_t xs[PK_MAX_RANK];
  int64_t acc = 1;
  for (int d = p.rank - 1; d >= 0; d--) xs[d] = acc, acc *= p.xd[d];
  GRID_LOOP(w, nout) {
    int64_t base = red_base(p, xs, w);
    A mx = -INFINITY;
    if (p.kind == PK_RED_LOGSUMEXP)
      for (int64_t k = 0; k < cnt; k++) mx = red_fmax(mx, (A)x[red_off(p, xs, base, k)]);
    A a = red_init<A>(p.kind);
    for (int64_t k = 0; k < cnt; k++) a = red_step<A>(p.kind, a, (A)x[red_off(p, xs, base, k)], mx);
    y[w] = red_store<T, A>(red_final<A>(p.kind, a, mx, cnt));
  }
}

template <typename T, typename A>
static void launch_reduce(pk_stage *S, const pk_reduce_p *p, const void *x, void *y, int64_t nout, int64_t cnt) {
  if (cnt <= 32)
    k_reduce_thread<T, A><<<pk_grid(nout), PK_THREADS, 0, S->stream>>>(*p, (const T *)x, (T *)y, nout, cnt);
  else k_reduce<T, A><<<pk_grid(nout * 32), PK_THREADS, 0, S->stream>>>(*p, (const T *)x, (T *)y, nout, cnt);
}

extern "C" int pk_reduce(pk_stage *S, const pk_reduce_p *p, const void *x, void *y) {
  int64_t nout = 1, cnt = 1;
  for (int d = 0; d < p->rank; d++) {
    if (p->red[d]) cnt *= p->xd[d];
    else nout *= p->xd[d];
  }
  if (nout == 0) return 0;
  switch (p->dtype) {
    case PK_F32: launch_reduce<float, float>(S, p, x, y, nout, cnt); break;
    case PK_F64: launch_reduce<double, double>(S, p, x, y, nout, cnt); break;
    case PK_I64: launch_reduce<int64_t, double>(S, p, x, y, nout, cnt); break;
    case PK_I32: launch_reduce<int32_t, double>(S, p, x, y, nout, cnt); break;
    case PK_I16: launch_reduce<int16_t, double>(S, p, x, y, nout, cnt); break;
    case PK_I8: launch_reduce<int8_t, double>(S, p, x, y, nout, cnt); break;
    case PK_U8: launch_reduce<uint8_t, double>(S, p, x, y, nout, cnt); break;
    case PK_BOOL: launch_reduce<bool, double>(S, p, x, y, nout, cnt); break;
    default: return pk_fail(S, "reduction", "element type not supported here");
  }
  return pk_check_launch(S);
}

/* ---- index ops: GatherElements, GatherND, scatters, OneHot --------------------------------------- */

/* Calls FN<T>(args...) for the element type code dt (numbers), or by element size es
 * (bits only); anything else fails the unit. */
#define PK_NUMERIC(S, what, dt, FN, ...)                                 \
  switch (dt) {                                                          \
    case PK_F32: FN<float>(__VA_ARGS__); break;                          \
    case PK_F64: FN<double>(__VA_ARGS__); break;                         \
    case PK_I32: FN<int32_t>(__VA_ARGS__); break;                        \
    case PK_I64: FN<int64_t>(__VA_ARGS__); break;                        \
    default: return pk_fail(S, what, "element type not supported here"); \
  }
#define PK_BITS(S, what, es, FN, ...)                               \
  switch (es) {                                                     \
    case 1: FN<uint8_t>(__VA_ARGS__); break;                        \
    case 2: FN<uint16_t>(__VA_ARGS__); break;                       \
    case 4: FN<uint32_t>(__VA_ARGS__); break;                       \
    case 8: FN<uint64_t>(__VA_ARGS__); break;                       \
    default: return pk_fail(S, what, "element size not supported"); \
  }

/* index i of an int64 (idx64) or int32 index tensor */
__device__ __forceinline__ int64_t load_idx(const void *idx, int idx64, int64_t i) {
  return idx64 ? ((const int64_t *)idx)[i] : (int64_t)((const int32_t *)idx)[i];
}

template <typename T>
__global__ void k_gather_elements(pk_gather_el_p p, const T *__restrict__ x, const void *__restrict__ idx,
                                  T *__restrict__ y, int64_t total) {
  GRID_LOOP(t, total) {
    int64_t r = t, off = 0;
    for (int d = p.rank - 1; d >= 0; d--) {
      int64_t o = r % p.ydims[d];
      r /= p.ydims[d];
      if (d != p.axis) off += o * p.xs[d];
    }
    y[t] = x[off + check_idx(load_idx(idx, p.idx64, t), p.a, p.bad, p.unit, p.axis) * p.xs[p.axis]];
  }
}

template <typename T>
static void launch_gather_elements(pk_stage *S, const pk_gather_el_p *p, const void *x, const void *idx, void *y,
                                   int64_t t) {
  k_gather_elements<T><<<pk_grid(t), PK_THREADS, 0, S->stream>>>(*p, (const T *)x, idx, (T *)y, t);
}

extern "C" int pk_gather_elements(pk_stage *S, const pk_gather_el_p *p0, const void *x, const void *idx, void *y) {
  int64_t t = 1;
  for (int d = 0; d < p0->rank; d++) t *= p0->ydims[d];
  if (t == 0) return 0;
  pk_gather_el_p q = *p0, *p = &q;
  q.bad = S->bad;
  q.unit = S->unit;
  S->bad_used = 1;
  PK_BITS(S, "GatherElements", p->esize, launch_gather_elements, S, p, x, idx, y, t);
  return pk_check_launch(S);
}

/* row of the data picked by the index tuple at idx[base .. base + l) (dims[0] is data
 * axis first) */
__device__ __forceinline__ int64_t nd_row(const void *idx, int idx64, int64_t base, int l, const int64_t *dims,
                                          unsigned long long *bad, int unit, int first) {
  int64_t off = 0;
  for (int k = 0; k < l; k++)
    off = off * dims[k] + check_idx(load_idx(idx, idx64, base + k), dims[k], bad, unit, first + k);
  return off;
}

template <typename T>
__global__ void k_gather_nd(pk_gather_nd_p p, const T *__restrict__ x, const void *__restrict__ idx, T *__restrict__ y,
                            int64_t total) {
  GRID_LOOP(t, total) {
    int64_t s = t % p.slice, r = t / p.slice, j = r % p.ni, bi = r / p.ni;
    int64_t row = nd_row(idx, p.idx64, (bi * p.ni + j) * p.l, p.l, p.dims, p.bad, p.unit, p.first_axis);
    y[t] = x[bi * p.d + row * p.slice + s];
  }
}

template <typename T>
static void launch_gather_nd(pk_stage *S, const pk_gather_nd_p *p, const void *x, const void *idx, void *y, int64_t t) {
  k_gather_nd<T><<<pk_grid(t), PK_THREADS, 0, S->stream>>>(*p, (const T *)x, idx, (T *)y, t);
}

extern "C" int pk_gather_nd(pk_stage *S, const pk_gather_nd_p *p0, const void *x, const void *idx, void *y) {
  int64_t t = p0->b * p0->ni * p0->slice;
  if (t == 0) return 0;
  pk_gather_nd_p q = *p0, *p = &q;
  q.bad = S->bad;
  q.unit = S->unit;
  S->bad_used = 1;
  PK_BITS(S, "GatherND", p->esize, launch_gather_nd, S, p, x, idx, y, t);
  return pk_check_launch(S);
}

/* ---- sorting 64-bit keys (bitonic; n a power of two): blocks of PK_SORT_CHUNK keys in
 * shared memory, the longer strides in global memory ---- */

#define PK_SORT_CHUNK 2048

__device__ __forceinline__ void sort_pair(uint64_t *a, int64_t i, int64_t l, bool up) {
  uint64_t x = a[i], y = a[l];
  if (up ? x > y : x < y) {
    a[i] = y;
    a[l] = x;
  }
}

/* merge steps of stride j >= PK_SORT_CHUNK for sequences of length k */
__global__ void k_bitonic_global(uint64_t *a, int64_t half, int64_t j, int64_t k) {
  GRID_LOOP(t, half) {
    int64_t i = (t / j) * 2 * j + t % j;
    sort_pair(a, i, i + j, (i & k) == 0);
  }
}

/* every step for sequence lengths k_lo .. k_hi (doubling; the first from stride j_first)
 * with strides below the block's 2 * blockDim.x keys */
__global__ void k_bitonic_shared(uint64_t *a, int64_t k_lo, int64_t k_hi, int64_t j_first) {
  __shared__ uint64_t sh[PK_SORT_CHUNK];
  int64_t nb = 2 * (int64_t)blockDim.x, base = (int64_t)blockIdx.x * nb;
  for (int64_t i = threadIdx.x; i < nb; i += blockDim.x) sh[i] = a[base + i];
  __syncthreads();
  for (int64_t k = k_lo; k <= k_hi; k <<= 1)
    for (int64_t j = k == k_lo ? j_first : k >> 1; j > 0; j >>= 1) {
      int64_t t = threadIdx.x, i = (t / j) * 2 * j + t % j;
      sort_pair(sh, i, i + j, ((base + i) & k) == 0);
      __syncthreads();
    }
  for (int64_t i = threadIdx.x; i < nb; i += blockDim.x) a[base + i] = sh[i];
}

static int sort_u64(pk_stage *S, uint64_t *a, int64_t n) {
  if (n < 2) return 0;
  int64_t c = n < PK_SORT_CHUNK ? n : PK_SORT_CHUNK;
  unsigned blocks = (unsigned)(n / c), threads = (unsigned)(c / 2);
  k_bitonic_shared<<<blocks, threads, 0, S->stream>>>(a, 2, c, 1);
  if (pk_check_launch(S)) return 1;
  for (int64_t k = 2 * c; k <= n; k <<= 1) {
    for (int64_t j = k >> 1; j >= c; j >>= 1) {
      k_bitonic_global<<<pk_grid(n / 2), PK_THREADS, 0, S->stream>>>(a, n / 2, j, k);
      if (pk_check_launch(S)) return 1;
    }
    k_bitonic_shared<<<blocks, threads, 0, S->stream>>>(a, k, k, c / 2);
    if (pk_check_launch(S)) return 1;
  }
  return 0;
}

/* ---- ScatterElements, ScatterND ---- */

/* the update row (ScatterND) or element (ScatterElements) that unit u writes */
__device__ int64_t scatter_target(const pk_scatter_p &p, const void *idx, int64_t u) {
  if (p.nd) return nd_row(idx, p.idx64, u * p.l, p.l, p.dims, p.bad, p.unit, 0);
  int64_t r = u, off = 0;
  for (int d = p.rank - 1; d >= 0; d--) {
    int64_t o = r % p.udims[d];
    r /= p.udims[d];
    if (d != p.axis) off += o * p.xs[d];
  }
  return off + check_idx(load_idx(idx, p.idx64, u), p.dims[p.axis], p.bad, p.unit, p.axis) * p.xs[p.axis];
}

/* key (target << ubits | u); the padding up to sort_n sorts last */
__global__ void k_scatter_keys(pk_scatter_p p, const void *__restrict__ idx, uint64_t *__restrict__ keys, int ubits) {
  GRID_LOOP(u, p.sort_n) keys[u] = u < p.nu ? ((uint64_t)scatter_target(p, idx, u) << ubits) | (uint64_t)u : ~0ull;
}

template <typename T>
__device__ __forceinline__ T scatter_op(int red, T a, T b) {
  switch (red) {
    case PK_SCATTER_ADD: return a + b;
    case PK_SCATTER_MUL: return a * b;
    case PK_SCATTER_MAX: return b > a ? b : a;
    case PK_SCATTER_MIN: return b < a ? b : a;
    default: return b;
  }
}

/* one thread per (target, slice element): the first sorted unit of each target applies
 * all of that target's units in unit order */
template <typename T>
__global__ void k_scatter_apply(pk_scatter_p p, const uint64_t *__restrict__ keys, int ubits, const T *__restrict__ upd,
                                T *__restrict__ y) {
  uint64_t umask = (ubits ? ~0ull >> (64 - ubits) : 0);
  GRID_LOOP(t, p.nu * p.slice) {
    int64_t q = t / p.slice, s = t % p.slice;
    uint64_t tgt = keys[q] >> ubits;
    if (q > 0 && keys[q - 1] >> ubits == tgt) continue;
    int64_t dst = (int64_t)tgt * p.slice + s;
    T acc = y[dst];
    for (int64_t r = q; r < p.nu && keys[r] >> ubits == tgt; r++)
      acc = scatter_op<T>(p.reduction, acc, upd[(int64_t)(keys[r] & umask) * p.slice + s]);
    y[dst] = acc;
  }
}

template <typename T>
static void launch_scatter_apply(pk_stage *S, const pk_scatter_p *p, const uint64_t *keys, int ubits, const void *upd,
                                 void *y) {
  k_scatter_apply<T><<<pk_grid(p->nu * p->slice), PK_THREADS, 0, S->stream>>>(*p, keys, ubits, (const T *)upd, (T *)y);
}

extern "C" int pk_scatter(pk_stage *S, const pk_scatter_p *p0, const void *x, const void *idx, const void *upd, void *y,
                          void *scratch) {
  pk_scatter_p q = *p0, *p = &q;
  q.bad = S->bad;
  q.unit = S->unit;
  S->bad_used = 1;
  if (pk_memcpy(S, y, x, (size_t)(p->ny * p->esize))) return 1;
  if (p->nu == 0 || p->slice == 0) return 0;
  int ubits = 0;
  while (((int64_t)1 << ubits) < p->nu) ubits++;
  int64_t ntarget = p->nd ? p->ny / p->slice : p->ny;
  /* unsigned: a single update (ubits 0) leaves all 63 bits to the target */
  if (ubits > 62 || (uint64_t)ntarget >= (uint64_t)1 << (63 - ubits) || p->sort_n < p->nu)
    return pk_fail(S, "scatter", "too many updates for 64-bit sort keys");
  uint64_t *keys = (uint64_t *)scratch;
  k_scatter_keys<<<pk_grid(p->sort_n), PK_THREADS, 0, S->stream>>>(*p, idx, keys, ubits);
  if (pk_check_launch(S) || sort_u64(S, keys, p->sort_n)) return 1;
  if (p->reduction == PK_SCATTER_NONE) {
    PK_BITS(S, "scatter", p->esize, launch_scatter_apply, S, p, keys, ubits, upd, y);
  } else {
    PK_NUMERIC(S, "scatter", p->dtype, launch_scatter_apply, S, p, keys, ubits, upd, y);
  }
  return pk_check_launch(S);
}

/* one thread per input element e; the windows containing e in output order */
template <typename T>
__global__ void k_maxpool_scatter(pk_pool_p p, const T *__restrict__ x, const int64_t *__restrict__ idx,
                                  const T *__restrict__ dy, T *__restrict__ y, int64_t total) {
  int64_t OS = p.out[0] * p.out[1] * p.out[2];
  GRID_LOOP(e, total) {
    int64_t iw = e % p.in[2], r = e / p.in[2], ih = r % p.in[1];
    r /= p.in[1];
    int64_t id = r % p.in[0], nc = r / p.in[0];
    const int64_t *ip = idx + nc * OS;
    const T *dp = dy + nc * OS;
    T acc = x[e];
    /* window o covers i when o * s - pb + kk * d == i: kk descending gives o ascending */
    for (int64_t kd = p.k[0] - 1; kd >= 0; kd--) {
      int64_t td = id + p.pb[0] - kd * p.d[0];
      if (td < 0 || td % p.s[0] || td / p.s[0] >= p.out[0]) continue;
      int64_t od = td / p.s[0];
      for (int64_t kh = p.k[1] - 1; kh >= 0; kh--) {
        int64_t th = ih + p.pb[1] - kh * p.d[1];
        if (th < 0 || th % p.s[1] || th / p.s[1] >= p.out[1]) continue;
        int64_t oh = th / p.s[1];
        for (int64_t kw = p.k[2] - 1; kw >= 0; kw--) {
          int64_t tw = iw + p.pb[2] - kw * p.d[2];
          if (tw < 0 || tw % p.s[2] || tw / p.s[2] >= p.out[2]) continue;
          int64_t o = (od * p.out[1] + oh) * p.out[2] + tw / p.s[2];
          if (ip[o] == e) acc += dp[o];
        }
      }
    }
    y[e] = acc;
  }
}

extern "C" int pk_maxpool_scatter(pk_stage *S, int dtype, const pk_pool_p *p, const void *x, const int64_t *idx,
                                  const void *dy, void *y) {
  int64_t t = p->nc * p->in[0] * p->in[1] * p->in[2];
  if (t == 0) return 0;
  if (dtype == PK_F64)
    k_maxpool_scatter<double>
        <<<pk_grid(t), PK_THREADS, 0, S->stream>>>(*p, (const double *)x, idx, (const double *)dy, (double *)y, t);
  else
    k_maxpool_scatter<float>
        <<<pk_grid(t), PK_THREADS, 0, S->stream>>>(*p, (const float *)x, idx, (const float *)dy, (float *)y, t);
  return pk_check_launch(S);
}

/* index i of a numeric index tensor, truncated to an integer (OneHot) */
__device__ __forceinline__ int64_t load_num(const void *v, int dt, int64_t i) {
  switch (dt) {
    case PK_F32: return (int64_t)((const float *)v)[i];
    case PK_F64: return (int64_t)((const double *)v)[i];
    case PK_I32: return ((const int32_t *)v)[i];
    case PK_I16: return ((const int16_t *)v)[i];
    case PK_I8: return ((const int8_t *)v)[i];
    case PK_U8: return ((const uint8_t *)v)[i];
    default: return ((const int64_t *)v)[i];
  }
}

template <typename T>
__global__ void k_onehot(int dt, const void *__restrict__ idx, const T *__restrict__ values, T *__restrict__ y,
                         int64_t depth, int64_t inner, int64_t total) {
  GRID_LOOP(t, total) {
    int64_t i = t % inner, r = t / inner, d = r % depth, o = r / depth;
    int64_t k = load_num(idx, dt, o * inner + i);
    if (k < 0) k += depth;
    y[t] = d == k ? values[1] : values[0];
  }
}

template <typename T>
static void launch_onehot(pk_stage *S, int dt, const void *idx, const void *values, void *y, int64_t depth,
                          int64_t inner, int64_t t) {
  k_onehot<T><<<pk_grid(t), PK_THREADS, 0, S->stream>>>(dt, idx, (const T *)values, (T *)y, depth, inner, t);
}

extern "C" int pk_onehot(pk_stage *S, int idx_dtype, int esize, const void *idx, const void *values, void *y,
                         int64_t outer, int64_t depth, int64_t inner) {
  int64_t t = outer * depth * inner;
  if (t == 0) return 0;
  PK_BITS(S, "OneHot", esize, launch_onehot, S, idx_dtype, idx, values, y, depth, inner, t);
  return pk_check_launch(S);
}

/* ---- scans and selections along an axis of [outer, a, inner] ------------------------------------- */

template <typename T>
__global__ void k_cumsum(const T *x, T *y, int64_t a, int64_t inner, int exclusive, int reverse, int prod,
                         int64_t total) {
  GRID_LOOP(t, total) {
    int64_t i = t % inner, o = t / inner;
    T s = prod ? (T)1 : (T)0;
    for (int64_t kk = 0; kk < a; kk++) {
      int64_t j = (o * a + (reverse ? a - 1 - kk : kk)) * inner + i;
      T v = x[j];
      if (exclusive) y[j] = s;
      s = prod ? (T)(s * v) : (T)(s + v);
      if (!exclusive) y[j] = s;
    }
  }
}

template <typename T>
static void launch_cumsum(pk_stage *S, const void *x, void *y, int64_t a, int64_t inner, int exclusive, int reverse,
                          int prod, int64_t t) {
  k_cumsum<T><<<pk_grid(t), PK_THREADS, 0, S->stream>>>((const T *)x, (T *)y, a, inner, exclusive, reverse, prod, t);
}

extern "C" int pk_cumsum(pk_stage *S, int dtype, const void *x, void *y, int64_t outer, int64_t a, int64_t inner,
                         int exclusive, int reverse) {
  int64_t t = outer * inner;
  if (t == 0 || a == 0) return 0;
  PK_NUMERIC(S, "CumSum", dtype, launch_cumsum, S, x, y, a, inner, exclusive, reverse, 0, t);
  return pk_check_launch(S);
}

extern "C" int pk_cumprod(pk_stage *S, int dtype, const void *x, void *y, int64_t outer, int64_t a, int64_t inner,
                          int exclusive, int reverse) {
  int64_t t = outer * inner;
  if (t == 0 || a == 0) return 0;
  PK_NUMERIC(S, "CumProd", dtype, launch_cumsum, S, x, y, a, inner, exclusive, reverse, 1, t);
  return pk_check_launch(S);
}

template <typename T>
__global__ void k_argmax(const T *__restrict__ x, int64_t *__restrict__ y, int64_t a, int64_t inner, int is_min,
                         int last, int64_t total) {
  GRID_LOOP(t, total) {
    int64_t i = t % inner, o = t / inner;
    const T *xp = x + o * a * inner + i;
    int64_t best = 0;
    for (int64_t k = 1; k < a; k++) {
      T v = xp[k * inner], b = xp[best * inner];
      if (is_min ? (last ? v <= b : v < b) : (last ? v >= b : v > b)) best = k;
    }
    y[t] = best;
  }
}

template <typename T>
static void launch_argmax(pk_stage *S, const void *x, int64_t *y, int64_t a, int64_t inner, int is_min, int last,
                          int64_t t) {
  k_argmax<T><<<pk_grid(t), PK_THREADS, 0, S->stream>>>((const T *)x, y, a, inner, is_min, last, t);
}

extern "C" int pk_argmax(pk_stage *S, int dtype, const void *x, int64_t *y, int64_t outer, int64_t a, int64_t inner,
                         int is_min, int select_last) {
  int64_t t = outer * inner;
  if (t == 0) return 0;
  PK_NUMERIC(S, "ArgMax", dtype, launch_argmax, S, x, y, a, inner, is_min, select_last, t);
  return pk_check_launch(S);
}

template <typename T>
__device__ __forceinline__ T shfl_xor_t(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
template <>
__device__ __forceinline__ int64_t shfl_xor_t<int64_t>(int64_t v, int lane_mask) {
  return (int64_t)__shfl_xor_sync(0xffffffffu, (long long)v, lane_mask);
}

/* (v1, k1) comes before (v2, k2) in TopK's order: by value, then the lower index */
template <typename T>
__device__ __forceinline__ bool topk_before(T v1, int64_t k1, T v2, int64_t k2, int largest) {
  return (largest ? v1 > v2 : v1 < v2) || (v1 == v2 && k1 < k2);
}

/* one warp per row: pick j is the first element after pick j - 1 in that order */
template <typename T>
__global__ void k_topk(const T *__restrict__ x, T *__restrict__ y, int64_t *__restrict__ yi, int64_t rows, int64_t a,
                       int64_t inner, int64_t k, int largest) {
  int lane = threadIdx.x & 31;
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (; w < rows; w += nw) {
    int64_t i = w % inner, o = w / inner;
    const T *xp = x + o * a * inner + i;
    T pv = 0;
    int64_t pk = -1;
    for (int64_t j = 0; j < k; j++) {
      T bv = 0;
      int64_t bk = -1;
      for (int64_t q = lane; q < a; q += 32) {
        T v = xp[q * inner];
        if (pk >= 0 && !topk_before(pv, pk, v, q, largest)) continue;
        if (bk < 0 || topk_before(v, q, bv, bk, largest)) bv = v, bk = q;
      }
      for (int m = 16; m > 0; m >>= 1) {
        T ov = shfl_xor_t(bv, m);
        int64_t ok = shfl_xor_t(bk, m);
        if (ok >= 0 && (bk < 0 || topk_before(ov, ok, bv, bk, largest))) bv = ov, bk = ok;
      }
      if (lane == 0) {
        int64_t dst = (o * k + j) * inner + i;
        if (y) y[dst] = bv;
        if (yi) yi[dst] = bk;
      }
      pv = bv;
      pk = bk;
    }
  }
}

template <typename T>
static void launch_topk(pk_stage *S, const void *x, void *y, int64_t *yi, int64_t rows, int64_t a, int64_t inner,
                        int64_t k, int largest) {
  k_topk<T><<<pk_grid(rows * 32), PK_THREADS, 0, S->stream>>>((const T *)x, (T *)y, yi, rows, a, inner, k, largest);
}

extern "C" int pk_topk(pk_stage *S, int dtype, const void *x, void *y, int64_t *yi, int64_t outer, int64_t a,
                       int64_t inner, int64_t k, int largest) {
  int64_t rows = outer * inner;
  if (rows == 0 || k == 0) return 0;
  PK_NUMERIC(S, "TopK", dtype, launch_topk, S, x, y, yi, rows, a, inner, k, largest);
  return pk_check_launch(S);
}

/* ---- Trilu, Range, Resize, LRN ------------------------------------------------------------------- */

template <typename T>
__global__ void k_trilu(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t cols, int64_t k, int upper,
                        int64_t total) {
  GRID_LOOP(t, total) {
    int64_t j = t % cols, i = (t / cols) % rows;
    y[t] = (upper ? j - i >= k : j - i <= k) ? x[t] : (T)0;
  }
}

template <typename T>
static void launch_trilu(pk_stage *S, const void *x, void *y, int64_t rows, int64_t cols, int64_t k, int upper,
                         int64_t t) {
  k_trilu<T><<<pk_grid(t), PK_THREADS, 0, S->stream>>>((const T *)x, (T *)y, rows, cols, k, upper, t);
}

extern "C" int pk_trilu(pk_stage *S, int esize, const void *x, void *y, int64_t b, int64_t rows, int64_t cols,
                        int64_t k, int upper) {
  int64_t t = b * rows * cols;
  if (t == 0) return 0;
  PK_BITS(S, "Trilu", esize, launch_trilu, S, x, y, rows, cols, k, upper, t);
  return pk_check_launch(S);
}

/* start + i * delta, the product rounded before the sum (no FMA), as the cpu target */
template <typename T>
__device__ __forceinline__ T range_at(T s, T d, int64_t i) {
  return (T)(s + (T)i * d);
}
template <>
__device__ __forceinline__ float range_at<float>(float s, float d, int64_t i) {
  return __fadd_rn(s, __fmul_rn((float)i, d));
}
template <>
__device__ __forceinline__ double range_at<double>(double s, double d, int64_t i) {
  return __dadd_rn(s, __dmul_rn((double)i, d));
}

template <typename T>
__global__ void k_range(const T *__restrict__ start, const T *__restrict__ delta, T *__restrict__ y, int64_t n) {
  GRID_LOOP(i, n) y[i] = range_at<T>(start[0], delta[0], i);
}

template <typename T>
static void launch_range(pk_stage *S, const void *start, const void *delta, void *y, int64_t n) {
  k_range<T><<<pk_grid(n), PK_THREADS, 0, S->stream>>>((const T *)start, (const T *)delta, (T *)y, n);
}

extern "C" int pk_range(pk_stage *S, int dtype, const void *start, const void *delta, void *y, int64_t n) {
  if (n <= 0) return 0;
  if (dtype == PK_I16) launch_range<int16_t>(S, start, delta, y, n);
  else {
    PK_NUMERIC(S, "Range", dtype, launch_range, S, start, delta, y, n);
  }
  return pk_check_launch(S);
}

/* codegen/op_params.c's cg_resize_coord, operation by operation in the same order */
__device__ double resize_coord(const pk_resize_p &p, int d, int64_t o, int64_t in, int64_t out) {
  if (!p.resized[d]) return (double)o;
  double s = p.scales[d], of = (double)o, sin = __dmul_rn(s, (double)in);
  double hp = __ddiv_rn(__dadd_rn(of, 0.5), s);
  switch (p.ctm) {
    case PK_CTM_HALF_PIXEL: return __dsub_rn(hp, 0.5);
    case PK_CTM_PYTORCH_HALF_PIXEL: return out > 1 ? __dsub_rn(hp, 0.5) : 0;
    case PK_CTM_ALIGN_CORNERS: return sin != 1 ? __ddiv_rn(__dmul_rn(of, (double)(in - 1)), __dsub_rn(sin, 1.0)) : 0;
    case PK_CTM_ASYMMETRIC: return __ddiv_rn(of, s);
    case PK_CTM_TF_HALF_PIXEL_FOR_NEAREST: return hp;
    case PK_CTM_TF_CROP_AND_RESIZE: {
      double w = __dsub_rn(p.roi1[d], p.roi0[d]), span = (double)(in - 1);
      double xo = sin != 1 ? __ddiv_rn(__dmul_rn(__dmul_rn(of, w), span), __dsub_rn(sin, 1.0))
                           : __ddiv_rn(__dmul_rn(w, span), 2.0);
      return __dadd_rn(xo, __dmul_rn(p.roi0[d], span));
    }
    default: {
      double adj = __ddiv_rn((double)out, sin), center = __ddiv_rn((double)in, 2.0);
      double off = __dmul_rn(center, __dsub_rn(1.0, adj));
      return __dsub_rn(__dadd_rn(off, hp), 0.5);
    }
  }
}

__device__ __forceinline__ bool resize_outside(const pk_resize_p &p, double xo, int64_t in) {
  return p.ctm == PK_CTM_TF_CROP_AND_RESIZE && (xo < 0 || xo > (double)(in - 1));
}

/* Multilinear value at base offset off: the corners of the active dims (weight of the
 * upper neighbour not 0) in the cpu target's corner order (a dim of weight 0 only
 * multiplies by 1 there), each weight rounded before it is added. */
template <typename T>
__device__ double resize_corners(const T *x, int64_t off, int na, const int *act, const int64_t *step,
                                 const double *wt) {
  double s = 0;
  for (int c = 0; c < 1 << na; c++) {
    int64_t o2 = off;
    double w = 1;
    for (int a = 0; a < na; a++) {
      int d = act[a];
      if (c >> a & 1) {
        o2 += step[d];
        w = __dmul_rn(w, wt[d]);
      } else {
        w = __dmul_rn(w, __dsub_rn(1.0, wt[d]));
      }
    }
    if (w != 0) s = __dadd_rn(s, __dmul_rn(w, (double)x[o2]));
  }
  return s;
}

/* Nearest (LINEAR false): T moves bits. Linear: T is float or double. */
template <typename T, bool LINEAR>
__global__ void k_resize(pk_resize_p p, const T *__restrict__ x, T *__restrict__ y, int64_t total) {
  GRID_LOOP(t, total) {
    int64_t step[PK_MAX_RANK];
    double wt[PK_MAX_RANK];
    int act[PK_MAX_RANK], na = 0;
    int64_t r = t, xs = 1, off = 0;
    bool out = false;
    for (int d = p.rank - 1; d >= 0; d--) {
      int64_t o = r % p.ydims[d], I = p.xdims[d], k;
      r /= p.ydims[d];
      double xo = resize_coord(p, d, o, I, p.ydims[d]);
      out = out || resize_outside(p, xo, I);
      if constexpr (LINEAR) {
        if (xo < 0) xo = 0;
        if (xo > (double)(I - 1)) xo = (double)(I - 1);
        k = (int64_t)floor(xo);
        step[d] = (k + 1 < I ? 1 : 0) * xs;
        wt[d] = __dsub_rn(xo, (double)k);
      } else {
        switch (p.nearest) {
          case PK_NEAREST_FLOOR: k = (int64_t)floor(xo); break;
          case PK_NEAREST_CEIL: k = (int64_t)ceil(xo); break;
          case PK_NEAREST_ROUND_PREFER_CEIL: k = (int64_t)floor(__dadd_rn(xo, 0.5)); break;
          default: k = xo == __dadd_rn(floor(xo), 0.5) ? (int64_t)floor(xo) : (int64_t)floor(__dadd_rn(xo, 0.5)); break;
        }
        k = k < 0 ? 0 : k >= I ? I - 1 : k;
      }
      off += k * xs;
      xs *= I;
    }
    if constexpr (LINEAR) {
      for (int d = 0; d < p.rank; d++)
        if (wt[d] != 0) act[na++] = d;
      y[t] = out ? (T)p.extrapolation : (T)resize_corners(x, off, na, act, step, wt);
    } else {
      (void)step, (void)wt, (void)act, (void)na;
      y[t] = out ? (T)p.extrap_bits : x[off];
    }
  }
}

/* cg_resize_taps's unnormalised weight of tap i of n, the same expressions */
__device__ double resize_coeff(const pk_resize_p &p, int d, double ratio, int i, int n) {
  double a = p.cubic_a, s = p.scales[d] < 1 ? p.scales[d] : 1;
  double t = __dsub_rn((double)(1 - n / 2 + i), ratio);
  if (!p.antialias) {
    double q = i < 2 ? ratio : __dsub_rn(1.0, ratio);
    if (i == 0 || i == 3) {
      double q1 = __dadd_rn(q, 1.0);
      double v = __dmul_rn(__dsub_rn(__dmul_rn(a, q1), __dmul_rn(5.0, a)), q1);
      return __dsub_rn(__dmul_rn(__dadd_rn(v, __dmul_rn(8.0, a)), q1), __dmul_rn(4.0, a));
    }
    return __dadd_rn(__dmul_rn(__dmul_rn(__dsub_rn(__dmul_rn(__dadd_rn(a, 2.0), q), __dadd_rn(a, 3.0)), q), q), 1.0);
  }
  if (p.mode == PK_RESIZE_LINEAR) {
    double c = __dsub_rn(1.0, fabs(__dmul_rn(t, s)));
    return c < 0 ? 0 : c > 1 ? 1 : c;
  }
  double u = fabs(__dmul_rn(s, t)), u2 = __dmul_rn(u, u), u3 = __dmul_rn(u, u2);
  if (u <= 1) return __dadd_rn(__dsub_rn(__dmul_rn(__dadd_rn(a, 2.0), u3), __dmul_rn(__dadd_rn(a, 3.0), u2)), 1.0);
  if (u < 2) {
    double v = __dsub_rn(__dmul_rn(a, u3), __dmul_rn(__dmul_rn(5.0, a), u2));
    return __dsub_rn(__dadd_rn(v, __dmul_rn(__dmul_rn(8.0, a), u)), __dmul_rn(4.0, a));
  }
  return 0;
}

/* Filter taps along dim d at coordinate xo as cg_resize_taps: the first index, the
 * ratio, the sums that normalise the weights (antialias; exclude_outside) */
struct resize_dim {
  int64_t first;
  double ratio, sum1, sum2;
};

__device__ resize_dim resize_taps(const pk_resize_p &p, int d, double xo, int64_t in) {
  resize_dim r = {(int64_t)xo, 0, 1, 1};
  if (!p.resized[d]) return r;
  int n = p.taps[d];
  double fl = floor(xo);
  r.ratio = xo == fl ? 1 : __dsub_rn(xo, fl);
  r.first = (int64_t)fl - (xo == fl) + 1 - n / 2;
  if (p.antialias) {
    r.sum1 = 0;
    for (int i = 0; i < n; i++) r.sum1 = __dadd_rn(r.sum1, resize_coeff(p, d, r.ratio, i, n));
  }
  if (p.exclude_outside) {
    r.sum2 = 0;
    for (int i = 0; i < n; i++) {
      double w = resize_coeff(p, d, r.ratio, i, n);
      if (p.antialias) w = __ddiv_rn(w, r.sum1);
      if (r.first + i < 0 || r.first + i >= in) w = 0;
      r.sum2 = __dadd_rn(r.sum2, w);
    }
  }
  return r;
}

/* weight of tap i: cg_resize_taps's w[i] */
__device__ double resize_tap(const pk_resize_p &p, int d, const resize_dim &r, int i, int64_t in) {
  if (!p.resized[d]) return 1;
  double w = resize_coeff(p, d, r.ratio, i, p.taps[d]);
  if (p.antialias) w = __ddiv_rn(w, r.sum1);
  if (p.exclude_outside) w = __ddiv_rn(r.first + i < 0 || r.first + i >= in ? 0.0 : w, r.sum2);
  return w;
}

/* Cubic, antialiased linear (T float or double): the sum over the tuples of taps in the
 * cpu target's order (the last dim fastest), each weight the product of the dims' in
 * dim order; a tuple of weight 0 adds nothing. */
template <typename T>
__global__ void k_resize_filter(pk_resize_p p, const T *__restrict__ x, T *__restrict__ y, int64_t total) {
  GRID_LOOP(t, total) {
    resize_dim dim[PK_MAX_RANK];
    int64_t stride[PK_MAX_RANK];
    int j[PK_MAX_RANK];
    int64_t r = t, xs = 1;
    bool out = false;
    for (int d = p.rank - 1; d >= 0; d--) {
      int64_t o = r % p.ydims[d], I = p.xdims[d];
      r /= p.ydims[d];
      double xo = resize_coord(p, d, o, I, p.ydims[d]);
      out = out || resize_outside(p, xo, I);
      dim[d] = resize_taps(p, d, xo, I);
      stride[d] = xs;
      xs *= I;
      j[d] = 0;
    }
    if (out) {
      y[t] = (T)p.extrapolation;
      continue;
    }
    double s = 0;
    for (;;) {
      double w = 1;
      int64_t off = 0;
      for (int d = 0; d < p.rank; d++) {
        int64_t I = p.xdims[d], k = dim[d].first + j[d];
        w = __dmul_rn(w, resize_tap(p, d, dim[d], j[d], I));
        off += (k < 0 ? 0 : k >= I ? I - 1 : k) * stride[d];
      }
      if (w != 0) s = __dadd_rn(s, __dmul_rn(w, (double)x[off]));
      int d = p.rank - 1;
      while (d >= 0 && ++j[d] == p.taps[d]) j[d--] = 0;
      if (d < 0) break;
    }
    y[t] = (T)s;
  }
}

template <typename T, bool LINEAR = false>
static void launch_resize(pk_stage *S, const pk_resize_p *p, const void *x, void *y, int64_t t) {
  k_resize<T, LINEAR><<<pk_grid(t), PK_THREADS, 0, S->stream>>>(*p, (const T *)x, (T *)y, t);
}

template <typename T>
static void launch_resize_filter(pk_stage *S, const pk_resize_p *p, const void *x, void *y, int64_t t) {
  k_resize_filter<T><<<pk_grid(t), PK_THREADS, 0, S->stream>>>(*p, (const T *)x, (T *)y, t);
}

extern "C" int pk_resize(pk_stage *S, const pk_resize_p *p, const void *x, void *y) {
  int64_t t = 1;
  for (int d = 0; d < p->rank; d++) t *= p->ydims[d];
  if (t == 0) return 0;
  if (p->mode == PK_RESIZE_NEAREST) {
    PK_BITS(S, "Resize", p->esize, launch_resize, S, p, x, y, t);
  } else if (p->dtype != PK_F64 && p->dtype != PK_F32) {
    return pk_fail(S, "Resize", "linear and cubic modes need float32 or float64");
  } else if (p->filter) {
    if (p->dtype == PK_F64) launch_resize_filter<double>(S, p, x, y, t);
    else launch_resize_filter<float>(S, p, x, y, t);
  } else if (p->dtype == PK_F64) launch_resize<double, true>(S, p, x, y, t);
  else launch_resize<float, true>(S, p, x, y, t);
  return pk_check_launch(S);
}

template <typename T>
__global__ void k_lrn(const T *__restrict__ x, T *__restrict__ y, int64_t c, int64_t sp, int64_t lo, int64_t hi,
                      double bias, double alpha_n, double beta, int64_t total) {
  GRID_LOOP(t, total) {
    int64_t i = t % sp, r = t / sp, ch = r % c, n = r / c;
    double s = 0;
    for (int64_t k = ch - lo; k <= ch + hi; k++) {
      if (k < 0 || k >= c) continue;
      double v = (double)x[(n * c + k) * sp + i];
      s = __dadd_rn(s, __dmul_rn(v, v));
    }
    y[t] = (T)__ddiv_rn((double)x[t], pow(__dadd_rn(bias, __dmul_rn(alpha_n, s)), beta));
  }
}

extern "C" int pk_lrn(pk_stage *S, int dtype, const void *x, void *y, int64_t n, int64_t c, int64_t sp, int64_t lo,
                      int64_t hi, double bias, double alpha_n, double beta) {
  int64_t t = n * c * sp;
  if (t == 0) return 0;
  if (dtype == PK_F64)
    k_lrn<double><<<pk_grid(t), PK_THREADS, 0, S->stream>>>((const double *)x, (double *)y, c, sp, lo, hi, bias,
                                                            alpha_n, beta, t);
  else
    k_lrn<float>
        <<<pk_grid(t), PK_THREADS, 0, S->stream>>>((const float *)x, (float *)y, c, sp, lo, hi, bias, alpha_n, beta, t);
  return pk_check_launch(S);
}

/* ---- stage life cycle ---------------------------------------------------------------------------- */

static void set_where(pk_stage *S) {
  cudaDeviceProp prop;
  int named = cudaGetDeviceProperties(&prop, S->device) == cudaSuccess;
  if (named) snprintf(S->where, sizeof S->where, "stage %d on cuda:%d (%.200s)", S->info->id, S->device, prop.name);
  else snprintf(S->where, sizeof S->where, "stage %d on cuda:%d", S->info->id, S->device);
  if (named) snprintf(S->dev_word, sizeof S->dev_word, "%.63s", prop.name);
  else snprintf(S->dev_word, sizeof S->dev_word, "cuda%d", S->device);
  for (char *p = S->dev_word; *p; p++)
    if (*p == ' ' || *p == '\t' || *p == '\n') *p = '_';
}

static void stage_free(pk_stage *S) {
  if (!S) return;
  if (S->device >= 0) cudaSetDevice(S->device);
  if (S->conv) {
    for (int i = 0; i < S->info->n_conv; i++) {
      struct pk_conv_s *c = &S->conv[i];
      if (c->x) cudnnDestroyTensorDescriptor(c->x);
      if (c->y) cudnnDestroyTensorDescriptor(c->y);
      if (c->w) cudnnDestroyFilterDescriptor(c->w);
      if (c->conv) cudnnDestroyConvolutionDescriptor(c->conv);
      if (c->vp) cudnnBackendDestroyDescriptor(c->vp);
    }
    free(S->conv);
  }
  while (S->gplans) {
    struct pk_gplan *n = S->gplans->next;
    gplan_free(S->gplans);
    S->gplans = n;
  }
  if (S->ustream) cudaStreamSynchronize(S->ustream); /* async mode: uploads and parts still queued */
  if (S->stream) cudaStreamSynchronize(S->stream);
  if (S->ev) {
    for (int i = 0; i <= S->info->n_units; i++)
      if (S->ev[i]) cudaEventDestroy(S->ev[i]);
    free(S->ev);
  }
  if (S->cstream) cudaStreamSynchronize(S->cstream);
  for (int i = 0; i < 2 * PK_TIMING_RING; i++)
    if (S->tev[i]) cudaEventDestroy(S->tev[i]);
  for (int i = 0; i < PK_COMM_RING; i++)
    if (S->cev[i]) cudaEventDestroy(S->cev[i]);
  free(S->cop);
  for (int k = 0; k < 3; k++)
    if (S->exec[k]) cudaGraphExecDestroy(S->exec[k]);
  while (S->lt_plans) {
    struct pk_lt_plan *n = S->lt_plans->next;
    lt_plan_free(S->lt_plans);
    S->lt_plans = n;
  }
  if (S->lt) cublasLtDestroy((cublasLtHandle_t)S->lt);
  if (S->cublas) cublasDestroy((cublasHandle_t)S->cublas);
  if (S->cudnn) cudnnDestroy((cudnnHandle_t)S->cudnn);
  if (S->w) cudaFree(S->w);
  if (S->io) cudaFree(S->io);
  if (S->a) cudaFree(S->a);
  if (S->ws) cudaFree(S->ws);
  if (S->bad) cudaFree(S->bad);
  if (S->bad_host) cudaFreeHost(S->bad_host);
  if (S->sum_tmp) cudaFree(S->sum_tmp);
  if (S->stream) cudaStreamDestroy(S->stream);
  if (S->cstream) cudaStreamDestroy(S->cstream);
  if (S->ustream) cudaStreamDestroy(S->ustream);
  free(S);
}

extern "C" int pk_stage_init(void **state, const pk_stage_info *info, int tf32, const void *weights,
                             size_t weights_len) {
  *state = NULL;
  pk_stage *S = (pk_stage *)calloc(1, sizeof *S);
  if (!S) return 1;
  S->info = info;
  S->tf32 = tf32;
  S->unit = -1;
  S->device = -1;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    fprintf(stderr, "pipeline: stage %d: no CUDA device (%s)\n", info->id,
            e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    free(S);
    return 1;
  }
  /* the plan's device (a replica of a stage on a device of its own, as planned), modulo
   * the devices there are; PIPECC_CUDA_DEVICE pins every stage (and names the local
   * rank's device under MPI) */
  const char *pin = getenv("PIPECC_CUDA_DEVICE");
  int planned = pipert_init_device();
  S->device = pin && *pin ? atoi(pin) % ndev : (planned >= 0 ? planned : info->id) % ndev;
  set_where(S);
  const char *gr = getenv("PIPECC_CUDA_GRAPH");
  S->use_graph = !(gr && !strcmp(gr, "0"));
  int ok = cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") &&
           cu_ok(S, cudaStreamCreateWithFlags(&S->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudnnHandle_t dnn = NULL;
  cublasHandle_t blas = NULL;
  ok = ok && dnn_ok(S, cudnnCreate(&dnn), "cudnnCreate");
  S->cudnn = dnn;
  ok = ok && dnn_ok(S, cudnnSetStream(dnn, S->stream), "cudnnSetStream");
  ok = ok && blas_ok(S, cublasCreate(&blas), "cublasCreate");
  S->cublas = blas;
  ok = ok && blas_ok(S, cublasSetStream(blas, S->stream), "cublasSetStream");
  cublasLtHandle_t lt = NULL;
  ok = ok && blas_ok(S, cublasLtCreate(&lt), "cublasLtCreate");
  S->lt = lt;
  /* weights: uploaded once; a training program's parameter memory goes on with zeros */
  size_t pbytes = info->param_bytes > weights_len ? info->param_bytes : weights_len;
  if (ok && pbytes) {
    ok = cu_ok(S, cudaMalloc((void **)&S->w, pbytes), "cudaMalloc(weights)") &&
         (!weights_len ||
          cu_ok(S, cudaMemcpy(S->w, weights, weights_len, cudaMemcpyHostToDevice), "cudaMemcpy(weights)")) &&
         (pbytes == weights_len ||
          cu_ok(S, cudaMemset(S->w + weights_len, 0, pbytes - weights_len), "cudaMemset(parameters)"));
  }
  if (ok && info->io_bytes) ok = cu_ok(S, cudaMalloc((void **)&S->io, info->io_bytes), "cudaMalloc(inputs/outputs)");
  if (ok && info->arena_bytes) {
    ok = cu_ok(S, cudaMalloc((void **)&S->a, info->arena_bytes), "cudaMalloc(arena)") &&
         cu_ok(S, cudaMemset(S->a, 0, info->arena_bytes), "cudaMemset(arena)");
  }
  /* convolutions: descriptors and algorithms once, one shared workspace */
  if (ok && info->n_conv) {
    S->conv = (struct pk_conv_s *)calloc((size_t)info->n_conv, sizeof *S->conv);
    ok = S->conv != NULL;
    for (int i = 0; ok && i < info->n_conv; i++) {
      S->unit = -1;
      ok = conv_setup(S, &S->conv[i], &info->conv[i]) == 0;
    }
    if (ok && conv_graph_wanted() && getenv("PIPECC_CONV_VERBOSE")) {
      int n = 0, m = 0;
      for (int i = 0; i < info->n_conv; i++) {
        n += S->conv[i].plan != NULL;
        m += !info->conv[i].transposed && info->conv[i].dtype == PK_F32;
      }
      fprintf(stderr, "pipeline: %s: %d of %d forward float32 convolutions through cuDNN's graph API\n", S->where, n,
              m);
    }
  }
  /* cuBLAS uses the same workspace (the stream orders its uses); at least 32 MiB */
  if (S->ws_bytes < ((size_t)32 << 20)) S->ws_bytes = (size_t)32 << 20;
  if (ok) ok = cu_ok(S, cudaMalloc(&S->ws, S->ws_bytes), "cudaMalloc(workspace)");
  if (ok)
    ok = cu_ok(S, cudaMalloc(&S->bad, 4 * sizeof *S->bad), "cudaMalloc(index checks)") &&
         cu_ok(S, cudaMemset(S->bad, 0, 4 * sizeof *S->bad), "cudaMemset(index checks)") &&
         cu_ok(S, cudaMallocHost(&S->bad_host, 4 * sizeof *S->bad_host), "cudaMallocHost(index checks)");
  if (ok) memset(S->bad_host, 0, 4 * sizeof *S->bad_host);
  if (ok) ok = blas_ok(S, cublasSetWorkspace(blas, S->ws, S->ws_bytes), "cublasSetWorkspace");
  if (ok) ok = cu_ok(S, cudaDeviceSynchronize(), "cudaDeviceSynchronize(init)");
  if (!ok) {
    stage_free(S);
    return 1;
  }
  *state = S;
  return 0;
}

/* ---- hand-over between stages sharing a device, by events ---------------------------- */
/* In async mode (dev_async) a stage's forward/backward returns once its work is queued on
 * its stream; no host thread waits for the device except to download graph outputs and at
 * the end. runtime/rt_handover.c orders the buffers dev_alloc made (the sets stages hand
 * each other, graph input copies): readers' streams wait for the writer's event, the next
 * writer's for the readers'. Its streams are a stage's pk_hstreams (its work, its
 * uploads), its events CUDA's. */
static void *ho_event_new(void *stream) { /* on the stream's device: recorded there */
  pk_stage *S = ((struct pk_hstream *)stream)->S;
  cudaEvent_t e = NULL;
  return cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") &&
                 cu_ok(S, cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate(hand-over)")
             ? (void *)e
             : NULL;
}
static void ho_event_free(void *event) { cudaEventDestroy((cudaEvent_t)event); }
static int ho_record(void *stream, void *event) {
  struct pk_hstream *h = (struct pk_hstream *)stream;
  return cu_ok(h->S, cudaEventRecord((cudaEvent_t)event, h->s), "cudaEventRecord(hand-over)") ? 0 : 1;
}
static int ho_wait(void *stream, void *event) {
  struct pk_hstream *h = (struct pk_hstream *)stream;
  return cu_ok(h->S, cudaStreamWaitEvent(h->s, (cudaEvent_t)event, 0), "cudaStreamWaitEvent(hand-over)") ? 0 : 1;
}
static int ho_finish(void *stream) {
  struct pk_hstream *h = (struct pk_hstream *)stream;
  return cu_ok(h->S, cudaStreamSynchronize(h->s), "cudaStreamSynchronize") ? 0 : 1;
}
static void ho_sync(void *event) {
  if (cudaEventSynchronize((cudaEvent_t)event) != cudaSuccess) cudaGetLastError();
}
static const rt_ho_ops ho_ops = {ho_event_new, ho_event_free, ho_record, ho_wait, ho_finish, ho_sync};

/* on the stage's stream (u = 0), its upload stream (u = 1) or its NCCL stream (u = 2);
 * 1 on success, as cu_ok */
static int before_read_on(pk_stage *S, int u, const void *p) { return rt_ho_before_read(&ho_ops, &S->hs[u], p) == 0; }
static int after_read_on(pk_stage *S, int u, const void *p) { return rt_ho_after_read(&ho_ops, &S->hs[u], p) == 0; }
static int before_read(pk_stage *S, const void *p) { return before_read_on(S, 0, p); }
static int after_read(pk_stage *S, const void *p) { return after_read_on(S, 0, p); }
static int before_write(pk_stage *S, int u, const void *p) { return rt_ho_before_write(&ho_ops, &S->hs[u], p) == 0; }
static int after_write(pk_stage *S, int u, const void *p, int complete) {
  return rt_ho_after_write(&ho_ops, &S->hs[u], p, complete) == 0;
}

/* Busy time from the queued parts' event pairs, oldest first: those complete, after
 * waiting until at most keep parts are still queued. */
static int harvest(pk_stage *S, int keep) {
  while (S->t_n > 0) {
    cudaEvent_t a = S->tev[2 * S->t_first], b = S->tev[2 * S->t_first + 1];
    if (S->t_n > keep) {
      if (!dev_wait(S, NULL, b, "cudaEventSynchronize")) return 1;
    } else {
      cudaError_t q = cudaEventQuery(b);
      if (q == cudaErrorNotReady) break;
      if (!cu_ok(S, q, "cudaEventQuery")) return 1;
    }
    float ms = 0;
    if (cudaEventElapsedTime(&ms, a, b) == cudaSuccess) S->busy_s += ms * 1e-3;
    cudaGetLastError();
    S->t_first = (S->t_first + 1) % PK_TIMING_RING;
    S->t_n--;
  }
  return 0;
}

/* Run part k's units: eagerly on the first call (libraries load kernels and make their
 * plans' lazy state then, outside a capture, as CUDA's graph guide asks of a warm-up),
 * captured into a graph on the second, which every later call replays. */
static int run_units(pk_stage *S, int k, const pk_part *P) {
  if (!S->use_graph || S->ev) return P->run(S);
  if (!S->captured[k]) {
    S->captured[k] = 1; /* warmed up */
    return P->run(S);
  }
  if (S->captured[k] == 1) {
    S->captured[k] = 2;
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(S->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      S->use_graph = 0;
      return P->run(S);
    }
    int rc = P->run(S);
    cudaError_t e = cudaStreamEndCapture(S->stream, &graph);
    if (rc) {
      if (graph) cudaGraphDestroy(graph);
      return rc;
    }
    if (e != cudaSuccess || cudaGraphInstantiate(&S->exec[k], graph, 0) != cudaSuccess) {
      /* capture not possible here: run eagerly from now on */
      cudaGetLastError();
      if (graph) cudaGraphDestroy(graph);
      S->exec[k] = NULL;
      S->use_graph = 0;
      return P->run(S);
    }
    cudaGraphDestroy(graph);
  }
  S->unit = -1;
  return cu_ok(S, cudaGraphLaunch(S->exec[k], S->stream), "cudaGraphLaunch") ? 0 : 1;
}

/* Inputs in, part k's units, outputs out, synchronised; in[]/out[] are host memory, or
 * device memory when dev (copied within the device: the graph's addresses are fixed). */
/* A run-time index out of range seen by a kernel (pk_stage.bad), once the work is done:
 * said through pipert_bad_input (the runtime prints it, naming the stage and micro-batch),
 * 1; else 0. */
static int bad_index(pk_stage *S) {
  if (!S->bad_used || !S->bad_host[0]) return 0;
  unsigned long long info = S->bad_host[3];
  int unit = (int)(info >> 8), axis = (int)(info & 0xff);
  pipert_bad_input(unit >= 0 && unit < S->info->n_units ? S->info->unit_names[unit] : "a unit",
                   "index %lld is out of range for axis %d of size %lld", (long long)S->bad_host[1], axis,
                   (long long)S->bad_host[2]);
  return 1;
}

static int run_part(pk_stage *S, int k, const pk_part *P, const void *const *in, void *const *out, int dev) {
  S->unit = -1;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice")) return 1;
  int async = dev && S->async;
  if (async) {
    /* a free slot for this part's timing events: wait for the oldest when all are queued */
    if (harvest(S, PK_TIMING_RING - 1)) return 1;
    for (int i = 0; i < P->n_in; i++)
      if (P->in_bytes[i] && !before_read(S, in[i])) return 1;
    int slot = (S->t_first + S->t_n) % PK_TIMING_RING;
    if (!cu_ok(S, cudaEventRecord(S->tev[2 * slot], S->stream), "cudaEventRecord(busy)")) return 1;
  }
  for (int i = 0; i < P->n_in; i++)
    if (P->in_bytes[i] && !cu_ok(S,
                                 cudaMemcpyAsync(S->io + P->in_off[i], in[i], P->in_bytes[i],
                                                 dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, S->stream),
                                 "cudaMemcpyAsync(input)"))
      return 1;
  for (int i = 0; async && i < P->n_in; i++)
    if (P->in_bytes[i] && !after_read(S, in[i])) return 1;
  /* the second call captures the part: from an idle stream, as in synchronous mode */
  if (async && S->use_graph && S->captured[k] == 1 && !dev_wait(S, S->stream, NULL, "cudaStreamSynchronize")) return 1;
  if (run_units(S, k, P)) return 1;
  S->unit = -1;
  if (S->bad_used &&
      !cu_ok(S, cudaMemcpyAsync(S->bad_host, S->bad, 4 * sizeof *S->bad, cudaMemcpyDeviceToHost, S->stream),
             "cudaMemcpyAsync(index checks)"))
    return 1;
  for (int i = 0; async && i < P->n_out; i++)
    if (P->out_bytes[i] && !before_write(S, 0, out[i])) return 1;
  for (int i = 0; i < P->n_out; i++)
    if (P->out_bytes[i] && !cu_ok(S,
                                  cudaMemcpyAsync(out[i], S->io + P->out_off[i], P->out_bytes[i],
                                                  dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost, S->stream),
                                  "cudaMemcpyAsync(output)"))
      return 1;
  if (!async)
    return !dev_wait(S, S->stream, NULL, "cudaStreamSynchronize") ? 1 : bad_index(S) ? PIPERT_STATUS_BAD_INPUT : 0;
  for (int i = 0; i < P->n_out; i++)
    if (P->out_bytes[i] && !after_write(S, 0, out[i], 0)) return 1;
  int slot = (S->t_first + S->t_n) % PK_TIMING_RING;
  if (!cu_ok(S, cudaEventRecord(S->tev[2 * slot + 1], S->stream), "cudaEventRecord(busy)")) return 1;
  S->t_n++;
  /* launch failures show now; faults while running show at the next wait, perhaps in
   * another stage (PIPERT_SYNC_SETS=1 runs every part to its end) */
  return cu_ok(S, cudaGetLastError(), "kernel launch") ? 0 : 1;
}

extern "C" int pk_stage_forward(void *state, const void *const *in, void *const *out) {
  pk_stage *S = (pk_stage *)state;
  return run_part(S, 0, &S->info->fwd, in, out, 0);
}

extern "C" int pk_stage_backward(void *state, const void *const *in, void *const *out) {
  pk_stage *S = (pk_stage *)state;
  return S->info->bwd ? run_part(S, 1, S->info->bwd, in, out, 0) : pk_fail(S, "backward", "not a training program");
}

extern "C" int pk_stage_step(void *state) {
  pk_stage *S = (pk_stage *)state;
  return S->info->upd ? run_part(S, 2, S->info->upd, NULL, NULL, 0) : pk_fail(S, "step", "not a training program");
}

/* ---- the device form (pipert_device_ops) ---- */

static int dev_ordinal(void *state) { return ((pk_stage *)state)->device; }

static void *dev_alloc(void *state, size_t nbytes) {
  pk_stage *S = (pk_stage *)state;
  void *p = NULL;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") ||
      !cu_ok(S, cudaMalloc(&p, nbytes ? nbytes : 1), "cudaMalloc(stage outputs)"))
    return NULL;
  if (rt_ho_add(p, nbytes)) {
    pk_fail(S, "hand-over", "out of host memory");
    cudaFree(p);
    return NULL;
  }
  return p;
}

static void dev_release(void *state, void *p) {
  /* its last write and reads first, on whichever device they were queued: cudaFree waits
   * for this device only (a reader on another GPU may still copy p after a failed run) */
  rt_ho_remove(&ho_ops, p);
  cudaSetDevice(((pk_stage *)state)->device);
  cudaFree(p); /* waits for the device: no queued reads or writes of p are left */
}

static int dev_copy(void *state, void *dst, const void *src, size_t n, cudaMemcpyKind kind, const char *what) {
  pk_stage *S = (pk_stage *)state;
  S->unit = -1;
  return cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") && stream_copy(S, dst, src, n, kind, what) ? 0 : 1;
}

/* async mode: queued on the upload stream (from pinned memory it overlaps the stage's
 * work), ordered before the reads by the hand-over; the host memory stays untouched
 * until dev_busy at the end of the run */
static int dev_upload(void *state, void *dev, const void *host, size_t n) {
  pk_stage *S = (pk_stage *)state;
  if (!S->async) return dev_copy(state, dev, host, n, cudaMemcpyHostToDevice, "cudaMemcpy(graph input)");
  S->unit = -1;
  return cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") && before_write(S, 1, dev) &&
                 cu_ok(S, cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, S->ustream),
                       "cudaMemcpyAsync(graph input)") &&
                 after_write(S, 1, dev, 0)
             ? 0
             : 1;
}

static int dev_download(void *state, void *host, const void *dev, size_t n) {
  pk_stage *S = (pk_stage *)state;
  if (S->async && (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") || !before_read(S, dev))) return 1;
  return dev_copy(state, host, dev, n, cudaMemcpyDeviceToHost, "cudaMemcpy(graph output)");
}

/* Stages on one device hand over by events (see before_read); off: every part ends with
 * its stream synchronised, as between processes. */
static int dev_async(void *state, int on) {
  pk_stage *S = (pk_stage *)state;
  S->unit = -1;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") ||
      (S->ustream && !cu_ok(S, cudaStreamSynchronize(S->ustream), "cudaStreamSynchronize(uploads)")) ||
      !cu_ok(S, cudaStreamSynchronize(S->stream), "cudaStreamSynchronize") || harvest(S, 0))
    return 1;
  for (int i = 0; on && i < 2 * PK_TIMING_RING; i++)
    if (!S->tev[i] && !cu_ok(S, cudaEventCreate(&S->tev[i]), "cudaEventCreate(busy)")) return 1;
  if (on && !S->ustream &&
      !cu_ok(S, cudaStreamCreateWithFlags(&S->ustream, cudaStreamNonBlocking), "cudaStreamCreate(uploads)"))
    return 1;
  S->hs[0].S = S->hs[1].S = S->hs[2].S = S;
  S->hs[0].s = S->stream;
  S->hs[1].s = S->ustream;
  S->hs[2].s = S->cstream;
  S->async = on;
  return 0;
}

/* Seconds the parts queued since the last call ran on the device (waits for them, and
 * for the uploads: the host's input arrays are free again). */
static double dev_busy(void *state) {
  pk_stage *S = (pk_stage *)state;
  if (!S->async) return -1;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") ||
      (S->cstream && !dev_wait(S, S->cstream, NULL, "NCCL send/receive")) ||
      !dev_wait(S, S->ustream, NULL, "cudaStreamSynchronize(uploads)") || harvest(S, 0) || bad_index(S))
    return -1;
  double b = S->busy_s;
  S->busy_s = 0;
  return b;
}

static int dev_forward(void *state, const void *const *in, void *const *out) {
  pk_stage *S = (pk_stage *)state;
  return run_part(S, 0, &S->info->fwd, in, out, 1);
}

static int dev_backward(void *state, const void *const *in, void *const *out) {
  pk_stage *S = (pk_stage *)state;
  return S->info->bwd ? run_part(S, 1, S->info->bwd, in, out, 1) : pk_fail(S, "backward", "not a training program");
}

/* ---- NCCL between processes: non-blocking communicators, so that a wait can time out ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* PIPECC_NCCL_TIMEOUT seconds (default 600) for one group of sends/receives. */
static double nccl_timeout(void) {
  const char *v = getenv("PIPECC_NCCL_TIMEOUT");
  double t = v ? atof(v) : 600;
  return t > 0 ? t : 600;
}

static int nccl_fail(pk_stage *S, ncclComm_t c, const char *what, ncclResult_t r) {
  char detail[256];
  snprintf(detail, sizeof detail, "%s (%s)", ncclGetErrorString(r), ncclGetLastError(c));
  return pk_fail(S, what, detail);
}

/* Waits for comm c's calls to be queued (a non-blocking communicator) and then, when
 * given, for stream s or event e to complete: within the timeout, checking c for errors. */
static int nccl_poll(pk_stage *S, ncclComm_t c, cudaStream_t s, cudaEvent_t e, const char *what) {
  double t0 = now_s(), limit = nccl_timeout();
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c, &st);
    if (r != ncclSuccess) return nccl_fail(S, c, what, r);
    if (st != ncclSuccess && st != ncclInProgress) return nccl_fail(S, c, what, st);
    if (st == ncclSuccess) {
      if (!s && !e) return 0;
      cudaError_t q = e ? cudaEventQuery(e) : cudaStreamQuery(s);
      if (q == cudaSuccess) return 0;
      if (q != cudaErrorNotReady) return cu_ok(S, q, what) ? 0 : 1;
    }
    if (now_s() - t0 > limit) {
      ncclCommAbort(c);
      S->pcomm = NULL;
      char detail[160];
      snprintf(detail, sizeof detail,
               "timed out after %.0f s (PIPECC_NCCL_TIMEOUT; a peer or this device stopped?), communicator aborted",
               limit);
      return pk_fail(S, what, detail);
    }
    usleep(100);
  }
}

/* Waits for comm c's pending calls (and, when stream, for S->cstream) within the timeout. */
static int nccl_wait(pk_stage *S, ncclComm_t c, const char *what, int stream) {
  return nccl_poll(S, c, stream ? S->cstream : NULL, NULL, what);
}

/* The host waits for stream s (or event e) to complete. With transfers queued on the
 * device (async NCCL), the stage's work may wait for a peer: polled within the NCCL
 * timeout, so that a peer that stopped cannot hang this process. 1 on success, as cu_ok. */
static int dev_wait(pk_stage *S, cudaStream_t s, cudaEvent_t e, const char *what) {
  if (S->async && S->pcomm) return nccl_poll(S, (ncclComm_t)S->pcomm, s, e, what) == 0;
  return cu_ok(S, e ? cudaEventSynchronize(e) : cudaStreamSynchronize(s), what);
}

static int dev_comm_id(void *buf, size_t len) {
  ncclUniqueId id;
  if (len < sizeof id || ncclGetUniqueId(&id) != ncclSuccess) {
    fprintf(stderr, "pipeline: ncclGetUniqueId failed\n");
    return 1;
  }
  memcpy(buf, &id, sizeof id);
  return 0;
}

static void *dev_comm_init(void *state, const void *id, int nranks, int rank) {
  pk_stage *S = (pk_stage *)state;
  S->unit = -1;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice")) return NULL;
  if (!S->cstream && !cu_ok(S, cudaStreamCreateWithFlags(&S->cstream, cudaStreamNonBlocking), "cudaStreamCreate(comm)"))
    return NULL;
  S->hs[2].S = S;
  S->hs[2].s = S->cstream;
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof uid);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&c, nranks, uid, rank, &cfg);
  if ((r != ncclSuccess && r != ncclInProgress) || nccl_wait(S, c, "ncclCommInitRank", 0)) {
    if (r != ncclSuccess && r != ncclInProgress) nccl_fail(S, c, "ncclCommInitRank", r);
    return NULL;
  }
  return c;
}

/* A group's end. Synchronous mode: returns when its calls have completed. Async mode:
 * once they are queued on cstream; then each buffer's event is recorded there (a send
 * read it, a receive wrote it: runtime/rt_handover.c orders the stage's work and later
 * calls after them), and at most PK_COMM_RING groups stay queued (the oldest's
 * completion waited for within the timeout, which also bounds how far the host runs
 * ahead of its peers). */
static int dev_comm_group(void *state, void *comm, int begin) {
  pk_stage *S = (pk_stage *)state;
  ncclComm_t c = (ncclComm_t)comm;
  if (begin) return ncclGroupStart() == ncclSuccess ? 0 : pk_fail(S, "ncclGroupStart", "failed");
  ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(S, c, "ncclGroupEnd", r);
  if (!S->async) return nccl_wait(S, c, "NCCL send/receive", 1);
  S->pcomm = c;
  if (nccl_wait(S, c, "NCCL send/receive", 0)) return 1;
  for (int i = 0; i < S->n_cop; i++)
    if (!(S->cop[i].send ? after_read_on(S, 2, S->cop[i].p) : after_write(S, 2, S->cop[i].p, 0))) return 1;
  S->n_cop = 0;
  int slot = (int)(S->n_groups % PK_COMM_RING);
  if (S->n_groups >= PK_COMM_RING && !dev_wait(S, NULL, S->cev[slot], "NCCL send/receive")) return 1;
  if (!S->cev[slot] &&
      !cu_ok(S, cudaEventCreateWithFlags(&S->cev[slot], cudaEventDisableTiming), "cudaEventCreate(NCCL group)"))
    return 1;
  if (!cu_ok(S, cudaEventRecord(S->cev[slot], S->cstream), "cudaEventRecord(NCCL group)")) return 1;
  S->n_groups++;
  return 0;
}

/* async mode: the buffer's last write (send) or reads (receive) come first on cstream;
 * its events follow at the group's end */
static int comm_order(pk_stage *S, const void *buf, int send) {
  if (!S->async) return 0;
  if (S->n_cop == S->cap_cop) {
    int cap = S->cap_cop ? 2 * S->cap_cop : 16;
    struct pk_cop *n = (struct pk_cop *)realloc(S->cop, sizeof *n * (size_t)cap);
    if (!n) return pk_fail(S, "NCCL group", "out of host memory");
    S->cop = n;
    S->cap_cop = cap;
  }
  if (!(send ? before_read_on(S, 2, buf) : before_write(S, 2, buf))) return 1;
  S->cop[S->n_cop].p = buf;
  S->cop[S->n_cop++].send = send;
  return 0;
}

static int dev_comm_send(void *state, void *comm, const void *buf, size_t nbytes, int peer) {
  pk_stage *S = (pk_stage *)state;
  if (comm_order(S, buf, 1)) return 1;
  ncclResult_t r = ncclSend(buf, nbytes, ncclUint8, peer, (ncclComm_t)comm, S->cstream);
  return r == ncclSuccess || r == ncclInProgress ? 0 : nccl_fail(S, (ncclComm_t)comm, "ncclSend", r);
}

static int dev_comm_recv(void *state, void *comm, void *buf, size_t nbytes, int peer) {
  pk_stage *S = (pk_stage *)state;
  if (comm_order(S, buf, 0)) return 1;
  ncclResult_t r = ncclRecv(buf, nbytes, ncclUint8, peer, (ncclComm_t)comm, S->cstream);
  return r == ncclSuccess || r == ncclInProgress ? 0 : nccl_fail(S, (ncclComm_t)comm, "ncclRecv", r);
}

static int dev_comm_sum(void *state, void *comm, size_t offset, size_t nbytes, int dtype) {
  pk_stage *S = (pk_stage *)state;
  ncclComm_t c = (ncclComm_t)comm;
  void *p = S->w + offset;
  size_t es = dtype == PK_F64 ? 8 : 4;
  /* the update reads the sums on S->stream: the gradients are complete before, and the
   * all-reduce finishes (host wait) before anything else runs */
  if (!dev_wait(S, S->stream, NULL, "cudaStreamSynchronize")) return 1;
  ncclResult_t r = ncclAllReduce(p, p, nbytes / es, dtype == PK_F64 ? ncclDouble : ncclFloat, ncclSum, c, S->cstream);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(S, c, "ncclAllReduce", r);
  return nccl_wait(S, c, "ncclAllReduce of the gradients", 1);
}

static void dev_comm_free(void *state, void *comm) {
  (void)state;
  if (comm) ncclCommDestroy((ncclComm_t)comm);
}

/* ---- replicas of a stage in one process: gradients summed on the devices ---------------- */
/* a[i] = a[i] + b[i]: one rounding per element, as the host's sum (rt_sum_into), so either
 * path gives the same bits */
template <typename T>
__global__ void k_sum_into(T *a, const T *b, int64_t n) {
  GRID_LOOP(i, n) a[i] = a[i] + b[i];
}

/* Both states' queued work done (P's on its device, then S's), S's device current. */
static int idle_pair(pk_stage *S, pk_stage *P) {
  return cu_ok(P, cudaSetDevice(P->device), "cudaSetDevice") && dev_wait(P, P->stream, NULL, "cudaStreamSynchronize") &&
         cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") && dev_wait(S, S->stream, NULL, "cudaStreamSynchronize");
}

/* [offset, offset + nbytes) of replica P's parameter memory added into S's (float32 or
 * float64): copied device to device (peer) into S's scratch, then summed on S's stream. */
static int dev_param_sum(void *state, void *peer, size_t offset, size_t nbytes, int dtype) {
  pk_stage *S = (pk_stage *)state, *P = (pk_stage *)peer;
  S->unit = -1;
  if (offset > S->info->param_bytes || nbytes > S->info->param_bytes - offset) return 1;
  if (!idle_pair(S, P)) return 1;
  if (S->sum_tmp_bytes < nbytes) {
    if (S->sum_tmp) cudaFree(S->sum_tmp);
    S->sum_tmp = NULL;
    S->sum_tmp_bytes = 0;
    if (!cu_ok(S, cudaMalloc(&S->sum_tmp, nbytes), "cudaMalloc(gradient sum)")) return 1;
    S->sum_tmp_bytes = nbytes;
  }
  if (!cu_ok(S, cudaMemcpyAsync(S->sum_tmp, P->w + offset, nbytes, cudaMemcpyDefault, S->stream),
             "cudaMemcpyAsync(replica gradients)"))
    return 1;
  int64_t n = (int64_t)(nbytes / (dtype == PK_F64 ? 8 : 4));
  if (n > 0) {
    if (dtype == PK_F64)
      k_sum_into<double>
          <<<pk_grid(n), PK_THREADS, 0, S->stream>>>((double *)(S->w + offset), (const double *)S->sum_tmp, n);
    else
      k_sum_into<float>
          <<<pk_grid(n), PK_THREADS, 0, S->stream>>>((float *)(S->w + offset), (const float *)S->sum_tmp, n);
    if (pk_check_launch(S)) return 1;
  }
  return dev_wait(S, S->stream, NULL, "cudaStreamSynchronize") ? 0 : 1;
}

/* [offset, offset + nbytes) of replica P's parameter memory copied into S's (the sum, back
 * to every replica), device to device. */
static int dev_param_copy(void *state, void *peer, size_t offset, size_t nbytes) {
  pk_stage *S = (pk_stage *)state, *P = (pk_stage *)peer;
  S->unit = -1;
  if (offset > S->info->param_bytes || nbytes > S->info->param_bytes - offset) return 1;
  return idle_pair(S, P) &&
                 cu_ok(S, cudaMemcpyAsync(S->w + offset, P->w + offset, nbytes, cudaMemcpyDefault, S->stream),
                       "cudaMemcpyAsync(summed gradients)") &&
                 dev_wait(S, S->stream, NULL, "cudaStreamSynchronize")
             ? 0
             : 1;
}

/* Page-locks host memory for uploads; a failure (memory already registered by another
 * runner of the same arrays, or not registrable) leaves it pageable and clears the error. */
static int dev_pin(void *state, void *host, size_t nbytes, int on) {
  pk_stage *S = (pk_stage *)state;
  if (cudaSetDevice(S->device) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  /* portable: pinned for the uploads of stages on every device */
  cudaError_t e = on ? cudaHostRegister(host, nbytes, cudaHostRegisterPortable) : cudaHostUnregister(host);
  if (e != cudaSuccess) cudaGetLastError();
  return e != cudaSuccess;
}

/* Peer access from the stage's device to device `ordinal` (stages of one process on
 * several GPUs hand over device memory); quietly non-zero where the pair has none. */
static int dev_peer(void *state, int ordinal) {
  pk_stage *S = (pk_stage *)state;
  int can = 0;
  if (ordinal == S->device) return 0;
  if (cudaDeviceCanAccessPeer(&can, S->device, ordinal) != cudaSuccess || !can ||
      cudaSetDevice(S->device) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  cudaError_t e = cudaDeviceEnablePeerAccess(ordinal, 0);
  cudaGetLastError(); /* cudaErrorPeerAccessAlreadyEnabled is not sticky; clear it */
  return e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled;
}

extern "C" const pipert_device_ops pk_device_ops = {
    dev_ordinal, dev_alloc,     dev_release,    dev_upload,    dev_download,  dev_forward,   dev_backward,
    dev_comm_id, dev_comm_init, dev_comm_group, dev_comm_send, dev_comm_recv, dev_comm_sum,  dev_comm_free,
    dev_pin,     dev_async,     dev_busy,       dev_peer,      dev_param_sum, dev_param_copy};

extern "C" int pk_stage_zero_grads(void *state) {
  pk_stage *S = (pk_stage *)state;
  const pk_stage_info *I = S->info;
  S->unit = -1;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice")) return 1;
  for (int k = 0; k < I->n_grads; k++)
    if (!cu_ok(S, cudaMemsetAsync(S->w + I->grad_off[k], 0, I->grad_bytes[k], S->stream), "cudaMemsetAsync(gradients)"))
      return 1;
  return dev_wait(S, S->stream, NULL, "cudaStreamSynchronize") ? 0 : 1;
}

extern "C" int pk_stage_param_io(void *state, int write, size_t offset, void *host, size_t nbytes) {
  pk_stage *S = (pk_stage *)state;
  S->unit = -1;
  if (offset > S->info->param_bytes || nbytes > S->info->param_bytes - offset) return 1;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice") || !dev_wait(S, S->stream, NULL, "cudaStreamSynchronize"))
    return 1;
  return (write ? stream_copy(S, S->w + offset, host, nbytes, cudaMemcpyHostToDevice, "cudaMemcpy(parameter in)")
                : stream_copy(S, host, S->w + offset, nbytes, cudaMemcpyDeviceToHost, "cudaMemcpy(parameter out)"))
             ? 0
             : 1;
}

extern "C" void pk_stage_fini(void *state) { stage_free((pk_stage *)state); }

extern "C" void pk_mark(pk_stage *S, int u) { cudaEventRecord(S->ev[u], S->stream); }

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

extern "C" int pk_stage_profile(void *state, const void *const *in, int warmup, int reps, float *unit_ms) {
  pk_stage *S = (pk_stage *)state;
  const pk_stage_info *I = S->info;
  int U = I->n_units;
  if (!cu_ok(S, cudaSetDevice(S->device), "cudaSetDevice")) return 1;
  S->ev = (cudaEvent_t *)calloc((size_t)U + 1, sizeof(cudaEvent_t));
  float *samples = (float *)calloc((size_t)(U ? U : 1) * (size_t)(reps > 0 ? reps : 1), sizeof(float));
  if (!S->ev || !samples) return 1;
  for (int i = 0; i <= U; i++)
    if (!cu_ok(S, cudaEventCreate(&S->ev[i]), "cudaEventCreate")) return 1;
  for (int k = 0; k < I->fwd.n_in; k++)
    if (I->fwd.in_bytes[k] && !stream_copy(S, S->io + I->fwd.in_off[k], in[k], I->fwd.in_bytes[k],
                                           cudaMemcpyHostToDevice, "cudaMemcpy(input)"))
      return 1;
  for (int r = 0; r < warmup + reps; r++) {
    if (I->fwd.run(S)) return 1;
    pk_mark(S, U);
    if (!cu_ok(S, cudaStreamSynchronize(S->stream), "cudaStreamSynchronize")) return 1;
    if (r < warmup) continue;
    /* a unit with no code records no event: it takes 0 ms (its event is the next one's) */
    for (int u = 0; u < U; u++) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, S->ev[u], S->ev[u + 1]) != cudaSuccess) {
        cudaGetLastError();
        ms = 0;
      }
      samples[(size_t)u * (size_t)reps + (size_t)(r - warmup)] = ms < 0 ? 0 : ms;
    }
  }
  for (int u = 0; u < U; u++) {
    float *s = samples + (size_t)u * (size_t)reps;
    qsort(s, (size_t)reps, sizeof(float), cmp_float);
    unit_ms[u] = reps ? s[reps / 2] : 0;
  }
  free(samples);
  return 0;
}

extern "C" const char *pk_stage_device_name(void *state, char *buf, size_t n) {
  pk_stage *S = (pk_stage *)state;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, S->device) == cudaSuccess) snprintf(buf, n, "%s", prop.name);
  else snprintf(buf, n, "cuda:%d", S->device);
  return buf;
}

extern "C" int pk_stage_units(void *state, const char *const **unit_names, const int **unit_n_nodes,
                              const char *const **node_names) {
  const pk_stage_info *I = ((pk_stage *)state)->info;
  *unit_names = I->unit_names;
  *unit_n_nodes = I->unit_n_nodes;
  *node_names = I->node_names;
  return I->n_units;
}
