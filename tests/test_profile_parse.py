"""Parsing Nsight Compute output: the raw CSV page, the recorded JSON, ptxas -v, executed opcodes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kernelpro.errors import KernelProError
from kernelpro.profile.collect import KernelProfile, Target, load_profiles, ncu_command, parse_raw_csv
from kernelpro.profile.executed import evidence_payload, executed_ok, feature_evidence, opcode_counts
from kernelpro.profile.tools.spills import parse_ptxas_verbose

DATA = Path(__file__).parent / "data" / "ncu"
RECORDED = (DATA / "clean_copy.json").is_file()
needs_recording = pytest.mark.skipif(
    not RECORDED, reason="no recorded ncu data in tests/data/ncu: run docs/measurements/recipes/gpu_profile_record.sh on a GPU and unpack it")


@needs_recording
def test_recorded_csv_matches_recorded_json():
    # The two readers (CSV page and ncu_report) must agree on scalar metrics of the same launch.
    csv_profiles = parse_raw_csv((DATA / "uncoalesced.csv").read_text())
    json_profiles = load_profiles(DATA / "uncoalesced.json")
    assert len(csv_profiles) == len(json_profiles) == 1
    c, j = csv_profiles[0], json_profiles[0]
    assert "uncoalesced_gather" in c.name
    assert c.block == (256, 1, 1) and c.grid[0] == (1 << 26) // 256
    for m in ("dram__bytes_read.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "launch__registers_per_thread"):
        assert c.value(m) == pytest.approx(j.value(m), rel=1e-6), m
    assert c.duration_ns and c.duration_ns == pytest.approx(j.duration_ns, rel=1e-6)


def test_csv_value_with_parenthesised_second_figure():
    # Seen in ncu 2025.3.1's raw CSV on the H200: launch__registers_per_thread = "16 (16)".
    from kernelpro.profile.collect import _number

    assert _number("16 (16)") == 16 and _number("1,024 (2,048)") == 1024 and _number("(none)") == "(none)"


def test_csv_units_and_thousands_separators():
    text = ('==PROF== Connected\n"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__bytes_read.sum"\n'
            '"","","","","","","","","","","","usecond","byte"\n'
            '"3","1","a","h","k(float*)","1","7","(128, 1, 1)","(4, 2, 1)","0","9.0","12.5","1,048,576"\n')
    (p,) = parse_raw_csv(text)
    assert p.launch == 3 and p.grid == (4, 2, 1) and p.block == (128, 1, 1)
    assert p.duration_ns == pytest.approx(12500) and p.value("dram__bytes_read.sum") == 1048576


def test_csv_without_header_gives_nothing():
    assert parse_raw_csv("==ERROR== no kernels were profiled\n") == []


def test_profile_round_trip():
    p = KernelProfile("k", 1, (1, 2, 3), (32, 1, 1), 10.0, {"a__b.sum": (5, "byte")}, {"sass__x": {"FFMA": 2.0}})
    assert KernelProfile.from_dict(json.loads(json.dumps(p.to_dict()))) == p


@needs_recording
def test_executed_opcodes_on_recorded_wgmma_run():
    profiles = load_profiles(DATA / "wgmma_bulk_opcodes.json")
    ops = opcode_counts(profiles[0])
    assert ops.get("HGMMA", 0) > 0 and ops.get("UBLKCP", 0) > 0 and ops.get("SYNCS", 0) > 0
    assert ops.get("UTMALDG", 0) == 0
    ev = feature_evidence(profiles, ("wgmma", "bulk_copy", "mbarrier", "tma"))
    assert ev["wgmma"].ok and ev["bulk_copy"].ok and ev["mbarrier"].ok and not ev["tma"].ok
    assert executed_ok(profiles, ("wgmma",)) and not executed_ok(profiles, ("wgmma", "tma"))
    assert executed_ok(profiles, (), "sm_90a")            # HGMMA is a Hopper headline family
    assert not executed_ok(profiles, (), "sm_100a")       # no UTC*/LDTM/STTM on this kernel


def test_a_decoy_launch_does_not_carry_the_feature():
    """One tiny launch that runs HGMMA beside the kernel doing the work (no HGMMA) is not evidence."""
    work = KernelProfile("naive_gemm", 1, duration_ns=990_000.0, instances={"sass__inst_executed_per_opcode": {"FFMA": 1e9}})
    decoy = KernelProfile("decoy", 2, duration_ns=2_000.0, instances={"sass__inst_executed_per_opcode": {"HGMMA": 4.0}})
    assert not executed_ok([work, decoy], ("wgmma",))
    assert not executed_ok([work, decoy], ())
    assert evidence_payload([work, decoy], ("wgmma",), "sm_90a")["features"]["wgmma"]["in_dominant"] == []
    # a real two-kernel pipeline: the MMA kernel is 45% of the time, inside the 80% that does the work
    prod = KernelProfile("producer", 3, duration_ns=550_000.0, instances={"sass__inst_executed_per_opcode": {"LDG": 1e6}})
    mma = KernelProfile("mma", 4, duration_ns=450_000.0, instances={"sass__inst_executed_per_opcode": {"HGMMA": 1e6}})
    assert executed_ok([prod, mma, decoy], ("wgmma",))



def test_a_dominant_kernel_the_worker_never_launched_fails_the_executed_leg():
    """A candidate that tells the ncu pass from the worker can launch a large wgmma decoy only under ncu:
    dominant there, absent from the kernels the worker's timed calls launched."""
    from kernelpro.profile.executed import kernel_base, unseen_dominant

    real = KernelProfile("void naive_gemm<128, 64>(float const*, float*)", 1, duration_ns=400_000.0,
                         instances={"sass__inst_executed_per_opcode": {"FFMA": 1e9}})
    decoy = KernelProfile("wgmma_decoy", 2, duration_ns=600_000.0,
                          instances={"sass__inst_executed_per_opcode": {"HGMMA": 1e8}})
    worker = ["void naive_gemm<128,64>(float const*, float*)", "at::native::fill_kernel"]
    assert executed_ok([real, decoy], ("wgmma",))                      # by opcodes alone it would pass
    ev = evidence_payload([real, decoy], ("wgmma",), "sm_90a", worker_kernels=worker)
    assert ev["executed_ok"] is False and ev["unseen_by_worker"] == ["wgmma_decoy"]
    # the same kernels seen by the worker: the leg passes, spelled either way
    honest = evidence_payload([real, decoy], ("wgmma",), "sm_90a", worker_kernels=[*worker, "ns::wgmma_decoy()"])
    assert honest["executed_ok"] is True and honest["unseen_by_worker"] == []
    # no list, or one that may have been cut: nothing judged on partial evidence
    assert unseen_dominant([real, decoy], None) is None
    assert unseen_dominant([real, decoy], [f"k{i}" for i in range(20)]) is None
    assert kernel_base("void cutlass::Kernel<cutlass::gemm::Sm90<(int)3>>(Params)") == "Kernel"
    assert kernel_base("_Z10gemm_tilesPfS_") == "gemm_tiles"

def test_executed_evidence_is_false_without_opcode_data():
    p = KernelProfile("k", metrics={"gpu__time_duration.sum": (1.0, "nsecond")})
    assert not executed_ok([p], ("wgmma",))
    assert evidence_payload([p], ("wgmma",), "sm_90a")["executed_ok"] is False


@needs_recording
def test_ffma_plant_executes_no_tensor_opcodes():
    (p,) = load_profiles(DATA / "ffma_matmul.json")
    ops = opcode_counts(p)
    assert ops["FFMA"] > 1e6 and not any(op.startswith(("HMMA", "HGMMA")) for op in ops)


def test_unknown_feature_is_an_error():
    with pytest.raises(KernelProError, match="unknown feature 'warp_magic'"):
        feature_evidence([], ("warp_magic",))


def test_executed_families_come_from_the_catalog_and_never_match_a_bare_prefix():
    from kernelpro.profile.executed import family_count, sass_families

    assert sass_families("wgmma") == ("BGMMA", "HGMMA", "IGMMA", "QGMMA")
    assert sass_families("tmem", "sm_100a") == ("LDTM", "STTM", "UTCATOMSWS")
    assert "PRMT" not in sass_families("dsmem"), "operand-refined evidence cannot come from opcode counts"
    # LDSM (ldmatrix) must not count as STAS/REDAS-style dsmem, nor HMMA as HGMMA.
    assert family_count({"LDSM": 10.0, "HMMA": 5.0}, sass_families("dsmem")) == 0
    assert family_count({"HMMA": 5.0}, sass_families("wgmma")) == 0
    assert family_count({"UCGABAR_ARV": 2.0, "UCGABAR": 1.0}, sass_families("cluster")) == 3


@needs_recording
def test_ptxas_verbose():
    log = (DATA / "spills.json").read_text()
    res = json.loads(log)["ptxas"]
    (k,) = res.values()
    assert k["spill_stores"] > 0 and k["registers"] <= 32
    text = ("ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'\nptxas info    : Function properties for _Z1kPf\n"
            "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\nptxas info    : Used 40 registers, used 0 barriers\n")
    assert parse_ptxas_verbose(text) == {"_Z1kPf": {"stack_bytes": 8, "spill_stores": 4, "spill_loads": 4, "registers": 40}}


def test_ncu_command_targets_candidate_kernels_only():
    cmd = ncu_command(Path("ncu"), Target(["./a.out"], kernel_regex="gemm", launch_skip=1, launch_count=2, from_start=False),
                      Path("r.ncu-rep"), ["gpu__time_duration.sum"], ["SpeedOfLight"])
    s = " ".join(cmd)
    assert "--clock-control none" in s and "--kernel-name regex:gemm" in s and "--launch-skip 1" in s
    assert "--profile-from-start off" in s and cmd[-2:] == ["--", "./a.out"]


def test_profiled_candidate_loads_the_workers_build(tmp_path, monkeypatch):
    """The ncu driver must see the harness worker's compile cache for the same source; a fresh
    TORCH_EXTENSIONS_DIR made every executed-instruction pass rebuild the extension (~40 s on the H200)."""
    from kernelpro.harness.worker import extension_dir
    from kernelpro.profile.collect import candidate_target
    from kernelpro.results.store import source_hash

    monkeypatch.setenv("KERNELPRO_CACHE", str(tmp_path / "cache"))
    cand = tmp_path / "cand.py"
    cand.write_text("class ModelNew: pass\n")
    t = candidate_target(cand, tmp_path / "task.py", {"N": 1})
    assert t.env["TORCH_EXTENSIONS_DIR"] == str(extension_dir(source_hash(cand.read_text())))
    assert t.env["TORCH_EXTENSIONS_DIR"].startswith(str(tmp_path / "cache"))


def test_ncu_pass_cannot_poison_the_shared_build(tmp_path, monkeypatch):
    """The ncu pass ran the candidate with the shared build folder writable, so a candidate profiled once
    could rewrite the build every later worker, compare and re-run loads. It must see a private copy at the
    shared path. A stand-in for ncu (a script that runs what the real one would: code inside the sandbox)
    reads the build and tries to overwrite it."""
    from kernelpro import isolation
    from kernelpro.harness.worker import extension_dir
    from kernelpro.profile.collect import run_ncu

    if not isolation.can_bind():
        pytest.skip("the isolation mode here cannot bind folders (install bubblewrap)")
    monkeypatch.setenv("KERNELPRO_CACHE", str(tmp_path / "cache"))
    shared = extension_dir("abc123")
    shared.mkdir(parents=True, exist_ok=True)
    (shared / "ext.so").write_text("built")
    fake = tmp_path / "ncu"
    fake.write_text(f"""#!{sys.executable}
import os, sys
if "--import" in sys.argv:
    sys.exit(0)
export = sys.argv[sys.argv.index("--export") + 1]
ext = os.environ["TORCH_EXTENSIONS_DIR"]
seen = open(os.path.join(ext, "ext.so")).read()
open(os.path.join(ext, "ext.so"), "w").write("poisoned")
open(export, "w").write(seen)
""")
    fake.chmod(0o755)
    target = Target(argv=["true"], env={"TORCH_EXTENSIONS_DIR": str(shared)}, build_hash="abc123")
    export = tmp_path / "out" / "p.ncu-rep"
    export.parent.mkdir()
    with pytest.raises(KernelProError, match="read back its report"):
        run_ncu(target, export, metrics=[], sections=["x"], timeout=60, ncu=fake)
    assert export.read_text() == "built"                 # the profiled process loaded the shared build
    assert (shared / "ext.so").read_text() == "built"    # and could not change it
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("kp-ncu-view-*/ext/ext.so"))


def test_system_pass_sees_the_build_and_absolute_paths(tmp_path, monkeypatch):
    """The PyTorch-profiler pass ran the candidate in a temp folder with a relative path as given (file not
    found) and without the worker's compile cache, so a load_inline candidate tried to build into a
    read-only ~/.cache under the sandbox. It must get both, as the ncu pass does."""
    from kernelpro import sandbox
    from kernelpro.harness.worker import extension_dir
    from kernelpro.profile import system
    from kernelpro.results.store import source_hash

    monkeypatch.setenv("KERNELPRO_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    Path("cand.py").write_text("class ModelNew: pass\n")
    Path("task.py").write_text("")
    seen = {}

    def fake_run(cmd, **kw):
        seen.update(cmd=cmd, **kw)
        out = system.summarize([], 0, 1, 1.0).to_dict()
        return sandbox.Finished(rc=0, timed_out=False, wall_s=0.1, stdout=json.dumps(out) + "\n")

    monkeypatch.setattr(sandbox, "run", fake_run)
    system.system_view(Path("cand.py"), Path("task.py"), {"N": 1}, calls=1)
    assert seen["cmd"][3] == str(tmp_path / "cand.py") and seen["cmd"][4] == str(tmp_path / "task.py")
    ext = extension_dir(source_hash("class ModelNew: pass\n"))
    assert seen["env"]["TORCH_EXTENSIONS_DIR"] == str(ext)
    visible = [str(p) for p in seen["writable"]] + [str(dst) for _src, dst in seen["binds"]]
    assert str(ext) in visible or any(str(ext).startswith(v) for v in visible)
