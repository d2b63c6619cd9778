"""The records database (SQLite) and conversion to/from MetaSchedule's JSON database."""

from autosearch.store.db import (
    SCHEMA_VERSION,
    STATUSES,
    FeatureRow,
    MeasurementRecord,
    MeasurementRow,
    Store,
    WorkloadRecord,
    WorkloadRow,
    schedule_hash,
)

__all__ = [
    "SCHEMA_VERSION",
    "STATUSES",
    "FeatureRow",
    "MeasurementRecord",
    "MeasurementRow",
    "Store",
    "WorkloadRecord",
    "WorkloadRow",
    "schedule_hash",
]
