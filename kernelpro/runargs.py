"""A run's parsed arguments, stored with the run and restored by `--resume`.

Every field of the argparse Namespace is stored (as JSON), so a flag added later is resumed without
anyone keeping a list of resumable keys; each command names only the fields a resumed run takes from
the new command line instead (the run id itself, budgets, output switches) and those never stored
(secrets).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from typing import Any

from kernelpro.errors import KernelProError


def args_config(args: argparse.Namespace, *, never: Iterable[str] = ()) -> dict[str, Any]:
    """All fields of `args` as JSON-able values, less `never` and the CLI's dispatch callables."""
    skip = set(never)
    out: dict[str, Any] = {}
    for k, v in vars(args).items():
        if k in skip or callable(v):
            continue
        try:
            json.dumps(v)
        except TypeError:
            raise KernelProError(f"argument --{k.replace('_', '-')}={v!r} cannot be stored for --resume; "
                                 "pass a plain value") from None
        out[k] = v
    return out


def restore_args(args: argparse.Namespace, stored: dict[str, Any], *, fresh: Iterable[str]) -> list[str]:
    """Set every stored field on `args` except `fresh` (taken from the new command line).
    Returns the names restored."""
    keep = set(fresh)
    done = []
    for k, v in stored.items():
        if k in keep:
            continue
        setattr(args, k, v)
        done.append(k)
    return done
