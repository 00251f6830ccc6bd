/* plan_json.c — deterministic plan.json writer. */
#include "passes/plan/plan_json.h"

#include <math.h>

#include "passes/plan/schedule.h"

static void jstr(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", f);
    else if (*p == '\t') fputs("\\t", f);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void jnum(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.6f", v);
  else fputs("null", f);
}

int pass_plan_json_write(FILE *f, const pass_dag *d, const pass_plan *p, const pass_plan_opts *o, int include_timing) {
  int hosts = o->topo.hosts, gph = o->topo.gpus_per_host;
  if (hosts <= 0 || gph <= 0) {
    hosts = 1;
    gph = o->devices;
  }
  fprintf(f, "{\n  \"version\": %d,\n", PASS_PLAN_JSON_VERSION);
  if (o->io_json) fprintf(f, "  %s,\n", o->io_json);
  fprintf(f, "  \"devices\": %d,\n  \"devices_used\": %d,\n  \"microbatches\": %d,\n", p->devices, p->devices_used,
          p->microbatches);
  if (o->mb_search_n > 0) { /* the default micro-batch count, chosen by the predicted iteration */
    fputs("  \"microbatch_search\": [", f);
    for (int k = 0; k < o->mb_search_n; k++) {
      fprintf(f, "%s{\"microbatches\": %d, \"predicted_iteration_ms\": ", k ? ", " : "", o->mb_search_m[k]);
      jnum(f, o->mb_search_ms[k] >= 0 ? o->mb_search_ms[k] : NAN);
      fputc('}', f);
    }
    fputs("],\n", f);
  }
  fprintf(f, "  \"training\": %s,\n  \"schedule\": \"%s\",\n", p->training ? "true" : "false",
          p->async_mode                     ? pass_async_name(p->async_mode)
          : p->schedule == PASS_SCHED_GPIPE ? "gpipe"
                                            : "1f1b");
  if (p->async_mode) fputs("  \"asynchronous\": true,\n", f);
  if (p->training)
    fprintf(f, "  \"recompute\": %s,\n  \"recompute_selective\": %s,\n  \"recompute_auto\": %s,\n",
            p->recompute ? "true" : "false", p->recompute == PASS_PLAN_RC_SELECTIVE ? "true" : "false",
            p->recompute == PASS_PLAN_RC_AUTO ? "true" : "false");
  fprintf(f, "  \"topology\": {\"hosts\": %d, \"gpus_per_host\": %d, \"intra_gbps\": ", hosts, gph);
  jnum(f, o->topo.intra_gbps);
  fputs(", \"intra_lat_ms\": ", f);
  jnum(f, o->topo.intra_lat_ms);
  fputs(", \"inter_gbps\": ", f);
  jnum(f, o->topo.inter_gbps);
  fputs(", \"inter_lat_ms\": ", f);
  jnum(f, o->topo.inter_lat_ms);
  fprintf(f, "},\n  \"mem_limit_bytes\": %llu,\n", (unsigned long long)o->mem_limit);
  static const char *const order_names[] = {"index", "dfs", "level", "?", "downsets"};
  int ok = (int)p->order_kind >= 0 && (int)p->order_kind <= PASS_ORDER_CHAIN;
  fprintf(f, "  \"state_order\": \"%s\",\n", order_names[ok ? p->order_kind : 3]);
  fprintf(f, "  \"states\": \"%s\",\n  \"state_count\": %ld,\n", p->all_downsets ? "all-downsets" : "prefix-orders",
          p->state_count);
  const char *keys[] = {"bottleneck_ms",    "lower_bound_ms",   "gap", "predicted_iteration_ms", "bubble_fraction",
                        "single_device_ms", "predicted_speedup"};
  double vals[] = {p->bottleneck_ms,    p->lower_bound_ms,   p->gap, p->predicted_iteration_ms, p->bubble_fraction,
                   p->single_device_ms, p->predicted_speedup};
  for (int i = 0; i < 7; i++) {
    fprintf(f, "  \"%s\": ", keys[i]);
    jnum(f, vals[i]);
    fputs(",\n", f);
  }
  fputs("  \"planner_ms\": ", f);
  if (include_timing) jnum(f, p->planner_ms);
  else fputs("null", f);
  fputs(",\n  \"stages\": [\n", f);
  for (int k = 0; k < p->n_stages; k++) {
    const pass_stage *S = &p->stages[k];
    fprintf(f, "    {\"id\": %d,\n     \"nodes\": [", S->id);
    for (int i = 0; i < S->n_nodes; i++) {
      if (i) fputs(", ", f);
      jstr(f, d->nodes[S->nodes[i]].name);
    }
    /* nodes a pass merged into another (Add/Relu into a Conv): "Conv": ["Add", "Relu"] */
    fputs("],\n     \"fused\": {", f);
    for (int i = 0, first = 1; i < S->n_nodes; i++) {
      const pass_dag_node *v = &d->nodes[S->nodes[i]];
      if (!v->n_fused) continue;
      fputs(first ? "" : ", ", f);
      first = 0;
      jstr(f, v->name);
      fputs(": [", f);
      for (int k = 0; k < v->n_fused; k++) {
        if (k) fputs(", ", f);
        jstr(f, v->fused[k]);
      }
      fputc(']', f);
    }
    fputs("},\n     \"devices\": [", f);
    for (int r = 0; r < S->replicas; r++) fprintf(f, "%s%d", r ? ", " : "", S->dev_first + r);
    fputs("],\n     \"hosts\": [", f);
    for (int r = 0; r < S->replicas; r++)
      fprintf(f, "%s%d", r ? ", " : "", pass_device_host(&(pass_topology){hosts, gph, 0, 0, 0, 0}, S->dev_first + r));
    fprintf(f, "],\n     \"replicas\": %d, \"fwd_ms\": ", S->replicas);
    jnum(f, S->fwd_ms);
    fputs(", \"bwd_ms\": ", f);
    jnum(f, S->bwd_ms);
    fputs(", \"allreduce_ms\": ", f);
    jnum(f, S->allreduce_ms);
    fputs(", \"compute_ms\": ", f);
    jnum(f, S->compute_ms);
    fputs(", \"comm_ms\": ", f);
    jnum(f, S->comm_ms);
    if (p->training && p->recompute)
      fprintf(f, ", \"recompute\": \"%s\"",
              S->recompute == PASS_PLAN_RC_FULL        ? "full"
              : S->recompute == PASS_PLAN_RC_SELECTIVE ? "selective"
                                                       : "none");
    if (p->async_mode) { /* the asynchronous schedule's versions and staleness (partition.h) */
      int sf, sb, af, ab;
      pass_async_staleness(p->async_mode, p->n_stages, k, &sf, &sb, &af, &ab);
      fprintf(f, ", \"weight_versions\": %d, \"staleness_fwd\": %d, \"staleness_bwd\": %d",
              pass_async_versions(p->async_mode, p->n_stages, k), sf, sb);
      if (p->async_mode == PASS_ASYNC_SPECTRAIN) fprintf(f, ", \"predict_fwd\": %d, \"predict_bwd\": %d", af, ab);
    }
    fprintf(
        f,
        ",\n     \"param_bytes\": %llu, \"activation_bytes\": %llu, \"exchange_bytes\": %llu, "
        "\"kept_bytes\": %llu, \"held_microbatches\": %d, \"memory_bytes\": %llu, \"peak_memory_bytes\": %llu,\n     "
        "\"instructions\": [",
        (unsigned long long)S->param_bytes, (unsigned long long)S->act_bytes, (unsigned long long)S->xch_bytes,
        (unsigned long long)S->keep_bytes, S->held, (unsigned long long)S->memory_bytes,
        (unsigned long long)S->peak_memory_bytes);
    if (p->streams)
      for (int i = 0; i < p->streams[k].n; i++)
        fprintf(f, "%s[\"%s\", %d]", i ? ", " : "", pass_op_name(p->streams[k].v[i].op), p->streams[k].v[i].mb);
    fprintf(f, "]}%s\n", k + 1 < p->n_stages ? "," : "");
  }
  fputs("  ],\n  \"boundaries\": [\n", f);
  for (int k = 0; k + 1 < p->n_stages; k++) {
    const pass_stage *S = &p->stages[k];
    fprintf(f, "    {\"from\": %d, \"to\": %d, \"bytes\": %llu, \"grad_bytes\": %llu, \"transfer_ms\": ", k, k + 1,
            (unsigned long long)S->out_bytes, (unsigned long long)S->out_grad_bytes);
    jnum(f, S->comm_ms);
    fputs(",\n     \"tensors\": [", f);
    for (int i = 0; i < S->n_out_tensors; i++) {
      const pass_boundary_tensor *b = &S->out_tensors[i];
      fputs(i ? ",\n                 {\"name\": " : "{\"name\": ", f);
      jstr(f, d->tensors[b->tensor].name);
      fprintf(f,
              ", \"bytes\": %llu, \"from_stage\": %d, \"to_stage\": %d, \"producer_stage\": %d, "
              "\"last_stage\": %d}",
              (unsigned long long)d->tensors[b->tensor].bytes, k, k + 1, b->producer_stage, b->last_stage);
    }
    fprintf(f, "]}%s\n", k + 2 < p->n_stages ? "," : "");
  }
  fputs("  ]\n}\n", f);
  return ferror(f) ? -1 : 0;
}
