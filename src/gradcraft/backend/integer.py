"""Integer arithmetic where NumPy and CuPy differ from PyTorch, written once for either array module
(`xp`: numpy or cupy)."""


def integer_pow(xp, a, b):
    """Integer a ** b with negative exponents as PyTorch computes them (NumPy refuses them): 1 / a^|b|
    truncated, so 1 for a = 1, +-1 for a = -1 (the sign of (-1)^b), 0 for any other base (0 too)."""
    negative = b < 0
    power = xp.power(a, xp.where(negative, 0, b))
    minus_one = xp.where(b % 2 == 0, 1, -1)
    special = xp.where(a == 1, 1, xp.where(a == -1, minus_one, 0)).astype(power.dtype)
    return xp.where(negative, special, power)
