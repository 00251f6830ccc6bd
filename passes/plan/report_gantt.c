/* passes/plan/report_gantt.c - the predicted pipeline timeline: the simulator's spans
 * (passes/plan/schedule.c: pass_schedule_simulate with the plan's costs), drawn as a
 * Gantt chart, one row per device: a stage with r replicas gets r rows, replica j
 * running the micro-batches with mb % r == j. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan/schedule.h"
#include "passes/plan/report_util.h"

enum { LABEL_W = 150, PLOT_W = 1140, ROW_H = 30, BOX_H = 20, TOP = 8, AXIS_H = 28 };

void rep_write_gantt(FILE *f, const pass_planned *P, const pass_plan_opts *o) {
  const pass_plan *pl = &P->plan;
  int p = pl->n_stages;
  const char *dev_word = o && o->device_word ? o->device_word : "device";
  pass_sim_result res;
  memset(&res, 0, sizeof res);
  pass_sim_stage *cost = p > 0 ? calloc((size_t)p, sizeof *cost) : NULL;
  int *row0 = calloc((size_t)p + 1, sizeof(int));
  int ok = pl->streams && cost && row0;
  if (ok) {
    pass_schedule_costs(o, pl, cost);
    ok = pass_schedule_simulate(p, pl->streams, cost, &res) == 0;
  }
  free(cost);
  if (!ok) {
    free(row0);
    fputs("<p class=\"warn\">No timeline: the plan has no instruction streams that can run to the end.</p>\n", f);
    return;
  }
  for (int k = 0; k < p; k++) row0[k + 1] = row0[k] + (pl->stages[k].replicas > 1 ? pl->stages[k].replicas : 1);
  int rows = row0[p], n = res.n_spans;
  const pass_sim_span *sp = res.spans;
  double end = res.iteration_ms;
  double T = end > 0 ? end : 1;
  double sx = PLOT_W / T;
  double W = LABEL_W + PLOT_W + 20, H = TOP + rows * ROW_H + AXIS_H;
  char b1[32], b2[32], b3[32];
  rep_ms(b1, sizeof b1, end);
  fprintf(f,
          "<p class=\"muted small\">Simulated with the cost model's times: iteration %s ms. Boxes are coloured by "
          "micro-batch: light = forward, dark = backward; the thin grey bars under a row are its outgoing transfers. "
          "A replicated stage has a row per device, each running every r-th micro-batch.</p>\n",
          b1);
  fprintf(f,
          "<div id=\"ganttbox\" class=\"scroll\"><svg id=\"gantt\" class=\"zoomable\" width=\"%.0f\" height=\"%.0f\" "
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
            TOP + rows * ROW_H + 4, x, TOP + rows * ROW_H + 16, b1);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"unit\">time (ms)</text></g>\n", LABEL_W - 70, TOP + rows * ROW_H + 16);
  /* row labels */
  for (int k = 0; k < p; k++) {
    const pass_stage *S = &pl->stages[k];
    char c[8];
    rep_stage_color(k, c);
    for (int j = 0; j < row0[k + 1] - row0[k]; j++) {
      double y = TOP + (row0[k] + j) * ROW_H;
      if (k % 2) fprintf(f, "<rect class=\"band\" x=\"0\" y=\"%.0f\" width=\"%.0f\" height=\"%d\"/>", y, W, ROW_H);
      fprintf(f, "<rect x=\"2\" y=\"%.0f\" width=\"6\" height=\"%d\" fill=\"%s\"/>", y + 5, BOX_H, c);
      fprintf(f, "<text class=\"rl\" x=\"14\" y=\"%.0f\">stage %d \xC2\xB7 %s %d</text>", y + 19, k, dev_word,
              S->dev_first + j);
    }
  }
  fputs("\n", f);
  /* boxes */
  for (int i = 0; i < n; i++) {
    const pass_sim_span *s = &sp[i];
    double x = LABEL_W + s->t0 * sx, w = (s->t1 - s->t0) * sx, y = TOP + (row0[s->stage] + s->replica) * ROW_H;
    rep_ms(b1, sizeof b1, s->t0);
    rep_ms(b2, sizeof b2, s->t1);
    rep_ms(b3, sizeof b3, s->t1 - s->t0);
    if (s->op == PASS_OP_FWD || s->op == PASS_OP_BWD) {
      char c[8];
      int bwd = s->op == PASS_OP_BWD;
      rep_mb_color(s->mb, bwd, c);
      fprintf(f, "<g><rect class=\"gb %s\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>",
              bwd ? "b" : "f", x, y + 3, w > 0.3 ? w : 0.3, BOX_H, c);
      if (w >= 9 + 6.5 * (s->mb >= 10) + 6.5 * (s->mb >= 100))
        fprintf(f, "<text class=\"%s\" x=\"%.2f\" y=\"%.0f\">%d</text>", rep_dark_text(c) ? "gd" : "gl", x + w / 2,
                y + 17, s->mb);
      fprintf(f, "<title>stage %d %s micro-batch %d: %s \xE2\x80\x93 %s ms (%s ms)</title></g>\n", s->stage,
              bwd ? "backward" : "forward", s->mb, b1, b2, b3);
    } else if (s->op == PASS_OP_ALLREDUCE) {
      fprintf(
          f,
          "<g><rect class=\"gar\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%d\"/><title>stage %d all-reduce of "
          "the weights: %s \xE2\x80\x93 %s ms</title></g>\n",
          x, y + 3, w > 0.3 ? w : 0.3, BOX_H, s->stage, b1, b2);
    } else {
      int act = s->op == PASS_OP_SEND_ACT;
      fprintf(f,
              "<g><rect class=\"gx\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"3\"/><title>stage %d sends %s of "
              "micro-batch %d to stage %d: %s \xE2\x80\x93 %s ms</title></g>\n",
              x, y + 3 + BOX_H + 1, w > 0.3 ? w : 0.3, s->stage, act ? "activations" : "gradients", s->mb,
              act ? s->stage + 1 : s->stage - 1, b1, b2);
    }
  }
  double xe = LABEL_W + end * sx;
  fprintf(f, "<line class=\"endl\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>", xe, TOP - 4, xe, TOP + rows * ROW_H);
  fputs("</svg></div>\n", f);
  pass_sim_result_free(&res);
  free(row0);
}
