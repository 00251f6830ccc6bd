/* passes/train/autodiff.h - training: loss, reverse-mode autodiff and the optimizer step.
 *
 * Two forms of a training program, built from the same loss, backward rules and
 * optimizer updates (passes/train/autodiff.c, passes/train/optim.c):
 *
 * 1. pass_autodiff: ONE TRAINING STEP as a pure function of an inferred forward graph
 *    (after bind, fold and shape, compiled with pass_opts.training so trainable
 *    initializers were not folded), which every backend compiles like an inference
 *    model (`pipecc --train-step`; the tests compare it with torch):
 *   inputs:  the model's inputs, plus the labels (int64, the logits' shape without its
 *            class dim, for cross-entropy; the output's shape and dtype for MSE)
 *   outputs: "loss" (float scalar), then per trained initializer P (a float initializer
 *            the loss depends on, in file order) "grad/P" and "new/P", then the new
 *            optimizer state "new/state/P/..." (momentum buffers, Adam's m, v and step),
 *            then "new/<name>" for the running mean and variance that a
 *            BatchNormalization in training mode updates (as its emitter computes them).
 *   state:   optimizer state tensors "state/P/momentum", "state/P/m", "state/P/v",
 *            "state/P/step" are zero constants (zero_init, is_initializer set).
 *
 * 2. The PIPELINED PROGRAM (`pipecc --train`), in two calls around the planner:
 *    pass_train_loss adds the loss as forward nodes (stage -1) and makes the graph's
 *    outputs "loss" (shape [1]: one value per micro-batch) and, for cross-entropy, the
 *    logits; the planner then sets ir_node.stage of every node; pass_train_program adds
 *    the rest, every node tagged with its stage and phase (ir_node.stage, .phase):
 *      FWD  the model and the loss, once per micro-batch;
 *      BWD  a node's gradient nodes run in the node's stage, once per micro-batch; the
 *           gradient of the loss is seeded with 1/M (M micro-batches; 1 for a loss
 *           that sums over the samples), so the accumulated gradients are those of the
 *           whole batch's mean loss; per trained weight P one Add accumulates the
 *           micro-batch's gradient into the param "grad/P" (IR_PARAM_GRAD, written back),
 *           in the stage whose backward completes P's gradient (P's owner);
 *      UPD  the optimizer update of P from grad/P, in P's owner stage, once per step;
 *           the new weight and optimizer state are written back (ir_value.writeback)
 *           into P and "state/P/..." (IR_PARAM_OPTSTATE, zero_init); hyperparameters
 *           are scalar params "hyper/lr", "hyper/momentum", "hyper/weight_decay",
 *           "hyper/beta1", "hyper/beta2", "hyper/eps" (IR_PARAM_HYPER) the runtime may
 *           override; a stage other than the owner that reads P holds a copy.
 *    BatchNormalization in training mode writes its running statistics back into their
 *    initializers (IR_PARAM_BUFFER) after every micro-batch's forward pass. With
 *    pass_train_opts.recompute the backward recomputes its stage's forward values
 *    instead of keeping them per micro-batch (pass_recompute, below).
 *
 * Backward nodes are ordinary ONNX ops in the same IR (MatMul, Transpose, ReduceSum,
 * ConvTranspose, Where, ScatterElements, ...), typed by pass_shape_node as they are
 * made. The gradient of the inputs of node N is computed by nodes named "N/grad_x"
 * (activation inputs) and "N/grad_w" (initializers), the two sets never shared, so a
 * schedule may run them apart; only the batch statistics that BatchNormalization,
 * LayerNormalization and InstanceNormalization recompute for both are "N/grad" nodes.
 * Gradients reaching a value along several paths are summed by Add nodes in the order
 * the consumers appear in reverse topological order. Losses:
 *   cross-entropy  mean over the batch of -log softmax(logits)[label]; logits of rank 2
 *                  [N, C], or rank > 2 with the classes on the LAST dim (flattened to
 *                  [N*..., C], as logits.view(-1, C) in PyTorch)
 *   mse            mean over all elements of (output - labels)^2
 *   NAME           an existing float value of one element (its mean is the loss);
 *                  a SoftmaxCrossEntropyLoss producing it is lowered to ONNX ops.
 * Gradients (every float input that carries one; anything else on a path from a trained
 * initializer to the loss is reported, all at once):
 *   Conv (dX = ConvTranspose; dW = Conv of the transposed input and gradient, for
 *     group 1 and depthwise), ConvTranspose (dX = Conv; dW for group 1), Gemm (all
 *     trans/alpha/beta), MatMul (rank >= 2, broadcasting), MaxPool (its Indices output
 *     + ScatterElements add), AveragePool (depthwise ConvTranspose with 1/k; no ceil_mode,
 *     padding only with count_include_pad), GlobalAveragePool, BatchNormalization
 *     (training and inference mode), LayerNormalization, InstanceNormalization, Softmax,
 *     LogSoftmax, Relu, LeakyRelu, PRelu, Elu, Selu, Sigmoid, HardSigmoid, HardSwish,
 *     Tanh, Erf, Gelu (exact), Softplus, Exp, Log, Sqrt, Reciprocal, Abs, Neg, Clip,
 *     Identity, Cast, Add/Sub/Mul/Div/Pow with broadcasting (ReduceSum + Reshape), Sum,
 *     Mean, ReduceSum, ReduceMean, Concat, Split, Slice (steps 1), Pad (constant),
 *     Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Gather (any axis; ScatterND add),
 *     Expand, Tile, Where, CumSum, Dropout (through its mask).
 * Optimizers follow torch.optim (1.13) exactly: SGD (momentum, dampening 0, Nesterov,
 * weight decay), Adam (L2 weight decay) and AdamW (decoupled weight decay); Adam's step
 * count is kept per weight, as torch keeps it. */
#ifndef PIPECC_PASSES_AUTODIFF_H
#define PIPECC_PASSES_AUTODIFF_H
#include "ir/ir.h"

typedef struct {
  const char *loss;      /* "cross-entropy" (default), "mse", or a value name */
  const char *labels;    /* name of the added labels input; default "labels" */
  const char *optimizer; /* "sgd" (default), "adam", "adamw" */
  double lr;             /* default 0.01 */
  double momentum;       /* SGD */
  int nesterov;          /* SGD, needs momentum > 0 */
  double weight_decay;
  double beta1, beta2, eps;   /* Adam/AdamW: defaults 0.9, 0.999, 1e-8 */
  int recompute;              /* the pipelined program re-materialises (pass_recompute): 0 no,
                                 PASS_RECOMPUTE_FULL, _SELECTIVE or _AUTO */
  const int *stage_recompute; /* _AUTO: each stage's mode (0, FULL, SELECTIVE; the plan's);
                                 NULL: FULL for every stage */
  int weights_fresh;          /* the asynchronous schedules whose backward reads other weights
                                 than their forward (async, spectrain): pass_recompute with
                                 PASS_RECOMPUTE_WEIGHTS */
  int verbose;
} pass_train_opts;

/* What autodiff does with op: AD_GRAD, it writes the op's backward; AD_NO_GRAD, the op's
 * outputs carry no gradient (Shape, comparisons, rounding, ...); AD_REFUSED, a path from a
 * trained weight to the loss through it is reported. Ops rewritten into others before
 * autodiff runs (docs/supported.md) are trained as what they became. */
enum { AD_REFUSED = 0, AD_GRAD = 1, AD_NO_GRAD = 2 };
int ad_op_gradient(ir_op op);

/* Defaults as documented above. */
void pass_train_opts_default(pass_train_opts *t);
/* Build the training step graph (form 1) in place. 0, or -1 after reporting model
 * errors (every unsupported op is reported at once). */
int pass_autodiff(ir_graph *g, const pass_train_opts *t);

/* What the pipelined program's builder tells the rest of the compiler. */
typedef struct {
  const char *loss_scalar; /* the loss value (scalar) the backward pass starts from */
  const char *labels;      /* the labels input it added, NULL for a named loss */
  int loss_sum;            /* the loss sums over the samples (a batch's loss is the sum over its
                            * micro-batches), else it is a mean (the mean over them) */
  int classify;            /* cross-entropy: graph output 1 is the logits */
  int n_weights;           /* trained initializers */
} pass_train_info;

/* Form 2, before planning: the loss as forward nodes; outputs "loss" [1] and, for
 * cross-entropy, the logits. 0, or -1 after reporting. */
int pass_train_loss(ir_graph *g, const pass_train_opts *t, pass_train_info *ti);
/* Form 2, after every node got its stage (ir_node.stage >= 0): backward, accumulation
 * and update phases for M micro-batches per step. 0, or -1 after reporting. */
int pass_train_program(ir_graph *g, const pass_train_opts *t, int microbatches, pass_train_info *ti);
/* Re-materialisation (passes/train/recompute.c; pass_train_program calls it with
 * pass_train_opts.recompute, before its final sort and shape pass): every backward node
 * that reads a value its stage's forward made reads a copy of that forward computation
 * in the backward phase instead, so a stage keeps per micro-batch only the tensors it
 * exchanges with other stages and the outputs of the nodes pass_recompute_keeps names.
 * FULL keeps those of nodes that must not run twice (Dropout, control flow); SELECTIVE
 * also those of the nodes that do most of the work (Conv, MatMul, Gemm and their kin,
 * recurrent layers), recomputing only the cheap ones between them (normalisation,
 * activations, element-wise, pooling, shape ops), as Megatron-LM's selective mode does
 * for attention. 0 or -1. */
enum { PASS_RECOMPUTE_FULL = 1, PASS_RECOMPUTE_SELECTIVE = 2, PASS_RECOMPUTE_AUTO = 3, PASS_RECOMPUTE_WEIGHTS = 4 };
/* WEIGHTS: only the forward nodes whose operands are weights and constants alone (a
 * Transpose, Split or Reshape of a weight: what an unrolled recurrent layer or a fused
 * projection makes), so that the backward derives them from the weights in place when it
 * runs, not from the version its forward read. */
/* AUTO: stage s in mode stage_mode[s] (0: none; NULL: FULL everywhere), the planner's
 * choice (partition.h's PASS_PLAN_RC_*, the same values). */
int pass_recompute(ir_graph *g, int mode, const int *stage_mode, int verbose);
/* Whether a forward node's outputs are kept per micro-batch under re-materialisation
 * `mode` rather than recomputed (its op and operands only; the planner asks it too). */
int pass_recompute_keeps(const ir_graph *g, const ir_node *n, int mode);

#endif
