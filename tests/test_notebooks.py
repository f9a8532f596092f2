"""Every notebook in notebooks/ runs top to bottom without error (examples cannot rot).

The kernel runs with ``TRAINPLAN_NOTEBOOK_SIZE=small``: a notebook that sweeps reads it and shrinks
its sweeps to fit the 2-core CI; a user who runs it without the variable gets the full size. The
kernel imports this checkout's packages (``PYTHONPATH``), not whichever copy the environment installed.
"""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("TRAINPLAN_NOTEBOOK_SIZE", "small")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_outputs_stripped(path):
    """Outputs are not committed: every code cell has no outputs and no execution count."""
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    dirty = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; strip them before committing"
