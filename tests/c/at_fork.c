/* Test producer for tests/test_client_c.py: events before and after fork(), in parent and child. */
#include <sys/wait.h>
#include "acceltrace.h"

int main(void) {
    if (at_init(NULL) != 0) return 3;
    uint32_t parent = at_intern("parent"), child = at_intern("child");
    for (int i = 0; i < 10; i++) at_complete(parent, AT_LANE_CPU, at_now(), 1, (uint64_t)i + 1, 0);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 20; i++) at_complete(child, AT_LANE_CPU, at_now(), 1, (uint64_t)i + 1, 0);
        at_flush();
        at_shutdown();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    for (int i = 10; i < 20; i++) at_complete(parent, AT_LANE_CPU, at_now(), 1, (uint64_t)i + 1, 0);
    at_flush();
    at_shutdown();
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 5;
}
