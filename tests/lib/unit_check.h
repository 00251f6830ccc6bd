/* tests/lib/unit_check.h - the C unit tests' check: CHECK(c) reports file, line and the
 * failed condition, counts it in `fails`, and carries on; main returns 1 when fails. */
#ifndef PIPECC_TESTS_UNIT_CHECK_H
#define PIPECC_TESTS_UNIT_CHECK_H

#include <stdio.h>

static int fails;
#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      fails++;                                                              \
    }                                                                       \
  } while (0)

#endif
