"""The model-server kind ("remote", infill.models.remote): a left-to-right code model on an OpenAI-compatible
server, named by a URL (`--model http://host:8000/v1#model`). One span per prompt; the server samples each
candidate with its tokens' log-probabilities; retrieved lines are scored by the server (`echo`).
"""

from __future__ import annotations

from dataclasses import replace

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.core.backends import Fill, Kind, Run, retrieves
from infill.core.plan import Region, Window, left_to_right
from infill.models.registry import LoadedModel


class Remote:
    """The model-server kind (infill.models.remote): the tool plans the fill and builds the family's FIM prompt,
    the server samples. Beam search (the tool's default) and ASSD become the server's own sampling at the same
    temperature (greedy at 0): neither can run over HTTP without the model's logits at every step."""

    def prepare(self, cfg: DecodeConfig, loaded: LoadedModel) -> tuple[LoadedModel, DecodeConfig]:
        if cfg.decoder in ("beam", "assd"):
            cfg = replace(cfg, decoder="sequential")
        return loaded, cfg

    def window(self, loaded: LoadedModel) -> Window:
        # healed where the server can be told that a fill begins with given text (RemoteFim.constrains; its
        # tokenizer says where to cut: ServerTokenizer.pretoken_start); left to right: the server's prompt cache
        # (llama-server's cache_prompt, vLLM's prefix caching, Ollama's) keeps a prompt up to its first change, as
        # llama.cpp's does here
        heals = loaded.remote.constrains is not None
        window = Window(loaded.remote.max_length, has_bos=False, has_pad=True, groups_spans=False, heals=heals)
        return left_to_right(window)

    def sample(self, region: Region, run: Run, attempt: int) -> list[Fill]:
        """One sample of the region's one span from the server (greedy at temperature 0), scored by the
        log-probabilities of the tokens that wrote its text (unscored where the server gives none). A healed span
        (token healing: plan.heal) is asked to begin with the healed text, which the fill then holds (cut off it by
        infill.core.edits): at temperature 0 that is the tool's own greedy healing; a sampled one is constrained
        step by step (the server renormalises over the consistent tokens at each), not drawn from the exact
        conditional (docs/server.md). A one-line span stops at the line break; a sample whose first line came back
        blank is asked again without that stop (the same sample: a stop only cuts), unless the server said that
        another stop ended it (vLLM's stop_reason: the model's end token, which ends it again). At temperature 0
        the server's answer is the same at every attempt: a later attempt (the pipeline draws again when the checks
        reject a fill) sends nothing and finds nothing new, instead of asking the server for the same answer
        again."""
        (plan,) = region.spans
        from infill.models.remote import Sampling

        model, tok, cfg = run.loaded.remote, run.loaded.tokenizer, run.cfg
        if cfg.temperature == 0 and attempt > 0:
            return []
        prefix, suffix = tok.decode(region.prefix_ids), tok.decode(region.suffix_ids)
        seed = None if cfg.temperature == 0 else run.draws.server_seed()
        stops = [*model.ends[:3], "\n"] if plan.span.one_line else list(model.ends[:4])
        if run.on_progress is not None:
            run.on_progress({"event": "step", "tokens": run.totals.tokens, "base": run.totals.tokens, "nfe": 0})
        sampling = Sampling(cfg.temperature, cfg.top_k, cfg.top_p, seed)
        heal = plan.heal
        got = model.complete(prefix, suffix, plan.budget, sampling, stops, heal)
        if plan.span.one_line and got.finish == "stop" and got.line_break and not got.text[len(heal) :].strip():
            got = model.complete(prefix, suffix, plan.budget, sampling, list(model.ends[:4]), heal)
        run.totals.nfe += 1
        run.totals.tokens += len(got.logprobs)
        score = float(sum(got.logprobs))
        return [Fill(got.text, score, len(got.logprobs), min(got.logprobs, default=0.0), scored=got.scored)]

    def ranked_lines(self, regions: list[Region], run: Run, options: FillOptions) -> list[Fill]:
        """Lines from the user's code, each scored by the server in one request (`echo` with `logprobs`: the
        log-probabilities of the line's tokens after the prompt); none where the server does not return them."""
        from infill.retrieval import line_candidates

        if not retrieves(regions, options):
            return []
        region, plan = regions[0], regions[0].spans[0]
        model, tok = run.loaded.remote, run.loaded.tokenizer
        prompt = model.prompt(tok.decode(region.prefix_ids), tok.decode(region.suffix_ids))
        before = len(tok.encode(prompt))
        if model.echo_tokens is not None and before > model.echo_tokens:  # too slow there (EXTRAS_ECHO_TOKENS)
            return []
        out = []
        for text in line_candidates(plan.prefix, plan.suffix, options.context):
            if text.strip() == plan.replaced.strip():
                continue
            count = len(tok.encode(prompt + text)) - before
            if count < 1 or count >= plan.budget:
                continue
            if run.on_progress is not None:
                run.on_progress({"event": "score", "nfe": run.totals.nfe})
            logq = model.score_tail(prompt, text, count)
            run.totals.nfe += 1
            if logq is None:
                return []
            out.append(Fill(text, float(sum(logq)), count, min(logq)))
        return out


def load_url(spec: ModelSpec) -> LoadedModel | None:
    """The model a URL names on its server (infill.models.remote_load), else None."""
    from infill.models.remote_http import is_remote

    if not is_remote(spec.name):
        return None
    from infill.models.remote_load import load_remote

    return load_remote(spec)


KIND = Kind(
    name="remote",
    label="a model server's",
    decoders=("sequential",),
    backend=Remote(),
    load_name=load_url,
    runs_torch=False,
)
