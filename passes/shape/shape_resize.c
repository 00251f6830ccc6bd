/* passes/shape/shape_resize.c - ops that grow or shrink spatial extents: Pad, Resize,
 * Upsample. FLOPs: one per output element (Resize linear/cubic: a few more). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "passes/batch.h"
#include "passes/shape/shape_impl.h"

#define SH_MAX_LIST 64

/* Pad-21 (pads input since 11, optional axes input since 18; attribute 'pads' in
 * 2-10): out[i] = d[i] + pads_begin[i] + pads_end[i] (pads may be negative). */
int sh_Pad(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  int r = x->shape.rank;
  int64_t pads[2 * SH_MAX_LIST], axes_raw[SH_MAX_LIST];
  int np, na = -1, ax[SH_MAX_LIST];
  char b[256];
  if (n->opset >= 11) {
    if (n->n_in < 2 || n->in[1] < 0) SH_FAIL("input 'pads' is required");
    if (sh_const_ints(g, node, 1, "pads", pads, 2 * SH_MAX_LIST, &np)) return -1;
    ir_value *cv = sh_in(g, node, 2);
    if (cv) {
      if (ir_shape_numel(&cv->shape) != 1)
        SH_FAIL("input 'constant_value' must be a scalar, it has shape %s", sh_str(&cv->shape, b, sizeof b));
      if (sh_same_dtype(g, node, x, cv, "input 'data'", "input 'constant_value'")) return -1;
    }
    if (n->opset >= 18 && n->n_in > 3 && n->in[3] >= 0 && sh_const_ints(g, node, 3, "axes", axes_raw, SH_MAX_LIST, &na))
      return -1;
  } else {
    np = sh_attr_ints(g, node, "pads", pads, 2 * SH_MAX_LIST);
    if (np == -2) return -1;
    if (np < 0) SH_FAIL("attribute 'pads' is required");
  }
  if (na < 0) {
    na = r;
    for (int i = 0; i < r; i++) ax[i] = i;
  } else if (sh_axes(g, node, axes_raw, na, r, "axes", ax)) {
    return -1;
  }
  if (np != 2 * na) SH_FAIL("'pads' has %d values, expected %d (begin and end for %d axes)", np, 2 * na, na);
  const char *mode = ir_attr_str(n, "mode", "constant");
  if (strcmp(mode, "constant") && strcmp(mode, "reflect") && strcmp(mode, "edge") && strcmp(mode, "wrap"))
    SH_FAIL("attribute 'mode' is '%s' (expected constant, reflect, edge or wrap)", ir_printable(mode, 40, b, sizeof b));
  ir_shape out = x->shape;
  for (int i = 0; i < na; i++) {
    int64_t d = out.dims[ax[i]], t;
    if (sh_add(d, pads[i], &t) || sh_add(t, pads[i + na], &t)) SH_FAIL("padded dim %d overflows", ax[i]);
    if (t < 0)
      SH_FAIL("pads (%" PRId64 ", %" PRId64 ") make dim %d of size %" PRId64 " negative", pads[i], pads[i + na], ax[i],
              d);
    out.dims[ax[i]] = t;
  }
  n->flops = 0;
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* floor(d * scale) with range checks. */
static int scaled_dim(ir_graph *g, int node, int64_t d, double scale, int axis, int64_t *out) {
  if (!(scale > 0) || !isfinite(scale)) SH_FAIL("scale %g for axis %d must be positive", scale, axis);
  double o = floor((double)d * scale);
  if (o >= 9.2e18) SH_FAIL("the output dim %d overflows", axis);
  *out = (int64_t)o;
  return 0;
}

/* Resize-19 (10: scales input; 11/13: roi, scales, sizes inputs; 18: axes and
 * keep_aspect_ratio_policy): out = floor(d * scale), or the constant 'sizes'
 * (adjusted by the aspect-ratio policy). Shapes do not depend on the mode (nearest,
 * linear, cubic) nor on roi. */
int sh_Resize(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  int r = x->shape.rank;
  if (sh_check_dtype(g, node, x, SH_NUM, "input X")) return -1;
  int si = n->opset >= 11 ? 2 : 1, zi = n->opset >= 11 ? 3 : -1;
  ir_value *sc = sh_in(g, node, si), *sz = zi > 0 ? sh_in(g, node, zi) : NULL;
  int has_sc = sc && ir_shape_numel(&sc->shape) > 0, has_sz = sz && ir_shape_numel(&sz->shape) > 0;
  if (has_sc == has_sz) SH_FAIL("exactly one of 'scales' and 'sizes' must be given (and non-empty)");
  int64_t axes_raw[IR_MAX_RANK];
  int ax[IR_MAX_RANK], na = -1;
  if (n->opset >= 18) {
    na = sh_attr_ints(g, node, "axes", axes_raw, IR_MAX_RANK);
    if (na == -2) return -1;
  }
  if (na < 0) {
    na = r;
    for (int i = 0; i < r; i++) ax[i] = i;
  } else if (sh_axes(g, node, axes_raw, na, r, "axes", ax)) {
    return -1;
  }
  ir_shape out = x->shape;
  int cnt;
  if (has_sc) {
    double s[SH_MAX_LIST];
    if (sh_check_dtype(g, node, sc, SH_FLOATS, "input 'scales'")) return -1;
    if (sh_const_f64s(g, node, si, "scales", s, SH_MAX_LIST, &cnt)) return -1;
    if (cnt != na) SH_FAIL("input 'scales' has %d values, expected %d", cnt, na);
    for (int i = 0; i < na; i++)
      if (scaled_dim(g, node, x->shape.dims[ax[i]], s[i], ax[i], &out.dims[ax[i]])) return -1;
  } else {
    int64_t s[SH_MAX_LIST];
    if (sh_check_dtype(g, node, sz, SH_BIT(IR_INT64), "input 'sizes'")) return -1;
    if (sh_const_ints(g, node, zi, "sizes", s, SH_MAX_LIST, &cnt)) return -1;
    if (cnt != na) SH_FAIL("input 'sizes' has %d values, expected %d", cnt, na);
    for (int i = 0; i < na; i++)
      if (s[i] < 0) SH_FAIL("input 'sizes' has negative value %" PRId64, s[i]);
    const char *pol = n->opset >= 18 ? ir_attr_str(n, "keep_aspect_ratio_policy", "stretch") : "stretch";
    if (!strcmp(pol, "stretch") && pass_batch_sizes(g, node, s, ax, na)) { /* the whole batch in 'sizes' */
      ir_value *zv = sh_in(g, node, zi);
      char *name = ir_sprintf(g->arena, "%s.micro", zv->name ? zv->name : "sizes");
      ir_shape ss = zv->shape;
      n->in[zi] = ir_add_const(g, name, IR_INT64, &ss, s, sizeof(int64_t) * (size_t)na);
      x = sh_in(g, node, 0); /* the values moved */
    }
    int larger = !strcmp(pol, "not_smaller");
    if (strcmp(pol, "stretch") && strcmp(pol, "not_larger") && !larger) {
      char b[96];
      SH_FAIL("attribute 'keep_aspect_ratio_policy' is '%s'", ir_printable(pol, 40, b, sizeof b));
    }
    if (!strcmp(pol, "stretch")) {
      for (int i = 0; i < na; i++) out.dims[ax[i]] = s[i];
    } else {
      double scale = larger ? 0 : INFINITY;
      for (int i = 0; i < na; i++) {
        if (!x->shape.dims[ax[i]]) SH_FAIL("cannot keep the aspect ratio of an empty axis %d", ax[i]);
        double q = (double)s[i] / (double)x->shape.dims[ax[i]];
        scale = larger ? (q > scale ? q : scale) : (q < scale ? q : scale);
      }
      for (int i = 0; i < na; i++) {
        /* rounded half up, as the ONNX reference (int(x + 0.5)) and shape inference */
        double o = floor(scale * (double)x->shape.dims[ax[i]] + 0.5);
        if (o >= 9.2e18) SH_FAIL("the output dim %d overflows", ax[i]);
        out.dims[ax[i]] = (int64_t)o;
      }
    }
  }
  const char *mode = ir_attr_str(n, "mode", "nearest");
  double per = !strcmp(mode, "nearest") ? 1 : !strcmp(mode, "cubic") ? 8 : 4;
  n->flops = per * sh_numel(&out);
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Upsample-9 (scales input; attribute 'scales' in Upsample-7): out = floor(d * scale). */
int sh_Upsample(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  int r = x->shape.rank, cnt;
  double s[SH_MAX_LIST];
  if (n->opset >= 9) {
    if (n->n_in < 2 || n->in[1] < 0) SH_FAIL("input 'scales' is required");
    if (sh_const_f64s(g, node, 1, "scales", s, SH_MAX_LIST, &cnt)) return -1;
  } else {
    const ir_attr *a = ir_attr_find(n, "scales");
    if (!a || a->type != IR_ATTR_FLOATS) SH_FAIL("attribute 'scales' is required");
    cnt = a->n < SH_MAX_LIST ? a->n : SH_MAX_LIST;
    for (int i = 0; i < cnt; i++) s[i] = a->floats[i];
  }
  if (cnt != r) SH_FAIL("'scales' has %d values, the input has rank %d", cnt, r);
  ir_shape out = x->shape;
  for (int i = 0; i < r; i++)
    if (scaled_dim(g, node, x->shape.dims[i], s[i], i, &out.dims[i])) return -1;
  n->flops = sh_numel(&out);
  return sh_set_out(g, node, 0, x->dtype, &out);
}
