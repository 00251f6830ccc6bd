/* The MPI transport: `mpirun -np <n_stages> DIR/pipeline ...`, rank r runs
 * stage r (one process per stage; a stage's replica count is not used here).
 * Rank 0 reads the inputs, sends graph-input slices to the ranks that consume
 * them and receives the graph outputs straight into the output arrays (all
 * posted up front, non-blocking), and runs stage 0. Activations travel as raw
 * bytes: shapes are static, so there is no handshake. Messages from rank j to
 * rank i on tag TAG_ACT+k (input slot k of stage i) arrive in micro-batch order
 * (MPI's non-overtaking rule). A failing forward calls MPI_Abort; a watchdog
 * thread ends a rank whose launcher died or that passed --timeout.
 *
 * Compiled to a stub unless PIPERT_HAVE_MPI is defined (see tests/runtime/CMakeLists.txt). */
#include <stdlib.h>
#include <string.h>
#include "rt.h"

int rt_mpi_launched(void) {
  const char *v = getenv("OMPI_COMM_WORLD_SIZE");
  if (!v) v = getenv("PMI_SIZE");
  if (!v) v = getenv("PMIX_SIZE");
  return v && atoi(v) > 1;
}

#ifndef PIPERT_HAVE_MPI

int rt_mpi_compiled(void) { return 0; }

int rt_mpi_main(const pipert_pipeline *p, const rt_options *o) {
  (void)p;
  (void)o;
  rt_errorf("this pipeline was built without MPI support: run it without mpirun (threads transport), "
            "or link it with libpipert built with MPI");
  return 2;
}

#else

#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

#define TAG_ACT 0
#define TAG_OUT 16384
#define RING 2

int rt_mpi_compiled(void) { return 1; }

typedef struct {
  const pipert_pipeline *p;
  const rt_options *o;
  int rank, M;
  const pipert_instr *prog;
  int prog_len;
  void *state;
  void *recv_mem[RING], **recv[RING];   /* per input slot */
  void *out_mem[RING], **outb[RING];    /* per stage output */
  MPI_Request *oreq[RING];
  int n_oreq[RING], max_oreq;
  const void **in;
  double busy;
} mpi_ctx;

static atomic_int wd_stop;
static double wd_start;
static double wd_timeout;
static pid_t wd_parent;

static void *watchdog(void *arg) {
  int rank = (int)(intptr_t)arg;
  while (!atomic_load(&wd_stop)) {
    usleep(200 * 1000);
    if (getppid() != wd_parent) {
      rt_errorf("rank %d: launcher died, stopping", rank);
      _exit(1);
    }
    if (wd_timeout > 0 && rt_now() - wd_start > wd_timeout && !atomic_load(&wd_stop)) {
      rt_errorf("rank %d (stage %d): timed out after %.1f s (--timeout)", rank, rank, wd_timeout);
      _exit(1);
    }
  }
  return NULL;
}

static void wait_ring(mpi_ctx *c, int r) {
  if (c->n_oreq[r]) MPI_Waitall(c->n_oreq[r], c->oreq[r], MPI_STATUSES_IGNORE);
  c->n_oreq[r] = 0;
}

static int run_once(mpi_ctx *c, const rt_array *in, rt_array *out, int64_t T) {
  const pipert_pipeline *p = c->p;
  const pipert_stage_plan *sp = &p->stages[c->rank];
  const pipert_stage_desc *d = sp->stage;
  int S = p->n_stages, M = c->M;
  MPI_Request *pre = NULL;
  int npre = 0;
  if (c->rank == 0) {
    size_t cap = 0;
    for (int i = 1; i < S; i++) cap += (size_t)p->stages[i].stage->n_inputs;
    cap = (cap + (size_t)p->n_outputs) * (size_t)T;
    pre = malloc(sizeof *pre * (cap ? cap : 1));
    for (int q = 0; q < p->n_outputs; q++)
      if (p->output_src[q].stage != 0)
        for (int64_t g = 0; g < T; g++)
          MPI_Irecv((char *)out[q].data + (size_t)g * p->outputs[q].nbytes, (int)p->outputs[q].nbytes, MPI_BYTE,
                    p->output_src[q].stage, TAG_OUT + q, MPI_COMM_WORLD, &pre[npre++]);
    for (int i = 1; i < S; i++)
      for (int k = 0; k < p->stages[i].stage->n_inputs; k++) {
        pipert_ref r = p->stages[i].input_src[k];
        if (r.stage != PIPERT_GRAPH_INPUT) continue;
        for (int64_t g = 0; g < T; g++)
          MPI_Isend((const char *)in[r.index].data + (size_t)g * p->inputs[r.index].nbytes,
                    (int)p->inputs[r.index].nbytes, MPI_BYTE, i, TAG_ACT + k, MPI_COMM_WORLD, &pre[npre++]);
      }
  }
  int64_t rounds = (T + M - 1) / M;
  for (int64_t rd = 0; rd < rounds; rd++) {
    for (int i = 0; i < c->prog_len; i++) {
      pipert_instr ins = c->prog[i];
      int64_t g = rd * M + ins.mb;
      if (ins.op == PIPERT_OP_NOP || g >= T) continue;
      int ring = (int)(g % RING);
      if (ins.op == PIPERT_OP_RECV_ACT) {
        for (int k = 0; k < d->n_inputs; k++) {
          pipert_ref r = sp->input_src[k];
          if (r.stage == PIPERT_GRAPH_INPUT && c->rank == 0) continue;
          MPI_Recv(c->recv[ring][k], (int)d->inputs[k].nbytes, MPI_BYTE, r.stage == PIPERT_GRAPH_INPUT ? 0 : r.stage,
                   TAG_ACT + k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
      } else if (ins.op == PIPERT_OP_FWD) {
        for (int k = 0; k < d->n_inputs; k++) {
          pipert_ref r = sp->input_src[k];
          c->in[k] = r.stage == PIPERT_GRAPH_INPUT && c->rank == 0
                         ? (const char *)in[r.index].data + (size_t)g * p->inputs[r.index].nbytes
                         : c->recv[ring][k];
        }
        wait_ring(c, ring);
        double t0 = rt_now();
        int rc = d->forward(c->state, c->in, c->outb[ring]);
        c->busy += rt_now() - t0;
        if (rc) {
          rt_errorf("stage %d: forward failed on micro-batch %lld (status %d)", c->rank, (long long)g, rc);
          MPI_Abort(MPI_COMM_WORLD, 1);
          return 1;
        }
      } else if (ins.op == PIPERT_OP_SEND_ACT) {
        for (int q = 0; q < p->n_outputs; q++) {
          pipert_ref r = p->output_src[q];
          if (r.stage != c->rank) continue;
          if (c->rank == 0)
            memcpy((char *)out[q].data + (size_t)g * p->outputs[q].nbytes, c->outb[ring][r.index], p->outputs[q].nbytes);
          else
            MPI_Isend(c->outb[ring][r.index], (int)p->outputs[q].nbytes, MPI_BYTE, 0, TAG_OUT + q, MPI_COMM_WORLD,
                      &c->oreq[ring][c->n_oreq[ring]++]);
        }
        for (int i = c->rank + 1; i < S; i++)
          for (int k = 0; k < p->stages[i].stage->n_inputs; k++) {
            pipert_ref r = p->stages[i].input_src[k];
            if (r.stage != c->rank) continue;
            MPI_Isend(c->outb[ring][r.index], (int)p->stages[i].stage->inputs[k].nbytes, MPI_BYTE, i, TAG_ACT + k,
                      MPI_COMM_WORLD, &c->oreq[ring][c->n_oreq[ring]++]);
          }
      }
    }
    if (rd + 1 < rounds) MPI_Barrier(MPI_COMM_WORLD);
  }
  for (int r = 0; r < RING; r++) wait_ring(c, r);
  if (npre) MPI_Waitall(npre, pre, MPI_STATUSES_IGNORE);
  free(pre);
  return 0;
}

static void *alloc_set(const pipert_tensor_desc *t, int n, void ***ptrs) {
  size_t total = 0;
  for (int k = 0; k < n; k++) total += (t[k].nbytes + 63) / 64 * 64;
  char *mem = rt_aligned_alloc(total);
  *ptrs = calloc((size_t)n + 1, sizeof(void *));
  for (int k = 0, off = 0; k < n; k++) {
    (*ptrs)[k] = mem + off;
    off += (int)((t[k].nbytes + 63) / 64 * 64);
  }
  return mem;
}

int rt_mpi_main(const pipert_pipeline *p, const rt_options *o) {
  MPI_Init(NULL, NULL);
  int rank, size, S = p->n_stages;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != S) {
    if (rank == 0)
      rt_errorf("MPI: %d ranks for a %d-stage pipeline: run it with mpirun -np %d", size, S, S);
    MPI_Finalize();
    return 2;
  }
  rt_cur_stage = rank;
  wd_start = rt_now();
  wd_timeout = o->timeout_s;
  wd_parent = getppid();
  pthread_t wd;
  pthread_create(&wd, NULL, watchdog, (void *)(intptr_t)rank);

  mpi_ctx c;
  memset(&c, 0, sizeof c);
  c.p = p;
  c.o = o;
  c.rank = rank;
  c.M = o->microbatches ? o->microbatches : p->microbatches;
  pipert_instr *owned;
  c.prog = rt_stage_program(p, rank, c.M, &c.prog_len, &owned);
  const pipert_stage_desc *d = p->stages[rank].stage;

  /* Weights and init on every rank; all ranks agree on the outcome. */
  char err[1024];
  rt_weights w = {0};
  int st = 0, gst = 0;
  if (rt_weights_load(d, o->weights_dir, &w, err, sizeof err)) {
    rt_errorf("%s", err);
    st = 2;
  } else if (d->init && (st = d->init(&c.state, w.map, w.len)) != 0) {
    rt_errorf("stage %d: init failed (status %d)", rank, st);
    st = 1;
  }
  MPI_Allreduce(&st, &gst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

  rt_array *in = calloc((size_t)p->n_inputs + 1, sizeof *in), *out = calloc((size_t)p->n_outputs + 1, sizeof *out);
  int64_t T = -1;
  int rc = gst;
  if (!rc) {
    if (rank == 0 && rt_load_inputs(p, o, in, &T)) T = -1;
    MPI_Bcast(&T, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (T < 0) rc = 2;
  }
  if (!rc) {
    if (rank == 0) rt_alloc_outputs(p, T, out);
    for (int r = 0; r < RING; r++) {
      c.recv_mem[r] = alloc_set(d->inputs, d->n_inputs, &c.recv[r]);
      c.out_mem[r] = alloc_set(d->outputs, d->n_outputs, &c.outb[r]);
      c.max_oreq = p->n_outputs;
      for (int i = rank + 1; i < S; i++) c.max_oreq += p->stages[i].stage->n_inputs;
      c.oreq[r] = calloc((size_t)c.max_oreq + 1, sizeof(MPI_Request));
    }
    c.in = calloc((size_t)d->n_inputs + 1, sizeof(void *));
    rc = run_once(&c, in, out, T);
    if (!rc && o->bench) {
      double wall = 0, busy = 0;
      for (int it = 0; it < o->bench && !rc; it++) {
        c.busy = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = rt_now();
        rc = run_once(&c, in, out, T);
        MPI_Barrier(MPI_COMM_WORLD);
        wall += rt_now() - t0;
        busy += c.busy;
      }
      double *all = rank == 0 ? calloc((size_t)S, sizeof(double)) : NULL;
      MPI_Gather(&busy, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        int64_t mbs = p->n_inputs ? p->inputs[0].dims[0] : p->outputs[0].dims[0];
        rt_print_bench(p, o->bench, T * mbs, wall, all, 0);
        free(all);
      }
    }
    if (!rc && rank == 0) rc = rt_write_outputs(p, o, out);
    for (int r = 0; r < RING; r++) {
      free(c.recv_mem[r]);
      free(c.recv[r]);
      free(c.out_mem[r]);
      free(c.outb[r]);
      free(c.oreq[r]);
    }
    free(c.in);
  }
  /* rank 0 decides the exit status of everyone */
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  atomic_store(&wd_stop, 1);
  pthread_join(wd, NULL);
  if (c.state && d->fini) d->fini(c.state);
  rt_weights_unload(&w);
  for (int i = 0; i < p->n_inputs; i++) rt_array_free(&in[i]);
  for (int i = 0; i < p->n_outputs; i++) rt_array_free(&out[i]);
  free(in);
  free(out);
  free(owned);
  MPI_Finalize();
  return rc;
}

#endif
