/* rt_handover.h - ordering the device buffers that stages sharing one device hand each
 * other without the host waiting (pipert_device_ops.async).
 *
 * A device runtime (codegen/cuda/rt, or the fake device of tests/runtime) queues each
 * stage's work on the stage's own stream and returns. Every buffer it allocates for the
 * runtime's sets is registered here as a region, with a 'ready' event recorded on its
 * writer's stream after each write and one event per reader recorded on the reader's
 * stream after its read is queued. Before queueing a read, a stream waits for 'ready';
 * before queueing a write, for every reader's event (and the last write). The host hands
 * sets on as before (rt_worker.c, through mutexes), so every record is made before the
 * wait that names it, and no host thread waits for another stage's work.
 *
 * Streams and events are the device's, behind rt_ho_ops; a stream is also the reader's
 * identity. Thread-safe (one lock around the registry). */
#ifndef PIPERT_RT_HANDOVER_H
#define PIPERT_RT_HANDOVER_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_ho_ops {
  void *(*event_new)(void *stream); /* an event of stream's device; NULL after printing */
  void (*event_free)(void *event);
  int (*record)(void *stream, void *event); /* record event at the end of stream's queue */
  int (*wait)(void *stream, void *event);   /* stream's later work waits for event's last record */
  int (*finish)(void *stream);              /* returns when stream's queued work has completed */
  void (*sync)(void *event);                /* returns when event's last record has completed
                                               (prints nothing: a region's release); may be NULL */
} rt_ho_ops;                                /* ints: 0, or non-zero after printing one line */

/* Registers [base, base + n) (0, or -1 when out of memory); forgets it (its events freed).
 * Before forgetting, remove waits (o->sync) for the last write and every read recorded,
 * whichever device's stream queued them: a device whose memory is freed need not wait for
 * another device's streams (cudaFree does not), and a run that failed may leave a reader
 * on another device with its copy still queued. The caller frees the memory after. */
int rt_ho_add(void *base, size_t n);
void rt_ho_remove(const rt_ho_ops *o, void *base);
/* Around a read of p queued on stream: before (wait for the last write), after (record). */
int rt_ho_before_read(const rt_ho_ops *o, void *stream, const void *p);
int rt_ho_after_read(const rt_ho_ops *o, void *stream, const void *p);
/* Around a write of p queued on stream: before (wait for the reads of what p holds and
 * the last write), after (record; complete: the write has finished, nothing to record). */
int rt_ho_before_write(const rt_ho_ops *o, void *stream, const void *p);
int rt_ho_after_write(const rt_ho_ops *o, void *stream, const void *p, int complete);

#ifdef __cplusplus
}
#endif
#endif
