"""specgate: the suite around the oracle — models cache, snapshots, gates, reports, CLI."""

__version__ = "0.1.0"
