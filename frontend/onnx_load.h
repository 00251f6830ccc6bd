/* frontend/onnx_load.h - ONNX model file -> ir_graph.
 *
 * Reads ModelProto files of IR versions 3 to onnx_max_ir_version() with default-domain
 * opsets 1 to onnx_max_opset() (nodes of opsets 1 to 6 are rewritten to their opset 7
 * form: frontend/onnx_legacy.h; the forms of opsets 22 and later are read as their
 * opset 21 form where they only widen the types, else checked: frontend/onnx_forms.c).
 * The file is mmapped; initializer raw_data is never copied: the wire bytes are
 * scanned first (with a nesting limit and wire-type checks against the schema), the
 * raw_data of each initializer is cut out of the buffer handed to protobuf-c and the
 * resulting constant points straight into the mapping. External data is mmapped from
 * files in the model's folder (a location that is absolute, escapes the folder, is
 * missing, or whose offset/length runs past the end is an error).
 *
 * Constant nodes become constant values; model-local functions are inlined; every
 * opset_import entry is read. Unsupported ops are all reported in one message.
 * On any model error the messages are printed (ir/diag.h) and NULL is returned. */
#ifndef PIPECC_FRONTEND_ONNX_LOAD_H
#define PIPECC_FRONTEND_ONNX_LOAD_H
#include <stddef.h>

#include "ir/ir.h"

/* The newest default-domain opset and IR version read (frontend/onnx_forms.h). */
int onnx_max_opset(void);
int onnx_max_ir_version(void);
/* A node of opset 22 or later (its op, op_type, opset and attributes set): 0 when pipecc
 * reads its form, else -1 after one error line naming the node and what differs. */
int onnx_form_check(ir_graph *g, int node);

/* Load a model file. Returns NULL after printing errors (the caller exits 2). */
ir_graph *onnx_load_file(const char *path);
/* Load from memory (fuzzing, tests). The buffer must outlive the graph.
 * External data is resolved relative to dir (NULL: refused). */
ir_graph *onnx_load_buffer(const void *buf, size_t len, const char *path, const char *dir);

#endif
