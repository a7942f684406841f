/* blasenv.c: makes OpenBLAS use the kernels this CPU can run fastest.
 *
 * Debian's OpenBLAS (0.3.21) is built for many CPUs and picks its kernels
 * at load time from the CPU model. It does not know CPUs newer than itself:
 *   - an AVX-512 Xeon it does not know falls back to "Prescott", its SSE3
 *     kernels: sgemm 4-5x below its SkylakeX kernels (measured 32 vs 150
 *     GFLOP/s on one core);
 *   - an AMD Zen 5 (family 1Ah) gets "Haswell", its AVX2 kernels, though
 *     the core runs AVX-512 at full width: sgemm 97 GFLOP/s on one core
 *     against 189 with SkylakeX's. OpenBLAS's later releases map AMD CPUs
 *     with AVX-512 (Zen 4 and 5) to the SkylakeX and Cooperlake kernels too.
 * So a CPU with SkylakeX's AVX-512 (F, CD, BW, DQ, VL) gets SkylakeX unless
 * OpenBLAS chose an AVX-512 core itself; a CPU with AVX2 that got Prescott
 * gets Haswell. The choice can only be changed through OPENBLAS_CORETYPE
 * before the library loads, so the fix is to set it and re-execute the
 * program once: the library only says which core type would be better (a
 * library never replaces its caller's process); the pipemem binary's main
 * does the exec (src/cli/reexec.c). A user who sets OPENBLAS_CORETYPE (to
 * anything) keeps their choice. */
#include "pipemem/pm_gpt.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS 0.3.21's core types whose sgemm uses AVX-512 */
static int avx512_core(const char *core) {
    static const char *const names[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(core, names[i])) return 1;
    return 0;
}

const char *pm_blas_better_coretype(void) {
    if (getenv("OPENBLAS_CORETYPE")) return NULL;
    const char *core = openblas_get_corename();
    if (!core || avx512_core(core)) return NULL;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (!strcmp(core, "Prescott") && __builtin_cpu_supports("avx2")) return "Haswell";
#endif
    return NULL;
}
