/* The MPI transport: `mpirun -np R DIR/pipeline ...` with R the number of stage
 * replicas of the plan (the sum of every stage's replicas); rank r runs one replica
 * (ranks in stage order), through the stream interpreter (rt_worker.c). Replica k of
 * a stage runs the micro-batches with mb % replicas == k, as in the threads transport.
 *
 * Rank 0 reads the inputs and writes the outputs: it sends graph-input slices to the
 * ranks that read them and receives graph outputs straight into the output arrays
 * (all posted up front, non-blocking). A set travels as the raw bytes of the tensors
 * the receiving stage reads (shapes are static: no handshake), with non-blocking sends
 * that keep the set until they complete; messages between two ranks on one tag arrive
 * in order (MPI's non-overtaking rule), which is the order of the micro-batches.
 * Replicas sum their gradients in replica order (the threads transport's order), so
 * both transports give the same bits. A failure prints its line and calls MPI_Abort;
 * a watchdog thread ends a rank whose launcher died or that passed --timeout.
 *
 * Training (`mpirun -np R DIR/pipeline train ...`): every rank runs the training loop
 * (rt_train.c) over the backend below; param reads and writes go through rank 0.
 *
 * NCCL: when every stage is a device stage with communication (the cuda target,
 * pipert_device_ops), each rank on its own GPU (the rank's local rank on its host picks
 * it), and the programs keep NCCL's rules (rt_check_rendezvous), sets stay in device
 * memory and move with NCCL sends and receives, grouped as the interpreter groups them,
 * and replicas sum their gradients with an NCCL all-reduce (NCCL's order, not replica
 * order: deterministic, but not the threads transport's bits). The communicator's id
 * goes from rank 0 to everyone through MPI. Otherwise sets travel through host memory
 * as above (PIPERT_HOST_SETS=1 asks for that). Graph inputs and outputs always go
 * through rank 0's host memory. With a device that queues work (pipert_device_ops.async)
 * the sends and receives queue on its communication stream, ordered by the hand-over's
 * events, and receives are queued ahead of the work before them where the program
 * checks allow (programs_ahead), so that transfers run beside compute (PIPERT_SYNC_SETS=1: every
 * group and part completes before the call returns; PIPERT_RECV_AHEAD=0: the plan's
 * order).
 *
 * Compiled to a stub unless PIPERT_HAVE_MPI is defined (see tests/runtime/CMakeLists.txt). */
#include <stdlib.h>
#include <string.h>
#include "rt.h"
#include "rt_fakedev.h"

int rt_mpi_rank_env(void) {
  const char *v = getenv("OMPI_COMM_WORLD_RANK");
  if (!v) v = getenv("PMI_RANK");
  if (!v) v = getenv("PMIX_RANK");
  return v ? atoi(v) : 0;
}

int rt_mpi_launched(void) {
  const char *v = getenv("OMPI_COMM_WORLD_SIZE");
  if (!v) v = getenv("PMI_SIZE");
  if (!v) v = getenv("PMIX_SIZE");
  return v && atoi(v) > 1;
}

#ifndef PIPERT_HAVE_MPI

int rt_mpi_compiled(void) { return 0; }

static int no_mpi(void) {
  rt_errorf(
      "this pipeline was built without MPI support: run it without mpirun (threads transport), "
      "or link it with libpipert built with MPI");
  return 2;
}

int rt_mpi_main(const pipert_pipeline *p, const rt_options *o) {
  (void)p;
  (void)o;
  return no_mpi();
}

int rt_mpi_backend(const pipert_pipeline *p, const rt_options *o, int M, rt_backend *be) {
  (void)p;
  (void)o;
  (void)M;
  memset(be, 0, sizeof *be);
  return no_mpi();
}

int rt_mpi_backend_end(rt_backend *be, int rc) {
  (void)be;
  return rc;
}

#else

#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_PARAM = 3, TAG_SUM = 4, TAG_IN = 1000, TAG_OUT = 100000 };

int rt_mpi_compiled(void) { return 1; }

typedef struct { /* the sends in flight of a set (rt_set.link) */
  MPI_Request *req;
  int n, cap;
} pending;

typedef struct world {
  const pipert_pipeline *p;
  const rt_options *o;
  int rank, size, M, S;
  int *base; /* [S + 1] first rank of each stage */
  int stage, replica;
  const pipert_instr **prog;
  int *prog_len;
  pipert_instr **prog_owned;
  rt_topo *topo;
  rt_worker w;
  rt_weights weights;
  rt_pool *rpool[2]; /* [kind][S]: sets received from each producer stage */
  char **need;       /* [(kind * S + from) * S + to]: flags per tensor of from's kind-set */
  char *in_need;     /* [S * n_inputs]: the stage reads graph input i */
  rt_set **inflight; /* sets with sends in flight */
  int n_inflight, cap_inflight;
  /* NCCL */
  const pipert_device_ops *dev;
  void *comm, *scomm; /* every rank; the stage's replicas */
  rt_set **sent;      /* sets sent in the open group */
  int n_sent, cap_sent;
  /* per run */
  const rt_array *in;
  rt_array *out;
  char **inbuf; /* [n_inputs]: M slots each (ranks != 0) */
  char *inhave; /* [n_inputs * M] */
  MPI_Request *pre;
  int npre;
} world;

static atomic_int wd_stop;
static double wd_start, wd_timeout;
static pid_t wd_parent;
static int wd_stage = -1; /* the rank's stage (rt_cur_stage is the main thread's own) */
static pthread_t wd_thread;
static _Atomic(rt_worker *) wd_worker; /* the stall watchdog's (rt_stall_limit), once initialised */
static double wd_stall;

static void *watchdog(void *arg) {
  int rank = (int)(intptr_t)arg;
  while (!atomic_load(&wd_stop)) {
    usleep(200 * 1000);
    if (getppid() != wd_parent) {
      rt_errorf("rank %d: launcher died, stopping", rank);
      _exit(1);
    }
    if (wd_timeout > 0 && rt_now() - wd_start > wd_timeout && !atomic_load(&wd_stop)) {
      rt_errorf("rank %d (stage %d): timed out after %.1f s (--timeout)", rank, wd_stage, wd_timeout);
      _exit(1);
    }
    /* a call of this rank's own stage that has not returned (a kernel that never
     * finishes: without NCCL's timeouts, host memory between ranks, nothing else ends it) */
    rt_worker *w = atomic_load(&wd_worker);
    double now = rt_now();
    long long since = w && !atomic_load(&wd_stop) ? rt_worker_stalled(w, now, wd_stall) : 0;
    if (since) {
      char where[96], what[96];
      rt_errorf("rank %d: %s: %s has not returned in %.0f s (PIPERT_STALL_S): a device that hangs?", rank,
                rt_worker_where(w, where, sizeof where), rt_worker_stall_what(w, what, sizeof what),
                now - since * 1e-6);
      _exit(1);
    }
  }
  return NULL;
}

static int rank_of(const world *W, int stage, int64_t g) {
  return W->base[stage] + (int)(g % W->p->stages[stage].replicas);
}

static char *need_of(world *W, int kind, int from, int to) { return W->need[(kind * W->S + from) * W->S + to]; }

/* ---- the link ------------------------------------------------------------------ */

static void n_check(world *W, int rc, const char *what) {
  if (!rc) return;
  rt_errorf("stage %d: %s failed", W->stage, what);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Stage from's kind-set of micro-batch g: the tensors this stage reads, by MPI into host
 * memory, or in NCCL mode (W->comm) by NCCL into device memory (within the open group). */
static rt_set *m_recv(void *link, rt_worker *w, int kind, int from, int64_t g) {
  world *W = link;
  rt_set *s = rt_pool_get(w, &W->rpool[kind][from]);
  const pipert_stage_desc *d = W->p->stages[from].stage;
  const pipert_tensor_desc *t = kind ? d->bwd_outputs : d->outputs;
  int n = kind ? d->n_bwd_outputs : d->n_outputs, src = rank_of(W, from, g);
  const char *need = need_of(W, kind, from, w->stage);
  for (int k = 0; k < n; k++) {
    if (!need[k]) continue;
    if (W->comm) n_check(W, W->dev->comm_recv(w->state, W->comm, s->bufs[k], t[k].nbytes, src), "ncclRecv");
    else
      MPI_Recv(s->bufs[k], (int)t[k].nbytes, MPI_BYTE, src, kind ? TAG_GRAD : TAG_ACT, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  }
  atomic_store(&s->refs, 1);
  return s;
}

static void add_req(rt_set *s, MPI_Request r) {
  pending *pd = s->link ? s->link : (s->link = calloc(1, sizeof(pending)));
  if (pd->n == pd->cap) pd->req = realloc(pd->req, sizeof(MPI_Request) * (size_t)(pd->cap = pd->cap ? pd->cap * 2 : 8));
  pd->req[pd->n++] = r;
}

static void push_set(rt_set ***v, int *n, int *cap, rt_set *s) {
  if (*n == *cap) *v = realloc(*v, sizeof(rt_set *) * (size_t)(*cap = *cap ? *cap * 2 : 16));
  (*v)[(*n)++] = s;
}

/* Set s of micro-batch g to every stage reading it: non-blocking MPI sends, the set kept
 * until they complete (progress); in NCCL mode (W->comm) NCCL sends within the open
 * group, the set kept until the group ends. */
static int m_send(void *link, rt_worker *w, int kind, rt_set *s, int64_t g) {
  world *W = link;
  const pipert_stage_desc *d = W->p->stages[w->stage].stage;
  const pipert_tensor_desc *t = kind ? d->bwd_outputs : d->outputs;
  int n = kind ? d->n_bwd_outputs : d->n_outputs, nc = kind ? w->topo->ngc : w->topo->nfc, sent = 0;
  const int *to = kind ? w->topo->gc : w->topo->fc;
  if (s->link) ((pending *)s->link)->n = 0;
  for (int c = 0; c < nc; c++) {
    const char *need = need_of(W, kind, w->stage, to[c]);
    int dst = rank_of(W, to[c], g);
    for (int k = 0; k < n; k++) {
      if (!need[k]) continue;
      sent = 1;
      if (W->comm) {
        n_check(W, W->dev->comm_send(w->state, W->comm, s->bufs[k], t[k].nbytes, dst), "ncclSend");
        continue;
      }
      MPI_Request r;
      MPI_Isend(s->bufs[k], (int)t[k].nbytes, MPI_BYTE, dst, kind ? TAG_GRAD : TAG_ACT, MPI_COMM_WORLD, &r);
      add_req(s, r);
    }
  }
  if (!sent) rt_set_release(s);
  else if (W->comm) push_set(&W->sent, &W->n_sent, &W->cap_sent, s);
  else push_set(&W->inflight, &W->n_inflight, &W->cap_inflight, s);
  return 0;
}

/* Sets whose sends completed go back to their pool; wait: until all have. */
static void progress(world *W, int wait) {
  int k = 0;
  for (int i = 0; i < W->n_inflight; i++) {
    rt_set *s = W->inflight[i];
    pending *pd = s->link;
    int done = 1;
    if (wait) MPI_Waitall(pd->n, pd->req, MPI_STATUSES_IGNORE);
    else MPI_Testall(pd->n, pd->req, &done, MPI_STATUSES_IGNORE);
    if (done) {
      pd->n = 0;
      rt_set_release(s);
    } else W->inflight[k++] = s;
  }
  W->n_inflight = k;
}

static void m_poll(void *link, rt_worker *w) {
  (void)w;
  progress(link, 0);
}

static const void *m_input(void *link, rt_worker *w, int idx, int64_t g) {
  world *W = link;
  size_t nb = W->p->inputs[idx].nbytes;
  (void)w;
  if (W->rank == 0) return (const char *)W->in[idx].data + (size_t)g * nb;
  int slot = (int)(g % W->M);
  char *buf = W->inbuf[idx] + (size_t)slot * nb;
  if (!W->inhave[idx * W->M + slot]) {
    MPI_Recv(buf, (int)nb, MPI_BYTE, 0, TAG_IN + idx, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    W->inhave[idx * W->M + slot] = 1;
  }
  return buf;
}

static void m_output(void *link, rt_worker *w, int q, int64_t g, const void *data) {
  world *W = link;
  size_t nb = W->p->outputs[q].nbytes;
  (void)w;
  if (W->rank == 0) memcpy((char *)W->out[q].data + (size_t)g * nb, data, nb);
  else MPI_Send(data, (int)nb, MPI_BYTE, 0, TAG_OUT + q, MPI_COMM_WORLD); /* rank 0 posted the receive */
}

/* The stage's GRAD params summed in replica order into every replica. */
static int m_allreduce(void *link, rt_worker *w) {
  world *W = link;
  const pipert_stage_desc *d = W->p->stages[w->stage].stage;
  int R = W->p->stages[w->stage].replicas, b = W->base[w->stage];
  for (int k = 0; k < d->n_params; k++) {
    const pipert_param_desc *pd = &d->params[k];
    if (pd->kind != PIPERT_PARAM_GRAD) continue;
    void *acc = rt_aligned_alloc(pd->nbytes), *tmp = rt_aligned_alloc(pd->nbytes);
    int rc = d->param_io(w->state, 0, pd->offset, acc, pd->nbytes);
    if (w->replica == 0) {
      for (int r = 1; r < R; r++) {
        MPI_Recv(tmp, (int)pd->nbytes, MPI_BYTE, b + r, TAG_SUM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        rt_sum_into(acc, tmp, pd->nbytes, pd->dtype);
      }
      for (int r = 1; r < R; r++) MPI_Send(acc, (int)pd->nbytes, MPI_BYTE, b + r, TAG_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Send(acc, (int)pd->nbytes, MPI_BYTE, b, TAG_SUM, MPI_COMM_WORLD);
      MPI_Recv(acc, (int)pd->nbytes, MPI_BYTE, b, TAG_SUM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    rc |= d->param_io(w->state, 1, pd->offset, acc, pd->nbytes);
    free(acc);
    free(tmp);
    if (rc) {
      rt_errorf("stage %d: all-reduce of the gradients failed", w->stage);
      MPI_Abort(MPI_COMM_WORLD, 1);
      return -1;
    }
  }
  return 0;
}

static int m_aborted(void *link) {
  (void)link;
  return 0;
}

static void m_fail(void *link, int rc, const char *msg) {
  (void)link;
  if (msg[0]) rt_errorf("%s", msg); /* empty: printed already (a device) */
  MPI_Abort(MPI_COMM_WORLD, rc);
}

static const rt_link_ops mpi_ops = {m_recv, m_send, m_input, m_output, m_allreduce, m_aborted, m_fail, m_poll, NULL};

/* ---- the NCCL link: device sets ------------------------------------------------------- */

static int n_group(void *link, rt_worker *w, int begin) {
  world *W = link;
  n_check(W, W->dev->comm_group(w->state, W->comm, begin),
          begin ? "ncclGroupStart" : "an NCCL group of sends and receives");
  if (!begin) {
    for (int i = 0; i < W->n_sent; i++) rt_set_release(W->sent[i]);
    W->n_sent = 0;
  }
  return 0;
}

static int n_allreduce(void *link, rt_worker *w) {
  world *W = link;
  const pipert_stage_desc *d = W->p->stages[w->stage].stage;
  for (int k = 0; W->scomm && k < d->n_params; k++)
    if (d->params[k].kind == PIPERT_PARAM_GRAD)
      n_check(W, W->dev->comm_sum(w->state, W->scomm, d->params[k].offset, d->params[k].nbytes, d->params[k].dtype),
              "the NCCL all-reduce of the gradients");
  return 0;
}

static const rt_link_ops nccl_ops = {m_recv, m_send, m_input, m_output, n_allreduce, m_aborted, m_fail, NULL, n_group};

/* A communicator over the ranks of comm (an MPI communicator): its first rank makes
 * the id. NULL on any rank when one failed (all agree). */
static void *nccl_comm(world *W, MPI_Comm comm) {
  int n, r;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &r);
  char id[512] = {0};
  int bad = r == 0 && W->dev->comm_id(id, sizeof id), all = 0;
  MPI_Bcast(&bad, 1, MPI_INT, 0, comm);
  if (bad) return NULL;
  MPI_Bcast(id, (int)sizeof id, MPI_BYTE, 0, comm);
  void *c = W->dev->comm_init(W->w.state, id, n, r);
  bad = !c;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, comm);
  if (all && c) {
    W->dev->comm_free(W->w.state, c);
    c = NULL;
  }
  return c;
}

/* Receives queued on the device: the programs with receives moved ahead where the
 * checks allow (rt_programs_ahead; every rank decides alike, in at most 3 checks). PIPERT_RECV_AHEAD=0 keeps
 * the plan's order. */
static void programs_ahead(world *W) {
  const char *v = getenv("PIPERT_RECV_AHEAD");
  if (v && !strcmp(v, "0")) return;
  pipert_instr **ahead = calloc((size_t)W->S, sizeof *ahead);
  if (!ahead) return;
  rt_programs_ahead(W->p, W->prog, W->prog_len, W->M, ahead);
  for (int s = 0; s < W->S; s++) {
    if (!ahead[s]) continue;
    free(W->prog_owned[s]);
    W->prog_owned[s] = ahead[s];
    W->prog[s] = ahead[s];
  }
  W->w.prog = W->prog[W->stage];
  free(ahead);
}

/* NCCL mode, when everything allows it (see the top); a note on rank 0 when it does not. */
static void nccl_setup(world *W) {
  const pipert_pipeline *p = W->p;
  int cand = W->size > 1 && !rt_env_on("PIPERT_HOST_SETS");
  for (int s = 0; s < W->S && cand; s++)
    cand = p->stages[s].stage->device && p->stages[s].stage->device->comm_init &&
           (!p->training || p->stages[s].stage->device->backward);
  if (!cand) return;
  const pipert_device_ops *dev = p->stages[W->stage].stage->device;
  const char *why = NULL;
  /* one GPU per rank: (host, device) pairs must differ */
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  long long mine[2] = {(long long)pipert_checksum64(host, strlen(host)), dev->ordinal(W->w.state)};
  long long *all = calloc((size_t)W->size * 2, sizeof(long long));
  MPI_Allgather(mine, 2, MPI_LONG_LONG, all, 2, MPI_LONG_LONG, MPI_COMM_WORLD);
  for (int i = 0; i < W->size && !why; i++)
    for (int j = i + 1; j < W->size && !why; j++)
      if (all[2 * i] == all[2 * j] && all[2 * i + 1] == all[2 * j + 1]) why = "two ranks share a GPU";
  free(all);
  char e[512] = "";
  if (!why) {
    rt_check_rendezvous(p, W->prog, W->prog_len, e, sizeof e);
    if (e[0]) why = e;
  }
  W->dev = dev;
  if (!why && !(W->comm = nccl_comm(W, MPI_COMM_WORLD))) why = "no NCCL communicator";
  if (!why) { /* the replicas' all-reduce; MPI_Comm_split is collective: every rank calls it */
    MPI_Comm sc;
    int repl = p->stages[W->stage].replicas > 1;
    MPI_Comm_split(MPI_COMM_WORLD, repl ? W->stage : MPI_UNDEFINED, W->replica, &sc);
    if (repl) {
      W->scomm = nccl_comm(W, sc);
      MPI_Comm_free(&sc);
    }
  }
  int bad = !why && p->stages[W->stage].replicas > 1 && !W->scomm, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!why && any) why = "no NCCL communicator for a stage's replicas";
  if (why) {
    if (W->rank == 0) fprintf(stderr, "pipeline: note: stages exchange tensors through host memory (MPI): %s\n", why);
    if (W->scomm) dev->comm_free(W->w.state, W->scomm);
    if (W->comm) dev->comm_free(W->w.state, W->comm);
    W->comm = W->scomm = NULL;
    W->dev = NULL;
    return;
  }
  W->w.ops = &nccl_ops;
  rt_worker_set_device(&W->w, dev);
  int async = dev->async && !rt_env_on("PIPERT_SYNC_SETS");
  if (async) programs_ahead(W);
  /* sends, receives and parts queued on the device, ordered there by the hand-over, the
   * host not waiting for transfers (PIPERT_SYNC_SETS=1: each group and part completes
   * before the call returns) */
  if (async) {
    if (dev->async(W->w.state, 1)) {
      rt_errorf("stage %d: cannot queue transfers on the device", W->stage);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    W->w.dev_async = 1;
  }
  for (int kind = 0; kind < 2; kind++)
    for (int s = 0; s < W->S; s++)
      if (W->rpool[kind][s].all) {
        W->rpool[kind][s].dev = dev;
        W->rpool[kind][s].dev_state = W->w.state;
      }
}

/* ---- the world ------------------------------------------------------------------- */

/* Which tensors each stage reads of every other stage's sets, and which graph inputs. */
static void build_needs(world *W) {
  const pipert_pipeline *p = W->p;
  int S = W->S;
  W->need = calloc((size_t)(2 * S * S), sizeof(char *));
  W->in_need = calloc((size_t)S * (size_t)p->n_inputs + 1, 1);
  for (int kind = 0; kind < 2; kind++)
    for (int from = 0; from < S; from++)
      for (int to = 0; to < S; to++) {
        const pipert_stage_desc *d = p->stages[from].stage;
        W->need[(kind * S + from) * S + to] = calloc((size_t)(kind ? d->n_bwd_outputs : d->n_outputs) + 1, 1);
      }
  for (int s = 0; s < S; s++) {
    const pipert_stage_plan *sp = &p->stages[s];
    for (int k = 0; k < sp->stage->n_inputs; k++) {
      pipert_ref r = sp->input_src[k];
      if (r.stage >= 0) need_of(W, 0, r.stage, s)[r.index] = 1;
      else W->in_need[s * p->n_inputs + r.index] = 1;
    }
    for (int k = 0; p->training && k < sp->stage->n_bwd_inputs; k++) {
      pipert_ref r = sp->bwd_input_src[k];
      if (r.stage < 0) W->in_need[s * p->n_inputs + r.index] = 1;
      else if (r.stage != s || r.phase) need_of(W, r.phase, r.stage, s)[r.index] = 1;
    }
  }
}

/* MPI_Init, the rank's stage and replica, weights and init; 0, or 2 / 1 on every rank. */
static int world_open(world *W, const pipert_pipeline *p, const rt_options *o, int M) {
  memset(W, 0, sizeof *W);
  if (rt_fakedev_on()) { /* its NCCL groups run on threads of their own */
    int level = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
  } else {
    MPI_Init(NULL, NULL);
  }
  W->p = p;
  W->o = o;
  W->M = M;
  W->S = p->n_stages;
  MPI_Comm_rank(MPI_COMM_WORLD, &W->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W->size);
  W->base = calloc((size_t)W->S + 1, sizeof(int));
  for (int s = 0; s < W->S; s++) W->base[s + 1] = W->base[s] + p->stages[s].replicas;
  if (W->size != W->base[W->S]) {
    if (W->rank == 0)
      rt_errorf("MPI: %d ranks for a %d-stage pipeline of %d stage replicas: run it with mpirun -np %d", W->size, W->S,
                W->base[W->S], W->base[W->S]);
    return 2;
  }
  for (W->stage = 0; W->base[W->stage + 1] <= W->rank; W->stage++) {
  }
  W->replica = W->rank - W->base[W->stage];
  rt_cur_stage = W->stage;
  wd_start = rt_now();
  wd_timeout = o->timeout_s;
  wd_parent = getppid();
  wd_stage = W->stage;
  pthread_create(&wd_thread, NULL, watchdog, (void *)(intptr_t)W->rank);

  W->prog = calloc((size_t)W->S, sizeof *W->prog);
  W->prog_len = calloc((size_t)W->S, sizeof(int));
  W->prog_owned = calloc((size_t)W->S, sizeof *W->prog_owned);
  for (int s = 0; s < W->S; s++) W->prog[s] = rt_stage_program(p, s, M, &W->prog_len[s], &W->prog_owned[s]);
  W->topo = calloc((size_t)W->S, sizeof *W->topo);
  rt_topo_build(p, W->prog, W->prog_len, W->topo);
  if (p->training && rt_async_mode(p)) { /* the streams the plan did not carry: every rank proves them alike */
    char e[512] = "";
    rt_async_check(p, W->prog, W->prog_len, M, e, sizeof e);
    if (e[0]) {
      if (W->rank == 0) rt_errorf("internal error: the %s streams: %s", p->schedule, e);
      return 1;
    }
  }
  build_needs(W);
  int cap = p->training ? M + 4 : 4;
  for (int kind = 0; kind < 2; kind++) {
    W->rpool[kind] = calloc((size_t)W->S, sizeof(rt_pool));
    for (int s = 0; s < W->S; s++) {
      const pipert_stage_desc *d = p->stages[s].stage;
      if (kind && !p->training) continue;
      rt_pool_init(&W->rpool[kind][s], kind ? d->n_bwd_outputs : d->n_outputs, kind ? d->bwd_outputs : d->outputs, cap);
    }
  }
  rt_worker_init(&W->w, p, W->stage, W->replica, M, W->prog[W->stage], W->prog_len[W->stage], &W->topo[W->stage], cap,
                 &mpi_ops, W);
  W->inbuf = calloc((size_t)p->n_inputs + 1, sizeof(char *));
  for (int i = 0; i < p->n_inputs; i++)
    if (W->rank && W->in_need[W->stage * p->n_inputs + i])
      W->inbuf[i] = rt_aligned_alloc(p->inputs[i].nbytes * (size_t)M);
  W->inhave = calloc((size_t)p->n_inputs * (size_t)M + 1, 1);

  /* weights and init on every rank; all ranks agree on the outcome. A device stage runs
   * on the GPU of its local rank (unless PIPECC_CUDA_DEVICE says otherwise). */
  const pipert_stage_desc *d = p->stages[W->stage].stage;
  MPI_Comm local;
  int lrank = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, W->rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &lrank);
  MPI_Comm_free(&local);
  char lr[16];
  snprintf(lr, sizeof lr, "%d", lrank);
  if (d->device && !getenv("PIPECC_CUDA_DEVICE")) setenv("PIPECC_CUDA_DEVICE", lr, 1);
  char err[1024];
  int st = 0, gst = 0;
  if (rt_weights_load(d, o->weights_dir, &W->weights, err, sizeof err)) {
    rt_errorf("%s", err);
    st = 2;
  } else if (d->init && (st = d->init(&W->w.state, W->weights.map, W->weights.len)) != 0) {
    rt_errorf("stage %d: init failed (status %d)", W->stage, st);
    st = 1;
  } else if (rt_fakedev_attach(W->p, W->stage, W->w.state)) {
    st = 1;
  } else if (p->training && rt_async_mode(p) && (W->w.async_base = o->async_base, W->w.async_keep = o->async_keep,
                                                  rt_async_init(&W->w, err, sizeof err))) {
    rt_errorf("train: --schedule %s: %s", p->schedule, err);
    st = 2;
  }
  MPI_Allreduce(&st, &gst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!gst) nccl_setup(W);
  if (!gst) {
    wd_stall = rt_stall_limit(&W->w);
    atomic_store(&wd_worker, &W->w);
  }
  return gst;
}

static void world_close(world *W) {
  atomic_store(&wd_stop, 1);
  if (W->dev && W->scomm) W->dev->comm_free(W->w.state, W->scomm);
  if (W->dev && W->comm) W->dev->comm_free(W->w.state, W->comm);
  if (W->base && W->size == W->base[W->S]) pthread_join(wd_thread, NULL);
  /* sets (device memory in NCCL mode) go before the stage's state */
  const pipert_stage_desc *d = W->S ? W->p->stages[W->stage].stage : NULL;
  if (W->w.fpool.all) rt_worker_free(&W->w);
  for (int kind = 0; kind < 2; kind++) {
    for (int s = 0; W->rpool[kind] && s < W->S; s++)
      if (W->rpool[kind][s].all) rt_pool_free(&W->rpool[kind][s]);
    free(W->rpool[kind]);
  }
  if (d) rt_fakedev_detach(W->p, W->stage, W->w.state);
  if (W->w.state && d && d->fini) d->fini(W->w.state);
  rt_weights_unload(&W->weights);
  for (int i = 0; W->need && i < 2 * W->S * W->S; i++) free(W->need[i]);
  free(W->need);
  free(W->in_need);
  if (W->topo) rt_topo_free(W->topo, W->S);
  free(W->topo);
  for (int s = 0; W->prog_owned && s < W->S; s++) free(W->prog_owned[s]);
  free(W->prog_owned);
  free(W->prog);
  free(W->prog_len);
  for (int i = 0; W->inbuf && i < W->p->n_inputs; i++) free(W->inbuf[i]);
  free(W->inbuf);
  free(W->inhave);
  free(W->inflight);
  free(W->sent);
  free(W->base);
  free(W->pre);
  MPI_Finalize();
}

/* Runs micro-batches [0, T) in rounds of M; rank 0 holds in[] and out[]. Returns 0 (a
 * failure aborts the world). busy: this rank's compute time; cpu (NULL: not wanted) its
 * thread's CPU time in it (0 on a device: the host only queued the work). */
static int world_run(world *W, const rt_array *in, rt_array *out, int64_t T, double *busy, double *cpu) {
  const pipert_pipeline *p = W->p;
  W->in = in;
  W->out = out;
  rt_worker_reset(&W->w);
  for (int kind = 0; kind < 2; kind++)
    for (int s = 0; s < W->S; s++)
      if (W->rpool[kind][s].all) rt_pool_reset(&W->rpool[kind][s]);
  int64_t rounds = (T + W->M - 1) / W->M;
  double dev_busy = 0;
  for (int64_t rd = 0; rd < rounds; rd++) {
    int64_t lo = rd * W->M, hi = lo + W->M < T ? lo + W->M : T;
    memset(W->inhave, 0, (size_t)p->n_inputs * (size_t)W->M + 1);
    W->npre = 0;
    if (W->rank == 0) { /* graph inputs out, graph outputs in: posted for the round */
      size_t cap = (size_t)(p->n_outputs + W->size * p->n_inputs) * (size_t)W->M + 1;
      W->pre = realloc(W->pre, sizeof(MPI_Request) * cap);
      for (int q = 0; q < p->n_outputs; q++)
        for (int64_t g = lo; g < hi; g++) {
          int src = rank_of(W, p->output_src[q].stage, g);
          if (src)
            MPI_Irecv((char *)out[q].data + (size_t)g * p->outputs[q].nbytes, (int)p->outputs[q].nbytes, MPI_BYTE, src,
                      TAG_OUT + q, MPI_COMM_WORLD, &W->pre[W->npre++]);
        }
      for (int s = 0; s < W->S; s++)
        for (int i = 0; i < p->n_inputs; i++) {
          if (!W->in_need[s * p->n_inputs + i]) continue;
          for (int64_t g = lo; g < hi; g++) {
            int dst = rank_of(W, s, g);
            if (dst)
              MPI_Isend((const char *)in[i].data + (size_t)g * p->inputs[i].nbytes, (int)p->inputs[i].nbytes, MPI_BYTE,
                        dst, TAG_IN + i, MPI_COMM_WORLD, &W->pre[W->npre++]);
          }
        }
    }
    rt_worker_round(&W->w, lo, T);
    if (W->w.dev_async) { /* the round's device work done (uploads read inbuf), its time */
      double b = rt_worker_end_wait(&W->w, T);
      if (b < 0) {
        const char *why = rt_bad_input_take(); /* an index out of range, found on the device */
        if (why) rt_errorf("stage %d: %s", W->stage, why);
        else rt_errorf("stage %d: work queued on its device failed", W->stage);
        MPI_Abort(MPI_COMM_WORLD, why ? 2 : 1);
      }
      dev_busy += b > 0 ? b : 0;
    }
    progress(W, 1);
    if (W->npre) MPI_Waitall(W->npre, W->pre, MPI_STATUSES_IGNORE);
    if (rd + 1 < rounds) MPI_Barrier(MPI_COMM_WORLD);
  }
  *busy = W->w.dev_async ? dev_busy : W->w.busy; /* async: the host only queued the work */
  if (cpu) *cpu = W->w.dev ? 0 : W->w.cpu;
  return 0;
}

/* Per-stage figures on rank 0: busy and CPU time summed over replicas, peak memory the max. */
static void gather_stats(world *W, double busy, double cpu, rt_stats *st) {
  double *all = W->rank == 0 ? calloc((size_t)W->size * 2, sizeof(double)) : NULL, mine_t[2] = {busy, cpu};
  long long mine[2] = {
      (long long)((size_t)W->w.fpool.n * W->w.fpool.set_bytes + (size_t)W->w.gpool.n * W->w.gpool.set_bytes),
      W->w.peak_inflight};
  long long *peaks = W->rank == 0 ? calloc((size_t)W->size * 2, sizeof(long long)) : NULL;
  MPI_Gather(mine_t, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(mine, 2, MPI_LONG_LONG, peaks, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (W->rank == 0) {
    for (int s = 0; s < W->S; s++) {
      st->busy_s[s] = 0;
      if (st->cpu_s) st->cpu_s[s] = 0;
      if (st->peak_bytes) st->peak_bytes[s] = 0;
      if (st->peak_sets) st->peak_sets[s] = 0;
      for (int r = W->base[s]; r < W->base[s + 1]; r++) {
        st->busy_s[s] += all[2 * r];
        if (st->cpu_s) st->cpu_s[s] += all[2 * r + 1];
        if (st->peak_bytes && (size_t)peaks[2 * r] > st->peak_bytes[s]) st->peak_bytes[s] = (size_t)peaks[2 * r];
        if (st->peak_sets && peaks[2 * r + 1] > st->peak_sets[s]) st->peak_sets[s] = (int)peaks[2 * r + 1];
      }
    }
  }
  free(all);
  free(peaks);
}

/* ---- inference: mpirun -np R DIR/pipeline --input ... ------------------------------ */

int rt_mpi_main(const pipert_pipeline *p, const rt_options *o) {
  world W;
  int M = o->microbatches ? o->microbatches : p->microbatches;
  int rc = world_open(&W, p, o, M);
  rt_array *in = calloc((size_t)p->n_inputs + 1, sizeof *in), *out = calloc((size_t)p->n_outputs + 1, sizeof *out);
  int64_t T = -1;
  if (!rc) {
    if (W.rank == 0 && (rt_check_output(p, o) || rt_load_inputs(p, o, in, &T))) T = -1;
    MPI_Bcast(&T, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (T < 0) rc = 2;
  }
  if (!rc) { /* rank 0's outputs (said there when memory is short), and every rank stops alike */
    int ok = W.rank != 0 || !rt_alloc_outputs(p, T, out);
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok) rc = 2;
  }
  if (!rc) {
    double busy = 0, cpu = 0;
    rc = world_run(&W, in, out, T, &busy, NULL);
    if (!rc && o->bench) {
      double wall = 0, total = 0, total_cpu = 0;
      for (int it = 0; it < o->bench && !rc; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = rt_now();
        rc = world_run(&W, in, out, T, &busy, &cpu);
        MPI_Barrier(MPI_COMM_WORLD);
        wall += rt_now() - t0;
        total += busy;
        total_cpu += cpu;
      }
      rt_stats st = {.wall_s = wall,
                     .busy_s = calloc((size_t)W.S, sizeof(double)),
                     .cpu_s = calloc((size_t)W.S, sizeof(double))};
      gather_stats(&W, total, total_cpu, &st);
      if (W.rank == 0) {
        int64_t mbs = rt_microbatch_size(p);
        rt_print_bench(p, o->bench, T * mbs, wall, st.busy_s, W.w.dev ? NULL : st.cpu_s, NULL);
      }
      free(st.busy_s);
      free(st.cpu_s);
    }
    if (!rc && W.rank == 0) rc = rt_write_outputs(p, o, out);
  }
  /* rank 0 decides the exit status of everyone */
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  world_close(&W);
  for (int i = 0; i < p->n_inputs; i++) rt_array_free(&in[i]);
  for (int i = 0; i < p->n_outputs; i++) rt_array_free(&out[i]);
  free(in);
  free(out);
  return rc;
}

/* ---- training: the backend of rt_train.c ------------------------------------------ */

static int mb_run(void *impl, const rt_array *in, rt_array *out, rt_stats *st) {
  world *W = impl;
  double busy = 0, cpu = 0, t0 = rt_now();
  int rc = world_run(W, in, out, W->M, &busy, &cpu);
  MPI_Barrier(MPI_COMM_WORLD);
  st->wall_s = rt_now() - t0;
  gather_stats(W, busy, cpu, st);
  return rc;
}

static int mb_param_io(void *impl, int stage, int replica, const pipert_param_desc *pd, int write, void *buf) {
  world *W = impl;
  int holder = W->base[stage] + replica, rc = 0;
  const pipert_stage_desc *d = W->p->stages[stage].stage;
  if (holder == 0) return W->rank == 0 ? d->param_io(W->w.state, write, pd->offset, buf, pd->nbytes) : 0;
  if (W->rank == 0) {
    if (write) MPI_Send(buf, (int)pd->nbytes, MPI_BYTE, holder, TAG_PARAM, MPI_COMM_WORLD);
    else MPI_Recv(buf, (int)pd->nbytes, MPI_BYTE, holder, TAG_PARAM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else if (W->rank == holder) {
    void *tmp = rt_aligned_alloc(pd->nbytes);
    if (write) {
      MPI_Recv(tmp, (int)pd->nbytes, MPI_BYTE, 0, TAG_PARAM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      rc = d->param_io(W->w.state, 1, pd->offset, tmp, pd->nbytes);
    } else {
      rc = d->param_io(W->w.state, 0, pd->offset, tmp, pd->nbytes);
      MPI_Send(tmp, (int)pd->nbytes, MPI_BYTE, 0, TAG_PARAM, MPI_COMM_WORLD);
    }
    free(tmp);
  }
  if (rc) {
    rt_errorf("stage %d: cannot %s '%s'", stage, write ? "write" : "read", pd->name);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

/* the older weight versions (rt_backend.vrange, vio, vmissing): between stage's rank and rank 0 */
static int mb_vrange(void *impl, int stage, int64_t *first, int64_t *end) {
  world *W = impl;
  int h = W->base[stage];
  int64_t x[3] = {0, 0, 0};
  if (W->rank == h) x[2] = rt_async_kept(&W->w, &x[0], &x[1]);
  if (h != 0 && W->rank == h) MPI_Send(x, 3, MPI_INT64_T, 0, TAG_PARAM, MPI_COMM_WORLD);
  if (h != 0 && W->rank == 0) MPI_Recv(x, 3, MPI_INT64_T, h, TAG_PARAM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  *first = x[0];
  *end = x[1];
  return (int)x[2];
}

static int mb_vio(void *impl, int stage, int64_t v, int mom, int write, void *buf, size_t nbytes) {
  world *W = impl;
  int h = W->base[stage];
  int64_t r = 0;
  if (h == 0) return W->rank == 0 ? rt_async_io(&W->w, v, mom, write, buf, nbytes) : 0;
  if (W->rank == 0) {
    if (write) MPI_Send(buf, (int)nbytes, MPI_BYTE, h, TAG_PARAM, MPI_COMM_WORLD);
    else {
      MPI_Recv(&r, 1, MPI_INT64_T, h, TAG_PARAM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (r == 1) MPI_Recv(buf, (int)nbytes, MPI_BYTE, h, TAG_PARAM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  } else if (W->rank == h) {
    void *tmp = rt_aligned_alloc(nbytes + 1);
    if (write) MPI_Recv(tmp, (int)nbytes, MPI_BYTE, 0, TAG_PARAM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    r = rt_async_io(&W->w, v, mom, write, tmp, nbytes);
    if (!write) {
      MPI_Send(&r, 1, MPI_INT64_T, 0, TAG_PARAM, MPI_COMM_WORLD);
      if (r == 1) MPI_Send(tmp, (int)nbytes, MPI_BYTE, 0, TAG_PARAM, MPI_COMM_WORLD);
    }
    free(tmp);
    if (r < 0) {
      rt_errorf("stage %d: cannot %s its weights after %lld updates", stage, write ? "restore" : "read", (long long)v);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  return (int)r;
}

static int64_t mb_vmissing(void *impl, int stage) {
  world *W = impl;
  int h = W->base[stage];
  int64_t r = -1;
  if (W->rank == h) r = rt_async_missing(&W->w);
  if (h != 0 && W->rank == h) MPI_Send(&r, 1, MPI_INT64_T, 0, TAG_PARAM, MPI_COMM_WORLD);
  if (h != 0 && W->rank == 0) MPI_Recv(&r, 1, MPI_INT64_T, h, TAG_PARAM, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return r;
}

static int64_t mb_bcast(void *impl, int64_t v) {
  (void)impl;
  MPI_Bcast(&v, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  return v;
}

int rt_mpi_backend(const pipert_pipeline *p, const rt_options *o, int M, rt_backend *be) {
  world *W = calloc(1, sizeof *W);
  int rc = world_open(W, p, o, M > 0 ? M : p->microbatches);
  *be = (rt_backend){W, W->rank, mb_run, mb_param_io, mb_bcast, mb_vrange, mb_vio, mb_vmissing};
  return rc;
}

int rt_mpi_backend_end(rt_backend *be, int rc) {
  world *W = be->impl;
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  world_close(W);
  free(W);
  return rc;
}

#endif
