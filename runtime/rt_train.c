/* `pipeline train`: the training loop around a training program (pipert.h).
 *
 * Every step runs one round of the stages' instruction streams (M micro-batches, one
 * optimizer step) on the threads transport. Data: the samples of --data (one array per
 * data input, dim 0 = samples) and --labels, in batches of the compiled size; every
 * epoch visits the samples in the order of a permutation drawn from --seed and the
 * epoch number (or in file order with --no-shuffle), dropping the last partial batch,
 * so a run that resumes from a checkpoint sees exactly the batches it would have seen.
 *
 * Params (pipert_param_desc): the runtime reads and writes them through param_io:
 * hyperparameter overrides before the first step, the copies of a weight that several
 * stages read refreshed from its owner after every step, --save / --save-grads /
 * --checkpoint / --resume / --export-onnx. A checkpoint is one .npz (every owned
 * weight, buffer, optimizer state and hyperparameter by name, and "pipecc/step",
 * "pipecc/seed", "pipecc/shuffle"), written to a temporary file, synced and renamed
 * over the last one.
 *
 * The loop runs over a backend (rt_backend): the threads transport, or MPI with one rank
 * per stage replica, where every rank runs this loop and rank 0 reads the data, writes
 * the files and prints; param reads and writes go through rank 0. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pipert_xxh64.h"
#include "rt.h"

enum { HY_LR, HY_MOMENTUM, HY_WD, HY_BETA1, HY_BETA2, HY_EPS, HY_N };
static const char *const hyper_opt[HY_N] = {"--lr", "--momentum", "--weight-decay", "--beta1", "--beta2", "--eps"};
static const char *const hyper_param[HY_N] = {"hyper/lr",    "hyper/momentum", "hyper/weight_decay",
                                              "hyper/beta1", "hyper/beta2",    "hyper/eps"};

typedef struct {
  rt_input_arg *data;
  int n_data;
  const char *labels;
  int64_t batch, steps;
  double epochs;
  int shuffle;
  uint64_t seed;
  int seed_given, shuffle_given;
  int have_hyper[HY_N];
  double hyper[HY_N];
  const char *save, *save_grads, *checkpoint, *resume, *export_onnx, *log;
  int64_t checkpoint_every;
  int quiet;
  rt_options ro;
} train_opts;

static void usage(void) {
  fputs(
      "usage: pipeline train --data [NAME=]X.npy|X.npz ... [--labels Y.npy] (--steps N | --epochs E)\n"
      "       [--batch B] [--lr L] [--momentum U] [--weight-decay W] [--beta1 B1] [--beta2 B2] [--eps E]\n"
      "       [--no-shuffle] [--seed S] [--save W.npz] [--save-grads G.npz] [--checkpoint DIR\n"
      "       [--checkpoint-every K]] [--resume DIR] [--export-onnx OUT.onnx] [--log FILE.csv] [--quiet]\n"
      "       [--weights-dir DIR] [--threads-per-stage T] [--pin] [--timeout S] [--launch] [-v]\n"
      "Trains for --steps optimizer steps (or --epochs passes over the data), one batch of the compiled\n"
      "size per step, and prints the loss (and accuracy for classification) with a progress bar.\n"
      "--launch runs one process per stage replica on this host (mpirun; NCCL between GPUs).\n",
      stderr);
}

static int parse_num(const char *opt, const char *v, double min, double *out) {
  char *e;
  double x = v ? strtod(v, &e) : 0;
  if (!v || *e || !(x >= min) || !isfinite(x)) {
    rt_errorf("train: %s: expected a number >= %g, given '%s'", opt, min, v ? v : "");
    return -1;
  }
  *out = x;
  return 0;
}

static int parse_train_args(int argc, char **argv, train_opts *t) {
  memset(t, 0, sizeof *t);
  t->shuffle = 1;
  t->ro.threads_per_stage = 1;
  t->ro.transport = "threads";
  t->data = calloc((size_t)argc + 1, sizeof *t->data);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    double x = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage();
      exit(0);
    }
    if (!strcmp(a, "--no-shuffle")) {
      t->shuffle = 0;
      t->shuffle_given = 1;
      continue;
    }
    if (!strcmp(a, "--quiet")) {
      t->quiet = 1;
      continue;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) continue; /* pipert_main has set PIPERT_VERBOSE */
    if (!strcmp(a, "--pin")) {
      t->ro.pin = 1;
      continue;
    }
    static const char *const with_value[] = {"--data",       "--labels",
                                             "--batch",      "--steps",
                                             "--epochs",     "--checkpoint-every",
                                             "--seed",       "--threads-per-stage",
                                             "--timeout",    "--save",
                                             "--save-grads", "--checkpoint",
                                             "--resume",     "--export-onnx",
                                             "--log",        "--weights-dir"};
    int h = -1, known = 0;
    for (int k = 0; k < HY_N; k++)
      if (!strcmp(a, hyper_opt[k])) h = k;
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) known |= !strcmp(a, with_value[k]);
    if (h < 0 && !known) {
      rt_errorf("train: unknown option '%s' (see pipeline train --help)", a);
      return -1;
    }
    if (!v) {
      rt_errorf("train: %s: missing value (see pipeline train --help)", a);
      return -1;
    }
    i++;
    if (h >= 0) {
      if (parse_num(a, v, 0, &t->hyper[h])) return -1;
      t->have_hyper[h] = 1;
    } else if (!strcmp(a, "--data")) {
      const char *eq = strchr(v, '=');
      rt_input_arg *ia = &t->data[t->n_data++];
      if (eq) {
        ia->name = strndup(v, (size_t)(eq - v));
        ia->path = eq + 1;
      } else ia->path = v;
    } else if (!strcmp(a, "--labels")) t->labels = v;
    else if (!strcmp(a, "--batch") || !strcmp(a, "--steps") || !strcmp(a, "--checkpoint-every") ||
             !strcmp(a, "--seed") || !strcmp(a, "--threads-per-stage")) {
      if (parse_num(a, v, !strcmp(a, "--seed") ? 0 : 1, &x) || x != floor(x)) {
        if (x != floor(x)) rt_errorf("train: %s: expected an integer, given '%s'", a, v);
        return -1;
      }
      if (!strcmp(a, "--batch")) t->batch = (int64_t)x;
      else if (!strcmp(a, "--steps")) t->steps = (int64_t)x;
      else if (!strcmp(a, "--checkpoint-every")) t->checkpoint_every = (int64_t)x;
      else if (!strcmp(a, "--threads-per-stage")) t->ro.threads_per_stage = (int)x;
      else {
        t->seed = (uint64_t)x;
        t->seed_given = 1;
      }
    } else if (!strcmp(a, "--epochs")) {
      if (parse_num(a, v, 0, &t->epochs) || t->epochs <= 0) {
        rt_errorf("train: --epochs must be > 0");
        return -1;
      }
    } else if (!strcmp(a, "--timeout")) {
      if (parse_num(a, v, 0, &t->ro.timeout_s)) return -1;
    } else if (!strcmp(a, "--save")) t->save = v;
    else if (!strcmp(a, "--save-grads")) t->save_grads = v;
    else if (!strcmp(a, "--checkpoint")) t->checkpoint = v;
    else if (!strcmp(a, "--resume")) t->resume = v;
    else if (!strcmp(a, "--export-onnx")) t->export_onnx = v;
    else if (!strcmp(a, "--log")) t->log = v;
    else t->ro.weights_dir = v; /* --weights-dir */
  }
  if (!t->ro.weights_dir) t->ro.weights_dir = rt_exe_dir();
  if (!t->n_data) {
    rt_errorf("train: no --data given (see pipeline train --help)");
    return -1;
  }
  if (!t->steps && !t->epochs) {
    rt_errorf("train: give --steps N or --epochs E");
    return -1;
  }
  if (t->steps && t->epochs) {
    rt_errorf("train: give --steps or --epochs, not both");
    return -1;
  }
  if (t->checkpoint_every && !t->checkpoint) {
    rt_errorf("train: --checkpoint-every needs --checkpoint DIR");
    return -1;
  }
  return 0;
}

/* ---- the data --------------------------------------------------------------- */

static int input_index(const pipert_pipeline *p, const char *name) {
  for (int i = 0; i < p->n_inputs; i++)
    if (!strcmp(p->inputs[i].name, name)) return i;
  return -1;
}

/* Class labels of a classification loss lie in [0, C) for the logits' C classes (the
 * loss would otherwise train on without them): checked once, as the data is read, so
 * no step pays for it. 0, or 2 after one line naming the first label out of range. */
static int check_labels(const pipert_pipeline *p, const rt_array *a, const char *path) {
  if (p->logits_output < 0 || a->dtype != PIPERT_INT64) return 0;
  const pipert_tensor_desc *lo = &p->outputs[p->logits_output];
  if (lo->rank < 1) return 0;
  int64_t C = lo->dims[lo->rank - 1];
  const int64_t *v = a->data;
  for (size_t i = 0, n = a->nbytes / sizeof *v; i < n; i++)
    if (v[i] < 0 || v[i] >= C) {
      rt_errorf("train: %s: label %lld (element %zu) is out of range for %lld classes (0..%lld)", path, (long long)v[i],
                i, (long long)C, (long long)(C - 1));
      return 2;
    }
  return 0;
}

/* Takes a (dim 0: samples) as the data of graph input idx, after checking it. */
static int accept_data(const pipert_pipeline *p, int idx, rt_array *a, const char *src, rt_array *data, int64_t *N) {
  const pipert_tensor_desc *d = &p->inputs[idx];
  char want[256], got[256];
  if (data[idx].data) {
    rt_errorf("train: input '%s' given twice (again in %s)", d->name, src);
    return 2;
  }
  int ok = a->dtype == d->dtype && a->rank == d->rank && a->dims[0] > 0;
  for (int k = 1; ok && k < d->rank; k++) ok = a->dims[k] == d->dims[k];
  if (!ok) {
    int64_t dims[PIPERT_MAX_RANK];
    memcpy(dims, d->dims, sizeof dims);
    dims[0] = -1;
    rt_shape_str(want, sizeof want, d->rank, dims);
    rt_errorf("train: %s: '%s' must be %s of shape %s (N samples), given %s %s", src, d->name, rt_dtype_name(d->dtype),
              want, rt_dtype_name(a->dtype), rt_shape_str(got, sizeof got, a->rank, a->dims));
    return 2;
  }
  if (*N && a->dims[0] != *N) {
    rt_errorf("train: %s: %lld samples, but the other data has %lld", src, (long long)a->dims[0], (long long)*N);
    return 2;
  }
  *N = a->dims[0];
  free(a->name);
  a->name = strdup(d->name);
  data[idx] = *a;
  memset(a, 0, sizeof *a);
  return 0;
}

static int load_data(const pipert_pipeline *p, const train_opts *t, rt_array *data, int64_t *N) {
  char err[1024];
  int rc = 0;
  *N = 0;
  for (int i = 0; i < t->n_data && !rc; i++) {
    const rt_input_arg *ia = &t->data[i];
    size_t pl = strlen(ia->path);
    if (!ia->name && pl > 4 && !strcmp(ia->path + pl - 4, ".npz")) {
      rt_array *arrs;
      int n;
      if (rt_npz_load(ia->path, &arrs, &n, err, sizeof err)) {
        rt_errorf("train: %s", err);
        return 2;
      }
      for (int k = 0; k < n && !rc; k++) {
        int idx = input_index(p, arrs[k].name);
        char src[1200];
        snprintf(src, sizeof src, "%s: %s", ia->path, arrs[k].name);
        if (idx < 0) {
          rt_errorf("train: %s: '%s' is not an input of this program", ia->path, arrs[k].name);
          rc = 2;
        } else rc = accept_data(p, idx, &arrs[k], src, data, N);
      }
      for (int k = 0; k < n; k++) rt_array_free(&arrs[k]);
      free(arrs);
      continue;
    }
    int idx = -1;
    if (ia->name) idx = input_index(p, ia->name);
    else
      for (int k = 0; k < p->n_inputs && idx < 0; k++)
        if (k != p->labels_input && !data[k].data) idx = k;
    if (idx < 0 || idx == p->labels_input) {
      rt_errorf("train: --data %s%s%s: %s", ia->name ? ia->name : "", ia->name ? "=" : "", ia->path,
                ia->name ? "not a data input of this program" : "more data arrays than the program has data inputs");
      return 2;
    }
    rt_array a;
    if (rt_npy_load(ia->path, &a, err, sizeof err)) {
      rt_errorf("train: %s", err);
      return 2;
    }
    rc = accept_data(p, idx, &a, ia->path, data, N);
    rt_array_free(&a);
  }
  if (!rc && p->labels_input >= 0) {
    if (!t->labels) {
      rt_errorf("train: no --labels given (the loss reads '%s': %s)", p->inputs[p->labels_input].name,
                rt_dtype_name(p->inputs[p->labels_input].dtype));
      return 2;
    }
    rt_array a;
    if (rt_npy_load(t->labels, &a, err, sizeof err)) {
      rt_errorf("train: %s", err);
      return 2;
    }
    if (a.dtype == PIPERT_INT32 && p->inputs[p->labels_input].dtype == PIPERT_INT64) { /* widen int32 labels */
      rt_array b;
      if (rt_array_alloc(&b, NULL, PIPERT_INT64, a.rank, a.dims)) {
        rt_errorf("train: %s: out of memory widening its labels", t->labels ? t->labels : "labels");
        rt_array_free(&a);
        return 2;
      }
      for (size_t i = 0; i < a.nbytes / 4; i++) ((int64_t *)b.data)[i] = ((const int32_t *)a.data)[i];
      rt_array_free(&a);
      a = b;
    }
    rc = check_labels(p, &a, t->labels);
    if (!rc) rc = accept_data(p, p->labels_input, &a, t->labels, data, N);
    rt_array_free(&a);
  } else if (!rc && t->labels) {
    rt_errorf("train: --labels: this program's loss reads no labels");
    rc = 2;
  }
  for (int i = 0; !rc && i < p->n_inputs; i++)
    if (!data[i].data) {
      rt_errorf("train: no data for input '%s' (pass --data %s=FILE.npy)", p->inputs[i].name, p->inputs[i].name);
      rc = 2;
    }
  return rc;
}

/* splitmix64: the shuffling generator (the same order on every machine). */
static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void epoch_order(int64_t *order, int64_t N, int shuffle, uint64_t seed, int64_t epoch) {
  for (int64_t i = 0; i < N; i++) order[i] = i;
  if (!shuffle) return;
  uint64_t st = seed * 0x100000001B3ull + (uint64_t)epoch;
  for (int64_t i = N - 1; i > 0; i--) {
    int64_t j = (int64_t)(splitmix(&st) % (uint64_t)(i + 1));
    int64_t x = order[i];
    order[i] = order[j];
    order[j] = x;
  }
}

/* ---- params --------------------------------------------------------------------- */

typedef struct {
  const pipert_pipeline *p;
  const rt_backend *be;
  int64_t async_steps; /* an asynchronous schedule: the steps its one round runs */
  int threads;         /* the threads transport (be->impl is its rt_exec) */
} trainer;

static int param_io(trainer *tr, int s, int r, const pipert_param_desc *pd, int write, void *buf) {
  return tr->be->param_io(tr->be->impl, s, r, pd, write, buf);
}

/* rank 0's rc, everywhere (a decision every rank must follow) */
static int agree(trainer *tr, int rc) { return (int)tr->be->bcast(tr->be->impl, rc); }
static int root(const trainer *tr) { return tr->be->rank == 0; }

/* The owner of a param name: its stage and descriptor (the first stage that owns it). */
static const pipert_param_desc *find_owner(const pipert_pipeline *p, const char *name, int *stage) {
  for (int s = 0; s < p->n_stages; s++) {
    const pipert_stage_desc *d = p->stages[s].stage;
    for (int k = 0; k < d->n_params; k++)
      if (d->params[k].owner && !strcmp(d->params[k].name, name)) {
        *stage = s;
        return &d->params[k];
      }
  }
  return NULL;
}

static void shape_of(const pipert_param_desc *pd, int *rank, int64_t *dims) {
  *rank = pd->rank;
  for (int i = 0; i < pd->rank; i++) dims[i] = pd->dims[i];
}

/* Write buf (a param's bytes) into every holder of the name (all stages, all replicas). */
static int param_set_all(trainer *tr, const char *name, void *buf, size_t nbytes, int *holders) {
  const pipert_pipeline *p = tr->p;
  *holders = 0;
  for (int s = 0; s < p->n_stages; s++) {
    const pipert_stage_desc *d = p->stages[s].stage;
    for (int k = 0; k < d->n_params; k++) {
      if (strcmp(d->params[k].name, name)) continue;
      if (d->params[k].nbytes != nbytes) return -1;
      for (int r = 0; r < p->stages[s].replicas; r++)
        if (param_io(tr, s, r, &d->params[k], 1, buf)) return -1;
      ++*holders;
    }
  }
  return 0;
}

static int set_hyper(trainer *tr, const train_opts *t) {
  for (int h = 0; h < HY_N; h++) {
    if (!t->have_hyper[h]) continue;
    int s;
    const pipert_param_desc *pd = find_owner(tr->p, hyper_param[h], &s);
    /* momentum and weight decay compiled out are zero: setting them to zero changes nothing */
    if (!pd && (h == HY_MOMENTUM || h == HY_WD) && t->hyper[h] == 0) continue;
    if (!pd) {
      rt_errorf("train: %s: this program was compiled without it (optimizer %s%s); recompile with pipecc %s",
                hyper_opt[h], tr->p->optimizer ? tr->p->optimizer : "?",
                h == HY_MOMENTUM || h == HY_WD ? ", and it was zero" : "", hyper_opt[h]);
      return 2;
    }
    double x = t->hyper[h];
    float f = (float)x;
    int holders;
    if (param_set_all(tr, hyper_param[h], pd->dtype == PIPERT_DOUBLE ? (void *)&x : (void *)&f, pd->nbytes, &holders)) {
      rt_errorf("train: %s: cannot set it", hyper_opt[h]);
      return 1;
    }
  }
  return 0;
}

/* Copies of weights held by several stages: refreshed from their owner. */
static int sync_copies(trainer *tr) {
  const pipert_pipeline *p = tr->p;
  for (int s = 0; s < p->n_stages; s++) {
    const pipert_stage_desc *d = p->stages[s].stage;
    for (int k = 0; k < d->n_params; k++) {
      const pipert_param_desc *pd = &d->params[k];
      if (pd->owner || (pd->kind != PIPERT_PARAM_WEIGHT && pd->kind != PIPERT_PARAM_BUFFER)) continue;
      int os;
      const pipert_param_desc *od = find_owner(p, pd->name, &os);
      if (!od || od->nbytes != pd->nbytes) {
        rt_errorf("internal error: stage %d holds a copy of '%s', which no stage owns", s, pd->name);
        return 1;
      }
      void *buf = rt_aligned_alloc(pd->nbytes);
      int rc = param_io(tr, os, 0, od, 0, buf);
      for (int r = 0; r < p->stages[s].replicas && !rc; r++) rc = param_io(tr, s, r, pd, 1, buf);
      free(buf);
      if (rc) {
        rt_errorf("stage %d: cannot refresh its copy of '%s'", s, pd->name);
        return 1;
      }
    }
  }
  return 0;
}

static int kind_in(int kind, unsigned mask) { return (mask >> kind) & 1u; }
#define KINDS(...) kinds_mask((int[]){__VA_ARGS__, 0})
static unsigned kinds_mask(const int *k) {
  unsigned m = 0;
  for (; *k; k++) m |= 1u << *k;
  return m;
}

/* The owned params of the given kinds as arrays (by name, stage order; replica 0). */
static int collect(trainer *tr, unsigned kinds, rt_array **out, int *n, int extra) {
  const pipert_pipeline *p = tr->p;
  int cap = extra;
  for (int s = 0; s < p->n_stages; s++) cap += p->stages[s].stage->n_params;
  rt_array *a = calloc((size_t)cap + 1, sizeof *a);
  int cnt = 0;
  for (int s = 0; s < p->n_stages; s++) {
    const pipert_stage_desc *d = p->stages[s].stage;
    for (int k = 0; k < d->n_params; k++) {
      const pipert_param_desc *pd = &d->params[k];
      int os;
      if (!kind_in(pd->kind, kinds) || !pd->owner || find_owner(p, pd->name, &os) != pd) continue;
      int rank;
      int64_t dims[PIPERT_MAX_RANK];
      shape_of(pd, &rank, dims);
      rt_array_alloc(&a[cnt], pd->name, pd->dtype, rank, dims);
      if (param_io(tr, s, 0, pd, 0, a[cnt].data)) {
        rt_errorf("stage %d: cannot read '%s'", s, pd->name);
        for (int i = 0; i <= cnt; i++) rt_array_free(&a[i]);
        free(a);
        return 1;
      }
      cnt++;
    }
  }
  *out = a;
  *n = cnt;
  return 0;
}

static void free_arrays(rt_array *a, int n) {
  for (int i = 0; i < n; i++) rt_array_free(&a[i]);
  free(a);
}

static int save_params(trainer *tr, const char *path, unsigned kinds, const char *what) {
  rt_array *a;
  int n;
  char err[1024];
  if (collect(tr, kinds, &a, &n, 0)) return 1;
  int rc = root(tr) && rt_npz_save(path, a, n, err, sizeof err) ? 2 : 0;
  if (rc) rt_errorf("train: %s: %s", what, err);
  free_arrays(a, n);
  return agree(tr, rc);
}

static void meta_array(rt_array *a, const char *name, int64_t v) {
  int64_t one = 1;
  rt_array_alloc(a, name, PIPERT_INT64, 1, &one);
  *(int64_t *)a->data = v;
}

/* DIR/checkpoint.npz, atomically (rt_npz_save: a temporary file of this process, synced,
 * renamed, the folder synced). The folder was made and checked before the first step. */
static int write_checkpoint(trainer *tr, const train_opts *t, int64_t step) {
  rt_array *a;
  int n;
  char err[1024] = "", path[4096];
  int rc = 0;
  /* an asynchronous schedule: the weight versions (spectrain: with their momentum) that
   * the steps after this one read, "pipecc/version/STAGE/V/NAME", "pipecc/momentum/...",
   * from each stage's worker (every rank asks: rt_backend.vrange, vio) */
  int extra = 0;
  int64_t *v0 = calloc((size_t)tr->p->n_stages, sizeof *v0), *v1 = calloc((size_t)tr->p->n_stages, sizeof *v1);
  for (int s = 0; tr->async_steps && s < tr->p->n_stages; s++)
    extra += 2 * tr->be->vrange(tr->be->impl, s, &v0[s], &v1[s]) * (int)(v1[s] - v0[s]);
  if (collect(tr, KINDS(PIPERT_PARAM_WEIGHT, PIPERT_PARAM_BUFFER, PIPERT_PARAM_OPTSTATE, PIPERT_PARAM_HYPER), &a, &n,
              3 + extra)) {
    free(v0);
    free(v1);
    return 1;
  }
  for (int s = 0; tr->async_steps && s < tr->p->n_stages; s++) {
    const pipert_stage_desc *d = tr->p->stages[s].stage;
    size_t nb = rt_async_copy_bytes(d);
    char *buf = rt_aligned_alloc(nb + 1);
    for (int64_t v = v0[s]; v < v1[s]; v++)
      for (int mom = 0; mom < 2; mom++) {
        int have = tr->be->vio(tr->be->impl, s, v, mom, 0, buf, nb);
        for (int k = 0; have == 1 && root(tr) && k < d->n_params; k++) {
          const pipert_param_desc *pd = &d->params[k];
          if (pd->kind != PIPERT_PARAM_WEIGHT) continue;
          char nm[1200];
          int rank;
          int64_t dims[PIPERT_MAX_RANK];
          shape_of(pd, &rank, dims);
          snprintf(nm, sizeof nm, "pipecc/%s/%d/%lld/%s", mom ? "momentum" : "version", s, (long long)v, pd->name);
          rt_array_alloc(&a[n], nm, pd->dtype, rank, dims);
          memcpy(a[n++].data, buf + pd->offset, pd->nbytes);
        }
      }
    free(buf);
  }
  free(v0);
  free(v1);
  meta_array(&a[n++], "pipecc/step", step);
  meta_array(&a[n++], "pipecc/seed", (int64_t)t->seed);
  meta_array(&a[n++], "pipecc/shuffle", t->shuffle);
  snprintf(path, sizeof path, "%s/checkpoint.npz", t->checkpoint);
  if (root(tr) && rt_npz_save(path, a, n, err, sizeof err)) {
    rt_errorf("train: checkpoint %s", err);
    rc = 2;
  }
  free_arrays(a, n);
  return agree(tr, rc);
}

/* ---- checkpoints during an asynchronous run (rt_async_ckpt) ----------------------------
 * Each stage's worker hands over its part of the checkpoint after c steps in its own
 * thread (rt.h); the part that completes one writes it, as write_checkpoint would after
 * a run of c steps. Parts of several checkpoints can be under way at once. */
typedef struct {
  rt_array *a;
  int n, cap, parts;
} ckpt_slot;

typedef struct {
  trainer *tr;
  const train_opts *t;
  pthread_mutex_t mu;
  int64_t first;   /* the step of slots[0] */
  int n_slots;
  ckpt_slot *slots;
  int64_t written; /* the newest checkpoint written */
} ckpt_acc;

static rt_array *slot_add(ckpt_slot *sl) {
  if (sl->n == sl->cap) {
    int cap = sl->cap ? 2 * sl->cap : 32;
    rt_array *na = realloc(sl->a, sizeof *na * (size_t)cap);
    if (!na) return NULL;
    memset(na + sl->cap, 0, sizeof *na * (size_t)(cap - sl->cap));
    sl->a = na;
    sl->cap = cap;
  }
  return &sl->a[sl->n++];
}

static int name_order(const void *x, const void *y) {
  return strcmp(((const rt_array *)x)->name, ((const rt_array *)y)->name);
}

static int ckpt_take(void *ctx, rt_worker *w, int64_t step, int buffers) {
  ckpt_acc *ac = ctx;
  const pipert_pipeline *p = ac->tr->p;
  const pipert_stage_desc *d = p->stages[w->stage].stage;
  int64_t e = ac->t->checkpoint_every, idx = (step - ac->first) / e;
  int rc = 0;
  pthread_mutex_lock(&ac->mu);
  if (idx < 0 || idx >= ac->n_slots) {
    rt_errorf("internal error: a checkpoint after step %lld, outside the run", (long long)step);
    rc = -1;
  }
  ckpt_slot *sl = rc ? NULL : &ac->slots[idx];
  for (int k = 0; !rc && k < d->n_params; k++) { /* this stage's params, as collect() takes them */
    const pipert_param_desc *pd = &d->params[k];
    int os, want = buffers ? pd->kind == PIPERT_PARAM_BUFFER
                           : pd->kind == PIPERT_PARAM_WEIGHT || pd->kind == PIPERT_PARAM_OPTSTATE ||
                                 pd->kind == PIPERT_PARAM_HYPER;
    if (!want || !pd->owner || find_owner(p, pd->name, &os) != pd) continue;
    int rank;
    int64_t dims[PIPERT_MAX_RANK];
    shape_of(pd, &rank, dims);
    rt_array *x = slot_add(sl);
    if (!x || rt_array_alloc(x, pd->name, pd->dtype, rank, dims) || d->param_io(w->state, 0, pd->offset, x->data, pd->nbytes)) {
      rt_errorf("train: checkpoint after step %lld: stage %d: cannot read '%s'", (long long)step, w->stage, pd->name);
      rc = -1;
    }
  }
  int64_t v0, v1;
  int nw = buffers || rc ? 0 : rt_async_kept(w, &v0, &v1);
  for (int64_t v = rt_async_first_kept(w, step); nw && !rc && v < step; v++) /* the older versions */
    for (int mom = 0; mom < 2 && !rc; mom++) {
      const char *buf = rt_async_version(w, v, mom, 0);
      for (int q = 0; buf && q < nw && !rc; q++) {
        size_t off;
        const pipert_param_desc *pd = rt_async_weight(w, q, &off);
        char nm[1200];
        int rank;
        int64_t dims[PIPERT_MAX_RANK];
        shape_of(pd, &rank, dims);
        snprintf(nm, sizeof nm, "pipecc/%s/%d/%lld/%s", mom ? "momentum" : "version", w->stage, (long long)v,
                 pd->name);
        rt_array *x = slot_add(sl);
        if (!x || rt_array_alloc(x, nm, pd->dtype, rank, dims)) {
          rt_errorf("train: checkpoint after step %lld: out of memory", (long long)step);
          rc = -1;
        } else memcpy(x->data, buf + off, pd->nbytes);
      }
    }
  if (!rc && ++sl->parts == 2 * p->n_stages) { /* the last part: the file */
    char err[1024] = "", path[4096];
    rt_array *m[3] = {slot_add(sl), NULL, NULL};
    if (m[0]) meta_array(m[0], "pipecc/step", step);
    if ((m[1] = slot_add(sl))) meta_array(m[1], "pipecc/seed", (int64_t)ac->t->seed);
    if ((m[2] = slot_add(sl))) meta_array(m[2], "pipecc/shuffle", ac->t->shuffle);
    qsort(sl->a, (size_t)sl->n, sizeof *sl->a, name_order);
    snprintf(path, sizeof path, "%s/checkpoint.npz", ac->t->checkpoint);
    if (!m[2]) rc = -1;
    else if (step > ac->written && rt_npz_save(path, sl->a, sl->n, err, sizeof err)) {
      rt_errorf("train: checkpoint %s", err);
      rc = -1;
    }
    if (!rc) ac->written = step;
    for (int i = 0; i < sl->n; i++) rt_array_free(&sl->a[i]);
    free(sl->a);
    memset(sl, 0, sizeof *sl);
  }
  pthread_mutex_unlock(&ac->mu);
  return rc;
}

/* Whether a file can be written at path: its folder exists and takes a new file (tried
 * with a temporary file of this process, removed again), and path is no folder. 0, or 2
 * after one line naming the option. */
static int check_writable(const char *opt, const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    rt_errorf("train: %s %s: is a directory (give a file name)", opt, path);
    return 2;
  }
  if (rt_can_write(path)) {
    rt_errorf("train: %s %s: cannot write there: %s", opt, path, strerror(errno));
    return 2;
  }
  return 0;
}

/* Every place the run will write, checked before the first step, so that a bad path
 * costs no training: --save, --save-grads, --export-onnx, and the --checkpoint folder
 * (made here). Rank 0 checks; every rank agrees. */
static int check_outputs(trainer *tr, const train_opts *t) {
  int rc = 0;
  if (root(tr)) {
    if (!rc && t->save) rc = check_writable("--save", t->save);
    if (!rc && t->save_grads) rc = check_writable("--save-grads", t->save_grads);
    if (!rc && t->export_onnx) rc = check_writable("--export-onnx", t->export_onnx);
    if (!rc && t->checkpoint) {
      char probe[4200];
      snprintf(probe, sizeof probe, "%s/checkpoint.npz", t->checkpoint);
      if (mkdir(t->checkpoint, 0777) && errno != EEXIST) {
        rt_errorf("train: --checkpoint %s: %s", t->checkpoint, strerror(errno));
        rc = 2;
      } else rc = check_writable("--checkpoint", probe);
    }
  }
  return agree(tr, rc);
}

static int64_t meta_value(const rt_array *a, int n, const char *name, int64_t dflt) {
  for (int i = 0; i < n; i++)
    if (!strcmp(a[i].name, name) && a[i].dtype == PIPERT_INT64 && a[i].nbytes == 8) return *(const int64_t *)a[i].data;
  return dflt;
}

/* Loads DIR/checkpoint.npz (rank 0) into every holder of every param it names; sets *step. */
static int resume(trainer *tr, train_opts *t, int64_t *step) {
  const pipert_pipeline *p = tr->p;
  char path[4096], err[1024];
  snprintf(path, sizeof path, "%s/checkpoint.npz", t->resume);
  rt_array *a = NULL;
  int n = 0, rc = 0;
  int64_t seed = -1, shuffle = -1;
  *step = -1;
  if (root(tr)) {
    if (rt_npz_load(path, &a, &n, err, sizeof err)) {
      rt_errorf("train: --resume: %s", err);
      rc = 2;
    } else {
      *step = meta_value(a, n, "pipecc/step", -1);
      seed = meta_value(a, n, "pipecc/seed", -1);
      shuffle = meta_value(a, n, "pipecc/shuffle", -1);
    }
    if (!rc && (*step < 0 || seed < 0 || shuffle < 0)) {
      rt_errorf("train: --resume: %s is not a pipecc checkpoint (no pipecc/step, seed, shuffle)", path);
      rc = 2;
    } else if (!rc && ((t->seed_given && (uint64_t)seed != t->seed) || (t->shuffle_given && shuffle != t->shuffle))) {
      rt_errorf(
          "train: --resume: the checkpoint was trained with --seed %lld%s; resuming with another data order "
          "would not continue the same run",
          (long long)seed, shuffle ? "" : " --no-shuffle");
      rc = 2;
    }
    for (int s = 0; s < p->n_stages && !rc; s++) { /* every param there, of the right size */
      const pipert_stage_desc *d = p->stages[s].stage;
      for (int k = 0; k < d->n_params && !rc; k++) {
        const pipert_param_desc *pd = &d->params[k];
        const rt_array *e = NULL;
        for (int i = 0; i < n && !e && pd->kind != PIPERT_PARAM_GRAD; i++)
          if (!strcmp(a[i].name, pd->name)) e = &a[i];
        if (pd->kind == PIPERT_PARAM_GRAD) continue;
        if (!e) {
          rt_errorf("train: --resume: %s has no '%s' (a checkpoint of another model or optimizer?)", path, pd->name);
          rc = 2;
        } else if (e->dtype != pd->dtype || e->nbytes != pd->nbytes) {
          rt_errorf("train: --resume: %s: '%s' is %s of %zu bytes, the program has %s of %zu bytes", path, pd->name,
                    rt_dtype_name(e->dtype), e->nbytes, rt_dtype_name(pd->dtype), pd->nbytes);
          rc = 2;
        }
      }
    }
  }
  if ((rc = agree(tr, rc))) {
    free_arrays(a, n);
    return rc;
  }
  *step = tr->be->bcast(tr->be->impl, *step);
  t->seed = (uint64_t)tr->be->bcast(tr->be->impl, seed);
  t->shuffle = (int)tr->be->bcast(tr->be->impl, shuffle);
  for (int s = 0; s < p->n_stages && !rc; s++) {
    const pipert_stage_desc *d = p->stages[s].stage;
    for (int k = 0; k < d->n_params && !rc; k++) {
      const pipert_param_desc *pd = &d->params[k];
      if (pd->kind == PIPERT_PARAM_GRAD) continue;
      void *buf = NULL;
      for (int i = 0; i < n && !buf; i++)
        if (!strcmp(a[i].name, pd->name)) buf = a[i].data;
      for (int r = 0; r < p->stages[s].replicas && !rc; r++)
        if (param_io(tr, s, r, pd, 1, buf)) {
          rt_errorf("stage %d: cannot restore '%s'", s, pd->name);
          rc = 1;
        }
    }
  }
  /* the weight versions kept (every rank: rt_backend.vio): those the steps after the
   * checkpoint's read, at most N - 1 behind it */
  rc = agree(tr, rc);
  for (int s = 0; !rc && tr->async_steps && s < p->n_stages; s++) { /* (a failure stops every rank: MPI_Abort) */
    const pipert_stage_desc *d = p->stages[s].stage;
    size_t nb = rt_async_copy_bytes(d);
    char *buf = rt_aligned_alloc(nb + 1);
    for (int64_t v = *step - p->n_stages + 1 > 0 ? *step - p->n_stages + 1 : 0; v < *step; v++)
      for (int mom = 0; mom < 2; mom++) {
        int found = 0;
        memset(buf, 0, nb + 1);
        for (int k = 0; root(tr) && k < d->n_params; k++) {
          const pipert_param_desc *pd = &d->params[k];
          char nm[1200];
          snprintf(nm, sizeof nm, "pipecc/%s/%d/%lld/%s", mom ? "momentum" : "version", s, (long long)v, pd->name);
          for (int i = 0; pd->kind == PIPERT_PARAM_WEIGHT && i < n; i++)
            if (!strcmp(a[i].name, nm) && a[i].nbytes == pd->nbytes) {
              memcpy(buf + pd->offset, a[i].data, pd->nbytes);
              found = 1;
            }
        }
        if (tr->be->bcast(tr->be->impl, found) && tr->be->vio(tr->be->impl, s, v, mom, 1, buf, nb) < 0 && !rc) {
          rt_errorf("stage %d: cannot restore its weights after %lld updates", s, (long long)v);
          rc = 1;
        }
      }
    free(buf);
  }
  rc = agree(tr, rc);
  int miss = 0;
  for (int s = 0; !rc && tr->async_steps && s < p->n_stages; s++) { /* (every rank asks for every stage) */
    int64_t v = tr->be->vmissing(tr->be->impl, s);
    if (root(tr) && v >= 0 && !miss) {
      rt_errorf("train: --resume: %s lacks stage %d's weights after %lld updates, which --schedule %s reads (a "
                "checkpoint of another schedule or stage count?)",
                path, s, (long long)v, p->schedule);
      miss = 2;
    }
  }
  rc = agree(tr, rc ? rc : miss);
  free_arrays(a, n);
  return rc;
}

/* ---- --export-onnx ---------------------------------------------------------------- */

static unsigned char *read_whole(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *b = NULL;
  size_t cap = 0, n = 0, k;
  do {
    if (n == cap) {
      unsigned char *nb = realloc(b, cap = cap ? cap * 2 : 1 << 20);
      if (!nb) {
        free(b);
        fclose(f);
        return NULL;
      }
      b = nb;
    }
    k = fread(b + n, 1, cap - n, f);
    n += k;
  } while (k > 0);
  fclose(f);
  *len = n;
  return b;
}

/* path written whole or not at all; 0, or -1 with the reason in err. */
static int write_whole(const char *path, const void *b, size_t n, char *err, size_t errlen) {
  char tmp[8500];
  FILE *f = rt_atomic_open(path, tmp, sizeof tmp, err, errlen);
  if (!f) return -1;
  errno = 0;
  return rt_atomic_close(f, fwrite(b, 1, n, f) == n, path, tmp, err, errlen);
}

static int patch_model(trainer *tr, const pipert_export_desc *x, const rt_array *w, int nw, const char *out);

/* A copy of the model with the trained initializers (and running statistics) in place:
 * the same bytes everywhere else, external data files copied beside OUT. */
static int export_onnx(trainer *tr, const char *out) {
  const pipert_export_desc *x = tr->p->export_info;
  if (!x) {
    if (root(tr))
      rt_errorf(
          "train: --export-onnx: this program does not know where its weights are in the model (compiled "
          "from a model whose trained initializers are not stored as raw data)");
    return 2;
  }
  rt_array *w;
  int nw;
  if (collect(tr, KINDS(PIPERT_PARAM_WEIGHT, PIPERT_PARAM_BUFFER), &w, &nw, 0)) return 1;
  int rc = root(tr) ? patch_model(tr, x, w, nw, out) : 0;
  free_arrays(w, nw);
  return agree(tr, rc);
}

/* Rank 0: the model and its external data files, with the trained values at their places. */
static int patch_model(trainer *tr, const pipert_export_desc *x, const rt_array *w, int nw, const char *out) {
  (void)tr;
  size_t len;
  unsigned char *model = read_whole(x->model_path, &len);
  if (!model || len != x->model_bytes || pipert_xxh64(model, len) != x->model_hash) {
    rt_errorf("train: --export-onnx: %s is %s since pipecc compiled it", x->model_path, model ? "changed" : "gone");
    free(model);
    return 2;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", x->model_path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else strcpy(dir, ".");
  char odir[4096];
  snprintf(odir, sizeof odir, "%s", out);
  slash = strrchr(odir, '/');
  if (slash) *slash = 0;
  else strcpy(odir, ".");
  int rc = 0;
  /* files: the model, then each external data file once */
  for (int f = -1; f < x->n && !rc; f++) {
    const char *file = f < 0 ? NULL : x->entries[f].file;
    if (f >= 0) {
      int seen = !file;
      for (int g = 0; g < f && !seen; g++) seen = x->entries[g].file && !strcmp(x->entries[g].file, file);
      if (seen) continue;
    }
    unsigned char *buf = model;
    size_t blen = len;
    char src[8400], dst[8400];
    if (file) {
      snprintf(src, sizeof src, "%s/%s", dir, file);
      if (!(buf = read_whole(src, &blen))) {
        rt_errorf("train: --export-onnx: cannot read %s", src);
        rc = 2;
        break;
      }
    }
    for (int e = 0; e < x->n && !rc; e++) {
      const pipert_export_entry *en = &x->entries[e];
      if ((en->file == NULL) != (file == NULL) || (file && strcmp(en->file, file))) continue;
      const rt_array *a = NULL;
      for (int i = 0; i < nw && !a; i++)
        if (!strcmp(w[i].name, en->name)) a = &w[i];
      if (!a || a->nbytes != en->nbytes || en->offset + en->nbytes > blen) {
        rt_errorf("internal error: --export-onnx: '%s' does not fit its place in the model", en->name);
        rc = 1;
      } else memcpy(buf + en->offset, a->data, a->nbytes);
    }
    if (!rc) {
      if (file) snprintf(dst, sizeof dst, "%s/%s", odir, file);
      else snprintf(dst, sizeof dst, "%s", out);
      char err[1024];
      if (write_whole(dst, buf, blen, err, sizeof err)) {
        rt_errorf("train: --export-onnx: %s", err);
        rc = 2;
      }
    }
    if (file) free(buf);
  }
  free(model);
  return rc;
}

/* ---- the loop ------------------------------------------------------------------------ */

/* Correct predictions of a step: argmax over the logits' last dim against the labels. */
static int64_t count_correct(const rt_array *logits, const rt_array *labels, int64_t *total) {
  int64_t C = logits->dims[logits->rank - 1],
          rows = C ? (int64_t)(logits->nbytes / rt_dtype_size(logits->dtype)) / C : 0;
  int64_t ok = 0;
  *total = rows;
  for (int64_t r = 0; r < rows; r++) {
    int64_t best = 0;
    for (int64_t c = 1; c < C; c++) {
      double a = logits->dtype == PIPERT_DOUBLE ? ((const double *)logits->data)[r * C + c]
                                                : ((const float *)logits->data)[r * C + c];
      double b = logits->dtype == PIPERT_DOUBLE ? ((const double *)logits->data)[r * C + best]
                                                : ((const float *)logits->data)[r * C + best];
      if (a > b) best = c;
    }
    int64_t lab =
        labels->dtype == PIPERT_INT64 ? ((const int64_t *)labels->data)[r] : ((const int32_t *)labels->data)[r];
    ok += best == lab;
  }
  return ok;
}

static void progress(FILE *f, int tty, int64_t step, int64_t steps, int64_t spe, double loss, int classify, double acc,
                     double sps) {
  int64_t ep = (step - 1) / spe + 1, eps = (steps + spe - 1) / spe;
  int width = 24, fill = (int)(width * step / steps);
  char bar[32];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  fprintf(f, "%sstep %lld/%lld  epoch %lld/%lld  [%s]  loss %.6f", tty ? "\r" : "", (long long)step, (long long)steps,
          (long long)ep, (long long)eps, bar, loss);
  if (classify) fprintf(f, "  acc %5.1f%%", 100 * acc);
  fprintf(f, "  %.1f samples/s%s", sps, tty ? "   " : "\n");
  fflush(f);
}

static void human(size_t b, char *buf, size_t n) {
  if (b >= (size_t)1 << 30) snprintf(buf, n, "%.2f GiB", (double)b / (1 << 30));
  else if (b >= (size_t)1 << 20) snprintf(buf, n, "%.2f MiB", (double)b / (1 << 20));
  else snprintf(buf, n, "%.1f KiB", (double)b / (1 << 10));
}

/* The loop; every rank runs it (collective calls through tr->be; rank 0 does the I/O). */
static int train_loop(trainer *tr, train_opts *t) {
  const pipert_pipeline *p = tr->p;
  const rt_backend *be = tr->be;
  int S = p->n_stages, M = p->microbatches, rc = 0, r0 = root(tr);
  int64_t b = p->inputs[0].dims[0], B = b * M, N = 0;
  rt_array *data = calloc((size_t)p->n_inputs + 1, sizeof *data), *in = calloc((size_t)p->n_inputs + 1, sizeof *in);
  rt_array *out = calloc((size_t)p->n_outputs + 1, sizeof *out);
  if (r0) rc = load_data(p, t, data, &N);
  if (r0 && !rc && N / B < 1) {
    rt_errorf("train: %lld samples are fewer than one batch of %lld", (long long)N, (long long)B);
    rc = 2;
  }
  rc = agree(tr, rc);
  N = be->bcast(be->impl, N);
  int64_t spe = rc ? 1 : N / B, steps = t->steps ? t->steps : (int64_t)ceil(t->epochs * (double)spe - 1e-9);
  int64_t start = 0;
  if (!rc) rc = check_outputs(tr, t);
  if (!rc && t->resume) rc = resume(tr, t, &start);
  if (!rc) rc = set_hyper(tr, t);
  if (!rc) rc = sync_copies(tr);
  /* an asynchronous schedule runs every step in one round: the steps' batches side by side */
  int async = rt_async_mode(p) != RT_SYNC;
  int64_t K = async ? steps - start : 1;
  if (!rc && async && K != tr->async_steps) {
    rt_errorf("internal error: %lld steps, the streams are for %lld", (long long)K, (long long)tr->async_steps);
    rc = 1;
  }
  for (int i = 0; !rc && i < p->n_inputs; i++) {
    int64_t dims[PIPERT_MAX_RANK];
    memcpy(dims, p->inputs[i].dims, sizeof dims);
    dims[0] = r0 ? B * K : 0;
    if (rt_array_alloc(&in[i], p->inputs[i].name, p->inputs[i].dtype, p->inputs[i].rank, dims)) {
      rt_errorf("train: input '%s': out of memory for a batch of %lld", p->inputs[i].name, (long long)B);
      rc = 2;
    }
  }
  if (!rc && r0) rc = rt_alloc_outputs(p, M * K, out);
  if (!rc && start >= steps) {
    if (r0)
      rt_errorf("train: the checkpoint is at step %lld, and training ends at step %lld", (long long)start,
                (long long)steps);
    rc = 2;
  }
  FILE *log = NULL;
  if (!rc && r0 && t->log && !(log = fopen(t->log, t->resume ? "a" : "w"))) {
    rt_errorf("train: --log %s: %s", t->log, strerror(errno));
    rc = 2;
  }
  if (!rc) rc = agree(tr, rc);
  int quiet = t->quiet || !r0, tty = isatty(1) && !quiet;
  if (log && !t->resume) fputs("step,epoch,loss,accuracy,samples_per_s\n", log);
  if (!rc && !quiet)
    printf("training %s: %d stage%s, %s, %d micro-batches of %lld, %lld samples, %lld steps per epoch, %lld steps%s\n",
           p->name, S, S == 1 ? "" : "s", p->schedule, M, (long long)b, (long long)N, (long long)spe, (long long)steps,
           start ? " (resumed)" : "");
  int64_t *order = calloc((size_t)(r0 ? N : 0) + 1, sizeof *order), order_epoch = -1;
  rt_stats st = {.busy_s = calloc((size_t)S, sizeof(double)),
                 .peak_bytes = calloc((size_t)S, sizeof(size_t)),
                 .peak_sets = calloc((size_t)S, sizeof(int))};
  size_t *peak = calloc((size_t)S, sizeof(size_t));
  int *peak_sets = calloc((size_t)S, sizeof(int));
  double wall = 0, loss = 0, acc = 0, ep_loss = 0, ep_acc = 0;
  int64_t ep_steps = 0, done = start;
  int every = steps / 20 > 0 ? (int)(steps / 20) : 1;
  for (int64_t step = start; !rc && step < steps; step++) {
    int64_t epoch = step / spe, pos = step % spe, slot = async ? step - start : 0;
    for (int64_t fs = async ? (step == start ? start : steps) : step; r0 && fs < (async ? steps : step + 1); fs++) {
      int64_t fe = fs / spe, fp = fs % spe, fslot = async ? fs - start : 0;
      if (fe != order_epoch) {
        epoch_order(order, N, t->shuffle, t->seed, fe);
        order_epoch = fe;
      }
      for (int i = 0; i < p->n_inputs; i++) {
        size_t row = data[i].nbytes / (size_t)N;
        for (int64_t j = 0; j < B; j++)
          memcpy((char *)in[i].data + (size_t)(fslot * B + j) * row,
                 (const char *)data[i].data + (size_t)order[fp * B + j] * row, row);
      }
    }
    if (!async || step == start) {
      rc = be->run(be->impl, in, out, &st);
      if (!rc) rc = sync_copies(tr);
      if (rc) break;
      if (r0) wall += st.wall_s;
    }
    if (r0) {
      for (int s = 0; s < S; s++) {
        if (st.peak_bytes[s] > peak[s]) peak[s] = st.peak_bytes[s];
        if (st.peak_sets[s] > peak_sets[s]) peak_sets[s] = st.peak_sets[s];
      }
      const rt_array *L = &out[p->loss_output];
      loss = 0;
      for (int m = 0; m < M; m++)
        loss += L->dtype == PIPERT_DOUBLE ? ((const double *)L->data)[slot * M + m]
                                          : ((const float *)L->data)[slot * M + m];
      if (!p->loss_sum) loss /= M;
      acc = 0;
      if (p->logits_output >= 0 && p->labels_input >= 0) {
        int64_t total;
        rt_array lo = out[p->logits_output], la = in[p->labels_input];
        lo.nbytes /= (size_t)K;
        la.nbytes /= (size_t)K;
        lo.data = (char *)lo.data + (size_t)slot * lo.nbytes;
        la.data = (char *)la.data + (size_t)slot * la.nbytes;
        acc = (double)count_correct(&lo, &la, &total) / (double)(total ? total : 1);
      }
      if (!isfinite(loss)) {
        rt_errorf("train: step %lld: the loss is %s (lower --lr?)", (long long)step + 1,
                  isnan(loss) ? "NaN" : "infinite");
        rc = 2;
      }
    }
    if ((rc = agree(tr, rc))) break;
    done = step + 1;
    ep_loss += loss;
    ep_acc += acc;
    ep_steps++;
    double sps = (double)B * (double)K / (st.wall_s > 0 ? st.wall_s : 1e-9);
    if (log) fprintf(log, "%lld,%lld,%.9g,%.9g,%.6g\n", (long long)done, (long long)epoch + 1, loss, acc, sps);
    if (!quiet && (tty || done % every == 0 || done == steps))
      progress(stdout, tty, done, steps, spe, loss, p->logits_output >= 0, acc, sps);
    if (pos == spe - 1 || done == steps) { /* end of an epoch */
      if (tty) fputc('\n', stdout);
      if (!quiet)
        printf("epoch %lld: mean loss %.6f%s%.2f%s over %lld steps\n", (long long)epoch + 1, ep_loss / (double)ep_steps,
               p->logits_output >= 0 ? ", accuracy " : "",
               p->logits_output >= 0 ? 100 * ep_acc / (double)ep_steps : 0.0, p->logits_output >= 0 ? "%" : "",
               (long long)ep_steps);
      ep_loss = ep_acc = 0;
      ep_steps = 0;
    }
    /* (an asynchronous run's checkpoints before its end: its workers write them, ckpt_take) */
    if (t->checkpoint && ((!async && t->checkpoint_every && done % t->checkpoint_every == 0) || done == steps))
      rc = write_checkpoint(tr, t, done);
  }
  if (log) fclose(log);
  if (!rc && !quiet && done > start) {
    printf("trained %lld steps: final loss %.6f", (long long)(done - start), loss);
    if (p->logits_output >= 0) printf(", accuracy %.2f%%", 100 * acc);
    printf("; %.1f samples/s\n", (double)B * (double)(done - start) / (wall > 0 ? wall : 1e-9));
    printf("memory:");
    for (int s = 0; s < S; s++) {
      char hb[32];
      human(peak[s], hb, sizeof hb);
      printf(" stage %d %s (%d micro-batch%s held)%s", s, hb, peak_sets[s], peak_sets[s] == 1 ? "" : "es",
             s + 1 < S ? ";" : "\n");
    }
    char k[512];
    rt_kernels_line(k, sizeof k);
    printf("%s\n", k);
  }
  if (!rc && t->save) rc = save_params(tr, t->save, KINDS(PIPERT_PARAM_WEIGHT, PIPERT_PARAM_BUFFER), "--save");
  if (!rc && t->save_grads) rc = save_params(tr, t->save_grads, KINDS(PIPERT_PARAM_GRAD), "--save-grads");
  if (!rc && t->export_onnx) rc = export_onnx(tr, t->export_onnx);
  fflush(stdout);
  for (int i = 0; i < p->n_inputs; i++) {
    rt_array_free(&data[i]);
    rt_array_free(&in[i]);
  }
  for (int i = 0; i < p->n_outputs; i++) rt_array_free(&out[i]);
  free(data);
  free(in);
  free(out);
  free(order);
  free(st.busy_s);
  free(st.peak_bytes);
  free(st.peak_sets);
  free(peak);
  free(peak_sets);
  return rc;
}

int rt_train_main(const pipert_pipeline *p, int argc, char **argv) {
  train_opts t;
  int use_mpi = rt_mpi_launched(), rank0 = !use_mpi || rt_mpi_rank_env() == 0;
  rt_errors_muted = !rank0; /* every rank parses the same arguments: one of them reports */
  int bad = parse_train_args(argc, argv, &t);
  rt_errors_muted = 0;
  if (bad) {
    free(t.data);
    return 2;
  }
  int M = p->microbatches, rc = 0;
  int64_t b = p->inputs[0].dims[0], B = b * M;
  if (t.batch && t.batch != B) {
    if (rank0)
      rt_errorf(
          "train: --batch %lld: this program is compiled for batches of %lld (%d micro-batches of %lld); "
          "recompile with pipecc --shape ... or -m",
          (long long)t.batch, (long long)B, M, (long long)b);
    free(t.data);
    return 2;
  }
  int async = rt_async_mode(p) != RT_SYNC;
  if (async && !t.steps) { /* --epochs: the stream's length from the samples (read here once more; every rank) */
    rt_array *d = calloc((size_t)p->n_inputs + 1, sizeof *d);
    int64_t N = 0;
    rt_errors_muted = !rank0;
    int lrc = load_data(p, &t, d, &N);
    rt_errors_muted = 0;
    for (int i = 0; i < p->n_inputs; i++) rt_array_free(&d[i]);
    free(d);
    if (!lrc && N / B < 1) {
      if (rank0) rt_errorf("train: %lld samples are fewer than one batch of %lld", (long long)N, (long long)B);
      lrc = 2;
    }
    if (lrc) {
      free(t.data);
      return 2;
    }
    t.steps = (int64_t)ceil(t.epochs * (double)(N / B) - 1e-9);
  }
  if (async) { /* one round without a flush runs every step: what needs rounds is refused */
    const char *why = use_mpi && t.checkpoint_every         ? "writes its checkpoints during the run (--checkpoint-every) "
                                                                "on the threads transport only; under MPI at the end"
                      : t.steps > (int64_t)(INT32_MAX / 8 / M) ? "takes fewer --steps"
                                                              : NULL;
    if (why) {
      if (rank0) rt_errorf("train: --schedule %s %s", p->schedule, why);
      free(t.data);
      return 2;
    }
    if (t.resume) { /* the run continues from the checkpoint's step: its streams start there */
      char path[4096], err[1024];
      rt_array *a = NULL;
      int n = 0;
      snprintf(path, sizeof path, "%s/checkpoint.npz", t.resume);
      if (rt_npz_load(path, &a, &n, err, sizeof err)) {
        rt_errorf("train: --resume: %s", err);
        free(t.data);
        return 2;
      }
      t.ro.async_base = meta_value(a, n, "pipecc/step", -1);
      free_arrays(a, n);
      if (t.ro.async_base < 0 || t.ro.async_base >= t.steps) {
        if (t.ro.async_base < 0) rt_errorf("train: --resume: %s is not a pipecc checkpoint (no pipecc/step)", path);
        else
          rt_errorf("train: the checkpoint is at step %lld, and training ends at step %lld",
                    (long long)t.ro.async_base, (long long)t.steps);
        free(t.data);
        return 2;
      }
    }
    t.ro.async_keep = t.checkpoint != NULL;
  }
  int64_t K = async ? t.steps - t.ro.async_base : 0;
  rt_set_blas_threads(t.ro.threads_per_stage);
  rt_backend be;
  trainer tr = {p, &be, K, !use_mpi};
  ckpt_acc acc = {.tr = &tr, .t = &t, .written = -1};
  rt_async_ckpt ck = {ckpt_take, &acc};
  pthread_mutex_init(&acc.mu, NULL);
  if (async && t.checkpoint && t.checkpoint_every > 0) { /* the checkpoints during the run: their slots */
    int64_t e = t.checkpoint_every;
    acc.first = (t.ro.async_base / e + 1) * e;
    acc.n_slots = acc.first < t.steps ? (int)((t.steps - 1 - acc.first) / e + 1) : 0;
    acc.slots = calloc((size_t)acc.n_slots + 1, sizeof *acc.slots);
    t.ro.async_every = e;
    t.ro.async_ckpt = &ck;
  }
  if (use_mpi) {
    rc = rt_mpi_backend(p, &t.ro, async ? (int)(M * K) : 0, &be);
    if (!rc) rc = train_loop(&tr, &t);
    rc = rt_mpi_backend_end(&be, rc);
  } else {
    rc = rt_threads_backend(p, &t.ro, async ? (int)(M * K) : M, &be);
    if (!rc) rc = train_loop(&tr, &t);
    rt_threads_backend_free(&be);
  }
  for (int i = 0; i < acc.n_slots; i++) {
    for (int j = 0; j < acc.slots[i].n; j++) rt_array_free(&acc.slots[i].a[j]);
    free(acc.slots[i].a);
  }
  free(acc.slots);
  pthread_mutex_destroy(&acc.mu);
  for (int i = 0; i < t.n_data; i++) free((char *)t.data[i].name);
  free(t.data);
  return rc;
}
