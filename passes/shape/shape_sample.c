/* passes/shape/shape_sample.c - shape rules of GridSample and Det. */
#include <string.h>

#include "passes/shape/shape_impl.h"

/* GridSample-20 (and 22; GridSample-16: 4-D only, modes bilinear / nearest / bicubic):
 * X [N, C, d1..dr], grid [N, D1..Dr, r] -> Y [N, C, D1..Dr] of X's dtype. FLOPs per
 * output element: 1 (nearest), 2 per corner (linear: 2^r), 2 per tap (cubic: 4^r). */
int sh_GridSample(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0), *gr = sh_in(g, node, 1);
  if (!gr) SH_FAIL("input 'grid' is required");
  if (sh_check_dtype(g, node, x, SH_NUM, "input X")) return -1;
  if (sh_check_dtype(g, node, gr, SH_BIT(IR_FLOAT) | SH_BIT(IR_DOUBLE) | SH_BIT(IR_FLOAT16), "input 'grid'")) return -1;
  int nd = n->opset >= 20;
  int xr = x->shape.rank, r = xr - 2;
  if (nd ? xr < 3 : xr != 4) {
    if (nd) SH_FAIL("input X has rank %d, expected [N, C, d1, ...] of rank 3 or more", xr);
    SH_FAIL("input X has rank %d, expected 4 ([N, C, H, W]; N-D inputs need opset 20)", xr);
  }
  char b1[64], b2[64];
  if (gr->shape.rank != xr || gr->shape.dims[xr - 1] != r || gr->shape.dims[0] != x->shape.dims[0])
    SH_FAIL("input 'grid' is %s, expected [%lld, %d output dims, %d] for X %s", sh_str(&gr->shape, b1, sizeof b1),
            (long long)x->shape.dims[0], r, r, sh_str(&x->shape, b2, sizeof b2));
  const char *mode = ir_attr_str(n, "mode", nd ? "linear" : "bilinear");
  double per;
  if (!strcmp(mode, "nearest")) per = 1;
  else if (!strcmp(mode, nd ? "linear" : "bilinear")) per = 2.0 * (double)(1 << r);
  else if (!strcmp(mode, nd ? "cubic" : "bicubic")) per = 2.0 * (double)(1 << 2 * r);
  else {
    char b[96];
    SH_FAIL("attribute 'mode' is '%s', expected %s", ir_printable(mode, 40, b, sizeof b),
            nd ? "linear, nearest or cubic" : "bilinear, nearest or bicubic");
  }
  const char *pad = ir_attr_str(n, "padding_mode", "zeros");
  if (strcmp(pad, "zeros") && strcmp(pad, "border") && strcmp(pad, "reflection")) {
    char b[96];
    SH_FAIL("attribute 'padding_mode' is '%s', expected zeros, border or reflection",
            ir_printable(pad, 40, b, sizeof b));
  }
  ir_shape out = x->shape;
  for (int d = 0; d < r; d++) out.dims[2 + d] = gr->shape.dims[1 + d];
  n->flops = per * sh_numel(&out);
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* Det-11 (22: the same, more types): X [*, M, M] -> Y [*]. FLOPs: 2/3 M^3 per matrix (LU). */
int sh_Det(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0);
  if (sh_check_dtype(g, node, x, SH_BIT(IR_FLOAT) | SH_BIT(IR_DOUBLE) | SH_BIT(IR_FLOAT16) | SH_BIT(IR_BFLOAT16),
                     "input X"))
    return -1;
  int r = x->shape.rank;
  char b[64];
  if (r < 2 || x->shape.dims[r - 1] != x->shape.dims[r - 2])
    SH_FAIL("input X is %s, expected [*, M, M] (square matrices)", sh_str(&x->shape, b, sizeof b));
  ir_shape out = x->shape;
  out.rank = r - 2;
  double m = (double)x->shape.dims[r - 1];
  n->flops = sh_numel(&out) * (2.0 / 3.0 * m * m * m + m);
  return sh_set_out(g, node, 0, x->dtype, &out);
}
