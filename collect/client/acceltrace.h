/* acceltrace.h: header-only C client for the acceltrace tracing daemon (docs/tracing.md).
 *
 * Writes the same 64-byte records as the Python client (docs/formats.md) into a per-thread
 * shared-memory ring handed out by `acceltrace traced`. No syscall and no allocation per
 * event: a record is a struct copy plus a release store of the ring's write index.
 *
 *   #include "acceltrace.h"
 *   at_init(NULL);                                   // $ACCELTRACE_SOCKET, or a path
 *   uint32_t k = at_intern("gemm");                  // intern names once
 *   int64_t t0 = at_now();  ...  at_complete(k, AT_LANE_CPU, t0, at_now() - t0, corr, 0);
 *   (at_now() is in the ticks of clock domain AT_CLOCK_DOMAIN: the TSC on x86-64, else host ns;
 *    records you fill yourself for at_write take .clock = AT_CLOCK_DOMAIN with at_now() values)
 *   at_shutdown();
 *
 * Thread-safe: each thread gets its own ring on first use (one socket round trip).
 * If no daemon is reachable, at_init returns -1 and every call is a cheap no-op that
 * counts the event in at_dropped_without_daemon().
 * Build: cc -O2 -pthread yourfile.c (Linux, x86-64 or arm64; GCC or Clang; C11 or C++11).
 * All state is static: each translation unit that includes this header is its own producer
 * (its own connection and stream). Include it in the one file that owns tracing.
 */
#ifndef ACCELTRACE_H
#define ACCELTRACE_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { AT_COMPLETE = 1, AT_BEGIN = 2, AT_END = 3, AT_INSTANT = 4, AT_COUNTER = 5, AT_TRACK_NAME = 6,
       AT_PROCESS_NAME = 7 };
enum { AT_LANE_CPU = 0, AT_LANE_DRIVER = 1, AT_LANE_PCIE = 2, AT_LANE_EU = 3, AT_LANE_COUNTER = 4 };
enum { AT_DIR_NONE = 0, AT_DIR_H2D = 1, AT_DIR_D2H = 2, AT_DIR_D2D = 3, AT_DIR_P2P = 4 };
enum { AT_MEM_NONE = 0, AT_MEM_PAGEABLE = 1, AT_MEM_PINNED = 2, AT_MEM_DEVICE = 3, AT_MEM_MANAGED = 4 };
enum { AT_FLAG_FLOW_OUT = 1, AT_FLAG_FLOW_IN = 2, AT_FLAG_HAS_BYTES = 4, AT_FLAG_HAS_CORR = 8 };
#define AT_NO_DEVICE 255
#ifndef AT_REPLY_TIMEOUT_S
#define AT_REPLY_TIMEOUT_S 10 /* seconds a daemon may take to answer before a call reports failure */
#endif
#define AT__API static inline __attribute__((unused))

/* The record, byte for byte as docs/formats.md specifies. */
typedef struct at_record {
    uint8_t kind, lane, clock, direction, mem, flow_kind, flags, device;
    uint32_t name, cat, pid, tid;
    int64_t ts, dur;
    uint64_t corr, bytes;
    uint32_t flow, args;
} at_record;

#ifdef __cplusplus
#define AT__STATIC_ASSERT static_assert
#else
#define AT__STATIC_ASSERT _Static_assert
#endif
AT__STATIC_ASSERT(sizeof(at_record) == 64, "record is 64 bytes");
AT__STATIC_ASSERT(offsetof(at_record, name) == 8 && offsetof(at_record, tid) == 20, "record layout");
AT__STATIC_ASSERT(offsetof(at_record, ts) == 24 && offsetof(at_record, corr) == 40, "record layout");
AT__STATIC_ASSERT(offsetof(at_record, flow) == 56 && offsetof(at_record, args) == 60, "record layout");

/* Ring header offsets (formats/ring.py). */
#define AT__RING_MAGIC 0x474E5241u
#define AT__WRITE_OFF 64
#define AT__READ_OFF 128
#define AT__LOST_OFF 192
#define AT__DATA_OFF 4096

typedef struct at__thread {
    at_record *data;
    uint64_t *write_idx, *read_idx, *lost_idx;
    uint64_t mask, cap, w, limit, lost;
    uint32_t tid;
    int ring_mode, tried;
    void *map;
    size_t map_bytes;
} at__thread;

typedef struct at__global {
    int fd; /* the socket, -1 when not connected */
    pthread_mutex_t lock;
    int ring_mode;
    uint32_t pid;
    uint64_t dropped_no_daemon;
    /* interned strings: open addressing over (hash, id); texts kept for lookups */
    size_t n_strings, cap_strings;
    char **texts;
    uint32_t *ids;
    uint32_t next_id;
} at__global;

static at__global at__g = {-1, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, NULL, NULL, 1};
static __thread at__thread at__t;

/* Host CLOCK_MONOTONIC in ns (clock domain 0). */
AT__API int64_t at_host_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Timestamps: on x86-64 the TSC (a few ns to read, where clock_gettime costs tens), recorded in
 * clock domain AT_CLOCK_DOMAIN; the client sends (CLOCK_MONOTONIC ns, TSC) pairs at connect, about
 * every 100 ms while events flow, and at shutdown, and ingest maps ticks to host ns between them.
 * Define AT_USE_CLOCK_MONOTONIC to record host ns directly instead. */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(AT_USE_CLOCK_MONOTONIC)
#include <x86intrin.h>
#define AT__TSC 1
#define AT_CLOCK_DOMAIN 254
#else
#define AT__TSC 0
#define AT_CLOCK_DOMAIN 0
#endif

static uint64_t at__next_sync = UINT64_MAX; /* TSC value at which the next sync pair is due */
static uint64_t at__sync_every = 0;          /* ticks between sync pairs (~100 ms) */
AT__API int at__send(const char *json, size_t n);

/* One (host ns, TSC) pair; the host time is the midpoint of two clock reads around the TSC read. */
AT__API void at__sync_pair_locked(void) {
#if AT__TSC
    int64_t a = at_host_ns();
    uint64_t tsc = __rdtsc();
    int64_t b = at_host_ns();
    if (at__g.fd >= 0) {
        char msg[160];
        int n = snprintf(msg, sizeof msg, "{\"op\":\"sync\",\"domain\":%d,\"pairs\":[[%lld,%llu]]}",
                         AT_CLOCK_DOMAIN, (long long)(a + (b - a) / 2), (unsigned long long)tsc);
        at__send(msg, (size_t)n);
    }
    __atomic_store_n(&at__next_sync, at__g.fd >= 0 ? tsc + at__sync_every : UINT64_MAX, __ATOMIC_RELAXED);
#endif
}

static __attribute__((noinline)) void at__sync_slow(void) {
    if (pthread_mutex_trylock(&at__g.lock) != 0) return; /* busy: the next at_now() tries again */
    at__sync_pair_locked();
    pthread_mutex_unlock(&at__g.lock);
}

/* Now, in the ticks of AT_CLOCK_DOMAIN. */
AT__API int64_t at_now(void) {
#if AT__TSC
    uint64_t t = __rdtsc();
    if (__builtin_expect(t >= __atomic_load_n(&at__next_sync, __ATOMIC_RELAXED), 0)) at__sync_slow();
    return (int64_t)t;
#else
    return at_host_ns();
#endif
}

/* ---- socket messages: u32 length + JSON ---------------------------------------------------- */
AT__API int at__send(const char *json, size_t n) {
    uint32_t len = (uint32_t)n;
    char head[4];
    memcpy(head, &len, 4);
    if (send(at__g.fd, head, 4, MSG_NOSIGNAL) != 4) return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t k = send(at__g.fd, json + done, n - done, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

/* Reads exactly n bytes; takes a passed fd (SCM_RIGHTS) if one comes with them. */
AT__API int at__recv_exact(void *dst, size_t n, int *fd_out) {
    char cbuf[CMSG_SPACE(sizeof(int))];
    size_t got = 0;
    while (got < n) {
        struct iovec iov = {(char *)dst + got, n - got};
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        ssize_t k = recvmsg(at__g.fd, &mh, 0);
        if (k <= 0) return -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && fd_out)
            memcpy(fd_out, CMSG_DATA(c), sizeof(int));
        got += (size_t)k;
    }
    return 0;
}

/* Receives one reply into buf (NUL-terminated); takes a passed fd if any. */
AT__API int at__recv(char *buf, size_t cap, int *fd_out) {
    uint32_t len = 0;
    if (at__recv_exact(&len, 4, fd_out) != 0 || len >= cap) return -1;
    if (at__recv_exact(buf, len, fd_out) != 0) return -1;
    buf[len] = 0;
    return strstr(buf, "\"ok\":true") ? 0 : -1;
}

AT__API long long at__json_int(const char *json, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    return p ? atoll(p + strlen(pat)) : -1;
}

/* JSON string escaping for names (quotes, backslashes, control characters). */
AT__API size_t at__escape(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s && o + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[o++] = '\\'; out[o++] = (char)c; }
        else if (c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
    return o;
}

/* ---- connection ------------------------------------------------------------------------------ */
/* Connects to the daemon (path NULL: $ACCELTRACE_SOCKET). 0 on success, -1 if none is reachable. */
static char at__path[sizeof(((struct sockaddr_un *)0)->sun_path)];
AT__API void at__resend_strings_locked(void);

/* Connects and says hello (lock held). 0 on success. */
AT__API int at__connect_locked(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    strcpy(addr.sun_path, path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) { close(fd); return -1; }
    /* a daemon that accepts but never answers (stopped with Ctrl-Z, hung) must not hang the traced
       program: replies and sends give up after 10 s, and the call reports failure */
    struct timeval tv = {AT_REPLY_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    at__g.fd = fd;
    at__g.pid = (uint32_t)getpid();
    char msg[512], reply[512];
    /* $ACCELTRACE_RING_RECORDS asks for a ring size per thread (the daemon rounds and bounds it) */
    const char *rr = getenv("ACCELTRACE_RING_RECORDS");
    long long ring_records = rr ? atoll(rr) : 0;
    int n = ring_records > 0
        ? snprintf(msg, sizeof msg, "{\"op\":\"hello\",\"pid\":%u,\"version\":1,\"name\":\"c-client\","
                   "\"ring_records\":%lld}", at__g.pid, ring_records)
        : snprintf(msg, sizeof msg, "{\"op\":\"hello\",\"pid\":%u,\"version\":1,\"name\":\"c-client\"}",
                   at__g.pid);
    if (at__send(msg, (size_t)n) != 0 || at__recv(reply, sizeof reply, NULL) != 0) {
        close(fd);
        at__g.fd = -1;
        return -1;
    }
    at__g.ring_mode = strstr(reply, "\"mode\":\"ring\"") != NULL;
    at__resend_strings_locked(); /* after a fork: the new stream must know the ids interned before */
#if AT__TSC
    /* ticks per ns, measured over ~2 ms, only to space the sync pairs */
    int64_t h0 = at_host_ns();
    uint64_t k0 = __rdtsc();
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
    double per_ns = (double)(__rdtsc() - k0) / (double)(at_host_ns() - h0);
    at__sync_every = (uint64_t)(per_ns * 1e8);
    n = snprintf(msg, sizeof msg, "{\"op\":\"metadata\",\"data\":{\"clock_domains\":[{\"id\":%d,"
                 "\"name\":\"tsc\",\"kind\":\"host-tsc\",\"hz\":%.0f}]}}", AT_CLOCK_DOMAIN, per_ns * 1e9);
    at__send(msg, (size_t)n);
    at__sync_pair_locked();
#endif
    return 0;
}

/* fork: the child must not write into its parent's ring (one producer per ring) nor talk on its
 * socket; it reconnects with its own stream on its first event. */
static void at__fork_prepare(void) { pthread_mutex_lock(&at__g.lock); }
static void at__fork_parent(void) { pthread_mutex_unlock(&at__g.lock); }
static void at__fork_child(void) {
    pthread_mutex_init(&at__g.lock, NULL);
    if (at__g.fd >= 0) { close(at__g.fd); at__g.fd = -2; }
    if (at__t.map) munmap(at__t.map, at__t.map_bytes);
    memset(&at__t, 0, sizeof at__t);
    __atomic_store_n(&at__next_sync, UINT64_MAX, __ATOMIC_RELAXED);
}

static void at__register_fork(void) { pthread_atfork(at__fork_prepare, at__fork_parent, at__fork_child); }

/* Connects to the daemon (path NULL: $ACCELTRACE_SOCKET). 0 on success, -1 if none is reachable. */
AT__API int at_init(const char *path) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (!path) path = getenv("ACCELTRACE_SOCKET");
    if (!path || strlen(path) >= sizeof at__path) return -1;
    pthread_mutex_lock(&at__g.lock);
    strcpy(at__path, path);
    int rc = at__connect_locked(path);
    pthread_mutex_unlock(&at__g.lock);
    if (rc == 0) pthread_once(&once, at__register_fork);
    return rc;
}

static __attribute__((noinline)) at__thread *at__ring(void) {
    at__thread *t = &at__t;
    if (t->data || t->tried) return t;
    t->tried = 1;
    t->tid = (uint32_t)syscall(SYS_gettid);
    pthread_mutex_lock(&at__g.lock);
    if (at__g.fd == -2 && at__connect_locked(at__path) != 0) at__g.fd = -1; /* a forked child's first event */
    t->tid = (uint32_t)syscall(SYS_gettid);
    if (at__g.fd >= 0) {
        char msg[96], reply[256];
        int ring_fd = -1;
        int n = snprintf(msg, sizeof msg, "{\"op\":\"ring\",\"tid\":%u}", t->tid);
        if (at__send(msg, (size_t)n) == 0 && at__recv(reply, sizeof reply, &ring_fd) == 0 && ring_fd >= 0) {
            long long cap = at__json_int(reply, "capacity");
            size_t bytes = AT__DATA_OFF + (size_t)cap * 64;
            /* MAP_POPULATE: fault the ring in now, not one page per 64 events on the hot path */
            void *m = cap > 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring_fd, 0)
                              : MAP_FAILED;
            if (m != MAP_FAILED && *(uint32_t *)m == AT__RING_MAGIC) {
                t->map = m;
                t->map_bytes = bytes;
                t->data = (at_record *)((char *)m + AT__DATA_OFF);
                t->write_idx = (uint64_t *)((char *)m + AT__WRITE_OFF);
                t->read_idx = (uint64_t *)((char *)m + AT__READ_OFF);
                t->lost_idx = (uint64_t *)((char *)m + AT__LOST_OFF);
                t->cap = (uint64_t)cap;
                t->mask = (uint64_t)cap - 1;
                t->ring_mode = at__g.ring_mode;
                t->limit = t->ring_mode ? UINT64_MAX : t->cap;
            }
        }
        if (ring_fd >= 0) close(ring_fd);
    }
    pthread_mutex_unlock(&at__g.lock);
    return t;
}

/* ---- the hot path ------------------------------------------------------------------------------ */
/* Writes one record (its ts/dur/corr/bytes already filled) into this thread's ring. */
/* This thread's next free slot, or NULL when the event cannot be written (counted exactly). */
AT__API at_record *at__claim(void) {
    at__thread *t = &at__t;
    if (__builtin_expect(t->data == NULL, 0)) {
        t = at__ring();
        if (!t->data) { __atomic_fetch_add(&at__g.dropped_no_daemon, 1, __ATOMIC_RELAXED); return NULL; }
    }
    uint64_t w = t->w;
    if (__builtin_expect(w >= t->limit, 0)) {
        t->limit = __atomic_load_n(t->read_idx, __ATOMIC_ACQUIRE) + t->cap;
        if (w >= t->limit) { /* discard mode, ring full: count it exactly, never block */
            __atomic_store_n(t->lost_idx, ++t->lost, __ATOMIC_RELAXED);
            return NULL;
        }
    }
    return &t->data[w & t->mask];
}

/* Publishes the slot at__claim returned (a plain store on x86-64: release is free there). */
AT__API void at__publish(void) {
    at__thread *t = &at__t;
    t->w += 1;
    __atomic_store_n(t->write_idx, t->w, __ATOMIC_RELEASE);
}

/* Writes one record you filled yourself. pid is stamped; a cpu-lane record with tid 0 gets this
 * thread's id (device lanes keep their engine or unit number). */
AT__API void at_write(const at_record *rec) {
    at_record *slot = at__claim();
    if (!slot) return;
    *slot = *rec;
    slot->pid = at__g.pid;
    if (rec->lane == AT_LANE_CPU && rec->tid == 0) slot->tid = at__t.tid;
    at__publish();
}

/* A span measured with at_now(): written straight into the ring slot, no temporary record. */
AT__API void at_complete(uint32_t name, uint8_t lane, int64_t ts, int64_t dur, uint64_t corr, uint32_t args) {
    at_record *s = at__claim();
    if (!s) return;
    s->kind = AT_COMPLETE; s->lane = lane; s->clock = AT_CLOCK_DOMAIN; s->direction = 0; s->mem = 0;
    s->flow_kind = 0; s->flags = corr ? AT_FLAG_HAS_CORR : 0; s->device = AT_NO_DEVICE;
    s->name = name; s->cat = 0; s->pid = at__g.pid; s->tid = at__t.tid;
    s->ts = ts; s->dur = dur; s->corr = corr; s->bytes = 0; s->flow = 0; s->args = args;
    at__publish();
}

AT__API void at_instant(uint32_t name, uint8_t lane, int64_t ts) {
    at_record r;
    memset(&r, 0, sizeof r);
    r.kind = AT_INSTANT; r.clock = AT_CLOCK_DOMAIN; r.lane = lane; r.device = AT_NO_DEVICE; r.name = name; r.ts = ts;
    at_write(&r);
}

AT__API void at_begin(uint32_t name, uint8_t lane) {
    at_record r;
    memset(&r, 0, sizeof r);
    r.kind = AT_BEGIN; r.clock = AT_CLOCK_DOMAIN; r.lane = lane; r.device = AT_NO_DEVICE; r.name = name; r.ts = at_now();
    at_write(&r);
}

AT__API void at_end(uint32_t name, uint8_t lane) {
    at_record r;
    memset(&r, 0, sizeof r);
    r.kind = AT_END; r.clock = AT_CLOCK_DOMAIN; r.lane = lane; r.device = AT_NO_DEVICE; r.name = name; r.ts = at_now();
    at_write(&r);
}

AT__API void at_counter(uint32_t name, double value, uint32_t unit) {
    at_record r;
    memset(&r, 0, sizeof r);
    r.kind = AT_COUNTER; r.clock = AT_CLOCK_DOMAIN; r.lane = AT_LANE_COUNTER; r.device = AT_NO_DEVICE; r.name = name; r.cat = unit;
    r.ts = at_now();
    memcpy(&r.dur, &value, 8);
    at_write(&r);
}

/* A transfer or other typed event with explicit fields: fill an at_record and call at_write. */

/* ---- strings ------------------------------------------------------------------------------------- */
AT__API uint64_t at__hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) { h ^= (unsigned char)*s++; h *= 1099511628211ull; }
    return h;
}

/* The id of `text` (interned once per process; the daemon learns it before any record uses it). */
AT__API uint32_t at_intern(const char *text) {
    pthread_mutex_lock(&at__g.lock);
    if (at__g.n_strings * 2 >= at__g.cap_strings) { /* grow and rehash */
        size_t ncap = at__g.cap_strings ? at__g.cap_strings * 2 : 256;
        char **nt = (char **)calloc(ncap, sizeof(char *));
        uint32_t *ni = (uint32_t *)calloc(ncap, sizeof(uint32_t));
        for (size_t i = 0; i < at__g.cap_strings; i++) {
            if (!at__g.texts[i]) continue;
            size_t j = at__hash(at__g.texts[i]) & (ncap - 1);
            while (nt[j]) j = (j + 1) & (ncap - 1);
            nt[j] = at__g.texts[i];
            ni[j] = at__g.ids[i];
        }
        free(at__g.texts);
        free(at__g.ids);
        at__g.texts = nt;
        at__g.ids = ni;
        at__g.cap_strings = ncap;
    }
    size_t j = at__hash(text) & (at__g.cap_strings - 1);
    while (at__g.texts[j]) {
        if (strcmp(at__g.texts[j], text) == 0) {
            uint32_t id = at__g.ids[j];
            pthread_mutex_unlock(&at__g.lock);
            return id;
        }
        j = (j + 1) & (at__g.cap_strings - 1);
    }
    uint32_t id = at__g.next_id++;
    at__g.texts[j] = strdup(text);
    at__g.ids[j] = id;
    at__g.n_strings++;
    if (at__g.fd >= 0) {
        size_t cap = strlen(text) * 6 + 64;
        char *esc = (char *)malloc(cap), *msg = (char *)malloc(cap + 64);
        at__escape(esc, cap, text);
        int n = snprintf(msg, cap + 64, "{\"op\":\"strings\",\"entries\":[[%u,\"%s\"]]}", id, esc);
        at__send(msg, (size_t)n);
        free(esc);
        free(msg);
    }
    pthread_mutex_unlock(&at__g.lock);
    return id;
}

/* Sends every interned string again (lock held): a new connection is a new stream. */
AT__API void at__resend_strings_locked(void) {
    for (size_t i = 0; i < at__g.cap_strings; i++) {
        const char *text = at__g.texts[i];
        if (!text) continue;
        size_t cap = strlen(text) * 6 + 64;
        char *esc = (char *)malloc(cap), *msg = (char *)malloc(cap + 64);
        at__escape(esc, cap, text);
        int n = snprintf(msg, cap + 64, "{\"op\":\"strings\",\"entries\":[[%u,\"%s\"]]}", at__g.ids[i], esc);
        at__send(msg, (size_t)n);
        free(esc);
        free(msg);
    }
}

/* Names a track (lane, tid, device): a thread (cpu, tid = thread id), queue, engine or unit. */
AT__API void at_name_track(uint8_t lane, uint32_t tid, uint8_t device, const char *name) {
    at_record r;
    memset(&r, 0, sizeof r);
    r.kind = AT_TRACK_NAME; r.lane = lane; r.device = device; r.tid = tid; r.name = at_intern(name);
    at_write(&r);
}

AT__API uint64_t at_dropped_without_daemon(void) {
    return __atomic_load_n(&at__g.dropped_no_daemon, __ATOMIC_RELAXED);
}

/* Waits until the daemon has written this process's published records (a socket round trip). */
AT__API int at_flush(void) {
    if (at__g.fd < 0) return -1;
    pthread_mutex_lock(&at__g.lock);
    char reply[128];
    at__sync_pair_locked();
    int rc = at__send("{\"op\":\"drain\"}", 14) == 0 && at__recv(reply, sizeof reply, NULL) == 0 ? 0 : -1;
    pthread_mutex_unlock(&at__g.lock);
    return rc;
}

/* Flushes and disconnects; the daemon keeps the file open for other producers. */
AT__API void at_shutdown(void) {
    if (at__g.fd < 0) return;
    pthread_mutex_lock(&at__g.lock);
    char reply[128];
    at__sync_pair_locked(); /* the last events are interpolated, not extrapolated */
    if (at__send("{\"op\":\"bye\"}", 12) == 0) at__recv(reply, sizeof reply, NULL);
    close(at__g.fd);
    at__g.fd = -1;
    pthread_mutex_unlock(&at__g.lock);
}

#ifdef __cplusplus
}
#endif
#endif /* ACCELTRACE_H */
