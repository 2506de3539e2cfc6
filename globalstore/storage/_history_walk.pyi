# Types of the C module built from _history_walk.c (see history.answer for its use).
import rocksdict

def answer(
    it: rocksdict.RdictIter, head: bytes, t_ms: int, current: bytes | None, /
) -> bytes | None: ...
