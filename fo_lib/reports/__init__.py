"""Readers of the text that the measuring tools print, one module per format: pure parsing (no GPU,
no torch or CuPy; pandas imported where a table is built), so tests run them on synthetic output
and the scripts under ``scripts/`` that drive the tools import them from here.

* :mod:`.sass`: the portable GEMM's k-loop and its hot path in ``nvdisasm`` output;
* :mod:`.ncu`: Nsight Compute's CSV (the raw page per launch, the source page per instruction) and
  the classes its instructions fall in.
"""
