/* reexec.h: re-execute with OpenBLAS's fast kernels (reexec.c). Called
 * first in main() by the pipemem binary and the benchmarks; returns only
 * when nothing needs doing or the exec failed. A user's own
 * OPENBLAS_CORETYPE is kept. */
#ifndef PM_CLI_REEXEC_H
#define PM_CLI_REEXEC_H

void pm_cli_blas_reexec(char **argv);

#endif
