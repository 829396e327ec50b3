"""``strata collect``: an OTLP/HTTP trace receiver that spools what it accepts into the landing zone.

:mod:`.encoding` checks a request body and makes its spool record, then (off the request path) the
OTLP/JSON line ODS keeps; :mod:`.spool` makes records durable before the answer and converts
closed segments into the landing zone; :mod:`.tokens` reads
the bearer tokens, and :mod:`.receiver` is the ASGI application uvicorn serves.
"""
