"""A CPU template for search tests: C = A + B computed REPEAT times (more repeats, slower; same answer).

PARAMS + make_source(params) is the template interface of `kernelpro optimize --policy param`.
"""

PARAMS = {"REPEAT": 4}

_SOURCE = '''import torch
import torch.nn as nn

PARAMS = {params!r}


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = a + b
        for _ in range(PARAMS["REPEAT"] - 1):
            c = a + b
        return c
'''


def make_source(params: dict) -> str:
    return _SOURCE.format(params=dict(params))


def validate(params: dict) -> str | None:
    return None if 1 <= params.get("REPEAT", 0) <= 64 else "REPEAT must be in [1, 64]"
