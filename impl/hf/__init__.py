"""transformers / tokenizers as references: one module per stage behind ``engine.HFEngine``."""
