/* The round trip of one cache line between two cores, probed every few hundred milliseconds; bench/bench_latency.py
 * compiles and runs it (Python's interpreter is too slow to time a 100-ns hand-over).
 *
 * Usage: core_latency SECONDS PERIOD_MS ROUNDS CPU_A CPU_B
 * A thread pinned to CPU_A and one pinned to CPU_B pass a counter back and forth ROUNDS times (CPU_A writes
 * 2i+1, CPU_B answers 2i+2), five times per probe. Each probe prints one line:
 *   unix_time median_ns min_ns monotonic_time
 * the median and the fastest of the five, in nanoseconds per round trip, and the time again on CLOCK_MONOTONIC
 * (Python's time.perf_counter on Linux, the clock of bench/interleave.py's turns). Exit 3: a CPU cannot be pinned. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define REPEATS 5

static _Alignas(64) atomic_long ball;     /* the line that travels */
static _Alignas(64) atomic_long requests; /* how many bursts CPU_B should answer */
static long rounds;

static double seconds_now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        fprintf(stderr, "core_latency: cannot pin a thread to CPU %d\n", cpu);
        exit(3);
    }
}

static void *answer(void *cpu) {
    pin(*(int *)cpu);
    for (long served = 0;; served++) {
        while (atomic_load(&requests) == served)
            usleep(100); /* idle between probes: leave the core to others */
        for (long i = 0; i < rounds; i++) {
            while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 1)
                ;
            atomic_store_explicit(&ball, 2 * i + 2, memory_order_release);
        }
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: core_latency SECONDS PERIOD_MS ROUNDS CPU_A CPU_B\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    long period_ms = atol(argv[2]);
    rounds = atol(argv[3]);
    int cpu_a = atoi(argv[4]), cpu_b = atoi(argv[5]);
    pthread_t other;
    pin(cpu_a);
    pthread_create(&other, NULL, answer, &cpu_b);
    double end = seconds_now(CLOCK_MONOTONIC) + seconds, ns[REPEATS];
    while (seconds_now(CLOCK_MONOTONIC) < end) {
        for (int k = 0; k < REPEATS; k++) {
            atomic_store(&ball, 0);
            atomic_fetch_add(&requests, 1);
            double began = seconds_now(CLOCK_MONOTONIC);
            for (long i = 0; i < rounds; i++) {
                atomic_store_explicit(&ball, 2 * i + 1, memory_order_release);
                while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 2)
                    ;
            }
            ns[k] = (seconds_now(CLOCK_MONOTONIC) - began) / rounds * 1e9;
        }
        qsort(ns, REPEATS, sizeof ns[0], by_value);
        printf("%.3f %.1f %.1f %.4f\n", seconds_now(CLOCK_REALTIME), ns[REPEATS / 2], ns[0],
               seconds_now(CLOCK_MONOTONIC));
        fflush(stdout);
        usleep(period_ms * 1000);
    }
    return 0;
}
