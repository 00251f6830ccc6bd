/* tools/pipecc_calibrate.h - `pipecc --calibrate`: the rates of the kernels the cpu target
 * emits, measured on this machine, into a device file that the analytical cost model
 * (passes/plan/profile.h, pass_device) then uses.
 *
 * The micro-benchmark is a graph of one node per kernel (OpenBLAS GEMMs at two shapes,
 * pipert_gemm_direct at two depths, a Winograd 3x3 Conv, a depthwise Conv, an Add, a
 * Sigmoid, a Transpose and a tiny Relu for the fixed cost of a node), optimised as a
 * model is (Winograd, pretransposed weights), emitted as one stage with the per-node
 * profiler (as measured costs are, tools/pipecc_costs.h), built and run on one core
 * 15 times (each 1 warm-up and 3 timed runs), each node's least time kept (a few seconds,
 * most of it the C compiler); the rates are
 * fitted to its times and the fitted model's error on each node is printed.
 *
 * Where the device file lives:
 *   `pipecc --calibrate` writes $PIPECC_DEVICE_FILE when that is set to a path, else
 *   $XDG_CONFIG_HOME/pipecc/device.json (default ~/.config/pipecc/device.json);
 *   `pipecc --calibrate=FILE` writes FILE.
 * Which device a plan uses: --device FILE.json (a device file; any machine's, e.g. a GPU
 * cluster's copied to a laptop), --device NAME (a built-in: h100, h200, a100, v100, cpu),
 * else for the cpu target this machine's device file when there is one
 * ($PIPECC_DEVICE_FILE, else the XDG file above), else the built-in "cpu".
 * PIPECC_DEVICE_FILE=none (the tests' environment: tests/CMakeLists.txt) ignores the
 * XDG file. The line above the plan table names the file a plan used. */
#ifndef PIPECC_TOOLS_PIPECC_CALIBRATE_H
#define PIPECC_TOOLS_PIPECC_CALIBRATE_H
#include <stddef.h>

#include "passes/plan/profile.h"
#include "tools/pipecc_options.h"

/* Runs the micro-benchmark and writes the device file (path: NULL for the default).
 * Returns the exit status: 0, 2 (cannot write the file) or 3 (the benchmark failed). */
int pipecc_calibrate(const pipecc_options *o, const char *path);
/* The device a plan is costed on (see above), and in note (may be left empty) which
 * device file it came from. NULL after one line on stderr (a bad device file). */
const pass_device *pipecc_device(const pipecc_options *o, char *note, size_t n);
#endif
