/* cudnn.h (CUDA simulator) - the part of cuDNN's legacy convolution API and of its
 * backend (graph) API that pipecc's device runtime uses, computed on the CPU by
 * tests/cuda/sim/sim_dnn.cc. Declarations written for the simulator after NVIDIA's
 * documented API (same names and signatures); the numeric values of the enums are the
 * simulator's own.
 *
 * Supported: NCHW filters, 4-D and 5-D tensors (2 or 3 spatial dims; a 1-D convolution is a
 * 4-D one with a spatial dim of 1) with any positive strides, float (compute type float)
 * and double (compute type double), groups, strides, dilations, symmetric pads,
 * CROSS_CORRELATION and CONVOLUTION (flipped filter). Math types are recorded and
 * reported but never change the arithmetic: the simulator always computes in the data
 * type (float convolutions accumulate in float through sgemm, as FMA math would; TF32 is
 * never emulated). */
#ifndef CUDASIM_CUDNN_H
#define CUDASIM_CUDNN_H

#include <cuda_runtime.h>
#include <library_types.h>
#include <stddef.h>
#include <stdint.h>

#define CUDNN_MAJOR 8
#define CUDNN_MINOR 9
#define CUDNN_PATCHLEVEL 0
#define CUDNN_VERSION (CUDNN_MAJOR * 1000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)
#define CUDNN_DIM_MAX 8

typedef enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED,
  CUDNN_STATUS_ALLOC_FAILED,
  CUDNN_STATUS_BAD_PARAM,
  CUDNN_STATUS_INTERNAL_ERROR,
  CUDNN_STATUS_INVALID_VALUE,
  CUDNN_STATUS_ARCH_MISMATCH,
  CUDNN_STATUS_MAPPING_ERROR,
  CUDNN_STATUS_EXECUTION_FAILED,
  CUDNN_STATUS_NOT_SUPPORTED,
  CUDNN_STATUS_LICENSE_ERROR,
  CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING,
  CUDNN_STATUS_RUNTIME_IN_PROGRESS,
  CUDNN_STATUS_RUNTIME_FP_OVERFLOW,
  CUDNN_STATUS_VERSION_MISMATCH
} cudnnStatus_t;

typedef enum {
  CUDNN_DATA_FLOAT = 0,
  CUDNN_DATA_DOUBLE,
  CUDNN_DATA_HALF,
  CUDNN_DATA_INT8,
  CUDNN_DATA_INT32,
  CUDNN_DATA_INT8x4,
  CUDNN_DATA_UINT8,
  CUDNN_DATA_UINT8x4,
  CUDNN_DATA_INT8x32,
  CUDNN_DATA_BFLOAT16,
  CUDNN_DATA_INT64,
  CUDNN_DATA_BOOLEAN
} cudnnDataType_t;

typedef enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_NCHW_VECT_C } cudnnTensorFormat_t;

typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION } cudnnConvolutionMode_t;

typedef enum {
  CUDNN_DEFAULT_MATH = 0,
  CUDNN_TENSOR_OP_MATH,
  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
  CUDNN_FMA_MATH
} cudnnMathType_t;

typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC } cudnnDeterminism_t;

typedef enum {
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0,
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
  CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
  CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
  CUDNN_CONVOLUTION_FWD_ALGO_FFT,
  CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
  CUDNN_CONVOLUTION_FWD_ALGO_COUNT
} cudnnConvolutionFwdAlgo_t;

typedef enum {
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
} cudnnConvolutionBwdDataAlgo_t;

typedef struct cudnnContext *cudnnHandle_t;
typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct *cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct *cudnnConvolutionDescriptor_t;

typedef struct cudnnConvolutionFwdAlgoPerfStruct {
  cudnnConvolutionFwdAlgo_t algo;
  cudnnStatus_t status;
  float time;    /* milliseconds; -1 where status is not SUCCESS */
  size_t memory; /* workspace bytes */
  cudnnDeterminism_t determinism;
  cudnnMathType_t mathType;
  int reserved[3];
} cudnnConvolutionFwdAlgoPerf_t;

typedef struct cudnnConvolutionBwdDataAlgoPerfStruct {
  cudnnConvolutionBwdDataAlgo_t algo;
  cudnnStatus_t status;
  float time;
  size_t memory;
  cudnnDeterminism_t determinism;
  cudnnMathType_t mathType;
  int reserved[3];
} cudnnConvolutionBwdDataAlgoPerf_t;

/* The backend (graph) API, for one forward convolution per operation graph: tensor,
 * convolution, convolution-forward operation, operation graph, engine heuristics (modes
 * A, B and INSTANT give two engines for float data, a tensor-core one (TF32, emulated,
 * needs a workspace) then an FMA one; FALLBACK and double data the FMA one), engine
 * configurations, engines (their numerical notes), execution plans and variant packs. */
typedef void *cudnnBackendDescriptor_t;

typedef enum {
  CUDNN_TYPE_HANDLE = 0,
  CUDNN_TYPE_DATA_TYPE,
  CUDNN_TYPE_BOOLEAN,
  CUDNN_TYPE_INT64,
  CUDNN_TYPE_FLOAT,
  CUDNN_TYPE_DOUBLE,
  CUDNN_TYPE_VOID_PTR,
  CUDNN_TYPE_CONVOLUTION_MODE,
  CUDNN_TYPE_HEUR_MODE,
  CUDNN_TYPE_NUMERICAL_NOTE,
  CUDNN_TYPE_BACKEND_DESCRIPTOR,
  CUDNN_TYPE_BEHAVIOR_NOTE
} cudnnBackendAttributeType_t;

typedef enum {
  CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR = 0,
  CUDNN_BACKEND_ENGINE_DESCRIPTOR,
  CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
  CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
  CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
  CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
  CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
  CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
  CUDNN_BACKEND_TENSOR_DESCRIPTOR
} cudnnBackendDescriptorType_t;

typedef enum {
  CUDNN_ATTR_CONVOLUTION_COMP_TYPE = 0,
  CUDNN_ATTR_CONVOLUTION_CONV_MODE,
  CUDNN_ATTR_CONVOLUTION_DILATIONS,
  CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
  CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
  CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
  CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
  CUDNN_ATTR_ENGINEHEUR_MODE,
  CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
  CUDNN_ATTR_ENGINEHEUR_RESULTS,
  CUDNN_ATTR_ENGINECFG_ENGINE,
  CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
  CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
  CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
  CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
  CUDNN_ATTR_OPERATIONGRAPH_OPS,
  CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
  CUDNN_ATTR_TENSOR_DATA_TYPE,
  CUDNN_ATTR_TENSOR_DIMENSIONS,
  CUDNN_ATTR_TENSOR_STRIDES,
  CUDNN_ATTR_TENSOR_UNIQUE_ID,
  CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
  CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
  CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
  CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
  CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
  CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE
} cudnnBackendAttributeName_t;

typedef enum {
  CUDNN_HEUR_MODE_INSTANT = 0,
  CUDNN_HEUR_MODE_B,
  CUDNN_HEUR_MODE_FALLBACK,
  CUDNN_HEUR_MODE_A,
  CUDNN_HEUR_MODES_COUNT
} cudnnBackendHeurMode_t;

typedef enum {
  CUDNN_NUMERICAL_NOTE_TENSOR_CORE = 0,
  CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
  CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
  CUDNN_NUMERICAL_NOTE_FFT,
  CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC,
  CUDNN_NUMERICAL_NOTE_WINOGRAD,
  CUDNN_NUMERICAL_NOTE_TYPE_COUNT
} cudnnBackendNumericalNote_t;

#ifdef __cplusplus
extern "C" {
#endif

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                           cudnnBackendDescriptor_t *descriptor);
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t elementCount,
                                       const void *arrayOfElements);
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t requestedElementCount,
                                       int64_t *elementCount, void *arrayOfElements);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack);

const char *cudnnGetErrorString(cudnnStatus_t status);
size_t cudnnGetVersion(void);

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId);
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId);

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc);
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t tensorDesc, cudnnDataType_t dataType, int nbDims,
                                         const int dimA[], const int strideA[]);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc);

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc);
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int nbDims, const int filterDimA[]);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc);

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc);
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t convDesc, int arrayLength, const int padA[],
                                              const int filterStrideA[], const int dilationA[],
                                              cudnnConvolutionMode_t mode, cudnnDataType_t computeType);
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount);
cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int *groupCount);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType);
cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t *mathType);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc);

cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc, int nbDims,
                                                    int tensorOuputDimA[]);

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                     const cudnnFilterDescriptor_t filterDesc,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t destDesc,
                                                     const int requestedAlgoCount, int *returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t *perfResults);
cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                   const cudnnFilterDescriptor_t wDesc,
                                                   const cudnnConvolutionDescriptor_t convDesc,
                                                   const cudnnTensorDescriptor_t yDesc, const int requestedAlgoCount,
                                                   int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults);
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes);
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
                                      const cudnnTensorDescriptor_t yDesc, void *y);

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults);
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                           const cudnnTensorDescriptor_t dyDesc,
                                                           const cudnnConvolutionDescriptor_t convDesc,
                                                           const cudnnTensorDescriptor_t dxDesc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
                                           size_t workSpaceSizeInBytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxDesc, void *dx);

#ifdef __cplusplus
}
#endif
#endif
