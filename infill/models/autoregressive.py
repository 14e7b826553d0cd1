"""Left-to-right code models (Qwen2.5-Coder, StarCoder2, Code Llama, DeepSeek-Coder) as fill-in-the-middle
models behind the any-subset interface (docs/code-models.md).

Such a model fills one span: it reads PREFIX_TOKEN prefix SUFFIX_TOKEN suffix MIDDLE_TOKEN (infill.models.fim)
and writes the middle token by token, as a block-diffusion model does at block size 1. That is an any-subset
model (infill.models.base.AnySubsetModel) whose decoding order is fixed: left to right over one contiguous span.
So `CausalFim` implements that protocol, and the any-subset decoders that ask for positions in order run it
unchanged: beam search, sequential sampling, and speculative decoding with prompt-lookup drafts
(infill.decoding.lookup), whose verify pass is one causal forward over the drafts; `infill.decoding.score`
scores a fill (or a retrieved line) in one pass too.

A FillProblem [prefix, M masks, suffix] (`masked` one contiguous run) becomes the causal sequence
    lead + PREFIX_TOKEN prefix SUFFIX_TOKEN suffix MIDDLE_TOKEN + x_0 .. x_{n+k-2}
(lead: what the tokenizer puts before any text, such as a BOS), whose last k rows predict masked[n:n+k] (row j
predicts token j+1). `draft` asks for the next position only (k = 1); `verify` for k positions, with drafts
written at the first k-1.

The distribution is the model's with two fixed changes, the same in every pass, so speculative decoding stays
exact for it: special tokens other than the end tokens (FIM and chat markers, a BOS) and the padding rows past
the tokenizer's last id get probability 0, and the end tokens' probabilities are summed into one of them,
`pad_id`, which ends the fill (the any-subset end-of-fill pad). Undecoded positions hold `mask_id` =
vocab_size, an id no logit has and no pass reads.

The prompt cache: the KV cache of the last sequence is kept, and the next pass computes only from the first token
that differs. Beam search visits hypotheses in order so that consecutive passes share a prefix, and drafts that a
verify pass accepted are already in the cache.

Without FIM tokens the model can only continue text: the prompt is lead + prefix, and a fill with text after it
is refused (infill.core.kinds.ar).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.config import ModelSpec
from infill.errors import DecodeError, ModelError
from infill.models.fim import FimTokens, fim_prompt, find_fim

if TYPE_CHECKING:
    import torch

    from infill.models.base import CausalEngine
    from infill.models.registry import LoadedModel

# model_type in config.json -> the stock transformers class a left-to-right folder loads into
AR_ARCHITECTURES: dict[str, str] = {
    "qwen2": "Qwen2ForCausalLM",  # Qwen2.5-Coder
    "qwen3": "Qwen3ForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM",
    "llama": "LlamaForCausalLM",  # Code Llama, DeepSeek-Coder
}
WINDOW = 4096  # tokens one fill's sequence may hold at most (prompt and fill), below the model's own limit
MEMO_BYTES = 64 << 20  # logits rows `CausalFim.remembering` keeps at most


class TorchEngine:
    """infill.models.base.CausalEngine over a stock transformers causal LM (eager PyTorch).

    Two caches: the keys and values of the last single sequence (greedy and sampled decoding, verify passes,
    scoring), and those of the last batch of sequences, one row each (beam search). A batch whose every sequence
    extends a row of the batch cache by the same number of tokens reorders that cache (each sequence takes its
    parent's row) and computes only the new tokens; any other batch starts from the single sequence's cache at
    the prefix the batch shares, repeated once per row."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.vocab_size = int(model.config.vocab_size)
        self.positions = int(getattr(model.config, "max_position_embeddings", None) or WINDOW)
        self._tokens: list[int] = []  # the sequence whose keys and values `_cache` holds
        self._cache: Any = None
        self._rows: list[list[int]] = []  # the sequences whose keys and values `_batch` holds, one per row
        self._batch: Any = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def forget(self) -> None:
        self._tokens, self._cache, self._rows, self._batch = [], None, [], None

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def rows(self, seqs: Sequence[Sequence[int]], k: int) -> torch.Tensor:
        """float32 logits (B, k, V) of the last k rows of each sequence, in one forward (module docstring)."""
        import torch

        if len(seqs) == 1:
            return self._one([int(t) for t in seqs[0]], k)[None]
        lengths = {len(s) for s in seqs}
        if len(lengths) > 1:  # rows of different lengths would need padding: one pass each
            return torch.stack([self._one([int(t) for t in s], k) for s in seqs])
        return self._many([[int(t) for t in s] for s in seqs], k)

    def _one(self, seq: list[int], k: int) -> torch.Tensor:
        """float32 logits (k, V) of the last k rows of `seq`, computed from the first token the cache lacks."""
        from transformers import DynamicCache

        reuse = shared_prefix(self._tokens, seq, len(seq) - k)  # the last k rows are always computed
        if self._cache is None or reuse == 0:
            self._cache, reuse = DynamicCache(), 0
        elif self._cache.get_seq_length() > reuse:
            self._cache.crop(reuse - self._cache.get_seq_length())
        self._tokens = []  # stays empty if the forward fails: the next pass starts over
        out = self._forward(self._cache, [seq[reuse:]], reuse, k)  # (1, k, V)
        self._tokens = seq
        return out[0]

    def _many(self, seqs: list[list[int]], k: int) -> torch.Tensor:
        """float32 logits (B, k, V) for B sequences of one length, in one batched forward."""
        import copy

        import torch
        from transformers import DynamicCache

        length = len(seqs[0])
        held = len(self._rows[0]) if self._rows else 0
        index = {tuple(row): r for r, row in enumerate(self._rows)}
        parents = [index.get(tuple(s[:held])) for s in seqs] if 0 < held <= length - k else [None]
        batch, self._batch, self._rows = self._batch, None, []  # stay empty if the forward fails
        if all(p is not None for p in parents):
            batch.reorder_cache(torch.tensor(parents, device=self.device))  # each sequence takes its parent's row
            start = held
        else:  # from the single sequence's cache at the prefix every sequence shares
            shared = min(shared_prefix(seqs[0], s, length - k) for s in seqs)
            start = shared_prefix(self._tokens, seqs[0], shared)
            if self._cache is None or start == 0:
                batch, start = DynamicCache(), 0
            else:
                if self._cache.get_seq_length() > start:
                    self._cache.crop(start - self._cache.get_seq_length())
                self._tokens = self._tokens[:start]
                batch = copy.deepcopy(self._cache)
                batch.batch_repeat_interleave(len(seqs))
        out = self._forward(batch, [s[start:] for s in seqs], start, k)  # (B, k, V)
        self._batch, self._rows = batch, seqs
        return out

    def _forward(self, cache: Any, new: list[list[int]], start: int, k: int) -> torch.Tensor:
        """The network on the rows `new` (B, L) at positions start..start+L-1 after `cache`: (B, k, V) float32."""
        import torch

        from infill.models.blockdiff_model import kv_cache

        dev = self.device
        width = len(new[0])
        with torch.no_grad():
            out = self.model(
                input_ids=torch.tensor(new, dtype=torch.long, device=dev),  # (B, L)
                position_ids=torch.arange(start, start + width, device=dev)[None].expand(len(new), -1),  # (B, L)
                **kv_cache(self.model, cache),
                use_cache=True,
                logits_to_keep=k,
            ).logits  # (B, k, V)
        return out.float().cpu()


def shared_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """The length of the common prefix of `a` and `b`, at most `limit`. Slices are compared (in C), halving the
    unsettled part each time: a pass's cache plan compares a prompt of thousands of tokens with every slot's,
    at every keystroke, which one Python comparison per token made a sizeable part of a fill's time."""
    limit = max(0, min(len(a), len(b), limit))
    if type(a) is not type(b):  # a list never equals a tuple
        a, b = list(a[:limit]), list(b[:limit])
    same, unsure = 0, limit  # a[:same] == b[:same]; the first difference, if any, is before `unsure`
    while same < unsure:
        half = (same + unsure + 1) // 2
        if a[same:half] == b[same:half]:
            same = half
        else:
            unsure = half - 1
    return same


class CausalFim:
    """infill.models.base.AnySubsetModel over a left-to-right network (see the module docstring).

    network:    what runs the passes: an infill.models.base.CausalEngine (infill.models.llamacpp.LlamaEngine,
                BlockOneEngine), or a stock transformers causal LM, which runs as a TorchEngine.
    fim:        the tokenizer's FIM tokens; None = a model that only continues text.
    lead:       tokens before the prompt (a BOS where the tokenizer adds one).
    end_ids:    tokens that end the middle (their probabilities go to `pad_id`).
    banned:     tokens never written (special tokens that are not end tokens; the FIM and lead tokens always are).
    text_vocab: one more than the tokenizer's last id (rows past it are padding).
    window:     the longest causal sequence a pass may run (its `max_length`, the longest FillProblem, is that
                less the lead and the FIM tokens).
    """

    def __init__(
        self,
        network: Any,
        *,
        fim: FimTokens | None,
        lead: Sequence[int] = (),
        end_ids: Iterable[int] = (),
        banned: Iterable[int] = (),
        text_vocab: int | None = None,
        window: int = WINDOW,
        pad_id: int | None = None,
    ) -> None:
        import torch

        self.engine: CausalEngine = network if hasattr(network, "rows") else TorchEngine(network)
        self.fim = fim
        self.lead = [int(t) for t in lead]
        self.vocab_size = int(self.engine.vocab_size)
        self.mask_id = self.vocab_size  # names no token: undecoded positions are never read
        ends = sorted({int(t) for t in end_ids})
        self.pad_id = pad_id if pad_id in ends else (ends[0] if ends else None)
        self.bos_id: int | None = None  # the lead is part of the prompt
        self.max_length = int(window) - self.overhead
        self.nfe = 0
        never = {int(t) for t in banned} | set(range(text_vocab or self.vocab_size, self.vocab_size))
        never |= set(ends) | set(self.lead) | set(fim.ids if fim is not None else ())
        never.discard(self.pad_id if self.pad_id is not None else -1)
        self._ends = torch.tensor(ends, dtype=torch.long)
        self._banned = torch.tensor(sorted(t for t in never if t < self.vocab_size), dtype=torch.long)
        self._memo: OrderedDict[tuple[int, ...], torch.Tensor] | None = None  # see `remembering`

    @classmethod
    def over(
        cls,
        network: Any,
        tokenizer: Any,
        fim: FimTokens | None,
        end_ids: Iterable[int],
        window: int,
        pad_id: int | None,
    ) -> CausalFim:
        """The model over `network` with what it needs of `tokenizer` (infill.models.base.Tokenizer with
        lead_ids, special_ids and size: an HF folder's or a GGUF file's)."""
        return cls(
            network,
            fim=fim,
            lead=tokenizer.lead_ids(),
            end_ids=end_ids,
            banned=tokenizer.special_ids(),
            text_vocab=tokenizer.size(),
            window=window,
            pad_id=pad_id,
        )

    @property
    def overhead(self) -> int:
        """Prompt tokens beyond the prefix and suffix: the lead and the three FIM tokens."""
        return len(self.lead) + (3 if self.fim is not None else 0)

    def prompt(self, prefix: Sequence[int], suffix: Sequence[int]) -> list[int]:
        """The tokens before the middle: lead + FIM prompt, or lead + prefix for a model without FIM tokens."""
        if self.fim is None:
            return [*self.lead, *prefix]
        return [*self.lead, *fim_prompt(self.fim, prefix, suffix)]

    def draft(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        """q(x_n | prompt, x_{<n}) for the one target masked[n]: (1, V) logits."""
        if int(targets.numel()) != 1:
            raise DecodeError(
                "a left-to-right model predicts one position per pass, the next one: draft with --draft lookup"
            )
        return self._logits([self._sequence(ids, masked, n, targets)], 1)[0]

    def draft_many(self, ids: Sequence[torch.Tensor], masked: torch.Tensor, ns: Sequence[int]) -> torch.Tensor:
        """`draft` of several sequences in one pass (infill.models.base.BatchedDraft): row b is
        q(x_{ns[b]} | prompt, ids[b]'s x_{<ns[b]}), (B, V) logits."""
        seqs = [self._sequence(x, masked, n, masked[n : n + 1]) for x, n in zip(ids, ns, strict=True)]
        return self._logits(seqs, 1)[:, 0]

    def verify(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> torch.Tensor:
        """q(x_i | prompt, x_{<n}, drafts before i) for the targets masked[n:n+k]: (k, V) logits, one forward."""
        return self._logits([self._sequence(ids, masked, n, targets)], int(targets.numel()))[0]

    def _sequence(self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor) -> list[int]:
        """The causal sequence whose last k rows predict `targets` = masked[n:n+k]: the prompt, x_0 .. x_{n+k-2}."""
        order = [int(p) for p in masked.tolist()]
        k = int(targets.numel())
        start, total = (order[0] if order else 0), len(order)
        if order != list(range(start, start + total)):
            raise DecodeError("a left-to-right model fills one contiguous span per sequence")
        if [int(p) for p in targets.tolist()] != order[n : n + k]:
            raise DecodeError("a left-to-right model predicts the positions of its span in order")
        tokens = [int(t) for t in ids.tolist()]
        seq = self.prompt(tokens[:start], tokens[start + total :]) + tokens[start : start + n + k - 1]
        if len(seq) < k:
            raise DecodeError("nothing to condition on: the span starts the text and the model has no start token")
        return seq

    def _logits(self, seqs: list[list[int]], k: int) -> torch.Tensor:
        """The distribution's logits (B, k, V), float32: the network's predictions of the k positions after
        seq[:len(seq)-k+1] .. seq of each sequence, end tokens summed into `pad_id`, banned tokens at -inf. Rows
        kept by `remembering` are read, not computed; otherwise one pass of the engine."""
        import torch

        memo = self._memo
        if memo is not None:
            keys = [[tuple(s[: len(s) - k + 1 + j]) for j in range(k)] for s in seqs]
            if all(key in memo for row in keys for key in row):
                return torch.stack([torch.stack([memo[key] for key in row]) for row in keys])  # (B, k, V)
        logits = self._run(seqs, k)
        if self._ends.numel() > 1:
            logits[..., self.pad_id] = torch.logsumexp(logits[..., self._ends], dim=-1)
        logits[..., self._banned] = float("-inf")
        if memo is not None:
            for b, row in enumerate(keys):
                for j, key in enumerate(row):
                    memo[key] = logits[b, j].clone()
                    memo.move_to_end(key)
            while len(memo) * self.vocab_size * 4 > MEMO_BYTES:
                memo.popitem(last=False)
        return logits

    def _run(self, seqs: list[list[int]], k: int) -> torch.Tensor:
        """One pass of the engine: the network's logits (B, k, V)."""
        self.nfe += 1
        return self.engine.rows(seqs, k)

    @contextmanager
    def remembering(self) -> Iterator[None]:
        """Within it, the rows a pass computes are kept (by the tokens before them, up to MEMO_BYTES), and a pass
        whose every row was computed before reads them instead: the score of a fill just decoded (its tokens'
        conditionals were all computed while decoding it) costs no pass. The same logits either way; the kept
        rows go when it ends, so that the next fill computes its own."""
        self._memo = OrderedDict()
        try:
            yield
        finally:
            self._memo = None

    def parameter_count(self) -> int:
        return self.engine.parameter_count()


def load_folder(path: str | Path, spec: ModelSpec) -> LoadedModel:
    """A left-to-right code model folder (config.json, *.safetensors, tokenizer files) as a CausalFim, kind "ar".

    Nothing is downloaded and no remote code runs (`model_type` picks a stock class, AR_ARCHITECTURES). Before any
    weight is read: the tokenizer must fit the vocabulary and the weights the free memory (ModelError), and a
    tokenizer with only part of a family's FIM tokens is refused."""
    from infill.hardware import fast_bf16, resolve_device
    from infill.models import hf_folder
    from infill.models.registry import LoadedModel

    folder = hf_folder.model_folder(path)
    raw = hf_folder.read_json(folder / "config.json")
    model_type = str(raw.get("model_type", "")).lower()
    if model_type not in AR_ARCHITECTURES:
        known = ", ".join(sorted(AR_ARCHITECTURES))
        raise ModelError(f"{folder}: unsupported left-to-right model_type {model_type!r} (known: {known})")
    device = resolve_device(spec.device).type
    # bf16 weights where bf16 products are fast: half the memory, and a long prompt's pass twice as fast as an
    # autocast over fp32 weights (docs/code-models.md)
    dtype = "bfloat16" if spec.bf16 and fast_bf16(device) else "float32"
    hf_folder.check_memory(folder, raw, device, dtype)
    tokenizer = hf_folder.load_tokenizer(folder)
    hf_folder.check_vocabulary(folder, raw, tokenizer)
    fim = find_fim(tokenizer.token_id, f"the tokenizer of {folder}")
    ends = hf_folder.end_token_ids(
        raw, hf_folder.generation_config(folder), tokenizer, fim.ends if fim is not None else ()
    )
    class_name = AR_ARCHITECTURES[model_type]
    model = hf_folder.load_network(folder, raw, class_name, device, dtype=dtype)
    engine = TorchEngine(model)
    pad_id = getattr(tokenizer.hf, "eos_token_id", None)
    backend = CausalFim.over(engine, tokenizer, fim, ends, min(engine.positions, WINDOW), pad_id)
    info = {
        "path": str(folder),
        "architecture": class_name,
        "model_type": model_type,
        "fim": fim.family if fim is not None else None,
        "parameters": backend.parameter_count(),
        "device": device,
        "dtype": dtype,
        "max_length": backend.max_length,
    }
    return LoadedModel(name=spec.name, kind="ar", model=backend, tokenizer=tokenizer, info=info)
