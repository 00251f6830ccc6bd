/* passes/lower/lower_loss.h - NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss nodes of
 * an inference graph written out in ops every target has (passes/lower/lower_loss.c). */
#ifndef PIPECC_PASSES_LOWER_LOSS_H
#define PIPECC_PASSES_LOWER_LOSS_H

#include "ir/ir.h"

/* After shape inference. Returns the number of nodes lowered, or -1 (reported, naming
 * the node). */
int pass_lower_losses(ir_graph *g);

#endif
