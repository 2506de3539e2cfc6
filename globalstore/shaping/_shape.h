/* A declared shape (shaping/fields.py, Shape) in C: the bytes its Python function stores for a
 * JSON document, orjson.dumps(shape(key, orjson.loads(doc))), written from the document's own
 * bytes with no Python object per value, wherever this code is sure they are the same bytes;
 * else "unsure", and the caller runs the Python function.
 *
 * Sure means: the document is certainly JSON (_json_check.h) and an object; every name a
 * condition or a kept field reads on the way has no escape; each value it copies is written
 * as orjson writes it: no white space, strings without escapes, integers but -0, floats
 * without an exponent written as their shortest text (canonical_number), objects without a
 * repeated name. A condition holds when the
 * field is present and its value is one of the allowed ones, compared as JSON text (each
 * allowed value as orjson writes it: strings, true, false, null); a value it cannot compare
 * so (a string with an escape) is unsure. Included by _fields.c (for the Python loop and the
 * tests) and by follow/_native.c (the C loop). */

#ifndef GLOBALSTORE_SHAPE_H
#define GLOBALSTORE_SHAPE_H

#include "_json_fields.h"

#define SHAPE_ERROR (-2) /* a Python error is set */
#define SHAPE_UNSURE (-1)
#define SHAPE_DROP 0
#define SHAPE_KEEP 1
#define SHAPE_MAX_MEMBERS 64 /* an object with more is not checked for repeated names here */

/* A Shape as fields.Shape.spec() gives it: (names, keys, where). names: the kept fields'
 * names (bytes), or None to keep every field; keys: each one's `"name":` as orjson writes
 * it; where: ((path, allowed), ...), path a tuple of names, allowed a tuple of JSON texts. */
typedef struct {
    PyObject *names, *keys, *where;
} shape_spec;

static int shape_spec_of(PyObject *spec, shape_spec *out) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3)
        goto bad;
    out->names = PyTuple_GET_ITEM(spec, 0);
    out->keys = PyTuple_GET_ITEM(spec, 1);
    out->where = PyTuple_GET_ITEM(spec, 2);
    if (out->names != Py_None &&
        (!PyTuple_Check(out->names) || !PyTuple_Check(out->keys) ||
         PyTuple_GET_SIZE(out->names) != PyTuple_GET_SIZE(out->keys) ||
         PyTuple_GET_SIZE(out->names) > SHAPE_MAX_MEMBERS))
        goto bad;
    if (!PyTuple_Check(out->where))
        goto bad;
    for (Py_ssize_t i = 0; out->names != Py_None && i < PyTuple_GET_SIZE(out->names); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(out->names, i)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(out->keys, i)))
            goto bad;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(out->where); i++) {
        PyObject *cond = PyTuple_GET_ITEM(out->where, i);
        if (!PyTuple_Check(cond) || PyTuple_GET_SIZE(cond) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(cond, 0)) ||
            PyTuple_GET_SIZE(PyTuple_GET_ITEM(cond, 0)) == 0 ||
            !PyTuple_Check(PyTuple_GET_ITEM(cond, 1)))
            goto bad;
        PyObject *path = PyTuple_GET_ITEM(cond, 0), *allowed = PyTuple_GET_ITEM(cond, 1);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(path); j++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(path, j)))
                goto bad;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(allowed); j++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(allowed, j)))
                goto bad;
    }
    return 0;
bad:
    PyErr_SetString(PyExc_TypeError, "a shape spec: (names | None, keys, where), as Shape.spec()");
    return -1;
}

static int is_ws(unsigned char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; }

/* Digits of a number that canonical_number vouches for without more: an integer of as many is
 * an int to orjson, and with as many two float texts read as one float only if they are the
 * same number. */
#define SHAPE_NUMBER_DIGITS 15
/* An integer of up to 18 digits is below 2^63: an int to orjson too, written as it is. */
#define SHAPE_INTEGER_DIGITS 18

/* Whether the float text p[0..n) is the one repr writes for the float it reads as: the
 * shortest that reads back as it, the closest of that length. Python's own conversions,
 * which no locale changes; called with the GIL held, as the loops run. */
static int repr_text(const unsigned char *p, Py_ssize_t n) {
    char text[40];
    if (n >= (Py_ssize_t)sizeof text)
        return 0;
    memcpy(text, p, (size_t)n);
    text[n] = '\0';
    double d = PyOS_string_to_double(text, NULL, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    char *r = PyOS_double_to_string(d, 'r', 0, 0, NULL);
    if (r == NULL) {
        PyErr_Clear();
        return 0;
    }
    int same = strlen(r) == (size_t)n && memcmp(r, text, (size_t)n) == 0;
    PyMem_Free(r);
    return same;
}

/* Whether the number at c->p is written as orjson writes what it reads from it, moving past
 * it: 1, or 0 when unsure. An integer of at most 18 digits is, but -0 (read as 0). A float
 * without an exponent is written back as the shortest text that reads as the same float
 * (orjson, as Python's repr, where repr has no exponent: from 1e-4 up to 1e16). With 15
 * digits or fewer two texts read as one float only if they are the same number, so the text
 * is that shortest one unless its fraction ends in a 0 it does not need ("1.50"; "1.0" keeps
 * its one 0); a longer one (a float as repr writes it has up to 17) is compared with repr's
 * text for what it reads as. */
static int canonical_number(json_cursor *c) {
    const unsigned char *start = c->p, *point = NULL;
    while (c->p < c->end && !is_ws(*c->p) && *c->p != ',' && *c->p != '}' && *c->p != ']') {
        if (*c->p == 'e' || *c->p == 'E')
            return 0; /* orjson and repr write exponents differently */
        if (*c->p == '.')
            point = c->p;
        c->p++;
    }
    const unsigned char *digits = start + (*start == '-');
    if (point == NULL) {
        if (c->p - digits > SHAPE_INTEGER_DIGITS)
            return 0; /* a longer integer may be a float to orjson */
        return !(c->p - digits == 1 && *digits == '0' && digits != start); /* -0 reads as 0 */
    }
    const unsigned char *fraction = point + 1, *end = c->p;
    if (point - digits > 16)
        return 0; /* 1e16 and up: repr writes an exponent */
    if (point - digits == 1 && *digits == '0') { /* below 1: at most 3 zeros after the point */
        const unsigned char *q = fraction;
        while (q < end && *q == '0')
            q++;
        if (q < end && q - fraction > 3)
            return 0; /* below 1e-4: repr writes an exponent */
    }
    if (end - digits - 1 > SHAPE_NUMBER_DIGITS)
        return repr_text(start, end - start);
    return !(end - fraction > 1 && end[-1] == '0'); /* a 0 the shortest text does not have */
}

/* Whether the string at c->p has no escape, moving past it (its bytes are then orjson's). */
static int canonical_string(json_cursor *c) {
    const unsigned char *start = c->p + 1;
    skip_string(c);
    return memchr(start, '\\', (size_t)(c->p - 1 - start)) == NULL;
}

/* Whether the JSON value at c->p is written as orjson.dumps writes what orjson.loads reads
 * from it, moving past it (not past white space after it): 1, or 0 when unsure. */
static int canonical_value(json_cursor *c) {
    unsigned char ch = *c->p;
    if (ch == '"')
        return canonical_string(c);
    if (ch == 't' || ch == 'n') {
        c->p += 4;
        return 1;
    }
    if (ch == 'f') {
        c->p += 5;
        return 1;
    }
    if (ch != '{' && ch != '[')
        return canonical_number(c);
    unsigned char close = ch == '{' ? '}' : ']';
    const unsigned char *names[SHAPE_MAX_MEMBERS];
    size_t lens[SHAPE_MAX_MEMBERS];
    int count = 0;
    c->p++;
    if (*c->p == close) {
        c->p++;
        return 1;
    }
    for (;;) {
        if (close == '}') { /* a name, without escapes, not seen before in this object */
            if (*c->p != '"' || count == SHAPE_MAX_MEMBERS)
                return 0;
            const unsigned char *name = c->p + 1;
            if (!canonical_string(c))
                return 0;
            size_t len = (size_t)(c->p - 1 - name);
            for (int i = 0; i < count; i++)
                if (lens[i] == len && memcmp(names[i], name, len) == 0)
                    return 0; /* a repeated name: orjson keeps the first place, last value */
            names[count] = name;
            lens[count++] = len;
            if (*c->p != ':')
                return 0;
            c->p++;
        }
        if (!canonical_value(c))
            return 0;
        if (*c->p == close) {
            c->p++;
            return 1;
        }
        if (*c->p != ',')
            return 0; /* white space */
        c->p++;
    }
}

/* Whether condition `cond` (path, allowed) holds for the object at `doc`: 1, 0, or -1 when
 * unsure. */
static int condition_holds(const unsigned char *doc, const unsigned char *end, PyObject *cond) {
    PyObject *path = PyTuple_GET_ITEM(cond, 0), *allowed = PyTuple_GET_ITEM(cond, 1);
    int unsure = 0;
    const unsigned char *at = member_at(doc, end, path, 0, &unsure);
    if (unsure)
        return -1;
    if (at == NULL)
        return 0; /* absent */
    json_cursor c = {at, end};
    if (*at == '"') {
        if (!canonical_string(&c))
            return -1;
    } else if (*at == 't' || *at == 'n') {
        c.p += 4;
    } else if (*at == 'f') {
        c.p += 5;
    } else {
        return 0; /* a number, an object or an array: none is an allowed value */
    }
    size_t n = (size_t)(c.p - at);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(allowed); i++) {
        PyObject *text = PyTuple_GET_ITEM(allowed, i);
        if ((size_t)PyBytes_GET_SIZE(text) == n && memcmp(PyBytes_AS_STRING(text), at, n) == 0)
            return 1;
    }
    return 0;
}

/* The bytes `spec` stores for the JSON document doc[0..n): SHAPE_KEEP with *out a new bytes
 * object of `room` bytes (left for the caller) and then the shaped JSON, SHAPE_DROP (the key
 * goes), SHAPE_UNSURE (the Python function decides), or SHAPE_ERROR. */
static int shape_json(const shape_spec *spec, const unsigned char *doc, size_t n,
                      Py_ssize_t room, PyObject **out) {
    if (!json_certain(doc, n))
        return SHAPE_UNSURE;
    const unsigned char *end = doc + n;
    json_cursor c = {doc, end};
    json_ws(&c);
    if (*c.p != '{')
        return SHAPE_UNSURE; /* the Python function refuses it */
    const unsigned char *object = c.p;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(spec->where); i++) {
        int holds = condition_holds(object, end, PyTuple_GET_ITEM(spec->where, i));
        if (holds <= 0)
            return holds < 0 ? SHAPE_UNSURE : SHAPE_DROP;
    }
    if (spec->names == Py_None) { /* the whole object, if written as orjson writes it */
        if (!canonical_value(&c))
            return SHAPE_UNSURE;
        Py_ssize_t len = (Py_ssize_t)(c.p - object);
        *out = PyBytes_FromStringAndSize(NULL, room + len);
        if (*out == NULL)
            return SHAPE_ERROR;
        memcpy(PyBytes_AS_STRING(*out) + room, object, (size_t)len);
        return SHAPE_KEEP;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(spec->names), size = room + 2 + count;
    const unsigned char *found[SHAPE_MAX_MEMBERS];
    PyObject *want[SHAPE_MAX_MEMBERS];
    for (Py_ssize_t j = 0; j < count; j++) {
        want[j] = PyTuple_GET_ITEM(spec->names, j);
        size += PyBytes_GET_SIZE(PyTuple_GET_ITEM(spec->keys, j));
    }
    if (find_members(&c, want, count, found) < 0)
        return SHAPE_UNSURE;
    const unsigned char *ends[SHAPE_MAX_MEMBERS];
    for (Py_ssize_t j = 0; j < count; j++) {
        if (found[j] == NULL)
            continue;
        json_cursor v = {found[j], end};
        if (!canonical_value(&v))
            return SHAPE_UNSURE;
        ends[j] = v.p;
        size += ends[j] - found[j];
    }
    *out = PyBytes_FromStringAndSize(NULL, size);
    if (*out == NULL)
        return SHAPE_ERROR;
    char *w = PyBytes_AS_STRING(*out) + room, *start = w;
    *w++ = '{';
    for (Py_ssize_t j = 0; j < count; j++) {
        if (found[j] == NULL)
            continue;
        if (w > start + 1)
            *w++ = ',';
        PyObject *key = PyTuple_GET_ITEM(spec->keys, j);
        memcpy(w, PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key));
        w += PyBytes_GET_SIZE(key);
        memcpy(w, found[j], (size_t)(ends[j] - found[j]));
        w += ends[j] - found[j];
    }
    *w++ = '}';
    if (_PyBytes_Resize(out, room + (w - start)) < 0)
        return SHAPE_ERROR;
    return SHAPE_KEEP;
}

#endif
