/* Checks of the stage programs before anything runs: each stage's stream on its own
 * (rt_check_program), and all of them together under the transports' semantics: the
 * in-process and MPI transports, whose sends do not wait (rt_check_deadlock), and NCCL,
 * where a send and its receive meet (rt_check_rendezvous). */
#include <stdlib.h>
#include <string.h>
#include "rt.h"

const char *rt_op_name(int op) {
  static const char *const names[] = {"NOP", "RECV_ACT", "FWD",       "SEND_ACT",  "RECV_GRAD",
                                      "BWD", "BWD_W",    "SEND_GRAD", "ALLREDUCE", "STEP"};
  return op >= 0 && op <= PIPERT_OP_STEP ? names[op] : "?";
}

/* Stage s's program: per opcode micro-batches 0..M-1 in increasing order (each
 * receive and send opcode present for all or none), RECV before FWD before SEND of a
 * micro-batch (an inference stage receives at most one micro-batch ahead); training:
 * RECV_GRAD before BWD before SEND_GRAD, FWD of a micro-batch before its BWD, and
 * after the last BWD one STEP, preceded by one ALLREDUCE exactly when the stage has
 * replicas. Writes the first problem into e. */
void rt_check_program(const pipert_pipeline *p, int s, char *e, size_t elen) {
  const pipert_stage_plan *sp = &p->stages[s];
  rt_check_stream(p, s, sp->program, sp->program_len, p->microbatches, e, elen);
}

void rt_check_stream(const pipert_pipeline *p, int s, const pipert_instr *prog, int len, int M, char *e, size_t elen) {
  const pipert_stage_plan *sp = &p->stages[s];
  int next[PIPERT_OP_STEP + 1] = {0}, has[PIPERT_OP_STEP + 1] = {0}, steps = 0, allreduces = 0;
  for (int i = 0; i < len; i++) has[prog[i].op] = 1;
  for (int i = 0; i < len && !e[0]; i++) {
    int op = prog[i].op, mb = prog[i].mb;
    if (op == PIPERT_OP_NOP) continue;
    if (op == PIPERT_OP_STEP || op == PIPERT_OP_ALLREDUCE) {
      if (next[PIPERT_OP_BWD] != M || steps || (op == PIPERT_OP_ALLREDUCE && allreduces))
        snprintf(e, elen, "stage %d: instruction %d: %s out of place", s, i, rt_op_name(op));
      if (op == PIPERT_OP_STEP) steps++;
      else allreduces++;
      continue;
    }
    int bad = mb != next[op] || (op == PIPERT_OP_FWD && has[PIPERT_OP_RECV_ACT] && next[PIPERT_OP_RECV_ACT] <= mb) ||
              (op == PIPERT_OP_SEND_ACT && next[PIPERT_OP_FWD] <= mb) ||
              (op == PIPERT_OP_RECV_ACT && !p->training && mb > next[PIPERT_OP_FWD] + 1) ||
              (op == PIPERT_OP_BWD &&
               (next[PIPERT_OP_FWD] <= mb || (has[PIPERT_OP_RECV_GRAD] && next[PIPERT_OP_RECV_GRAD] <= mb))) ||
              (op == PIPERT_OP_SEND_GRAD && next[PIPERT_OP_BWD] <= mb);
    if (bad) snprintf(e, elen, "stage %d: instruction %d: %s of micro-batch %d out of order", s, i, rt_op_name(op), mb);
    next[op]++;
  }
  for (int op = PIPERT_OP_RECV_ACT; op <= PIPERT_OP_SEND_GRAD && !e[0]; op++) {
    int required = op == PIPERT_OP_FWD || (p->training ? op == PIPERT_OP_BWD : op <= PIPERT_OP_SEND_ACT);
    if ((required || has[op]) && next[op] != M)
      snprintf(e, elen, "stage %d: the program's %s does not cover micro-batches 0..%d", s, rt_op_name(op), M - 1);
  }
  if (!e[0] && p->training && (steps != 1 || allreduces != (sp->replicas > 1)))
    snprintf(e, elen, "stage %d: the program needs one STEP%s", s, sp->replicas > 1 ? " after one ALLREDUCE" : "");
}

/* Proof that the stage programs cannot deadlock: an execution where sends never block
 * (within a round no mailbox holds more than M micro-batches, its capacity in training)
 * and a receive waits for the producer's send of that micro-batch, replayed over the
 * pipeline's actual edges (every producer a stage reads, skip edges included) and every
 * replica, must finish. A stage's FWD/BWD without a RECV in its program receives
 * itself; without a SEND it hands its outputs on at once. Writes the stuck instruction
 * into e. */
void rt_check_deadlock(const pipert_pipeline *p, char *e, size_t elen) {
  const pipert_instr **prog = calloc((size_t)p->n_stages + 1, sizeof *prog);
  int *len = calloc((size_t)p->n_stages + 1, sizeof(int));
  for (int s = 0; s < p->n_stages; s++) prog[s] = p->stages[s].program, len[s] = p->stages[s].program_len;
  rt_check_deadlock_progs(p, prog, len, p->microbatches, e, elen);
  free(prog);
  free(len);
}

void rt_check_deadlock_progs(const pipert_pipeline *p, const pipert_instr *const *prog, const int *len, int M, char *e,
                             size_t elen) {
  int S = p->n_stages, nc = 0;
  for (int s = 0; s < S; s++) nc += p->stages[s].replicas;
  int *cst = calloc((size_t)nc, sizeof(int)), *crep = calloc((size_t)nc, sizeof(int)),
      *pos = calloc((size_t)nc, sizeof(int));
  char *act = calloc((size_t)S * (size_t)M, 1), *grad = calloc((size_t)S * (size_t)M, 1),
       *has = calloc((size_t)S * 16, 1);
  for (int s = 0, c = 0; s < S; s++) {
    for (int r = 0; r < p->stages[s].replicas; r++, c++) cst[c] = s, crep[c] = r;
    for (int i = 0; i < len[s]; i++) has[s * 16 + prog[s][i].op] = 1;
  }
  for (int progress = 1; progress;) {
    progress = 0;
    for (int c = 0; c < nc; c++) {
      int s = cst[c], R = p->stages[s].replicas;
      const pipert_stage_plan *sp = &p->stages[s];
      const pipert_stage_desc *d = sp->stage;
      while (pos[c] < len[s]) {
        pipert_instr in = prog[s][pos[c]];
        int op = in.op, mb = in.mb, ready = 1;
        if (op == PIPERT_OP_ALLREDUCE) { /* a barrier of the stage's replicas */
          int there = 0;
          for (int k = 0; k < nc; k++)
            there += cst[k] == s && (pos[k] >= len[s] || prog[s][pos[k]].op == PIPERT_OP_ALLREDUCE ||
                                     prog[s][pos[k]].op == PIPERT_OP_STEP);
          ready = there == R;
        } else if (op != PIPERT_OP_STEP && op != PIPERT_OP_NOP && mb % R != crep[c]) {
          pos[c]++;
          progress = 1;
          continue;
        }
        if (op == PIPERT_OP_RECV_ACT || (op == PIPERT_OP_FWD && !has[s * 16 + PIPERT_OP_RECV_ACT])) {
          for (int k = 0; k < d->n_inputs && ready; k++)
            if (sp->input_src[k].stage >= 0) ready = act[sp->input_src[k].stage * M + mb];
          for (int k = 0; p->training && k < d->n_bwd_inputs && ready; k++) {
            pipert_ref r = sp->bwd_input_src[k];
            if (r.stage >= 0 && r.stage != s && !r.phase) ready = act[r.stage * M + mb];
          }
        }
        if (op == PIPERT_OP_RECV_GRAD || (op == PIPERT_OP_BWD && !has[s * 16 + PIPERT_OP_RECV_GRAD]))
          for (int k = 0; k < d->n_bwd_inputs && ready; k++) {
            pipert_ref r = sp->bwd_input_src[k];
            if (r.stage >= 0 && r.phase) ready = grad[r.stage * M + mb];
          }
        if (!ready) break;
        if (op == PIPERT_OP_SEND_ACT || (op == PIPERT_OP_FWD && !has[s * 16 + PIPERT_OP_SEND_ACT])) act[s * M + mb] = 1;
        if (op == PIPERT_OP_SEND_GRAD || (op == PIPERT_OP_BWD && !has[s * 16 + PIPERT_OP_SEND_GRAD]))
          grad[s * M + mb] = 1;
        pos[c]++;
        progress = 1;
      }
    }
  }
  for (int c = 0; c < nc && !e[0]; c++)
    if (pos[c] < len[cst[c]]) {
      pipert_instr in = prog[cst[c]][pos[c]];
      snprintf(e, elen, "stage %d%s: the programs deadlock: instruction %d (%s of micro-batch %d) waits forever",
               cst[c], p->stages[cst[c]].replicas > 1 ? " (a replica)" : "", pos[c], rt_op_name(in.op), in.mb);
    }
  free(cst);
  free(crep);
  free(pos);
  free(act);
  free(grad);
  free(has);
}

/* ---- NCCL's rules ----------------------------------------------------------------- */

enum { EV_COMPUTE = 0, EV_SEND, EV_RECV, EV_COLLECTIVE };
typedef struct {
  int kind, dir, peer, mb; /* dir 0 activations, 1 gradients; peer: the other stage */
  int match;               /* index of the matching event in the peer's list */
  int done;
} rv_event;

typedef struct {
  int stage, replica, n, cap, pos;
  rv_event *ev;
} rv_cursor;

static void rv_push(rv_cursor *c, int kind, int dir, int peer, int mb) {
  if (c->n == c->cap) c->ev = realloc(c->ev, sizeof *c->ev * (size_t)(c->cap = c->cap ? c->cap * 2 : 64));
  c->ev[c->n++] = (rv_event){kind, dir, peer, mb, -1, 0};
}

static void rv_comm(rv_cursor *c, const rt_topo *t, int kind, int dir, int mb) {
  int n = dir ? (kind == EV_RECV ? t->ngp : t->ngc) : (kind == EV_RECV ? t->nfp : t->nfc);
  const int *v = dir ? (kind == EV_RECV ? t->gp : t->gc) : (kind == EV_RECV ? t->fp : t->fc);
  for (int k = 0; k < n; k++) rv_push(c, kind, dir, v[k], mb);
}

/* The events of one replica's stream, as the interpreter executes them. */
static void rv_events(rv_cursor *c, const pipert_instr *prog, int len, const rt_topo *t, int R) {
  for (int i = 0; i < len; i++) {
    int op = prog[i].op, mb = prog[i].mb;
    if (op == PIPERT_OP_STEP) rv_push(c, EV_COMPUTE, 0, -1, -1);
    else if (op == PIPERT_OP_ALLREDUCE) rv_push(c, EV_COLLECTIVE, 0, -1, -1);
    else if (op == PIPERT_OP_NOP || mb % R != c->replica) continue;
    else if (op == PIPERT_OP_RECV_ACT) rv_comm(c, t, EV_RECV, 0, mb);
    else if (op == PIPERT_OP_SEND_ACT) rv_comm(c, t, EV_SEND, 0, mb);
    else if (op == PIPERT_OP_RECV_GRAD) rv_comm(c, t, EV_RECV, 1, mb);
    else if (op == PIPERT_OP_SEND_GRAD) rv_comm(c, t, EV_SEND, 1, mb);
    else if (op == PIPERT_OP_FWD || op == PIPERT_OP_BWD) {
      int dir = op == PIPERT_OP_BWD;
      if (!t->has[dir ? PIPERT_OP_RECV_GRAD : PIPERT_OP_RECV_ACT]) rv_comm(c, t, EV_RECV, dir, mb);
      rv_push(c, EV_COMPUTE, 0, -1, mb);
      if (!t->has[dir ? PIPERT_OP_SEND_GRAD : PIPERT_OP_SEND_ACT]) rv_comm(c, t, EV_SEND, dir, mb);
    }
  }
}

/* End of the group of communication events starting at c->pos (c->pos itself if none). */
static int rv_group_end(const rv_cursor *c) {
  int e = c->pos;
  while (e < c->n && (c->ev[e].kind == EV_SEND || c->ev[e].kind == EV_RECV)) e++;
  return e;
}

void rt_check_rendezvous(const pipert_pipeline *p, const pipert_instr *const *prog, const int *prog_len, char *e,
                         size_t elen) {
  int S = p->n_stages, nc = 0;
  rt_topo *topo = calloc((size_t)S, sizeof *topo);
  rt_topo_build(p, prog, prog_len, topo);
  int *base = calloc((size_t)S + 1, sizeof(int));
  for (int s = 0; s < S; s++) base[s + 1] = base[s] + p->stages[s].replicas;
  nc = base[S];
  rv_cursor *cur = calloc((size_t)nc, sizeof *cur);
  for (int s = 0; s < S; s++)
    for (int r = 0; r < p->stages[s].replicas; r++) {
      rv_cursor *c = &cur[base[s] + r];
      c->stage = s;
      c->replica = r;
      rv_events(c, prog[s], prog_len[s], &topo[s], p->stages[s].replicas);
    }
  /* every send's receive, and the reverse */
  for (int i = 0; i < nc && !e[0]; i++)
    for (int k = 0; k < cur[i].n && !e[0]; k++) {
      rv_event *v = &cur[i].ev[k];
      if (v->kind != EV_SEND && v->kind != EV_RECV) continue;
      rv_cursor *q = &cur[base[v->peer] + v->mb % p->stages[v->peer].replicas];
      for (int j = 0; j < q->n && v->match < 0; j++) {
        const rv_event *u = &q->ev[j];
        if (u->kind == (v->kind == EV_SEND ? EV_RECV : EV_SEND) && u->dir == v->dir && u->peer == cur[i].stage &&
            u->mb == v->mb)
          v->match = j;
      }
      if (v->match < 0)
        snprintf(e, elen, "stage %d: %s of micro-batch %d %s stage %d has no partner", cur[i].stage,
                 v->kind == EV_SEND ? "a send" : "a receive", v->mb, v->kind == EV_SEND ? "to" : "from", v->peer);
    }
  for (int progress = 1; progress && !e[0];) {
    progress = 0;
    for (int i = 0; i < nc; i++) { /* calls whose partners are posted complete */
      rv_cursor *c = &cur[i];
      for (int k = c->pos, end = rv_group_end(c); k < end; k++) {
        rv_event *v = &c->ev[k];
        rv_cursor *q = &cur[base[v->peer] + v->mb % p->stages[v->peer].replicas];
        if (!v->done && v->match >= q->pos && v->match < rv_group_end(q)) v->done = q->ev[v->match].done = 1;
      }
    }
    for (int i = 0; i < nc; i++) {
      rv_cursor *c = &cur[i];
      if (c->pos >= c->n) continue;
      int end = rv_group_end(c), all = 1;
      if (end > c->pos) {
        for (int k = c->pos; k < end; k++) all &= c->ev[k].done;
        if (all) c->pos = end, progress = 1;
      } else if (c->ev[c->pos].kind == EV_COMPUTE) {
        c->pos++;
        progress = 1;
      } else { /* a collective: every replica of the stage there */
        int there = 0, s = c->stage;
        for (int k = base[s]; k < base[s + 1]; k++)
          there += cur[k].pos < cur[k].n && cur[k].ev[cur[k].pos].kind == EV_COLLECTIVE;
        if (there == p->stages[s].replicas) {
          for (int k = base[s]; k < base[s + 1]; k++) cur[k].pos++;
          progress = 1;
        }
      }
    }
  }
  for (int i = 0; i < nc && !e[0]; i++)
    if (cur[i].pos < cur[i].n)
      snprintf(e, elen, "stage %d%s: under NCCL's rules the programs deadlock at event %d of %d", cur[i].stage,
               p->stages[cur[i].stage].replicas > 1 ? " (a replica)" : "", cur[i].pos, cur[i].n);
  for (int i = 0; i < nc; i++) free(cur[i].ev);
  free(cur);
  free(base);
  rt_topo_free(topo, S);
  free(topo);
}
