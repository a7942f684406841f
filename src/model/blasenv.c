/* blasenv.c: makes OpenBLAS use the kernels this CPU can run fastest.
 *
 * Debian's OpenBLAS (0.3.21) is built for many CPUs and picks its kernels
 * at load time from the CPU model. On CPUs newer than the library (here an
 * AVX-512 Xeon it does not know) it falls back to "Prescott", its SSE3
 * kernels, and sgemm runs 4-5x below what the same library reaches with its
 * SkylakeX kernels (measured 32 vs 150 GFLOP/s on one core). The choice can
 * only be changed through OPENBLAS_CORETYPE before the library loads, so
 * the fix is to set it and re-execute the program once: the library only
 * says which core type would be better (a library never replaces its
 * caller's process); the pipemem binary's main does the exec
 * (src/cli/reexec.c). A user who sets OPENBLAS_CORETYPE (to anything) keeps
 * their choice; a CPU OpenBLAS recognises is left alone. */
#include "pipemem/pm_gpt.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "model/internal.h"

const char *pm_blas_better_coretype(void) {
    if (getenv("OPENBLAS_CORETYPE")) return NULL;
    const char *core = openblas_get_corename();
    if (!core || strcmp(core, "Prescott") != 0) return NULL;
#ifdef PM_X86_GNU
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "Haswell";
#endif
    return NULL;
}
