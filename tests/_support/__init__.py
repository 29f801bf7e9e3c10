"""Test helpers shared across test folders (no tests here)."""
