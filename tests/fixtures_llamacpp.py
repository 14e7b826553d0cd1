"""Tiny models for the llama.cpp engine's tests: the tiny random transformers models of the other tests, written
as GGUF files (infill.models.tiny_gguf) so that llama.cpp runs the very weights eager PyTorch runs.

Outside CI an environment without the `llamacpp` extra skips these tests; CI installs the extra (pyproject's dev
extra) and sets INFILL_REQUIRE_EXTRAS=1, where a missing extra fails them instead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("INFILL_REQUIRE_EXTRAS") != "1":
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    pytest.importorskip("gguf", reason="the llamacpp extra is not installed")

from fixtures_bd import tiny_causal_lm

from infill.models.autoregressive import CausalFim
from infill.models.fim import FimTokens
from infill.models.gguf import read_header
from infill.models.llamacpp import LlamaEngine
from infill.models.tiny_gguf import TOKEN_CONTROL, TOKEN_NORMAL, Vocabulary, write_gguf

TOKEN_UNKNOWN, TOKEN_BYTE = 2, 6  # tokenizer.ggml.token_type of <unk> and of the <0xNN> tokens

# the 9-token layout of tests/test_ar_exactness.py: tokens 0..4, an end token, the three FIM tokens
END, PRE, SUF, MID = 5, 6, 7, 8
VOCAB = 9
FIM = FimTokens("qwen", PRE, SUF, MID)
NINE = Vocabulary(
    ["a", "b", "c", "d", "e", "<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"],
    [TOKEN_NORMAL] * 5 + [TOKEN_CONTROL] * 4,
    ["a b"],
    eos=END,
    pre="qwen2",
)


def sentencepiece_vocabulary(pieces: list[str]) -> Vocabulary:
    """A Code Llama-like sentencepiece vocabulary (tokenizer.ggml.model "llama": llama.cpp puts a space before
    the first word of a text, as sentencepiece does): unknown, start and end tokens, the 256 byte tokens, `pieces`
    (scored by length: longer ones merge first) and Code Llama's four FIM tokens, spelled with their "▁"."""
    space = "\u2581"
    fim = [space + t for t in ("<PRE>", "<SUF>", "<MID>", "<EOT>")]
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *pieces, *fim]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL, *[TOKEN_BYTE] * 256, *[TOKEN_NORMAL] * len(pieces)]
    scores = [0.0] * 259 + [float(len(p)) for p in pieces] + [0.0] * len(fim)
    return Vocabulary(
        tokens,
        [*types, *[TOKEN_CONTROL] * len(fim)],
        [],
        eos=2,
        bos=1,
        adds_bos=True,
        model="llama",
        scores=scores,
        unk=0,
    )


def network_gguf(path: Path, network: Any, vocab: Vocabulary = NINE) -> Path:
    """A transformers causal LM (fp32) written as an f32 GGUF file at `path`."""
    weights = {name: t.detach().float().numpy() for name, t in network.state_dict().items()}
    return write_gguf(path, network.config.to_dict(), weights, vocab, name=path.stem)


def engine_of(path: Path) -> LlamaEngine:
    header = read_header(path)
    return LlamaEngine(path, header, threads=1, window=header.context_length or 128)


def fim_pair(tmp: Path, seed: int = 3, ends: tuple[int, ...] = (), arch: str = "qwen2") -> tuple[CausalFim, CausalFim]:
    """The same random network as a CausalFim on llama.cpp and on eager PyTorch (the 9-token layout; without end
    tokens every fill has exactly M tokens of 0..4, the end token being banned with the FIM tokens)."""
    network = tiny_causal_lm(arch, seed=seed, vocab=VOCAB)
    path = network_gguf(tmp / f"{arch}-{seed}.gguf", network)
    banned = {END, PRE, SUF, MID} - set(ends)
    llama = CausalFim(engine_of(path), fim=FIM, end_ids=ends, banned=banned)
    torch_fim = CausalFim(network, fim=FIM, end_ids=ends, banned=banned)
    return llama, torch_fim
