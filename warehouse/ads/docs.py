"""The ADS documentation site: ``dbt docs generate`` as one static page under STRATA_HOME.

The page (``$STRATA_HOME/ads/docs/index.html``, dbt's ``--static`` build: manifest and
catalog inside, openable from disk, two template leftovers fixed so a browser loads nothing broken)
shows every model with its grain, its documented
columns and their types, the tests, and the lineage from the lake's sources to the marts.
When ``dwd.request`` exists, the models are first created empty (``dbt run --empty``, a few
milliseconds each) so the catalog holds the database's own column types; the run itself
happens in a run folder like a build's and is removed after.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from warehouse.ads.build import freshness_sla_hours, read_sources
from warehouse.ads.project import PROJECT_DIR, invoke, new_run
from warehouse.progress import Progress
from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_REQUEST

#: What the site is made of, copied next to the page (the page needs only itself).
_SITE_FILES = ("manifest.json", "catalog.json")


def docs_dir(settings: Settings) -> Path:
    """Where the site lives: ``$STRATA_HOME/ads/docs``."""
    return settings.home / "ads" / "docs"


#: Two leftovers of dbt's page templates that a browser tries to load as URLs before (or instead of) their
#: interpolation, each a console error: the menu icons' ``<use xlink:href="{{ getIcon(…) }}">`` (AngularJS
#: sets an ``ng-attr-`` attribute only once it is interpolated), and a favicon link whose ``${require(…)}`` the
#: page's bundler never replaced (an empty ``data:`` URL: no request at all).
_TEMPLATE_LEFTOVERS = (
    ('<use xlink:href="{{ getIcon(', '<use ng-attr-xlink:href="{{ getIcon('),
    ("href=\"${require('./assets/favicons/favicon.ico')}\"", 'href="data:,"'),
)


def offline(page: str) -> str:
    """dbt's static page without the template leftovers that make a browser load broken URLs."""
    for leftover, fixed in _TEMPLATE_LEFTOVERS:
        page = page.replace(leftover, fixed)
    return page


def generate(settings: Settings, *, project_dir: Path = PROJECT_DIR, progress: Progress | None = None) -> Path:
    """Generate the site and return the path of its page; ``progress`` hears of each model created
    empty and of the catalog (a few seconds each: dbt's start and the catalog's queries)."""
    run = new_run(settings, "docs")
    shapes = read_sources(Lake(settings))
    sources = shapes.present
    variables: dict[str, object] = {"days": [], "freshness_sla_hours": freshness_sla_hours(), **shapes.variables()}

    def report(what: str, done: int, total: int) -> None:
        if progress is not None:
            progress(what, done, total)

    if DWD_REQUEST in sources:
        report("dbt run --empty", 0, 1)  # dbt starts (seconds) before its first model says so
        invoke(
            settings, ["run", "--empty"], run, variables, sources=sources, project_dir=project_dir, progress=progress
        )
    report("dbt docs generate", 0, 1)
    invoke(settings, ["docs", "generate", "--static"], run, variables, sources=sources, project_dir=project_dir)
    report("dbt docs generate", 1, 1)
    target = docs_dir(settings)
    target.mkdir(parents=True, exist_ok=True)
    for name in _SITE_FILES:
        shutil.copyfile(run.target_path / name, target / name)
    page = target / "index.html"
    staged = target / "index.html.tmp"
    staged.write_text(offline((run.target_path / "static_index.html").read_text(encoding="utf-8")), encoding="utf-8")
    os.replace(staged, page)  # a reader never sees half a page
    run.remove()
    return page
