/* keys.write_changes in C: the hot loop of an indexed write, the same entries put and deleted
 * in the same order, without a Python frame per key (keys.py says what the entries are). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* prefix + value + "\0" + key, a new bytes object. */
static PyObject *entry(PyObject *prefix, PyObject *value, PyObject *key) {
    Py_ssize_t np = PyBytes_GET_SIZE(prefix), nv = PyBytes_GET_SIZE(value);
    Py_ssize_t nk = PyBytes_GET_SIZE(key);
    PyObject *out = PyBytes_FromStringAndSize(NULL, np + nv + 1 + nk);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    memcpy(w, PyBytes_AS_STRING(prefix), (size_t)np);
    memcpy(w + np, PyBytes_AS_STRING(value), (size_t)nv);
    w[np + nv] = 0;
    memcpy(w + np + nv + 1, PyBytes_AS_STRING(key), (size_t)nk);
    return out;
}

/* fn(a[, b][, handle]): a WriteBatch's put or delete, with the column family's handle when
 * one is given (then no Python function stands between). */
static PyObject *call(PyObject *fn, PyObject *a, PyObject *b, PyObject *handle) {
    PyObject *args[3] = {a, b, handle};
    size_t n = 1;
    if (b != NULL)
        n++;
    else
        args[1] = handle;
    if (handle != Py_None)
        n++;
    return PyObject_Vectorcall(fn, args, n, NULL);
}

/* Call `fn(prefix + v + SEP + key[, b""])` for each v of `values` (a set). */
static int each_entry(PyObject *fn, PyObject *prefix, PyObject *values, PyObject *key,
                      PyObject *empty, PyObject *handle) {
    PyObject *it = PyObject_GetIter(values), *v;
    if (it == NULL)
        return -1;
    while ((v = PyIter_Next(it)) != NULL) {
        PyObject *e = entry(prefix, v, key);
        Py_DECREF(v);
        if (e == NULL)
            break;
        PyObject *r = call(fn, e, empty, handle);
        Py_DECREF(e);
        if (r == NULL)
            break;
        Py_DECREF(r);
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* write_changes(entries_prefix, keys, reverse, news, olds, encode, put, delete, handle)
 * -> delta */
static PyObject *write_changes(PyObject *self, PyObject *args) {
    PyObject *prefix, *keys, *reverse, *news, *olds, *encode, *put, *del, *handle;
    if (!PyArg_ParseTuple(args, "SO!O!O!O!OOOO", &prefix, &PyList_Type, &keys, &PyList_Type,
                          &reverse, &PyList_Type, &news, &PyList_Type, &olds, &encode, &put,
                          &del, &handle))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(reverse) != n || PyList_GET_SIZE(news) != n ||
        PyList_GET_SIZE(olds) != n) {
        PyErr_SetString(PyExc_ValueError, "keys, reverse, news and olds differ in length");
        return NULL;
    }
    PyObject *empty = PyBytes_FromStringAndSize("", 0), *sep = PyBytes_FromStringAndSize("\0", 1);
    if (empty == NULL || sep == NULL)
        goto fail;
    long long delta = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i), *rkey = PyList_GET_ITEM(reverse, i);
        PyObject *new = PyList_GET_ITEM(news, i), *old_raw = PyList_GET_ITEM(olds, i);
        PyObject *gone = NULL, *added = NULL;
        if (!PyBytes_Check(key) || !PyAnySet_Check(new)) {
            PyErr_SetString(PyExc_TypeError, "keys: bytes; news: frozensets of bytes");
            goto fail;
        }
        if (old_raw == Py_None) {
            if (PySet_GET_SIZE(new) == 0)
                continue;
            added = Py_NewRef(new);
        } else {
            PyObject *parts = PyObject_CallMethod(old_raw, "split", "O", sep);
            PyObject *old = parts == NULL ? NULL : PyFrozenSet_New(parts);
            Py_XDECREF(parts);
            if (old == NULL)
                goto fail;
            int same = PyObject_RichCompareBool(new, old, Py_EQ);
            if (same != 0) {
                Py_DECREF(old);
                if (same < 0)
                    goto fail;
                continue;
            }
            gone = PyNumber_Subtract(old, new);
            added = PyNumber_Subtract(new, old);
            Py_DECREF(old);
            if (gone == NULL || added == NULL) {
                Py_XDECREF(gone);
                Py_XDECREF(added);
                goto fail;
            }
        }
        int bad = (gone != NULL && each_entry(del, prefix, gone, key, NULL, handle) < 0) ||
                  each_entry(put, prefix, added, key, empty, handle) < 0;
        delta += PySet_GET_SIZE(added) - (gone == NULL ? 0 : PySet_GET_SIZE(gone));
        Py_XDECREF(gone);
        Py_DECREF(added);
        if (bad)
            goto fail;
        PyObject *r;
        if (PySet_GET_SIZE(new) > 0) {
            PyObject *encoded;
            if (PySet_GET_SIZE(new) == 1) { /* the common case: the value itself */
                PyObject *it = PyObject_GetIter(new);
                encoded = it == NULL ? NULL : PyIter_Next(it);
                Py_XDECREF(it);
            } else {
                encoded = PyObject_CallOneArg(encode, new);
            }
            if (encoded == NULL)
                goto fail;
            r = call(put, rkey, encoded, handle);
            Py_DECREF(encoded);
        } else {
            r = call(del, rkey, NULL, handle);
        }
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
    }
    Py_DECREF(empty);
    Py_DECREF(sep);
    return PyLong_FromLongLong(delta);
fail:
    Py_XDECREF(empty);
    Py_XDECREF(sep);
    return NULL;
}

static PyMethodDef methods[] = {
    {"write_changes", write_changes, METH_VARARGS,
     "write_changes(entries_prefix, keys, reverse, news, olds, encode, put, delete, handle)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef entries_module = {
    PyModuleDef_HEAD_INIT, "globalstore.storage._entries", "Index entries, written in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__entries(void) { return PyModule_Create(&entries_module); }
