"""The `transpile` command line (installed as `transpile.cli`)."""
