/* tools/fma_peak.c - the FMA throughput of one core alone and of every core at once
 * (AVX2: 10 independent chains of 8-float FMAs per thread), to tell how far a
 * multi-core figure can scale on this machine: on a VM whose vCPUs share physical
 * cores, all cores together reach less than n times one.
 *
 *   cc -O2 -mavx2 -mfma -pthread tools/fma_peak.c -o fma_peak && ./fma_peak [SECONDS]
 *
 * Prints `one core: X GFLOP/s`, `all N cores: Y GFLOP/s each, scaling Z` (Z = the sum
 * over the cores / one core alone). Threads are pinned to cores 0..N-1. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double seconds = 1.0;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void *run(void *arg) {
  int cpu = (int)(long)arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  __m256 a[10];
  for (int i = 0; i < 10; i++) a[i] = _mm256_set1_ps(1.0f + (float)i * 1e-7f);
  const __m256 b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  long n = 0;
  double t0 = now(), t;
  do {
    for (int k = 0; k < 100000; k++) {
#pragma GCC unroll 10
      for (int i = 0; i < 10; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    }
    n += 100000;
  } while ((t = now() - t0) < seconds);
  float s = 0;
  for (int i = 0; i < 10; i++) s += a[i][0];
  double *r = malloc(sizeof *r);
  *r = n * 10.0 * 16 / t / 1e9 + (s == 12345.0f ? 1 : 0); /* s: keep the chains live */
  return r;
}

static double measure(int nthreads, double *each) {
  pthread_t th[64];
  double sum = 0;
  for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, run, (void *)(long)i);
  for (int i = 0; i < nthreads; i++) {
    void *r;
    pthread_join(th[i], &r);
    each[i] = *(double *)r;
    sum += each[i];
    free(r);
  }
  return sum;
}

int main(int argc, char **argv) {
  if (argc > 1) seconds = atof(argv[1]);
  int n = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (n > 64) n = 64;
  double each[64];
  double one = measure(1, each);
  printf("one core: %.1f GFLOP/s\n", one);
  double all = measure(n, each);
  printf("all %d cores: ", n);
  for (int i = 0; i < n; i++) printf("%s%.1f", i ? ", " : "", each[i]);
  printf(" GFLOP/s each, scaling %.2f\n", all / one);
  return 0;
}
