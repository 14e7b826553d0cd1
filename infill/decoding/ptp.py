"""Parallel Token Prediction (PTP) decoding of a block-diffusion model run as a causal LM (block size 1).

One uniform u_k = m_k / 2**32 is drawn per generated position before decoding. The teacher (the model at block
size 1, a plain autoregressive LM) samples position k as pick(u_k, q_k) (inverse CDF, infill.decoding.coupling),
so its output is a deterministic function of the u's. A trained drafter (infill.models.ptp) that is TOLD the
u's guesses several dependent tokens at once; coupling verifies them. One iteration is two forwards:

F1  commits the last iteration's correction, runs the teacher's own row at the current position i (a mask
    token seeing the committed tokens: t_i = pick(u_i, q_i) is exact, accepted without a test) and the N slot
    rows at positions i..i+N-1 with u_i..u_{i+N-1} (slot rows only go through the adapter). The slots' argmax
    at i+1..i+N-1 are the drafts (slot i only carries u_i, whose token the teacher row gives exactly).
F2  verifies: clean rows [t_i, d_{i+1}, ...] and mask rows at i+1..i+M (the 2L layout of the S2D2 verifier):
    q at every drafted position given the drafts before it, plus a trailing row for a bonus token. Drafts are
    accepted while d_k == pick(u_k, q_k); the first position not accepted takes pick(u_k, q_k) (a correction,
    or the bonus when every draft matched).

Every accepted token is the teacher's own inverse-CDF sample for these u's given the accepted tokens before
it, so the output is EXACTLY autoregressive sampling (with the same temperature / top-k / top-p) whatever the
drafter does; the drafter changes only the speed. An iteration yields at least 2 tokens for its 2 forwards
(t_i and the correction), at most N + 1 (t_i, N - 1 drafts, the bonus): passes never exceed tokens. The
prompt's prefill is fused into the first F1. At temperature 0, pick is the argmax and u carries nothing.

The loop (`run`) talks to the model through a `Session` (propose / verify / keep), so tests can drive the same
loop with other drafters (oracle, random, always wrong) and with a memoized teacher.

Shapes: V = vocabulary size, n = slots this iteration, M = verified positions.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from infill.config import PtpOptions, Sampling, options_of
from infill.decoding.coupling import draw_u, pick
from infill.decoding.speculative import Acceptance, Proposal, accept
from infill.decoding.stats import DecodeStats
from infill.errors import DecodeError, InputError, ModelError

if TYPE_CHECKING:
    import torch

    from infill.config import DecodeConfig
    from infill.decoding.problem import Generation, StopRule
    from infill.models.blockdiff import BlockDiffModel, ForwardKind
    from infill.models.ptp import PTPAdapter

DraftFn = Callable[[int, "torch.Tensor"], "torch.Tensor"]  # (position i, u (n,)) -> drafts (n-1,) for i+1..

COUPLED = Acceptance(order="coupled")  # the drafts are point masses, tested against the fixed u's
_ADAPTERS: weakref.WeakKeyDictionary[Any, PTPAdapter] = weakref.WeakKeyDictionary()


class Session(Protocol):
    """The model side of one PTP decode. `nfe` counts forwards, `counts` them by kind."""

    @property
    def nfe(self) -> int: ...

    @property
    def counts(self) -> dict[str, int]: ...

    def propose(self, pending: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """F1: commit `pending` (p,) at the next positions; with n = len(u) slots for positions i..i+n-1
        (i = the position after `pending`), return the teacher's logits (V,) at i and the drafts (n-1,) for
        positions i+1..i+n-1."""
        ...

    def verify(self, clean: torch.Tensor, m: int) -> torch.Tensor:
        """F2: `clean` (m,) tokens at positions i..i+m-1 -> teacher logits (m, V) at positions i+1..i+m, row r
        seeing clean[: r+1]. The clean rows stay provisional until `keep`."""
        ...

    def keep(self, kept: int) -> None:
        """Commit the first `kept` clean rows of the last `verify` (accepted tokens); drop the rest."""
        ...


# ---- adapters --------------------------------------------------------------------------------------------------


def attach(model: BlockDiffModel, adapter: PTPAdapter | None) -> None:
    """Use `adapter` as `model`'s PTP drafter (None forgets it, so the folder's file is read again)."""
    if adapter is None:
        _ADAPTERS.pop(model, None)
    else:
        _ADAPTERS[model] = adapter


def adapter_of(model: BlockDiffModel) -> PTPAdapter:
    """The PTP drafter of `model`: attached, or read once from ptp_adapter.safetensors in its folder.
    InputError (one line) when there is none."""
    from infill.models.ptp import ADAPTER_FILE, load_adapter

    found = _ADAPTERS.get(model)
    if found is not None:
        return found
    path = Path(model.folder) / ADAPTER_FILE if model.folder is not None else None
    if path is None or not path.is_file():
        where = f"{path}" if path is not None else "this in-memory model"
        raise InputError(f"--decoder ptp needs a PTP adapter ({where} not found); train one with `infill train ptp`")
    adapter = load_adapter(path, model.model).to(model.device)
    _ADAPTERS[model] = adapter
    return adapter


# ---- the model side: one KV cache for teacher rows -----------------------------------------------------------


class KVSession:
    """Session over a position-aligned BlockDiffModel at block size 1. Drafts come from `adapter` (the fused
    F1 forward; `use_u` False feeds it zero bits: the independent-slot mode) or from `draft_fn` (tests: the
    teacher row is then a commit fused with one mask row)."""

    def __init__(
        self,
        model: BlockDiffModel,
        adapter: PTPAdapter | None = None,
        draft_fn: DraftFn | None = None,
        use_u: bool = True,
    ) -> None:
        if (adapter is None) == (draft_fn is None):
            raise DecodeError("a PTP session needs exactly one of an adapter and a draft function")
        self.model, self.adapter, self.draft_fn, self.use_u = model, adapter, draft_fn, use_u
        self.state = model.new_state()
        self.state.counts.setdefault("draft", 0)
        self.first = True

    @property
    def nfe(self) -> int:
        return self.state.nfe

    @property
    def counts(self) -> dict[str, int]:
        return self.state.counts

    def propose(self, pending: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        from infill.models.ptp import U_BITS, u_bits

        model, state = self.model, self.state
        kind: ForwardKind = "prefill" if self.first else "draft"
        self.first = False
        p, n, start = int(pending.numel()), int(u.numel()), state.length
        i = start + p
        mask = torch.tensor([model.mask_id])
        if self.adapter is None or n < 2:  # the teacher row only: a commit fused with one mask row
            logits = model.commit(state, pending, 1, draft_ids=mask, kind=kind)  # (1, V)
            if logits is None:
                raise ModelError("block-diffusion commit returned no draft row")
            drafts = self.draft_fn(i, u) if self.draft_fn is not None else torch.zeros(0, dtype=torch.long)
            return logits[0], drafts.long()[: max(n - 1, 0)]
        rows = p + 1 + n
        allowed = torch.zeros(rows, start + rows, dtype=torch.bool)  # (R, C+R)
        allowed[:, :start] = True
        allowed[:p, start : start + p] = torch.tril(torch.ones(p, p, dtype=torch.bool))  # pending: causal
        allowed[p, start : start + p + 1] = True  # the teacher row: pending and itself
        allowed[p + 1 :, start : start + p] = True  # slots: pending ...
        allowed[p + 1 :, start + p + 1 :] = True  # ... and every slot of the group, not the teacher row
        ids = torch.cat([pending.long(), mask.repeat(1 + n)])  # (R,)
        positions = torch.cat([torch.arange(start, i + 1), torch.arange(i, i + n)])  # (R,)
        bits = u_bits(u) if self.use_u else torch.zeros(n, U_BITS)  # (n, 32)
        logits = self._slot_forward(ids, positions, allowed, p + 1, bits, kind)  # (1+n, V)
        state.length = i
        model._rollback(state)
        return logits[0], logits[2:].argmax(dim=-1)  # (V,), (n-1,)

    def _slot_forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor,
        start: int,
        bits: torch.Tensor,
        kind: str,
    ) -> torch.Tensor:
        """The fused F1 forward; rows >= start are slots. -> float32 logits (R - start + 1, V) of the teacher
        row and the slots, the mask token at -inf."""
        import torch

        from infill.models.ptp import slot_forward

        model, state, adapter = self.model, self.state, self.adapter
        if adapter is None:
            raise ModelError("the fused PTP forward needs an adapter")
        if state.cache.get_seq_length() != state.length:
            raise ModelError(f"PTP cache out of sync: {state.cache.get_seq_length()} != {state.length}")
        dev = model.device
        hf = model.model
        with torch.no_grad(), torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=model.bf16):
            hidden = slot_forward(
                hf,
                adapter,
                ids[None].to(dev),  # (1, R)
                positions[None].to(dev),  # (1, R)
                model.attention_mask(allowed),  # (1, 1, R, C+R)
                start,
                bits[None].to(dev),  # (1, n, 32)
                cache=state.cache,
            )  # (1, R, d)
            logits = hf.lm_head(hidden[0, start - 1 :])  # (1+n, V)
        state.nfe += 1
        state.counts[kind] = state.counts.get(kind, 0) + 1
        out = logits.float().cpu()
        out[:, model.mask_id] = float("-inf")
        return out

    def verify(self, clean: torch.Tensor, m: int) -> torch.Tensor:
        import torch

        model, state = self.model, self.state
        c, i = state.length, state.length
        allowed = torch.zeros(2 * m, c + 2 * m, dtype=torch.bool)  # (2M, C+2M)
        allowed[:, :c] = True
        allowed[:m, c : c + m] = torch.tril(torch.ones(m, m, dtype=torch.bool))  # clean rows: causal
        for r in range(m):
            allowed[m + r, c : c + r + 1] = True  # mask row at i+1+r sees clean[: r+1] ...
            allowed[m + r, c + m + r] = True  # ... and itself
        ids = torch.cat([clean.long(), torch.full((m,), model.mask_id, dtype=torch.long)])  # (2M,)
        positions = torch.cat([torch.arange(i, i + m), torch.arange(i + 1, i + m + 1)])  # (2M,)
        return model.forward(state, ids, positions, allowed, "verify", keep=m)  # (M, V)

    def keep(self, kept: int) -> None:
        self.state.length += kept
        self.model._rollback(self.state)


# ---- the loop ----------------------------------------------------------------------------------------------------


def run(
    session: Session,
    prompt: torch.Tensor,
    max_tokens: int,
    u: torch.Tensor,
    cfg: DecodeConfig,
    slots: int,
    end_ids: tuple[int, ...] = (),
    on_step: Callable[[dict[str, Any]], None] | None = None,
    stop: StopRule | None = None,
) -> tuple[list[int], DecodeStats]:
    """PTP iterations until max_tokens, an end token or the token `stop` names (kept in the output). prompt (P,),
    u (max_tokens,) float64: u[j] belongs to generated position j. -> (tokens without the end token, stats: nfe,
    tokens, accepted = the tokens each iteration made final, and extra)."""
    import torch

    from infill.decoding.confidence import confidence_probs

    stats = DecodeStats(decoder=cfg.decoder)
    out: list[int] = []
    out_rows: list[torch.Tensor] = []  # (V,) the logits each output token was sampled from
    pending = prompt.long()
    ended = stopped = False
    iterations = 0
    drafts_accepted: list[int] = []  # per iteration
    while len(out) < max_tokens:
        j = len(out)
        r = max_tokens - j  # budget left
        n = min(slots, r)
        new, rows, a, pending = _iteration(session, pending, u, j, n, r, cfg, end_ids)
        iterations += 1
        drafts_accepted.append(a)
        for idx, t in enumerate(new):
            if t in end_ids:
                new, rows, ended = new[: idx + 1], rows[: idx + 1], True
                break
        at = stop(out + new[: len(new) - ended]) if stop is not None else None
        if at is not None:  # the stop rule's token, before any end token: the output ends with it
            keep = at + 1 - len(out)
            new, rows, ended, stopped = new[:keep], rows[:keep], False, True
        stats.accepted.append(len(new))
        out += new
        out_rows += rows
        if on_step is not None:
            on_step({"tokens": len(out), "nfe": session.nfe, "block": iterations})
        if ended or stopped:
            break
    tokens = out[:-1] if ended else out
    logprob = 0.0
    if out:
        conf = confidence_probs(torch.stack(out_rows), cfg)  # (n, V)
        logprob = float(conf.gather(-1, torch.tensor(out)[:, None]).log().sum())
    stats.nfe = session.nfe
    stats.tokens = len(out)  # the end token counts
    stats.extra.update(
        {
            "forwards": dict(session.counts),
            "iterations": iterations,
            "drafts_accepted": drafts_accepted,
            "slots": slots,
            "tokens_per_iteration": len(out) / max(iterations, 1),
            "ended": ended or stopped,
            "logprob": logprob,
        }
    )
    return tokens, stats


def _iteration(
    session: Session,
    pending: torch.Tensor,
    u: torch.Tensor,
    j: int,
    n: int,
    r: int,
    cfg: DecodeConfig,
    end_ids: tuple[int, ...],
) -> tuple[list[int], list[torch.Tensor], int, torch.Tensor]:
    """One PTP iteration at generated position j with n slots and r tokens of budget left: the teacher's exact
    token, then the drafts the verifier accepts (and its bonus token). -> (the new tokens, the logits each was
    sampled from, how many drafts were accepted, the tokens the next pass must feed)."""
    import torch

    from infill.decoding.sampling import transform

    q_logits, drafts = session.propose(pending, u[j : j + n])  # (V,), (n-1,)
    rows = [q_logits]  # the logits each new token was sampled from
    first = pick(u[j], transform(q_logits[None], cfg)[0])  # () the teacher's exact token at position i
    new = [int(first)]
    if new[0] in end_ids or n < 2:
        return new, rows, 0, first[None]
    d = n - 1
    m = min(d + 1, r - 1)  # verified positions: every draft, plus the bonus row when the budget allows
    clean = torch.cat([first[None], drafts[: m - 1]])  # (M,)
    v = session.verify(clean, m)  # (M, V)
    a, tok = accept(Proposal(drafts[:d]), transform(v, cfg), COUPLED, u=u[j + 1 : j + 1 + m])
    new += drafts[:a].tolist()
    rows += list(v[:a])
    if tok is not None:
        new.append(tok)
        rows.append(v[a])
    kept = min(1 + a, m)
    session.keep(kept)
    return new, rows, a, torch.tensor(new[kept:], dtype=torch.long)


def decode(
    model: BlockDiffModel,
    prompt: torch.Tensor,
    max_tokens: int,
    cfg: DecodeConfig,
    generator: torch.Generator,
    draft_fn: DraftFn | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """`ptp` on a prompt (P,) long -> (generated tokens (n,) without the end token, stats); `draft_fn` replaces
    the adapter (tests: an oracle, a random or an always-wrong drafter)."""
    from infill.decoding.problem import Generation

    return ptp(Generation(model, prompt, max_tokens, cfg, generator), draft_fn)


def ptp(job: Generation, draft_fn: DraftFn | None = None) -> tuple[torch.Tensor, DecodeStats]:
    """PTP decoding -> (generated tokens (n,) without the end token, stats). Slots per iteration: min(cfg.k, the
    adapter's trained slots) (cfg.k with `draft_fn`); k = 1 is autoregressive sampling by inverse CDF.
    stats.accepted holds the tokens each iteration made final (the end token included); stats.extra adds
    `drafts_accepted` (per iteration), `iterations`, `tokens_per_iteration`, `slots`, `drafter` ("ptp", or
    "independent": the adapter without u, which is what runs at temperature 0 or when `adapter.use_u` is
    False) and `logprob` (as confidence decoding reports it).

    `job` (infill.decoding.problem.Generation, built by infill.decoding.blockfill): job.prompt (P,) long, at most
    job.max_tokens tokens written after it with job.model, every draw from job.generator, job.on_step called after every
    step. job.model must be position-aligned (InputError otherwise). `draft_fn` replaces the adapter's drafter (tests);
    u (max_tokens,) float64, one uniform per generated position, is drawn from job.generator before decoding starts."""
    import torch

    model, prompt, max_tokens, cfg = job.model, job.prompt, job.max_tokens, job.cfg
    sampling, opts = options_of(Sampling, cfg), options_of(PtpOptions, cfg)
    t0 = time.perf_counter()
    if model.shifted:
        raise InputError("--decoder ptp needs a position-aligned block-diffusion model (SDAR layout)")
    adapter = None if draft_fn is not None else adapter_of(model)
    slots = opts.k if adapter is None else min(opts.k, adapter.cfg.slots)
    # at temperature 0 pick is the argmax and u carries nothing: the drafter then guesses without u (its
    # independent mode), since with u it was trained to guess the SAMPLED path, not the greedy one
    use_u = adapter is not None and adapter.use_u and sampling.temperature > 0
    session = KVSession(model, adapter=adapter, draft_fn=draft_fn, use_u=use_u)
    u = draw_u(max_tokens, job.generator)  # (max_tokens,) one per generated position, fixed before decoding
    tokens, stats = run(session, prompt.cpu(), max_tokens, u, cfg, slots, model.end_ids, job.on_step, job.stop)
    stats.seconds = time.perf_counter() - t0
    stats.extra["drafter"] = "function" if adapter is None else ("ptp" if use_u else "independent")
    return torch.tensor(tokens, dtype=torch.long), stats
