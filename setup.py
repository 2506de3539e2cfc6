"""The optional C restore loop (globalstore/follow/_native.c), the C reader of declared
indexes (globalstore/shaping/_fields.c), the C writer of index entries
(globalstore/storage/_entries.c) and the C walk of a key's versions
(globalstore/storage/_history_walk.c). Where they cannot be compiled (no C compiler or no
Python headers) the package installs without them and runs the same steps in Python. The
store's log says which loop each restore ran ("restoring <topic> with the C loop")."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "globalstore.follow._native",
            ["globalstore/follow/_native.c"],
            depends=[
                "globalstore/shaping/_json_check.h",
                "globalstore/shaping/_json_fields.h",
                "globalstore/shaping/_shape.h",
            ],
            optional=True,
        ),
        Extension(
            "globalstore.storage._entries", ["globalstore/storage/_entries.c"], optional=True
        ),
        Extension(
            "globalstore.storage._ordered", ["globalstore/storage/_ordered.c"], optional=True
        ),
        Extension(
            "globalstore.storage._history_walk",
            ["globalstore/storage/_history_walk.c"],
            optional=True,
        ),
        Extension(
            "globalstore.shaping._fields",
            ["globalstore/shaping/_fields.c"],
            depends=[
                "globalstore/shaping/_json_check.h",
                "globalstore/shaping/_json_fields.h",
                "globalstore/shaping/_shape.h",
            ],
            optional=True,
        ),
    ]
)
