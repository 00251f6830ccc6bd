/* codegen/emit_common.h - text and files both emitters (codegen/c, codegen/cuda) write
 * the same way: the header every emitted file starts with, C string literals and
 * comments, the unit comments, pipert_tensor_desc tables, the stage descriptor,
 * pipeline_main.c, and the checks and set-up before a graph is emitted. `target` is
 * the target's name as it appears in headers and errors ("cpu", "cuda"). */
#ifndef PIPECC_CODEGEN_EMIT_COMMON_H
#define PIPECC_CODEGEN_EMIT_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/codegen.h"
#include "codegen/stage.h"
#include "ir/ir.h"

/* A C string literal for s. */
void cg_put_cstr(FILE *f, const char *s);
/* Text safe inside a C comment (no "*\/", no newlines), cut to max bytes. */
void cg_put_comment(FILE *f, const char *s, size_t max);
/* The comment every emitted file starts with: what, the pipecc version and target, the
 * command line, the model and its producer and opset. */
void cg_put_header(FILE *f, const ir_graph *g, const cg_options *o, const char *target, const char *what);
/* The same as '#' comment lines for Makefiles ('$' doubled). */
void cg_put_header_hash(FILE *f, const ir_graph *g, const cg_options *o, const char *target, const char *what);
/* One comment line per member node of u: "node N: Op 'name'". */
void cg_put_unit_comment(FILE *f, ir_graph *g, const cg_unit *u, const char *indent);
/* `static const pipert_tensor_desc name[n] = {...};` for values vals[0..n); nothing if n == 0.
 * A rank-0 value is written with rank 0 when scalars is set, else as shape [1]. */
void cg_put_tensor_descs(FILE *f, ir_graph *g, const char *name, const int *vals, int n, int scalars);
/* The stage's tensor descriptor tables and its pipert_stage_desc `pipecc_stage_K`,
 * declared with the prefix decl ("const", "extern \"C\" const"); nm is the stage's
 * display name (cg_stage_nodes), sum the weights checksum. A training program's stage
 * also names stage_backward, stage_step, stage_zero_grads and stage_param_io, and its
 * param table (cg_put_param_descs). device_ops: the name of the stage's
 * pipert_device_ops, NULL for a host stage. */
void cg_put_stage_desc(FILE *f, ir_graph *g, const cg_plan *p, const cg_stage_info *si, const cg_wlayout *wl, int stage,
                       const char *decl, const char *nm, uint64_t sum, const char *device_ops);
/* `static const size_t grad_off[n], grad_bytes[n]` (n >= 1 entries) for the gradient
 * accumulators in wl; returns their count. */
int cg_put_grad_ranges(FILE *f, const ir_graph *g, const cg_wlayout *wl);
/* `static const pipert_param_desc stage_params[]` for the params in wl; returns their count. */
int cg_put_param_descs(FILE *f, const ir_graph *g, const cg_plan *p, const cg_wlayout *wl, int stage);
/* Write dir/name as a new file (dir/name.tmp.PID, renamed): a pipeline running from dir
 * keeps the weights it mapped, and a failed write leaves no partial file. 0, or -1 after
 * printing an error. */
int cg_write_file(const char *dir, const char *name, const void *data, size_t len);
/* Files of an earlier build into dir that this one does not write: stages past
 * n_stages (their sources, objects, weights), the other target's sources and objects,
 * profiler builds' leftovers. Missing files are no error. */
void cg_remove_stale(const char *dir, int n_stages, const char *target);
/* Write dir/stage_K.<ext> and dir/weights_K.bin (removed when the stage has no weights). */
int cg_write_stage_files(const char *dir, int s, const char *ext, const char *src, size_t src_len,
                         const unsigned char *w, size_t w_len);
/* pipeline_main.c: the pipert_pipeline for plan p and main(). */
int cg_emit_main(ir_graph *g, const cg_plan *p, const cg_options *o, const cg_stage_info *si, const char *target,
                 const char *dir);
/* Checks before emitting (a plan, a topologically sorted graph with static shapes and
 * supported dtypes, an emitter for every op: has_emitter(op), all reported at once),
 * then creates out_dir. fn names the caller in internal errors. Returns 0 or -1. */
int cg_emit_begin(ir_graph *g, const cg_plan *p, const char *target, const char *fn, int (*has_emitter)(ir_op op),
                  const char *out_dir);
#endif
