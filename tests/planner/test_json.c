/* plan.json: valid JSON (small syntax checker below), required fields present,
 * byte-identical across two independent planning runs. */
#include "passes/plan/plan_json.h"
#include "tests/planner/planner_test.h"

/* Minimal JSON syntax check. */
static const char *ws(const char *p) {
  while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
  return p;
}
static const char *value(const char *p);
static const char *string(const char *p) {
  if (*p != '"') return NULL;
  for (p++; *p && *p != '"'; p++)
    if (*p == '\\') {
      if (!*++p) return NULL;
    } else if ((unsigned char)*p < 0x20) return NULL;
  return *p == '"' ? p + 1 : NULL;
}
static const char *value(const char *p) {
  p = ws(p);
  if (*p == '{' || *p == '[') {
    char close = *p == '{' ? '}' : ']';
    p = ws(p + 1);
    if (*p == close) return p + 1;
    for (;;) {
      if (close == '}') {
        if (!(p = string(ws(p)))) return NULL;
        p = ws(p);
        if (*p++ != ':') return NULL;
      }
      if (!(p = value(p))) return NULL;
      p = ws(p);
      if (*p == ',') {
        p++;
        continue;
      }
      return *p == close ? p + 1 : NULL;
    }
  }
  if (*p == '"') return string(p);
  if (!strncmp(p, "true", 4)) return p + 4;
  if (!strncmp(p, "false", 5)) return p + 5;
  if (!strncmp(p, "null", 4)) return p + 4;
  char *e;
  strtod(p, &e);
  return e == p ? NULL : e;
}

static char *plan_to_string(const pass_dag *d, const pass_plan_opts *o, int timing) {
  pass_plan p;
  char err[256], *buf = NULL;
  size_t len = 0;
  if (pass_partition(d, o, &p, err, sizeof err) || pass_schedule_attach(o, &p, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    abort();
  }
  FILE *f = open_memstream(&buf, &len);
  CHECK(pass_plan_json_write(f, d, &p, o, timing) == 0, "write");
  fclose(f);
  pass_plan_free(&p);
  return buf;
}

int main(void) {
  pass_dag d;
  random_dag(&d, 40, SHAPE_BRANCHES);
  /* a name that needs escaping */
  free(d.nodes[3].name);
  d.nodes[3].name = strdup("conv \"3\"\\x");
  pass_plan_opts o;
  pass_plan_opts_default(&o, 4);
  o.training = 1;
  o.microbatches = 6;
  o.no_replicate = 1;
  o.topo.hosts = 2;
  o.topo.gpus_per_host = 2;
  char *a = plan_to_string(&d, &o, 0), *b = plan_to_string(&d, &o, 0);
  CHECK(strcmp(a, b) == 0, "plan.json differs between two runs");
  const char *end = value(a);
  CHECK(end && *ws(end) == 0, "not valid JSON near: %.60s", end ? end : "?");
  const char *keys[] = {"\"version\": 1",
                        "\"devices\"",
                        "\"microbatches\": 6",
                        "\"schedule\": \"1f1b\"",
                        "\"stages\"",
                        "\"id\"",
                        "\"nodes\"",
                        "\"devices\"",
                        "\"replicas\"",
                        "\"compute_ms\"",
                        "\"comm_ms\"",
                        "\"memory_bytes\"",
                        "\"bottleneck_ms\"",
                        "\"lower_bound_ms\"",
                        "\"predicted_iteration_ms\"",
                        "\"predicted_speedup\"",
                        "\"planner_ms\": null",
                        "\"boundaries\"",
                        "\"from_stage\"",
                        "\"states\": \"all-downsets\"",
                        "\"state_count\": ",
                        "\"to_stage\"",
                        "\"instructions\"",
                        "[\"FWD\", 0]",
                        "[\"STEP\", -1]",
                        "conv \\\"3\\\"\\\\x"};
  for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK(strstr(a, keys[i]) != NULL, "missing %s", keys[i]);
  /* prefix-order mode says so */
  pass_plan_opts op = o;
  op.states = PASS_STATES_PREFIX;
  char *pf = plan_to_string(&d, &op, 0);
  CHECK(strstr(pf, "\"states\": \"prefix-orders\"") && strstr(pf, "\"state_count\": 41,"),
        "prefix-order mode not recorded");
  free(pf);
  char *c = plan_to_string(&d, &o, 1);
  CHECK(strstr(c, "\"planner_ms\": null") == NULL, "timing requested but null");
  const char *e2 = value(c);
  CHECK(e2 && *ws(e2) == 0, "timed plan not valid JSON");
  if (getenv("PLANNER_JSON_DUMP")) fputs(a, stdout);
  free(a);
  free(b);
  free(c);
  pass_dag_free(&d);
  printf("%s\n", g_failures ? "FAIL" : "PASS");
  return g_failures ? 1 : 0;
}
