"""Model supply: the manifest and cache, fetching, derived and tiny models, conversion and export."""
