"""The JavaScript engines' hand reproductions still reproduce: each ``confirm.mjs`` under
``impl/ecosystem/`` runs the engine's own public API outside specgate on the inputs where the
gates found a divergence, compares with reference values written into the script, and exits 0
only when every divergence listed there is still there (1 when one is gone: the engine changed,
the table's root causes must be looked at again; 2 when a model file it needs is not cached).

The npm packages are installed by the ``ecosystem`` session (``npm ci`` in each folder); without
``node_modules`` the test is skipped with the command that installs them (a failure under
``--live-references``: nox -s live installs them).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ecosystem.engines import assert_entries_reproduce, engine_unavailable

ECOSYSTEM = Path(__file__).resolve().parents[2] / "impl" / "ecosystem"
JS_ENGINES = ["hf_jinja", "hf_tokenizers", "node_llama_cpp", "transformers_js", "lenml_tokenizers"]
MISSING_MODEL = 2
TIMEOUT_SECONDS = 900  # node_llama_cpp loads the 0.5B model and generates on a shared 2-core machine


@pytest.mark.slow
@pytest.mark.parametrize("engine", JS_ENGINES)
def test_confirm_reproduces(engine: str) -> None:
    folder = ECOSYSTEM / engine
    node = shutil.which("node")
    if node is None:
        engine_unavailable("node is not installed (Node 20 runs the JavaScript engines)")
    if not (folder / "node_modules").is_dir():
        engine_unavailable(f"{engine}: node_modules is not installed (run `npm ci` in {folder})")
    run = subprocess.run(
        [node, str(folder / "confirm.mjs")],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    if run.returncode == MISSING_MODEL:
        engine_unavailable(f"{engine}: a model file confirm.mjs needs is not cached: {run.stdout.strip()}")
    assert run.returncode == 0, (
        f"{engine}/confirm.mjs exit {run.returncode}:\n{run.stdout}{run.stderr[-2000:]}"
    )
    assert_entries_reproduce(engine, run.stdout)
