"""The feature catalog: which PTX and SASS instructions prove that a kernel uses an architecture feature.

The catalog is data (`kernelpro/static/features.toml`); this module loads it and matches instruction
opcodes against it. Patterns match dotted opcodes component by component, so "cp.async" never matches
a longer component such as "cp.asyncx", and a refinement (has/any/lacks/operand) narrows a prefix.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kernelpro.errors import KernelProError

CATALOG_PATH = Path(__file__).with_name("features.toml")


@dataclass(frozen=True)
class Pattern:
    """One piece of evidence: a dotted opcode prefix, optionally refined."""

    prefix: tuple[str, ...]
    has: frozenset[str] = frozenset()
    any: frozenset[str] = frozenset()
    lacks: frozenset[str] = frozenset()
    operand: re.Pattern[str] | None = None

    def matches(self, opcode: str, operands: Iterable[str] = ()) -> bool:
        parts = opcode.split(".")
        if tuple(parts[: len(self.prefix)]) != self.prefix:
            return False
        mods = set(parts[1:])
        if not self.has <= mods or (self.any and not self.any & mods) or self.lacks & mods:
            return False
        if self.operand is not None:
            return any(self.operand.search(op) for op in operands)
        return True

    def __str__(self) -> str:
        s = ".".join(self.prefix)
        extras = [f"has {sorted(self.has)}" if self.has else "", f"any {sorted(self.any)}" if self.any else "",
                  f"lacks {sorted(self.lacks)}" if self.lacks else "",
                  f"operand /{self.operand.pattern}/" if self.operand else ""]
        extras = [e for e in extras if e]
        return s + (f" ({', '.join(extras)})" if extras else "")


@dataclass(frozen=True)
class Feature:
    name: str
    arch: str
    description: str
    ptx: tuple[Pattern, ...]
    sass: tuple[Pattern, ...]

    def ptx_match(self, opcode: str, operands: Iterable[str] = ()) -> bool:
        ops = list(operands)
        return any(p.matches(opcode, ops) for p in self.ptx)

    def sass_match(self, opcode: str, operands: Iterable[str] = ()) -> bool:
        ops = list(operands)
        return any(p.matches(opcode, ops) for p in self.sass)


@dataclass
class Catalog:
    by_arch: dict[str, dict[str, Feature]] = field(default_factory=dict)

    @property
    def archs(self) -> list[str]:
        return sorted(self.by_arch)

    def features(self, arch: str) -> dict[str, Feature]:
        if arch not in self.by_arch:
            raise KernelProError(f"no feature catalog for arch {arch!r}; known: {', '.join(self.archs)}")
        return self.by_arch[arch]

    def feature(self, arch: str, name: str) -> Feature:
        feats = self.features(arch)
        if name not in feats:
            raise KernelProError(
                f"unknown feature {name!r} for {arch}; known: {', '.join(sorted(feats))}")
        return feats[name]

    def check_names(self, arch: str, names: Iterable[str]) -> list[str]:
        """Validate requested feature names for `arch`; returns them in order, without duplicates."""
        out: list[str] = []
        for n in names:
            self.feature(arch, n)
            if n not in out:
                out.append(n)
        return out


def _pattern(raw: object, where: str) -> Pattern:
    if isinstance(raw, str):
        return Pattern(tuple(raw.split(".")))
    if not isinstance(raw, dict) or "prefix" not in raw:
        raise KernelProError(f"{CATALOG_PATH}: {where}: a pattern is a string or a table with `prefix`")
    unknown = set(raw) - {"prefix", "has", "any", "lacks", "operand"}
    if unknown:
        raise KernelProError(f"{CATALOG_PATH}: {where}: unknown pattern key(s) {sorted(unknown)}")
    return Pattern(tuple(str(raw["prefix"]).split(".")), frozenset(raw.get("has", ())),
                   frozenset(raw.get("any", ())), frozenset(raw.get("lacks", ())),
                   re.compile(raw["operand"]) if raw.get("operand") else None)


def parse_catalog(data: dict) -> Catalog:
    cat = Catalog()
    for name, entry in data.get("feature", {}).items():
        for key in ("archs", "description", "ptx", "sass"):
            if key not in entry:
                raise KernelProError(f"{CATALOG_PATH}: feature {name!r} lacks `{key}`")
        ptx = tuple(_pattern(p, f"{name}.ptx") for p in entry["ptx"])
        for arch in entry["archs"]:
            sass_raw = entry.get(f"sass_{arch}", entry["sass"])
            sass = tuple(_pattern(p, f"{name}.sass") for p in sass_raw)
            desc = " ".join(entry["description"].split())
            cat.by_arch.setdefault(arch, {})[name] = Feature(name, arch, desc, ptx, sass)
    return cat


_CACHE: dict[Path, Catalog] = {}


def load_catalog(path: str | Path | None = None) -> Catalog:
    p = Path(path) if path else CATALOG_PATH
    if p not in _CACHE:
        try:
            with open(p, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise KernelProError(f"cannot read feature catalog {p}: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise KernelProError(f"feature catalog {p} is not valid TOML: {e}") from None
        _CACHE[p] = parse_catalog(data)
    return _CACHE[p]


def catalog_arch(arch: str) -> str:
    """The catalog key for a compile target: sm_90 and sm_90a share Hopper's list, and so on."""
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    if not m:
        raise KernelProError(f"arch {arch!r} is not of the form sm_90a / sm_100a / sm_90")
    base = m.group(1)
    cat = load_catalog()
    for a in cat.archs:
        if re.fullmatch(rf"sm_{base}[af]?", a):
            return a
    raise KernelProError(f"no feature catalog for {arch}; known: {', '.join(cat.archs)}")


def match(features: dict[str, Feature], instrs: Iterable[tuple[str, list[str]]], sass: bool) -> dict[str, list[str]]:
    """feature name -> sorted distinct opcodes that evidence it, for (opcode, operands) pairs."""
    found: dict[str, set[str]] = {}
    for opcode, operands in instrs:
        for f in features.values():
            if (f.sass_match if sass else f.ptx_match)(opcode, operands):
                found.setdefault(f.name, set()).add(opcode)
    return {k: sorted(v) for k, v in sorted(found.items())}
