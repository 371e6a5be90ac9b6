/*
 * torchneck.trace._scan: decode a slice of a trace's `traceEvents` array straight into columns.
 *
 * Why: msgspec decodes the events into typed structs at ~1 us an event, and turning those Python
 * objects into numpy columns costs as much again. This scanner reads the JSON bytes once and
 * writes the complete ("X") events' fields into C arrays, interning strings by their bytes, so
 * no Python object is made per event.
 *
 * It is an accelerator, not a second decoder to trust: it accepts only what the typed msgspec
 * decoder (schema.py `Event`) would decode to the same values. Anything else -- a field of an
 * unusual type, an escaped key, a duplicate `ph`, a number out of range, nesting deeper than
 * MAX_DEPTH, malformed JSON -- makes `scan` return None and the caller decodes the slice the
 * Python way, which decides what it means. Events of other phases than X and the flows are not
 * decoded here: their byte spans are returned for the Python decoder (they are few), flows
 * ("s"/"f"/"t", a third of a GPU trace) are only counted.
 *
 * Input: the bytes of comma-separated events, optionally followed by one trailing comma
 * (exactly what loader._decode_slice wraps in [ ] for msgspec).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256

/* String kinds in the intern table. */
#define KIND_JSON 0 /* the content of a JSON string, still escaped */
#define KIND_RAW 1  /* raw JSON text (numbers as pid/tid, "Input Dims" values) */
#define KIND_ZERO 2 /* the default pid/tid 0 */
#define KIND_EMPTY 3 /* the default name/cat "" */

typedef struct {
    int64_t off, len, kind;
    uint64_t hash;
} Entry;

typedef struct {
    Entry *entries;
    Py_ssize_t n, cap;
    int32_t *slots; /* open addressing, -1 = empty */
    Py_ssize_t nslots;
} Interner;

typedef struct {
    Py_ssize_t n, cap;
    double *ts, *dur;
    int32_t *cat, *name, *pid, *tid, *thread, *dims, *types, *stack;
    int64_t *corr, *device, *stream, *nbytes;
} XCols;

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} I64Vec;

/* The member at one position of the previous event (or of its args), to recognise the same key
   again by comparing bytes instead of parsing: a trace's events repeat their keys in one order,
   and reading keys and skipping values nobody reads was a good part of the scan (this made it
   ~20% faster). */
typedef struct {
    int64_t off;       /* where that member began (its key's opening quote) */
    int32_t key_len;   /* bytes from the quote up to its value, e.g. `"name": `; 0: nothing known */
    int32_t which;     /* what the key meant (event_key / args_key) */
    int32_t value_len; /* the value's length when it was skipped (not read), else 0 */
} Guess;

#define GUESSES 32

/* The string a field of the previous complete event interned: consecutive events mostly share
   their category, pid, tid and often name, so comparing with it skips hashing. */
typedef struct {
    int64_t off, len, kind;
    int32_t id; /* -1: nothing yet */
} Recent;

enum { R_NAME, R_CAT, R_PID, R_TID, R_DIMS, R_TYPES, R_STACK, RECENT_SLOTS };

/* The distinct (pid, tid) pairs of the slice's complete events, so each row gets its thread
   here rather than by a sort of every row's pair afterwards. */
typedef struct {
    int64_t *keys; /* pid string id << 32 | tid string id, in first-seen order */
    Py_ssize_t n, cap;
    int32_t *slots; /* open addressing into keys, -1 = empty */
    Py_ssize_t nslots;
    int64_t last_key; /* the previous event's pair, most often this one's too */
    int32_t last;
} Pairs;

typedef struct {
    const unsigned char *base, *p, *end;
    Interner in;
    Pairs pairs;
    Guess event_guess[GUESSES], args_guess[GUESSES];
    Recent recent[RECENT_SLOTS];
    XCols x;
    I64Vec others; /* (start, end) byte offsets of non-X, non-flow events */
    int64_t flows;
    /* Complete events recorded in grad mode (they carry autograd's "Sequence number"), and the
       lowest and highest number: the numbers advance only when an op builds a graph node, so
       their range says whether graphs were built (autograd_in_inference), at no cost a row. */
    int64_t grad_rows, seq_lo, seq_hi;
    int failed;    /* 1: out of memory (a Python error is set) */
} Scan;

/* ------------------------------------------------------------------------------------------ */
/* growable storage */

static int vec_push2(I64Vec *v, int64_t a, int64_t b) {
    if (v->n + 2 > v->cap) {
        Py_ssize_t cap = v->cap ? v->cap * 2 : 64;
        int64_t *nv = realloc(v->v, (size_t)cap * sizeof(int64_t));
        if (!nv) return -1;
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = a;
    v->v[v->n++] = b;
    return 0;
}

#define GROW(field, type)                                                     \
    do {                                                                      \
        type *tmp = realloc(x->field, (size_t)cap * sizeof(type));      \
        if (!tmp) return -1;                                                  \
        x->field = tmp;                                                       \
    } while (0)

/* Room for at least `want` rows (doubling). */
static int xcols_grow(XCols *x, Py_ssize_t want) {
    Py_ssize_t cap = x->cap ? x->cap * 2 : 1024;
    if (cap < want) cap = want;
    GROW(ts, double); GROW(dur, double);
    GROW(cat, int32_t); GROW(name, int32_t); GROW(pid, int32_t); GROW(tid, int32_t); GROW(thread, int32_t);
    GROW(dims, int32_t); GROW(types, int32_t); GROW(stack, int32_t);
    GROW(corr, int64_t); GROW(device, int64_t); GROW(stream, int64_t);
    GROW(nbytes, int64_t);
    x->cap = cap;
    return 0;
}

static void xcols_free(XCols *x) {
    free(x->ts); free(x->dur);
    free(x->cat); free(x->name); free(x->pid); free(x->tid); free(x->thread);
    free(x->dims); free(x->types); free(x->stack);
    free(x->corr); free(x->device); free(x->stream);
    free(x->nbytes);
}

/* ------------------------------------------------------------------------------------------ */
/* interning: strings are keyed by (kind, bytes); the table holds offsets into the input */

/* Whether n bytes at a equal those at b (short spans: keys and small values), in a few word
   compares: the last word overlaps the one before it rather than ending byte by byte. */
static inline int same_bytes(const unsigned char *a, const unsigned char *b, int64_t n) {
    if (n >= 8) {
        uint64_t x, y;
        for (int64_t i = 0; i + 8 < n; i += 8) {
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (x != y) return 0;
        }
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t x, y, u, v;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        memcpy(&u, a + n - 4, 4);
        memcpy(&v, b + n - 4, 4);
        return x == y && u == v;
    }
    for (; n > 0; n--, a++, b++)
        if (*a != *b) return 0;
    return 1;
}

/* Eight bytes at a time: names and shapes are hashed once per event. */
static uint64_t hash_bytes(const unsigned char *s, int64_t len, int64_t kind) {
    const uint64_t k = 0x9E3779B97F4A7C15ULL;
    uint64_t h = ((uint64_t)len << 2 | (uint64_t)kind) * k;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * k;
        h ^= h >> 32;
        s += 8;
        len -= 8;
    }
    if (len > 0) {
        uint64_t w = 0;
        memcpy(&w, s, (size_t)len);
        h = (h ^ w) * k;
        h ^= h >> 32;
    }
    return h * k ^ (h >> 29);
}

static int interner_rehash(Interner *in, Py_ssize_t nslots) {
    int32_t *slots = malloc((size_t)nslots * sizeof(int32_t));
    if (!slots) return -1;
    memset(slots, 0xff, (size_t)nslots * sizeof(int32_t));
    for (Py_ssize_t i = 0; i < in->n; i++) {
        Py_ssize_t j = (Py_ssize_t)(in->entries[i].hash & (uint64_t)(nslots - 1));
        while (slots[j] >= 0) j = (j + 1) & (nslots - 1);
        slots[j] = (int32_t)i;
    }
    free(in->slots);
    in->slots = slots;
    in->nslots = nslots;
    return 0;
}

/* The id of (kind, base[off:off+len]); -1 when out of memory. */
static int32_t intern(Scan *s, int64_t off, int64_t len, int64_t kind) {
    Interner *in = &s->in;
    const unsigned char *str = s->base + off;
    uint64_t h = hash_bytes(str, len, kind);
    Py_ssize_t mask = in->nslots - 1;
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)mask);
    for (;;) {
        int32_t id = in->slots[j];
        if (id < 0) break;
        Entry *e = &in->entries[id];
        if (e->hash == h && e->len == len && e->kind == kind &&
            same_bytes(s->base + e->off, str, len))
            return id;
        j = (j + 1) & mask;
    }
    if (in->n >= INT32_MAX - 1) return -1;
    if (in->n == in->cap) {
        Py_ssize_t cap = in->cap ? in->cap * 2 : 256;
        Entry *ne = realloc(in->entries, (size_t)cap * sizeof(Entry));
        if (!ne) return -1;
        in->entries = ne;
        in->cap = cap;
    }
    int32_t id = (int32_t)in->n++;
    in->entries[id].off = off;
    in->entries[id].len = len;
    in->entries[id].kind = kind;
    in->entries[id].hash = h;
    in->slots[j] = id;
    if (in->n * 2 > in->nslots && interner_rehash(in, in->nslots * 2) < 0) return -1;
    return id;
}

/* intern(), with out-of-memory recorded for the caller: 0, or -1 to stop the scan. The id is
   looked up through the field's `Recent` entry first. */
static int intern_id(Scan *s, int slot, int64_t off, int64_t len, int64_t kind, int32_t *id) {
    Recent *r = &s->recent[slot];
    if (r->id >= 0 && r->len == len && r->kind == kind && same_bytes(s->base + r->off, s->base + off, len)) {
        *id = r->id;
        return 0;
    }
    *id = intern(s, off, len, kind);
    if (*id < 0) {
        s->failed = 1;
        return -1;
    }
    r->off = off;
    r->len = len;
    r->kind = kind;
    r->id = *id;
    return 0;
}

static uint64_t pair_hash(int64_t key) {
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static int pairs_rehash(Pairs *p, Py_ssize_t nslots) {
    int32_t *slots = malloc((size_t)nslots * sizeof(int32_t));
    if (!slots) return -1;
    memset(slots, 0xff, (size_t)nslots * sizeof(int32_t));
    for (Py_ssize_t i = 0; i < p->n; i++) {
        Py_ssize_t j = (Py_ssize_t)(pair_hash(p->keys[i]) & (uint64_t)(nslots - 1));
        while (slots[j] >= 0) j = (j + 1) & (nslots - 1);
        slots[j] = (int32_t)i;
    }
    free(p->slots);
    p->slots = slots;
    p->nslots = nslots;
    return 0;
}

/* The index of the pair (pid, tid) of string ids among the slice's pairs; 0, or -1 when out of
   memory (recorded for the caller). */
static int pair_id(Scan *s, int32_t pid, int32_t tid, int32_t *id) {
    Pairs *p = &s->pairs;
    int64_t key = (int64_t)((uint64_t)(uint32_t)pid << 32 | (uint32_t)tid);
    if (p->last >= 0 && p->last_key == key) {
        *id = p->last;
        return 0;
    }
    Py_ssize_t mask = p->nslots - 1;
    Py_ssize_t j = (Py_ssize_t)(pair_hash(key) & (uint64_t)mask);
    int32_t found = -1;
    for (;; j = (j + 1) & mask) {
        int32_t at = p->slots[j];
        if (at < 0) break;
        if (p->keys[at] == key) {
            found = at;
            break;
        }
    }
    if (found < 0) {
        if (p->n == p->cap) {
            Py_ssize_t cap = p->cap ? p->cap * 2 : 16;
            int64_t *nk = realloc(p->keys, (size_t)cap * sizeof(int64_t));
            if (!nk) goto oom;
            p->keys = nk;
            p->cap = cap;
        }
        found = (int32_t)p->n++;
        p->keys[found] = key;
        p->slots[j] = found;
        if (p->n * 2 > p->nslots && pairs_rehash(p, p->nslots * 2) < 0) goto oom;
    }
    p->last_key = key;
    p->last = found;
    *id = found;
    return 0;
oom:
    s->failed = 1;
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON syntax. Every function returns 0 on success, -1 when the slice must go the Python way. */

static inline void skip_ws(Scan *s) {
    const unsigned char *p = s->p, *end = s->end;
    /* mostly none or one space: one compare decides for anything above ' ' */
    while (p < end && *p <= ' ' && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    s->p = p;
}

/* The value of four hex digits at p, or -1. */
static inline int hex4(const unsigned char *p, const unsigned char *end) {
    if (end - p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A string at s->p (which is '"'): sets the content's offset and length, and whether it holds
   escapes. Control characters are not allowed inside (JSON). */
static int parse_string(Scan *s, int64_t *off, int64_t *len, int *escaped) {
    const unsigned char *p = s->p + 1, *end = s->end;
    int esc = 0;
    *off = p - s->base;
    while (p < end) {
        /* Eight bytes at a time: jump to the first quote, backslash or control character
           (the lowest flagged byte of these zero-byte tests is always a true one). */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
            uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
            uint64_t found = (((quote - ones) & ~quote) | ((slash - ones) & ~slash) | (w - ones * 0x20)) &
                             ~w & highs;
            if (found) {
                p += __builtin_ctzll(found) >> 3;
                break;
            }
            p += 8;
        }
#endif
        if (p >= end) break;
        unsigned char c = *p;
        if (c == '"') {
            *len = (p - s->base) - *off;
            *escaped = esc;
            s->p = p + 1;
            return 0;
        }
        if (c == '\\') {
            esc = 1;
            if (p + 1 >= end) return -1;
            unsigned char e = p[1];
            if (e == 'u') {
                int unit = hex4(p + 2, end);
                if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) return -1; /* a lone low surrogate */
                if (unit >= 0xD800 && unit <= 0xDBFF) { /* must pair with a low one, as msgspec checks */
                    int low = (p + 7 < end && p[6] == '\\' && p[7] == 'u') ? hex4(p + 8, end) : -1;
                    if (low < 0xDC00 || low > 0xDFFF) return -1;
                    p += 6;
                }
                p += 6;
                continue;
            }
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't')
                return -1;
            p += 2;
            continue;
        }
        if (c < 0x20) return -1;
        p++;
    }
    return -1;
}

typedef struct {
    int64_t off, len;
    int is_int;
    int sig_digits;   /* digits in the mantissa, leading zeros of the integer part aside */
    uint64_t mantissa; /* all digits as one integer, valid when sig_digits <= 19 */
    int frac_digits;
    int exp;          /* explicit exponent */
    int exp_big;      /* the explicit exponent has too many digits for the fast path */
} Number;

static int parse_number(Scan *s, Number *num) {
    const unsigned char *p = s->p, *end = s->end;
    num->off = p - s->base;
    num->is_int = 1;
    num->sig_digits = 0;
    num->mantissa = 0;
    num->frac_digits = 0;
    num->exp = 0;
    num->exp_big = 0;
    if (p < end && *p == '-') p++;
    if (p >= end) return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            if (num->sig_digits < 19) num->mantissa = num->mantissa * 10 + (uint64_t)(*p - '0');
            num->sig_digits++;
            p++;
        }
    } else {
        return -1;
    }
    if (p < end && *p == '.') {
        num->is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            if (num->sig_digits > 0 || *p != '0') {
                if (num->sig_digits < 19) num->mantissa = num->mantissa * 10 + (uint64_t)(*p - '0');
                num->sig_digits++;
            }
            num->frac_digits++;
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        num->is_int = 0;
        p++;
        int neg = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            neg = *p == '-';
            p++;
        }
        if (p >= end || *p < '0' || *p > '9') return -1;
        int e = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (e < 100000) e = e * 10 + (*p - '0');
            else num->exp_big = 1;
            p++;
        }
        num->exp = neg ? -e : e;
    }
    num->len = (p - s->base) - num->off;
    s->p = p;
    return 0;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The double nearest to the number (as msgspec and Python give it); -1 if it overflows. */
static int number_to_double(Scan *s, const Number *num, double *out) {
    const unsigned char *start = s->base + num->off;
    int neg = *start == '-';
    if (num->sig_digits == 0) { /* zero; the integer -0 is 0 */
        *out = (neg && !num->is_int) ? -0.0 : 0.0;
        return 0;
    }
    /* An integer of up to 19 digits: converting the exact uint64 rounds correctly. */
    if (num->is_int && num->sig_digits <= 19) {
        double m = (double)num->mantissa;
        *out = neg ? -m : m;
        return 0;
    }
    /* Exact fast path (Clinger): mantissa and 10^k are both exact doubles, so one
       multiplication or division rounds correctly. */
    if (num->sig_digits <= 19 && num->mantissa <= (1ULL << 53) && !num->exp_big) {
        int e = num->exp - num->frac_digits;
        double m = (double)num->mantissa;
        if (e >= 0 && e <= 22) {
            *out = neg ? -(m * POW10[e]) : m * POW10[e];
            return 0;
        }
        if (e < 0 && e >= -22) {
            *out = neg ? -(m / POW10[-e]) : m / POW10[-e];
            return 0;
        }
    }
    /* Otherwise strtod, on a NUL-terminated copy of the token. */
    char buf[64];
    char *heap = NULL, *text = buf;
    if (num->len >= (int64_t)sizeof(buf)) {
        heap = malloc((size_t)num->len + 1);
        if (!heap) return -1;
        text = heap;
    }
    memcpy(text, start, (size_t)num->len);
    text[num->len] = 0;
    char *endp = NULL;
    errno = 0;
    double v = strtod(text, &endp);
    /* Overflow is an error to msgspec; underflow gives the subnormal or zero, as here. */
    int bad = endp != text + num->len || !isfinite(v);
    free(heap);
    if (bad) return -1;
    *out = v;
    return 0;
}

/* An integer that fits int64. */
static int number_to_int64(Scan *s, const Number *num, int64_t *out) {
    if (!num->is_int) return -1;
    const unsigned char *p = s->base + num->off, *end = p + num->len;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    uint64_t v = 0;
    for (; p < end; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return -1;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)v;
    }
    return 0;
}

/* An object's key and its colon: the key's content (off, len) and whether it was escaped;
   s->p is left on the value. */
static int read_key(Scan *s, int64_t *off, int64_t *len, int *escaped) {
    if (s->p >= s->end || *s->p != '"' || parse_string(s, off, len, escaped) < 0) return -1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return -1;
    s->p++;
    skip_ws(s);
    return s->p < s->end ? 0 : -1;
}

static int skip_value(Scan *s, int depth);

/* The key at s->p read by recognising it: 1 if its bytes repeat those of the member `g`
   remembers (the same key, unescaped, and the same spacing up to the value), s->p then on the
   value; 0 if not (nothing consumed); -1 if no value follows. Identical bytes at a key position
   tokenise identically, so this accepts exactly what read_key would. */
static inline int guessed_key(Scan *s, const Guess *g, int *which) {
    if (g->key_len == 0 || s->end - s->p <= g->key_len || !same_bytes(s->p, s->base + g->off, g->key_len))
        return 0;
    s->p += g->key_len;
    skip_ws(s); /* the previous value may have followed the colon more closely */
    if (s->p >= s->end) return -1;
    *which = g->which;
    return 1;
}

/* A skipped value recognised the same way: 1 if the bytes at s->p repeat the remembered value
   and are followed by a byte that ends a value (a longer number is not the same number). */
static inline int guessed_value(Scan *s, const Guess *g) {
    int64_t n = g->value_len;
    if (n == 0 || s->end - s->p <= n || !same_bytes(s->p, s->base + g->off + g->key_len, n)) return 0;
    unsigned char after = s->p[n];
    if (after != ',' && after != '}' && after != ' ' && after != '\n' && after != '\r' && after != '\t') return 0;
    s->p += n;
    return 1;
}

/* The key of the member beginning at `start` (s->p at '"'): recognised from `g` when it repeats,
   else read and remembered in `g`. `decode` maps a key's bytes to what it means. */
static inline int member_key(Scan *s, Guess *g, int (*decode)(const unsigned char *, int64_t), int *which) {
    int guessed = g ? guessed_key(s, g, which) : 0;
    if (guessed) return guessed > 0 ? 0 : -1;
    const unsigned char *start = s->p;
    int64_t off, len;
    int esc;
    if (read_key(s, &off, &len, &esc) < 0) return -1;
    if (esc) return -1; /* an escaped key might spell a declared one */
    *which = decode(s->base + off, len);
    if (g) {
        g->off = start - s->base;
        g->key_len = (s->p - start) < INT32_MAX ? (int32_t)(s->p - start) : 0;
        g->which = *which;
        g->value_len = 0;
    }
    return 0;
}

/* Skip the value of a member nobody reads, recognising a repeat of the previous one. */
static inline int skip_member_value(Scan *s, Guess *g, const unsigned char *member_start, int depth) {
    if (g && guessed_value(s, g)) return 0;
    const unsigned char *start = s->p;
    if (skip_value(s, depth) < 0) return -1;
    if (g && g->key_len) { /* remember this one: the key's bytes at member_start are the same */
        g->off = member_start - s->base;
        g->value_len = (s->p - start) < INT32_MAX ? (int32_t)(s->p - start) : 0;
    }
    return 0;
}

/* After a member of a container: 1 if another follows (past the comma), 0 if `close` ended the
   container, -1 otherwise. */
static int next_member(Scan *s, unsigned char close) {
    skip_ws(s);
    if (s->p >= s->end) return -1;
    if (*s->p == ',') {
        s->p++;
        skip_ws(s);
        return 1;
    }
    if (*s->p == close) {
        s->p++;
        return 0;
    }
    return -1;
}

/* Past the opening bracket: 1 if the container has members, 0 if it is empty (and skipped). */
static int open_container(Scan *s, unsigned char close) {
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    return 1;
}

static int skip_value(Scan *s, int depth);

static int skip_container(Scan *s, int depth, unsigned char close) {
    if (depth >= MAX_DEPTH) return -1;
    int more = open_container(s, close);
    while (more > 0) {
        if (close == '}') {
            int64_t off, len;
            int esc;
            if (read_key(s, &off, &len, &esc) < 0) return -1;
        }
        if (skip_value(s, depth + 1) < 0) return -1;
        more = next_member(s, close);
    }
    return more;
}

static int match_literal(Scan *s, const char *lit, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0) return -1;
    s->p += n;
    return 0;
}

/* A number nobody reads (inside "Input Dims", skipped fields): the grammar parse_number
   accepts, checked without computing its value. */
static inline int skip_number(Scan *s) {
    const unsigned char *p = s->p, *end = s->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        p++;
        while (p < end && (unsigned)(*p - '0') < 10) p++;
    } else {
        return -1;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || (unsigned)(*p - '0') >= 10) return -1;
        while (p < end && (unsigned)(*p - '0') < 10) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || (unsigned)(*p - '0') >= 10) return -1;
        while (p < end && (unsigned)(*p - '0') < 10) p++;
    }
    s->p = p;
    return 0;
}

static int skip_value(Scan *s, int depth) {
    if (s->p >= s->end) return -1;
    unsigned char c = *s->p;
    if (c == '"') {
        int64_t off, len;
        int esc;
        return parse_string(s, &off, &len, &esc);
    }
    if (c == '{') return skip_container(s, depth, '}');
    if (c == '[') return skip_container(s, depth, ']');
    if (c == '-' || (c >= '0' && c <= '9')) return skip_number(s);
    if (c == 't') return match_literal(s, "true", 4);
    if (c == 'f') return match_literal(s, "false", 5);
    if (c == 'n') return match_literal(s, "null", 4);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* one event */

/* What a field held, for the fields torchneck reads. */
enum { ABSENT = 0, STRING, NUMBER, OTHER };

typedef struct {
    int type;
    int64_t off, len; /* string content or raw value */
    int escaped;
    Number num;
} Field;

static inline int key_is(const unsigned char *k, int64_t len, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)len == n && memcmp(k, lit, n) == 0;
}

/* Parse a value into `f`: strings and numbers are recorded, anything else is skipped and
   marked OTHER (only the Python decoder may judge it). */
static int read_field(Scan *s, Field *f, int depth) {
    unsigned char c = *s->p;
    if (c == '"') {
        f->type = STRING;
        return parse_string(s, &f->off, &f->len, &f->escaped);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        f->type = NUMBER;
        if (parse_number(s, &f->num) < 0) return -1;
        f->off = f->num.off;
        f->len = f->num.len;
        return 0;
    }
    f->type = OTHER;
    f->off = s->p - s->base;
    if (skip_value(s, depth) < 0) return -1;
    f->len = (s->p - s->base) - f->off;
    return 0;
}

/* The args keys read for complete events; the other declared ones are checked for type. */
enum {
    A_CORR, A_DEVICE, A_STREAM, A_NBYTES, A_DIMS, A_TYPES,
    A_INT_CHECKED, /* Bytes, Total Allocated, ... : must be integers */
    A_STR_OR_NULL, /* name, labels */
    A_DIMS_OLD,    /* "Input dims": PyTorch 1.8's spelling, read where "Input Dims" is absent */
    A_STACK,       /* "Call stack" (PyTorch 1.8-1.12): a string (or null, none) */
    A_SEQ,         /* "Sequence number": autograd's, on ops run in grad mode */
    A_COUNT
};

static int args_key(const unsigned char *k, int64_t len) {
    switch (len) {
    case 4: if (key_is(k, len, "name")) return A_STR_OR_NULL; break;
    case 5:
        if (key_is(k, len, "bytes")) return A_NBYTES;
        if (key_is(k, len, "Bytes")) return A_INT_CHECKED;
        break;
    case 6:
        if (key_is(k, len, "device")) return A_DEVICE;
        if (key_is(k, len, "stream")) return A_STREAM;
        if (key_is(k, len, "labels")) return A_STR_OR_NULL;
        break;
    case 11:
        if (key_is(k, len, "correlation")) return A_CORR;
        if (key_is(k, len, "Device Type")) return A_INT_CHECKED;
        break;
    case 10:
        if (key_is(k, len, "Input Dims")) return A_DIMS;
        if (key_is(k, len, "Input type")) return A_TYPES;
        if (key_is(k, len, "Input dims")) return A_DIMS_OLD;
        if (key_is(k, len, "Call stack")) return A_STACK;
        break;
    case 9: if (key_is(k, len, "Device Id")) return A_INT_CHECKED; break;
    case 15:
        if (key_is(k, len, "Total Allocated")) return A_INT_CHECKED;
        if (key_is(k, len, "Sequence number")) return A_SEQ;
        break;
    case 14: if (key_is(k, len, "Total Reserved")) return A_INT_CHECKED; break;
    default: break;
    }
    if (key_is(k, len, "Addr")) return A_INT_CHECKED;
    return -1;
}

typedef struct {
    Field f[A_COUNT];
    int bad; /* a declared field of the wrong type */
} Args;

static inline void clear_args(Args *a) {
    for (int i = 0; i < A_COUNT; i++) a->f[i].type = ABSENT;
    a->bad = 0;
}

static int parse_args(Scan *s, Args *a, int depth) {
    /* s->p is at '{' */
    int more = open_container(s, '}');
    for (int member = 0; more > 0; member++) {
        Guess *g = member < GUESSES ? &s->args_guess[member] : NULL;
        const unsigned char *member_start = s->p;
        int which;
        if (member_key(s, g, args_key, &which) < 0) return -1;
        if (which < 0) {
            if (skip_member_value(s, g, member_start, depth + 1) < 0) return -1;
        } else {
            Field *fp = &a->f[which];
            if (read_field(s, fp, depth + 1) < 0) return -1;
            switch (which) {
            case A_DIMS: case A_TYPES: case A_DIMS_OLD: /* kept as raw JSON text, whatever it is */
                if (fp->type == STRING) { /* with its quotes */
                    fp->off -= 1;
                    fp->len += 2;
                }
                fp->type = OTHER;
                break;
            case A_STACK: /* a string or null, as A_STR_OR_NULL */
            case A_STR_OR_NULL:
                if (!(fp->type == STRING || (fp->type == OTHER && fp->len == 4 &&
                                           memcmp(s->base + fp->off, "null", 4) == 0)))
                    a->bad = 1;
                break;
            default: /* integers */
                if (fp->type != NUMBER || !fp->num.is_int) a->bad = 1;
                break;
            }
        }
        more = next_member(s, '}');
    }
    return more;
}

enum { E_PH, E_NAME, E_CAT, E_PID, E_TID, E_TS, E_DUR, E_COUNT };

static int event_key(const unsigned char *k, int64_t len) {
    switch (len) {
    case 2: if (k[0] == 'p' && k[1] == 'h') return E_PH; if (k[0] == 't' && k[1] == 's') return E_TS; break;
    case 3:
        if (key_is(k, len, "cat")) return E_CAT;
        if (key_is(k, len, "pid")) return E_PID;
        if (key_is(k, len, "tid")) return E_TID;
        if (key_is(k, len, "dur")) return E_DUR;
        break;
    case 4: if (key_is(k, len, "name")) return E_NAME; if (key_is(k, len, "args")) return 100; break;
    default: break;
    }
    return -1;
}

/* The id of a pid/tid value: strings by their content, integers by their text (= str(int)). */
static int thread_part_id(Scan *s, int slot, const Field *f, int32_t *id) {
    if (f->type == ABSENT) {
        *id = 0; /* the reserved KIND_ZERO entry */
        return 0;
    }
    if (f->type == STRING) return intern_id(s, slot, f->off, f->len, KIND_JSON, id);
    if (f->type == NUMBER && f->num.is_int) {
        const unsigned char *t = s->base + f->off;
        if (f->len >= 2 && t[0] == '-' && t[1] == '0') return -1; /* -0: str(int) is "0" */
        return intern_id(s, slot, f->off, f->len, KIND_RAW, id);
    }
    return -1;
}

static int string_id(Scan *s, int slot, const Field *f, int32_t absent, int32_t *id) {
    if (f->type == ABSENT) {
        *id = absent;
        return 0;
    }
    if (f->type != STRING) return -1;
    return intern_id(s, slot, f->off, f->len, KIND_JSON, id);
}

static int int_arg(Scan *s, const Field *f, int64_t absent, int64_t *out) {
    if (f->type == ABSENT) {
        *out = absent;
        return 0;
    }
    return number_to_int64(s, &f->num, out);
}

static int emit_x(Scan *s, Field *ev, Args *a) {
    XCols *x = &s->x;
    if (a->bad) return -1;
    if (x->n == x->cap && xcols_grow(x, 0) < 0) {
        s->failed = 1;
        return -1;
    }
    Py_ssize_t i = x->n;
    /* name, cat: strings */
    if (string_id(s, R_NAME, &ev[E_NAME], 1, &x->name[i]) < 0) return -1;
    if (string_id(s, R_CAT, &ev[E_CAT], 1, &x->cat[i]) < 0) return -1;
    if (thread_part_id(s, R_PID, &ev[E_PID], &x->pid[i]) < 0) return -1;
    if (thread_part_id(s, R_TID, &ev[E_TID], &x->tid[i]) < 0) return -1;
    if (pair_id(s, x->pid[i], x->tid[i], &x->thread[i]) < 0) return -1;
    /* ts, dur: numbers */
    if (ev[E_TS].type == ABSENT) {
        x->ts[i] = NAN;
    } else if (ev[E_TS].type != NUMBER || number_to_double(s, &ev[E_TS].num, &x->ts[i]) < 0) {
        return -1;
    }
    if (ev[E_DUR].type == ABSENT) {
        x->dur[i] = 0.0;
    } else if (ev[E_DUR].type != NUMBER || number_to_double(s, &ev[E_DUR].num, &x->dur[i]) < 0) {
        return -1;
    }
    if (int_arg(s, &a->f[A_CORR], -1, &x->corr[i]) < 0) return -1;
    if (int_arg(s, &a->f[A_DEVICE], -1, &x->device[i]) < 0) return -1;
    if (int_arg(s, &a->f[A_STREAM], -1, &x->stream[i]) < 0) return -1;
    if (int_arg(s, &a->f[A_NBYTES], 0, &x->nbytes[i]) < 0) return -1;
    for (int k = A_DIMS; k <= A_TYPES; k++) {
        const Field *f = &a->f[k];
        if (k == A_DIMS && f->type == ABSENT) f = &a->f[A_DIMS_OLD];
        int32_t id = -1;
        if (f->type != ABSENT && intern_id(s, k == A_DIMS ? R_DIMS : R_TYPES, f->off, f->len, KIND_RAW, &id) < 0) return -1;
        if (k == A_DIMS) x->dims[i] = id;
        else x->types[i] = id;
    }
    if (a->f[A_SEQ].type != ABSENT) {
        int64_t seq;
        if (int_arg(s, &a->f[A_SEQ], -1, &seq) < 0) return -1;
        if (s->grad_rows == 0 || seq < s->seq_lo) s->seq_lo = seq;
        if (s->grad_rows == 0 || seq > s->seq_hi) s->seq_hi = seq;
        s->grad_rows++;
    }
    { /* an empty stack (traces recorded without with_stack) counts as none */
        const Field *f = &a->f[A_STACK];
        int32_t id = -1;
        if (f->type == STRING && f->len > 0 && intern_id(s, R_STACK, f->off, f->len, KIND_JSON, &id) < 0) return -1;
        x->stack[i] = id;
    }
    x->n++;
    return 0;
}

static int parse_event(Scan *s) {
    const unsigned char *start = s->p; /* '{' */
    Field ev[E_COUNT];
    Args a;
    /* Only the types need clearing (the structs are large, and this runs once an event). */
    for (int i = 0; i < E_COUNT; i++) ev[i].type = ABSENT;
    clear_args(&a);
    int args_bad = 0;
    int more = open_container(s, '}');
    if (more == 0) return -1; /* {}: no "ph", the Python decoder says what it is */
    for (int member = 0; more > 0; member++) {
        Guess *g = member < GUESSES ? &s->event_guess[member] : NULL;
        const unsigned char *member_start = s->p;
        int which;
        if (member_key(s, g, event_key, &which) < 0) return -1;
        if (which == 100) {
            if (*s->p == '{') {
                clear_args(&a);
                if (parse_args(s, &a, 1) < 0) return -1;
                args_bad = 0;
            } else {
                if (skip_value(s, 1) < 0) return -1;
                args_bad = 1; /* args that are not an object */
            }
        } else if (which >= 0) {
            if (which == E_PH && ev[E_PH].type != ABSENT) return -1; /* two tags */
            if (read_field(s, &ev[which], 1) < 0) return -1;
        } else {
            if (skip_member_value(s, g, member_start, 1) < 0) return -1;
        }
        more = next_member(s, '}');
    }
    if (more < 0) return -1;
    Field *ph = &ev[E_PH];
    if (ph->type != STRING || ph->escaped) return -1;
    const unsigned char *t = s->base + ph->off;
    if (ph->len == 1 && t[0] == 'X') {
        if (args_bad) return -1;
        return emit_x(s, ev, &a);
    }
    if (ph->len == 1 && (t[0] == 's' || t[0] == 'f' || t[0] == 't')) {
        s->flows++;
        return 0;
    }
    if (vec_push2(&s->others, start - s->base, s->p - s->base) < 0) {
        s->failed = 1;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* the module */

static PyObject *bytes_of(const void *data, Py_ssize_t n, size_t item) {
    return PyBytes_FromStringAndSize(n ? (const char *)data : "", n * (Py_ssize_t)item);
}

static int run(Scan *s) {
    /* The content of a JSON array, optionally with one trailing comma (loader._decode_slice). */
    const unsigned char *stop = s->end;
    while (stop > s->p && (stop[-1] == ' ' || stop[-1] == '\n' || stop[-1] == '\r' || stop[-1] == '\t')) stop--;
    if (stop > s->p && stop[-1] == ',') stop--;
    s->end = stop;
    skip_ws(s);
    if (s->p >= s->end) return 0;
    for (;;) {
        if (*s->p != '{') return -1;
        if (parse_event(s) < 0) return -1;
        skip_ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p != ',') return -1;
        s->p++;
        skip_ws(s);
        if (s->p >= s->end) return -1;
    }
}

/* The interned strings as a list of str: JSON string contents decoded as UTF-8, those holding an
   escape left None (the caller unescapes those few as msgspec does), raw JSON text decoded with
   replacement. Returns NULL with no error set when a JSON string is not valid UTF-8 (the slice
   then goes to the Python decoder, which reports it), NULL with an error otherwise. */
static PyObject *strings_list(Scan *s) {
    PyObject *list = PyList_New(s->in.n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < s->in.n; i++) {
        const Entry *e = &s->in.entries[i];
        const char *text = (const char *)s->base + e->off;
        PyObject *item;
        if (e->kind == KIND_JSON) {
            if (memchr(text, '\\', (size_t)e->len)) {
                item = Py_NewRef(Py_None);
            } else {
                item = PyUnicode_DecodeUTF8(text, e->len, NULL);
                if (!item && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    Py_DECREF(list);
                    return NULL;
                }
            }
        } else if (e->kind == KIND_RAW) {
            item = PyUnicode_DecodeUTF8(text, e->len, "replace");
        } else {
            item = PyUnicode_FromString(e->kind == KIND_ZERO ? "0" : "");
        }
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

PyDoc_STRVAR(scan_doc,
"scan(data: bytes-like) -> tuple | None\n\n"
"Decode comma-separated trace events into columns; None when the slice needs the Python decoder.\n"
"Returns (n, columns: dict[str, bytes], strings: bytes of int64 (offset, length, kind) triples,\n"
"others: bytes of int64 (start, end) spans of events that are neither X nor flows, flow_count,\n"
"texts: list of the strings as str (None where a JSON string holds an escape), pairs: bytes of\n"
"int64 pid id << 32 | tid id, the slice's (pid, tid) pairs that the `thread` column indexes).");

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL; /* bytes, or a reused bytearray */
    Scan s;
    memset(&s, 0, sizeof(s));
    s.base = (const unsigned char *)view.buf;
    s.p = s.base;
    s.end = s.base + view.len;
    PyObject *result = NULL;
    for (int i = 0; i < RECENT_SLOTS; i++) s.recent[i].id = -1;
    s.pairs.last = -1;
    if (interner_rehash(&s.in, 1024) < 0 || pairs_rehash(&s.pairs, 16) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    /* reserved entries: 0 = "0" (absent pid/tid), 1 = "" (absent name/cat) */
    if (intern(&s, 0, 0, KIND_ZERO) != 0 || intern(&s, 0, 0, KIND_EMPTY) != 1) {
        PyErr_NoMemory();
        goto done;
    }
    /* Sized for the usual ~250 bytes a complete event, so growing is rare. */
    if (xcols_grow(&s.x, view.len / 250) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run(&s);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        if (s.failed) PyErr_NoMemory();
        else result = Py_NewRef(Py_None);
        goto done;
    }
    {
        XCols *x = &s.x;
        Py_ssize_t n = x->n;
        PyObject *cols = Py_BuildValue(
            "{sNsNsNsNsNsNsNsNsNsNsNsNsNsN}",
            "ts", bytes_of(x->ts, n, 8), "dur", bytes_of(x->dur, n, 8),
            "cat", bytes_of(x->cat, n, 4), "name", bytes_of(x->name, n, 4),
            "pid", bytes_of(x->pid, n, 4), "tid", bytes_of(x->tid, n, 4), "thread", bytes_of(x->thread, n, 4),
            "dims", bytes_of(x->dims, n, 4), "types", bytes_of(x->types, n, 4), "stack", bytes_of(x->stack, n, 4),
            "correlation", bytes_of(x->corr, n, 8),
            "device", bytes_of(x->device, n, 8), "stream", bytes_of(x->stream, n, 8),
            "nbytes", bytes_of(x->nbytes, n, 8));
        if (!cols) goto done;
        PyObject *texts = strings_list(&s);
        if (!texts) {
            Py_DECREF(cols);
            if (!PyErr_Occurred()) result = Py_NewRef(Py_None); /* not UTF-8: the Python decoder says so */
            goto done;
        }
        int64_t *triples = malloc((size_t)(s.in.n * 3 + 1) * sizeof(int64_t));
        if (!triples) {
            Py_DECREF(cols);
            Py_DECREF(texts);
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < s.in.n; i++) {
            triples[3 * i] = s.in.entries[i].off;
            triples[3 * i + 1] = s.in.entries[i].len;
            triples[3 * i + 2] = s.in.entries[i].kind;
        }
        result = Py_BuildValue("nNNNLNN(LLL)", n, cols, bytes_of(triples, s.in.n * 3, 8),
                               bytes_of(s.others.v, s.others.n, 8), (long long)s.flows, texts,
                               bytes_of(s.pairs.keys, s.pairs.n, 8), (long long)s.grad_rows,
                               (long long)s.seq_lo, (long long)s.seq_hi);
        free(triples);
    }
done:
    PyBuffer_Release(&view);
    xcols_free(&s.x);
    free(s.in.entries);
    free(s.in.slots);
    free(s.others.v);
    free(s.pairs.keys);
    free(s.pairs.slots);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan",
    "Native decoding of trace-event slices into columns (see loader.py; optional).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
