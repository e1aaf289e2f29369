"""``/docs`` offline: FastAPI's Swagger UI page with its script and style sheet served by the
service itself, from the ``swagger-ui-bundle`` package (the service runs offline; FastAPI's own
page loads them from a CDN)."""

from __future__ import annotations

from typing import Any

__all__ = ["ASSETS", "add_api_docs"]

#: Where the service serves Swagger UI's files.
ASSETS = "/docs-assets"


def add_api_docs(app: Any, title: str) -> None:
    """Serve Swagger UI for ``app``'s OpenAPI schema at ``/docs``, every file from
    :data:`ASSETS` (``app`` made with ``docs_url=None``)."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url,
            title=f"{title}: API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
