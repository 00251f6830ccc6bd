/* schedule.c — instruction streams, deadlock check and simulation (see schedule.h). */
#include "passes/plan/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {"FWD",       "BWD",       "SEND_ACT",  "RECV_ACT",
                                       "SEND_GRAD", "RECV_GRAD", "ALLREDUCE", "STEP"};

const char *pass_op_name(pass_op op) {
  return (unsigned)op < sizeof op_names / sizeof op_names[0] ? op_names[op] : "?";
}

int pass_stream_push(pass_stream *s, pass_op op, int mb) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 16;
    pass_instr *v = realloc(s->v, sizeof *v * (size_t)cap);
    if (!v) return -1;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n].op = op;
  s->v[s->n].mb = mb;
  s->n++;
  return 0;
}

void pass_streams_free(pass_stream *streams, int p) {
  for (int k = 0; k < p; k++) {
    free(streams[k].v);
    streams[k].v = NULL;
    streams[k].n = streams[k].cap = 0;
  }
}

static int emit_fwd(pass_stream *s, int k, int p, int mb) {
  int rc = 0;
  if (k > 0) rc |= pass_stream_push(s, PASS_OP_RECV_ACT, mb);
  rc |= pass_stream_push(s, PASS_OP_FWD, mb);
  if (k < p - 1) rc |= pass_stream_push(s, PASS_OP_SEND_ACT, mb);
  return rc;
}

static int emit_bwd(pass_stream *s, int k, int p, int mb) {
  int rc = 0;
  if (k < p - 1) rc |= pass_stream_push(s, PASS_OP_RECV_GRAD, mb);
  rc |= pass_stream_push(s, PASS_OP_BWD, mb);
  if (k > 0) rc |= pass_stream_push(s, PASS_OP_SEND_GRAD, mb);
  return rc;
}

int pass_schedule_build(pass_schedule_kind kind, int p, int m, int training, const int *replicas,
                        pass_stream *streams) {
  int rc = 0, delta = 0, r_next = 0;
  for (int k = p - 1; k >= 0; k--) {
    pass_stream *s = &streams[k];
    int r = replicas && replicas[k] > 1 ? replicas[k] : 1;
    /* 1F1B's lead of stage k (schedule.h): the next stage's lead plus its replicas,
     * rounded up to a multiple of r */
    if (k < p - 1) delta += r_next;
    delta = (delta + r - 1) / r * r;
    r_next = r;
    if (!training) {
      for (int mb = 0; mb < m; mb++) rc |= emit_fwd(s, k, p, mb);
      continue;
    }
    if (kind == PASS_SCHED_GPIPE) {
      for (int mb = 0; mb < m; mb++) rc |= emit_fwd(s, k, p, mb);
      for (int mb = 0; mb < m; mb++) rc |= emit_bwd(s, k, p, mb);
    } else {
      int w = delta < m ? delta : m;
      for (int mb = 0; mb < w; mb++) rc |= emit_fwd(s, k, p, mb);
      for (int i = 0; i < m - w; i++) {
        rc |= emit_fwd(s, k, p, w + i);
        rc |= emit_bwd(s, k, p, i);
      }
      for (int mb = m - w; mb < m; mb++) rc |= emit_bwd(s, k, p, mb);
    }
    if (r > 1) rc |= pass_stream_push(s, PASS_OP_ALLREDUCE, -1);
    rc |= pass_stream_push(s, PASS_OP_STEP, -1);
  }
  return rc ? -1 : 0;
}

/* ---- execution (checker and simulator share it) ---------------------------------- */

typedef struct msg {
  int mb;
  double at;
} msg;
typedef struct chan {
  msg *q;
  int head, tail, cap;
  double free_at;
} chan;

static int chan_push(chan *c, int mb, double at) {
  if (c->tail == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    msg *q = realloc(c->q, sizeof *q * (size_t)cap);
    if (!q) return -1;
    c->q = q;
    c->cap = cap;
  }
  c->q[c->tail].mb = mb;
  c->q[c->tail].at = at;
  c->tail++;
  return 0;
}

/* Lanes: replica j of stage k (lane base[k] + j) runs the stage's stream, skipping the
 * micro-batches with mb % R[k] != j, as the runtime does. Links: act[l] carries stage l's
 * activations to stage l+1 and grad[l] stage l+1's gradients to stage l (l = 0..p-2),
 * one channel per (sending replica, receiving replica) pair, each in order. */
typedef struct lane {
  int pc, live, at_ar;
  double clk;
} lane;

static int span_push(pass_sim_result *res, int stage, int replica, pass_op op, int mb, double t0, double t1) {
  if (!res) return 0;
  if (res->n_spans == res->cap_spans) {
    int cap = res->cap_spans ? 2 * res->cap_spans : 64;
    pass_sim_span *v = realloc(res->spans, sizeof *v * (size_t)cap);
    if (!v) return -1;
    res->spans = v;
    res->cap_spans = cap;
  }
  res->spans[res->n_spans++] = (pass_sim_span){stage, replica, op, mb, t0, t1};
  return 0;
}

static int run(int p, const pass_stream *st, const int *replicas, const pass_sim_stage *cost, pass_sim_result *res,
               char *err, size_t errlen) {
  int rc = -1, nl = p > 1 ? p - 1 : 1, L = 0;
  int *R = calloc((size_t)p, sizeof(int)), *base = calloc((size_t)p + 1, sizeof(int));
  int *cbase = calloc((size_t)nl + 1, sizeof(int)), *ar_count = calloc((size_t)p, sizeof(int)), nch = 0;
  int *has_bwd = calloc((size_t)p, sizeof(int));
  chan *act = NULL, *grad = NULL;
  lane *ln = NULL;
  if (!R || !base || !cbase || !ar_count || !has_bwd) goto oom;
  for (int k = 0; k < p; k++) {
    R[k] = replicas ? replicas[k] : cost ? cost[k].replicas : 1;
    if (R[k] < 1) R[k] = 1;
    base[k] = L;
    L += R[k];
  }
  base[p] = L;
  for (int l = 0; l + 1 < p; l++) cbase[l + 1] = cbase[l] + R[l] * R[l + 1];
  nch = cbase[p > 1 ? p - 1 : 0];
  act = calloc((size_t)nch + 1, sizeof(chan));
  grad = calloc((size_t)nch + 1, sizeof(chan));
  ln = calloc((size_t)L, sizeof(lane));
  if (!act || !grad || !ln) goto oom;
  for (int k = 0; k < p; k++)
    for (int i = 0; i < st[k].n; i++)
      if (st[k].v[i].op == PASS_OP_BWD) has_bwd[k] = 1;
  int done = 0;
  while (done < L) {
    int progress = 0;
    done = 0;
    for (int k = 0; k < p; k++)
      for (int j = 0; j < R[k]; j++) {
        lane *q = &ln[base[k] + j];
        while (q->pc < st[k].n) {
          const pass_instr *in = &st[k].v[q->pc];
          int need_next = in->op == PASS_OP_SEND_ACT || in->op == PASS_OP_RECV_GRAD;
          int need_prev = in->op == PASS_OP_RECV_ACT || in->op == PASS_OP_SEND_GRAD;
          if ((need_next && k == p - 1) || (need_prev && k == 0)) {
            snprintf(err, errlen, "stage %d instr %d: %s mb %d has no peer stage", k, q->pc, pass_op_name(in->op),
                     in->mb);
            goto out;
          }
          if (in->mb >= 0 && in->mb % R[k] != j) { /* another replica's micro-batch */
            q->pc++;
            progress = 1;
            continue;
          }
          double dt = 0, t0 = q->clk;
          int is_recv = in->op == PASS_OP_RECV_ACT || in->op == PASS_OP_RECV_GRAD;
          if (is_recv || in->op == PASS_OP_SEND_ACT || in->op == PASS_OP_SEND_GRAD) {
            /* the channel from the sending replica to the receiving one */
            int is_act = in->op == PASS_OP_RECV_ACT || in->op == PASS_OP_SEND_ACT;
            int peer = is_act == is_recv ? k - 1 : k + 1, l = peer < k ? peer : k;
            int from = is_recv ? in->mb % R[peer] : j, to = is_recv ? j : in->mb % R[peer];
            chan *c = (is_act ? act : grad) + cbase[l] + from * R[is_recv ? k : peer] + to;
            if (is_recv) {
              if (c->head == c->tail) break; /* blocked */
              msg mm = c->q[c->head++];
              if (mm.mb != in->mb) {
                snprintf(err, errlen,
                         "stage %d instr %d: %s expects mb %d but the next message "
                         "from stage %d is mb %d (order mismatch)",
                         k, q->pc, pass_op_name(in->op), in->mb, peer, mm.mb);
                goto out;
              }
              if (mm.at > q->clk) q->clk = mm.at;
            } else {
              double x = cost ? (is_act ? cost[k].act_xfer_ms : cost[k].grad_xfer_ms) : 0;
              double start = q->clk > c->free_at ? q->clk : c->free_at;
              c->free_at = start + x;
              if (chan_push(c, in->mb, start + x) || span_push(res, k, j, in->op, in->mb, start, start + x)) goto oom;
            }
          } else if (in->op == PASS_OP_FWD) {
            dt = cost ? cost[k].fwd_ms : 0;
            if (++q->live > (res ? res->peak_inflight[k] : 0) && res) res->peak_inflight[k] = q->live;
            if (!has_bwd[k]) q->live--;
          } else if (in->op == PASS_OP_BWD) {
            dt = cost ? cost[k].bwd_ms : 0;
            q->live--;
          } else if (in->op == PASS_OP_ALLREDUCE) {
            /* every replica of the stage takes part: it ends for all at once */
            if (!q->at_ar) {
              q->at_ar = 1;
              ar_count[k]++;
              progress = 1;
            }
            if (ar_count[k] < R[k]) break;
            double t = 0, x = cost ? cost[k].allreduce_ms : 0;
            for (int i = 0; i < R[k]; i++)
              if (ln[base[k] + i].clk > t) t = ln[base[k] + i].clk;
            for (int i = 0; i < R[k]; i++) {
              lane *o = &ln[base[k] + i];
              if (span_push(res, k, i, in->op, -1, t, t + x)) goto oom;
              o->clk = t + x;
              o->at_ar = 0;
              o->pc++;
            }
            ar_count[k] = 0;
            continue;
          } else {
            dt = cost ? cost[k].step_ms : 0;
          }
          q->clk += dt;
          if (in->op == PASS_OP_FWD || in->op == PASS_OP_BWD) {
            if (res) res->busy_ms[k] += dt;
            if (span_push(res, k, j, in->op, in->mb, t0, q->clk)) goto oom;
          }
          q->pc++;
          progress = 1;
        }
        if (q->pc == st[k].n) done++;
      }
    if (done < L && !progress) {
      int len = snprintf(err, errlen, "deadlock:");
      for (int k = 0; k < p && len >= 0 && (size_t)len < errlen; k++)
        for (int j = 0; j < R[k] && len >= 0 && (size_t)len < errlen; j++) {
          const lane *q = &ln[base[k] + j];
          if (q->pc >= st[k].n) continue;
          if (R[k] > 1)
            len += snprintf(err + len, errlen - (size_t)len, " stage %d replica %d waits at %s mb %d;", k, j,
                            pass_op_name(st[k].v[q->pc].op), st[k].v[q->pc].mb);
          else
            len += snprintf(err + len, errlen - (size_t)len, " stage %d waits at %s mb %d;", k,
                            pass_op_name(st[k].v[q->pc].op), st[k].v[q->pc].mb);
        }
      goto out;
    }
  }
  for (int l = 0; l + 1 < p; l++)
    for (int c = cbase[l]; c < cbase[l + 1]; c++) {
      if (act[c].head != act[c].tail) {
        snprintf(err, errlen, "stage %d sent activations of mb %d that stage %d never receives", l,
                 act[c].q[act[c].head].mb, l + 1);
        goto out;
      }
      if (grad[c].head != grad[c].tail) {
        snprintf(err, errlen, "stage %d sent gradients of mb %d that stage %d never receives", l + 1,
                 grad[c].q[grad[c].head].mb, l);
        goto out;
      }
    }
  if (res) {
    double it = 0, busy = 0;
    for (int i = 0; i < L; i++)
      if (ln[i].clk > it) it = ln[i].clk;
    for (int k = 0; k < p; k++) {
      busy += res->busy_ms[k];
      if (!cost) res->peak_bytes[k] = 0;
      else if (cost[k].recompute && res->peak_inflight[k] > 0)
        res->peak_bytes[k] =
            cost[k].static_bytes + cost[k].work_bytes + (uint64_t)(res->peak_inflight[k] - 1) * cost[k].act_bytes;
      else res->peak_bytes[k] = cost[k].static_bytes + (uint64_t)res->peak_inflight[k] * cost[k].act_bytes;
    }
    res->iteration_ms = it;
    res->bubble_fraction = it > 0 ? 1.0 - busy / (L * it) : 0.0;
    if (res->bubble_fraction < 0) res->bubble_fraction = 0; /* rounding of a schedule without a gap */
  }
  rc = 0;
  goto out;
oom:
  snprintf(err, errlen, "out of memory");
out:
  if (act && grad)
    for (int c = 0; c < nch; c++) {
      free(act[c].q);
      free(grad[c].q);
    }
  free(act);
  free(grad);
  free(ln);
  free(R);
  free(base);
  free(cbase);
  free(ar_count);
  free(has_bwd);
  return rc;
}

int pass_schedule_check(int p, const pass_stream *streams, const int *replicas, char *err, size_t errlen) {
  return run(p, streams, replicas, NULL, NULL, err, errlen);
}

void pass_sim_result_free(pass_sim_result *r) {
  free(r->spans);
  free(r->peak_inflight);
  free(r->peak_bytes);
  free(r->busy_ms);
  memset(r, 0, sizeof *r);
}

int pass_schedule_simulate(int p, const pass_stream *streams, const pass_sim_stage *cost, pass_sim_result *res) {
  char err[256];
  memset(res, 0, sizeof *res);
  res->peak_inflight = calloc((size_t)p, sizeof(int));
  res->peak_bytes = calloc((size_t)p, sizeof(uint64_t));
  res->busy_ms = calloc((size_t)p, sizeof(double));
  if (!res->peak_inflight || !res->peak_bytes || !res->busy_ms || run(p, streams, NULL, cost, res, err, sizeof err)) {
    pass_sim_result_free(res);
    return -1;
  }
  return 0;
}

void pass_schedule_costs(const pass_plan_opts *o, const pass_plan *plan, pass_sim_stage *c) {
  int p = plan->n_stages;
  memset(c, 0, sizeof *c * (size_t)p);
  for (int k = 0; k < p; k++) {
    const pass_stage *S = &plan->stages[k];
    int r = S->replicas;
    c[k].fwd_ms = S->fwd_ms;
    c[k].bwd_ms = S->bwd_ms;
    c[k].replicas = r;
    c[k].allreduce_ms = S->allreduce_ms;
    int dnext = S->dev_first + r;
    if (k + 1 < p) c[k].act_xfer_ms = pass_link_ms(&o->topo, dnext - 1, dnext, S->out_bytes);
    if (k > 0)
      c[k].grad_xfer_ms = pass_link_ms(&o->topo, S->dev_first, S->dev_first - 1, plan->stages[k - 1].out_grad_bytes);
    double f = o->training ? 2.0 + o->optimizer_state_factor : 1.0;
    c[k].static_bytes = (uint64_t)((double)S->param_bytes * f);
    c[k].act_bytes = S->act_bytes;
    if (o->training && S->recompute) { /* as pass_stage_memory */
      c[k].recompute = 1;
      c[k].work_bytes = S->act_bytes;
      c[k].act_bytes = S->xch_bytes + S->keep_bytes;
    }
  }
}

int pass_schedule_attach(const pass_plan_opts *o, pass_plan *plan, char *err, size_t errlen) {
  int p = plan->n_stages;
  int *reps = malloc(sizeof(int) * (size_t)p);
  pass_sim_stage *c = calloc((size_t)p, sizeof *c);
  if (plan->streams) {
    pass_streams_free(plan->streams, p);
    free(plan->streams);
  }
  plan->streams = calloc((size_t)p, sizeof(pass_stream));
  if (!reps || !c || !plan->streams) goto oom;
  for (int k = 0; k < p; k++) reps[k] = plan->stages[k].replicas;
  if (pass_schedule_build(o->schedule, p, o->microbatches, o->training, reps, plan->streams)) goto oom;
  if (pass_schedule_check(p, plan->streams, reps, err, errlen)) {
    free(reps);
    free(c);
    return -1;
  }
  pass_schedule_costs(o, plan, c);
  double single = 0;
  for (int k = 0; k < p; k++) single += plan->stages[k].fwd_ms + plan->stages[k].bwd_ms;
  pass_sim_result res;
  if (pass_schedule_simulate(p, plan->streams, c, &res)) {
    snprintf(err, errlen, "schedule simulation failed");
    free(reps);
    free(c);
    return -1;
  }
  plan->predicted_iteration_ms = res.iteration_ms;
  plan->bubble_fraction = res.bubble_fraction;
  if (o->training && o->async_mode) {
    /* no flush: in the steady state a batch takes M times the slowest stage or link, and
     * the bubble is what the other stages idle beside it */
    double slow = 0, busy = 0;
    for (int k = 0; k < p; k++) {
      double t = plan->stages[k].fwd_ms + plan->stages[k].bwd_ms;
      busy += t;
      if (t > slow) slow = t;
      if (plan->stages[k].comm_ms > slow) slow = plan->stages[k].comm_ms;
    }
    plan->predicted_iteration_ms = slow * o->microbatches;
    plan->bubble_fraction = slow > 0 ? 1.0 - busy / (p * slow) : 0.0;
  }
  plan->single_device_ms = single * o->microbatches;
  plan->predicted_speedup =
      plan->predicted_iteration_ms > 0 ? plan->single_device_ms / plan->predicted_iteration_ms : 1.0;
  for (int k = 0; k < p; k++) plan->stages[k].peak_memory_bytes = res.peak_bytes[k];
  pass_sim_result_free(&res);
  free(reps);
  free(c);
  return 0;
oom:
  free(reps);
  free(c);
  snprintf(err, errlen, "out of memory");
  return -1;
}
