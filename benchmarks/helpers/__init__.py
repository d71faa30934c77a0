"""What the benchmark scripts share: records and stored runs (``record``), the engine's
test cases (``engine_cases``), the molecule sets and splits (``molecule_jobs``), and the
anchors' runs (``chemprop_runs``, ``minimol_runs``). The scripts in ``benchmarks/`` run
as programs and import these as ``helpers.<module>``; nothing here runs on its own."""
