/* passes/shape/shape_vision.c - shape rules of RoiAlign and DeformConv. */
#include <inttypes.h>
#include <string.h>

#include "passes/shape/shape_impl.h"

/* RoiAlign-10 / -16 / -22: X [N, C, H, W], rois [num_rois, 4] (x1, y1, x2, y2, same type
 * as X), batch_indices [num_rois] (int64; int32 taken too) -> Y [num_rois, C,
 * output_height, output_width]. Attributes: mode (avg, max), output_height, output_width
 * (>= 1), sampling_ratio (>= 0; 0: ceil(roi size / output size) per RoI), spatial_scale,
 * and from opset 16 coordinate_transformation_mode (half_pixel, the default, or
 * output_half_pixel, opset 10's behaviour). */
int sh_RoiAlign(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0), *rois = sh_in(g, node, 1), *bi = sh_in(g, node, 2);
  char b[256], q[96];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || sh_same_dtype(g, node, x, rois, "input X", "input 'rois'") ||
      sh_check_dtype(g, node, bi, SH_INDEX, "input 'batch_indices'"))
    return -1;
  if (x->shape.rank != 4) SH_FAIL("input X must be [N, C, H, W], it has shape %s", sh_str(&x->shape, b, sizeof b));
  if (rois->shape.rank != 2 || rois->shape.dims[1] != 4)
    SH_FAIL("input 'rois' must be [num_rois, 4], it has shape %s", sh_str(&rois->shape, b, sizeof b));
  int64_t R = rois->shape.dims[0];
  if (bi->shape.rank != 1 || bi->shape.dims[0] != R)
    SH_FAIL("input 'batch_indices' must be [%" PRId64 "] (one per RoI), it has shape %s", R,
            sh_str(&bi->shape, b, sizeof b));
  const char *mode = ir_attr_str(n, "mode", "avg");
  if (strcmp(mode, "avg") && strcmp(mode, "max"))
    SH_FAIL("attribute 'mode' is '%s' (expected avg or max)", ir_printable(mode, 40, q, sizeof q));
  if (n->opset >= 16) {
    const char *ctm = ir_attr_str(n, "coordinate_transformation_mode", "half_pixel");
    if (strcmp(ctm, "half_pixel") && strcmp(ctm, "output_half_pixel"))
      SH_FAIL("attribute 'coordinate_transformation_mode' is '%s' (expected half_pixel or output_half_pixel)",
              ir_printable(ctm, 40, q, sizeof q));
  }
  int64_t oh = ir_attr_int(n, "output_height", 1), ow = ir_attr_int(n, "output_width", 1);
  int64_t sr = ir_attr_int(n, "sampling_ratio", 0);
  if (oh < 1 || ow < 1)
    SH_FAIL("attributes 'output_height' %" PRId64 " and 'output_width' %" PRId64 " must be >= 1", oh, ow);
  if (sr < 0) SH_FAIL("attribute 'sampling_ratio' is %" PRId64 " (must be >= 0)", sr);
  ir_shape out = {0};
  out.rank = 4;
  out.dims[0] = R, out.dims[1] = x->shape.dims[1], out.dims[2] = oh, out.dims[3] = ow;
  /* per output: the samples of its bin (sampling_ratio squared; adaptive: counted as 4),
   * four taps each */
  double samples = sr > 0 ? (double)sr * (double)sr : 4.0;
  n->flops = sh_numel(&out) * samples * 8.0;
  return sh_set_out(g, node, 0, x->dtype, &out);
}

/* DeformConv-19 (2-D only): X [N, C, H, W], W [oC, C/group, kH, kW], offset [N,
 * offset_group * 2 * kH * kW, oH, oW] ((dh, dw) per kernel tap), B [oC] (optional), mask
 * [N, offset_group * kH * kW, oH, oW] (optional) -> Y [N, oC, oH, oW]; dilations, group,
 * kernel_shape (optional, must match W), offset_group, pads, strides as Conv's. */
int sh_DeformConv(ir_graph *g, int node) {
  ir_node *n = SH_NODE;
  ir_value *x = sh_in(g, node, 0), *wt = sh_in(g, node, 1), *off = sh_in(g, node, 2), *mask = sh_in(g, node, 4);
  char b[256], c[256];
  if (sh_check_dtype(g, node, x, SH_FLOATS, "input X") || sh_same_dtype(g, node, x, wt, "input X", "input W") ||
      sh_same_dtype(g, node, x, off, "input X", "input 'offset'") ||
      (mask && sh_same_dtype(g, node, x, mask, "input X", "input 'mask'")))
    return -1;
  if (x->shape.rank != 4)
    SH_FAIL("only 2-D DeformConv is supported: input X must be [N, C, H, W], it has shape %s",
            sh_str(&x->shape, b, sizeof b));
  ir_shape out;
  if (sh_conv_shape(g, node, x, wt, 3, &out)) return -1;
  int64_t C = x->shape.dims[1], og = ir_attr_int(n, "offset_group", 1);
  if (og < 1 || C % og)
    SH_FAIL("attribute 'offset_group' is %" PRId64 " (must be >= 1 and divide the %" PRId64 " input channels)", og, C);
  int64_t kk = wt->shape.dims[2] * wt->shape.dims[3];
  ir_shape want = out;
  want.dims[1] = og * 2 * kk;
  if (!ir_shape_same_dims(&off->shape, &want))
    SH_FAIL("input 'offset' has shape %s, expected %s ([N, offset_group * 2 * kH * kW, oH, oW])",
            sh_str(&off->shape, b, sizeof b), sh_str(&want, c, sizeof c));
  want.dims[1] = og * kk;
  if (mask && !ir_shape_same_dims(&mask->shape, &want))
    SH_FAIL("input 'mask' has shape %s, expected %s ([N, offset_group * kH * kW, oH, oW])",
            sh_str(&mask->shape, b, sizeof b), sh_str(&want, c, sizeof c));
  /* the GEMM's FLOPs (sh_conv_shape) plus the sampling: four taps per column element */
  n->flops += (double)out.dims[0] * (double)C * (double)kk * (double)out.dims[2] * (double)out.dims[3] * 10.0;
  return sh_set_out(g, node, 0, x->dtype, &out);
}
