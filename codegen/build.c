/* codegen/build.c - cg_build (compile an emitted build directory into DIR/pipeline,
 * stages in parallel, with progress lines) and cg_checksum64 (runtime/pipert_xxh64.h, the
 * same function the runtime checks weights files with). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/c/cg_c.h"
#include "codegen/codegen.h"
#include "runtime/pipert_xxh64.h"

uint64_t cg_checksum64(const void *data, size_t len) { return pipert_xxh64(data, len); }

/* ---- build ---------------------------------------------------------------------------------- */

typedef struct {
  char **argv;
  char *label; /* "cc stage_1.c" */
  pid_t pid;
  double t0; /* when it started (its progress line gives the time it took) */
  int log;   /* the compiler's output: a temporary file, unlinked at once (so that
              * nothing is left behind however pipecc ends), read back through this */
} job;

static char **split_words(const char *s, int *n) {
  char **v = NULL;
  *n = 0;
  const char *p = s;
  while (*p) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *e = p;
    while (*e && *e != ' ') e++;
    v = realloc(v, sizeof(char *) * (size_t)(*n + 2));
    v[(*n)++] = strndup(p, (size_t)(e - p));
    p = e;
  }
  return v;
}

static char **make_argv(const char *words, const char *const *extra, int n_extra) {
  int n;
  char **w = split_words(words, &n);
  char **v = malloc(sizeof(char *) * (size_t)(n + n_extra + 1));
  for (int i = 0; i < n; i++) v[i] = w[i];
  for (int i = 0; i < n_extra; i++) v[n + i] = strdup(extra[i]);
  v[n + n_extra] = NULL;
  free(w);
  return v;
}

static void free_argv(char **v) {
  for (char **p = v; p && *p; p++) free(*p);
  free(v);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int start_job(job *j, const char *dir) {
  const char *tmp = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/pipecc-cc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkostemp(path, O_CLOEXEC); /* not inherited by the other jobs (dup2 below clears it) */
  if (fd < 0) {
    fprintf(stderr, "pipecc: cannot create a temporary file in %s: %s\n", tmp && *tmp ? tmp : "/tmp", strerror(errno));
    return -1;
  }
  unlink(path);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "pipecc: fork: %s\n", strerror(errno));
    close(fd);
    return -1;
  }
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    if (chdir(dir)) _exit(127);
    execvp(j->argv[0], j->argv);
    fprintf(stderr, "cannot run %s: %s\n", j->argv[0], strerror(errno));
    _exit(127);
  }
  j->log = fd;
  j->pid = pid;
  j->t0 = now_s();
  return 0;
}

/* Print the job's output (if any) to stderr and close the log. */
static void dump_log(job *j) {
  char buf[4096];
  ssize_t n;
  if (lseek(j->log, 0, SEEK_SET) == 0)
    while ((n = read(j->log, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)n, stderr);
  close(j->log);
  j->log = -1;
}

static int file_exists(const char *dir, const char *name) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return stat(path, &st) == 0;
}

/* Run the n jobs js in parallel, at most `jobs` at once, in order of submission: one
 * progress line "[k/total] LABEL (T s)" each as it ends (k counting on from done0; none
 * when quiet), its output (warnings too) after it, and the first failure stops new ones.
 * 0, or 1 when one failed. */
static int cg_run_jobs_(const char *out_dir, job *js, int n, int done0, int total, int jobs, int quiet) {
  int failed = 0, next = 0, running = 0, done = done0;
  while ((next < n && !failed) || running) {
    while (!failed && next < n && running < jobs) {
      if (start_job(&js[next], out_dir)) {
        failed = 1;
        break;
      }
      next++;
      running++;
    }
    if (!running) break;
    int status;
    pid_t pid = wait(&status);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < next; k++) {
      if (js[k].pid != pid) continue;
      running--;
      done++;
      js[k].pid = 0;
      int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (ok && !quiet) fprintf(stderr, "[%d/%d] %s (%.1f s)\n", done, total, js[k].label, now_s() - js[k].t0);
      if (!ok) {
        fprintf(stderr, "pipecc: %s failed:\n", js[k].label);
        failed = 1;
      }
      dump_log(&js[k]); /* warnings too: the emitted code is meant to be warning-free */
      if (!ok)
        fprintf(stderr, "pipecc: internal error: the code emitted into %s does not compile (a pipecc bug)\n", out_dir);
    }
  }
  return failed;
}

int cg_build(const char *out_dir, const cg_options *o) {
  int n_src = 0;
  char name[64];
  for (;; n_src++) {
    snprintf(name, sizeof name, "stage_%d.c", n_src);
    if (!file_exists(out_dir, name)) break;
  }
  if (!n_src || !file_exists(out_dir, "pipeline_main.c")) {
    fprintf(stderr, "pipecc: internal error: %s has no stage_0.c or pipeline_main.c to build\n", out_dir);
    return -1;
  }
  int jobs = o && o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (jobs < 1) jobs = 1;
  int total = n_src + 2; /* sources, pipeline_main.c, link */
  job *js = calloc((size_t)total, sizeof(job));
  char cflags[8192];
  snprintf(cflags, sizeof cflags, "%s %s -I%s", CG_C_CC, CG_C_CFLAGS, cg_runtime()->include);
  /* objects in DIR/obj; the binary linked to a file of this process and renamed, so a
   * pipeline running from DIR keeps its own */
  char objdir[4200];
  snprintf(objdir, sizeof objdir, "%s/obj", out_dir);
  if (mkdir(objdir, 0755) && errno != EEXIST) {
    fprintf(stderr, "pipecc: cannot create %s: %s\n", objdir, strerror(errno));
    free(js);
    return -1;
  }
  int quiet = o && o->quiet;
  for (int k = 0; k <= n_src; k++) {
    char src[64], obj[64];
    if (k < n_src) snprintf(src, sizeof src, "stage_%d.c", k);
    else snprintf(src, sizeof src, "pipeline_main.c");
    snprintf(obj, sizeof obj, "obj/%.*s.o", (int)strlen(src) - 2, src);
    const char *extra[] = {"-c", "-o", obj, src};
    js[k].argv = make_argv(cflags, extra, 4);
    js[k].label = malloc(strlen(src) + 8);
    sprintf(js[k].label, "cc %s", src);
  }
  int failed = cg_run_jobs_(out_dir, js, n_src + 1, 0, total, jobs, quiet);
  if (!failed) {
    /* cc -o pipeline stage_*.o pipeline_main.o libpipert.a [its libs] -lopenblas -lpthread -lm */
    job *l = &js[n_src + 1];
    char libs[2048];
    snprintf(libs, sizeof libs, "%s %s", PIPERT_LINK_LIBS, CG_C_LIBS);
    int n_words;
    char **libw = split_words(libs, &n_words);
    char **argv = malloc(sizeof(char *) * (size_t)(n_src + n_words + 8));
    int a = 0;
    char tmp_bin[64];
    snprintf(tmp_bin, sizeof tmp_bin, "pipeline.tmp.%ld", (long)getpid());
    argv[a++] = strdup(CG_C_CC);
    argv[a++] = strdup("-o");
    argv[a++] = strdup(tmp_bin);
    for (int k = 0; k < n_src; k++) {
      argv[a] = malloc(32);
      snprintf(argv[a++], 32, "obj/stage_%d.o", k);
    }
    argv[a++] = strdup("obj/pipeline_main.o");
    argv[a++] = strdup(cg_runtime()->lib);
    for (int k = 0; k < n_words; k++) argv[a++] = libw[k];
    argv[a] = NULL;
    free(libw);
    l->argv = argv;
    l->label = strdup("link pipeline");
    if (start_job(l, out_dir)) failed = 1;
    else {
      int status;
      while (waitpid(l->pid, &status, 0) < 0 && errno == EINTR) {
      }
      int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      char from[4200], to[4200];
      snprintf(from, sizeof from, "%s/%s", out_dir, tmp_bin);
      snprintf(to, sizeof to, "%s/pipeline", out_dir);
      if (ok && rename(from, to)) {
        fprintf(stderr, "pipecc: %s: %s\n", to, strerror(errno));
        ok = 0;
      } else if (!ok) fprintf(stderr, "pipecc: link failed:\n");
      if (ok && !quiet) fprintf(stderr, "[%d/%d] %s (%.1f s)\n", total, total, l->label, now_s() - l->t0);
      dump_log(l);
      if (!ok) {
        remove(from);
        fprintf(stderr, "pipecc: internal error: linking %s/pipeline failed\n", out_dir);
        failed = 1;
      }
    }
  }
  for (int k = 0; k < total; k++) {
    free_argv(js[k].argv);
    free(js[k].label);
  }
  free(js);
  return failed ? -1 : 0;
}

int cg_build_make(const char *out_dir, const cg_options *o, const char *const *objects, const char *const *labels,
                  int n, const char *targets, const char *link_label) {
  int jobs = o && o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (jobs < 1) jobs = 1;
  int quiet = o && o->quiet, verbose = o && o->verbose;
  job *js = calloc((size_t)n + 1, sizeof(job));
  const char *mode = verbose ? "--no-print-directory" : "-s";
  for (int k = 0; k <= n; k++) {
    char words[512];
    snprintf(words, sizeof words, "make %s %s", mode, k < n ? objects[k] : targets);
    js[k].argv = make_argv(words, NULL, 0);
    js[k].label = strdup(k < n ? labels[k] : link_label);
    if (verbose) fprintf(stderr, "pipecc: (in %s) %s\n", out_dir, words);
  }
  int failed = cg_run_jobs_(out_dir, js, n, 0, n + 1, jobs, quiet);
  if (!failed) failed = cg_run_jobs_(out_dir, js + n, 1, n, n + 1, 1, quiet);
  for (int k = 0; k <= n; k++) {
    free_argv(js[k].argv);
    free(js[k].label);
  }
  free(js);
  return failed ? -1 : 0;
}

/* Run one job to completion; 0 when it exited 0 (its output goes to stderr). */
static int run_job(job *j, const char *dir, int quiet) {
  if (!quiet) fprintf(stderr, "%s\n", j->label);
  if (start_job(j, dir)) return -1;
  int status;
  while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR) {
  }
  dump_log(j);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int cg_build_profile(const char *out_dir, const cg_options *o) {
  if (!file_exists(out_dir, "profile_main.c") || !file_exists(out_dir, "stage_0.c") ||
      file_exists(out_dir, "stage_1.c")) {
    fprintf(stderr, "pipecc: internal error: %s is not a one-stage cpu build with profile_main.c\n", out_dir);
    return -1;
  }
  char cflags[8192], libs[8192];
  snprintf(cflags, sizeof cflags, "%s %s -I%s", CG_C_CC, CG_C_CFLAGS, cg_runtime()->include);
  snprintf(libs, sizeof libs, "%s -o profile obj/stage_0_prof.o obj/profile_main.o %s %s %s", CG_C_CC,
           cg_runtime()->lib, PIPERT_LINK_LIBS, CG_C_LIBS);
  const char *e1[] = {"-DPIPECC_PROFILE", "-c", "-o", "obj/stage_0_prof.o", "stage_0.c"};
  const char *e2[] = {"-c", "-o", "obj/profile_main.o", "profile_main.c"};
  job js[3];
  memset(js, 0, sizeof js);
  js[0].argv = make_argv(cflags, e1, 5);
  js[0].label = strdup("[profile 1/3] cc -DPIPECC_PROFILE stage_0.c");
  js[1].argv = make_argv(cflags, e2, 4);
  js[1].label = strdup("[profile 2/3] cc profile_main.c");
  js[2].argv = make_argv(libs, NULL, 0);
  js[2].label = strdup("[profile 3/3] link profile");
  int rc = 0;
  for (int k = 0; k < 3 && !rc; k++)
    if (run_job(&js[k], out_dir, o->quiet)) {
      fprintf(stderr, "pipecc: internal error: %s failed in %s (a pipecc bug)\n", js[k].label, out_dir);
      rc = -1;
    }
  for (int k = 0; k < 3; k++) {
    free_argv(js[k].argv);
    free(js[k].label);
  }
  return rc;
}
