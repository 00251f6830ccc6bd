/* codegen/c/ops_attn.c - the cpu target's fused Attention (opsets 23 to 25, float; float16
 * and bfloat16 reach it widened), for the nodes passes/lower/lower_llm.c keeps whole
 * (llm_attention_fused: inference without the qk_matmul_output output; the rest is
 * written in other ops there).
 *
 * Blocked, flash-attention style: for each key/value head, K^T [D, T] and V [T, Dv]
 * gathered once from the past and the new keys (the present outputs written alongside);
 * for each of its query heads and each block of up to AT_BQ (48) queries, the keys in blocks
 * of up to AT_BK: the block's scores S = Q_blk K_blk^T (pipert_gemm_direct), times scale,
 * softcapped, plus the mask, -inf outside the causal frontier and the windows; an online
 * softmax (running row max m and sum l; the accumulator rescaled by e^(m_old - m_new))
 * and O += P V_blk (pipert_gemm_direct, O the residual input). Key blocks wholly past the
 * causal frontier, the right window or nonpad_kv_seqlen, or before the left window, are
 * not computed. Y = O / l; a row with no key left gives zeros. Scratch holds K^T, V, one
 * query block, one score block and two accumulators: O(T (D + Dv) + AT_BQ (AT_BK + D +
 * 2 Dv)) floats, never the [Sq, T] matrix. The order of every sum is fixed by the
 * shapes, so every stage count gives the same bits. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/c/cg_c.h"
#include "passes/lower/lower_llm.h"

#define AT_BQ 48
#define AT_BK 256
#define LL(x) ((long long)(x))

int cg_emit_attention(cg_ctx *c, const ir_node *n) {
  llm_attn_plan p;
  if (llm_attn_plan_of(c->g, (int)(n - c->g->nodes), &p)) return -1;
  const llm_attn_dims *d = &p.d;
  if (cg_in(c, n, 0)->dtype != IR_FLOAT)
    return cg_fail(c, n, "Attention on %s is not supported by the fused kernel", ir_dtype_name(cg_in(c, n, 0)->dtype));
  int64_t T = p.T, BQ = d->Sq < AT_BQ ? d->Sq : AT_BQ, BK = T < AT_BK ? T : AT_BK;
  if (d->B == 0 || d->Sq == 0 || d->Hq == 0) return 0;
  int has_y1 = cg_out(c, n, 1) != NULL, has_y2 = cg_out(c, n, 2) != NULL, has_y = cg_out(c, n, 0) != NULL;
  /* element strides (batch, head, sequence) of Q, K, V and Y in their layouts */
  int64_t qB, qH, qS, kB, kH, kS, vB, vH, vS, yB, yH, yS;
  if (d->three_d) {
    qB = d->Sq * d->Hq * d->D, qH = d->D, qS = d->Hq * d->D;
    kB = d->Skv * d->Hkv * d->D, kH = d->D, kS = d->Hkv * d->D;
    vB = d->Skv * d->Hkv * d->Dv, vH = d->Dv, vS = d->Hkv * d->Dv;
    yB = d->Sq * d->Hq * d->Dv, yH = d->Dv, yS = d->Hq * d->Dv;
  } else {
    qB = d->Hq * d->Sq * d->D, qH = d->Sq * d->D, qS = d->D;
    kB = d->Hkv * d->Skv * d->D, kH = d->Skv * d->D, kS = d->D;
    vB = d->Hkv * d->Skv * d->Dv, vH = d->Skv * d->Dv, vS = d->Dv;
    yB = d->Hq * d->Sq * d->Dv, yH = d->Sq * d->Dv, yS = d->Dv;
  }
  if (T == 0 || d->Skv + d->Sp == 0) {
    if (has_y) cg_w(c, "  memset(y0, 0, sizeof(float) * %lld);\n", LL(d->B * d->Hq * d->Sq * d->Dv));
    return 0;
  }
  c->gemm_direct = 1;
  size_t fl = (size_t)(T * d->D + T * d->Dv + BQ * d->D + BQ * BK + 2 * BQ * d->Dv + 2 * BQ);
  cg_scratch(c, fl * sizeof(float));
  char l1[48], l2[48];
  cg_w(c, "  const long B = %lld, HKV = %lld, G = %lld, SQ = %lld, SP = %lld, T = %lld, D = %lld, DV = %lld;\n",
       LL(d->B), LL(d->Hkv), LL(d->Hq / d->Hkv), LL(d->Sq), LL(d->Sp), LL(T), LL(d->D), LL(d->Dv));
  cg_w(c, "  const long BQ = %lld, BK = %lld;\n", LL(BQ), LL(BK));
  cg_w(c, "  float *kt = (float *)scr, *vh = kt + T * D, *qb = vh + T * DV, *sb = qb + BQ * D;\n");
  cg_w(c, "  float *o0 = sb + BQ * BK, *o1 = o0 + BQ * DV, *mx = o1 + BQ * DV, *lx = mx + BQ;\n");
  cg_w(c, "  for (long b = 0; b < B; b++) {\n");
  if (p.nonpad) {
    cg_w(c, "    const long np = x6[b] < 0 ? 0 : x6[b] > T ? T : (long)x6[b];\n");
    cg_w(c, "    const long off = (long)x6[b] - SQ; /* the query's position is i + off */\n");
  } else {
    cg_w(c, "    const long np = T, off = SP;\n");
  }
  cg_w(c, "    (void)np;\n    (void)off;\n");
  cg_w(c, "    for (long hk = 0; hk < HKV; hk++) {\n");
  /* K^T and V of the head, the present outputs as they are gathered */
  cg_w(c, "      for (long j = 0; j < T; j++) {\n");
  const char *pk = d->Sp ? "j < SP ? x4 + ((b * HKV + hk) * SP + j) * D : " : "";
  const char *pv = d->Sp ? "j < SP ? x5 + ((b * HKV + hk) * SP + j) * DV : " : "";
  cg_w(c, "        const float *kr = %sx1 + b * %lldL + hk * %lldL + (j - SP) * %lldL;\n", pk, LL(kB), LL(kH), LL(kS));
  cg_w(c, "        const float *vr = %sx2 + b * %lldL + hk * %lldL + (j - SP) * %lldL;\n", pv, LL(vB), LL(vH), LL(vS));
  cg_w(c, "        for (long e = 0; e < D; e++) kt[e * T + j] = kr[e];\n");
  cg_w(c, "        for (long e = 0; e < DV; e++) vh[j * DV + e] = vr[e];\n");
  if (has_y1) cg_w(c, "        memcpy(y1 + ((b * HKV + hk) * T + j) * D, kr, sizeof(float) * D);\n");
  if (has_y2) cg_w(c, "        memcpy(y2 + ((b * HKV + hk) * T + j) * DV, vr, sizeof(float) * DV);\n");
  cg_w(c, "      }\n");
  if (!has_y) {
    cg_w(c, "    }\n  }\n");
    return 0;
  }
  cg_w(c, "      for (long g = 0; g < G; g++) {\n        const long h = hk * G + g;\n        (void)h;\n");
  cg_w(c, "        for (long i0 = 0; i0 < SQ; i0 += BQ) {\n");
  cg_w(c, "          const long nq = SQ - i0 < BQ ? SQ - i0 : BQ;\n");
  cg_w(c, "          for (long r = 0; r < nq; r++) {\n");
  cg_w(c, "            memcpy(qb + r * D, x0 + b * %lldL + h * %lldL + (i0 + r) * %lldL, sizeof(float) * D);\n", LL(qB),
       LL(qH), LL(qS));
  cg_w(c, "            mx[r] = -INFINITY;\n            lx[r] = 0;\n          }\n");
  cg_w(c, "          memset(o0, 0, sizeof(float) * nq * DV);\n");
  /* the keys any query of the block may see */
  cg_w(c, "          long jlo = 0, jhi = np;\n");
  if (p.causal) cg_w(c, "          if (jhi > i0 + nq + off) jhi = i0 + nq + off;\n");
  if (p.rw >= 0) cg_w(c, "          if (jhi > i0 + nq + off + %lldL) jhi = i0 + nq + off + %lldL;\n", LL(p.rw), LL(p.rw));
  if (p.lw >= 0) cg_w(c, "          if (jlo < i0 + off - %lldL) jlo = i0 + off - %lldL;\n", LL(p.lw), LL(p.lw));
  cg_w(c, "          float *oo = o0, *on = o1;\n");
  cg_w(c, "          for (long j0 = jlo; j0 < jhi; j0 += BK) {\n");
  cg_w(c, "            const long nk = jhi - j0 < BK ? jhi - j0 : BK;\n");
  cg_w(c, "            pipert_gemm_direct(nq, nk, D, qb, kt + j0, T, NULL, sb, nk, NULL, 0, 0, 0.0f, 0.0f);\n");
  cg_w(c, "            for (long r = 0; r < nq; r++) {\n");
  cg_w(c, "              const long i = i0 + r;\n              float *s = sb + r * nk;\n              (void)i;\n");
  cg_w(c, "              for (long k = 0; k < nk; k++) s[k] = s[k] * %s;\n", cg_flit(l1, sizeof l1, p.scale, IR_FLOAT));
  if (p.cap > 0) {
    cg_flit(l1, sizeof l1, p.cap, IR_FLOAT);
    cg_w(c, "              for (long k = 0; k < nk; k++) s[k] = tanhf(s[k] / %s) * %s;\n", l1, l1);
  }
  if (p.has_mask) {
    cg_w(c, "              const %s *mp = x3 + b * %lldL + h * %lldL + i * %lldL;\n", p.mask_bool ? "uint8_t" : "float",
         LL(p.mB), LL(p.mH), LL(p.mS));
    const char *mj = p.mT ? "mp[j0 + k]" : "mp[0]";
    if (p.Tm < T) cg_w(c, "              for (long k = 0; k < nk; k++) if (j0 + k >= %lldL) s[k] = -INFINITY; else\n", LL(p.Tm));
    else cg_w(c, "              for (long k = 0; k < nk; k++)\n");
    if (p.mask_bool) cg_w(c, "                s[k] = %s ? s[k] : -INFINITY;\n", mj);
    else cg_w(c, "                s[k] = s[k] + %s;\n", mj);
  }
  if (p.causal) cg_w(c, "              for (long k = i + off + 1 - j0 < 0 ? 0 : i + off + 1 - j0; k < nk; k++) s[k] = -INFINITY;\n");
  if (p.rw >= 0)
    cg_w(c, "              for (long k = i + off + %lldL + 1 - j0 < 0 ? 0 : i + off + %lldL + 1 - j0; k < nk; k++) s[k] = -INFINITY;\n",
         LL(p.rw), LL(p.rw));
  if (p.lw >= 0) cg_w(c, "              for (long k = 0; k < nk && j0 + k < i + off - %lldL; k++) s[k] = -INFINITY;\n", LL(p.lw));
  /* the row's max in 16 lanes, then the online softmax */
  cg_w(c, "              float ml[16];\n              for (long l = 0; l < 16; l++) ml[l] = -INFINITY;\n");
  cg_w(c, "              long k = 0;\n");
  cg_w(c, "              for (; k + 16 <= nk; k += 16)\n                for (long l = 0; l < 16; l++) ml[l] = s[k + l] > ml[l] ? s[k + l] : ml[l];\n");
  cg_w(c, "              for (long l = 0; k < nk; k++, l++) ml[l] = s[k] > ml[l] ? s[k] : ml[l];\n");
  cg_w(c, "              for (long w = 8; w >= 1; w /= 2)\n                for (long l = 0; l < w; l++) ml[l] = ml[l + w] > ml[l] ? ml[l + w] : ml[l];\n");
  cg_w(c, "              if (!(ml[0] > -INFINITY)) { /* no key of this block: P is 0 */\n");
  cg_w(c, "                for (long q = 0; q < nk; q++) s[q] = 0;\n                continue;\n              }\n");
  cg_w(c, "              const float mn = ml[0] > mx[r] ? ml[0] : mx[r], cr = pk_expf_le0(mx[r] - mn);\n");
  cg_w(c, "              float sl[16];\n              for (long l = 0; l < 16; l++) sl[l] = 0;\n              k = 0;\n");
  cg_w(c, "              for (; k + 16 <= nk; k += 16)\n                for (long l = 0; l < 16; l++) sl[l] += (s[k + l] = pk_expf_le0(s[k + l] - mn));\n");
  cg_w(c, "              for (long l = 0; k < nk; k++, l++) sl[l] += (s[k] = pk_expf_le0(s[k] - mn));\n");
  cg_w(c, "              for (long w = 8; w >= 1; w /= 2)\n                for (long l = 0; l < w; l++) sl[l] += sl[l + w];\n");
  cg_w(c, "              lx[r] = lx[r] * cr + sl[0];\n              mx[r] = mn;\n");
  cg_w(c, "              for (long e = 0; e < DV; e++) oo[r * DV + e] *= cr;\n            }\n");
  cg_w(c, "            pipert_gemm_direct(nq, DV, nk, sb, vh + j0 * DV, DV, NULL, on, DV, oo, DV, 0, 0.0f, 0.0f);\n");
  cg_w(c, "            float *t_ = oo;\n            oo = on;\n            on = t_;\n          }\n");
  cg_w(c, "          for (long r = 0; r < nq; r++) {\n");
  cg_w(c, "            float *yr = y0 + b * %lldL + h * %lldL + (i0 + r) * %lldL;\n", LL(yB), LL(yH), LL(yS));
  cg_w(c, "            const float l = lx[r];\n");
  cg_w(c, "            for (long e = 0; e < DV; e++) yr[e] = l > 0 ? oo[r * DV + e] / l : 0.0f;\n          }\n");
  cg_w(c, "        }\n      }\n    }\n  }\n");
  (void)l2;
  return 0;
}
