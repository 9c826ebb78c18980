"""EngineClient: one vLLM engine (or narwhal-sim) through narwhal's adapter.

The same C++ code the router runs does the work: the EngineClient port and its
Beast HTTP/SSE adapter, the connector rules (prefill and decode bodies, B1,
B4, B5; descriptor validation, B3) and the stream classification and timers
(B11-B13). Python and the router therefore agree on every leg.

    from narwhal.engines.client import EngineClient
    from narwhal.engines.connector import PrefillResult

    producer = EngineClient("http://127.0.0.1:8100")
    consumer = EngineClient("http://127.0.0.1:8200")
    request = {"model": "Qwen/Qwen3-0.6B", "prompt": "Tell me about narwhals",
               "max_tokens": 16}
    result: PrefillResult = producer.prefill(request)
    for chunk in consumer.decode(result, request):
        print(chunk["choices"][0]["text"], end="")

Every leg runs on one event-loop thread shared by the whole process, however
many legs are in flight. Blocking calls release the GIL; a KeyboardInterrupt
while one waits cancels its leg (the engine connection is closed at once,
B19) before it propagates. The coroutines (aprefill, adecode) never block the
asyncio loop, and cancelling their task cancels the leg.

Failures raise EngineError (status 502 or 504, B10). Internal Python APIs may
change between releases.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import weakref
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Union

from narwhal import _core
from narwhal.engines.connector import PrefillResult

__all__ = ["EngineClient", "EngineError", "DecodeStream", "AsyncDecodeStream"]

_ENDPOINTS = ("/v1/completions", "/v1/chat/completions")
# Headers the adapter owns on every leg; a caller may not replace them.
_RESERVED_HEADERS = frozenset(
    ["host", "content-length", "content-type", "transfer-encoding", "connection", "accept",
     "x-request-id", "te", "upgrade", "keep-alive", "trailer"])
# Bound on unwinding a cancelled leg before a blocking call gives up on it.
_CANCEL_WAIT_S = 5.0


class EngineError(Exception):
    """An engine leg failed: the adapter's one classification of it.

    Attributes:
      phase: "prefill" or "decode".
      status: the HTTP status a client would get (B10): 504 for timeout-shaped
        faults, 502 for other engine faults, an error object's own status
        (B11), the engine's own 4xx, 499 for a cancelled leg.
      reason: "engine_unreachable", "engine_connection", "engine_timeout",
        "engine_overloaded", "engine_rejected", "engine_error",
        "invalid_response", "deadline", "handoff_expired" or "cancelled".
      detail: the reason in words, beginning with the specification's exact
        texts where one applies ("stream ended before the [DONE] terminator",
        "stream ended with [DONE] before any token arrived", "no first token
        within ...", "engine went silent between tokens ...", "invalid
        continuation: ...", "no handoff: ...").
      transient: whether a fresh attempt may succeed (B14).
      breaker_class: the breaker evidence class ("connection", "timeout",
        "overload", "inference_status", "kv_handoff", "stream" or "none").
      engine_status: the engine's own HTTP status, 0 when it sent none.
      engine: URL of the engine where the failure was observed.
    """

    def __init__(self, phase: str, status: int, reason: str, detail: str, transient: bool,
                 breaker_class: str = "none", engine_status: int = 0, engine: str = "") -> None:
        super().__init__(phase, status, reason, detail)
        self.phase = phase
        self.status = status
        self.reason = reason
        self.detail = detail
        self.transient = transient
        self.breaker_class = breaker_class
        self.engine_status = engine_status
        self.engine = engine

    def __reduce__(self) -> Any:
        return (self.__class__, (self.phase, self.status, self.reason, self.detail,
                                 self.transient, self.breaker_class, self.engine_status,
                                 self.engine))

    @classmethod
    def _from_record(cls, record: Mapping[str, Any]) -> "EngineError":
        return cls(**record)

    def __str__(self) -> str:
        return f"{self.phase} leg failed ({self.status} {self.reason}): {self.detail}"

    def __repr__(self) -> str:
        return (f"EngineError(phase={self.phase!r}, status={self.status}, reason={self.reason!r}, "
                f"detail={self.detail!r}, transient={self.transient})")


def _dump(request: Mapping[str, Any]) -> str:
    if not isinstance(request, Mapping):
        raise TypeError(f"request must be a dict, not {type(request).__name__}")
    return json.dumps(request, allow_nan=False, ensure_ascii=False)


def _chunk(item: bytes) -> Optional[Dict[str, Any]]:
    try:
        value = json.loads(item)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _api_key(headers: Optional[Mapping[str, str]]) -> str:
    """The bearer token of `headers`, the only caller header the adapter sends."""
    if not headers:
        return ""
    token = ""
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError("headers must map str to str")
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"header {name!r} has a line break or NUL in its value")
        lower = name.lower()
        if lower in _RESERVED_HEADERS:
            raise ValueError(f"header {name!r} is set by the engine adapter on every leg")
        if lower != "authorization":
            raise ValueError(f"header {name!r} is not supported: the engine adapter sends only "
                             "Authorization: Bearer <token> on the caller's behalf")
        scheme, _, credential = value.partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            raise ValueError("the Authorization header must be 'Bearer <token>'")
        token = credential.strip()
    return token


class _LoopWaker:
    """Completes futures of one asyncio loop when legs become ready.

    The C++ loop thread calls _notify (with the GIL) at most once per drain;
    the drain runs on the asyncio loop through call_soon_threadsafe and
    resolves every ready leg's future at once.
    """

    _by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaker]" = (
        weakref.WeakKeyDictionary())

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop_ref = weakref.ref(loop)
        self._futures: Dict[int, asyncio.Future] = {}
        self._tokens = itertools.count(1)
        ref = weakref.ref(self)
        # The C++ side holds only this function (no reference to the loop or
        # to self), so closed loops are collected.
        self.core = _core.Waker(lambda: _LoopWaker._notify(ref))

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "_LoopWaker":
        waker = cls._by_loop.get(loop)
        if waker is None:
            waker = cls._by_loop[loop] = cls(loop)
        return waker

    @staticmethod
    def _notify(ref: "weakref.ref[_LoopWaker]") -> None:
        waker = ref()
        loop = waker._loop_ref() if waker is not None else None
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(waker._drain)
        except RuntimeError:  # closed meanwhile
            pass

    def _drain(self) -> None:
        for token in self.core.take():
            future = self._futures.pop(token, None)
            if future is not None and not future.done():
                future.set_result(None)

    async def wait(self, call: Any) -> None:
        """Returns once `call` is ready; cancelling the task cancels the leg."""
        token = next(self._tokens)
        future = self._loop_ref().create_future()
        self._futures[token] = future
        try:
            if call.arm(self.core, token):
                return
            await future
        except BaseException:
            call.cancel()
            raise
        finally:
            self._futures.pop(token, None)


def _waker() -> _LoopWaker:
    return _LoopWaker.of(asyncio.get_running_loop())


class _ChunkBuffer:
    """The chunks a decode leg delivered and not yet handed out.

    Shared by DecodeStream and AsyncDecodeStream, which differ only in how
    they wait for the next batch.
    """

    def __init__(self) -> None:
        self._pending: List[bytes] = []
        self._index = 0
        self.finished = False
        self._failure: Optional[Mapping[str, Any]] = None

    def next_chunk(self) -> Optional[Dict[str, Any]]:
        """The next chunk, or None when the batch is used up.

        Once the leg has finished and every chunk was handed out, raises the
        leg's EngineError (once) if it failed.
        """
        while self._index < len(self._pending):
            item = self._pending[self._index]
            self._index += 1
            chunk = _chunk(item)
            if chunk is not None:
                return chunk
        if self.finished and self._failure is not None:
            failure, self._failure = self._failure, None
            raise EngineError._from_record(failure)
        return None

    def refill(self, taken: Any) -> bool:
        """Takes the call's next batch; False when there was nothing new."""
        self._pending, self.finished, self._failure = taken
        self._index = 0
        return bool(self._pending) or self.finished


class DecodeStream(Iterator[Dict[str, Any]]):
    """The chunks of a streaming decode leg, in order (an iterator of dicts).

    Each item is one SSE chunk of the engine's stream as a dict (role and
    usage chunks included; events that are not JSON objects are left out). The
    iterator ends after [DONE]; an engine failure raises EngineError from
    next(). The engine read pauses while chunks wait here unread. close() (or
    dropping the stream, or leaving a `with` block) cancels the leg.
    """

    def __init__(self, call: Any) -> None:
        self._call = call
        self._buffer = _ChunkBuffer()

    def __iter__(self) -> "DecodeStream":
        return self

    def __next__(self) -> Dict[str, Any]:
        while True:
            chunk = self._buffer.next_chunk()
            if chunk is not None:
                return chunk
            if self._buffer.finished:
                raise StopIteration
            self._call.wait(None)
            self._buffer.refill(self._call.take())

    def close(self) -> None:
        """Cancels the leg if it is still running."""
        self._call.cancel()

    def __enter__(self) -> "DecodeStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        call = getattr(self, "_call", None)
        if call is not None:
            call.cancel()


class AsyncDecodeStream(AsyncIterator[Dict[str, Any]]):
    """The async form of DecodeStream: `async for chunk in stream`.

    Waiting never blocks the event loop; cancelling the task that iterates,
    aclose(), or dropping the stream cancels the leg.
    """

    def __init__(self, call: Any) -> None:
        self._call = call
        self._buffer = _ChunkBuffer()

    def __aiter__(self) -> "AsyncDecodeStream":
        return self

    async def __anext__(self) -> Dict[str, Any]:
        while True:
            chunk = self._buffer.next_chunk()
            if chunk is not None:
                return chunk
            if self._buffer.finished:
                raise StopAsyncIteration
            if not self._buffer.refill(self._call.take()):
                await _waker().wait(self._call)

    async def aclose(self) -> None:
        """Cancels the leg if it is still running."""
        self._call.cancel()

    async def __aenter__(self) -> "AsyncDecodeStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._call.cancel()

    def __del__(self) -> None:
        call = getattr(self, "_call", None)
        if call is not None:
            call.cancel()


def _raise_rejection(call: Any) -> None:
    """B3: a handoff refused before any decode request raises at once."""
    failure = call.rejection()
    if failure is not None:
        raise EngineError._from_record(failure)


def _single_response(call: Any) -> Dict[str, Any]:
    items, _, failure = call.take()
    if failure is not None:
        raise EngineError._from_record(failure)
    if len(items) != 1:
        raise EngineError("decode", 502, "invalid_response",
                          "unassemblable decode response: nothing to assemble", False)
    return json.loads(items[0])


class EngineClient:
    """One engine (vLLM with a KV connector, or narwhal-sim) as producer and consumer.

    Args:
      url: the engine's base URL, "http://host:port" (a trailing "/" is
        dropped). A decode on the URL of the handoff's producer is a
        same-worker decode (B5).
      connector: the KV connector this engine runs; a handoff from another
        connector is refused before any decode request (B3).
      first_token_timeout_s: budget from before the decode connection opens to
        the first generated token (B12; metadata chunks do not stop it).
      decode_read_timeout_s: the longest silence between chunks after the
        first token (B13); 0 leaves the stream unbounded.
      headers: extra request headers. The adapter sends one on the caller's
        behalf: "Authorization": "Bearer <token>".
      connect_timeout_s: bound on opening a connection.
      prefill_timeout_s: bound on a prefill leg; None leaves it unbounded.

    Thread-safe: any number of legs at once, from any threads or event loops.
    """

    def __init__(self, url: str, *, connector: str = "NixlConnector",
                 first_token_timeout_s: float = 2.5, decode_read_timeout_s: float = 10.0,
                 headers: Optional[Mapping[str, str]] = None, connect_timeout_s: float = 10.0,
                 prefill_timeout_s: Optional[float] = None) -> None:
        self._core = _core.Client(url, connector, float(first_token_timeout_s),
                                  float(decode_read_timeout_s), float(connect_timeout_s),
                                  None if prefill_timeout_s is None else float(prefill_timeout_s),
                                  _api_key(headers))

    @property
    def url(self) -> str:
        """The engine's base URL."""
        return self._core.url

    @property
    def connector(self) -> str:
        """The KV connector this client decodes for."""
        return self._core.connector

    def __repr__(self) -> str:
        return f"EngineClient({self.url!r}, connector={self.connector!r})"

    # --- blocking -------------------------------------------------------------

    def prefill(self, request: Mapping[str, Any], endpoint: str = "/v1/completions") -> PrefillResult:
        """Runs the prefill leg (B1) on this engine and returns its handoff (B2).

        `request` is the client's OpenAI request for `endpoint`; the producer
        gets it as a non-streaming one-token completion with a fresh
        X-Request-Id. Raises EngineError (phase "prefill") on failure,
        including a 200 without a readable descriptor ("no handoff: ...").
        """
        call = self._core.start_prefill(_dump(request), endpoint)
        call.wait(None)
        result, failure = call.outcome()
        if failure is not None:
            raise EngineError._from_record(failure)
        return result

    def decode(self, result: PrefillResult, request: Mapping[str, Any], *,
               endpoint: Optional[str] = None,
               stream: bool = True) -> Union[DecodeStream, Dict[str, Any]]:
        """Runs the decode leg (B4) on this engine with the handoff `result`.

        `request` is the same client request; the engine gets it with the
        descriptor as kv_transfer_params (removed entirely for a same-worker
        decode, B5), always streaming, with a fresh X-Request-Id. `endpoint`
        defaults to the handoff's. With stream=True returns a DecodeStream of
        chunk dicts; with stream=False waits and returns the assembled
        response dict (text_completion or chat.completion, with usage).

        A handoff the connector rules refuse (B3) raises EngineError at once
        and the engine receives nothing; other failures raise EngineError
        (phase "decode") from the stream, or from this call with stream=False.
        """
        call = self._core.start_decode(result, _dump(request), endpoint, bool(stream))
        _raise_rejection(call)
        if stream:
            return DecodeStream(call)
        call.wait(None)  # a non-streaming leg is ready when it has ended
        return _single_response(call)

    # --- asyncio --------------------------------------------------------------

    async def aprefill(self, request: Mapping[str, Any],
                       endpoint: str = "/v1/completions") -> PrefillResult:
        """prefill() as a coroutine; cancelling its task cancels the leg."""
        call = self._core.start_prefill(_dump(request), endpoint)
        await _waker().wait(call)
        result, failure = call.outcome()
        if failure is not None:
            raise EngineError._from_record(failure)
        return result

    async def adecode(self, result: PrefillResult, request: Mapping[str, Any], *,
                      endpoint: Optional[str] = None,
                      stream: bool = True) -> Union[AsyncDecodeStream, Dict[str, Any]]:
        """decode() as a coroutine.

        With stream=True returns an AsyncDecodeStream (`async for chunk in
        await client.adecode(result, request)`); with stream=False the
        assembled response dict. Cancelling the task cancels the leg.
        """
        call = self._core.start_decode(result, _dump(request), endpoint, bool(stream))
        _raise_rejection(call)
        if stream:
            return AsyncDecodeStream(call)
        waker = _waker()
        while not call.finished:
            await waker.wait(call)
        return _single_response(call)
