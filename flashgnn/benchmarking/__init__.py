"""Benchmark harnesses behind ``flashgnn bench``: timing, benchmark graphs, result tables and
the kernel benchmark. Not imported by the library itself."""
