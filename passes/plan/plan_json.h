/* plan_json.h — write a pass_plan as plan.json (the compiler/runtime contract).
 *
 * Format version PASS_PLAN_JSON_VERSION; fields are documented in
 * passes/plan/PLANNER.md. Output is deterministic: keys in fixed order, fixed
 * number formats (ms with 6 decimals, bytes as integers), nothing depends on
 * addresses or time, except planner_ms, which is written only when
 * include_timing is set (null otherwise). */
#ifndef PIPECC_PASSES_PLAN_JSON_H
#define PIPECC_PASSES_PLAN_JSON_H

#include <stdio.h>

#include "passes/plan/partition.h"
#include "passes/plan/plan_dag.h"

#define PASS_PLAN_JSON_VERSION 1

/* Write plan (with streams if pass_schedule_attach ran) to f. Returns 0, -1 on a write error. */
int pass_plan_json_write(FILE *f, const pass_dag *d, const pass_plan *plan, const pass_plan_opts *o,
                         int include_timing);

#endif
