/* rt_cpu: the CPU's instruction sets (cpuid), the kernels the pipeline runs on it (the
 * BLAS core, pipecc's direct GEMM variant), and the correction of a BLAS core choice
 * that falls short of the CPU.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels once, in a constructor
 * that runs before main, from its own table of CPU models; on a model it does not know
 * it can fall back to its Prescott (SSE3) kernels on a CPU with AVX-512. The choice can
 * only be changed before that constructor runs, through OPENBLAS_CORETYPE, so the
 * pipeline compares openblas_get_corename() with the best core the CPU supports and,
 * where the library's core is of a lower class, executes itself once more with
 * OPENBLAS_CORETYPE set to that core. The rule (docs/cpu.md, "The BLAS core"):
 *
 *   - PIPERT_BLAS_REEXEC (set by the pipeline on that second start, to the core the
 *     library first chose) stops it from doing so twice;
 *   - an OPENBLAS_CORETYPE set by the user is kept as it is (a warning where it is of a
 *     lower class than the CPU's), unless PIPERT_BLAS_CORE=fix: then it counts as the
 *     library's own choice, which is how the tests simulate a failed detection
 *     (OPENBLAS_CORETYPE=Prescott PIPERT_BLAS_CORE=fix);
 *   - PIPERT_BLAS_CORE=keep never corrects (reports only): the legacy kernels, to time
 *     them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "rt.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define RT_X86 1
#endif

extern char *openblas_get_corename(void) __attribute__((weak));
extern char *openblas_get_config(void) __attribute__((weak));

/* ---- the CPU ------------------------------------------------------------- */

typedef struct {
  int sse3, ssse3, sse42, avx, avx2, fma, avx512f, avx512bw, avx512dq, avx512vl, avx512cd, avx512bf16, avx512vnni,
      avx512fp16, amx, amd;
  char brand[49];
} rt_cpu_info;

#ifdef RT_X86
static unsigned long long rt_xgetbv0(void) {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((unsigned long long)hi << 32) | lo;
}
#endif

static void cpu_probe(rt_cpu_info *c) {
  memset(c, 0, sizeof *c);
#ifdef RT_X86
  unsigned a, b, cx, d, max = __get_cpuid_max(0, NULL);
  if (max < 1) return;
  __cpuid(0, a, b, cx, d);
  c->amd = b == 0x68747541u || b == 0x6f677948u; /* "AuthenticAMD", "HygonGenuine" */
  __cpuid(1, a, b, cx, d);
  c->sse3 = cx & 1;
  c->ssse3 = (cx >> 9) & 1;
  c->sse42 = (cx >> 20) & 1;
  int osxsave = (cx >> 27) & 1, avx = (cx >> 28) & 1, fma = (cx >> 12) & 1;
  /* the OS must save the registers: XMM|YMM for AVX, and opmask|ZMM for AVX-512 */
  unsigned long long xcr0 = osxsave ? rt_xgetbv0() : 0;
  int os_ymm = (xcr0 & 6) == 6, os_zmm = (xcr0 & 0xe6) == 0xe6;
  c->avx = avx && os_ymm;
  c->fma = fma && c->avx;
  if (max >= 7) {
    __cpuid_count(7, 0, a, b, cx, d);
    c->avx2 = c->avx && ((b >> 5) & 1);
    if (os_zmm) {
      c->avx512f = (b >> 16) & 1;
      c->avx512dq = (b >> 17) & 1;
      c->avx512cd = (b >> 28) & 1;
      c->avx512bw = (b >> 30) & 1;
      c->avx512vl = (b >> 31) & 1;
      c->avx512vnni = (cx >> 11) & 1;
      c->avx512fp16 = (d >> 23) & 1;
      unsigned a1, b1, c1, d1;
      __cpuid_count(7, 1, a1, b1, c1, d1);
      c->avx512bf16 = (a1 >> 5) & 1;
      (void)b1, (void)c1, (void)d1;
    }
    c->amx = (d >> 24) & 1; /* AMX-TILE */
  }
  if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) { /* int in clang's cpuid.h */
    unsigned r[12];
    for (unsigned k = 0; k < 3; k++) __cpuid(0x80000002u + k, r[4 * k], r[4 * k + 1], r[4 * k + 2], r[4 * k + 3]);
    memcpy(c->brand, r, 48);
    c->brand[48] = 0;
  }
#endif
  /* trim the brand string's padding */
  char *s = c->brand;
  while (*s == ' ') s++;
  memmove(c->brand, s, strlen(s) + 1);
  for (size_t n = strlen(c->brand); n > 0 && c->brand[n - 1] == ' '; n--) c->brand[n - 1] = 0;
}

static const rt_cpu_info *cpu(void) {
  static rt_cpu_info c;
  static int done;
  if (!done) {
    cpu_probe(&c);
    done = 1;
  }
  return &c;
}

/* Classes of kernels: 0 SSE2/SSE3 (Prescott and its kind), 1 SSSE3/SSE4, 2 AVX, 3 AVX2 and
 * FMA, 4 AVX-512 (F, CD, BW, DQ, VL: what OpenBLAS's SkylakeX kernels use). */
static int cpu_class(const rt_cpu_info *c) {
  if (c->avx512f && c->avx512cd && c->avx512bw && c->avx512dq && c->avx512vl) return 4;
  if (c->avx2 && c->fma) return 3;
  if (c->avx) return 2;
  if (c->ssse3) return 1;
  return 0;
}

/* The OpenBLAS 0.3.21 core (its OPENBLAS_CORETYPE name) for the CPU's best class. */
static const char *cpu_best_core(const rt_cpu_info *c) {
  switch (cpu_class(c)) {
    case 4: return c->avx512bf16 ? "Cooperlake" : "SkylakeX";
    case 3: return c->amd ? "Zen" : "Haswell";
    case 2: return "Sandybridge";
    case 1: return c->sse42 ? "Nehalem" : "Core2";
    default: return "Prescott";
  }
}

/* The class of an OpenBLAS core name; -1 for a name this table does not know (no
 * correction then). */
static int core_class(const char *name) {
  static const struct {
    const char *name;
    int cls;
  } t[] = {{"Katmai", 0},       {"Coppermine", 0},  {"Northwood", 0},    {"Prescott", 0},   {"Banias", 0},
           {"Athlon", 0},       {"Opteron", 0},     {"Opteron(SSE3)", 0}, {"Barcelona", 0},  {"Bobcat", 0},
           {"Atom", 1},         {"Core2", 1},       {"Penryn", 1},       {"Dunnington", 1}, {"Nehalem", 1},
           {"Nano", 1},         {"Sandybridge", 2}, {"Bulldozer", 2},    {"Piledriver", 2}, {"Steamroller", 2},
           {"Excavator", 2},    {"Haswell", 3},     {"Zen", 3},          {"SkylakeX", 4},   {"Cooperlake", 4},
           {"SapphireRapids", 4}};
  if (!name) return -1;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcasecmp(name, t[i].name)) return t[i].cls;
  return -1;
}

const char *rt_cpu_brand(void) { return cpu()->brand[0] ? cpu()->brand : "unknown CPU"; }

void rt_cpu_isa(char *buf, size_t n) {
  const rt_cpu_info *c = cpu();
  snprintf(buf, n, "%s%s%s%s%s%s%s", cpu_class(c) == 4 ? "AVX-512 (F, CD, BW, DQ, VL" : c->avx2 ? "AVX2" : c->avx ? "AVX" : c->sse42 ? "SSE4.2" : "SSE2",
           cpu_class(c) == 4 && c->avx512vnni ? ", VNNI" : "", cpu_class(c) == 4 && c->avx512bf16 ? ", BF16" : "",
           cpu_class(c) == 4 && c->avx512fp16 ? ", FP16" : "", cpu_class(c) == 4 ? ")" : "",
           cpu_class(c) == 3 || cpu_class(c) == 4 ? (c->fma ? ", FMA" : "") : "", c->amx ? ", AMX" : "");
}

/* pipecc's direct GEMM (runtime/pipert_gemm.h): the variant its dispatch,
 * pipert_gemm_direct, takes on this CPU (a stage compiled with -DPIPERT_KERNELS_INLINE -DPIPERT_GEMM_NO_AVX512
 * takes the AVX2 one on an AVX-512 CPU). */
const char *rt_gemm_variant(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx512f")) return "avx512 (6x64 tiles)";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2 (6x16 tiles)";
#endif
  return "portable (fmaf)";
}

/* ---- the BLAS core ------------------------------------------------------- */

static char blas_note[256]; /* what rt_blas_check found or did, for rt_kernels_line */

const char *rt_blas_core(void) { return openblas_get_corename ? openblas_get_corename() : NULL; }

void rt_blas_check(char **argv) {
  const char *core = rt_blas_core();
  if (!core) return; /* not OpenBLAS (or not linked): nothing to check */
  const rt_cpu_info *c = cpu();
  const char *best = cpu_best_core(c), *mode = getenv("PIPERT_BLAS_CORE"), *marker = getenv("PIPERT_BLAS_REEXEC");
  const char *user = getenv("OPENBLAS_CORETYPE");
  int have = core_class(core), want = cpu_class(c);
  if (marker && *marker) {
    if (have >= 0 && have < want)
      snprintf(blas_note, sizeof blas_note, " (OpenBLAS chose %s; OPENBLAS_CORETYPE=%s did not take: below the CPU)",
               marker, best);
    else snprintf(blas_note, sizeof blas_note, " (corrected: OpenBLAS chose %s)", marker);
    return;
  }
  if (have < 0 || have >= want) return;
  int fix = mode && !strcmp(mode, "fix"), keep = mode && !strcmp(mode, "keep");
  if (user && *user && !fix) {
    snprintf(blas_note, sizeof blas_note, " (OPENBLAS_CORETYPE=%s kept; the CPU supports %s)", user, best);
    fprintf(stderr, "pipeline: warning: OPENBLAS_CORETYPE=%s runs BLAS kernels below this CPU's (%s)\n", user, best);
    return;
  }
  const char *cfg = openblas_get_config ? openblas_get_config() : "";
  if (keep || !cfg || !strstr(cfg, "DYNAMIC_ARCH")) {
    snprintf(blas_note, sizeof blas_note, " (below the CPU's %s%s)", best,
             keep ? "; PIPERT_BLAS_CORE=keep" : "; OpenBLAS without DYNAMIC_ARCH cannot change it");
    fprintf(stderr, "pipeline: warning: OpenBLAS runs its %s kernels on a CPU that supports %s\n", core, best);
    return;
  }
  setenv("PIPERT_BLAS_REEXEC", core, 1);
  setenv("OPENBLAS_CORETYPE", best, 1);
  if (rt_env_on("PIPERT_VERBOSE"))
    fprintf(stderr, "pipeline: OpenBLAS chose its %s kernels on a CPU that supports %s: restarting with OPENBLAS_CORETYPE=%s\n",
            core, best, best);
  fflush(NULL);
  execv("/proc/self/exe", argv);
  /* could not restart: run on as it is, and say so */
  unsetenv("PIPERT_BLAS_REEXEC");
  if (user) setenv("OPENBLAS_CORETYPE", user, 1);
  else unsetenv("OPENBLAS_CORETYPE");
  snprintf(blas_note, sizeof blas_note, " (below the CPU's %s; the restart failed)", best);
  fprintf(stderr, "pipeline: warning: OpenBLAS runs its %s kernels on a CPU that supports %s\n", core, best);
}

void rt_kernels_line(char *buf, size_t n) {
  char isa[128];
  rt_cpu_isa(isa, sizeof isa);
  const char *core = rt_blas_core();
  snprintf(buf, n, "kernels: %s, %s; BLAS core %s%s; pipecc GEMM %s", rt_cpu_brand(), isa, core ? core : "none (no OpenBLAS linked: the stages call no BLAS)",
           blas_note, rt_gemm_variant());
}
