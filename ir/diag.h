/* ir/diag.h - messages about the user's model.
 *
 * A model error prints one line to stderr:
 *     model.onnx: node 54 'conv1' (Conv, opset 13): input W must be an initializer
 * and bumps g->n_errors; the caller stops when it sees errors and pipecc exits with
 * status 2. Names are shown sanitised (non-printable bytes escaped) and cut at 80
 * characters, so a hostile 1 MB name still gives a short line.
 * Internal bugs use IR_ASSERT, which prints file and line and aborts. */
#ifndef PIPECC_IR_DIAG_H
#define PIPECC_IR_DIAG_H
#include <stdio.h>
#include <stdlib.h>

#include "ir/ir.h"

void ir_error(ir_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_error_node(ir_graph *g, int node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Same layout, prefixed "warning:", does not count as an error. */
void ir_warn(ir_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_warn_node(ir_graph *g, int node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "node 54 'conv1' (Conv, opset 13)" into buf. */
char *ir_node_desc(const ir_graph *g, int node, char *buf, size_t n);
/* A name made printable and cut to at most max bytes (with "..."), into buf. */
char *ir_printable(const char *s, size_t max, char *buf, size_t n);

/* Silence model messages (fuzzing, tests); errors are still counted. */
extern int ir_diag_quiet;
/* Hold model messages back instead of printing them: a trial compile (pipecc's default
 * micro-batch count) that may be thrown away. ir_diag_release prints the held lines
 * (print = 1) or drops them (print = 0) and ends the hold. */
void ir_diag_hold(void);
void ir_diag_release(int print);

#define IR_ASSERT(c)                                                                    \
  do {                                                                                  \
    if (!(c)) {                                                                         \
      fprintf(stderr, "pipecc: internal error at %s:%d: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                          \
    }                                                                                   \
  } while (0)
#endif
