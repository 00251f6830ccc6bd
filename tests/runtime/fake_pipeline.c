/* A hand-written stand-in for the stage_K.c + pipeline_main.c that pipecc
 * generates, used to test libpipert. The model (per sample, x: float[6], s: double):
 *   A: h1 = x * 2          B: h2 = h1 + w1      C: h3 = h2 * 0.5
 *   D: y = h3 + x * w3;  z = s * 3
 * outputs y, z and mid = h2; w1, w3 are 6-float weight vectors.
 * Built with NSTAGES = 1 (ABCD), 2 (AB | CD) or 4 (A | B | C | D), MB = micro-batch
 * size, REPL = replica count of the middle stages (of the last when NSTAGES = 2).
 *
 * Test hooks: `--write-weights DIR` writes this build's weights_K.bin into DIR;
 * FAKE_MODE=fail|crash|die|hang with FAKE_STAGE=K makes stage K misbehave on its
 * second forward call. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pipert.h"

/* the training and device fields of an inference host stage */
#define NO_TRAIN 0, 0, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL

#ifndef NSTAGES
#define NSTAGES 2
#endif
#ifndef MB
#define MB 2
#endif
#ifndef REPL
#define REPL 1
#endif
#define W 6
#define PLAN_M 4

static void w1_values(float *w) { for (int j = 0; j < W; j++) w[j] = 0.25f * (float)j - 0.5f; }
static void w3_values(float *w) { for (int j = 0; j < W; j++) w[j] = 1.5f - 0.125f * (float)j; }

static void op_a(const float *x, float *h1) { for (int i = 0; i < MB * W; i++) h1[i] = x[i] * 2.0f; }
static void op_b(const float *h1, const float *w1, float *h2) {
  for (int i = 0; i < MB; i++) for (int j = 0; j < W; j++) h2[i * W + j] = h1[i * W + j] + w1[j];
}
static void op_c(const float *h2, float *h3) { for (int i = 0; i < MB * W; i++) h3[i] = h2[i] * 0.5f; }
static void op_d(const float *h3, const float *x, const double *s, const float *w3, float *y, double *z) {
  for (int i = 0; i < MB; i++)
    for (int j = 0; j < W; j++) {
      float t = x[i * W + j] * w3[j];
      y[i * W + j] = h3[i * W + j] + t;
    }
  for (int i = 0; i < MB; i++) z[i] = s[i] * 3.0;
}

/* ---- per-replica state and misbehaviour ---------------------------------- */

typedef struct {
  int stage; int calls; const float *w;
  struct fstream *s, *us;             /* DEVICE builds: the replica's stream, its upload stream */
} fake_state;

#ifdef DEVICE
static int dev_open(fake_state *st);
static void dev_close(fake_state *st);
#endif

static int fake_init(int stage, void **state, const void *weights, size_t len) {
  fake_state *st = calloc(1, sizeof *st);
  st->stage = stage;
  st->w = weights;
  (void)len;
  *state = st;
#ifdef DEVICE
  if (dev_open(st)) return 1;
#endif
  return 0;
}
static void fake_fini(void *state) {
#ifdef DEVICE
  dev_close(state);
#endif
  free(state);
}

static int misbehave(fake_state *st) {
  const char *mode = getenv("FAKE_MODE"), *stage = getenv("FAKE_STAGE");
  if (!mode || !stage || atoi(stage) != st->stage || ++st->calls != 2) return 0;
  if (!strcmp(mode, "fail")) return -7;
  if (!strcmp(mode, "crash")) raise(SIGSEGV);
  if (!strcmp(mode, "die")) _exit(9);
  if (!strcmp(mode, "hang")) for (;;) pause();
  return 0;
}

#define TD(n, c) {n, PIPERT_FLOAT, 2, {MB, W}, (size_t)MB * W * sizeof(float)}
#define TX TD("x", 0)
#define TS {"s", PIPERT_DOUBLE, 1, {MB}, (size_t)MB * sizeof(double)}
#define TZ {"z", PIPERT_DOUBLE, 1, {MB}, (size_t)MB * sizeof(double)}

#define STAGE_FNS(K)                                                                      \
  static int init_##K(void **s, const void *w, size_t n) { return fake_init(K, s, w, n); } \
  static int fwd_##K(void *s, const void *const *in, void *const *out);

#if NSTAGES == 1
STAGE_FNS(0)
static int fwd_0(void *s, const void *const *in, void *const *out) {
  fake_state *st = s;
  float h1[MB * W], h3[MB * W];
  int rc = misbehave(st);
  if (rc) return rc;
  op_a(in[0], h1);
  op_b(h1, st->w, out[2]);
  op_c(out[2], h3);
  op_d(h3, in[0], in[1], st->w + W, out[0], out[1]);
  return 0;
}
static const pipert_tensor_desc s0_in[] = {TX, TS}, s0_out[] = {TD("y", 0), TZ, TD("h2", 0)};
static const pipert_stage_desc stage0 = {PIPERT_ABI_VERSION, 0, "ABCD", 2, 3, s0_in, s0_out, "weights_0.bin",
                                         2 * W * sizeof(float), 0, init_0, fwd_0, fake_fini, NO_TRAIN};
static pipert_stage_desc stages_rw[1];
static const pipert_ref in0[] = {{PIPERT_GRAPH_INPUT, 0, 0}, {PIPERT_GRAPH_INPUT, 1, 0}};
static const pipert_ref outsrc[] = {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}};
static const pipert_ref *insrc[] = {in0};
static const int weighted[] = {1};
static void weights_of(int k, float *buf) { (void)k; w1_values(buf); w3_values(buf + W); }

#elif NSTAGES == 2
STAGE_FNS(0)
STAGE_FNS(1)
static int fwd_0(void *s, const void *const *in, void *const *out) {
  fake_state *st = s;
  float h1[MB * W];
  int rc = misbehave(st);
  if (rc) return rc;
  op_a(in[0], h1);
  op_b(h1, st->w, out[0]);
  return 0;
}
static int fwd_1(void *s, const void *const *in, void *const *out) {
  fake_state *st = s;
  float h3[MB * W];
  int rc = misbehave(st);
  if (rc) return rc;
  op_c(in[0], h3);
  op_d(h3, in[1], in[2], st->w, out[0], out[1]);
  return 0;
}
static const pipert_tensor_desc s0_in[] = {TX}, s0_out[] = {TD("h2", 0)};
static const pipert_tensor_desc s1_in[] = {TD("h2", 0), TX, TS}, s1_out[] = {TD("y", 0), TZ};
static const pipert_stage_desc stage0 = {PIPERT_ABI_VERSION, 0, "AB", 1, 1, s0_in, s0_out, "weights_0.bin",
                                         W * sizeof(float), 0, init_0, fwd_0, fake_fini, NO_TRAIN};
static const pipert_stage_desc stage1 = {PIPERT_ABI_VERSION, 1, "CD", 3, 2, s1_in, s1_out, "weights_1.bin",
                                         W * sizeof(float), 0, init_1, fwd_1, fake_fini, NO_TRAIN};
static pipert_stage_desc stages_rw[2];
static const pipert_ref in0[] = {{PIPERT_GRAPH_INPUT, 0, 0}};
static const pipert_ref in1[] = {{0, 0, 0}, {PIPERT_GRAPH_INPUT, 0, 0}, {PIPERT_GRAPH_INPUT, 1, 0}};
static const pipert_ref outsrc[] = {{1, 0, 0}, {1, 1, 0}, {0, 0, 0}};
static const pipert_ref *insrc[] = {in0, in1};
static const int weighted[] = {1, 1};
static void weights_of(int k, float *buf) { if (k == 0) w1_values(buf); else w3_values(buf); }

#elif NSTAGES == 4
STAGE_FNS(0)
STAGE_FNS(1)
STAGE_FNS(2)
STAGE_FNS(3)
static int fwd_0(void *s, const void *const *in, void *const *out) {
  int rc = misbehave(s);
  if (!rc) op_a(in[0], out[0]);
  return rc;
}
static int fwd_1(void *s, const void *const *in, void *const *out) {
  int rc = misbehave(s);
  if (!rc) op_b(in[0], ((fake_state *)s)->w, out[0]);
  return rc;
}
static int fwd_2(void *s, const void *const *in, void *const *out) {
  int rc = misbehave(s);
  if (!rc) op_c(in[0], out[0]);
  return rc;
}
static int fwd_3(void *s, const void *const *in, void *const *out) {
  int rc = misbehave(s);
  if (!rc) op_d(in[0], in[1], in[2], ((fake_state *)s)->w, out[0], out[1]);
  return rc;
}
static const pipert_tensor_desc s0_in[] = {TX}, s0_out[] = {TD("h1", 0)};
static const pipert_tensor_desc s1_in[] = {TD("h1", 0)}, s1_out[] = {TD("h2", 0)};
static const pipert_tensor_desc s2_in[] = {TD("h2", 0)}, s2_out[] = {TD("h3", 0)};
static const pipert_tensor_desc s3_in[] = {TD("h3", 0), TX, TS}, s3_out[] = {TD("y", 0), TZ};
static const pipert_stage_desc stage0 = {PIPERT_ABI_VERSION, 0, "A", 1, 1, s0_in, s0_out, NULL, 0, 0, init_0, fwd_0, fake_fini, NO_TRAIN};
static const pipert_stage_desc stage1 = {PIPERT_ABI_VERSION, 1, "B", 1, 1, s1_in, s1_out, "weights_1.bin",
                                         W * sizeof(float), 0, init_1, fwd_1, fake_fini, NO_TRAIN};
static const pipert_stage_desc stage2 = {PIPERT_ABI_VERSION, 2, "C", 1, 1, s2_in, s2_out, NULL, 0, 0, init_2, fwd_2, fake_fini, NO_TRAIN};
static const pipert_stage_desc stage3 = {PIPERT_ABI_VERSION, 3, "D", 3, 2, s3_in, s3_out, "weights_3.bin",
                                         W * sizeof(float), 0, init_3, fwd_3, fake_fini, NO_TRAIN};
static pipert_stage_desc stages_rw[4];
static const pipert_ref in0[] = {{PIPERT_GRAPH_INPUT, 0, 0}};
static const pipert_ref in1[] = {{0, 0, 0}};
static const pipert_ref in2[] = {{1, 0, 0}};
static const pipert_ref in3[] = {{2, 0, 0}, {PIPERT_GRAPH_INPUT, 0, 0}, {PIPERT_GRAPH_INPUT, 1, 0}};
static const pipert_ref outsrc[] = {{3, 0, 0}, {3, 1, 0}, {1, 0, 0}};
static const pipert_ref *insrc[] = {in0, in1, in2, in3};
static const int weighted[] = {0, 1, 0, 1};
static void weights_of(int k, float *buf) { if (k == 1) w1_values(buf); else w3_values(buf); }
#else
#error "NSTAGES must be 1, 2 or 4"
#endif

static const pipert_tensor_desc graph_in[] = {TX, TS};
static const pipert_tensor_desc graph_out[] = {TD("y", 0), TZ, TD("mid", 0)};

/* The plan's program for M = PLAN_M: receives one micro-batch ahead. */
static const pipert_instr program[] = {
  {PIPERT_OP_RECV_ACT, 0}, {PIPERT_OP_RECV_ACT, 1}, {PIPERT_OP_FWD, 0}, {PIPERT_OP_SEND_ACT, 0},
  {PIPERT_OP_RECV_ACT, 2}, {PIPERT_OP_FWD, 1}, {PIPERT_OP_SEND_ACT, 1},
  {PIPERT_OP_RECV_ACT, 3}, {PIPERT_OP_FWD, 2}, {PIPERT_OP_SEND_ACT, 2},
  {PIPERT_OP_FWD, 3}, {PIPERT_OP_SEND_ACT, 3},
};

#ifdef DEVICE
/* ---- DEVICE=1: a fake asynchronous device -----------------------------------------
 * Each stage replica gets a stream: a thread that runs its queued commands (copies, the
 * stage's forward, event records and waits) in order, each after a random delay of up
 * to 300 us, with "device memory" from malloc. forward() only queues its work when the
 * runtime switches the hand-over on (pipert_device_ops.async), so whatever
 * runtime/rt_handover.c fails to order shows up as wrong outputs: a set overwritten
 * before a later stage read it, or read before it was written.
 * FAKE_NO_WAIT=1 drops every event wait (a broken protocol, to see the test catch it);
 * FAKE_DEV_STATS=1 prints per replica how many parts were queued ahead and waits made.
 * With FAKE_NCCL=1 (below) the device also has NCCL's communicators, over MPI. */
#include <pthread.h>
#include <time.h>
#include "rt_handover.h"

typedef struct fev { pthread_mutex_t mu; pthread_cond_t cv; unsigned long rec, done; } fev;
enum { C_COPY, C_RUN, C_RECORD, C_WAIT, C_FENCE };
typedef struct cmd {
  int k; void *dst; const void *src; size_t n; fev *ev; unsigned long seq; struct cmd *next;
} cmd;
typedef struct fstream {
  fake_state *owner;
  pthread_mutex_t mu; pthread_cond_t cv;
  cmd *head, *tail;
  int stop, err, async, queued_ahead, waits, uploads_ahead;
  unsigned long fences, fences_done;
  unsigned seed;
  double busy;
  void **io_in, **io_out;             /* the stage's own input/output buffers */
  pthread_t th;
  struct fstream *next;               /* every open stream (a release waits for them all) */
} fstream;

static pthread_mutex_t g_streams_mu = PTHREAD_MUTEX_INITIALIZER;
static fstream *g_streams;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void push(fstream *f, int k, void *dst, const void *src, size_t n, fev *ev, unsigned long seq) {
  cmd *c = calloc(1, sizeof *c);
  *c = (cmd){k, dst, src, n, ev, seq, NULL};
  pthread_mutex_lock(&f->mu);
  if (f->tail) f->tail->next = c;
  else f->head = c;
  f->tail = c;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

static void *stream_main(void *arg) {
  fstream *f = arg;
  const pipert_stage_desc *d = &stages_rw[f->owner->stage];
  for (;;) {
    pthread_mutex_lock(&f->mu);
    while (!f->head && !f->stop) pthread_cond_wait(&f->cv, &f->mu);
    if (!f->head) {
      pthread_mutex_unlock(&f->mu);
      return NULL;
    }
    cmd *c = f->head;
    f->head = c->next;
    if (!f->head) f->tail = NULL;
    unsigned r = (unsigned)rand_r(&f->seed);
    pthread_mutex_unlock(&f->mu);
    if (c->k != C_FENCE) usleep(r % 300);
    if (c->k == C_COPY) { /* in two halves, a delay between: a racing write shows */
      size_t h = c->n / 2;
      memcpy(c->dst, c->src, h);
      usleep(r % 50);
      memcpy((char *)c->dst + h, (const char *)c->src + h, c->n - h);
    } else if (c->k == C_RUN) {
      double t0 = now_s();
      int rc = d->forward(f->owner, (const void *const *)f->io_in, f->io_out);
      pthread_mutex_lock(&f->mu);
      f->busy += now_s() - t0;
      if (rc && !f->err) f->err = rc;
      pthread_mutex_unlock(&f->mu);
    } else if (c->k == C_RECORD || c->k == C_WAIT) {
      pthread_mutex_lock(&c->ev->mu);
      if (c->k == C_RECORD) {
        if (c->ev->done < c->seq) c->ev->done = c->seq;
        pthread_cond_broadcast(&c->ev->cv);
      } else {
        while (c->ev->done < c->seq) pthread_cond_wait(&c->ev->cv, &c->ev->mu);
      }
      pthread_mutex_unlock(&c->ev->mu);
    } else { /* C_FENCE */
      pthread_mutex_lock(&f->mu);
      f->fences_done = c->seq;
      pthread_cond_broadcast(&f->cv);
      pthread_mutex_unlock(&f->mu);
    }
    free(c);
  }
}

/* Waits for everything queued on f; its first error, if any. */
static int finish(fstream *f) {
  pthread_mutex_lock(&f->mu);
  unsigned long seq = ++f->fences;
  pthread_mutex_unlock(&f->mu);
  push(f, C_FENCE, NULL, NULL, 0, NULL, seq);
  pthread_mutex_lock(&f->mu);
  while (f->fences_done < seq) pthread_cond_wait(&f->cv, &f->mu);
  int e = f->err;
  pthread_mutex_unlock(&f->mu);
  return e;
}

static void *ho_event_new(void *stream) {
  (void)stream;
  fev *e = calloc(1, sizeof *e);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  return e;
}
static void ho_event_free(void *event) {
  fev *e = event;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}
static int ho_record(void *stream, void *event) {
  fev *e = event;
  pthread_mutex_lock(&e->mu);
  unsigned long seq = ++e->rec;
  pthread_mutex_unlock(&e->mu);
  push(stream, C_RECORD, NULL, NULL, 0, e, seq);
  return 0;
}
static int ho_wait(void *stream, void *event) {
  fev *e = event;
  fstream *f = stream;
  if (getenv("FAKE_NO_WAIT")) return 0;
  pthread_mutex_lock(&e->mu);
  unsigned long seq = e->rec;
  pthread_mutex_unlock(&e->mu);
  if (seq) {
    push(f, C_WAIT, NULL, NULL, 0, e, seq);
    f->waits++;
  }
  return 0;
}
static int ho_finish(void *stream) { return finish(stream); }
static const rt_ho_ops ho_ops = {ho_event_new, ho_event_free, ho_record, ho_wait, ho_finish};

static fstream *stream_open(fake_state *st, unsigned salt) {
  const pipert_stage_desc *d = &stages_rw[st->stage];
  fstream *f = calloc(1, sizeof *f);
  f->owner = st;
  f->seed = 12345u + 977u * (unsigned)st->stage + (unsigned)(size_t)st % 1000u + salt;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  f->io_in = calloc((size_t)d->n_inputs, sizeof(void *));
  f->io_out = calloc((size_t)d->n_outputs, sizeof(void *));
  for (int k = 0; k < d->n_inputs; k++) f->io_in[k] = malloc(d->inputs[k].nbytes);
  for (int k = 0; k < d->n_outputs; k++) f->io_out[k] = malloc(d->outputs[k].nbytes);
  pthread_mutex_lock(&g_streams_mu);
  f->next = g_streams;
  g_streams = f;
  pthread_mutex_unlock(&g_streams_mu);
  if (pthread_create(&f->th, NULL, stream_main, f)) {
    free(f); /* a test fake: it simply fails */
    return NULL;
  }
  return f;
}

static void stream_close(fake_state *st, fstream *f);

static int dev_open(fake_state *st) {
  st->s = stream_open(st, 0);
  st->us = stream_open(st, 7919u);
  return !st->s || !st->us;
}

static void dev_close(fake_state *st) {
  if (!st->s) return;
  finish(st->us);
  finish(st->s);
  if (getenv("FAKE_DEV_STATS"))
    fprintf(stderr, "fake device: stage %d: %d parts queued ahead, %d uploads queued ahead, %d waits\n", st->stage,
            st->s->queued_ahead, st->us->uploads_ahead, st->s->waits + st->us->waits);
  stream_close(st, st->us);
  stream_close(st, st->s);
  st->s = st->us = NULL;
}

static void stream_close(fake_state *st, fstream *f) {
  const pipert_stage_desc *d = &stages_rw[st->stage];
  pthread_mutex_lock(&g_streams_mu);
  for (fstream **pp = &g_streams; *pp; pp = &(*pp)->next)
    if (*pp == f) {
      *pp = f->next;
      break;
    }
  pthread_mutex_unlock(&g_streams_mu);
  pthread_mutex_lock(&f->mu);
  f->stop = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  pthread_join(f->th, NULL);
  for (int k = 0; k < d->n_inputs; k++) free(f->io_in[k]);
  for (int k = 0; k < d->n_outputs; k++) free(f->io_out[k]);
  free(f->io_in);
  free(f->io_out);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  free(f);
}

/* the transport names each rank's device in PIPECC_CUDA_DEVICE (its local rank) */
static int dev_ordinal(void *state) {
  (void)state;
  const char *d = getenv("PIPECC_CUDA_DEVICE");
  return d ? atoi(d) : 0;
}
static void *dev_alloc(void *state, size_t n) {
  (void)state;
  void *p = malloc(n ? n : 1);
  if (p) memset(p, 0xA5, n); /* garbage, as fresh device memory */
  if (p && rt_ho_add(p, n)) {
    free(p);
    p = NULL;
  }
  return p;
}
static void dev_release(void *state, void *p) {
  (void)state;
  pthread_mutex_lock(&g_streams_mu); /* as cudaFree: the whole device finishes first */
  for (fstream *f = g_streams; f; f = f->next) finish(f);
  pthread_mutex_unlock(&g_streams_mu);
  rt_ho_remove(&ho_ops, p);
  free(p);
}
/* async: on the upload stream, ordered by the hand-over like any other write */
static int dev_upload(void *state, void *dev, const void *host, size_t n) {
  fake_state *st = state;
  fstream *f = st->s, *u = st->us;
  if (!f->async) {
    push(f, C_COPY, dev, host, n, NULL, 0);
    return finish(f);
  }
  if (rt_ho_before_write(&ho_ops, u, dev)) return 1;
  push(u, C_COPY, dev, host, n, NULL, 0);
  u->uploads_ahead++;
  return rt_ho_after_write(&ho_ops, u, dev, 0);
}
static int dev_download(void *state, void *host, const void *dev, size_t n) {
  fstream *f = ((fake_state *)state)->s;
  if (f->async && rt_ho_before_read(&ho_ops, f, dev)) return 1;
  push(f, C_COPY, host, dev, n, NULL, 0);
  return finish(f);
}
static int dev_forward(void *state, const void *const *in, void *const *out) {
  fake_state *st = state;
  fstream *f = st->s;
  const pipert_stage_desc *d = &stages_rw[st->stage];
  for (int k = 0; f->async && k < d->n_inputs; k++)
    if (rt_ho_before_read(&ho_ops, f, in[k])) return 1;
  for (int k = 0; k < d->n_inputs; k++) push(f, C_COPY, f->io_in[k], in[k], d->inputs[k].nbytes, NULL, 0);
  for (int k = 0; f->async && k < d->n_inputs; k++)
    if (rt_ho_after_read(&ho_ops, f, in[k])) return 1;
  push(f, C_RUN, NULL, NULL, 0, NULL, 0);
  for (int k = 0; f->async && k < d->n_outputs; k++)
    if (rt_ho_before_write(&ho_ops, f, out[k])) return 1;
  for (int k = 0; k < d->n_outputs; k++) push(f, C_COPY, out[k], f->io_out[k], d->outputs[k].nbytes, NULL, 0);
  if (!f->async) return finish(f);
  for (int k = 0; k < d->n_outputs; k++)
    if (rt_ho_after_write(&ho_ops, f, out[k], 0)) return 1;
  f->queued_ahead++;
  pthread_mutex_lock(&f->mu);
  int e = f->err;
  pthread_mutex_unlock(&f->mu);
  return e;
}
static int dev_async(void *state, int on) {
  fstream *f = ((fake_state *)state)->s;
  int rc = finish(((fake_state *)state)->us) || finish(f);
  if (!rc) f->async = on;
  return rc;
}
static double dev_busy(void *state) {
  fstream *f = ((fake_state *)state)->s;
  if (finish(((fake_state *)state)->us) || finish(f)) return -1;
  pthread_mutex_lock(&f->mu);
  double b = f->busy;
  f->busy = 0;
  pthread_mutex_unlock(&f->mu);
  return b;
}

#ifdef FAKE_NCCL
/* ---- FAKE_NCCL=1 (with MPI): NCCL's send/receive groups over MPI between the ranks'
 * fake devices, so that the MPI transport's NCCL mode runs without GPUs: a duplicate of
 * MPI_COMM_WORLD (communicators over a subset, the replicas' all-reduce, are declined),
 * synchronous-mode sends (MPI_Issend: complete only once the peer receives, as NCCL's
 * rendezvous), everything of a group completed at its end. */
#include <mpi.h>

typedef struct fcomm {
  MPI_Comm c;
  int depth, sends, recvs, groups;
  MPI_Request *req;
  int n, cap;
} fcomm;

static int comm_id(void *buf, size_t len) {
  snprintf(buf, len, "fake-nccl %ld", (long)getpid());
  return 0;
}
static void *comm_init(void *state, const void *id, int nranks, int rank) {
  (void)state;
  (void)id;
  int n = 0, r = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (n != nranks || r != rank) return NULL; /* only the whole world */
  fcomm *f = calloc(1, sizeof *f);
  MPI_Comm_dup(MPI_COMM_WORLD, &f->c);
  return f;
}
static int comm_complete(fcomm *f) {
  int rc = MPI_Waitall(f->n, f->req, MPI_STATUSES_IGNORE) != MPI_SUCCESS;
  f->n = 0;
  return rc;
}
static int comm_group(void *state, void *comm, int begin) {
  (void)state;
  fcomm *f = comm;
  if (begin) {
    f->depth++;
    return 0;
  }
  f->groups++;
  return --f->depth ? 0 : comm_complete(f);
}
static int comm_post(fcomm *f, void *buf, size_t n, int peer, int send) {
  if (f->n == f->cap) f->req = realloc(f->req, sizeof(MPI_Request) * (size_t)(f->cap = f->cap ? 2 * f->cap : 16));
  MPI_Request *q = &f->req[f->n++];
  int rc = send ? MPI_Issend(buf, (int)n, MPI_BYTE, peer, 7, f->c, q) : MPI_Irecv(buf, (int)n, MPI_BYTE, peer, 7, f->c, q);
  if (send) f->sends++;
  else f->recvs++;
  return rc != MPI_SUCCESS || (!f->depth && comm_complete(f));
}
static int comm_send(void *state, void *comm, const void *buf, size_t n, int peer) {
  (void)state;
  return comm_post(comm, (void *)buf, n, peer, 1);
}
static int comm_recv(void *state, void *comm, void *buf, size_t n, int peer) {
  (void)state;
  return comm_post(comm, buf, n, peer, 0);
}
static int comm_sum(void *state, void *comm, size_t off, size_t n, int dtype) {
  (void)state, (void)comm, (void)off, (void)n, (void)dtype;
  fprintf(stderr, "fake device: no all-reduce (an inference pipeline)\n");
  return 1;
}
static void comm_free(void *state, void *comm) {
  (void)state;
  fcomm *f = comm;
  if (getenv("FAKE_DEV_STATS")) {
    int r = 0;
    MPI_Comm_rank(f->c, &r);
    fprintf(stderr, "fake nccl: rank %d: %d sends, %d receives, %d groups\n", r, f->sends, f->recvs, f->groups);
  }
  MPI_Comm_free(&f->c);
  free(f->req);
  free(f);
}
#define FAKE_COMM comm_id, comm_init, comm_group, comm_send, comm_recv, comm_sum, comm_free
#else
#define FAKE_COMM NULL, NULL, NULL, NULL, NULL, NULL, NULL
#endif

static const pipert_device_ops fake_device = {
    dev_ordinal, dev_alloc, dev_release, dev_upload, dev_download, dev_forward, NULL,
    FAKE_COMM, NULL, dev_async, dev_busy};
#endif

/* FAKE_BAD_PROGRAM=1: receives two micro-batches ahead, which the runtime rejects. */
static const pipert_instr bad_program[] = {
  {PIPERT_OP_RECV_ACT, 0}, {PIPERT_OP_RECV_ACT, 1}, {PIPERT_OP_RECV_ACT, 2}, {PIPERT_OP_FWD, 0},
  {PIPERT_OP_SEND_ACT, 0}, {PIPERT_OP_FWD, 1}, {PIPERT_OP_SEND_ACT, 1}, {PIPERT_OP_RECV_ACT, 3},
  {PIPERT_OP_FWD, 2}, {PIPERT_OP_SEND_ACT, 2}, {PIPERT_OP_FWD, 3}, {PIPERT_OP_SEND_ACT, 3},
};

int main(int argc, char **argv) {
  const pipert_stage_desc *src[] = {
    &stage0,
#if NSTAGES >= 2
    &stage1,
#endif
#if NSTAGES == 4
    &stage2, &stage3,
#endif
  };
  pipert_stage_plan plans[NSTAGES];
  for (int k = 0; k < NSTAGES; k++) {
    /* pipecc compiles the checksum in; here it is computed from the known values. */
    stages_rw[k] = *src[k];
#ifdef DEVICE
    stages_rw[k].device = &fake_device;
#endif
    float buf[2 * W];
    if (weighted[k]) {
      weights_of(k, buf);
      stages_rw[k].weights_checksum = pipert_checksum64(buf, stages_rw[k].weights_bytes);
      if (argc == 3 && !strcmp(argv[1], "--write-weights")) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[2], stages_rw[k].weights_file);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, stages_rw[k].weights_bytes, f) != stages_rw[k].weights_bytes || fclose(f)) {
          perror(path);
          return 1;
        }
      }
    }
    int repl = (NSTAGES == 4 && (k == 1 || k == 2)) || (NSTAGES == 2 && k == 1) ? REPL : 1;
    plans[k] = (pipert_stage_plan){&stages_rw[k], insrc[k], repl, program, (int)(sizeof program / sizeof program[0]), NULL};
    if (getenv("FAKE_BAD_PROGRAM")) plans[k].program = bad_program;
  }
  if (argc == 3 && !strcmp(argv[1], "--write-weights")) return 0;
  pipert_pipeline p = {PIPERT_ABI_VERSION, "fake", NSTAGES, plans, 2, graph_in, 3, graph_out, outsrc,
                       PLAN_M, 0, (double)(NSTAGES - 1) / (PLAN_M + NSTAGES - 1), "gpipe",
                       0, 0, 0, -1, -1, NULL, NULL};
  return pipert_main(argc, argv, &p);
}
