/* The index values of a declared index (shaping/fields.py), read from stored JSON in C: no
 * decode of the whole value into Python objects and no Python call per value.
 *
 * values(raws, paths, fmt) -> tuple: per path of `paths`, a list: for each stored value of
 * `raws` (codec.HEADER, then JSON; None for a deleted key, which has none), the index values
 * at the field `path` (a tuple of member names, as UTF-8 bytes) as a
 * frozenset of bytes, or None where this code is not sure to answer as the Python function
 * (fields.field_index) would: a value not of layout 1 and value format `fmt`, one that
 * _json_check.h does not find certainly JSON, a member name or a string value with an escape
 * it does not decode here (a \u escape; those go to Python), a NUL in a value. The caller
 * decodes those in Python, so both ways give the same entries. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "../follow/_json_check.h"

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

/* The string at c->p (its opening quote) as bytes, if it holds no escape but the simple
 * ones: 1 and *out set (a new reference), 0 when unsure, -1 on a Python error. */
static int string_bytes(json_cursor *c, PyObject **out) {
    const unsigned char *start = c->p + 1;
    skip_string(c);
    const unsigned char *end = c->p - 1; /* the closing quote */
    if (memchr(start, '\\', (size_t)(end - start)) == NULL) {
        *out = PyBytes_FromStringAndSize((const char *)start, end - start);
        return *out == NULL ? -1 : 1;
    }
    PyObject *b = PyBytes_FromStringAndSize(NULL, end - start);
    if (b == NULL)
        return -1;
    char *w = PyBytes_AS_STRING(b);
    Py_ssize_t n = 0;
    for (const unsigned char *p = start; p < end; p++) {
        if (*p != '\\') {
            w[n++] = (char)*p;
            continue;
        }
        p++;
        switch (*p) {
        case '"': case '\\': case '/': w[n++] = (char)*p; break;
        case 'b': w[n++] = '\b'; break;
        case 'f': w[n++] = '\f'; break;
        case 'n': w[n++] = '\n'; break;
        case 'r': w[n++] = '\r'; break;
        case 't': w[n++] = '\t'; break;
        default: /* \u: decoded by the Python function */
            Py_DECREF(b);
            return 0;
        }
    }
    if (_PyBytes_Resize(&b, n) < 0)
        return -1;
    *out = b;
    return 1;
}

/* Add a string value to `set` (a NUL in it makes the Python function fail: unsure). */
static int add_string(json_cursor *c, PyObject *set) {
    PyObject *s = NULL;
    int ok = string_bytes(c, &s);
    if (ok <= 0)
        return ok;
    if (memchr(PyBytes_AS_STRING(s), 0, (size_t)PyBytes_GET_SIZE(s)) != NULL) {
        Py_DECREF(s);
        return 0;
    }
    ok = PySet_Add(set, s);
    Py_DECREF(s);
    return ok < 0 ? -1 : 1;
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

/* A new empty frozenset. It will hold bytes only, so it can be in no reference cycle: left
 * to the cyclic garbage collector, the sets of a large batch made it walk them over and
 * over (7 % of an indexed restore's time), as it does not for tuples and dicts of such
 * items. */
static PyObject *no_values(void) {
    PyObject *set = PyFrozenSet_New(NULL);
    if (set != NULL)
        PyObject_GC_UnTrack(set);
    return set;
}

/* The index values of the JSON value at `at` (NULL: none there): a frozenset (a new
 * reference), Py_None when unsure (a new reference), NULL on a Python error. */
static PyObject *index_values(const unsigned char *at, const unsigned char *end) {
    PyObject *set = no_values(); /* brand new: PySet_Add may fill it */
    if (set == NULL || at == NULL)
        return set;
    json_cursor c = {at, end};
    int ok = 1;
    if (*c.p == '"') {
        ok = add_string(&c, set);
    } else if (*c.p == '[') {
        c.p++;
        json_ws(&c);
        while (ok > 0 && *c.p != ']') {
            if (*c.p == '"') {
                ok = add_string(&c, set);
                json_ws(&c);
            } else {
                skip_value(&c); /* only strings are index values; the rest is left out */
            }
            if (*c.p == ',') {
                c.p++;
                json_ws(&c);
            }
        }
    }
    if (ok <= 0) {
        Py_DECREF(set);
        if (ok < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return set;
}

/* The value at the rest of `path` (its names after the first) from `at`: NULL where there
 * is none; *unsure set when a name there has an escape. */
static const unsigned char *deeper(const unsigned char *at, const unsigned char *end,
                                   PyObject *path, int *unsure) {
    for (Py_ssize_t i = 1; at != NULL && i < PyTuple_GET_SIZE(path); i++) {
        json_cursor c = {at, end};
        PyObject *name = PyTuple_GET_ITEM(path, i);
        if (find_members(&c, &name, 1, &at) < 0) {
            *unsure = 1;
            return NULL;
        }
    }
    return at;
}

#define MAX_PATHS 64 /* more declared indexes than this are read a batch at a time each */

/* Each path's index values in one document: out[j] a new reference (Py_None: unsure), 0;
 * -1 on a Python error (out[] then holds nothing). */
static int document_values(const unsigned char *p, size_t n, PyObject *paths, PyObject **out) {
    Py_ssize_t npaths = PyTuple_GET_SIZE(paths);
    PyObject *first[MAX_PATHS];
    const unsigned char *found[MAX_PATHS];
    for (Py_ssize_t j = 0; j < npaths; j++)
        first[j] = PyTuple_GET_ITEM(PyTuple_GET_ITEM(paths, j), 0);
    json_cursor c = {p, p + n};
    int unsure = find_members(&c, first, npaths, found) < 0;
    for (Py_ssize_t j = 0; j < npaths; j++) {
        int deep_unsure = unsure;
        const unsigned char *at =
            unsure ? NULL : deeper(found[j], p + n, PyTuple_GET_ITEM(paths, j), &deep_unsure);
        out[j] = deep_unsure ? Py_NewRef(Py_None) : index_values(at, p + n);
        if (out[j] == NULL) {
            while (j-- > 0)
                Py_DECREF(out[j]);
            return -1;
        }
    }
    return 0;
}

static PyObject *values(PyObject *self, PyObject *args) {
    PyObject *raws, *paths;
    int fmt;
    if (!PyArg_ParseTuple(args, "O!O!i", &PyList_Type, &raws, &PyTuple_Type, &paths, &fmt))
        return NULL;
    Py_ssize_t npaths = PyTuple_GET_SIZE(paths), count = PyList_GET_SIZE(raws);
    if (npaths > MAX_PATHS) {
        PyErr_Format(PyExc_ValueError, "at most %d paths a call", MAX_PATHS);
        return NULL;
    }
    for (Py_ssize_t j = 0; j < npaths; j++) {
        PyObject *path = PyTuple_GET_ITEM(paths, j);
        int ok = PyTuple_Check(path) && PyTuple_GET_SIZE(path) > 0;
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(path); i++)
            ok = PyBytes_Check(PyTuple_GET_ITEM(path, i));
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "paths: a tuple of non-empty tuples of bytes");
            return NULL;
        }
    }
    PyObject *out = PyTuple_New(npaths);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < npaths; j++) {
        PyObject *list = PyList_New(count);
        if (list == NULL)
            goto fail;
        PyTuple_SET_ITEM(out, j, list);
    }
    PyObject *got[MAX_PATHS];
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *raw = PyList_GET_ITEM(raws, i);
        if (raw == Py_None) { /* a deleted key, which has no entries */
            for (Py_ssize_t j = 0; j < npaths; j++)
                if ((got[j] = no_values()) == NULL)
                    goto fail_got;
        } else {
            if (!PyBytes_Check(raw)) {
                PyErr_SetString(PyExc_TypeError, "raws: a list of bytes or None");
                goto fail;
            }
            const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(raw);
            Py_ssize_t n = PyBytes_GET_SIZE(raw);
            /* one check of the document for every path */
            if (n > HEADER_SIZE && b[0] == 1 && b[1] == fmt &&
                json_certain(b + HEADER_SIZE, (size_t)(n - HEADER_SIZE))) {
                if (document_values(b + HEADER_SIZE, (size_t)(n - HEADER_SIZE), paths, got) < 0)
                    goto fail;
            } else {
                for (Py_ssize_t j = 0; j < npaths; j++)
                    got[j] = Py_NewRef(Py_None);
            }
        }
        for (Py_ssize_t j = 0; j < npaths; j++)
            PyList_SET_ITEM(PyTuple_GET_ITEM(out, j), i, got[j]);
        continue;
    fail_got:
        for (Py_ssize_t j = 0; j < npaths && got[j] != NULL; j++)
            Py_DECREF(got[j]);
        goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"values", values, METH_VARARGS,
     "values(raws, paths, fmt) -> per path, a list of frozenset[bytes] | None (None: decode "
     "in Python)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fields_module = {
    PyModuleDef_HEAD_INIT, "globalstore.shaping._fields", "Declared index values, in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__fields(void) { return PyModule_Create(&fields_module); }
