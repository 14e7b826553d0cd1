"""A cached forward for XLNet any-subset decoding: the prompt (and every decoded token) is computed once.

Why it is exact (REFERENCE.md "Prompt KV cache"): under the AS-ARM masks a prompt row attends only to the
prompt, and a decoded masked row of rank r only to the prompt and ranks < r (plus its own content). So once a
token is fixed, its content-stream state at every layer never changes again. Each layer's keys and values for
those "committed" rows are stored; a pass then computes only
  - the content rows of newly decoded tokens (appended to the cache, rank-causal among themselves),
  - for verify, the content rows of the k drafts (temporary, rank-causal),
  - the query stream of the k targets,
each attending to cached keys. HF's forward instead recomputes all N content rows and scatters the k query
rows over all N positions, at O(N^2) per pass.

The attention math is HF `XLNetRelativeAttention` restated for row subsets: score = ((q + r_w_bias) . k +
(q + r_r_bias) . k_r[i - j]) * scale, masked positions at -1e30, softmax, value mix, output projection,
residual + layer norm, then the layer's own feed-forward module. k_r[i - j] is the relative position
encoding of the query-key distance (a sinusoid table times W_r), gathered per pair instead of rel-shifted.
Only `attn_type="bi"`, `bi_data=False` configs use it (checked by `supports()`); others take the plain path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def supports(config: Any) -> bool:
    return getattr(config, "attn_type", "bi") == "bi" and not getattr(config, "bi_data", False)


class XLNetKVCache:
    """Per-layer keys/values of committed rows for one fill: the prompt, then masked positions in rank order.

    `logits(...)` is a drop-in for the plain forward. The cache is keyed by (N, masked positions, prompt
    tokens); committed masked tokens that differ from the call's `ids` (a new sample of the same problem)
    truncate it back to the longest common prefix, which stays valid because rank r only sees ranks < r.
    """

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        self.cfg = hf.config
        self.tr = hf.transformer
        self.prefills = 0  # prompt passes (one per new problem)
        self._key: tuple[int, tuple[int, ...]] | None = None
        self._prompt_ids: torch.Tensor | None = None
        self._keys: list[torch.Tensor] = []  # per layer (R, n_head, d_head)
        self._values: list[torch.Tensor] = []
        self._pos: torch.Tensor | None = None  # (R,) positions of the committed rows
        self._tokens: list[int] = []  # committed masked tokens, rank order
        self._n_prompt = 0
        # the last verify pass's draft rows: (committed tokens then, draft tokens, per-layer keys, values).
        # Accepted drafts are committed from here instead of being recomputed (their rows are identical).
        self._stash: tuple[list[int], list[int], list[torch.Tensor], list[torch.Tensor]] | None = None
        self.reused = 0  # rows committed from the stash (for tests and benchmarks)
        self._kr: list[torch.Tensor] = []  # per layer (2N - 1, n_head, d_head): relative keys by distance

    # --- the building block: one attention sub-layer for a subset of query rows -------------------

    def _attend(
        self,
        layer: Any,
        x: torch.Tensor,  # (Q, d) stream input of the query rows (content h or query g)
        q_pos: torch.Tensor,  # (Q,)
        keys: torch.Tensor,  # (R, n, dh)
        values: torch.Tensor,  # (R, n, dh)
        k_pos: torch.Tensor,  # (R,)
        allowed: torch.Tensor,  # (Q, R) bool
        kr: torch.Tensor,  # (2N - 1, n, dh)
        N: int,
    ) -> torch.Tensor:
        import torch

        a = layer.rel_attn
        q = torch.einsum("id,dnh->inh", x, a.q)  # (Q, n, dh)
        ac = torch.einsum("inh,jnh->nij", q + a.r_w_bias, keys)  # (n, Q, R)
        by_dist = torch.einsum("inh,pnh->nip", q + a.r_r_bias, kr)  # (n, Q, 2N-1)
        dist = q_pos[:, None] - k_pos[None, :] + (N - 1)  # (Q, R) index into the distance table
        bd = by_dist.gather(2, dist.expand(by_dist.shape[0], -1, -1))  # (n, Q, R)
        score = (ac + bd) * a.scale
        score = score - 1e30 * (~allowed).to(score.dtype)[None]  # HF's masking, same constant
        prob = torch.softmax(score, dim=-1)  # (n, Q, R)
        vec = torch.einsum("nij,jnh->inh", prob.to(values.dtype), values)  # (Q, n, dh)
        out = torch.einsum("inh,dnh->id", vec, a.o)  # (Q, d)
        return a.layer_norm(out + x)

    def _relative_keys(self, N: int, device: torch.device) -> None:
        """k_r per layer for distances N-1 .. -(N-1) (HF's sinusoid, clamp_len respected)."""
        import torch

        d = self.cfg.d_model
        freq = torch.arange(0, d, 2.0, device=device)
        inv_freq = 1 / torch.pow(10000, freq / d)  # (d/2,)
        dist = torch.arange(-(N - 1), N, device=device).float()  # index p <-> distance p - (N - 1)
        if self.cfg.clamp_len > 0:
            dist = dist.clamp(-self.cfg.clamp_len, self.cfg.clamp_len)
        ang = dist[:, None] * inv_freq[None, :]  # (2N-1, d/2)
        pos_emb = torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)  # (2N-1, d)
        self._kr = [torch.einsum("pd,dnh->pnh", pos_emb, layer.rel_attn.r) for layer in self.tr.layer]

    # --- cache maintenance ------------------------------------------------------------------------

    def _reset(self, ids: torch.Tensor, masked: torch.Tensor) -> None:
        import torch

        N = ids.shape[0]
        prompt = torch.ones(N, dtype=torch.bool, device=ids.device)
        prompt[masked] = False
        p_pos = prompt.nonzero().squeeze(-1)  # (P,)
        self._key = (N, tuple(masked.tolist()))
        self._prompt_ids = ids[p_pos].clone()
        self._relative_keys(N, ids.device)
        self._keys = [torch.empty(0) for _ in self.tr.layer]
        self._values = [torch.empty(0) for _ in self.tr.layer]
        self._pos = p_pos[:0]
        self._tokens = []
        self._stash = None
        self._n_prompt = p_pos.shape[0]
        P = p_pos.shape[0]
        self._commit(ids[p_pos], p_pos, torch.ones(P, P, dtype=torch.bool, device=ids.device), N)
        self.prefills += 1

    def _commit(self, tokens: torch.Tensor, pos: torch.Tensor, within: torch.Tensor, N: int) -> None:
        """Append rows (G,) to the cache, layer by layer; `within` (G, G) says which new rows see which."""
        import torch

        assert self._pos is not None
        h = self.tr.word_embedding(tokens)  # (G, d)
        G = tokens.shape[0]
        old = self._pos.shape[0]
        allowed = torch.cat([torch.ones(G, old, dtype=torch.bool, device=h.device), within], dim=1)  # (G, R+G)
        k_pos = torch.cat([self._pos, pos])
        for li, layer in enumerate(self.tr.layer):
            a = layer.rel_attn
            k_new = torch.einsum("id,dnh->inh", h, a.k)  # (G, n, dh)
            v_new = torch.einsum("id,dnh->inh", h, a.v)
            keys = k_new if old == 0 else torch.cat([self._keys[li], k_new])
            values = v_new if old == 0 else torch.cat([self._values[li], v_new])
            self._keys[li], self._values[li] = keys, values
            h = layer.ff(self._attend(layer, h, pos, keys, values, k_pos, allowed, self._kr[li], N))
        self._pos = k_pos

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
            R = self._n_prompt + keep
            self._keys = [k[:R] for k in self._keys]
            self._values = [v[:R] for v in self._values]
            assert self._pos is not None
            self._pos = self._pos[:R]
            self._tokens = self._tokens[:keep]
        if keep < n and self._stash is not None and self._stash[0] == self._tokens:
            _, drafts, s_keys, s_values = self._stash
            m = 0
            while keep + m < n and m < len(drafts) and drafts[m] == want[keep + m]:
                m += 1
            if m > 0:  # accepted drafts: their rows were computed by the verify pass with this same context
                self._keys = [torch.cat([k, sk[:m]]) for k, sk in zip(self._keys, s_keys, strict=True)]
                self._values = [torch.cat([v, sv[:m]]) for v, sv in zip(self._values, s_values, strict=True)]
                assert self._pos is not None
                self._pos = torch.cat([self._pos, masked[keep : keep + m]])
                self._tokens.extend(want[keep : keep + m])
                self.reused += m
                keep += m
        self._stash = None
        if keep < n:
            new = masked[keep:n]
            G = new.shape[0]
            causal = torch.ones(G, G, dtype=torch.bool, device=ids.device).tril()  # rank-causal, self included
            self._commit(ids[new], new, causal, ids.shape[0])
            self._tokens.extend(want[keep:])

    # --- the pass ---------------------------------------------------------------------------------

    def logits(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool) -> Any:
        """(k, V) logits at `targets` = masked[n:n+k]: draft (targets see prompt + masked[:n]) or verify
        (the drafts written at the targets are seen by later targets)."""
        import torch

        self._sync(ids, masked, n)
        assert self._pos is not None
        N = ids.shape[0]
        k = targets.shape[0]
        g = self.tr.mask_emb[0].expand(k, -1)  # (k, d) query stream starts from the mask embedding
        R = self._pos.shape[0]
        dev = ids.device
        if not verify:
            allowed = torch.ones(k, R, dtype=torch.bool, device=dev)
            for li, layer in enumerate(self.tr.layer):
                g = layer.ff(
                    self._attend(
                        layer,
                        g,
                        targets,
                        self._keys[li],
                        self._values[li],
                        self._pos,
                        allowed,
                        self._kr[li],
                        N,
                    )
                )
        else:
            h = self.tr.word_embedding(ids[targets])  # (k, d) drafts' content
            k_pos = torch.cat([self._pos, targets])
            ones = torch.ones(k, R, dtype=torch.bool, device=dev)
            tri = torch.ones(k, k, dtype=torch.bool, device=dev)
            content_allowed = torch.cat([ones, tri.tril()], dim=1)  # drafts see earlier drafts and themselves
            query_allowed = torch.cat([ones, tri.tril(-1)], dim=1)  # targets see earlier drafts only
            s_keys, s_values = [], []
            for li, layer in enumerate(self.tr.layer):
                a = layer.rel_attn
                s_keys.append(torch.einsum("id,dnh->inh", h, a.k))  # (k, n, dh)
                s_values.append(torch.einsum("id,dnh->inh", h, a.v))
                keys = torch.cat([self._keys[li], s_keys[-1]])
                values = torch.cat([self._values[li], s_values[-1]])
                g_next = self._attend(layer, g, targets, keys, values, k_pos, query_allowed, self._kr[li], N)
                if li + 1 < len(self.tr.layer):  # the last layer's content rows feed nothing
                    h = layer.ff(self._attend(layer, h, targets, keys, values, k_pos, content_allowed, self._kr[li], N))
                g = layer.ff(g_next)
            self._stash = (list(self._tokens), ids[targets].tolist(), s_keys, s_values)
        return self.hf.lm_loss(g)  # (k, V)
