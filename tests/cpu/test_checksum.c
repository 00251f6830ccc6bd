/* cg_checksum64 (pipecc, writes weights_K.bin) must be pipert_checksum64 (libpipert,
 * checks it at load): XXH64 seed 0. Known values of XXH64 and every length 0..300 on
 * unaligned data. */
#include <stdio.h>
#include <string.h>

#include "codegen/codegen.h"
#include "pipert.h"

int main(void) {
  int bad = 0;
  /* published XXH64 test vectors (seed 0) */
  if (cg_checksum64("", 0) != 0xEF46DB3751D8E999ull) bad = 1, fprintf(stderr, "XXH64(\"\") wrong\n");
  if (cg_checksum64("a", 1) != 0xD24EC4F1A98C6E5Bull) bad = 1, fprintf(stderr, "XXH64(\"a\") wrong\n");
  if (cg_checksum64("abc", 3) != 0x44BC2CF5AD770999ull) bad = 1, fprintf(stderr, "XXH64(\"abc\") wrong\n");
  unsigned char buf[512];
  for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + 7);
  for (size_t len = 0; len <= 300; len++)
    for (size_t off = 0; off < 3; off++)
      if (cg_checksum64(buf + off, len) != pipert_checksum64(buf + off, len)) {
        fprintf(stderr, "length %zu offset %zu: cg_checksum64 != pipert_checksum64\n", len, off);
        bad = 1;
      }
  if (!bad) printf("checksums agree\n");
  return bad;
}
