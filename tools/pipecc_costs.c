/* tools/pipecc_costs.c - measured costs by default, cached (see pipecc_costs.h). */
#include "tools/pipecc_costs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/c/cg_c.h"
#include "codegen/codegen.h"
#include "ir/print.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- the cache key ---- */

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull + (h >> 29); }
static uint64_t mix_str(uint64_t h, const char *s) { return mix(h, cg_checksum64(s ? s : "", s ? strlen(s) : 0)); }

/* Bytes up to 1 MiB in full; larger, their length and 64 spread samples of 4 KiB. A
 * node's time depends on shapes and not on weight values, and the graph's structure is
 * hashed in full (graph_hash's text), so sampling a large weight misses no change that
 * could change a profile. */
static uint64_t bytes_hash(const void *data, size_t n) {
  const size_t full = (size_t)1 << 20, chunk = 4096, samples = 64;
  if (n <= full) return cg_checksum64(data, n);
  uint64_t h = mix(0, (uint64_t)n);
  for (size_t k = 0; k < samples; k++) {
    size_t at = (n - chunk) / (samples - 1) * k;
    h = mix(h, cg_checksum64((const char *)data + at, chunk));
  }
  return h;
}

static uint64_t file_hash(const char *path) {
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || st.st_size <= 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return 0;
  uint64_t h = bytes_hash(p, (size_t)st.st_size);
  munmap(p, (size_t)st.st_size);
  return h;
}

/* The optimised graph: its text (without the first line, which names the model's path)
 * and every constant's bytes. */
static uint64_t graph_hash(const ir_graph *g) {
  char *txt = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&txt, &len);
  uint64_t h = 0x9E3779B97F4A7C15ull;
  if (f) {
    ir_print_text(f, g);
    fclose(f);
    const char *body = txt ? strchr(txt, '\n') : NULL;
    body = body ? body + 1 : "";
    h = mix(h, cg_checksum64(body, strlen(body)));
    free(txt);
  }
  for (int v = 0; v < g->n_values; v++) {
    const ir_value *x = &g->values[v];
    if (x->kind == IR_VAL_CONST && x->data && x->nbytes) h = mix(h, bytes_hash(x->data, x->nbytes));
  }
  return h;
}

/* /proc/cpuinfo's first "model name" and "flags" lines. */
static uint64_t machine_hash(char *model, size_t n) {
  uint64_t h = 0;
  snprintf(model, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  int got_model = 0, got_flags = 0;
  while (f && fgets(line, sizeof line, f) && !(got_model && got_flags)) {
    const char *c = strchr(line, ':');
    if (!c) continue;
    if (!got_model && !strncmp(line, "model name", 10)) {
      got_model = 1;
      snprintf(model, n, "%s", c + 2);
      model[strcspn(model, "\n")] = 0;
      h = mix_str(h, model);
    } else if (!got_flags && (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8))) {
      got_flags = 1;
      h = mix_str(h, c);
    }
  }
  if (f) fclose(f);
  return mix_str(h, getenv("OPENBLAS_CORETYPE"));
}

static uint64_t cache_key(const pipecc_run *r, char *cpu, size_t n) {
  const pipecc_options *o = r->o;
  uint64_t h = mix_str(0, "pipecc profile 1");
  h = mix_str(h, PIPECC_VERSION);
  h = mix_str(h, CG_C_CC " " CG_C_CFLAGS);
  h = mix(h, file_hash(o->model));
  h = mix(h, graph_hash(r->g));
  h = mix(h, (uint64_t)o->no_fuse * 3 + (uint64_t)o->winograd * 7 + (uint64_t)o->no_tf32 * 11);
  return mix(h, machine_hash(cpu, n));
}

/* ---- files ---- */

int pipecc_mkdir_p(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(p, 0755) && errno != EEXIST) return -1;
      *s = '/';
    }
  return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}
void pipecc_rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int cache_dir(char *buf, size_t n) {
  const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (x && *x == '/') snprintf(buf, n, "%s/pipecc/profiles", x);
  else if (home && *home) snprintf(buf, n, "%s/.cache/pipecc/profiles", home);
  else return -1;
  return 0;
}

/* src copied to dst through dst.tmp.PID, renamed into place (readers never see half). */
static int store_atomic(const char *src, const char *dst) {
  char tmp[4400];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dst, (long)getpid());
  FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
  int ok = in && out;
  char buf[65536];
  size_t k;
  while (ok && (k = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, k, out) == k;
  if (in) fclose(in);
  if (out && fclose(out)) ok = 0;
  if (ok && rename(tmp, dst)) ok = 0;
  if (!ok) unlink(tmp);
  return ok ? 0 : -1;
}

/* ---- profiling ---- */

int pipecc_run_profiler(const char *dir, int verbose) {
  char exe[4300], out[4300];
  snprintf(exe, sizeof exe, "%s/profile", dir);
  snprintf(out, sizeof out, "%s/profile.json", dir);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (!verbose) {
      int nul = open("/dev/null", O_WRONLY);
      if (nul >= 0) dup2(nul, 1), dup2(nul, 2);
    }
    execl(exe, exe, "--profile-out", out, "--warmup", "1", "--reps", "3", (char *)NULL);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int pipecc_profile_graph(ir_graph *g, const pipecc_options *o, const char *dir) {
  pipecc_rm_rf(dir);
  char obj[4300];
  snprintf(obj, sizeof obj, "%s/obj", dir);
  if (pipecc_mkdir_p(obj)) {
    fprintf(stderr, "pipecc: cannot create %s: %s\n", obj, strerror(errno));
    return -1;
  }
  int *stage = calloc((size_t)g->n_nodes + 1, sizeof *stage);
  cg_plan cp = {1, stage, NULL, NULL, NULL, 1, 0.0, "1f1b", NULL};
  cg_options co = {o->cmdline, o->model, 1, o->jobs, o->pass.verbose, o->no_tf32, NULL, 1};
  int rc = cg_c_emit(g, &cp, &co, dir);
  free(stage);
  if (rc) return -1;
  co.emit_only = 0;
  if (cg_build_profile(dir, &co)) return -1;
  if (pipecc_run_profiler(dir, o->pass.verbose)) {
    fprintf(stderr, "pipecc: the profiler %s/profile failed\n", dir);
    return -1;
  }
  return 0;
}

static const char *analytical_reason(const pipecc_run *r) {
  const pipecc_options *o = r->o;
  const char *env = getenv("PIPECC_COSTS");
  if (o->cost_model) return "--cost-model";
  if (env && !strcmp(env, "model")) return "PIPECC_COSTS=model";
  if (strcmp(o->target, "cpu")) return "the cuda target is profiled with --profile-run on a GPU";
  if (o->device_name && strcmp(o->device_name, "cpu")) return "--device: planned for that device, not this machine";
  if (o->split_even) return "--split even replaces the plan's stages";
  if (o->train) return "training: the profiler times forward nodes only";
  return NULL;
}

int pipecc_costs_get(pipecc_run *r, pipecc_costs *c) {
  const pipecc_options *o = r->o;
  memset(c, 0, sizeof *c);
  if (o->profile_path) {
    snprintf(c->path, sizeof c->path, "%s", o->profile_path);
    snprintf(c->line, sizeof c->line, "measured, from %s", o->profile_path);
    return 0;
  }
  if (o->devices < 2) return 0; /* one device: nothing to balance, nothing to say */
  const char *why = analytical_reason(r);
  if (why) {
    snprintf(c->line, sizeof c->line, "the cost model (%s)", why);
    return 0;
  }
  char cpu[256], cdir[4096], mb[96] = "";
  uint64_t key = cache_key(r, cpu, sizeof cpu);
  for (int k = 0; k < r->g->n_inputs; k++)
    if (r->g->values[r->g->inputs[k]].shape.rank > 0) {
      ir_shape_str(&r->g->values[r->g->inputs[k]].shape, mb, sizeof mb);
      break;
    }
  int have_cache = !cache_dir(cdir, sizeof cdir);
  if (have_cache) {
    snprintf(c->path, sizeof c->path, "%s/%016" PRIx64 ".json", cdir, key);
    if (!access(c->path, R_OK)) {
      snprintf(c->line, sizeof c->line, "measured on this machine (cached: %s)", c->path);
      return 0;
    }
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/.pipecc-profile", o->out_dir);
  if (!o->quiet)
    fprintf(stderr,
            "pipecc: profiling the model at micro-batch %s on one core of %s (once per model, flags and "
            "machine: cached; --cost-model skips it)\n",
            mb, cpu);
  double t = now_s();
  if (pipecc_mkdir_p(o->out_dir) || pipecc_profile_graph(r->g, o, dir)) { /* said why; the plan does not need it */
    pipecc_rm_rf(dir);
    *c->path = 0;
    fprintf(stderr, "pipecc: warning: profiling failed; planning on the cost model\n");
    snprintf(c->line, sizeof c->line, "the cost model (profiling failed)");
    return 0;
  }
  t = now_s() - t;
  char js[4300];
  snprintf(js, sizeof js, "%s/profile.json", dir);
  if (have_cache && !pipecc_mkdir_p(cdir) && !store_atomic(js, c->path)) {
    pipecc_rm_rf(dir);
    snprintf(c->line, sizeof c->line, "measured on this machine (profiled in %.1f s; cached: %s)", t, c->path);
    return 0;
  }
  fprintf(stderr, "pipecc: warning: cannot write the profile cache %s; profiling again next time\n",
          have_cache ? cdir : "(no $XDG_CACHE_HOME or $HOME)");
  snprintf(c->path, sizeof c->path, "%s", js);
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  snprintf(c->line, sizeof c->line, "measured on this machine (profiled in %.1f s)", t);
  return 0;
}

void pipecc_costs_done(pipecc_costs *c) {
  if (*c->dir) pipecc_rm_rf(c->dir);
  *c->dir = 0;
}
