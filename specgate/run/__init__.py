"""What keeps a gate run trustworthy whatever the engine does: crash loops cut short
(``crashloop``), a start-up failure reported (``startup``), setup problems found
before anything runs (``setup_check``) and the worker-to-controller channel under
pytest-xdist (``wire``)."""
