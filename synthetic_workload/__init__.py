"""Realistic, deterministic AI-service request logs with exact ground truth.

``generate(out, days=…, requests_per_day=…, seed=…, start=…, fault_rate=…)`` writes hourly
gzip JSON-lines request files, delayed feedback files, a price table, tenant quotas and a
manifest that states exactly what was written (counts, duplicates, fault lines, abusive users).
"""

from synthetic_workload.dataset import generate
from synthetic_workload.faults import FAULT_KINDS
from synthetic_workload.manifest import GENERATOR_VERSION

__all__ = ["FAULT_KINDS", "GENERATOR_VERSION", "generate"]
