/* tests/fuzz/fuzz_npy.c - libFuzzer harness for the runtime's .npy and .npz readers
 * (runtime/rt_npy.c), which read every --input, --data and --labels file and every
 * checkpoint.
 *
 * The first byte of an input picks the reader (even: .npy, odd: .npz), the rest is the
 * file's bytes. A reader must refuse what it cannot take with one message and allocate
 * no more than the file holds: a crash, a sanitizer report, a leak, a timeout or an
 * allocation past libFuzzer's -rss_limit_mb is a finding.
 *
 * Build and run: tests/fuzz/run_fuzz.sh [SECONDS] (clang, -DPIPECC_FUZZ=ON). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  char err[1024];
  const uint8_t *b = data + 1;
  size_t n = size - 1;
  if (data[0] % 2 == 0) {
    rt_array a;
    if (rt_npy_parse(n ? (const void *)b : (const void *)"", n, "fuzz.npy", &a, err, sizeof err) == 0) {
      if (a.nbytes) {
        volatile uint8_t sink = ((const uint8_t *)a.data)[a.nbytes - 1]; /* the whole array is there */
        (void)sink;
      }
      rt_array_free(&a);
    } else if (!err[0] || !memchr(err, 0, sizeof err)) {
      abort(); /* a refusal says why */
    }
    return 0;
  }
  rt_array *arrs = NULL;
  int cnt = 0;
  if (rt_npz_parse(n ? (const void *)b : (const void *)"", n, "fuzz.npz", &arrs, &cnt, err, sizeof err) == 0) {
    for (int i = 0; i < cnt; i++) rt_array_free(&arrs[i]);
    free(arrs);
  } else if (!err[0]) {
    abort();
  }
  return 0;
}
