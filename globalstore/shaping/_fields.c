/* The index values of a declared index (shaping/fields.py), read from stored JSON in C: no
 * decode of the whole value into Python objects and no Python call per value.
 *
 * values(raws, paths, fmt) -> tuple: per path of `paths`, a list: for each stored value of
 * `raws` (codec.HEADER, then JSON; None for a deleted key, which has none), the index values
 * at the field `path` (a tuple of member names, as UTF-8 bytes): one as bytes (a string),
 * else a frozenset of bytes (a list; none), or None where this code is not sure to answer as
 * the Python function
 * (fields.field_index) would: a value not of layout 1 and value format `fmt`, one that
 * _json_check.h does not find certainly JSON, a member name or a string value with an escape
 * it does not decode here (a \u escape; those go to Python), a NUL in a value. The caller
 * decodes those in Python, so both ways give the same entries. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_shape.h"

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

/* The string value at c->p as an index value: 1 and *out set (a new reference), 0 when
 * unsure (a NUL in it makes the Python function fail), -1 on a Python error. */
static int string_value(json_cursor *c, PyObject **out) {
    int ok = string_bytes(c, out);
    if (ok <= 0)
        return ok;
    if (memchr(PyBytes_AS_STRING(*out), 0, (size_t)PyBytes_GET_SIZE(*out)) != NULL) {
        Py_CLEAR(*out);
        return 0;
    }
    return 1;
}

/* Add a string value to `set`: 1, 0 when unsure, -1 on a Python error. */
static int add_string(json_cursor *c, PyObject *set) {
    PyObject *s = NULL;
    int ok = string_value(c, &s);
    if (ok <= 0)
        return ok;
    ok = PySet_Add(set, s);
    Py_DECREF(s);
    return ok < 0 ? -1 : 1;
}

/* No index values: one empty frozenset, made once (a new one for each missing field was
 * memory the allocator took and gave back every batch). */
static PyObject *no_values_set = NULL;

static PyObject *no_values(void) { return Py_NewRef(no_values_set); }

/* A new empty frozenset, for the values of a list. It will hold bytes only, so it can be in
 * no reference cycle: left to the cyclic garbage collector, the sets of a large batch made
 * it walk them over and over (7 % of an indexed restore's time), as it does not for tuples
 * and dicts of such items. */
static PyObject *new_values(void) {
    PyObject *set = PyFrozenSet_New(NULL);
    if (set != NULL)
        PyObject_GC_UnTrack(set);
    return set;
}

/* The index values of the JSON value at `at` (NULL: none there): a string's bytes (one
 * value: no set is made for it), a frozenset (a new reference) for a list or none, Py_None
 * when unsure (a new reference), NULL on a Python error. */
static PyObject *index_values(const unsigned char *at, const unsigned char *end) {
    if (at == NULL || (*at != '"' && *at != '['))
        return no_values();
    json_cursor c = {at, end};
    if (*at == '"') {
        PyObject *s = NULL;
        int ok = string_value(&c, &s);
        return ok < 0 ? NULL : ok == 0 ? Py_NewRef(Py_None) : s;
    }
    PyObject *set = new_values(); /* brand new: PySet_Add may fill it */
    if (set == NULL)
        return NULL;
    int ok = 1;
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
    if (ok <= 0) {
        Py_DECREF(set);
        if (ok < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return set;
}

#define MAX_PATHS 64 /* more declared indexes than this are read a batch at a time each */

/* Each path's index values in a document json_certain_noting accepted, which noted in `m`
 * where the paths' first names are (its end at `end`): out[j] a new reference (Py_None:
 * unsure), 0; -1 on a Python error (out[] then holds nothing). */
static int document_values(const unsigned char *end, PyObject *paths, const json_members *m,
                           PyObject **out) {
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(paths); j++) {
        int unsure = m->escaped;
        const unsigned char *at =
            unsure ? NULL : member_at(m->found[j], end, PyTuple_GET_ITEM(paths, j), 1, &unsure);
        out[j] = unsure ? Py_NewRef(Py_None) : index_values(at, end);
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
    /* the paths' first names, which the check of each document looks for on its way */
    const char *names[MAX_PATHS];
    size_t lens[MAX_PATHS];
    const unsigned char *found[MAX_PATHS];
    for (Py_ssize_t j = 0; j < npaths; j++) {
        PyObject *first = PyTuple_GET_ITEM(PyTuple_GET_ITEM(paths, j), 0);
        names[j] = PyBytes_AS_STRING(first);
        lens[j] = (size_t)PyBytes_GET_SIZE(first);
    }
    json_members members = {names, lens, (int)npaths, found, 0};
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
            /* one pass over the document: its check, which notes the members wanted */
            if (n > HEADER_SIZE && b[0] == 1 && b[1] == fmt &&
                json_certain_noting(b + HEADER_SIZE, (size_t)(n - HEADER_SIZE), &members)) {
                if (document_values(b + n, paths, &members, got) < 0)
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

/* shape(doc, spec) -> the bytes the declared shape `spec` (Shape.spec()) stores for the JSON
 * document `doc`, None when it deletes the key, False when unsure (_shape.h). */
static PyObject *shape(PyObject *self, PyObject *args) {
    const char *doc;
    Py_ssize_t n;
    PyObject *spec_obj, *out = NULL;
    shape_spec spec;
    if (!PyArg_ParseTuple(args, "y#O", &doc, &n, &spec_obj) || shape_spec_of(spec_obj, &spec) < 0)
        return NULL;
    switch (shape_json(&spec, (const unsigned char *)doc, (size_t)n, 0, &out)) {
    case SHAPE_KEEP:
        return out;
    case SHAPE_DROP:
        Py_RETURN_NONE;
    case SHAPE_UNSURE:
        Py_RETURN_FALSE;
    default:
        return NULL;
    }
}

static PyMethodDef methods[] = {
    {"values", values, METH_VARARGS,
     "values(raws, paths, fmt) -> per path, a list of frozenset[bytes] | None (None: decode "
     "in Python)."},
    {"shape", shape, METH_VARARGS,
     "shape(doc, spec) -> bytes to store, None (the key goes) or False (unsure: decide in "
     "Python)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fields_module = {
    PyModuleDef_HEAD_INIT, "globalstore.shaping._fields", "Declared index values, in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__fields(void) {
    no_values_set = PyFrozenSet_New(NULL);
    if (no_values_set == NULL)
        return NULL;
    return PyModule_Create(&fields_module);
}
