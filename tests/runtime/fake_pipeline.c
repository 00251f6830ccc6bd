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
#define NO_TRAIN 0, 0, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL

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

static void w1_values(float *w) {
  for (int j = 0; j < W; j++) w[j] = 0.25f * (float)j - 0.5f;
}
static void w3_values(float *w) {
  for (int j = 0; j < W; j++) w[j] = 1.5f - 0.125f * (float)j;
}

static void op_a(const float *x, float *h1) {
  for (int i = 0; i < MB * W; i++) h1[i] = x[i] * 2.0f;
}
static void op_b(const float *h1, const float *w1, float *h2) {
  for (int i = 0; i < MB; i++)
    for (int j = 0; j < W; j++) h2[i * W + j] = h1[i * W + j] + w1[j];
}
static void op_c(const float *h2, float *h3) {
  for (int i = 0; i < MB * W; i++) h3[i] = h2[i] * 0.5f;
}
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
  int stage;
  int calls;
  const float *w;
} fake_state;

static int fake_init(int stage, void **state, const void *weights, size_t len) {
  fake_state *st = calloc(1, sizeof *st);
  st->stage = stage;
  st->w = weights;
  (void)len;
  *state = st;
  return 0;
}
static void fake_fini(void *state) { free(state); }

static int misbehave(fake_state *st) {
  const char *mode = getenv("FAKE_MODE"), *stage = getenv("FAKE_STAGE");
  if (!mode || !stage || atoi(stage) != st->stage || ++st->calls != 2) return 0;
  if (!strcmp(mode, "fail")) return -7;
  if (!strcmp(mode, "crash")) raise(SIGSEGV);
  if (!strcmp(mode, "die")) _exit(9);
  if (!strcmp(mode, "hang"))
    for (;;) pause();
  return 0;
}

#define TD(n, c) \
  { n, PIPERT_FLOAT, 2, {MB, W}, (size_t)MB *W * sizeof(float) }
#define TX TD("x", 0)
#define TS \
  { "s", PIPERT_DOUBLE, 1, {MB}, (size_t)MB * sizeof(double) }
#define TZ \
  { "z", PIPERT_DOUBLE, 1, {MB}, (size_t)MB * sizeof(double) }

#define STAGE_FNS(K)                                                                       \
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
static const pipert_stage_desc stage0 = {
    PIPERT_ABI_VERSION,    0, "ABCD", 2,     3,         s0_in,   s0_out, "weights_0.bin",
    2 * W * sizeof(float), 0, init_0, fwd_0, fake_fini, NO_TRAIN};
static pipert_stage_desc stages_rw[1];
static const pipert_ref in0[] = {{PIPERT_GRAPH_INPUT, 0, 0}, {PIPERT_GRAPH_INPUT, 1, 0}};
static const pipert_ref outsrc[] = {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}};
static const pipert_ref *insrc[] = {in0};
static const int weighted[] = {1};
static void weights_of(int k, float *buf) {
  (void)k;
  w1_values(buf);
  w3_values(buf + W);
}

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
static const pipert_stage_desc stage0 = {
    PIPERT_ABI_VERSION, 0, "AB",   1,     1,         s0_in,   s0_out, "weights_0.bin",
    W * sizeof(float),  0, init_0, fwd_0, fake_fini, NO_TRAIN};
static const pipert_stage_desc stage1 = {
    PIPERT_ABI_VERSION, 1, "CD",   3,     2,         s1_in,   s1_out, "weights_1.bin",
    W * sizeof(float),  0, init_1, fwd_1, fake_fini, NO_TRAIN};
static pipert_stage_desc stages_rw[2];
static const pipert_ref in0[] = {{PIPERT_GRAPH_INPUT, 0, 0}};
static const pipert_ref in1[] = {{0, 0, 0}, {PIPERT_GRAPH_INPUT, 0, 0}, {PIPERT_GRAPH_INPUT, 1, 0}};
static const pipert_ref outsrc[] = {{1, 0, 0}, {1, 1, 0}, {0, 0, 0}};
static const pipert_ref *insrc[] = {in0, in1};
static const int weighted[] = {1, 1};
static void weights_of(int k, float *buf) {
  if (k == 0) w1_values(buf);
  else w3_values(buf);
}

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
static const pipert_stage_desc stage0 = {
    PIPERT_ABI_VERSION, 0, "A", 1, 1, s0_in, s0_out, NULL, 0, 0, init_0, fwd_0, fake_fini, NO_TRAIN};
static const pipert_stage_desc stage1 = {
    PIPERT_ABI_VERSION, 1, "B",    1,     1,         s1_in,   s1_out, "weights_1.bin",
    W * sizeof(float),  0, init_1, fwd_1, fake_fini, NO_TRAIN};
static const pipert_stage_desc stage2 = {
    PIPERT_ABI_VERSION, 2, "C", 1, 1, s2_in, s2_out, NULL, 0, 0, init_2, fwd_2, fake_fini, NO_TRAIN};
static const pipert_stage_desc stage3 = {
    PIPERT_ABI_VERSION, 3, "D",    3,     2,         s3_in,   s3_out, "weights_3.bin",
    W * sizeof(float),  0, init_3, fwd_3, fake_fini, NO_TRAIN};
static pipert_stage_desc stages_rw[4];
static const pipert_ref in0[] = {{PIPERT_GRAPH_INPUT, 0, 0}};
static const pipert_ref in1[] = {{0, 0, 0}};
static const pipert_ref in2[] = {{1, 0, 0}};
static const pipert_ref in3[] = {{2, 0, 0}, {PIPERT_GRAPH_INPUT, 0, 0}, {PIPERT_GRAPH_INPUT, 1, 0}};
static const pipert_ref outsrc[] = {{3, 0, 0}, {3, 1, 0}, {1, 0, 0}};
static const pipert_ref *insrc[] = {in0, in1, in2, in3};
static const int weighted[] = {0, 1, 0, 1};
static void weights_of(int k, float *buf) {
  if (k == 1) w1_values(buf);
  else w3_values(buf);
}
#else
#error "NSTAGES must be 1, 2 or 4"
#endif

static const pipert_tensor_desc graph_in[] = {TX, TS};
static const pipert_tensor_desc graph_out[] = {TD("y", 0), TZ, TD("mid", 0)};

/* The plan's program for M = PLAN_M: receives one micro-batch ahead. */
static const pipert_instr program[] = {
    {PIPERT_OP_RECV_ACT, 0}, {PIPERT_OP_RECV_ACT, 1}, {PIPERT_OP_FWD, 0},      {PIPERT_OP_SEND_ACT, 0},
    {PIPERT_OP_RECV_ACT, 2}, {PIPERT_OP_FWD, 1},      {PIPERT_OP_SEND_ACT, 1}, {PIPERT_OP_RECV_ACT, 3},
    {PIPERT_OP_FWD, 2},      {PIPERT_OP_SEND_ACT, 2}, {PIPERT_OP_FWD, 3},      {PIPERT_OP_SEND_ACT, 3},
};

/* FAKE_BAD_PROGRAM=1: receives two micro-batches ahead, which the runtime rejects. */
static const pipert_instr bad_program[] = {
    {PIPERT_OP_RECV_ACT, 0}, {PIPERT_OP_RECV_ACT, 1}, {PIPERT_OP_RECV_ACT, 2}, {PIPERT_OP_FWD, 0},
    {PIPERT_OP_SEND_ACT, 0}, {PIPERT_OP_FWD, 1},      {PIPERT_OP_SEND_ACT, 1}, {PIPERT_OP_RECV_ACT, 3},
    {PIPERT_OP_FWD, 2},      {PIPERT_OP_SEND_ACT, 2}, {PIPERT_OP_FWD, 3},      {PIPERT_OP_SEND_ACT, 3},
};

int main(int argc, char **argv) {
  const pipert_stage_desc *src[] = {
    &stage0,
#if NSTAGES >= 2
    &stage1,
#endif
#if NSTAGES == 4
    &stage2,
    &stage3,
#endif
  };
  pipert_stage_plan plans[NSTAGES];
  for (int k = 0; k < NSTAGES; k++) {
    /* pipecc compiles the checksum in; here it is computed from the known values. */
    stages_rw[k] = *src[k];
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
    plans[k] =
        (pipert_stage_plan){&stages_rw[k], insrc[k], repl, program, (int)(sizeof program / sizeof program[0]), NULL};
    if (getenv("FAKE_BAD_PROGRAM")) plans[k].program = bad_program;
  }
  if (argc == 3 && !strcmp(argv[1], "--write-weights")) return 0;
  pipert_pipeline p = {PIPERT_ABI_VERSION,
                       "fake",
                       NSTAGES,
                       plans,
                       2,
                       graph_in,
                       3,
                       graph_out,
                       outsrc,
                       PLAN_M,
                       0,
                       (double)(NSTAGES - 1) / (PLAN_M + NSTAGES - 1),
                       "gpipe",
                       0,
                       0,
                       0,
                       -1,
                       -1,
                       NULL,
                       NULL,
                       "test",
                       "cpu"};
  return pipert_main(argc, argv, &p);
}
