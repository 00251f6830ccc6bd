/* codegen/stage.h - the target-independent analysis both emitters (codegen/c,
 * codegen/cuda) run on a planned graph, so that both cut and lay out a stage the same
 * way:
 *   - stage boundaries: which values every stage reads from earlier stages or graph
 *     inputs, and which it hands on (cg_analyse_stages);
 *   - units: a stage's nodes in graph order grouped into single nodes and fused
 *     element-wise trees (each fused intermediate has the unit's output shape and is
 *     read inside the unit only), aliasing nodes (Reshape...) marked (cg_stage_open);
 *   - the memory plan: every value the stage touches gets a location (weights at
 *     64-byte aligned offsets in value order, stage input/output slot, or an arena
 *     offset planned first-fit by liveness over units; aliases share their root's).
 * Nothing here depends on hash order or addresses.
 *
 * Parts. An inference plan has one part per stage: part s is stage s. A training
 * program (cg_plan.train) has three per stage, numbered so that values only flow to
 * higher parts: the forward part of stage s is part s, its backward part 2S-1-s, its
 * update part 2S+s (S stages). The boundary analysis and the units and memory plan
 * work on parts; a stage's parts share one parameter memory (cg_wlayout). */
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

/* Where a value lives during a stage (CG_LOC_P: a write-back written in place, at its
 * param's offset in the parameter memory). */
enum { CG_LOC_NONE = 0, CG_LOC_W, CG_LOC_IN, CG_LOC_OUT, CG_LOC_A, CG_LOC_P };

typedef struct {
  int root;   /* node index of the unit's root */
  int *nodes; /* members in graph order (root last) */
  int n_nodes;
  int *ext; /* eltwise units: distinct external input values */
  int n_ext;
  int alias; /* emits no code: its output lives in its input's memory */
} cg_unit;

int cg_n_parts(const cg_plan *p);
int cg_part(const cg_plan *p, int stage, int phase); /* phase: IR_PHASE_* */
int cg_part_stage(const cg_plan *p, int part);
int cg_part_phase(const cg_plan *p, int part);
int cg_node_part(const ir_graph *g, const cg_plan *p, int node);

typedef struct {
  int n_stages;        /* parts (cg_n_parts); the arrays below are indexed by part */
  int *vstage;         /* [n_values] part producing the value; -1 graph input, -2 constant */
  int *last_stage;     /* [n_values] last part using it (or n_stages for graph outputs) */
  int **s_in, *n_in;   /* per part: input values */
  int **s_out, *n_out; /* per part: output values */
  int *out_index;      /* [n_values] index in its producing part's outputs, else -1 */
  char *passthrough;   /* [n_values] a graph output that is a constant or a graph input:
                        * the last forward part copies it to its output */
} cg_stage_info;

/* Boundaries of every part of plan p. Graph outputs that are constants or graph inputs
 * become outputs of the last part (passthrough). A training program's update parts must have no inputs or
 * outputs (they read and write parameters only), and a backward part may read the
 * forward outputs of its own and earlier stages only. Returns 0, or -1 after printing
 * an error; free si with cg_free_stage_info either way. */
int cg_analyse_stages(ir_graph *g, const cg_plan *p, cg_stage_info *si);
void cg_free_stage_info(cg_stage_info *si);

/* A stage's parameter memory: the constants its parts read (and, in a training program,
 * the params they write back into), 64-byte aligned, in value order; in a training
 * program the zero_init constants come last and are not part of the weights file. */
typedef struct {
  size_t *off; /* [n_values] byte offset, or SIZE_MAX if not in this stage */
  int *vals;   /* the values, in memory order */
  int n;
  size_t file_bytes;  /* bytes of weights_K.bin: the first part of the memory */
  size_t total_bytes; /* the whole parameter memory */
} cg_wlayout;

/* The bytes value v takes in a stage's parameter memory and weights file: a constant's
 * bytes as the graph holds them when it is emitted (Winograd-transformed, pre-transposed
 * or permuted filters included), rounded up to CG_ALIGN; 0 for any other value. The
 * layout below places values by it, and the planner's per-node param_bytes
 * (passes/plan/profile.c) counts by it, so plan.json's figures are the files' sizes. */
size_t cg_wlayout_value_bytes(const ir_value *v);
/* The layout of stage `stage` (all its parts). Free with cg_wlayout_free. */
void cg_wlayout_build(cg_wlayout *wl, ir_graph *g, const cg_plan *p, const cg_stage_info *si, int stage);
void cg_wlayout_free(cg_wlayout *wl);
/* The weights file's bytes (file_bytes, at least one byte allocated; caller frees) and
 * its checksum (cg_checksum64). */
unsigned char *cg_wlayout_file(const cg_wlayout *wl, const ir_graph *g, uint64_t *sum);

typedef struct {
  ir_graph *g;
  const cg_plan *p;
  const cg_options *o;
  const cg_stage_info *si;
  const cg_wlayout *wl;
  int s;            /* the part (index into si) */
  int stage, phase; /* its stage and phase (IR_PHASE_FWD for inference) */
  /* per value */
  int *loc;    /* CG_LOC_* */
  size_t *off; /* CG_LOC_W/CG_LOC_A: byte offset; CG_LOC_IN/CG_LOC_OUT: index */
  int *root;   /* alias root */
  int *def_unit, *last_unit;
  cg_unit *units;
  int n_units;
  int *wb;      /* the part's write-backs copied at its end: values it defines with */
  int n_wb;     /* ir_value.writeback set and not in place, in value order; they live until then */
  int inplace;  /* write-backs may be written in place (CG_LOC_P) */
  size_t arena; /* arena bytes the values need (CG_ALIGN multiple) */
} cg_stage;

/* Units and memory plan of part s, whose stage has parameter memory wl (st->arena
 * set). gemm_units (the cpu target, inference): a float MatMul of one B matrix whose
 * output only one element-wise unit reads (with its shape) joins that unit, one MatMul
 * per unit, in graph order among its members (codegen/c/eltwise.c runs the GEMM a
 * block of rows at a time, each block's element-wise work right after it). inplace
 * (the cpu target): write-backs that can be are written straight into their params
 * (CG_LOC_P, no copy). Free with cg_stage_close. */
void cg_stage_open(cg_stage *st, ir_graph *g, const cg_plan *p, const cg_options *o, const cg_stage_info *si,
                   const cg_wlayout *wl, int s, int gemm_units, int inplace);
void cg_stage_close(cg_stage *st);
/* 1 if unit u reads the memory of value d: d itself or a value aliased to it (st->root).
 * With y, *same_shape_only is cleared where a read is not in y's shape. */
int cg_unit_reads(const cg_stage *st, const cg_unit *u, int d, int *same_shape_only, const ir_shape *y);
/* The stage's node count (all its parts), and its display name "stage_K (first .. last
 * node)" into nm. */
int cg_stage_nodes(const ir_graph *g, const cg_plan *p, int stage, char *nm, size_t nm_len);

#endif
