/* Walks SQLite table b-trees with ingest/nsys/_btree.c alone (tests/test_nsys_direct.py builds it, with
 * AddressSanitizer and UBSan where gcc has them).
 *
 *   btree_walk FILE ROOT    prints "rows N sum S": the rows under ROOT and the sum of their integer values
 *                           at record position 0 (the rowid where position 0 is its alias, ROOT < 0)
 *   btree_walk --all FILE.. every page of every file taken as a root, each record decoded at positions
 *                           0..15; prints "ok" once every walk has ended (a row, the end or a refusal)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ingest/nsys/_btree.h"

static int walk(const char *path, uint32_t root, int alias, long long *rows, long long *sum, uint32_t *npages) {
    BtCursor c;
    int rc = bt_open(&c, path, root);
    if (npages) *npages = c.npages;
    int slot_of[16];
    BtValue out[16];
    for (int k = 0; k < 16; k++) slot_of[k] = k;
    while (rc == BT_ROW) {
        int64_t rowid, len;
        const unsigned char *p;
        rc = bt_next(&c, &rowid, &p, &len);
        if (rc != BT_ROW) break;
        rc = bt_record(p, len, slot_of, 16, alias, rowid, out, 16);
        if (rc != BT_ROW) break;
        (*rows)++;
        for (int k = 0; k < 16; k++) { /* every byte a value points at is read: ASan checks it lies in the page */
            if (out[k].type == BT_TEXT || out[k].type == BT_BLOB)
                for (int64_t i = 0; i < out[k].n; i++) *sum += out[k].s[i] == 0xA5;
        }
        if (out[0].type == BT_INTEGER) *sum += out[0].i;
    }
    bt_close(&c);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--all") != 0) {
        long root = strtol(argv[2], NULL, 10);
        long long rows = 0, sum = 0;
        int rc = walk(argv[1], (uint32_t)(root < 0 ? -root : root), root < 0 ? 0 : -1, &rows, &sum, NULL);
        printf("rows %lld sum %lld rc %d\n", rows, sum, rc);
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: btree_walk FILE ROOT | btree_walk --all FILE...\n");
        return 2;
    }
    for (int f = 2; f < argc; f++) {
        uint32_t npages = 0;
        long long rows = 0, sum = 0;
        walk(argv[f], 1, -1, &rows, &sum, &npages);
        for (uint32_t root = 1; root <= npages + 1; root++) {
            rows = sum = 0;
            walk(argv[f], root, root % 3 == 0 ? 0 : -1, &rows, &sum, NULL);
        }
    }
    printf("ok\n");
    return 0;
}
