"""Stage-two micro-profiling tools; see registry.py."""
