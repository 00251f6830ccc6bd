/* tools/report_gantt.c - the predicted pipeline timeline: a replay of the plan's
 * instruction streams with the simulator's rules and costs (passes/schedule.c, which
 * does not expose per-instruction times): stages run round-robin, each as far as it
 * can; a RECV waits for the message's arrival, a SEND is asynchronous and each link
 * direction carries one message at a time; FWD, BWD and ALLREDUCE take the stage's
 * per-micro-batch times. Drawn as a Gantt chart, one row per stage. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/schedule.h"
#include "tools/report_util.h"

typedef struct {
  int stage, op, mb;
  double t0, t1;
} span;

typedef struct {
  int *mb;
  double *at;
  int head, tail;
  double free_at;
} chan;

/* Replay; returns the spans (FWD, BWD, ALLREDUCE on stages; SEND_* as link spans)
 * and the end time. Returns NULL if the streams cannot finish. */
static span *replay(const pass_plan *pl, const pass_plan_opts *o, int *n_out, double *end) {
  int p = pl->n_stages, total = 0;
  for (int k = 0; k < p; k++) total += pl->streams[k].n;
  span *sp = malloc(sizeof(span) * ((size_t)total + 1));
  chan *act = calloc((size_t)p + 1, sizeof(chan)), *grad = calloc((size_t)p + 1, sizeof(chan));
  int *pc = calloc((size_t)p + 1, sizeof(int));
  double *clk = calloc((size_t)p + 1, sizeof(double)), *ax = calloc((size_t)p + 1, sizeof(double)),
         *gx = calloc((size_t)p + 1, sizeof(double));
  for (int k = 0; k < p; k++) {
    int cnt = pl->streams[k].n + (k + 1 < p ? pl->streams[k + 1].n : 0) + 1;
    act[k].mb = malloc(sizeof(int) * (size_t)cnt), act[k].at = malloc(sizeof(double) * (size_t)cnt);
    grad[k].mb = malloc(sizeof(int) * (size_t)cnt), grad[k].at = malloc(sizeof(double) * (size_t)cnt);
    const pass_stage *S = &pl->stages[k];
    int dnext = S->dev_first + S->replicas;
    if (k + 1 < p) ax[k] = pass_link_ms(&o->topo, dnext - 1, dnext, S->out_bytes);
    if (k > 0) gx[k] = pass_link_ms(&o->topo, S->dev_first, S->dev_first - 1, pl->stages[k - 1].out_grad_bytes);
  }
  int n = 0, done = 0, ok = 1;
  while (done < p && ok) {
    int progress = 0;
    done = 0;
    for (int k = 0; k < p; k++) {
      const pass_stream *st = &pl->streams[k];
      const pass_stage *S = &pl->stages[k];
      while (pc[k] < st->n) {
        const pass_instr *in = &st->v[pc[k]];
        if (in->op == PASS_OP_RECV_ACT || in->op == PASS_OP_RECV_GRAD) {
          int peer = in->op == PASS_OP_RECV_ACT ? k - 1 : k;
          if (peer < 0 || peer >= p) { ok = 0; break; }
          chan *c = in->op == PASS_OP_RECV_ACT ? &act[peer] : &grad[peer];
          if (c->head == c->tail) break; /* blocked */
          double at = c->at[c->head++];
          if (at > clk[k]) clk[k] = at;
        } else if (in->op == PASS_OP_SEND_ACT || in->op == PASS_OP_SEND_GRAD) {
          int peer = in->op == PASS_OP_SEND_ACT ? k : k - 1;
          if (peer < 0 || peer >= p) { ok = 0; break; }
          chan *c = in->op == PASS_OP_SEND_ACT ? &act[peer] : &grad[peer];
          double x = in->op == PASS_OP_SEND_ACT ? ax[k] : gx[k];
          double start = clk[k] > c->free_at ? clk[k] : c->free_at;
          c->free_at = start + x;
          c->mb[c->tail] = in->mb, c->at[c->tail++] = start + x;
          sp[n++] = (span){k, in->op, in->mb, start, start + x};
        } else {
          double dt = in->op == PASS_OP_FWD ? S->fwd_ms
                      : in->op == PASS_OP_BWD ? S->bwd_ms
                      : in->op == PASS_OP_ALLREDUCE ? S->allreduce_ms
                      : 0;
          if (in->op != PASS_OP_STEP) sp[n++] = (span){k, in->op, in->mb, clk[k], clk[k] + dt};
          clk[k] += dt;
        }
        pc[k]++;
        progress = 1;
      }
      if (pc[k] == st->n) done++;
    }
    if (done < p && !progress) ok = 0;
  }
  *end = 0;
  for (int k = 0; k < p; k++)
    if (clk[k] > *end) *end = clk[k];
  for (int k = 0; k < p; k++) free(act[k].mb), free(act[k].at), free(grad[k].mb), free(grad[k].at);
  free(act), free(grad), free(pc), free(clk), free(ax), free(gx);
  if (!ok) {
    free(sp);
    return NULL;
  }
  *n_out = n;
  return sp;
}

enum { LABEL_W = 150, PLOT_W = 1140, ROW_H = 30, BOX_H = 20, TOP = 8, AXIS_H = 28 };

void rep_write_gantt(FILE *f, const pass_planned *P, const pass_plan_opts *o) {
  const pass_plan *pl = &P->plan;
  int p = pl->n_stages, n = 0;
  double end = 0;
  span *sp = pl->streams ? replay(pl, o, &n, &end) : NULL;
  if (!sp) {
    fputs("<p class=\"warn\">No timeline: the plan has no instruction streams that can run to the end.</p>\n", f);
    return;
  }
  double T = end > 0 ? end : 1;
  double sx = PLOT_W / T;
  double W = LABEL_W + PLOT_W + 20, H = TOP + p * ROW_H + AXIS_H;
  char b1[32], b2[32], b3[32];
  rep_ms(b1, sizeof b1, end);
  rep_ms(b2, sizeof b2, pl->predicted_iteration_ms);
  fprintf(f, "<p class=\"muted small\">Replay of the instruction streams with the cost model's times: iteration %s ms "
             "(simulator: %s ms). Boxes are coloured by micro-batch: light = forward, dark = backward; the thin grey "
             "bars under a row are its outgoing transfers.</p>\n",
          b1, b2);
  fprintf(f, "<div id=\"ganttbox\" class=\"scroll\"><svg id=\"gantt\" class=\"zoomable\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\" data-w=\"%.0f\" data-h=\"%.0f\" data-end-ms=\"%.6f\" role=\"img\" "
             "aria-label=\"predicted pipeline timeline\">\n",
          W, H, W, H, W, H, end);
  /* grid and axis */
  double step = rep_nice_step(T, 10);
  fputs("<g class=\"grid\">", f);
  for (int i = 0; i * step <= T * (1 + 1e-9); i++) {
    double x = LABEL_W + i * step * sx;
    rep_ms(b1, sizeof b1, i * step);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/><text x=\"%.1f\" y=\"%d\">%s</text>", x, TOP, x,
            TOP + p * ROW_H + 4, x, TOP + p * ROW_H + 16, b1);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"unit\">time (ms)</text></g>\n", LABEL_W - 70, TOP + p * ROW_H + 16);
  /* row labels */
  for (int k = 0; k < p; k++) {
    const pass_stage *S = &pl->stages[k];
    char c[8];
    rep_stage_color(k, c);
    double y = TOP + k * ROW_H;
    if (k % 2) fprintf(f, "<rect class=\"band\" x=\"0\" y=\"%.0f\" width=\"%.0f\" height=\"%d\"/>", y, W, ROW_H);
    fprintf(f, "<rect x=\"2\" y=\"%.0f\" width=\"6\" height=\"%d\" fill=\"%s\"/>", y + 5, BOX_H, c);
    if (S->replicas > 1)
      fprintf(f, "<text class=\"rl\" x=\"14\" y=\"%.0f\">stage %d \xC2\xB7 GPU %d\xE2\x80\x93%d</text>", y + 19, k,
              S->dev_first, S->dev_first + S->replicas - 1);
    else
      fprintf(f, "<text class=\"rl\" x=\"14\" y=\"%.0f\">stage %d \xC2\xB7 GPU %d</text>", y + 19, k, S->dev_first);
  }
  fputs("\n", f);
  /* boxes */
  for (int i = 0; i < n; i++) {
    const span *s = &sp[i];
    double x = LABEL_W + s->t0 * sx, w = (s->t1 - s->t0) * sx, y = TOP + s->stage * ROW_H;
    rep_ms(b1, sizeof b1, s->t0);
    rep_ms(b2, sizeof b2, s->t1);
    rep_ms(b3, sizeof b3, s->t1 - s->t0);
    if (s->op == PASS_OP_FWD || s->op == PASS_OP_BWD) {
      char c[8];
      int bwd = s->op == PASS_OP_BWD;
      rep_mb_color(s->mb, bwd, c);
      fprintf(f, "<g><rect class=\"gb %s\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>", bwd ? "b" : "f",
              x, y + 3, w > 0.3 ? w : 0.3, BOX_H, c);
      if (w >= 9 + 6.5 * (s->mb >= 10) + 6.5 * (s->mb >= 100))
        fprintf(f, "<text class=\"%s\" x=\"%.2f\" y=\"%.0f\">%d</text>", rep_dark_text(c) ? "gd" : "gl", x + w / 2, y + 17,
                s->mb);
      fprintf(f, "<title>stage %d %s micro-batch %d: %s \xE2\x80\x93 %s ms (%s ms)</title></g>\n", s->stage,
              bwd ? "backward" : "forward", s->mb, b1, b2, b3);
    } else if (s->op == PASS_OP_ALLREDUCE) {
      fprintf(f, "<g><rect class=\"gar\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%d\"/><title>stage %d all-reduce of "
                 "the weights: %s \xE2\x80\x93 %s ms</title></g>\n",
              x, y + 3, w > 0.3 ? w : 0.3, BOX_H, s->stage, b1, b2);
    } else {
      int act = s->op == PASS_OP_SEND_ACT;
      fprintf(f, "<g><rect class=\"gx\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"3\"/><title>stage %d sends %s of "
                 "micro-batch %d to stage %d: %s \xE2\x80\x93 %s ms</title></g>\n",
              x, y + 3 + BOX_H + 1, w > 0.3 ? w : 0.3, s->stage, act ? "activations" : "gradients", s->mb,
              act ? s->stage + 1 : s->stage - 1, b1, b2);
    }
  }
  double xe = LABEL_W + end * sx;
  fprintf(f, "<line class=\"endl\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>", xe, TOP - 4, xe, TOP + p * ROW_H);
  fputs("</svg></div>\n", f);
  free(sp);
}
