"""The timing stage: candidate, baselines and rivals timed under the protocols the job names
(`timing`: interleaved and/or isolated, each after a steady-state warm-up and with NVML telemetry), the
last timed output and a fresh-seed recheck judged, the speed-of-light floor, and energy per call."""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path
from typing import Any

import torch

from kernelpro import hardware as _hw
from kernelpro.harness import timing as _timing
from kernelpro.harness.guards import CandidateFailure, classify_exception
from kernelpro.harness.tensors import clone_tree, error_stats, flatten, poison_allocator
from kernelpro.suites.task import import_module_from

_sysrandom = random.SystemRandom()

# The speed-of-light floor uses the datasheet (kernelpro.hardware says why); cfg.ceilings overrides it.
DEFAULT_CEILINGS = {**_hw.DATASHEET.tensor_flops, "bandwidth": _hw.DATASHEET.bandwidth}


class TimingStage:
    """The Evaluator's timing stage (a mixin: the verdict bookkeeping and setup live in evaluate)."""

    def _time(self, cand_mod: Any, before: dict, policy: dict[str, Any]) -> None:
        cfg, task = self.cfg, self.task
        size = task.sizes("default")[0]
        mod = self._task_module(size)
        seed, model_seed = _sysrandom.randrange(2**31), _sysrandom.randrange(2**31)
        ref_model, cand_model = self._models(mod, cand_mod, model_seed)
        inputs = self._inputs(mod, seed)
        cin, rin = clone_tree(inputs), clone_tree(inputs)
        last: dict[str, Any] = {}

        def cand() -> None:
            with torch.no_grad():
                last["out"] = cand_model(*cin)

        fns: dict[str, Any] = {"candidate": cand}
        notes: dict[str, str] = {}
        for b in cfg.baselines:
            try:
                fn = self._baseline(b, ref_model, rin)
                fn()  # a baseline that fails must fail here, not be blamed on the candidate mid-timing
                self._sync()
                fns[b] = fn
            except Exception as e:  # noqa: BLE001 - a baseline that cannot be built is reported, not fatal
                notes[b] = f"unavailable: {type(e).__name__}: {str(e)[:120]}"
        rivals = self._rivals(mod, model_seed, inputs, ref_model, notes)
        fns.update(rivals)
        steady = _timing.DEFAULT_STEADY if cfg.steady else None
        runs: dict[str, Any] = {}
        try:
            for proto in cfg.protocols:
                runs[proto] = _timing.time_protocol(fns, self.device, proto, warmup_ms=cfg.warmup_ms,
                                                    rep_ms=cfg.rep_ms, graphs=cfg.graphs, windows=cfg.windows,
                                                    steady=steady)
        except BaseException as e:  # noqa: BLE001
            name, detail = classify_exception(e)
            raise CandidateFailure(name, f"during timing: {detail}") from None
        # The first protocol asked for is the headline (speedup, rivals); every protocol is stored.
        head = runs[cfg.protocols[0]]
        stats = head.stats
        notes.update(head.notes)
        by_proto: dict[str, Any] = {}
        for proto, run in runs.items():
            c = run.stats["candidate"].median_ms
            by_proto[proto] = {**run.to_dict(), "speedup": {k: v.median_ms / c for k, v in run.stats.items()
                                                            if k != "candidate" and k not in rivals and c > 0}}
        self.result["timing"] = {"size": size, "protocol": head.protocol, "stats": {k: v.to_dict() for k, v in stats.items()},
                                 "notes": notes, "l2_flush": self.on_gpu, "graphs": cfg.graphs,
                                 "telemetry": by_proto[head.protocol]["telemetry"],
                                 "steady": by_proto[head.protocol]["steady"]}
        self.result["protocols"] = by_proto
        cm = stats["candidate"].median_ms
        self.result["speedup"] = by_proto[head.protocol]["speedup"]
        if rivals:
            # ratio > 1: the candidate is faster than that rival in this same run
            self.result["rivals"] = {k: {"path": next(r["path"] for r in cfg.rivals if r["label"] == k),
                                         "ratio": stats[k].median_ms / cm if cm > 0 else None,
                                         "protocol": head.protocol}
                                     for k in rivals}
        self._check_identity(before, "timing")
        self._check_precision(policy, "timing")
        # the output of the last timed call must still be right (timed inputs unchanged, result correct)
        with torch.no_grad():
            ref_out = ref_model(*clone_tree(inputs))
        self._sync()
        self._check_outputs(last["out"], ref_out, cin, inputs, "last timed call")
        self._speed_of_light(size, cm)
        # re-check on inputs the candidate cannot have seen: the seed is drawn only now
        recheck_seed = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
        rin2 = self._inputs(mod, recheck_seed)
        pristine = clone_tree(rin2)
        args = clone_tree(rin2)
        with torch.no_grad():
            ref2 = ref_model(*clone_tree(rin2))
        self._sync()
        poison_allocator([t.nbytes for t in flatten(ref2) if isinstance(t, torch.Tensor)], self.device)
        out2, obs = self._run_candidate(cand_model, args, profile=True)
        self._judge_observations(obs, f"default@recheck seed={recheck_seed}")
        rec = self._check_outputs(out2, ref2, args, pristine, f"recheck after timing seed={recheck_seed}")
        rec.update({"which": "recheck", "size": size, "seed": recheck_seed, "order": "ref_first"})
        self.trials.append(rec)
        if not rec["ok"]:
            self.result["correct"] = False
        if cfg.energy and self.on_gpu:
            from kernelpro.harness.energy import measure_energy

            est = (runs.get("isolated") or head).stats
            try:
                self.result["energy"] = measure_energy(fns, {k: v.median_ms for k, v in est.items()}, self.device,
                                                       flops=self.task.work(size)[0] or None)
            except Exception as e:  # noqa: BLE001 - NVML missing or refused: say so, keep the run
                self.result["energy"] = {"error": f"{type(e).__name__}: {e}"[:200], "protocol": "isolated"}
        elif cfg.energy:
            self.result["energy"] = {"error": f"device {self.device}: no NVML energy counter", "protocol": "isolated"}

    def _rivals(self, mod: Any, model_seed: int, inputs: list[Any], ref_model: Any,
                notes: dict[str, str]) -> dict[str, Any]:
        """Load the rivals and return their timed calls. They were judged in their own runs; here each must
        load, build from its own compile cache, and match the reference at the timing size, or it is left
        out with a note (never silently timed wrong)."""
        out: dict[str, Any] = {}
        if not self.cfg.rivals:
            return out
        with torch.no_grad():
            ref_out = ref_model(*clone_tree(inputs))
        for i, r in enumerate(self.cfg.rivals):
            label = r["label"]
            prev = os.environ.get("TORCH_EXTENSIONS_DIR")
            try:
                if r.get("ext_dir"):   # lazy builds happen on the first call: keep the rival's cache for it
                    os.environ["TORCH_EXTENSIONS_DIR"] = r["ext_dir"]
                rmod = import_module_from(Path(r["path"]), f"kp_rival_{i}_{os.getpid()}")
                _, model = self._models(mod, rmod, model_seed)
                rin = clone_tree(inputs)
                with torch.no_grad():
                    got = model(*rin)
                self._sync()
            except Exception as e:  # noqa: BLE001 - a broken rival is reported, the candidate's run goes on
                notes[label] = f"rival left out: {type(e).__name__}: {str(e)[:160]}"
                continue
            finally:
                if prev is None:
                    os.environ.pop("TORCH_EXTENSIONS_DIR", None)
                else:
                    os.environ["TORCH_EXTENSIONS_DIR"] = prev
            outs, refs = flatten(got), flatten(ref_out)
            if len(outs) != len(refs) or not all(
                    isinstance(o, torch.Tensor) and o.shape == t.shape and error_stats(o, t, self.task.tolerance)["ok"]
                    for o, t in zip(outs, refs, strict=True) if isinstance(t, torch.Tensor)):
                notes[label] = "rival left out: wrong output at the timing size"
                continue

            def call(model: Any = model, rin: list[Any] = rin) -> None:
                with torch.no_grad():
                    model(*rin)
            out[label] = call
        return out

    def _baseline(self, name: str, ref_model: Any, args: list[Any]) -> Any:
        if name == "eager":
            def eager() -> None:
                with torch.no_grad():
                    ref_model(*args)
            return eager
        if name == "compile":
            compiled = torch.compile(ref_model)
            with torch.no_grad():
                compiled(*args)

            def comp() -> None:
                with torch.no_grad():
                    compiled(*args)
            return comp
        if name == "vendor":
            ctx = self._vendor_context()

            def vendor() -> None:
                with torch.no_grad(), ctx():
                    ref_model(*args)
            return vendor
        raise ValueError(f"unknown baseline {name!r} (eager, compile, vendor)")

    def _vendor_context(self) -> Any:
        b = self.task.baseline.lower()
        if not self.on_gpu:
            return contextlib.nullcontext
        if b in ("cublas", "cublaslt"):
            @contextlib.contextmanager
            def blas():
                prev = torch.backends.cuda.preferred_blas_library()
                torch.backends.cuda.preferred_blas_library(b)
                try:
                    yield
                finally:
                    torch.backends.cuda.preferred_blas_library(prev)
            return blas
        if b in ("cudnn", "flash", "efficient"):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                       "efficient": SDPBackend.EFFICIENT_ATTENTION}[b]
            return lambda: sdpa_kernel(backend)
        return contextlib.nullcontext

    def _speed_of_light(self, size: dict[str, Any], cand_ms: float) -> None:
        flops, nbytes = self.task.work(size)
        ceil = {**DEFAULT_CEILINGS, **self.cfg.ceilings}
        peak = ceil.get(self.task.dtype, ceil["bf16"])
        t_flops = flops / peak if flops else 0.0
        t_bytes = nbytes / ceil["bandwidth"] if nbytes else 0.0
        floor_ms = max(t_flops, t_bytes) * 1e3
        secs = cand_ms / 1e3
        self.result["work"] = {
            "flops": flops, "bytes": nbytes, "floor_ms": floor_ms, "peak_flops": peak, "bandwidth": ceil["bandwidth"],
            "tflops": flops / secs / 1e12 if flops and secs > 0 else None,
            "gbps": nbytes / secs / 1e9 if nbytes and secs > 0 else None,
            "frac_of_floor": floor_ms / cand_ms if cand_ms > 0 and floor_ms > 0 else None,
        }
        if floor_ms > 0 and cand_ms < floor_ms:
            self.fail("impossible_speed", f"median {cand_ms * 1e3:.2f} us is below the speed-of-light floor "
                                          f"{floor_ms * 1e3:.2f} us (max(FLOPs/peak, bytes/bandwidth))")
        elif floor_ms > 0:
            self.passed("impossible_speed")
