/* codegen/stage.h - the target-independent analysis both emitters (codegen/c,
 * codegen/cuda) run on a planned graph, so that both cut and lay out a stage the same
 * way:
 *   - stage boundaries: which values every stage reads from earlier stages or graph
 *     inputs, and which it hands on (cg_analyse_stages);
 *   - units: a stage's nodes in graph order grouped into single nodes and fused
 *     element-wise trees (each fused intermediate has one consumer and the unit's
 *     output shape), aliasing nodes (Reshape...) marked (cg_stage_open);
 *   - the memory plan: every value the stage touches gets a location (weights at
 *     64-byte aligned offsets in value order, stage input/output slot, or an arena
 *     offset planned first-fit by liveness over units; aliases share their root's).
 * Nothing here depends on hash order or addresses. */
#ifndef PIPECC_CODEGEN_STAGE_H
#define PIPECC_CODEGEN_STAGE_H
#include <stddef.h>
#include <stdint.h>

#include "codegen/codegen.h"
#include "ir/ir.h"

#define CG_ALIGN 64
/* n rounded up to CG_ALIGN. */
size_t cg_align_up(size_t n);
/* Append v to a growable int array (capacity doubles at powers of two). */
void cg_push(int **arr, int *n, int v);

/* Where a value lives during a stage. */
enum { CG_LOC_NONE = 0, CG_LOC_W, CG_LOC_IN, CG_LOC_OUT, CG_LOC_A };

typedef struct {
  int root;           /* node index of the unit's root */
  int *nodes;         /* members in graph order (root last) */
  int n_nodes;
  int *ext;           /* eltwise units: distinct external input values */
  int n_ext;
  int alias;          /* emits no code: its output lives in its input's memory */
} cg_unit;

typedef struct {
  int n_stages;
  int *vstage;        /* [n_values] stage producing the value; -1 graph input, -2 constant */
  int *last_stage;    /* [n_values] last stage using it (or n_stages for graph outputs) */
  int **s_in, *n_in;  /* per stage: input values */
  int **s_out, *n_out;/* per stage: output values */
  int *out_index;     /* [n_values] index in its producing stage's outputs, else -1 */
  char *passthrough;  /* [n_values] a graph output that is a constant or a graph input:
                       * the last stage copies it to its output (all 0 unless allowed) */
} cg_stage_info;

/* Boundaries of every stage of plan p. allow_passthrough: graph outputs that are
 * constants or graph inputs become outputs of the last stage (cpu); otherwise they are
 * an error naming `target`. Returns 0, or -1 after printing an error; free si with
 * cg_free_stage_info either way. */
int cg_analyse_stages(ir_graph *g, const cg_plan *p, int allow_passthrough, const char *target, cg_stage_info *si);
void cg_free_stage_info(cg_stage_info *si);

typedef struct {
  ir_graph *g;
  const cg_plan *p;
  const cg_options *o;
  const cg_stage_info *si;
  int s;
  /* per value */
  int *loc;           /* CG_LOC_* */
  size_t *off;        /* CG_LOC_W/CG_LOC_A: byte offset; CG_LOC_IN/CG_LOC_OUT: index */
  int *root;          /* alias root */
  int *def_unit, *last_unit;
  cg_unit *units;
  int n_units;
  int *w_vals;        /* the constants in weights_K.bin, in value order */
  int n_w;
  size_t w_bytes;
  size_t arena;       /* arena bytes the values need (CG_ALIGN multiple) */
} cg_stage;

/* Units and memory plan of stage s (st->arena set). Free with cg_stage_close. */
void cg_stage_open(cg_stage *st, ir_graph *g, const cg_plan *p, const cg_options *o, const cg_stage_info *si, int s);
void cg_stage_close(cg_stage *st);
/* The stage's weights_K.bin contents (w_bytes, at least one byte allocated; caller
 * frees) and its checksum (cg_checksum64). */
unsigned char *cg_stage_weights(const cg_stage *st, uint64_t *sum);
/* The stage's node count, and its display name "stage_K (first .. last node)" into nm. */
int cg_stage_nodes(const cg_stage *st, char *nm, size_t nm_len);

#endif
