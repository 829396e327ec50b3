"""A part of the report's page: what it shows, its charts and its tables."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go


@dataclasses.dataclass
class Section:
    """One part of the page: what it shows, its charts (id → figure) and its HTML tables."""

    id: str
    title: str
    note: str
    charts: dict[str, go.Figure] = dataclasses.field(default_factory=dict)
    tables: list[str] = dataclasses.field(default_factory=list)
