"""Reference upkeep: the corpus, the recorded snapshots, their diffs, the reference lock and drift."""
