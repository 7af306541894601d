"""HTTP routes, one module per resource; each exposes ``register(app)`` (called by
:func:`proxy.server.app.create_app`).
"""
