/* Cut-size accounting on hand-built DAGs: a tensor is charged at every
 * boundary it crosses (several for skip edges), never when it does not cross;
 * graph inputs and outputs; several inputs and outputs; prefix cut arrays agree
 * with the direct definition on random DAGs; augmented antichains; down-set
 * enumeration; the antichain DAG of pass_downsets_build (every down-set once,
 * sums and cuts, edges = maximal elements, a topological listing, the budget). */
#include <math.h>

#include "tests/planner/planner_test.h"

static void set_prefix(const pass_states *st, int s, unsigned char *in) {
  memset(in, 0, (size_t)st->n);
  for (int q = 0; q < s; q++) in[st->order[q]] = 1;
}

/* x -> a -> t1 -> b -> t2 -> c -> y(out) */
static void test_chain(void) {
  pass_dag d;
  pass_dag_init(&d);
  int x = pass_dag_add_tensor(&d, "x", 10), t1 = pass_dag_add_tensor(&d, "t1", 100);
  int t2 = pass_dag_add_tensor(&d, "t2", 1000), y = pass_dag_add_tensor(&d, "y", 5);
  pass_dag_add_node(&d, "a", 1, 2, 0, 0, 1, &x, 1, &t1);
  pass_dag_add_node(&d, "b", 1, 2, 0, 0, 1, &t1, 1, &t2);
  pass_dag_add_node(&d, "c", 1, 2, 0, 0, 1, &t2, 1, &y);
  pass_dag_mark_output(&d, y);
  char err[128];
  CHECK(pass_dag_finalize(&d, err, sizeof err) == 0, "%s", err);
  pass_states st;
  CHECK(pass_states_build(&d, PASS_ORDER_INDEX, &st) == 0, "states");
  uint64_t want[4] = {10, 100, 1000, 5}, wantg[4] = {0, 100, 1000, 5};
  for (int s = 0; s <= 3; s++) {
    CHECK(st.cut[s] == want[s], "chain cut[%d] = %llu, want %llu", s, (unsigned long long)st.cut[s],
          (unsigned long long)want[s]);
    CHECK(st.cut_grad[s] == wantg[s], "chain cut_grad[%d]", s);
  }
  pass_states_free(&st);
  pass_dag_free(&d);
}

/* n0 produces s (1000 B) used by n1, n2, n3; n1->n2->n3 by 1-byte tensors.
 * With 4 stages, s crosses 3 boundaries and is charged at each. */
static void test_skip_edge(void) {
  pass_dag d;
  pass_dag_init(&d);
  int x = pass_dag_add_tensor(&d, "x", 1);
  int s = pass_dag_add_tensor(&d, "s", 1000);
  int a = pass_dag_add_tensor(&d, "a", 1), b = pass_dag_add_tensor(&d, "b", 1);
  int y = pass_dag_add_tensor(&d, "y", 1);
  int in1[1] = {s}, in2[2] = {a, s}, in3[2] = {b, s};
  pass_dag_add_node(&d, "n0", 10, 0, 0, 0, 1, &x, 1, &s);
  pass_dag_add_node(&d, "n1", 10, 0, 0, 0, 1, in1, 1, &a);
  pass_dag_add_node(&d, "n2", 10, 0, 0, 0, 2, in2, 1, &b);
  pass_dag_add_node(&d, "n3", 10, 0, 0, 0, 2, in3, 1, &y);
  pass_dag_mark_output(&d, y);
  char err[128];
  CHECK(pass_dag_finalize(&d, err, sizeof err) == 0, "%s", err);
  pass_states st;
  pass_states_build(&d, PASS_ORDER_INDEX, &st);
  CHECK(st.cut[1] == 1000, "after n0: s only (%llu)", (unsigned long long)st.cut[1]);
  CHECK(st.cut[2] == 1001, "after n1: s + a (%llu)", (unsigned long long)st.cut[2]);
  CHECK(st.cut[3] == 1001, "after n2: s + b (%llu)", (unsigned long long)st.cut[3]);
  pass_states_free(&st);

  pass_plan_opts o;
  pass_plan_opts_default(&o, 4);
  o.no_replicate = 1;
  pass_plan p;
  CHECK(pass_partition(&d, &o, &p, err, sizeof err) == 0, "%s", err);
  CHECK(p.n_stages == 4, "4 equal nodes on 4 devices: %d stages", p.n_stages);
  if (p.n_stages == 4) {
    for (int k = 0; k < 3; k++) {
      const pass_stage *S = &p.stages[k];
      int found = 0;
      for (int i = 0; i < S->n_out_tensors; i++)
        if (S->out_tensors[i].tensor == s) {
          found = 1;
          CHECK(S->out_tensors[i].producer_stage == 0 && S->out_tensors[i].last_stage == 3, "s from stage %d to %d",
                S->out_tensors[i].producer_stage, S->out_tensors[i].last_stage);
        }
      CHECK(found, "s not listed at boundary %d", k);
      CHECK(S->out_bytes == (k == 0 ? 1000u : 1001u), "boundary %d bytes %llu", k, (unsigned long long)S->out_bytes);
      CHECK(S->n_out_tensors == (k == 0 ? 1 : 2), "boundary %d lists %d tensors", k, S->n_out_tensors);
    }
    CHECK(p.stages[3].n_out_tensors == 0, "last stage has no outgoing boundary");
  }
  pass_plan_free(&p);
  pass_dag_free(&d);
}

/* Two inputs, two outputs, a tensor consumed inside its own stage only, and
 * an unused tensor:  x1 -> A -> ta (also output);  x2 -> B -> tb;
 * C(ta, tb) -> tc (output);  A also produces u (unused, 777 B). */
static void test_multi_io(void) {
  pass_dag d;
  pass_dag_init(&d);
  int x1 = pass_dag_add_tensor(&d, "x1", 3), x2 = pass_dag_add_tensor(&d, "x2", 5);
  int ta = pass_dag_add_tensor(&d, "ta", 70), u = pass_dag_add_tensor(&d, "u", 777);
  int tb = pass_dag_add_tensor(&d, "tb", 110), tc = pass_dag_add_tensor(&d, "tc", 13);
  int outA[2] = {ta, u}, inC[2] = {ta, tb};
  pass_dag_add_node(&d, "A", 1, 1, 0, 0, 1, &x1, 2, outA);
  pass_dag_add_node(&d, "B", 1, 1, 0, 0, 1, &x2, 1, &tb);
  pass_dag_add_node(&d, "C", 1, 1, 0, 0, 2, inC, 1, &tc);
  pass_dag_mark_output(&d, ta);
  pass_dag_mark_output(&d, tc);
  char err[128];
  CHECK(pass_dag_finalize(&d, err, sizeof err) == 0, "%s", err);
  unsigned char in[3] = {1, 0, 0}; /* {A}: ta, x2 cross; u does not; x1 consumed */
  uint64_t gb;
  CHECK(pass_cut_bytes(&d, in, &gb) == 70 + 5 && gb == 70, "cut {A} = %llu",
        (unsigned long long)pass_cut_bytes(&d, in, NULL));
  unsigned char in2[3] = {1, 1, 0}; /* {A,B}: ta, tb */
  CHECK(pass_cut_bytes(&d, in2, &gb) == 180 && gb == 180, "cut {A,B}");
  unsigned char in3[3] = {1, 1, 1}; /* everything: outputs ta, tc remain */
  CHECK(pass_cut_bytes(&d, in3, NULL) == 83, "cut V = outputs");
  unsigned char in4[3] = {0, 1, 0}; /* {B}: x1 (input not yet consumed) + tb */
  CHECK(pass_cut_bytes(&d, in4, NULL) == 3 + 110, "cut {B}");
  CHECK(pass_is_downset(&d, in4), "{B} is a down-set");
  unsigned char bad[3] = {0, 1, 1};
  CHECK(!pass_is_downset(&d, bad), "{B,C} is not a down-set");
  int ac[3];
  CHECK(pass_augmented_antichain(&d, in2, ac) == 2 && ac[0] == 0 && ac[1] == 1, "antichain of {A,B}");
  uint64_t ds[64];
  long nd = pass_downsets_enumerate(&d, ds, 64);
  CHECK(nd == 5, "down-sets of the diamond: %ld (want {},{A},{B},{A,B},{A,B,C})", nd);
  pass_dag_free(&d);
}

static void test_cycle(void) {
  pass_dag d;
  pass_dag_init(&d);
  int a = pass_dag_add_tensor(&d, "a", 1), b = pass_dag_add_tensor(&d, "b", 1);
  pass_dag_add_node(&d, "p", 1, 1, 0, 0, 1, &a, 1, &b);
  pass_dag_add_node(&d, "q", 1, 1, 0, 0, 1, &b, 1, &a);
  char err[128] = "";
  CHECK(pass_dag_finalize(&d, err, sizeof err) != 0 && strstr(err, "cycle"), "cycle not reported");
  int bad = pass_dag_add_tensor(&d, "c", 1);
  CHECK(pass_dag_add_node(&d, "r", 1, 1, 0, 0, 1, &a, 1, &b) < 0, "second producer accepted");
  (void)bad;
  pass_dag_free(&d);
}

/* Prefix-sum cut sizes equal the direct definition, for every order. */
static void test_random_consistency(void) {
  for (int it = 0; it < 300; it++) {
    pass_dag d;
    random_dag(&d, rng_int(1, 40), it % SHAPE_COUNT);
    unsigned char *in = malloc((size_t)d.n_nodes);
    for (int k = 0; k < PASS_ORDER_COUNT; k++) {
      pass_states st;
      CHECK(pass_states_build(&d, (pass_order_kind)k, &st) == 0, "states");
      for (int s = 0; s <= st.n; s++) {
        set_prefix(&st, s, in);
        CHECK(pass_is_downset(&d, in), "prefix %d of order %d not a down-set", s, k);
        uint64_t gb, b = pass_cut_bytes(&d, in, &gb);
        CHECK(b == st.cut[s] && gb == st.cut_grad[s], "it %d order %d state %d: cut %llu vs %llu", it, k, s,
              (unsigned long long)st.cut[s], (unsigned long long)b);
      }
      pass_states_free(&st);
    }
    free(in);
    pass_dag_free(&d);
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* pass_downsets_build against the bitmask enumeration and the direct definitions. */
static void test_downsets_build(void) {
  long total = 0;
  for (int it = 0; it < 400; it++) {
    pass_dag d;
    random_dag(&d, rng_int(1, 14), it % SHAPE_COUNT);
    int n = d.n_nodes;
    long cap = 1 << 16;
    uint64_t *ref = malloc(sizeof(uint64_t) * (size_t)cap), *got = malloc(sizeof(uint64_t) * (size_t)cap);
    long nr = pass_downsets_enumerate(&d, ref, cap);
    double *w = malloc(sizeof(double) * (size_t)n);
    for (int v = 0; v < n; v++) w[v] = d.nodes[v].fwd_ms + (it & 1) * d.nodes[v].bwd_ms;
    pass_downsets ds;
    long S = pass_downsets_build(&d, w, 1 << 20, 0, &ds);
    CHECK(S == nr && S == ds.count, "it %d: %ld down-sets built, %ld enumerated", it, S, nr);
    if (S != nr) {
      free(ref);
      free(got);
      free(w);
      pass_downsets_free(&ds);
      pass_dag_free(&d);
      continue;
    }
    total += S;
    unsigned char in[64], in2[64];
    for (long s = 0; s < S; s++) {
      uint64_t mask = 0;
      pass_downset_members(&ds, s, in);
      CHECK((ds.parent[s] < 0) == (s == 0) && (s == 0 || (ds.added[s] >= 0 && in[ds.added[s]])), "parent / added node");
      double key = 0;
      uint64_t P = 0, A = 0;
      for (int v = 0; v < n; v++) {
        if (in[v]) {
          mask |= 1ull << v;
          key += w[v];
          P += d.nodes[v].param_bytes;
          A += d.nodes[v].act_bytes;
        }
      }
      got[s] = mask;
      CHECK(pass_is_downset(&d, in), "it %d state %ld not a down-set", it, s);
      int size = __builtin_popcountll(mask);
      CHECK(ds.size[s] == size, "size");
      CHECK(fabs(ds.key[s] - key) <= 1e-9 * (1 + key) && ds.param[s] == P && ds.act[s] == A, "it %d state %ld: sums",
            it, s);
      uint64_t gb, cb = pass_cut_bytes(&d, in, &gb);
      CHECK(ds.cut[s] == cb && ds.cut_grad[s] == gb, "it %d state %ld: cut %llu/%llu vs %llu/%llu", it, s,
            (unsigned long long)ds.cut[s], (unsigned long long)ds.cut_grad[s], (unsigned long long)cb,
            (unsigned long long)gb);
      if (s > 0) CHECK(ds.key[s - 1] <= ds.key[s], "not sorted by key");
      /* edges: D \ {v} for exactly the maximal v of D, listed earlier */
      int n_max = 0;
      for (int v = 0; v < n; v++) {
        if (!in[v]) continue;
        int maximal = 1;
        for (int o = 0; o < d.nodes[v].n_outputs; o++) {
          const pass_dag_tensor *t = &d.tensors[d.nodes[v].outputs[o]];
          for (int c = 0; c < t->n_consumers; c++) maximal &= !in[t->consumers[c]];
        }
        n_max += maximal;
      }
      CHECK(ds.lower_start[s + 1] - ds.lower_start[s] == n_max, "it %d state %ld: %d edges, %d maximal", it, s,
            ds.lower_start[s + 1] - ds.lower_start[s], n_max);
      for (long e = ds.lower_start[s]; e < ds.lower_start[s + 1]; e++) {
        int x = ds.lower[e];
        CHECK(x >= 0 && x < s, "edge to a later state");
        int diff = 0;
        pass_downset_members(&ds, x, in2);
        for (int v = 0; v < n; v++) {
          if (in2[v] && !in[v]) diff = 99;
          if (in[v] && !in2[v]) diff++;
        }
        CHECK(diff == 1, "edge is not D minus one node");
      }
    }
    CHECK(ds.size[0] == 0 && ds.size[S - 1] == n, "first {} and last V");
    qsort(ref, (size_t)S, sizeof(uint64_t), cmp_u64);
    qsort(got, (size_t)S, sizeof(uint64_t), cmp_u64);
    for (long s = 0; s < S; s++) CHECK(ref[s] == got[s], "it %d: different down-sets", it);
    pass_downsets_free(&ds);
    /* the cap */
    if (S > 3) CHECK(pass_downsets_build(&d, w, S - 1, 0, &ds) < 0 && ds.count == 0, "cap ignored");
    CHECK(pass_downsets_build(&d, w, S, 0, &ds) == S, "cap of exactly S refused");
    pass_downsets_free(&ds);
    free(ref);
    free(got);
    free(w);
    pass_dag_free(&d);
  }
  /* a wide graph: 12 parallel chains of 3 -> 4^12 down-sets, over any sane cap */
  pass_dag d;
  pass_dag_init(&d);
  int x = pass_dag_add_tensor(&d, "x", 1), ends[12];
  for (int b = 0; b < 12; b++) {
    int t = x;
    for (int l = 0; l < 3; l++) {
      char nm[32];
      snprintf(nm, sizeof nm, "b%d_%d", b, l);
      t = add_op(&d, nm, 1.0, 0, 10, 1, &t);
    }
    ends[b] = t;
  }
  int y = add_op(&d, "join", 1.0, 0, 10, 12, ends);
  pass_dag_mark_output(&d, y);
  char err[64];
  CHECK(pass_dag_finalize(&d, err, sizeof err) == 0, "%s", err);
  pass_downsets ds;
  CHECK(pass_downsets_build(&d, NULL, 100000, 0, &ds) < 0, "16.7M down-sets under a 100k cap");
  CHECK(pass_downsets_build(&d, NULL, 1L << 30, 1 << 20, &ds) < 0, "memory cap ignored");
  pass_dag_free(&d);
  printf("antichain DAG: %ld down-sets checked\n", total);
}

int main(void) {
  test_chain();
  test_skip_edge();
  test_multi_io();
  test_cycle();
  test_random_consistency();
  test_downsets_build();
  printf("%s\n", g_failures ? "FAIL" : "PASS");
  return g_failures ? 1 : 0;
}
