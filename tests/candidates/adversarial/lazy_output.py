"""expect: lazy_output
task: vector_add
device: any
Returns a tensor subclass that does the work only when someone looks at the result.
"""
import torch
import torch.nn as nn


class Deferred(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args = [a._thunk() if isinstance(a, Deferred) else a for a in args]
        return func(*args, **kwargs)

    def _thunk(self):
        return self._a + self._b


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.Tensor._make_subclass(Deferred, torch.empty_like(a))
        out._a, out._b = a, b
        return out
