"""The OpenAI-protocol HTTP layer every masrl server shares (`masrl serve`).

`protocol` holds the request and response shapes, `app` the server: limits,
auth, metrics, streaming, and the `Backend` a server puts behind them.
"""

from masrl.http.app import Backend, ServerSettings, create_app, run, wait_healthy
from masrl.http.protocol import ChatRequest, Completion, HTTPError, ModelCard

__all__ = ["Backend", "ChatRequest", "Completion", "HTTPError", "ModelCard", "ServerSettings", "create_app", "run", "wait_healthy"]
