"""Rendering of results: figures (``plots``), HTML (``html``) and console tables (``console``)."""
