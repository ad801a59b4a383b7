"""Serving: `nmt-serve`, a checkpoint behind an HTTP API and a page that shows its attention.

    app.py        the ASGI app, its routes and errors, and `serve_main`
    protocol.py   the JSON of the API: reading a request, writing translations and /info
    batching.py   concurrent requests decoded together in one worker thread
    web/          the page: plain HTML, CSS and JavaScript, no build step

docs/serve.md is the contract. One `nmt.translation.Translator` serves every request for the
server's life; each request's decode settings are passed per call.
"""
