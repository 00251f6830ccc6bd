/* passes/plan/report_dag.c - the DAG section of the report: a layered left-to-right layout
 * computed here, drawn as inline SVG with nodes coloured by stage.
 *
 * Layout (Sugiyama-style, without dummy nodes, so it stays O((V + E) log V)):
 *   1. layers: longest path from the sources; a source node (no predecessor) is
 *      moved right next to its first consumer, so constants-like nodes do not
 *      hang at the far left;
 *   2. order within a layer: alternating barycentric sweeps (down with the
 *      predecessors' positions, up with the successors'), ties by the previous order;
 *   3. vertical positions: each node wants the mean height of its neighbours;
 *      a layer is packed in order with a minimum separation, as the mean of the
 *      packings pushed from above and from below (this keeps the order and centres
 *      groups of siblings on their parent);
 *   4. edges: an S-curve between adjacent layers, an arc over (or under) the
 *      layers between for longer edges. Edges that cross a stage boundary are drawn
 *      dark. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan/report_util.h"

enum { NODE_W = 72, NODE_H = 18, COLW = 96, SEP = 26, MARGIN = 12, RULER_H = 15 };

typedef struct {
  int n, n_edges;
  int *eu, *ev;       /* edges u -> v, sorted by (u, v), unique */
  int *s_off, *s_adj; /* successors CSR */
  int *p_off, *p_adj; /* predecessors CSR */
  int *layer, n_layers;
  int *l_off, *l_nodes; /* nodes of each layer, in order */
  int *pos;             /* index of a node within its layer */
  double *y;            /* top of the node box */
} dag_layout;

static int cmp_edge(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

typedef struct {
  double key;
  int pos, node;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Mean of pos (use_y = 0) or y (use_y = 1) over v's neighbours in adj; -1 count if none. */
static int mean_of(const dag_layout *L, const int *off, const int *adj, int v, int use_y, double *out) {
  int c = off[v + 1] - off[v];
  if (!c) return 0;
  double s = 0;
  for (int i = off[v]; i < off[v + 1]; i++) s += use_y ? L->y[adj[i]] : L->pos[adj[i]];
  *out = s / c;
  return c;
}

/* Place the nodes of layer l (in their order) near desired[], at least SEP apart. */
static void pack_layer(dag_layout *L, int l, const double *desired, double *a, double *b) {
  int s = L->l_off[l], e = L->l_off[l + 1], k = e - s;
  for (int i = 0; i < k; i++) {
    double d = desired[L->l_nodes[s + i]];
    a[i] = i && a[i - 1] + SEP > d ? a[i - 1] + SEP : d;
  }
  for (int i = k - 1; i >= 0; i--) {
    double d = desired[L->l_nodes[s + i]];
    b[i] = i < k - 1 && b[i + 1] - SEP < d ? b[i + 1] - SEP : d;
  }
  for (int i = 0; i < k; i++) L->y[L->l_nodes[s + i]] = (a[i] + b[i]) / 2;
}

static void layout(const pass_dag *d, dag_layout *L) {
  int n = d->n_nodes;
  memset(L, 0, sizeof *L);
  L->n = n;
  /* edges */
  size_t cap = 0;
  for (int t = 0; t < d->n_tensors; t++)
    if (d->tensors[t].producer >= 0) cap += (size_t)d->tensors[t].n_consumers;
  int64_t *ed = malloc(sizeof(int64_t) * (cap + 1));
  size_t ne = 0;
  for (int t = 0; t < d->n_tensors; t++) {
    const pass_dag_tensor *T = &d->tensors[t];
    if (T->producer < 0 || T->producer >= n) continue;
    for (int c = 0; c < T->n_consumers; c++)
      if (T->consumers[c] != T->producer && T->consumers[c] >= 0 && T->consumers[c] < n)
        ed[ne++] = (int64_t)T->producer * n + T->consumers[c];
  }
  qsort(ed, ne, sizeof *ed, cmp_edge);
  size_t m = 0;
  for (size_t i = 0; i < ne; i++)
    if (!m || ed[i] != ed[m - 1]) ed[m++] = ed[i];
  L->n_edges = (int)m;
  L->eu = malloc(sizeof(int) * (m + 1));
  L->ev = malloc(sizeof(int) * (m + 1));
  L->s_off = calloc((size_t)n + 2, sizeof(int));
  L->p_off = calloc((size_t)n + 2, sizeof(int));
  L->s_adj = malloc(sizeof(int) * (m + 1));
  L->p_adj = malloc(sizeof(int) * (m + 1));
  for (size_t i = 0; i < m; i++) {
    L->eu[i] = (int)(ed[i] / n), L->ev[i] = (int)(ed[i] % n);
    L->s_off[L->eu[i] + 1]++, L->p_off[L->ev[i] + 1]++;
  }
  free(ed);
  for (int v = 0; v < n; v++) L->s_off[v + 1] += L->s_off[v], L->p_off[v + 1] += L->p_off[v];
  int *fill = malloc(sizeof(int) * ((size_t)n + 1));
  memcpy(fill, L->p_off, sizeof(int) * (size_t)n);
  for (size_t i = 0; i < m; i++) {
    L->s_adj[i] = L->ev[i]; /* edges are sorted by u: successors come out in place */
    L->p_adj[fill[L->ev[i]]++] = L->eu[i];
  }

  /* topological order (Kahn, FIFO); nodes on a cycle (never in a valid plan) go last */
  int *topo = malloc(sizeof(int) * ((size_t)n + 1)), *indeg = fill, nt = 0;
  unsigned char *seen = calloc((size_t)n + 1, 1);
  for (int v = 0; v < n; v++) indeg[v] = L->p_off[v + 1] - L->p_off[v];
  for (int v = 0; v < n; v++)
    if (!indeg[v]) topo[nt++] = v, seen[v] = 1;
  for (int h = 0; h < nt; h++)
    for (int i = L->s_off[topo[h]]; i < L->s_off[topo[h] + 1]; i++)
      if (!--indeg[L->s_adj[i]]) topo[nt++] = L->s_adj[i], seen[L->s_adj[i]] = 1;
  for (int v = 0; v < n; v++)
    if (!seen[v]) topo[nt++] = v;
  free(seen);

  /* 1. layers */
  L->layer = calloc((size_t)n + 1, sizeof(int));
  for (int h = 0; h < n; h++) {
    int v = topo[h], l = 0;
    for (int i = L->p_off[v]; i < L->p_off[v + 1]; i++)
      if (L->layer[L->p_adj[i]] + 1 > l) l = L->layer[L->p_adj[i]] + 1;
    L->layer[v] = l;
  }
  for (int h = n - 1; h >= 0; h--) {
    int v = topo[h];
    if (L->p_off[v + 1] > L->p_off[v] || L->s_off[v + 1] == L->s_off[v]) continue;
    int l = 1 << 30;
    for (int i = L->s_off[v]; i < L->s_off[v + 1]; i++)
      if (L->layer[L->s_adj[i]] < l) l = L->layer[L->s_adj[i]];
    L->layer[v] = l - 1 > 0 ? l - 1 : 0;
  }
  for (int v = 0; v < n; v++)
    if (L->layer[v] + 1 > L->n_layers) L->n_layers = L->layer[v] + 1;
  int nl = L->n_layers;
  L->l_off = calloc((size_t)nl + 2, sizeof(int));
  L->l_nodes = malloc(sizeof(int) * ((size_t)n + 1));
  L->pos = malloc(sizeof(int) * ((size_t)n + 1));
  for (int v = 0; v < n; v++) L->l_off[L->layer[v] + 1]++;
  for (int l = 0; l < nl; l++) L->l_off[l + 1] += L->l_off[l];
  memcpy(fill, L->l_off, sizeof(int) * ((size_t)nl + 1));
  for (int h = 0; h < n; h++) {
    int v = topo[h];
    L->pos[v] = fill[L->layer[v]] - L->l_off[L->layer[v]];
    L->l_nodes[fill[L->layer[v]]++] = v;
  }
  free(topo);

  /* 2. barycentric ordering */
  keyed *kb = malloc(sizeof(keyed) * ((size_t)n + 1));
  for (int it = 0; it < 7; it++) {
    int down = !(it & 1);
    for (int q = 0; q < nl; q++) {
      int l = down ? q : nl - 1 - q, s = L->l_off[l], e = L->l_off[l + 1];
      if (e - s < 2) continue;
      for (int i = s; i < e; i++) {
        int v = L->l_nodes[i];
        double mean;
        int c = down ? mean_of(L, L->p_off, L->p_adj, v, 0, &mean) : mean_of(L, L->s_off, L->s_adj, v, 0, &mean);
        kb[i - s].key = c ? mean : L->pos[v];
        kb[i - s].pos = L->pos[v];
        kb[i - s].node = v;
      }
      qsort(kb, (size_t)(e - s), sizeof *kb, cmp_keyed);
      for (int i = s; i < e; i++) L->l_nodes[i] = kb[i - s].node, L->pos[kb[i - s].node] = i - s;
    }
  }
  free(kb);

  /* 3. vertical positions */
  L->y = malloc(sizeof(double) * ((size_t)n + 1));
  double *want = malloc(sizeof(double) * ((size_t)n + 1));
  double *a = malloc(sizeof(double) * ((size_t)n + 1)), *b = malloc(sizeof(double) * ((size_t)n + 1));
  for (int v = 0; v < n; v++) L->y[v] = (double)L->pos[v] * SEP;
  for (int pass = 0; pass < 3; pass++) {
    int down = pass != 1;
    for (int q = 0; q < nl; q++) {
      int l = down ? q : nl - 1 - q;
      for (int i = L->l_off[l]; i < L->l_off[l + 1]; i++) {
        int v = L->l_nodes[i];
        double mean;
        int c = down ? mean_of(L, L->p_off, L->p_adj, v, 1, &mean) : mean_of(L, L->s_off, L->s_adj, v, 1, &mean);
        want[v] = !c ? L->y[v] : pass == 0 ? mean : (L->y[v] + mean) / 2;
      }
      pack_layer(L, l, want, a, b);
    }
  }
  free(want);
  free(a);
  free(b);
  free(fill);
}

static void layout_free(dag_layout *L) {
  free(L->eu), free(L->ev), free(L->s_off), free(L->s_adj), free(L->p_off), free(L->p_adj);
  free(L->layer), free(L->l_off), free(L->l_nodes), free(L->pos), free(L->y);
}

/* Short op-type labels that fit a box. */
static void op_label(FILE *f, const char *op) {
  static const char *const abbr[][2] = {{"BatchNormalization", "BatchNorm"},
                                        {"LayerNormalization", "LayerNorm"},
                                        {"GlobalAveragePool", "GlobAvgPool"},
                                        {"GlobalMaxPool", "GlobMaxPool"},
                                        {"AveragePool", "AvgPool"},
                                        {"ConvTranspose", "ConvT"},
                                        {"ConstantOfShape", "ConstOfShp"},
                                        {"InstanceNormalization", "InstNorm"},
                                        {"GroupNormalization", "GroupNorm"},
                                        {"LocalResponseNormalization", "LRN"},
                                        {"ReduceMean", "ReduceMean"},
                                        {"SkipLayerNormalization", "SkipLN"},
                                        {"SimplifiedLayerNormalization", "RMSNorm"},
                                        {"DequantizeLinear", "Dequant"},
                                        {"QuantizeLinear", "Quant"}};
  for (size_t i = 0; i < sizeof abbr / sizeof abbr[0]; i++)
    if (!strcmp(op, abbr[i][0])) {
      fputs(abbr[i][1], f);
      return;
    }
  rep_esc(f, op, 11);
}

/* Does the straight line from u to v pass through a node of a layer between them? */
static int blocked(const dag_layout *L, int u, int v) {
  double x1 = (double)L->layer[u] * COLW + NODE_W, x2 = (double)L->layer[v] * COLW;
  double y1 = L->y[u] + NODE_H / 2.0, y2 = L->y[v] + NODE_H / 2.0;
  for (int l = L->layer[u] + 1; l < L->layer[v]; l++) {
    double xc = (double)l * COLW + NODE_W / 2.0, yl = y1 + (y2 - y1) * (xc - x1) / (x2 - x1);
    /* nodes of a layer are sorted by y: find the first whose bottom is below yl - margin */
    int lo = L->l_off[l], hi = L->l_off[l + 1];
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (L->y[L->l_nodes[mid]] + NODE_H + 3 < yl) lo = mid + 1;
      else hi = mid;
    }
    if (lo < L->l_off[l + 1] && L->y[L->l_nodes[lo]] - 3 < yl) return 1;
  }
  return 0;
}

/* Signed bow of the edge u -> v: 0 (drawn as an S-curve), < 0 an arc over the
 * layers between, > 0 under them. */
static double edge_bow(const dag_layout *L, int u, int v) {
  int span = L->layer[v] - L->layer[u];
  if (span <= 1 || !blocked(L, u, v)) return 0;
  int lu = L->layer[u], lv = L->layer[v];
  int u_last = L->pos[u] == L->l_off[lu + 1] - L->l_off[lu] - 1,
      v_last = L->pos[v] == L->l_off[lv + 1] - L->l_off[lv] - 1;
  double b = 4 + 12 * log2((double)span); /* nested arcs of different heights, not one band */
  if (b > 72) b = 72;
  return (u_last && v_last && (L->pos[u] || L->pos[v])) ? b : -b;
}

void rep_write_dag(FILE *f, const ir_graph *g, const pass_planned *p) {
  const pass_dag *d = &p->dag;
  int n = d->n_nodes;
  dag_layout L;
  layout(d, &L);
  int ns = p->plan.n_stages;
  /* node_stage is in [0, ns); anything else would be a planner bug: draw it grey */
  int *stage = malloc(sizeof(int) * ((size_t)n + 1));
  for (int v = 0; v < n; v++) stage[v] = p->node_stage[v] >= 0 && p->node_stage[v] < ns ? p->node_stage[v] : ns;
  char(*col)[8] = malloc(sizeof *col * ((size_t)ns + 1));
  int *dark = malloc(sizeof(int) * ((size_t)ns + 1));
  for (int s = 0; s < ns; s++) rep_stage_color(s, col[s]), dark[s] = rep_dark_text(col[s]);
  memcpy(col[ns], "#cccccc", 8), dark[ns] = 1;

  /* vertical extent, including the arcs of long edges */
  double ymin = 0, ymax = 0;
  for (int v = 0; v < n; v++) {
    if (!v || L.y[v] < ymin) ymin = L.y[v];
    if (!v || L.y[v] + NODE_H > ymax) ymax = L.y[v] + NODE_H;
  }
  double *bow = malloc(sizeof(double) * ((size_t)L.n_edges + 1));
  for (int i = 0; i < L.n_edges; i++) {
    int u = L.eu[i], v = L.ev[i];
    bow[i] = edge_bow(&L, u, v);
    if (bow[i] < 0) {
      double top = fmin(L.y[u], L.y[v]) + NODE_H / 2.0 + bow[i];
      if (top < ymin) ymin = top;
    } else if (bow[i] > 0) {
      double bot = fmax(L.y[u], L.y[v]) + NODE_H / 2.0 + bow[i];
      if (bot > ymax) ymax = bot;
    }
  }
  /* stage ruler lanes above the graph */
  int *lmin = malloc(sizeof(int) * ((size_t)ns + 1)), *lmax = malloc(sizeof(int) * ((size_t)ns + 1));
  for (int s = 0; s < ns; s++) lmin[s] = 1 << 30, lmax[s] = -1;
  for (int v = 0; v < n; v++) {
    int s = stage[v];
    if (s < 0 || s >= ns) continue;
    if (L.layer[v] < lmin[s]) lmin[s] = L.layer[v];
    if (L.layer[v] > lmax[s]) lmax[s] = L.layer[v];
  }
  double y0 = MARGIN + 2 * RULER_H + 8 - ymin; /* shift: graph starts below the ruler */
  double W = 2 * MARGIN + (L.n_layers > 0 ? (L.n_layers - 1) * COLW + NODE_W : NODE_W);
  double H = ymax + y0 + MARGIN;
#define X(v) (MARGIN + (double)L.layer[v] * COLW)
#define Y(v) (L.y[v] + y0)

  /* toolbar and legend */
  fputs(
      "<div class=\"toolbar\"><span class=\"btns\"><button data-zoom=\"dag\" data-z=\"0.8\" title=\"zoom out\">&minus;</button>"
      "<button data-zoom=\"dag\" data-z=\"1.25\" title=\"zoom in\">+</button>"
      "<button data-zoom=\"dag\" data-z=\"fit\" title=\"fit the whole graph\">fit</button>"
      "<button data-zoom=\"dag\" data-z=\"1\" title=\"actual size\">1:1</button></span>"
      "<input id=\"dagq\" type=\"search\" placeholder=\"find node (name or op)\" size=\"26\">"
      "<span id=\"dagqn\" class=\"muted\"></span><span class=\"legend\">",
      f);
  for (int s = 0; s < ns; s++) {
    char c[8];
    rep_stage_color(s, c);
    fprintf(f,
            "<span class=\"chip\" data-stage=\"%d\" data-color=\"%s\"><i style=\"background:%s\"></i>stage %d</span>",
            s, c, c, s);
  }
  fprintf(
      f,
      "</span></div>\n<p class=\"muted small\">%d nodes, %d edges, %d layers. Ctrl + wheel zooms; hover a node for "
      "its ONNX name; dark edges cross a stage boundary. The strip below is the whole graph: click it to jump.</p>\n",
      n, L.n_edges, L.n_layers);

  /* minimap: the whole graph squeezed to the page width */
  fprintf(f,
          "<svg id=\"dagmini\" class=\"mini\" viewBox=\"0 0 %.0f %.0f\" preserveAspectRatio=\"none\" role=\"img\" "
          "aria-label=\"overview of the graph\">",
          W, H);
  for (int s = 0; s < ns; s++) {
    if (lmax[s] < 0) continue;
    char c[8];
    rep_stage_color(s, c);
    fprintf(f, "<rect x=\"%.0f\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"%s\" opacity=\"0.18\"/>",
            MARGIN + (double)lmin[s] * COLW, (double)(lmax[s] - lmin[s]) * COLW + NODE_W, H, c);
  }
  for (int v = 0; v < n; v++) {
    char a[32], b[32];
    fprintf(f, "<rect x=\"%s\" y=\"%s\" width=\"%d\" height=\"%d\" fill=\"%s\"/>", rep_num(a, X(v)), rep_num(b, Y(v)),
            NODE_W, NODE_H, col[stage[v]]);
  }

  fprintf(f, "<rect id=\"dagview\" x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\"/></svg>\n", W, H);

  /* the graph */
  fprintf(
      f,
      "<div id=\"dagbox\" class=\"scroll\"><svg id=\"dag\" class=\"zoomable\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" data-w=\"%.0f\" data-h=\"%.0f\" role=\"img\" aria-label=\"model graph coloured by stage\">\n",
      W, H, W, H, W, H);
  fputs("<g class=\"ruler\">", f);
  for (int s = 0; s < ns; s++) {
    if (lmax[s] < 0) continue;
    char c[8];
    rep_stage_color(s, c);
    double x = MARGIN + (double)lmin[s] * COLW, w = (double)(lmax[s] - lmin[s]) * COLW + NODE_W,
           y = MARGIN + (s % 2) * RULER_H;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>", x, y, w, RULER_H - 3, c);
    for (double t = 0; t == 0 || t + 60 < w; t += 1000) /* repeated along long bars */
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"%s\">stage %d</text>", x + t + 4, y + RULER_H - 6,
              rep_dark_text(c) ? "d" : "l", s);
  }
  fputs("</g>\n", f);
  /* arcs first, then S-curves; within each, stage-crossing edges (dark) on top */
  static const char *const groups[4] = {"el", "ecutl", "e", "ecut"};
  for (int grp = 0; grp < 4; grp++) {
    int pass = grp & 1, arcs = grp < 2;
    fprintf(f, "<g class=\"%s\">", groups[grp]);
    for (int i = 0; i < L.n_edges; i++) {
      int u = L.eu[i], v = L.ev[i];
      if ((stage[u] != stage[v]) != pass || (bow[i] != 0) != arcs) continue;
      double x1 = X(u) + NODE_W, y1 = Y(u) + NODE_H / 2.0, x2 = X(v), y2 = Y(v) + NODE_H / 2.0, dx = x2 - x1;
      double c1x = x1 + dx / 2, c1y = y1, c2x = x2 - dx / 2, c2y = y2;
      if (bow[i] != 0) {
        c1y = c2y = (bow[i] < 0 ? fmin(y1, y2) : fmax(y1, y2)) + bow[i] / 0.75;
        c1x = x1 + fmin(dx * 0.25, 160), c2x = x2 - fmin(dx * 0.25, 160);
      }
      char b[8][32];
      fprintf(f, "<path d=\"M%s %sC%s %s %s %s %s %s\"/>", rep_num(b[0], x1), rep_num(b[1], y1), rep_num(b[2], c1x),
              rep_num(b[3], c1y), rep_num(b[4], c2x), rep_num(b[5], c2y), rep_num(b[6], x2), rep_num(b[7], y2));
    }
    fputs("</g>\n", f);
  }
  fputs("<g class=\"nodes\">\n", f);
  for (int v = 0; v < n; v++) {
    char mb[32], b[4][32];
    int s = stage[v];
    const pass_node_cost *k = &p->costs[v];
    fprintf(
        f,
        "<g class=\"n\"><rect x=\"%s\" y=\"%s\" width=\"%d\" height=\"%d\" fill=\"%s\"/><text x=\"%s\" y=\"%s\" class=\"%s\">",
        rep_num(b[0], X(v)), rep_num(b[1], Y(v)), NODE_W, NODE_H, col[s], rep_num(b[2], X(v) + NODE_W / 2.0),
        rep_num(b[3], Y(v) + 12.5), dark[s] ? "d" : "l");
    op_label(f, rep_node_op(g, v));
    fputs("</text><title>", f);
    rep_esc(f, rep_node_name(p, v), 160);
    fputs("\n", f);
    rep_esc(f, rep_node_op(g, v), 40);
    const char *fused = v < g->n_nodes ? ir_attr_str(&g->nodes[v], "pipecc.fused", NULL) : NULL;
    if (fused) {
      fputs(" + ", f);
      rep_esc(f, fused, 900); /* a written-out LayerNormalization lists eight nodes */
    }
    fprintf(f, " \xC2\xB7 stage %d \xC2\xB7 fwd %s ms", s, rep_fixed(b[0], k->fwd_ms, 4));
    if (p->plan.training) fprintf(f, " \xC2\xB7 bwd %s ms", rep_fixed(b[0], k->bwd_ms, 4));
    if (k->param_bytes) {
      rep_bytes(mb, sizeof mb, (double)k->param_bytes);
      fprintf(f, " \xC2\xB7 weights %s", mb);
    }
    rep_bytes(mb, sizeof mb, (double)k->out_bytes);
    fprintf(f, " \xC2\xB7 out %s</title></g>\n", mb);
  }
  fputs("</g></svg></div>\n", f);
#undef X
#undef Y
  free(bow);
  free(stage);
  free(col);
  free(dark);
  free(lmin);
  free(lmax);
  layout_free(&L);
}
