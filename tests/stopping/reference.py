"""Brute-force references shared by the stopping tests."""


def brute_period(toks, max_period, min_repeats, min_tokens):
    """Smallest p such that the longest p-periodic tail has >= min_repeats copies and >= min_tokens."""
    for p in range(1, max_period + 1):
        if len(toks) < p:
            break
        length = p
        while length < len(toks) and toks[-1 - length] == toks[-1 - length + p]:
            length += 1
        if length >= min_repeats * p and length >= min_tokens:
            return p
    return None
