/* passes/lower/lower_signal.c - signal-processing ops written in other ops (pass_lower_signal),
 * after shape inference: DFT, STFT, the window functions and MelWeightMatrix.
 *
 *   HannWindow / HammingWindow / BlackmanWindow-17(size): size a constant scalar; a
 *     constant [size] of type `output_datatype` (default float), computed in double:
 *     w[k] = a0 - a1 cos(2 pi k / D) + a2 cos(4 pi k / D), D = size (periodic, the
 *     default) or size - 1 (symmetric; size 1 then gives NaN, as the ONNX function body
 *     does). Hann a = (1/2, 1/2, 0), Hamming (25/46, 21/46, 0), Blackman (0.42, 0.5, 0.08).
 *   MelWeightMatrix-17(num_mel_bins M, dft_length D, sample_rate, lower_edge_hertz,
 *     upper_edge_hertz): all constants; a constant [D/2 + 1, M] of `output_datatype`:
 *     M + 2 points equally spaced on the mel scale mel(f) = 2595 log10(1 + f/700), from
 *     mel(lower) in steps of (mel(upper) - mel(lower)) / (M + 2), each taken back to
 *     hertz and to the spectrogram bin floor((D + 1) f / sample_rate); mel band i is the
 *     triangle over bins [b_i, b_i+2] with its peak 1 at b_i+1 (as onnxruntime computes
 *     it).
 *   DFT-17/20(x [..., L, ..., 1 or 2], dft_length, axis): the length n = dft_length
 *     (constant; default L), the signal zero-padded or cut to n along `axis` (17: an
 *     attribute, default 1; 20: a constant input, default -2; never the last axis).
 *     Written as a MatMul with a constant matrix of cos / sin (computed in double, stored
 *     in the input's float type; float16 / bfloat16 computed in float): the signal axis
 *     and the real / imaginary pair moved last and flattened, times [m * c, 2 K] (m =
 *     min(L, n) rows: padding adds nothing), giving K = n (onesided: n/2 + 1) bins as
 *     (re, im) pairs, moved back to `axis`. inverse: exp(+i...) and a factor 1/n.
 *     onesided needs a real input, and is refused with inverse (onnxruntime then gives
 *     a real signal back, which the spec does not describe).
 *   STFT-17(signal [B, L, 1 or 2], frame_step, window [N], frame_length): frame_step,
 *     frame_length constants, window any tensor (a constant one is folded into the DFT
 *     matrix); F = (L - N) / frame_step + 1 frames, gathered with constant indices
 *     [F, N] into [B, F, N, c], times the window, then the DFT matrix (onesided, default
 *     1: N/2 + 1 bins; with a complex signal the first N/2 + 1 bins of the full DFT, as
 *     onnxruntime does) -> [B, F, K, 2]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/rewrite.h"
#include "passes/batch.h"
#include "passes/pass.h"
#include "passes/shape/shape_impl.h"

#define SIG_PI 3.14159265358979323846
/* Largest DFT matrix built, in elements (1 GiB of float). */
#define SIG_MAX_MATRIX (1ll << 28)

/* ---- constant scalars ---------------------------------------------------------------- */

/* Constant integer scalar at input i (a scalar or one element) into *v. */
static int const_int(ir_graph *g, int node, int i, const char *what, int64_t *v) {
  int n;
  if (sh_const_ints(g, node, i, what, v, 1, &n)) return -1;
  if (n != 1) SH_FAIL("input '%s' must hold one value, it has %d", what, n);
  return 0;
}
static int const_f64(ir_graph *g, int node, int i, const char *what, double *v) {
  int n;
  if (sh_const_f64s(g, node, i, what, v, 1, &n)) return -1;
  if (n != 1) SH_FAIL("input '%s' must hold one value, it has %d", what, n);
  return 0;
}

/* output_datatype of a window or MelWeightMatrix node (-1 after reporting) */
static int out_dtype(ir_graph *g, int node) {
  int64_t dt = ir_attr_int(SH_NODE, "output_datatype", IR_FLOAT);
  if (dt <= IR_UNDEFINED || dt >= IR_DTYPE_COUNT || !(SH_BIT(dt) & SH_NUM) || (SH_BIT(dt) & SH_FLOAT8))
    SH_FAIL("attribute 'output_datatype' is %lld, not a float or integer type", (long long)dt);
  return (int)dt;
}

/* ---- window functions ---------------------------------------------------------------- */

static void window_coefs(ir_op op, double c[3]) {
  c[2] = 0;
  if (op == IR_OP_HannWindow) c[0] = 0.5, c[1] = 0.5;
  else if (op == IR_OP_HammingWindow) c[0] = 25.0 / 46, c[1] = 21.0 / 46;
  else c[0] = 0.42, c[1] = 0.5, c[2] = 0.08;
}

static int sh_window(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  int64_t n;
  if (sh_check_dtype(g, node, x, SH_INTS, "input 'size'") || const_int(g, node, 0, "size", &n)) return -1;
  int dt = out_dtype(g, node);
  if (dt < 0) return -1;
  if (n < 0) SH_FAIL("input 'size' is %lld, not >= 0", (long long)n);
  ir_shape s = {0};
  s.rank = 1;
  s.dims[0] = n;
  return sh_set_out(g, node, 0, (ir_dtype)dt, &s);
}
int sh_HannWindow(ir_graph *g, int node) { return sh_window(g, node); }
int sh_HammingWindow(ir_graph *g, int node) { return sh_window(g, node); }
int sh_BlackmanWindow(ir_graph *g, int node) { return sh_window(g, node); }

/* A graph constant holding v[0..n) (shape s) as `dt`: float and double stored, other
 * types stored as double and Cast (C's conversion: integers truncate, as Cast does).
 * Returns the value, made the node's output. */
static int put_const(ad_ctx *a, int node, const double *v, const ir_shape *s, ir_dtype dt) {
  ir_graph *g = a->g;
  int64_t n = ir_shape_numel(s);
  ir_dtype st = dt == IR_FLOAT ? IR_FLOAT : IR_DOUBLE;
  size_t es = ir_dtype_size(st);
  unsigned char *data = calloc((size_t)(n > 0 ? n : 1), es);
  if (!data) return ir_error_node(g, node, "out of memory"), -1;
  for (int64_t i = 0; i < n; i++) {
    if (st == IR_FLOAT) ((float *)data)[i] = (float)v[i];
    else ((double *)data)[i] = v[i];
  }
  int c = ad_c_tensor(a, st, s, data, es * (size_t)n);
  free(data);
  int y = st == dt ? ad_un(a, IR_OP_Identity, c) : ad_cast(a, c, dt);
  if (a->err) return -1;
  ir_take_output(g, y, g->nodes[node].out[0]);
  return 0;
}

static int lower_window(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  const ir_node *nd = &g->nodes[node];
  const ir_value *y = &g->values[nd->out[0]];
  int64_t n = y->shape.dims[0];
  double c[3], D = ir_attr_int(nd, "periodic", 1) ? (double)n : (double)(n - 1);
  window_coefs(nd->op, c);
  double *w = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!w) return ir_error_node(g, node, "out of memory"), -1;
  for (int64_t k = 0; k < n; k++) {
    double t = 2 * SIG_PI * (double)k / D; /* size 1, symmetric: 0/0, NaN */
    w[k] = c[0] - c[1] * cos(t) + c[2] * cos(2 * t);
  }
  int r = put_const(a, node, w, &y->shape, y->dtype);
  free(w);
  return r;
}

/* ---- MelWeightMatrix ---------------------------------------------------------------- */

typedef struct {
  int64_t M, D, sr;
  double lo, hi;
} mel_p;

static int mel_params(ir_graph *g, int node, mel_p *p) {
  static const char *nm[] = {"num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"};
  for (int i = 0; i < 5; i++)
    if (sh_check_dtype(g, node, sh_in(g, node, i), i < 3 ? SH_INTS : SH_FLOATS, nm[i])) return -1;
  if (const_int(g, node, 0, nm[0], &p->M) || const_int(g, node, 1, nm[1], &p->D) ||
      const_int(g, node, 2, nm[2], &p->sr) || const_f64(g, node, 3, nm[3], &p->lo) ||
      const_f64(g, node, 4, nm[4], &p->hi))
    return -1;
  if (p->M < 1 || p->D < 1 || p->sr < 1)
    SH_FAIL("num_mel_bins (%lld), dft_length (%lld) and sample_rate (%lld) must be >= 1", (long long)p->M,
            (long long)p->D, (long long)p->sr);
  if (!(p->lo >= 0 && p->lo <= p->hi && isfinite(p->hi)))
    SH_FAIL("lower_edge_hertz %g and upper_edge_hertz %g: 0 <= lower <= upper expected", p->lo, p->hi);
  if (p->M > (1 << 24) || p->D > (1ll << 40)) SH_FAIL("num_mel_bins or dft_length too large");
  return 0;
}

int sh_MelWeightMatrix(ir_graph *g, int node) {
  mel_p p;
  if (mel_params(g, node, &p)) return -1;
  int dt = out_dtype(g, node);
  if (dt < 0) return -1;
  ir_shape s = {0};
  s.rank = 2;
  s.dims[0] = p.D / 2 + 1;
  s.dims[1] = p.M;
  return sh_set_out(g, node, 0, (ir_dtype)dt, &s);
}

static int lower_mel(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  const ir_value *y = &g->values[g->nodes[node].out[0]];
  mel_p p;
  if (mel_params(g, node, &p)) return -1;
  int64_t K = p.D / 2 + 1, M = p.M;
  double *w = calloc((size_t)(K * M), sizeof(double));
  int64_t *bin = malloc(sizeof(int64_t) * (size_t)(M + 2));
  if (!w || !bin) return free(w), free(bin), ir_error_node(g, node, "out of memory"), -1;
  double mlo = 2595 * log10(1 + p.lo / 700), mhi = 2595 * log10(1 + p.hi / 700), step = (mhi - mlo) / (double)(M + 2);
  for (int64_t i = 0; i < M + 2; i++) {
    double hz = 700 * (pow(10, (mlo + (double)i * step) / 2595) - 1);
    bin[i] = (int64_t)floor((double)(p.D + 1) * hz / (double)p.sr);
  }
#define MEL_SET(j, i, v)                           \
  do {                                             \
    if ((j) >= 0 && (j) < K) w[(j)*M + (i)] = (v); \
  } while (0)
  for (int64_t i = 0; i < M; i++) {
    int64_t l = bin[i], c = bin[i + 1], h = bin[i + 2];
    if (c == l) MEL_SET(c, i, 1.0);
    for (int64_t j = l; c > l && j <= c; j++) MEL_SET(j, i, (double)(j - l) / (double)(c - l));
    for (int64_t j = c; j < h; j++) MEL_SET(j, i, (double)(h - j) / (double)(h - c));
  }
#undef MEL_SET
  free(bin);
  int r = put_const(a, node, w, &y->shape, y->dtype);
  free(w);
  return r;
}

/* ---- DFT ------------------------------------------------------------------------------ */

typedef struct {
  int axis, rank;
  int64_t L, n, m, K, c; /* signal length, DFT length, rows used (min(L, n)), bins, 1 or 2 */
  int inverse;
} dft_p;

/* The DFT matrix's size check (shared with STFT). */
static int dft_size_ok(ir_graph *g, int node, const dft_p *p) {
  if (p->n < 1) SH_FAIL("the DFT length is %lld, not >= 1", (long long)p->n);
  if ((double)p->m * (double)p->c * 2.0 * (double)p->K > (double)SIG_MAX_MATRIX)
    SH_FAIL("a DFT of length %lld needs a %lld x %lld matrix, more than the %lld elements supported", (long long)p->n,
            (long long)(p->m * p->c), (long long)(2 * p->K), SIG_MAX_MATRIX);
  return 0;
}

static int dft_params(ir_graph *g, int node, dft_p *p) {
  const ir_value *x = sh_in(g, node, 0);
  char b[64];
  memset(p, 0, sizeof *p);
  if (sh_check_dtype(g, node, x, SH_FLOATS & ~SH_FLOAT8, "input")) return -1;
  int r = x->shape.rank;
  if (r < 2 || (x->shape.dims[r - 1] != 1 && x->shape.dims[r - 1] != 2))
    SH_FAIL("input of shape %s: [..., 1] (real) or [..., 2] (complex) expected", sh_str(&x->shape, b, sizeof b));
  int64_t ax = SH_NODE->opset >= 20 ? -2 : 1;
  if (SH_NODE->opset >= 20) {
    const ir_value *va = sh_in(g, node, 2);
    if (va && (sh_check_dtype(g, node, va, SH_INTS, "input 'axis'") || const_int(g, node, 2, "axis", &ax))) return -1;
  } else {
    ax = ir_attr_int(SH_NODE, "axis", 1);
  }
  if (ax < -r || ax > r - 2 || (ax < 0 && ax + r > r - 2))
    SH_FAIL("axis %lld of an input of rank %d: [%d, -2] or [0, %d] expected (not the last axis)", (long long)ax, r, -r,
            r - 2);
  p->rank = r;
  p->axis = (int)(ax < 0 ? ax + r : ax);
  p->L = x->shape.dims[p->axis];
  p->c = x->shape.dims[r - 1];
  p->n = p->L;
  const ir_value *vn = sh_in(g, node, 1);
  if (vn && (sh_check_dtype(g, node, vn, SH_INTS, "input 'dft_length'") || const_int(g, node, 1, "dft_length", &p->n)))
    return -1;
  p->m = p->L < p->n ? p->L : p->n;
  p->inverse = ir_attr_int(SH_NODE, "inverse", 0) != 0;
  int onesided = ir_attr_int(SH_NODE, "onesided", 0) != 0;
  if (onesided && p->c == 2) SH_FAIL("onesided DFT needs a real input (last dimension 1), it is complex");
  if (onesided && p->inverse) SH_FAIL("onesided with inverse is not supported");
  p->K = onesided ? p->n / 2 + 1 : p->n;
  return dft_size_ok(g, node, p);
}

int sh_DFT(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  dft_p p;
  if (dft_params(g, node, &p)) return -1;
  ir_shape s = x->shape;
  s.dims[p.axis] = p.K;
  s.dims[p.rank - 1] = 2;
  double rest = sh_numel(&x->shape) / (double)(p.L * p.c > 0 ? p.L * p.c : 1);
  SH_NODE->flops = 2 * rest * (double)(p.m * p.c) * (double)(2 * p.K);
  return sh_set_out(g, node, 0, x->dtype, &s);
}

/* The constant [m * c, 2 K] of type t: row j * c + part (part 0 real, 1 imaginary) times
 * column k * 2 + part gives sum_j x_j e^(-+ 2 pi i j k / n) (times 1/n if inverse), each
 * row j scaled by win[j] when win is given. */
static int dft_matrix(ad_ctx *a, const dft_p *p, const double *win, ir_dtype t) {
  int64_t R = p->m * p->c, C = 2 * p->K, cnt = R * C;
  size_t es = ir_dtype_size(t);
  double sign = p->inverse ? 1 : -1, scale = p->inverse ? 1.0 / (double)p->n : 1.0;
  unsigned char *data = malloc((size_t)cnt * es);
  if (!data) return a->err = 1, ir_error(a->g, "%s: out of memory", a->base), -1;
  for (int64_t j = 0; j < p->m; j++) {
    double wj = (win ? win[j] : 1.0) * scale;
    for (int64_t k = 0; k < p->K; k++) {
      double th = 2 * SIG_PI * (double)((j * k) % p->n) / (double)p->n;
      double cs = cos(th) * wj, sn = sign * sin(th) * wj;
      /* (xr + i xi)(cs + i sn) = (xr cs - xi sn) + i (xr sn + xi cs) */
      double v[4] = {cs, sn, -sn, cs}; /* [part of x][part of y] */
      for (int px = 0; px < p->c; px++)
        for (int py = 0; py < 2; py++) {
          int64_t at = (j * p->c + px) * C + k * 2 + py;
          if (t == IR_FLOAT) ((float *)data)[at] = (float)v[px * 2 + py];
          else ((double *)data)[at] = v[px * 2 + py];
        }
    }
  }
  ir_shape s = {0};
  s.rank = 2;
  s.dims[0] = R;
  s.dims[1] = C;
  int c = ir_add_const(a->g, ir_sprintf(a->g->arena, "%s/%s/dft", a->base, a->tag), t, &s, data, es * (size_t)cnt);
  free(data);
  return c;
}

/* x [..., m * c] times the DFT matrix -> [..., K, 2] */
static int dft_apply(ad_ctx *a, int x, const dft_p *p, const double *win, ir_dtype t) {
  int W = dft_matrix(a, p, win, t);
  if (W < 0) return -1;
  ir_shape s = ad_shape(a, x), o = s; /* o: [..., m * c] -> [..., K, 2] */
  o.dims[o.rank - 1] = p->K;
  o.dims[o.rank++] = 2;
  if (s.rank == 1) { /* MatMul of a vector: as one row, [1, m * c] */
    s.rank = 2, s.dims[1] = s.dims[0], s.dims[0] = 1;
    x = ad_reshape(a, x, &s);
  }
  return ad_reshape(a, ad_bin(a, IR_OP_MatMul, x, W), &o);
}

/* Refuse a node whose input `in` carries the micro-batch on axis `bad` or `bad2` (the
 * transform runs along it: the micro-batches would not add up to the batch). */
static int batch_along(ad_ctx *a, int node, int in, int bad, int bad2, const char *what) {
  int ax = pass_batch_axis(a->g, in);
  if (ax < 0 || (ax != bad && ax != bad2)) return 0;
  const char *hint = a->g->diag_hint; /* the batch fixed in a constant is not why */
  a->g->diag_hint = NULL;
  ir_error_node(a->g, node,
                "its input carries the batch on axis %d, %s, so %d micro-batches would not add up to the "
                "batch; compile with -m 1 (the batch in one micro-batch)",
                ax, what, a->g->microbatches);
  a->g->diag_hint = hint;
  return -1;
}

static ir_dtype compute_type(ir_dtype xt) { return xt == IR_DOUBLE ? IR_DOUBLE : IR_FLOAT; }

static int lower_dft(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  dft_p p;
  if (dft_params(g, node, &p) ||
      batch_along(a, node, nd.in[0], p.axis, p.rank - 1, "the axis of its transform or of (re, im)"))
    return -1;
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = compute_type(xt);
  int x = ad_cast(a, nd.in[0], t), r = p.rank;
  if (p.L > p.n) { /* cut to n */
    int64_t st = 0, en = p.n, ax = p.axis;
    int in[4] = {x, ad_c_i64(a, &st, 1), ad_c_i64(a, &en, 1), ad_c_i64(a, &ax, 1)};
    x = ad_op(a, IR_OP_Slice, in, 4);
  }
  /* the signal axis next to the (re, im) axis */
  int64_t perm[IR_MAX_RANK], inv[IR_MAX_RANK];
  int moved = p.axis != r - 2, k = 0;
  for (int d = 0; d < r - 1; d++)
    if (d != p.axis) perm[k++] = d;
  perm[k++] = p.axis;
  perm[k++] = r - 1;
  if (moved) x = ad_transpose(a, x, perm, r);
  ir_shape s = ad_shape(a, x);
  s.dims[r - 2] *= s.dims[r - 1];
  s.rank = r - 1;
  int y = dft_apply(a, ad_reshape(a, x, &s), &p, NULL, t);
  if (y < 0) return -1;
  if (moved) {
    for (int d = 0; d < r; d++) inv[perm[d]] = d;
    y = ad_transpose(a, y, inv, r);
  }
  y = ad_cast(a, y, xt);
  if (a->err) return -1;
  ir_take_output(g, y, nd.out[0]);
  return 0;
}

/* ---- STFT ----------------------------------------------------------------------------- */

typedef struct {
  int64_t B, L, c, step, N, F;
  dft_p d;
} stft_p;

static int stft_params(ir_graph *g, int node, stft_p *p) {
  const ir_value *x = sh_in(g, node, 0), *win = sh_in(g, node, 2), *fl = sh_in(g, node, 3);
  char b[64];
  memset(p, 0, sizeof *p);
  if (sh_check_dtype(g, node, x, SH_FLOATS & ~SH_FLOAT8, "input 'signal'")) return -1;
  if (x->shape.rank != 3 || (x->shape.dims[2] != 1 && x->shape.dims[2] != 2))
    SH_FAIL("input 'signal' of shape %s: [batch, length, 1 or 2] expected", sh_str(&x->shape, b, sizeof b));
  p->B = x->shape.dims[0], p->L = x->shape.dims[1], p->c = x->shape.dims[2];
  if (sh_check_dtype(g, node, sh_in(g, node, 1), SH_INTS, "input 'frame_step'") ||
      const_int(g, node, 1, "frame_step", &p->step))
    return -1;
  if (p->step < 1) SH_FAIL("frame_step is %lld, not >= 1", (long long)p->step);
  p->N = -1;
  if (win) {
    if (sh_same_dtype(g, node, x, win, "signal", "window")) return -1;
    if (win->shape.rank != 1) SH_FAIL("input 'window' of shape %s: 1-D expected", sh_str(&win->shape, b, sizeof b));
    p->N = win->shape.dims[0];
  }
  if (fl) {
    int64_t n;
    if (sh_check_dtype(g, node, fl, SH_INTS, "input 'frame_length'") || const_int(g, node, 3, "frame_length", &n))
      return -1;
    if (p->N >= 0 && n != p->N)
      SH_FAIL("frame_length %lld differs from the window's length %lld", (long long)n, (long long)p->N);
    p->N = n;
  }
  if (p->N < 0) SH_FAIL("neither 'window' nor 'frame_length' is given: the frame length is unknown");
  if (p->N < 1 || p->N > p->L)
    SH_FAIL("frame length %lld: between 1 and the signal length %lld expected", (long long)p->N, (long long)p->L);
  p->F = (p->L - p->N) / p->step + 1;
  int onesided = ir_attr_int(SH_NODE, "onesided", 1) != 0;
  p->d.axis = 2, p->d.rank = 4;
  p->d.L = p->d.n = p->d.m = p->N;
  p->d.c = p->c;
  p->d.K = onesided ? p->N / 2 + 1 : p->N;
  return dft_size_ok(g, node, &p->d);
}

int sh_STFT(ir_graph *g, int node) {
  const ir_value *x = sh_in(g, node, 0);
  stft_p p;
  if (stft_params(g, node, &p)) return -1;
  ir_shape s = {0};
  s.rank = 4;
  s.dims[0] = p.B, s.dims[1] = p.F, s.dims[2] = p.d.K, s.dims[3] = 2;
  double frames = (double)p.B * (double)p.F;
  SH_NODE->flops = frames * (double)(p.N * p.c) * (1 + 2.0 * (double)(2 * p.d.K));
  return sh_set_out(g, node, 0, x->dtype, &s);
}

static int lower_stft(ad_ctx *a, int node) {
  ir_graph *g = a->g;
  ir_node nd = g->nodes[node];
  stft_p p;
  if (stft_params(g, node, &p) || batch_along(a, node, nd.in[0], 1, 2, "not axis 0 of [batch, length, 1 or 2]"))
    return -1;
  ir_dtype xt = ad_dtype(a, nd.in[0]), t = compute_type(xt);
  int x = ad_cast(a, nd.in[0], t);
  /* frames: x[:, f * step + j, :] -> [B, F, N, c] */
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)(p.F * p.N));
  double *w = NULL;
  if (!idx) return ir_error_node(g, node, "out of memory"), -1;
  for (int64_t f = 0; f < p.F; f++)
    for (int64_t j = 0; j < p.N; j++) idx[f * p.N + j] = f * p.step + j;
  ir_shape is = {0};
  is.rank = 2, is.dims[0] = p.F, is.dims[1] = p.N;
  int in[2] = {x, ir_add_const(g, ir_sprintf(g->arena, "%s/%s/frames", a->base, a->tag), IR_INT64, &is, idx,
                               sizeof(int64_t) * (size_t)(p.F * p.N))};
  free(idx);
  int gn = ad_begin(a, IR_OP_Gather, in, 2, 1, NULL);
  ad_attr_i(a, gn, "axis", 1);
  int fr = ad_end(a, gn);
  int win = sh_in(g, node, 2) ? nd.in[2] : -1;
  if (win >= 0 && g->values[win].kind == IR_VAL_CONST) { /* folded into the matrix */
    w = malloc(sizeof(double) * (size_t)p.N);
    if (!w) return ir_error_node(g, node, "out of memory"), -1;
    for (int64_t j = 0; j < p.N; j++)
      if (ir_const_f64(&g->values[win], j, &w[j])) return free(w), ir_error_node(g, node, "cannot read the window"), -1;
  } else if (win >= 0) {
    ir_shape ws = {0};
    ws.rank = 2, ws.dims[0] = p.N, ws.dims[1] = 1;
    fr = ad_bin(a, IR_OP_Mul, fr, ad_reshape(a, ad_cast(a, win, t), &ws));
  }
  ir_shape s = {0};
  s.rank = 3, s.dims[0] = p.B, s.dims[1] = p.F, s.dims[2] = p.N * p.c;
  int y = dft_apply(a, ad_reshape(a, fr, &s), &p.d, w, t);
  free(w);
  if (y < 0) return -1;
  y = ad_cast(a, y, xt);
  if (a->err) return -1;
  ir_take_output(g, y, nd.out[0]);
  return 0;
}

/* ---- the pass --------------------------------------------------------------------------- */

static int lower(ad_ctx *a, int node) {
  switch (a->g->nodes[node].op) {
    case IR_OP_DFT: return lower_dft(a, node);
    case IR_OP_STFT: return lower_stft(a, node);
    case IR_OP_MelWeightMatrix: return lower_mel(a, node);
    default: return lower_window(a, node);
  }
}

static int is_signal(const ir_node *n) {
  return n->op == IR_OP_DFT || n->op == IR_OP_STFT || n->op == IR_OP_HannWindow || n->op == IR_OP_HammingWindow ||
         n->op == IR_OP_BlackmanWindow || n->op == IR_OP_MelWeightMatrix;
}

int pass_lower_signal(ir_graph *g, const pass_opts *o) {
  (void)o;
  return ad_lower_nodes(g, "signal", is_signal, lower) < 0 ? -1 : 0;
}
