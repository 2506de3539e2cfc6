/* keys.write_changes in C: the hot loop of an indexed write, without a Python frame per key
 * (keys.py says what the entries are); KeyFilter, the keys a bulk restore into an empty
 * store has written, which tells it whose old entries (or values) it need not look up;
 * Staging, the put and delete that note what a batch's keys were given; and Versioned, the
 * put and delete of a store with history, which move the value a record replaces into its
 * version's entry.
 *
 * The entries a batch changes go into its WriteBatch in key order: RocksDB's memtable
 * inserts a key next to the one before in a few comparisons, but searches its whole skip
 * list for a key far from it, and a batch's entries, in the order of its keys, jump between
 * index values and between the entry and reverse ranges (4 entries a record cost 2.7 us
 * written unsorted, 0.9 us sorted; docs/performance.md, "Declared indexes"). A batch's keys
 * are distinct, so are its entries: their order changes nothing else. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* -- the entries of a batch, sorted -------------------------------------------------------- */

typedef struct {
    PyObject *key;   /* owned */
    PyObject *value; /* owned; NULL: a delete */
} op;

typedef struct {
    op *items;
    Py_ssize_t n, cap;
} ops;

static int ops_add(ops *o, PyObject *key, PyObject *value) {
    if (o->n == o->cap) {
        Py_ssize_t cap = o->cap ? 2 * o->cap : 256;
        op *items = PyMem_Realloc(o->items, (size_t)cap * sizeof(op));
        if (items == NULL) {
            Py_DECREF(key);
            Py_XDECREF(value);
            PyErr_NoMemory();
            return -1;
        }
        o->items = items;
        o->cap = cap;
    }
    o->items[o->n].key = key; /* steals both */
    o->items[o->n].value = value;
    o->n++;
    return 0;
}

static void ops_free(ops *o) {
    for (Py_ssize_t i = 0; i < o->n; i++) {
        Py_DECREF(o->items[i].key);
        Py_XDECREF(o->items[i].value);
    }
    PyMem_Free(o->items);
}

static int by_key(const void *a, const void *b) {
    PyObject *x = ((const op *)a)->key, *y = ((const op *)b)->key;
    Py_ssize_t nx = PyBytes_GET_SIZE(x), ny = PyBytes_GET_SIZE(y);
    int c = memcmp(PyBytes_AS_STRING(x), PyBytes_AS_STRING(y), (size_t)(nx < ny ? nx : ny));
    return c != 0 ? c : (nx > ny) - (nx < ny);
}

/* prefix + value [+ "\0" + key], a new bytes object. */
static PyObject *joined(PyObject *prefix, PyObject *value, PyObject *key) {
    Py_ssize_t np = PyBytes_GET_SIZE(prefix), nv = PyBytes_GET_SIZE(value);
    Py_ssize_t nk = key == NULL ? -1 : PyBytes_GET_SIZE(key);
    PyObject *out = PyBytes_FromStringAndSize(NULL, np + nv + 1 + nk);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    memcpy(w, PyBytes_AS_STRING(prefix), (size_t)np);
    memcpy(w + np, PyBytes_AS_STRING(value), (size_t)nv);
    if (key != NULL) {
        w[np + nv] = 0;
        memcpy(w + np + nv + 1, PyBytes_AS_STRING(key), (size_t)nk);
    }
    return out;
}

/* An entry `prefix + v + SEP + key` for each v of `values` (a set), put (value `empty`) or
 * deleted (`empty` NULL). */
static int each_entry(ops *o, PyObject *prefix, PyObject *values, PyObject *key,
                      PyObject *empty) {
    PyObject *it = PyObject_GetIter(values), *v;
    if (it == NULL)
        return -1;
    while ((v = PyIter_Next(it)) != NULL) {
        PyObject *e = joined(prefix, v, key);
        Py_DECREF(v);
        if (e == NULL || ops_add(o, e, Py_XNewRef(empty)) < 0)
            break;
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* fn(a[, b][, handle]): a WriteBatch's put or delete, with the column family's handle when
 * one is given (then no Python function stands between). */
static int call(PyObject *fn, PyObject *a, PyObject *b, PyObject *handle) {
    PyObject *args[3] = {a, b, handle};
    size_t n = 1;
    if (b != NULL)
        n++;
    else
        args[1] = handle;
    if (handle != Py_None)
        n++;
    PyObject *r = PyObject_Vectorcall(fn, args, n, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* The stored reverse entries of `reverse` (a list), where `lookup` (a list of indexes into
 * it, or None: every one) says they may exist, read with one get_many(); a new list, None
 * where there is none. */
static PyObject *olds_of(PyObject *reverse, PyObject *get_many, PyObject *lookup) {
    Py_ssize_t n = PyList_GET_SIZE(reverse);
    if (lookup == Py_None) {
        if (n == 0)
            return PyList_New(0);
        PyObject *got = PyObject_CallOneArg(get_many, reverse);
        if (got != NULL && (!PyList_Check(got) || PyList_GET_SIZE(got) != n)) {
            Py_DECREF(got);
            PyErr_SetString(PyExc_ValueError, "get_many: a list, a value per key");
            return NULL;
        }
        return got;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        PyList_SET_ITEM(out, i, Py_NewRef(Py_None));
    Py_ssize_t m = PyList_GET_SIZE(lookup);
    if (m == 0)
        return out;
    PyObject *wanted = PyList_New(m), *got = NULL;
    if (wanted == NULL)
        goto fail;
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(lookup, j));
        if (i < 0 || i >= n) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "lookup: an index of keys");
            goto fail;
        }
        PyList_SET_ITEM(wanted, j, Py_NewRef(PyList_GET_ITEM(reverse, i)));
    }
    got = PyObject_CallOneArg(get_many, wanted);
    if (got == NULL)
        goto fail;
    if (!PyList_Check(got) || PyList_GET_SIZE(got) != m) {
        PyErr_SetString(PyExc_ValueError, "get_many: a list, a value per key");
        goto fail;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(lookup, j));
        PyList_SetItem(out, i, Py_NewRef(PyList_GET_ITEM(got, j)));
    }
    Py_DECREF(wanted);
    Py_DECREF(got);
    return out;
fail:
    Py_XDECREF(wanted);
    Py_XDECREF(got);
    Py_DECREF(out);
    return NULL;
}

/* What key `key` changes, from its index values before the batch `old` (None: none; bytes:
 * one value or, read from a reverse entry, several SEP-joined; or a set) to `new` (one value
 * as bytes, or a frozenset): its entries gone and added and, given `rkey`, its reverse entry
 * (NULL: the index keeps none). Adds to *delta. */
static int key_changes(ops *o, PyObject *prefix, PyObject *key, PyObject *rkey, PyObject *new,
                       PyObject *old, PyObject *encode, PyObject *empty, PyObject *sep,
                       long long *delta) {
    if (PyBytes_Check(new)) {
        if (old == Py_None) { /* the common case: one value, none before */
            PyObject *e = joined(prefix, new, key);
            if (e == NULL || ops_add(o, e, Py_NewRef(empty)) < 0)
                return -1;
            *delta += 1;
            return rkey == NULL ? 0 : ops_add(o, Py_NewRef(rkey), Py_NewRef(new));
        }
        if (PyBytes_Check(old)) { /* the same one value: nothing changes */
            int same = PyObject_RichCompareBool(new, old, Py_EQ);
            if (same != 0)
                return same < 0 ? -1 : 0;
            if (memchr(PyBytes_AS_STRING(old), 0, (size_t)PyBytes_GET_SIZE(old)) == NULL) {
                /* one value for another (a follower's common case): no set is made */
                PyObject *gone = joined(prefix, old, key), *added = NULL;
                if (gone == NULL || ops_add(o, gone, NULL) < 0)
                    return -1;
                added = joined(prefix, new, key);
                if (added == NULL || ops_add(o, added, Py_NewRef(empty)) < 0)
                    return -1;
                return rkey == NULL ? 0 : ops_add(o, Py_NewRef(rkey), Py_NewRef(new));
            }
        }
        PyObject *one = PyFrozenSet_New(NULL);
        if (one == NULL || PySet_Add(one, new) < 0) {
            Py_XDECREF(one);
            return -1;
        }
        int rc = key_changes(o, prefix, key, rkey, one, old, encode, empty, sep, delta);
        Py_DECREF(one);
        return rc;
    }
    PyObject *gone = NULL, *added = NULL;
    if (old == Py_None) {
        if (PySet_GET_SIZE(new) == 0)
            return 0;
        added = Py_NewRef(new);
    } else {
        PyObject *was;
        if (PyAnySet_Check(old)) {
            was = Py_NewRef(old);
        } else {
            PyObject *parts = PyObject_CallMethod(old, "split", "O", sep);
            was = parts == NULL ? NULL : PyFrozenSet_New(parts);
            Py_XDECREF(parts);
        }
        if (was == NULL)
            return -1;
        int same = PyObject_RichCompareBool(new, was, Py_EQ);
        if (same != 0) {
            Py_DECREF(was);
            return same < 0 ? -1 : 0;
        }
        gone = PyNumber_Subtract(was, new);
        added = PyNumber_Subtract(new, was);
        Py_DECREF(was);
        if (gone == NULL || added == NULL) {
            Py_XDECREF(gone);
            Py_XDECREF(added);
            return -1;
        }
    }
    int bad = (gone != NULL && each_entry(o, prefix, gone, key, NULL) < 0) ||
              each_entry(o, prefix, added, key, empty) < 0;
    *delta += PySet_GET_SIZE(added) - (gone == NULL ? 0 : PySet_GET_SIZE(gone));
    Py_XDECREF(gone);
    Py_DECREF(added);
    if (bad)
        return -1;
    if (rkey == NULL)
        return 0;
    PyObject *encoded = NULL;
    if (PySet_GET_SIZE(new) == 1) { /* the common case: the value itself */
        PyObject *it = PyObject_GetIter(new);
        encoded = it == NULL ? NULL : PyIter_Next(it);
        Py_XDECREF(it);
        if (encoded == NULL)
            return -1;
    } else if (PySet_GET_SIZE(new) > 1) {
        encoded = PyObject_CallOneArg(encode, new);
        if (encoded == NULL)
            return -1;
    }
    return ops_add(o, Py_NewRef(rkey), encoded); /* no values: the reverse entry goes */
}

/* The changes of every key (`rkeys`: their reverse entries, NULL: none kept), written with
 * `put` and `delete` in key order; the change in the index's number of entries, or -1 with
 * an exception (*failed set). */
static long long write_all(PyObject *prefix, PyObject *rkeys, PyObject *keys, PyObject *news,
                           PyObject *olds, PyObject *encode, PyObject *put, PyObject *del,
                           PyObject *handle, int *failed) {
    ops o = {NULL, 0, 0};
    long long delta = 0;
    *failed = 1;
    PyObject *empty = PyBytes_FromStringAndSize("", 0), *sep = PyBytes_FromStringAndSize("\0", 1);
    if (empty == NULL || sep == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        PyObject *old = PyList_GET_ITEM(olds, i);
        if (old != Py_None && !PyBytes_Check(old) && !PyAnySet_Check(old)) {
            PyErr_SetString(PyExc_TypeError, "olds: bytes, a frozenset of bytes or None per key");
            goto done;
        }
        PyObject *rkey = rkeys == NULL ? NULL : PyList_GET_ITEM(rkeys, i);
        if (key_changes(&o, prefix, PyList_GET_ITEM(keys, i), rkey, PyList_GET_ITEM(news, i), old,
                        encode, empty, sep, &delta) < 0)
            goto done;
    }
    qsort(o.items, (size_t)o.n, sizeof(op), by_key);
    for (Py_ssize_t i = 0; i < o.n; i++) {
        op *e = &o.items[i];
        if (call(e->value == NULL ? del : put, e->key, e->value, handle) < 0)
            goto done;
    }
    *failed = 0;
done:
    ops_free(&o);
    Py_XDECREF(empty);
    Py_XDECREF(sep);
    return delta;
}

/* keys and news: lists of one length, bytes and bytes or frozensets; else -1 with an error. */
static int check_keys(PyObject *keys, PyObject *news) {
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(news) != n) {
        PyErr_SetString(PyExc_ValueError, "keys and news differ in length");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i), *new = PyList_GET_ITEM(news, i);
        if (!PyBytes_Check(key) || !(PyAnySet_Check(new) || PyBytes_Check(new))) {
            PyErr_SetString(PyExc_TypeError, "keys: bytes; news: bytes or frozensets of bytes");
            return -1;
        }
    }
    return 0;
}

/* write_changes(entries_prefix, reverse_prefix, keys, news, get_many, lookup, encode, put,
 * delete, handle) -> delta: an index that keeps reverse entries, its old values read there. */
static PyObject *write_changes(PyObject *self, PyObject *args) {
    PyObject *prefix, *rprefix, *keys, *news, *get_many, *lookup, *encode, *put, *del, *handle;
    if (!PyArg_ParseTuple(args, "SSO!O!OOOOOO", &prefix, &rprefix, &PyList_Type, &keys,
                          &PyList_Type, &news, &get_many, &lookup, &encode, &put, &del, &handle))
        return NULL;
    if (check_keys(keys, news) < 0)
        return NULL;
    if (lookup != Py_None && !PyList_Check(lookup)) {
        PyErr_SetString(PyExc_TypeError, "lookup: a list of indexes into keys, or None");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *reverse = PyList_New(n), *olds = NULL, *out = NULL;
    if (reverse == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rkey = joined(rprefix, PyList_GET_ITEM(keys, i), NULL);
        if (rkey == NULL)
            goto done;
        PyList_SET_ITEM(reverse, i, rkey);
    }
    olds = olds_of(reverse, get_many, lookup);
    if (olds == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *old = PyList_GET_ITEM(olds, i);
        if (old != Py_None && !PyBytes_Check(old)) {
            PyErr_SetString(PyExc_TypeError, "get_many: bytes or None per key");
            goto done;
        }
    }
    int failed;
    long long delta = write_all(prefix, reverse, keys, news, olds, encode, put, del, handle,
                                &failed);
    if (!failed)
        out = PyLong_FromLongLong(delta);
done:
    Py_DECREF(reverse);
    Py_XDECREF(olds);
    return out;
}

/* write_entries(entries_prefix, keys, news, olds, put, delete, handle) -> delta: an index
 * that keeps no reverse entries, each key's values before the batch given in `olds`. */
static PyObject *write_entries(PyObject *self, PyObject *args) {
    PyObject *prefix, *keys, *news, *olds, *put, *del, *handle;
    if (!PyArg_ParseTuple(args, "SO!O!O!OOO", &prefix, &PyList_Type, &keys, &PyList_Type, &news,
                          &PyList_Type, &olds, &put, &del, &handle))
        return NULL;
    if (check_keys(keys, news) < 0)
        return NULL;
    if (PyList_GET_SIZE(olds) != PyList_GET_SIZE(keys)) {
        PyErr_SetString(PyExc_ValueError, "keys and olds differ in length");
        return NULL;
    }
    int failed;
    long long delta = write_all(prefix, NULL, keys, news, olds, NULL, put, del, handle, &failed);
    return failed ? NULL : PyLong_FromLongLong(delta);
}

/* -- KeyFilter ------------------------------------------------------------------------------
 * A Bloom filter of the keys written, in layers that double in size as keys come (each sized
 * for its share at about 1 % false positives, 10 bits a key): no key written is ever missed,
 * and a key not written is taken for one about once in a hundred a layer, which costs only
 * the lookup the filter saves the others. 1.25 bytes a key of its layers' capacity: up to
 * 2.5 a key written, while the restore lasts. */

#define HASHES 7
#define FIRST_LAYER_KEYS (1 << 16)
#define MAX_LAYERS 40

typedef struct {
    uint64_t *bits;
    uint64_t nbits; /* 10 a key of its capacity */
    Py_ssize_t keys, capacity;
} layer;

/* Bit `a` of a layer's nbits, without a division: the high half of a * nbits. */
static uint64_t bit_of(uint64_t a, uint64_t nbits) {
    return (uint64_t)(((unsigned __int128)a * nbits) >> 64);
}

typedef struct {
    PyObject_HEAD
    layer layers[MAX_LAYERS];
    int nlayers;
} KeyFilter;

static uint64_t hash64(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n; /* FNV-1a, then murmur's finaliser */
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static int layer_has(const layer *l, uint64_t h) {
    uint64_t a = h, b = (h >> 32) | (h << 32) | 1;
    for (int i = 0; i < HASHES; i++, a += b) {
        uint64_t bit = bit_of(a, l->nbits);
        if (!(l->bits[bit >> 6] & (1ULL << (bit & 63))))
            return 0;
    }
    return 1;
}

static void layer_add(layer *l, uint64_t h) {
    uint64_t a = h, b = (h >> 32) | (h << 32) | 1;
    for (int i = 0; i < HASHES; i++, a += b) {
        uint64_t bit = bit_of(a, l->nbits);
        l->bits[bit >> 6] |= 1ULL << (bit & 63);
    }
    l->keys++;
}

static int add_layer(KeyFilter *f) {
    if (f->nlayers == MAX_LAYERS) {
        PyErr_SetString(PyExc_OverflowError, "KeyFilter: too many keys");
        return -1;
    }
    Py_ssize_t capacity = (Py_ssize_t)FIRST_LAYER_KEYS << f->nlayers;
    uint64_t nbits = (uint64_t)capacity * 10; /* a multiple of 64 */
    uint64_t *bits = PyMem_Calloc((size_t)(nbits / 64), sizeof(uint64_t));
    if (bits == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    f->layers[f->nlayers++] = (layer){bits, nbits, 0, capacity};
    return 0;
}

static void key_filter_dealloc(KeyFilter *f) {
    for (int i = 0; i < f->nlayers; i++)
        PyMem_Free(f->layers[i].bits);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

/* Whether `key` may have been added before (1: every one that was; 0 it was not), then
 * adds it. -1 on error. */
static int key_filter_seen_then_add_one(KeyFilter *f, PyObject *key) {
    uint64_t h = hash64((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
    for (int j = 0; j < f->nlayers; j++)
        if (layer_has(&f->layers[j], h))
            return 1; /* in the filter already */
    if ((f->nlayers == 0 || f->layers[f->nlayers - 1].keys >= f->layers[f->nlayers - 1].capacity) &&
        add_layer(f) < 0)
        return -1;
    layer_add(&f->layers[f->nlayers - 1], h);
    return 0;
}

/* seen_then_add(keys) -> the indexes of the keys that may have been added before (every
 * one that was), then adds them all. */
static PyObject *key_filter_seen_then_add(KeyFilter *f, PyObject *keys) {
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "keys: a list of bytes");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!PyBytes_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "keys: a list of bytes");
            goto fail;
        }
        int seen = key_filter_seen_then_add_one(f, key);
        if (seen < 0)
            goto fail;
        if (seen) {
            PyObject *index = PyLong_FromSsize_t(i);
            int rc = index == NULL ? -1 : PyList_Append(out, index);
            Py_XDECREF(index);
            if (rc < 0)
                goto fail;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *key_filter_size(KeyFilter *f, PyObject *unused) {
    (void)unused;
    size_t bytes = 0;
    for (int i = 0; i < f->nlayers; i++)
        bytes += (size_t)(f->layers[i].nbits / 8);
    return PyLong_FromSize_t(bytes);
}

static PyMethodDef key_filter_methods[] = {
    {"seen_then_add", (PyCFunction)key_filter_seen_then_add, METH_O,
     "seen_then_add(keys) -> the indexes of the keys that may have been added before (every "
     "one that was); then adds them all."},
    {"nbytes", (PyCFunction)key_filter_size, METH_NOARGS, "nbytes() -> the memory it holds."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KeyFilterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "globalstore.storage._entries.KeyFilter",
    .tp_basicsize = sizeof(KeyFilter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The keys added so far, as a Bloom filter that grows: never misses one added.",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)key_filter_dealloc,
    .tp_methods = key_filter_methods,
};

/* -- Staging --------------------------------------------------------------------------------
 * A WriteBatch's put or delete that also notes each key's last write in `staged` (the value,
 * None for a delete): batch.Batch's tracking put and delete, which the loops call once a
 * record, with no Python frame. */

typedef struct {
    PyObject_HEAD
    PyObject *write;  /* the WriteBatch's put or delete */
    PyObject *staged; /* {key: value or None} */
    vectorcallfunc vectorcall;
} Staging;

static PyObject *staging_call(PyObject *self, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames) {
    Staging *s = (Staging *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || n < 1 || n > 2) {
        PyErr_SetString(PyExc_TypeError, "put(key, value) or delete(key)");
        return NULL;
    }
    PyObject *r = PyObject_Vectorcall(s->write, args, (size_t)n, NULL);
    if (r == NULL)
        return NULL;
    if (PyDict_SetItem(s->staged, args[0], n == 2 ? args[1] : Py_None) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

static PyObject *staging_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *write, *staged;
    static char *kwlist[] = {"write", "staged", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!", kwlist, &write, &PyDict_Type, &staged))
        return NULL;
    Staging *s = (Staging *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->write = Py_NewRef(write);
    s->staged = Py_NewRef(staged);
    s->vectorcall = staging_call;
    return (PyObject *)s;
}

static void staging_dealloc(Staging *s) {
    Py_XDECREF(s->write);
    Py_XDECREF(s->staged);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyTypeObject StagingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "globalstore.storage._entries.Staging",
    .tp_basicsize = sizeof(Staging),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Staging(write, staged): write(key[, value]), noting staged[key] = value or None.",
    .tp_new = staging_new,
    .tp_dealloc = (destructor)staging_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Staging, vectorcall),
};

/* -- Versioned ------------------------------------------------------------------------------
 * A store with history's put or delete (history.py, layout 3): the data's write, and the
 * version entries it makes, into the index column family of the same WriteBatch, with no
 * Python frame a record. The value a record replaces (its key's current value) moves into
 * the entry of its own partition and offset; a delete also keeps its tombstone's. That value
 * is the one the batch wrote last for the key (`pending`), else the database's: a key a
 * KeyFilter of a bulk restore into an empty store (`written`) says was never written has
 * none; the others are read after the loop, all with one multi-get (`deferred`: the key and
 * its record's partition and offset; move_deferred): one call a batch, not a point get a
 * record. An entry, as history.version_key makes it:
 *     b"h" + the key, each \x00 as \x00\xff + \x00\x00 + partition (4 bytes)
 *         + 2**64 - 1 - offset (8 bytes), both big-endian
 * put(key, stored) finds the record's partition and offset in the stored bytes' header
 * (codec.HEADER: layout, format, timestamp at 2, partition at 10, offset at 14); a write that
 * returned False (a quarantined record: the key is unchanged) moves nothing, nor does the
 * record that wrote the current value, applied again. delete(key, partition, offset,
 * timestamp) keeps b"\x00" + timestamp (8 bytes) + partition (4 bytes). */

#define HEADER_SIZE 22
#define PARTITION_AT 10
#define OFFSET_AT 14
#define NO_RECORD UINT64_MAX /* a delete's: no stored value has its partition */

typedef struct {
    PyObject_HEAD
    PyObject *write;       /* the data's put or delete (Staging's, a quarantine's, ...) */
    PyObject *put_version; /* the WriteBatch's put */
    PyObject *handle;      /* the index column family's handle */
    PyObject *pending;     /* {key: stored bytes, None if deleted}: the batch's writes */
    PyObject *written;     /* a KeyFilter, or None: every key may have a value */
    PyObject *deferred;    /* [(key, partition, offset)]: old values to read, then move */
    vectorcallfunc vectorcall;
} Versioned;

static uint64_t get_be(const unsigned char *b, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = (v << 8) | b[i];
    return v;
}

static void set_be(unsigned char *out, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--, v >>= 8)
        out[i] = (unsigned char)(v & 0xff);
}

/* The entry of `key`'s version written at (partition, offset), a new bytes object. */
static PyObject *version_key(PyObject *key, uint32_t partition, uint64_t offset) {
    const char *k = PyBytes_AS_STRING(key);
    Py_ssize_t n = PyBytes_GET_SIZE(key), zeros = 0;
    for (const char *z = memchr(k, 0, (size_t)n); z != NULL;
         z = memchr(z + 1, 0, (size_t)(k + n - z - 1)))
        zeros++;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 1 + n + zeros + 2 + 4 + 8);
    if (out == NULL)
        return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    *w++ = 'h';
    if (zeros == 0) {
        memcpy(w, k, (size_t)n);
        w += n;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            *w++ = (unsigned char)k[i];
            if (k[i] == 0)
                *w++ = 0xff;
        }
    }
    *w++ = 0;
    *w++ = 0;
    set_be(w, partition, 4);
    set_be(w + 4, ~offset, 8); /* 2**64 - 1 - offset: a partition's newest first */
    return out;
}

/* put_version(entry, value, handle), stealing both. */
static int put_entry(PyObject *put_version, PyObject *handle, PyObject *entry, PyObject *value) {
    if (entry == NULL || value == NULL) {
        Py_XDECREF(entry);
        Py_XDECREF(value);
        return -1;
    }
    PyObject *args[3] = {entry, value, handle};
    PyObject *r = PyObject_Vectorcall(put_version, args, 3, NULL);
    Py_DECREF(entry);
    Py_DECREF(value);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* The header of stored bytes, or NULL with an exception set. */
static const unsigned char *header_of(PyObject *stored) {
    if (!PyBytes_Check(stored) || PyBytes_GET_SIZE(stored) < HEADER_SIZE) {
        PyErr_SetString(PyExc_ValueError, "stored bytes with their header");
        return NULL;
    }
    return (const unsigned char *)PyBytes_AS_STRING(stored);
}

/* `old` (None: nothing) replaced by the record at (partition, offset): into its version's
 * entry, unless it is that record's own value. */
static int move_old(PyObject *put_version, PyObject *handle, PyObject *key, PyObject *old,
                    uint64_t partition, uint64_t offset) {
    if (old == Py_None)
        return 0;
    const unsigned char *h = header_of(old);
    if (h == NULL)
        return -1;
    uint64_t p = get_be(h + PARTITION_AT, 4), o = get_be(h + OFFSET_AT, 8);
    if (p == partition && o == offset)
        return 0; /* the same record, applied again */
    return put_entry(put_version, handle, version_key(key, (uint32_t)p, o), Py_NewRef(old));
}

/* `key`'s value before this write as a new reference (None: none), or NULL with no
 * exception: the database's, read later. */
static PyObject *old_value(Versioned *v, PyObject *key, int *later) {
    *later = 0;
    PyObject *old = PyDict_GetItemWithError(v->pending, key);
    if (old != NULL)
        return Py_NewRef(old);
    if (PyErr_Occurred())
        return NULL;
    if (v->written != Py_None) {
        int seen = key_filter_seen_then_add_one((KeyFilter *)v->written, key);
        if (seen <= 0)
            return seen < 0 ? NULL : Py_NewRef(Py_None);
    }
    *later = 1;
    return Py_NewRef(Py_None);
}

static int tombstone_version(Versioned *v, PyObject *key, PyObject *const *record) {
    long long partition = PyLong_AsLongLong(record[0]), offset = PyLong_AsLongLong(record[1]);
    long long timestamp = PyLong_AsLongLong(record[2]);
    if (PyErr_Occurred())
        return -1;
    PyObject *tombstone = PyBytes_FromStringAndSize(NULL, 1 + 8 + 4);
    if (tombstone != NULL) {
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(tombstone);
        w[0] = 0; /* no stored value starts with a zero byte (its layout) */
        set_be(w + 1, (uint64_t)timestamp, 8);
        set_be(w + 9, (uint32_t)partition, 4);
    }
    return put_entry(v->put_version, v->handle,
                     version_key(key, (uint32_t)partition, (uint64_t)offset), tombstone);
}

/* The old value of `key`, replaced by the record at (partition, offset): moved now, or read
 * and moved after the loop (`later`). */
static int replaced(Versioned *v, PyObject *key, PyObject *old, int later, uint64_t partition,
                    uint64_t offset) {
    if (!later)
        return move_old(v->put_version, v->handle, key, old, partition, offset);
    PyObject *item = Py_BuildValue("(OKK)", key, (unsigned long long)partition,
                                   (unsigned long long)offset);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(v->deferred, item);
    Py_DECREF(item);
    return rc;
}

/* The versions a put (n == 2) or delete (n == 4) of `args` makes, given the key's old value. */
static int record_versions(Versioned *v, PyObject *const *args, Py_ssize_t n, PyObject *old,
                           int later) {
    if (n == 2) {
        const unsigned char *h = header_of(args[1]);
        if (h == NULL || replaced(v, args[0], old, later, get_be(h + PARTITION_AT, 4),
                                  get_be(h + OFFSET_AT, 8)) < 0)
            return -1;
        return PyDict_SetItem(v->pending, args[0], args[1]);
    }
    if (replaced(v, args[0], old, later, NO_RECORD, NO_RECORD) < 0 ||
        tombstone_version(v, args[0], args + 1) < 0)
        return -1;
    return PyDict_SetItem(v->pending, args[0], Py_None);
}

static PyObject *versioned_call(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames) {
    Versioned *v = (Versioned *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || (n != 2 && n != 4) || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "put(key, stored) or delete(key, partition, offset, timestamp)");
        return NULL;
    }
    if (n == 2 && header_of(args[1]) == NULL)
        return NULL;
    int later;
    PyObject *old = old_value(v, args[0], &later);
    if (old == NULL)
        return NULL;
    PyObject *r = PyObject_Vectorcall(v->write, args, n == 2 ? 2 : 1, NULL);
    if (r != NULL && !(n == 2 && r == Py_False) && record_versions(v, args, n, old, later) < 0)
        Py_CLEAR(r);
    Py_DECREF(old);
    return r;
}

/* move_deferred(deferred, olds, put_version, handle): each deferred key's old value (olds,
 * read after the loop, in its order) into its version's entry. */
static PyObject *move_deferred(PyObject *self, PyObject *args) {
    PyObject *deferred, *olds, *put_version, *handle;
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyList_Type, &deferred, &PyList_Type, &olds,
                          &put_version, &handle))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(deferred);
    if (PyList_GET_SIZE(olds) != n) {
        PyErr_SetString(PyExc_ValueError, "deferred and olds differ in length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key;
        unsigned long long partition, offset;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(deferred, i), "SKK", &key, &partition, &offset))
            return NULL;
        if (move_old(put_version, handle, key, PyList_GET_ITEM(olds, i), partition, offset) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *versioned_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *write, *put, *handle, *pending, *written, *deferred;
    static char *kwlist[] = {"write", "put_version", "handle", "pending", "written", "deferred",
                             NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!OO!", kwlist, &write, &put, &handle,
                                     &PyDict_Type, &pending, &written, &PyList_Type, &deferred))
        return NULL;
    if (written != Py_None && !PyObject_TypeCheck(written, &KeyFilterType)) {
        PyErr_SetString(PyExc_TypeError, "written: a KeyFilter or None");
        return NULL;
    }
    Versioned *v = (Versioned *)type->tp_alloc(type, 0);
    if (v == NULL)
        return NULL;
    v->write = Py_NewRef(write);
    v->put_version = Py_NewRef(put);
    v->handle = Py_NewRef(handle);
    v->pending = Py_NewRef(pending);
    v->written = Py_NewRef(written);
    v->deferred = Py_NewRef(deferred);
    v->vectorcall = versioned_call;
    return (PyObject *)v;
}

static void versioned_dealloc(Versioned *v) {
    Py_XDECREF(v->write);
    Py_XDECREF(v->put_version);
    Py_XDECREF(v->handle);
    Py_XDECREF(v->pending);
    Py_XDECREF(v->written);
    Py_XDECREF(v->deferred);
    Py_TYPE(v)->tp_free((PyObject *)v);
}

static PyTypeObject VersionedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "globalstore.storage._entries.Versioned",
    .tp_basicsize = sizeof(Versioned),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Versioned(write, put_version, handle, pending, written, deferred): write(key, "
              "stored) or write(key, partition, offset, timestamp), moving the value it "
              "replaces into its version's entry (put_version(entry, value, handle)), or "
              "noting it in deferred to be read.",
    .tp_new = versioned_new,
    .tp_dealloc = (destructor)versioned_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Versioned, vectorcall),
};

static PyMethodDef methods[] = {
    {"move_deferred", move_deferred, METH_VARARGS,
     "move_deferred(deferred, olds, put_version, handle): each old value into its version's "
     "entry."},
    {"write_entries", write_entries, METH_VARARGS,
     "write_entries(entries_prefix, keys, news, olds, put, delete, handle) -> delta"},
    {"write_changes", write_changes, METH_VARARGS,
     "write_changes(entries_prefix, reverse_prefix, keys, news, get_many, lookup, encode, put, "
     "delete, handle) -> delta"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef entries_module = {
    PyModuleDef_HEAD_INIT, "globalstore.storage._entries", "Index entries, written in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__entries(void) {
    if (PyType_Ready(&KeyFilterType) < 0 || PyType_Ready(&StagingType) < 0 ||
        PyType_Ready(&VersionedType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&entries_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "KeyFilter", (PyObject *)&KeyFilterType) < 0 ||
        PyModule_AddObjectRef(m, "Staging", (PyObject *)&StagingType) < 0 ||
        PyModule_AddObjectRef(m, "Versioned", (PyObject *)&VersionedType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
