/* passes/lower/lower_llm.h - RMSNormalization, Swish, RotaryEmbedding and Attention written
 * in other ops (passes/lower/lower_llm.c), called by pass_lower_ops. */
#ifndef PIPECC_PASSES_LOWER_LLM_H
#define PIPECC_PASSES_LOWER_LLM_H
#include "passes/rewrite.h"

/* n is one of the ops lower_llm.c writes in other ops */
int llm_is_lowered(const ir_node *n);
/* node (llm_is_lowered) replaced by the ops it is; 0, or -1 (reported) */
int llm_lower(ad_ctx *a, int node);

/* Attention's geometry (after shape inference): batch, query and key/value heads, query,
 * new key and past lengths, head sizes of Q/K and V; three_d: Q, K and V are
 * [B, S, H*D]. 0, or -1 (reported: a form it does not take). */
typedef struct {
  int64_t B, Hq, Hkv, Sq, Skv, Sp, D, Dv;
  int three_d;
} llm_attn_dims;
int llm_attn_geometry(ir_graph *g, int node, llm_attn_dims *d);
/* x [B, S, H*D] as [B, H, S, D] (a Reshape and a Transpose) */
int llm_heads_first(ad_ctx *a, int x, int64_t B, int64_t S, int64_t H, int64_t D);
/* Attention node n runs as one fused node (both targets' kernels: codegen/c/ops_nn.c,
 * codegen/cuda/ops.c) rather than written in other ops: in inference, float, float16 or
 * bfloat16, without the qk_matmul_output output (which needs the whole score matrix:
 * that form, and training, whose backward is taken through the ops, are lowered). */
int llm_attention_fused(const ir_graph *g, const ir_node *n, int training);
/* What a fused Attention kernel computes, read from the node: the geometry, total length
 * T, scale, softcap (0: none), is_causal, the windows (-1: unbounded), and the mask: its
 * element for (b, h, i, j) at b * mB + h * mH + i * mS + j * mT (0 strides where it
 * broadcasts), keys j >= Tm masked (a mask shorter than T); mask_bool: 0/-inf from a
 * boolean; nonpad: input 6 given (the offset of the causal frontier and the windows is
 * then nonpad_kv_seqlen[b] - Sq, else Sp). */
typedef struct {
  llm_attn_dims d;
  int64_t T, lw, rw, mB, mH, mS, mT, Tm;
  double scale, cap;
  int causal, has_mask, mask_bool, nonpad;
} llm_attn_plan;
int llm_attn_plan_of(ir_graph *g, int node, llm_attn_plan *p);
#endif
