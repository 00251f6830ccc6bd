/* cublasLt.h (CUDA simulator) - the part of cuBLASLt that pipecc's device runtime uses,
 * computed on the CPU (OpenBLAS) by tests/cuda/sim/sim_dnn.cc. Declarations written for
 * the simulator after NVIDIA's documented API (same names and signatures); the numeric
 * values of the enums are the simulator's own. The types shared with cuBLAS come from
 * cublas_v2.h, so either header may be included first.
 *
 * Supported: column-major layouts (CUBLASLT_ORDER_COL), strided batches, float (compute
 * 32F and its fast variants, computed as 32F) and double (64F), host pointer mode, the
 * default epilogue. An algorithm from cublasLtMatmulAlgoGetHeuristic carries the
 * alignment it was chosen for (the preference's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES,
 * 256 by default, capped at 16 bytes and at what the layouts' leading dimensions and batch
 * strides allow); cublasLtMatmul with that algorithm and a less aligned A, B, C or D
 * returns CUBLAS_STATUS_NOT_SUPPORTED, as the GPU library may. */
#ifndef CUDASIM_CUBLASLT_H
#define CUDASIM_CUBLASLT_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <library_types.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque *cublasLtMatmulPreference_t;

/* opaque: filled by cublasLtMatmulAlgoGetHeuristic, copied freely by the caller */
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0, /* int32_t (cublasComputeType_t) */
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,   /* int32_t (cudaDataType) */
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2, /* int32_t (cublasLtPointerMode_t) */
  CUBLASLT_MATMUL_DESC_TRANSA = 3,       /* int32_t (cublasOperation_t) */
  CUBLASLT_MATMUL_DESC_TRANSB = 4,       /* int32_t */
  CUBLASLT_MATMUL_DESC_TRANSC = 5,       /* int32_t */
  CUBLASLT_MATMUL_DESC_FILL_MODE = 6,    /* int32_t */
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,     /* uint32_t (cublasLtEpilogue_t) */
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, /* void * */
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,
  CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE = 14,
  CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
} cublasLtMatmulDescAttributes_t;

typedef enum {
  CUBLASLT_POINTER_MODE_HOST = 0,
  CUBLASLT_POINTER_MODE_DEVICE = 1,
  CUBLASLT_POINTER_MODE_DEVICE_VECTOR = 2,
  CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO = 3,
  CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST = 4
} cublasLtPointerMode_t;

typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = 6,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_BIAS = 36
} cublasLtEpilogue_t;

typedef enum {
  CUBLASLT_ORDER_COL = 0,
  CUBLASLT_ORDER_ROW = 1,
  CUBLASLT_ORDER_COL32 = 2,
  CUBLASLT_ORDER_COL4_4R2_8C = 3,
  CUBLASLT_ORDER_COL32_2R_4R4 = 4
} cublasLtOrder_t;

typedef enum {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                 /* uint32_t (cudaDataType) */
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,                /* int32_t (cublasLtOrder_t) */
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                 /* uint64_t */
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,                 /* uint64_t */
  CUBLASLT_MATRIX_LAYOUT_LD = 4,                   /* int64_t */
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,          /* int32_t */
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6, /* int64_t, in elements */
  CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET = 7          /* int64_t */
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,           /* uint32_t */
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,   /* uint64_t */
  CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3, /* uint32_t */
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* uint32_t, default 256 */
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
  CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT = 9, /* float */
  CUBLASLT_MATMUL_PREF_IMPL_MASK = 12       /* uint64_t */
} cublasLtMatmulPreferenceAttributes_t;

#ifdef __cplusplus
extern "C" {
#endif

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
const char *cublasLtGetStatusString(cublasStatus_t status);
const char *cublasLtGetStatusName(cublasStatus_t status);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
