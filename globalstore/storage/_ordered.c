/* A batch's writes to the data column family, put into its WriteBatch in key order.
 *
 * RocksDB inserts a WriteBatch into the memtable in the order it was written, and a memtable
 * takes keys in order for much less than keys in any order (a skip list's insert starts
 * from where the last one ended; docs/performance.md, "Restore", has the figures). A topic's records come in the order they were
 * produced, which for most topics is no key order at all. KeyOrder keeps one batch's puts
 * and deletes, then writes them sorted by key (flush); two writes of one key keep their
 * order, so the batch's outcome is the same, only the order of its inserts changes.
 *
 *     order = KeyOrder(wb.put, wb.delete)
 *     fill(order.put, order.delete, ...)     # the loop's writes, kept
 *     order.flush()                          # into the WriteBatch, sorted
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject *key;   /* bytes */
    PyObject *value; /* bytes, NULL for a delete */
    Py_ssize_t seq;  /* the write's place in the batch: keeps two writes of a key in order */
} write_op;

typedef struct {
    PyObject_HEAD
    PyObject *put, *delete; /* the WriteBatch's */
    write_op *ops;
    Py_ssize_t n, cap;
} KeyOrder;

static int by_key_then_seq(const void *a, const void *b) {
    const write_op *x = a, *y = b;
    Py_ssize_t nx = PyBytes_GET_SIZE(x->key), ny = PyBytes_GET_SIZE(y->key);
    int c = memcmp(PyBytes_AS_STRING(x->key), PyBytes_AS_STRING(y->key),
                   (size_t)(nx < ny ? nx : ny));
    if (c != 0)
        return c;
    if (nx != ny)
        return nx < ny ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int in_order(const write_op *ops, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++)
        if (by_key_then_seq(&ops[i - 1], &ops[i]) > 0)
            return 0;
    return 1;
}

static void clear_ops(KeyOrder *o) {
    for (Py_ssize_t i = 0; i < o->n; i++) {
        Py_DECREF(o->ops[i].key);
        Py_XDECREF(o->ops[i].value);
    }
    o->n = 0;
}

static int keep(KeyOrder *o, PyObject *key, PyObject *value) {
    if (!PyBytes_Check(key) || (value != NULL && !PyBytes_Check(value))) {
        PyErr_SetString(PyExc_TypeError, "KeyOrder keeps bytes keys and values");
        return -1;
    }
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
    o->ops[o->n] = (write_op){Py_NewRef(key), Py_XNewRef(value), o->n};
    o->n++;
    return 0;
}

static PyObject *key_order_put(KeyOrder *o, PyObject *const *args, Py_ssize_t n) {
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "put(key, value)");
        return NULL;
    }
    return keep(o, args[0], args[1]) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *key_order_delete(KeyOrder *o, PyObject *const *args, Py_ssize_t n) {
    if (n != 1) {
        PyErr_SetString(PyExc_TypeError, "delete(key)");
        return NULL;
    }
    return keep(o, args[0], NULL) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *key_order_flush(KeyOrder *o, PyObject *unused) {
    if (!in_order(o->ops, o->n))
        qsort(o->ops, (size_t)o->n, sizeof(write_op), by_key_then_seq);
    Py_ssize_t written = o->n;
    for (Py_ssize_t i = 0; i < o->n; i++) {
        write_op *op = &o->ops[i];
        PyObject *args[2] = {op->key, op->value};
        PyObject *r = op->value == NULL ? PyObject_Vectorcall(o->delete, args, 1, NULL)
                                        : PyObject_Vectorcall(o->put, args, 2, NULL);
        if (r == NULL) {
            clear_ops(o); /* the batch fails as a whole: what is left is not written */
            return NULL;
        }
        Py_DECREF(r);
    }
    clear_ops(o);
    return PyLong_FromSsize_t(written);
}

static PyObject *key_order_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *put, *delete;
    static char *kwlist[] = {"put", "delete", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kwlist, &put, &delete))
        return NULL;
    KeyOrder *o = (KeyOrder *)type->tp_alloc(type, 0);
    if (o == NULL)
        return NULL;
    o->put = Py_NewRef(put);
    o->delete = Py_NewRef(delete);
    return (PyObject *)o;
}

static void key_order_dealloc(KeyOrder *o) {
    clear_ops(o);
    PyMem_Free(o->ops);
    Py_XDECREF(o->put);
    Py_XDECREF(o->delete);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyMethodDef key_order_methods[] = {
    {"put", (PyCFunction)(void (*)(void))key_order_put, METH_FASTCALL,
     "put(key, value): kept until flush()."},
    {"delete", (PyCFunction)(void (*)(void))key_order_delete, METH_FASTCALL,
     "delete(key): kept until flush()."},
    {"flush", (PyCFunction)key_order_flush, METH_NOARGS,
     "flush() -> how many writes: the kept ones, through the WriteBatch's put and delete, in "
     "key order (two of one key in the order they came); then none is kept."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KeyOrderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "globalstore.storage._ordered.KeyOrder",
    .tp_basicsize = sizeof(KeyOrder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KeyOrder(put, delete): a batch's writes, kept, then written in key order.",
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
