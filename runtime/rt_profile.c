/* rt_profile.c - the per-node profiler of one-stage cpu builds (see pipert_profile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipert_profile.h"
#include "rt.h"

/* Single-threaded by construction: the profiler runs forward() on its main thread. */
static double *acc;  /* seconds per unit of the current run */
static int cur = -1; /* unit being timed, -1 none */
static double since;

void pipert_profile_mark(int unit) {
  double t = rt_now();
  if (acc && cur >= 0) acc[cur] += t - since;
  cur = unit;
  since = rt_now();
}

static void usage(void) {
  fputs(
      "usage: profile [--profile-out FILE.json] [--warmup N] [--reps N] [--weights-dir DIR] [-v]\n"
      "Times every node of this one-stage cpu build on one thread (one micro-batch of fixed\n"
      "pseudo-random inputs): N warm-up runs, then the median of --reps runs per node; a fused\n"
      "unit's time is split evenly over its nodes. Writes {\"device\": ..., \"nodes\": {NAME:\n"
      "{\"fwd_ms\": ...}}} for pipecc --profile FILE.json (stdout without --profile-out).\n",
      stderr);
}

static void put_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 32) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* "cpu: <model name> (1 thread)" */
static void device_name(char *buf, size_t n) {
  char model[200] = "unknown";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "model name", 10)) {
        char *c = strchr(line, ':');
        if (c) {
          c++;
          while (*c == ' ' || *c == '\t') c++;
          c[strcspn(c, "\n")] = 0;
          snprintf(model, sizeof model, "%s", c);
        }
        break;
      }
    fclose(f);
  }
  snprintf(buf, n, "cpu: %s (1 thread)", model);
}

int pipert_profile_main(int argc, char **argv, const pipert_stage_desc *d, const pipert_profile_units *u) {
  const char *out_path = NULL, *wdir = NULL;
  int warmup = 2, reps = 5, verbose = 0;
  rt_blas_check(argv); /* time the kernels the pipeline will run (docs/cpu.md, "The BLAS core") */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--profile-out") && i + 1 < argc) out_path = argv[++i];
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--weights-dir") && i + 1 < argc) wdir = argv[++i];
    else if (!strcmp(argv[i], "-v")) verbose = 1;
    else {
      usage();
      return strcmp(argv[i], "-h") && strcmp(argv[i], "--help") ? 2 : 0;
    }
  }
  if (warmup < 0 || reps < 1) {
    usage();
    return 2;
  }
  rt_set_blas_threads(1);
  rt_weights w;
  char err[1024];
  if (rt_weights_load(d, wdir ? wdir : rt_exe_dir(), &w, err, sizeof err)) {
    fprintf(stderr, "profile: %s\n", err);
    return 2;
  }
  void **in = calloc((size_t)d->n_inputs + 1, sizeof(void *)), **out = calloc((size_t)d->n_outputs + 1, sizeof(void *));
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (int k = 0; k < d->n_inputs; k++) {
    in[k] = rt_aligned_alloc(d->inputs[k].nbytes + 1);
    if (d->inputs[k].dtype == PIPERT_FLOAT)
      for (size_t i = 0; i < d->inputs[k].nbytes / 4; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        ((float *)in[k])[i] = (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
      }
  }
  for (int k = 0; k < d->n_outputs; k++) out[k] = rt_aligned_alloc(d->outputs[k].nbytes + 1);
  void *st = NULL;
  if (d->init(&st, w.map, w.len)) {
    fprintf(stderr, "profile: stage init failed\n");
    return 1;
  }
  const int U = u->n_units;
  double *runs = calloc((size_t)reps * (size_t)(U + 1), sizeof(double)), *med = calloc((size_t)U + 1, sizeof(double));
  double *col = calloc((size_t)reps, sizeof(double));
  for (int r = -warmup; r < reps; r++) {
    acc = r >= 0 ? runs + (size_t)r * (size_t)(U + 1) : NULL;
    cur = -1;
    if (d->forward(st, (const void *const *)in, out)) {
      fprintf(stderr, "profile: forward failed\n");
      return 1;
    }
    acc = NULL;
  }
  double total = 0;
  for (int k = 0; k < U; k++) {
    for (int r = 0; r < reps; r++) col[r] = runs[(size_t)r * (size_t)(U + 1) + (size_t)k];
    qsort(col, (size_t)reps, sizeof(double), cmp_double);
    med[k] = (reps % 2 ? col[reps / 2] : 0.5 * (col[reps / 2 - 1] + col[reps / 2])) * 1e3;
    total += med[k];
  }
  FILE *o = out_path ? fopen(out_path, "w") : stdout;
  if (!o) {
    perror(out_path);
    return 2;
  }
  char dev[256];
  device_name(dev, sizeof dev);
  fputs("{\"device\": ", o);
  put_json_str(o, dev);
  /* the micro-batch it ran (dim 0 of its first input): the planner scales the times to its own */
  long long batch = d->n_inputs > 0 && d->inputs[0].rank > 0 ? (long long)d->inputs[0].dims[0] : 0;
  fprintf(o, ", \"warmup\": %d, \"reps\": %d, \"batch\": %lld, \"nodes\": {", warmup, reps, batch);
  int first = 1, k = 0;
  for (int un = 0; un < U; un++)
    for (int m = 0; m < u->unit_n_nodes[un]; m++, k++) {
      if (!u->node_names[k][0]) continue;
      fputs(first ? "\n  " : ",\n  ", o);
      first = 0;
      put_json_str(o, u->node_names[k]);
      fprintf(o, ": {\"fwd_ms\": %.6g}", med[un] / u->unit_n_nodes[un]);
    }
  fprintf(o, "\n}, \"total_ms\": %.6g}\n", total);
  if (out_path) fclose(o);
  if (verbose) {
    char k[512];
    rt_kernels_line(k, sizeof k);
    fprintf(stderr, "profile: %s\n", k);
    int *ord = calloc((size_t)U + 1, sizeof(int));
    for (int i = 0; i < U; i++) ord[i] = i;
    for (int i = 1; i < U; i++) /* by time, descending (insertion sort: U is small) */
      for (int j = i; j > 0 && med[ord[j]] > med[ord[j - 1]]; j--) {
        int t = ord[j];
        ord[j] = ord[j - 1];
        ord[j - 1] = t;
      }
    for (int i = 0; i < U; i++)
      if (med[ord[i]] > 0)
        fprintf(stderr, "%10.3f ms %5.1f%%  %s\n", med[ord[i]], 100 * med[ord[i]] / total, u->unit_labels[ord[i]]);
    free(ord);
  }
  if (d->fini) d->fini(st);
  fprintf(stderr, "profile: %d units, %.3f ms per micro-batch on %s%s%s\n", U, total, dev, out_path ? ", wrote " : "",
          out_path ? out_path : "");
  for (int i = 0; i < d->n_inputs; i++) free(in[i]);
  for (int i = 0; i < d->n_outputs; i++) free(out[i]);
  free(in);
  free(out);
  free(runs);
  free(med);
  free(col);
  rt_weights_unload(&w);
  return 0;
}
