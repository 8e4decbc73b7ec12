"""`kernelpro build`: the bench pipeline's CPU stage alone. Builds every candidate's extensions in
parallel into the shared, content-addressed cache (and verifies them statically), recording each in the
run store, so a later `kernelpro bench`, `compare`, `optimize` or ncu pass on any machine sharing the
cache loads them instead of compiling.

    kernelpro build ptxbench --solutions reference [--build-jobs 16] [--build-timeout 900]
"""

from __future__ import annotations

import argparse

from kernelpro.bench import pipeline


def add_arguments(p: argparse.ArgumentParser) -> None:
    pipeline.add_arguments(p)


def main(args: argparse.Namespace) -> int:
    args.build_only = True
    return pipeline.main(args)
