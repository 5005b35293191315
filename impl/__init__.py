"""Engine adapters: the protocol every engine speaks (``protocol``), the ``--impl``
registry, and one package per kind of adapter:

* ``process/`` — an engine in another process over JSON lines (client, server, wire);
* ``http/`` — a running inference server, one module per server flavour;
* ``hf/``, ``llamacpp/``, ``text/`` — the independent references that write snapshots;
* ``oracle`` — specgate's own oracle behind the protocol.

Nothing here imports the suite (``specgate``); see ARCHITECTURE.md.
"""

#: The project's version (pyproject.toml's), kept at the lowest layer that reports it
#: (the oracle adapter's ``version()``); ``specgate.__version__`` is this one.
__version__ = "0.1.0"
