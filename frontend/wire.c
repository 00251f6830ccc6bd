/* frontend/wire.c - a pre-pass over the protobuf wire bytes of a ModelProto.
 *
 * 1. Checks the whole message tree against the schema's descriptors before protobuf-c
 *    sees it: every key, varint and length in bounds, wire types that match the field's
 *    type, no groups, nesting at most WIRE_MAX_DEPTH deep (protobuf-c recurses, so a
 *    hostile file could otherwise exhaust the stack).
 * 2. Builds a copy of the message without the raw_data of graph initializers and
 *    records where each of those raw_data blobs sits in the original bytes, so weights
 *    stay in the mmapped file and are never copied.
 * 3. After protobuf-c has decoded that copy, replaces every absent optional string
 *    (a NULL pointer in protobuf-c) by a shared "" that the matching free skips. */
#include "frontend/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/arena.h"

#define WIRE_MAX_DEPTH 64

typedef struct {
  const uint8_t *p, *end;
} rd;

static int rd_varint(rd *r, uint64_t *v) {
  uint64_t x = 0;
  for (int s = 0; s < 70; s += 7) {
    if (r->p >= r->end) return -1;
    uint8_t b = *r->p++;
    if (s == 63 && b > 1) return -1;
    x |= (uint64_t)(b & 0x7f) << s;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* One field: number, wire type, and for length-delimited fields the payload. */
typedef struct {
  uint32_t num;
  int wt;
  const uint8_t *start; /* first byte of the key */
  const uint8_t *data;  /* payload (wt 2) */
  size_t len;
} field;

static int rd_field(rd *r, field *f, const char **err) {
  uint64_t key, v;
  f->start = r->p;
  if (rd_varint(r, &key)) return *err = "truncated or malformed field key", -1;
  f->num = (uint32_t)(key >> 3);
  f->wt = (int)(key & 7);
  if ((key >> 3) == 0 || (key >> 3) > 536870911u) return *err = "invalid field number", -1;
  switch (f->wt) {
    case 0:
      if (rd_varint(r, &v)) return *err = "truncated varint", -1;
      break;
    case 1:
      if (r->end - r->p < 8) return *err = "truncated 64-bit field", -1;
      r->p += 8;
      break;
    case 5:
      if (r->end - r->p < 4) return *err = "truncated 32-bit field", -1;
      r->p += 4;
      break;
    case 2:
      if (rd_varint(r, &v)) return *err = "truncated length", -1;
      if (v > (uint64_t)(r->end - r->p)) return *err = "length runs past the end of the data (truncated file?)", -1;
      f->data = r->p;
      f->len = (size_t)v;
      r->p += v;
      break;
    default: return *err = "unsupported wire type (groups or garbage)", -1;
  }
  return 0;
}

static int expected_wt(const ProtobufCFieldDescriptor *fd, int wt) {
  int packable = fd->label == PROTOBUF_C_LABEL_REPEATED;
  switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_BOOL:
    case PROTOBUF_C_TYPE_ENUM: return wt == 0 || (packable && wt == 2);
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: return wt == 1 || (packable && wt == 2);
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FLOAT: return wt == 5 || (packable && wt == 2);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_MESSAGE: return wt == 2;
  }
  return 0;
}

static int check(const uint8_t *p, size_t n, const ProtobufCMessageDescriptor *d, int depth, const char **err) {
  if (depth > WIRE_MAX_DEPTH) return *err = "messages nested too deeply", -1;
  rd r = {p, p + n};
  field f;
  while (r.p < r.end) {
    if (rd_field(&r, &f, err)) return -1;
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, f.num);
    if (!fd) continue; /* unknown fields are skipped, as protobuf does */
    if (!expected_wt(fd, f.wt)) return *err = "wrong wire type for a field", -1;
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE &&
        check(f.data, f.len, (const ProtobufCMessageDescriptor *)fd->descriptor, depth + 1, err))
      return -1;
  }
  return 0;
}

/* growable byte buffer */
typedef struct {
  uint8_t *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->n + n) c *= 2;
    b->p = ir_xrealloc(b->p, c);
    b->cap = c;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}
static void put_varint(buf *b, uint64_t v) {
  uint8_t t[10];
  int k = 0;
  do {
    t[k] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) t[k] |= 0x80;
    k++;
  } while (v);
  put(b, t, (size_t)k);
}
static void put_ld(buf *b, uint32_t num, const uint8_t *data, size_t len) {
  put_varint(b, ((uint64_t)num << 3) | 2);
  put_varint(b, len);
  put(b, data, len);
}

enum { MODEL_GRAPH = 7, GRAPH_INITIALIZER = 5, TENSOR_RAW_DATA = 9 };

int wire_prepare(const uint8_t *p, size_t n, wire_result *out, const char **err) {
  memset(out, 0, sizeof *out);
  *err = NULL;
  if (check(p, n, &onnx__model_proto__descriptor, 0, err)) return -1;
  /* Strip initializer raw_data. The checks above passed, so reads cannot fail. */
  buf model = {0}, graph = {0}, tensor = {0};
  size_t cap_raw = 0, graphs = 0;
  rd r = {p, p + n};
  field f;
  while (r.p < r.end) {
    rd_field(&r, &f, err);
    if (f.num != MODEL_GRAPH || f.wt != 2) {
      put(&model, f.start, (size_t)(r.p - f.start));
      continue;
    }
    if (++graphs > 1) {
      free(model.p);
      free(graph.p);
      free(tensor.p);
      free(out->raw);
      *err = "more than one graph field in the model";
      return -1;
    }
    graph.n = 0;
    rd g = {f.data, f.data + f.len};
    field gf;
    while (g.p < g.end) {
      rd_field(&g, &gf, err);
      if (gf.num != GRAPH_INITIALIZER || gf.wt != 2) {
        put(&graph, gf.start, (size_t)(g.p - gf.start));
        continue;
      }
      tensor.n = 0;
      wire_span raw = {0, 0, 0};
      rd t = {gf.data, gf.data + gf.len};
      field tf;
      while (t.p < t.end) {
        rd_field(&t, &tf, err);
        if (tf.num == TENSOR_RAW_DATA && tf.wt == 2) {
          raw.offset = (size_t)(tf.data - p);
          raw.len = tf.len;
          raw.present = 1;
        } else {
          put(&tensor, tf.start, (size_t)(t.p - tf.start));
        }
      }
      if (out->n_raw == cap_raw) {
        cap_raw = cap_raw ? cap_raw * 2 : 64;
        out->raw = ir_xrealloc(out->raw, cap_raw * sizeof(wire_span));
      }
      out->raw[out->n_raw++] = raw;
      put_ld(&graph, GRAPH_INITIALIZER, tensor.p ? tensor.p : (const uint8_t *)"", tensor.n);
    }
    put_ld(&model, MODEL_GRAPH, graph.p ? graph.p : (const uint8_t *)"", graph.n);
  }
  free(graph.p);
  free(tensor.p);
  out->stripped = model.p;
  out->stripped_len = model.n;
  return 0;
}

void wire_result_free(wire_result *w) {
  free(w->stripped);
  free(w->raw);
  memset(w, 0, sizeof *w);
}

/* ---------- decoding with no NULL strings ---------- */

static char empty_string[1];

static void *pb_alloc(void *data, size_t n) {
  (void)data;
  return malloc(n);
}
static void pb_free(void *data, void *p) {
  (void)data;
  if (p != (void *)empty_string) free(p);
}
static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

/* Depth is bounded: the wire check allows at most WIRE_MAX_DEPTH levels. */
static void fill_strings(ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    uint8_t *member = (uint8_t *)m + f->offset;
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
        *(const uint32_t *)((const uint8_t *)m + f->quantifier_offset) != f->id)
      continue;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) { /* repeated strings are never NULL */
      if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
      size_t n = *(const size_t *)((const uint8_t *)m + f->quantifier_offset);
      ProtobufCMessage **a = *(ProtobufCMessage ***)member;
      for (size_t k = 0; k < n; k++)
        if (a[k]) fill_strings(a[k]);
    } else if (f->type == PROTOBUF_C_TYPE_STRING) {
      char **sp = (char **)member;
      if (!*sp) *sp = empty_string;
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
      ProtobufCMessage *sub = *(ProtobufCMessage **)member;
      if (sub) fill_strings(sub);
    }
  }
}

Onnx__ModelProto *wire_unpack_model(const wire_result *w) {
  Onnx__ModelProto *m = onnx__model_proto__unpack(&pb_allocator, w->stripped_len, w->stripped);
  if (m) fill_strings(&m->base);
  return m;
}

void wire_free_model(Onnx__ModelProto *m) {
  if (m) onnx__model_proto__free_unpacked(m, &pb_allocator);
}
