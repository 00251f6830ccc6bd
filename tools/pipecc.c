/* tools/pipecc.c - the pipecc command: ONNX model -> pipeline stages -> code.
 *
 *   load -> front end -> (training: loss) -> optimisation -> plan -> plan.json and
 *   report.html -> (training: backward and update) -> emit (cpu | cuda) -> build
 *
 * The options are parsed in tools/pipecc_options.c, the phases are in
 * tools/pipecc_driver.c.
 *
 * Exit status: 0 success, 2 a user or model error (one clear line per problem),
 * anything else a bug in pipecc. */
#include <stdlib.h>

#include "tools/pipecc_calibrate.h"
#include "tools/pipecc_driver.h"
#include "tools/pipecc_options.h"

/* The phases after the plan: the training program, the stage code, the build. */
static int emit_and_build(pipecc_run *r) {
  pipecc_assign_stages(r);
  int rc = pipecc_train_program(r);
  if (rc) return rc;
  rc = pipecc_emit(r);
  if (!rc) rc = pipecc_build(r);
  pipecc_report_done(r, rc);
  return rc;
}

int main(int argc, char **argv) {
  pipecc_options o;
  int rc = pipecc_options_parse(argc, argv, &o);
  if (rc >= 0) {
    pipecc_options_free(&o);
    return rc;
  }
  if (o.calibrate && !o.model) {
    rc = pipecc_calibrate(&o, o.calibrate);
    pipecc_options_free(&o);
    return rc;
  }
  pipecc_run *r = calloc(1, sizeof *r);
  r->o = &o;
  rc = pipecc_plan_microbatches(r);
  if (!rc && !o.want_plan) rc = pipecc_print_ir(r);
  else if (!rc) rc = pipecc_write_plan(r);
  if (!rc && o.want_plan && !o.plan_only) rc = emit_and_build(r);
  else if (!rc && o.want_plan) pipecc_report_done(r, rc);
  pipecc_run_free(r);
  free(r);
  pipecc_options_free(&o);
  return rc;
}
