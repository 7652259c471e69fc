/* A table's rows read straight from an SQLite file's table b-tree (the format:
 * https://www.sqlite.org/fileformat2.html), for the Nsight reader (_sqlread.c, docs/nsys.md "Reading speed").
 *
 * SQLite's own scan costs about a microsecond a row of an Nsight event table (sqlite3_step and a
 * sqlite3_column_* call per value); most of it is the virtual machine, not the format. This walks the
 * leaf pages in rowid order (the order SQLite's full scan gives) and decodes each record's header and
 * the wanted columns only. It reads pages with pread, not a mapping, so a file cut short under it is an
 * error, not a signal. Everything a page says is checked against the page and the file before it is
 * used: an offset, a count, a varint, a child's page number, an overflow chain, the depth, the pages
 * loaded (more than the file holds means a cycle). Anything it does not take, or that does not add up,
 * is BT_UNSUPPORTED and the caller reads the table through SQLite, whose message names the damage.
 */
#define _XOPEN_SOURCE 700
#include "_btree.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t get2(const unsigned char *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static uint32_t get4(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* SQLite's varint (1-9 bytes, big-endian, 7 bits a byte but the ninth's 8); 0 when it runs past end */
static int varint(const unsigned char *p, const unsigned char *end, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        x = (x << 7) | (p[i] & 0x7F);
        if (!(p[i] & 0x80)) { *v = x; return i + 1; }
    }
    if (p + 8 >= end) return 0;
    *v = (x << 8) | p[8];
    return 9;
}

static int read_at(int fd, unsigned char *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        got += (size_t)r;
    }
    return 1;
}

/* The page's free space as SQLite checks it when it first reads a page (btreeComputeFreeSpace): the cell
 * content area's start, the chain of free blocks in order and inside the page, and their sum with the
 * fragments no more than the page and no less than its header and cell pointers. */
static int free_space_adds_up(const BtCursor *c, const BtFrame *f) {
    const unsigned char *d = f->buf;
    uint32_t top = get2(d + f->hdr + 5), last = c->usable - 4;
    if (top == 0) top = 65536;
    uint64_t free_bytes = (uint64_t)d[f->hdr + 7] + top;
    uint32_t pc = get2(d + f->hdr + 1), next = 0, size = 0;
    if (pc > 0) {
        if (pc < top) return 0;
        for (;;) {
            if (pc > last) return 0;
            next = get2(d + pc);
            size = get2(d + pc + 2);
            free_bytes += size;
            if (next <= pc + size + 3) break;
            pc = next;
        }
        if (next > 0 || (uint64_t)pc + size > c->usable) return 0;
    }
    return free_bytes <= c->usable && free_bytes >= f->first;
}

/* loads page `pgno` into frame f; BT_ROW when it is a table b-tree page this reader takes */
static int load(BtCursor *c, BtFrame *f, uint32_t pgno) {
    if (pgno < 1 || pgno > c->npages || ++c->visited > c->npages) return BT_UNSUPPORTED;
    if (!f->buf && !(f->buf = malloc(c->page_size))) return BT_NOMEM;
    if (!read_at(c->fd, f->buf, c->page_size, (uint64_t)(pgno - 1) * c->page_size)) return BT_UNSUPPORTED;
    f->hdr = pgno == 1 ? 100 : 0;
    unsigned char type = f->buf[f->hdr];
    if (type != 13 && type != 5) return BT_UNSUPPORTED; /* an index b-tree (WITHOUT ROWID) or no b-tree */
    f->leaf = type == 13;
    f->ncell = (int)get2(f->buf + f->hdr + 3);
    f->cell = 0;
    f->first = (uint32_t)f->hdr + (f->leaf ? 8 : 12) + 2 * (uint32_t)f->ncell;
    if ((uint32_t)f->ncell > (c->page_size - 8) / 6 || f->first > c->usable) return BT_UNSUPPORTED;
    f->right = f->leaf ? 0 : get4(f->buf + f->hdr + 8);
    return free_space_adds_up(c, f) ? BT_ROW : BT_UNSUPPORTED;
}

int bt_open(BtCursor *c, const char *path, uint32_t root) {
    memset(c, 0, sizeof(*c));
    c->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0) return BT_UNSUPPORTED;
    unsigned char h[100];
    struct stat st;
    if (!read_at(c->fd, h, sizeof(h), 0) || fstat(c->fd, &st) != 0) return BT_UNSUPPORTED;
    uint32_t ps = get2(h + 16) == 1 ? 65536 : get2(h + 16);
    if (memcmp(h, "SQLite format 3", 16) != 0 || ps < 512 || (ps & (ps - 1)) != 0
        || h[18] != 1 || h[19] != 1            /* 2: WAL mode, whose newer pages live in another file */
        || h[21] != 64 || h[22] != 32 || h[23] != 32 /* the payload fractions the format fixes */
        || get4(h + 56) != 1)                  /* text in UTF-8 */
        return BT_UNSUPPORTED;
    c->page_size = ps;
    c->usable = ps - h[20];
    if (c->usable < 480) return BT_UNSUPPORTED;
    uint64_t pages = (uint64_t)st.st_size / ps;
    c->npages = pages > 0x7FFFFFFF ? 0x7FFFFFFF : (uint32_t)pages;
    int rc = load(c, &c->stack[0], root);
    if (rc != BT_ROW) return rc;
    c->depth = 1;
    return BT_ROW;
}

void bt_close(BtCursor *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    for (int i = 0; i < BT_MAX_DEPTH; i++) { free(c->stack[i].buf); c->stack[i].buf = NULL; }
    free(c->spill);
    free(c->over);
    c->spill = c->over = NULL;
    c->depth = 0;
}

/* a leaf cell: its rowid and payload (in the page, or put together from its overflow pages) */
static int leaf_cell(BtCursor *c, BtFrame *f, int i, int64_t *rowid, const unsigned char **payload, int64_t *len) {
    const unsigned char *page = f->buf, *end = f->buf + c->usable;
    uint32_t off = get2(page + f->hdr + 8 + 2 * i);
    if (off < f->first || off > c->usable - 4) return BT_UNSUPPORTED;
    uint64_t size, key;
    int a = varint(page + off, end, &size);
    if (!a) return BT_UNSUPPORTED;
    int b = varint(page + off + a, end, &key);
    if (!b || size > BT_MAX_PAYLOAD) return BT_UNSUPPORTED;
    uint64_t start = off + a + b, u = c->usable, local = size;
    if (size > u - 35) {
        uint64_t m = ((u - 12) * 32 / 255) - 23, k = m + ((size - m) % (u - 4));
        local = k <= u - 35 ? k : m;
    }
    if (start + local + (local < size ? 4 : 0) > u) return BT_UNSUPPORTED;
    *rowid = (int64_t)key;
    *len = (int64_t)size;
    if (local == size) { *payload = page + start; return BT_ROW; }
    if (c->spill_cap < size) {
        unsigned char *grown = realloc(c->spill, size);
        if (!grown) return BT_NOMEM;
        c->spill = grown;
        c->spill_cap = size;
    }
    if (!c->over && !(c->over = malloc(c->page_size))) return BT_NOMEM;
    memcpy(c->spill, page + start, local);
    uint32_t next = get4(page + start + local);
    for (uint64_t have = local; have < size;) { /* each page adds usable - 4 bytes: the chain ends */
        if (next < 1 || next > c->npages) return BT_UNSUPPORTED;
        if (!read_at(c->fd, c->over, c->page_size, (uint64_t)(next - 1) * c->page_size)) return BT_UNSUPPORTED;
        uint64_t take = size - have < u - 4 ? size - have : u - 4;
        memcpy(c->spill + have, c->over + 4, take);
        have += take;
        next = get4(c->over);
    }
    *payload = c->spill;
    return BT_ROW;
}

int bt_next(BtCursor *c, int64_t *rowid, const unsigned char **payload, int64_t *len) {
    while (c->depth > 0) {
        BtFrame *f = &c->stack[c->depth - 1];
        if (f->leaf) {
            if (f->cell < f->ncell) return leaf_cell(c, f, f->cell++, rowid, payload, len);
            c->depth--;
            continue;
        }
        if (f->cell > f->ncell) { c->depth--; continue; }
        uint32_t child;
        if (f->cell < f->ncell) {
            uint32_t off = get2(f->buf + f->hdr + 12 + 2 * f->cell);
            if (off < f->first || off > c->usable - 4) return BT_UNSUPPORTED;
            child = get4(f->buf + off);
        } else {
            child = f->right;
        }
        f->cell++;
        if (c->depth == BT_MAX_DEPTH) return BT_UNSUPPORTED;
        int rc = load(c, &c->stack[c->depth], child);
        if (rc != BT_ROW) return rc;
        if (c->stack[c->depth].ncell == 0) return BT_UNSUPPORTED; /* a child without cells: SQLite's corruption */
        c->depth++;
    }
    return BT_END;
}

static uint64_t serial_size(uint64_t st) {
    static const unsigned char sizes[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};
    return st < 12 ? sizes[st] : (st - 12) / 2;
}

int bt_record(const unsigned char *p, int64_t len, const int *slot_of, int npos, int alias, int64_t rowid,
              BtValue *out, int nout) {
    for (int j = 0; j < nout; j++) out[j].type = BT_NULL;
    if (alias >= 0 && alias < npos && slot_of[alias] >= 0) {
        out[slot_of[alias]].type = BT_INTEGER;
        out[slot_of[alias]].i = rowid;
    }
    uint64_t hsize;
    const unsigned char *end = p + len;
    int a = varint(p, end, &hsize);
    if (!a || hsize < (uint64_t)a || hsize > (uint64_t)len || hsize > 98307) return BT_UNSUPPORTED;
    const unsigned char *h = p + a, *hend = p + hsize;
    uint64_t body = hsize;
    /* every column's serial type, wanted or not: their sizes must add up to the record's, as SQLite checks
     * once it has read a whole header */
    for (int k = 0; h < hend; k++) {
        uint64_t st;
        int b = varint(h, hend, &st);
        if (!b || st == 10 || st == 11) return BT_UNSUPPORTED;
        h += b;
        uint64_t size = serial_size(st);
        if (size > (uint64_t)len - body) return BT_UNSUPPORTED;
        const unsigned char *v = p + body;
        body += size;
        if (k >= npos) continue;
        if (k == alias) {
            if (st != 0) return BT_UNSUPPORTED; /* not the rowid alias after all: SQLite reads it */
            continue;
        }
        int slot = slot_of[k];
        if (slot < 0) continue;
        BtValue *o = &out[slot];
        if (st == 0) continue;
        if (st <= 6) {
            uint64_t x = v[0];
            for (uint64_t i = 1; i < size; i++) x = (x << 8) | v[i];
            if (size < 8 && (v[0] & 0x80)) x |= ~(uint64_t)0 << (8 * size);
            o->type = BT_INTEGER;
            o->i = (int64_t)x;
        } else if (st == 7) {
            uint64_t x = 0;
            for (int i = 0; i < 8; i++) x = (x << 8) | v[i];
            double d;
            memcpy(&d, &x, sizeof(d));
            if (isnan(d)) continue; /* SQLite reads a stored NaN as NULL */
            o->type = BT_FLOAT;
            o->f = d;
        } else if (st == 8 || st == 9) {
            o->type = BT_INTEGER;
            o->i = st == 9;
        } else {
            o->type = st & 1 ? BT_TEXT : BT_BLOB;
            o->s = v;
            o->n = (int64_t)size;
        }
    }
    return body == (uint64_t)len ? BT_ROW : BT_UNSUPPORTED;
}
