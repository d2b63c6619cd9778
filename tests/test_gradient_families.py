"""`--search gradient` on every workload family: the gradient search really runs, on the prefix prior
(`PriorGradientStrategy`, tune's default model on a CPU) and on its own knob model (`GradientStrategy`,
any other model), and the families that fall back to another search are named here."""

from __future__ import annotations

from typing import Any

import pytest

#: Families whose first workload the knob-model gradient search cannot relax (evolutionary search
#: runs instead). None today: every registry family has tile or categorical decisions it relaxes.
KNOB_FALLBACK: frozenset[str] = frozenset()
#: Families whose first workload the decision space cannot read (the knob model's gradient search
#: runs instead). None today.
PRIOR_FALLBACK: frozenset[str] = frozenset()


def _recorded_pool(search: Any) -> set[Any]:
    """The keys of the knob search's descents (its `_gradient_pool`), recorded as it proposes."""
    pooled: set[Any] = set()
    pool = search._gradient_pool

    def recorded() -> list[Any]:
        ranked = pool()
        pooled.update(k for _, k in ranked)
        return ranked

    search._gradient_pool = recorded
    return pooled


@pytest.mark.slow
def test_every_family_runs_the_gradient_search_or_is_a_named_fallback(host) -> None:
    from autosearch.search.assemble import assemble
    from autosearch.search.gradient.prior_descent import DescentOptions
    from autosearch.search.model_spec import make_scorer
    from autosearch.search.strategies import EvolutionaryStrategy, GradientStrategy, PriorGradientStrategy
    from autosearch.search.tune import TuneSettings
    from autosearch.workloads import families

    gradient, prior = assemble("pretrained-prefix", "gradient", target=host, warn=False)
    settings = TuneSettings(trials=16)
    for fam, wls in families().items():
        knob = gradient.make(wls[0], host, make_scorer("random"), settings)
        if fam in KNOB_FALLBACK:
            assert isinstance(knob, EvolutionaryStrategy) and knob.kind == "evolutionary", fam
        else:
            assert isinstance(knob, GradientStrategy) and knob.kind == "gradient", fam
            pooled = _recorded_pool(knob.search)
            cands = knob.propose(4)
            # every pick is a rounded point of a descent on the knob model (its random share rounds to 0)
            assert len(cands) == 4 and all(knob.search._pending[id(c)] in pooled for c in cands), fam
        on_prior = gradient.make(wls[0], host, prior, settings)
        if fam in PRIOR_FALLBACK:
            assert isinstance(on_prior, GradientStrategy), fam
            continue
        assert isinstance(on_prior, PriorGradientStrategy) and on_prior.kind == "gradient", fam
        on_prior.search.options = DescentOptions(starts=8, steps=10, checkpoints=(5,), screen=64, descend_sketches=2)
        assert len(on_prior.propose(4)) == 4, fam
        # descents ran and gave at least one of the round's picks
        assert on_prior.search.descended[-1] > 0 and on_prior.search.picked[-1] >= 1, fam
