"""Feature extractors: what a cost model reads of a candidate schedule.

Each extractor has a (name, version) id that is stored with every feature row, so a model says
exactly which features it was trained on.
"""

__all__: list[str] = []
