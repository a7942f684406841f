/* reexec.c: the CLI's (and the benchmarks') first act: if OpenBLAS fell
 * back to slow generic kernels on a CPU it does not know, set
 * OPENBLAS_CORETYPE and re-execute the program once (pm_blas_better_coretype
 * in the library says which core type; only a program's main may replace
 * its process, so the exec lives here, not in libpipemem). */
#include "reexec.h"

#include <stdlib.h>
#include <unistd.h>

#include "pipemem/pm_gpt.h"

void pm_cli_blas_reexec(char **argv) {
    const char *better = pm_blas_better_coretype();
    if (!better || setenv("OPENBLAS_CORETYPE", better, 1) != 0) return;
    /* Exec the resolved path, not /proc/self/exe, so ps and top keep
     * showing the program's own name. */
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n > 0) {
        path[n] = 0;
        execv(path, argv);
    }
    unsetenv("OPENBLAS_CORETYPE"); /* exec failed: carry on with what we have */
}
