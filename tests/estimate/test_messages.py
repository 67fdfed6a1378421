"""One-line error text from exceptions."""

from memlint.estimate.messages import MAX_MESSAGE_CHARS, first_line, one_line


def test_only_the_first_line_is_kept_and_it_is_bounded():
    exc = RuntimeError("shape mismatch\n  at frame 1\n  at frame 2")
    assert one_line(exc) == "RuntimeError: shape mismatch"
    assert len(first_line(ValueError("x" * 1000))) == MAX_MESSAGE_CHARS


def test_an_empty_message_gives_the_type_alone():
    assert one_line(KeyError()) == "KeyError" and first_line(KeyError()) == ""
