/* codegen/paths.c - where the runtime that pipelines link is (see codegen.h, cg_runtime). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"

#ifndef PIPERT_INCLUDE_DIR
#define PIPERT_INCLUDE_DIR "runtime"
#endif
#ifndef PIPERT_LIB
#define PIPERT_LIB "libpipert.a"
#endif
#ifndef PIPECC_SOURCE_DIR
#define PIPECC_SOURCE_DIR "."
#endif

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The installed layout under prefix: 1 when its libpipert.a is there. */
static int installed(const char *prefix, cg_runtime_paths *r) {
  snprintf(r->lib, sizeof r->lib, "%s/lib/pipecc/libpipert.a", prefix);
  if (!is_file(r->lib)) return 0;
  snprintf(r->include, sizeof r->include, "%s/include/pipecc", prefix);
  snprintf(r->cuda_rt, sizeof r->cuda_rt, "%s/share/pipecc/cuda/rt", prefix);
  r->where = "installed";
  return 1;
}

const cg_runtime_paths *cg_runtime(void) {
  static cg_runtime_paths r;
  static int done;
  if (done) return &r;
  done = 1;
  const char *home = getenv("PIPECC_HOME");
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (home && *home && installed(home, &r)) r.where = "PIPECC_HOME";
  else if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/'); /* PREFIX/bin/pipecc -> PREFIX */
    if (slash) *slash = 0;
    slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    if (!slash || !installed(exe, &r)) n = 0;
  }
  if (!r.where) { /* pipecc run from its build tree */
    snprintf(r.include, sizeof r.include, "%s", PIPERT_INCLUDE_DIR);
    snprintf(r.lib, sizeof r.lib, "%s", PIPERT_LIB);
    snprintf(r.cuda_rt, sizeof r.cuda_rt, "%s/codegen/cuda/rt", PIPECC_SOURCE_DIR);
    r.where = "build tree";
  }
  const char *rt = getenv("PIPECC_CUDA_RT_DIR");
  if (rt && *rt) snprintf(r.cuda_rt, sizeof r.cuda_rt, "%s", rt);
  return &r;
}
