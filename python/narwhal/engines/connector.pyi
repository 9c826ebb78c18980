"""Type stubs of narwhal.engines.connector."""

from typing import Any, Dict

class PrefillResult:
    """The KV handoff of one prefill leg (B2); built only by EngineClient.prefill()."""

    @property
    def producer_url(self) -> str:
        """URL of the producer engine that ran the prefill leg."""
    @property
    def endpoint(self) -> str:
        """"/v1/completions" or "/v1/chat/completions"."""
    @property
    def backend_request_id(self) -> str:
        """The X-Request-Id of the prefill leg."""
    @property
    def connector(self) -> str:
        """The KV connector the descriptor is for."""
    @property
    def age(self) -> float:
        """Seconds since the producer leg started (B7)."""
    def parameters(self) -> Dict[str, Any]:
        """A new dict holding the descriptor on every call (B6)."""

__all__ = ["PrefillResult"]
