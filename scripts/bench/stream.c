/* The memory-bandwidth ceiling for scripts/bench/adam.lua, which builds and runs
 * it: OpenMP loops over large f32 arrays that move Adam's bytes with next to none
 * of its arithmetic, timed with a monotonic clock.
 *     cc -O3 -march=native -fopenmp stream.c -o stream && ./stream N THREADS REPEATS BLOCK
 * prints "<loop> <bytes per element> <median> <min> <max>", seconds per pass. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Adam's traffic: reads p, g, m, v and writes p, m, v back to the lines it read
 * (28 B). Every load feeds a store, so the compiler cannot drop a stream, and
 * the values stay bounded however many passes run. */
static void adam_pattern(float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, long n)
{
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float gi = g[i];
        float mi = 0.5f * m[i] + gi, vi = 0.5f * v[i] + gi;
        m[i] = mi;
        v[i] = vi;
        p[i] += 1e-3f * (mi - vi);
    }
}

/* A threaded copy: one memcpy per thread over its slice. glibc's memcpy uses
 * streaming stores at these sizes, so the bytes are a read and a write (8 B). */
static void copy(float *restrict dst, const float *restrict src, long n)
{
    #pragma omp parallel
    {
        long nt = omp_get_num_threads(), t = omp_get_thread_num();
        long lo = n * t / nt, hi = n * (t + 1) / nt;
        memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof *dst);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs pass() twice to touch the pages, then `repeats` blocks of enough passes
 * to last `block` seconds; prints the median, min and max seconds per pass. */
static void measure(const char *name, int bytes, void (*pass)(void *), void *arg, int repeats,
                    double block)
{
    double *t = malloc((size_t)repeats * sizeof *t);
    if (!t) { fprintf(stderr, "stream: out of memory\n"); exit(1); }
    pass(arg);
    double t0 = now();
    pass(arg);
    double est = now() - t0;
    long per = est > 0 ? (long)(block / est) + 1 : 1;
    for (int k = 0; k < repeats; k++) {
        t0 = now();
        for (long r = 0; r < per; r++) pass(arg);
        t[k] = (now() - t0) / (double)per;
    }
    qsort(t, (size_t)repeats, sizeof *t, cmp);
    double med = repeats % 2 ? t[repeats / 2] : (t[repeats / 2 - 1] + t[repeats / 2]) / 2;
    printf("%s %d %.9g %.9g %.9g\n", name, bytes, med, t[0], t[repeats - 1]);
    fflush(stdout);
    free(t);
}

typedef struct arrays { float *p, *g, *m, *v; long n; } arrays;

static void run_adam(void *a) { arrays *x = a; adam_pattern(x->p, x->g, x->m, x->v, x->n); }
static void run_copy(void *a) { arrays *x = a; copy(x->m, x->p, x->n); }

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: stream N THREADS REPEATS BLOCK_SECONDS\n");
        return 2;
    }
    long n = atol(argv[1]);
    int threads = atoi(argv[2]), repeats = atoi(argv[3]);
    double block = atof(argv[4]);
    if (n < 1 || threads < 1 || repeats < 1 || !(block > 0)) {
        fprintf(stderr, "stream: N, THREADS and REPEATS must be positive integers, BLOCK positive\n");
        return 2;
    }
    omp_set_num_threads(threads);
    arrays x = {.n = n};
    float **bufs[] = {&x.p, &x.g, &x.m, &x.v};
    for (int k = 0; k < 4; k++) {
        *bufs[k] = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
        if (!*bufs[k]) { fprintf(stderr, "stream: cannot allocate 4 x %ld floats\n", n); return 1; }
    }
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        x.p[i] = 1.0f;
        x.g[i] = 1e-3f;
        x.m[i] = 0.0f;
        x.v[i] = 0.0f;
    }
    measure("copy", 8, run_copy, &x, repeats, block);
    measure("adam", 28, run_adam, &x, repeats, block);
    for (int k = 0; k < 4; k++) free(*bufs[k]);
    return 0;
}
