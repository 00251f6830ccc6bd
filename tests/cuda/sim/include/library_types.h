/* library_types.h (CUDA simulator): the element types the math libraries take. */
#ifndef CUDASIM_LIBRARY_TYPES_H
#define CUDASIM_LIBRARY_TYPES_H
typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_8U = 8,
  CUDA_R_16BF = 14,
  CUDA_R_64I = 24
} cudaDataType;
#endif
