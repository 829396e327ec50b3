"""The one progress protocol of long work (ingest, builds, the generator, materialization), and its log.

Strata's code logs through ``logging.getLogger("strata." + __name__)`` (``strata.<package>.<module>``;
the CLI's own modules are ``strata.*`` already): INFO for what a person watching a step should see
(what it works on, its progress, its counts), DEBUG for detail. It never configures logging: the
application does (the CLI, an Airflow task). Counts, dates, table and file names are logged; never
a secret, a raw line, a payload or a user id, raw or pseudonymized.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``, called as work advances: ``what`` names the table or
file being worked on, ``done`` and ``total`` count rows, lines or files."""


@dataclass
class _Seen:
    """How far one ``what`` had come when it was last logged at INFO, and when."""

    done: int
    at: float


def logged(
    log: logging.Logger,
    label: str,
    forward: Progress | None = None,
    *,
    share: float = 0.1,
    every_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> Progress:
    """Progress that logs as it goes and passes every call on to ``forward`` (a progress bar), if any.

    Each ``what`` is logged at INFO when it starts (or starts over), when it is done, and in between each time another
    ``share`` of its total is done, though not within ``every_s`` seconds of its last line: a few lines
    per table however often the work reports, so a scheduler's task log shows a long step as it runs.
    Every other call is logged at DEBUG. Lines read ``<label>: <what> <done> of <total> (<percent>)``.
    """
    seen: dict[str, _Seen] = {}

    def step(what: str, done: int, total: int) -> None:
        if forward is not None:
            forward(what, done, total)
        now = clock()
        last = seen.get(what)
        finished = total > 0 and done >= total
        due = (
            last is None
            or done < last.done
            or finished
            or (total > 0 and done - last.done >= share * total and now - last.at >= every_s)
        )
        if due:
            seen[what] = _Seen(done, now)
        level = logging.INFO if due else logging.DEBUG
        if not log.isEnabledFor(level):
            return
        percent = f" ({done / total:.0%})" if total > 0 else ""
        log.log(level, "%s: %s %s of %s%s", label, what, f"{done:,}", f"{total:,}", percent)

    return step
