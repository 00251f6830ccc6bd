/* tools/pipecc_driver.c - the phases of a pipecc run (see pipecc_driver.h):
 *
 *   load -> front end (bind, fold, shape, lowering; the micro-batch split) -> the loss
 *   and backward (training) -> optimisation (fuse, layout, winograd, pretranspose) ->
 *   plan (profile, antichain, partition, schedule) -> plan.json + report.html ->
 *   training program -> emit (cpu | cuda) -> build */
#include "tools/pipecc_driver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "frontend/onnx_load.h"
#include "ir/diag.h"
#include "ir/print.h"
#include "passes/batch.h"
#include "passes/lower/lower_loss.h"
#include "passes/opt/fuse.h"
#include "passes/opt/layout.h"
#include "passes/opt/pretranspose.h"
#include "passes/opt/winograd.h"
#include "passes/pass.h"
#include "passes/plan/plan_json.h"
#include "passes/plan/report_html.h"
#include "runtime/pipert.h"
#include "tools/pipecc_calibrate.h"
#include "tools/pipecc_costs.h"

/* A count on trial was given up (why in r->why): the next candidate, or one micro-batch. */
#define GAVE_UP (-1)

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
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
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

static void explain_plan(FILE *f, const pipecc_run *r);

static void print_plan_table(FILE *f, const pipecc_run *r) {
  const ir_graph *g = r->g;
  const pass_planned *pl = &r->pl;
  const pass_device *dev = r->dev;
  const pass_plan *p = &pl->plan;
  if (*r->costs) fprintf(f, "pipecc: costs: %s\n", r->costs);
  fprintf(f, "pipecc: %s on %d x %s, %d micro-batch%s, %s\n", g->path, p->devices, dev->name, p->microbatches,
          p->microbatches == 1 ? "" : "es",
          p->async_mode                   ? pass_async_name(p->async_mode)
          : p->schedule == PASS_SCHED_GPIPE ? "gpipe"
                                            : "1f1b");
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
  if (p->async_mode) { /* what the asynchronous schedule keeps and how stale each stage reads */
    fprintf(f, "  %s, no flush:", pass_async_name(p->async_mode));
    for (int s = 0; s < p->n_stages; s++) {
      int sf, sb, af, ab;
      pass_async_staleness(p->async_mode, p->n_stages, s, &sf, &sb, &af, &ab);
      fprintf(f, " stage %d %d version%s, staleness fwd %d bwd %d", s, pass_async_versions(p->async_mode, p->n_stages, s),
              pass_async_versions(p->async_mode, p->n_stages, s) == 1 ? "" : "s", sf, sb);
      if (p->async_mode == PASS_ASYNC_SPECTRAIN) fprintf(f, " (predicted %d and %d ahead)", af, ab);
      fputs(s + 1 < p->n_stages ? ";" : "\n", f);
    }
  }
  fprintf(f,
          "  bottleneck %.4f ms (lower bound %.4f ms, gap %.1f%%), predicted iteration %.3f ms, bubble %.1f%%, "
          "speedup %.2fx over 1 device; planned in %.2f ms\n",
          p->bottleneck_ms, p->lower_bound_ms, 100 * p->gap, p->predicted_iteration_ms, 100 * p->bubble_fraction,
          p->predicted_speedup, pl->antichain_partition_ms);
  explain_plan(f, r);
}

/* "stage 0 x 3, stage 1 x 1" (or "1 stage x 4 replicas") into buf. */
static void replica_list(const pass_plan *p, char *buf, size_t n) {
  if (p->n_stages == 1) {
    snprintf(buf, n, "1 stage x %d replicas", p->stages[0].replicas);
    return;
  }
  size_t o = 0;
  for (int s = 0; s < p->n_stages && o + 32 < n; s++)
    o += (size_t)snprintf(buf + o, n - o, "%sstage %d x %d", s ? ", " : "", s, p->stages[s].replicas);
}

/* What the table does not say by itself, a line each: that the planner replicated stages
 * (data parallelism) rather than cutting more of them, and that one micro-batch over
 * several stages leaves them no overlap, with what would give them some. */
static void explain_plan(FILE *f, const pipecc_run *r) {
  const pass_plan *p = &r->pl.plan;
  const char *dw = r->po.device_word ? r->po.device_word : "device";
  int replicated = 0;
  for (int s = 0; s < p->n_stages; s++) replicated |= p->stages[s].replicas > 1;
  if (replicated) {
    char reps[160];
    replica_list(p, reps, sizeof reps);
    fprintf(f,
            "pipecc: %s: data parallelism is predicted faster here than more pipeline stages (%.2fx over 1 %s); "
            "--no-replicate for one %s per stage\n",
            reps, p->predicted_speedup, dw, dw);
  }
  if (p->microbatches != 1 || p->n_stages < 2) return;
  const ir_graph *g = r->g;
  const ir_value *in = NULL;
  for (int k = 0; k < g->n_inputs && !in; k++)
    if (g->values[g->inputs[k]].shape.rank >= 1) in = &g->values[g->inputs[k]];
  char nm[96];
  const char *name = in ? ir_printable(in->name, 60, nm, sizeof nm) : "";
  long long batch = in ? (long long)in->shape.dims[0] : 1;
  fprintf(f, "pipecc: note: one micro-batch: the %d stages run one after another, with no overlap; ", p->n_stages);
  if (in && batch == 1 && !in->shape.sym[0])
    fprintf(f,
            "the model fixes the batch at 1 (input '%s' dim 0): export it with a dynamic batch axis "
            "(torch.onnx.export(..., dynamic_axes={'%s': {0: 'batch'}})) and bind a batch with --shape %s:Nx...\n",
            name, name, name);
  else if (in && batch == 1)
    fprintf(f, "a batch above 1 (--shape %s:Nx...) splits into micro-batches that overlap\n", name);
  else
    fprintf(f, "-m M splits the batch of %lld into M micro-batches that overlap%s\n", batch,
            *r->why ? " (where the model allows: the note above says why it does not)" : "");
}

static void time_pass(const pipecc_run *r, const char *name, double since) {
  if (r->o->time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms\n", name, now_ms() - since);
}

/* The count on trial is given up, for the reason fmt says of it. */
static int give_up(pipecc_run *r, const char *fmt) {
  snprintf(r->why, sizeof r->why, fmt, r->m, r->m);
  return GAVE_UP;
}

/* A step after the front end failed: a candidate of the search is given up, otherwise
 * pipecc stops (the messages said why). */
static int search_fail(pipecc_run *r) {
  return r->search ? give_up(r, "the model does not compile at %d micro-batches (-m %d shows why)") : 2;
}

/* The plan, the graphs and the micro-batch split of one try, dropped before the next. */
static void drop_try(pipecc_run *r) {
  if (r->have_pl) pass_planned_free(&r->pl);
  r->have_pl = 0;
  ir_graph_free(r->g);
  ir_graph_free(r->g_full);
  r->g = r->g_full = NULL;
}

static int load(pipecc_run *r) {
  r->t0 = now_ms();
  r->g = onnx_load_file(r->o->model);
  time_pass(r, "load", r->t0);
  return r->g ? 0 : 2;
}

/* The default micro-batch count, chosen once the batch is bound: the largest divisor of
 * the batch up to 4*g, on trial. cuda: the default count is searched. Every divisor of
 * the batch up to it is compiled as far as the plan (messages held, then dropped), and
 * the count whose plan the cost model predicts fastest is compiled for real: a GPU kernel
 * on a small micro-batch wastes most of the device (the model's per-kernel cost), so the
 * largest count is often not the fastest. The cpu target keeps the largest count: its
 * per-node cost is small against a core's work. Not searched with a measured profile (its
 * times are of one micro-batch size) or with -d dumps. */
static void default_microbatches(pipecc_run *r) {
  const pipecc_options *o = r->o;
  ir_graph *g = r->g;
  int64_t batch = ir_graph_batch(g, 1);
  /* a scalar output declared in the model: one micro-batch from the start (one found by
   * shape inference restarts the frontend; declared, a model whose constants fix the
   * batch size gets there without failing at a micro-batch first) */
  int scalar_out = 0;
  for (int k = 0; !o->train && k < g->n_outputs; k++) scalar_out |= g->values[g->outputs[k]].shape.rank == 0;
  r->m = 1;
  for (int m = 4 * o->devices; m >= 1 && o->devices > 1 && !scalar_out; m--)
    if (batch % m == 0) {
      r->m = m;
      break;
    }
  if (r->m == 1) return;
  r->trial = 1;
  ir_diag_hold();
  if ((o->m_auto || (!o->m_max && !strcmp(o->target, "cuda"))) && !o->profile_path && !o->n_dumps) {
    r->n_cand = 0;
    for (int m = r->m; m >= 1 && r->n_cand < PIPECC_MAX_CANDIDATES; m--)
      if (batch % m == 0) r->cand[r->n_cand++] = m;
    r->search = r->n_cand > 1;
  }
}

/* Compile for one micro-batch: split dim 0 of every graph input after binding, and load
 * the model again at the whole batch, to tell which axis of each value carries the batch
 * (passes/batch.h). */
static int split_batch(pipecc_run *r) {
  ir_graph *g = r->g;
  if (!r->m) default_microbatches(r);
  for (int k = 0; k < g->n_inputs; k++) {
    ir_value *v = &g->values[g->inputs[k]];
    char nm[96];
    if (v->shape.rank == 0 && r->o->train) {
      fprintf(stderr,
              "%s: graph input '%s' is a scalar: training splits every graph input along dim 0 (the batch), "
              "so graph inputs need rank >= 1 (export it with shape [1])\n",
              g->path, ir_printable(v->name, 60, nm, sizeof nm));
      return 2;
    }
    if (v->shape.rank == 0) continue; /* inference: the same scalar for every micro-batch */
    if (v->shape.dims[0] % r->m && r->trial) {
      snprintf(r->why, sizeof r->why, "graph input '%s': batch (dim 0) %lld is not divisible by the default %d",
               ir_printable(v->name, 60, nm, sizeof nm), (long long)v->shape.dims[0], r->m);
      return GAVE_UP;
    }
    if (v->shape.dims[0] % r->m) {
      fprintf(stderr, "%s: graph input '%s': batch (dim 0) %lld is not divisible by %d micro-batches\n", g->path,
              ir_printable(v->name, 60, nm, sizeof nm), (long long)v->shape.dims[0], r->m);
      return 2;
    }
    v->shape.dims[0] /= r->m;
  }
  if (r->m > 1) {
    double s0 = now_ms();
    if (!(r->g_full = whole_batch(r->o->model, &r->o->pass))) return 2;
    g->batch_full = r->g_full;
    g->microbatches = r->m;
    g->diag_hint = PASS_BATCH_HINT;
    time_pass(r, "batch-ref", s0);
  }
  return 0;
}

/* The front-end passes (passes/pass.c's pipeline), with -d PASS's dumps. */
static int front_end(pipecc_run *r) {
  const pipecc_options *o = r->o;
  for (const pass_info *p = pass_frontend_pipeline; p->name; p++) {
    double s = now_ms();
    int rc = p->fn(r->g, &r->o->pass);
    time_pass(r, p->name, s);
    if (rc || r->g->n_errors)
      return r->trial ? give_up(r, "the model does not compile at a micro-batch of the default %d (-m %d shows why)")
                      : 2;
    if (!strcmp(p->name, "bind") && o->want_plan && (rc = split_batch(r))) return rc;
    for (int k = 0; k < o->n_dumps; k++)
      if (!strcmp(o->dumps[k], p->name)) {
        fprintf(stdout, "# after %s\n", p->name);
        ir_print_text(stdout, r->g);
      }
  }
  return 0;
}

/* Whether the model splits into the micro-batches: graph outputs join them on dim 0,
 * which a scalar lacks, and every node must commute with splitting the batch. Past these
 * checks the default count holds, and its messages are the model's. */
static int microbatch_checks(pipecc_run *r) {
  ir_graph *g = r->g;
  for (int k = 0; r->o->want_plan && !r->o->train && r->m > 1 && k < g->n_outputs; k++) {
    const ir_value *v = &g->values[g->outputs[k]];
    char nm[96];
    if (v->shape.rank == 0 && r->trial) { /* the default: one micro-batch then */
      snprintf(r->why, sizeof r->why, "graph output '%s' is a scalar, one value per run",
               ir_printable(v->name, 60, nm, sizeof nm));
      return GAVE_UP;
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
    if (pass_batch_check(g))
      return r->trial ? give_up(r, "the default %d micro-batches would not add up to the batch (-m %d shows why)") : 2;
  }
  if (r->trial && !r->search) {
    ir_diag_release(1);
    r->trial = 0;
  }
  return 0;
}

/* Training: the step function's backward, or the loss of the pipelined program (its
 * backward comes once the stages are known); both in float (passes/opt/widen.c).
 * Inference: NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss nodes in ops every
 * target has (passes/lower/lower_loss.h). */
static int losses(pipecc_run *r) {
  const pipecc_options *o = r->o;
  ir_graph *g = r->g;
  if (o->train_step || o->train_prog) {
    double s = now_ms();
    int rc = o->train_step ? pass_autodiff(g, &r->o->train_opts) : pass_train_loss(g, &r->o->train_opts, &r->tinfo);
    time_pass(r, o->train_step ? "autodiff" : "loss", s);
    if (rc || g->n_errors) return search_fail(r);
    if (pass_widen_half(g, &r->o->pass) || g->n_errors) return search_fail(r);
  }
  if (!o->train_step && !o->train_prog && o->want_plan) {
    double s = now_ms();
    int nl = pass_lower_losses(g);
    if (o->time_passes) fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d losses)\n", "losses", now_ms() - s, nl);
    if (nl < 0 || g->n_errors) return search_fail(r);
  }
  return 0;
}

/* ---- optimisation: inference rewrites before planning, so that a fused chain is one
 * node in every plan and the bits cannot depend on the stage count ---- */

typedef struct {
  const char *name, *counted; /* --time-passes' name, and what the pass counts */
  int (*wanted)(const pipecc_options *o);
  int (*run)(ir_graph *g, const pipecc_options *o); /* how many rewritten, or -1 (reported) */
} opt_pass;

static int inference(const pipecc_options *o) { return !o->train_step && !o->train_prog; }
static int is_cpu(const pipecc_options *o) { return !strcmp(o->target, "cpu"); }
static int want_fuse(const pipecc_options *o) { return inference(o) && !o->no_fuse; }
static int want_fuse_cpu(const pipecc_options *o) { return want_fuse(o) && is_cpu(o); }
static int want_layout(const pipecc_options *o) { return inference(o) && !is_cpu(o) && !o->layout_nchw; }
static int want_winograd(const pipecc_options *o) { return inference(o) && is_cpu(o) && o->winograd; }
static int want_pretranspose(const pipecc_options *o) { return inference(o) && is_cpu(o); }

/* layer normalisation written out in element-wise ops, as one LayerNormalization */
static int run_layernorm(ir_graph *g, const pipecc_options *o) {
  (void)o;
  return pass_fuse_layernorm(g);
}
/* Add/Relu/Clip consumers into their Conv: the cpu target applies the epilogue to GEMM
 * blocks in cache, the cuda target in one kernel after cuDNN's convolution */
static int run_fuse_conv(ir_graph *g, const pipecc_options *o) {
  (void)o;
  return pass_fuse_conv(g);
}
/* cpu: a 1x1 expansion computed block by block inside the depthwise Conv reading it, for
 * maps of 14 x 14 positions or more per channel (below, the 1x1 Convs run batched over
 * images) */
static int run_expand_dw(ir_graph *g, const pipecc_options *o) {
  (void)o;
  return pass_fuse_expand_dw(g, 196);
}
/* cpu: Transposes read in place by the batched MatMuls after them */
static int run_matmul_t(ir_graph *g, const pipecc_options *o) {
  (void)o;
  return pass_fuse_matmul_transpose(g);
}
/* cuda: channels-last activations around the Convs cuDNN's tensor cores take
 * (passes/opt/layout.h) */
static int run_layout(ir_graph *g, const pipecc_options *o) { return pass_layout_nhwc(g, o->layout_all); }
/* cpu: 3x3 stride-1 Convs by Winograd, filters transformed here (passes/opt/winograd.h) */
static int run_winograd(ir_graph *g, const pipecc_options *o) { return pass_winograd(g, o->winograd); }
/* cpu: a Gemm's constant B with transB stored transposed, for the direct GEMM
 * (passes/opt/pretranspose.h) */
static int run_pretranspose(ir_graph *g, const pipecc_options *o) {
  (void)o;
  return pass_pretranspose(g, CG_C_DIRECT_K);
}

static const opt_pass opt_passes[] = {
    {"layernorm", "chains", want_fuse, run_layernorm},
    {"fuse", "chains", want_fuse, run_fuse_conv},
    {"expand_dw", "pairs", want_fuse_cpu, run_expand_dw},
    {"matmul_t", "transposes", want_fuse_cpu, run_matmul_t},
    {"layout", "convs", want_layout, run_layout},
    {"winograd", "convs", want_winograd, run_winograd},
    {"pretranspose", "gemms", want_pretranspose, run_pretranspose},
};

static int optimise(pipecc_run *r) {
  for (size_t k = 0; k < sizeof opt_passes / sizeof opt_passes[0]; k++) {
    const opt_pass *p = &opt_passes[k];
    if (!p->wanted(r->o)) continue;
    double s = now_ms();
    int n = p->run(r->g, r->o);
    if (r->o->time_passes)
      fprintf(stderr, "pipecc: pass %-10s %8.2f ms (%d %s)\n", p->name, now_ms() - s, n, p->counted);
    if (n < 0 || r->g->n_errors) return search_fail(r);
  }
  /* a model whose outputs all folded to constants still gets a stage (one Identity) */
  if (pass_keep_one_node(r->g) < 0 || r->g->n_errors) return search_fail(r);
  return 0;
}

/* ---- plan ---- */

/* The planner's options from the command line: device, topology, limits. */
static int plan_options(pipecc_run *r) {
  const pipecc_options *o = r->o;
  pass_plan_opts *po = &r->po;
  int cpu = is_cpu(o);
  r->dev = pipecc_device(o, r->dev_note, sizeof r->dev_note); /* tools/pipecc_calibrate.h */
  if (!r->dev) return -1;
  pass_plan_opts_default(po, o->devices);
  po->microbatches = r->m;
  po->training = o->train_prog; /* a training step function is planned as a function */
  po->recompute = o->train_prog ? o->train_opts.recompute : 0;
  /* optimizer state per weight byte: Adam's m and v, SGD's momentum buffer or none */
  if (o->train_prog)
    po->optimizer_state_factor = o->train_opts.optimizer && strncmp(o->train_opts.optimizer, "adam", 4) == 0 ? 2.0
                                 : o->train_opts.momentum != 0                                               ? 1.0
                                                                                                             : 0.0;
  po->no_replicate = o->no_replicate;
  po->device_word = cpu ? "core" : "GPU";
  po->schedule = o->schedule;
  po->async_mode = o->train_prog ? pass_async_from_name(o->async_schedule) : 0;
  const pass_link *intra = pass_link_find(o->link_name ? o->link_name : (cpu ? "shm" : "nvlink4"));
  const pass_link *inter = pass_link_find(o->inter_link_name ? o->inter_link_name : "ib-ndr");
  po->topo.hosts = o->hosts ? o->hosts : 1;
  po->topo.gpus_per_host = o->hosts ? o->gpus_per_host : o->devices;
  po->topo.intra_gbps = o->intra_bw > 0 ? o->intra_bw : intra->gbps;
  po->topo.intra_lat_ms = (o->intra_lat >= 0 ? o->intra_lat : intra->lat_us) / 1e3;
  po->topo.inter_gbps = o->inter_bw > 0 ? o->inter_bw : inter->gbps;
  po->topo.inter_lat_ms = (o->inter_lat >= 0 ? o->inter_lat : inter->lat_us) / 1e3;
  po->mem_limit = o->mem_limit ? o->mem_limit : (uint64_t)(r->dev->mem_gib * 1024 * 1024 * 1024);
  if (!r->search) { /* the search's predictions, once it has chosen */
    po->mb_search_n = r->n_cand;
    po->mb_search_m = r->cand;
    po->mb_search_ms = r->cand_ms;
  }
  return 0;
}

static int plan(pipecc_run *r) {
  if (plan_options(r)) return 2;
  /* the costs: measured here by default (tools/pipecc_costs.h); the search's candidates
   * are compared on the cost model, and the count it chooses is planned on its costs */
  pipecc_costs costs = {0};
  if (!r->search && pipecc_costs_get(r, &costs)) return 2;
  pass_profile_opts prof = {r->dev, !r->o->no_tf32, *costs.path ? costs.path : NULL};
  double tp = now_ms();
  r->have_pl = 1;
  int bad = pass_plan_graph(r->g, &prof, &r->po, &r->pl);
  pipecc_costs_done(&costs);
  if (bad) return search_fail(r);
  if (r->search) return 0; /* a candidate: its prediction is all the search needs */
  if (*costs.line && !*costs.path && *r->dev_note) /* the cost model, on a device file */
    snprintf(r->costs, sizeof r->costs, "%.2000s, %.2700s", costs.line, r->dev_note);
  else snprintf(r->costs, sizeof r->costs, "%s", costs.line);
  r->pl.plan.planner_ms = r->pl.antichain_partition_ms;
  if (r->o->time_passes)
    fprintf(stderr, "pipecc: pass %-10s %8.2f ms (antichain + partition %.2f ms)\n", "plan", now_ms() - tp,
            r->pl.antichain_partition_ms);
  return 0;
}

/* One try at r->m micro-batches: load, front end, losses, optimisation, plan. */
static int compile_to_plan(pipecc_run *r) {
  int rc;
  if ((rc = load(r)) || (rc = front_end(r)) || (rc = microbatch_checks(r)) || (rc = losses(r))) return rc;
  if (!r->o->want_plan) return 0;
  if ((rc = optimise(r))) return rc;
  return plan(r);
}

/* The search's choice: the count of the fastest predicted plan (ties: the larger), said
 * in one line with the others' predictions; 1 where no count above 1 compiles. */
static void choose_candidate(pipecc_run *r) {
  int best = -1, n_ok = 0;
  for (int k = 0; k < r->n_cand; k++)
    if (r->cand_ms[k] >= 0) {
      n_ok++;
      if (best < 0 || r->cand_ms[k] < r->cand_ms[best]) best = k;
    }
  r->search = 0;
  r->trial = 0;
  r->m = best < 0 ? 1 : r->cand[best];
  if (r->m == 1 && n_ok <= 1 && *r->cand_why) { /* no count above 1 compiles */
    fprintf(stderr, "%s: note: %s; compiling for one micro-batch (-m 1)\n", r->o->model, r->cand_why);
    r->n_cand = 0; /* nothing to report in plan.json */
    return;
  }
  char line[1024];
  int o = snprintf(line, sizeof line, "pipecc: %d micro-batch%s (predicted %.3f ms a batch; ", r->m,
                   r->m > 1 ? "es" : "", r->cand_ms[best]);
  for (int k = 0, first = 1; k < r->n_cand && o < (int)sizeof line - 64; k++) {
    if (k == best) continue;
    if (r->cand_ms[k] >= 0)
      o += snprintf(line + o, sizeof line - (size_t)o, "%s%d: %.3f", first ? "" : ", ", r->cand[k], r->cand_ms[k]);
    else
      o += snprintf(line + o, sizeof line - (size_t)o, "%s%d: no plan (-m %d shows why)", first ? "" : ", ", r->cand[k],
                    r->cand[k]);
    first = 0;
  }
  if (!r->o->quiet) fprintf(stderr, "%s; -m M sets it)\n", line);
}

/* The micro-batch search: every candidate compiled as far as its plan (the first one
 * already was, with result rc), its messages dropped; then the chosen count for real. */
static int search_microbatches(pipecc_run *r, int rc) {
  for (int i = 0;;) {
    if (rc != 0 && rc != GAVE_UP) return rc;
    ir_diag_release(0);
    r->cand_ms[i] = rc == GAVE_UP ? -1 : r->pl.plan.predicted_iteration_ms;
    if (rc == GAVE_UP && !*r->cand_why) snprintf(r->cand_why, sizeof r->cand_why, "%s", r->why);
    drop_try(r);
    if (++i == r->n_cand) break;
    r->m = r->cand[i];
    r->trial = 1;
    ir_diag_hold();
    rc = compile_to_plan(r);
  }
  choose_candidate(r);
  return compile_to_plan(r);
}

int pipecc_plan_microbatches(pipecc_run *r) {
  r->m = r->o->microbatches;
  int rc = compile_to_plan(r);
  if (r->search) return search_microbatches(r, rc);
  if (rc != GAVE_UP) return rc;
  /* the default count on trial does not hold: one micro-batch, its messages dropped */
  ir_diag_release(0);
  fprintf(stderr, "%s: note: %s; compiling for one micro-batch (-m 1)\n", r->o->model, r->why);
  drop_try(r);
  r->m = 1;
  r->trial = 0;
  return compile_to_plan(r);
}

int pipecc_print_ir(pipecc_run *r) {
  const pipecc_options *o = r->o;
  if (o->time_passes) fprintf(stderr, "pipecc: total           %8.2f ms\n", now_ms() - r->t0);
  if (o->emit && !strcmp(o->emit, "ir-json")) ir_print_json(stdout, r->g);
  else if (o->emit || !o->n_dumps) ir_print_text(stdout, r->g);
  return 0;
}

/* plan.json's pipecc_version, target, inputs and outputs: each graph input and output
 * with its dtype, whole-batch and micro-batch shape (what DIR/pipeline --info prints). */
static char *io_json(const pipecc_run *r) {
  const ir_graph *g = r->g;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "pipecc_version", PIPECC_VERSION);
  cJSON_AddStringToObject(o, "target", r->o->target);
  for (int side = 0; side < 2; side++) {
    cJSON *arr = cJSON_AddArrayToObject(o, side ? "outputs" : "inputs");
    for (int k = 0; k < (side ? g->n_outputs : g->n_inputs); k++) {
      const ir_value *v = &g->values[side ? g->outputs[k] : g->inputs[k]];
      cJSON *e = cJSON_CreateObject(), *whole = cJSON_CreateArray(), *mb = cJSON_CreateArray();
      cJSON_AddStringToObject(e, "name", v->name ? v->name : "");
      cJSON_AddStringToObject(e, "dtype", ir_dtype_name(v->dtype));
      for (int d = 0; d < v->shape.rank; d++) {
        cJSON_AddItemToArray(whole, cJSON_CreateNumber((double)(v->shape.dims[d] * (d == 0 ? r->m : 1))));
        cJSON_AddItemToArray(mb, cJSON_CreateNumber((double)v->shape.dims[d]));
      }
      cJSON_AddItemToObject(e, "shape", whole);
      cJSON_AddItemToObject(e, "microbatch_shape", mb);
      cJSON_AddItemToArray(arr, e);
    }
  }
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  size_t n = s ? strlen(s) : 0;
  if (n >= 2) { /* the members without the braces */
    memmove(s, s + 1, n - 2);
    s[n - 2] = 0;
  }
  return s;
}

int pipecc_write_plan(pipecc_run *r) {
  const pipecc_options *o = r->o;
  if (mkdir_p(o->out_dir)) {
    fprintf(stderr, "pipecc: cannot create %s: %s\n", o->out_dir, strerror(errno));
    return 2;
  }
  char *io = io_json(r);
  r->po.io_json = io;
  plan_ctx pc = {r->g, &r->pl, &r->po, o->cmdline};
  int bad = write_file(o->out_dir, "plan.json", write_plan_json, &pc) ||
            write_file(o->out_dir, "report.html", write_report, &pc);
  r->po.io_json = NULL;
  free(io);
  if (bad) return 2;
  /* a training program prints its plan once autodiff has taken every node (an op
   * without a gradient is then the run's one line) */
  if ((!o->train_prog || o->plan_only) && !o->quiet) print_plan_table(stderr, r);
  return 0;
}

void pipecc_assign_stages(pipecc_run *r) {
  const pipecc_options *o = r->o;
  const pass_plan *p = &r->pl.plan;
  r->reps = calloc((size_t)p->n_stages, sizeof *r->reps);
  for (int s = 0; s < p->n_stages; s++) r->reps[s] = p->stages[s].replicas;
  r->cp = (cg_plan){p->n_stages,
                    r->pl.node_stage,
                    r->reps,
                    NULL,
                    NULL,
                    r->m,
                    p->bubble_fraction,
                    o->async_schedule                ? o->async_schedule
                    : o->schedule == PASS_SCHED_GPIPE ? "gpipe"
                                                      : "1f1b",
                    NULL};
  /* --split even replaces the plan's stages by exactly g contiguous stages of about equal
   * FLOPs (cg_fallback_split), one replica each: the tests check with it that results
   * are bitwise equal for every stage count */
  if (!o->split_even) return;
  r->even_stage = calloc((size_t)r->g->n_nodes + 1, sizeof *r->even_stage);
  r->even_reps = calloc((size_t)o->devices, sizeof *r->even_reps);
  for (int s = 0; s < o->devices; s++) r->even_reps[s] = 1;
  if (cg_fallback_split(r->g, o->devices, r->even_stage)) {
    fprintf(stderr, "pipecc: PIPECC_SPLIT=even: fewer nodes than %d stages; keeping the plan\n", o->devices);
    return;
  }
  r->cp.n_stages = o->devices;
  r->cp.node_stage = r->even_stage;
  r->cp.replicas = r->even_reps;
  r->cp.predicted_bubble = 0;
}

/* The training program's instruction streams for the final stages, checked, as runtime
 * opcodes. Returns 0, or -1 (internal error). */
static int training_streams(pipecc_run *r) {
  static const int opcode[] = {[PASS_OP_FWD] = PIPERT_OP_FWD,
                               [PASS_OP_BWD] = PIPERT_OP_BWD,
                               [PASS_OP_SEND_ACT] = PIPERT_OP_SEND_ACT,
                               [PASS_OP_RECV_ACT] = PIPERT_OP_RECV_ACT,
                               [PASS_OP_SEND_GRAD] = PIPERT_OP_SEND_GRAD,
                               [PASS_OP_RECV_GRAD] = PIPERT_OP_RECV_GRAD,
                               [PASS_OP_ALLREDUCE] = PIPERT_OP_ALLREDUCE,
                               [PASS_OP_STEP] = PIPERT_OP_STEP};
  cg_plan *cp = &r->cp;
  int S = cp->n_stages;
  pass_stream *streams = calloc((size_t)S, sizeof *streams);
  char err[512];
  int rc = pass_schedule_build(r->o->schedule, S, cp->microbatches, 1, cp->replicas, streams) ? -1 : 0;
  if (!rc && pass_schedule_check(S, streams, cp->replicas, err, sizeof err)) {
    fprintf(stderr, "pipecc: internal error: training schedule: %s\n", err);
    rc = -1;
  }
  r->n_progs = S;
  r->progs = calloc((size_t)S, sizeof *r->progs);
  r->prog_len = calloc((size_t)S, sizeof *r->prog_len);
  for (int k = 0; !rc && k < S; k++) {
    r->progs[k] = calloc((size_t)streams[k].n + 1, sizeof(cg_instr));
    r->prog_len[k] = streams[k].n;
    for (int i = 0; i < streams[k].n; i++)
      r->progs[k][i] = (cg_instr){opcode[streams[k].v[i].op], streams[k].v[i].mb < 0 ? 0 : streams[k].v[i].mb};
  }
  pass_streams_free(streams, S);
  free(streams);
  cp->programs = (const cg_instr *const *)r->progs;
  cp->program_len = r->prog_len;
  return rc;
}

int pipecc_train_program(pipecc_run *r) {
  const pipecc_options *o = r->o;
  ir_graph *g = r->g;
  pass_train_opts *topts = &r->o->train_opts;
  r->ct = (cg_train){r->tinfo.loss_sum, r->tinfo.classify, r->tinfo.labels, topts->optimizer};
  if (!o->train_prog) return 0;
  for (int i = 0; i < g->n_nodes; i++) g->nodes[i].stage = r->cp.node_stage[i];
  /* --recompute=auto: the plan's mode per stage (--split's stages: full) */
  const pass_plan *p = &r->pl.plan;
  r->stage_recompute = calloc((size_t)p->n_stages + 1, sizeof *r->stage_recompute);
  for (int s = 0; s < p->n_stages; s++) r->stage_recompute[s] = p->stages[s].recompute;
  topts->stage_recompute = r->cp.node_stage == r->pl.node_stage ? r->stage_recompute : NULL;
  topts->weights_fresh = /* the backward reads other weights than its forward */
      o->async_schedule && (!strcmp(o->async_schedule, "async") || !strcmp(o->async_schedule, "spectrain"));
  double ts = now_ms();
  if (pass_train_program(g, topts, r->m, &r->tinfo) || g->n_errors) return 2;
  time_pass(r, "train", ts);
  if (!o->quiet) print_plan_table(stderr, r);
  r->train_stage = calloc((size_t)g->n_nodes + 1, sizeof *r->train_stage); /* the nodes moved */
  for (int i = 0; i < g->n_nodes; i++) r->train_stage[i] = g->nodes[i].stage;
  r->cp.node_stage = r->train_stage;
  r->cp.train = &r->ct;
  return training_streams(r) ? 3 : 0;
}

static cg_options codegen_options(const pipecc_run *r) {
  const pipecc_options *o = r->o;
  return (cg_options){o->cmdline, o->model, o->emit_only, o->jobs, o->pass.verbose, o->no_tf32, o->cuda_arch, o->quiet};
}

int pipecc_emit(pipecc_run *r) {
  cg_options co = codegen_options(r);
  double s = now_ms();
  int rc = (is_cpu(r->o) ? cg_c_emit(r->g, &r->cp, &co, r->o->out_dir) : cg_cuda_emit(r->g, &r->cp, &co, r->o->out_dir))
               ? 2
               : 0;
  time_pass(r, "emit", s); /* the stage sources and the weights files */
  if (!rc && !r->o->quiet) {
    double bytes = 0;
    for (int k = 0; k < r->cp.n_stages; k++) {
      char path[4200];
      struct stat st;
      snprintf(path, sizeof path, "%s/weights_%d.bin", r->o->out_dir, k);
      if (!stat(path, &st)) bytes += (double)st.st_size;
    }
    fprintf(stderr, "pipecc: wrote %d stage file%s and %.1f MiB of weights (%.1f s)\n", r->cp.n_stages,
            r->cp.n_stages == 1 ? "" : "s", bytes / 1048576.0, (now_ms() - s) / 1000.0);
  }
  return rc;
}

static int build_binaries(pipecc_run *r);

int pipecc_build(pipecc_run *r) {
  double s = now_ms();
  int rc = build_binaries(r);
  if (!r->o->emit_only) time_pass(r, "build", s); /* the C or CUDA compiles and the link */
  return rc;
}

static int build_binaries(pipecc_run *r) {
  const pipecc_options *o = r->o;
  cg_options co = codegen_options(r);
  if (is_cpu(o)) {
    if (o->emit_only) return 0;
    if (cg_build(o->out_dir, &co)) return 2;
    if (!o->profile_run) return 0;
    if (cg_build_profile(o->out_dir, &co)) return 2;
    fprintf(stderr,
            "pipecc: profiler built; on an idle core run\n  taskset -c 0 %s/profile --profile-out profile.json\n"
            "then plan with measured costs: pipecc %s --profile profile.json ...\n",
            o->out_dir, o->model);
    return 0;
  }
  if (!o->emit_only && cg_cuda_build_dir(o->out_dir, &co, o->profile_run ? "pipeline profile" : "pipeline")) return 2;
  if (o->profile_run)
    fprintf(stderr,
            "pipecc: profiler built; on the target GPU run\n  %s/profile --profile-out profile.json\n"
            "then plan with measured costs: pipecc %s --profile profile.json ...\n",
            o->out_dir, o->model);
  return 0;
}

/* The graph inputs and outputs: name, dtype, whole-batch and micro-batch shape. */
static void print_io(FILE *f, const pipecc_run *r) {
  const ir_graph *g = r->g;
  for (int side = 0; side < 2; side++)
    for (int k = 0; k < (side ? g->n_outputs : g->n_inputs); k++) {
      const ir_value *v = &g->values[side ? g->outputs[k] : g->inputs[k]];
      ir_shape whole = v->shape;
      if (whole.rank > 0) whole.dims[0] *= r->m;
      char a[96], b[96], nm[64];
      fprintf(f, "  %-6s %-24s %-8s %s (micro-batch %s)\n", side ? "output" : "input",
              ir_printable(v->name ? v->name : "", 24, nm, sizeof nm), ir_dtype_name(v->dtype),
              ir_shape_str(&whole, a, sizeof a), ir_shape_str(&v->shape, b, sizeof b));
    }
}

void pipecc_report_done(const pipecc_run *r, int rc) {
  const pipecc_options *o = r->o;
  if (!rc && !o->emit_only && !o->profile_run && !o->quiet) print_io(stderr, r);
  if (!rc && !o->plan_only && !o->emit_only && !o->profile_run && !o->quiet) {
    if (o->train_prog)
      fprintf(stderr,
              "pipecc: built %s/pipeline; train it with\n  %s/pipeline train --data X.npy%s %s "
              "[--save W.npz]\n",
              o->out_dir, o->out_dir, r->tinfo.labels ? " --labels Y.npy" : "",
              o->async_schedule ? "--steps K" : "--epochs N");
    else
      fprintf(stderr, "pipecc: built %s/pipeline; run it with\n  %s/pipeline --input X.npy --output Y.npy\n",
              o->out_dir, o->out_dir);
  }
  if (o->time_passes) fprintf(stderr, "pipecc: total           %8.2f ms\n", now_ms() - r->t0);
}

void pipecc_run_free(pipecc_run *r) {
  ir_diag_release(1); /* a stop during a trial still shows its messages */
  free(r->reps);
  free(r->even_stage);
  free(r->even_reps);
  free(r->train_stage);
  free(r->stage_recompute);
  for (int k = 0; k < r->n_progs; k++) free(r->progs[k]);
  free(r->progs);
  free(r->prog_len);
  drop_try(r);
}
