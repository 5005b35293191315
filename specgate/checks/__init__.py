"""Each stage's comparison of an engine's answer with the references, in one module
per stage. Gate modules (``specgate/gates/``) read a case and call the check; the
reference re-checks, the drift rules and the oracle's mutation tests call the same
functions, so one rule judges every caller."""
