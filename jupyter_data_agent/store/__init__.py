"""What the product keeps between sessions: the decisions store and the trained value models.

Neutral ground for the server (which writes decisions and picks the newest
value model) and ``train/`` (which reads the one and writes the other).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: Folder and file modes of what the store keeps: its user's alone. Under JupyterHub every
#: user's data dir lies in their home, and homes are often open to other users (Debian's
#: 0755): decisions hold prompts, code and outputs computed from the user's data.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def agent_data_dir() -> Path:
    """``<jupyter data dir>/jupyter_data_agent``: this user's decisions and value models."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "jupyter_data_agent"


def private_dir(path: Path, *, tighten: bool) -> Path:
    """``path`` (and missing parents) made if missing, the folder itself 0700.

    ``tighten``: a folder that exists already and belongs to this user loses its group and
    other bits too (the product's own folder, made open by an earlier version); otherwise an
    existing folder is left as it is (a place the user chose).
    """
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    if tighten and os.name == "posix":
        st = path.stat()
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            path.chmod(stat.S_IMODE(st.st_mode) & PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (SQLite gives its journal the same)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)
