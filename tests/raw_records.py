"""Records with bytes confluent-kafka's produce() cannot send, produced through librdkafka's
own C API (rd_kafka_produceva): header names that are not UTF-8 (produce() takes a header name
as text and encodes it), header values of None beside them, any number of headers.

Only tests use this: it is how a hostile or buggy producer in another language writes."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from pathlib import Path

import confluent_kafka

__all__ = ["RawProducer", "RawRecord"]

# (partition, key or None, value or None, [(header name, header value or None)])
RawRecord = tuple[int, bytes | None, bytes | None, list[tuple[bytes, bytes | None]]]

# rd_kafka_vtype_t
_TOPIC, _PARTITION, _VALUE, _KEY, _HEADER = 1, 3, 4, 5, 9


class _Mem(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class _Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("val", ctypes.c_void_p), ("size", ctypes.c_ssize_t)]


class _Value(ctypes.Union):
    # rd_kafka_vu_t's union is larger than any member named here: pad it to be safe.
    _fields_ = [
        ("cstr", ctypes.c_char_p),
        ("i32", ctypes.c_int32),
        ("mem", _Mem),
        ("header", _Header),
        ("pad", ctypes.c_char * 64),
    ]


class _VU(ctypes.Structure):
    _fields_ = [("vtype", ctypes.c_int), ("u", _Value)]


def _library() -> ctypes.CDLL:
    """The librdkafka confluent-kafka's wheel carries (the one the store's loops use)."""
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    assert found, f"no librdkafka in {libs}"
    lib = ctypes.CDLL(str(found[0]))
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_char_p, ctypes.c_size_t]  # fmt: skip
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_produceva.restype = ctypes.c_void_p
    lib.rd_kafka_produceva.argtypes = [ctypes.c_void_p, ctypes.POINTER(_VU), ctypes.c_size_t]
    lib.rd_kafka_error_string.restype = ctypes.c_char_p
    lib.rd_kafka_error_string.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_flush.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    return lib


class RawProducer:
    """A librdkafka producer that sends key, value and header bytes exactly as given."""

    def __init__(self, bootstrap: str) -> None:
        self._lib = _library()
        conf, err = self._lib.rd_kafka_conf_new(), ctypes.create_string_buffer(512)
        for name, value in ((b"bootstrap.servers", bootstrap.encode()), (b"linger.ms", b"5")):
            assert self._lib.rd_kafka_conf_set(conf, name, value, err, 512) == 0, err.value
        self._handle = self._lib.rd_kafka_new(0, conf, err, 512)  # RD_KAFKA_PRODUCER
        assert self._handle, err.value
        self._held: list[object] = []  # the buffers librdkafka reads until the flush

    def produce(self, topic: str, records: Iterable[RawRecord]) -> None:
        """Send every record and wait until the broker has them all."""
        for record in records:
            self._send(topic, *record)
        assert self._lib.rd_kafka_flush(self._handle, 30_000) == 0, "records not delivered"
        self._held.clear()

    def close(self) -> None:
        self._lib.rd_kafka_destroy(self._handle)

    def __enter__(self) -> RawProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[bytes, bytes | None]],
    ) -> None:
        fields = (_VU * (4 + len(headers)))()
        name = ctypes.create_string_buffer(topic.encode())
        self._held.append((fields, name))
        fields[0].vtype, fields[0].u.cstr = _TOPIC, ctypes.cast(name, ctypes.c_char_p)
        fields[1].vtype, fields[1].u.i32 = _PARTITION, partition
        self._bytes(fields[2], _KEY, key)
        self._bytes(fields[3], _VALUE, value)
        for field, (header, content) in zip(fields[4:], headers, strict=True):
            field.vtype = _HEADER
            field.u.header.name = ctypes.cast(self._buffer(header), ctypes.c_char_p)
            field.u.header.val = None if content is None else ctypes.cast(
                self._buffer(content), ctypes.c_void_p)  # fmt: skip
            field.u.header.size = -1 if content is None else len(content)
        error = self._lib.rd_kafka_produceva(self._handle, fields, len(fields))
        assert not error, self._lib.rd_kafka_error_string(error)

    def _bytes(self, field: _VU, vtype: int, content: bytes | None) -> None:
        field.vtype = vtype
        if content is not None:
            field.u.mem.ptr = ctypes.cast(self._buffer(content), ctypes.c_void_p)
            field.u.mem.size = len(content)

    def _buffer(self, content: bytes) -> ctypes.Array[ctypes.c_char]:
        buffer = ctypes.create_string_buffer(content, len(content) + 1)
        self._held.append(buffer)
        return buffer
