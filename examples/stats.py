"""Small statistics helpers, used by the README's quick start."""


def mean(values: list[float]) -> float:
    """Return the arithmetic mean of `values`."""
    if not values:
        raise ValueError("mean of an empty list")
    total = sum(values)
    return total / len(values)


def variance(values: list[float]) -> float:
    """Return the population variance of `values`."""
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)
