/* pipert.h - the ABI between the stage code pipecc generates and libpipert.
 *
 * A pipecc build directory holds, for a g-stage plan:
 *   stage_K.c      one per stage; defines `const pipert_stage_desc pipecc_stage_K`
 *   weights_K.bin  the stage's weights (raw bytes, layout private to stage_K.c)
 *   pipeline_main.c  defines one `pipert_pipeline` and
 *                    `int main(int c, char **v) { return pipert_main(c, v, &P); }`
 * linked with libpipert into DIR/pipeline.
 *
 * Shapes are static. Every tensor descriptor below gives the shape of ONE
 * MICRO-BATCH: dims[batch_dim] (batch_dim is 0) is the micro-batch size b.
 * A graph input of B samples is split into T = B / b micro-batches along dim 0
 * (B must be a multiple of b), which run in rounds of M (pipert_pipeline.microbatches,
 * or --microbatches); each round is a fill and a drain of the pipeline, so the
 * measured bubble is comparable with the plan's predicted one. Graph outputs are
 * reassembled along dim 0 in micro-batch order. Every tensor crossing a stage
 * boundary or the graph boundary must have the batch dim as dim 0 (rank >= 1), with
 * one exception at the graph boundary of an inference pipeline: a scalar (rank 0)
 * graph input is the same for every micro-batch (given as a scalar, repeated by the
 * runtime), and a scalar graph output is one value per run (T must be 1).
 *
 * Buffers handed to forward() are 64-byte aligned except graph-input slices,
 * which are aligned to (micro-batch offset) only: stage code must not assume
 * more than the element alignment for inputs that come straight from a graph input.
 *
 * Threading contract for stage code: init/forward/fini of one state are called
 * from a single thread at a time, but replicas of a stage run forward() on
 * different states concurrently, so stage code keeps its mutable data in *state
 * (never in mutable globals). Weights are mapped read-only and shared by replicas.
 */
#ifndef PIPERT_H
#define PIPERT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PIPERT_ABI_VERSION 6
#define PIPERT_MAX_RANK 8

/* Element types: ONNX TensorProto.DataType codes. */
enum pipert_dtype {
  PIPERT_FLOAT = 1,
  PIPERT_UINT8 = 2,
  PIPERT_INT8 = 3,
  PIPERT_UINT16 = 4,
  PIPERT_INT16 = 5,
  PIPERT_INT32 = 6,
  PIPERT_INT64 = 7,
  PIPERT_BOOL = 9,
  PIPERT_FLOAT16 = 10,
  PIPERT_DOUBLE = 11,
  PIPERT_UINT32 = 12,
  PIPERT_UINT64 = 13,
  PIPERT_BFLOAT16 = 16,
  PIPERT_FLOAT8E4M3FN = 17,
  PIPERT_FLOAT8E4M3FNUZ = 18,
  PIPERT_FLOAT8E5M2 = 19,
  PIPERT_FLOAT8E5M2FNUZ = 20,
  PIPERT_UINT4 = 21,
  PIPERT_INT4 = 22, /* one value per byte */
  /* one value per byte: the floats as bit patterns, int2 sign-extended (int8_t) */
  PIPERT_FLOAT4E2M1 = 23,
  PIPERT_FLOAT8E8M0 = 24,
  PIPERT_UINT2 = 25,
  PIPERT_INT2 = 26,
  PIPERT_FLOAT6E2M3 = 27,
  PIPERT_FLOAT6E3M2 = 28
};

/* float16, bfloat16 and the float8 types are held as bit patterns (uint16_t, uint8_t).
 * pipecc computes with them in float (passes/opt/widen.c): these are the only conversions.
 * Narrowing rounds once, from a double, to nearest (ties to even), whether the source is
 * a float, a double or an integer; widening is exact.
 *
 * pipert_round_bits: the magnitude of finite d in a format with M mantissa bits and
 * exponent bias `bias`, rounded: (biased exponent << M) | mantissa, subnormals below
 * exponent 1, the exponent unbounded above (an infinite d gives a value past any
 * format's largest): the caller decides what is too large. */
#ifdef __CUDACC__
#define PIPERT_HD __host__ __device__
#else
#define PIPERT_HD
#endif
static inline PIPERT_HD uint32_t pipert_round_bits(double d, int M, int bias) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  int e = (int)((u >> 52) & 0x7ff), ne = e - 1023 + bias, shift = 52 - M;
  uint64_t m = u & 0xfffffffffffffull, base = (uint64_t)(ne > 0 ? ne : 0) << M;
  if (ne <= 0) { /* a subnormal of the narrow format, or zero */
    if (e == 0 || 53 - M - ne > 60) return 0;
    shift = 53 - M - ne;
    m |= 1ull << 52;
  }
  uint64_t r = (m >> shift) + base, rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
  if (rem > half || (rem == half && (r & 1))) r++; /* a carry into the exponent is right */
  return (uint32_t)r;
}
static inline PIPERT_HD int pipert_isnan_bits(double d) { /* by its bits: fast-math may fold d != d */
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return ((u >> 52) & 0x7ff) == 0x7ff && (u << 12) != 0;
}

/* float16 (E, M = 5, 10) and bfloat16 (8, 7), IEEE-style: too large gives infinity, NaN
 * stays NaN (quiet, sign and top payload bits kept). */
static inline PIPERT_HD uint16_t pipert_narrow(double d, int E, int M) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  uint32_t sign = (uint32_t)(u >> 63) << (E + M), inf = ((1u << E) - 1u) << M;
  if (pipert_isnan_bits(d)) return (uint16_t)(sign | inf | (1u << (M - 1)) | (uint32_t)((u << 12) >> (64 - M)));
  uint32_t r = pipert_round_bits(d, M, (1 << (E - 1)) - 1);
  return (uint16_t)(sign | (r < inf ? r : inf));
}

static inline PIPERT_HD uint16_t pipert_f_to_f16(double d) { return pipert_narrow(d, 5, 10); }
static inline PIPERT_HD uint16_t pipert_f_to_bf16(double d) { return pipert_narrow(d, 8, 7); }
static inline PIPERT_HD float pipert_bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline PIPERT_HD float pipert_f16_to_f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1f) u = s | 0x7f800000u | (m << 13);
  else if (e) u = s | ((e + 112u) << 23) | (m << 13);
  else { /* zero or subnormal: m * 2^-24, exact in float */ float f = (float)m * 5.9604644775390625e-8f;
    return s ? -f : f;
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The ONNX float8 types (Cast-19; onnx/docs/docs/technical/float8.md): E exponent bits,
 * 7 - E mantissa bits; uz: the FNUZ variants.
 *   E4M3FN    bias 7: no inf, S.1111.111 is NaN, max 448, has -0
 *   E4M3FNUZ  bias 8: no inf, no -0, 0x80 is the one NaN, max 240
 *   E5M2      bias 15, IEEE-style: S.11111.00 is inf, S.11111.xx NaN, max 57344
 *   E5M2FNUZ  bias 16: no inf, no -0, 0x80 is the one NaN, max 57344
 * A value whose rounding is past max (infinities included) gives, with saturate, max of
 * its sign, else inf (E5M2) or NaN; zero keeps its sign but for FNUZ (+0); NaN gives
 * S.1111111 (0x80 for FNUZ), as the ONNX reference does. (Without saturate that
 * reference, onnx.helper 1.16, gives 448 for E4M3FN's [480, 496) and NaN for E5M2's
 * [61440, 65536), where the rounded value is past max: NaN and inf here.) */
static inline PIPERT_HD uint8_t pipert_narrow8(double d, int E, int uz, int saturate) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  int ieee = E == 5 && !uz; /* only E5M2 has infinities */
  uint32_t sign = (uint32_t)(u >> 63) << 7, max = uz ? 0x7fu : ieee ? 0x7bu : 0x7eu, nan = uz ? 0x80u : sign | 0x7fu;
  if (pipert_isnan_bits(d)) return (uint8_t)nan;
  uint32_t r = pipert_round_bits(d, 7 - E, (1 << (E - 1)) - 1 + uz);
  if (r > max) return (uint8_t)(saturate ? sign | max : ieee ? sign | 0x7cu : nan);
  return (uint8_t)(r || !uz ? sign | r : 0u);
}
static inline PIPERT_HD float pipert_widen8(uint8_t b, int E, int uz) {
  int M = 7 - E, bias = (1 << (E - 1)) - 1 + uz, ieee = E == 5 && !uz;
  uint32_t sign = (uint32_t)(b & 0x80u) << 24, e = (b & 0x7fu) >> M, m = b & ((1u << M) - 1u), u;
  float f;
  if (uz ? b == 0x80u : ieee ? e == 31 && m : (b & 0x7fu) == 0x7fu) u = sign | 0x7fc00000u;
  else if (ieee && e == 31) u = sign | 0x7f800000u;
  else { /* (implicit bit + m) * 2^(max(e, 1) - bias - M): an integer below 16 times a power of two, exact */
    u = (uint32_t)(127 + (e ? (int)e : 1) - bias - M) << 23;
    memcpy(&f, &u, sizeof f);
    f *= (float)(m | (e ? 1u << M : 0u));
    return sign ? -f : f;
  }
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline PIPERT_HD uint8_t pipert_f_to_f8e4m3fn(double d, int sat) { return pipert_narrow8(d, 4, 0, sat); }
static inline PIPERT_HD uint8_t pipert_f_to_f8e4m3fnuz(double d, int sat) { return pipert_narrow8(d, 4, 1, sat); }
static inline PIPERT_HD uint8_t pipert_f_to_f8e5m2(double d, int sat) { return pipert_narrow8(d, 5, 0, sat); }
static inline PIPERT_HD uint8_t pipert_f_to_f8e5m2fnuz(double d, int sat) { return pipert_narrow8(d, 5, 1, sat); }
static inline PIPERT_HD float pipert_f8e4m3fn_to_f(uint8_t b) { return pipert_widen8(b, 4, 0); }
static inline PIPERT_HD float pipert_f8e4m3fnuz_to_f(uint8_t b) { return pipert_widen8(b, 4, 1); }
static inline PIPERT_HD float pipert_f8e5m2_to_f(uint8_t b) { return pipert_widen8(b, 5, 0); }
static inline PIPERT_HD float pipert_f8e5m2fnuz_to_f(uint8_t b) { return pipert_widen8(b, 5, 1); }

/* The OCP microscaling element types float4e2m1 (E, M = 2, 1; bias 1, max 6), float6e2m3
 * (2, 3; bias 1, max 7.5) and float6e3m2 (3, 2; bias 3, max 28): no infinities, no NaN, a
 * -0. Narrowing rounds to nearest, ties to even; a value past max (infinities included)
 * gives max of its sign; NaN gives the zero of the other sign, as ONNX's reference
 * (onnx 1.23, through ml_dtypes) does. Held one value per byte, in the low E + M + 1 bits. */
static inline PIPERT_HD uint8_t pipert_narrow_mx(double d, int E, int M) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  uint32_t sign = (uint32_t)(u >> 63) << (E + M), max = (1u << (E + M)) - 1u;
  if (pipert_isnan_bits(d)) return (uint8_t)(sign ^ (1u << (E + M)));
  uint32_t r = pipert_round_bits(d, M, (1 << (E - 1)) - 1);
  return (uint8_t)(sign | (r < max ? r : max));
}
static inline PIPERT_HD float pipert_widen_mx(uint8_t b, int E, int M) {
  int bias = (1 << (E - 1)) - 1;
  uint32_t e = ((uint32_t)b >> M) & ((1u << E) - 1u), m = b & ((1u << M) - 1u);
  uint32_t u = (uint32_t)(127 + (e ? (int)e : 1) - bias - M) << 23; /* exact, as pipert_widen8 */
  float f;
  memcpy(&f, &u, sizeof f);
  f *= (float)(m | (e ? 1u << M : 0u));
  return (b >> (E + M)) & 1u ? -f : f;
}
static inline PIPERT_HD uint8_t pipert_f_to_f4e2m1(double d) { return pipert_narrow_mx(d, 2, 1); }
static inline PIPERT_HD uint8_t pipert_f_to_f6e2m3(double d) { return pipert_narrow_mx(d, 2, 3); }
static inline PIPERT_HD uint8_t pipert_f_to_f6e3m2(double d) { return pipert_narrow_mx(d, 3, 2); }
static inline PIPERT_HD float pipert_f4e2m1_to_f(uint8_t b) { return pipert_widen_mx(b, 2, 1); }
static inline PIPERT_HD float pipert_f6e2m3_to_f(uint8_t b) { return pipert_widen_mx(b, 2, 3); }
static inline PIPERT_HD float pipert_f6e3m2_to_f(uint8_t b) { return pipert_widen_mx(b, 3, 2); }

/* float8e8m0 (OCP MX scales): the biased exponent e alone, 2^(e - 127); 0xff is NaN, no
 * zero, no sign. Narrowing is Cast-24's (onnx.numpy_helper.to_float8e8m0): d as a float,
 * whose exponent byte is taken (NaN and infinities give 0xff), rounded by round_mode (0
 * "up": any mantissa bit rounds up; 1 "down": truncated; 2 "nearest": up when the
 * mantissa's top bit is set and any other bit, or the exponent, is nonzero); saturate
 * keeps 0xfe from rounding up to 0xff. The sign is dropped (the spec leaves negative
 * values undefined). */
static inline PIPERT_HD uint8_t pipert_f_to_f8e8m0(double d, int saturate, int round_mode) {
  float f = (float)d;
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  uint32_t e = (b >> 23) & 0xffu, up = 0;
  if (e == 0xffu) return 0xff;
  if (round_mode == 0) up = (b & 0x7fffffu) != 0;
  else if (round_mode == 2) up = (b & 0x400000u) && ((b & 0x3fffffu) || e);
  if (saturate && e == 0xfeu) up = 0;
  return (uint8_t)(e + up);
}
static inline PIPERT_HD float pipert_f8e8m0_to_f(uint8_t b) {
  uint32_t u = b == 0xffu ? 0x7fc00000u : b ? (uint32_t)b << 23 : 0x00400000u; /* 2^-127: a subnormal */
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* By element type (enum pipert_dtype, one of the narrow ones): d's bit pattern
 * (saturate: float8 only, as Cast's attribute) and a bit pattern's value. */
static inline PIPERT_HD int pipert_f8_uz(int dtype) {
  return dtype == PIPERT_FLOAT8E4M3FNUZ || dtype == PIPERT_FLOAT8E5M2FNUZ;
}
static inline PIPERT_HD uint32_t pipert_to_bits(double d, int dtype, int saturate) {
  switch (dtype) {
    case PIPERT_FLOAT16: return pipert_f_to_f16(d);
    case PIPERT_BFLOAT16: return pipert_f_to_bf16(d);
    case PIPERT_FLOAT4E2M1: return pipert_f_to_f4e2m1(d);
    case PIPERT_FLOAT6E2M3: return pipert_f_to_f6e2m3(d);
    case PIPERT_FLOAT6E3M2: return pipert_f_to_f6e3m2(d);
    case PIPERT_FLOAT8E8M0: return pipert_f_to_f8e8m0(d, saturate, 0);
    default: return pipert_narrow8(d, dtype >= PIPERT_FLOAT8E5M2 ? 5 : 4, pipert_f8_uz(dtype), saturate);
  }
}
static inline PIPERT_HD float pipert_from_bits(uint32_t b, int dtype) {
  switch (dtype) {
    case PIPERT_FLOAT16: return pipert_f16_to_f((uint16_t)b);
    case PIPERT_BFLOAT16: return pipert_bf16_to_f((uint16_t)b);
    case PIPERT_FLOAT4E2M1: return pipert_f4e2m1_to_f((uint8_t)b);
    case PIPERT_FLOAT6E2M3: return pipert_f6e2m3_to_f((uint8_t)b);
    case PIPERT_FLOAT6E3M2: return pipert_f6e3m2_to_f((uint8_t)b);
    case PIPERT_FLOAT8E8M0: return pipert_f8e8m0_to_f((uint8_t)b);
    default: return pipert_widen8((uint8_t)b, dtype >= PIPERT_FLOAT8E5M2 ? 5 : 4, pipert_f8_uz(dtype));
  }
}

/* A tensor of one micro-batch. nbytes = product(dims) * element size. */
typedef struct pipert_tensor_desc {
  const char *name;              /* ONNX value name */
  int dtype;                     /* enum pipert_dtype */
  int rank;                      /* 1..PIPERT_MAX_RANK */
  int64_t dims[PIPERT_MAX_RANK]; /* dims[0] = micro-batch size */
  size_t nbytes;
} pipert_tensor_desc;

/* Training: the parameters a stage holds in writable memory (its "parameter memory",
 * param_bytes long: the weights file's bytes, then zeros). Kinds (ir_param_kind):
 *   WEIGHT    a trained initializer (its ONNX name);
 *   BUFFER    an initializer the forward pass updates (BatchNorm running statistics);
 *   OPTSTATE  optimizer state "state/<weight>/momentum|m|v|step";
 *   GRAD      "grad/<weight>": the weight's gradient summed over the step's micro-batches
 *             (zero_grads clears it; backward adds to it; step reads it);
 *   HYPER     a scalar hyperparameter "hyper/lr|momentum|weight_decay|beta1|beta2|eps".
 * A stage that updates a param is its owner; another stage that reads the same weight
 * holds a copy (owner 0), which the runtime refreshes from the owner after each step. */
enum pipert_param_kind {
  PIPERT_PARAM_WEIGHT = 1,
  PIPERT_PARAM_BUFFER = 2,
  PIPERT_PARAM_OPTSTATE = 3,
  PIPERT_PARAM_GRAD = 4,
  PIPERT_PARAM_HYPER = 5
};

typedef struct pipert_param_desc {
  const char *name;
  int kind; /* enum pipert_param_kind */
  int dtype;
  int rank; /* 0 for a scalar */
  int64_t dims[PIPERT_MAX_RANK];
  size_t nbytes;
  size_t offset; /* in the stage's parameter memory */
  int owner;     /* 1: updated by this stage; 0: a copy of the owner's */
} pipert_param_desc;

/* A stage whose code runs on an accelerator (the cuda target). When every stage has
 * these and all run on one device (or on devices that can each access the others'
 * memory, peer), the runtime keeps the sets stages exchange in device memory (alloc, on
 * the writer's device) and calls the device forms of forward/backward, whose in[]/out[]
 * are device pointers (on another device, a reader copies them device to device); graph
 * inputs are uploaded and graph outputs downloaded. */
typedef struct pipert_device_ops {
  int (*ordinal)(void *state); /* the device the state runs on */
  void *(*alloc)(void *state, size_t nbytes);
  void (*release)(void *state, void *p);
  int (*upload)(void *state, void *dev, const void *host, size_t nbytes);   /* synchronous (but see async) */
  int (*download)(void *state, void *host, const void *dev, size_t nbytes); /* synchronous */
  int (*forward)(void *state, const void *const *in, void *const *out);
  int (*backward)(void *state, const void *const *in, void *const *out); /* NULL: inference */
  /* Between processes, one device each (NCCL); NULL when the device has none. A comm is
   * opaque. Sends and receives go inside groups: group(s, 1) starts one, group(s, 0)
   * ends it and returns when every call in it has completed (they progress
   * independently; a call that does not complete within the timeout fails, the
   * communicator aborted). In async mode (below) a send is a read and a receive a write
   * of its buffer, ordered by the hand-over on the device's communication stream, and
   * group(s, 0) returns once the group is queued: a failure or timeout shows at a later
   * call. All return 0, or non-zero after printing one line. */
  int (*comm_id)(void *buf, size_t len); /* a new communicator id (one process makes it) */
  void *(*comm_init)(void *state, const void *id, int nranks, int rank);
  int (*comm_group)(void *state, void *comm, int begin);
  int (*comm_send)(void *state, void *comm, const void *buf, size_t nbytes, int peer);
  int (*comm_recv)(void *state, void *comm, void *buf, size_t nbytes, int peer);
  /* parameter memory [offset, offset + nbytes) of float32/float64 (dtype) summed over comm */
  int (*comm_sum)(void *state, void *comm, size_t offset, size_t nbytes, int dtype);
  void (*comm_free)(void *state, void *comm);
  /* Page-locks (on) or releases (off) host memory that upload reads, so that copies from
   * it run at the bus's speed; NULL or a non-zero return: uploads work unpinned. */
  int (*pin)(void *state, void *host, size_t nbytes, int on);
  /* Stages sharing this device in one process hand over without the host waiting (on):
   * forward/backward return once their work is queued, upload once its copy is queued
   * (the host memory it reads must stay unchanged until busy() returns), and the device
   * orders each buffer's reads after its write and its next write after those reads
   * (runtime/rt_handover.h); download still completes before it returns. Off: every
   * call completes before it returns. Returns 0 once switched. NULL: always off. */
  int (*async)(void *state, int on);
  /* async mode: seconds the forward/backward work queued since the last call ran on
   * the device (waits for it and for the uploads to finish); < 0 after printing one line
   * when that work failed (the run fails). The runtime calls it at the end of every run.
   * May be NULL. */
  double (*busy)(void *state);
  /* Lets the state's device read and write the memory of device `ordinal` (peer access),
   * so that stages on several devices of one process hand over device memory: 0 once it
   * can (already could), non-zero (nothing printed) where it cannot. May be NULL: never. */
  int (*peer)(void *state, int ordinal);
  /* Replicas of one stage in one process (states of the same stage), in device mode:
   * param_sum adds [offset, offset + nbytes) of peer's parameter memory into state's,
   * elementwise (dtype float32/float64, one rounding per element, as a host sum),
   * param_copy copies that range of peer's into state's; both wait for the two states'
   * queued work first and complete before they return; 0, or non-zero after printing one
   * line. NULL: the runtime sums through host memory (param_io). */
  int (*param_sum)(void *state, void *peer, size_t offset, size_t nbytes, int dtype);
  int (*param_copy)(void *state, void *peer, size_t offset, size_t nbytes);
} pipert_device_ops;

/* One stage, emitted in stage_K.c as `const pipert_stage_desc pipecc_stage_K`. */
typedef struct pipert_stage_desc {
  int abi_version;  /* PIPERT_ABI_VERSION */
  int id;           /* K */
  const char *name; /* optional, e.g. "stage_1 (conv3..fc1)"; may be NULL */
  int n_inputs, n_outputs;
  const pipert_tensor_desc *inputs;  /* forward()'s in[] order */
  const pipert_tensor_desc *outputs; /* forward()'s out[] order */
  /* Weights: file name relative to the binary's directory (or --weights-dir),
   * NULL when the stage has none. The file must be exactly weights_bytes long and
   * hash to weights_checksum with pipert_checksum64(). */
  const char *weights_file;
  size_t weights_bytes;
  uint64_t weights_checksum;
  /* init: called once per replica after the weights are mapped and checked;
   * sets *state (may stay NULL). weights points to weights_len read-only bytes
   * (NULL, 0 when weights_file is NULL). Returns 0, or non-zero on failure. */
  int (*init)(void **state, const void *weights, size_t weights_len);
  /* forward: one micro-batch. in[k] holds inputs[k].nbytes bytes, out[k] has room
   * for outputs[k].nbytes bytes. Returns 0, or non-zero on failure (the pipeline
   * then stops with an error). */
  int (*forward)(void *state, const void *const *in, void *const *out);
  void (*fini)(void *state); /* may be NULL */
  /* ---- training programs only (NULL / 0 in an inference build) ---- */
  size_t param_bytes; /* parameter memory: weights_bytes of the file, then zeros */
  int n_bwd_inputs, n_bwd_outputs;
  const pipert_tensor_desc *bwd_inputs;  /* backward()'s in[] order */
  const pipert_tensor_desc *bwd_outputs; /* backward()'s out[]: gradients for earlier stages */
  /* backward: one micro-batch's gradients; adds the weights' gradients to the GRAD params.
   * in[] holds what pipert_stage_plan.bwd_input_src names (the stage's own forward outputs
   * of that micro-batch, earlier stages' outputs it received, graph inputs, later stages'
   * backward outputs). */
  int (*backward)(void *state, const void *const *in, void *const *out);
  int (*step)(void *state);       /* the optimizer update from the GRAD params */
  int (*zero_grads)(void *state); /* GRAD params to zero (before a step's first backward) */
  int n_params;
  const pipert_param_desc *params;
  /* Copy nbytes at offset of the parameter memory to (write 0) or from (write 1) host. */
  int (*param_io)(void *state, int write, size_t offset, void *host, size_t nbytes);
  const pipert_device_ops *device; /* NULL: a host stage */
  /* Training, asynchronous schedules: the forward and backward read the WEIGHT params
   * from host (laid out as the parameter memory, at least up to the end of the last
   * WEIGHT) instead of the parameter memory, until called with NULL; the step and
   * everything else stay in the parameter memory. host stays valid and unchanged while
   * it is in use. 0, or non-zero. NULL: the runtime writes such a version into the
   * parameter memory (param_io) and restores the latest after. */
  int (*weights_at)(void *state, const void *host);
  /* Training, host stages: the parameter memory itself (param_bytes), which the runtime
   * reads in place between the stage's calls (SpecTrain's prediction from the latest
   * weights and momentum); the GRAD params there are not zero between zero_grads and
   * the next backward (param_io's are). NULL: the runtime reads it through param_io. */
  const void *(*param_memory)(void *state);
} pipert_stage_desc;

/* Where a value comes from: stage >= 0: forward output `index` of that stage (phase 0)
 * or backward output `index` (phase 1); stage == PIPERT_GRAPH_INPUT: graph input `index`. */
#define PIPERT_GRAPH_INPUT (-1)
typedef struct pipert_ref {
  int stage;
  int index;
  int phase;
} pipert_ref;

/* Per-stage instruction stream for one round; mb is the micro-batch index
 * within the round (0..M-1). Inference uses RECV_ACT, FWD, SEND_ACT only:
 *   RECV_ACT mb:  wait for all inputs of micro-batch mb from earlier stages;
 *   FWD mb:       run forward() on it (graph outputs it computes are stored now);
 *   SEND_ACT mb:  hand its outputs to the later stages that read them.
 * An inference stage may receive at most one micro-batch ahead of the one it runs
 * (RECV mb+1 before FWD mb is fine, RECV mb+2 is not): the in-flight buffers per edge
 * are sized for that. Micro-batches must appear in increasing order for each opcode.
 * A training round is one optimizer step; it adds, per micro-batch,
 *   RECV_GRAD mb: wait for the gradients of mb from later stages;
 *   BWD mb:       run backward() on it (after its FWD);
 *   SEND_GRAD mb: hand its gradients to the earlier stages that read them;
 * and once, after every BWD: ALLREDUCE (sum the GRAD params over the stage's replicas;
 * only when it has several) and STEP. BWD_W is reserved. */
typedef enum pipert_opcode {
  PIPERT_OP_NOP = 0,
  PIPERT_OP_RECV_ACT,
  PIPERT_OP_FWD,
  PIPERT_OP_SEND_ACT,
  PIPERT_OP_RECV_GRAD,
  PIPERT_OP_BWD,
  PIPERT_OP_BWD_W,
  PIPERT_OP_SEND_GRAD,
  PIPERT_OP_ALLREDUCE,
  PIPERT_OP_STEP
} pipert_opcode;
typedef struct pipert_instr {
  int op;
  int mb;
} pipert_instr;

typedef struct pipert_stage_plan {
  const pipert_stage_desc *stage;
  const pipert_ref *input_src;     /* stage->n_inputs entries; producers must be earlier stages */
  int replicas;                    /* >= 1; replica r runs the micro-batches with mb % replicas == r */
  const pipert_instr *program;     /* one round for pipert_pipeline.microbatches micro-batches; */
  int program_len;                 /* NULL/0: the runtime uses RECV,FWD,SEND for mb 0..M-1 */
  const pipert_ref *bwd_input_src; /* training: stage->n_bwd_inputs entries */
} pipert_stage_plan;

/* --export-onnx: where the model's trained initializers are, so that the runtime can
 * write a copy of the model with the trained values (same bytes everywhere else). */
typedef struct pipert_export_entry {
  const char *name;        /* initializer (a WEIGHT or BUFFER param) */
  const char *file;        /* NULL: in the model file; else an external data file,
                            * relative to the model's folder */
  uint64_t offset, nbytes; /* its raw little-endian data in that file */
} pipert_export_entry;
typedef struct pipert_export_desc {
  const char *model_path;           /* absolute path at compile time */
  uint64_t model_bytes, model_hash; /* size and pipert_checksum64 of the model file */
  int n;
  const pipert_export_entry *entries;
} pipert_export_desc;

typedef struct pipert_pipeline {
  int abi_version;  /* PIPERT_ABI_VERSION */
  const char *name; /* model name, for messages */
  int n_stages;
  const pipert_stage_plan *stages; /* stage K at index K, in topological order */
  int n_inputs;
  const pipert_tensor_desc *inputs; /* graph inputs, per micro-batch shapes */
  int n_outputs;
  const pipert_tensor_desc *outputs; /* graph outputs, per micro-batch shapes */
  const pipert_ref *output_src;      /* n_outputs entries */
  int microbatches;                  /* M of the plan (micro-batches per round) */
  int batch_dim;                     /* must be 0 */
  double predicted_bubble;           /* the plan's bubble fraction, printed by --bench */
  const char *schedule;              /* "gpipe", "1f1b", ...: for messages */
  /* ---- training programs (`pipeline train`; 0 / -1 / NULL for inference) ---- */
  int training;
  int loss_output;                       /* graph output holding each micro-batch's loss, shape [1] */
  int loss_sum;                          /* a step's loss is the sum of its micro-batches' (else their mean) */
  int logits_output;                     /* graph output with the logits (classification), else -1 */
  int labels_input;                      /* graph input with the labels, else -1 */
  const char *optimizer;                 /* "sgd", "adam", "adamw" */
  const pipert_export_desc *export_info; /* NULL: --export-onnx is not available */
  const char *pipecc_version;            /* of the pipecc that compiled it (--info) */
  const char *target;                    /* "cpu", "cuda" */
} pipert_pipeline;

/* The pipeline binary's main. Command line:
 *   pipeline --input [NAME=]FILE.npy|FILE.npz ... --output FILE.npy|FILE.npz|DIR
 *            [--microbatches M] [--bench N] [--threads-per-stage T] [--pin]
 *            [--weights-dir DIR] [--transport auto|threads|mpi] [--timeout S]
 * Under `mpirun -np <n_stages>` (and a libpipert built with MPI) rank r runs
 * stage r; rank 0 reads the inputs and writes the outputs.
 * Returns the process exit status: 0 ok, 2 user error (bad input, missing or
 * corrupt weights, bad command line), 1 runtime failure (a stage failed). */
int pipert_main(int argc, char **argv, const pipert_pipeline *p);

/* For a device stage's init: the plan's device of the stage replica being initialised
 * in this process (the stages' replicas numbered in order: stage s replica r is device
 * replicas(0) + ... + replicas(s-1) + r), or -1 where the runtime places it otherwise
 * (one process per replica: the transport names the local rank's device). */
int pipert_init_device(void);

/* A stage's forward or backward that finds its input outside what the model defines (a
 * Gather index past its axis, in the C or CUDA stage code) calls pipert_bad_input once
 * with the node and the reason (the process keeps the first) and returns
 * PIPERT_STATUS_BAD_INPUT; the runtime then stops the run with that one line, naming the
 * stage and micro-batch, and exit status 2. */
#define PIPERT_STATUS_BAD_INPUT 77
void pipert_bad_input(const char *node, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The weights checksum: XXH64 (seed 0) of the file's bytes. pipecc computes the
 * same function when it writes weights_K.bin. */
uint64_t pipert_checksum64(const void *data, size_t len);

#ifdef __cplusplus
}
#endif

/* The per-node profiler of one-stage cpu builds (DIR/profile). */
#include "pipert_profile.h"
#endif
