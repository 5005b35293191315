"""The metadata / dispatch stage: one case per field of the engine's reading of a model
(``specgate.checks.metadata``). Not replayed on new inputs: its input is the model."""

from specgate.stages.base import Stage

METADATA = Stage("metadata", capability="metadata", snapshot="metadata")
