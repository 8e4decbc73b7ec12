"""Code search over CUTLASS/CuTe headers: a SQLite FTS5 index with bm25 ranking.

Headers come from the `nvidia-cutlass` PyPI wheel (it ships the full include tree under
cutlass_library/source/include) or from a user checkout (--cutlass PATH). Files are cut into chunks
at blank lines (20-60 lines each). Tokenization is identifier-aware: besides the text itself, each
chunk is indexed with its identifiers split at underscores, case changes and letter/digit seams
(`SM90_TMA_LOAD_MULTICAST` -> sm90 tma load multicast; `make_gmma_desc` -> make gmma desc;
`GmmaDescriptor` -> gmma descriptor), so a natural query ("SM90 TMA load atom") meets C++ names.

A model asks with <search>query</search> in its reply and gets the top snippets back.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from kernelpro import paths
from kernelpro.errors import KernelProError

HEADER_EXT = (".h", ".hpp", ".cuh", ".inl")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPLIT = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+[a-z]?")
# PTX names vs CUTLASS names for the same hardware feature.
SYNONYMS = {"wgmma": ["gmma"], "tcgen05": ["umma"], "cp.async.bulk.tensor": ["tma"], "stmatrix": ["stsm"],
            "ldmatrix": ["ldsm"], "setmaxnreg": ["reg", "reconfig"]}
STOP = {"the", "a", "an", "of", "for", "to", "in", "and", "or", "is", "on", "with", "how", "what", "use", "using"}


def identifier_terms(text: str) -> list[str]:
    """Lower-cased identifiers plus their parts; 'SM90' stays one term (arch tags are searched as such)."""
    out: list[str] = []
    for ident in _IDENT.findall(text):
        low = ident.lower()
        parts = [p.lower() for seg in ident.split("_") if seg for p in _SPLIT.findall(seg)]
        # re-join letter+digit pairs like 'sm' '90' -> 'sm90' so 'SM90' and 'sm_90' meet
        joined: list[str] = []
        for p in parts:
            if joined and p[0].isdigit() and joined[-1].isalpha() and len(joined[-1]) <= 3:
                joined[-1] += p
            else:
                joined.append(p)
        out.append(low)
        out.extend(j for j in joined if j != low)
    return out


def find_cutlass_include(user_path: str | None = None) -> Path | None:
    """The include/ folder of a user checkout, or of the installed nvidia-cutlass wheel."""
    if user_path:
        p = Path(user_path).expanduser()
        for cand in (p / "include", p):
            if (cand / "cute").is_dir() or (cand / "cutlass").is_dir():
                return cand
        raise KernelProError(f"--cutlass {user_path}: no include/cute or include/cutlass under it; "
                             "pass a CUTLASS checkout root")
    spec = importlib.util.find_spec("cutlass_library")   # locates the package without importing it
    for root in (spec.submodule_search_locations or []) if spec else []:
        inc = Path(root) / "source" / "include"
        if inc.is_dir():
            return inc
    return None


@dataclass
class Snippet:
    path: str
    start: int        # 1-based first line
    end: int
    text: str
    score: float


def chunk_lines(lines: list[str], min_lines: int = 20, max_lines: int = 60) -> list[tuple[int, int]]:
    """(start, end) 0-based half-open ranges, cut at blank lines between min_lines and max_lines."""
    chunks, start = [], 0
    for i, line in enumerate(lines):
        n = i - start + 1
        if (n >= min_lines and not line.strip()) or n >= max_lines:
            chunks.append((start, i + 1))
            start = i + 1
    if start < len(lines):
        chunks.append((start, len(lines)))
    return [(a, b) for a, b in chunks if any(ln.strip() for ln in lines[a:b])]


class CodeIndex:
    """A persistent FTS5 index; rebuilt only when the set of files (names, sizes, mtimes) changes."""

    def __init__(self, db_path: str | Path):
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.db_path)
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS chunks USING fts5("
                        "path UNINDEXED, start UNINDEXED, stop UNINDEXED, body, terms, pterms, "
                        "tokenize = \"unicode61 tokenchars '_'\")")

    def close(self) -> None:
        self.db.close()

    @staticmethod
    def files(roots: list[Path]) -> list[Path]:
        out = []
        for r in roots:
            out += [p for p in sorted(r.rglob("*")) if p.suffix in HEADER_EXT and p.is_file()]
        return out

    @staticmethod
    def fingerprint(files: list[Path]) -> str:
        h = hashlib.sha256()
        for p in files:
            st = p.stat()
            h.update(f"{p}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def build(self, roots: list[Path]) -> int:
        """Index every header under roots (idempotent). Returns the number of chunks indexed."""
        files = self.files(roots)
        fp = self.fingerprint(files)
        row = self.db.execute("SELECT value FROM meta WHERE key='fingerprint'").fetchone()
        if row and row[0] == fp:
            return self.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        with self.db:
            self.db.execute("DELETE FROM chunks")
            for p in files:
                try:
                    lines = p.read_text(errors="replace").splitlines()
                except OSError:
                    continue
                rel = _rel(p, roots)
                pterms = " ".join(identifier_terms(rel.replace("/", " ").replace(".", " ")))
                for a, b in chunk_lines(lines):
                    body = "\n".join(lines[a:b])
                    self.db.execute(
                        "INSERT INTO chunks (path, start, stop, body, terms, pterms) VALUES (?,?,?,?,?,?)",
                        (rel, a + 1, b, body, " ".join(identifier_terms(body)), pterms))
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('fingerprint', ?)", (fp,))
        return self.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]

    def search(self, query: str, k: int = 5) -> list[Snippet]:
        words = identifier_terms(query)
        words += [syn for w in words for syn in SYNONYMS.get(w, [])]
        terms = [t for t in dict.fromkeys(words) if t not in STOP]
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '') + '"' for t in terms)
        # bm25 weights: split identifiers carry most of the signal, the file's name (cute/atom/
        # copy_traits_sm90_tma.hpp) says what a chunk is about, raw body text the rest.
        rows = self.db.execute(
            "SELECT path, start, stop, body, bm25(chunks, 0, 0, 0, 1.0, 2.0, 3.0) AS s FROM chunks "
            "WHERE chunks MATCH ? ORDER BY s LIMIT ?", (match, k)).fetchall()
        return [Snippet(r[0], int(r[1]), int(r[2]), r[3], -float(r[4])) for r in rows]


def _rel(p: Path, roots: list[Path]) -> str:
    for r in roots:
        try:
            return str(p.relative_to(r))
        except ValueError:
            continue
    return str(p)


def format_snippets(query: str, snippets: list[Snippet], max_chars: int = 6000) -> str:
    if not snippets:
        return f"<search_results query={query!r}>no match</search_results>"
    out, used = [f"<search_results query={query!r}>"], 0
    for s in snippets:
        block = f"// {s.path}:{s.start}-{s.end}\n{s.text}\n"
        if used + len(block) > max_chars:
            break
        out.append(block)
        used += len(block)
    out.append("</search_results>")
    return "\n".join(out)


def default_index(cutlass: str | None = None) -> CodeIndex | None:
    """The index over the installed (or given) CUTLASS headers, cached under ~/.cache/kernelpro."""
    inc = find_cutlass_include(cutlass)
    if inc is None:
        return None
    cache = paths.cache_dir("codesearch")
    idx = CodeIndex(cache / f"cutlass-{hashlib.sha256(str(inc).encode()).hexdigest()[:12]}.db")
    idx.build([inc])
    return idx
