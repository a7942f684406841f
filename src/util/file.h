/* file.h: the file helpers the library's readers and writers share beyond
 * pm_util.h's, private to the library (file.c). */
#ifndef PM_UTIL_FILE_H
#define PM_UTIL_FILE_H

#include <stdio.h>

#include "pipemem/pm_util.h"

/* Opens path for reading without ever blocking on it: a directory, a FIFO
 * or a socket is refused in one line (a FIFO without a writer would hang
 * the open), and with regular_only anything but a regular file. */
pm_status pm_file_open_read(const char *path, int regular_only, FILE **out, pm_err *err);

/* A new temporary for PATH, beside it: PATH.tmp.PID.N.TAG, created
 * exclusively (never through an existing name or a symlink), write-only or
 * with rdwr read-write. TAG is a hash of the rest of the name, so the
 * temporaries a killed writer left can be told from a user's files and
 * removed (pm_wfile_open and pm_path_check_writable remove those whose
 * process is gone, and nothing else). Returns the descriptor, its name in
 * *tmp (pm_malloc'd, the caller frees), or -1 with errno set. */
int pm_tmp_open(const char *path, int rdwr, char **tmp);

#endif
