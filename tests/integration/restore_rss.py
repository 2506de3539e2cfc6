"""Child process of test_store_memory: cold-restore a topic, print the process's peak RSS.

    python restore_rss.py BOOTSTRAP TOPIC PATH

Prints one JSON line: records restored and VmHWM (the peak resident set, in MB) after it.
A fresh process, so the peak is the restore's and nothing the test process did before.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from globalstore import GlobalStore, StoreListener


class Restored(StoreListener):
    records = 0

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        self.records = total_records


def peak_rss_mb() -> float:
    found = re.search(r"VmHWM:\s*(\d+) kB", Path("/proc/self/status").read_text())
    assert found, "no VmHWM in /proc/self/status"
    return int(found.group(1)) / 1024


def main() -> None:
    bootstrap, topic, path = sys.argv[1:4]
    restored = Restored()
    with GlobalStore(topic, bootstrap, path, listeners=[restored]).start(timeout=240):
        print(json.dumps({"records": restored.records, "peak_rss_mb": peak_rss_mb()}))


if __name__ == "__main__":
    main()
