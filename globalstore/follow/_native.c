/* The consume loop in C: consume a batch from librdkafka and hand each record to a RocksDB
 * WriteBatch as the store's on-disk key and value, with no Message object per record. It
 * restores, and follows the stores that run no Python function per record once restored
 * (follow/sources.py, follows_in_c). A store with history has each delete called with its
 * record's partition, offset and timestamp, for the tombstone's version.
 *
 * confluent-kafka's consume() builds a Message (key, value, headers, timestamp objects) for
 * every record and the Python loop then reads it back through seven accessors: about 1.7 us
 * a record, most of a cold restore's CPU. Here a record costs two bytes objects and one
 * WriteBatch.put call. The Python loop (storage.records.fill) stays the reference: same
 * records written, same offsets, same events and skipped keys
 * (tests/integration/test_native_restore.py).
 *
 * librdkafka's C interface is ABI-stable. The few types and functions used here are declared
 * below and resolved at run time (load()) in the librdkafka that confluent-kafka itself
 * loaded, so both paths run the same client library and building this needs only a C
 * compiler and Python's headers. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../shaping/_shape.h" /* _json_check.h, and a declared transform */

#define RK_CONSUMER 1      /* rd_kafka_type_t */
#define RK_CONF_OK 0       /* rd_kafka_conf_res_t */
#define RK_ERR_NOENT (-156)
#define RK_ERR_PARTITION_EOF (-191)
#define RK_ERR_FATAL (-150)
#define UNREADABLE_FORMAT 255 /* codec.UNREADABLE_FORMAT */

typedef struct {
    int err;
    void *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *private_;
} rk_message;

typedef struct {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    int err;
    void *private_;
} rk_partition;

typedef struct {
    int cnt;
    int size;
    rk_partition *elems;
} rk_partition_list;

typedef void (*rk_log_cb)(const void *rk, int level, const char *fac, const char *buf);
typedef int (*rk_stats_cb)(void *rk, char *json, size_t json_len, void *opaque);

static struct {
    void *(*conf_new)(void);
    int (*conf_set)(void *, const char *, const char *, char *, size_t);
    void (*conf_destroy)(void *);
    void (*conf_set_log_cb)(void *, rk_log_cb);
    void (*conf_set_stats_cb)(void *, rk_stats_cb);
    void (*conf_set_opaque)(void *, void *);
    void *(*new_)(int, void *, char *, size_t);
    int (*poll_set_consumer)(void *);
    void *(*queue_get_consumer)(void *);
    void (*queue_destroy)(void *);
    rk_partition_list *(*list_new)(int);
    rk_partition *(*list_add)(rk_partition_list *, const char *, int32_t);
    void (*list_destroy)(rk_partition_list *);
    int (*assign)(void *, const rk_partition_list *);
    ssize_t (*consume_batch_queue)(void *, int, rk_message **, size_t);
    void (*message_destroy)(rk_message *);
    int64_t (*message_timestamp)(const rk_message *, int *);
    int (*message_headers)(const rk_message *, void **);
    size_t (*header_cnt)(const void *);
    int (*header_get_all)(const void *, size_t, const char **, const void **, size_t *);
    const char *(*err2str)(int);
    int (*consumer_close)(void *);
    void (*destroy)(void *);
} rk;

static int rk_loaded = 0;

#define RESOLVE(field, symbol)                                                                 \
    do {                                                                                       \
        *(void **)(&rk.field) = dlsym(lib, symbol);                                            \
        if (rk.field == NULL) {                                                                \
            PyErr_Format(PyExc_OSError, "%s has no %s", path, symbol);                         \
            return NULL;                                                                       \
        }                                                                                      \
    } while (0)

static PyObject *load(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return PyErr_Format(PyExc_OSError, "cannot load %s: %s", path, dlerror());
    RESOLVE(conf_new, "rd_kafka_conf_new");
    RESOLVE(conf_set, "rd_kafka_conf_set");
    RESOLVE(conf_destroy, "rd_kafka_conf_destroy");
    RESOLVE(conf_set_log_cb, "rd_kafka_conf_set_log_cb");
    RESOLVE(conf_set_stats_cb, "rd_kafka_conf_set_stats_cb");
    RESOLVE(conf_set_opaque, "rd_kafka_conf_set_opaque");
    RESOLVE(new_, "rd_kafka_new");
    RESOLVE(poll_set_consumer, "rd_kafka_poll_set_consumer");
    RESOLVE(queue_get_consumer, "rd_kafka_queue_get_consumer");
    RESOLVE(queue_destroy, "rd_kafka_queue_destroy");
    RESOLVE(list_new, "rd_kafka_topic_partition_list_new");
    RESOLVE(list_add, "rd_kafka_topic_partition_list_add");
    RESOLVE(list_destroy, "rd_kafka_topic_partition_list_destroy");
    RESOLVE(assign, "rd_kafka_assign");
    RESOLVE(consume_batch_queue, "rd_kafka_consume_batch_queue");
    RESOLVE(message_destroy, "rd_kafka_message_destroy");
    RESOLVE(message_timestamp, "rd_kafka_message_timestamp");
    RESOLVE(message_headers, "rd_kafka_message_headers");
    RESOLVE(header_cnt, "rd_kafka_header_cnt");
    RESOLVE(header_get_all, "rd_kafka_header_get_all");
    RESOLVE(err2str, "rd_kafka_err2str");
    RESOLVE(consumer_close, "rd_kafka_consumer_close");
    RESOLVE(destroy, "rd_kafka_destroy");
    rk_loaded = 1;
    Py_RETURN_NONE;
}

/* -- the Restorer type ------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    void *rk;
    void *queue;
    rk_message **msgs;
    size_t capacity;
    int layout;
    int current_format;    /* for a record carrying exactly the declared header */
    int undeclared_format; /* for a record with no headers */
    char *declared_name;
    char *declared_value;
    size_t declared_value_len;
    PyObject *value_format; /* codec.value_format, for every other record */
    size_t held;            /* bytes of the values of the last batch consumed */
    int64_t oldest;         /* following: the oldest record timestamp (ms) of it, or -1 */
    char *stats;            /* the last statistics JSON not yet taken (stats()), or NULL */
    size_t stats_len;
} Restorer;

/* librdkafka's statistics, kept for the store thread (stats()). Called inside fill()'s
 * consume, on the thread that called it, with the GIL released: no Python here, and the
 * thread that later takes them is the same one, so no lock either. */
static int keep_stats(void *rk_handle, char *json, size_t json_len, void *opaque) {
    Restorer *r = opaque;
    (void)rk_handle;
    free(r->stats);
    r->stats = malloc(json_len);
    r->stats_len = r->stats == NULL ? 0 : json_len;
    if (r->stats != NULL)
        memcpy(r->stats, json, json_len);
    return 0; /* librdkafka frees json */
}

static void restorer_close_client(Restorer *r) {
    if (r->rk == NULL)
        return;
    void *rk_handle = r->rk, *queue = r->queue;
    r->rk = r->queue = NULL;
    Py_BEGIN_ALLOW_THREADS
    rk.queue_destroy(queue);
    rk.consumer_close(rk_handle);
    rk.destroy(rk_handle);
    Py_END_ALLOW_THREADS
}

static void restorer_dealloc(Restorer *r) {
    restorer_close_client(r);
    PyMem_Free(r->msgs);
    PyMem_Free(r->declared_name);
    PyMem_Free(r->declared_value);
    free(r->stats);
    Py_XDECREF(r->value_format);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static char *copy_string(const char *s, size_t n) {
    char *out = PyMem_Malloc(n + 1);
    if (out == NULL)
        return (char *)PyErr_NoMemory();
    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

static void *new_consumer(Restorer *r, PyObject *conf) {
    char errstr[512];
    void *c = rk.conf_new();
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(conf, &pos, &name, &value)) {
        const char *n = PyUnicode_AsUTF8(name), *v = PyUnicode_AsUTF8(value);
        if (n == NULL || v == NULL) {
            rk.conf_destroy(c);
            return NULL;
        }
        if (rk.conf_set(c, n, v, errstr, sizeof errstr) != RK_CONF_OK) {
            rk.conf_destroy(c);
            PyErr_Format(PyExc_ValueError, "librdkafka setting %s=%s: %s", n, v, errstr);
            return NULL;
        }
    }
    /* Errors reach the store thread as events (fill()); librdkafka's own log lines would go
     * to stderr, past Python's logging. */
    rk.conf_set_log_cb(c, NULL);
    /* Statistics (when statistics.interval.ms is set) are how the store knows it is
     * connected and where the topic ends while this consumer follows. */
    rk.conf_set_stats_cb(c, keep_stats);
    rk.conf_set_opaque(c, r);
    void *handle = rk.new_(RK_CONSUMER, c, errstr, sizeof errstr); /* owns c on success */
    if (handle == NULL) {
        rk.conf_destroy(c);
        PyErr_Format(PyExc_ValueError, "cannot create a librdkafka consumer: %s", errstr);
    }
    return handle;
}

static int assign(Restorer *r, const char *topic, PyObject *offsets) {
    rk_partition_list *list = rk.list_new((int)PyDict_Size(offsets));
    PyObject *p, *o;
    Py_ssize_t pos = 0;
    while (PyDict_Next(offsets, &pos, &p, &o)) {
        long partition = PyLong_AsLong(p);
        long long offset = PyLong_AsLongLong(o);
        if (PyErr_Occurred()) {
            rk.list_destroy(list);
            return -1;
        }
        rk.list_add(list, topic, (int32_t)partition)->offset = offset;
    }
    int err = rk.assign(r->rk, list);
    rk.list_destroy(list);
    if (err != 0) {
        PyErr_Format(PyExc_RuntimeError, "assign failed: %s", rk.err2str(err));
        return -1;
    }
    return 0;
}

static int restorer_init(Restorer *r, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"conf", "topic", "offsets", "capacity", "layout", "declared_name",
                             "declared_value", "current_format", "undeclared_format",
                             "value_format", NULL};
    PyObject *conf, *offsets, *value_format;
    const char *topic, *declared_name, *declared_value;
    Py_ssize_t capacity, declared_name_len, declared_value_len;
    if (!rk_loaded) {
        PyErr_SetString(PyExc_RuntimeError, "load() librdkafka first");
        return -1;
    }
    if (r->rk != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Restorer is initialised once");
        return -1;
    }
    r->oldest = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!sO!nis#y#iiO", kwlist, &PyDict_Type, &conf,
                                     &topic, &PyDict_Type, &offsets, &capacity, &r->layout,
                                     &declared_name, &declared_name_len, &declared_value,
                                     &declared_value_len, &r->current_format,
                                     &r->undeclared_format, &value_format))
        return -1;
    if (capacity < 1) {
        PyErr_SetString(PyExc_ValueError, "capacity must be at least 1");
        return -1;
    }
    r->msgs = PyMem_Calloc((size_t)capacity, sizeof(rk_message *));
    r->declared_name = copy_string(declared_name, (size_t)declared_name_len);
    r->declared_value = copy_string(declared_value, (size_t)declared_value_len);
    if (r->msgs == NULL || r->declared_name == NULL || r->declared_value == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    r->capacity = (size_t)capacity;
    r->declared_value_len = (size_t)declared_value_len;
    Py_INCREF(value_format);
    r->value_format = value_format;
    r->rk = new_consumer(r, conf);
    if (r->rk == NULL)
        return -1;
    rk.poll_set_consumer(r->rk);
    r->queue = rk.queue_get_consumer(r->rk);
    if (assign(r, topic, offsets) < 0) {
        restorer_close_client(r);
        return -1;
    }
    return 0;
}

/* -- fill() ------------------------------------------------------------------------------ */

static void put_be(unsigned char *out, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--, v >>= 8)
        out[i] = (unsigned char)(v & 0xff);
}

static int is_ascii(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] & 0x80)
            return 0;
    return 1;
}

static int is_utf8(const char *s, size_t n) {
    if (is_ascii((const unsigned char *)s, n))
        return 1;
    PyObject *text = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(text);
    return 1;
}

/* The headers as confluent-kafka's Message.headers() gives them: [(name, value or None)]. */
static PyObject *header_list(const void *hdrs) {
    size_t n = rk.header_cnt(hdrs);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        const char *name;
        const void *value;
        size_t size;
        rk.header_get_all(hdrs, i, &name, &value, &size);
        PyObject *item = value == NULL
                             ? Py_BuildValue("(sO)", name, Py_None)
                             : Py_BuildValue("(sy#)", name, (const char *)value, (Py_ssize_t)size);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* Whether every header name is UTF-8: confluent-kafka cannot give the headers of a record
 * with one that is not, so the Python loop reads none of them, and neither does this one. */
static int names_utf8(const void *hdrs) {
    size_t n = rk.header_cnt(hdrs);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        const void *value;
        size_t size;
        if (rk.header_get_all(hdrs, i, &name, &value, &size) == 0 && !is_utf8(name, strlen(name)))
            return 0;
    }
    return 1;
}

/* The value format the record declares (codec.value_format), -1 on error. */
static int format_of(Restorer *r, const rk_message *m) {
    void *hdrs;
    if (rk.message_headers(m, &hdrs) == RK_ERR_NOENT)
        return r->undeclared_format;
    const char *name;
    const void *value;
    size_t size;
    if (rk.header_cnt(hdrs) == 1 && rk.header_get_all(hdrs, 0, &name, &value, &size) == 0 &&
        value != NULL && size == r->declared_value_len && strcmp(name, r->declared_name) == 0 &&
        memcmp(value, r->declared_value, size) == 0)
        return r->current_format;
    if (!names_utf8(hdrs))
        return UNREADABLE_FORMAT;
    PyObject *list = header_list(hdrs);
    if (list == NULL)
        return -1;
    PyObject *fmt = PyObject_CallOneArg(r->value_format, list);
    Py_DECREF(list);
    if (fmt == NULL)
        return -1;
    long out = PyLong_AsLong(fmt);
    Py_DECREF(fmt);
    return out < 0 || out > 255 ? -1 : (int)out;
}

static PyObject *stored_value(Restorer *r, const rk_message *m) {
    int fmt = format_of(r, m);
    if (fmt < 0)
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "bad value format");
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(HEADER_SIZE + m->len));
    if (out == NULL)
        return NULL;
    unsigned char *b = (unsigned char *)PyBytes_AS_STRING(out);
    b[0] = (unsigned char)r->layout;
    b[1] = (unsigned char)fmt;
    put_be(b + 2, (uint64_t)rk.message_timestamp(m, NULL), 8);
    put_be(b + 10, (uint64_t)(uint32_t)m->partition, 4);
    put_be(b + 14, (uint64_t)m->offset, 8);
    memcpy(b + HEADER_SIZE, m->payload, m->len);
    return out;
}

static int call2(PyObject *fn, PyObject *a, PyObject *b) {
    PyObject *args[2] = {a, b};
    PyObject *res = PyObject_Vectorcall(fn, args, b == NULL ? 1 : 2, NULL);
    Py_XDECREF(res);
    return res == NULL ? -1 : 0;
}

/* Where a tombstone goes, and a record a declared transform drops: delete(key), or, for a
 * store with history (fill()'s record_deletes), delete(key, partition, offset, timestamp),
 * which also writes the tombstone's version (storage/history.py). */
typedef struct {
    PyObject *fn;
    int with_record;
} deleter;

static int delete_key(const deleter *del, const rk_message *m, PyObject *key) {
    if (!del->with_record)
        return call2(del->fn, key, NULL);
    PyObject *p = PyLong_FromLong(m->partition), *o = PyLong_FromLongLong(m->offset);
    PyObject *ts = PyLong_FromLongLong(rk.message_timestamp(m, NULL)), *res = NULL;
    if (p != NULL && o != NULL && ts != NULL) {
        PyObject *args[4] = {key, p, o, ts};
        res = PyObject_Vectorcall(del->fn, args, 4, NULL);
    }
    Py_XDECREF(p);
    Py_XDECREF(o);
    Py_XDECREF(ts);
    Py_XDECREF(res);
    return res == NULL ? -1 : 0;
}

/* nexts[partition] = max(nexts.get(partition, 0), offset) */
static int raise_next(PyObject *nexts, int32_t partition, int64_t offset) {
    PyObject *key = PyLong_FromLong(partition);
    if (key == NULL)
        return -1;
    PyObject *old = PyDict_GetItemWithError(nexts, key);
    int rc = 0;
    if (old == NULL && PyErr_Occurred()) {
        rc = -1;
    } else if (old == NULL || PyLong_AsLongLong(old) < offset) {
        PyObject *value = PyLong_FromLongLong(offset);
        rc = value == NULL ? -1 : PyDict_SetItem(nexts, key, value);
        Py_XDECREF(value);
    }
    Py_DECREF(key);
    return rc;
}

static int set_next(PyObject *nexts, int32_t partition, int64_t offset) {
    PyObject *key = PyLong_FromLong(partition), *value = PyLong_FromLongLong(offset);
    int rc = key == NULL || value == NULL ? -1 : PyDict_SetItem(nexts, key, value);
    Py_XDECREF(key);
    Py_XDECREF(value);
    return rc;
}

static int add_event(PyObject *events, const rk_message *m) {
    PyObject *reason =
        m->payload != NULL
            ? PyUnicode_DecodeUTF8((const char *)m->payload, (Py_ssize_t)m->len, "replace")
            : PyUnicode_FromString(rk.err2str(m->err));
    if (reason == NULL)
        return -1;
    PyObject *event = Py_BuildValue("(iiLNO)", m->err, (int)m->partition, (long long)m->offset,
                                    reason, m->err == RK_ERR_FATAL ? Py_True : Py_False);
    if (event == NULL)
        return -1;
    int rc = PyList_Append(events, event);
    Py_DECREF(event);
    return rc;
}

static int add_skipped(PyObject *skipped, const rk_message *m) {
    PyObject *item = Py_BuildValue("(iLy#)", (int)m->partition, (long long)m->offset,
                                   (const char *)m->key, (Py_ssize_t)m->key_len);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(skipped, item);
    Py_DECREF(item);
    return rc;
}

/* A store that quarantines (storage/quarantine.py): (put, held, changes). A value of the
 * current format that is certainly JSON, of a key in neither held nor changes, goes straight
 * to that put; every other one to the checking put fill() was given. */
typedef struct {
    PyObject *put, *held, *changes;
} fast_path;

static int fast_put(Restorer *r, const fast_path *fast, PyObject *key, PyObject *value) {
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(value);
    if (fast->put == NULL || b[1] != r->current_format)
        return 0;
    if (!json_certain(b + HEADER_SIZE, (size_t)PyBytes_GET_SIZE(value) - HEADER_SIZE))
        return 0;
    int in = PySet_Contains(fast->held, key);
    if (in == 0)
        in = PyDict_Contains(fast->changes, key);
    return in < 0 ? -1 : !in; /* a key held or changed: the checking put takes it out */
}

/* A store with a declared transform (shaping/transform.py): its spec, the value format
 * it applies to and writes, and the put its values go to. A record of that format whose
 * value _shape.h is sure of is shaped here; every other one goes to fill()'s put, the
 * transform's, which shapes it in Python. */
typedef struct {
    shape_spec spec;
    int format;
    PyObject *put; /* NULL: no declared transform */
} shaper;

/* Shape the record's value in C: 1 when done (put or deleted), 0 when unsure, -1 on error. */
static int shape_record(Restorer *r, const rk_message *m, PyObject *key, const shaper *shape,
                        const deleter *del) {
    if (shape->put == NULL || format_of(r, m) != shape->format)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *value = NULL;
    switch (shape_json(&shape->spec, m->payload, m->len, HEADER_SIZE, &value)) {
    case SHAPE_UNSURE:
        return 0;
    case SHAPE_DROP:
        return delete_key(del, m, key) < 0 ? -1 : 1;
    case SHAPE_KEEP:
        break;
    default:
        return -1;
    }
    unsigned char *b = (unsigned char *)PyBytes_AS_STRING(value);
    b[0] = (unsigned char)r->layout;
    b[1] = (unsigned char)shape->format;
    put_be(b + 2, (uint64_t)rk.message_timestamp(m, NULL), 8);
    put_be(b + 10, (uint64_t)(uint32_t)m->partition, 4);
    put_be(b + 14, (uint64_t)m->offset, 8);
    int rc = call2(shape->put, key, value);
    Py_DECREF(value);
    return rc < 0 ? -1 : 1;
}

/* One data record into the WriteBatch, as storage.records.fill writes it. */
static int apply_record(Restorer *r, const rk_message *m, PyObject *put, const deleter *del,
                        PyObject *skipped, const fast_path *fast, const shaper *shape) {
    if (m->key == NULL)
        return 0; /* a compacted topic cannot hold key-less records */
    if (!is_utf8((const char *)m->key, m->key_len))
        return add_skipped(skipped, m);
    PyObject *key = PyBytes_FromStringAndSize((const char *)m->key, (Py_ssize_t)m->key_len);
    if (key == NULL)
        return -1;
    int rc;
    if (m->payload == NULL) {
        rc = delete_key(del, m, key);
    } else if ((rc = shape_record(r, m, key, shape, del)) != 0) {
        rc = rc < 0 ? -1 : 0;
    } else {
        PyObject *value = stored_value(r, m);
        int direct = value == NULL ? -1 : fast_put(r, fast, key, value);
        rc = direct < 0 ? -1 : call2(direct == 1 ? fast->put : put, key, value);
        Py_XDECREF(value);
    }
    Py_DECREF(key);
    return rc;
}

static int apply_messages(Restorer *r, size_t n, PyObject *put, const deleter *del,
                          PyObject *nexts, PyObject *events, PyObject *skipped,
                          const fast_path *fast, const shaper *shape) {
    /* Records come in runs per partition: nexts is written when the run ends, which is also
     * before any event, so that an end-of-partition event past the run's last record (a
     * partition ending in transaction markers) raises it, as storage.records.fill does. */
    int32_t run_partition = -1;
    int64_t run_next = -1;
    for (size_t i = 0; i < n; i++) {
        const rk_message *m = r->msgs[i];
        if (run_next >= 0 && (m->partition != run_partition || m->err != 0)) {
            if (set_next(nexts, run_partition, run_next) < 0)
                return -1;
            run_next = -1;
        }
        if (m->err != 0) {
            if (add_event(events, m) < 0)
                return -1;
            if (m->err == RK_ERR_PARTITION_EOF && raise_next(nexts, m->partition, m->offset) < 0)
                return -1;
            continue;
        }
        run_partition = m->partition;
        run_next = m->offset + 1;
        if (apply_record(r, m, put, del, skipped, fast, shape) < 0)
            return -1;
    }
    return run_next >= 0 ? set_next(nexts, run_partition, run_next) : 0;
}

/* Consume up to `limit` messages in ONE release of the GIL (getting it back behind busy
 * threads costs a switch interval or more). Restoring, wait up to the timeout for a full
 * batch; following (`first`), wait up to the timeout for the first message only, then take
 * what is queued behind it, so a record shows a few ms after it arrives. */
static ssize_t consume(Restorer *r, int timeout_ms, size_t limit, int first) {
    ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    if (first) {
        n = rk.consume_batch_queue(r->queue, timeout_ms, r->msgs, 1);
        if (n == 1 && limit > 1) {
            ssize_t more = rk.consume_batch_queue(r->queue, 0, r->msgs + 1, limit - 1);
            n = more < 0 ? more : 1 + more;
        }
    } else {
        n = rk.consume_batch_queue(r->queue, timeout_ms, r->msgs, limit);
    }
    Py_END_ALLOW_THREADS
    return n;
}

static PyObject *restorer_fill(Restorer *r, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"put",   "delete", "nexts",   "events", "skipped", "timeout_ms",
                             "limit", "first",  "checked", "shape",  "record_deletes", NULL};
    PyObject *put, *nexts, *events, *skipped, *checked = Py_None, *shaped = Py_None;
    deleter del = {NULL, 0};
    int timeout_ms, first = 0;
    Py_ssize_t limit = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!O!i|npOOp", kwlist, &put, &del.fn,
                                     &PyDict_Type, &nexts, &PyList_Type, &events, &PyList_Type,
                                     &skipped, &timeout_ms, &limit, &first, &checked, &shaped,
                                     &del.with_record))
        return NULL;
    fast_path fast = {NULL, NULL, NULL};
    if (checked != Py_None &&
        !PyArg_ParseTuple(checked, "OO!O!", &fast.put, &PySet_Type, &fast.held, &PyDict_Type,
                          &fast.changes))
        return NULL;
    shaper shape = {{NULL, NULL, NULL}, -1, NULL};
    PyObject *spec;
    if (shaped != Py_None &&
        (!PyArg_ParseTuple(shaped, "OiO", &spec, &shape.format, &shape.put) ||
         shape_spec_of(spec, &shape.spec) < 0))
        return NULL;
    if (r->rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Restorer is closed");
        return NULL;
    }
    if (limit < 1 || (size_t)limit > r->capacity)
        limit = (Py_ssize_t)r->capacity;
    ssize_t n = consume(r, timeout_ms, (size_t)limit, first);
    if (n < 0)
        return PyErr_Format(PyExc_RuntimeError, "consume failed: %s", rk.err2str(-1));
    Py_ssize_t before = PyList_GET_SIZE(events);
    r->held = 0;
    r->oldest = -1;
    for (ssize_t i = 0; i < n; i++) {
        const rk_message *m = r->msgs[i];
        r->held += m->len;
        if (first && m->err == 0) { /* the freshness of what it follows (follow/delays.py) */
            int64_t ts = rk.message_timestamp(m, NULL);
            if (ts >= 0 && (r->oldest < 0 || ts < r->oldest))
                r->oldest = ts;
        }
    }
    int rc = apply_messages(r, (size_t)n, put, &del, nexts, events, skipped, &fast, &shape);
    for (ssize_t i = 0; i < n; i++)
        rk.message_destroy(r->msgs[i]);
    if (rc < 0)
        return NULL;
    return PyLong_FromSsize_t((Py_ssize_t)n - (PyList_GET_SIZE(events) - before));
}

static PyObject *restorer_stats(Restorer *r, PyObject *unused) {
    (void)unused;
    if (r->stats == NULL)
        Py_RETURN_NONE;
    PyObject *out = PyUnicode_DecodeUTF8(r->stats, (Py_ssize_t)r->stats_len, "replace");
    free(r->stats);
    r->stats = NULL;
    return out;
}

static PyObject *restorer_held(Restorer *r, PyObject *unused) {
    (void)unused;
    return PyLong_FromSize_t(r->held);
}

static PyObject *restorer_oldest(Restorer *r, PyObject *unused) {
    (void)unused;
    if (r->oldest < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)r->oldest);
}

static PyObject *restorer_close(Restorer *r, PyObject *unused) {
    restorer_close_client(r);
    Py_RETURN_NONE;
}

static PyMethodDef restorer_methods[] = {
    {"fill", (PyCFunction)(void (*)(void))restorer_fill, METH_VARARGS | METH_KEYWORDS,
     "fill(put, delete, nexts, events, skipped, timeout_ms, limit=capacity, first=False, "
     "checked=None, shape=None, record_deletes=False) -> records: consume one batch and "
     "write it through put/delete, as storage.records.fill does. checked, a quarantining "
     "store's (put, held keys, changes): the put a value certainly JSON of a key in neither "
     "goes to. shape, a declared transform's (spec, format, put): the values of that format "
     "it is sure of, shaped in C (shaping/_shape.h), go to that put (or delete their key). "
     "record_deletes: delete is called (key, partition, offset, timestamp), for a store "
     "with history."},
    {"held", (PyCFunction)restorer_held, METH_NOARGS,
     "held() -> bytes of the values of the last batch consumed."},
    {"oldest", (PyCFunction)restorer_oldest, METH_NOARGS,
     "oldest() -> following, the oldest record timestamp (ms) of the last batch, or None."},
    {"stats", (PyCFunction)restorer_stats, METH_NOARGS,
     "stats() -> the statistics JSON librdkafka reported since the last call, or None."},
    {"close", (PyCFunction)restorer_close, METH_NOARGS, "Close the consumer."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RestorerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "globalstore._native.Restorer",
    .tp_basicsize = sizeof(Restorer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A librdkafka consumer assigned to one topic that fills WriteBatches.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)restorer_init,
    .tp_dealloc = (destructor)restorer_dealloc,
    .tp_methods = restorer_methods,
};

static PyObject *json_certain_py(PyObject *self, PyObject *arg) {
    char *b;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(arg, &b, &n) < 0)
        return NULL;
    return PyBool_FromLong(json_certain((const unsigned char *)b, (size_t)n));
}

static PyMethodDef module_methods[] = {
    {"load", load, METH_VARARGS, "load(path): resolve librdkafka's functions in that library."},
    {"json_certain", json_certain_py, METH_O,
     "json_certain(value) -> bool: True only for a document orjson certainly accepts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "globalstore.follow._native", "The consume loop in C.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&RestorerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RestorerType);
    if (PyModule_AddObject(m, "Restorer", (PyObject *)&RestorerType) < 0) {
        Py_DECREF(&RestorerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
