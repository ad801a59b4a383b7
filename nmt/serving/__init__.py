"""Serving: `nmt-serve`, a checkpoint behind an HTTP API and a page that shows its attention.

    app.py        the route table, the error handlers, the app's life and `serve_main`
    native.py     nmt's own JSON shape (/translate): a body read into one Request, answers written
    score.py      nmt's /score shape
    libretranslate.py  LibreTranslate's API under /libretranslate/
    deepl.py      DeepL's v2 API under /v2/
    glossaries.py DeepL's glossaries, kept per key, found in a request's texts
    files.py      documents uploaded through an API shape, translated and kept until fetched
    memory.py     the translation memory (tm=), read per language pair
    info.py       GET /info: the model, its languages, the limits
    models.py     several models: which translates a pair (a pivot where none does alone),
                  each loaded on first use behind its own Server, at most max_loaded at once
    server.py     the Server: requests admitted, batched and translated (documents through the
                  text loop of nmt.documents.job, driven without blocking); no shape known here
    admission.py  what a request may ask and what it costs
    keys.py       API keys and their limits (characters a period, requests a minute)
    origins.py    which web pages may make the server work (CORS, and a guard before it)
    http.py       bodies, refusals and JSON for every shape
    batching.py   concurrent requests decoded together in one worker thread
    web/          the page: plain HTML, CSS and JavaScript, no build step

docs/serve.md and docs/apis.md are the contract. One `nmt.translation.Translator` per model
serves every request for the model's life; each request's decode settings are passed per call.
A new API shape is one module beside native.py (its JSON in, its answers out, its statuses) and
its routes in app.py.
"""
