"""A cached forward for any-subset decoding: the prompt (and every decoded token) is computed once.

Why it is exact (docs/decoding.md, "The prompt cache"): under the AS-ARM masks a prompt row attends only to the
prompt, and a decoded masked row of rank r only to the prompt and ranks < r (plus its own content). So once a
token is fixed, its content-stream state at every layer never changes again. Each layer's keys and values of
those "committed" rows are kept in preallocated buffers; a pass then computes only
  - the content rows of newly decoded tokens (appended to the buffers, rank-causal among themselves),
  - for verify, the content rows of the k drafts (written after the committed rows, not committed),
  - the query stream of the k targets,
with the layer functions of infill.models.twostream (the same code that trains the model), in one module,
`CachedPass`, a function of tensors: the eager engine runs it with the buffers written in place, and the ONNX
Runtime engine (infill.models.onnx) runs a graph exported from it.

One pass, one trip through the weights. The new content rows and the query rows are different rows of the
same layer: they are stacked and go through each projection, attention and feed-forward product together,
each row with its own visibility. On a CPU a pass of a few rows is bound by reading the weights from memory,
so stacking the two streams costs about one stream's time instead of two.

Accepted drafts are committed for free: a verify pass leaves the drafts' keys and values right after the
committed rows, and they are exactly the rows a commit of those tokens would compute.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from infill.models.twostream import NEG, TwoStreamXLNet


class CachedPass(nn.Module):
    """One cached pass as a function of tensors: the layer loop every engine runs (eagerly, as this module; the
    ONNX graph of infill.models.onnx is exported from it).

    tokens (G,) long: the new content rows; queries (k,): only its length is read (k query rows, `mask_emb`);
    keys, values: per layer (n, dh, N) and (n, N, dh), the cache's buffers (keys transposed, as the products take
    them), whole: rows not committed are masked, and must be finite (zeros or stale rows); kr: per layer
    (n, dh, P) relative keys by distance, transposed; rel (G+k, N+G) long index into kr of each (row, key)
    distance; neg (G+k, N+G) additive mask (0 or -1e30), over the buffer's rows then the new rows. The buffers
    are attended as they are, with the new rows as a second block of keys, so no pass copies them. Returns
    (logits (k, V), new_k (L, n, dh, G), new_v (L, n, G, dh)): the query rows' logits and the new rows' keys and
    values (the caller writes them into the buffers).
    """

    def __init__(self, net: TwoStreamXLNet) -> None:
        super().__init__()
        self.net = net

    def forward(
        self,
        tokens: torch.Tensor,
        queries: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        kr: list[torch.Tensor],
        rel: torch.Tensor,
        neg: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        G, k = tokens.shape[0], queries.shape[0]
        tr = self.net.transformer
        x = torch.cat([tr.word_embedding(tokens), tr.mask_emb[0].expand(k, -1)])  # (G+k, d)
        layers = self.net.layers()
        last = len(layers) - 1
        new_k, new_v = [], []
        for li, layer in enumerate(layers):
            q, key, value = layer.project(x, "qkv").unbind(-3)  # each (G+k, n, dh): one product for both streams
            key_n, value_n = key[:G].permute(1, 2, 0), value[:G].transpose(0, 1)  # (n, dh, G), (n, G, dh)
            new_k.append(key_n)
            new_v.append(value_n)
            kt = (keys[li][:, None], key_n[:, None])  # (n, 1, dh, N), (n, 1, dh, G)
            vh = (values[li][:, None], value_n[:, None])  # (n, 1, N, dh), (n, 1, G, dh)
            rows = slice(G, G + k) if li == last else slice(0, G + k)  # the last layer's content rows feed nothing
            x = layer.ff(
                layer.attend(x[rows][None], q[rows][None], kt, vh, kr[li], rel[None, rows], neg[None, rows])[0]
            )
        return self.net.lm_loss(x), torch.stack(new_k), torch.stack(new_v)


# What runs CachedPass (its arguments and results as there): the module itself, or infill.models.onnx.OnnxPass.
PerLayer = list[torch.Tensor]
Engine = Callable[
    [torch.Tensor, torch.Tensor, PerLayer, PerLayer, PerLayer, torch.Tensor, torch.Tensor],
    tuple[torch.Tensor, torch.Tensor, torch.Tensor],
]


class XLNetKVCache:
    """Keys/values of committed rows for one fill: the prompt, then masked positions in rank order.

    `logits(...)` is a drop-in for the full forward. The cache is keyed by (N, masked positions, prompt tokens);
    committed masked tokens that differ from the call's `ids` (a new sample of the same problem) truncate it back
    to the longest common prefix, which stays valid because rank r only sees ranks < r. `engine` runs the passes
    (CachedPass, eager, by default; infill.models.onnx.OnnxPass runs the same pass as an ONNX graph).
    """

    def __init__(self, net: TwoStreamXLNet, engine: Engine | None = None) -> None:
        self.net = net
        self.layers = net.layers()
        self.engine: Engine = engine if engine is not None else CachedPass(net)
        self.prefills = 0  # prompt passes (one per new problem)
        self.reused = 0  # draft rows committed from a verify pass (for tests and benchmarks)
        self._key: tuple[int, tuple[int, ...]] | None = None
        self._prompt_ids: torch.Tensor | None = None
        self._N = 0
        self._R = 0  # committed rows
        self._keys: torch.Tensor | None = None  # (L, n, dh, N) rows 0.._R-1 committed, the rest finite
        self._values: torch.Tensor | None = None  # (L, n, N, dh)
        self._pos: torch.Tensor | None = None  # (N,) positions of the rows
        self._tokens: list[int] = []  # committed masked tokens, rank order
        self._n_prompt = 0
        self._kr: list[torch.Tensor] = []  # per layer (n, dh, 2N - 1): relative keys by distance, transposed
        self._kr_of: tuple[int, torch.device] | None = None  # the (N, device) they were computed for
        # drafts whose rows the last verify pass left at _R..: (committed tokens then, draft tokens)
        self._stash: tuple[list[int], list[int]] | None = None
        # beam search's rows that are not committed (draft_many), kept for the problem: the row of the decoded
        # tokens ranks 0..r (a path) by that path; keys (L, n, dh, cap), values (L, n, cap, dh), positions (cap,)
        self._branch: dict[tuple[int, ...], int] = {}
        self._bk: torch.Tensor | None = None
        self._bv: torch.Tensor | None = None
        self._bpos: torch.Tensor | None = None
        self._bn = 0  # rows of the store in use
        self.branch_rows = 0  # rows computed for the branches (for tests and benchmarks)

    # --- the fused pass ---------------------------------------------------------------------------

    def _pass(
        self,
        tokens: torch.Tensor,
        pos: torch.Tensor,
        targets: torch.Tensor,
        sees: torch.Tensor,
        bidirectional: bool = False,
        within: torch.Tensor | None = None,
        branches: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Content rows for `tokens` (G,) at `pos` (G,), rank-causal among themselves (all-visible when
        `bidirectional`: the prompt; `within` (G, G) bool when given: which new rows each new row sees), written at
        _R.._R+G-1 of every layer (the caller commits them or not; not written when `within` is given: such rows
        are never committed), and query rows for `targets` (k,); `sees` (k, G) bool says which new rows each query
        row sees (every row sees the committed rows). `branches` (rows (U,) of the branch store, (G+k, U) bool:
        which of them each row sees) adds those rows as keys. Returns the targets' (k, V) logits and the new rows'
        keys and values (L, n, dh, G), (L, n, G, dh)."""
        assert self._keys is not None and self._values is not None and self._pos is not None
        R, G, k, N = self._R, tokens.shape[0], targets.shape[0], self._N
        dev = tokens.device
        keys, values, key_pos = list(self._keys), list(self._values), self._pos
        if branches is not None:  # the branch rows after the buffer's (a copy of the buffers: beam search only)
            assert self._bk is not None and self._bv is not None and self._bpos is not None
            rows, _ = branches
            bk, bv = self._bk[..., rows], self._bv[:, :, rows]
            keys = [torch.cat([a, b], dim=-1) for a, b in zip(keys, bk, strict=True)]
            values = [torch.cat([a, b], dim=-2) for a, b in zip(values, bv, strict=True)]
            key_pos = torch.cat([key_pos, self._bpos[rows]])
        M = key_pos.shape[0]  # keys before the new rows
        q_pos = torch.cat([pos, targets])  # (G+k,) the rows' positions
        rel = (N - 1) - (q_pos[:, None] - torch.cat([key_pos, pos])[None])  # (G+k, M+G)
        if within is not None:
            blocked = torch.cat([~within, ~sees])  # (G+k, G)
        else:
            ones = torch.ones(G, G, dtype=torch.bool, device=dev)
            blocked = torch.cat([~ones if bidirectional else ~ones.tril(), ~sees])  # (G+k, G)
        neg = torch.zeros(G + k, M + G, device=dev, dtype=self._keys.dtype)
        neg[:, R:N] = -NEG  # buffer rows not committed
        if branches is not None:
            neg[:, N:M] = (~branches[1]).to(neg.dtype) * -NEG
        neg[:, M:] = blocked.to(neg.dtype) * -NEG
        logits, new_k, new_v = self.engine(tokens, targets, keys, values, self._kr, rel, neg)
        if within is None:
            self._keys[..., R : R + G] = new_k
            self._values[:, :, R : R + G] = new_v
            self._pos[R : R + G] = pos
        return logits, new_k, new_v

    # --- cache maintenance ------------------------------------------------------------------------

    def _reset(self, ids: torch.Tensor, masked: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """A new problem: the prompt's rows computed afresh (one pass), with the draft logits (k, V) of `targets`
        (positions nothing decoded precedes: masked[:k]) from the same pass when given."""
        N = ids.shape[0]
        s = self.net.shape
        prompt = torch.ones(N, dtype=torch.bool, device=ids.device)
        prompt[masked] = False
        p_pos = prompt.nonzero().squeeze(-1)  # (P,)
        self._key = None  # until the prompt's rows are in: a pass that fails (a cancel) leaves no half cache
        self._prompt_ids = ids[p_pos].clone()
        self._N = N
        if self._kr_of != (N, ids.device):  # they depend on the length and the weights only: a new prompt of the
            # same length (the next keystroke's) keeps them
            self._kr = [self.net.relative_keys(layer, N, ids.device).contiguous() for layer in self.layers]
            self._kr_of = (N, ids.device)
        L, n, dh, dtype = len(self.layers), s.n_head, s.d_head, self._kr[0].dtype  # the weights' dtype
        # zeros: every pass reads the whole buffers (masked), so rows never written must be finite
        self._keys = torch.zeros(L, n, dh, N, device=ids.device, dtype=dtype)
        self._values = torch.zeros(L, n, N, dh, device=ids.device, dtype=dtype)
        self._pos = torch.zeros(N, dtype=torch.long, device=ids.device)
        self._R = 0
        self._tokens = []
        self._stash = None
        self._branch, self._bn = {}, 0
        self._n_prompt = p_pos.shape[0]
        none = torch.zeros(0, dtype=torch.long, device=ids.device)
        logits = self._prefill(ids[p_pos], p_pos, none if targets is None else targets)
        self._R = p_pos.shape[0]  # the prompt block is bidirectional: every prompt row sees every other
        self._key = (N, tuple(masked.tolist()))
        self.prefills += 1
        return logits

    def _prefill(self, tokens: torch.Tensor, pos: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The prompt's content rows (G,), all-visible, written at rows 0..G-1 of the buffers, and the query rows
        of `targets` (k,), which see the prompt only: their (k, V) logits. The buffers hold nothing yet, so the
        pass is given one masked row of zeros in their place instead of their N rows: the same rows (a masked key
        weighs exactly 0) without attending over N dead keys (a third of a prefill's arithmetic at 512 tokens)."""
        assert self._keys is not None and self._values is not None and self._pos is not None
        G, N, dev = tokens.shape[0], self._N, tokens.device
        L, n, dh = self._keys.shape[:3]
        dead_k = [torch.zeros(n, dh, 1, device=dev, dtype=self._keys.dtype) for _ in range(L)]
        dead_v = [torch.zeros(n, 1, dh, device=dev, dtype=self._keys.dtype) for _ in range(L)]
        rows = torch.cat([pos, targets])  # (G+k,)
        rel = (N - 1) - (rows[:, None] - torch.cat([pos[:1], pos])[None])  # (G+k, 1+G)
        neg = torch.zeros(rows.shape[0], 1 + G, device=dev, dtype=self._keys.dtype)
        neg[:, 0] = -NEG  # the dead row
        logits, new_k, new_v = self.engine(tokens, targets, dead_k, dead_v, self._kr, rel, neg)
        self._keys[..., :G] = new_k
        self._values[:, :, :G] = new_v
        self._pos[:G] = pos
        return logits

    def _holds(self, ids: torch.Tensor, masked: torch.Tensor) -> bool:
        """Whether the cache holds this problem's prompt (the same length, masked positions and prompt tokens)."""
        if self._key != (ids.shape[0], tuple(masked.tolist())) or self._prompt_ids is None:
            return False
        prompt = torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
        prompt[masked] = False
        return torch.equal(ids[prompt], self._prompt_ids)

    def _sync(self, ids: torch.Tensor, masked: torch.Tensor, n: int) -> torch.Tensor:
        """Make the cache hold the prompt + the longest committed prefix of masked[:n] that matches `ids`, using
        a verify pass's stashed drafts where they were accepted. Returns the positions masked[c:n] still to
        commit (the caller computes them in its pass)."""
        if not self._holds(ids, masked):
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
        return masked[keep:n]

    # --- the pass ---------------------------------------------------------------------------------

    def logits(
        self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool
    ) -> torch.Tensor:
        """(k, V) logits at `targets` = masked[n:n+k]: draft (targets see prompt + masked[:n]) or verify
        (the drafts written at the targets are seen by later targets). A new problem's first draft (n = 0)
        comes from the prompt's own pass."""
        if not verify and n == 0 and not self._holds(ids, masked):
            return self._reset(ids, masked, targets)
        pending = self._sync(ids, masked, n)  # (G,) decoded positions not in the cache yet
        G, k = pending.shape[0], targets.shape[0]
        dev = ids.device
        if verify:  # new rows: the pending commits, then the drafts; target i sees the commits and drafts < i
            rows = torch.cat([pending, targets])
            sees = torch.cat(
                [
                    torch.ones(k, G, dtype=torch.bool, device=dev),
                    torch.ones(k, k, dtype=torch.bool, device=dev).tril(-1),
                ],
                dim=1,
            )
        else:
            rows = pending
            sees = torch.ones(k, G, dtype=torch.bool, device=dev)
        out = self._pass(ids[rows], rows, targets, sees)[0]  # (k, V)
        self._R += G
        self._tokens.extend(ids[pending].tolist())
        if verify:
            self._stash = (list(self._tokens), ids[targets].tolist())
        return out

    def draft_many(self, ids: list[torch.Tensor], masked: torch.Tensor, ns: list[int]) -> torch.Tensor:
        """Draft logits (B, V) of several sequences of one problem in one pass (beam search's hypotheses): row b
        is `logits(ids[b], masked, ns[b], masked[ns[b]:ns[b]+1], verify=False)`.

        The cache is synced to the decoded tokens every sequence shares (committed once); each sequence's other
        decoded tokens are branch rows: kept from an earlier pass where one computed them (the row of a decoded
        path, rank-causal like a committed row, is the same whichever hypothesis holds it), else content rows of
        this pass, rank-causal among themselves. A row sees the committed rows and its own sequence's rows only,
        and each sequence's target is one query row that sees the committed rows and its own sequence's rows. So a
        step of beam search computes about one new row a hypothesis, not all the rows it decoded since the
        hypotheses parted."""
        tokens = [x[masked].tolist() for x in ids]
        shared = min(ns)
        for t in tokens[1:]:
            same = 0
            while same < shared and t[same] == tokens[0][same]:
                same += 1
            shared = same
        pending = self._sync(ids[0], masked, shared)  # (G0,) shared decoded positions not in the cache yet
        if pending.shape[0]:  # commit them: every sequence would compute them again otherwise
            self._commit(ids[0], pending, tokens[0])
        keep = len(self._tokens)
        dev = masked.device
        kept: list[list[int]] = []  # each sequence's branch rows, in rank order
        rows: list[torch.Tensor] = []  # each sequence's decoded positions to compute in this pass
        for t, n in zip(tokens, ns, strict=True):
            found: list[int] = []
            while keep + len(found) < n:
                row = self._branch.get(tuple(t[: keep + len(found) + 1]))
                if row is None:
                    break
                found.append(row)
            kept.append(found)
            rows.append(masked[keep + len(found) : n])
        owner = torch.cat([torch.full((r.shape[0],), b, dtype=torch.long) for b, r in enumerate(rows)])  # (G,)
        rank = torch.cat([torch.arange(r.shape[0]) for r in rows])  # (G,)
        mates = owner[:, None] == owner[None, :]  # (G, G)
        within = mates & (rank[None, :] <= rank[:, None])  # a row sees its own sequence's earlier rows and itself
        sees = torch.arange(len(ids))[:, None] == owner[None, :]  # (B, G)
        new = torch.cat([x[r] for x, r in zip(ids, rows, strict=True)])  # (G,)
        targets = masked[torch.tensor(ns, device=dev)]  # (B,)
        used = sorted({row for found in kept for row in found})
        branches = None
        if used:
            column = {row: j for j, row in enumerate(used)}
            mine = torch.zeros(len(ids), len(used), dtype=torch.bool)  # (B, U) the rows on each sequence's path
            for b, found in enumerate(kept):
                mine[b, [column[row] for row in found]] = True
            visible = torch.cat([mine[owner], mine])  # (G+B, U): new rows, then the query rows
            branches = (torch.tensor(used, dtype=torch.long, device=dev), visible.to(dev))
        positions = torch.cat(rows)
        logits, new_k, new_v = self._pass(
            new, positions, targets, sees.to(dev), within=within.to(dev), branches=branches
        )  # (B, V), (L, n, dh, G), (L, n, G, dh)
        self._keep_branches(tokens, rows, keep, kept, new_k, new_v, positions)
        return logits

    BRANCH_ROWS = 1024  # rows of the branch store before it starts again (about 25 MB at the default model's size)

    def _keep_branches(
        self,
        tokens: list[list[int]],
        rows: list[torch.Tensor],
        keep: int,
        kept: list[list[int]],
        new_k: torch.Tensor,
        new_v: torch.Tensor,
        positions: torch.Tensor,
    ) -> None:
        """Store the rows a draft_many pass computed, each under its path (the decoded tokens up to its rank)."""
        G = positions.shape[0]
        if G == 0:
            return
        at = self._bn
        if at + G > self.BRANCH_ROWS:
            self._branch, at = {}, 0
        if self._bk is None or self._bv is None or self._bpos is None or at + G > self._bk.shape[-1]:
            cap = max(at + G, min(self.BRANCH_ROWS, max(64, 2 * (at + G))))
            L, n, dh, _ = new_k.shape
            bk = torch.zeros(L, n, dh, cap, dtype=new_k.dtype, device=new_k.device)
            bv = torch.zeros(L, n, cap, dh, dtype=new_v.dtype, device=new_v.device)
            bpos = torch.zeros(cap, dtype=torch.long, device=positions.device)
            if at and self._bk is not None and self._bv is not None and self._bpos is not None:
                bk[..., :at], bv[:, :, :at], bpos[:at] = self._bk[..., :at], self._bv[:, :, :at], self._bpos[:at]
            self._bk, self._bv, self._bpos = bk, bv, bpos
        self._bk[..., at : at + G] = new_k
        self._bv[:, :, at : at + G] = new_v
        self._bpos[at : at + G] = positions
        j = at
        for t, r, found in zip(tokens, rows, kept, strict=True):
            for i in range(r.shape[0]):
                self._branch[tuple(t[: keep + len(found) + i + 1])] = j
                j += 1
        self._bn = at + G
        self.branch_rows += G

    def _commit(self, ids: torch.Tensor, pending: torch.Tensor, tokens: list[int]) -> None:
        """Commit the decoded positions `pending` (the next ranks after the committed ones) of `ids`: copied from
        the branch store when a pass computed them there (the same rows), else computed in a pass of their own."""
        assert self._keys is not None and self._values is not None and self._pos is not None
        R, keep, G = self._R, len(self._tokens), pending.shape[0]
        stored = [self._branch.get(tuple(tokens[: keep + i + 1])) for i in range(G)]
        if self._bk is not None and self._bv is not None and all(row is not None for row in stored):
            index = torch.tensor(stored, dtype=torch.long, device=pending.device)
            self._keys[..., R : R + G] = self._bk[..., index]
            self._values[:, :, R : R + G] = self._bv[:, :, index]
            self._pos[R : R + G] = pending
        else:
            empty = torch.zeros(0, dtype=torch.long, device=pending.device)
            none = torch.zeros(0, G, dtype=torch.bool, device=pending.device)
            self._pass(ids[pending], pending, empty, none)  # rank-causal, written at _R..: committed below
        self._R += G
        self._tokens.extend(ids[pending].tolist())

    def verify_many(self, ids: list[torch.Tensor], masked: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """Oracle logits of the first lengths[b] positions of several fills of one problem in one pass (the
        retrieved lines a fill ranks): rows sum(lengths[:b]) .. sum(lengths[:b+1]) - 1 are
        `logits(ids[b], masked, 0, masked[:lengths[b]], verify=True)`, (sum(lengths), V).

        Each fill's tokens but its last are content rows of this pass, rank-causal among themselves and invisible
        to every other fill's rows (they are not committed: the fills part ways at their first token); each fill
        has one query row per position scored, which sees the prompt and its own fill's tokens before it."""
        dev = masked.device
        self._sync(ids[0], masked, 0)  # the prompt (a new problem's prefill); drops rows committed after it
        rows = [masked[: max(0, m - 1)] for m in lengths]  # each fill's content rows (its last token feeds nothing)
        owner = torch.cat([torch.full((r.shape[0],), b, dtype=torch.long) for b, r in enumerate(rows)])  # (G,)
        rank = torch.cat([torch.arange(r.shape[0]) for r in rows])  # (G,)
        within = (owner[:, None] == owner[None, :]) & (rank[None, :] <= rank[:, None])  # (G, G)
        q_owner = torch.cat([torch.full((m,), b, dtype=torch.long) for b, m in enumerate(lengths)])  # (k,)
        q_rank = torch.cat([torch.arange(m) for m in lengths])  # (k,)
        sees = (q_owner[:, None] == owner[None, :]) & (rank[None, :] < q_rank[:, None])  # (k, G)
        new = torch.cat([x[r] for x, r in zip(ids, rows, strict=True)])  # (G,)
        targets = torch.cat([masked[:m] for m in lengths])  # (k,)
        return self._pass(new, torch.cat(rows), targets, sees.to(dev), within=within.to(dev))[0]  # (k, V)
