"""The KV connector side of a handoff: PrefillResult.

A PrefillResult (B2) binds the backend-owned KV handoff descriptor (the
prefill response's kv_transfer_params) to the producer that issued it: its
URL, the endpoint, the backend request id and the connector. It is built only
by EngineClient.prefill() / aprefill() and is immutable: pass it unchanged to
EngineClient.decode(). parameters() returns a new dict each call, so
inspecting or editing it never changes what a decode sends (B6).

Attributes: producer_url, endpoint, backend_request_id, connector, age
(seconds since the producer leg started, B7). repr() shows those and the
descriptor's engine id and block count, never request content.
"""

from narwhal._core import PrefillResult

__all__ = ["PrefillResult"]
