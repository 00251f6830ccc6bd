/* passes/plan/report_html.c - the planner's report: one self-contained HTML page.
 *
 * Sections: header (model, command, device, key figures), the DAG coloured by stage
 * (report_dag.c), per-stage time and memory bars, the predicted timeline
 * (report_gantt.c) and a table of stages. Everything is inline (CSS, SVG, a little
 * JS for zoom, overview and search); nothing is fetched. Names from the model are
 * escaped and cut (rep_esc). The only timing figure, the planner's wall time, sits
 * in one element, <span id="planner-ms">, so two runs differ only there; like
 * plan.json, it is left out when SOURCE_DATE_EPOCH is set (reproducible builds). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan/profile.h"
#include "passes/plan/schedule.h"
#include "passes/plan/report_html.h"
#include "passes/plan/report_util.h"

static const char CSS[] =
    ":root{--fg:#1d232a;--muted:#5f6b76;--line:#d9dee3;--panel:#f6f8fa}\n"
    "*{box-sizing:border-box}\n"
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue','DejaVu Sans',Arial,sans-serif;"
    "color:var(--fg);margin:0;background:#fff}\n"
    "main{max-width:1360px;margin:0 auto;padding:18px 24px 40px}\n"
    "h1{font-size:22px;margin:0 0 6px;word-break:break-all}\n"
    "h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}\n"
    ".mono,code,td.name{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace}\n"
    "code.cmd{display:block;background:var(--panel);border:1px solid var(--line);padding:6px 8px;border-radius:4px;"
    "white-space:pre-wrap;word-break:break-all;font-size:12px;max-height:7.5em;overflow:auto}\n"
    ".muted{color:var(--muted)}.small{font-size:12.5px;margin:4px 0 8px}\n"
    ".warn{color:#a4262c}\n"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,1fr));gap:8px;margin-top:12px}\n"
    ".card{border:1px solid var(--line);border-radius:6px;padding:7px 10px;background:var(--panel)}\n"
    ".card .k{font-size:12px;color:var(--muted)}.card .v{font-size:18px;font-weight:600;white-space:nowrap}"
    ".card .s{font-size:12px;color:var(--muted)}\n"
    ".card.hl{border-color:#4e79a7;background:#eef3f9}\n"
    ".scroll{overflow:auto;border:1px solid var(--line);border-radius:4px;background:#fff}\n"
    "#dagbox{max-height:560px}\n"
    ".toolbar{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:4px 0}\n"
    ".toolbar button{font:inherit;font-size:13px;min-width:30px;padding:1px 8px;border:1px solid #b8c0c8;"
    "background:#fff;border-radius:4px;cursor:pointer}\n"
    ".toolbar input{font:inherit;font-size:13px;padding:1px 6px}\n"
    ".legend{display:flex;flex-wrap:wrap;gap:4px 10px;font-size:12.5px}\n"
    ".chip{white-space:nowrap}.chip i{display:inline-block;width:12px;height:12px;border-radius:2px;"
    "vertical-align:-2px;margin-right:4px;border:1px solid rgba(0,0,0,.25)}\n"
    "svg text{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace}\n"
    "text.d{fill:#111}text.l{fill:#fff}\n"
    "#dag text{font-size:10px;text-anchor:middle;pointer-events:none}\n"
    "#dag .ruler text{text-anchor:start;font-weight:600}\n"
    "#dag .ruler rect{rx:2px}\n"
    "#dag .nodes rect{rx:3px;stroke:rgba(0,0,0,.4);stroke-width:.7}\n"
    "#dag g.n:hover rect{stroke:#000;stroke-width:2}\n"
    "#dag g.n.hit rect{stroke:#000;stroke-width:3.5}\n"
    "#dag path{fill:none}#dag .e path{stroke:#9aa4ae;stroke-width:1;opacity:.8}"
    "#dag .el path{stroke:#9aa4ae;stroke-width:.8;opacity:.55}\n"
    "#dag .ecut path{stroke:#1d232a;stroke-width:1.7}#dag .ecutl path{stroke:#1d232a;stroke-width:.9;opacity:.5}\n"
    ".mini{display:block;width:100%;height:56px;border:1px solid var(--line);border-radius:4px;margin:0 0 6px;"
    "cursor:pointer;background:#fff}\n"
    "#dagview{fill:rgba(0,0,0,.07);stroke:#1d232a;stroke-width:1.5;vector-effect:non-scaling-stroke}\n"
    ".charts{display:flex;flex-wrap:wrap;gap:16px 28px}.chart{flex:0 1 640px;min-width:0}.chart svg{max-width:100%;height:auto}\n"
    ".chart h3{font-size:14px;margin:4px 0}\n"
    ".chart text{font-size:11px;fill:#333}.chart text.lbl{font-size:12px}.chart text.val{fill:#1d232a}\n"
    ".chart .axis line{stroke:#e3e7eb}\n"
    ".chart line.bn{stroke:#c62828;stroke-width:1.5;stroke-dasharray:5 3}\n"
    ".chart line.lb{stroke:#2e7d32;stroke-width:1.5;stroke-dasharray:2 3}\n"
    ".chart line.lim{stroke:#c62828;stroke-width:2}\n"
    ".chart line.pk{stroke:#1d232a;stroke-width:2}\n"
    "#gantt text{font-size:11px}#gantt .grid line{stroke:#e3e7eb}#gantt .grid text{text-anchor:middle;fill:#555}\n"
    "#gantt .grid text.unit{text-anchor:start}#gantt text.rl{font-size:12px;fill:#1d232a}\n"
    "#gantt .band{fill:#f6f8fa}#gantt .gb{stroke:rgba(0,0,0,.35);stroke-width:.5}\n"
    "#gantt text.gd,#gantt text.gl{text-anchor:middle;font-size:10px;pointer-events:none}"
    "#gantt text.gd{fill:#111}#gantt text.gl{fill:#fff}\n"
    "#gantt .gar{fill:#7d8792}#gantt .gx{fill:#a9b1b9}#gantt .endl{stroke:#c62828;stroke-width:1.5}\n"
    "table{border-collapse:collapse;font-size:13px;width:100%}\n"
    "th,td{border-bottom:1px solid var(--line);padding:4px 7px;text-align:right;white-space:nowrap}\n"
    "th{background:var(--panel);font-weight:600;white-space:normal;vertical-align:bottom}\n"
    "td.l,th.l{text-align:left}td.name{white-space:normal;word-break:break-all;text-align:left;font-size:12px;"
    "min-width:180px;max-width:300px}\n"
    "tr.bn td{background:#fdf0f0}\n"
    "td .sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-2px;margin-right:6px;"
    "border:1px solid rgba(0,0,0,.25)}\n"
    "footer{margin-top:28px;font-size:12px;color:var(--muted)}\n";

static const char JS[] =
    "(function(){\n"
    "var dag=document.getElementById('dag'),box=document.getElementById('dagbox'),\n"
    "    mini=document.getElementById('dagmini'),view=document.getElementById('dagview');\n"
    "function zf(s){return +(s.dataset.z||1);}\n"
    "function upd(){if(!dag||!view)return;var z=zf(dag);view.setAttribute('x',box.scrollLeft/z);"
    "view.setAttribute('y',box.scrollTop/z);\n"
    "  view.setAttribute('width',Math.min(dag.dataset.w,box.clientWidth/z));"
    "view.setAttribute('height',Math.min(dag.dataset.h,box.clientHeight/z));}\n"
    "function zoomTo(svg,z){z=Math.max(0.02,Math.min(8,z));svg.dataset.z=z;\n"
    "  svg.setAttribute('width',svg.dataset.w*z);svg.setAttribute('height',svg.dataset.h*z);upd();}\n"
    "document.querySelectorAll('button[data-zoom]').forEach(function(b){b.addEventListener('click',function(){\n"
    "  var svg=document.getElementById(b.dataset.zoom),v=b.dataset.z,z=zf(svg);\n"
    "  if(v==='fit')z=Math.min(1,(svg.parentNode.clientWidth-4)/svg.dataset.w);else if(v==='1')z=1;else z*=+v;\n"
    "  zoomTo(svg,z);});});\n"
    "document.querySelectorAll('svg.zoomable').forEach(function(svg){var b=svg.parentNode;\n"
    "  b.addEventListener('wheel',function(e){if(!e.ctrlKey)return;e.preventDefault();\n"
    "    var r=b.getBoundingClientRect(),z=zf(svg),ox=e.clientX-r.left,oy=e.clientY-r.top,\n"
    "        mx=(ox+b.scrollLeft)/z,my=(oy+b.scrollTop)/z;\n"
    "    zoomTo(svg,z*(e.deltaY<0?1.15:1/1.15));z=zf(svg);b.scrollLeft=mx*z-ox;b.scrollTop=my*z-oy;},{passive:false});});\n"
    "if(dag){box.addEventListener('scroll',upd);window.addEventListener('resize',upd);\n"
    "  mini.addEventListener('click',function(e){var r=mini.getBoundingClientRect(),z=zf(dag);\n"
    "    box.scrollLeft=(e.clientX-r.left)/r.width*dag.dataset.w*z-box.clientWidth/2;\n"
    "    box.scrollTop=(e.clientY-r.top)/r.height*dag.dataset.h*z-box.clientHeight/2;});\n"
    "  var q=document.getElementById('dagq'),qn=document.getElementById('dagqn');\n"
    "  q.addEventListener('input',function(){var s=q.value.toLowerCase(),first=null,c=0;\n"
    "    dag.querySelectorAll('g.n').forEach(function(g){var hit=s.length>0&&g.textContent.toLowerCase().indexOf(s)>=0;\n"
    "      g.classList.toggle('hit',hit);if(hit){c++;if(!first)first=g;}});\n"
    "    qn.textContent=s?c+' found':'';\n"
    "    if(first){var r=first.querySelector('rect'),z=zf(dag);\n"
    "      box.scrollLeft=r.x.baseVal.value*z-box.clientWidth/2;box.scrollTop=r.y.baseVal.value*z-box.clientHeight/2;}});\n"
    "  upd();}\n"
    "})();\n";

/* The value of option opt ("--device") in the command line, or NULL. */
static const char *cmd_opt(const char *cl, const char *opt, char *buf, size_t n) {
  size_t ol = strlen(opt);
  for (const char *p = cl; p && *p; p = strchr(p, ' ')) {
    while (*p == ' ') p++;
    if (!strncmp(p, opt, ol) && p[ol] == ' ') {
      const char *v = p + ol + 1, *e = strchr(v, ' ');
      size_t len = e ? (size_t)(e - v) : strlen(v);
      if (!len || len >= n) return NULL;
      memcpy(buf, v, len);
      buf[len] = 0;
      return buf;
    }
  }
  return NULL;
}

static int cmd_has(const char *cl, const char *opt) {
  size_t ol = strlen(opt);
  for (const char *p = cl; p && *p; p = strchr(p, ' ')) {
    while (*p == ' ') p++;
    if (!strncmp(p, opt, ol) && (p[ol] == ' ' || !p[ol])) return 1;
  }
  return 0;
}

static void card(FILE *f, const char *key, const char *val, const char *sub, int hl) {
  fprintf(f, "<div class=\"card%s\"><div class=\"k\">%s</div><div class=\"v\">%s</div>", hl ? " hl" : "", key, val);
  if (sub) fprintf(f, "<div class=\"s\">%s</div>", sub);
  fputs("</div>\n", f);
}

static uint64_t static_bytes(const pass_plan_opts *o, const pass_stage *S) {
  double f = o->training ? 2.0 + o->optimizer_state_factor : 1.0;
  if (o->training && o->async_mode) f += pass_async_versions(o->async_mode, o->devices, S->dev_first) - 1;
  return (uint64_t)((double)S->param_bytes * f);
}

enum { CH_LABEL = 64, CH_PLOT = 430, CH_VAL = 136, CH_ROW = 34 };

/* Per-stage stage time (forward, backward, all-reduce share) and outgoing transfer. */
static void time_chart(FILE *f, const pass_plan *pl) {
  int p = pl->n_stages;
  double mx = pl->bottleneck_ms > pl->lower_bound_ms ? pl->bottleneck_ms : pl->lower_bound_ms;
  for (int k = 0; k < p; k++) {
    if (pl->stages[k].compute_ms > mx) mx = pl->stages[k].compute_ms;
    if (pl->stages[k].comm_ms > mx) mx = pl->stages[k].comm_ms;
  }
  if (!(mx > 0)) mx = 1;
  mx *= 1.04;
  double sx = CH_PLOT / mx, W = CH_LABEL + CH_PLOT + CH_VAL, H = 22 + p * CH_ROW + 22;
  fprintf(f,
          "<div class=\"chart\"><h3>Time per micro-batch (ms)</h3><svg id=\"timebars\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"stage times\">",
          W, H, W, H);
  double step = rep_nice_step(mx, 5);
  fputs("<g class=\"axis\">", f);
  for (int i = 0; i * step <= mx; i++) {
    char b[32];
    double x = CH_LABEL + i * step * sx;
    rep_ms(b, sizeof b, i * step);
    fprintf(
        f,
        "<line x1=\"%.1f\" y1=\"18\" x2=\"%.1f\" y2=\"%.0f\"/><text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>",
        x, x, H - 18, x, H - 6, b);
  }
  fputs("</g>", f);
  for (int k = 0; k < p; k++) {
    const pass_stage *S = &pl->stages[k];
    char c[8], b[32], b2[32];
    rep_stage_color(k, c);
    double y = 22 + k * CH_ROW, x = CH_LABEL;
    fprintf(f, "<text class=\"lbl\" x=\"4\" y=\"%.0f\">stage %d</text>", y + 13, k);
    /* the stage's period: its replicas share the micro-batches (ceil(M / r) each) */
    double sh = pass_replica_share(pl->microbatches, S->replicas);
    double parts[3] = {S->fwd_ms * sh, S->bwd_ms * sh, S->compute_ms - (S->fwd_ms + S->bwd_ms) * sh};
    const char *names[3] = {"forward", "backward", "all-reduce share"};
    for (int i = 0; i < 3; i++) {
      if (!(parts[i] > 1e-12)) continue;
      rep_ms(b, sizeof b, parts[i]);
      fprintf(
          f,
          "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"16\" fill=\"%s\"%s><title>stage %d %s: %s ms</title></rect>",
          x, y + 1, parts[i] * sx, i == 2 ? "#7d8792" : c, i == 1 ? " fill-opacity=\"0.55\"" : "", k, names[i], b);
      x += parts[i] * sx;
    }
    rep_ms(b, sizeof b, S->compute_ms);
    fprintf(f, "<text class=\"val\" x=\"%.1f\" y=\"%.0f\">%s</text>", x + 4, y + 13, b);
    if (k + 1 < p) {
      double w = S->comm_ms * sx;
      rep_ms(b2, sizeof b2, S->comm_ms);
      fprintf(f,
              "<rect x=\"%d\" y=\"%.0f\" width=\"%.2f\" height=\"7\" fill=\"#8a939c\"><title>boundary %d\xE2\x86\x92%d "
              "transfer: %s ms</title></rect><text x=\"%.1f\" y=\"%.0f\" font-size=\"10\">comm %s</text>",
              CH_LABEL, y + 20, w > 0.5 ? w : 0.5, k, k + 1, b2, CH_LABEL + (w > 0.5 ? w : 0.5) + 4, y + 27, b2);
    }
  }
  double xb = CH_LABEL + pl->bottleneck_ms * sx, xl = CH_LABEL + pl->lower_bound_ms * sx;
  fprintf(f, "<line class=\"lb\" x1=\"%.1f\" y1=\"14\" x2=\"%.1f\" y2=\"%.0f\"><title>lower bound</title></line>", xl,
          xl, H - 18);
  fprintf(f, "<line class=\"bn\" x1=\"%.1f\" y1=\"14\" x2=\"%.1f\" y2=\"%.0f\"><title>bottleneck</title></line>", xb,
          xb, H - 18);
  /* labels at the top, kept apart when the lines are close */
  double tb = xb, tl = xl;
  if (fabs(tb - tl) < 90) tl = tb - 90 < CH_LABEL ? tb + 90 : tb - 90;
  fprintf(f, "<text x=\"%.1f\" y=\"11\" text-anchor=\"middle\" fill=\"#c62828\">bottleneck</text>", tb);
  fprintf(f, "<text x=\"%.1f\" y=\"11\" text-anchor=\"middle\" fill=\"#2e7d32\">lower bound</text>", tl);
  fputs("</svg></div>\n", f);
}

/* Per-stage memory per device: weights (+ gradients and optimizer state when
 * training) and stashed activations, the simulated peak and the device limit. */
static void mem_chart(FILE *f, const pass_plan *pl, const pass_plan_opts *o) {
  int p = pl->n_stages;
  double mx = 0;
  for (int k = 0; k < p; k++) {
    double m = (double)pl->stages[k].memory_bytes;
    if ((double)pl->stages[k].peak_memory_bytes > m) m = (double)pl->stages[k].peak_memory_bytes;
    if (m > mx) mx = m;
  }
  double lim = (double)o->mem_limit;
  int show_lim = lim > 0 && lim <= 1.6 * mx;
  if (show_lim && lim > mx) mx = lim;
  if (!(mx > 0)) mx = 1;
  mx *= 1.04;
  double sx = CH_PLOT / mx, W = CH_LABEL + CH_PLOT + CH_VAL, H = 22 + p * CH_ROW + 22;
  char lb[32];
  rep_bytes(lb, sizeof lb, lim);
  fprintf(f,
          "<div class=\"chart\"><h3>Memory per device</h3><svg id=\"membars\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"stage memory\">",
          W, H, W, H);
  /* axis in a unit that suits the largest value */
  double unit = mx >= 1024.0 * 1024 * 1024 ? 1024.0 * 1024 * 1024 : mx >= 1024.0 * 1024 ? 1024.0 * 1024 : 1024.0;
  const char *un = unit >= 1024.0 * 1024 * 1024 ? "GiB" : unit >= 1024.0 * 1024 ? "MiB" : "KiB";
  double step = rep_nice_step(mx / unit, 5);
  fputs("<g class=\"axis\">", f);
  for (int i = 0; i * step * unit <= mx; i++) {
    double x = CH_LABEL + i * step * unit * sx;
    fprintf(
        f,
        "<line x1=\"%.1f\" y1=\"18\" x2=\"%.1f\" y2=\"%.0f\"/><text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>",
        x, x, H - 18, x, H - 6, i * step);
  }
  fprintf(f, "<text x=\"%d\" y=\"%.0f\">%s</text></g>", CH_LABEL + CH_PLOT + 8, H - 6, un);
  for (int k = 0; k < p; k++) {
    const pass_stage *S = &pl->stages[k];
    char c[8], b[32], b2[32];
    rep_stage_color(k, c);
    double y = 22 + k * CH_ROW;
    uint64_t w = static_bytes(o, S), tot = S->memory_bytes, a = tot > w ? tot - w : 0;
    char vs[128] = ""; /* an asynchronous schedule: the versions kept, how stale they are */
    if (pl->async_mode) {
      int sf, sb, af, ab, nv = pass_async_versions(pl->async_mode, pl->n_stages, k);
      pass_async_staleness(pl->async_mode, pl->n_stages, k, &sf, &sb, &af, &ab);
      snprintf(vs, sizeof vs, " (%d weight version%s; forward %d, backward %d updates stale)", nv, nv == 1 ? "" : "s",
               sf, sb);
    }
    fprintf(f, "<text class=\"lbl\" x=\"4\" y=\"%.0f\">stage %d</text>", y + 15, k);
    rep_bytes(b, sizeof b, (double)w);
    fprintf(
        f,
        "<rect x=\"%d\" y=\"%.0f\" width=\"%.2f\" height=\"20\" fill=\"%s\"><title>stage %d weights%s%s: %s</title></rect>",
        CH_LABEL, y + 1, (double)w * sx, c, k, o->training ? " + gradients + optimizer state" : "", vs, b);
    rep_bytes(b, sizeof b, (double)a);
    fprintf(f,
            "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"20\" fill=\"%s\" fill-opacity=\"0.4\"><title>stage %d "
            "activations in flight%s: %s</title></rect>",
            CH_LABEL + (double)w * sx, y + 1, (double)a * sx, c, k,
            S->recompute == PASS_PLAN_RC_FULL        ? " (forward recomputed)"
            : S->recompute == PASS_PLAN_RC_SELECTIVE ? " (cheap forward nodes recomputed)"
                                                     : "",
            b);
    if (S->peak_memory_bytes) {
      double xp = CH_LABEL + (double)S->peak_memory_bytes * sx;
      rep_bytes(b2, sizeof b2, (double)S->peak_memory_bytes);
      fprintf(f,
              "<line class=\"pk\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"><title>stage %d simulated peak: "
              "%s</title></line>",
              xp, y - 1, xp, y + 23, k, b2);
    }
    rep_bytes(b, sizeof b, (double)tot);
    double xv = CH_LABEL + (double)(tot > S->peak_memory_bytes ? tot : S->peak_memory_bytes) * sx + 4;
    if (lim > 0 && (double)tot >= 0.001 * lim)
      fprintf(f, "<text class=\"val\" x=\"%.1f\" y=\"%.0f\">%s (%.1f%%)</text>", xv, y + 15, b,
              100.0 * (double)tot / lim);
    else fprintf(f, "<text class=\"val\" x=\"%.1f\" y=\"%.0f\">%s</text>", xv, y + 15, b);
  }
  if (show_lim) {
    double xl = CH_LABEL + lim * sx;
    fprintf(f,
            "<line class=\"lim\" x1=\"%.1f\" y1=\"14\" x2=\"%.1f\" y2=\"%.0f\"/><text x=\"%.1f\" y=\"11\" "
            "text-anchor=\"end\" fill=\"#c62828\">limit %s</text>",
            xl, xl, H - 18, xl, lb);
  }
  fputs("</svg>", f);
  fputs("<p class=\"muted small\">Solid: weights", f);
  if (o->training) fputs(" + gradients + optimizer state", f);
  fputs("; light: activations held by in-flight micro-batches (cost model); black tick: simulated peak. ", f);
  if (lim > 0 && !show_lim) fprintf(f, "Device limit %s (off the scale).", lb);
  else if (lim > 0) fprintf(f, "Red line: device limit %s.", lb);
  fputs("</p></div>\n", f);
}

static void stage_table(FILE *f, const pass_planned *P, const pass_plan_opts *o) {
  const pass_plan *pl = &P->plan;
  int tr = pl->training, any_ar = 0;
  for (int k = 0; k < pl->n_stages; k++) any_ar |= pl->stages[k].allreduce_ms > 0;
  fputs(
      "<div class=\"scroll\"><table id=\"stages\"><thead><tr><th class=\"l\">stage</th><th>devices</th><th>replicas</th>"
      "<th>nodes</th><th class=\"l\">first \xE2\x80\xA6 last node</th><th title=\"one micro-batch on one device\">fwd ms</th>",
      f);
  if (tr) fputs("<th>bwd ms</th>", f);
  if (any_ar) fputs("<th>all-reduce ms</th>", f);
  fputs(
      "<th>stage ms</th><th>comm ms</th><th>boundary out</th><th>weights</th><th>act. / mb</th><th>memory</th>"
      "<th>sim. peak</th></tr></thead><tbody>\n",
      f);
  for (int k = 0; k < pl->n_stages; k++) {
    const pass_stage *S = &pl->stages[k];
    char c[8], b[32];
    rep_stage_color(k, c);
    int bn = S->compute_ms >= pl->bottleneck_ms * (1 - 1e-9) ||
             (k + 1 < pl->n_stages && S->comm_ms >= pl->bottleneck_ms * (1 - 1e-9));
    fprintf(f, "<tr%s><td class=\"l\"><span class=\"sw\" style=\"background:%s\"></span>%d%s</td>",
            bn ? " class=\"bn\"" : "", c, k, bn ? " (bottleneck)" : "");
    if (S->replicas > 1) fprintf(f, "<td>%d\xE2\x80\x93%d</td>", S->dev_first, S->dev_first + S->replicas - 1);
    else fprintf(f, "<td>%d</td>", S->dev_first);
    fprintf(f, "<td>%d</td><td>%d</td><td class=\"name\">", S->replicas, S->n_nodes);
    if (S->n_nodes) {
      rep_esc(f, rep_node_name(P, S->nodes[0]), 60);
      if (S->n_nodes > 1) {
        fputs(" \xE2\x80\xA6 ", f);
        rep_esc(f, rep_node_name(P, S->nodes[S->n_nodes - 1]), 60);
      }
    }
    fprintf(f, "</td><td>%.4f</td>", S->fwd_ms);
    if (tr) fprintf(f, "<td>%.4f</td>", S->bwd_ms);
    if (any_ar) fprintf(f, "<td>%.4f</td>", S->allreduce_ms);
    fprintf(f, "<td>%.4f</td>", S->compute_ms);
    if (k + 1 < pl->n_stages) {
      rep_bytes(b, sizeof b, (double)S->out_bytes);
      fprintf(f, "<td>%.4f</td><td>%s (%d tensor%s)</td>", S->comm_ms, b, S->n_out_tensors,
              S->n_out_tensors == 1 ? "" : "s");
    } else {
      fputs("<td>\xE2\x80\x93</td><td>\xE2\x80\x93</td>", f);
    }
    rep_bytes(b, sizeof b, (double)static_bytes(o, S));
    fprintf(f, "<td>%s</td>", b);
    rep_bytes(b, sizeof b, (double)S->act_bytes);
    fprintf(f, "<td>%s</td>", b);
    rep_bytes(b, sizeof b, (double)S->memory_bytes);
    fprintf(f, "<td>%s</td>", b);
    rep_bytes(b, sizeof b, (double)S->peak_memory_bytes);
    fprintf(f, "<td>%s</td></tr>\n", b);
  }
  fputs("</tbody></table></div>\n", f);
}

int report_html_write(FILE *f, const ir_graph *g, const pass_planned *P, const pass_plan_opts *o,
                      const char *command_line) {
  const pass_plan *pl = &P->plan;
  const char *cl = command_line ? command_line : "";
  const char *model = g->path ? g->path : "model";
  const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
  char buf[256], v[128], s[256];

  fputs(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>pipecc plan: ",
      f);
  rep_esc(f, base, 80);
  fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body><main>\n", CSS);

  /* ---- header ---- */
  fputs("<h1>pipecc plan: <span class=\"mono\">", f);
  rep_esc(f, base, 120);
  fputs("</span></h1>\n<p class=\"muted small\">", f);
  rep_esc(f, model, 300);
  if (g->graph_name && *g->graph_name) {
    fputs(" \xC2\xB7 graph ", f);
    rep_esc(f, g->graph_name, 80);
  }
  if (g->producer_name && *g->producer_name) {
    fputs(" \xC2\xB7 produced by ", f);
    rep_esc(f, g->producer_name, 60);
    fputc(' ', f);
    rep_esc(f, g->producer_version, 40);
  }
  fprintf(f, " \xC2\xB7 opset %d \xC2\xB7 %d nodes</p>\n<code class=\"cmd\">", g->opset, P->dag.n_nodes);
  rep_esc(f, cl, 4000);
  fputs("</code>\n<div class=\"cards\">\n", f);

  const char *target = cmd_opt(cl, "--target", buf, sizeof buf);
  const char *dn = cmd_opt(cl, "--device", v, sizeof v);
  const pass_device *dev = pass_device_find(dn ? dn : target && !strcmp(target, "cuda") ? "h100" : "cpu");
  if (dev) {
    snprintf(s, sizeof s, "%s%s", dev->desc,
             cmd_has(cl, "--profile") ? " \xC2\xB7 measured profile" : " \xC2\xB7 cost model");
    card(f, "device", dev->name, s, 0);
  }
  int hosts = o->topo.hosts > 0 ? o->topo.hosts : 1,
      gph = o->topo.gpus_per_host > 0 ? o->topo.gpus_per_host : o->devices;
  snprintf(buf, sizeof buf, "%d", pl->devices);
  snprintf(s, sizeof s, "%d used \xC2\xB7 %d host%s \xC3\x97 %d \xC2\xB7 %.0f GB/s links", pl->devices_used, hosts,
           hosts == 1 ? "" : "s", gph, o->topo.intra_gbps);
  card(f, "devices (g)", buf, s, 0);
  snprintf(buf, sizeof buf, "%d", pl->microbatches);
  int so = snprintf(s, sizeof s, "%s \xC2\xB7 %s",
                    pl->async_mode                    ? pass_async_name(pl->async_mode)
                    : pl->schedule == PASS_SCHED_GPIPE ? "GPipe"
                                                       : "1F1B",
                    !pl->training        ? "inference"
                    : pl->recompute == 3 ? "training, recomputation chosen per stage"
                    : pl->recompute == 2 ? "training, cheap forward nodes recomputed"
                    : pl->recompute      ? "training, recomputed forward"
                                         : "training");
  /* the default count searched (pipecc -m): each count tried and its predicted iteration */
  for (int k = 0; k < o->mb_search_n && so < (int)sizeof s - 48; k++) {
    if (o->mb_search_ms[k] < 0)
      so +=
          snprintf(s + so, sizeof s - (size_t)so, "%s%d: no plan", k ? ", " : " \xC2\xB7 searched ", o->mb_search_m[k]);
    else
      so += snprintf(s + so, sizeof s - (size_t)so, "%s%d: %.3f ms", k ? ", " : " \xC2\xB7 searched ",
                     o->mb_search_m[k], o->mb_search_ms[k]);
  }
  card(f, "micro-batches", buf, s, 0);
  snprintf(buf, sizeof buf, "%d", pl->n_stages);
  snprintf(s, sizeof s, "states: %s order",
           pl->order_kind == PASS_ORDER_DFS     ? "dfs"
           : pl->order_kind == PASS_ORDER_LEVEL ? "level"
                                                : "index");
  card(f, "stages", buf, s, 0);
  char t1[32], t2[32];
  rep_ms(t1, sizeof t1, pl->bottleneck_ms);
  rep_ms(t2, sizeof t2, pl->lower_bound_ms);
  snprintf(buf, sizeof buf, "%s ms", t1);
  snprintf(s, sizeof s, "lower bound %s ms \xC2\xB7 gap %.1f%%", t2, 100 * pl->gap);
  card(f, "bottleneck (per micro-batch)", buf, s, 1);
  rep_ms(t1, sizeof t1, pl->predicted_iteration_ms);
  rep_ms(t2, sizeof t2, pl->single_device_ms);
  snprintf(buf, sizeof buf, "%s ms", t1);
  snprintf(s, sizeof s, "%d micro-batch%s \xC2\xB7 one device: %s ms", pl->microbatches, pl->microbatches == 1 ? "" : "es",
           t2);
  card(f, "predicted iteration", buf, s, 1);
  snprintf(buf, sizeof buf, "%.2f\xC3\x97", pl->predicted_speedup);
  snprintf(s, sizeof s, "bubble %.1f%% of device time", 100 * pl->bubble_fraction);
  card(f, "predicted speedup", buf, s, 1);
  /* as plan.json: no timing figure in a reproducible build (SOURCE_DATE_EPOCH set) */
  if (getenv("SOURCE_DATE_EPOCH"))
    snprintf(buf, sizeof buf, "\xE2\x80\x93 <small class=\"muted\">(SOURCE_DATE_EPOCH)</small>");
  else snprintf(buf, sizeof buf, "%.2f ms", P->antichain_partition_ms);
  fprintf(
      f,
      "<div class=\"card\"><div class=\"k\">planner time</div><div class=\"v\"><span id=\"planner-ms\">%s</span></div>"
      "<div class=\"s\">antichain + partition (wall time)</div></div>\n",
      buf);
  fputs("</div>\n<p class=\"muted small\">All times are predictions of the cost model", f);
  if (dev) fprintf(f, " for %s", dev->desc);
  fputs(", per micro-batch unless stated.</p>\n", f);

  /* ---- sections ---- */
  fputs("<h2>Graph, coloured by stage</h2>\n", f);
  rep_write_dag(f, g, P);
  fputs("<h2>Stages: time and memory</h2>\n<div class=\"charts\">\n", f);
  time_chart(f, pl);
  mem_chart(f, pl, o);
  fputs("</div>\n<h2>Predicted timeline (one iteration)</h2>\n", f);
  rep_write_gantt(f, P, o);
  fputs("<h2>Stages</h2>\n", f);
  stage_table(f, P, o);
  fprintf(f, "<footer>pipecc %s \xC2\xB7 plan.json next to this file holds the same plan.</footer>\n", PIPECC_VERSION);
  fprintf(f, "</main>\n<script>\n%s</script>\n</body></html>\n", JS);
  return ferror(f) ? -1 : 0;
}
