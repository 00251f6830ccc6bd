/* passes/lower/lower_llm.h - RMSNormalization, Swish, RotaryEmbedding and Attention written
 * in other ops (passes/lower/lower_llm.c), called by pass_lower_ops. */
#ifndef PIPECC_PASSES_LOWER_LLM_H
#define PIPECC_PASSES_LOWER_LLM_H
#include "passes/rewrite.h"

/* n is one of the ops lower_llm.c writes in other ops */
int llm_is_lowered(const ir_node *n);
/* node (llm_is_lowered) replaced by the ops it is; 0, or -1 (reported) */
int llm_lower(ad_ctx *a, int node);
#endif
