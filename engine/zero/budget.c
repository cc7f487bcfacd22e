/* The engine's buffers fitted to the memory the process may use: under a
 * limit lower than the machine (a memory cgroup, an rlimit), what a config
 * key asks for (a swap's buffer count, the sub-group size its buffers hold,
 * the gathered parameters) is cut to take at most a quarter of that limit,
 * with one line saying so; a cgroup kills the process rather than fail the
 * allocation that would have said it. */
#include <stdio.h>
#include "zero_impl.h"

int64_t zz_fit(const zl_zero *z, const char *key, int64_t asked, int64_t value, int64_t least, int64_t unit)
{
    const char *source;
    int64_t lim = zl_mem_limit(&source), room = lim / 4;
    if (lim >= zl_mem_ram() || unit <= 0 || value <= room / unit) return value;
    int64_t fit = room / unit;
    if (fit < least) fit = least;
    if (fit >= value) return value;
    fprintf(stderr, "zlua: rank %d: %s %lld would take %.0f MiB, more than a quarter of the %.0f MiB this process "
            "may use (%s): using %lld\n", z->rank, key, (long long)asked, (double)value * (double)unit / (1 << 20),
            (double)lim / (1 << 20), source, (long long)fit);
    return fit;
}
