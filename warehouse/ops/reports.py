"""The HTML reports kept in the lake: ``<lake>/reports/``, beside the tables, on a local disk or ``s3://``.

A scheduled task's local folder is lost with its worker, so the daily report is written where every
reader of the lake finds it, through the lake's own filesystem (pyarrow's, configured from the settings
as the tables' is). A page names users by pseudonym (the riskiest ones), so ``forget`` deletes every page
that names the user's (:func:`drop_naming`); the next daily run writes the page again without them.
"""

from __future__ import annotations

import datetime as dt

import pyarrow.fs as pafs

from warehouse.settings import Settings
from warehouse.storage.objectstore import filesystem, is_object_store

#: The folder of the reports, under the lake root.
FOLDER = "reports"


def report_name(start: dt.date, end: dt.date) -> str:
    """The file name of the report of ``start`` … ``end``: ``strata-report-<start>-to-<end>.html``."""
    return f"strata-report-{start}-to-{end}.html"


def report_uri(settings: Settings, start: dt.date, end: dt.date) -> str:
    """Where the report of ``start`` … ``end`` lives in the lake (a path or an ``s3://`` URI)."""
    return f"{settings.lake_uri.rstrip('/')}/{FOLDER}/{report_name(start, end)}"


def write_report(settings: Settings, start: dt.date, end: dt.date, page: bytes) -> str:
    """Write (replace) the report of ``start`` … ``end`` in the lake; returns its URI. A reader never
    sees half a page: an object store's PUT is visible only once complete, a local file is renamed into place."""
    uri = report_uri(settings, start, end)
    fs, path = filesystem(settings, uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    staged = path if is_object_store(uri) else f"{path}.tmp"
    with fs.open_output_stream(staged) as out:
        out.write(page)
    if staged != path:
        fs.move(staged, path)
    return uri


def drop_naming(settings: Settings, text: str) -> int:
    """Delete every report whose page holds ``text`` (a pseudonym ``forget`` removes); returns how many."""
    fs, root = filesystem(settings, settings.lake_uri)
    selector = pafs.FileSelector(f"{root.rstrip('/')}/{FOLDER}", allow_not_found=True)
    dropped = 0
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        with fs.open_input_stream(info.path) as stream:
            named = text.encode() in stream.read()
        if named:
            fs.delete_file(info.path)
            dropped += 1
    return dropped
