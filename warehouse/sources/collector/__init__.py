"""``strata collect``: an OTLP/HTTP trace receiver that spools what it accepts into the landing zone.

:mod:`.encoding` turns a request body into the OTLP/JSON line ODS keeps, :mod:`.spool` makes it
durable before the answer and hands closed segments to the landing zone, :mod:`.tokens` reads
the bearer tokens, and :mod:`.receiver` is the ASGI application uvicorn serves.
"""
