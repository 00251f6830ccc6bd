/* codegen/eltwise_expr.h - element-wise code shared by the cpu (codegen/c/eltwise.c:
 * one loop nest per fused unit) and cuda (codegen/cuda/eltwise.c: one grid-stride
 * kernel per unit) targets. A fused node computes exactly what it would compute alone
 * (the same C expression on the same values, no contraction), and both targets use the
 * same expressions (CUDA provides the libm names as device functions).
 *
 * The generated text goes through a writer: write(ctx, fmt, ap) appends formatted text
 * to wherever the target collects the unit's code; errors are reported on the node as
 * "<target> target: ...". */
#ifndef PIPECC_CODEGEN_ELTWISE_EXPR_H
#define PIPECC_CODEGEN_ELTWISE_EXPR_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

typedef struct {
  ir_graph *g;
  const char *target; /* "cpu", "cuda": in error messages */
  void *ctx;
  void (*write)(void *ctx, const char *fmt, va_list ap);
} cg_expr_writer;

/* Writes `    const T tN = <expr>;` for node n (N its index); a[k] are the operand
 * expressions of its inputs (NULL if omitted). Returns 0, 1 when it also wrote a
 * `uN` the caller should use instead of tN, or a negative value after an error. */
int cg_eltwise_node_expr(const cg_expr_writer *w, const ir_node *n, const char **a, int nin);

/* Loop shape of the fused unit nodes[0..n_nodes) (root last) with external inputs
 * ext[0..n_ext) (n_ext <= 64): the output dims with size-1 dims dropped and dims
 * merged where every input's broadcast stride allows. Fills QD[d] (sizes) and
 * QS[e][d] (element strides of input e; QS[n_ext] is the output) and returns the
 * number of dims q, or -1 after an error (an input that does not broadcast). */
int cg_eltwise_layout(const cg_expr_writer *w, const int *nodes, int n_nodes, const int *ext, int n_ext, int64_t *QD,
                      int64_t (*QS)[IR_MAX_RANK]);
/* Index expression "i0 * 12<suffix> + i1" of the strides qs[0..q), "0" for none. */
void cg_eltwise_index(char *buf, size_t n, int q, const int64_t *qs, const char *suffix);
/* Evaluates the members in order: `const T rN = tN;` per node, operands a<e> for
 * external input e and r<M> for member M. res: the root's variable. 0 or -1. */
int cg_eltwise_members(const cg_expr_writer *w, const int *nodes, int n_nodes, const int *ext, int n_ext, char *res,
                       size_t res_len);
#endif
