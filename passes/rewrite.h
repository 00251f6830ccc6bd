/* passes/rewrite.h - making nodes: the helpers every pass that rewrites the graph uses
 * (the lowering passes, widen, the loss and optimizer, autodiff's backward rules).
 *
 * Nodes are made with ad_begin (node named "<base>/<tag>", then "<base>/<tag>_1", ...;
 * outputs typed later), attributes added with ad_attr_*, and typed by ad_end
 * (pass_shape_node). The helpers return the output value. Made nodes carry opset
 * AD_OPSET, so ReduceSum/Slice/Pad/Squeeze take their parameters as inputs and
 * ReduceMean its axes as an attribute. The gradient fields of ad_ctx are autodiff's
 * (passes/train/autodiff_impl.h). */
#ifndef PIPECC_PASSES_REWRITE_H
#define PIPECC_PASSES_REWRITE_H
#include <stdint.h>

#include "ir/ir.h"

#define AD_OPSET 17

typedef struct {
  ir_graph *g;
  ir_dtype ft; /* the float type trained: IR_FLOAT or IR_DOUBLE (the loss's) */
  int n0;      /* values before the backward pass: the only ones with gradients */
  char *need;  /* [n0] the value depends on a trainable initializer */
  int *grad;   /* [n0] value holding d loss / d value, -1 if none (yet) */
  const char *base, *tag;
  int cnt;
  int err;
  int stage, phase; /* given to every node made (ir_node.stage / .phase) */
  double seed;      /* d(reported loss) / d(loss value): 1, or 1/M for M micro-batches */
} ad_ctx;

int ad_begin(ad_ctx *a, ir_op op, const int *in, int n_in, int n_out, const char *out_name);
int ad_end(ad_ctx *a, int node);
void ad_attr_i(ad_ctx *a, int node, const char *name, int64_t v);
void ad_attr_f(ad_ctx *a, int node, const char *name, double v);
void ad_attr_s(ad_ctx *a, int node, const char *name, const char *v);
void ad_attr_is(ad_ctx *a, int node, const char *name, const int64_t *v, int n);
int ad_op(ad_ctx *a, ir_op op, const int *in, int n_in);
int ad_un(ad_ctx *a, ir_op op, int x);
int ad_bin(ad_ctx *a, ir_op op, int x, int y);
int ad_cast(ad_ctx *a, int x, ir_dtype to); /* x itself when it has type `to` */
/* A constant of type dt and shape s holding data (nbytes), named after the node. */
int ad_c_tensor(ad_ctx *a, ir_dtype dt, const ir_shape *s, const void *data, size_t nbytes);
int ad_c_i64(ad_ctx *a, const int64_t *v, int n); /* 1-D int64 constant */
int ad_c_i64_scalar(ad_ctx *a, int64_t v);
int ad_c_f(ad_ctx *a, double v, ir_dtype dt); /* scalar float constant */
ir_shape ad_shape(ad_ctx *a, int v);
ir_dtype ad_dtype(ad_ctx *a, int v);
int ad_reshape(ad_ctx *a, int x, const ir_shape *s);
/* A 1-D x of n > 1 elements as [n, 1, ..., 1] of the given rank (it then broadcasts
 * along the axis rank - 1 dims from the right: per channel, per row); any other x as is. */
int ad_lead(ad_ctx *a, int x, int rank);
int ad_transpose(ad_ctx *a, int x, const int64_t *perm, int r);
int ad_reduce(ad_ctx *a, ir_op op, int x, const int64_t *axes, int n, int keep);
int ad_expand(ad_ctx *a, int x, const ir_shape *s);
int ad_zeros(ad_ctx *a, const ir_shape *s, ir_dtype dt); /* any type */
int ad_unbroadcast(ad_ctx *a, int gv, const ir_shape *s);

/* For a lowering: the value v becomes output k of node (nothing when that output is
 * omitted), through an Identity where v is one of node's inputs. 0, or -1 after an error
 * of a (nothing taken). */
int ad_take_output(ad_ctx *a, int node, int k, int v);

/* Every live node of g that want() picks, replaced by lower(a, node) (nodes made with
 * the ad_* helpers, named after the node, tag `tag`); then sorted and compacted. The
 * number lowered, or -1 (reported). */
int ad_lower_nodes(ir_graph *g, const char *tag, int (*want)(const ir_node *n), int (*lower)(ad_ctx *a, int node));

#endif
