"""narwhal: disaggregated LLM inference, from Python.

The package binds narwhal's C++ engine adapter (the one the router uses):

    from narwhal.engines.client import EngineClient, EngineError
    from narwhal.engines.connector import PrefillResult

See narwhal.engines.client for the API. Internal Python APIs may change
between releases.
"""

import atexit as _atexit

from narwhal import _core

__all__ = ["engines"]
__version__ = "0.1.0"

# The adapter's event-loop thread stops before the interpreter tears down.
_atexit.register(_core.shutdown)
