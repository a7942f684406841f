/* mem.c: this machine's memory as the library asks it before it
 * allocates: physical, available now (a cgroup's limit counted), and this
 * process's peak resident set. Linux's /proc and /sys files; 0 where the
 * system does not say. */
#include "pipemem/pm_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t pm_mem_physical(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psize <= 0) return 0;
    return (size_t)pages * (size_t)psize;
}

/* The number after `key` in a /proc/meminfo-like file (kB there), or -1. */
static long long file_number(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    char line[256];
    long long x = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl)) {
            char *end;
            x = strtoll(line + kl, &end, 10);
            if (end == line + kl) x = -1;
            break;
        }
    if (f) fclose(f);
    return x;
}

size_t pm_mem_available(void) {
    long long kb = file_number("/proc/meminfo", "MemAvailable:");
    double have = kb >= 0 ? (double)kb * 1024 : (double)pm_mem_physical();
    /* a cgroup (v2) limit below it, as in a container */
    long long max = file_number("/sys/fs/cgroup/memory.max", "");
    long long cur = file_number("/sys/fs/cgroup/memory.current", "");
    if (max > 0 && cur >= 0 && (double)(max - cur) < have)
        have = max > cur ? (double)(max - cur) : 0;
    return (size_t)have;
}

size_t pm_mem_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            kb = (size_t)strtoull(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}
