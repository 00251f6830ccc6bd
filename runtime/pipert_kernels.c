/* pipert_kernels.c - libpipert's copy of the kernels that the cpu target's stage code
 * calls: pipert_gemm_direct and pipert_gemm_direct_seg (pipert_gemm.h) and pipert_dw
 * (pipert_dw.h). A stage includes those headers for their declarations only, so that
 * each stage compiles in a fraction of a second where the kernels' AVX-512, AVX2 and
 * portable variants took seconds to compile in every stage; this file is compiled once,
 * with the flags of the stage code (CMakeLists.txt: no contraction, no fast math, -O2),
 * so the bits are those of the same source compiled into a stage. A stage built with
 * -DPIPERT_KERNELS_INLINE has its own static copy instead, for trying other
 * -DPIPERT_GEMM_* / -DPIPERT_DW_* settings without rebuilding libpipert. */
#define PIPERT_KERNELS_IMPL
#include "pipert_dw.h"
#include "pipert_gemm.h"
