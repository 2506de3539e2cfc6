/* A check that a value is JSON, for the C loop of a store that quarantines values that do not
 * decode (storage/quarantine.py). It only ever answers "certainly valid": every document it
 * accepts, orjson (which the store's queries decode with) accepts too. Whatever it is unsure
 * of (invalid JSON, but also a lone surrogate escape, a number that might overflow a double,
 * which orjson refuses, nesting deeper than JSON_CHECK_DEPTH) goes to the Python check, which
 * decides as a query would. Valid values cost a pass over their bytes here and no Python
 * call. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define JSON_CHECK_DEPTH 64
/* Digits of a number's integer part: with an exponent of at most 99 it stays below 1e300, a
 * finite double (orjson refuses a number that is not; any fraction and any negative exponent
 * are read, the smallest as 0). */
#define JSON_CHECK_INTEGER_DIGITS 200

typedef struct {
    const unsigned char *p, *end;
} json_cursor;

static void json_ws(json_cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static int json_hex(unsigned char ch) {
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* One UTF-8 sequence of 2 to 4 bytes at c->p (shortest form, no surrogates, <= U+10FFFF). */
static int json_utf8(json_cursor *c) {
    unsigned char b = *c->p;
    int n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    if (b < 0xC2 || b > 0xF4 || c->end - c->p < n)
        return 0;
    unsigned char b1 = c->p[1];
    if ((b1 & 0xC0) != 0x80 || (b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 > 0x9F) ||
        (b == 0xF0 && b1 < 0x90) || (b == 0xF4 && b1 > 0x8F))
        return 0;
    for (int i = 2; i < n; i++)
        if ((c->p[i] & 0xC0) != 0x80)
            return 0;
    c->p += n;
    return 1;
}

/* Past the bytes from c->p on that a string holds as they are (ASCII from the space on, but
 * '"' and '\\'), 8 at a time: most of a document's bytes are in its strings. It stops at the
 * first 8 bytes that hold another byte (or may: the tests below never miss one), which the
 * byte by byte loop then reads. */
static void json_plain_run(json_cursor *c) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    while (c->end - c->p >= 8) {
        uint64_t w;
        memcpy(&w, c->p, 8);
        uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
        /* a zero byte in `quote` or `backslash`, a byte below 0x20, or one from 0x80 on */
        uint64_t other = ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) |
                         ((w - ones * 0x20) & ~w) | w;
        if (other & highs)
            return;
        c->p += 8;
    }
}

static int json_string(json_cursor *c) {
    c->p++; /* the opening quote */
    while (c->p < c->end) {
        json_plain_run(c);
        if (c->p == c->end)
            return 0;
        unsigned char ch = *c->p;
        if (ch == '"') {
            c->p++;
            return 1;
        }
        if (ch < 0x20)
            return 0;
        if (ch >= 0x80) {
            if (!json_utf8(c))
                return 0;
            continue;
        }
        if (ch == '\\') {
            if (c->end - c->p < 2)
                return 0;
            unsigned char e = c->p[1];
            if (e == 'u') {
                if (c->end - c->p < 6)
                    return 0;
                int code = 0;
                for (int i = 2; i < 6; i++) {
                    int h = json_hex(c->p[i]);
                    if (h < 0)
                        return 0;
                    code = code * 16 + h;
                }
                if (code >= 0xD800 && code <= 0xDFFF)
                    return 0; /* surrogates: left to the Python check */
                c->p += 6;
                continue;
            }
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' &&
                e != 'r' && e != 't')
                return 0;
            c->p += 2;
            continue;
        }
        c->p++;
    }
    return 0;
}

static int json_digits(json_cursor *c, int *count) {
    const unsigned char *start = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
        c->p++;
    *count += (int)(c->p - start);
    return c->p > start;
}

static int json_number(json_cursor *c) {
    int digits = 0, fraction = 0, exp = 0;
    if (*c->p == '-')
        c->p++;
    if (c->p < c->end && *c->p == '0') {
        c->p++;
        digits = 1;
    } else if (!json_digits(c, &digits)) {
        return 0;
    }
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!json_digits(c, &fraction))
            return 0;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        if (!json_digits(c, &exp) || exp > 2)
            return 0; /* exponents past 99: left to the Python check */
    }
    return digits <= JSON_CHECK_INTEGER_DIGITS;
}

static int json_word(json_cursor *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

static int json_scalar(json_cursor *c) {
    switch (*c->p) {
    case '"':
        return json_string(c);
    case 't':
        return json_word(c, "true", 4);
    case 'f':
        return json_word(c, "false", 5);
    case 'n':
        return json_word(c, "null", 4);
    default:
        return (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) && json_number(c);
    }
}

/* The members of a document's top-level object that a check notes on its way, so a reader
 * of fields needs no second pass (shaping/_fields.c): found[j] is where the value of the
 * last member named names[j] (lens[j] bytes) starts, NULL where there is none; `escaped` is
 * set when a top-level name holds an escape, which is not compared here (found[] is then
 * not to be trusted). Read only when the check said 1. */
typedef struct {
    const char *const *names;
    const size_t *lens;
    int n;
    const unsigned char **found;
    int escaped;
} json_members;

/* The name just read (`name`, `len` bytes: between its quotes) of a top-level member whose
 * value starts at `value`, noted in `m`. */
static void json_note_member(json_members *m, const unsigned char *name, size_t len,
                             const unsigned char *value) {
    if (memchr(name, '\\', len) != NULL) {
        m->escaped = 1;
        return;
    }
    for (int j = 0; j < m->n; j++)
        if (m->lens[j] == len && memcmp(m->names[j], name, len) == 0)
            m->found[j] = value;
}

/* 1 if p[0..n) is certainly one JSON document orjson accepts; 0 if not, or not sure. With
 * `m` (NULL: none), the top-level members it names are noted on the way. */
static int json_certain_noting(const unsigned char *p, size_t n, json_members *m) {
    json_cursor c = {p, p + n};
    if (m != NULL) {
        m->escaped = 0;
        for (int j = 0; j < m->n; j++)
            m->found[j] = NULL;
    }
    char open[JSON_CHECK_DEPTH]; /* the brackets open: '{' or '[' */
    int depth = 0;
    json_ws(&c);
    for (;;) {
        /* a value */
        if (c.p >= c.end)
            return 0;
        if (*c.p == '{' || *c.p == '[') {
            if (depth == JSON_CHECK_DEPTH)
                return 0;
            char bracket = (char)*c.p++;
            open[depth++] = bracket;
            json_ws(&c);
            if (c.p < c.end && *c.p == (bracket == '{' ? '}' : ']')) {
                c.p++;
                depth--;
                goto after_value;
            }
            if (bracket == '{')
                goto member_key;
            continue;
        }
        if (!json_scalar(&c))
            return 0;
    after_value:
        json_ws(&c);
        if (depth == 0)
            return c.p == c.end;
        if (c.p >= c.end)
            return 0;
        if (*c.p == ',') {
            c.p++;
            json_ws(&c);
            if (open[depth - 1] == '{')
                goto member_key;
            continue;
        }
        if (*c.p != (open[depth - 1] == '{' ? '}' : ']'))
            return 0;
        c.p++;
        depth--;
        goto after_value;
    member_key:
        if (c.p >= c.end || *c.p != '"')
            return 0;
        const unsigned char *name = c.p + 1;
        if (!json_string(&c))
            return 0;
        size_t len = (size_t)(c.p - 1 - name);
        json_ws(&c);
        if (c.p >= c.end || *c.p != ':')
            return 0;
        c.p++;
        json_ws(&c);
        if (m != NULL && depth == 1)
            json_note_member(m, name, len, c.p);
    }
}

/* 1 if p[0..n) is certainly one JSON document orjson accepts; 0 if not, or not sure. */
static int json_certain(const unsigned char *p, size_t n) { return json_certain_noting(p, n, NULL); }
