/* rt_handover.c - see rt_handover.h. */
#include "rt_handover.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define HO_READERS 8 /* reader streams remembered per region; more finish their reads */

typedef struct ho_region {
  char *base;
  size_t n;
  void *ready; /* event: the last write, when has_ready */
  int has_ready;
  int n_rd;
  void *rd_by[HO_READERS]; /* reader streams */
  void *rd_ev[HO_READERS]; /* their events */
  int rd_live[HO_READERS]; /* recorded since the last write */
} ho_region;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ho_region **g_reg;
static int g_n, g_cap;

/* the region holding p (g_mu held), or NULL */
static ho_region *region_of(const void *p) {
  for (int i = 0; i < g_n; i++)
    if ((const char *)p >= g_reg[i]->base && (const char *)p < g_reg[i]->base + g_reg[i]->n) return g_reg[i];
  return NULL;
}

int rt_ho_add(void *base, size_t n) {
  ho_region *r = calloc(1, sizeof *r);
  if (!r) return -1;
  r->base = base;
  r->n = n ? n : 1;
  pthread_mutex_lock(&g_mu);
  if (g_n == g_cap) {
    int cap = g_cap ? 2 * g_cap : 64;
    ho_region **nr = realloc(g_reg, (size_t)cap * sizeof *nr);
    if (!nr) {
      pthread_mutex_unlock(&g_mu);
      free(r);
      return -1;
    }
    g_reg = nr;
    g_cap = cap;
  }
  g_reg[g_n++] = r;
  pthread_mutex_unlock(&g_mu);
  return 0;
}

void rt_ho_remove(const rt_ho_ops *o, void *base) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_n; i++)
    if (g_reg[i]->base == (char *)base) {
      ho_region *r = g_reg[i];
      g_reg[i] = g_reg[--g_n];
      if (o->sync) { /* every record (one already complete returns at once) */
        if (r->ready) o->sync(r->ready);
        for (int k = 0; k < r->n_rd; k++) o->sync(r->rd_ev[k]);
      }
      if (r->ready) o->event_free(r->ready);
      for (int k = 0; k < r->n_rd; k++) o->event_free(r->rd_ev[k]);
      free(r);
      break;
    }
  if (!g_n) { /* the last one: nothing left to look up */
    free(g_reg);
    g_reg = NULL;
    g_cap = 0;
  }
  pthread_mutex_unlock(&g_mu);
}

int rt_ho_before_read(const rt_ho_ops *o, void *stream, const void *p) {
  pthread_mutex_lock(&g_mu);
  ho_region *r = region_of(p);
  int rc = r && r->has_ready ? o->wait(stream, r->ready) : 0;
  pthread_mutex_unlock(&g_mu);
  return rc;
}

int rt_ho_after_read(const rt_ho_ops *o, void *stream, const void *p) {
  int rc = 0;
  pthread_mutex_lock(&g_mu);
  ho_region *r = region_of(p);
  if (r) {
    int k = 0;
    while (k < r->n_rd && r->rd_by[k] != stream) k++;
    if (k == r->n_rd && k < HO_READERS) {
      if (!(r->rd_ev[k] = o->event_new(stream))) rc = 1;
      else r->rd_by[r->n_rd++] = stream;
    }
    if (!rc && k < r->n_rd) {
      rc = o->record(stream, r->rd_ev[k]);
      r->rd_live[k] = !rc;
    } else if (!rc) {
      rc = o->finish(stream); /* more readers than slots: this read is over before it returns */
    }
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

int rt_ho_before_write(const rt_ho_ops *o, void *stream, const void *p) {
  int rc = 0;
  pthread_mutex_lock(&g_mu);
  ho_region *r = region_of(p);
  for (int k = 0; r && !rc && k < r->n_rd; k++)
    if (r->rd_live[k]) {
      if (r->rd_by[k] != stream) rc = o->wait(stream, r->rd_ev[k]);
      r->rd_live[k] = 0;
    }
  if (r && !rc && r->has_ready) rc = o->wait(stream, r->ready);
  pthread_mutex_unlock(&g_mu);
  return rc;
}

int rt_ho_after_write(const rt_ho_ops *o, void *stream, const void *p, int complete) {
  int rc = 0;
  pthread_mutex_lock(&g_mu);
  ho_region *r = region_of(p);
  if (r && complete) {
    r->has_ready = 0;
  } else if (r) {
    if (!r->ready && !(r->ready = o->event_new(stream))) rc = 1;
    if (!rc) rc = o->record(stream, r->ready);
    r->has_ready = !rc;
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}
