"""Every flow of :mod:`conformance.flows` on every engine variant gives the reference's
per-timestamp output multiset, timestamp-sorted (DESIGN.md, Semantics, "Determinism").

The default run draws a few random inputs (and, for elastic variants, random
``reconfigure`` schedules) per (flow, variant); the ``slow`` run draws hundreds of schedules.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .contract import Variant, assert_same_as_reference, require, variant_params
from .flows import FLOWS, FlowCase, n_tuples


def check_examples(variant: Variant, flows: list[FlowCase], examples: int, key: str) -> None:
    """``examples`` random (flow, inputs, options) of ``variant`` against the reference."""
    cases = st.sampled_from(flows).flatmap(lambda c: st.tuples(st.just(c), c.inputs))

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases, st.data())
    def check(case_inputs: tuple[FlowCase, list], data: st.DataObject) -> None:
        case, inputs = case_inputs
        options = variant.draw_options(data, n_tuples(inputs))
        assert_same_as_reference(lambda: case.build(inputs), variant.engine,
                                 reference_options=case.reference_options, **options)

    # one example database entry per test id, not one for every call of this function
    check._hypothesis_internal_add_digest = key.encode()
    check()


@pytest.mark.parametrize("variant", variant_params())
@pytest.mark.parametrize("case", FLOWS, ids=lambda c: c.name)
def test_flow_conforms(case: FlowCase, variant: Variant) -> None:
    require(variant)
    check_examples(variant, [case], variant.examples, f"flow:{case.name}:{variant.id}")


def _many(v: Variant) -> int:
    if v.max_parallelism is not None:
        return 200 if "processes" not in str(v.options) else 20  # hundreds of schedules
    return 10 if v.engine == "spark" or "processes" in str(v.options) else 40


@pytest.mark.slow
@pytest.mark.parametrize("variant", variant_params())
def test_hundreds_of_random_examples(variant: Variant) -> None:
    require(variant)
    check_examples(variant, FLOWS, _many(variant), f"many:{variant.id}")
