/* pipert_xxh64.h - XXH64 with seed 0 (the published algorithm, written from its
 * specification), the checksum of weights_K.bin files. Header-only so that the
 * compiler (cg_checksum64, which writes the checksums) and the runtime
 * (pipert_checksum64, which checks them) share one implementation. Reads bytes
 * explicitly, so the result does not depend on the host's byte order. */
#ifndef PIPERT_XXH64_H
#define PIPERT_XXH64_H
#include <stddef.h>
#include <stdint.h>

#define PIPERT_XXH_P1 0x9E3779B185EBCA87ull
#define PIPERT_XXH_P2 0xC2B2AE3D27D4EB4Full
#define PIPERT_XXH_P3 0x165667B19E3779F9ull
#define PIPERT_XXH_P4 0x85EBCA77C2B2AE63ull
#define PIPERT_XXH_P5 0x27D4EB2F165667C5ull

static inline uint64_t pipert_xxh_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t pipert_xxh_rd64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint32_t pipert_xxh_rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t pipert_xxh_round(uint64_t acc, uint64_t in) {
  return pipert_xxh_rotl(acc + in * PIPERT_XXH_P2, 31) * PIPERT_XXH_P1;
}
static inline uint64_t pipert_xxh_merge(uint64_t acc, uint64_t v) {
  return (acc ^ pipert_xxh_round(0, v)) * PIPERT_XXH_P1 + PIPERT_XXH_P4;
}

static inline uint64_t pipert_xxh64(const void *data, size_t len) {
  const unsigned char *p = data, *end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = PIPERT_XXH_P1 + PIPERT_XXH_P2, v2 = PIPERT_XXH_P2, v3 = 0, v4 = 0 - PIPERT_XXH_P1;
    const unsigned char *lim = end - 32;
    do {
      v1 = pipert_xxh_round(v1, pipert_xxh_rd64(p));
      v2 = pipert_xxh_round(v2, pipert_xxh_rd64(p + 8));
      v3 = pipert_xxh_round(v3, pipert_xxh_rd64(p + 16));
      v4 = pipert_xxh_round(v4, pipert_xxh_rd64(p + 24));
      p += 32;
    } while (p <= lim);
    h = pipert_xxh_rotl(v1, 1) + pipert_xxh_rotl(v2, 7) + pipert_xxh_rotl(v3, 12) + pipert_xxh_rotl(v4, 18);
    h = pipert_xxh_merge(h, v1);
    h = pipert_xxh_merge(h, v2);
    h = pipert_xxh_merge(h, v3);
    h = pipert_xxh_merge(h, v4);
  } else {
    h = PIPERT_XXH_P5;
  }
  h += (uint64_t)len;
  for (; p + 8 <= end; p += 8)
    h = pipert_xxh_rotl(h ^ pipert_xxh_round(0, pipert_xxh_rd64(p)), 27) * PIPERT_XXH_P1 + PIPERT_XXH_P4;
  if (p + 4 <= end) {
    h = pipert_xxh_rotl(h ^ ((uint64_t)pipert_xxh_rd32(p) * PIPERT_XXH_P1), 23) * PIPERT_XXH_P2 + PIPERT_XXH_P3;
    p += 4;
  }
  for (; p < end; p++) h = pipert_xxh_rotl(h ^ (*p * PIPERT_XXH_P5), 11) * PIPERT_XXH_P1;
  h ^= h >> 33;
  h *= PIPERT_XXH_P2;
  h ^= h >> 29;
  h *= PIPERT_XXH_P3;
  h ^= h >> 32;
  return h;
}

#endif
