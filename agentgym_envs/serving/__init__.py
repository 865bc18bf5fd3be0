"""``agentgym serve``: an OpenAI-compatible HTTP server for local models.

:mod:`.server` (configuration and the entry point), :mod:`.http_app` (the HTTP layer),
:mod:`.guard` (what a request may carry), :mod:`.api` (request parsing), :mod:`.engine`
(batching and generation), :mod:`.work_queue` (fair admission), :mod:`.prefix_cache`,
:mod:`.reply` and :mod:`.stream` (reply bodies).
"""
