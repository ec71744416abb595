"""fo_lib: FlashOverlap (wave-grouped GEMM/communication overlap) as a Python/CuPy research library."""
__version__ = "0.1.0"
