"""A running inference server over HTTP: the adapter (``engine.HttpEngine``), the
client both flavours share (``transport``), one module per server flavour
(``llama_cpp_python``, ``llama_server``) and the GGUF vocabulary that maps a
server's text answers back to ids (``vocab``)."""
