"""Single-purpose text references: CPython ``regex`` for the pre-tokenizer split and
tiktoken for tiktoken-shipped vocabularies (``engines``), and what they read (``inputs``)."""
