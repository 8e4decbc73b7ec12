"""Hardware context for prompts: the per-architecture notes shipped with the ptxbench suite.

`hardware_context(arch, with_docs, with_patterns)` is the one switch behind PTXBench's "with / without
documentation" ablation. Without docs a model still gets the target summary (compile flags, SM resources,
the feature names it will be checked for); with docs it also gets the per-feature notes (what each
instruction does, its PTX syntax and constraints, a usage sketch); patterns adds kernel skeletons
(warp-specialized pipeline, online softmax, attention forward/backward).

The notes live in `suites/ptxbench/hwdocs/<arch>.md`. The summary is everything above the
`<!-- details -->` marker. sm_100a shares TMA / mbarrier / cluster / setmaxnreg semantics with sm_90a, so
its detailed notes are followed by the sm_90a sections fenced by `<!-- common:begin/end -->`.
"""

from __future__ import annotations

from pathlib import Path

from kernelpro.errors import KernelProError

HWDOCS_DIR = Path(__file__).parent.parent / "suites" / "ptxbench" / "hwdocs"
ARCHS = ("sm_90a", "sm_100a")
_DETAILS = "<!-- details -->"
_COMMON_BEGIN, _COMMON_END = "<!-- common:begin -->", "<!-- common:end -->"


def _read(name: str) -> str:
    path = HWDOCS_DIR / name
    try:
        return path.read_text()
    except OSError as e:
        raise KernelProError(f"hardware notes {path} are missing ({e.strerror}); reinstall kernelpro") from None


def _split(text: str, name: str) -> tuple[str, str]:
    summary, sep, details = text.partition(_DETAILS)
    if not sep:
        raise KernelProError(f"hardware notes {name} lack the '{_DETAILS}' marker; reinstall kernelpro")
    return summary.strip(), details.strip()


def _common_sections(text: str) -> str:
    _, _, rest = text.partition(_COMMON_BEGIN)
    common, sep, _ = rest.partition(_COMMON_END)
    return common.strip() if sep else ""


def hardware_context(arch: str, with_docs: bool = True, with_patterns: bool = False) -> str:
    """The hardware part of a prompt for `arch` ('sm_90a' or 'sm_100a'); markers are stripped."""
    if arch not in ARCHS:
        raise KernelProError(f"no hardware notes for {arch!r}; known architectures: {', '.join(ARCHS)}")
    summary, details = _split(_read(f"{arch}.md"), f"{arch}.md")
    parts = [summary]
    if with_docs:
        parts.append(details)
        if arch != "sm_90a":
            shared = _common_sections(_read("sm_90a.md"))
            if shared:
                parts.append("# Shared with sm_90a: TMA, mbarrier, clusters, setmaxnreg, elect.sync\n\n" + shared)
    if with_patterns:
        parts.append(_read("patterns.md").strip())
    text = "\n\n".join(parts)
    for marker in (_DETAILS, _COMMON_BEGIN, _COMMON_END):
        text = text.replace(marker, "")
    return text.strip() + "\n"
