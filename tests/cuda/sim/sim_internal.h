/* sim_internal.h - what the simulator's libraries (sim_dnn.cc: cuDNN, cuBLASLt, cuBLAS;
 * sim_nccl.cc: NCCL) use of its CUDA runtime core (sim_core.cc). Not seen by the code
 * under test. */
#ifndef CUDASIM_INTERNAL_H
#define CUDASIM_INTERNAL_H
#include <cuda_runtime.h>

#include <functional>

namespace cudasim {

/* Queue fn on stream s (NULL: the legacy default stream) behind the work already queued
 * there, exactly as a kernel launch would be: it runs later on the stream's own thread.
 * While s is being captured into a CUDA graph, fn becomes a node of that graph instead
 * and runs at every launch of the graph, so fn must capture everything it reads by
 * value (descriptors may be destroyed after the call). `what` names the operation in
 * the simulator's messages. Returns cudaSuccess, or an error (invalid stream, a capture
 * already invalidated, ...) and fn is then not queued. */
cudaError_t enqueue(cudaStream_t s, std::function<void()> fn, const char *what);

/* Whether p points into memory from cudaMalloc (anywhere inside a live allocation). */
bool is_device_ptr(const void *p);
/* Whether [p, p + n) lies inside ONE live allocation (n 0 counts as 1): a range that
 * runs from one allocation into the next is an overrun on a GPU, however close. */
bool is_device_range(const void *p, size_t n);

/* One line on stderr, prefixed "cudasim: ", for misuse the real library would reject or
 * that is undefined behaviour on a GPU. */
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace cudasim
#endif
