"""An engine in another process, speaking PROTOCOL.md as JSON lines over stdio:
the client adapter (``client``), the server loop that puts any adapter behind the
protocol (``server``), and what both share: the message format (``wire``), the JSON
Schemas (``schema``), bounded pipe reads (``pipes``) and the child process tied to
ours (``lifeline``)."""
