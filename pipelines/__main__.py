"""spark-submit entry: `spark-submit --packages ... pipelines/__main__.py orders [flags]`.

Also `python -m pipelines orders [flags]`. Flags are those of `globalstore pipeline run`.
"""

import sys
from pathlib import Path

if not __package__:
    # spark-submit runs this file by path: make the project root importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.cli import run

if __name__ == "__main__":
    run(prog_name="pipelines")
