/* pipert_main: command line, inputs and outputs, bench report, transport choice. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "rt.h"
#include "rt_fakedev.h"

_Thread_local int rt_cur_stage = -1;
_Thread_local int rt_init_device = -1;
int pipert_init_device(void) { return rt_init_device; }

int rt_errors_muted;

void rt_errorf(const char *fmt, ...) {
  if (rt_errors_muted) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "pipeline: %s\n", buf);
  fflush(stderr);
}

int rt_env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double rt_thread_cpu(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return 0;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void *rt_aligned_try_alloc(size_t n) {
  void *p = NULL;
  if (n > SIZE_MAX - 64 || posix_memalign(&p, 64, n ? (n + 63) / 64 * 64 : 64) != 0) return NULL;
  memset(p, 0, n);
  return p;
}

void *rt_aligned_alloc(size_t n) {
  void *p = rt_aligned_try_alloc(n);
  if (!p) {
    fprintf(stderr, "pipeline: out of memory (%zu bytes)\n", n);
    abort();
  }
  return p;
}

void rt_sum_into(void *acc, const void *x, size_t nbytes, int dtype) {
  if (dtype == PIPERT_DOUBLE)
    for (size_t i = 0; i < nbytes / 8; i++) ((double *)acc)[i] += ((const double *)x)[i];
  else
    for (size_t i = 0; i < nbytes / 4; i++) ((float *)acc)[i] += ((const float *)x)[i];
}

/* BLAS: one thread per stage unless told otherwise. The env vars cover a BLAS
 * that initialises lazily; the weak symbols cover OpenBLAS already loaded. */
extern void openblas_set_num_threads(int) __attribute__((weak));
extern void goto_set_num_threads(int) __attribute__((weak));
void rt_set_blas_threads(int n) {
  char v[16];
  snprintf(v, sizeof v, "%d", n);
  setenv("OPENBLAS_NUM_THREADS", v, 1);
  setenv("OMP_NUM_THREADS", v, 1);
  setenv("MKL_NUM_THREADS", v, 1);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
  else if (goto_set_num_threads) goto_set_num_threads(n);
}

const char *rt_exe_dir(void) {
  static char dir[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
  if (n <= 0) return ".";
  dir[n] = 0;
  char *s = strrchr(dir, '/');
  if (s) *s = 0;
  return dir;
}

static void crash_handler(int sig) {
  char msg[128];
  int st = rt_cur_stage;
  const char *name = sig == SIGSEGV  ? "SIGSEGV"
                     : sig == SIGBUS ? "SIGBUS"
                     : sig == SIGFPE ? "SIGFPE"
                     : sig == SIGILL ? "SIGILL"
                                     : "SIGABRT";
  int n = st >= 0 ? snprintf(msg, sizeof msg, "pipeline: stage %d: crashed (%s)\n", st, name)
                  : snprintf(msg, sizeof msg, "pipeline: crashed (%s)\n", name);
  if (n > 0) {
    ssize_t w = write(2, msg, (size_t)n);
    (void)w;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void rt_install_crash_handler(void) {
  int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = crash_handler;
    sa.sa_flags = SA_RESETHAND;
    sigaction(sigs[i], &sa, NULL);
  }
}

/* ---- plan checks --------------------------------------------------------- */

int rt_validate_plan(const pipert_pipeline *p) {
  char e[512] = "";
  if (p->abi_version != PIPERT_ABI_VERSION)
    snprintf(e, sizeof e, "ABI version %d, runtime has %d", p->abi_version, PIPERT_ABI_VERSION);
  else if (p->n_stages < 1 || p->microbatches < 1 || p->batch_dim != 0)
    snprintf(e, sizeof e, "needs >= 1 stage, >= 1 micro-batch and batch_dim 0");
  for (int s = 0; !e[0] && s < p->n_stages; s++) {
    const pipert_stage_plan *sp = &p->stages[s];
    const pipert_stage_desc *d = sp->stage;
    if (!d || d->abi_version != PIPERT_ABI_VERSION || d->id != s || !d->forward || sp->replicas < 1) {
      snprintf(e, sizeof e, "stage %d: bad descriptor (ABI version, id, forward or replicas)", s);
      break;
    }
    for (int k = 0; k < d->n_inputs; k++) {
      pipert_ref r = sp->input_src[k];
      const pipert_tensor_desc *src =
          r.stage == PIPERT_GRAPH_INPUT ? (r.index >= 0 && r.index < p->n_inputs ? &p->inputs[r.index] : NULL)
          : r.stage >= 0 && r.stage < s && r.index >= 0 && r.index < p->stages[r.stage].stage->n_outputs
              ? &p->stages[r.stage].stage->outputs[r.index]
              : NULL;
      if (!src) {
        snprintf(e, sizeof e, "stage %d input %d: bad source (%d, %d); producers must be earlier stages", s, k, r.stage,
                 r.index);
        break;
      }
      if (src->nbytes != d->inputs[k].nbytes || src->dtype != d->inputs[k].dtype) {
        snprintf(e, sizeof e, "stage %d input %d '%s': size or dtype differs from its source", s, k, d->inputs[k].name);
        break;
      }
    }
    if (!e[0] && p->training &&
        (!d->backward || !d->step || !d->zero_grads || !d->param_io || !sp->program ||
         (d->n_bwd_inputs && !sp->bwd_input_src)))
      snprintf(e, sizeof e,
               "stage %d: a training stage needs backward, step, zero_grads, param_io, a program "
               "and its backward sources",
               s);
    for (int k = 0; !e[0] && p->training && k < d->n_bwd_inputs; k++) {
      pipert_ref r = sp->bwd_input_src[k];
      const pipert_tensor_desc *src = r.stage == PIPERT_GRAPH_INPUT
                                          ? (r.index >= 0 && r.index < p->n_inputs ? &p->inputs[r.index] : NULL)
                                      : r.phase == 0 && r.stage >= 0 && r.stage <= s && r.index >= 0 &&
                                              r.index < p->stages[r.stage].stage->n_outputs
                                          ? &p->stages[r.stage].stage->outputs[r.index]
                                      : r.phase == 1 && r.stage > s && r.stage < p->n_stages && r.index >= 0 &&
                                              r.index < p->stages[r.stage].stage->n_bwd_outputs
                                          ? &p->stages[r.stage].stage->bwd_outputs[r.index]
                                          : NULL;
      if (!src || src->nbytes != d->bwd_inputs[k].nbytes || src->dtype != d->bwd_inputs[k].dtype)
        snprintf(e, sizeof e, "stage %d backward input %d: bad source (%d, %d, phase %d)", s, k, r.stage, r.index,
                 r.phase);
    }
    for (int i = 0; !e[0] && i < sp->program_len; i++) {
      int op = sp->program[i].op;
      if (op < PIPERT_OP_NOP || op > PIPERT_OP_STEP || op == PIPERT_OP_BWD_W ||
          (!p->training && op > PIPERT_OP_SEND_ACT))
        snprintf(e, sizeof e, "stage %d: instruction %d: opcode %d is not %s", s, i, op,
                 p->training ? "a training opcode this runtime runs" : "an inference opcode");
      else if (sp->program[i].mb < 0 || sp->program[i].mb >= p->microbatches)
        snprintf(e, sizeof e, "stage %d: instruction %d: micro-batch %d out of range", s, i, sp->program[i].mb);
    }
    if (!e[0] && sp->program_len > 0) rt_check_program(p, s, e, sizeof e);
  }
  int programs = 1;
  for (int s = 0; s < p->n_stages && !e[0]; s++) programs &= p->stages[s].program_len > 0;
  if (!e[0] && programs) rt_check_deadlock(p, e, sizeof e);
  if (!e[0] && programs && rt_env_on("PIPERT_CHECK_NCCL")) { /* diagnostics: the NCCL transport's proof */
    const pipert_instr **prog = calloc((size_t)p->n_stages, sizeof *prog);
    int *len = calloc((size_t)p->n_stages, sizeof(int));
    for (int s = 0; s < p->n_stages; s++) prog[s] = p->stages[s].program, len[s] = p->stages[s].program_len;
    rt_check_rendezvous(p, prog, len, e, sizeof e);
    if (!e[0]) fprintf(stderr, "pipeline: the programs keep NCCL's rules\n");
    free(prog);
    free(len);
  }
  for (int o = 0; !e[0] && o < p->n_outputs; o++) {
    pipert_ref r = p->output_src[o];
    if (r.stage < 0 || r.stage >= p->n_stages || r.index < 0 || r.index >= p->stages[r.stage].stage->n_outputs ||
        p->stages[r.stage].stage->outputs[r.index].nbytes != p->outputs[o].nbytes)
      snprintf(e, sizeof e, "graph output %d: bad source (%d, %d)", o, r.stage, r.index);
  }
  /* scalars (rank 0): inference only (one value for every micro-batch, or per run) */
  int min_rank = p->training ? 1 : 0;
  for (int i = 0; !e[0] && i < p->n_inputs; i++)
    if (p->inputs[i].rank < min_rank || !rt_dtype_size(p->inputs[i].dtype))
      snprintf(e, sizeof e, "graph input %d: needs rank >= %d and a known dtype", i, min_rank);
  for (int i = 0; !e[0] && i < p->n_outputs; i++)
    if (p->outputs[i].rank < min_rank || !rt_dtype_size(p->outputs[i].dtype))
      snprintf(e, sizeof e, "graph output %d: needs rank >= %d and a known dtype", i, min_rank);
  if (e[0]) {
    rt_errorf("internal error: bad pipeline description: %s", e);
    return -1;
  }
  return 0;
}

const pipert_instr *rt_stage_program(const pipert_pipeline *p, int s, int M, int *len, pipert_instr **owned) {
  const pipert_stage_plan *sp = &p->stages[s];
  *owned = NULL;
  if (p->training && rt_async_mode(p)) { /* a run without a flush: one round of every micro-batch */
    *owned = rt_async_program(p, s, M, len);
    return *owned;
  }
  if (sp->program && sp->program_len > 0 && M == p->microbatches) {
    *len = sp->program_len;
    return sp->program;
  }
  pipert_instr *v = malloc(sizeof *v * 3 * (size_t)M);
  for (int m = 0; m < M; m++) {
    v[3 * m] = (pipert_instr){PIPERT_OP_RECV_ACT, m};
    v[3 * m + 1] = (pipert_instr){PIPERT_OP_FWD, m};
    v[3 * m + 2] = (pipert_instr){PIPERT_OP_SEND_ACT, m};
  }
  *len = 3 * M;
  *owned = v;
  return v;
}

int rt_recv_ahead(pipert_instr *prog, int i) {
  if (prog[i].op != PIPERT_OP_RECV_ACT && prog[i].op != PIPERT_OP_RECV_GRAD) return 0;
  int j = i - 1;
  while (j >= 0 && prog[j].op != PIPERT_OP_FWD && prog[j].op != PIPERT_OP_BWD && prog[j].op != PIPERT_OP_STEP &&
         prog[j].op != PIPERT_OP_ALLREDUCE)
    j--;
  if (j < 0 || prog[j].op == PIPERT_OP_STEP || prog[j].op == PIPERT_OP_ALLREDUCE) return 0;
  pipert_instr r = prog[i];
  memmove(&prog[j + 1], &prog[j], sizeof *prog * (size_t)(i - j));
  prog[j] = r;
  return 1;
}

int rt_programs_ahead(const pipert_pipeline *p, const pipert_instr *const *prog, const int *len, int M,
                      pipert_instr **ahead) {
  static const int tries[3][2] = {{PIPERT_OP_RECV_ACT, PIPERT_OP_RECV_GRAD}, /* every receive */
                                  {PIPERT_OP_RECV_GRAD, PIPERT_OP_RECV_GRAD},
                                  {PIPERT_OP_RECV_ACT, PIPERT_OP_RECV_ACT}};
  int S = p->n_stages;
  const pipert_instr **use = calloc((size_t)S + 1, sizeof *use);
  for (int s = 0; s < S; s++) ahead[s] = NULL;
  for (int t = 0; use && t < 3; t++) {
    int changed = 0, bad = 0;
    char e[512] = "";
    for (int s = 0; s < S && !bad; s++) {
      use[s] = prog[s];
      pipert_instr *v = malloc(sizeof *v * ((size_t)len[s] + 1)), *was = ahead[s];
      ahead[s] = NULL;
      free(was);
      if (!v) {
        bad = 1;
        break;
      }
      memcpy(v, prog[s], sizeof *v * (size_t)len[s]);
      int moved = 0;
      for (int i = 0; i < len[s]; i++)
        if ((v[i].op == tries[t][0] || v[i].op == tries[t][1]) && rt_recv_ahead(v, i)) moved = 1;
      if (!moved) {
        free(v);
        continue;
      }
      rt_check_stream(p, s, v, len[s], M, e, sizeof e);
      ahead[s] = v;
      use[s] = v;
      changed++;
      bad = e[0] != 0;
    }
    if (!bad && changed) rt_check_rendezvous(p, use, len, e, sizeof e);
    if (!bad && changed && !e[0]) {
      free(use);
      return changed;
    }
  }
  for (int s = 0; s < S; s++) {
    free(ahead[s]);
    ahead[s] = NULL;
  }
  free(use);
  return 0;
}

/* ---- inputs and outputs ------------------------------------------------- */

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

static int find_input(const pipert_pipeline *p, const char *name) {
  for (int i = 0; i < p->n_inputs; i++)
    if (!strcmp(p->inputs[i].name, name)) return i;
  return -1;
}

static void expected_shape(const pipert_tensor_desc *d, int64_t mbs, char *buf, size_t len) {
  int64_t dims[PIPERT_MAX_RANK];
  memcpy(dims, d->dims, sizeof dims);
  if (d->rank > 0) dims[0] = d->dims[0] * mbs;
  rt_shape_str(buf, len, d->rank, dims);
}

int64_t rt_microbatch_size(const pipert_pipeline *p) {
  for (int i = 0; i < p->n_inputs; i++)
    if (p->inputs[i].rank > 0) return p->inputs[i].dims[0];
  for (int i = 0; i < p->n_outputs; i++)
    if (p->outputs[i].rank > 0) return p->outputs[i].dims[0];
  return 1;
}

/* Takes ownership of *a into in[idx] after checking it. */
static int accept_input(const pipert_pipeline *p, int idx, rt_array *a, const char *src, rt_array *in, int64_t *T) {
  const pipert_tensor_desc *d = &p->inputs[idx];
  char want[256], got[256];
  if (in[idx].data) {
    rt_errorf("input '%s' given twice (again in %s)", d->name, src);
    return 2;
  }
  /* bfloat16, float8, float4 and float6 have no numpy type: they come as their bit
   * patterns (rt_npy.c), one value per byte but for bfloat16 */
  int bits = d->dtype == PIPERT_BFLOAT16 ? PIPERT_UINT16 : 0;
  if ((d->dtype >= PIPERT_FLOAT8E4M3FN && d->dtype <= PIPERT_FLOAT8E5M2FNUZ) || d->dtype == PIPERT_FLOAT4E2M1 ||
      d->dtype == PIPERT_FLOAT8E8M0 || d->dtype == PIPERT_FLOAT6E2M3 || d->dtype == PIPERT_FLOAT6E3M2)
    bits = PIPERT_UINT8;
  /* int4, uint4, int2 and uint2 come as int8 and uint8 arrays, one value per byte, in range */
  int sgn = d->dtype == PIPERT_INT4 || d->dtype == PIPERT_INT2;
  int small = sgn || d->dtype == PIPERT_UINT4 || d->dtype == PIPERT_UINT2;
  if (small) bits = sgn ? PIPERT_INT8 : PIPERT_UINT8;
  if (bits && a->dtype == bits && small) {
    int nb = d->dtype == PIPERT_INT4 || d->dtype == PIPERT_UINT4 ? 4 : 2;
    int lo = sgn ? -(1 << (nb - 1)) : 0, hi = sgn ? (1 << (nb - 1)) - 1 : (1 << nb) - 1;
    size_t n = a->nbytes; /* one byte per value */
    for (size_t i = 0; i < n; i++) {
      int v = sgn ? ((const int8_t *)a->data)[i] : ((const uint8_t *)a->data)[i];
      if (v < lo || v > hi) {
        rt_errorf("input '%s' (%s): element %zu is %d, outside %s's range [%d, %d]", d->name, src, i, v,
                  rt_dtype_name(d->dtype), lo, hi);
        return 2;
      }
    }
  }
  if (bits && a->dtype == bits) a->dtype = d->dtype;
  if (a->dtype != d->dtype) {
    char as[40] = "";
    if (bits) snprintf(as, sizeof as, " (%s bit patterns)", rt_dtype_name(bits));
    rt_errorf("input '%s' (%s): expected dtype %s%s, given %s", d->name, src, rt_dtype_name(d->dtype), as,
              rt_dtype_name(a->dtype));
    return 2;
  }
  if (d->rank == 0 && a->rank != 0) { /* a scalar: the same for every micro-batch (repeated by rt_load_inputs) */
    rt_errorf("input '%s' (%s): expected a scalar (shape ()), given %s", d->name, src,
              rt_shape_str(got, sizeof got, a->rank, a->dims));
    return 2;
  }
  if (d->rank > 0) {
    /* an empty batch (dim 0 of 0, compiled so: a micro-batch of no samples) runs once */
    int empty = a->rank == d->rank && a->dims[0] == 0 && d->dims[0] == 0;
    int ok = empty || (a->rank == d->rank && a->dims[0] > 0 && d->dims[0] > 0 && a->dims[0] % d->dims[0] == 0);
    for (int k = 1; ok && k < d->rank; k++) ok = a->dims[k] == d->dims[k];
    int64_t t = empty ? 1 : ok ? a->dims[0] / d->dims[0] : 0;
    if (ok && *T && t != *T) {
      rt_errorf("input '%s' (%s): batch of %lld samples, but other inputs have %lld", d->name, src,
                (long long)a->dims[0], (long long)(*T * d->dims[0]));
      return 2;
    }
    if (!ok) {
      expected_shape(d, p->microbatches, want, sizeof want);
      rt_errorf("input '%s' (%s): expected shape %s (dim 0 any multiple of the micro-batch size %lld), given %s",
                d->name, src, want, (long long)d->dims[0], rt_shape_str(got, sizeof got, a->rank, a->dims));
      return 2;
    }
    *T = t;
  }
  free(a->name);
  a->name = strdup(d->name);
  in[idx] = *a;
  memset(a, 0, sizeof *a);
  return 0;
}

/* --bench without --input: one batch of the compiled size, float inputs uniform in
 * [-1, 1) from a fixed seed, integer and boolean ones zero (a valid index of any Gather). */
static int generated_inputs(const pipert_pipeline *p, rt_array *in, int64_t *T) {
  uint64_t x = 0x9E3779B97F4A7C15ull;
  *T = p->microbatches > 0 ? p->microbatches : 1;
  for (int i = 0; i < p->n_inputs; i++) {
    const pipert_tensor_desc *d = &p->inputs[i];
    int64_t dims[PIPERT_MAX_RANK];
    memcpy(dims, d->dims, sizeof dims);
    if (d->rank > 0) dims[0] *= *T;
    if (rt_array_alloc(&in[i], d->name, d->dtype, d->rank, dims)) {
      rt_errorf("input '%s': out of memory for a generated batch", d->name);
      return 2;
    }
    size_t n = in[i].nbytes / rt_dtype_size(d->dtype);
    for (size_t k = 0; k < n && (d->dtype == PIPERT_FLOAT || d->dtype == PIPERT_DOUBLE); k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      double u = (double)(x >> 11) / 9007199254740992.0 * 2 - 1;
      if (d->dtype == PIPERT_FLOAT) ((float *)in[i].data)[k] = (float)u;
      else ((double *)in[i].data)[k] = u;
    }
  }
  if (p->n_inputs)
    fprintf(stderr, "pipeline: --bench on generated inputs (one batch of %lld micro-batch%s)\n", (long long)*T,
            *T == 1 ? "" : "es");
  return 0;
}

int rt_load_inputs(const pipert_pipeline *p, const rt_options *o, rt_array *in, int64_t *T) {
  char err[1024];
  int positional = 0, rc = 0;
  *T = 0;
  if (o->n_inputs == 0 && o->bench && p->n_inputs > 0) return generated_inputs(p, in, T);
  for (int i = 0; i < o->n_inputs && !rc; i++) {
    const rt_input_arg *ia = &o->inputs[i];
    if (ends_with(ia->path, ".npz") && !ia->name) {
      rt_array *arrs;
      int n;
      if (rt_npz_load(ia->path, &arrs, &n, err, sizeof err)) {
        rt_errorf("%s", err);
        return 2;
      }
      for (int k = 0; k < n && !rc; k++) {
        int idx = find_input(p, arrs[k].name);
        if (idx < 0 && !strncmp(arrs[k].name, "arr_", 4)) idx = atoi(arrs[k].name + 4);
        if (idx < 0 || idx >= p->n_inputs) {
          rt_errorf("%s: array '%s' is not an input of this pipeline", ia->path, arrs[k].name);
          rc = 2;
          break;
        }
        char src[1200];
        snprintf(src, sizeof src, "%s: %s", ia->path, arrs[k].name);
        rc = accept_input(p, idx, &arrs[k], src, in, T);
      }
      for (int k = 0; k < n; k++) rt_array_free(&arrs[k]);
      free(arrs);
      continue;
    }
    int idx;
    if (ia->name) {
      idx = find_input(p, ia->name);
      if (idx < 0) {
        rt_errorf("--input %s=%s: this pipeline has no input named '%s'", ia->name, ia->path, ia->name);
        return 2;
      }
    } else {
      while (positional < p->n_inputs && in[positional].data) positional++;
      idx = positional;
      if (idx >= p->n_inputs) {
        rt_errorf("--input %s: too many inputs (the pipeline has %d)", ia->path, p->n_inputs);
        return 2;
      }
    }
    rt_array a;
    if (rt_npy_load(ia->path, &a, err, sizeof err)) {
      rt_errorf("%s", err);
      return 2;
    }
    rc = accept_input(p, idx, &a, ia->path, in, T);
    rt_array_free(&a);
  }
  if (rc) return rc;
  for (int i = 0; i < p->n_inputs; i++)
    if (!in[i].data) {
      char want[256];
      expected_shape(&p->inputs[i], p->microbatches, want, sizeof want);
      rt_errorf("input '%s' (%s %s) not given: pass --input %s=FILE.npy", p->inputs[i].name,
                rt_dtype_name(p->inputs[i].dtype), want, p->inputs[i].name);
      return 2;
    }
  if (!*T) *T = p->microbatches; /* no input carries the batch */
  for (int i = 0; i < p->n_outputs; i++)
    if (p->outputs[i].rank == 0 && *T != 1) {
      rt_errorf(
          "graph output '%s' is a scalar, one value per run, but this run has %lld micro-batches: pass one "
          "batch of one micro-batch",
          p->outputs[i].name, (long long)*T);
      return 2;
    }
  for (int i = 0; i < p->n_inputs; i++) /* scalars: micro-batch g's copy at g * nbytes */
    if (p->inputs[i].rank == 0 && *T > 1) {
      rt_array rep;
      int64_t n = *T;
      size_t nb = p->inputs[i].nbytes;
      if (rt_array_alloc(&rep, p->inputs[i].name, in[i].dtype, 1, &n) || !rep.data) {
        rt_errorf("input '%s': out of memory", p->inputs[i].name);
        return 2;
      }
      for (int64_t g = 0; g < n; g++) memcpy((char *)rep.data + (size_t)g * nb, in[i].data, nb);
      rt_array_free(&in[i]);
      in[i] = rep;
    }
  return 0;
}

int rt_alloc_outputs(const pipert_pipeline *p, int64_t T, rt_array *out) {
  for (int i = 0; i < p->n_outputs; i++) {
    const pipert_tensor_desc *d = &p->outputs[i];
    int64_t dims[PIPERT_MAX_RANK];
    memcpy(dims, d->dims, sizeof dims);
    if (d->rank > 0) dims[0] *= T; /* a scalar: T is 1 (rt_load_inputs) */
    if (rt_array_alloc(&out[i], d->name, d->dtype, d->rank, dims)) {
      rt_errorf("output '%s': out of memory for %lld micro-batches", d->name, (long long)T);
      for (int k = 0; k < i; k++) rt_array_free(&out[k]);
      return 2;
    }
  }
  return 0;
}

static void safe_name(char *dst, size_t len, const char *name) {
  size_t i = 0;
  for (; name[i] && i + 1 < len; i++) {
    char c = name[i];
    dst[i] = (c == '/' || c == '\\' || c == ':' || (unsigned char)c < 32) ? '_' : c;
  }
  dst[i] = 0;
  if (!strcmp(dst, ".") || !strcmp(dst, "..") || !dst[0]) snprintf(dst, len, "output");
}

/* What --output names: one .npz, one .npy (the pipeline must have one output), or a
 * folder of .npy files; 2 after one line when it cannot be what it names, else 0. */
enum { OUT_NPZ, OUT_NPY, OUT_DIR };
static int output_kind(const pipert_pipeline *p, const char *path, int *kind) {
  struct stat st;
  int is_dir = (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) || ends_with(path, "/");
  *kind = ends_with(path, ".npz") ? OUT_NPZ : !is_dir && ends_with(path, ".npy") ? OUT_NPY : OUT_DIR;
  if (*kind == OUT_NPY && p->n_outputs != 1) {
    rt_errorf("--output %s: the pipeline has %d outputs: give a directory or a .npz file", path, p->n_outputs);
    return 2;
  }
  return 0;
}

int rt_check_output(const pipert_pipeline *p, const rt_options *o) {
  const char *path = o->output;
  int kind;
  if (!path) return 0;
  if (output_kind(p, path, &kind)) return 2;
  /* a folder is made once the run has its outputs, so tried where it will be */
  char probe[4400];
  struct stat st;
  if (kind != OUT_DIR || stat(path, &st) != 0) {
    snprintf(probe, sizeof probe, "%s", path);
    while (ends_with(probe, "/") && strlen(probe) > 1) probe[strlen(probe) - 1] = 0;
  } else snprintf(probe, sizeof probe, "%s%soutput.npy", path, ends_with(path, "/") ? "" : "/");
  if (rt_can_write(probe)) {
    rt_errorf("--output %s: cannot write there: %s", probe, strerror(errno));
    return 2;
  }
  return 0;
}

int rt_write_outputs(const pipert_pipeline *p, const rt_options *o, const rt_array *out) {
  char err[1024];
  const char *path = o->output;
  int kind;
  if (!path) return 0;
  if (output_kind(p, path, &kind)) return 2;
  if (kind == OUT_NPZ || kind == OUT_NPY) {
    if (kind == OUT_NPZ ? rt_npz_save(path, out, p->n_outputs, err, sizeof err)
                        : rt_npy_save(path, &out[0], err, sizeof err)) {
      rt_errorf("%s", err);
      return 2;
    }
    return 0;
  }
  if (mkdir(path, 0777) != 0 && errno != EEXIST) {
    rt_errorf("--output %s: %s", path, strerror(errno));
    return 2;
  }
  for (int i = 0; i < p->n_outputs; i++) {
    char name[256], file[4400];
    safe_name(name, sizeof name, p->outputs[i].name);
    snprintf(file, sizeof file, "%s%s%s.npy", path, ends_with(path, "/") ? "" : "/", name);
    if (rt_npy_save(file, &out[i], err, sizeof err)) {
      rt_errorf("%s", err);
      return 2;
    }
  }
  return 0;
}

void rt_print_bench(const pipert_pipeline *p, int iters, int64_t samples_per_iter, double wall_s, const double *busy_s,
                    const double *cpu_s, const rt_stats *stream) {
  double total_busy = 0;
  int workers = 0;
  printf("throughput: %.2f samples/s\n", (double)samples_per_iter * iters / wall_s);
  if (stream && stream->steady_batches > 0 && stream->steady_s > 0)
    printf(
        "steady state: %.2f samples/s (%d batches from the first batch's completion to the last's; the fill "
        "excluded)\n",
        (double)samples_per_iter * stream->steady_batches / stream->steady_s, stream->steady_batches);
  printf("latency: %.3f ms per batch of %lld samples (%d iterations)\n", wall_s / iters * 1e3,
         (long long)samples_per_iter, iters);
  for (int s = 0; s < p->n_stages; s++) {
    int r = p->stages[s].replicas;
    printf("stage %d: busy %.3f ms (%.1f%%), %d replica%s", s, busy_s[s] / iters * 1e3,
           100.0 * busy_s[s] / (wall_s * r), r, r == 1 ? "" : "s");
    /* its own CPU time: below busy where its thread shared a core (more stages than cores) */
    if (cpu_s) printf(", cpu %.3f ms", cpu_s[s] / iters * 1e3);
    printf("\n");
    total_busy += busy_s[s];
    workers += r;
  }
  if (stream) /* one fill and one drain over all iterations: the plan's per-batch bubble does not apply */
    printf("bubble: measured %.4f (streaming %d batches; per-batch prediction %.4f)\n",
           1.0 - total_busy / (wall_s * workers), iters, p->predicted_bubble);
  else printf("bubble: measured %.4f predicted %.4f\n", 1.0 - total_busy / (wall_s * workers), p->predicted_bubble);
  char k[512];
  rt_kernels_line(k, sizeof k);
  printf("%s\n", k);
  fflush(stdout);
}

/* ---- main ------------------------------------------------------------------ */

static int uses_devices(const pipert_pipeline *p) {
  for (int k = 0; p && k < p->n_stages; k++)
    if (p->stages[k].stage->device) return 1;
  return 0;
}

/* The usage text (f: stdout for --help, stderr after an error); the environment
 * variables the pipeline's target reads. */
static void usage(FILE *f, const char *argv0, const pipert_pipeline *p) {
  fprintf(f,
          "usage: %s --input [NAME=]FILE.npy|FILE.npz ... --output FILE.npy|FILE.npz|DIR\n"
          "       [--microbatches M] [--bench N [--stream]] [--threads-per-stage T] [--pin]\n"
          "       [--weights-dir DIR] [--transport auto|threads|mpi] [--timeout SECONDS]\n"
          "       %s --info        what this pipeline takes and gives, and its plan\n"
          "  --input          a graph input (.npy), or several by name from one .npz (repeatable)\n"
          "  --output         FILE.npy (one output), FILE.npz (every output by name) or a folder\n"
          "  --microbatches   micro-batches in flight per round (default: the compiled count)\n"
          "  --bench N        N timed batches (without --input: on generated data, one batch)\n"
          "  --stream         (with --bench) the N batches back to back through a pipeline filled once\n"
          "  --threads-per-stage T   BLAS threads per stage (default 1)\n"
          "  --pin            pin each stage's thread to a core\n"
          "  -v, --verbose    print the kernels in use and where the stages run (PIPERT_VERBOSE=1)\n"
          "  --weights-dir    where the weights files are (default: the binary's folder)\n"
          "  --transport      threads, mpi, or auto (default: mpi when started by mpirun)\n"
          "  --timeout S      fail a run that has not finished after S seconds\n"
          "  --launch         one process per stage replica on this host (through mpirun)\n"
          "%s"
          "exit status: 0 success, 2 a bad command line, input or output path, 1 a stage failed\n"
          "environment: PIPERT_VERBOSE=1 prints the kernels in use, where the stages run and how they hand over;\n"
          "       PIPERT_BLAS_CORE=keep never corrects a BLAS core below the CPU's (fix: corrects a\n"
          "       legacy OPENBLAS_CORETYPE too; docs/cpu.md)\n",
          argv0, argv0, p && p->training ? "" : "  (a training program: ... train --help)\n");
  if (uses_devices(p))
    fputs(
        "       PIPERT_HOST_SETS=1 hands over through host memory; PIPECC_CUDA_DEVICE=N pins\n"
        "       every cuda stage to GPU N; PIPERT_STALL_S=S fails a run whose stage has waited S\n"
        "       seconds for its own device (default 600 on GPUs, 0: off); PIPECC_CONV_TUNE=1 times\n"
        "       each cuda Conv's ways (cuDNN's algorithms, its graph API, pipecc's own kernel) on\n"
        "       its first call and keeps the fastest (PIPECC_CONV_VERBOSE=1 prints the times);\n"
        "       PIPECC_CONV_TUNE_FILE=PATH keeps those decisions in PATH for later runs\n",
        f);
}

/* --info: the inputs and outputs (name, dtype, batch and micro-batch shape), the plan in
 * brief, the target and pipecc's version, and the command that runs it. */
static void print_info(FILE *f, const char *argv0, const pipert_pipeline *p) {
  int M = p->microbatches > 0 ? p->microbatches : 1, R = 0;
  for (int k = 0; k < p->n_stages; k++) R += p->stages[k].replicas;
  fprintf(f, "%s: %s, compiled by pipecc %s for the %s target\n", argv0, p->name ? p->name : "model",
          p->pipecc_version ? p->pipecc_version : "?", p->target ? p->target : "?");
  fprintf(f, "plan: %d stage%s on %d device%s, %s, %d micro-batch%s per batch%s\n", p->n_stages,
          p->n_stages == 1 ? "" : "s", R, R == 1 ? "" : "s", p->schedule ? p->schedule : "?", M, M == 1 ? "" : "es",
          p->training ? ", a training program" : "");
  for (int k = 0; k < p->n_stages; k++)
    fprintf(f, "  stage %d: %s, %d replica%s\n", k, p->stages[k].stage->name ? p->stages[k].stage->name : "",
            p->stages[k].replicas, p->stages[k].replicas == 1 ? "" : "s");
  for (int side = 0; side < 2; side++) {
    int n = side ? p->n_outputs : p->n_inputs;
    const pipert_tensor_desc *t = side ? p->outputs : p->inputs;
    fprintf(f, "%s:%s\n", side ? "outputs" : "inputs", n ? "" : " none");
    for (int i = 0; i < n; i++) {
      char whole[160], mb[160];
      expected_shape(&t[i], t[i].rank ? M : 1, whole, sizeof whole);
      rt_shape_str(mb, sizeof mb, t[i].rank, t[i].dims);
      fprintf(f, "  %-24s %-8s batch %s, micro-batch %s\n", t[i].name, rt_dtype_name(t[i].dtype), whole, mb);
    }
  }
  if (p->training)
    fprintf(f, "run: %s train --data X.npy%s --steps N [--save W.npz]\n", argv0,
            p->labels_input >= 0 ? " --labels Y.npy" : "");
  else fprintf(f, "run: %s --input X.npy --output Y.npy (or --bench 10 on generated data)\n", argv0);
  char k[512];
  rt_kernels_line(k, sizeof k);
  fprintf(f, "%s\n", k);
}

static int parse_int(const char *opt, const char *v, int min, int *out) {
  char *e;
  long x = v ? strtol(v, &e, 10) : 0;
  if (!v || *e || x < min || x > 1 << 30) {
    rt_errorf("%s: expected an integer >= %d, given '%s'", opt, min, v ? v : "");
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int parse_args(int argc, char **argv, rt_options *o, const pipert_pipeline *p) {
  memset(o, 0, sizeof *o);
  o->p = p;
  o->threads_per_stage = 1;
  o->transport = "auto";
  o->inputs = calloc((size_t)argc, sizeof *o->inputs);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout, argv[0], o->p);
      exit(0);
    }
    if (!strcmp(a, "--info")) {
      print_info(stdout, argv[0], o->p);
      exit(0);
    }
    if (!strcmp(a, "--pin")) {
      o->pin = 1;
      continue;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) continue; /* pipert_main has set PIPERT_VERBOSE */
    if (!strcmp(a, "--stream")) {
      o->stream = 1;
      continue;
    }
    if (!v) {
      rt_errorf("%s: missing value", a);
      usage(stderr, argv[0], o->p);
      return -1;
    }
    i++;
    if (!strcmp(a, "--input") || !strcmp(a, "-i")) {
      const char *eq = strchr(v, '=');
      rt_input_arg *ia = &o->inputs[o->n_inputs++];
      if (eq) {
        ia->name = strndup(v, (size_t)(eq - v));
        ia->path = eq + 1;
      } else ia->path = v;
    } else if (!strcmp(a, "--output") || !strcmp(a, "-o")) o->output = v;
    else if (!strcmp(a, "--microbatches")) {
      if (parse_int(a, v, 1, &o->microbatches)) return -1;
    } else if (!strcmp(a, "--bench")) {
      if (parse_int(a, v, 1, &o->bench)) return -1;
    } else if (!strcmp(a, "--threads-per-stage")) {
      if (parse_int(a, v, 1, &o->threads_per_stage)) return -1;
    } else if (!strcmp(a, "--weights-dir")) o->weights_dir = v;
    else if (!strcmp(a, "--transport")) {
      if (strcmp(v, "auto") && strcmp(v, "threads") && strcmp(v, "mpi")) {
        rt_errorf("--transport: expected auto, threads or mpi, given '%s'", v);
        return -1;
      }
      o->transport = v;
    } else if (!strcmp(a, "--timeout")) {
      char *e;
      o->timeout_s = strtod(v, &e);
      if (*e || o->timeout_s < 0) {
        rt_errorf("--timeout: expected seconds, given '%s'", v);
        return -1;
      }
    } else {
      rt_errorf("unknown option '%s'", a);
      usage(stderr, argv[0], o->p);
      return -1;
    }
  }
  if (!o->weights_dir) o->weights_dir = rt_exe_dir();
  return 0;
}

static int run_threads(const pipert_pipeline *p, const rt_options *o) {
  int M = o->microbatches ? o->microbatches : p->microbatches;
  rt_array *in = calloc((size_t)p->n_inputs + 1, sizeof *in), *out = calloc((size_t)p->n_outputs + 1, sizeof *out);
  int64_t T = 0;
  rt_exec *ex = NULL;
  int rc = rt_check_output(p, o);
  if (!rc) rc = rt_load_inputs(p, o, in, &T);
  if (!rc) rc = rt_threads_create(p, o, M, &ex);
  if (!rc) rc = rt_alloc_outputs(p, T, out);
  rt_stats st = {.busy_s = calloc((size_t)p->n_stages, sizeof(double)),
                 .cpu_s = calloc((size_t)p->n_stages, sizeof(double))};
  if (!rc) rc = rt_threads_run(ex, in, out, T, &st);
  if (!rc && o->bench) {
    double *busy = calloc((size_t)p->n_stages, sizeof(double)), wall = 0;
    double *cpu = calloc((size_t)p->n_stages, sizeof(double));
    rt_stats sst = {0};
    if (o->stream) {
      /* One continuous stream of bench x T micro-batches through a pipeline that is
       * filled once: the steady state of a server fed batch after batch. */
      rt_exec *sx = NULL;
      rc = rt_threads_create(p, o, (int)(T * o->bench), &sx);
      if (!rc) {
        rt_threads_set_period(sx, T);
        rc = rt_threads_run(sx, in, out, T * o->bench, &st);
        wall = st.wall_s;
        sst = st;
        for (int s = 0; s < p->n_stages; s++) busy[s] = st.busy_s[s], cpu[s] = st.cpu_s[s];
      }
      if (sx) rt_threads_destroy(sx);
    } else {
      for (int it = 0; it < o->bench && !rc; it++) {
        rc = rt_threads_run(ex, in, out, T, &st);
        wall += st.wall_s;
        for (int s = 0; s < p->n_stages; s++) busy[s] += st.busy_s[s], cpu[s] += st.cpu_s[s];
      }
    }
    /* a device's stages: the host thread only queued the work, its CPU time says nothing */
    if (!rc)
      rt_print_bench(p, o->bench, T * rt_microbatch_size(p), wall, busy, rt_threads_on_device(ex) ? NULL : cpu,
                     o->stream ? &sst : NULL);
    free(busy);
    free(cpu);
  }
  if (!rc) rc = rt_write_outputs(p, o, out);
  if (ex) rt_threads_destroy(ex);
  for (int i = 0; i < p->n_inputs; i++) rt_array_free(&in[i]);
  for (int i = 0; i < p->n_outputs; i++) rt_array_free(&out[i]);
  free(in);
  free(out);
  free(st.busy_s);
  free(st.cpu_s);
  return rc;
}

static void free_args(rt_options *o) {
  for (int i = 0; i < o->n_inputs; i++) free((char *)o->inputs[i].name);
  free(o->inputs);
  o->inputs = NULL;
  o->n_inputs = 0;
}

/* --launch: this binary again under `mpirun -np R` (R = the plan's stage replicas), one
 * process per stage replica on this host (the MPI transport; NCCL between GPUs when it
 * applies). Returns only on failure. */
static int launch(const pipert_pipeline *p, int argc, char **argv) {
  int R = 0;
  for (int s = 0; s < p->n_stages; s++) R += p->stages[s].replicas;
  const char *mpirun = getenv("PIPERT_MPIRUN") ? getenv("PIPERT_MPIRUN") : "mpirun";
  char np[16], self[PATH_MAX];
  snprintf(np, sizeof np, "%d", R);
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  self[k > 0 ? k : 0] = 0;
  char **av = calloc((size_t)argc + 8, sizeof(char *));
  int n = 0;
  av[n++] = (char *)mpirun;
  if (getuid() == 0) av[n++] = "--allow-run-as-root";
  av[n++] = "-np";
  av[n++] = np;
  av[n++] = k > 0 ? self : argv[0];
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--launch")) av[n++] = argv[i];
  av[n] = NULL;
  fflush(NULL);
  execvp(mpirun, av);
  rt_errorf("--launch: cannot run %s: %s (install Open MPI, or start the processes with mpirun -np %d)", mpirun,
            strerror(errno), R);
  free(av);
  return 2;
}

static int main_with(int argc, char **argv, const pipert_pipeline *p);

int pipert_main(int argc, char **argv, const pipert_pipeline *p) {
  rt_install_crash_handler();
  for (int i = 1; i < argc; i++) /* -v anywhere (inference or train): PIPERT_VERBOSE=1 */
    if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) setenv("PIPERT_VERBOSE", "1", 1);
  rt_blas_check(argv); /* before any BLAS work: may restart the program once */
  if (rt_env_on("PIPERT_VERBOSE")) {
    char k[512];
    rt_kernels_line(k, sizeof k);
    fprintf(stderr, "pipeline: %s\n", k);
  }
  if (rt_validate_plan(p)) return 2;
  const pipert_pipeline *run = rt_fakedev_pipeline(p); /* PIPERT_FAKE_DEVICE=1: tests without a GPU */
  int rc = main_with(argc, argv, run);
  if (run != p) rt_fakedev_free(run);
  return rc;
}

static int main_with(int argc, char **argv, const pipert_pipeline *p) {
  rt_options o;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--launch")) {
      if (rt_mpi_launched()) { /* already one of the launched processes: the flag is done */
        memmove(&argv[i], &argv[i + 1], sizeof(char *) * (size_t)(argc - i));
        argc--;
        break;
      }
      if (!rt_mpi_compiled()) {
        rt_errorf("--launch: this pipeline was built without MPI support");
        return 2;
      }
      return launch(p, argc, argv);
    }
  int train_cmd = argc > 1 && !strcmp(argv[1], "train");
  if (train_cmd != !!p->training) {
    if (p->training)
      rt_errorf(
          "this is a training program (pipecc --train): run `%s train --data X.npy --labels Y.npy --steps N ...` "
          "(see %s train --help)",
          argv[0], argv[0]);
    else rt_errorf("`train`: this pipeline was compiled for inference; compile the model with pipecc --train");
    return 2;
  }
  if (train_cmd) return rt_train_main(p, argc - 2, argv + 2);
  int rc = parse_args(argc, argv, &o, p) ? 2 : 0;
  if (!rc && o.n_inputs == 0 && p->n_inputs > 0 && !o.bench) {
    rt_errorf("no --input given (the pipeline has %d input%s)", p->n_inputs, p->n_inputs == 1 ? "" : "s");
    usage(stderr, argv[0], p);
    rc = 2;
  }
  if (!rc && !o.output && !o.bench) {
    rt_errorf("no --output given");
    usage(stderr, argv[0], p);
    rc = 2;
  }
  if (!rc) {
    rt_set_blas_threads(o.threads_per_stage);
    int use_mpi = !strcmp(o.transport, "mpi") || (!strcmp(o.transport, "auto") && rt_mpi_launched());
    rc = use_mpi ? rt_mpi_main(p, &o) : run_threads(p, &o);
  }
  free_args(&o);
  return rc;
}
