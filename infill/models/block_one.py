"""A block-diffusion model (infill.models.blockdiff_model.BlockDiffModel) at block size 1, where it is a
left-to-right model: its passes as a CausalEngine (BlockOneEngine) and the model as a left-to-right FIM model
(BlockOneFim, kind "ar"), so beam search, sequential sampling and the one-pass score run it as any code model
(infill.core.kinds.blockdiff's backend hands it those decoders)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from infill.models.autoregressive import WINDOW, CausalFim, shared_prefix
from infill.models.fim import FimTokens, find_fim

if TYPE_CHECKING:
    import torch

    from infill.models.hf_folder import HFTokenizer
    from infill.models.registry import LoadedModel


class BlockOneEngine:
    """infill.models.base.CausalEngine over a block-diffusion model (infill.models.blockdiff_model.BlockDiffModel)
    at block size 1, where it is a left-to-right model: each position predicted after every token before it.

    The network's passes are the block-diffusion model's own: the committed tokens in its block-causal KV cache
    at block size 1 (causal), and the k predictions of one pass from its block-size-1 verify (a mask token at each
    predicted position for position-aligned models, the row before it for right-shifted ones). The cache keeps
    the last sequence's tokens and is cropped to the first that differs; a batch runs one sequence at a time."""

    def __init__(self, bd: Any) -> None:
        self.bd = bd
        self.vocab_size = int(bd.model.config.vocab_size)
        self._tokens: list[int] = []  # the committed tokens of `_state`
        self._state: Any = None  # the KVState whose cache holds `_tokens`
        self.passes = 0  # the block-diffusion model's forward passes

    def forget(self) -> None:
        self._tokens, self._state = [], None

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.bd.model.parameters())

    def rows(self, seqs: Sequence[Sequence[int]], k: int) -> torch.Tensor:
        import torch

        return torch.stack([self._one([int(t) for t in s], k) for s in seqs])  # (B, k, V)

    def _one(self, seq: list[int], k: int) -> torch.Tensor:
        """float32 logits (k, V): the block-size-1 predictions of positions len(seq)-k+1 .. len(seq)."""
        import torch

        bd, start = self.bd, len(seq) - k + 1  # start: the first predicted position, after seq[:start]
        # at least the last clean token is committed again: that one forward also predicts position `start`
        # (fused into the commit for position-aligned models, `next_logits` for right-shifted ones)
        reuse = shared_prefix(self._tokens, seq, start - 1)
        state = self._state
        if state is None or reuse == 0:
            state, reuse = bd.new_state(), 0
        else:
            state.cache.crop(reuse - state.cache.get_seq_length())
            state.length = reuse
        self._tokens, self._state = [], None  # stay empty if a pass fails: the next one starts over
        before = state.nfe
        clean = torch.tensor(seq[reuse:start], dtype=torch.long)  # (start-reuse,)
        mask = torch.tensor([bd.mask_id], dtype=torch.long)  # (1,)
        if k == 1 and not bd.shifted:
            logits = bd.commit(state, clean, 1, draft_ids=mask)  # (1, V)
        else:
            bd.commit(state, clean, 1)
            logits = bd.verify(state, torch.cat([torch.tensor(seq[start:], dtype=torch.long), mask]), 0, k)
        self._tokens, self._state = seq[:start], state
        self.passes += state.nfe - before
        return logits.float()  # (k, V)


class BlockOneFim(CausalFim):
    """A block-diffusion model (infill.models.blockdiff_model.BlockDiffModel) at block size 1 as a left-to-right
    FIM model: the same FIM prompt as its block decoders (infill.decoding.blockfill, no lead), its passes those
    of a BlockOneEngine. So beam search, sequential sampling, prompt-lookup speculation and the one-pass score
    run it as they run any CausalFim. `nfe` counts the block-diffusion model's own passes."""

    def __init__(self, bd: Any, *, fim: FimTokens, end_ids: Iterable[int], banned: Iterable[int], text_vocab: int):
        window = bd.max_positions or WINDOW
        self.blocks = BlockOneEngine(bd)
        super().__init__(self.blocks, fim=fim, end_ids=end_ids, banned=banned, text_vocab=text_vocab, window=window)
        self.bd = bd

    def _run(self, seqs: list[list[int]], k: int) -> torch.Tensor:
        before = self.blocks.passes
        logits = self.engine.rows(seqs, k)
        self.nfe += self.blocks.passes - before  # the block-diffusion model's passes, not the engine's calls
        return logits


def block_size_one(loaded: LoadedModel) -> LoadedModel | None:
    """A loaded block-diffusion model as a left-to-right FIM model (kind "ar", a BlockOneFim), or None when its
    tokenizer has no FIM tokens (its block decoders then prompt it through its chat template)."""
    from infill.models.registry import LoadedModel

    bd = loaded.blockdiff
    tokenizer = cast("HFTokenizer", loaded.tokenizer)  # block-diffusion folders load an HFTokenizer
    fim = find_fim(tokenizer.token_id, f"the tokenizer of {loaded.name!r}")
    if fim is None:
        return None
    ends = set(bd.end_ids) | {i for i in map(tokenizer.token_id, fim.ends) if i is not None}
    banned = {*tokenizer.special_ids(), bd.mask_id}
    view = BlockOneFim(bd, fim=fim, end_ids=ends, banned=banned, text_vocab=tokenizer.size())
    info = {**loaded.info, "block_size": 1, "max_length": view.max_length}
    return LoadedModel(name=loaded.name, kind="ar", model=view, tokenizer=tokenizer, info=info)
