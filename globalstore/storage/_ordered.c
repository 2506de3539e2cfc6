/* A batch's writes to the data column family, put into its WriteBatch in key order.
 *
 * RocksDB inserts a WriteBatch into the memtable in the order it was written, and a memtable
 * takes keys in order for much less than keys in any order (a skip list's insert starts from
 * where the last one ended; docs/performance.md, "Restore", has the figures). A topic's
 * records come in the order they were produced, which for many topics is no key order at
 * all. KeyOrder passes a batch's writes straight to the WriteBatch while their keys come in
 * order; from the first key that does not, it keeps the writes (when sorting), and flush()
 * writes those sorted by key. Two writes of one key stay in the order they came (a kept one
 * always comes after one passed), so the batch's outcome is the same: only the order of its
 * inserts changes. flush() says how many writes came before the key they followed (breaks):
 * a batch of a few long runs (a partition's keys in order, then the next partition's) gains
 * nothing from a sort, so the caller decides from it whether the next batch sorts.
 *
 *     order = KeyOrder(wb.put, wb.delete, sorting=True)
 *     fill(order.put, order.delete, ...)     # the loop's writes
 *     writes, breaks = order.flush()         # the kept ones, into the WriteBatch, sorted
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

/* A kept key's first HEAD bytes are copied into its op (its bytes are in the cache then):
 * the sort compares those, and reads the key's bytes object only for two keys longer than
 * HEAD that share them. */
#define HEAD 24

typedef struct {
    unsigned char head[HEAD]; /* the key's first HEAD bytes, zeros past its end */
    Py_ssize_t size;          /* the key's length */
    PyObject *key;            /* bytes */
    PyObject *value;          /* bytes, NULL for a delete */
    Py_ssize_t seq; /* the write's place among the kept: keeps two writes of a key in order */
} write_op;

typedef struct {
    PyObject_HEAD
    PyObject *put, *delete; /* the WriteBatch's */
    PyObject *last;         /* the key of the last write; NULL: none yet */
    int sorting;            /* keep the writes from the first out of order, and sort them */
    int keeping;            /* sorting, a key came out of order: every write from it is kept */
    Py_ssize_t writes;      /* the writes taken since the last flush */
    Py_ssize_t breaks;      /* of those, the ones whose key sorts before the last write's */
    write_op *ops;
    Py_ssize_t n, cap;
} KeyOrder;

static int by_key_then_seq(const void *a, const void *b) {
    const write_op *x = a, *y = b;
    int c = memcmp(x->head, y->head, HEAD);
    if (c == 0 && x->size > HEAD && y->size > HEAD)
        c = memcmp(PyBytes_AS_STRING(x->key) + HEAD, PyBytes_AS_STRING(y->key) + HEAD,
                   (size_t)((x->size < y->size ? x->size : y->size) - HEAD));
    if (c != 0)
        return c;
    /* Equal up to the shorter one's end (zeros past an end tie only with a longer key's
     * zeros, and so with a key the shorter one is a prefix of). */
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Whether `key` sorts at or after `last` (bytes order). */
static int not_before(PyObject *last, PyObject *key) {
    Py_ssize_t nl = PyBytes_GET_SIZE(last), nk = PyBytes_GET_SIZE(key);
    int c = memcmp(PyBytes_AS_STRING(last), PyBytes_AS_STRING(key), (size_t)(nl < nk ? nl : nk));
    return c < 0 || (c == 0 && nl <= nk);
}

static int in_order(const write_op *ops, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++)
        if (by_key_then_seq(&ops[i - 1], &ops[i]) > 0)
            return 0;
    return 1;
}

static void clear(KeyOrder *o) {
    for (Py_ssize_t i = 0; i < o->n; i++) {
        Py_DECREF(o->ops[i].key);
        Py_XDECREF(o->ops[i].value);
    }
    o->n = o->writes = o->breaks = 0;
    o->keeping = 0;
    Py_CLEAR(o->last);
}

static PyObject *write_through(KeyOrder *o, PyObject *key, PyObject *value) {
    PyObject *args[2] = {key, value};
    return value == NULL ? PyObject_Vectorcall(o->delete, args, 1, NULL)
                         : PyObject_Vectorcall(o->put, args, 2, NULL);
}

static int keep(KeyOrder *o, PyObject *key, PyObject *value) {
    if (o->n == o->cap) {
        Py_ssize_t cap = o->cap ? o->cap * 2 : 1024;
        write_op *ops = PyMem_Realloc(o->ops, (size_t)cap * sizeof(write_op));
        if (ops == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        o->ops = ops;
        o->cap = cap;
    }
    write_op *op = &o->ops[o->n];
    op->size = PyBytes_GET_SIZE(key);
    size_t copied = (size_t)(op->size < HEAD ? op->size : HEAD);
    memcpy(op->head, PyBytes_AS_STRING(key), copied);
    memset(op->head + copied, 0, HEAD - copied);
    op->key = Py_NewRef(key);
    op->value = Py_XNewRef(value);
    op->seq = o->n++;
    return 0;
}

/* A write: straight through while the keys come in order, else kept for flush(). */
static PyObject *take(KeyOrder *o, PyObject *key, PyObject *value) {
    if (!PyBytes_Check(key) || (value != NULL && !PyBytes_Check(value))) {
        PyErr_SetString(PyExc_TypeError, "KeyOrder takes bytes keys and values");
        return NULL;
    }
    int ordered = o->last == NULL || not_before(o->last, key);
    o->writes++;
    o->breaks += !ordered;
    Py_XSETREF(o->last, Py_NewRef(key));
    o->keeping = o->keeping || (o->sorting && !ordered);
    if (!o->keeping)
        return write_through(o, key, value);
    return keep(o, key, value) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *key_order_put(KeyOrder *o, PyObject *const *args, Py_ssize_t n) {
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "put(key, value)");
        return NULL;
    }
    return take(o, args[0], args[1]);
}

static PyObject *key_order_delete(KeyOrder *o, PyObject *const *args, Py_ssize_t n) {
    if (n != 1) {
        PyErr_SetString(PyExc_TypeError, "delete(key)");
        return NULL;
    }
    return take(o, args[0], NULL);
}

static PyObject *key_order_flush(KeyOrder *o, PyObject *unused) {
    if (!in_order(o->ops, o->n))
        qsort(o->ops, (size_t)o->n, sizeof(write_op), by_key_then_seq);
    PyObject *counts = Py_BuildValue("(nn)", o->writes, o->breaks);
    if (counts == NULL) {
        clear(o);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < o->n; i++) {
        PyObject *r = write_through(o, o->ops[i].key, o->ops[i].value);
        if (r == NULL) {
            Py_DECREF(counts);
            clear(o); /* the batch fails as a whole: what is left is not written */
            return NULL;
        }
        Py_DECREF(r);
    }
    clear(o);
    return counts;
}

static PyObject *key_order_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *put, *delete;
    int sorting = 1;
    static char *kwlist[] = {"put", "delete", "sorting", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|p", kwlist, &put, &delete, &sorting))
        return NULL;
    KeyOrder *o = (KeyOrder *)type->tp_alloc(type, 0);
    if (o == NULL)
        return NULL;
    o->put = Py_NewRef(put);
    o->delete = Py_NewRef(delete);
    o->sorting = sorting;
    return (PyObject *)o;
}

static void key_order_dealloc(KeyOrder *o) {
    clear(o);
    PyMem_Free(o->ops);
    Py_XDECREF(o->put);
    Py_XDECREF(o->delete);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyMethodDef key_order_methods[] = {
    {"put", (PyCFunction)(void (*)(void))key_order_put, METH_FASTCALL,
     "put(key, value): into the WriteBatch now if the keys are in order so far, else kept."},
    {"delete", (PyCFunction)(void (*)(void))key_order_delete, METH_FASTCALL,
     "delete(key): into the WriteBatch now if the keys are in order so far, else kept."},
    {"flush", (PyCFunction)key_order_flush, METH_NOARGS,
     "flush() -> (writes, breaks): the kept writes, through the WriteBatch's put and delete, in "
     "key order (two of one key in the order they came); then it starts again, as new. "
     "writes: how many it took; breaks: how many of those sorted before the write before."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KeyOrderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "globalstore.storage._ordered.KeyOrder",
    .tp_basicsize = sizeof(KeyOrder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KeyOrder(put, delete, sorting=True): a batch's writes, into a WriteBatch in key "
              "order (sorting) or as they come, counting how often a key came out of order.",
    .tp_new = key_order_new,
    .tp_dealloc = (destructor)key_order_dealloc,
    .tp_methods = key_order_methods,
};

static struct PyModuleDef ordered_module = {
    PyModuleDef_HEAD_INIT, "_ordered", "A batch's data writes, put in key order.", -1, NULL,
};

PyMODINIT_FUNC PyInit__ordered(void) {
    PyObject *m = PyModule_Create(&ordered_module);
    if (m == NULL)
        return NULL;
    if (PyType_Ready(&KeyOrderType) < 0 ||
        PyModule_AddObjectRef(m, "KeyOrder", (PyObject *)&KeyOrderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
