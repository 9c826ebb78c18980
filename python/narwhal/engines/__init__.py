"""narwhal.engines: the engine adapter (EngineClient, PrefillResult, EngineError)."""
