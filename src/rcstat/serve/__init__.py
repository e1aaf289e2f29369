"""``rcstat serve``: the grounding service (FastAPI + uvicorn) and its page.

* :mod:`.config` — :class:`~rcstat.serve.config.ServeConfig`, every option of the service
  (address, model, token, queue and batch sizes, limits, the grounder's base options);
* :mod:`.batcher` — a bounded queue drained by one worker thread, in batches of at most
  ``max_batch`` requests gathered for at most ``max_wait_ms``;
* :mod:`.worker` — what that thread does: it loads and owns the model, grounds each batch with
  :meth:`~rcstat.grounding.Grounder.ground_many` and attributes;
* :mod:`.app` — :func:`~rcstat.serve.app.create_app` (the endpoints) and
  :func:`~rcstat.serve.app.run` (uvicorn);
* :mod:`.page` — the page at ``/`` (inline CSS and JS, nothing fetched from outside).

This package does no work at import; FastAPI and uvicorn are imported by :mod:`.app` only.
"""
