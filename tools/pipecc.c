/* tools/pipecc.c - the pipecc command: ONNX model -> pipeline stages -> code.
 *
 *   load -> bind -> fold -> shape -> profile -> antichain/partition -> schedule
 *        -> plan.json + report.html -> codegen (cpu | cuda) -> build
 *
 * Exit status: 0 success, 2 a user or model error (one clear line per problem),
 * anything else a bug in pipecc. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "codegen/codegen.h"
#include "frontend/onnx_load.h"
#include "ir/diag.h"
#include "ir/print.h"
#include "passes/train/autodiff.h"
#include "passes/batch.h"
#include "passes/opt/fuse.h"
#include "passes/opt/layout.h"
#include "passes/lower/lower_loss.h"
#include "passes/opt/winograd.h"
#include "passes/pass.h"
#include "passes/opt/pretranspose.h"
#include "passes/plan/plan_ir.h"
#include "passes/plan/plan_json.h"
#include "runtime/pipert.h"
#include "passes/plan/report_html.h"

static void usage(FILE *f) {
  fputs(
      "usage: pipecc MODEL.onnx [options]\n"
      "\n"
      "Compile an ONNX model into a pipeline of stages over several devices, e.g.\n"
      "  pipecc model.onnx --shape input:32x3x224x224 -g 2 -o build/   # plan, emit, build\n"
      "  build/pipeline --input x.npy --output y.npy\n"
      "\n"
      "Input:\n"
      "  --shape NAME:AxBxC     bind the shape of graph input NAME (trtexec style; repeatable)\n"
      "  -d DIM=VALUE           bind the symbolic dim DIM (dim_param) of every input (repeatable)\n"
      "  --const NAME=V[,V...]  compile graph input NAME as a constant holding these values (a flag,\n"
      "                         a length; an If on it keeps one branch); the pipeline then does not\n"
      "                         take it (repeatable)\n"
      "  --seq NAME=N           graph input NAME is a sequence of N tensors: the pipeline takes them as\n"
      "                         inputs NAME.0 ... NAME.N-1 (bind shapes with -d or --shape NAME.0:...);\n"
      "                         a sequence output OUT gives outputs OUT.0, OUT.1, ... (repeatable)\n"
      "  --none NAME            optional graph input NAME holds no value (OptionalHasElement on it folds\n"
      "                         to false); without it an optional input holds its value (repeatable)\n"
      "\n"
      "Planning:\n"
      "  -g, --gpus N           number of devices (pipeline stages and replicas); default 1\n"
      "  -m, --microbatches M   micro-batches per batch (dim 0 of each input is split in M);\n"
      "                         default: the largest divisor of the batch that is <= 4*g (cpu);\n"
      "                         cuda: of the divisors <= 4*g, the one whose plan the cost model\n"
      "                         predicts fastest (small micro-batches waste a GPU; printed, and\n"
      "                         in plan.json). -m auto: the search on either target; -m max:\n"
      "                         the largest count on either. 1 (with a note) for a model that\n"
      "                         does not split into it\n"
      "  --schedule S           gpipe | 1f1b (default 1f1b)\n"
      "  --device NAME          cost model device: h100, h200, a100, v100, cpu\n"
      "                         (default: cpu for --target cpu, h100 for --target cuda)\n"
      "  --profile FILE.json    measured per-node times replace the cost model\n"
      "  --topology HxG         H hosts with G devices each (default: one host with g devices)\n"
      "  --link NAME            link between devices of a host: nvlink4 nvlink3 pcie4 pcie5 shm ...\n"
      "  --inter-link NAME      link between hosts: ib-ndr ib-hdr eth100 ...\n"
      "  --link-bw GBPS         bandwidth of every link (GB/s); --intra-link-bw / --inter-link-bw\n"
      "  --link-latency-us US   latency of every link; --intra-link-latency-us / --inter-link-latency-us\n"
      "  --memory-limit BYTES   per-device memory limit (K/M/G suffixes; default: the device's)\n"
      "  --no-replicate         one device per stage (no data-parallel stage replicas)\n"
      "  --train                compile a pipelined training program: forward, backward and optimizer\n"
      "                         step of every stage, run by `DIR/pipeline train` (see Training)\n"
      "  --no-tf32              cost (and on cuda, run) float32 GEMMs without TF32\n"
      "  --cuda-arch LIST       cuda: the SM versions nvcc builds for, e.g. 90 or 80;90 (default 80;90,\n"
      "                         or $PIPECC_CUDA_ARCH)\n"
      "\n"
      "Training (--train; --train-step compiles instead ONE step as a pure function: inputs +\n"
      "labels -> loss, grad/W and new/W per weight W, run like an inference model):\n"
      "  --loss L               cross-entropy (default; labels int64) | mse | NAME of a scalar value\n"
      "  --labels NAME          name of the added labels input (default labels)\n"
      "  --optimizer O          sgd (default) | adam | adamw\n"
      "  --lr X --momentum X --nesterov --weight-decay X --beta1 X --beta2 X --eps X\n"
      "                         (lr, momentum, weight decay, betas and eps can be changed when running;\n"
      "                         momentum and weight decay only if compiled non-zero)\n"
      "  --recompute            (--train) re-materialisation: each stage's backward recomputes its\n"
      "                         forward, so a stage keeps per micro-batch only the tensors it\n"
      "                         exchanges with other stages (GPipe's; one more forward per\n"
      "                         micro-batch, same trained bits; --memory-limit counts it)\n"
      "  --recompute=selective  keep the outputs of Conv, MatMul, Gemm (the costly nodes) too and\n"
      "                         recompute only the cheap nodes between them (--recompute=full: as\n"
      "                         --recompute)\n"
      "  --recompute=auto       each stage none, selective or full: the planner's choice, the least\n"
      "                         recomputation that fits --memory-limit at the best bottleneck\n"
      "\n"
      "Output:\n"
      "  -o, --out DIR          write plan.json, report.html, the stage sources and DIR/pipeline\n"
      "  --plan-only            stop after plan.json and report.html\n"
      "  --target T             cpu (default) | cuda\n"
      "  --emit-only            write the sources and build files, do not compile\n"
      "  --no-fuse              keep Add/Relu/Clip after a Conv as nodes of their own, a\n"
      "                         written-out layer normalisation as its element-wise nodes, and\n"
      "                         (cpu) a 1x1 expansion Conv apart from its depthwise Conv and\n"
      "                         Transposes apart from the batched MatMuls reading them\n"
      "  --layout L             cuda inference: nhwc (default; 2-D float Convs whose channels are\n"
      "                         multiples of 4 run channels-last, as cuDNN's tensor cores want),\n"
      "                         nhwc-all (every 2-D float Conv, the 3-channel stem too) or nchw\n"
      "                         (the model's own layout everywhere)\n"
      "  --winograd M           cpu: 3x3 stride-1 Convs by Winograd F(MxM, 3x3): auto (default:\n"
      "                         4, or 2 on maps under 4x4), 2, 4 (4x fewer FLOPs than im2col,\n"
      "                         4x the filter bytes), or 0 (im2col + GEMM only)\n"
      "  --profile-run          build one stage and DIR/profile, which times every node on the\n"
      "                         target and writes the JSON that --profile reads: the GPU (the\n"
      "                         default here), or one core with --target cpu\n"
      "  -j, --jobs N           parallel compile jobs (default: number of cores)\n"
      "  --emit=ir              print the IR after the front-end passes, one line per node\n"
      "  --emit=ir-json         print the IR as JSON on stdout\n"
      "\n"
      "Debugging:\n"
      "  -d PASS                dump the IR after PASS (a name without '='; passes: bind, fold, shape, einsum,\n"
      "                         quant, lower, widen)\n"
      "  --time-passes          print the wall time of every pass on stderr\n"
      "  -v, --verbose          more messages\n"
      "  -h, --help             this help\n"
      "  --version              print the version\n"
      "\n"
      "Exit status: 0 success, 2 error in the model or the command line.\n",
      f);
}

/* Allocations that live for the whole run; freed at exit (every return path of main). */
static struct {
  pass_opts *opts;
  char *cmdline;
  int *even_stage, *even_reps, *reps, *train_stage, *stage_recompute;
  cg_instr **progs;
  int *prog_len, n_progs;
  ir_graph *g, *g_full;
  pass_planned *pl;
} owned;

static void free_owned(void) {
  ir_diag_release(1); /* a return during the micro-batch trial (below) still shows its messages */
  if (owned.opts) {
    for (int i = 0; i <= owned.opts->n_shapes && owned.opts->shapes; i++) free((char *)owned.opts->shapes[i].name);
    for (int i = 0; i <= owned.opts->n_dims && owned.opts->dims; i++) free((char *)owned.opts->dims[i].name);
    for (int i = 0; i <= owned.opts->n_seqs && owned.opts->seqs; i++) free((char *)owned.opts->seqs[i].name);
    for (int i = 0; i < owned.opts->n_consts; i++) {
      free((char *)owned.opts->consts[i].name);
      free(owned.opts->consts[i].values);
    }
    free(owned.opts->shapes);
    free(owned.opts->dims);
    free(owned.opts->seqs);
    free(owned.opts->nones);
    free(owned.opts->consts);
  }
  free(owned.cmdline);
  free(owned.even_stage);
  free(owned.even_reps);
  free(owned.reps);
  free(owned.train_stage);
  free(owned.stage_recompute);
  for (int k = 0; k < owned.n_progs; k++) free(owned.progs[k]);
  free(owned.progs);
  free(owned.prog_len);
  if (owned.pl) pass_planned_free(owned.pl);
  ir_graph_free(owned.g);
  ir_graph_free(owned.g_full);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The model loaded again and run through the frontend passes at the whole batch (no
 * micro-batch split): the reference passes/batch.h compares shapes against. NULL after
 * reporting. */
static ir_graph *whole_batch(const char *model, const pass_opts *o) {
  ir_graph *f = onnx_load_file(model);
  if (!f) return NULL;
  pass_opts q = *o;
  q.verbose = 0;
  for (const pass_info *p = pass_frontend_pipeline; p->name; p++)
    if (p->fn(f, &q) || f->n_errors) {
      ir_graph_free(f);
      return NULL;
    }
  return f;
}

static int cli_error(const char *fmt, const char *arg) {
  fprintf(stderr, "pipecc: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see pipecc --help)\n");
  return 2;
}

/* --cuda-arch: SM versions (two or three digits, optionally with an 'a' suffix such as
 * 90a) separated by ';', ',' or spaces; at least one. */
static int valid_cuda_arch(const char *v) {
  int n = 0;
  for (const char *p = v; *p;) {
    if (strchr(";, ", *p)) {
      p++;
      continue;
    }
    int d = 0;
    while (p[d] >= '0' && p[d] <= '9') d++;
    if (d < 2 || d > 3) return 0;
    p += d;
    if (*p == 'a') p++;
    if (*p && !strchr(";, ", *p)) return 0;
    n++;
  }
  return n > 0;
}

/* "NAME:2x3x224x224" -> binding. Returns 0 or -1. */
static int parse_shape(const char *arg, pass_shape_binding *b) {
  const char *colon = strrchr(arg, ':');
  if (!colon || colon == arg || !colon[1]) return -1;
  b->name = strndup(arg, (size_t)(colon - arg));
  memset(&b->shape, 0, sizeof b->shape);
  const char *p = colon + 1;
  for (;;) {
    if (b->shape.rank >= IR_MAX_RANK) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0) return -1;
    b->shape.dims[b->shape.rank++] = v;
    if (!*end) break;
    if (*end != 'x' && *end != 'X' && *end != ',') return -1;
    p = end + 1;
  }
  return 0;
}

static int parse_const(const char *arg, pass_const_binding *b) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg || !eq[1]) return -1;
  int n = 1;
  for (const char *q = eq + 1; *q; q++) n += *q == ',';
  b->values = calloc((size_t)n, sizeof(double));
  b->name = strndup(arg, (size_t)(eq - arg));
  const char *p = eq + 1;
  for (int k = 0; k < n; k++) {
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno == ERANGE || (*end && *end != ',')) return -1;
    b->values[k] = v;
    p = end + 1;
  }
  b->n = n;
  return 0;
}

static int parse_dim(const char *arg, pass_dim_binding *b) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  if (end == eq + 1 || *end || errno || v < 0) return -1;
  b->name = strndup(arg, (size_t)(eq - arg));
  b->value = v;
  return 0;
}

static int parse_pos_int(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < 1 || v > 1000000) return -1;
  *out = (int)v;
  return 0;
}

static int parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v >= 0)) return -1;
  *out = v;
  return 0;
}

static int parse_bytes(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !(v > 0)) return -1;
  double m = 1;
  if (*end == 'k' || *end == 'K') m = 1024.0, end++;
  else if (*end == 'm' || *end == 'M') m = 1024.0 * 1024, end++;
  else if (*end == 'g' || *end == 'G') m = 1024.0 * 1024 * 1024, end++;
  else if (*end == 't' || *end == 'T') m = 1024.0 * 1024 * 1024 * 1024, end++;
  if (*end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = (uint64_t)(v * m);
  return 0;
}

static int mkdir_p(const char *dir) {
  char *d = strdup(dir);
  for (char *p = d + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(d, 0755) && errno != EEXIST) {
      free(d);
      return -1;
    }
    *p = '/';
  }
  int rc = mkdir(d, 0755);
  free(d);
  return rc && errno != EEXIST ? -1 : 0;
}

/* Write a file atomically (tmp + rename) through a callback. */
typedef int (*writer_fn)(FILE *f, void *ctx);
static int write_file(const char *dir, const char *name, writer_fn fn, void *ctx) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "pipecc: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  int rc = fn(f, ctx);
  if (fclose(f) || rc) {
    fprintf(stderr, "pipecc: cannot write %s\n", path);
    remove(tmp);
    return -1;
  }
  if (rename(tmp, path)) {
    fprintf(stderr, "pipecc: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

typedef struct {
  ir_graph *g;
  pass_planned *pl;
  pass_plan_opts *po;
  const char *cmdline;
} plan_ctx;

static int write_plan_json(FILE *f, void *c) {
  plan_ctx *p = c;
  /* planner_ms is the one figure that changes from run to run; reproducible builds
   * (SOURCE_DATE_EPOCH set, as for other build tools) write null instead. */
  return pass_plan_json_write(f, &p->pl->dag, &p->pl->plan, p->po, getenv("SOURCE_DATE_EPOCH") == NULL);
}
static int write_report(FILE *f, void *c) {
  plan_ctx *p = c;
  return report_html_write(f, p->g, p->pl, p->po, p->cmdline);
}

static void human_bytes(double b, char *buf, size_t n) {
  if (b >= 1 << 30) snprintf(buf, n, "%.2f GiB", b / (1 << 30));
  else if (b >= 1 << 20) snprintf(buf, n, "%.1f MiB", b / (1 << 20));
  else if (b >= 1 << 10) snprintf(buf, n, "%.1f KiB", b / (1 << 10));
  else snprintf(buf, n, "%.0f B", b);
}

static void print_plan_table(FILE *f, const ir_graph *g, const pass_planned *pl, const pass_device *dev) {
  const pass_plan *p = &pl->plan;
  fprintf(f, "pipecc: %s on %d x %s, %d micro-batches, %s\n", g->path, p->devices, dev->name, p->microbatches,
          p->schedule == PASS_SCHED_GPIPE ? "gpipe" : "1f1b");
  int rc_col = p->training && p->recompute; /* the stages' re-materialisation */
  fprintf(f, "  stage  devices  replicas  nodes  compute_ms   comm_ms  memory      %sfirst .. last node\n",
          rc_col ? "recompute  " : "");
  for (int s = 0; s < p->n_stages; s++) {
    const pass_stage *st = &p->stages[s];
    char mem[32], a[48], b[48];
    human_bytes((double)st->memory_bytes, mem, sizeof mem);
    const char *first = st->n_nodes ? pl->dag.nodes[st->nodes[0]].name : "";
    const char *last = st->n_nodes ? pl->dag.nodes[st->nodes[st->n_nodes - 1]].name : "";
    const char *rc = !rc_col                                   ? ""
                     : st->recompute == PASS_PLAN_RC_FULL      ? "full       "
                     : st->recompute == PASS_PLAN_RC_SELECTIVE ? "selective  "
                                                               : "none       ";
    fprintf(f, "  %5d  %3d..%-3d %8d  %5d  %10.4f %9.4f  %-10s  %s%s .. %s\n", s, st->dev_first,
            st->dev_first + st->replicas - 1, st->replicas, st->n_nodes, st->compute_ms, st->comm_ms, mem, rc,
            ir_printable(first, 24, a, sizeof a), ir_printable(last, 24, b, sizeof b));
  }
  fprintf(f,
          "  bottleneck %.4f ms (lower bound %.4f ms, gap %.1f%%), predicted iteration %.3f ms, bubble %.1f%%, "
          "speedup %.2fx over 1 device; planned in %.2f ms\n",
          p->bottleneck_ms, p->lower_bound_ms, 100 * p->gap, p->predicted_iteration_ms, 100 * p->bubble_fraction,
          p->predicted_speedup, pl->antichain_partition_ms);
}

/* The training program's instruction streams for the final stages (the plan's, or
 * PIPECC_SPLIT's), checked, as runtime opcodes. Returns 0, or -1 (internal error). */
static int training_programs(pass_schedule_kind kind, cg_plan *cp) {
  static const int opcode[] = {[PASS_OP_FWD] = PIPERT_OP_FWD,
                               [PASS_OP_BWD] = PIPERT_OP_BWD,
                               [PASS_OP_SEND_ACT] = PIPERT_OP_SEND_ACT,
                               [PASS_OP_RECV_ACT] = PIPERT_OP_RECV_ACT,
                               [PASS_OP_SEND_GRAD] = PIPERT_OP_SEND_GRAD,
                               [PASS_OP_RECV_GRAD] = PIPERT_OP_RECV_GRAD,
                               [PASS_OP_ALLREDUCE] = PIPERT_OP_ALLREDUCE,
                               [PASS_OP_STEP] = PIPERT_OP_STEP};
  int S = cp->n_stages;
  pass_stream *streams = calloc((size_t)S, sizeof *streams);
  char err[512];
  int rc = pass_schedule_build(kind, S, cp->microbatches, 1, cp->replicas, streams) ? -1 : 0;
  if (!rc && pass_schedule_check(S, streams, cp->replicas, err, sizeof err)) {
    fprintf(stderr, "pipecc: internal error: training schedule: %s\n", err);
    rc = -1;
  }
  owned.n_progs = S;
  owned.progs = calloc((size_t)S, sizeof *owned.progs);
  owned.prog_len = calloc((size_t)S, sizeof *owned.prog_len);
  for (int k = 0; !rc && k < S; k++) {
    owned.progs[k] = calloc((size_t)streams[k].n + 1, sizeof(cg_instr));
    owned.prog_len[k] = streams[k].n;
    for (int i = 0; i < streams[k].n; i++)
      owned.progs[k][i] = (cg_instr){opcode[streams[k].v[i].op], streams[k].v[i].mb < 0 ? 0 : streams[k].v[i].mb};
  }
  pass_streams_free(streams, S);
  free(streams);
  cp->programs = (const cg_instr *const *)owned.progs;
  cp->program_len = owned.prog_len;
  return rc;
}

/* A step before the plan failed: during the default micro-batch count's search this
 * count is given up (the next one is tried; the chosen one is compiled again with its
 * messages shown), otherwise pipecc stops. */
#define SEARCH_FAIL()                                                                                       \
  do {                                                                                                      \
    if (m_search) {                                                                                         \
      snprintf(why_buf, sizeof why_buf, "the model does not compile at %d micro-batches (-m %d shows why)", \
               microbatches, microbatches);                                                                 \
      goto one_microbatch;                                                                                  \
    }                                                                                                       \
    return 2;                                                                                               \
  } while (0)

int main(int argc, char **argv) {
  const char *model = NULL, *emit = NULL, *out_dir = NULL, *target = "cpu", *device_name = NULL;
  const char *profile_path = NULL, *link_name = NULL, *inter_link_name = NULL;
  const char *dumps[16];
  int n_dumps = 0, time_passes = 0, g_devices = 1, microbatches = 0, plan_only = 0, emit_only = 0, jobs = 0;
  const char *cuda_arch = getenv("PIPECC_CUDA_ARCH");
  if (!cuda_arch || !*cuda_arch) cuda_arch = "80;90";
  int no_tf32 = 0, no_replicate = 0, hosts = 0, gpus_per_host = 0, train = 0, profile_run = 0, m_auto = 0, m_max = 0;
  int no_fuse = 0, target_given = 0, winograd = -1, layout_nchw = 0, layout_all = 0;
  double intra_bw = -1, intra_lat = -1, inter_bw = -1, inter_lat = -1;
  uint64_t mem_limit = 0;
  pass_schedule_kind schedule = PASS_SCHED_1F1B;
  static pass_opts opts; /* static: free_owned reads it after main returns */
  pass_train_opts topts; /* ---- training (passes/train/autodiff.h) ---- */
  pass_train_opts_default(&topts);
  int train_step = 0; /* --train-step: one step as a function */
  pass_train_info tinfo;
  memset(&tinfo, 0, sizeof tinfo);
  opts.shapes = calloc((size_t)argc, sizeof *opts.shapes);
  opts.dims = calloc((size_t)argc, sizeof *opts.dims);
  opts.seqs = calloc((size_t)argc, sizeof *opts.seqs);
  opts.nones = calloc((size_t)argc, sizeof *opts.nones);
  opts.consts = calloc((size_t)argc, sizeof *opts.consts);
  owned.opts = &opts;
  atexit(free_owned);

  /* the command line, for the header of every emitted file */
  size_t cl_len = 1;
  for (int i = 0; i < argc; i++) cl_len += strlen(argv[i]) + 1;
  char *cmdline = owned.cmdline = calloc(1, cl_len);
  for (int i = 0; i < argc; i++) {
    if (i) strcat(cmdline, " ");
    strcat(cmdline, argv[i]);
  }

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define NEXT()                                                         \
  ({                                                                   \
    if (i + 1 >= argc) return cli_error("option %s needs a value", a); \
    argv[++i];                                                         \
  })
#define IS(x) (!strcmp(a, x))
    if (IS("-h") || IS("--help")) {
      usage(stdout);
      return 0;
    } else if (IS("--version")) {
      printf("pipecc %s\n", PIPECC_VERSION);
      return 0;
    } else if (IS("--shape") || !strncmp(a, "--shape=", 8)) {
      const char *v = a[7] == '=' ? a + 8 : NEXT();
      if (parse_shape(v, &opts.shapes[opts.n_shapes])) return cli_error("bad --shape '%s': expected NAME:AxBxC", v);
      opts.n_shapes++;
    } else if (IS("--const") || !strncmp(a, "--const=", 8)) {
      const char *v = a[7] == '=' ? a + 8 : NEXT();
      if (parse_const(v, &opts.consts[opts.n_consts++]))
        return cli_error("bad --const '%s': expected NAME=VALUE or NAME=V1,V2,... (numbers)", v);
    } else if (IS("--seq") || !strncmp(a, "--seq=", 6)) {
      const char *v = a[5] == '=' ? a + 6 : NEXT();
      if (parse_dim(v, &opts.seqs[opts.n_seqs])) return cli_error("bad --seq '%s': expected NAME=LENGTH", v);
      opts.n_seqs++;
    } else if (IS("--none") || !strncmp(a, "--none=", 7)) {
      const char *v = a[6] == '=' ? a + 7 : NEXT();
      if (!*v) return cli_error("bad --none '%s': expected the name of an optional graph input", v);
      opts.nones[opts.n_nones++] = v;
    } else if (IS("-d") || IS("--dim") || IS("-D")) {
      const char *v = NEXT();
      if (strchr(v, '=')) {
        if (parse_dim(v, &opts.dims[opts.n_dims])) return cli_error("bad -d '%s': expected DIM=VALUE", v);
        opts.n_dims++;
      } else {
        if (!pass_find(v))
          return cli_error("-d %s: no such pass (bind, fold, shape, einsum, quant, lower, widen) and not DIM=VALUE", v);
        if (n_dumps < 16) dumps[n_dumps++] = v;
      }
    } else if (!strncmp(a, "--emit=", 7) || IS("--emit")) {
      emit = a[6] == '=' ? a + 7 : NEXT();
      if (strcmp(emit, "ir") && strcmp(emit, "ir-json")) return cli_error("unknown --emit '%s' (ir, ir-json)", emit);
    } else if (IS("-o") || IS("--out")) {
      out_dir = NEXT();
    } else if (IS("-g") || IS("--gpus") || IS("--devices")) {
      const char *v = NEXT();
      if (parse_pos_int(v, &g_devices)) return cli_error("bad -g '%s': expected a number of devices >= 1", v);
    } else if (IS("-m") || IS("--microbatches")) {
      const char *v = NEXT();
      if (!strcmp(v, "auto")) m_auto = 1, m_max = 0, microbatches = 0;     /* the search, on either target */
      else if (!strcmp(v, "max")) m_max = 1, m_auto = 0, microbatches = 0; /* the largest count, on either */
      else if (parse_pos_int(v, &microbatches))
        return cli_error("bad --microbatches '%s' (a count >= 1, auto or max)", v);
    } else if (IS("--schedule")) {
      const char *v = NEXT();
      if (!strcmp(v, "gpipe")) schedule = PASS_SCHED_GPIPE;
      else if (!strcmp(v, "1f1b")) schedule = PASS_SCHED_1F1B;
      else return cli_error("unknown --schedule '%s' (gpipe, 1f1b)", v);
    } else if (IS("--device")) {
      device_name = NEXT();
      if (!pass_device_find(device_name))
        return cli_error("unknown --device '%s' (h100, h200, a100, v100, cpu)", device_name);
    } else if (IS("--profile")) {
      profile_path = NEXT();
    } else if (IS("--topology")) {
      const char *v = NEXT();
      if (sscanf(v, "%dx%d", &hosts, &gpus_per_host) != 2 || hosts < 1 || gpus_per_host < 1)
        return cli_error("bad --topology '%s': expected HOSTSxGPUS, e.g. 2x8", v);
    } else if (IS("--link")) {
      link_name = NEXT();
      if (!pass_link_find(link_name)) return cli_error("unknown --link '%s'", link_name);
    } else if (IS("--inter-link")) {
      inter_link_name = NEXT();
      if (!pass_link_find(inter_link_name)) return cli_error("unknown --inter-link '%s'", inter_link_name);
    } else if (IS("--link-bw") || IS("--intra-link-bw") || IS("--inter-link-bw")) {
      const char *v = NEXT();
      double x;
      if (parse_double(v, &x) || x <= 0) return cli_error("bad link bandwidth '%s' (GB/s)", v);
      if (!IS("--inter-link-bw")) intra_bw = x;
      if (!IS("--intra-link-bw")) inter_bw = x;
    } else if (IS("--link-latency-us") || IS("--intra-link-latency-us") || IS("--inter-link-latency-us")) {
      const char *v = NEXT();
      double x;
      if (parse_double(v, &x)) return cli_error("bad link latency '%s' (microseconds)", v);
      if (!IS("--inter-link-latency-us")) intra_lat = x;
      if (!IS("--intra-link-latency-us")) inter_lat = x;
    } else if (IS("--memory-limit")) {
      const char *v = NEXT();
      if (parse_bytes(v, &mem_limit)) return cli_error("bad --memory-limit '%s' (e.g. 16G)", v);
    } else if (IS("--no-replicate")) {
      no_replicate = 1;
    } else if (IS("--no-fuse")) {
      no_fuse = 1;
    } else if (IS("--layout")) {
      const char *v = NEXT();
      if (strcmp(v, "nhwc") && strcmp(v, "nhwc-all") && strcmp(v, "nchw"))
        return cli_error("bad --layout '%s' (nhwc, nhwc-all or nchw)", v);
      layout_nchw = !strcmp(v, "nchw");
      layout_all = !strcmp(v, "nhwc-all");
    } else if (IS("--winograd")) {
      const char *v = NEXT();
      if (strcmp(v, "auto") && strcmp(v, "0") && strcmp(v, "2") && strcmp(v, "4"))
        return cli_error("bad --winograd '%s' (auto, 0, 2 or 4)", v);
      winograd = strcmp(v, "auto") ? atoi(v) : -1;
    } else if (IS("--train")) {
      train = 1;
      /* ---- training block (passes/train/autodiff.h) ---- */
    } else if (IS("--train-step")) {
      train = train_step = 1;
    } else if (IS("--loss") || IS("--labels") || IS("--optimizer")) {
      const char *v = NEXT();
      if (IS("--loss")) topts.loss = v;
      else if (IS("--labels")) topts.labels = v;
      else if (strcmp(v, "sgd") && strcmp(v, "adam") && strcmp(v, "adamw"))
        return cli_error("unknown --optimizer '%s' (sgd, adam, adamw)", v);
      else topts.optimizer = v;
    } else if (IS("--nesterov")) {
      topts.nesterov = 1;
    } else if (IS("--recompute") || IS("--recompute=full")) {
      topts.recompute = PASS_RECOMPUTE_FULL;
    } else if (IS("--recompute=selective")) {
      topts.recompute = PASS_RECOMPUTE_SELECTIVE;
    } else if (IS("--recompute=auto")) {
      topts.recompute = PASS_RECOMPUTE_AUTO;
    } else if (!strncmp(a, "--recompute=", 12)) {
      return cli_error("unknown --recompute mode '%s' (full, selective, auto)", a + 12);
    } else if (IS("--lr") || IS("--momentum") || IS("--weight-decay") || IS("--beta1") || IS("--beta2") ||
               IS("--eps")) {
      const char *v = NEXT();
      double x;
      if (parse_double(v, &x)) return cli_error("bad value '%s' (a number >= 0)", v);
      *(IS("--lr")             ? &topts.lr
        : IS("--momentum")     ? &topts.momentum
        : IS("--weight-decay") ? &topts.weight_decay
        : IS("--beta1")        ? &topts.beta1
        : IS("--beta2")        ? &topts.beta2
                               : &topts.eps) = x;
      /* ---- end of the training block ---- */
    } else if (IS("--no-tf32")) {
      no_tf32 = 1;
    } else if (IS("--cuda-arch")) {
      cuda_arch = NEXT();
    } else if (IS("--plan-only")) {
      plan_only = 1;
    } else if (IS("--target")) {
      target = NEXT();
      target_given = 1;
      if (strcmp(target, "cpu") && strcmp(target, "cuda"))
        return cli_error("unknown --target '%s' (cpu, cuda)", target);
    } else if (IS("--profile-run")) {
      profile_run = 1; /* a one-stage build with the per-node profiler (DIR/profile) */
    } else if (IS("--emit-only")) {
      emit_only = 1;
    } else if (IS("-j") || IS("--jobs")) {
      const char *v = NEXT();
      if (parse_pos_int(v, &jobs)) return cli_error("bad --jobs '%s'", v);
    } else if (IS("--time-passes")) {
      time_passes = 1;
    } else if (IS("-v") || IS("--verbose")) {
      opts.verbose = 1;
    } else if (a[0] == '-' && a[1]) {
      return cli_error("unknown option '%s'", a);
    } else {
      if (model) return cli_error("more than one model given ('%s')", a);
      model = a;
    }
#undef IS
  }
  if (!model) {
    usage(stderr);
    return 2;
  }
  if (profile_run && g_devices != 1) return cli_error("%s builds one stage (no -g N)", "--profile-run");
  if (profile_run && !target_given) target = "cuda"; /* the GPU profiler unless --target cpu */
  int want_plan = !emit && (out_dir || plan_only || g_devices > 1);
  if (plan_only && !out_dir) return cli_error("%s needs -o DIR", "--plan-only");
  if (want_plan && !out_dir) return cli_error("%s", "planning and code generation need -o DIR");
  if (hosts && hosts * gpus_per_host < g_devices) {
    fprintf(stderr, "pipecc: --topology %dx%d has %d devices, fewer than -g %d\n", hosts, gpus_per_host,
            hosts * gpus_per_host, g_devices);
    return 2;
  }
  if (!valid_cuda_arch(cuda_arch)) /* from --cuda-arch or PIPECC_CUDA_ARCH */
    return cli_error("bad --cuda-arch / PIPECC_CUDA_ARCH '%s' (SM versions such as 90 or 80;90)", cuda_arch);
  opts.training = train;
  topts.verbose = opts.verbose;
  train_step = train && train_step;   /* --emit=ir: --train prints the model with its loss (what the planner
                                       * splits), --train-step the step function */
  if (train_step && microbatches > 1) /* the step function is one batch */
    return cli_error("%s: the training step function is compiled for one micro-batch (-m 1)", "--train-step");
  if (train_step) microbatches = 1;
  if (train && !train_step && profile_run)
    return cli_error("%s: profile the forward model (without --train)", "--profile-run");
  if (topts.recompute && (!train || train_step))
    return cli_error("%s: re-materialisation is for pipelined training programs (--train)",
                     topts.recompute == PASS_RECOMPUTE_SELECTIVE ? "--recompute=selective"
                     : topts.recompute == PASS_RECOMPUTE_AUTO    ? "--recompute=auto"
                                                                 : "--recompute");
  int train_prog = train && !train_step; /* the pipelined training program */

  /* The default micro-batch count is on trial: a model that does not split into it (a
   * scalar output, constants that fix the batch size, a node that works across the batch)
   * is compiled again for one micro-batch, its messages of the trial dropped. */
  int trial = 0;
  char why_buf[256]; /* why, for the note */
  /* cuda: the default micro-batch count is searched. Every divisor of the batch up to
   * 4*g is compiled as far as the plan (messages held, then dropped), and the count whose
   * plan the cost model predicts fastest is compiled for real: a GPU kernel on a small
   * micro-batch wastes most of the device (the model's per-kernel cost), so the largest
   * count is often not the fastest (ResNet-50, batch 32, -g 4 on H200s: 16 micro-batches
   * of 2 images predict 1.33 ms a batch, 4 of 8 images 0.57). The cpu target keeps the
   * largest count: its per-node cost is small against a core's work. */
  int m_search = 0, cand[64], n_cand = 0, cand_i = 0;
  double cand_ms[64];
  char cand_why[256] = ""; /* why the largest count that failed did */
  if (0) {
  one_microbatch:
    ir_diag_release(0);
    if (m_search) { /* this count does not compile: the next one */
      cand_ms[cand_i] = -1;
      if (!*cand_why) snprintf(cand_why, sizeof cand_why, "%s", why_buf);
      goto next_candidate;
    }
    fprintf(stderr, "%s: note: %s; compiling for one micro-batch (-m 1)\n", model, why_buf);
    ir_graph_free(owned.g);
    ir_graph_free(owned.g_full);
    owned.g = owned.g_full = NULL;
    microbatches = 1;
    trial = 0;
  }
  if (0) {
  next_candidate: /* the search's next count, or its choice compiled for real */
    if (owned.pl) pass_planned_free(owned.pl);
    owned.pl = NULL;
    ir_graph_free(owned.g);
    ir_graph_free(owned.g_full);
    owned.g = owned.g_full = NULL;
    if (++cand_i < n_cand) {
      microbatches = cand[cand_i];
      trial = 1;
      ir_diag_hold();
    } else {
      int best = -1, n_ok = 0;
      for (int k = 0; k < n_cand; k++)
        if (cand_ms[k] >= 0) {
          n_ok++;
          if (best < 0 || cand_ms[k] < cand_ms[best]) best = k; /* ties: the larger count */
        }
      m_search = 0;
      trial = 0;
      microbatches = best < 0 ? 1 : cand[best];
      if (microbatches == 1 && n_ok <= 1 && *cand_why) { /* no count above 1 compiles */
        fprintf(stderr, "%s: note: %s; compiling for one micro-batch (-m 1)\n", model, cand_why);
        n_cand = 0; /* nothing to report in plan.json */
      } else {
        char line[1024];
        int o = snprintf(line, sizeof line, "pipecc: %d micro-batch%s (predicted %.3f ms a batch; ", microbatches,
                         microbatches > 1 ? "es" : "", cand_ms[best]);
        for (int k = 0, first = 1; k < n_cand && o < (int)sizeof line - 64; k++) {
          if (k == best) continue;
          if (cand_ms[k] >= 0)
            o += snprintf(line + o, sizeof line - (size_t)o, "%s%d: %.3f", first ? "" : ", ", cand[k], cand_ms[k]);
          else
            o += snprintf(line + o, sizeof line - (size_t)o, "%s%d: no plan (-m %d shows why)", first ? "" : ", ",
                          cand[k], cand[k]);
          first = 0;
        }
        fprintf(stderr, "%s; -m M sets it)\n", line);
      }
    }
  }
  double t0 = now_ms();
  ir_graph *g = owned.g = onnx_load_file(model);
  double t1 = now_ms();
  if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms\n", "load", t1 - t0);
  if (!g) return 2;

  for (const pass_info *p = pass_frontend_pipeline; p->name; p++) {
    double s = now_ms();
    int rc = p->fn(g, &opts);
    double e = now_ms();
    if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms\n", p->name, e - s);
    if (rc || g->n_errors) {
      if (trial) {
        snprintf(why_buf, sizeof why_buf,
                 "the model does not compile at a micro-batch of the default %d (-m %d shows why)", microbatches,
                 microbatches);
        goto one_microbatch;
      }
      return 2;
    }
    /* Compile for one micro-batch: split dim 0 of every graph input after binding. */
    if (!strcmp(p->name, "bind") && want_plan) {
      int64_t batch = ir_graph_batch(g, 1);
      /* a scalar output declared in the model: one micro-batch from the start (one found by
       * shape inference restarts the frontend below; declared, a model whose constants fix
       * the batch size gets there without failing at a micro-batch first) */
      int scalar_out = 0;
      for (int k = 0; !train && k < g->n_outputs; k++) scalar_out |= g->values[g->outputs[k]].shape.rank == 0;
      if (!microbatches) {
        microbatches = 1;
        for (int m = 4 * g_devices; m >= 1 && g_devices > 1 && !scalar_out; m--)
          if (batch % m == 0) {
            microbatches = m;
            break;
          }
        if (microbatches > 1) {
          trial = 1;
          ir_diag_hold();
          /* cuda: search the divisors (above); not with a measured profile (its times are
           * of one micro-batch size) or with -d dumps */
          if ((m_auto || (!m_max && !strcmp(target, "cuda"))) && !profile_path && !n_dumps) {
            n_cand = 0;
            for (int m = microbatches; m >= 1 && n_cand < (int)(sizeof cand / sizeof cand[0]); m--)
              if (batch % m == 0) cand[n_cand++] = m;
            cand_i = 0;
            m_search = n_cand > 1;
          }
        }
      }
      for (int k = 0; k < g->n_inputs; k++) {
        ir_value *v = &g->values[g->inputs[k]];
        char nm[96];
        if (v->shape.rank == 0 && train) {
          fprintf(stderr,
                  "%s: graph input '%s' is a scalar: training splits every graph input along dim 0 (the batch), "
                  "so graph inputs need rank >= 1 (export it with shape [1])\n",
                  g->path, ir_printable(v->name, 60, nm, sizeof nm));
          return 2;
        }
        if (v->shape.rank == 0) continue; /* inference: the same scalar for every micro-batch */
        if (v->shape.dims[0] % microbatches && trial) {
          snprintf(why_buf, sizeof why_buf, "graph input '%s': batch (dim 0) %lld is not divisible by the default %d",
                   ir_printable(v->name, 60, nm, sizeof nm), (long long)v->shape.dims[0], microbatches);
          goto one_microbatch;
        }
        if (v->shape.dims[0] % microbatches) {
          fprintf(stderr, "%s: graph input '%s': batch (dim 0) %lld is not divisible by %d micro-batches\n", g->path,
                  ir_printable(v->name, 60, nm, sizeof nm), (long long)v->shape.dims[0], microbatches);
          return 2;
        }
        v->shape.dims[0] /= microbatches;
      }
      /* the same model at the whole batch, to tell which axis of each value carries the
       * batch (passes/batch.h) */
      if (microbatches > 1) {
        double s0 = now_ms();
        if (!(owned.g_full = whole_batch(model, &opts))) return 2;
        g->batch_full = owned.g_full;
        g->microbatches = microbatches;
        g->diag_hint = PASS_BATCH_HINT;
        if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms\n", "batch-ref", now_ms() - s0);
      }
    }
    for (int k = 0; k < n_dumps; k++)
      if (!strcmp(dumps[k], p->name)) {
        fprintf(stdout, "# after %s\n", p->name);
        ir_print_text(stdout, g);
      }
  }

  /* inference: graph outputs join the micro-batches' (and streamed batches') results on
   * dim 0; a scalar has no dim 0, so it is one value per run, of one micro-batch */
  for (int k = 0; want_plan && !train && microbatches > 1 && k < g->n_outputs; k++) {
    const ir_value *v = &g->values[g->outputs[k]];
    char nm[96];
    if (v->shape.rank == 0 && trial) { /* the default: one micro-batch then */
      snprintf(why_buf, sizeof why_buf, "graph output '%s' is a scalar, one value per run",
               ir_printable(v->name, 60, nm, sizeof nm));
      goto one_microbatch;
    }
    if (v->shape.rank == 0) {
      fprintf(stderr,
              "%s: graph output '%s' is a scalar: pipelines join the micro-batches' graph outputs along dim 0 (the "
              "batch), which a scalar lacks: compile with -m 1\n",
              g->path, ir_printable(v->name, 60, nm, sizeof nm));
      return 2;
    }
  }

  if (g->batch_full) { /* every node commutes with splitting the batch (passes/batch.h) */
    g->diag_hint = NULL;
    if (pass_batch_check(g)) {
      if (trial) {
        snprintf(why_buf, sizeof why_buf,
                 "the default %d micro-batches would not add up to the batch (-m %d shows why)", microbatches,
                 microbatches);
        goto one_microbatch;
      }
      return 2;
    }
  }
  if (trial && !m_search) { /* the default micro-batch count holds: its messages are the model's */
    ir_diag_release(1);
    trial = 0;
  }

  if (train_step || train_prog) { /* ---- training: the step function, or the loss of the program ---- */
    double s = now_ms();
    int rc = train_step ? pass_autodiff(g, &topts) : pass_train_loss(g, &topts, &tinfo);
    if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms\n", train_step ? "autodiff" : "loss", now_ms() - s);
    if (rc || g->n_errors) {
      SEARCH_FAIL();
    }
    /* the loss and backward nodes compute in float too (passes/opt/widen.c) */
    if (pass_widen_half(g, &opts) || g->n_errors) SEARCH_FAIL();
  }

  /* inference: NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss nodes in ops every
   * target has (passes/lower/lower_loss.h; training lowers the one named by --loss itself) */
  if (!train_step && !train_prog && want_plan) {
    double s = now_ms();
    int nl = pass_lower_losses(g);
    if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d losses)\n", "losses", now_ms() - s, nl);
    if (nl < 0 || g->n_errors) SEARCH_FAIL();
  }

  if (!want_plan) {
    if (time_passes) fprintf(stderr, "pipecc: total           %8.2f ms\n", now_ms() - t0);
    if (emit && !strcmp(emit, "ir-json")) ir_print_json(stdout, g);
    else if (emit || !n_dumps) ir_print_text(stdout, g);
    return 0;
  }

  /* inference (both targets): layer normalisation written out in element-wise ops into
   * one LayerNormalization, and Add/Relu/Clip consumers into their Conv, before
   * planning, so a fused chain is one node in every plan and the bits cannot depend on
   * the stage count (passes/opt/fuse.h); the cpu target applies the epilogue to GEMM blocks
   * in cache, the cuda target in one kernel after cuDNN's convolution */
  if (!train_step && !train_prog && !no_fuse) {
    double s = now_ms();
    int nln = pass_fuse_layernorm(g);
    if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d chains)\n", "layernorm", now_ms() - s, nln);
    if (nln < 0 || g->n_errors) SEARCH_FAIL();
    s = now_ms();
    int nf = pass_fuse_conv(g);
    if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d chains)\n", "fuse", now_ms() - s, nf);
    if (nf < 0 || g->n_errors) SEARCH_FAIL();
    /* cpu: a 1x1 expansion computed block by block inside the depthwise Conv reading it,
     * for maps of 14 x 14 positions or more per channel (below, the 1x1 Convs run batched over images) */
    if (!strcmp(target, "cpu")) {
      s = now_ms();
      int ne = pass_fuse_expand_dw(g, 196);
      if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d pairs)\n", "expand_dw", now_ms() - s, ne);
      if (ne < 0 || g->n_errors) SEARCH_FAIL();
      s = now_ms();
      int nt = pass_fuse_matmul_transpose(g);
      if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d transposes)\n", "matmul_t", now_ms() - s, nt);
      if (nt < 0 || g->n_errors) SEARCH_FAIL();
    }
  }
  /* cuda inference: channels-last activations around the Convs cuDNN's tensor cores
   * take (passes/opt/layout.h) */
  if (!strcmp(target, "cuda") && !train_step && !train_prog && !layout_nchw) {
    double s = now_ms();
    int nl = pass_layout_nhwc(g, layout_all);
    if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d convs)\n", "layout", now_ms() - s, nl);
    if (nl < 0 || g->n_errors) SEARCH_FAIL();
  }
  /* cpu inference: 3x3 stride-1 Convs by Winograd, filters transformed here
   * (passes/opt/winograd.h) */
  if (!strcmp(target, "cpu") && !train_step && !train_prog && winograd) {
    double s = now_ms();
    int nw = pass_winograd(g, winograd);
    if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d convs)\n", "winograd", now_ms() - s, nw);
    if (nw < 0 || g->n_errors) SEARCH_FAIL();
  }

  /* cpu inference: a Gemm's constant B with transB stored transposed, for the direct
   * GEMM (passes/opt/pretranspose.h) */
  if (!strcmp(target, "cpu") && !train_step && !train_prog) {
    double s = now_ms();
    int np = pass_pretranspose(g, CG_C_DIRECT_K);
    if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d gemms)\n", "pretranspose", now_ms() - s, np);
    if (np < 0 || g->n_errors) SEARCH_FAIL();
  }

  /* a model whose outputs all folded to constants still gets a stage (one Identity) */
  if (pass_keep_one_node(g) < 0 || g->n_errors) SEARCH_FAIL();

  /* ---- plan ---- */
  const pass_device *dev = pass_device_find(device_name ? device_name : (!strcmp(target, "cpu") ? "cpu" : "h100"));
  pass_profile_opts prof = {dev, !no_tf32, profile_path};
  pass_plan_opts po;
  pass_plan_opts_default(&po, g_devices);
  po.microbatches = microbatches;
  po.training = train_prog; /* a training step function is planned as a function */
  po.recompute = train_prog ? topts.recompute : 0;
  /* optimizer state per weight byte: Adam's m and v, SGD's momentum buffer or none */
  if (train_prog)
    po.optimizer_state_factor = topts.optimizer && strncmp(topts.optimizer, "adam", 4) == 0 ? 2.0
                                : topts.momentum != 0                                       ? 1.0
                                                                                            : 0.0;
  po.no_replicate = no_replicate;
  po.schedule = schedule;
  const pass_link *intra = pass_link_find(link_name ? link_name : (!strcmp(target, "cpu") ? "shm" : "nvlink4"));
  const pass_link *inter = pass_link_find(inter_link_name ? inter_link_name : "ib-ndr");
  po.topo.hosts = hosts ? hosts : 1;
  po.topo.gpus_per_host = hosts ? gpus_per_host : g_devices;
  po.topo.intra_gbps = intra_bw > 0 ? intra_bw : intra->gbps;
  po.topo.intra_lat_ms = (intra_lat >= 0 ? intra_lat : intra->lat_us) / 1e3;
  po.topo.inter_gbps = inter_bw > 0 ? inter_bw : inter->gbps;
  po.topo.inter_lat_ms = (inter_lat >= 0 ? inter_lat : inter->lat_us) / 1e3;
  po.mem_limit = mem_limit ? mem_limit : (uint64_t)(dev->mem_gib * 1024 * 1024 * 1024);
  if (!m_search) { /* the search's predictions, once it has chosen */
    po.mb_search_n = n_cand;
    po.mb_search_m = cand;
    po.mb_search_ms = cand_ms;
  }
  static pass_planned pl;
  owned.pl = &pl;
  double tp = now_ms();
  if (pass_plan_graph(g, &prof, &po, &pl)) {
    SEARCH_FAIL();
  }
  if (m_search) { /* this count's prediction; its messages dropped */
    cand_ms[cand_i] = pl.plan.predicted_iteration_ms;
    ir_diag_release(0);
    goto next_candidate;
  }
  pl.plan.planner_ms = pl.antichain_partition_ms;
  if (time_passes)
    fprintf(stderr, "pipecc: pass %-10s %8.2f ms (antichain + partition %.2f ms)\n", "plan", now_ms() - tp,
            pl.antichain_partition_ms);
  if (mkdir_p(out_dir)) {
    fprintf(stderr, "pipecc: cannot create %s: %s\n", out_dir, strerror(errno));
    return 2;
  }
  plan_ctx pc = {g, &pl, &po, cmdline};
  if (write_file(out_dir, "plan.json", write_plan_json, &pc) || write_file(out_dir, "report.html", write_report, &pc))
    return 2;
  /* a training program prints its plan once autodiff has taken every node (an op
   * without a gradient is then the run's one line) */
  if (!train_prog || plan_only) print_plan_table(stderr, g, &pl, dev);
  int rc = 0;
  if (!plan_only) {
    /* ---- emit and build ---- */
    int *reps = owned.reps = calloc((size_t)pl.plan.n_stages, sizeof *reps);
    for (int s = 0; s < pl.plan.n_stages; s++) reps[s] = pl.plan.stages[s].replicas;
    cg_plan cp = {pl.plan.n_stages,
                  pl.node_stage,
                  reps,
                  NULL,
                  NULL,
                  microbatches,
                  pl.plan.bubble_fraction,
                  schedule == PASS_SCHED_GPIPE ? "gpipe" : "1f1b",
                  NULL};
    /* ---- codegen/c block: PIPECC_SPLIT=even replaces the plan's stages by exactly g
     * contiguous stages of about equal FLOPs (cg_fallback_split), one replica each. The
     * cpu tests use it to check that results are bitwise equal for every stage count. */
    const char *split_env = getenv("PIPECC_SPLIT");
    if (split_env && !strcmp(split_env, "even")) {
      int *even_stage = owned.even_stage = calloc((size_t)g->n_nodes + 1, sizeof *even_stage);
      int *even_reps = owned.even_reps = calloc((size_t)g_devices, sizeof *even_reps);
      for (int s = 0; s < g_devices; s++) even_reps[s] = 1;
      if (cg_fallback_split(g, g_devices, even_stage)) {
        fprintf(stderr, "pipecc: PIPECC_SPLIT=even: fewer nodes than %d stages; keeping the plan\n", g_devices);
      } else {
        cp.n_stages = g_devices;
        cp.node_stage = even_stage;
        cp.replicas = even_reps;
        cp.predicted_bubble = 0;
      }
    }
    /* ---- end of the codegen/c block ---- */
    cg_train ct = {tinfo.loss_sum, tinfo.classify, tinfo.labels, topts.optimizer};
    if (train_prog) { /* ---- training: backward and update phases of every stage ---- */
      for (int i = 0; i < g->n_nodes; i++) g->nodes[i].stage = cp.node_stage[i];
      /* --recompute=auto: the plan's mode per stage (PIPECC_SPLIT's stages: full) */
      int *srm = owned.stage_recompute = calloc((size_t)pl.plan.n_stages + 1, sizeof *srm);
      for (int s = 0; s < pl.plan.n_stages; s++) srm[s] = pl.plan.stages[s].recompute;
      topts.stage_recompute = cp.node_stage == pl.node_stage ? srm : NULL;
      double ts = now_ms();
      if (pass_train_program(g, &topts, microbatches, &tinfo) || g->n_errors) return 2;
      if (time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms\n", "train", now_ms() - ts);
      print_plan_table(stderr, g, &pl, dev);
      int *ns = owned.train_stage = calloc((size_t)g->n_nodes + 1, sizeof *ns); /* the nodes moved */
      for (int i = 0; i < g->n_nodes; i++) ns[i] = g->nodes[i].stage;
      cp.node_stage = ns;
      cp.train = &ct;
      if (training_programs(schedule, &cp)) return 3;
    }
    cg_options co = {cmdline, model, emit_only, jobs, opts.verbose, no_tf32, cuda_arch};
    if (!strcmp(target, "cpu")) {
      if (cg_c_emit(g, &cp, &co, out_dir)) rc = 2;
      else if (!emit_only && cg_build(out_dir, &co)) rc = 2;
      else if (profile_run && !emit_only && cg_build_profile(out_dir, &co)) rc = 2;
      else if (profile_run && !emit_only)
        fprintf(stderr,
                "pipecc: profiler built; on an idle core run\n  taskset -c 0 %s/profile --profile-out profile.json\n"
                "then plan with measured costs: pipecc %s --profile profile.json ...\n",
                out_dir, model);
    } else {
      /* ---- codegen/cuda block ---- */
      if (cg_cuda_emit(g, &cp, &co, out_dir)) rc = 2;
      else if (!emit_only && cg_cuda_build_dir(out_dir, &co, profile_run ? "pipeline profile" : "pipeline")) rc = 2;
      else if (profile_run)
        fprintf(stderr,
                "pipecc: profiler built; on the target GPU run\n  %s/profile --profile-out profile.json\n"
                "then plan with measured costs: pipecc %s --profile profile.json ...\n",
                out_dir, model);
    }
  }
  if (!rc && !plan_only && !emit_only && !profile_run) {
    if (train_prog)
      fprintf(stderr,
              "pipecc: built %s/pipeline; train it with\n  %s/pipeline train --data X.npy%s --epochs N "
              "[--save W.npz]\n",
              out_dir, out_dir, tinfo.labels ? " --labels Y.npy" : "");
    else
      fprintf(stderr, "pipecc: built %s/pipeline; run it with\n  %s/pipeline --input X.npy --output Y.npy\n", out_dir,
              out_dir);
  }
  if (time_passes) fprintf(stderr, "pipecc: total           %8.2f ms\n", now_ms() - t0);
  return rc;
}
