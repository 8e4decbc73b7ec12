"""A CPU template for search tests: C = A + B computed SLOW**2 times (same answer; each step of the x2 ladder
is 4x the work, so the order of configurations is never in doubt, even on a busy machine).

PARAMS + make_source(params) is the template interface of `kernelpro optimize --policy param`.
"""

PARAMS = {"SLOW": 2}

_SOURCE = '''import torch
import torch.nn as nn

PARAMS = {params!r}


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = a + b
        for _ in range(PARAMS["SLOW"] ** 2 - 1):
            c = a + b
        return c
'''


def make_source(params: dict) -> str:
    return _SOURCE.format(params=dict(params))


def validate(params: dict) -> str | None:
    return None if 1 <= params.get("SLOW", 0) <= 8 else "SLOW must be in [1, 8]"
