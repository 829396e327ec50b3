"""``strata collect``: an OTLP/HTTP trace receiver that spools what it accepts into the landing zone.

:mod:`.encoding` checks a request body and makes its spool record, and the OTLP/JSON line ODS
keeps; :mod:`.spool` makes records durable before the answer and hands closed segments to the
landing zone unparsed; :mod:`.segments` is their format and their conversion, which ``strata
ingest`` runs; :mod:`.tokens` reads the bearer tokens, and :mod:`.receiver` is the ASGI
application uvicorn serves.
"""
