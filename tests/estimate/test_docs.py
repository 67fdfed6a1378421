"""docs/estimator.md's generated tables are what the estimator's data tables say."""

from memlint.estimate import docs


def test_generated_block_matches_the_code():
    text = docs.DOC_PATH.read_text()
    block = text.split(docs.BEGIN, 1)[1].split(docs.END, 1)[0]
    assert block.strip() == docs.generated_block().strip(), "run: python -m memlint.estimate.docs"


def test_every_handler_and_measurement_names_a_source():
    from memlint.estimate.handlers import OP_HANDLERS
    from memlint.estimate.overheads import CONTEXT_MEASUREMENTS
    from memlint.estimate.torch_versions import VERSION_FACTS

    assert all(h.source for h in OP_HANDLERS.values())
    assert all(row.source for row in CONTEXT_MEASUREMENTS)
    assert all(fact.source for fact in VERSION_FACTS)
