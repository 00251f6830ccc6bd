/* Weights files: mmap, size and XXH64 checksum check. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rt.h"

/* XXH64, seed 0 (the published algorithm, written from its specification). */
#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t le64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t le32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t round64(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
static uint64_t merge64(uint64_t acc, uint64_t v) { return (acc ^ round64(0, v)) * P1 + P4; }

uint64_t pipert_checksum64(const void *data, size_t len) {
  const unsigned char *p = data, *end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0 - P1;
    const unsigned char *lim = end - 32;
    do {
      v1 = round64(v1, le64(p)); v2 = round64(v2, le64(p + 8));
      v3 = round64(v3, le64(p + 16)); v4 = round64(v4, le64(p + 24));
      p += 32;
    } while (p <= lim);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge64(h, v1); h = merge64(h, v2); h = merge64(h, v3); h = merge64(h, v4);
  } else {
    h = P5;
  }
  h += (uint64_t)len;
  for (; p + 8 <= end; p += 8) h = rotl(h ^ round64(0, le64(p)), 27) * P1 + P4;
  if (p + 4 <= end) { h = rotl(h ^ ((uint64_t)le32(p) * P1), 23) * P2 + P3; p += 4; }
  for (; p < end; p++) h = rotl(h ^ (*p * P5), 11) * P1;
  h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32;
  return h;
}

int rt_weights_load(const pipert_stage_desc *d, const char *dir, rt_weights *w, char *err, size_t errlen) {
  w->map = NULL;
  w->len = 0;
  if (!d->weights_file) return 0;
  char path[4096];
  if (d->weights_file[0] == '/' || !dir) snprintf(path, sizeof path, "%s", d->weights_file);
  else snprintf(path, sizeof path, "%s/%s", dir, d->weights_file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "stage %d: %s: %s", d->id, d->weights_file,
             errno == ENOENT ? "missing (no such file; copy it next to the pipeline binary or pass --weights-dir)" : strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(err, errlen, "stage %d: %s: %s", d->id, d->weights_file, strerror(errno));
    close(fd);
    return -1;
  }
  if ((size_t)st.st_size != d->weights_bytes) {
    snprintf(err, errlen, "stage %d: %s: %s (%lld bytes, expected %zu)", d->id, d->weights_file,
             (size_t)st.st_size < d->weights_bytes ? "truncated" : "wrong size", (long long)st.st_size,
             d->weights_bytes);
    close(fd);
    return -1;
  }
  void *m = NULL;
  if (st.st_size > 0) {
    m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      snprintf(err, errlen, "stage %d: %s: mmap: %s", d->id, d->weights_file, strerror(errno));
      close(fd);
      return -1;
    }
  }
  close(fd);
  uint64_t sum = pipert_checksum64(m ? m : "", (size_t)st.st_size);
  if (sum != d->weights_checksum) {
    snprintf(err, errlen, "stage %d: %s: checksum mismatch (file %016llx, compiled %016llx): "
             "the file is corrupt or from another build", d->id, d->weights_file,
             (unsigned long long)sum, (unsigned long long)d->weights_checksum);
    if (m) munmap(m, (size_t)st.st_size);
    return -1;
  }
  w->map = m;
  w->len = (size_t)st.st_size;
  return 0;
}

void rt_weights_unload(rt_weights *w) {
  if (w->map) munmap(w->map, w->len);
  w->map = NULL;
  w->len = 0;
}
