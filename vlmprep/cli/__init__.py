"""Command line (argparse only): ``vlmprep plan``, ``info``, ``bench``; the measuring is in vlmprep.bench."""
