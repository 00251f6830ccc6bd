/* rt_fakedev.h - PIPERT_FAKE_DEVICE=1: host stages run on a simulated asynchronous
 * device, so that the runtime's device mode (sets in device memory, uploads, downloads,
 * the hand-over by events of rt_handover.c, NCCL's send/receive groups in the MPI
 * transport) runs and is checked on machines without a GPU.
 *
 * Each stage replica gets two streams (its work, its uploads): threads that run their
 * queued commands in order, each after a random delay of up to 300 us; "device memory"
 * comes from malloc, filled with garbage. forward/backward queue copies into the
 * replica's own buffers, the stage's host function and copies out. Whatever the
 * hand-over fails to order shows up as wrong outputs. The stage's step, zero_grads and
 * param_io first wait for its queued work (a GPU runs them on the same stream).
 * With MPI, the device has NCCL-like communicators over MPI: synchronous sends
 * (complete once the peer receives, as NCCL's), a group's calls completed at its end,
 * the replicas' all-reduce through param_io and MPI_Allreduce, a group's wait timing
 * out after PIPECC_NCCL_TIMEOUT seconds (600) with one line, as NCCL's. In async mode a
 * group runs on a third stream (the transport asks MPI for MPI_THREAD_MULTIPLE when
 * rt_fakedev_on()), its sends and receives ordered by the hand-over as reads and writes.
 *
 *   PIPERT_FAKE_DEVICE=1   on (stages with a device of their own keep it)
 *   FAKE_NO_WAIT=1         event waits dropped: a broken hand-over, for tests to catch
 *   FAKE_DEV_MEM=BYTES     the device's memory: allocations beyond it fail (one line)
 *   FAKE_DEV_STATS=1       per replica on stderr at the end: parts and uploads queued
 *                          ahead, waits made, parts that ran while one of its groups
 *                          was in flight (a command's random delay counts as its
 *                          time); per rank the NCCL sends, receives, groups and groups
 *                          whose end returned before they completed */
#ifndef PIPERT_RT_FAKEDEV_H
#define PIPERT_RT_FAKEDEV_H
#include "pipert.h"

/* A copy of p (its stages and their descriptions copied) whose host stages run on the
 * fake device, when PIPERT_FAKE_DEVICE=1; else p itself. rt_fakedev_free takes it back. */
const pipert_pipeline *rt_fakedev_pipeline(const pipert_pipeline *p);
int rt_fakedev_on(void); /* PIPERT_FAKE_DEVICE=1 */
void rt_fakedev_free(const pipert_pipeline *p);
/* After a replica's init (state) of stage s, before its fini: its streams. No-ops for
 * stages that are not on the fake device. attach: 0, or non-zero after printing. */
int rt_fakedev_attach(const pipert_pipeline *p, int s, void *state);
void rt_fakedev_detach(const pipert_pipeline *p, int s, void *state);

#endif
