/* A table's rows read straight from an SQLite database file's table b-tree (ingest/nsys/_btree.c).
 * No Python and no SQLite here: the file format alone (https://www.sqlite.org/fileformat2.html). */
#ifndef ACCELTRACE_BTREE_H
#define ACCELTRACE_BTREE_H

#include <stddef.h>
#include <stdint.h>

#define BT_MAX_DEPTH 40       /* SQLite's own trees stay under 20 levels */
#define BT_MAX_PAYLOAD (1 << 28) /* a record bigger than this is left to SQLite */

/* the outcome of each call: a row, the end, or something this reader does not take (the caller
 * reads the table through SQLite instead, which names any damage); never a crash */
enum { BT_ROW = 1, BT_END = 0, BT_UNSUPPORTED = -1, BT_NOMEM = -2 };

/* one value, typed as sqlite3_column_type would give it */
enum { BT_NULL = 0, BT_INTEGER = 1, BT_FLOAT = 2, BT_TEXT = 3, BT_BLOB = 4 };
typedef struct {
    int type;
    int64_t i;
    double f;
    const unsigned char *s; /* text or blob bytes: valid until the next bt_next */
    int64_t n;
} BtValue;

typedef struct {
    unsigned char *buf; /* the page's bytes (page_size) */
    int leaf;
    int hdr;            /* where the b-tree page header begins (100 on page 1) */
    int cell, ncell;
    uint32_t first;     /* where cells may begin: past the header and the cell pointers */
    uint32_t right;     /* interior: the right-most child */
} BtFrame;

typedef struct {
    int fd;
    uint32_t page_size, usable, npages;
    uint64_t visited;   /* pages loaded: a tree that loads more pages than the file holds is a cycle */
    int depth;
    BtFrame stack[BT_MAX_DEPTH];
    unsigned char *spill; /* a record that runs onto overflow pages, put together */
    size_t spill_cap;
    unsigned char *over;  /* one overflow page */
} BtCursor;

/* Opens `path` and the table b-tree rooted at page `root`; BT_UNSUPPORTED for a file this reader does
 * not take (not UTF-8, WAL mode, odd page size) or cannot open. */
int bt_open(BtCursor *c, const char *path, uint32_t root);
void bt_close(BtCursor *c);

/* The next row's rowid and record (payload bytes, valid until the next call). */
int bt_next(BtCursor *c, int64_t *rowid, const unsigned char **payload, int64_t *len);

/* Decodes a record: the column at position k goes to out[slot_of[k]] (k < npos; slot -1: not wanted);
 * out[0..nout) are NULL first, so a position past the record's last column reads NULL (a column added to
 * the table after the row was written, without a default). `alias` is the position of the table's
 * INTEGER PRIMARY KEY, which reads the rowid (its stored value must be NULL), or -1. */
int bt_record(const unsigned char *p, int64_t len, const int *slot_of, int npos, int alias, int64_t rowid,
              BtValue *out, int nout);

#endif
