/* passes/shape_sample.c - shape rules of GridSample and Det. */
#include "passes/shape_impl.h"

int sh_GridSample(ir_graph *g, int node) { SH_FAIL("GridSample is not implemented yet"); }
int sh_Det(ir_graph *g, int node) { SH_FAIL("Det is not implemented yet"); }
