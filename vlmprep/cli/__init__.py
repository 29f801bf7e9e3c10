"""Command line: ``vlmprep plan``, ``vlmprep info``."""
