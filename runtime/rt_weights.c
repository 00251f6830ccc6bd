/* Weights files: mmap, size and XXH64 checksum check. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pipert_xxh64.h"
#include "rt.h"

uint64_t pipert_checksum64(const void *data, size_t len) { return pipert_xxh64(data, len); }

/* ---- a stage's bad input (pipert.h) ---- */

/* One per process, the first reason kept: a stage's forward may run on another thread
 * than its worker's (the fake device's streams), and a run stops at its first failure. */
static char bad_input[768];
static pthread_mutex_t bad_input_mu = PTHREAD_MUTEX_INITIALIZER;

void pipert_bad_input(const char *node, const char *fmt, ...) {
  pthread_mutex_lock(&bad_input_mu);
  if (!bad_input[0]) {
    int o = snprintf(bad_input, sizeof bad_input, "%s: ", node);
    va_list ap;
    va_start(ap, fmt);
    if (o > 0 && (size_t)o < sizeof bad_input) vsnprintf(bad_input + o, sizeof bad_input - (size_t)o, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&bad_input_mu);
}

const char *rt_bad_input_take(void) {
  static _Thread_local char taken[sizeof bad_input];
  pthread_mutex_lock(&bad_input_mu);
  int any = bad_input[0] != 0;
  if (any) memcpy(taken, bad_input, sizeof taken);
  bad_input[0] = 0;
  pthread_mutex_unlock(&bad_input_mu);
  return any ? taken : NULL;
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
             errno == ENOENT ? "missing (no such file; copy it next to the pipeline binary or pass --weights-dir)"
                             : strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(err, errlen, "stage %d: %s: %s", d->id, d->weights_file, strerror(errno));
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "stage %d: %s: %s, not a weights file", d->id, path,
             S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
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
    snprintf(err, errlen,
             "stage %d: %s: checksum mismatch (file %016llx, compiled %016llx): "
             "the file is corrupt or from another build",
             d->id, d->weights_file, (unsigned long long)sum, (unsigned long long)d->weights_checksum);
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
