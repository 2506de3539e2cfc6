"""Child process of test_store_indexes: open a GlobalStore whose index must be built over the
keys it already holds, and follow until SIGKILLed.

    python crash_indexer.py BOOTSTRAP TOPIC PATH CHUNK

The index function sleeps a little on every key, so a build of N keys in chunks of CHUNK
lasts long enough, however fast the machine, for the test to kill it halfway. Prints
"following" once the store is ready (the build runs after that, between follow batches).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from globalstore import GlobalStore, StoreConfig

KEY_PAUSE = 0.002  # seconds the index function takes per key while the child builds


def by_courier(key: str, value: Any) -> str | None:
    """The courier of an order (None: not in the index)."""
    courier: str | None = value.get("courier")
    return courier


def slow_by_courier(key: str, value: Any) -> str | None:
    """by_courier, slowly: the same entries."""
    time.sleep(KEY_PAUSE)
    return by_courier(key, value)


def main() -> None:
    bootstrap, topic, path, chunk = sys.argv[1:5]
    config = StoreConfig(
        topic=topic,
        bootstrap_servers=bootstrap,
        path=Path(path),
        indexes={"by_courier": slow_by_courier},
        index_build_chunk=int(chunk),
    )
    store = GlobalStore.from_config(config)
    store.start(timeout=120)
    print("following", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
