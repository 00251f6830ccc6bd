/* ir/print.h - human-readable and JSON dumps of a graph. */
#ifndef PIPECC_IR_PRINT_H
#define PIPECC_IR_PRINT_H
#include <stdio.h>

#include "ir/ir.h"

/* One line per node: index, op, ONNX name, input shapes -> output shapes, FLOPs. */
void ir_print_text(FILE *f, const ir_graph *g);
/* {"model", "producer", "opset", "inputs", "outputs", "values": {NAME: {"dtype", "shape", "kind"}},
 *  "nodes": [{"name", "op", "inputs", "outputs", "flops"}]} */
void ir_print_json(FILE *f, const ir_graph *g);
/* A JSON string literal (quoted, escaped). */
void ir_json_str(FILE *f, const char *s);
#endif
