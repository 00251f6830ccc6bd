/* libpipert unit checks: `rt_unit selftest` (checksum, CRC, in-memory npy/npz
 * round trips), `rt_unit programs` (the checks of stage programs under both
 * transports' rules on hand-built two-stage training programs) and `rt_unit copy IN
 * OUT` (.npy/.npz read then written by the runtime's own code, for the numpy
 * round-trip tests). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rt.h"
#include "passes/plan/schedule.h"

#include "../lib/unit_check.h"

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

static int selftest(const char *tmpdir) {
  /* XXH64 reference values (seed 0). */
  CHECK(pipert_checksum64("", 0) == 0xEF46DB3751D8E999ull);
  CHECK(pipert_checksum64("a", 1) == 0xD24EC4F1A98C6E5Bull);
  CHECK(pipert_checksum64("abc", 3) == 0x44BC2CF5AD770999ull);
  CHECK(rt_crc32(0, "123456789", 9) == 0xCBF43926u);
  char big[1000];
  for (int i = 0; i < 1000; i++) big[i] = (char)(i * 7);
  uint64_t h = pipert_checksum64(big, sizeof big);
  big[500] ^= 1;
  CHECK(pipert_checksum64(big, sizeof big) != h);

  int dtypes[] = {PIPERT_FLOAT, PIPERT_DOUBLE, PIPERT_INT64, PIPERT_INT32, PIPERT_BOOL, PIPERT_UINT8, PIPERT_FLOAT16};
  rt_array arrs[7];
  char err[1024], path[4096];
  for (int i = 0; i < 7; i++) {
    int64_t dims[3] = {i + 1, 3, 2};
    char name[16];
    snprintf(name, sizeof name, "a%d", i);
    rt_array_alloc(&arrs[i], name, dtypes[i], 1 + i % 3, dims);
    for (size_t b = 0; b < arrs[i].nbytes; b++) ((unsigned char *)arrs[i].data)[b] = (unsigned char)(b * 13 + i);
    if (dtypes[i] == PIPERT_BOOL) memset(arrs[i].data, 1, arrs[i].nbytes);
    snprintf(path, sizeof path, "%s/rt_unit_%d.npy", tmpdir, i);
    CHECK(rt_npy_save(path, &arrs[i], err, sizeof err) == 0);
    rt_array back;
    CHECK(rt_npy_load(path, &back, err, sizeof err) == 0);
    CHECK(back.dtype == arrs[i].dtype && back.rank == arrs[i].rank && back.nbytes == arrs[i].nbytes);
    CHECK(memcmp(back.dims, arrs[i].dims, sizeof(int64_t) * (size_t)back.rank) == 0);
    CHECK(memcmp(back.data, arrs[i].data, back.nbytes) == 0);
    rt_array_free(&back);
  }
  snprintf(path, sizeof path, "%s/rt_unit.npz", tmpdir);
  CHECK(rt_npz_save(path, arrs, 7, err, sizeof err) == 0);
  rt_array *back;
  int n;
  CHECK(rt_npz_load(path, &back, &n, err, sizeof err) == 0);
  CHECK(n == 7);
  for (int i = 0; i < n && i < 7; i++) {
    CHECK(!strcmp(back[i].name, arrs[i].name));
    CHECK(back[i].nbytes == arrs[i].nbytes && !memcmp(back[i].data, arrs[i].data, back[i].nbytes));
    rt_array_free(&back[i]);
  }
  free(back);
  /* a corrupted byte in the npz is caught by the CRC */
  FILE *f = fopen(path, "r+b");
  fseek(f, 166, SEEK_SET);
  int c = fgetc(f);
  fseek(f, 166, SEEK_SET);
  fputc(c ^ 0x55, f);
  fclose(f);
  CHECK(rt_npz_load(path, &back, &n, err, sizeof err) != 0);
  CHECK(strstr(err, "CRC") != NULL || strstr(err, "corrupt") != NULL);
  /* truncated npy */
  snprintf(path, sizeof path, "%s/rt_unit_0.npy", tmpdir);
  f = fopen(path, "r+b");
  fclose(f);
  CHECK(truncate(path, 70) == 0);
  rt_array t;
  CHECK(rt_npy_load(path, &t, err, sizeof err) != 0 && strstr(err, "truncated"));
  for (int i = 0; i < 7; i++) rt_array_free(&arrs[i]);
  if (fails) fprintf(stderr, "%d check(s) failed\n", fails);
  else printf("selftest ok\n");
  return fails ? 1 : 0;
}

/* ---- program checks ---- */

static const pipert_tensor_desc T1 = {"t", PIPERT_FLOAT, 1, {1}, 4};
static const pipert_ref S0_BWD_SRC[] = {{1, 0, 1}}; /* stage 0's backward reads stage 1's gradient */
static const pipert_ref S1_FWD_SRC[] = {{0, 0, 0}}; /* stage 1 reads stage 0's activation */
static const pipert_stage_desc D0 = {
    .abi_version = PIPERT_ABI_VERSION, .id = 0, .n_outputs = 1, .outputs = &T1, .n_bwd_inputs = 1, .bwd_inputs = &T1};
static const pipert_stage_desc D1 = {
    .abi_version = PIPERT_ABI_VERSION, .id = 1, .n_inputs = 1, .inputs = &T1, .n_bwd_outputs = 1, .bwd_outputs = &T1};

/* Both checks on 2 stages with programs a (stage 0) and b (stage 1); returns
 * (async-deadlock found) + 2 * (NCCL-deadlock found). */
static int check_two(const pipert_instr *a, int na, const pipert_instr *b, int nb, int M) {
  pipert_stage_plan sp[2] = {
      {.stage = &D0, .replicas = 1, .program = a, .program_len = na, .bwd_input_src = S0_BWD_SRC},
      {.stage = &D1, .input_src = S1_FWD_SRC, .replicas = 1, .program = b, .program_len = nb}};
  pipert_pipeline p = {.abi_version = PIPERT_ABI_VERSION,
                       .name = "unit",
                       .n_stages = 2,
                       .stages = sp,
                       .microbatches = M,
                       .training = 1,
                       .logits_output = -1,
                       .labels_input = -1};
  const pipert_instr *prog[2] = {a, b};
  int len[2] = {na, nb};
  char e1[512] = "", e2[512] = "";
  rt_check_deadlock(&p, e1, sizeof e1);
  rt_check_rendezvous(&p, prog, len, e2, sizeof e2);
  return (e1[0] != 0) + 2 * (e2[0] != 0);
}

/* The planner's 1F1B and GPipe programs (passes/plan/schedule.c) for pipelines with
 * replicated stages keep both transports' rules: 3 stages, replicas as given. */
static const pipert_ref S1_BWD_SRC[] = {{2, 0, 1}}; /* stage 1's backward reads stage 2's gradient */
static const pipert_ref S2_FWD_SRC[] = {{1, 0, 0}};
static const pipert_stage_desc DMID = {.abi_version = PIPERT_ABI_VERSION,
                                       .id = 1,
                                       .n_inputs = 1,
                                       .inputs = &T1,
                                       .n_outputs = 1,
                                       .outputs = &T1,
                                       .n_bwd_inputs = 1,
                                       .bwd_inputs = &T1,
                                       .n_bwd_outputs = 1,
                                       .bwd_outputs = &T1};
static const pipert_stage_desc DLAST = {
    .abi_version = PIPERT_ABI_VERSION, .id = 2, .n_inputs = 1, .inputs = &T1, .n_bwd_outputs = 1, .bwd_outputs = &T1};

static int planner_programs(const int *reps, int M, pass_schedule_kind kind) {
  static const int opcode[] = {[PASS_OP_FWD] = PIPERT_OP_FWD,
                               [PASS_OP_BWD] = PIPERT_OP_BWD,
                               [PASS_OP_SEND_ACT] = PIPERT_OP_SEND_ACT,
                               [PASS_OP_RECV_ACT] = PIPERT_OP_RECV_ACT,
                               [PASS_OP_SEND_GRAD] = PIPERT_OP_SEND_GRAD,
                               [PASS_OP_RECV_GRAD] = PIPERT_OP_RECV_GRAD,
                               [PASS_OP_ALLREDUCE] = PIPERT_OP_ALLREDUCE,
                               [PASS_OP_STEP] = PIPERT_OP_STEP};
  pass_stream st[3];
  memset(st, 0, sizeof st);
  if (pass_schedule_build(kind, 3, M, 1, reps, st)) return 1;
  pipert_instr *prog[3];
  int len[3];
  for (int k = 0; k < 3; k++) {
    len[k] = st[k].n;
    prog[k] = calloc((size_t)st[k].n, sizeof(pipert_instr));
    for (int i = 0; i < st[k].n; i++)
      prog[k][i] = (pipert_instr){opcode[st[k].v[i].op], st[k].v[i].mb < 0 ? 0 : st[k].v[i].mb};
  }
  pipert_stage_plan sp[3] = {
      {.stage = &D0, .replicas = reps[0], .program = prog[0], .program_len = len[0], .bwd_input_src = S0_BWD_SRC},
      {.stage = &DMID,
       .input_src = S1_FWD_SRC,
       .replicas = reps[1],
       .program = prog[1],
       .program_len = len[1],
       .bwd_input_src = S1_BWD_SRC},
      {.stage = &DLAST, .input_src = S2_FWD_SRC, .replicas = reps[2], .program = prog[2], .program_len = len[2]}};
  pipert_pipeline p = {.abi_version = PIPERT_ABI_VERSION,
                       .name = "unit",
                       .n_stages = 3,
                       .stages = sp,
                       .microbatches = M,
                       .training = 1,
                       .logits_output = -1,
                       .labels_input = -1};
  char e[512] = "";
  for (int k = 0; k < 3 && !e[0]; k++) rt_check_program(&p, k, e, sizeof e);
  if (!e[0]) rt_check_deadlock(&p, e, sizeof e);
  if (!e[0]) rt_check_rendezvous(&p, (const pipert_instr *const *)prog, len, e, sizeof e);
  if (e[0])
    fprintf(stderr, "%s, replicas %d %d %d, M %d: %s\n", kind == PASS_SCHED_GPIPE ? "gpipe" : "1f1b", reps[0], reps[1],
            reps[2], M, e);
  for (int k = 0; k < 3; k++) free(prog[k]);
  pass_streams_free(st, 3);
  return e[0] != 0;
}

/* The asynchronous schedules' streams (rt_async_program) on 3 stages, T micro-batches in
 * batches of M: they pass rt_async_check (order, a STEP after every batch, the deadlock
 * proof); stage 0 waiting for micro-batch 0's gradient before it sends its activation
 * deadlocks, and a STEP moved one backward early is misplaced: both are refused. 0 when
 * all of that holds. */
static int async_programs(int M, int T) {
  static const int reps[3] = {1, 1, 1};
  pass_stream st[3];
  memset(st, 0, sizeof st);
  if (pass_schedule_build(PASS_SCHED_1F1B, 3, M, 1, reps, st)) return 1;
  pipert_instr *plan[3];
  static const int opcode[] = {[PASS_OP_FWD] = PIPERT_OP_FWD,
                               [PASS_OP_BWD] = PIPERT_OP_BWD,
                               [PASS_OP_SEND_ACT] = PIPERT_OP_SEND_ACT,
                               [PASS_OP_RECV_ACT] = PIPERT_OP_RECV_ACT,
                               [PASS_OP_SEND_GRAD] = PIPERT_OP_SEND_GRAD,
                               [PASS_OP_RECV_GRAD] = PIPERT_OP_RECV_GRAD,
                               [PASS_OP_ALLREDUCE] = PIPERT_OP_ALLREDUCE,
                               [PASS_OP_STEP] = PIPERT_OP_STEP};
  for (int k = 0; k < 3; k++) {
    plan[k] = calloc((size_t)st[k].n + 1, sizeof(pipert_instr));
    for (int i = 0; i < st[k].n; i++)
      plan[k][i] = (pipert_instr){opcode[st[k].v[i].op], st[k].v[i].mb < 0 ? 0 : st[k].v[i].mb};
  }
  pipert_stage_plan sp[3] = {
      {.stage = &D0, .replicas = 1, .program = plan[0], .program_len = st[0].n, .bwd_input_src = S0_BWD_SRC},
      {.stage = &DMID,
       .input_src = S1_FWD_SRC,
       .replicas = 1,
       .program = plan[1],
       .program_len = st[1].n,
       .bwd_input_src = S1_BWD_SRC},
      {.stage = &DLAST, .input_src = S2_FWD_SRC, .replicas = 1, .program = plan[2], .program_len = st[2].n}};
  pipert_pipeline p = {.abi_version = PIPERT_ABI_VERSION,
                       .name = "unit",
                       .n_stages = 3,
                       .stages = sp,
                       .microbatches = M,
                       .schedule = M > 1 ? "2bw" : "pipedream",
                       .training = 1,
                       .logits_output = -1,
                       .labels_input = -1};
  pipert_instr *prog[3];
  int len[3], bad = 0;
  for (int k = 0; k < 3; k++) prog[k] = rt_async_program(&p, k, T, &len[k]);
  char e[512] = "";
  rt_async_check(&p, (const pipert_instr *const *)prog, len, T, e, sizeof e);
  if (e[0]) fprintf(stderr, "async M %d T %d: %s\n", M, T, e), bad = 1;
  /* stage 0: RECV_GRAD 0 moved right after FWD 0 */
  int r = 0;
  while (r < len[0] && prog[0][r].op != PIPERT_OP_RECV_GRAD) r++;
  pipert_instr *d0 = malloc(sizeof *d0 * (size_t)len[0]);
  memcpy(d0, prog[0], sizeof *d0 * (size_t)len[0]);
  if (r < len[0]) {
    pipert_instr g = d0[r];
    memmove(&d0[2], &d0[1], sizeof *d0 * (size_t)(r - 1));
    d0[1] = g;
  }
  const pipert_instr *dl[3] = {d0, prog[1], prog[2]};
  e[0] = 0;
  rt_async_check(&p, dl, len, T, e, sizeof e);
  if (!strstr(e, "deadlock")) fprintf(stderr, "async M %d T %d: the deadlock is not found (%s)\n", M, T, e), bad = 1;
  /* stage 2: its first STEP swapped with the BWD before it */
  int q = 0;
  while (q < len[2] && prog[2][q].op != PIPERT_OP_STEP) q++;
  memcpy(d0, prog[0], sizeof *d0 * (size_t)len[0]);
  pipert_instr *d2 = malloc(sizeof *d2 * (size_t)len[2]);
  memcpy(d2, prog[2], sizeof *d2 * (size_t)len[2]);
  int b = q;
  while (b > 0 && d2[b].op != PIPERT_OP_BWD) b--;
  pipert_instr x = d2[b];
  d2[b] = d2[q];
  d2[q] = x;
  const pipert_instr *ds[3] = {prog[0], prog[1], d2};
  e[0] = 0;
  rt_async_check(&p, ds, len, T, e, sizeof e);
  if (!strstr(e, "STEP")) fprintf(stderr, "async M %d T %d: the misplaced STEP is not found (%s)\n", M, T, e), bad = 1;
  free(d0);
  free(d2);
  for (int k = 0; k < 3; k++) {
    free(prog[k]);
    free(plan[k]);
  }
  pass_streams_free(st, 3);
  return bad;
}

static int programs(void) {
  enum {
    RA = PIPERT_OP_RECV_ACT,
    F = PIPERT_OP_FWD,
    SA = PIPERT_OP_SEND_ACT,
    RG = PIPERT_OP_RECV_GRAD,
    B = PIPERT_OP_BWD,
    SG = PIPERT_OP_SEND_GRAD,
    ST = PIPERT_OP_STEP
  };
  /* 1F1B, 2 micro-batches: fine under both */
  pipert_instr a1[] = {{F, 0}, {SA, 0}, {F, 1}, {SA, 1}, {RG, 0}, {B, 0}, {RG, 1}, {B, 1}, {ST, 0}};
  pipert_instr b1[] = {{RA, 0}, {F, 0}, {B, 0}, {SG, 0}, {RA, 1}, {F, 1}, {B, 1}, {SG, 1}, {ST, 0}};
  CHECK(check_two(a1, 9, b1, 9, 2) == 0);
  /* GPipe: fine under both */
  pipert_instr a2[] = {{F, 0}, {SA, 0}, {F, 1}, {SA, 1}, {RG, 0}, {B, 0}, {RG, 1}, {B, 1}, {ST, 0}};
  pipert_instr b2[] = {{RA, 0}, {F, 0}, {RA, 1}, {F, 1}, {B, 0}, {SG, 0}, {B, 1}, {SG, 1}, {ST, 0}};
  CHECK(check_two(a2, 9, b2, 9, 2) == 0);
  /* stage 0 waits for a gradient before it sends the activation it comes from: a
   * blocking receive never returns; in one NCCL group the two calls progress together */
  pipert_instr a3[] = {{F, 0}, {RG, 0}, {SA, 0}, {B, 0}, {ST, 0}};
  pipert_instr b3[] = {{RA, 0}, {F, 0}, {B, 0}, {SG, 0}, {ST, 0}};
  CHECK(check_two(a3, 5, b3, 5, 1) == 1);
  /* the same with the receive and the send in separate groups: both refuse */
  pipert_instr a6[] = {{F, 0}, {RG, 0}, {ST, 0}, {SA, 0}, {B, 0}};
  CHECK(check_two(a6, 5, b3, 5, 1) == 3);
  /* each stage sends in one group and receives in a later one: fine when sends do not
   * wait, a circular wait when a send waits for its receive (NCCL) */
  pipert_instr a4[] = {{SA, 0}, {ST, 0}, {RG, 0}};
  pipert_instr b4[] = {{SG, 0}, {ST, 0}, {RA, 0}};
  CHECK(check_two(a4, 3, b4, 3, 1) == 2);
  /* the same sends and receives in one group each: fine under both */
  pipert_instr a5[] = {{SA, 0}, {RG, 0}, {ST, 0}};
  pipert_instr b5[] = {{SG, 0}, {RA, 0}, {ST, 0}};
  CHECK(check_two(a5, 3, b5, 3, 1) == 0);
  /* receives ahead (rt_programs_ahead): inference, stage 1 of 2 with 3 micro-batches
   * gets RECV 0, RECV 1, FWD 0, SEND 0, RECV 2, FWD 1, ...; stage 0 (no receives) stays */
  {
    pipert_instr i0[] = {{F, 0}, {SA, 0}, {F, 1}, {SA, 1}, {F, 2}, {SA, 2}};
    pipert_instr i1[] = {{RA, 0}, {F, 0}, {SA, 0}, {RA, 1}, {F, 1}, {SA, 1}, {RA, 2}, {F, 2}, {SA, 2}};
    pipert_instr want[] = {{RA, 0}, {RA, 1}, {F, 0}, {SA, 0}, {RA, 2}, {F, 1}, {SA, 1}, {F, 2}, {SA, 2}};
    pipert_stage_plan sp[2] = {{.stage = &D0, .replicas = 1, .program = i0, .program_len = 6},
                               {.stage = &D1, .input_src = S1_FWD_SRC, .replicas = 1, .program = i1, .program_len = 9}};
    pipert_pipeline p = {.abi_version = PIPERT_ABI_VERSION,
                         .name = "unit",
                         .n_stages = 2,
                         .stages = sp,
                         .microbatches = 3,
                         .training = 0,
                         .logits_output = -1,
                         .labels_input = -1};
    const pipert_instr *prog[2] = {i0, i1};
    int len[2] = {6, 9};
    pipert_instr *ahead[2];
    CHECK(rt_programs_ahead(&p, prog, len, 3, ahead) == 1);
    CHECK(ahead[0] == NULL);
    CHECK(ahead[1] && !memcmp(ahead[1], want, sizeof want));
    free(ahead[1]);
  }
  /* training, 1F1B with 2 micro-batches (a1, b1 above): every receive ahead is a
   * circular wait (check_two: 3); the gradients' only pass: stage 0's move ahead of the
   * FWD/BWD before them; nothing moves across STEP */
  {
    pipert_instr wa[] = {{F, 0}, {SA, 0}, {RG, 0}, {F, 1}, {SA, 1}, {RG, 1}, {B, 0}, {B, 1}, {ST, 0}};
    pipert_instr wb[] = {{RA, 0}, {F, 0}, {RA, 1}, {B, 0}, {SG, 0}, {F, 1}, {B, 1}, {SG, 1}, {ST, 0}};
    CHECK(check_two(wa, 9, wb, 9, 2) == 3);
    CHECK(check_two(wa, 9, b1, 9, 2) == 0);
    pipert_stage_plan sp[2] = {
        {.stage = &D0, .replicas = 1, .program = a1, .program_len = 9, .bwd_input_src = S0_BWD_SRC},
        {.stage = &D1, .input_src = S1_FWD_SRC, .replicas = 1, .program = b1, .program_len = 9}};
    pipert_pipeline p = {.abi_version = PIPERT_ABI_VERSION,
                         .name = "unit",
                         .n_stages = 2,
                         .stages = sp,
                         .microbatches = 2,
                         .training = 1,
                         .logits_output = -1,
                         .labels_input = -1};
    const pipert_instr *prog[2] = {a1, b1};
    int len[2] = {9, 9};
    pipert_instr *ahead[2];
    CHECK(rt_programs_ahead(&p, prog, len, 2, ahead) == 1);
    CHECK(ahead[0] && !memcmp(ahead[0], wa, sizeof wa));
    CHECK(ahead[1] == NULL);
    free(ahead[0]);
    pipert_instr st[] = {{F, 0}, {ST, 0}, {RG, 0}};
    CHECK(rt_recv_ahead(st, 2) == 0);
  }
  static const int reps[][3] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 2}, {2, 2, 1}, {1, 3, 1}, {3, 1, 2}, {2, 3, 2}};
  int n_prog = 0;
  for (size_t c = 0; c < sizeof reps / sizeof reps[0]; c++)
    for (int M = 1; M <= 12; M++)
      for (int kind = 0; kind < 2; kind++, n_prog++) CHECK(planner_programs(reps[c], M, (pass_schedule_kind)kind) == 0);
  printf("%d planner programs with replicated stages keep both transports' rules\n", n_prog);
  n_prog = 0;
  for (int M = 1; M <= 4; M++)
    for (int T = M; T <= 16 * M; T += M, n_prog++) CHECK(async_programs(M, T) == 0);
  printf("%d asynchronous stream sets pass the checks, and each made to deadlock or to misplace a STEP fails "
         "them\n",
         n_prog);
  if (fails) fprintf(stderr, "%d check(s) failed\n", fails);
  else printf("programs ok\n");
  return fails ? 1 : 0;
}

static int copy(const char *in, const char *out) {
  char err[1024];
  rt_array *arrs = NULL, one;
  int n = 1;
  if (ends_with(in, ".npz")) {
    if (rt_npz_load(in, &arrs, &n, err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      return 2;
    }
  } else {
    if (rt_npy_load(in, &one, err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      return 2;
    }
    arrs = &one;
  }
  int rc =
      ends_with(out, ".npz") ? rt_npz_save(out, arrs, n, err, sizeof err) : rt_npy_save(out, &arrs[0], err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  for (int i = 0; i < n; i++) rt_array_free(&arrs[i]);
  if (arrs != &one) free(arrs);
  return rc ? 2 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "selftest")) return selftest(argv[2]);
  if (argc == 2 && !strcmp(argv[1], "programs")) return programs();
  if (argc == 4 && !strcmp(argv[1], "copy")) return copy(argv[2], argv[3]);
  fprintf(stderr, "usage: rt_unit selftest TMPDIR | rt_unit programs | rt_unit copy IN OUT\n");
  return 2;
}
