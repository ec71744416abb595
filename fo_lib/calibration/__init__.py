"""The offline phase for the machine it runs on (its results are found through :mod:`fo_lib.store`:
the user's calibration, then the repository's ``data/<gpu>/`` record, then the table-free model with
one warning); :mod:`fo_lib.engine.tuned` tunes a partition from them (``OverlapPlan(partition="tuned")``).

* :mod:`.sm90_tiles`: the Hopper GEMM's tile table;
* :mod:`.model_fit`: the refined model's constants fitted on measured partitions;
* :mod:`.offline`: ``python -m fo_lib calibrate``, every part of the offline phase in one command.
"""
