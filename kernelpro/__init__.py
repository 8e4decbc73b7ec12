"""KernelPro: benchmark and optimize LLM-written GPU kernels (PTXBench + KernelPro agent)."""

__version__ = "0.1.0"
