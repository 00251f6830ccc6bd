#include "ir/arena.h"
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk {
  struct chunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
} chunk;

struct ir_arena {
  chunk *head;
  size_t total;
};

static void oom(size_t n) {
  fprintf(stderr, "pipecc: out of memory (asked for %zu bytes)\n", n);
  exit(3);
}

void *ir_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) oom(n);
  return p;
}
void *ir_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) oom(n);
  return q;
}
void *ir_xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz ? sz : 1);
  if (!p) oom(n * sz);
  return p;
}

ir_arena *ir_arena_new(void) { return ir_xcalloc(1, sizeof(ir_arena)); }

void ir_arena_free(ir_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

void *ir_alloc(ir_arena *a, size_t n) {
  size_t need = (n + 15) & ~(size_t)15;
  if (need < n) oom(n);
  chunk *c = a->head;
  if (!c || c->size - c->used < need) {
    size_t sz = 1u << 20;
    if (need > sz / 4) { /* big block: own chunk, behind the current one */
      chunk *b = malloc(sizeof(chunk) + need);
      if (!b) oom(n);
      b->size = b->used = need;
      if (c) {
        b->next = c->next;
        c->next = b;
      } else {
        b->next = NULL;
        a->head = b;
      }
      a->total += need;
      memset(b->data, 0, need);
      return b->data;
    }
    c = malloc(sizeof(chunk) + sz);
    if (!c) oom(sz);
    c->size = sz;
    c->used = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += need;
  a->total += need;
  memset(p, 0, need);
  return p;
}

void *ir_alloc_array(ir_arena *a, size_t n, size_t sz) {
  if (sz && n > SIZE_MAX / sz) oom(SIZE_MAX);
  return ir_alloc(a, n * sz);
}

char *ir_strndup(ir_arena *a, const char *s, size_t n) {
  char *d = ir_alloc(a, n + 1);
  if (n) memcpy(d, s, n);
  d[n] = 0;
  return d;
}
char *ir_strdup(ir_arena *a, const char *s) { return ir_strndup(a, s ? s : "", s ? strlen(s) : 0); }

char *ir_sprintf(ir_arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *d = ir_alloc(a, (size_t)(n < 0 ? 0 : n) + 1);
  vsnprintf(d, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return d;
}

size_t ir_arena_used(const ir_arena *a) { return a->total; }
