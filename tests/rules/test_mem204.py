"""MEM204 accumulation-without-loss-scaling: accumulation conditions and scaled losses."""

from rule_helpers import lines

LOOP = """
def train(model, loader, optimizer, crit, accum):
    for i, (x, y) in enumerate(loader):
        {loss}
        loss.backward()
        if {condition}:
            optimizer.step()
            optimizer.zero_grad()
"""


def check(loss: str, condition: str = "(i + 1) % accum == 0") -> list[int]:
    return lines("MEM204", LOOP.format(loss=loss, condition=condition))


def test_raw_loss_with_modulo_condition():
    assert check("loss = crit(model(x), y)") == [5]


def test_negated_modulo_condition():
    assert check("loss = crit(model(x), y)", "not (i + 1) % accum") == [5]


def test_counter_compared_with_accumulation_setting():
    assert check("loss = crit(model(x), y)", "i >= accum") == [5]


def test_division_or_multiplication_or_div_silences():
    assert check("loss = crit(model(x), y) / accum") == []
    assert check("loss = crit(model(x), y) * (1.0 / accum)") == []
    assert check("loss = crit(model(x), y).div(accum)") == []


def test_input_normalisation_does_not_count_as_scaling():
    assert check("x = x / 255.0; loss = crit(model(x), y)") == [5]


def test_unknown_helper_loss_is_not_reported():
    assert check("loss = compute_loss(model, x, y)") == []


def test_step_every_iteration_is_not_accumulation():
    assert check("loss = crit(model(x), y)", "True") == []
