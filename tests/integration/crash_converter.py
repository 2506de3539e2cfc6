"""Child process of test_store_formats: open a store converting to value format 3 slowly,
print how far the eager pass got, until SIGKILLed.

    python crash_converter.py BOOTSTRAP TOPIC PATH
"""

from __future__ import annotations

import sys
import time

from globalstore import GlobalStore
from tests.value_formats import slow_v2_to_v3, v1_to_v2


def main() -> None:
    bootstrap, topic, path = sys.argv[1:4]
    converters = {1: v1_to_v2, 2: slow_v2_to_v3}
    store = GlobalStore(topic, bootstrap, path, value_format=3, converters=converters)
    store.start(timeout=120)
    while True:
        status = store.status()
        print(f"migrated {status.migrated_values} {status.migration}", flush=True)
        time.sleep(0.02)


if __name__ == "__main__":
    main()
