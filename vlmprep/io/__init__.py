"""Inputs: header-only probe, classification of input items, decode to uint8 RGB."""
