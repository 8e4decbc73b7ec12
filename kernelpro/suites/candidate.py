"""A candidate kernel as read from disk: a KernelBench-style `.py` (ModelNew), or a raw `.cu` / `.ptx` file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelpro.errors import KernelProError
from kernelpro.results.store import source_hash

KINDS = {".py": "py", ".cu": "cu", ".ptx": "ptx"}


@dataclass(frozen=True)
class Candidate:
    path: Path
    source: str
    kind: str  # py | cu | ptx
    hash: str  # sha256 of source; the compile cache and the store key on it

    @property
    def short(self) -> str:
        return self.hash[:12]


def load_candidate(path: str | Path) -> Candidate:
    """Read a candidate file; a one-line KernelProError when it is missing or of an unknown kind."""
    p = Path(path)
    kind = KINDS.get(p.suffix)
    if kind is None:
        raise KernelProError(f"{p}: a candidate must be a .py (ModelNew), .cu or .ptx file")
    try:
        source = p.read_text()
    except OSError as e:
        raise KernelProError(f"{p}: cannot read candidate ({e.strerror})") from None
    except UnicodeDecodeError:
        raise KernelProError(f"{p}: candidate is not UTF-8 text") from None
    return Candidate(path=p.resolve(), source=source, kind=kind, hash=source_hash(source))
