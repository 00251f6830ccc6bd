/* codegen/rnn_expr.c - the per-element code of the recurrent ops (codegen/rnn_expr.h). */
#include <stdarg.h>
#include <stdio.h>

#include "codegen/c/cg_c.h"
#include "codegen/rnn_expr.h"

#define LL(x) ((long long)(x))

static void wr(const cg_expr_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wr(const cg_expr_writer *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  w->write(w->ctx, fmt, ap);
  va_end(ap);
}

/* libm name for t: expf / exp */
static const char *fm(char *buf, size_t n, const char *name, ir_dtype t) {
  snprintf(buf, n, "%s%s", name, t == IR_FLOAT ? "f" : "");
  return buf;
}

/* out = a's activation applied to the variable v. */
static void act_expr(char *out, size_t n, const pass_rnn_actv *a, const char *v, ir_dtype t) {
  char one[48], zero[48], al[48], be[48], f1[16], f2[16];
  const char *T = cg_ctype(t);
  cg_flit(one, sizeof one, 1, t);
  snprintf(zero, sizeof zero, "(%s)0", T);
  cg_flit(al, sizeof al, a->alpha, t);
  cg_flit(be, sizeof be, a->beta, t);
  switch (a->fn) {
    case PASS_RNN_SIGMOID:
      fm(f1, sizeof f1, "exp", t);
      snprintf(out, n, "(%s >= 0 ? %s / (%s + %s(-%s)) : %s(%s) / (%s + %s(%s)))", v, one, one, f1, v, f1, v, one, f1,
               v);
      return;
    case PASS_RNN_TANH: snprintf(out, n, "%s(%s)", fm(f1, sizeof f1, "tanh", t), v); return;
    case PASS_RNN_RELU: snprintf(out, n, "(%s < 0 ? %s : %s)", v, zero, v); return;
    case PASS_RNN_LEAKYRELU: snprintf(out, n, "(%s >= 0 ? %s : %s * %s)", v, v, al, v); return;
    case PASS_RNN_THRESHOLDEDRELU: snprintf(out, n, "(%s > %s ? %s : %s)", v, al, v, zero); return;
    case PASS_RNN_HARDSIGMOID:
      snprintf(out, n, "(%s * %s + %s < 0 ? %s : (%s * %s + %s > 1 ? %s : %s * %s + %s))", al, v, be, zero, al, v, be,
               one, al, v, be);
      return;
    case PASS_RNN_AFFINE: snprintf(out, n, "(%s * %s + %s)", al, v, be); return;
    case PASS_RNN_SCALEDTANH: snprintf(out, n, "(%s * %s(%s * %s))", al, fm(f1, sizeof f1, "tanh", t), be, v); return;
    case PASS_RNN_ELU:
      snprintf(out, n, "(%s >= 0 ? %s : %s * (%s(%s) - %s))", v, v, al, fm(f1, sizeof f1, "exp", t), v, one);
      return;
    case PASS_RNN_SOFTSIGN: snprintf(out, n, "(%s / (%s + %s(%s)))", v, one, fm(f1, sizeof f1, "fabs", t), v); return;
    case PASS_RNN_SOFTPLUS:
      fm(f1, sizeof f1, "log1p", t);
      fm(f2, sizeof f2, "exp", t);
      snprintf(out, n, "(%s > 0 ? %s + %s(%s(-%s)) : %s(%s(%s)))", v, v, f1, f2, v, f1, f2, v);
      return;
  }
}

/* `const T name = act(clip(pre));` where pre is a variable */
static void gate(const cg_expr_writer *w, const pass_rnn *r, const pass_rnn_actv *a, ir_dtype t, const char *ind,
                 const char *name, const char *pre) {
  const char *T = cg_ctype(t);
  char e[512], cl[48], v[32];
  snprintf(v, sizeof v, "%s", pre);
  if (r->has_clip) {
    cg_flit(cl, sizeof cl, r->clip, t);
    snprintf(v, sizeof v, "%s_c", pre);
    wr(w, "%sconst %s %s = %s < -%s ? -%s : (%s > %s ? %s : %s);\n", ind, T, v, pre, cl, cl, pre, cl, cl, pre);
  }
  act_expr(e, sizeof e, a, v, t);
  wr(w, "%sconst %s %s = %s;\n", ind, T, name, e);
}

/* `const T name = xw[..] + hr[..] + Wb + Rb;` for gate k (hr_part: 0 leaves out hr and Rb) */
static void pre(const cg_expr_writer *w, const pass_rnn *r, int d, ir_dtype t, const char *ind, const char *name, int k,
                int hr_part) {
  int64_t H = r->H, GH = r->G * H;
  wr(w, "%sconst %s %s = xw[xr + %lld + j]", ind, cg_ctype(t), name, LL(k * H));
  if (hr_part) wr(w, " + hr[b * %lld + %lld + j]", LL(GH), LL(k * H));
  if (r->has_b) {
    wr(w, " + x3[%lld + j]", LL(d * 2 * GH + k * H));
    if (hr_part) wr(w, " + x3[%lld + j]", LL(d * 2 * GH + GH + k * H));
  }
  wr(w, ";\n");
}

void cg_rnn_phase(const cg_expr_writer *w, const pass_rnn *r, int d, int phase, ir_dtype t, const char *ind) {
  const char *T = cg_ctype(t);
  int64_t H = r->H, B = r->B, S = r->S, D = r->D, GH = r->G * H;
  char hidx[96], one[48];
  cg_flit(one, sizeof one, 1, t);
  if (r->layout) snprintf(hidx, sizeof hidx, "(b * %lld + %d) * %lld + j", LL(D), d, LL(H));
  else snprintf(hidx, sizeof hidx, "(%lld + b) * %lld + j", LL(d * B), LL(H));
  const pass_rnn_actv *f = &r->act[d][0], *g = &r->act[d][r->NA > 1 ? 1 : 0], *h = &r->act[d][r->NA > 2 ? 2 : 0];
  switch (phase) {
    case CG_RNN_INIT:
      if (r->has_h0) wr(w, "%shs[b * %lld + j] = x5[%s];\n", ind, LL(H), hidx);
      else wr(w, "%shs[b * %lld + j] = 0;\n", ind, LL(H));
      if (r->op == IR_OP_LSTM && r->has_c0) wr(w, "%scs[b * %lld + j] = x6[%s];\n", ind, LL(H), hidx);
      else if (r->op == IR_OP_LSTM) wr(w, "%scs[b * %lld + j] = 0;\n", ind, LL(H));
      break;
    case CG_RNN_FINI:
      if (r->has_yh) wr(w, "%sy1[%s] = hs[b * %lld + j];\n", ind, hidx, LL(H));
      if (r->has_yc) wr(w, "%sy2[%s] = cs[b * %lld + j];\n", ind, hidx, LL(H));
      break;
    default: break;
  }
  if (phase == CG_RNN_INIT || phase == CG_RNN_FINI) return;
  char in2[32];
  snprintf(in2, sizeof in2, "%s  ", ind);
  if (r->has_seq) wr(w, "%sif (t < (long)x4[b]) {\n", ind);
  else wr(w, "%s{\n", ind);
  if (r->layout) wr(w, "%s  const long xr = (b * %lld + t) * %lld;\n", ind, LL(S), LL(GH));
  else wr(w, "%s  const long xr = (t * %lld + b) * %lld;\n", ind, LL(B), LL(GH));
  if (r->op == IR_OP_GRU) wr(w, "%s  const %s hp = hs[b * %lld + j];\n", ind, T, LL(H));
  if (phase == CG_RNN_RESET) {
    pre(w, r, d, t, in2, "ar", 1, 1);
    gate(w, r, f, t, in2, "rg", "ar");
    wr(w, "%s  rh[b * %lld + j] = rg * hp;\n", ind, LL(H));
    wr(w, "%s}\n", ind);
    return;
  }
  if (r->op == IR_OP_RNN) {
    pre(w, r, d, t, in2, "ai", 0, 1);
    gate(w, r, f, t, in2, "hn", "ai");
  } else if (r->op == IR_OP_GRU) {
    pre(w, r, d, t, in2, "az", 0, 1);
    gate(w, r, f, t, in2, "zg", "az");
    if (r->lbr) {
      pre(w, r, d, t, in2, "ar", 1, 1);
      gate(w, r, f, t, in2, "rg", "ar");
      pre(w, r, d, t, in2, "ax", 2, 0);
      wr(w, "%s  const %s ah = ax + rg * (hr[b * %lld + %lld + j]", ind, T, LL(GH), LL(2 * H));
      if (r->has_b) wr(w, " + x3[%lld + j]", LL(d * 2 * GH + GH + 2 * H));
      wr(w, ");\n");
    } else {
      pre(w, r, d, t, in2, "ah", 2, 1);
    }
    gate(w, r, g, t, in2, "hh", "ah");
    wr(w, "%s  const %s hn = (%s - zg) * hh + zg * hp;\n", ind, T, one);
  } else {
    /* LSTM gates i, o, f, c; peepholes i, o, f */
    wr(w, "%s  const %s cp = cs[b * %lld + j];\n", ind, T, LL(H));
    pre(w, r, d, t, in2, r->has_p ? "ai0" : "ai", 0, 1);
    if (r->has_p) wr(w, "%s  const %s ai = ai0 + x7[%lld + j] * cp;\n", ind, T, LL(d * 3 * H));
    gate(w, r, f, t, in2, "ig", "ai");
    if (r->input_forget) {
      wr(w, "%s  const %s fg = %s - ig;\n", ind, T, one);
    } else {
      pre(w, r, d, t, in2, r->has_p ? "af0" : "af", 2, 1);
      if (r->has_p) wr(w, "%s  const %s af = af0 + x7[%lld + j] * cp;\n", ind, T, LL(d * 3 * H + 2 * H));
      gate(w, r, f, t, in2, "fg", "af");
    }
    pre(w, r, d, t, in2, "ac", 3, 1);
    gate(w, r, g, t, in2, "cg", "ac");
    wr(w, "%s  const %s cn = fg * cp + ig * cg;\n", ind, T);
    pre(w, r, d, t, in2, r->has_p ? "ao0" : "ao", 1, 1);
    if (r->has_p) wr(w, "%s  const %s ao = ao0 + x7[%lld + j] * cn;\n", ind, T, LL(d * 3 * H + H));
    gate(w, r, f, t, in2, "og", "ao");
    char e[512];
    act_expr(e, sizeof e, h, "cn", t);
    wr(w, "%s  const %s hn = og * %s;\n", ind, T, e);
    wr(w, "%s  cs[b * %lld + j] = cn;\n", ind, LL(H));
  }
  wr(w, "%s  hs[b * %lld + j] = hn;\n", ind, LL(H));
  if (r->has_y) {
    if (r->layout) wr(w, "%s  y0[((b * %lld + t) * %lld + %d) * %lld + j] = hn;\n", ind, LL(S), LL(D), d, LL(H));
    else wr(w, "%s  y0[((t * %lld + %d) * %lld + b) * %lld + j] = hn;\n", ind, LL(D), d, LL(B), LL(H));
  }
  wr(w, "%s}\n", ind);
}
