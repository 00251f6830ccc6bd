/* rt.h - libpipert internals shared between its files (and its tests). */
#ifndef RT_H
#define RT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include "pipert.h"

/* ---- arrays, .npy and .npz (rt_npy.c) ---------------------------------- */

/* An n-d array owned by whoever filled it; data is 64-byte aligned. */
typedef struct rt_array {
  char *name; /* malloc'd, may be NULL */
  int dtype;  /* enum pipert_dtype */
  int rank;   /* 0..PIPERT_MAX_RANK */
  int64_t dims[PIPERT_MAX_RANK];
  size_t nbytes;
  void *data;
} rt_array;

size_t rt_dtype_size(int dtype);      /* 0 when unknown */
const char *rt_dtype_name(int dtype); /* "float32", ... */
void rt_array_free(rt_array *a);
/* The bytes of an array of that dtype and shape: 0, or -1 when a dim is negative or the
 * product overflows. */
int rt_array_bytes(int dtype, int rank, const int64_t *dims, size_t *nbytes);
/* 0, or -1 (nothing allocated) for a bad dtype, rank or size, or when memory is short. */
int rt_array_alloc(rt_array *a, const char *name, int dtype, int rank, const int64_t *dims);
/* "(2, 3)" into buf */
const char *rt_shape_str(char *buf, size_t len, int rank, const int64_t *dims);

/* All return 0, or -1 with a one-line message (without "pipeline: ") in err. */
int rt_npy_parse(const void *buf, size_t len, const char *what, rt_array *out, char *err, size_t errlen);
int rt_npy_load(const char *path, rt_array *out, char *err, size_t errlen);
int rt_npy_save(const char *path, const rt_array *a, char *err, size_t errlen);
/* Loads every entry of an npz (stored entries only); names lose ".npy". */
int rt_npz_load(const char *path, rt_array **arrs, int *n, char *err, size_t errlen);
/* The same from len bytes in memory (path names them in messages). */
int rt_npz_parse(const void *buf, size_t len, const char *path, rt_array **arrs, int *n, char *err, size_t errlen);
int rt_npz_save(const char *path, const rt_array *arrs, int n, char *err, size_t errlen);
/* A file written whole or not at all: rt_atomic_open opens PATH.tmp.PID (the name in
 * tmp); rt_atomic_close(f, ok, ...) syncs it and renames it to path when ok, else (or
 * when that fails) removes it; 0, or -1 with the reason (errno's) in err. Outputs,
 * --save and checkpoints go through it, so a failed write never leaves a partial file
 * under the final name. */
FILE *rt_atomic_open(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen);
int rt_atomic_close(FILE *f, int ok, const char *path, const char *tmp, char *err, size_t errlen);
/* Whether rt_atomic_open can make path's temporary file (made and removed again): 0, or
 * -1 with errno set (checks of output paths before a run). */
int rt_can_write(const char *path);
uint32_t rt_crc32(uint32_t crc, const void *data, size_t len);

/* ---- weights (rt_weights.c) ------------------------------------------- */

/* The reason a stage gave with pipert_bad_input, cleared; NULL if none. */
const char *rt_bad_input_take(void);
typedef struct rt_weights {
  void *map;
  size_t len;
} rt_weights;
/* Maps dir/desc->weights_file and checks size and checksum. On failure writes
 * "stage K: FILE: reason" into err. */
int rt_weights_load(const pipert_stage_desc *d, const char *dir, rt_weights *w, char *err, size_t errlen);
void rt_weights_unload(rt_weights *w);

/* ---- options and shared helpers (rt_main.c) ---------------------------- */

typedef struct rt_input_arg {
  const char *name;
  const char *path;
} rt_input_arg;

typedef struct rt_options {
  rt_input_arg *inputs;
  int n_inputs;
  const char *output;
  int microbatches; /* 0: the plan's */
  int bench;        /* timed iterations, 0: none */
  int threads_per_stage;
  int pin;
  const char *weights_dir;
  int64_t async_base; /* training, an asynchronous schedule: the step the run resumes from */
  int async_keep;     /* ... and the run writes a checkpoint */
  int64_t async_every;               /* ... every this many steps during the run, 0: at the end only */
  const struct rt_async_ckpt *async_ckpt; /* what takes those checkpoints' parts */
  const char *transport;    /* "auto", "threads", "mpi" */
  double timeout_s;         /* 0: none */
  int stream;               /* --stream: bench as one continuous stream of batches */
  const pipert_pipeline *p; /* the pipeline the options are for (usage, --info) */
} rt_options;

/* Per-run figures, filled by a transport. */
typedef struct rt_stats {
  double wall_s;
  double *busy_s;     /* per stage, summed over replicas */
  double *cpu_s;      /* per stage, summed over replicas: the stage threads' own CPU time
                       * (rt_thread_cpu) in the same spans; NULL: not wanted */
  size_t *peak_bytes; /* per stage (max over replicas): output buffers the run held at
                       * once (forward sets incl. stashed activations, gradient sets);
                       * NULL: not wanted */
  int *peak_sets;     /* per stage: forward output sets held at once; NULL: not wanted */
  double steady_s;    /* streaming: from the first batch's completion to the last's */
  int steady_batches; /* batches completed in steady_s (0: not measured) */
} rt_stats;

void rt_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* "pipeline: ..." + \n to stderr */
extern int rt_errors_muted;                                                 /* rt_errorf prints nothing while set */
double rt_now(void);                                                        /* monotonic seconds */
int rt_env_on(const char *name);                                            /* a switch: set, not empty, not "0" */
void rt_set_blas_threads(int n);
/* rt_cpu.c: the CPU and the kernels it runs (docs/cpu.md, "The BLAS core") */
void rt_blas_check(char **argv); /* a BLAS core below the CPU's: restart once with a better one */
const char *rt_blas_core(void);  /* openblas_get_corename(), NULL without OpenBLAS */
const char *rt_cpu_brand(void);
void rt_cpu_isa(char *buf, size_t n);
const char *rt_gemm_variant(void);         /* pipert_gemm.h's variant on this CPU */
void rt_kernels_line(char *buf, size_t n); /* "kernels: CPU, ISA; BLAS core ...; pipecc GEMM ..." */
void *rt_aligned_alloc(size_t n);          /* 64-byte aligned, zeroed; aborts on OOM */
void *rt_aligned_try_alloc(size_t n);      /* the same, or NULL on OOM (sizes that input files set) */
/* acc[i] += x[i] over nbytes of float32 or float64 (dtype) elements. */
void rt_sum_into(void *acc, const void *x, size_t nbytes, int dtype);

/* Reads and checks the graph inputs; sets *T (micro-batch count). A scalar (rank-0)
 * input is the same for every micro-batch: it is given as a scalar and repeated T times
 * here, so that every transport finds micro-batch g's copy at g * nbytes as for the
 * others. A scalar output holds one value per run: more than one micro-batch is an
 * error (one line naming it). 0 or 2. */
int rt_load_inputs(const pipert_pipeline *p, const rt_options *o, rt_array *in, int64_t *T);
/* Samples in one micro-batch: dim 0 of the first graph input (or output) that has one. */
int64_t rt_microbatch_size(const pipert_pipeline *p);
int rt_alloc_outputs(const pipert_pipeline *p, int64_t T, rt_array *out);
/* --output checked before the run: its folder takes a new file (a DIR is made); 0 or 2. */
int rt_check_output(const pipert_pipeline *p, const rt_options *o);
int rt_write_outputs(const pipert_pipeline *p, const rt_options *o, const rt_array *out);
/* --bench's figures; cpu_s (NULL: not printed) each stage's own CPU time beside busy_s */
void rt_print_bench(const pipert_pipeline *p, int iters, int64_t samples_per_iter, double wall_s, const double *busy_s,
                    const double *cpu_s, const rt_stats *stream);
/* This thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID): unlike rt_now, not the
 * time the OS gave other threads on its core */
double rt_thread_cpu(void);
int rt_validate_plan(const pipert_pipeline *p);

/* Program checks (rt_check.c); each writes the first problem into e (left empty if none). */
const char *rt_op_name(int op); /* "RECV_ACT", ... */
/* Stage s's stream on its own: every opcode over micro-batches 0..M-1 in order, RECV
 * before FWD before SEND, FWD before BWD, one STEP (after one ALLREDUCE with replicas). */
void rt_check_program(const pipert_pipeline *p, int s, char *e, size_t elen);
/* The same for a stream prog of len instructions over M micro-batches. */
void rt_check_stream(const pipert_pipeline *p, int s, const pipert_instr *prog, int len, int M, char *e, size_t elen);
/* All streams with sends that never wait and receives that wait for their send: must
 * finish (the threads and MPI transports). */
void rt_check_deadlock(const pipert_pipeline *p, char *e, size_t elen);
/* The same proof for programs prog[s] (len[s] instructions over M micro-batches). */
void rt_check_deadlock_progs(const pipert_pipeline *p, const pipert_instr *const *prog, const int *len, int M, char *e,
                             size_t elen);
/* All streams under NCCL's rules: each run of consecutive sends and receives of a stage
 * replica (the implicit ones of a FWD/BWD without RECV/SEND opcodes included) is one
 * group, which completes only when the matching call of every send and receive in it
 * is posted in its peer's current group; ALLREDUCE waits for every replica. */
void rt_check_rendezvous(const pipert_pipeline *p, const pipert_instr *const *prog, const int *prog_len, char *e,
                         size_t elen);
/* Program for stage s with M micro-batches per round: the plan's when M matches,
 * else the default RECV/FWD/SEND sequence. *owned is set when it must be freed. */
const pipert_instr *rt_stage_program(const pipert_pipeline *p, int s, int M, int *len, pipert_instr **owned);
/* Moves the receive (RECV_ACT, RECV_GRAD) at prog[i] ahead of the FWD or BWD before it
 * (not across STEP or ALLREDUCE), so that where receives are queued on the device (NCCL,
 * async mode) its transfer runs beside that work: RECV 0, FWD 0, RECV 1 becomes RECV 0,
 * RECV 1, FWD 0. Returns 1 when it moved (the caller checks the programs again), else 0. */
int rt_recv_ahead(pipert_instr *prog, int i);
/* The stages' programs (len[s] instructions, M micro-batches) with receives moved ahead
 * (rt_recv_ahead): every receive, else the gradients' only, else the activations' only,
 * the first whose programs all pass rt_check_stream and rt_check_rendezvous. Inference
 * takes the first; 1F1B training the second (moving both directions' would make a
 * circular wait, which the checks find). ahead[s]: the new program (the caller frees
 * it), or NULL where none moved. Returns how many changed (0: keep the plan's). */
int rt_programs_ahead(const pipert_pipeline *p, const pipert_instr *const *prog, const int *len, int M,
                      pipert_instr **ahead);
const char *rt_exe_dir(void);
void rt_install_crash_handler(void);
extern _Thread_local int rt_cur_stage;
/* the plan's device of the stage replica whose init runs (pipert_init_device), or -1 */
extern _Thread_local int rt_init_device;

/* ---- the stream interpreter (rt_worker.c), shared by the transports ------- */

/* A set: the forward (kind 0) or backward (kind 1) outputs of one stage for one
 * micro-batch, in one block from a pool; reference counted, back to its pool when the
 * last reader releases it. */
typedef struct rt_pool rt_pool;
typedef struct rt_set {
  struct rt_set *next;
  rt_pool *pool;
  atomic_int refs;
  void **bufs; /* one per tensor */
  void *mem;
  void *link; /* transport data (pending sends) */
} rt_set;

/* Sets of one layout; grows on demand up to cap, so n (sets allocated) measures the
 * peak held at once. */
struct rt_pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rt_set *free;
  rt_set **all;
  int n, cap;
  int n_bufs;
  const pipert_tensor_desc *descs;
  size_t set_bytes;
  const pipert_device_ops *dev; /* sets in device memory (alloc with dev_state), else host */
  void *dev_state;
};
void rt_pool_init(rt_pool *pl, int n_bufs, const pipert_tensor_desc *descs, int cap);
void rt_pool_reset(rt_pool *pl); /* every set free (between runs) */
void rt_pool_free(rt_pool *pl);
void rt_set_release(rt_set *s);

/* A stage's neighbours, from input_src and bwd_input_src. */
typedef struct rt_topo {
  int nfp, *fp;                /* stages (!= itself) whose forward outputs it reads */
  char *fp_bwd;                /* [nfp] its backward reads that stage's outputs */
  int own_bwd;                 /* its backward reads its own forward outputs */
  int nfc, *fc;                /* stages reading its forward outputs */
  int ngp, *gp;                /* stages whose backward outputs its backward reads */
  int ngc, *gc;                /* stages reading its backward outputs */
  int has[PIPERT_OP_STEP + 1]; /* its program has this opcode */
} rt_topo;
/* topo[S] of pipeline p with programs prog[s] / prog_len[s]; free with rt_topo_free. */
void rt_topo_build(const pipert_pipeline *p, const pipert_instr *const *prog, const int *prog_len, rt_topo *topo);
void rt_topo_free(rt_topo *topo, int S);

typedef struct rt_worker rt_worker;
/* What a transport does for the interpreter. recv and send move whole sets: recv
 * returns stage `from`'s kind-set of micro-batch g holding one reference for w (NULL
 * after an abort); send hands w's set s of g to every stage reading it (the
 * interpreter has set s->refs to the number of local readers first; a transport that
 * copies keeps s until its copies are sent). */
typedef struct rt_link_ops {
  rt_set *(*recv)(void *link, rt_worker *w, int kind, int from, int64_t g);
  int (*send)(void *link, rt_worker *w, int kind, rt_set *s, int64_t g);
  const void *(*input)(void *link, rt_worker *w, int idx, int64_t g);           /* graph input slice */
  void (*output)(void *link, rt_worker *w, int q, int64_t g, const void *data); /* graph output */
  int (*allreduce)(void *link, rt_worker *w); /* GRAD params summed over the stage's replicas */
  int (*aborted)(void *link);
  void (*fail)(void *link, int rc, const char *msg); /* msg "": printed already */
  void (*poll)(void *link, rt_worker *w);            /* progress pending sends (may be NULL) */
  /* Groups (may be NULL): the interpreter opens one (begin 1) before a run of receives
   * and sends and closes it (begin 0) before the next compute, ALLREDUCE or the end of
   * the round; closing returns when every call in the group has completed. */
  int (*group)(void *link, rt_worker *w, int begin);
} rt_link_ops;

struct rt_worker {
  const pipert_pipeline *p;
  const rt_link_ops *ops;
  void *link;
  const pipert_device_ops *dev; /* device mode (rt_worker_set_device), else NULL */
  int dev_async;                /* device mode, hand-over by the device (dev->async): busy
                                   comes from dev->busy, forward only queues the work */
  void **dev_in;                /* device mode: [n_inputs * slots] graph input slices on the device
                                   (slots: M in training, whose backward reads them again; else in_copies) */
  int64_t *dev_in_mb;           /* [n_inputs * slots] the micro-batch + 1 held there (0: none) */
  int in_copies;                /* device mode, inference: copies per graph input (2; PIPERT_INPUT_COPIES=1) */
  void **host_out;              /* device mode: [n_outputs] a graph output downloaded */
  struct rt_pend *pend;         /* async device mode: graph outputs downloaded after the
                                   next forward is queued, so the device never idles */
  int n_pend, cap_pend;
  int stage, replica, M;
  const pipert_instr *prog;
  int prog_len;
  const rt_topo *topo;
  void *state;
  rt_pool fpool, gpool; /* forward / backward output sets */
  double busy;
  double cpu; /* this thread's CPU time in the spans busy counts (rt_thread_cpu) */
  int inflight, peak_inflight; /* training: micro-batches past FWD, before their BWD (now / most) */
  rt_set **recv, **grecv;      /* [M][nfp] / [M][ngp] */
  rt_set **outs, **gouts;      /* [M] */
  const void **in, **bin;
  int in_group; /* a group of sends/receives is open (rt_link_ops.group) */
  /* The stall watchdog (rt_threads.c): since when (rt_now() in microseconds; 0: not) the
   * worker has been in a call that only its own stage's work ends (a forward, backward,
   * step, output download, the end-of-run device wait), not a wait for a peer's set; what
   * that call is (PIPERT_OP_FWD, _BWD, _STEP, _ALLREDUCE or an RT_WORK_*) and its
   * micro-batch. */
  atomic_llong work_since_us;
  int work_op;
  int64_t work_mb;
  struct rt_async *async; /* an asynchronous schedule's weight versions (rt_async.c), else NULL */
  int64_t async_base;     /* its updates before this run (a resumed run) */
  int async_keep;         /* keep the versions a later run reads (a checkpoint is written) */
  int64_t async_every;    /* checkpoints during the run, every this many steps (0: none) */
  const struct rt_async_ckpt *async_ckpt;
};

/* The worker enters (op, micro-batch g) or leaves (RT_IDLE) a call the watchdog times. */
enum { RT_IDLE = -1, RT_WORK_OUTPUTS = -2 /* the graph outputs' downloads */, RT_WORK_END = -3 /* dev->busy */ };
void rt_worker_working(rt_worker *w, int op, int64_t g);
/* The stall watchdog's limit in seconds (PIPERT_STALL_S; default 600 on a device, 0: off). */
double rt_stall_limit(const rt_worker *w);
/* Since when (microseconds) w has been in such a call for longer than stall_s; 0: not. */
long long rt_worker_stalled(const rt_worker *w, double now, double stall_s);
/* "stage 1 (replica 0) on device 2"; "the forward of micro-batch 3" (the call w is in). */
const char *rt_worker_where(const rt_worker *w, char *buf, size_t n);
const char *rt_worker_stall_what(const rt_worker *w, char *buf, size_t n);
/* Async device mode, the end of a run: waits for the work w queued (dev->busy, timed by
 * the watchdog); the seconds it ran on the device, or < 0 after the device printed why
 * it failed. */
double rt_worker_end_wait(rt_worker *w, int64_t T);
/* Pools (cap sets each) and arrays; state stays for the caller's init. */
void rt_worker_init(rt_worker *w, const pipert_pipeline *p, int stage, int replica, int M, const pipert_instr *prog,
                    int prog_len, const rt_topo *topo, int cap, const rt_link_ops *ops, void *link);
void rt_worker_reset(rt_worker *w); /* before a run */
/* Device mode (after init set w->state): the worker's sets in the device memory of its
 * state, forward/backward in their device form, graph inputs uploaded (once per
 * micro-batch) and outputs downloaded. Call before the first run. */
void rt_worker_set_device(rt_worker *w, const pipert_device_ops *dev);
void rt_worker_free(rt_worker *w);
/* One round of the program (micro-batches base + mb, those >= T skipped); a training
 * round first clears the gradients. 0, or -1 after w->ops->fail. */
int rt_worker_round(rt_worker *w, int64_t base, int64_t T);
/* A set from w's pool of kind k, NULL after an abort. */
rt_set *rt_worker_get(rt_worker *w, int kind);
/* A set from pool pl (waiting as w does), NULL after an abort. */
rt_set *rt_pool_get(rt_worker *w, rt_pool *pl);
/* "stage 1" or "stage 1 (replica 2)" */
const char *rt_worker_name(const rt_worker *w, char *buf, size_t n);

/* ---- asynchronous schedules (rt_async.c) ---------------------------------- */

/* pipedream, async, spectrain, 2bw: the pipeline's schedule names one (training only). */
enum { RT_SYNC = 0, RT_ASYNC_PIPEDREAM, RT_ASYNC_VANILLA, RT_ASYNC_SPECTRAIN, RT_ASYNC_2BW };
int rt_async_mode(const pipert_pipeline *p);
/* Stage s's stream for a run of T micro-batches (T / M batches, M = p->microbatches):
 * N-1-s warm-up forwards, then one forward and one backward alternating, the backwards
 * of the last ones; a STEP after the backward of every batch's last micro-batch; the
 * receives and sends where the plan's program has them. malloc'd. */
pipert_instr *rt_async_program(const pipert_pipeline *p, int s, int T, int *len);
/* The streams of a run of T micro-batches: each stage's order (as rt_check_stream, a
 * STEP after every whole batch's backwards, no ALLREDUCE, one replica a stage) and
 * rt_check_deadlock_progs. Writes the first problem into e. */
void rt_async_check(const pipert_pipeline *p, const pipert_instr *const *prog, const int *len, int T, char *e,
                    size_t elen);
/* The worker's weight versions over its program (w->async): 0, or -1 with the reason in
 * e (a tied weight, spectrain without momentum buffers, a 2bw batch too small for its
 * stage). reset before a run; before/after a FWD or BWD at instruction i put the
 * version it reads in place and the latest back; step(after 0) copies the version a
 * STEP at i would overwrite when a later instruction reads it, step(after 1) counts the
 * update and frees copies nothing reads any more. copies: versions held in copies. */
int rt_async_init(rt_worker *w, char *e, size_t elen);
/* A checkpoint during an asynchronous run (--checkpoint-every): the state after `step`
 * updates, as a run of `step` steps would leave it. Each stage's worker hands over its
 * part in its own thread: buffers = 1 right before the forward of batch `step` (the
 * BUFFER params: the forwards of the batches before it only), buffers = 0 right after
 * its step-th update (the weights, optimizer state and hyperparameters, and the older
 * versions the steps after it read, rt_async_first_kept). take returns 0 or -1 after
 * printing one line. */
typedef struct rt_async_ckpt {
  int (*take)(void *ctx, rt_worker *w, int64_t step, int buffers);
  void *ctx;
} rt_async_ckpt;
/* The oldest version that the steps after `step` read (newer ones up to step - 1 are kept
 * for a checkpoint there). */
int64_t rt_async_first_kept(const rt_worker *w, int64_t step);
void rt_async_reset(rt_worker *w);
int rt_async_before(rt_worker *w, int i);
int rt_async_after(rt_worker *w, int i);
int rt_async_step(rt_worker *w, int i, int after);
/* Checkpoints: the versions [*first, *end) a later run reads (returns the weights a
 * version holds); a version's copy (momentum: spectrain's momentum buffers with it),
 * made when create and missing, NULL when there is none; weight q of a version and its
 * byte offset in a copy; the first version before the run that the run reads and has no
 * copy of, -1 when none. */
int rt_async_kept(const rt_worker *w, int64_t *first, int64_t *end);
void *rt_async_version(rt_worker *w, int64_t v, int momentum, int create);
const pipert_param_desc *rt_async_weight(const rt_worker *w, int q, size_t *offset);
int64_t rt_async_missing(const rt_worker *w);
/* A host copy's bytes (stage desc d's parameter memory up to the end of its last WEIGHT);
 * rt_async_io: version v of worker w (mom: its momentum buffers) to buf (write 0: 1
 * where w holds it, 0 where not) or from buf (write 1: made); -1: nbytes is not
 * rt_async_copy_bytes, or out of memory. */
size_t rt_async_copy_bytes(const pipert_stage_desc *d);
int rt_async_io(rt_worker *w, int64_t v, int mom, int write, void *buf, size_t nbytes);
void rt_async_free(rt_worker *w);

/* ---- transports -------------------------------------------------------- */

/* Threads: runs T micro-batches (rounds of M) from in[] into out[]. Returns 0,
 * 1 (a stage failed; message printed) or 2. */
typedef struct rt_exec rt_exec;
int rt_threads_create(const pipert_pipeline *p, const rt_options *o, int M, rt_exec **ex);
int rt_threads_run(rt_exec *ex, const rt_array *in, rt_array *out, int64_t T, rt_stats *st);
/* Streaming: run T micro-batches over data arrays that hold only `period` micro-batches
 * (micro-batch g reads and writes slot g % period). 0 restores the default (period = T). */
void rt_threads_set_period(rt_exec *ex, int64_t period);
/* Whether the stages run on a device (the host threads queue their work) */
int rt_threads_on_device(const rt_exec *ex);
void rt_threads_destroy(rt_exec *ex);
/* The state of a stage's replica (for param_io between runs). */
void *rt_threads_state(rt_exec *ex, int stage, int replica);
rt_worker *rt_threads_worker(rt_exec *ex, int stage, int replica); /* NULL: none */

/* ---- training (rt_train.c) ------------------------------------------------ */

/* What the training loop needs of a transport. Every call is collective: all processes
 * make the same calls in the same order (rank is 0 for the process that reads data,
 * writes files and prints; the threads transport has one process). */
typedef struct rt_backend {
  void *impl;
  int rank;
  /* one optimizer step: in[] (rank 0) holds the batch, out[] (rank 0) receives the
   * graph outputs; st (rank 0) the figures of every stage. 0, 1 or 2. */
  int (*run)(void *impl, const rt_array *in, rt_array *out, rt_stats *st);
  /* a param of stage/replica to (write 0) or from (write 1) buf, which lives on rank 0 */
  int (*param_io)(void *impl, int stage, int replica, const pipert_param_desc *pd, int write, void *buf);
  int64_t (*bcast)(void *impl, int64_t v); /* rank 0's v, everywhere */
  /* An asynchronous schedule's older weight versions, held by stage's worker (rt_async.c),
   * for checkpoints; every rank calls these, rank 0 gets the answers. vrange: the
   * versions [*first, *end) the run keeps for a checkpoint at its end, and the number of
   * weights; vio: version v (mom: the momentum buffers with it), laid out as the worker
   * keeps it (rt_async_copy_bytes), to buf (write 0: 1 where the worker holds it, 0
   * where not) or from buf (write 1: the worker makes it); -1 on failure. vmissing:
   * rt_async_missing. */
  int (*vrange)(void *impl, int stage, int64_t *first, int64_t *end);
  int (*vio)(void *impl, int stage, int64_t v, int mom, int write, void *buf, size_t nbytes);
  int64_t (*vmissing)(void *impl, int stage);
} rt_backend;
/* Backends. Threads: one process, a worker thread per stage replica (rt_threads.c). MPI:
 * one rank per stage replica, MPI_Init inside; *rc is 2 when the world does not fit the
 * pipeline (transport_mpi.c). */
int rt_threads_backend(const pipert_pipeline *p, const rt_options *o, int M, rt_backend *be);
void rt_threads_backend_free(rt_backend *be);
int rt_mpi_backend(const pipert_pipeline *p, const rt_options *o, int M, rt_backend *be); /* M 0: the plan's */
/* Ends the MPI world after training: every rank exits with rank 0's status, returned. */
int rt_mpi_backend_end(rt_backend *be, int rc);

/* `pipeline train ...`: argv without the program name and "train". Returns the exit
 * status (0, 1 a stage failed, 2 a user error). Chooses the transport like inference. */
int rt_train_main(const pipert_pipeline *p, int argc, char **argv);

/* MPI (transport_mpi.c; a stub that reports the missing support without MPI). */
int rt_mpi_compiled(void);
int rt_mpi_launched(void); /* launched by mpirun with more than one rank? */
int rt_mpi_rank_env(void); /* this process's rank from the launcher's environment (0 if none) */
int rt_mpi_main(const pipert_pipeline *p, const rt_options *o);

#endif
