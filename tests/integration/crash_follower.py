"""Child process of test_store_crash: open a GlobalStore, restore, follow until SIGKILLed.

    python crash_follower.py BOOTSTRAP TOPIC PATH RESTORE_BATCH PAUSE [BOOTSTRAP_FROM
                             [TRANSFORM BULK_THRESHOLD [INVALID_VALUES]]]

Prints one line per phase on stdout ("restoring", "batch", "restored", "following") so the
test knows what it interrupted. The restore reads at most RESTORE_BATCH records per batch and
sleeps PAUSE seconds after each one, so a restore of N records takes at least
N / RESTORE_BATCH * PAUSE seconds however fast the machine is: the test can kill it mid-restore.
BOOTSTRAP_FROM, a snapshot URL or directory, is installed first if PATH is empty ("" for
none). TRANSFORM, a "pkg.module:function", is the store's transform (version 1), and
BULK_THRESHOLD its bulk_restore_threshold: a restore below it writes every batch through the
write-ahead log, so a kill leaves each batch written before it on disk ("" for no
transform and the default threshold). INVALID_VALUES is the store's invalid_values.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from globalstore import GlobalStore, StoreConfig, StoreListener
from globalstore.converters import import_converter


class Phases(StoreListener):
    def __init__(self, pause: float) -> None:
        self.pause = pause

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        todo = sum(end_offsets[p] - start_offsets.get(p, 0) for p in end_offsets)
        print(f"restoring {todo}", flush=True)

    def on_batch_restored(self, topic: str, positions: Mapping[int, int], records: int) -> None:
        print(f"batch {records}", flush=True)
        time.sleep(self.pause)

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        print(f"restored {total_records}", flush=True)


def main() -> None:
    bootstrap, topic, path, batch, pause = sys.argv[1:6]
    shaped: dict[str, Any] = {}
    if len(sys.argv) > 7 and sys.argv[7]:
        shaped = {
            "transform": import_converter(sys.argv[7]),
            "bulk_restore_threshold": int(sys.argv[8]),
        }
    if len(sys.argv) > 9:
        shaped["invalid_values"] = sys.argv[9]
    config = StoreConfig(
        topic=topic,
        bootstrap_servers=bootstrap,
        path=Path(path),
        restore_batch_size=int(batch),
        **shaped,
    )
    bootstrap_from = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else None
    store = GlobalStore.from_config(
        config, listeners=[Phases(float(pause))], bootstrap_from=bootstrap_from
    )
    store.start(timeout=120)
    print("following", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
