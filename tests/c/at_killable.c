/* Test producer for tests/test_traced_kill.py: spans numbered corr = k << 32 | seq until told to stop.
 * argv: control file (int64 slots: [0] attempted, [1] stop flag, [2] pid), k. */
#include "acceltrace.h"
#include <fcntl.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) return 4;
    volatile int64_t *ctl = (volatile int64_t *)mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ctl == MAP_FAILED) return 5;
    uint64_t k = (uint64_t)atol(argv[2]);
    if (at_init(NULL) != 0) { fprintf(stderr, "no daemon\n"); return 3; }
    uint32_t name = at_intern("e");
    ctl[2] = getpid();
    for (int64_t j = 1; !ctl[1]; j++) {
        ctl[0] = j; /* attempted: stored before the event is written */
        int64_t t0 = at_now();
        at_complete(name, AT_LANE_CPU, t0, at_now() - t0, (k << 32) | (uint64_t)j, 0);
        if (j % 2000 == 0) usleep(1000); /* leave the small test machine's CPUs to the daemon now and then */
    }
    at_shutdown(); /* the daemon it connected to is gone: a no-op reply-wise; its ring is drained anyway */
    return 0;
}
