/* passes/shape_sample.c - shape rules of the sampling ops: GridSample, RoiAlign,
 * DeformConv, Det. */
#include "passes/shape_impl.h"

int sh_GridSample(ir_graph *g, int node) { SH_FAIL("GridSample is not implemented yet"); }
int sh_RoiAlign(ir_graph *g, int node) { SH_FAIL("RoiAlign is not implemented yet"); }
int sh_DeformConv(ir_graph *g, int node) { SH_FAIL("DeformConv is not implemented yet"); }
int sh_Det(ir_graph *g, int node) { SH_FAIL("Det is not implemented yet"); }
