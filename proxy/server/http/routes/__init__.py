"""HTTP routes, one module per resource; each exposes ``register(app)`` (called by
:func:`proxy.server.http.app.create_app`).
"""
