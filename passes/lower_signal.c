/* passes/lower_signal.c - signal-processing ops written in other ops (pass_lower_signal),
 * after shape inference: DFT, STFT, the window functions and MelWeightMatrix. */
#include "passes/pass.h"
#include "passes/shape_impl.h"

int sh_DFT(ir_graph *g, int node) { SH_FAIL("DFT is not implemented yet"); }
int sh_STFT(ir_graph *g, int node) { SH_FAIL("STFT is not implemented yet"); }
int sh_HannWindow(ir_graph *g, int node) { SH_FAIL("HannWindow is not implemented yet"); }
int sh_HammingWindow(ir_graph *g, int node) { SH_FAIL("HammingWindow is not implemented yet"); }
int sh_BlackmanWindow(ir_graph *g, int node) { SH_FAIL("BlackmanWindow is not implemented yet"); }
int sh_MelWeightMatrix(ir_graph *g, int node) { SH_FAIL("MelWeightMatrix is not implemented yet"); }

int pass_lower_signal(ir_graph *g, const pass_opts *o) {
  (void)g, (void)o;
  return 0;
}
