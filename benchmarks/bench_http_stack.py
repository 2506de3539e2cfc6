"""Which ASGI server for `globalstore serve`: the same minimal Starlette app (GET by key from an
in-memory dict, orjson body) on each candidate, measured with benchmarks/loadgen.py.

    python benchmarks/bench_http_stack.py [--seconds 8] [--connections 16]

Candidates that are not installed are skipped (granian is not a dependency: pip install
granian to include it). Prints one line per server.
"""

from __future__ import annotations

import argparse
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadgen import run_load

from globalstore.localkafka import free_port

APP = """
import orjson
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

DATA = {f"k{i}".encode(): orjson.dumps({"id": i, "v": "x" * 150}) for i in range(100_000)}


async def get_key(request):
    key = request.path_params["key"].encode()
    raw = DATA.get(key)
    if raw is None:
        return Response(b'{"error":"not found"}', 404, media_type="application/json")
    return Response(b'{"key":"%s","value":%s}' % (key, raw), media_type="application/json")


app = Starlette(routes=[Route("/v1/keys/{key}", get_key)])
"""


def candidates(port: int) -> dict[str, list[str]]:
    bin_dir = Path(sys.executable).parent
    uvicorn = [str(bin_dir / "uvicorn"), "app:app", "--port", str(port), "--no-access-log"]
    return {
        "uvicorn + httptools + uvloop": [*uvicorn, "--loop", "uvloop", "--http", "httptools"],
        "uvicorn + h11 + asyncio": [*uvicorn, "--loop", "asyncio", "--http", "h11"],
        "granian (1 worker)": [
            str(bin_dir / "granian"),
            *("--interface", "asgi", "--port", str(port), "--workers", "1", "--no-ws", "app:app"),
        ],
    }


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not listen within 30s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    rng = random.Random(7)
    paths = [f"/v1/keys/k{rng.randrange(100_000)}" for _ in range(5000)]
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        Path(tmp, "app.py").write_text(APP)
        for name, command in candidates(port := free_port()).items():
            if shutil.which(command[0]) is None:
                print(f"{name}: not installed, skipped")
                continue
            proc = subprocess.Popen(command, cwd=tmp, stderr=subprocess.DEVNULL)
            try:
                wait_listening(port, proc)
                run_load("127.0.0.1", port, paths, args.connections, 2.0)  # warm-up
                result = run_load("127.0.0.1", port, paths, args.connections, args.seconds)
                print(f"{name}: {result.summary()}", flush=True)
            finally:
                proc.terminate()
                proc.wait(30)


if __name__ == "__main__":
    main()
