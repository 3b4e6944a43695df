"""Run one page's examples in order in the current folder: ``python run_page.py EXAMPLES.json``.

Python examples share one namespace (``runpy.run_path`` with the previous globals); shell examples run
with ``bash -e``. The first failure prints ``doc example failed: PAGE:LINE`` and exits 1.
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path


def main(path: str) -> int:
    namespace: dict = {"__name__": "__doc_example__"}
    with tempfile.TemporaryDirectory(prefix="doc-example-") as scripts:
        for index, example in enumerate(json.loads(Path(path).read_text())):
            print(f"--- {example['id']} ({example['kind']})", flush=True)
            if example["kind"] in ("python", "setup"):
                script = Path(scripts) / f"example_{index}.py"
                script.write_text(example["code"])
                try:
                    namespace = runpy.run_path(str(script), init_globals=namespace, run_name="__doc_example__")
                except BaseException as exc:  # noqa: BLE001 - SystemExit too: the example failed; say which
                    import traceback

                    traceback.print_exc()
                    print(f"doc example failed: {example['id']}: {type(exc).__name__}: {exc}", flush=True)
                    return 1
            else:
                proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", example["code"]], check=False)
                if proc.returncode != 0:
                    print(f"doc example failed: {example['id']}: exit {proc.returncode}", flush=True)
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
