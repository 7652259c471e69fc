/* bench/trace_overhead.py's C producer: ns per complete span (two timestamps + one record). */
#include "acceltrace.h"

/* CPU time of this thread: on a shared, oversubscribed machine, wall time would count other
 * processes' time slices; the cost of tracing is the CPU the traced thread spends. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    if (at_init(NULL) != 0) { fprintf(stderr, "no daemon\n"); return 3; }
    uint32_t name = at_intern("bench span");
    for (long i = 0; i < 1000; i++) at_complete(name, AT_LANE_CPU, at_now(), 1, 0, 0); /* ring mapped, warm */
    volatile uint64_t sink = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        int64_t a = at_now();
        sink += (uint64_t)i; /* the "work" inside the span */
        at_complete(name, AT_LANE_CPU, a, at_now() - a, (uint64_t)i + 1, 0);
    }
    double t1 = now_s();
    for (long i = 0; i < n; i++) sink += (uint64_t)at_now();
    double t2 = now_s();
    /* the record alone (timestamps given): the ring's reservation, the 64-byte store, the publish */
    for (long i = 0; i < n; i++) at_complete(name, AT_LANE_CPU, (int64_t)i, 1, (uint64_t)i + 1, 0);
    double t3 = now_s();
    printf("{\"ns_per_span\": %.2f, \"ns_per_clock_read\": %.2f, \"ns_per_record\": %.2f, \"events\": %ld}\n",
           (t1 - t0) * 1e9 / n, (t2 - t1) * 1e9 / n, (t3 - t2) * 1e9 / n, n);
    at_flush();
    at_shutdown();
    return 0;
}
