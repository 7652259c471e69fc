/* The compiled fast path of the Chrome reader: one pass over a chunk "[{...}, ...]" of
 * whole events straight into column buffers (docs/ingest.md, "Speed").
 *
 * It is a strict JSON scanner that decides only what it can decide exactly the way the
 * msgspec path (ingest/chrome/columns.py) would: any input it is not sure of (bad bytes,
 * an escaped key, a repeated field, a field of an unexpected type, a time that is not a
 * plain decimal with at most three fractional digits, deep nesting) makes scan() return
 * None, and the caller decodes that chunk with msgspec, which gives the same result or
 * the same error as before. So this file never changes what a trace means, only how fast
 * it is read. It never reads outside the buffer it is given, never recurses past
 * MAX_DEPTH, and keeps no state between calls.
 *
 * scan(raw: bytes[, rows_hint]) -> None | (n, events, tags, ivals, spans, soffs, sdata)
 *   events  int64[2n]   start and end (exclusive) byte of each event object in raw
 *   tags    uint8[F*n]  per field (field-major): 0 absent, 1 string, 2 integer, 3 other
 *                       number, 4 true, 5 false, 6 null, 7 object, 8 array
 *   ivals   int64[6*n]  pid, tid, ts, dur, id, bind_id: integers as int64, for ts and
 *                       dur the exact nanoseconds
 *   spans   int64[2n]   start and length of each event's args value in raw
 *   soffs   int32[F*(n+1)] Arrow string offsets of each field's unescaped strings
 *   sdata   F bytes objects, each field's unescaped string bytes
 *   atags, aivals, aspans  the same (tag, int64, token start and length) for the keys
 *           ARG_KEYS at the top level of each event's args object, key-major
 * gather(raw, starts, lens, sep) -> bytes: the slices joined by sep (one copy, no GIL).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define NF 14
#define MAX_DEPTH 256
enum { F_PH, F_NAME, F_CAT, F_PID, F_TID, F_TS, F_DUR, F_ID, F_BP, F_S, F_ARGS, F_BIND, F_FIN, F_FOUT };
enum { K_STR, K_ID, K_TIME, K_RAW, K_BOOL };
static const char *FIELD_NAMES[NF] = {"ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "s",
                                      "args", "bind_id", "flow_in", "flow_out"};
static const int FIELD_KIND[NF] = {K_STR, K_STR, K_STR, K_ID, K_ID, K_TIME, K_TIME, K_ID, K_STR, K_STR,
                                   K_RAW, K_ID, K_BOOL, K_BOOL};
enum { T_ABSENT, T_STR, T_INT, T_NUM, T_TRUE, T_FALSE, T_NULL, T_OBJ, T_ARR };

typedef struct { char *p; size_t len, cap; } Buf;

/* bytes a string scan must stop at: the quote, the backslash, control bytes, non-ASCII */
static uint8_t SPECIAL[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++) SPECIAL[c] = (c < 0x20 || c == '"' || c == '\\' || c >= 0x80);
}

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        if (cap > ((size_t)1 << 40)) return -1;
        cap *= 2;
    }
    char *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
    return 0;
}

/* the keys of args the importer links and types by (columns.ArgFields), in that order */
#define NA 6
static const char *ARG_KEYS[NA] = {"correlation", "External id", "external id", "bytes", "size", "direction"};

/* which fields keep an int64 (ids and times) and where */
static const int IVSLOT[NF] = {-1, -1, -1, 0, 1, 2, 3, 4, -1, -1, -1, 5, -1, -1};
#define NIV 6

typedef struct {
    const unsigned char *s;
    size_t n, i;
    size_t nev, cap;          /* events so far, rows allocated per column */
    size_t first_cap;         /* rows of the first allocation: a guess from the chunk's size */
    int64_t *ev;              /* [cap][2] start, end */
    uint8_t *tags;            /* [NF][cap] */
    int64_t *ival;            /* [NIV][cap] */
    int64_t *argspan;         /* [cap][2] start, length of args */
    int32_t *soff;            /* [NF][cap + 1] string end offsets */
    Buf sdata[NF];
    uint8_t *atag;            /* [NA][cap] the linking keys at the top of args: tags */
    int64_t *aival;           /* [NA][cap] their integers */
    int64_t *aspan;           /* [NA][cap][2] their value tokens */
    int owned;                /* the arrays above are malloc'd (grown past first_cap), not the outputs' */
} Scan;

static void scan_free(Scan *sc) {
    if (sc->owned) {
        free(sc->ev); free(sc->tags); free(sc->ival); free(sc->argspan); free(sc->soff);
        free(sc->atag); free(sc->aival); free(sc->aspan);
    }
    for (int f = 0; f < NF; f++) free(sc->sdata[f].p);
}

/* column-major arrays grow by copying each column into the larger block */
static int grow_rows(Scan *sc) {
    if (sc->nev + 1 < sc->cap) return 0;
    size_t old = sc->cap, cap = old ? old * 2 : sc->first_cap, n = sc->nev;
    int64_t *ev = malloc(cap * 2 * sizeof(int64_t));
    uint8_t *tags = malloc(cap * NF);
    int64_t *ival = malloc(cap * NIV * sizeof(int64_t));
    int64_t *argspan = malloc(cap * 2 * sizeof(int64_t));
    int32_t *soff = malloc((cap + 1) * NF * sizeof(int32_t));
    uint8_t *atag = malloc(cap * NA);
    int64_t *aival = malloc(cap * NA * sizeof(int64_t));
    int64_t *aspan = malloc(cap * NA * 2 * sizeof(int64_t));
    if (!ev || !tags || !ival || !argspan || !soff || !atag || !aival || !aspan) {
        free(ev); free(tags); free(ival); free(argspan); free(soff); free(atag); free(aival); free(aspan);
        return -1;
    }
    if (old) {
        memcpy(ev, sc->ev, n * 2 * sizeof(int64_t));
        memcpy(argspan, sc->argspan, n * 2 * sizeof(int64_t));
        for (int f = 0; f < NF; f++) {
            memcpy(tags + f * cap, sc->tags + f * old, n);
            memcpy(soff + f * (cap + 1), sc->soff + f * (old + 1), (n + 1) * sizeof(int32_t));
        }
        for (int k = 0; k < NIV; k++) memcpy(ival + k * cap, sc->ival + k * old, n * sizeof(int64_t));
        for (int k = 0; k < NA; k++) {
            memcpy(atag + k * cap, sc->atag + k * old, n);
            memcpy(aival + k * cap, sc->aival + k * old, n * sizeof(int64_t));
            memcpy(aspan + 2 * k * cap, sc->aspan + 2 * k * old, 2 * n * sizeof(int64_t));
        }
    } else {
        for (int f = 0; f < NF; f++) soff[f * (cap + 1)] = 0;
    }
    if (sc->owned) {
        free(sc->ev); free(sc->tags); free(sc->ival); free(sc->argspan); free(sc->soff);
        free(sc->atag); free(sc->aival); free(sc->aspan);
    }
    sc->owned = 1;
    sc->ev = ev; sc->tags = tags; sc->ival = ival; sc->argspan = argspan; sc->soff = soff;
    sc->atag = atag; sc->aival = aival; sc->aspan = aspan;
    sc->cap = cap;
    return 0;
}

static inline void skip_ws(Scan *sc) {
    while (sc->i < sc->n) {
        unsigned char c = sc->s[sc->i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') sc->i++;
        else break;
    }
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 sequence starting at s[i] (a byte >= 0x80): its length, or 0 if invalid. */
static int utf8_len(const unsigned char *s, size_t i, size_t n) {
    unsigned char c = s[i];
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (i + (size_t)len > n) return 0;
    for (int k = 1; k < len; k++) {
        unsigned char d = s[i + k];
        if ((d & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    return len;
}

static int read_hex4(Scan *sc, uint32_t *out) {
    if (sc->i + 4 > sc->n) return -1;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(sc->s[sc->i + k]);
        if (h < 0) return -1;
        v = (v << 4) | (uint32_t)h;
    }
    sc->i += 4;
    *out = v;
    return 0;
}

static int put_utf8(Buf *b, uint32_t cp) {
    if (buf_reserve(b, 4)) return -1;
    char *o = b->p + b->len;
    if (cp < 0x80) { o[0] = (char)cp; b->len += 1; }
    else if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); b->len += 2; }
    else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); b->len += 3;
    } else {
        o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); b->len += 4;
    }
    return 0;
}

/* The first byte at or after i that a string scan must look at (SPECIAL), or n. With SSE2
 * (every x86-64) 16 bytes per step: a quote, a backslash, or a byte that is negative or
 * below 0x20 as a signed char (control bytes and every non-ASCII byte); elsewhere, or for
 * the last bytes, the table. */
static inline size_t plain_run(const unsigned char *s, size_t i, size_t n) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (i + 16 <= n) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                   _mm_cmplt_epi8(v, space));
        int m = _mm_movemask_epi8(hit);
        if (m) return i + (size_t)__builtin_ctz((unsigned)m);
        i += 16;
    }
#endif
    while (i < n && !SPECIAL[s[i]]) i++;
    return i;
}

/* A string at s[i] == '"'. With out, its unescaped bytes are appended there. *escaped
 * tells whether it held a backslash. Returns 0, or -1 for anything msgspec might treat
 * otherwise (control characters, bad UTF-8, bad escapes, lone surrogates). */
static int scan_string(Scan *sc, Buf *out, int *escaped) {
    const unsigned char *s = sc->s;
    size_t n = sc->n;
    size_t i = sc->i + 1;
    size_t run = i;  /* start of the bytes not yet copied to out */
    if (escaped) *escaped = 0;
    for (;;) {
        if (i >= n) return -1;
        unsigned char c = s[i];
        if (c == '"') {
            if (out && i > run) {
                if (buf_reserve(out, i - run)) return -1;
                memcpy(out->p + out->len, s + run, i - run);
                out->len += i - run;
            }
            sc->i = i + 1;
            return 0;
        }
        if (!SPECIAL[c]) {
            i = plain_run(s, i + 1, n);
            continue;
        }
        if (c < 0x20) return -1;
        if (c >= 0x80) {
            int l = utf8_len(s, i, n);
            if (!l) return -1;
            i += (size_t)l;
            continue;
        }
        /* a backslash */
        if (escaped) *escaped = 1;
        if (out && i > run) {
            if (buf_reserve(out, i - run)) return -1;
            memcpy(out->p + out->len, s + run, i - run);
            out->len += i - run;
        }
        if (i + 1 >= n) return -1;
        unsigned char e = s[i + 1];
        uint32_t cp;
        switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u': {
                sc->i = i + 2;
                if (read_hex4(sc, &cp)) return -1;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (sc->i + 2 > n || s[sc->i] != '\\' || s[sc->i + 1] != 'u') return -1;
                    sc->i += 2;
                    if (read_hex4(sc, &lo) || lo < 0xDC00 || lo > 0xDFFF) return -1;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                i = sc->i;
                run = i;
                if (out && put_utf8(out, cp)) return -1;
                continue;
            }
            default: return -1;
        }
        if (out && put_utf8(out, cp)) return -1;
        i += 2;
        run = i;
    }
}

/* A JSON number at s[i]. Sets *is_int; for integers *iv (fails if outside int64).
 * With ns, the value in microseconds as exact nanoseconds (fails unless it is a plain
 * decimal with at most 3 fractional digits and an integer part below 9223372036854775). */
static int scan_number(Scan *sc, int *is_int, int64_t *iv, int want_ns, int64_t *ns) {
    const unsigned char *s = sc->s;
    size_t n = sc->n, i = sc->i;
    int neg = 0;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    if (i >= n) return -1;
    size_t int_start = i;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9') { while (i < n && s[i] >= '0' && s[i] <= '9') i++; }
    else return -1;
    size_t int_end = i;
    size_t frac_start = 0, frac_end = 0;
    int has_frac = 0, has_exp = 0;
    if (i < n && s[i] == '.') {
        i++;
        frac_start = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == frac_start) return -1;
        frac_end = i;
        has_frac = 1;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t e0 = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == e0) return -1;
        has_exp = 1;
    }
    /* a number must end at a delimiter (msgspec would reject "1x" anyway; be sure) */
    if (i < n) {
        unsigned char c = s[i];
        if (!(c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) return -1;
    }
    sc->i = i;
    *is_int = !has_frac && !has_exp;
    size_t nd = int_end - int_start;
    if (*is_int) {
        if (nd > 19) return -1;
        uint64_t v = 0;
        for (size_t k = int_start; k < int_end; k++) v = v * 10 + (uint64_t)(s[k] - '0');
        if (nd == 19 && (s[int_start] > '9' || v > (uint64_t)INT64_MAX)) return -1;
        if (!neg && v > (uint64_t)INT64_MAX) return -1;
        if (neg && v > (uint64_t)INT64_MAX) return -1;  /* keep -2**63 out: simpler */
        *iv = neg ? -(int64_t)v : (int64_t)v;
    }
    if (want_ns) {
        if (has_exp || nd > 16) return -1;
        size_t fd = has_frac ? frac_end - frac_start : 0;
        if (fd > 3) return -1;
        int64_t v = 0;
        for (size_t k = int_start; k < int_end; k++) v = v * 10 + (s[k] - '0');
        /* the msgspec path's bound for integer microseconds (columns._INT_MAX_US): v * 1000
         * + 999 still fits int64; beyond it that path decides (exactly, or it drops the event) */
        if (v >= 9223372036854775LL) return -1;
        int64_t frac = 0;
        for (size_t k = 0; k < 3; k++) frac = frac * 10 + (k < fd ? s[frac_start + k] - '0' : 0);
        v = v * 1000 + frac;
        *ns = neg ? -v : v;
    }
    return 0;
}

static int skip_value(Scan *sc, int depth);

static int skip_literal(Scan *sc, const char *lit, size_t len) {
    if (sc->i + len > sc->n || memcmp(sc->s + sc->i, lit, len) != 0) return -1;
    sc->i += len;
    return 0;
}

static int skip_container(Scan *sc, int depth) {
    unsigned char open = sc->s[sc->i];
    unsigned char close = open == '{' ? '}' : ']';
    if (depth >= MAX_DEPTH) return -1;
    sc->i++;
    skip_ws(sc);
    if (sc->i < sc->n && sc->s[sc->i] == close) { sc->i++; return 0; }
    for (;;) {
        if (open == '{') {
            if (sc->i >= sc->n || sc->s[sc->i] != '"') return -1;
            if (scan_string(sc, NULL, NULL)) return -1;
            skip_ws(sc);
            if (sc->i >= sc->n || sc->s[sc->i] != ':') return -1;
            sc->i++;
            skip_ws(sc);
        }
        if (skip_value(sc, depth + 1)) return -1;
        skip_ws(sc);
        if (sc->i >= sc->n) return -1;
        if (sc->s[sc->i] == ',') { sc->i++; skip_ws(sc); continue; }
        if (sc->s[sc->i] == close) { sc->i++; return 0; }
        return -1;
    }
}

static int skip_value(Scan *sc, int depth) {
    if (sc->i >= sc->n) return -1;
    unsigned char c = sc->s[sc->i];
    int is_int;
    int64_t iv, ns;
    switch (c) {
        case '"': return scan_string(sc, NULL, NULL);
        case '{': case '[': return skip_container(sc, depth);
        case 't': return skip_literal(sc, "true", 4);
        case 'f': return skip_literal(sc, "false", 5);
        case 'n': return skip_literal(sc, "null", 4);
        default:
            if (c == '-' || (c >= '0' && c <= '9')) {
                /* skipped numbers need only be valid JSON: check the grammar, ignore range */
                size_t save = sc->i;
                if (scan_number(sc, &is_int, &iv, 0, &ns) == 0) return 0;
                sc->i = save;
                const unsigned char *s = sc->s;
                size_t i = sc->i, n = sc->n;
                if (s[i] == '-') i++;
                if (i >= n) return -1;
                if (s[i] == '0') i++;
                else if (s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
                else return -1;
                if (i < n && s[i] == '.') {
                    size_t f0 = ++i;
                    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
                    if (i == f0) return -1;
                }
                if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                    i++;
                    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
                    size_t e0 = i;
                    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
                    if (i == e0) return -1;
                }
                if (i < n) {
                    unsigned char d = s[i];
                    if (!(d == ',' || d == '}' || d == ']' || d == ' ' || d == '\n' || d == '\r' || d == '\t')) return -1;
                }
                /* big integers: msgspec turns those in fields we do not read into nothing; fine */
                sc->i = i;
                return 0;
            }
            return -1;
    }
}

static int field_of(const unsigned char *k, size_t len) {
    switch (len) {
        case 1: if (k[0] == 's') return F_S; break;
        case 2:
            if (k[0] == 'p' && k[1] == 'h') return F_PH;
            if (k[0] == 'i' && k[1] == 'd') return F_ID;
            if (k[0] == 't' && k[1] == 's') return F_TS;
            if (k[0] == 'b' && k[1] == 'p') return F_BP;
            break;
        case 3:
            if (!memcmp(k, "cat", 3)) return F_CAT;
            if (!memcmp(k, "pid", 3)) return F_PID;
            if (!memcmp(k, "tid", 3)) return F_TID;
            if (!memcmp(k, "dur", 3)) return F_DUR;
            break;
        case 4:
            if (!memcmp(k, "name", 4)) return F_NAME;
            if (!memcmp(k, "args", 4)) return F_ARGS;
            break;
        case 7:
            if (!memcmp(k, "bind_id", 7)) return F_BIND;
            if (!memcmp(k, "flow_in", 7)) return F_FIN;
            break;
        case 8:
            if (!memcmp(k, "flow_out", 8)) return F_FOUT;
            break;
    }
    return -1;
}

static int arg_key(const unsigned char *k, size_t len) {
    for (int a = 0; a < NA; a++)
        if (strlen(ARG_KEYS[a]) == len && !memcmp(k, ARG_KEYS[a], len)) return a;
    return -1;
}

/* An object's key at s[i] and its ':': the key's bytes are s[*k0, *k1), *esc says it had escapes;
 * leaves s[i] at the value. -1: not a key, or the chunk ends first. */
static int scan_key(Scan *sc, size_t *k0, size_t *k1, int *esc) {
    if (sc->i >= sc->n || sc->s[sc->i] != '"') return -1;
    *k0 = sc->i + 1;
    if (scan_string(sc, NULL, esc)) return -1;
    *k1 = sc->i - 1;
    skip_ws(sc);
    if (sc->i >= sc->n || sc->s[sc->i] != ':') return -1;
    sc->i++;
    skip_ws(sc);
    return sc->i >= sc->n ? -1 : 0;
}

/* The args object at s[i] == '{': skipped like any value, its top-level linking keys noted
 * (tag, integer, token). A repeated or escaped key there is left to msgspec. */
static int scan_args(Scan *sc, uint8_t *atag, int64_t *aival, int64_t *aspan) {
    sc->i++;
    skip_ws(sc);
    if (sc->i < sc->n && sc->s[sc->i] == '}') { sc->i++; return 0; }
    for (;;) {
        size_t k0, k1;
        int esc;
        if (scan_key(sc, &k0, &k1, &esc)) return -1;
        if (esc) return -1;
        int a = arg_key(sc->s + k0, k1 - k0);
        size_t v0 = sc->i;
        unsigned char c = sc->s[v0];
        if (a >= 0 && atag[a] != T_ABSENT) return -1;
        if (a >= 0 && (c == '-' || (c >= '0' && c <= '9'))) {
            int is_int;
            int64_t iv = 0, ns;
            size_t save = sc->i;
            if (scan_number(sc, &is_int, &iv, 0, &ns) == 0) {
                atag[a] = is_int ? T_INT : T_NUM;
                aival[a] = iv;
            } else {  /* an integer beyond int64: valid JSON, not an int64 */
                sc->i = save;
                if (skip_value(sc, 2)) return -1;
                atag[a] = T_NUM;
            }
        } else {
            if (skip_value(sc, 2)) return -1;
            if (a >= 0) atag[a] = c == '"' ? T_STR : c == 'n' ? T_NULL : c == 't' ? T_TRUE : c == 'f' ? T_FALSE
                                  : c == '{' ? T_OBJ : T_ARR;
        }
        if (a >= 0) {
            aspan[2 * a] = (int64_t)v0;
            aspan[2 * a + 1] = (int64_t)(sc->i - v0);
        }
        skip_ws(sc);
        if (sc->i >= sc->n) return -1;
        if (sc->s[sc->i] == ',') { sc->i++; skip_ws(sc); continue; }
        if (sc->s[sc->i] == '}') { sc->i++; return 0; }
        return -1;
    }
}

static int scan_event(Scan *sc) {
    if (grow_rows(sc)) return -1;
    size_t row = sc->nev;
    /* only what is stored per row is cleared per event (a span per field was 7 % of the scan) */
    uint8_t tags[NF];
    int64_t ival[NIV];
    int64_t args_span[2] = {0, 0};
    uint8_t atag[NA];
    int64_t aival[NA], aspan[2 * NA];
    memset(atag, 0, sizeof atag);
    memset(aival, 0, sizeof aival);
    memset(aspan, 0, sizeof aspan);
    memset(tags, 0, sizeof tags);
    memset(ival, 0, sizeof ival);
    sc->ev[2 * row] = (int64_t)sc->i;
    sc->i++;  /* '{' */
    skip_ws(sc);
    if (sc->i < sc->n && sc->s[sc->i] == '}') {
        sc->i++;
    } else {
        for (;;) {
            size_t k0, k1;
            int esc;
            if (scan_key(sc, &k0, &k1, &esc)) return -1;
            int f = esc ? -2 : field_of(sc->s + k0, k1 - k0);
            if (f == -2) return -1;  /* an escaped key might name a field: let msgspec decide */
            if (f < 0) {
                if (skip_value(sc, 1)) return -1;
            } else {
                if (tags[f] != T_ABSENT) return -1;  /* a repeated field */
                size_t v0 = sc->i;
                unsigned char c = sc->s[v0];
                int kind = FIELD_KIND[f];
                int t;
                if (c == '"') {
                    if (kind == K_TIME || kind == K_BOOL) return -1;
                    if (kind == K_RAW) {
                        if (scan_string(sc, NULL, NULL)) return -1;
                    } else if (scan_string(sc, &sc->sdata[f], NULL)) return -1;
                    t = T_STR;
                } else if (c == 'n') {
                    if (skip_literal(sc, "null", 4)) return -1;
                    t = T_NULL;
                } else if (c == 't' || c == 'f') {
                    if (kind != K_BOOL && kind != K_RAW) return -1;
                    if (c == 't' ? skip_literal(sc, "true", 4) : skip_literal(sc, "false", 5)) return -1;
                    t = c == 't' ? T_TRUE : T_FALSE;
                } else if (c == '{' || c == '[') {
                    if (kind != K_RAW) return -1;
                    if (c == '{' ? scan_args(sc, atag, aival, aspan) : skip_container(sc, 1)) return -1;
                    t = c == '{' ? T_OBJ : T_ARR;
                } else if (c == '-' || (c >= '0' && c <= '9')) {
                    int is_int;
                    int64_t iv = 0, ns = 0;
                    if (kind == K_RAW) {
                        if (skip_value(sc, 1)) return -1;
                        t = T_NUM;
                    } else {
                        if (kind != K_ID && kind != K_TIME) return -1;
                        if (scan_number(sc, &is_int, &iv, kind == K_TIME, &ns)) return -1;
                        if (kind == K_ID && !is_int) return -1;  /* float ids: the Python path */
                        t = is_int ? T_INT : T_NUM;
                        ival[IVSLOT[f]] = kind == K_TIME ? ns : iv;
                    }
                } else {
                    return -1;
                }
                tags[f] = (uint8_t)t;
                if (f == F_ARGS) {
                    args_span[0] = (int64_t)v0;
                    args_span[1] = (int64_t)(sc->i - v0);
                }
            }
            skip_ws(sc);
            if (sc->i >= sc->n) return -1;
            if (sc->s[sc->i] == ',') { sc->i++; skip_ws(sc); continue; }
            if (sc->s[sc->i] == '}') { sc->i++; break; }
            return -1;
        }
    }
    sc->ev[2 * row + 1] = (int64_t)sc->i;
    size_t cap = sc->cap;
    for (int f = 0; f < NF; f++) {
        if (sc->sdata[f].len > (size_t)INT32_MAX) return -1;
        sc->tags[f * cap + row] = tags[f];
        sc->soff[f * (cap + 1) + row + 1] = (int32_t)sc->sdata[f].len;
    }
    for (int k = 0; k < NIV; k++) sc->ival[k * cap + row] = ival[k];
    for (int a = 0; a < NA; a++) {
        sc->atag[a * cap + row] = atag[a];
        sc->aival[a * cap + row] = aival[a];
        sc->aspan[2 * (a * cap + row)] = aspan[2 * a];
        sc->aspan[2 * (a * cap + row) + 1] = aspan[2 * a + 1];
    }
    sc->argspan[2 * row] = args_span[0];
    sc->argspan[2 * row + 1] = args_span[1];
    sc->nev++;
    return 0;
}

static int scan_all(Scan *sc) {
    skip_ws(sc);
    if (sc->i >= sc->n || sc->s[sc->i] != '[') return -1;
    sc->i++;
    skip_ws(sc);
    if (grow_rows(sc)) return -1;
    if (sc->i < sc->n && sc->s[sc->i] == ']') {
        sc->i++;
    } else {
        for (;;) {
            if (sc->i >= sc->n || sc->s[sc->i] != '{') return -1;
            if (scan_event(sc)) return -1;
            skip_ws(sc);
            if (sc->i >= sc->n) return -1;
            if (sc->s[sc->i] == ',') { sc->i++; skip_ws(sc); continue; }
            if (sc->s[sc->i] == ']') { sc->i++; break; }
            return -1;
        }
    }
    skip_ws(sc);
    return sc->i == sc->n ? 0 : -1;
}

/* The output bytes objects, made before the scan at first_cap rows: the scan writes its columns straight
 * into them, and at the end each column-major array is moved down to n rows in place and the object cut to
 * size. Only a chunk of more events than its guess (grow_rows: arrays of its own) is copied into new ones.
 * (A column array the scan filled and the copy of it both were new memory: the scanner's thread is what
 * a real trace's read waits for; docs/performance.md, twenty-sixth stop.) */
enum { O_EV, O_TAGS, O_IVAL, O_SPAN, O_SOFF, O_ATAG, O_AIVAL, O_ASPAN, NOUT };

static size_t out_size(int k, size_t rows) {
    switch (k) {
    case O_EV: case O_SPAN: return rows * 2 * sizeof(int64_t);
    case O_TAGS: return rows * NF;
    case O_IVAL: return rows * NIV * sizeof(int64_t);
    case O_SOFF: return NF * (rows + 1) * sizeof(int32_t);
    case O_ATAG: return rows * NA;
    case O_AIVAL: return rows * NA * sizeof(int64_t);
    default: return rows * NA * 2 * sizeof(int64_t);
    }
}

/* count arrays of `width` bytes a row, laid out [k][cap], moved down to [k][n] (k ascending: each move
 * lands below the next array's rows, so none is overwritten before it moves) */
static void compact(char *p, int count, size_t cap, size_t n, size_t width) {
    for (int k = 1; k < count; k++) memmove(p + k * n * width, p + k * cap * width, n * width);
}

static PyObject *py_scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t hint = 0;
    if (!PyArg_ParseTuple(args, "y*|n", &view, &hint)) return NULL;
    Scan sc;
    memset(&sc, 0, sizeof sc);
    sc.s = view.buf;
    sc.n = (size_t)view.len;
    /* Kineto events are 150-400 bytes: one allocation for most chunks, no regrowth copies; the caller's
     * hint (from the chunks before) is closer, and the columns then lie closer together in the outputs */
    sc.first_cap = sc.n / 160 < 4096 ? 4096 : sc.n / 160;
    if (hint > 0) {  /* an event is at least 3 bytes ("{}" and a comma): no more rows than that */
        size_t most = sc.n / 3 + 64;
        sc.first_cap = (size_t)hint < 64 ? 64 : (size_t)hint > most ? most : (size_t)hint;
    }
    PyObject *o[NOUT] = {NULL}, *out = NULL, *sdata = NULL;
    for (int k = 0; k < NOUT; k++) {
        o[k] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)out_size(k, sc.first_cap));
        if (!o[k]) goto fail;
    }
    sc.cap = sc.first_cap;
    sc.ev = (int64_t *)PyBytes_AS_STRING(o[O_EV]);
    sc.tags = (uint8_t *)PyBytes_AS_STRING(o[O_TAGS]);
    sc.ival = (int64_t *)PyBytes_AS_STRING(o[O_IVAL]);
    sc.argspan = (int64_t *)PyBytes_AS_STRING(o[O_SPAN]);
    sc.soff = (int32_t *)PyBytes_AS_STRING(o[O_SOFF]);
    sc.atag = (uint8_t *)PyBytes_AS_STRING(o[O_ATAG]);
    sc.aival = (int64_t *)PyBytes_AS_STRING(o[O_AIVAL]);
    sc.aspan = (int64_t *)PyBytes_AS_STRING(o[O_ASPAN]);
    for (int f = 0; f < NF; f++) sc.soff[f * (sc.cap + 1)] = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_all(&sc);
    Py_END_ALLOW_THREADS
    if (rc) {
        scan_free(&sc);
        for (int k = 0; k < NOUT; k++) Py_XDECREF(o[k]);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    size_t n = sc.nev, cap = sc.cap;
    if (sc.owned) {  /* grown past the guess: its own arrays, copied into outputs of n rows */
        for (int k = 0; k < NOUT; k++) {
            Py_DECREF(o[k]);
            o[k] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)out_size(k, n));
            if (!o[k]) goto fail;
        }
        memcpy(PyBytes_AS_STRING(o[O_EV]), sc.ev, n * 2 * sizeof(int64_t));
        memcpy(PyBytes_AS_STRING(o[O_SPAN]), sc.argspan, n * 2 * sizeof(int64_t));
        for (int f = 0; f < NF; f++) {
            memcpy(PyBytes_AS_STRING(o[O_TAGS]) + f * n, sc.tags + f * cap, n);
            memcpy(PyBytes_AS_STRING(o[O_SOFF]) + f * (n + 1) * sizeof(int32_t), sc.soff + f * (cap + 1),
                   (n + 1) * sizeof(int32_t));
        }
        for (int k = 0; k < NIV; k++)
            memcpy(PyBytes_AS_STRING(o[O_IVAL]) + k * n * sizeof(int64_t), sc.ival + k * cap, n * sizeof(int64_t));
        for (int a = 0; a < NA; a++) {
            memcpy(PyBytes_AS_STRING(o[O_ATAG]) + a * n, sc.atag + a * cap, n);
            memcpy(PyBytes_AS_STRING(o[O_AIVAL]) + a * n * sizeof(int64_t), sc.aival + a * cap, n * sizeof(int64_t));
            memcpy(PyBytes_AS_STRING(o[O_ASPAN]) + 2 * a * n * sizeof(int64_t), sc.aspan + 2 * a * cap,
                   2 * n * sizeof(int64_t));
        }
    } else {  /* scanned into the outputs: each column-major array moved down to n rows, then cut to size */
        compact(PyBytes_AS_STRING(o[O_TAGS]), NF, cap, n, 1);
        compact(PyBytes_AS_STRING(o[O_SOFF]), NF, cap + 1, n + 1, sizeof(int32_t));
        compact(PyBytes_AS_STRING(o[O_IVAL]), NIV, cap, n, sizeof(int64_t));
        compact(PyBytes_AS_STRING(o[O_ATAG]), NA, cap, n, 1);
        compact(PyBytes_AS_STRING(o[O_AIVAL]), NA, cap, n, sizeof(int64_t));
        compact(PyBytes_AS_STRING(o[O_ASPAN]), NA, cap, n, 2 * sizeof(int64_t));
        for (int k = 0; k < NOUT; k++)
            if (_PyBytes_Resize(&o[k], (Py_ssize_t)out_size(k, n)) < 0) goto fail;  /* (o[k] NULL then) */
    }
    sdata = PyTuple_New(NF);
    if (!sdata) goto fail;
    for (int f = 0; f < NF; f++) {
        PyObject *d = PyBytes_FromStringAndSize(sc.sdata[f].p ? sc.sdata[f].p : "", (Py_ssize_t)sc.sdata[f].len);
        if (!d) goto fail;
        PyTuple_SET_ITEM(sdata, f, d);
    }
    out = Py_BuildValue("(nNNNNNNNNN)", (Py_ssize_t)n, o[O_EV], o[O_TAGS], o[O_IVAL], o[O_SPAN], o[O_SOFF], sdata,
                        o[O_ATAG], o[O_AIVAL], o[O_ASPAN]);
    if (!out) {  /* "N" took the references of every argument even so */
        scan_free(&sc);
        PyBuffer_Release(&view);
        return NULL;
    }
    scan_free(&sc);
    PyBuffer_Release(&view);
    return out;
fail:
    for (int k = 0; k < NOUT; k++) Py_XDECREF(o[k]);
    Py_XDECREF(sdata);
    scan_free(&sc);
    PyBuffer_Release(&view);
    return PyErr_Occurred() ? NULL : PyErr_NoMemory();
}

static PyObject *py_gather(PyObject *self, PyObject *args) {
    Py_buffer raw, starts, lens, sep;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &raw, &starts, &lens, &sep)) return NULL;
    PyObject *out = NULL;
    size_t k = (size_t)starts.len / sizeof(int64_t);
    if ((size_t)lens.len / sizeof(int64_t) != k) {
        PyErr_SetString(PyExc_ValueError, "starts and lens differ in length");
        goto done;
    }
    const int64_t *st = starts.buf, *ln = lens.buf;
    size_t total = 0;
    for (size_t j = 0; j < k; j++) {
        if (st[j] < 0 || ln[j] < 0 || (size_t)st[j] + (size_t)ln[j] > (size_t)raw.len) {
            PyErr_SetString(PyExc_ValueError, "slice outside the buffer");
            goto done;
        }
        total += (size_t)ln[j];
    }
    if (k) total += (k - 1) * (size_t)sep.len;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) goto done;
    {
        char *o = PyBytes_AS_STRING(out);
        const char *r = raw.buf;
        Py_BEGIN_ALLOW_THREADS
        for (size_t j = 0; j < k; j++) {
            if (j && sep.len) { memcpy(o, sep.buf, (size_t)sep.len); o += sep.len; }
            memcpy(o, r + st[j], (size_t)ln[j]);
            o += ln[j];
        }
        Py_END_ALLOW_THREADS
    }
done:
    PyBuffer_Release(&raw); PyBuffer_Release(&starts); PyBuffer_Release(&lens); PyBuffer_Release(&sep);
    return out;
}

/* join(parts) -> bytes: the bytes-like parts one after another, as b"".join gives them, but copied with
 * the GIL released. b"".join holds it for the whole copy wherever a part is not exact bytes (a memoryview
 * slice), and bytes' + always does: the Chrome reader's joins of its reads (8 MB at a time, into fresh pages)
 * held the GIL for ~0.9 s of an 830 MB ingest, while the scan threads waited to hand over their chunks. */
static PyObject *py_join(PyObject *self, PyObject *parts) {
    PyObject *seq = PySequence_Fast(parts, "join() takes a sequence of bytes-like objects");
    if (!seq) return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq), got = 0;
    PyObject *out = NULL;
    Py_buffer *views = PyMem_Calloc(k ? (size_t)k : 1, sizeof(Py_buffer));
    if (!views) { PyErr_NoMemory(); goto done; }
    size_t total = 0;
    for (; got < k; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &views[got], PyBUF_SIMPLE) < 0) goto done;
        if ((size_t)views[got].len > (size_t)PY_SSIZE_T_MAX - total) {
            got++;
            PyErr_SetString(PyExc_OverflowError, "join() result too long");
            goto done;
        }
        total += (size_t)views[got].len;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out && total) {
        char *o = PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < k; j++) {
            memcpy(o, views[j].buf, (size_t)views[j].len);
            o += views[j].len;
        }
        Py_END_ALLOW_THREADS
    }
done:
    for (Py_ssize_t j = 0; j < got; j++) PyBuffer_Release(&views[j]);
    PyMem_Free(views);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef METHODS[] = {
    {"scan", py_scan, METH_VARARGS, "Columns of a chunk of whole Chrome events, or None (see the file's header)."},
    {"gather", py_gather, METH_VARARGS, "gather(raw, starts, lens, sep) -> the slices joined by sep."},
    {"join", py_join, METH_O, "join(parts) -> the bytes-like parts joined, copied without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    PyObject *m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    PyObject *names = PyTuple_New(NF);
    if (!names) return NULL;
    for (int f = 0; f < NF; f++) PyTuple_SET_ITEM(names, f, PyUnicode_FromString(FIELD_NAMES[f]));
    PyModule_AddObject(m, "FIELDS", names);
    return m;
}
