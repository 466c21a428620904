"""Reading an ``.npz`` of named arrays that a command line names (``--proposals``, ``--predictions``): a
``ValueError`` naming the flag and the file for what ``np.load`` does not say in a user's terms."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from jaxdrive.errors import UserInputError


def read_npz_arrays(path: str | Path, flag: str, one_per: str) -> dict[str, np.ndarray]:
    """{name: array} of the ``.npz`` at ``path``. Refused, naming ``flag`` and ``path``: a file that does not read as
    one (missing, empty, truncated, an object array: allow_pickle is off) and a ``.npy`` saved under the name (one
    array, no names; ``one_per`` says what the file should hold instead, e.g. "one (8, 3) array per token")."""
    path = Path(path)

    def unreadable(e: BaseException) -> ValueError:
        return UserInputError(f"{flag} {path}: cannot read an .npz of arrays ({e or 'an empty file'})")

    try:
        with open(path, "rb") as f:
            head = f.read(6)
        if head and not head.startswith((b"PK", b"\x93NUMPY")):  # np.load would take it for a pickle and say so
            raise UserInputError(f"not an .npz file (a zip of .npy arrays, as np.savez writes); it starts with {head!r}")
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # EOFError: an empty file
        raise unreadable(e) from None
    if isinstance(z, np.ndarray):
        raise UserInputError(f"{flag} {path}: one array of shape {z.shape}, not an .npz of {one_per}")
    try:
        with z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # e.g. an object array, a member cut short
        raise unreadable(e) from None
