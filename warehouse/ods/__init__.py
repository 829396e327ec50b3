"""ODS, the archive: every landed line byte-exact, with lineage and lenient keys."""

from warehouse.sources.canonical import Kind
from warehouse.tables import ODS_FEEDBACK, ODS_REQUESTS, Table

#: The ODS table of each record kind.
ODS_TABLES: dict[Kind, Table] = {"requests": ODS_REQUESTS, "feedback": ODS_FEEDBACK}
