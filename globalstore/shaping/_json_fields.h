/* Reading fields of stored JSON in C, for declared indexes (_fields.c) and a declared shape
 * (_shape.h): moving past values and finding members in a document json_certain accepted
 * (so nothing here checks it again). */

#ifndef GLOBALSTORE_JSON_FIELDS_H
#define GLOBALSTORE_JSON_FIELDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_json_check.h"

#define HEADER_SIZE 22 /* codec.HEADER: layout u8, format u8, ts i64, partition i32, offset i64 */

/* Past the string at c->p (its opening quote) of a document json_certain accepted: its
 * closing quote is the first quote after it not escaped by an odd run of backslashes. */
static void skip_string(json_cursor *c) {
    const unsigned char *start = c->p + 1, *q = start;
    for (;;) {
        q = memchr(q, '"', (size_t)(c->end - q));
        const unsigned char *b = q;
        while (b > start && b[-1] == '\\')
            b--;
        if ((q - b) % 2 == 0)
            break;
        q++;
    }
    c->p = q + 1;
}

/* Past one JSON value of a document json_certain accepted (so no check here), and past the
 * white space after it. */
static void skip_value(json_cursor *c) {
    unsigned char ch = *c->p;
    if (ch == '"') {
        skip_string(c);
    } else if (ch == '{' || ch == '[') {
        int depth = 0;
        do {
            ch = *c->p;
            if (ch == '"') {
                skip_string(c);
                continue;
            }
            if (ch == '{' || ch == '[')
                depth++;
            else if (ch == '}' || ch == ']')
                depth--;
            c->p++;
        } while (depth > 0);
    } else { /* a number, true, false or null: up to the next delimiter */
        while (c->p < c->end && *c->p != ',' && *c->p != '}' && *c->p != ']' && *c->p != ' ' &&
               *c->p != '\n' && *c->p != '\r' && *c->p != '\t')
            c->p++;
    }
    json_ws(c);
}

/* Where the members named `want[j]` (a bytes object each; NULL: none wanted) of the object
 * at c->p are: found[j] at the value of the last one (as orjson, the last one wins), NULL
 * where there is none or c->p is not an object. One scan of the object for every name.
 * 0, or -1 when unsure (an escape in a member name: compared by the Python function). */
static int find_members(json_cursor *c, PyObject *const *want, Py_ssize_t n,
                        const unsigned char **found) {
    for (Py_ssize_t j = 0; j < n; j++)
        found[j] = NULL;
    json_ws(c);
    if (*c->p != '{')
        return 0;
    c->p++;
    json_ws(c);
    while (*c->p != '}') {
        const unsigned char *name = c->p + 1;
        skip_string(c);
        size_t len = (size_t)(c->p - 1 - name);
        if (memchr(name, '\\', len) != NULL)
            return -1;
        json_ws(c);
        c->p++; /* ':' */
        json_ws(c);
        for (Py_ssize_t j = 0; j < n; j++)
            if (want[j] != NULL && (size_t)PyBytes_GET_SIZE(want[j]) == len &&
                memcmp(PyBytes_AS_STRING(want[j]), name, len) == 0)
                found[j] = c->p;
        skip_value(c);
        if (*c->p == ',') {
            c->p++;
            json_ws(c);
        }
    }
    return 0;
}

/* The value at `path` (a tuple of member names, bytes) from its name at `from` on, starting
 * at `at` (NULL: nothing there): NULL where there is none; *unsure set when a name on the
 * way has an escape. */
static const unsigned char *member_at(const unsigned char *at, const unsigned char *end,
                                      PyObject *path, Py_ssize_t from, int *unsure) {
    for (Py_ssize_t i = from; at != NULL && i < PyTuple_GET_SIZE(path); i++) {
        json_cursor c = {at, end};
        PyObject *name = PyTuple_GET_ITEM(path, i);
        if (find_members(&c, &name, 1, &at) < 0) {
            *unsure = 1;
            return NULL;
        }
    }
    return at;
}

#endif
