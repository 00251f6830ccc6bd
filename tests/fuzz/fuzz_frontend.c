/* tests/fuzz/fuzz_frontend.c - libFuzzer harness for the ONNX frontend and the front passes.
 *
 * Each input is a model file's bytes: onnx_load_buffer (wire check, protobuf-c decoding,
 * conversion, function inlining, toposort), then the front passes of
 * pass_frontend_pipeline (bind with no bindings, fold, shape) when loading succeeded.
 * Model messages are silenced (ir_diag_quiet); a crash, a sanitizer report, a leak or a
 * timeout is a finding. Unbound symbolic input dims are set to 2 before the passes so
 * that models like the exported ones (symbolic batch) reach fold and shape.
 *
 * Build and run: tests/fuzz/run_fuzz.sh [SECONDS] (clang, -DPIPECC_FUZZ=ON). */
#include <stddef.h>
#include <stdint.h>

#include "frontend/onnx_load.h"
#include "ir/diag.h"
#include "passes/pass.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  ir_diag_quiet = 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ir_diag_quiet = 1;
  ir_graph *g = onnx_load_buffer(size ? (const void *)data : (const void *)"", size, "fuzz.onnx", NULL);
  if (!g) return 0;
  for (int i = 0; i < g->n_inputs; i++) {
    ir_value *v = &g->values[g->inputs[i]];
    for (int d = 0; d < v->shape.rank; d++)
      if (v->shape.dims[d] == IR_DIM_SYM || v->shape.dims[d] == IR_DIM_UNKNOWN) v->shape.dims[d] = 2;
  }
  pass_opts opts = {0};
  for (const pass_info *p = pass_frontend_pipeline; p->name; p++)
    if (p->fn(g, &opts) || g->n_errors) break;
  ir_graph_free(g);
  return 0;
}
