#include "ir/diag.h"

#include <stdarg.h>
#include <string.h>

#define IR_DIAG_MAX_ERRORS 20

int ir_diag_quiet;

static struct {
  int on;
  char *buf;
  size_t len, cap;
} held;

void ir_diag_hold(void) { held.on = 1; }

void ir_diag_release(int print) {
  if (print && held.len) fwrite(held.buf, 1, held.len, stderr);
  free(held.buf);
  memset(&held, 0, sizeof held);
}

/* One message line: to stderr, or kept while held. */
static void emit(const char *line) {
  if (!held.on) {
    fputs(line, stderr);
    return;
  }
  size_t n = strlen(line);
  if (held.len + n + 1 > held.cap) {
    held.cap = (held.len + n + 1) * 2;
    held.buf = ir_xrealloc(held.buf, held.cap);
  }
  memcpy(held.buf + held.len, line, n + 1);
  held.len += n;
}

char *ir_printable(const char *s, size_t max, char *buf, size_t n) {
  size_t o = 0;
  if (!n) return buf;
  if (!s) s = "";
  for (size_t i = 0; s[i] && o + 5 < n; i++) {
    if (i >= max) {
      if (o + 4 < n) memcpy(buf + o, "...", 3), o += 3;
      break;
    }
    unsigned char c = (unsigned char)s[i];
    if (c >= 32 && c < 127 && c != '\'') buf[o++] = (char)c;
    else o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
  }
  buf[o < n ? o : n - 1] = 0;
  return buf;
}

char *ir_node_desc(const ir_graph *g, int node, char *buf, size_t n) {
  const ir_node *nd = &g->nodes[node];
  char name[128], op[96], dom[96];
  ir_printable(nd->name, 80, name, sizeof name);
  ir_printable(nd->op_type, 60, op, sizeof op);
  if (nd->domain && *nd->domain) {
    ir_printable(nd->domain, 60, dom, sizeof dom);
    snprintf(buf, n, "node %d '%s' (%s, domain %s, opset %d)", nd->index, name, op, dom, nd->opset);
  } else {
    snprintf(buf, n, "node %d '%s' (%s, opset %d)", nd->index, name, op, nd->opset);
  }
  return buf;
}

/* The path as given, with control bytes escaped so that a message stays one line. */
static const char *printable_path(const char *p, char *buf, size_t n) {
  size_t o = 0;
  for (; *p && o + 5 < n; p++) {
    unsigned char c = (unsigned char)*p;
    if (c >= 32 && c != 127) buf[o++] = (char)c;
    else o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
  }
  buf[o] = 0;
  return buf;
}

static void vmsg(const ir_graph *g, const char *kind, int node, const char *fmt, va_list ap) {
  if (ir_diag_quiet) return;
  char msg[1024], desc[512], path[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  for (char *q = msg; *q; q++) /* messages are one line, whatever a format argument held */
    if (*q == '\n' || *q == '\r') *q = ' ';
  printable_path(g && g->path ? g->path : "pipecc", path, sizeof path);
  const char *hint = g && g->diag_hint && !*kind ? g->diag_hint : "";
  char line[4096];
  if (node >= 0 && g && node < g->n_nodes)
    snprintf(line, sizeof line, "%s: %s%s: %s%s\n", path, kind, ir_node_desc(g, node, desc, sizeof desc), msg, hint);
  else snprintf(line, sizeof line, "%s: %s%s%s\n", path, kind, msg, hint);
  emit(line);
}

/* A hostile model can hold a million errors: print the first IR_DIAG_MAX_ERRORS. */
static int error_shown(ir_graph *g) {
  if (!g || g->n_errors < IR_DIAG_MAX_ERRORS) return 1;
  if (g->n_errors == IR_DIAG_MAX_ERRORS && !ir_diag_quiet) {
    char path[1024], line[1200];
    snprintf(line, sizeof line, "%s: too many errors, the rest are not shown\n",
             printable_path(g->path ? g->path : "pipecc", path, sizeof path));
    emit(line);
  }
  return 0;
}

void ir_error(ir_graph *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (error_shown(g)) vmsg(g, "", -1, fmt, ap);
  va_end(ap);
  if (g) g->n_errors++;
}
void ir_error_node(ir_graph *g, int node, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (error_shown(g)) vmsg(g, "", node, fmt, ap);
  va_end(ap);
  if (g) g->n_errors++;
}
void ir_warn(ir_graph *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmsg(g, "warning: ", -1, fmt, ap);
  va_end(ap);
}
void ir_warn_node(ir_graph *g, int node, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmsg(g, "warning: ", node, fmt, ap);
  va_end(ap);
}
