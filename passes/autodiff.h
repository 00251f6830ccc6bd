/* passes/autodiff.h - training: loss, reverse-mode autodiff and the optimizer step.
 *
 * pass_autodiff turns an inferred forward graph (after bind, fold and shape, compiled
 * with pass_opts.training so trainable initializers were not folded) into the graph of
 * ONE TRAINING STEP, a pure function that every backend compiles like an inference
 * model:
 *
 *   inputs:  the model's inputs, plus the labels (int64, the logits' shape without its
 *            class dim, for cross-entropy; the output's shape and dtype for MSE)
 *   outputs: "loss" (float scalar), then per trained initializer P (a float initializer
 *            the loss depends on, in file order) "grad/P" and "new/P", then the new
 *            optimizer state "new/state/..." (momentum buffers, Adam's m, v and step),
 *            then "new/<name>" for the running mean and variance that a
 *            BatchNormalization in training mode updates (as its emitter computes them).
 *   state:   optimizer state is added as zero initializers "state/P/momentum",
 *            "state/P/m", "state/P/v", "state/step" (is_initializer set): a runtime
 *            that trains for several steps feeds "new/state/..." back into them.
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
 * weight decay), Adam (L2 weight decay) and AdamW (decoupled weight decay). */
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
  double beta1, beta2, eps; /* Adam/AdamW: defaults 0.9, 0.999, 1e-8 */
  int verbose;
} pass_train_opts;

/* Defaults as documented above. */
void pass_train_opts_default(pass_train_opts *t);
/* Build the training step graph in place. 0, or -1 after reporting model errors
 * (every unsupported op is reported at once). */
int pass_autodiff(ir_graph *g, const pass_train_opts *t);

#endif
