"""Run Nsight Compute on a candidate (or a corpus binary) and read back one KernelProfile per launch.

ncu always writes a report file first (`--export`); the numbers are then read from it twice over: as
CSV (`ncu --import R --csv --page raw --print-units base`) and, where NVIDIA's `ncu_report` module can be
loaded from the Nsight Compute folder's `extras/python`, through that module, which is the only reader
that gives instanced metrics (`sass__inst_executed_per_opcode`: opcode -> count) reliably. Both readers
produce the same `KernelProfile` records; the JSON form of those records is what `tests/data/ncu/` holds.

Candidates are untrusted: the profiled process is a child with a timeout, and the only thing read back
is ncu's output. Python candidates are driven by `python -m kernelpro.profile.collect drive`, which
warms the model up, then calls it between cudaProfilerStart/Stop so that `--profile-from-start off`
profiles the candidate's kernels and none of the harness's (input creation, warm-up, copies).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelpro import sandbox
from kernelpro.errors import KernelProError

# Sections that hold what the tools read (SOL, memory tables, occupancy, launch stats, warp states,
# instruction mix). Explicit metrics below fill the gaps; unknown names are dropped and retried.
SECTIONS = (
    "SpeedOfLight", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables", "ComputeWorkloadAnalysis",
    "Occupancy", "LaunchStats", "WarpStateStats", "SchedulerStats", "InstructionStats",
)
METRICS = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum", "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_bytes.sum", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",
    "smsp__sass_inst_executed_op_global_ld.sum", "smsp__sass_inst_executed_op_global_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum", "sm__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "sm__sass_thread_inst_executed_op_hadd_pred_on.sum", "sm__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum", "sm__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "sm__inst_executed_pipe_tensor_op_hmma.sum", "sm__inst_executed_pipe_tensor_op_gmma.sum",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sass__inst_executed_per_opcode",
    "launch__waves_per_multiprocessor", "launch__registers_per_thread", "launch__grid_size",
    "launch__block_size", "launch__sm_count",
)
ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC")


@dataclass
class KernelProfile:
    """One profiled kernel launch: ncu's metrics as name -> (value, unit), instanced ones separately."""

    name: str
    launch: int = 0                                   # ncu's launch ID within the profiled process
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    duration_ns: float | None = None
    metrics: dict[str, tuple[Any, str]] = field(default_factory=dict)
    instances: dict[str, dict[str, float]] = field(default_factory=dict)  # metric -> {correlation id: value}

    def value(self, name: str, default: float | None = None) -> float | None:
        v = self.metrics.get(name)
        if v is None or not isinstance(v[0], int | float):
            return default
        return float(v[0])

    def sum(self, *names: str) -> float | None:
        vals = [self.value(n) for n in names]
        return sum(v for v in vals if v is not None) if any(v is not None for v in vals) else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["metrics"] = {k: [v, u] for k, (v, u) in self.metrics.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelProfile:
        return cls(name=d["name"], launch=int(d.get("launch", 0)), grid=tuple(d.get("grid", (0, 0, 0))),
                   block=tuple(d.get("block", (0, 0, 0))), duration_ns=d.get("duration_ns"),
                   metrics={k: (v[0], v[1]) for k, v in d.get("metrics", {}).items()},
                   instances={k: dict(v) for k, v in d.get("instances", {}).items()})


def save_profiles(profiles: list[KernelProfile], path: str | Path, extra: dict[str, Any] | None = None) -> None:
    Path(path).write_text(json.dumps({"profiles": [p.to_dict() for p in profiles], **(extra or {})}, indent=1))


def load_profiles(path: str | Path) -> list[KernelProfile]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise KernelProError(f"{path}: not a KernelPro profile JSON ({e})") from None
    return [KernelProfile.from_dict(d) for d in data["profiles"]]


# -- CSV -------------------------------------------------------------------------------------------
_NUM = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?([eE][-+]?\d+)?$")


def _number(text: str) -> float | int | str:
    t = text.strip()
    if not t or t in ("n/a", "N/A"):
        return t
    # ncu 2025.3 prints some launch metrics with a second figure in parentheses, e.g.
    # launch__registers_per_thread "16 (16)": the first is the metric's value.
    m = re.fullmatch(r"(\S+)\s+\([^()]*\)", t)
    if m:
        t = m.group(1)
    if _NUM.match(t) and any(c.isdigit() for c in t):
        t = t.replace(",", "")
        f = float(t)
        return int(f) if f.is_integer() and "." not in t and "e" not in t.lower() else f
    return t


def _dims(text: str) -> tuple[int, int, int]:
    nums = [int(x) for x in re.findall(r"\d+", text)]
    return tuple((nums + [1, 1, 1])[:3]) if nums else (0, 0, 0)  # type: ignore[return-value]


def _instances(text: str) -> dict[str, float] | None:
    """An instanced cell as ncu prints it, e.g. 'FFMA: 123; HGMMA: 45' or '(FFMA) 123;...'; None if scalar."""
    pairs = re.findall(r"([A-Za-z_][\w.]*)\)?\s*[:=)]\s*([-+]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?)", text)
    if len(pairs) < 1 or (";" not in text and ":" not in text):
        return None
    return {k: float(v.replace(",", "")) for k, v in pairs}


def parse_raw_csv(text: str) -> list[KernelProfile]:
    """Parse `ncu --csv --page raw` output (header row, unit row, one row per launch)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    # The second row holds units, with the ID columns blank; older exports may omit it.
    if len(rows) > 1 and rows[1] and not rows[1][0].strip():
        units, data = rows[1], rows[2:]
    else:
        units, data = [""] * len(header), rows[1:]
    out = []
    for row in data:
        if len(row) < len(header) or not row[0].strip().isdigit():
            continue
        cells = dict(zip(header, row, strict=False))
        metrics: dict[str, tuple[Any, str]] = {}
        instances: dict[str, dict[str, float]] = {}
        for col, unit, cell in zip(header, units, row, strict=False):
            if col in ID_COLUMNS or "__" not in col:
                continue
            inst = _instances(cell)
            if inst is not None:
                instances[col] = inst
                metrics[col] = (sum(inst.values()), unit)
            else:
                metrics[col] = (_number(cell), unit)
        p = KernelProfile(name=cells.get("Kernel Name", "?"), launch=int(cells["ID"]),
                          grid=_dims(cells.get("Grid Size", "")), block=_dims(cells.get("Block Size", "")),
                          metrics=metrics, instances=instances)
        p.duration_ns = _duration_ns(p)
        out.append(p)
    return out


def _duration_ns(p: KernelProfile) -> float | None:
    v = p.metrics.get("gpu__time_duration.sum")
    if v is None or not isinstance(v[0], int | float):
        return None
    scale = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
    return float(v[0]) * scale.get(v[1], 1)


# -- ncu_report (instanced metrics) ----------------------------------------------------------------
def ncu_python_dirs(ncu: Path) -> list[Path]:
    """Candidate `extras/python` folders of the Nsight Compute install that owns `ncu`."""
    real = ncu.resolve()
    roots = [real.parent, real.parent.parent]
    roots += sorted(Path("/opt/nvidia").glob("nsight-compute/*"), reverse=True)
    roots += sorted(real.parent.parent.glob("nsight-compute*"), reverse=True)
    return [r / "extras" / "python" for r in roots if (r / "extras" / "python" / "ncu_report.py").is_file()]


def report_to_json(rep: Path, out: Path) -> None:
    """(Runs in a child with ncu_report importable.) Every action of the report as KernelProfile dicts."""
    import ncu_report  # type: ignore[import-not-found]

    report = ncu_report.load_report(str(rep))
    profiles = []
    launch = 0
    for r in range(report.num_ranges()):
        rng = report.range_by_idx(r)
        for a in range(rng.num_actions()):
            act = rng.action_by_idx(a)
            metrics: dict[str, Any] = {}
            instances: dict[str, dict[str, float]] = {}
            for name in act.metric_names():
                m = act.metric_by_name(name)
                try:
                    val = m.value()
                except Exception:  # noqa: BLE001 - some metric types have no scalar value
                    val = None
                unit = ""
                try:
                    unit = m.unit() or ""
                except Exception:  # noqa: BLE001
                    pass
                if isinstance(val, bool):
                    val = int(val)
                if not isinstance(val, int | float | str):
                    val = None if val is None else str(val)
                try:
                    n = m.num_instances()
                except Exception:  # noqa: BLE001
                    n = 0
                if n and n > 0:
                    try:
                        ids = m.correlation_ids()
                        inst = {str(ids.value(i)): float(m.value(i)) for i in range(n)}
                        instances[name] = inst
                        if val is None:
                            val = sum(inst.values())
                    except Exception:  # noqa: BLE001 - not every instanced metric has correlation ids
                        pass
                metrics[name] = [val, unit]

            def dim(prefix: str, metrics: dict[str, Any] = metrics) -> list[int]:
                return [int(metrics.get(f"{prefix}_{c}", [1])[0] or 1) for c in "xyz"]

            p = {"name": act.name(), "launch": launch, "grid": dim("launch__grid_dim"),
                 "block": dim("launch__block_dim"), "metrics": metrics, "instances": instances}
            launch += 1
            profiles.append(p)
    out.write_text(json.dumps({"profiles": profiles}))


def read_report(ncu: Path, rep: Path, timeout: float = 300) -> tuple[list[KernelProfile], str, str]:
    """(profiles, csv text, which reader) for an ncu report file. Prefers ncu_report; CSV otherwise."""
    try:
        csv_text = _import_csv(ncu, rep, timeout)
    except KernelProError:
        csv_text = ""  # ncu_report below may still read the report
    from_csv = parse_raw_csv(csv_text)
    for d in ncu_python_dirs(ncu):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rep.json"
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(d), str(Path(__file__).parents[2])])}
            r = subprocess.run([sys.executable, "-m", "kernelpro.profile.collect", "rep2json", str(rep), str(out)],
                               capture_output=True, text=True, timeout=timeout, env=env)
            if r.returncode == 0 and out.is_file():
                profiles = [KernelProfile.from_dict(p) for p in json.loads(out.read_text())["profiles"]]
                for i, p in enumerate(profiles):
                    p.duration_ns = _duration_ns(p)
                    if i < len(from_csv):  # CSV has ncu's launch IDs and the exact grid/block strings
                        p.launch, p.grid, p.block = from_csv[i].launch, from_csv[i].grid, from_csv[i].block
                        p.name = from_csv[i].name if p.name in ("", "?") else p.name
                return profiles, csv_text, "ncu_report"
    if not csv_text:
        raise KernelProError(f"ncu could not read back its report {rep} (neither --import --csv nor ncu_report)")
    return from_csv, csv_text, "csv"


def _import_csv(ncu: Path, rep: Path, timeout: float) -> str:
    base = [str(ncu), "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"]
    for extra in (["--print-metric-instances", "values"], []):  # older ncu lacks the option
        r = subprocess.run(base + extra, capture_output=True, text=True, timeout=timeout)
        if r.returncode == 0 and '"ID"' in r.stdout:
            return r.stdout
    raise KernelProError(f"ncu could not read back its report {rep}: {r.stderr.strip()[-300:]}")


# -- running ncu -----------------------------------------------------------------------------------
@dataclass
class Target:
    """What ncu launches and which of its kernels count."""

    argv: list[str]
    kernel_regex: str | None = None      # ncu --kernel-name regex:...
    launch_skip: int = 0
    launch_count: int | None = None
    from_start: bool = True              # False: profile only between cudaProfilerStart/Stop
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    writable: list[str] = field(default_factory=list)   # folders the profiled process may write
    # A candidate's shared build, loaded through a private copy bound at its path (as the worker does), so
    # the candidate cannot poison the build the worker, compare and re-runs load.
    build_hash: str | None = None


def ncu_command(ncu: Path, target: Target, export: Path, metrics: list[str], sections: list[str]) -> list[str]:
    cmd = [str(ncu), "--clock-control", "none", "--target-processes", "all", "--export", str(export),
           "--force-overwrite"]
    for s in sections:
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    if target.kernel_regex:
        cmd += ["--kernel-name", f"regex:{target.kernel_regex}"]
    if target.launch_skip:
        cmd += ["--launch-skip", str(target.launch_skip)]
    if target.launch_count:
        cmd += ["--launch-count", str(target.launch_count)]
    if not target.from_start:
        cmd += ["--profile-from-start", "off"]
    return cmd + ["--"] + target.argv


_BAD_METRIC = re.compile(r"(?:metric|Metric)[^\n]*?['\"`]?([a-z0-9_]+__[\w.]+)")
_BAD_SECTION = re.compile(r"[Ss]ection[^\n]*?['\"`]([\w]+)['\"`]")


def run_ncu(target: Target, export: Path, metrics: list[str] | tuple[str, ...] = METRICS,
            sections: list[str] | tuple[str, ...] = SECTIONS, timeout: float = 600,
            ncu: Path | None = None) -> tuple[list[KernelProfile], dict[str, Any]]:
    """Profile `target`; returns (profiles, info). Metric or section names this ncu does not know are
    dropped (and listed in info['dropped']) rather than failing the whole profile."""
    from kernelpro.toolchain import require_tool

    ncu = ncu or require_tool("ncu")
    writable, binds = _build_access(target, export.parent)
    try:
        return _run_ncu(ncu, target, export, list(metrics), list(sections), timeout, writable, binds)
    finally:
        for src, _dst in binds:         # the private copy of the build: this pass's alone
            shutil.rmtree(src.parent, ignore_errors=True)


def _run_ncu(ncu: Path, target: Target, export: Path, metrics: list[str], sections: list[str], timeout: float,
             writable: list[Path], binds: list[tuple[Path, Path]]) -> tuple[list[KernelProfile], dict[str, Any]]:
    dropped: list[str] = []
    log = ""
    for _ in range(8):
        cmd = ncu_command(ncu, target, export, metrics, sections)
        r = sandbox.run(cmd, timeout_s=timeout, env={**os.environ, **target.env}, cwd=target.cwd,
                        writable=writable, binds=binds, counters=True)
        if r.timed_out:
            raise KernelProError(f"ncu did not finish within {timeout:.0f} s; the candidate may hang "
                                 "(raise --timeout, or lower --calls)")
        log = r.stdout[-4000:] + r.stderr[-4000:]
        if export.is_file() and "==ERROR==" not in log.replace("==ERROR== The application returned an error", ""):
            break
        bad = [m for m in _BAD_METRIC.findall(log) if m in metrics]
        bad_s = [s for s in _BAD_SECTION.findall(log) if s in sections]
        if not bad and not bad_s:
            break
        dropped += bad + bad_s
        metrics = [m for m in metrics if m not in bad]
        sections = [s for s in sections if s not in bad_s]
    if not export.is_file() and metrics and sections:
        # Last resort: the sections alone (they carry most of what the tools read).
        dropped.append("ALL explicit metrics")
        cmd = ncu_command(ncu, target, export, [], sections)
        r = sandbox.run(cmd, timeout_s=timeout, env={**os.environ, **target.env}, cwd=target.cwd,
                        writable=writable, binds=binds, counters=True)
        log = r.stdout[-4000:] + r.stderr[-4000:]
    if not export.is_file():
        tail = " | ".join(ln for ln in log.splitlines() if "ERROR" in ln or "error" in ln)[-400:]
        raise KernelProError(f"ncu produced no report ({tail or 'no kernel matched'}); check the candidate runs "
                             "on its own, and that ncu can read counters on this machine")
    profiles, csv_text, reader = read_report(ncu, export, timeout)
    if not profiles:
        raise KernelProError("ncu profiled no kernel launch: the candidate launched no CUDA kernel inside "
                             "the profiled calls (does ModelNew run on the GPU?)")
    return profiles, {"cmd": cmd, "dropped": dropped, "reader": reader, "csv": csv_text, "log": log[-2000:]}


def _build_access(target: Target, scratch: Path) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """(writable folders, binds) for a profiled target: its build is seen through a private copy where the
    isolation layer can bind one; without binds nothing outside the process is write-protected anyway, and
    it writes the shared folder as it always could."""
    from kernelpro import isolation

    writable = [scratch, *map(Path, target.writable)]
    if not target.build_hash:
        return writable, []
    from kernelpro.harness.build import private_view
    from kernelpro.harness.worker import extension_dir

    shared = extension_dir(target.build_hash)
    if not (isolation.can_bind() and shared.is_dir()):
        shared.mkdir(parents=True, exist_ok=True)
        return [*writable, shared], []
    view = Path(tempfile.mkdtemp(prefix="kp-ncu-view-"))
    shared, mine, _ = private_view(target.build_hash, view)
    return [*writable, mine], [(mine, shared)]


# -- targets ---------------------------------------------------------------------------------------
def candidate_target(candidate: Path, task_path: Path, size: dict[str, Any], calls: int = 3,
                     max_kernels: int = 64) -> Target:
    """A Python candidate: the driver below, with profiling limited to the calls of ModelNew."""
    candidate, task_path = Path(candidate).resolve(), Path(task_path).resolve()  # the driver runs elsewhere
    argv = [sys.executable, "-m", "kernelpro.profile.collect", "drive", str(candidate), str(task_path),
            json.dumps(size), str(calls)]
    root = str(Path(__file__).parents[2])
    env = {"PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    try:
        from kernelpro.harness.worker import extension_dir
        from kernelpro.results.store import source_hash

        # The harness worker's compile cache for this exact source: no rebuild under the profiler.
        digest = source_hash(Path(candidate).read_text())
        ext = extension_dir(digest)
    except OSError:
        return Target(argv=argv, from_start=False, launch_count=max_kernels, env=env)
    env["TORCH_EXTENSIONS_DIR"] = str(ext)
    env["TRITON_CACHE_DIR"] = str(ext / "triton")
    return Target(argv=argv, from_start=False, launch_count=max_kernels, env=env, build_hash=digest)


def build_cu(source: Path, out_dir: Path, arch: str = "sm_90a") -> tuple[Path, str]:
    """Compile a standalone .cu driver (with `// nvcc-flags: ...` honoured); (executable, ptxas -v log)."""
    from kernelpro.toolchain import require_tool

    nvcc = require_tool("nvcc")
    flags = []
    for line in source.read_text().splitlines()[:20]:
        m = re.search(r"nvcc-flags:\s*(.*)", line)
        if m:
            flags += m.group(1).split()
    num = arch.removeprefix("sm_")
    exe = out_dir / source.stem
    cmd = [str(nvcc), "-O3", "-lineinfo", "-gencode", f"arch=compute_{num},code=sm_{num}", *flags,
           "-Xptxas", "-v", "-o", str(exe), str(source)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise KernelProError(f"{source}: nvcc failed: {r.stderr.strip().splitlines()[-1] if r.stderr else '?'}")
    return exe, r.stderr


def _drive(candidate: str, task_path: str, size_json: str, calls: str) -> None:
    """Child process: build the task's inputs and ModelNew, warm up, then profile `calls` calls."""
    import torch

    from kernelpro.suites.task import import_module_from, instantiate, load_task

    task = load_task(task_path)
    size = json.loads(size_json)
    mod, _ref, inputs = instantiate(task, size, device="cuda", seed=0)
    # the module name the worker gives the candidate: __name__ does not tell this pass from the evaluation
    cand = import_module_from(Path(candidate), f"kp_candidate_{os.getpid()}")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = cand.ModelNew(*mod.get_init_inputs()).cuda()
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for _ in range(int(calls)):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    if sys.argv[1] == "rep2json":
        report_to_json(Path(sys.argv[2]), Path(sys.argv[3]))
    elif sys.argv[1] == "drive":
        _drive(*sys.argv[2:6])
    else:
        sys.exit(f"unknown sub-command {sys.argv[1]!r}")
