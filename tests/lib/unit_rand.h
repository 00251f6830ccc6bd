/* tests/lib/unit_rand.h - the kernel tests' inputs: rnd(), a fixed xorshift sequence of
 * floats in [-1, 1) (the same inputs on every run and machine), rnd_fill(p, n), n of them
 * into p, and SENTINEL, the value an output buffer is filled with to catch writes
 * outside the block a kernel owns. */
#ifndef PIPECC_TESTS_UNIT_RAND_H
#define PIPECC_TESTS_UNIT_RAND_H

#include <stdint.h>

static uint64_t rng = 88172645463325252ull;
static float rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static inline void rnd_fill(float *p, long n) {
  for (long i = 0; i < n; i++) p[i] = rnd();
}

static const float SENTINEL = 12345.678f;

#endif
