/* Test producer for tests/test_client_c.py: N events per thread from T threads, through acceltrace.h. */
#include "acceltrace.h"

static long n_events;
static uint32_t name_id;

static void *work(void *arg) {
    long k = (long)arg;
    for (long j = 0; j < n_events; j++) {
        int64_t t0 = at_now();
        at_complete(name_id, AT_LANE_CPU, t0, at_now() - t0, (uint64_t)((k << 32) | (j + 1)), 0);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    n_events = atol(argv[1]);
    int threads = atoi(argv[2]);
    if (at_init(NULL) != 0) { fprintf(stderr, "no daemon\n"); return 3; }
    name_id = at_intern("c \"quoted\" op");
    uint32_t unit = at_intern("B/s");
    at_counter(at_intern("throughput"), 1.5e9, unit);
    pthread_t th[64];
    for (long k = 0; k < threads; k++) pthread_create(&th[k], NULL, work, (void *)(k + 1));
    for (int k = 0; k < threads; k++) pthread_join(th[k], NULL);
    at_record r;
    memset(&r, 0, sizeof r);
    r.kind = AT_COMPLETE; r.lane = AT_LANE_PCIE; r.device = 0; r.direction = AT_DIR_H2D; r.mem = AT_MEM_PINNED;
    r.flags = AT_FLAG_HAS_BYTES; r.bytes = 1 << 20; r.name = at_intern("DMA"); r.clock = AT_CLOCK_DOMAIN; r.ts = at_now(); r.dur = 1000;
    at_write(&r);
    if (at_flush() != 0) return 4;
    at_shutdown();
    return 0;
}
