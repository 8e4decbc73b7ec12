"""Shared, content-addressed builds of a candidate's extensions (the CPU build stage).

`build_candidate` runs the candidate's own `torch.utils.cpp_extension.load_inline` calls once, in a
sandboxed build process (`sandbox.run`, no GPU, writable = the build folder only, its own compile
timeout), into the folder `worker.extension_dir(hash)` names. Every later consumer of that candidate
(the evaluation worker, the ncu pass, `compare`, `optimize`, a re-run) loads that build instead of
compiling again, so a run's wall-clock limit measures the run, not nvcc.

A consumer must not be able to poison the shared build: `private_view` gives each worker a private
copy of the folder, shown at the shared path (a bind in the sandbox), because torch's JIT loader
writes a lock file and re-runs ninja even when the build is up to date, and ninja keys its log on the
absolute paths of the build, so a copy at any other path would be rebuilt from scratch.

The child (`python -m kernelpro.harness.build TASK CANDIDATE`) imports the candidate (module-level
builds), calls `_build(PARAMS)` when the candidate is a template, and constructs `ModelNew` with the
task's init inputs on the meta device (builds made in `__init__`); it never runs a forward pass.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError

MARKER = ".kp_build.json"      # written by the parent after a build succeeded: the cache hit record
DEFAULT_BUILD_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Build:
    hash: str
    ext_dir: str
    ok: bool
    cached: bool            # found built (marker present): no build process ran
    wall_s: float
    detail: str = ""        # the error tail of a failed build, or what was not exercised
    timed_out: bool = False
    extensions: int = 0     # extension folders the build left

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Build:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise KernelProError(f"build record: unknown key(s) {', '.join(unknown)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def arch_list_env() -> dict[str, str]:
    """TORCH_CUDA_ARCH_LIST for builds and workers alike. The build process sees no GPU, so torch would
    pick its architectures differently from a worker that sees one, and ninja would rebuild on the
    changed command line; pin both to the first GPU's (or keep the user's own setting)."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return {"TORCH_CUDA_ARCH_LIST": os.environ["TORCH_CUDA_ARCH_LIST"]}
    from kernelpro.toolchain import gpus

    g = list(gpus())
    if not g:
        return {}
    digits = "".join(ch for ch in g[0].arch if ch.isdigit())     # sm_90a -> 90 -> "9.0"
    # "+PTX" as torch adds by default for the newest architecture it targets
    return {"TORCH_CUDA_ARCH_LIST": f"{digits[:-1]}.{digits[-1]}+PTX"} if len(digits) >= 2 else {}


def _clear_locks(ext_dir: Path) -> None:
    # A build killed mid-way leaves torch's lock file behind, and the next loader would wait on it forever.
    for lock in ext_dir.glob("*/lock"):
        lock.unlink(missing_ok=True)


def builds_extensions(candidate_path: str | Path) -> bool:
    """Whether a candidate may JIT-build extensions (names torch's extension loader, or loads a helper
    file that may): decides only whether a consumer outside bench builds it first, never a verdict."""
    try:
        src = Path(candidate_path).read_text()
    except (OSError, UnicodeDecodeError):
        return False
    return any(k in src for k in ("cpp_extension", "load_inline", "spec_from_file_location", "FfiCandidate"))


def cached_build(candidate_hash: str, cache_dir: str | Path | None = None) -> Build | None:
    from kernelpro.harness.worker import extension_dir

    m = extension_dir(candidate_hash, cache_dir) / MARKER
    try:
        rec = Build.from_dict(json.loads(m.read_text()))
    except (OSError, ValueError, KernelProError):
        return None   # no marker, or one from another version: build again (ninja makes it cheap)
    return Build(**{**rec.to_dict(), "cached": True, "wall_s": 0.0}) if rec.ok else None


def build_candidate(task_path: str | Path, candidate_path: str | Path, candidate_hash: str, *,
                    timeout_s: float = DEFAULT_BUILD_TIMEOUT_S, cache_dir: str | Path | None = None,
                    use_cache: bool = True, compile_jobs: int = 2) -> Build:
    """Build the candidate's extensions into its content-addressed folder; never raises for what the
    candidate does (a failed build is a record; the worker still judges the candidate)."""
    from kernelpro import sandbox
    from kernelpro.harness.worker import extension_dir

    if use_cache and (hit := cached_build(candidate_hash, cache_dir)) is not None:
        return hit
    ext = extension_dir(candidate_hash, cache_dir)
    _clear_locks(ext)
    env = dict(os.environ)
    env.update(arch_list_env())
    env["TORCH_EXTENSIONS_DIR"] = str(ext)
    env["MAX_JOBS"] = env.get("MAX_JOBS", str(max(1, compile_jobs)))   # ninja's share of the stage's cores
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", "kernelpro.harness.build", str(Path(task_path).resolve()),
           str(Path(candidate_path).resolve())]
    fin = sandbox.run(cmd, timeout_s=timeout_s, cwd=ext, env=env, gpu=sandbox.NO_GPU, writable=[ext])
    _clear_locks(ext)
    n = sum(1 for p in ext.iterdir() if p.is_dir())
    if fin.timed_out:
        return Build(candidate_hash, str(ext), False, False, fin.wall_s, f"build timed out after {timeout_s:g} s",
                     timed_out=True, extensions=n)
    tail = (fin.stderr or fin.stdout or "").strip()
    if fin.rc != 0:
        return Build(candidate_hash, str(ext), False, False, fin.wall_s, tail[-3000:], extensions=n)
    note = next((ln for ln in tail.splitlines() if ln.startswith("kp-build: ")), "")
    rec = Build(candidate_hash, str(ext), True, False, fin.wall_s, note.removeprefix("kp-build: "), extensions=n)
    tmp = ext / (MARKER + ".tmp")
    tmp.write_text(json.dumps(rec.to_dict()))
    os.replace(tmp, ext / MARKER)
    return rec


def private_view(candidate_hash: str, into: Path, cache_dir: str | Path | None = None) -> tuple[Path, Path, float]:
    """(shared folder, private copy, seconds the copy took): the copy is what a worker may write."""
    from kernelpro.harness.worker import extension_dir

    shared = extension_dir(candidate_hash, cache_dir)
    t0 = time.monotonic()
    mine = into / "ext"
    shutil.copytree(shared, mine, symlinks=True, ignore=shutil.ignore_patterns("lock", MARKER + ".tmp"))
    return shared, mine, time.monotonic() - t0


def _child(task_path: str, candidate_path: str) -> int:
    import torch

    from kernelpro.suites.task import import_module_from

    mod = import_module_from(Path(candidate_path), "kp_build_candidate")
    build = getattr(mod, "_build", None)
    params = getattr(mod, "PARAMS", None)
    if callable(build) and isinstance(params, dict):
        build(params)
    if not hasattr(mod, "ModelNew"):
        print("kp-build: no ModelNew (module-level builds only)", file=sys.stderr)
        return 0
    try:
        task = import_module_from(Path(task_path), "kp_build_task")
        init = list(task.get_init_inputs())
        with torch.device("meta"):
            mod.ModelNew(*init)
    except Exception as e:  # noqa: BLE001 - building is the point; a model that needs real tensors is fine
        if "Error building extension" in str(e) or "ninja" in str(e).lower():
            raise
        print(f"kp-build: ModelNew not constructed here ({type(e).__name__}: {str(e)[:160]}); "
              "builds made in its __init__ happen in the worker", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m kernelpro.harness.build TASK CANDIDATE", file=sys.stderr)
        sys.exit(2)
    sys.exit(_child(sys.argv[1], sys.argv[2]))
