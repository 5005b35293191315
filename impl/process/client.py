"""``--impl 'cmd:<command line>'``: an engine in any language, as an external process
speaking the JSON-lines protocol of PROTOCOL.md over its stdin/stdout.

Every op goes through one ``CmdEngine.request(op, **args)``: the ``Engine`` methods
are forwarders built from the protocol's table (``impl.ops``), so the requests are
what the schemas say. The process is started once per session (lazily, on the first
request) and reused.
Every request has a deadline (``SPECGATE_CMD_TIMEOUT`` seconds, default 60; the
start-up handshake gets ``SPECGATE_CMD_STARTUP_TIMEOUT``, default 120, since an
engine may load weights before it says hello). What an engine writes is held in
bounded amounts only (``impl.process.pipes``): the last ``STDERR_TAIL_BYTES`` of its stderr
and the last lines of it that carried a message (a panic, FATAL, a traceback's last line),
kept for error messages, and one stdout line of at most
``SPECGATE_CMD_MAX_LINE_BYTES``. The process is tied to ours (``impl.process.lifeline``):
it dies with us even when we are killed outright.

A crash, a hang past the deadline, a malformed or overlong line, a response
carrying the wrong id or a result that does not follow its op's schema
(``protocol/results/``) turns into ``EngineDied`` (an ``EngineError``: gate outcome
``error``) for that one case; the process is killed and started afresh on the next request, so
the run goes on. An error the engine *reports* in a well-formed response is an
``error`` outcome too (or ``Unsupported``) but needs no restart. A handshake naming
another protocol version is refused for the session.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from impl import bounds
from impl.envvars import env_count, env_seconds
from impl.named_logprobs import NamedLogprobs
from impl.ops import OPS
from impl.process import lifeline, pipes, schema, wire
from impl.protocol import (
    CAPABILITIES,
    CONFORMANCE_CLASSES,
    TRACE_KINDS,
    Engine,
    EngineDied,
    EngineError,
    Unsupported,
    answered_positions,
)

STDERR_TAIL_LINES = 20  # lines of the engine's stderr quoted in an error message
STDERR_LINE_CHARS = 500  # each cut to its last this many characters
STDERR_TAIL_BYTES = 16 * 1024  # all that is kept of the engine's stderr
MAX_START_FAILURES = 3  # consecutive failed start-ups before giving up for the session
# The longest stdout line accepted. The largest answer the gates ask for with the
# default top-k (1024) is a 512-token prompt's logits: 512 x 1024 ids and logits,
# ~5.6 MB of base64; 256 MiB leaves room for engines answering full arrays to
# shorter prompts. Full arrays (SPECGATE_CMD_LOGITS_TOP_K=0) of a 512-token prompt
# over Qwen's 151,936 ids are 415 MB of base64, so that setting raises the default
# to 1 GiB (512 positions of a vocabulary up to ~390,000 ids).
MAX_LINE_BYTES = 256 * 1024 * 1024
MAX_LINE_BYTES_FULL_LOGITS = 1024 * 1024 * 1024


class _Requesting(Engine):
    """An adapter whose every op method (``metadata`` … ``trace``, set below from
    ``impl.ops.OPS``) is ``self.request(op, **its arguments by name)``."""

    def request(self, op: str, **args: Any) -> Any:
        raise NotImplementedError


def _forward(op: str) -> Callable[..., Any]:
    def method(self: _Requesting, *args: Any, **kwargs: Any) -> Any:
        return self.request(op, **OPS[op].bind(args, kwargs))

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"``Engine.{op}``, through ``request``."
    return method


for _op in OPS:
    setattr(_Requesting, _op, _forward(_op))


class CmdEngine(_Requesting):
    name = "cmd"

    def __init__(
        self,
        command_line: str,
        timeout: float | None = None,
        startup_timeout: float | None = None,
        env: dict[str, str] | None = None,
    ):
        self.command_line = command_line.strip()
        self.env = env  # the process's environment (None: ours)
        try:
            self.argv = shlex.split(self.command_line)
        except ValueError as exc:
            raise EngineError(f"cmd: cannot parse command line {command_line!r}: {exc}") from exc
        if not self.argv:
            raise EngineError("cmd: empty command line; use --impl 'cmd:<program> [args...]'")
        # A program not on PATH is looked up beside the running Python, so that
        # `cmd:specgate engine ...` works from a virtualenv that is not activated.
        beside = Path(sys.executable).parent / self.argv[0]
        if os.sep not in self.argv[0] and shutil.which(self.argv[0]) is None and beside.exists():
            self.argv[0] = str(beside)
        self.timeout = timeout if timeout is not None else env_seconds("SPECGATE_CMD_TIMEOUT", 60.0)
        self.startup_timeout = (
            startup_timeout
            if startup_timeout is not None
            else env_seconds("SPECGATE_CMD_STARTUP_TIMEOUT", max(120.0, self.timeout))
        )
        # The logits op asks for the top-k per position (0: the full array). 1024
        # keeps every id a reference's top-64 reaches on flat (e.g. Chinese-text)
        # positions: the loose KL on Qwen2.5-0.5B's chat_zh prompt matches the
        # in-process value to 1e-11 with k=1024 and was off by 5e-6 with k=256.
        raw_k = os.environ.get("SPECGATE_CMD_LOGITS_TOP_K", "1024")
        if not raw_k.isdigit():
            raise EngineError(f"SPECGATE_CMD_LOGITS_TOP_K={raw_k!r} must be a non-negative integer")
        self.logits_top_k = int(raw_k)
        self.max_line_bytes = env_count(
            "SPECGATE_CMD_MAX_LINE_BYTES", MAX_LINE_BYTES if self.logits_top_k else MAX_LINE_BYTES_FULL_LOGITS
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdout: pipes.LineReader | None = None
        self._stderr: pipes.StderrTail | None = None
        self._hello: dict[str, Any] | None = None
        self._refusal: str | None = None  # set once the engine is refused for the session
        self._next_id = 0
        self._start_failures = 0
        self._last_start_error = ""
        self.starts = 0  # how many times the process was (re)started
        self._session_models: dict[str, Any] = {}  # session id -> the ModelRef it was opened on
        self.label = "cmd"

    # --- process lifecycle --------------------------------------------------------
    def _spawn(self) -> None:
        try:
            # Its own process group (a kill reaches its children too), killed when we die.
            self._proc = lifeline.spawn(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env
            )
        except OSError as exc:
            raise EngineError(f"cmd: cannot start {self.command_line!r}: {exc}") from exc
        self.starts += 1
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._stdout = pipes.LineReader(self._proc.stdout, self.max_line_bytes)
        self._stderr = pipes.StderrTail(self._proc.stderr, STDERR_TAIL_BYTES)

    def _ensure_started(self) -> None:
        if self._refusal is not None:
            raise EngineError(self._refusal)
        if self._proc is not None and self._hello is not None:
            return
        if self._start_failures >= MAX_START_FAILURES:
            raise EngineDied(
                f"cmd: gave up after {self._start_failures} failed start-ups of "
                f"{self.command_line!r}; last: {self._last_start_error}"
            )
        self._spawn()
        try:
            line = self._read_line(
                self.startup_timeout,
                "the handshake",
                max_line=min(self.max_line_bytes, bounds.BOUNDS.handshake_bytes),
            )
            try:
                hello = json.loads(line)
            except (ValueError, RecursionError) as exc:
                raise self._broken(f"malformed handshake line {line[:200]!r}: {_one_line(exc)}") from None
            if not isinstance(hello, dict) or not isinstance(hello.get("capabilities"), list):
                raise self._broken(f"handshake lacks a capabilities list: {line[:200]!r}")
        except EngineError as exc:
            self._start_failures += 1
            self._last_start_error = str(exc).splitlines()[0]
            raise
        self._start_failures = 0
        self._check_protocol(hello)
        try:
            problem = schema.problem("handshake.schema.json", hello, "handshake")
        except RecursionError:
            problem = "nested too deeply to validate"
        if problem:
            self._refusal = f"cmd [{self.command_line}]: the handshake does not follow PROTOCOL.md: {problem}"
            self._kill()
            raise EngineError(self._refusal)
        self._hello = hello
        # `name` stays "cmd" (gates key caches by it); messages name the engine itself.
        self.label = f"cmd:{hello.get('engine', '?')}"

    def _check_protocol(self, hello: dict[str, Any]) -> None:
        """Refuse, for the whole session, an engine speaking another protocol version:
        its answers cannot be read by these rules, and restarting it cannot help."""
        spoken = hello.get("protocol")
        if spoken == wire.PROTOCOL:
            return
        named = f"names protocol {spoken!r}" if spoken is not None else "names no protocol"
        self._refusal = (
            f"cmd [{self.command_line}]: the engine's handshake {named}; specgate speaks "
            f"{wire.PROTOCOL!r} (PROTOCOL.md) and does not gate this engine"
        )
        self._kill()
        raise EngineError(self._refusal)

    def _kill(self) -> None:
        proc, self._proc, self._hello = self._proc, None, None
        self._session_models.clear()  # a new process holds no session
        if proc is None:
            return
        lifeline.kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        # stderr is closed by its draining thread when the stream ends.
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()

    def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None and proc.stdin is not None:
            try:
                pipes.write_all(proc.stdin, b'{"op":"shutdown"}\n', time.monotonic() + 5)
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, TimeoutError, subprocess.TimeoutExpired):
                pass
        self._kill()

    # --- one exchange -----------------------------------------------------------------
    def _stderr_quote(self) -> tuple[str, list[str]]:
        """The engine's stderr as quoted in an error: the lines that carried a message
        (a panic, FATAL, an error, a traceback's last line — kept however early they
        came), then the last lines; and the short form for a one-line reason."""
        time.sleep(0.05)  # let the stderr pump catch the last words of a dying process
        if self._stderr is None:
            return "", []
        messages = self._stderr.message_lines()
        tail = [t for t in self._stderr.lines(STDERR_TAIL_LINES, STDERR_LINE_CHARS) if t not in messages]
        quote = ""
        if messages:
            quote += "\n  engine stderr (lines carrying a message):\n    " + "\n    ".join(messages)
        if tail:
            quote += "\n  engine stderr (last lines):\n    " + "\n    ".join(tail)
        return quote, messages or tail[-3:]

    def _broken(self, reason: str) -> EngineDied:
        """Kill the process (restarted on the next request) and describe why."""
        proc = self._proc
        status = proc.poll() if proc is not None else None
        self._kill()
        if status is None and proc is not None:
            status = proc.returncode
        exit_note = f" (exit status {status})" if status is not None else ""
        quote, short = self._stderr_quote()
        return EngineDied(f"{self.label} [{self.command_line}]: {reason}{exit_note}{quote}", short)

    def _read_line(
        self, timeout: float, what: str, deadline: float | None = None, max_line: int | None = None
    ) -> str:
        """The next stdout line, by ``deadline`` (default: ``timeout`` from now), of at
        most ``max_line`` bytes (default: ``SPECGATE_CMD_MAX_LINE_BYTES``)."""
        assert self._stdout is not None
        self._stdout.max_line = max_line if max_line is not None else self.max_line_bytes
        try:
            return self._stdout.read_line(deadline if deadline is not None else time.monotonic() + timeout)
        except TimeoutError:
            raise self._broken(f"no answer to {what} within {timeout:g} s (hang; killed)") from None
        except EOFError:
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=5)
            raise self._broken(f"the engine exited (or closed stdout) before answering {what}") from None
        except pipes.LineTooLong as exc:
            raise self._broken(
                f"answer to {what} is a line longer than {exc.max_line} bytes, the most this request "
                f"can need (impl.bounds, at most SPECGATE_CMD_MAX_LINE_BYTES; killed)"
            ) from None
        except UnicodeDecodeError as exc:
            raise self._broken(f"answer to {what} is not UTF-8: {exc}") from None

    def request(self, op: str, **args: Any) -> Any:
        """The one path of every op (the ``Engine`` methods all come here): the call's
        arguments by name (``impl.ops.Op.bind``) in their wire form, the client's own
        fields (``top_k``), one exchange, then the checks the answer must pass for this
        request (``_RESULT_CHECKS``)."""
        spec = OPS.get(op)
        if spec is None:
            raise EngineError(f"{self.label}: no op {op!r} in the protocol; known: {', '.join(OPS)}")
        fields = wire.request_fields(spec, args)
        choices = {"top_k": self.logits_top_k}
        fields.update({name: choices[name] for name in spec.transport})
        held = "session" if "session" in args else "conversation" if "conversation" in args else None
        if held is not None:  # the model a session (a conversation) was opened on sizes its answers
            args = {**args, "model": self._session_models.get(f"{held}:{args[held]}")}
        result = self.exchange(op, fields)
        if op in ("session_open", "conversation_open") and isinstance(result, str):
            self._session_models[f"{op.split('_')[0]}:{result}"] = args["model"]
        elif held is not None and op.endswith("_close"):
            self._session_models.pop(f"{held}:{args[held]}", None)
        check = _RESULT_CHECKS.get(op)
        if check is None:
            return result
        try:  # the schema fixes the form; sizes and rows depend on the request and the model
            return check(result, args)
        except (EngineError, wire.WireError) as exc:
            raise self._broken(f"{op}: {exc}") from None

    def exchange(self, op: str, fields: dict[str, Any]) -> Any:
        """Send one request line of wire ``fields``, wait for its response, return the
        decoded result (what ``request`` builds; tests send what it never would)."""
        self._ensure_started()
        assert self._proc is not None and self._proc.stdin is not None
        self._next_id += 1
        rid = self._next_id
        what = f"request {rid} ({op})"
        deadline = time.monotonic() + self.timeout
        message = (wire.dumps({"id": rid, "op": op, **fields}) + "\n").encode("utf-8")
        try:
            pipes.write_all(self._proc.stdin, message, deadline)
        except TimeoutError:
            raise self._broken(
                f"the engine took no {what} within {self.timeout:g} s (hang; killed)"
            ) from None
        except OSError as exc:
            raise self._broken(f"cannot send {what}: {exc}") from None
        n_vocab = self._n_vocab(fields)
        max_line = min(self.max_line_bytes, bounds.answer_line_bytes(op, fields, n_vocab))
        line = self._read_line(self.timeout, what, deadline, max_line)
        try:  # the values it holds, counted before they are parsed (each costs 30-250 bytes)
            bounds.check_json_items(
                line, bounds.answer_items(op, fields, n_vocab), "what this request can need"
            )
        except EngineError as exc:
            raise self._broken(f"answer to {what}: {exc} (impl.bounds; killed)") from None
        try:
            response = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise self._broken(
                f"malformed JSON in answer to {what}: {_one_line(exc)}; line: {line[:200]!r}"
            ) from None
        if not isinstance(response, dict):
            raise self._broken(f"answer to {what} is not a JSON object: {line[:200]!r}")
        del line  # the parsed answer is all that is kept
        said_id = response.get("id")
        if type(said_id) is not int or said_id != rid:  # true == 1 and 2.0 == 2: not an exact match
            raise self._broken(f"answer carries id {said_id!r}, expected {rid} for {what}")
        if "error" in response:
            err = response["error"] if isinstance(response["error"], dict) else {"message": response["error"]}
            said = bounds.cut(str(err.get("message", err)), bounds.BOUNDS.message_chars)
            if err.get("type") == "unsupported":
                # What the engine said, as every adapter's refusal: the caller names the engine
                # and the input refused (``specgate.outcomes.gate.call``), once.
                raise Unsupported(said)
            kind = bounds.cut(str(err.get("type", "engine")), 80)
            raise EngineError(f"{self.label}: {op}: {kind} error: {said}")
        if "result" not in response:
            raise self._broken(f"answer to {what} has neither result nor error: {str(response)[:200]!r}")
        try:
            # Validation counts against the request's deadline (PROTOCOL.md section 6).
            shape_problem = schema.result_problem(op, response["result"]) if op in OPS else None
            if shape_problem:  # a wrong-shaped result is a broken engine (PROTOCOL.md section 6)
                raise self._broken(f"answer to {what} does not follow the protocol: {shape_problem}")
            if time.monotonic() > deadline:
                raise self._broken(
                    f"answer to {what} was not read and validated within {self.timeout:g} s "
                    f"(SPECGATE_CMD_TIMEOUT covers both; killed)"
                )
            result = wire.decode_value(response["result"])
        except wire.WireError as exc:
            raise self._broken(f"answer to {what}: {exc}") from None
        except RecursionError:
            raise self._broken(f"answer to {what} is nested too deeply") from None
        try:
            _check_result(op, fields, result, n_vocab)
        except EngineError as exc:
            raise EngineError(f"{self.label}: answer to {what}: {exc}") from None
        return result

    def _n_vocab(self, fields: dict[str, Any]) -> int | None:
        """The vocabulary size of the request's model (None when its GGUF cannot be read)."""
        model = fields.get("model")
        return bounds.model_n_vocab(model.get("gguf")) if isinstance(model, dict) else None

    # --- protocol surface ---------------------------------------------------------------
    @property
    def capabilities(self) -> frozenset[str]:
        self._ensure_started()
        assert self._hello is not None
        return frozenset(c for c in self._hello["capabilities"] if c in CAPABILITIES)

    @property
    def ops(self) -> frozenset[str]:
        """The ops of the declared capabilities, of those the handshake's ``ops`` lists
        when it lists them (an engine rendering only its models' own templates leaves
        out ``render_template``: the construct gate is n/a)."""
        self._ensure_started()
        assert self._hello is not None
        listed = self._hello.get("ops")
        capabilities = self.capabilities
        return frozenset(
            op
            for op, spec in OPS.items()
            if spec.capability in capabilities and (not isinstance(listed, list) or op in listed)
        )

    @property
    def classes(self) -> frozenset[str]:  # type: ignore[override]
        """The conformance classes the handshake claims (``classes``; default
        ``["quantized"]``); names other than ``exact`` and ``quantized`` are ignored."""
        self._ensure_started()
        assert self._hello is not None
        claimed = self._hello.get("classes", ["quantized"])
        return (
            frozenset(c for c in claimed if c in CONFORMANCE_CLASSES)
            if isinstance(claimed, list)
            else frozenset()
        )

    def unsupported_model(self, model: Any) -> str:
        """The handshake's ``models`` (ids or GGUF sha256s; absent: every model): a model
        not among them is n/a, with this reason (PROTOCOL.md section 1)."""
        self._ensure_started()
        assert self._hello is not None
        listed = self._hello.get("models")
        if not isinstance(listed, list) or model.id in listed or model.sha256 in listed:
            return ""
        named = ", ".join(str(m) for m in listed[:8]) + (
            f", … ({len(listed)} in all)" if len(listed) > 8 else ""
        )
        return f"{self.label} supports only the models its handshake lists ({named}): {model.id} is not among them"

    def version(self) -> str:
        self._ensure_started()
        assert self._hello is not None
        return f"{self._hello.get('engine', '?')} {self._hello.get('version', '?')}"

    def handshake(self) -> dict[str, Any]:
        """The engine's handshake line as it sent it (for the report's provenance)."""
        self._ensure_started()
        assert self._hello is not None
        return dict(self._hello)

    @property
    def trace_points(self) -> frozenset[str]:  # type: ignore[override]
        """The point kinds the handshake's ``trace_points`` names (absent: every kind)."""
        self._ensure_started()
        assert self._hello is not None
        named = self._hello.get("trace_points", list(TRACE_KINDS))
        return frozenset(k for k in named if k in TRACE_KINDS) if isinstance(named, list) else frozenset()


def _one_line(exc: BaseException) -> str:
    return bounds.cut(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 200)


def _check_result(op: str, fields: dict[str, Any], result: Any, n_vocab: int | None) -> None:
    """A decoded result's sizes and ids against what the request can need (``impl.bounds``)."""
    b = bounds.BOUNDS
    if op in ("encode", "split"):
        size = len(str(fields.get("text", "")).encode("utf-8", "surrogatepass"))
        bounds.check_count(
            len(result), size, "result", f"a token covers at least one byte of the {size}-byte text"
        )
        if op == "encode":
            bounds.check_ids(result, n_vocab, "result")
    elif op in ("render", "render_template"):
        bounds.check_text(result, "result")
    elif op == "decode" and isinstance(result, bytes):
        most = len(fields.get("ids", ())) * b.piece_bytes
        if len(result) > most:
            raise bounds.oversize("result", len(result), "bytes", most, f"{b.piece_bytes} bytes a token")
    elif op in ("generate", "session_generate") and isinstance(result, dict):
        if op == "session_generate":
            result = result.get("generated") if isinstance(result.get("generated"), dict) else {}
        most = int(fields.get("params", {}).get("max_tokens", 128))
        bounds.check_count(len(result.get("ids", ())), most, "ids", "the request's max_tokens")
        bounds.check_ids(result.get("ids", ()), n_vocab, "ids")
    elif op == "sample" and isinstance(result, dict):
        width = bounds.logits_width(fields.get("logits"))
        bounds.check_ids(result.get("ids", ()), width, "ids")
        token = result.get("token")
        if token is not None:
            bounds.check_ids([token], width, "token")


def _logits_answer(result: Any, args: dict[str, Any]) -> Any:
    """A full array, or the top-k form expanded; rows, width and finiteness checked: one
    row per position asked, or per id (an engine may ignore ``positions``, PROTOCOL.md
    4.3). A top-k form with ``unnamed`` stays the named log-probabilities (4.3), its rows
    counted here and the rest judged by ``specgate.checks.logit_named.well_formed``."""
    n_vocab = bounds.model_n_vocab(args["model"].gguf)
    if isinstance(result, dict) and "top_k" in result:
        result = wire.expand_top_k(result["top_k"], n_vocab)
    n_ids, positions = len(args["ids"]), args.get("positions")
    answered = len(result) if hasattr(result, "__len__") and not isinstance(result, (str, dict)) else None
    every = positions is None or answered_positions(answered, n_ids, positions) == list(range(n_ids))
    n_rows, per = (n_ids, "one per id") if every else (len(positions), "one per position asked")
    if isinstance(result, NamedLogprobs):
        if len(result) != n_rows:
            raise EngineError(f"answer field logits has {len(result)} rows; expected {n_rows} ({per})")
        return result
    return bounds.check_logit_rows(result, n_rows, n_vocab, per=per)


def _batch_logits_answer(result: Any, args: dict[str, Any]) -> Any:
    """One row per prompt (``logits``' checks, the rows counted against the prompts)."""
    return _logits_answer(result, {**args, "ids": args["prompts"]})


def _trace_answer(result: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Every point asked and none other, one row per position asked, each row as wide as
    the model makes that point and finite (PROTOCOL.md 4.6, 8), in the order asked."""
    points, positions = args["points"], args.get("positions")
    rows = len(args["ids"]) if positions is None else len(positions)
    got = result["points"]
    missing = [p for p in points if p not in got]
    if missing:
        raise EngineError(f"points asked but not answered: {', '.join(missing[:5])}")
    extra = [p for p in got if p not in points]
    if extra:
        raise EngineError(f"answer field points holds {len(extra):,} points never asked: "
                          f"{bounds.cut(', '.join(extra[:5]), 200)}")  # fmt: skip
    for point in points:
        bounds.check_trace_point(point, got[point], rows, bounds.trace_width(point, args["model"].gguf))
    return {p: got[p] for p in points}


def _session_append_answer(result: Any, args: dict[str, Any]) -> dict[str, Any]:
    """``n_past`` and the last position's logits as one row ``[n_vocab]`` (the top-k form
    expanded as ``logits``' is); width (the session's model's) and finiteness checked."""
    model = args.get("model")
    n_vocab = bounds.model_n_vocab(model.gguf) if model is not None else None
    logits = result["logits"]
    if isinstance(logits, dict) and "top_k" in logits:
        logits = wire.expand_top_k(logits["top_k"], n_vocab)
    if isinstance(logits, NamedLogprobs):
        raise EngineError(
            f"{'conversation_turn' if 'conversation' in args else 'session_append'}: logits name only some candidates ({logits.unnamed}); a session's must name all"
        )
    return {"n_past": int(result["n_past"]), "logits": bounds.check_logit_rows(logits, 1, n_vocab)[0]}


def _conversation_turn_answer(result: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The ids the cache holds (within the conversation's model's vocabulary) and the last
    position's logits as one row ``[n_vocab]``, checked as ``session_append``'s."""
    model = args.get("model")
    n_vocab = bounds.model_n_vocab(model.gguf) if model is not None else None
    ids = [int(i) for i in result["ids"]]
    bounds.check_ids(ids, n_vocab, "ids")
    row = _session_append_answer({"n_past": len(ids), "logits": result["logits"]}, args)["logits"]
    return {"ids": ids, "logits": row}


_RESULT_CHECKS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "logits": _logits_answer,
    "batch_logits": _batch_logits_answer,
    "session_append": _session_append_answer,
    "conversation_turn": _conversation_turn_answer,
    "trace": _trace_answer,
}
