/* passes/train/recompute.c - re-materialisation (GPipe's): a training program whose backward
 * recomputes its stage's forward values instead of keeping them (`pipecc --train
 * --recompute`; passes/train/autodiff.h, pass_recompute).
 *
 * Without it, every value that a stage's forward computes and its backward reads (a
 * Conv's input for its weight gradient, a Relu's output for its mask, BatchNorm's
 * normalised input...) is kept per micro-batch from the forward to the backward: under
 * 1F1B stage s holds p - s micro-batches of them, under GPipe all M. With it, each
 * backward node of stage s that reads such a value reads instead a copy of the forward
 * node that made it, placed in the backward phase of the same stage, and so on up to
 * the values the stage does not make itself: its inputs from earlier stages, the graph
 * inputs and labels, weights and constants. Those (and the outputs of nodes that must
 * not run twice, below) are all the stage keeps per micro-batch; its forward's other
 * values live for one part only. The price is one more forward pass of the stage per
 * micro-batch, in its backward.
 *
 * The copies compute what the originals computed, from the same operands, with the same
 * emitter, so the backward reads the same bits and the trained weights are bitwise
 * those of the program without re-materialisation (tests/train/train_runtime.py,
 * case recompute). Not copied (their outputs are kept as before): Dropout (its mask is
 * drawn per call), nodes with subgraphs (If, Loop, Scan) or sequence values. A copy
 * leaves out the outputs the original writes back (a BatchNormalization's running
 * statistics in training mode: updated once per micro-batch, by the forward).
 *
 * The selective mode (`--recompute=selective`) keeps the outputs of the nodes that do
 * most of the work too (Conv, MatMul, Gemm and their kin: pass_recompute_keeps) and
 * recomputes only what lies between them and the backward (a BatchNorm and Relu after a
 * Conv, a transformer's LayerNorm, GELU, Softmax and Adds): a held micro-batch costs
 * those outputs as well, and the backward repeats only the cheap part of the forward.
 * With `--recompute=auto` each stage has the mode the planner chose for it (none,
 * selective or full: the least recomputation that fits the memory limit at the best
 * bottleneck). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir/diag.h"
#include "passes/train/autodiff.h"

typedef struct {
  ir_graph *g;
  int mode;              /* PASS_RECOMPUTE_FULL, _SELECTIVE or _AUTO */
  const int *stage_mode; /* _AUTO: per stage */
  int *copy;             /* node index -> its copy in the backward phase, -1: none yet */
  int n_nodes;           /* nodes before the copies */
  int copies;
  int *stack, cap; /* copy_up's work list */
  char *wonly;      /* PASS_RECOMPUTE_WEIGHTS: [n_nodes] a forward node of weights and constants alone */
} rc_ctx;

int pass_recompute_keeps(const ir_graph *g, const ir_node *n, int mode) {
  switch (n->op) {
    case IR_OP_Dropout: /* its mask is drawn per call */
    case IR_OP_UNKNOWN: return 1;
    case IR_OP_Conv:
    case IR_OP_ConvTranspose:
    case IR_OP_ConvInteger:
    case IR_OP_QLinearConv:
    case IR_OP_DeformConv:
    case IR_OP_Gemm:
    case IR_OP_MatMul:
    case IR_OP_MatMulInteger:
    case IR_OP_QLinearMatMul:
    case IR_OP_Einsum:
    case IR_OP_RNN:
    case IR_OP_GRU:
    case IR_OP_LSTM:
      if (mode == PASS_RECOMPUTE_SELECTIVE) return 1;
      break;
    default: break;
  }
  for (int a = 0; a < n->n_attr; a++)
    if (n->attr[a].type == IR_ATTR_GRAPH) return 1;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && g->values[n->in[k]].kind == IR_VAL_SEQ) return 1;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && g->values[n->out[k]].kind == IR_VAL_SEQ) return 1;
  return 0;
}

/* A forward node whose work runs again in the backward phase of its stage. */
static int recomputable(const rc_ctx *c, const ir_node *n) {
  if (n->dead || n->phase != IR_PHASE_FWD || n->stage < 0) return 0;
  if (c->mode == PASS_RECOMPUTE_WEIGHTS)
    return c->wonly[n - c->g->nodes] && !pass_recompute_keeps(c->g, n, PASS_RECOMPUTE_FULL);
  int mode = c->mode != PASS_RECOMPUTE_AUTO ? c->mode : c->stage_mode ? c->stage_mode[n->stage] : PASS_RECOMPUTE_FULL;
  return mode && !pass_recompute_keeps(c->g, n, mode);
}

/* Whether value v's producer is a forward node of `stage` that the backward copies. */
static int copied_here(const rc_ctx *c, int v, int stage) {
  int p = c->g->values[v].producer;
  return p >= 0 && p < c->n_nodes && c->g->nodes[p].stage == stage && recomputable(c, &c->g->nodes[p]);
}

/* Value v as the backward of `stage` reads it: the output of its producer's copy (made
 * already) when copied_here, else v itself. */
static int mapped(const rc_ctx *c, int v, int stage) {
  if (!copied_here(c, v, stage)) return v;
  const ir_graph *g = c->g;
  int p = g->values[v].producer, id = c->copy[p];
  IR_ASSERT(id >= 0);
  for (int k = 0; k < g->nodes[p].n_out; k++)
    if (g->nodes[p].out[k] == v) return g->nodes[id].out[k];
  return v;
}

/* The copy of node i in the backward phase of `stage`, its inputs mapped (their
 * producers copied first). */
static void copy_one(rc_ctx *c, int i, int stage) {
  ir_graph *g = c->g;
  int n_in = g->nodes[i].n_in, n_out = g->nodes[i].n_out;
  int *in = ir_xcalloc((size_t)n_in + 1, sizeof *in), *out = ir_xcalloc((size_t)n_out + 1, sizeof *out);
  for (int k = 0; k < n_in; k++) {
    int v = g->nodes[i].in[k];
    in[k] = v < 0 ? -1 : mapped(c, v, stage);
  }
  for (int k = 0; k < n_out; k++) {
    int v = g->nodes[i].out[k];
    if (v < 0 || g->values[v].writeback >= 0) { /* (BatchNorm's running statistics: the original
                                                 * writes them back, once per micro-batch) */
      out[k] = -1;
      continue;
    }
    char name[512];
    snprintf(name, sizeof name, "%s/recompute", g->values[v].name);
    int nv = ir_add_value(g, name, g->values[v].kind, g->values[v].dtype);
    ir_value *src = &g->values[v], *dst = &g->values[nv];
    dst->shape = src->shape;
    dst->batch_outer = src->batch_outer;
    dst->batch_inner = src->batch_inner;
    out[k] = nv;
  }
  char nname[512];
  snprintf(nname, sizeof nname, "%s/recompute", g->nodes[i].name);
  int id = ir_add_node(g, g->nodes[i].op, nname, in, n_in, out, n_out);
  free(in);
  free(out);
  ir_node *o = &g->nodes[i], *n = &g->nodes[id]; /* (after ir_add_node: nodes may have moved) */
  n->op_type = o->op_type;
  n->domain = o->domain;
  n->opset = o->opset;
  n->index = o->index;
  n->n_attr = o->n_attr; /* (the attributes' own arrays stay shared: read-only from here on) */
  n->attr = n->n_attr ? ir_alloc_array(g->arena, (size_t)n->n_attr, sizeof(ir_attr)) : NULL;
  if (n->n_attr) memcpy(n->attr, o->attr, sizeof(ir_attr) * (size_t)n->n_attr);
  n->n_implicit = o->n_implicit;
  n->flops = o->flops;
  n->stage = stage;
  n->phase = IR_PHASE_BWD;
  c->copy[i] = id;
  c->copies++;
}

/* Copies of node `root` and of every forward node of `stage` it reads through, inputs
 * first; an explicit stack (a forward thousands of nodes deep must not need as deep a C
 * stack). */
static void copy_up(rc_ctx *c, int root, int stage) {
  ir_graph *g = c->g;
  int top = 0;
  c->stack[top++] = root;
  while (top > 0) {
    int i = c->stack[top - 1], waiting = 0;
    if (c->copy[i] >= 0) {
      top--;
      continue;
    }
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0 || !copied_here(c, v, stage) || c->copy[g->values[v].producer] >= 0) continue;
      if (top == c->cap) {
        c->cap *= 2;
        c->stack = ir_xrealloc(c->stack, sizeof *c->stack * (size_t)c->cap);
      }
      c->stack[top++] = g->values[v].producer;
      waiting = 1;
    }
    if (!waiting) {
      copy_one(c, i, stage);
      top--;
    }
  }
}

int pass_recompute(ir_graph *g, int mode, const int *stage_mode, int verbose) {
  rc_ctx c = {g, mode, stage_mode, NULL, g->n_nodes, 0, NULL, 256, NULL};
  c.copy = ir_xcalloc((size_t)g->n_nodes + 1, sizeof *c.copy);
  c.wonly = ir_xcalloc((size_t)g->n_nodes + 1, 1);
  for (int changed = mode == PASS_RECOMPUTE_WEIGHTS; changed;) { /* (nodes need not be in order yet) */
    changed = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const ir_node *n = &g->nodes[i];
      if (c.wonly[i] || n->dead || n->phase != IR_PHASE_FWD || n->stage < 0) continue;
      int ok = 1;
      for (int k = 0; k < n->n_in && ok; k++) {
        int v = n->in[k];
        if (v < 0 || g->values[v].kind == IR_VAL_CONST) continue;
        int pr = g->values[v].producer;
        ok = pr >= 0 && c.wonly[pr] && g->nodes[pr].stage == n->stage;
      }
      if (ok) c.wonly[i] = 1, changed = 1;
    }
  }
  for (int i = 0; i < g->n_nodes; i++) c.copy[i] = -1;
  c.stack = ir_xmalloc(sizeof *c.stack * (size_t)c.cap);
  int kept = 0, redirected = 0;
  for (int i = 0; i < c.n_nodes; i++) {
    if (g->nodes[i].dead || g->nodes[i].phase != IR_PHASE_BWD) continue;
    int stage = g->nodes[i].stage;
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      int p = g->values[v].producer;
      if (p < 0 || p >= c.n_nodes || g->nodes[p].stage != stage || g->nodes[p].phase != IR_PHASE_FWD) continue;
      if (!copied_here(&c, v, stage)) {
        kept++;
        continue;
      }
      copy_up(&c, p, stage);
      g->nodes[i].in[k] = mapped(&c, v, stage); /* (g->nodes may have moved; indexed afresh) */
      redirected++;
    }
  }
  free(c.stack);
  free(c.copy);
  free(c.wonly);
  if (verbose)
    fprintf(stderr, "pipecc: recompute (%s): %d forward nodes copied into the backward; %d reads redirected, %d kept\n",
            mode == PASS_RECOMPUTE_SELECTIVE ? "selective"
            : mode == PASS_RECOMPUTE_AUTO    ? "per stage"
            : mode == PASS_RECOMPUTE_WEIGHTS ? "weights"
                                             : "full",
            c.copies, redirected, kept);
  return g->n_errors ? -1 : 0;
}
