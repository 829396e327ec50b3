"""Realistic, deterministic AI-service request logs with exact ground truth.

``generate(out, days=…, requests_per_day=…, seed=…, start=…, fault_rate=…)`` writes hourly
gzip JSON-lines request files, delayed feedback files, a price table, tenant quotas and a
manifest that states exactly what was written (counts, duplicates, fault lines, abusive users).
"""

from warehouse.sources.generator.faults import FAULT_KINDS
from warehouse.sources.generator.dataset import generate
from warehouse.sources.generator.manifest import GENERATOR_VERSION

__all__ = ["FAULT_KINDS", "GENERATOR_VERSION", "generate"]
