"""`globalstore pipeline package`: the job's code as one zip for `spark-submit --py-files`.

On a cluster the executors import the pipeline's modules (the state function lives in
`pipelines.orders`), so the code has to travel with the job. The zip holds the whole
`pipelines` package and the part of `globalstore` it imports (the topic contract, the
value format converters, the bootstrap constants and the Kafka client settings), under a
`globalstore/__init__.py` of its own that pulls in nothing else. Beside it goes the entry
script spark-submit runs.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import globalstore.codec
import pipelines

ZIP_NAME = "globalstore-pipelines.zip"
ENTRY_NAME = "run_pipeline.py"

CONTRACT_MODULES = (
    "codec.py",
    "config.py",
    "converters.py",
    "errors.py",
    "kafka/__init__.py",
    "kafka/settings.py",
    "kafka/clients.py",
)
"""The globalstore modules pipelines/ needs: codec, config, converters, the Kafka client
settings (`--kafka-config`, secret masking), what every librdkafka client shares, and what
they import."""

_CONTRACT_INIT = '"""The topic contract, shipped with the pipelines (not the store)."""\n'
_ENTRY = '''"""spark-submit entry written by `globalstore pipeline package`; the code is in the zip.

spark-submit --py-files globalstore-pipelines.zip run_pipeline.py NAME [flags]
"""

from pipelines.cli import run

if __name__ == "__main__":
    run(prog_name="run_pipeline.py")
'''


def build_package(output_dir: Path) -> tuple[Path, Path]:
    """Write the zip and the entry script into `output_dir`; return their paths."""
    output_dir.mkdir(parents=True, exist_ok=True)
    archive, entry = output_dir / ZIP_NAME, output_dir / ENTRY_NAME
    source = Path(pipelines.__file__).parent
    contract = Path(globalstore.codec.__file__).parent
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(source.rglob("*.py")):
            zipped.write(path, Path("pipelines", path.relative_to(source)).as_posix())
        zipped.writestr("globalstore/__init__.py", _CONTRACT_INIT)
        for name in CONTRACT_MODULES:
            zipped.write(contract / name, f"globalstore/{name}")
    entry.write_text(_ENTRY)
    return archive, entry
