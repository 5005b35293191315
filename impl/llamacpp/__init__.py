"""llama.cpp (through llama-cpp-python) as a reference: one module per stage behind
``engine.LlamaCppEngine``."""
