/* passes/plan/report_util.h - helpers shared by the report writer (tools/report_*.c):
 * HTML escaping, colours, number formatting, and the parts of the page each file
 * writes. Internal to the report; the public API is passes/plan/report_html.h. */
#ifndef PIPECC_TOOLS_REPORT_UTIL_H
#define PIPECC_TOOLS_REPORT_UTIL_H
#include <stddef.h>
#include <stdio.h>

#include "ir/ir.h"
#include "passes/plan/plan_ir.h"

/* Write s HTML-escaped (& < > " ' as entities), as valid UTF-8: malformed bytes and
 * control characters become U+FFFD (tab and newline a space). At most max code
 * points are written; a longer string is cut and ends with an ellipsis. Works in
 * text and in quoted attribute values. NULL writes nothing. */
void rep_esc(FILE *f, const char *s, size_t max);

/* Colour of stage k as "#rrggbb" (distinct for neighbouring stages). */
void rep_stage_color(int k, char out[8]);
/* Colour of micro-batch mb (FWD: dark = 0, BWD: dark = 1). */
void rep_mb_color(int mb, int dark, char out[8]);
/* 1 if text on colour c ("#rrggbb") should be dark. */
int rep_dark_text(const char *c);

/* "12.3 MiB" etc. */
void rep_bytes(char *buf, size_t n, double bytes);
/* A "nice" tick step (1, 2, 5 x 10^k) giving about target ticks over range. */
double rep_nice_step(double range, int target);
/* v rounded to one decimal ("12", "-3.5") into buf (>= 24 bytes); fast (no printf).
 * Returns buf. */
char *rep_num(char *buf, double v);
/* v with exactly dec (0..9) decimals, like "%.*f" but fast; buf >= 32 bytes. Returns buf. */
char *rep_fixed(char *buf, double v, int dec);
/* Milliseconds with a precision that suits the value ("0.0123", "1.23", "123.4"). */
void rep_ms(char *buf, size_t n, double ms);

/* Sections of the page (report_dag.c, report_gantt.c). */
void rep_write_dag(FILE *f, const ir_graph *g, const pass_planned *p);
void rep_write_gantt(FILE *f, const pass_planned *p, const pass_plan_opts *o);

/* Display name of DAG node k (its ONNX name, or OpType_index). */
const char *rep_node_name(const pass_planned *p, int k);
/* Op type of node k ("?" if the IR has no such node). */
const char *rep_node_op(const ir_graph *g, int k);
#endif
