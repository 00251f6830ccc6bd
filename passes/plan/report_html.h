/* passes/plan/report_html.h - the planner's visual report: one self-contained HTML file
 * (inline SVG/CSS/JS, no network): the DAG with nodes coloured by stage, per-stage
 * time and memory bars, and the predicted pipeline timeline as a Gantt chart. */
#ifndef PIPECC_TOOLS_REPORT_HTML_H
#define PIPECC_TOOLS_REPORT_HTML_H
#include <stdio.h>

#include "ir/ir.h"
#include "passes/plan/plan_ir.h"

/* Returns 0, or -1 on a write error. Deterministic output. */
int report_html_write(FILE *f, const ir_graph *g, const pass_planned *p, const pass_plan_opts *o,
                      const char *command_line);
#endif
