/* history.answer in C: the walk down one key's versions to the one a read as of a time
 * answers with (history.py says the layout and the rule): its version entries, and its
 * current value, the newest version of its partition. A read as of a time steps through
 * a key's versions one iterator call at a time; in Python each step also ran a dozen
 * bytecodes of slicing, unpacking and comparing, which took more time than the steps.
 * The iterator is rocksdict's RdictIter, driven through its Python methods. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ORDER_SIZE 12   /* partition (4 bytes) and inverted offset (8 bytes) */
#define TIMESTAMP_AT 2  /* codec.HEADER: the record timestamp after the two format bytes */
#define HEADER_SIZE 22  /* codec.HEADER_SIZE */
#define PARTITION_AT 10 /* codec.HEADER: the record's partition */
#define TOMBSTONE 0     /* a tombstone's version: 0, timestamp (8 bytes), partition (4) */
#define STEPS 16        /* history._STEPS: older versions stepped over before a seek */

static PyObject *s_valid, *s_key, *s_value, *s_next, *s_seek;

/* 1 valid, 0 not, -1 error */
static int is_valid(PyObject *it) {
    PyObject *r = PyObject_CallMethodNoArgs(it, s_valid);
    if (r == NULL) return -1;
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}

static int step(PyObject *it) {
    PyObject *r = PyObject_CallMethodNoArgs(it, s_next);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* The key the iterator stands on, as a new bytes object; NULL on error. */
static PyObject *key_of(PyObject *it) {
    PyObject *k = PyObject_CallMethodNoArgs(it, s_key);
    if (k != NULL && !PyBytes_Check(k)) {
        Py_DECREF(k);
        PyErr_SetString(PyExc_TypeError, "the iterator's key is not bytes");
        return NULL;
    }
    return k;
}

/* The record timestamp of a stored version; -1 with an exception set if it has none. */
static int timestamp_of(PyObject *version, int64_t *ts) {
    const unsigned char *v = (const unsigned char *)PyBytes_AS_STRING(version);
    Py_ssize_t n = PyBytes_GET_SIZE(version);
    Py_ssize_t at = (n > 0 && v[0] == TOMBSTONE) ? 1 : TIMESTAMP_AT;
    if (n < at + 8 || (v[0] != TOMBSTONE && n < HEADER_SIZE)) {
        PyErr_SetString(PyExc_ValueError, "a stored version too short to hold its timestamp");
        return -1;
    }
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u = (u << 8) | v[at + i];
    *ts = (int64_t)u;
    return 0;
}

static int64_t partition_at(const unsigned char *p) {
    return ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | p[3];
}

/* Step past the partition's versions that `prefix` (head + partition) starts, or seek past
 * them after STEPS. 0, or -1 on error. */
static int pass_partition(PyObject *it, PyObject *head, const char *prefix, Py_ssize_t size) {
    for (int i = 0; i < STEPS; i++) {
        if (step(it) < 0) return -1;
        int valid = is_valid(it);
        if (valid <= 0) return valid;
        PyObject *k = key_of(it);
        if (k == NULL) return -1;
        int same = PyBytes_GET_SIZE(k) >= size && memcmp(PyBytes_AS_STRING(k), prefix, size) == 0;
        Py_DECREF(k);
        if (!same) return 0;
    }
    Py_ssize_t h = PyBytes_GET_SIZE(head);
    const unsigned char *p = (const unsigned char *)prefix + h;
    uint32_t partition = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
    partition++;
    PyObject *target = PyBytes_FromStringAndSize(NULL, h + 4);
    if (target == NULL) return -1;
    unsigned char *t = (unsigned char *)PyBytes_AS_STRING(target);
    memcpy(t, PyBytes_AS_STRING(head), h);
    t[h] = partition >> 24;
    t[h + 1] = partition >> 16;
    t[h + 2] = partition >> 8;
    t[h + 3] = partition;
    PyObject *r = PyObject_CallMethodOneArg(it, s_seek, target);
    Py_DECREF(target);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *answer(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyBytes_Check(args[1]) || (args[3] != Py_None && !PyBytes_Check(args[3]))) {
        PyErr_SetString(PyExc_TypeError, "answer(it, head: bytes, t_ms: int, current: bytes | None)");
        return NULL;
    }
    PyObject *it = args[0], *head = args[1], *current = args[3];
    int64_t t_ms = PyLong_AsLongLong(args[2]);
    if (t_ms == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t h = PyBytes_GET_SIZE(head);
    PyObject *found = NULL; /* owned */
    int64_t found_ts = -1, found_p = -1;
    int64_t mine = -1; /* the partition the current value answers for (-1: none) */
    if (current != Py_None) {
        int64_t ts;
        if (timestamp_of(current, &ts) < 0) return NULL;
        if (ts <= t_ms) {
            found = Py_NewRef(current);
            found_ts = ts;
            found_p = mine = partition_at((const unsigned char *)PyBytes_AS_STRING(current) + PARTITION_AT);
        }
    }
    for (;;) {
        int valid = is_valid(it);
        if (valid < 0) goto fail;
        if (!valid) break;
        PyObject *entry = key_of(it);
        if (entry == NULL) goto fail;
        int ours = PyBytes_GET_SIZE(entry) == h + ORDER_SIZE &&
                   memcmp(PyBytes_AS_STRING(entry), PyBytes_AS_STRING(head), h) == 0;
        if (!ours) {
            Py_DECREF(entry);
            break;
        }
        int64_t p = partition_at((const unsigned char *)PyBytes_AS_STRING(entry) + h);
        if (p != mine) { /* else the current value answers for the partition: older ones pass */
            PyObject *version = PyObject_CallMethodNoArgs(it, s_value);
            if (version == NULL || !PyBytes_Check(version)) {
                if (version != NULL) PyErr_SetString(PyExc_TypeError, "a version is not bytes");
                Py_XDECREF(version);
                Py_DECREF(entry);
                goto fail;
            }
            int64_t ts;
            if (timestamp_of(version, &ts) < 0) {
                Py_DECREF(version);
                Py_DECREF(entry);
                goto fail;
            }
            if (ts > t_ms) {
                Py_DECREF(version);
                Py_DECREF(entry);
                if (step(it) < 0) goto fail;
                continue;
            }
            if (found == NULL || ts > found_ts || (ts == found_ts && p > found_p)) {
                Py_XSETREF(found, version);
                found_ts = ts;
                found_p = p;
            } else {
                Py_DECREF(version);
            }
        }
        int passed = pass_partition(it, head, PyBytes_AS_STRING(entry), h + 4);
        Py_DECREF(entry);
        if (passed < 0) goto fail;
    }
    if (found == NULL || PyBytes_AS_STRING(found)[0] == TOMBSTONE) {
        Py_XDECREF(found);
        Py_RETURN_NONE;
    }
    return found;
fail:
    Py_XDECREF(found);
    return NULL;
}

static PyMethodDef methods[] = {
    {"answer", (PyCFunction)(void (*)(void))answer, METH_FASTCALL,
     "answer(it, head, t_ms, current): history.answer, in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_history_walk", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit__history_walk(void) {
    s_valid = PyUnicode_InternFromString("valid");
    s_key = PyUnicode_InternFromString("key");
    s_value = PyUnicode_InternFromString("value");
    s_next = PyUnicode_InternFromString("next");
    s_seek = PyUnicode_InternFromString("seek");
    if (!s_valid || !s_key || !s_value || !s_next || !s_seek) return NULL;
    return PyModule_Create(&module);
}
