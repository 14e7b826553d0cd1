"""The one seeded generator of a fill, without importing torch until a decoder draws from it.

The tool's decoders draw from a torch.Generator seeded with DecodeConfig.seed. The model-server kind draws only one
number per sample (the seed it sends to the server), and a fill against a server should not pay for importing torch
(about 2.5 s of a cold run). `Seeded.server_seed` therefore computes that draw itself: the same number
`torch.randint(0, 2**31 - 1, (1,), generator=g)` gives, from the same Mersenne Twister (MT19937) that torch's CPU
generator runs: `manual_seed(s)` seeds it with the low 32 bits of `s` (two's complement for a negative seed), and
the draw is the 64-bit word of two outputs (the first the high half) modulo the bound. The torch.Generator is made on
first use (`Seeded.torch`) and given every draw made before it, so that mixing the two never changes a draw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SERVER_SEED_BOUND = 2**31 - 1  # a server's seed is below this (llama.cpp, vLLM and OpenAI take a 32-bit int)
_N, _M = 624, 397  # MT19937's state words and its twist offset
_MASK = 0xFFFFFFFF


class Seeded:
    """The one generator of a fill: `torch` (a torch.Generator, made on first use) for the decoders, and
    `server_seed` for the model-server kind, which draws exactly what the torch.Generator would."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._generator: torch.Generator | None = None
        self._state: list[int] | None = None  # MT19937's words, made on the first server_seed
        self._next = _N
        self._server_seeds = 0  # how many server seeds were drawn before the torch.Generator was made

    @property
    def torch(self) -> torch.Generator:
        """The torch.Generator seeded with `seed`, at the point the draws made so far left it."""
        if self._generator is None:
            import torch

            generator = torch.Generator().manual_seed(self.seed)
            for _ in range(self._server_seeds):
                torch.randint(0, SERVER_SEED_BOUND, (1,), generator=generator)
            self._generator = generator
        return self._generator

    def server_seed(self) -> int:
        """The next seed for a model server: `int(torch.randint(0, 2**31 - 1, (1,), generator=self.torch))`."""
        if self._generator is not None:
            import torch

            return int(torch.randint(0, SERVER_SEED_BOUND, (1,), generator=self._generator))
        self._server_seeds += 1
        return ((self._word() << 32) | self._word()) % SERVER_SEED_BOUND

    def _word(self) -> int:
        """MT19937's next 32-bit output."""
        if self._state is None:
            state = [self.seed & _MASK]
            for i in range(1, _N):
                state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & _MASK)
            self._state = state
        if self._next >= _N:
            self._twist()
        y = self._state[self._next]
        self._next += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)

    def _twist(self) -> None:
        state = self._state
        assert state is not None
        for i in range(_N):
            y = (state[i] & 0x80000000) | (state[(i + 1) % _N] & 0x7FFFFFFF)
            state[i] = state[(i + _M) % _N] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        self._next = 0
