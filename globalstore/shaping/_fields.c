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

/* Past one JSON value of a document json_certain accepted (so no check here). */
static void skip_value(json_cursor *c) {
    int depth = 0;
    do {
        json_ws(c);
        unsigned char ch = *c->p;
        if (ch == '"') {
            json_string(c);
        } else if (ch == '{' || ch == '[') {
            depth++;
            c->p++;
        } else if (ch == '}' || ch == ']') {
            depth--;
            c->p++;
        } else if (ch == ',' || ch == ':') {
            c->p++;
        } else {
            json_scalar(c);
        }
        json_ws(c);
        /* inside a container: go on until it closes */
    } while (depth > 0 && c->p < c->end);
}

/* The string at c->p (its opening quote) as bytes, if it holds no escape but the simple
 * ones: 1 and *out set (a new reference), 0 when unsure, -1 on a Python error. */
static int string_bytes(json_cursor *c, PyObject **out) {
    const unsigned char *start = c->p + 1;
    json_string(c);
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

/* Whether the member name at c->p (its opening quote) is `name`, moving past it: 1 or 0,
 * or -1 when unsure (an escape in the name). */
static int name_is(json_cursor *c, const char *name, Py_ssize_t n) {
    const unsigned char *start = c->p + 1;
    json_string(c);
    const unsigned char *end = c->p - 1;
    if (memchr(start, '\\', (size_t)(end - start)) != NULL)
        return -1;
    return end - start == n && memcmp(start, name, (size_t)n) == 0;
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

/* The index values of one JSON document: a frozenset (a new reference), Py_None when
 * unsure (a new reference), NULL on a Python error. */
static PyObject *field_values(const unsigned char *p, size_t n, PyObject *path) {
    json_cursor c = {p, p + n};
    Py_ssize_t depth = PyTuple_GET_SIZE(path);
    for (Py_ssize_t i = 0; i < depth; i++) {
        json_ws(&c);
        if (*c.p != '{')
            return PyFrozenSet_New(NULL); /* not an object: nothing at the path */
        PyObject *name = PyTuple_GET_ITEM(path, i);
        const char *want = PyBytes_AS_STRING(name);
        Py_ssize_t want_n = PyBytes_GET_SIZE(name);
        const unsigned char *found = NULL;
        c.p++;
        json_ws(&c);
        while (*c.p != '}') {
            int is = name_is(&c, want, want_n);
            if (is < 0)
                Py_RETURN_NONE;
            json_ws(&c);
            c.p++; /* ':' */
            json_ws(&c);
            if (is)
                found = c.p; /* the last one wins, as in orjson */
            skip_value(&c);
            json_ws(&c);
            if (*c.p == ',') {
                c.p++;
                json_ws(&c);
            }
        }
        if (found == NULL)
            return PyFrozenSet_New(NULL);
        c.p = found;
    }
    PyObject *set = PyFrozenSet_New(NULL); /* brand new: PySet_Add may fill it */
    if (set == NULL)
        return NULL;
    int ok = 1;
    if (*c.p == '"') {
        ok = add_string(&c, set);
    } else if (*c.p == '[') {
        c.p++;
        json_ws(&c);
        while (ok > 0 && *c.p != ']') {
            if (*c.p == '"')
                ok = add_string(&c, set);
            else
                skip_value(&c); /* only strings are index values; the rest is left out */
            json_ws(&c);
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

static PyObject *values(PyObject *self, PyObject *args) {
    PyObject *raws, *paths;
    int fmt;
    if (!PyArg_ParseTuple(args, "O!O!i", &PyList_Type, &raws, &PyTuple_Type, &paths, &fmt))
        return NULL;
    Py_ssize_t npaths = PyTuple_GET_SIZE(paths), count = PyList_GET_SIZE(raws);
    for (Py_ssize_t j = 0; j < npaths; j++) {
        PyObject *path = PyTuple_GET_ITEM(paths, j);
        int ok = PyTuple_Check(path);
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(path); i++)
            ok = PyBytes_Check(PyTuple_GET_ITEM(path, i));
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "paths: a tuple of tuples of bytes");
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
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *raw = PyList_GET_ITEM(raws, i);
        const unsigned char *b = NULL;
        Py_ssize_t n = 0;
        int readable = 0;
        if (raw != Py_None) { /* None: a deleted key, which has no entries */
            if (!PyBytes_Check(raw)) {
                PyErr_SetString(PyExc_TypeError, "raws: a list of bytes or None");
                goto fail;
            }
            b = (const unsigned char *)PyBytes_AS_STRING(raw);
            n = PyBytes_GET_SIZE(raw);
            /* one check of the document for every path */
            readable = n > HEADER_SIZE && b[0] == 1 && b[1] == fmt &&
                       json_certain(b + HEADER_SIZE, (size_t)(n - HEADER_SIZE));
        }
        for (Py_ssize_t j = 0; j < npaths; j++) {
            PyObject *v;
            if (raw == Py_None)
                v = PyFrozenSet_New(NULL);
            else if (!readable)
                v = Py_NewRef(Py_None);
            else
                v = field_values(b + HEADER_SIZE, (size_t)(n - HEADER_SIZE),
                                 PyTuple_GET_ITEM(paths, j));
            if (v == NULL)
                goto fail;
            PyList_SET_ITEM(PyTuple_GET_ITEM(out, j), i, v);
        }
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
