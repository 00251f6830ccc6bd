/* ir/arena.h - bump allocator, one per compilation.
 *
 * Everything the IR owns (names, attribute arrays, folded constants) lives in an
 * arena and is freed at once with ir_arena_free. Allocations are 16-byte aligned.
 * Out of memory is a fatal error (message and exit status 3): the compiler has
 * no sensible way to go on. */
#ifndef PIPECC_IR_ARENA_H
#define PIPECC_IR_ARENA_H
#include <stddef.h>

typedef struct ir_arena ir_arena;

ir_arena *ir_arena_new(void);
void ir_arena_free(ir_arena *a);
/* Zeroed memory. n may be 0 (returns a valid unique pointer). */
void *ir_alloc(ir_arena *a, size_t n);
/* n elements of size sz, with overflow check. */
void *ir_alloc_array(ir_arena *a, size_t n, size_t sz);
char *ir_strdup(ir_arena *a, const char *s);
char *ir_strndup(ir_arena *a, const char *s, size_t n);
char *ir_sprintf(ir_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Bytes handed out so far (for reports). */
size_t ir_arena_used(const ir_arena *a);

/* malloc/realloc that exit on failure (for growable arrays outside the arena). */
void *ir_xmalloc(size_t n);
void *ir_xrealloc(void *p, size_t n);
void *ir_xcalloc(size_t n, size_t sz);
#endif
