"""A cached forward for any-subset decoding: the prompt (and every decoded token) is computed once.

Why it is exact (docs/decoding.md, "The prompt cache"): under the AS-ARM masks a prompt row attends only to the
prompt, and a decoded masked row of rank r only to the prompt and ranks < r (plus its own content). So once a
token is fixed, its content-stream state at every layer never changes again. Each layer's keys and values of
those "committed" rows are kept in preallocated buffers; a pass then computes only
  - the content rows of newly decoded tokens (appended to the buffers, rank-causal among themselves),
  - for verify, the content rows of the k drafts (written after the committed rows, not committed),
  - the query stream of the k targets,
each with the layer functions of infill.models.twostream (the same code that trains the model).

Accepted drafts are committed for free: a verify pass leaves the drafts' keys and values right after the
committed rows, and they are exactly the rows a commit of those tokens would compute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from infill.models.twostream import TwoStreamXLNet


class XLNetKVCache:
    """Keys/values of committed rows for one fill: the prompt, then masked positions in rank order.

    `logits(...)` is a drop-in for the full forward. The cache is keyed by (N, masked positions, prompt tokens);
    committed masked tokens that differ from the call's `ids` (a new sample of the same problem) truncate it back
    to the longest common prefix, which stays valid because rank r only sees ranks < r.
    """

    def __init__(self, net: TwoStreamXLNet) -> None:
        self.net = net
        self.layers = net.layers()
        self.prefills = 0  # prompt passes (one per new problem)
        self.reused = 0  # draft rows committed from a verify pass (for tests and benchmarks)
        self._key: tuple[int, tuple[int, ...]] | None = None
        self._prompt_ids: torch.Tensor | None = None
        self._N = 0
        self._R = 0  # committed rows
        self._keys: torch.Tensor | None = None  # (L, n, N, dh) head-major; rows 0.._R-1 committed
        self._values: torch.Tensor | None = None  # (L, n, N, dh)
        self._pos: torch.Tensor | None = None  # (N,) positions of the rows
        self._tokens: list[int] = []  # committed masked tokens, rank order
        self._n_prompt = 0
        self._kr: list[torch.Tensor] = []  # per layer (2N - 1, n, dh): relative keys by distance
        # drafts whose rows the last verify pass left at _R..: (committed tokens then, draft tokens)
        self._stash: tuple[list[int], list[int]] | None = None

    # --- cache maintenance ------------------------------------------------------------------------

    def _reset(self, ids: torch.Tensor, masked: torch.Tensor) -> None:
        import torch

        N = ids.shape[0]
        s = self.net.shape
        prompt = torch.ones(N, dtype=torch.bool, device=ids.device)
        prompt[masked] = False
        p_pos = prompt.nonzero().squeeze(-1)  # (P,)
        self._key = (N, tuple(masked.tolist()))
        self._prompt_ids = ids[p_pos].clone()
        self._N = N
        self._kr = [self.net.relative_keys(layer, N, ids.device) for layer in self.layers]
        shape = (len(self.layers), s.n_head, N, s.d_head)
        self._keys = torch.empty(shape, device=ids.device)
        self._values = torch.empty(shape, device=ids.device)
        self._pos = torch.empty(N, dtype=torch.long, device=ids.device)
        self._R = 0
        self._tokens = []
        self._stash = None
        self._n_prompt = p_pos.shape[0]
        P = p_pos.shape[0]
        self._rows(ids[p_pos], p_pos, torch.ones(P, P, dtype=torch.bool, device=ids.device))
        self._R = P
        self.prefills += 1

    def _rows(self, tokens: torch.Tensor, pos: torch.Tensor, within: torch.Tensor) -> None:
        """Compute content rows (G,) for `tokens` at `pos` and write their keys/values at _R.._R+G-1 of every
        layer (not committed: _R is unchanged). `within` (G, G) says which new rows see which; every row sees
        the committed rows."""
        import torch

        from infill.models.twostream import NEG

        assert self._keys is not None and self._values is not None and self._pos is not None
        R, G = self._R, tokens.shape[0]
        self._pos[R : R + G] = pos
        k_pos = self._pos[: R + G]
        rel = ((self._N - 1) - (pos[:, None] - k_pos[None, :]))[None]  # (1, G, R+G)
        neg = torch.zeros(1, G, R + G, device=tokens.device)
        neg[0, :, R:] = (~within).to(neg.dtype) * -NEG
        h = self.net.transformer.word_embedding(tokens)  # (G, d)
        last = len(self.layers) - 1
        for li, layer in enumerate(self.layers):
            if li < last:
                q, k, v = layer.project(h, "qkv").unbind(-3)  # each (G, n, dh)
            else:  # the last layer's content rows feed nothing: keys and values only
                k, v = layer.project(h, "kv").unbind(-3)
            self._keys[li, :, R : R + G] = k.transpose(0, 1)
            self._values[li, :, R : R + G] = v.transpose(0, 1)
            if li < last:
                kt, vh = self._heads(li, R + G)
                h = layer.ff(layer.attend(h[None], q[None], kt, vh, self._kr[li], rel, neg)[0])

    def _heads(self, li: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer li's first `width` keys as (n, 1, dh, width) and values as (n, 1, width, dh): views."""
        assert self._keys is not None and self._values is not None
        return self._keys[li, :, None, :width].transpose(-1, -2), self._values[li, :, None, :width]

    def _commit(self, tokens: torch.Tensor, pos: torch.Tensor) -> None:
        """Append decoded rows (rank-causal among themselves) to the cache."""
        import torch

        G = tokens.shape[0]
        self._rows(tokens, pos, torch.ones(G, G, dtype=torch.bool, device=tokens.device).tril())
        self._R += G
        self._stash = None  # the rows after _R were overwritten

    def _sync(self, ids: torch.Tensor, masked: torch.Tensor, n: int) -> None:
        """Make the cache hold exactly the prompt + masked[:n] with the tokens in `ids`."""
        import torch

        key = (ids.shape[0], tuple(masked.tolist()))
        prompt_ok = self._key == key and self._prompt_ids is not None
        if prompt_ok:
            prompt = torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
            prompt[masked] = False
            prompt_ok = torch.equal(ids[prompt], self._prompt_ids)  # type: ignore[arg-type]
        if not prompt_ok:
            self._reset(ids, masked)
        want = ids[masked[:n]].tolist()
        keep = 0
        while keep < min(len(self._tokens), n) and self._tokens[keep] == want[keep]:
            keep += 1
        if keep < len(self._tokens):  # a different continuation: drop the rows after the common prefix
            self._R = self._n_prompt + keep
            self._tokens = self._tokens[:keep]
            self._stash = None
        if keep < n and self._stash is not None and self._stash[0] == self._tokens:
            drafts = self._stash[1]
            m = 0
            while keep + m < n and m < len(drafts) and drafts[m] == want[keep + m]:
                m += 1
            if m > 0:  # accepted drafts: the verify pass computed their rows with this same context
                self._R += m
                self._tokens.extend(want[keep : keep + m])
                self.reused += m
                keep += m
        self._stash = None
        if keep < n:
            new = masked[keep:n]
            self._commit(ids[new], new)
            self._tokens.extend(want[keep:])

    # --- the pass ---------------------------------------------------------------------------------

    def logits(
        self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool
    ) -> torch.Tensor:
        """(k, V) logits at `targets` = masked[n:n+k]: draft (targets see prompt + masked[:n]) or verify
        (the drafts written at the targets are seen by later targets)."""
        import torch

        from infill.models.twostream import NEG

        self._sync(ids, masked, n)
        assert self._keys is not None and self._values is not None and self._pos is not None
        R, k = self._R, targets.shape[0]
        g = self.net.transformer.mask_emb[0].expand(k, -1)  # (k, d) the query stream starts from mask_emb
        neg: torch.Tensor | None = None  # draft: every target sees every committed row
        if verify:  # the drafts' content rows go right after the committed rows
            tri = torch.ones(k, k, dtype=torch.bool, device=ids.device)
            self._rows(ids[targets], targets, tri.tril())  # drafts see earlier drafts and themselves
            self._stash = (list(self._tokens), ids[targets].tolist())
            width = R + k
            neg = torch.zeros(1, k, width, device=ids.device)
            neg[0, :, R:] = (~tri.tril(-1)).to(neg.dtype) * -NEG  # targets see earlier drafts only
        else:
            width = R
        rel = ((self._N - 1) - (targets[:, None] - self._pos[None, :width]))[None]  # (1, k, width)
        for li, layer in enumerate(self.layers):
            q = layer.project(g, "q").squeeze(-3)  # (k, n, dh)
            kt, vh = self._heads(li, width)
            g = layer.ff(layer.attend(g[None], q[None], kt, vh, self._kr[li], rel, neg)[0])
        out: torch.Tensor = self.net.lm_loss(g)  # (k, V)
        return out
