"""Every research notebook in notebooks/ executes top to bottom (small sizes) and ends with its measured conclusion.

Notebooks are jupytext percent-format ``.py`` files; each is converted in memory with jupytext and run with nbclient
in a kernel of this interpreter (ipykernel), with ``JAXDRIVE_NB_SMALL=1`` (the notebooks shrink their sizes) and this
checkout first on ``PYTHONPATH``. A cell that raises fails the test. Outputs are never written back.
"""
import json
import os
import sys
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
KERNEL = "jaxdrive-test-python"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A kernelspec running this interpreter (found first through JUPYTER_PATH), and the kernel's environment."""
    path = tmp_path_factory.mktemp("jupyter")
    spec_dir = path / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec_dir / "kernel.json").write_text(json.dumps(dict(argv=argv, display_name=KERNEL, language="python")))
    env = dict(os.environ)
    env["JUPYTER_PATH"] = os.pathsep.join([str(path)] + [p for p in env.get("JUPYTER_PATH", "").split(os.pathsep) if p])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["JAXDRIVE_NB_SMALL"] = "1"
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env.pop("XLA_FLAGS", None)  # one CPU device, as a user's kernel has (the suite forces 8 for sharding tests)
    return env


def test_notebooks_exist():
    assert NOTEBOOKS, "notebooks/ holds no .py notebooks"


def test_no_committed_outputs():
    """Paired .ipynb files, if any, carry no outputs (the .py files are the source)."""
    for ipynb in (ROOT / "notebooks").glob("*.ipynb"):
        nb = json.loads(ipynb.read_text())
        with_outputs = [i for i, c in enumerate(nb["cells"]) if c.get("outputs")]
        assert not with_outputs, f"{ipynb.name}: cells {with_outputs} have committed outputs (strip them)"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, kernel_env, monkeypatch):
    for key in list(os.environ):
        if key not in kernel_env:
            monkeypatch.delenv(key)
    for key, value in kernel_env.items():
        monkeypatch.setenv(key, value)
    nb = jupytext.read(path)
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=900,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the cell if one raises
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    text = "".join(o.get("text", "") for o in last.get("outputs", []) if o.get("output_type") == "stream")
    assert text.lstrip().startswith("Conclusion"), (
        f"{path.name}: the last code cell must print the measured conclusion ('Conclusion: ...'), printed {text[:200]!r}")
    print(f"\n{path.stem}: {text.strip()}")
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert images >= 1, f"{path.name}: no inline plot was produced"
