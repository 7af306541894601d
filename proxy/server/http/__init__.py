"""HTTP: the aiohttp application, its middleware, authentication, request parsing and routes."""
