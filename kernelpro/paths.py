"""Where KernelPro keeps things on disk, resolved one way.

- the run store: `$KERNELPRO_DB`, else `~/.kernelpro/runs.db`;
- caches (builds, compiles, code-search indexes): `$KERNELPRO_CACHE`, else `$XDG_CACHE_HOME/kernelpro`,
  else `~/.cache/kernelpro`.
"""

from __future__ import annotations

import os
from pathlib import Path


def db_path() -> Path:
    env = os.environ.get("KERNELPRO_DB")
    return Path(env) if env else Path.home() / ".kernelpro" / "runs.db"


def cache_root() -> Path:
    env = os.environ.get("KERNELPRO_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kernelpro"


def cache_dir(kind: str) -> Path:
    """One subfolder of the cache root per kind of cached thing (compile, torch_extensions, codesearch)."""
    return cache_root() / kind


def reports_dir(db: Path) -> Path:
    """Where `kernelpro report` writes its pages by default: a `reports` folder beside the run store."""
    return Path(db).resolve().parent / "reports"
