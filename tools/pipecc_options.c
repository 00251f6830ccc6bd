/* tools/pipecc_options.c - pipecc's command line: the usage text, the parser and the
 * checks across options (see pipecc_options.h). */
#include "tools/pipecc_options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pipecc_usage(FILE *f) {
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
      "  --schedule S           gpipe | 1f1b (default 1f1b); with --train also the asynchronous\n"
      "                         pipedream | async | spectrain | 2bw (docs/training.md)\n"
      "  --device NAME          cost model device: h100, h200, a100, v100, cpu, or a device file\n"
      "                         FILE.json (pipecc --calibrate's); default: cpu for --target cpu (this\n"
      "                         machine's device file when there is one), h100 for --target cuda\n"
      "  --calibrate[=FILE]     measure the cpu target's kernels on this machine (a few seconds) and\n"
      "                         write the device file the cost model then uses: FILE, else\n"
      "                         $PIPECC_DEVICE_FILE, else $XDG_CONFIG_HOME/pipecc/device.json (default\n"
      "                         ~/.config/pipecc/device.json); PIPECC_DEVICE_FILE=none ignores it\n"
      "  --print-device NAME    print built-in device NAME as a device file (to edit for --device)\n"
      "  --profile FILE.json    measured per-node times replace the cost model\n"
      "  --cost-model           plan with the analytical cost model (also PIPECC_COSTS=model); by\n"
      "                         default a cpu plan over several cores profiles the model on this\n"
      "                         machine first, at the plan's micro-batch size (cached in\n"
      "                         $XDG_CACHE_HOME/pipecc/profiles, default ~/.cache/pipecc/profiles;\n"
      "                         docs/usage.md)\n"
      "  --topology HxG         H hosts with G devices each (default: one host with g devices)\n"
      "  --link NAME            link between devices of a host: nvlink4 nvlink3 pcie4 pcie5 shm ...\n"
      "  --inter-link NAME      link between hosts: ib-ndr ib-hdr eth100 ...\n"
      "  --link-bw GBPS         bandwidth of every link (GB/s); --intra-link-bw / --inter-link-bw\n"
      "  --link-latency-us US   latency of every link; --intra-link-latency-us / --inter-link-latency-us\n"
      "  --memory-limit BYTES   per-device memory limit (K/M/G suffixes; default: the device's)\n"
      "  --no-replicate         one device per stage (no data-parallel stage replicas)\n"
      "  --train                compile a pipelined training program: forward, backward and optimizer\n"
      "                         step of every stage, run by `DIR/pipeline train` (docs/training.md)\n"
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
      "                         4 where a micro-batch has 32 tiles of 4x4, else 2 where it has\n"
      "                         32 of 2x2, else im2col), 2, 4 (4x fewer FLOPs than im2col,\n"
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
      "  --split even           replace the plan's stages by exactly g stages of about equal FLOPs, one\n"
      "                         device each (the tests' check that results do not depend on the stage\n"
      "                         count; also PIPECC_SPLIT=even)\n"
      "  -v, --verbose          more messages (the compilers' commands and output too)\n"
      "  -q, --quiet            print nothing but errors (no plan table, no progress)\n"
      "  -h, --help             this help\n"
      "  --version              print the version\n"
      "  --list-ops             print every supported op and how the cpu and cuda targets and\n"
      "                         training handle it, tab-separated (docs/supported.md)\n"
      "\n"
      "Exit status: 0 success, 2 error in the model or the command line.\n",
      f);
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

/* The option being parsed. The group parsers below return OPT_TAKEN, OPT_NOT_MINE, or
 * an exit status (0: --help or --version; 2: a bad option, said). */
typedef struct {
  int argc;
  char **argv;
  int i;
  const char *a; /* argv[i] */
} cursor;

enum { OPT_TAKEN = -1, OPT_NOT_MINE = -2 };

#define NEXT()                                                                  \
  ({                                                                            \
    if (c->i + 1 >= c->argc) return cli_error("option %s needs a value", c->a); \
    c->argv[++c->i];                                                            \
  })
#define IS(x) (!strcmp(c->a, x))

/* --shape, --const, --seq, --none, -d DIM=VALUE and -d PASS */
static int input_option(cursor *c, pipecc_options *o) {
  const char *a = c->a;
  pass_opts *p = &o->pass;
  if (IS("--shape") || !strncmp(a, "--shape=", 8)) {
    const char *v = a[7] == '=' ? a + 8 : NEXT();
    if (parse_shape(v, &p->shapes[p->n_shapes])) return cli_error("bad --shape '%s': expected NAME:AxBxC", v);
    p->n_shapes++;
  } else if (IS("--const") || !strncmp(a, "--const=", 8)) {
    const char *v = a[7] == '=' ? a + 8 : NEXT();
    if (parse_const(v, &p->consts[p->n_consts++]))
      return cli_error("bad --const '%s': expected NAME=VALUE or NAME=V1,V2,... (numbers)", v);
  } else if (IS("--seq") || !strncmp(a, "--seq=", 6)) {
    const char *v = a[5] == '=' ? a + 6 : NEXT();
    if (parse_dim(v, &p->seqs[p->n_seqs])) return cli_error("bad --seq '%s': expected NAME=LENGTH", v);
    p->n_seqs++;
  } else if (IS("--none") || !strncmp(a, "--none=", 7)) {
    const char *v = a[6] == '=' ? a + 7 : NEXT();
    if (!*v) return cli_error("bad --none '%s': expected the name of an optional graph input", v);
    p->nones[p->n_nones++] = v;
  } else if (IS("-d") || IS("--dim") || IS("-D")) {
    const char *v = NEXT();
    if (strchr(v, '=')) {
      if (parse_dim(v, &p->dims[p->n_dims])) return cli_error("bad -d '%s': expected DIM=VALUE", v);
      p->n_dims++;
    } else {
      if (!pass_find(v))
        return cli_error("-d %s: no such pass (bind, fold, shape, einsum, quant, lower, widen) and not DIM=VALUE", v);
      if (o->n_dumps < PIPECC_MAX_DUMPS) o->dumps[o->n_dumps++] = v;
    }
  } else {
    return OPT_NOT_MINE;
  }
  return OPT_TAKEN;
}

/* --link-bw, --link-latency-us and their intra- and inter-host forms */
static int link_option(cursor *c, pipecc_options *o) {
  if (IS("--link-bw") || IS("--intra-link-bw") || IS("--inter-link-bw")) {
    const char *v = NEXT();
    double x;
    if (parse_double(v, &x) || x <= 0) return cli_error("bad link bandwidth '%s' (GB/s)", v);
    if (!IS("--inter-link-bw")) o->intra_bw = x;
    if (!IS("--intra-link-bw")) o->inter_bw = x;
  } else if (IS("--link-latency-us") || IS("--intra-link-latency-us") || IS("--inter-link-latency-us")) {
    const char *v = NEXT();
    double x;
    if (parse_double(v, &x)) return cli_error("bad link latency '%s' (microseconds)", v);
    if (!IS("--inter-link-latency-us")) o->intra_lat = x;
    if (!IS("--intra-link-latency-us")) o->inter_lat = x;
  } else {
    return OPT_NOT_MINE;
  }
  return OPT_TAKEN;
}

/* -g, -m, --schedule, --device, --profile, --topology, --link, --inter-link,
 * --memory-limit, --no-replicate, --no-tf32 */
static int planning_option(cursor *c, pipecc_options *o) {
  if (IS("-g") || IS("--gpus") || IS("--devices")) {
    const char *v = NEXT();
    if (parse_pos_int(v, &o->devices)) return cli_error("bad -g '%s': expected a number of devices >= 1", v);
  } else if (IS("-m") || IS("--microbatches")) {
    const char *v = NEXT();
    if (!strcmp(v, "auto")) o->m_auto = 1, o->m_max = 0, o->microbatches = 0;     /* the search, on either target */
    else if (!strcmp(v, "max")) o->m_max = 1, o->m_auto = 0, o->microbatches = 0; /* the largest count, on either */
    else if (parse_pos_int(v, &o->microbatches))
      return cli_error("bad --microbatches '%s' (a count >= 1, auto or max)", v);
  } else if (IS("--schedule")) {
    const char *v = NEXT();
    if (!strcmp(v, "gpipe")) o->schedule = PASS_SCHED_GPIPE;
    else if (!strcmp(v, "1f1b")) o->schedule = PASS_SCHED_1F1B;
    else if (!strcmp(v, "pipedream") || !strcmp(v, "async") || !strcmp(v, "spectrain") || !strcmp(v, "2bw"))
      o->schedule = PASS_SCHED_1F1B, o->async_schedule = v; /* planned as 1F1B, run without a flush */
    else return cli_error("unknown --schedule '%s' (gpipe, 1f1b, pipedream, async, spectrain, 2bw)", v);
    if (o->schedule == PASS_SCHED_GPIPE || !strcmp(v, "1f1b")) o->async_schedule = NULL;
  } else if (IS("--device")) {
    o->device_name = NEXT();
    size_t k = strlen(o->device_name);
    int file = strchr(o->device_name, '/') || (k > 5 && !strcmp(o->device_name + k - 5, ".json"));
    if (!file && !pass_device_find(o->device_name))
      return cli_error("unknown --device '%s' (h100, h200, a100, v100, cpu, or a device file FILE.json)",
                       o->device_name);
  } else if (IS("--profile")) {
    o->profile_path = NEXT();
  } else if (IS("--topology")) {
    const char *v = NEXT();
    if (sscanf(v, "%dx%d", &o->hosts, &o->gpus_per_host) != 2 || o->hosts < 1 || o->gpus_per_host < 1)
      return cli_error("bad --topology '%s': expected HOSTSxGPUS, e.g. 2x8", v);
  } else if (IS("--link")) {
    o->link_name = NEXT();
    if (!pass_link_find(o->link_name)) return cli_error("unknown --link '%s'", o->link_name);
  } else if (IS("--inter-link")) {
    o->inter_link_name = NEXT();
    if (!pass_link_find(o->inter_link_name)) return cli_error("unknown --inter-link '%s'", o->inter_link_name);
  } else if (IS("--memory-limit")) {
    const char *v = NEXT();
    if (parse_bytes(v, &o->mem_limit)) return cli_error("bad --memory-limit '%s' (e.g. 16G)", v);
  } else if (IS("--no-replicate")) {
    o->no_replicate = 1;
  } else if (IS("--cost-model")) {
    o->cost_model = 1;
  } else if (IS("--no-tf32")) {
    o->no_tf32 = 1;
  } else {
    return link_option(c, o);
  }
  return OPT_TAKEN;
}

/* --train, --train-step and the training program's options (passes/train/autodiff.h) */
static int training_option(cursor *c, pipecc_options *o) {
  pass_train_opts *t = &o->train_opts;
  if (IS("--train")) {
    o->train = 1;
  } else if (IS("--train-step")) {
    o->train = o->train_step = 1;
  } else if (IS("--loss") || IS("--labels") || IS("--optimizer")) {
    const char *v = NEXT();
    if (IS("--loss")) t->loss = v;
    else if (IS("--labels")) t->labels = v;
    else if (strcmp(v, "sgd") && strcmp(v, "adam") && strcmp(v, "adamw"))
      return cli_error("unknown --optimizer '%s' (sgd, adam, adamw)", v);
    else t->optimizer = v;
  } else if (IS("--nesterov")) {
    t->nesterov = 1;
  } else if (IS("--recompute") || IS("--recompute=full")) {
    t->recompute = PASS_RECOMPUTE_FULL;
  } else if (IS("--recompute=selective")) {
    t->recompute = PASS_RECOMPUTE_SELECTIVE;
  } else if (IS("--recompute=auto")) {
    t->recompute = PASS_RECOMPUTE_AUTO;
  } else if (!strncmp(c->a, "--recompute=", 12)) {
    return cli_error("unknown --recompute mode '%s' (full, selective, auto)", c->a + 12);
  } else if (IS("--lr") || IS("--momentum") || IS("--weight-decay") || IS("--beta1") || IS("--beta2") || IS("--eps")) {
    const char *v = NEXT();
    double x;
    if (parse_double(v, &x)) return cli_error("bad value '%s' (a number >= 0)", v);
    *(IS("--lr")             ? &t->lr
      : IS("--momentum")     ? &t->momentum
      : IS("--weight-decay") ? &t->weight_decay
      : IS("--beta1")        ? &t->beta1
      : IS("--beta2")        ? &t->beta2
                             : &t->eps) = x;
  } else {
    return OPT_NOT_MINE;
  }
  return OPT_TAKEN;
}

/* -o, --plan-only, --target, --emit-only, --emit=, --profile-run, --cuda-arch, -j,
 * --no-fuse, --layout, --winograd */
static int output_option(cursor *c, pipecc_options *o) {
  const char *a = c->a;
  if (IS("-o") || IS("--out")) {
    o->out_dir = NEXT();
  } else if (!strncmp(a, "--emit=", 7) || IS("--emit")) {
    o->emit = a[6] == '=' ? a + 7 : NEXT();
    if (strcmp(o->emit, "ir") && strcmp(o->emit, "ir-json"))
      return cli_error("unknown --emit '%s' (ir, ir-json)", o->emit);
  } else if (IS("--plan-only")) {
    o->plan_only = 1;
  } else if (IS("--target")) {
    o->target = NEXT();
    o->target_given = 1;
    if (strcmp(o->target, "cpu") && strcmp(o->target, "cuda"))
      return cli_error("unknown --target '%s' (cpu, cuda)", o->target);
  } else if (IS("--profile-run")) {
    o->profile_run = 1; /* a one-stage build with the per-node profiler (DIR/profile) */
  } else if (IS("--emit-only")) {
    o->emit_only = 1;
  } else if (IS("--cuda-arch")) {
    o->cuda_arch = NEXT();
  } else if (IS("-j") || IS("--jobs")) {
    const char *v = NEXT();
    if (parse_pos_int(v, &o->jobs)) return cli_error("bad --jobs '%s'", v);
  } else if (IS("--no-fuse")) {
    o->no_fuse = 1;
  } else if (IS("--layout")) {
    const char *v = NEXT();
    if (strcmp(v, "nhwc") && strcmp(v, "nhwc-all") && strcmp(v, "nchw"))
      return cli_error("bad --layout '%s' (nhwc, nhwc-all or nchw)", v);
    o->layout_nchw = !strcmp(v, "nchw");
    o->layout_all = !strcmp(v, "nhwc-all");
  } else if (IS("--winograd")) {
    const char *v = NEXT();
    if (strcmp(v, "auto") && strcmp(v, "0") && strcmp(v, "2") && strcmp(v, "4"))
      return cli_error("bad --winograd '%s' (auto, 0, 2 or 4)", v);
    o->winograd = strcmp(v, "auto") ? atoi(v) : -1;
  } else {
    return OPT_NOT_MINE;
  }
  return OPT_TAKEN;
}

/* --help, --version, --time-passes, -v, --split, and the model itself */
static int other_option(cursor *c, pipecc_options *o) {
  const char *a = c->a;
  if (IS("-h") || IS("--help")) {
    pipecc_usage(stdout);
    return 0;
  } else if (IS("--version")) {
    printf("pipecc %s\n", PIPECC_VERSION);
    return 0;
  } else if (IS("--list-ops")) {
    return pipecc_list_ops(stdout);
  } else if (IS("--calibrate") || !strncmp(a, "--calibrate=", 12)) {
    o->calibrate = a[11] == '=' ? a + 12 : "";
  } else if (IS("--print-device")) {
    const char *v = NEXT();
    const pass_device *d = pass_device_find(v);
    if (!d) return cli_error("unknown --print-device '%s' (h100, h200, a100, v100, cpu)", v);
    pass_device_write(stdout, d);
    return 0;
  } else if (IS("--time-passes")) {
    o->time_passes = 1;
  } else if (IS("-v") || IS("--verbose")) {
    o->pass.verbose = 1;
  } else if (IS("-q") || IS("--quiet")) {
    o->quiet = 1;
  } else if (IS("--split") || !strncmp(a, "--split=", 8)) {
    const char *v = a[7] == '=' ? a + 8 : NEXT();
    if (strcmp(v, "even")) return cli_error("unknown --split '%s' (even)", v);
    o->split_even = 1;
  } else if (a[0] == '-' && a[1]) {
    return cli_error("unknown option '%s'", a);
  } else {
    if (o->model) return cli_error("more than one model given ('%s')", a);
    o->model = a;
  }
  return OPT_TAKEN;
}

#undef IS
#undef NEXT

static void defaults(int argc, pipecc_options *o) {
  memset(o, 0, sizeof *o);
  o->devices = 1;
  o->schedule = PASS_SCHED_1F1B;
  o->intra_bw = o->intra_lat = o->inter_bw = o->inter_lat = -1;
  o->target = "cpu";
  o->winograd = -1;
  o->cuda_arch = getenv("PIPECC_CUDA_ARCH");
  if (!o->cuda_arch || !*o->cuda_arch) o->cuda_arch = "80;90";
  const char *split = getenv("PIPECC_SPLIT"); /* the test hook's environment form */
  o->split_even = split && !strcmp(split, "even");
  pass_train_opts_default(&o->train_opts);
  pass_opts *p = &o->pass;
  p->shapes = calloc((size_t)argc, sizeof *p->shapes);
  p->dims = calloc((size_t)argc, sizeof *p->dims);
  p->seqs = calloc((size_t)argc, sizeof *p->seqs);
  p->nones = calloc((size_t)argc, sizeof *p->nones);
  p->consts = calloc((size_t)argc, sizeof *p->consts);
}

static char *join_args(int argc, char **argv) {
  size_t len = 1;
  for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
  char *s = calloc(1, len);
  for (int i = 0; i < argc; i++) {
    if (i) strcat(s, " ");
    strcat(s, argv[i]);
  }
  return s;
}

/* What holds across options, and what follows from them. */
static int check(pipecc_options *o) {
  if (o->calibrate && o->model) return cli_error("--calibrate measures this machine and takes no model ('%s')", o->model);
  if (o->calibrate) return -1; /* pipecc --calibrate */
  if (!o->model) {
    pipecc_usage(stderr);
    return 2;
  }
  if (o->profile_run && o->devices != 1) return cli_error("%s builds one stage (no -g N)", "--profile-run");
  if (o->profile_run && !o->target_given) o->target = "cuda"; /* the GPU profiler unless --target cpu */
  o->want_plan = !o->emit && (o->out_dir || o->plan_only || o->devices > 1);
  if (o->plan_only && !o->out_dir) return cli_error("%s needs -o DIR", "--plan-only");
  if (o->want_plan && !o->out_dir) return cli_error("%s", "planning and code generation need -o DIR");
  if (o->hosts && o->hosts * o->gpus_per_host < o->devices) {
    fprintf(stderr, "pipecc: --topology %dx%d has %d devices, fewer than -g %d\n", o->hosts, o->gpus_per_host,
            o->hosts * o->gpus_per_host, o->devices);
    return 2;
  }
  if (!valid_cuda_arch(o->cuda_arch)) /* from --cuda-arch or PIPECC_CUDA_ARCH */
    return cli_error("bad --cuda-arch / PIPECC_CUDA_ARCH '%s' (SM versions such as 90 or 80;90)", o->cuda_arch);
  pass_train_opts *t = &o->train_opts;
  o->pass.training = o->train;
  t->verbose = o->pass.verbose;
  o->train_step = o->train && o->train_step; /* --emit=ir: --train prints the model with its loss (what the
                                              * planner splits), --train-step the step function */
  if (o->train_step && o->microbatches > 1)  /* the step function is one batch */
    return cli_error("%s: the training step function is compiled for one micro-batch (-m 1)", "--train-step");
  if (o->train_step) o->microbatches = 1;
  if (o->train && !o->train_step && o->profile_run)
    return cli_error("%s: profile the forward model (without --train)", "--profile-run");
  if (t->recompute && (!o->train || o->train_step))
    return cli_error("%s: re-materialisation is for pipelined training programs (--train)",
                     t->recompute == PASS_RECOMPUTE_SELECTIVE ? "--recompute=selective"
                     : t->recompute == PASS_RECOMPUTE_AUTO    ? "--recompute=auto"
                                                              : "--recompute");
  o->train_prog = o->train && !o->train_step;
  if (o->async_schedule) {
    const char *a = o->async_schedule;
    if (!o->train_prog)
      return cli_error("--schedule %s: an asynchronous schedule trains: it needs --train", a);
    if (strcmp(o->target, "cpu") && strcmp(o->target, "cuda")) {
      fprintf(stderr, "pipecc: --schedule %s: the %s target does not run asynchronous schedules (--target cpu)\n", a,
              o->target);
      return 2;
    }
    if (!strcmp(a, "spectrain") && (strcmp(t->optimizer ? t->optimizer : "sgd", "sgd") || !(t->momentum > 0)))
      return cli_error("--schedule %s: its weight prediction needs SGD with momentum > 0 (--momentum)", a);
    if (strcmp(a, "2bw") && (o->microbatches > 1 || o->m_auto || o->m_max))
      return cli_error("--schedule %s: one update per micro-batch, so -m does not apply (only 2bw takes -m)", a);
    if (strcmp(a, "2bw")) o->microbatches = 1;
    if (t->recompute) return cli_error("--schedule %s: re-materialisation (--recompute) is for the synchronous schedules", a);
    if (!o->no_replicate && !o->quiet)
      fprintf(stderr, "pipecc: --schedule %s: stages are not replicated (one device per stage)\n", a);
    o->no_replicate = 1;
  }
  return -1;
}

int pipecc_options_parse(int argc, char **argv, pipecc_options *o) {
  defaults(argc, o);
  o->cmdline = join_args(argc, argv);
  cursor c = {argc, argv, 0, NULL};
  for (c.i = 1; c.i < argc; c.i++) {
    c.a = argv[c.i];
    int rc = input_option(&c, o);
    if (rc == OPT_NOT_MINE) rc = planning_option(&c, o);
    if (rc == OPT_NOT_MINE) rc = training_option(&c, o);
    if (rc == OPT_NOT_MINE) rc = output_option(&c, o);
    if (rc == OPT_NOT_MINE) rc = other_option(&c, o);
    if (rc != OPT_TAKEN) return rc;
  }
  return check(o);
}

void pipecc_options_free(pipecc_options *o) {
  pass_opts *p = &o->pass;
  for (int i = 0; i <= p->n_shapes && p->shapes; i++) free((char *)p->shapes[i].name);
  for (int i = 0; i <= p->n_dims && p->dims; i++) free((char *)p->dims[i].name);
  for (int i = 0; i <= p->n_seqs && p->seqs; i++) free((char *)p->seqs[i].name);
  for (int i = 0; i < p->n_consts; i++) {
    free((char *)p->consts[i].name);
    free(p->consts[i].values);
  }
  free(p->shapes);
  free(p->dims);
  free(p->seqs);
  free(p->nones);
  free(p->consts);
  free(o->cmdline);
  memset(o, 0, sizeof *o);
}
