"""The offline phase for the machine it runs on, and the one place that finds its results.

* :mod:`.store`: where this GPU's tables and curves are (the user's calibration, then the
  repository's ``data/<gpu>/`` record, then the table-free model with one warning);
* :mod:`.sm90_tiles`: the Hopper GEMM's tile table;
* :mod:`.offline`: ``python -m fo_lib calibrate``, every part of the offline phase in one command.
"""
