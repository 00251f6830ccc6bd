/* passes/train/autodiff_impl.h - internals shared by passes/train/autodiff.c (backward
 * rules) and passes/train/optim.c (loss, optimizer, the training step driver). Nodes are
 * made with the helpers of passes/rewrite.h. */
#ifndef PIPECC_PASSES_AUTODIFF_IMPL_H
#define PIPECC_PASSES_AUTODIFF_IMPL_H
#include "passes/rewrite.h"

/* Reverse pass from the float scalar `loss`: fills a->grad for every value the loss
 * depends on through differentiable inputs. 0 or -1 (reported). */
int ad_backward(ad_ctx *a, int loss);

#endif
