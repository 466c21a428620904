"""Checks of the output paths a command line names, made before the run whose result they would otherwise lose when
it is written (an existing directory where a file goes, a missing folder, a file where a directory goes): a
``ValueError`` naming the flag and the path (exit 2)."""
from __future__ import annotations

from pathlib import Path

from jaxdrive.errors import UserInputError


def output_file(flag: str, path: str | Path | None, *, make_parents: bool = False) -> Path | None:
    """``path`` (None: the flag was not given) for a file to write: not an existing directory, in a folder that
    exists (``make_parents``: one the command makes, so not below a file)."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{flag} {path}: is a directory; expected the path of a file to write")
    if make_parents:
        _below_no_file(flag, path)
    elif not path.parent.is_dir():
        raise UserInputError(f"{flag} {path}: folder {path.parent} does not exist")
    return path


def output_dir(flag: str, path: str | Path) -> Path:
    """``path`` for an output directory (made by the run if missing): not an existing file, nor below one."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserInputError(f"{flag} {path}: is a file; expected an output directory")
    if not path.exists():
        _below_no_file(flag, path)
    return path


def _below_no_file(flag: str, path: Path) -> None:
    """A ValueError when the nearest existing folder above ``path`` is a file (no folder can be made for it)."""
    existing = next((p for p in path.absolute().parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise UserInputError(f"{flag} {path}: {existing} is a file, so no directory can be made below it")


def output_not_input(flag: str, out: Path | None, inputs: dict[str, list[Path]]) -> None:
    """A ValueError when the output file ``out`` of ``flag`` is one of the ``inputs`` ({input flag: paths}): writing
    it would replace that input (a plot over the predictions, metrics over the GT)."""
    if out is None or not Path(out).exists():
        return
    for in_flag, paths in inputs.items():
        for path in paths:
            if Path(path).exists() and Path(out).samefile(path):
                raise UserInputError(f"{flag} {out}: is the {in_flag} file {path}; writing it would replace that input")
