"""Rewrites of Triton source into Triton source that later analyses read more easily (one spelling per idea)."""
