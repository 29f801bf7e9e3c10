"""The benchmark harness: the measuring behind ``vlmprep bench`` and ``bench/run_scenarios.py``.

Not imported by ``import vlmprep``; nothing here runs in a user's preprocessing path. Modules:

- ``command``: what ``vlmprep bench`` does with its flag values (``BenchOptions``): checks them,
  builds the inputs, measures, writes ``--json`` / ``--plot`` and prints the report.
- ``harness``: end to end (``Processor(...)(batch)`` on encoded bytes), per stage, the floors and
  the transformers comparison, for each input set, thread count, backend and dtype;
  ``BenchConfig`` in, a result dict (what ``--json`` writes) out.
- ``floors``: the decode, exact-resize and output-write floors (one thread each).
- ``timing``: thread counts, timed call series and their statistics (images and video).
- ``report``: the human report (tables) of a result dict.
- ``video``: ``--video``, one sampled clip, vlmprep against the transformers video processor.
- ``documents``: ``--documents``, one PDF made here, ``Processor.stream`` against a PDF renderer
  plus the transformers image processors: pages/s, the render floor, peak RSS per page count.
- ``images``: the inputs: deterministic JPEG mosaics of package photos, or a folder's files.
- ``decoders``: the decode-only floor (every image decoder the dependencies provide).
- ``hf``: the transformers image processors of a preset, as users run them (``--compare hf``).
- ``env``: where it ran: machine, library versions, CPU time and peak RSS.
- ``plot``: the images/s bar chart (``--plot``).

The command line's flags are ``vlmprep.cli.bench`` (argparse only); scripts in ``bench/`` use
``command.BenchOptions`` and ``command.measure`` (or ``harness.run``) directly.
"""
