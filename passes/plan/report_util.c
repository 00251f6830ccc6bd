/* passes/plan/report_util.c - escaping, colours and number formatting for the report. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "passes/plan/report_util.h"

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if malformed. Rejects
 * overlong forms, surrogates and code points above U+10FFFF; *cp gets the value. */
static int utf8_seq(const unsigned char *p, uint32_t *cp) {
  unsigned c = p[0];
  int len;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  for (int i = 1; i < len; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0; /* also stops at the terminating NUL */
    v = v << 6 | (p[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

void rep_esc(FILE *f, const char *s, size_t max) {
  if (!s) return;
  const unsigned char *p = (const unsigned char *)s;
  size_t n = 0;
  while (*p) {
    if (n == max) {
      fputs("\xE2\x80\xA6", f); /* ... */
      return;
    }
    uint32_t cp;
    int len = utf8_seq(p, &cp);
    if (!len) {
      fputs("\xEF\xBF\xBD", f);
      p++;
    } else {
      if (cp == '\t' || cp == '\n' || cp == '\r') fputc(' ', f);
      else if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || (cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE)
        fputs("\xEF\xBF\xBD", f); /* controls and noncharacters are HTML parse errors */
      else if (cp == '&') fputs("&amp;", f);
      else if (cp == '<') fputs("&lt;", f);
      else if (cp == '>') fputs("&gt;", f);
      else if (cp == '"') fputs("&quot;", f);
      else if (cp == '\'') fputs("&#39;", f);
      else fwrite(p, 1, (size_t)len, f);
      p += len;
    }
    n++;
  }
}

static void hsl_hex(double h, double s, double l, char out[8]) {
  double c = (1 - fabs(2 * l - 1)) * s, hp = fmod(h, 360.0) / 60.0, x = c * (1 - fabs(fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1) r = c, g = x;
  else if (hp < 2) r = x, g = c;
  else if (hp < 3) g = c, b = x;
  else if (hp < 4) g = x, b = c;
  else if (hp < 5) r = x, b = c;
  else r = c, b = x;
  double m = l - c / 2;
  snprintf(out, 8, "#%02x%02x%02x", (int)lround((r + m) * 255), (int)lround((g + m) * 255), (int)lround((b + m) * 255));
}

void rep_stage_color(int k, char out[8]) {
  /* Tableau 10, reordered so that neighbours differ clearly; then golden-angle hues. */
  static const char *const pal[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
                                    "#edc948", "#76b7b2", "#ff9da7", "#9c755f", "#bab0ac"};
  if (k >= 0 && k < 10) {
    memcpy(out, pal[k], 8);
    return;
  }
  hsl_hex(fmod(k * 137.508, 360.0), 0.55, k % 2 ? 0.45 : 0.62, out);
}

void rep_mb_color(int mb, int dark, char out[8]) {
  hsl_hex(fmod(200.0 + mb * 137.508, 360.0), dark ? 0.55 : 0.70, dark ? 0.38 : 0.72, out);
}

static int hex2(const char *s) {
  int v = 0;
  for (int i = 0; i < 2; i++) {
    char c = s[i];
    v = v * 16 + (c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : 0);
  }
  return v;
}

int rep_dark_text(const char *c) {
  if (c[0] != '#' || strlen(c) < 7) return 1;
  return 0.299 * hex2(c + 1) + 0.587 * hex2(c + 3) + 0.114 * hex2(c + 5) > 150;
}

char *rep_num(char *buf, double v) {
  if (!(v == v) || fabs(v) > 1e15) {
    buf[0] = '0', buf[1] = 0;
    return buf;
  }
  long long t = llround(v * 10);
  char tmp[24];
  int n = 0, neg = t < 0;
  unsigned long long a = neg ? 0ULL - (unsigned long long)t : (unsigned long long)t;
  if (a % 10) tmp[n++] = (char)('0' + a % 10), tmp[n++] = '.';
  a /= 10;
  do tmp[n++] = (char)('0' + a % 10), a /= 10;
  while (a);
  int k = 0;
  if (neg) buf[k++] = '-';
  while (n) buf[k++] = tmp[--n];
  buf[k] = 0;
  return buf;
}

void rep_bytes(char *buf, size_t n, double b) {
  if (b >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) snprintf(buf, n, "%.1f KiB", b / 1024.0);
  else snprintf(buf, n, "%.0f B", b);
}

double rep_nice_step(double range, int target) {
  if (!(range > 0) || target < 1) return 1;
  double raw = range / target, p = pow(10.0, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

void rep_ms(char *buf, size_t n, double ms) {
  double a = fabs(ms);
  if (a == 0) snprintf(buf, n, "0");
  else if (a < 0.01) snprintf(buf, n, "%.4f", ms);
  else if (a < 1) snprintf(buf, n, "%.3f", ms);
  else if (a < 100) snprintf(buf, n, "%.2f", ms);
  else snprintf(buf, n, "%.1f", ms);
}

char *rep_fixed(char *buf, double v, int dec) {
  static const double p10[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
  if (dec < 0) dec = 0;
  if (dec > 9) dec = 9;
  if (!(v == v) || fabs(v) * p10[dec] > 9e17) {
    snprintf(buf, 32, "%.*f", dec, v);
    return buf;
  }
  long long t = llround(v * p10[dec]);
  char tmp[32];
  int n = 0, neg = t < 0;
  unsigned long long a = neg ? 0ULL - (unsigned long long)t : (unsigned long long)t;
  for (int i = 0; i < dec; i++) tmp[n++] = (char)('0' + a % 10), a /= 10;
  if (dec) tmp[n++] = '.';
  do tmp[n++] = (char)('0' + a % 10), a /= 10;
  while (a);
  int k = 0;
  if (neg && t) buf[k++] = '-';
  while (n) buf[k++] = tmp[--n];
  buf[k] = 0;
  return buf;
}

const char *rep_node_name(const pass_planned *p, int k) {
  return k >= 0 && k < p->dag.n_nodes && p->dag.nodes[k].name ? p->dag.nodes[k].name : "";
}

const char *rep_node_op(const ir_graph *g, int k) {
  return k >= 0 && k < g->n_nodes && g->nodes[k].op_type ? g->nodes[k].op_type : "?";
}
