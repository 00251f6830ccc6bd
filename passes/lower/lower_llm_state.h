/* passes/lower/lower_llm_state.h - SwiGLU, TensorScatter, CausalConvWithState and
 * LinearAttention written in other ops (passes/lower/lower_llm_state.c), called by
 * pass_lower_ops. */
#ifndef PIPECC_PASSES_LOWER_LLM_STATE_H
#define PIPECC_PASSES_LOWER_LLM_STATE_H
#include "passes/rewrite.h"

/* n is one of the ops lower_llm_state.c writes in other ops */
int llm_state_is_lowered(const ir_node *n);
/* node (llm_state_is_lowered) replaced by the ops it is; 0, or -1 (reported) */
int llm_state_lower(ad_ctx *a, int node);
#endif
