/* .npy (format 1.0/2.0/3.0, little endian, C order) and .npz (zip, STORED entries). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt.h"

/* bfloat16, float8, float4 and float6 have no numpy type: their arrays are bit patterns, uint16 ('<u2',
 * as onnx.numpy_helper gives bfloat16) and uint8 ('|u1'); reading '<u2' or '|u1' gives
 * uint16 or uint8 (the later row wins), which an input declared bfloat16 or float8 takes
 * (rt_main.c accept_input) */
static const struct {
  int dtype;
  const char *descr;
  const char *name;
  size_t size;
} k_dtypes[] = {
    {PIPERT_BFLOAT16, "u2", "bfloat16", 2},
    {PIPERT_FLOAT8E4M3FN, "u1", "float8e4m3fn", 1},
    {PIPERT_FLOAT8E4M3FNUZ, "u1", "float8e4m3fnuz", 1},
    {PIPERT_FLOAT8E5M2, "u1", "float8e5m2", 1},
    {PIPERT_FLOAT8E5M2FNUZ, "u1", "float8e5m2fnuz", 1},
    {PIPERT_UINT4, "u1", "uint4", 1},
    {PIPERT_INT4, "i1", "int4", 1},
    {PIPERT_FLOAT4E2M1, "u1", "float4e2m1", 1},
    {PIPERT_FLOAT8E8M0, "u1", "float8e8m0", 1},
    {PIPERT_UINT2, "u1", "uint2", 1},
    {PIPERT_INT2, "i1", "int2", 1},
    {PIPERT_FLOAT6E2M3, "u1", "float6e2m3", 1},
    {PIPERT_FLOAT6E3M2, "u1", "float6e3m2", 1},
    {PIPERT_FLOAT, "f4", "float32", 4},
    {PIPERT_DOUBLE, "f8", "float64", 8},
    {PIPERT_FLOAT16, "f2", "float16", 2},
    {PIPERT_INT64, "i8", "int64", 8},
    {PIPERT_INT32, "i4", "int32", 4},
    {PIPERT_INT16, "i2", "int16", 2},
    {PIPERT_INT8, "i1", "int8", 1},
    {PIPERT_UINT8, "u1", "uint8", 1},
    {PIPERT_UINT16, "u2", "uint16", 2},
    {PIPERT_UINT32, "u4", "uint32", 4},
    {PIPERT_UINT64, "u8", "uint64", 8},
    {PIPERT_BOOL, "b1", "bool", 1},
};
#define N_DTYPES (sizeof k_dtypes / sizeof k_dtypes[0])

size_t rt_dtype_size(int dtype) {
  for (size_t i = 0; i < N_DTYPES; i++)
    if (k_dtypes[i].dtype == dtype) return k_dtypes[i].size;
  return 0;
}

const char *rt_dtype_name(int dtype) {
  for (size_t i = 0; i < N_DTYPES; i++)
    if (k_dtypes[i].dtype == dtype) return k_dtypes[i].name;
  return "unknown";
}

const char *rt_shape_str(char *buf, size_t len, int rank, const int64_t *dims) {
  size_t o = (size_t)snprintf(buf, len, "(");
  for (int i = 0; i < rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)dims[i]);
  if (o < len) snprintf(buf + o, len - o, rank == 1 ? ",)" : ")");
  return buf;
}

void rt_array_free(rt_array *a) {
  free(a->name);
  free(a->data);
  memset(a, 0, sizeof *a);
}

int rt_array_bytes(int dtype, int rank, const int64_t *dims, size_t *nbytes) {
  size_t n = rt_dtype_size(dtype);
  if (!n || rank < 0 || rank > PIPERT_MAX_RANK) return -1;
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0 || __builtin_mul_overflow(n, (size_t)dims[i], &n)) return -1;
  *nbytes = n;
  return 0;
}

int rt_array_alloc(rt_array *a, const char *name, int dtype, int rank, const int64_t *dims) {
  memset(a, 0, sizeof *a);
  size_t n;
  if (rt_array_bytes(dtype, rank, dims, &n)) return -1;
  void *data = rt_aligned_try_alloc(n);
  if (!data) return -1;
  for (int i = 0; i < rank; i++) a->dims[i] = dims[i];
  a->name = name ? strdup(name) : NULL;
  a->dtype = dtype;
  a->rank = rank;
  a->nbytes = n;
  a->data = data;
  return 0;
}

/* ---- .npy --------------------------------------------------------------- */

static const char *find_key(const char *h, const char *key) {
  const char *p = strstr(h, key);
  if (!p) return NULL;
  p += strlen(key);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

int rt_npy_parse(const void *buf, size_t len, const char *what, rt_array *out, char *err, size_t errlen) {
  const unsigned char *b = buf;
  memset(out, 0, sizeof *out);
  if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
    snprintf(err, errlen, "%s: not a .npy file (bad magic)", what);
    return -1;
  }
  size_t hlen, hoff;
  if (b[6] == 1) {
    hlen = (size_t)b[8] | (size_t)b[9] << 8;
    hoff = 10;
  } else if (b[6] == 2 || b[6] == 3) {
    if (len < 12) goto trunc;
    hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    hoff = 12;
  } else {
    snprintf(err, errlen, "%s: unsupported .npy format version %d.%d", what, b[6], b[7]);
    return -1;
  }
  if (hoff + hlen > len) goto trunc;
  char *h = malloc(hlen + 1);
  memcpy(h, b + hoff, hlen);
  h[hlen] = 0;
  const char *d = find_key(h, "'descr'"), *f = find_key(h, "'fortran_order'"), *s = find_key(h, "'shape'");
  if (!d || !f || !s || (*d != '\'' && *d != '"') || *s != '(') {
    snprintf(err, errlen, "%s: malformed .npy header", what);
    free(h);
    return -1;
  }
  char descr[32] = {0};
  char q = *d++;
  size_t dl = 0;
  while (d[dl] && d[dl] != q && dl < sizeof descr - 1) {
    descr[dl] = d[dl];
    dl++;
  }
  int dtype = 0;
  if (dl == 3 && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=')) {
    for (size_t i = 0; i < N_DTYPES; i++)
      if (!strcmp(descr + 1, k_dtypes[i].descr)) dtype = k_dtypes[i].dtype;
    if (descr[0] == '|' && rt_dtype_size(dtype) != 1) dtype = 0;
  }
  if (!dtype) {
    snprintf(err, errlen, "%s: unsupported dtype '%s' (little-endian numeric or bool only)", what, descr);
    free(h);
    return -1;
  }
  if (strncmp(f, "False", 5) != 0) {
    snprintf(err, errlen, "%s: Fortran-order arrays are not supported (save with np.ascontiguousarray)", what);
    free(h);
    return -1;
  }
  int64_t dims[PIPERT_MAX_RANK];
  int rank = 0;
  const char *p = s + 1;
  for (;;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *e;
    errno = 0;
    long long v = strtoll(p, &e, 10);
    if (e == p || v < 0 || errno) {
      rank = -1;
      break;
    }
    if (rank == PIPERT_MAX_RANK) {
      rank = -2;
      break;
    }
    dims[rank++] = v;
    p = e;
    while (*p == 'L') p++;
  }
  free(h);
  if (rank < 0) {
    snprintf(err, errlen, rank == -2 ? "%s: more than 8 dimensions" : "%s: malformed shape in .npy header", what);
    return -1;
  }
  /* the header's claim is bounded by the bytes that follow it before anything is
   * allocated: a lying header costs nothing */
  size_t nbytes, have = len - hoff - hlen;
  char sh[160];
  int overflow = rt_array_bytes(dtype, rank, dims, &nbytes) != 0;
  if (overflow || nbytes > have) {
    char claim[64];
    if (overflow) snprintf(claim, sizeof claim, "more bytes than memory holds");
    else snprintf(claim, sizeof claim, "%zu bytes", nbytes);
    snprintf(err, errlen, "%s: truncated .npy file: its header claims shape %s of %s (%s), but %zu bytes follow it",
             what, rt_shape_str(sh, sizeof sh, rank, dims), rt_dtype_name(dtype), claim, have);
    return -1;
  }
  if (rt_array_alloc(out, NULL, dtype, rank, dims)) {
    snprintf(err, errlen, "%s: out of memory for its %zu bytes", what, nbytes);
    return -1;
  }
  memcpy(out->data, b + hoff + hlen, out->nbytes);
  return 0;
trunc:
  snprintf(err, errlen, "%s: truncated .npy file", what);
  return -1;
}

static void *read_file(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s: is a directory, not a file", path);
    fclose(f);
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (; buf;) {
    if (n == cap) {
      char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  int bad = ferror(f), e = errno;
  fclose(f);
  if (!buf) {
    snprintf(err, errlen, "%s: out of memory reading it", path);
    return NULL;
  }
  if (bad) {
    snprintf(err, errlen, "%s: read error: %s", path, strerror(e));
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

int rt_npy_load(const char *path, rt_array *out, char *err, size_t errlen) {
  size_t len;
  void *buf = read_file(path, &len, err, errlen);
  if (!buf) return -1;
  int rc = rt_npy_parse(buf, len, path, out, err, errlen);
  free(buf);
  return rc;
}

static const char *descr_of(int dtype) {
  static char s[N_DTYPES][4];
  for (size_t i = 0; i < N_DTYPES; i++)
    if (k_dtypes[i].dtype == dtype) {
      snprintf(s[i], sizeof s[i], "%c%s", k_dtypes[i].size == 1 ? '|' : '<', k_dtypes[i].descr);
      return s[i];
    }
  return NULL;
}

/* Header (magic .. padding), total length a multiple of 64. Returns its length. */
static size_t npy_header(const rt_array *a, char *h, size_t cap) {
  char shape[256];
  size_t o = (size_t)snprintf(shape, sizeof shape, "(");
  for (int i = 0; i < a->rank; i++)
    o += (size_t)snprintf(shape + o, sizeof shape - o, "%lld,%s", (long long)a->dims[i], i + 1 < a->rank ? " " : "");
  if (a->rank > 1) shape[--o] = 0; /* numpy writes (2, 3) but (3,) */
  snprintf(shape + o, sizeof shape - o, ")");
  char dict[400];
  int dl =
      snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr_of(a->dtype), shape);
  size_t total = 10 + (size_t)dl + 1;
  total = (total + 63) / 64 * 64;
  if (total > cap) return 0;
  memcpy(h, "\x93NUMPY\x01\x00", 8);
  size_t hl = total - 10;
  h[8] = (char)(hl & 0xff);
  h[9] = (char)(hl >> 8);
  memcpy(h + 10, dict, (size_t)dl);
  memset(h + 10 + dl, ' ', total - 10 - (size_t)dl - 1);
  h[total - 1] = '\n';
  return total;
}

/* ---- writing a file whole or not at all ------------------------------------ */

FILE *rt_atomic_open(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen) {
  snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) snprintf(err, errlen, "%s: %s", path, strerror(errno));
  return f;
}

int rt_can_write(const char *path) {
  char tmp[4200], err[1024];
  FILE *f = rt_atomic_open(path, tmp, sizeof tmp, err, sizeof err);
  if (!f) return -1;
  fclose(f);
  unlink(tmp);
  return 0;
}

int rt_atomic_close(FILE *f, int ok, const char *path, const char *tmp, char *err, size_t errlen) {
  int e = ok ? 0 : errno;
  if (ok && (fflush(f) || fsync(fileno(f)))) ok = 0, e = errno;
  if (fclose(f) && ok) ok = 0, e = errno;
  if (ok && rename(tmp, path)) ok = 0, e = errno;
  if (!ok) {
    snprintf(err, errlen, "%s: write error: %s", path, e ? strerror(e) : "short write");
    unlink(tmp);
    return -1;
  }
  /* the rename itself made durable: the folder synced */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  int fd = open(slash ? (dir[0] ? dir : "/") : ".", O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  return 0;
}

int rt_npy_save(const char *path, const rt_array *a, char *err, size_t errlen) {
  char h[512], tmp[4200];
  size_t hl = npy_header(a, h, sizeof h);
  FILE *f = rt_atomic_open(path, tmp, sizeof tmp, err, errlen);
  if (!f) return -1;
  errno = 0;
  int ok = fwrite(h, 1, hl, f) == hl && fwrite(a->data, 1, a->nbytes, f) == a->nbytes;
  return rt_atomic_close(f, ok, path, tmp, err, errlen);
}

/* ---- CRC-32 (zip) ------------------------------------------------------- */

static uint32_t table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
}

uint32_t rt_crc32(uint32_t crc, const void *data, size_t len) {
  pthread_once(&crc_once, crc_init);
  const unsigned char *p = data;
  crc = ~crc;
  while (len--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

/* ---- .npz --------------------------------------------------------------- */

static uint32_t rd16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const unsigned char *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

int rt_npz_load(const char *path, rt_array **arrs, int *n, char *err, size_t errlen) {
  size_t len;
  unsigned char *b = read_file(path, &len, err, errlen);
  *arrs = NULL;
  *n = 0;
  if (!b) return -1;
  int rc = rt_npz_parse(b, len, path, arrs, n, err, errlen);
  free(b);
  return rc;
}

int rt_npz_parse(const void *buf, size_t len, const char *path, rt_array **arrs, int *n, char *err, size_t errlen) {
  const unsigned char *b = buf;
  *arrs = NULL;
  *n = 0;
  rt_array *out = NULL;
  int cnt = 0;
  long eocd = -1;
  for (long i = (long)len - 22; i >= 0 && i >= (long)len - 22 - 65535; i--)
    if (rd32(b + i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd < 0) {
    snprintf(err, errlen, "%s: not a zip/npz file", path);
    goto fail;
  }
  uint64_t entries = rd16(b + eocd + 10), cdoff = rd32(b + eocd + 16);
  if ((entries == 0xffff || cdoff == 0xffffffffu) && eocd >= 20 && rd32(b + eocd - 20) == 0x07064b50) {
    uint64_t z = rd64(b + eocd - 20 + 8);
    if (z > len || len - z < 56 || rd32(b + z) != 0x06064b50) goto bad;
    entries = rd64(b + z + 32);
    cdoff = rd64(b + z + 48);
  }
  /* every entry takes 46 bytes of the central directory at least: a count that the file
   * cannot hold is a corrupt end record, refused before anything is allocated */
  if (cdoff > len || entries > (len - cdoff) / 46) goto bad;
  out = calloc(entries ? entries : 1, sizeof *out);
  if (!out) {
    snprintf(err, errlen, "%s: out of memory for its %llu entries", path, (unsigned long long)entries);
    goto fail;
  }
  uint64_t p = cdoff;
  for (uint64_t e = 0; e < entries; e++) {
    if (p + 46 > len || rd32(b + p) != 0x02014b50) goto bad;
    unsigned flags = rd16(b + p + 8), method = rd16(b + p + 10);
    uint32_t crc = rd32(b + p + 16);
    uint64_t csize = rd32(b + p + 20), usize = rd32(b + p + 24);
    unsigned nlen = rd16(b + p + 28), xlen = rd16(b + p + 30), clen = rd16(b + p + 32);
    uint64_t loff = rd32(b + p + 42);
    if (p + 46 + nlen + xlen + clen > len) goto bad;
    char name[512];
    snprintf(name, sizeof name, "%.*s", (int)nlen, (const char *)b + p + 46);
    for (const unsigned char *x = b + p + 46 + nlen, *xe = x + xlen; x + 4 <= xe;) {
      unsigned id = rd16(x), sz = rd16(x + 2);
      const unsigned char *f = x + 4, *fe = x + 4 + sz;
      if (fe > xe) break;
      if (id == 1) {
        if (usize == 0xffffffffu && f + 8 <= fe) {
          usize = rd64(f);
          f += 8;
        }
        if (csize == 0xffffffffu && f + 8 <= fe) {
          csize = rd64(f);
          f += 8;
        }
        if (loff == 0xffffffffu && f + 8 <= fe) {
          loff = rd64(f);
          f += 8;
        }
      }
      x = fe;
    }
    if (method != 0 || (flags & 1)) {
      snprintf(err, errlen,
               "%s: entry '%s' is %s; only uncompressed npz files are supported "
               "(write them with numpy.savez, not numpy.savez_compressed)",
               path, name, flags & 1 ? "encrypted" : "compressed");
      goto fail;
    }
    if (loff > len || len - loff < 30 || rd32(b + loff) != 0x04034b50) goto bad;
    uint64_t doff = loff + 30 + rd16(b + loff + 26) + rd16(b + loff + 28);
    if (csize != usize || doff > len || usize > len - doff) goto bad;
    if (rt_crc32(0, b + doff, usize) != crc) {
      snprintf(err, errlen, "%s: entry '%s': CRC mismatch (corrupt file)", path, name);
      goto fail;
    }
    char what[1100];
    snprintf(what, sizeof what, "%s: %s", path, name);
    if (rt_npy_parse(b + doff, usize, what, &out[cnt], err, errlen)) goto fail;
    size_t nl = strlen(name);
    if (nl > 4 && !strcmp(name + nl - 4, ".npy")) name[nl - 4] = 0;
    out[cnt++].name = strdup(name);
    p += 46 + nlen + xlen + clen;
  }
  *arrs = out;
  *n = cnt;
  return 0;
bad:
  snprintf(err, errlen, "%s: corrupt or truncated zip/npz file", path);
fail:
  for (int i = 0; i < cnt && out; i++) rt_array_free(&out[i]);
  free(out);
  return -1;
}

static void wr16(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void wr32(unsigned char *p, uint32_t v) {
  wr16(p, v & 0xffff);
  wr16(p + 2, v >> 16);
}

int rt_npz_save(const char *path, const rt_array *arrs, int n, char *err, size_t errlen) {
  char tmp[4200];
  FILE *f = rt_atomic_open(path, tmp, sizeof tmp, err, errlen);
  if (!f) return -1;
  errno = 0;
  unsigned char *cd = NULL;
  size_t cdlen = 0, off = 0;
  int ok = 1;
  for (int i = 0; i < n && ok; i++) {
    const rt_array *a = &arrs[i];
    char name[512], h[512];
    int nl = snprintf(name, sizeof name, "%s.npy", a->name ? a->name : "arr");
    size_t hl = npy_header(a, h, sizeof h), size = hl + a->nbytes;
    if (size >= 0xffffffffu || off >= 0xffffffffu) {
      snprintf(
          err, errlen,
          "%s: arrays of 4 GiB or more need zip64, which is not supported; write a directory of .npy files instead",
          path);
      fclose(f);
      unlink(tmp);
      free(cd);
      return -1;
    }
    uint32_t crc = rt_crc32(rt_crc32(0, h, hl), a->data, a->nbytes);
    unsigned char lh[30] = {0};
    wr32(lh, 0x04034b50);
    wr16(lh + 4, 20);
    wr16(lh + 12, 0x21); /* 1980-01-01 */
    wr32(lh + 14, crc);
    wr32(lh + 18, (uint32_t)size);
    wr32(lh + 22, (uint32_t)size);
    wr16(lh + 26, (uint32_t)nl);
    ok = fwrite(lh, 1, 30, f) == 30 && fwrite(name, 1, (size_t)nl, f) == (size_t)nl && fwrite(h, 1, hl, f) == hl &&
         fwrite(a->data, 1, a->nbytes, f) == a->nbytes;
    cd = realloc(cd, cdlen + 46 + (size_t)nl);
    unsigned char *c = cd + cdlen;
    memset(c, 0, 46);
    wr32(c, 0x02014b50);
    wr16(c + 4, 20);
    wr16(c + 6, 20);
    wr16(c + 14, 0x21);
    wr32(c + 16, crc);
    wr32(c + 20, (uint32_t)size);
    wr32(c + 24, (uint32_t)size);
    wr16(c + 28, (uint32_t)nl);
    wr32(c + 38, 0644u << 16);
    wr32(c + 42, (uint32_t)off);
    memcpy(c + 46, name, (size_t)nl);
    cdlen += 46 + (size_t)nl;
    off += 30 + (size_t)nl + size;
  }
  unsigned char e[22] = {0};
  wr32(e, 0x06054b50);
  wr16(e + 8, (uint32_t)n);
  wr16(e + 10, (uint32_t)n);
  wr32(e + 12, (uint32_t)cdlen);
  wr32(e + 16, (uint32_t)off);
  if (ok) ok = fwrite(cd, 1, cdlen, f) == cdlen && fwrite(e, 1, 22, f) == 22;
  free(cd);
  return rt_atomic_close(f, ok, path, tmp, err, errlen);
}
