/* tools/gemm_shapes.c - cblas_sgemm against pipecc's direct GEMM (runtime/pipert_gemm.h)
 * on one core, on the GEMMs of ResNet-50's Winograd F(4x4, 3x3) Convs at batch 8 (one
 * of the 36 per block: [C x C] x [C x P], the P tiles of a block as codegen/c/winograd.c
 * cuts them) and of its 1x1 Convs, in interleaved repetitions; the fastest repetition of
 * each (a shared machine only ever adds time) as GFLOP/s.
 *
 *   cc -O2 -ffp-contract=off -fno-fast-math -Iruntime tools/gemm_shapes.c -lopenblas -lm -o gemm_shapes
 *   taskset -c 0 ./gemm_shapes [REPS]
 *
 * Prints per shape: M P K, the two GFLOP/s and their ratio (direct / sgemm). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PIPERT_KERNELS_INLINE /* the variants themselves, each called here */
#include "pipert_gemm.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  /* M, P, K, calls per repetition */
  static const long shapes[][4] = {
      {64, 392, 64, 36},    {128, 196, 128, 36}, {256, 64, 256, 36}, {512, 32, 512, 36}, /* Winograd, layer1..4 */
      {64, 3136, 256, 1},   {128, 784, 512, 1},  {256, 196, 1024, 1}, {512, 49, 2048, 1}, /* 1x1 reductions */
      {256, 3136, 64, 1},   {512, 784, 128, 1},  {1024, 196, 256, 1}, {2048, 49, 512, 1}, /* 1x1 expansions */
  };
  printf("%6s %6s %6s %10s %10s %7s\n", "M", "P", "K", "sgemm", "direct", "ratio");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    long M = shapes[s][0], P = shapes[s][1], K = shapes[s][2], n = shapes[s][3];
    float *W = malloc(sizeof(float) * (size_t)(M * K * n)), *X = malloc(sizeof(float) * (size_t)(K * P * n)),
          *Y = malloc(sizeof(float) * (size_t)(M * P * n));
    for (long i = 0; i < M * K * n; i++) W[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (long i = 0; i < K * P * n; i++) X[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; r++)
      for (int v = 0; v < 2; v++) {
        int w = r % 2 ? 1 - v : v;
        double t = now();
        for (long e = 0; e < n; e++) {
          if (w == 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)P, (int)K, 1, W + e * M * K, (int)K,
                        X + e * K * P, (int)P, 0, Y + e * M * P, (int)P);
          else pipert_gemm_direct(M, P, K, W + e * M * K, X + e * K * P, P, NULL, Y + e * M * P, P, NULL, 0, 0, 0, 0);
        }
        t = now() - t;
        if (t < best[w]) best[w] = t;
      }
    double f = 2.0 * (double)(M * P * K * n) * 1e-9;
    printf("%6ld %6ld %6ld %10.1f %10.1f %6.2fx\n", M, P, K, f / best[0], f / best[1], best[0] / best[1]);
    free(W);
    free(X);
    free(Y);
  }
  return 0;
}
