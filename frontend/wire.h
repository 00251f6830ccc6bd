/* frontend/wire.h - wire-level checks and raw_data stripping (see wire.c). */
#ifndef PIPECC_FRONTEND_WIRE_H
#define PIPECC_FRONTEND_WIRE_H
#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"

typedef struct {
  size_t offset, len; /* raw_data bytes in the original buffer */
  int present;
} wire_span;

typedef struct {
  uint8_t *stripped; /* the model without initializer raw_data (malloc'd) */
  size_t stripped_len;
  wire_span *raw; /* one per graph initializer, in order */
  size_t n_raw;
} wire_result;

/* 0 on success; -1 with *err set to a short reason. */
int wire_prepare(const uint8_t *p, size_t n, wire_result *out, const char **err);
void wire_result_free(wire_result *w);

/* Decode the stripped model with protobuf-c and give every absent optional string field
 * (NULL in protobuf-c) the value "", so readers never meet a NULL name, op_type or
 * domain. Free the result with wire_free_model (never with protobuf-c's own free).
 * NULL if protobuf-c rejects the bytes. */
Onnx__ModelProto *wire_unpack_model(const wire_result *w);
void wire_free_model(Onnx__ModelProto *m);

#endif
