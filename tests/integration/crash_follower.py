"""Child process of test_store_crash: open a GlobalStore, restore, follow until SIGKILLed.

    python crash_follower.py BOOTSTRAP TOPIC PATH

Prints one line per phase on stdout ("restoring", "batch", "restored", "following") so the
test knows what it interrupted.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from globalstore import GlobalStore, StoreListener


class Phases(StoreListener):
    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        todo = sum(end_offsets[p] - start_offsets.get(p, 0) for p in end_offsets)
        print(f"restoring {todo}", flush=True)

    def on_batch_restored(self, topic: str, positions: Mapping[int, int], records: int) -> None:
        print(f"batch {records}", flush=True)

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        print(f"restored {total_records}", flush=True)


def main() -> None:
    bootstrap, topic, path = sys.argv[1:4]
    store = GlobalStore(topic, bootstrap, path, listeners=[Phases()])
    store.start(timeout=60)
    print("following", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
