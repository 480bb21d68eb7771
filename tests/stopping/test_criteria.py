"""The pure token-level checks, each at its boundary."""
from haltwise.stopping import criteria
from haltwise.stopping.termination import Reason


def test_limits_are_hard_gates_at_exactly_the_limit():
    assert criteria.check_max_tokens(4, 5) is None
    assert criteria.check_max_tokens(5, 5) is Reason.MAX_TOKENS
    assert criteria.check_max_tokens(10**6, None) is None
    assert criteria.check_context_limit(6, 3, 10) is None
    assert criteria.check_context_limit(6, 4, 10) is Reason.CONTEXT_LIMIT


def test_token_checks():
    assert criteria.check_stop_token(3, frozenset({3})) is Reason.STOP_TOKEN
    assert criteria.check_stop_token(4, frozenset({3})) is None
    assert criteria.check_eos(2, frozenset({0, 2}), ignore_eos=False) is Reason.EOS
    assert criteria.check_eos(2, frozenset({0, 2}), ignore_eos=True) is None
    assert criteria.check_repetition(3) is Reason.REPETITION and criteria.check_repetition(None) is None


def test_system_checks_and_min_tokens_gate():
    assert criteria.check_deadline(9.9, 10.0) is None and criteria.check_deadline(10.0, 10.0) is Reason.TIMEOUT
    assert criteria.check_deadline(1e9, None) is None
    assert criteria.check_cancelled(True) is Reason.CANCELLED and criteria.check_cancelled(False) is None
    assert not criteria.content_checks_active(2, 3) and criteria.content_checks_active(3, 3)
