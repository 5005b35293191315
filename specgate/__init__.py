"""specgate: the suite around the oracle — models cache, snapshots, gates, reports, CLI."""

from impl import __version__  # the one version number (impl, the lowest layer reporting it)

__all__ = ["__version__"]
