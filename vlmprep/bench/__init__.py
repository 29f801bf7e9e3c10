"""The benchmark harness: the measuring behind ``vlmprep bench`` and ``bench/run_scenarios.py``.

Not imported by ``import vlmprep``; nothing here runs in a user's preprocessing path. Modules:

- ``harness``: end to end (``Processor(...)(batch)`` on encoded bytes), per stage, decode floor
  and the transformers comparison, for each input set, thread count, backend and dtype;
  ``BenchConfig`` in, a result dict (what ``--json`` writes) out.
- ``images``: the inputs: deterministic JPEG mosaics of package photos, or a folder's files.
- ``decoders``: the decode-only floor (every image decoder the dependencies provide).
- ``hf``: the transformers image processors of a preset, as users run them (``--compare hf``).
- ``env``: where it ran: machine, library versions, CPU time and peak RSS.
- ``plot``: the images/s bar chart (``--plot``).

The command line (flags, tables) is ``vlmprep.cli.bench``; it only parses and prints.
"""
