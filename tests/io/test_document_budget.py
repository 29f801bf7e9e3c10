"""A document's visual-token budget (issue 31 item 2): ``Document(max_tokens=N)`` lowers the dpi,
then keeps the leading pages, and ``plan.documents`` says which.

The oracle is the plan of the Document written out by hand at the dpi and pages the budget chose
(``Document(src, dpi=D, pages=P)``), which tests/io/test_documents.py checks against the family
rule on pypdfium2's page sizes; maximality is checked one step past the choice (dpi D+1, or one
more page), so a budget that picks too low a dpi or too few pages fails.
"""
from __future__ import annotations

import numpy as np
import pytest

import vlmprep
from vlmprep import Document, ImageError
from vlmprep.io.document import DEFAULT_DPI, MIN_BUDGET_DPI

pytest.importorskip("pypdfium2")


@pytest.fixture(scope="module")
def letter5() -> bytes:
    from _support.pdfs import make_pdf
    return make_pdf([(612, 792)] * 4 + [(792, 612)])


def _tokens(proc, data, **kw) -> int:
    return proc.plan(documents=[Document(data, **kw)]).total_tokens


@pytest.mark.parametrize("family", ["qwen2-vl", "internvl", "llava-onevision"])
def test_no_budget_and_within_budget_are_as_is(family, letter5):
    proc = vlmprep.Processor(family, backend="reference")
    full = _tokens(proc, letter5)
    for budget in (None, full):
        plan = proc.plan(documents=[Document(letter5, max_tokens=budget)])
        (dp,) = plan.documents
        assert (dp.fit, dp.dpi, dp.pages, dp.dropped) == ("as-is", DEFAULT_DPI, [0, 1, 2, 3, 4], [])
        assert dp.num_tokens == plan.total_tokens == full and dp.max_tokens == budget


def test_budget_lowers_the_dpi_to_the_highest_that_fits(letter5):
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    full, floor = _tokens(proc, letter5), _tokens(proc, letter5, dpi=MIN_BUDGET_DPI)
    budget = (full + floor) // 2
    plan = proc.plan(documents=[Document(letter5, max_tokens=budget)])
    (dp,) = plan.documents
    assert dp.fit == "dpi" and MIN_BUDGET_DPI < dp.dpi < DEFAULT_DPI and dp.dpi == int(dp.dpi)
    assert dp.pages == [0, 1, 2, 3, 4] and dp.dropped == []
    by_hand = proc.plan(documents=[Document(letter5, dpi=dp.dpi)])
    assert plan.num_tokens == by_hand.num_tokens and dp.num_tokens == by_hand.total_tokens <= budget
    assert [p.source_hw for p in plan.images] == [p.source_hw for p in by_hand.images]
    assert _tokens(proc, letter5, dpi=dp.dpi + 1) > budget  # the highest whole dpi that fits


def test_budget_below_the_floor_keeps_the_leading_pages(letter5):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    per_page = proc.plan(documents=[Document(letter5, dpi=MIN_BUDGET_DPI)]).num_tokens
    order = [4, 0, 1, 2]
    budget = per_page[4] + per_page[0] + per_page[1] // 2  # two pages and a half at the floor
    plan = proc.plan(documents=[Document(letter5, pages=order, max_tokens=budget)])
    (dp,) = plan.documents
    assert (dp.fit, dp.dpi, dp.pages, dp.dropped) == ("pages", MIN_BUDGET_DPI, [4, 0], [1, 2])
    by_hand = proc.plan(documents=[Document(letter5, pages=dp.pages, dpi=MIN_BUDGET_DPI)])
    assert plan.num_tokens == by_hand.num_tokens and dp.num_tokens <= budget
    more = dp.pages + dp.dropped[:1]
    assert _tokens(proc, letter5, pages=more, dpi=MIN_BUDGET_DPI) > budget
    # the batch runs what the plan says: the same pixels as the document written out by hand
    got = proc(documents=[Document(letter5, pages=order, max_tokens=budget)])
    want = proc(documents=[Document(letter5, pages=dp.pages, dpi=MIN_BUDGET_DPI)])
    assert np.array_equal(got.pixel_values.numpy(), want.pixel_values.numpy())
    assert got.num_tokens == want.num_tokens == plan.num_tokens


def test_a_first_page_over_the_budget_is_the_documents_error(letter5):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    plan = proc.plan(documents=[Document(letter5, max_tokens=1)])
    (dp,) = plan.documents
    assert dp.pages == [] and dp.dropped == [0, 1, 2, 3, 4] and dp.error is not None
    assert "max_tokens=1" in str(dp.error) and "document 0" in str(dp.error)
    assert len(plan.images) == 1 and plan.images[0].error is not None
    strict = vlmprep.Processor("qwen2-vl", backend="reference")
    with pytest.raises(ImageError, match="first page to fit max_tokens=1"):
        strict(documents=[Document(letter5, max_tokens=1)])


def test_fixed_size_family_can_only_drop_pages(letter5):
    """SigLIP's tokens do not depend on the page size: lowering the dpi cannot help."""
    proc = vlmprep.Processor("siglip", backend="reference")
    per = proc.plan(documents=[Document(letter5, pages=[0])]).total_tokens
    plan = proc.plan(documents=[Document(letter5, max_tokens=3 * per)])
    (dp,) = plan.documents
    assert (dp.fit, dp.pages, dp.dropped, dp.num_tokens) == ("pages", [0, 1, 2], [3, 4], 3 * per)


def test_stream_and_budget_agree(letter5):
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    doc = Document(letter5, max_tokens=_tokens(proc, letter5, dpi=100))
    plan = proc.plan(documents=[doc])
    parts = list(proc.stream(doc, pages_per_batch=2))
    assert [t for part in parts for t in part.num_tokens] == plan.num_tokens


def test_max_tokens_option_is_checked():
    for bad in (0, -3, 2.5, True, "100"):
        with pytest.raises(ImageError, match="max_tokens"):
            Document(b"%PDF-", max_tokens=bad)


def test_loader_pages_of_takes_the_plans_pages_and_dpi(letter5):
    from vlmprep.loader import pages_of
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    budget = _tokens(proc, letter5, pages=[0, 1], dpi=MIN_BUDGET_DPI)
    got = pages_of(proc, [Document(letter5, max_tokens=budget)])
    assert [(d.pages, d.dpi, d.max_tokens) for d in got] == [([0], MIN_BUDGET_DPI, None),
                                                             ([1], MIN_BUDGET_DPI, None)]
