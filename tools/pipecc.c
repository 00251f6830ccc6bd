/* tools/pipecc.c - the pipecc command: ONNX model -> pipeline stages -> code.
 *
 * Exit status: 0 success, 2 a user or model error (one clear line per problem),
 * anything else a bug in pipecc. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frontend/onnx_load.h"
#include "ir/diag.h"
#include "ir/print.h"
#include "passes/pass.h"

static void usage(FILE *f) {
  fputs(
      "usage: pipecc MODEL.onnx [options]\n"
      "\n"
      "Compile an ONNX model into a pipeline of stages over several devices.\n"
      "\n"
      "Input:\n"
      "  --shape NAME:AxBxC     bind the shape of graph input NAME (trtexec style; repeatable)\n"
      "  -d DIM=VALUE           bind the symbolic dim DIM (dim_param) of every input (repeatable)\n"
      "\n"
      "Output:\n"
      "  --emit=ir              print the IR after the front-end passes, one line per node\n"
      "  --emit=ir-json         print the IR as JSON on stdout\n"
      "  -o, --out DIR          output folder\n"
      "\n"
      "Debugging:\n"
      "  -d PASS                dump the IR after PASS (a name without '='; passes: bind, fold, shape)\n"
      "  --time-passes          print the wall time of every pass on stderr\n"
      "  -v, --verbose          more messages\n"
      "  -h, --help             this help\n"
      "  --version              print the version\n"
      "\n"
      "Exit status: 0 success, 2 error in the model or the command line.\n",
      f);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cli_error(const char *fmt, const char *arg) {
  fprintf(stderr, "pipecc: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see pipecc --help)\n");
  return 2;
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

int main(int argc, char **argv) {
  const char *model = NULL, *emit = NULL, *out_dir = NULL;
  const char *dumps[16];
  int n_dumps = 0, time_passes = 0;
  pass_opts opts = {0};
  opts.shapes = calloc((size_t)argc, sizeof *opts.shapes);
  opts.dims = calloc((size_t)argc, sizeof *opts.dims);

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define NEXT()                                                      \
  ({                                                                \
    if (i + 1 >= argc) return cli_error("option %s needs a value", a); \
    argv[++i];                                                      \
  })
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--version")) {
      printf("pipecc %s\n", PIPECC_VERSION);
      return 0;
    } else if (!strcmp(a, "--shape") || !strncmp(a, "--shape=", 8)) {
      const char *v = a[7] == '=' ? a + 8 : NEXT();
      if (parse_shape(v, &opts.shapes[opts.n_shapes])) return cli_error("bad --shape '%s': expected NAME:AxBxC", v);
      opts.n_shapes++;
    } else if (!strcmp(a, "-d") || !strcmp(a, "--dim") || !strcmp(a, "-D")) {
      const char *v = NEXT();
      if (strchr(v, '=')) {
        if (parse_dim(v, &opts.dims[opts.n_dims])) return cli_error("bad -d '%s': expected DIM=VALUE", v);
        opts.n_dims++;
      } else {
        if (!pass_find(v)) return cli_error("-d %s: no such pass (bind, fold, shape) and not DIM=VALUE", v);
        if (n_dumps < 16) dumps[n_dumps++] = v;
      }
    } else if (!strncmp(a, "--emit=", 7) || !strcmp(a, "--emit")) {
      emit = a[6] == '=' ? a + 7 : NEXT();
      if (strcmp(emit, "ir") && strcmp(emit, "ir-json")) return cli_error("unknown --emit '%s' (ir, ir-json)", emit);
    } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
      out_dir = NEXT();
    } else if (!strcmp(a, "--time-passes")) {
      time_passes = 1;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      opts.verbose = 1;
    } else if (a[0] == '-' && a[1]) {
      return cli_error("unknown option '%s'", a);
    } else {
      if (model) return cli_error("more than one model given ('%s')", a);
      model = a;
    }
  }
  if (!model) {
    usage(stderr);
    return 2;
  }
  (void)out_dir;

  double t0 = now_ms();
  ir_graph *g = onnx_load_file(model);
  double t1 = now_ms();
  if (time_passes) fprintf(stderr, "pipecc: pass %-8s %8.2f ms\n", "load", t1 - t0);
  if (!g) return 2;

  for (const pass_info *p = pass_frontend_pipeline; p->name; p++) {
    double s = now_ms();
    int rc = p->fn(g, &opts);
    double e = now_ms();
    if (time_passes) fprintf(stderr, "pipecc: pass %-8s %8.2f ms\n", p->name, e - s);
    if (rc || g->n_errors) {
      ir_graph_free(g);
      return 2;
    }
    for (int k = 0; k < n_dumps; k++)
      if (!strcmp(dumps[k], p->name)) {
        fprintf(stdout, "# after %s\n", p->name);
        ir_print_text(stdout, g);
      }
  }
  if (time_passes) fprintf(stderr, "pipecc: total          %8.2f ms\n", now_ms() - t0);

  if (!emit || !strcmp(emit, "ir")) {
    if (emit || !n_dumps) ir_print_text(stdout, g);
  } else if (!strcmp(emit, "ir-json")) {
    ir_print_json(stdout, g);
  }
  ir_graph_free(g);
  return 0;
}
