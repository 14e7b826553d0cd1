"""Every engine of the AS-ARM's cached pass (eager PyTorch, ONNX Runtime fp32 and int8) against the full forward,
on a tiny model: the same logits (int8: close ones), the same fills, and the exported graph's cache."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from infill import api
from infill.cli import main
from infill.config import DecodeConfig, ModelSpec
from infill.core.kinds import load
from infill.decoding import decode, score, score_many
from infill.errors import InputError, ModelError
from infill.extras import install_hint
from infill.models import onnx
from infill.models.base import FillProblem
from infill.models.xlnet import XLNetAnySubset, resolve_engine

torch.set_num_threads(1)
needs_onnx = pytest.mark.skipif(not onnx.available(), reason="the `onnx` extra is not installed")
ENGINES = ["torch", pytest.param("onnx", marks=needs_onnx), pytest.param("onnx-int8", marks=needs_onnx)]
SOURCE = "def mean(values):\n    total = 0\n    for value in values:\n        total += value\n    return total\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infill.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-engines") / "model", init_scale=0.3, seed=5)


@pytest.fixture(scope="module")
def reference(folder: Path) -> XLNetAnySubset:
    """The full two-stream forward (no cache): the reference every engine is held to."""
    model = load(ModelSpec(name=str(folder), device="cpu", bf16=False, engine="torch")).model
    return XLNetAnySubset(model.net, mask_id=model.mask_id, device="cpu", cache=False)


@pytest.fixture(scope="module", autouse=True)
def graphs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's cache directory (INFILL_CACHE_DIR while its tests run): it starts without the tiny model's
    graph, which `made_elsewhere` makes once for every test here that needs one."""
    with pytest.MonkeyPatch.context() as patch:
        cache = tmp_path_factory.mktemp("engines-cache")
        patch.setenv(onnx.CACHE_ENV, str(cache))
        yield cache


@pytest.fixture(scope="module")
def made_elsewhere(folder: Path, reference: XLNetAnySubset) -> tuple[XLNetAnySubset, list[Any]]:
    """The module's one export, as a long-lived process makes it (onnx.Background): an `auto` model whose graph
    is missing starts making it in another process and runs on the eager engine meanwhile. Returns that model
    once the other process has made the graph (not yet adopted) and its logits of a walk on the eager engine."""
    assert not onnx.graph_ready(reference.net, int8=False)  # the module's fresh cache: the graph is missing
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("INFILL_ENGINE", raising=False)
        patch.setattr(onnx.Background, "enabled", True)
        model = XLNetAnySubset(
            reference.net, mask_id=reference.mask_id, device="cpu", engine="auto", folder=str(folder)
        )
    assert model.engine == "torch" and model._making is not None
    eager = walk(model, reference, seed=3)
    assert model._making[0].wait(timeout=600) == 0 and onnx.graph_ready(reference.net, int8=False)
    return model, eager


@pytest.fixture(scope="module")
def engines(reference: XLNetAnySubset, request: pytest.FixtureRequest) -> dict[str, XLNetAnySubset]:
    out = {"torch": XLNetAnySubset(reference.net, mask_id=reference.mask_id, device="cpu", engine="torch")}
    if onnx.available():
        request.getfixturevalue("made_elsewhere")  # the graph the ONNX engines load (int8: quantized from it)
        for name in ("onnx", "onnx-int8"):
            out[name] = XLNetAnySubset(reference.net, mask_id=reference.mask_id, device="cpu", engine=name)
    return out


def walk(model: XLNetAnySubset, reference: XLNetAnySubset, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(engine, reference) logits of every draft and verify pass of a left-to-right walk over a problem."""
    g = torch.Generator().manual_seed(seed)
    V, mask = reference.vocab_size, reference.mask_id
    N = 20
    ids = torch.randint(3, V, (N,), generator=g)  # ids 0-2 are the specials, <mask> among them
    masked = torch.tensor(sorted(torch.randperm(N - 1, generator=g)[:7].add(1).tolist()))
    ids[masked] = mask
    pairs = []
    for n in range(masked.shape[0]):
        targets = masked[n : n + 4]
        pairs.append((model.draft(ids, masked, n, targets), reference.draft(ids, masked, n, targets)))
        drafted = ids.clone()
        drafted[targets] = torch.randint(3, V, (targets.shape[0],), generator=g)
        pairs.append((model.verify(drafted, masked, n, targets), reference.verify(drafted, masked, n, targets)))
        ids[masked[n]] = int(torch.randint(3, V, (), generator=g))
    return pairs


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_matches_the_full_forward(
    engines: dict[str, XLNetAnySubset], reference: XLNetAnySubset, engine: str
) -> None:
    model = engines[engine]
    assert model.engine == engine
    for seed in range(3):
        for got, want in walk(model, reference, seed):
            finite = torch.isfinite(want)
            assert torch.equal(finite, torch.isfinite(got))
            if engine == "onnx-int8":  # int8 weights: close distributions, not the same numbers
                p, q = torch.softmax(got, -1), torch.softmax(want, -1)
                assert (p - q).abs().sum(-1).max() < 0.1  # total variation below 0.05
            else:
                assert (got - want)[finite].abs().max() < 2e-5


@needs_onnx
def test_greedy_fills_are_the_same_on_onnx_runtime(engines: dict[str, XLNetAnySubset]) -> None:
    mask = engines["torch"].mask_id
    ids = torch.tensor([50, mask, mask, mask, 90, 120, mask, mask, mask, mask, 70, 30, 50, mask, 80])
    problem = FillProblem(ids, (ids == mask).nonzero().squeeze(-1))
    for cfg in (
        DecodeConfig(decoder="sequential", temperature=0),
        DecodeConfig(decoder="assd", draft="lookup", k=4, temperature=0),
        DecodeConfig(decoder="beam", beam=4, temperature=0),
    ):
        a, sa = decode(engines["torch"], problem, cfg, torch.Generator().manual_seed(0))
        b, sb = decode(engines["onnx"], problem, cfg, torch.Generator().manual_seed(0))
        assert a.tolist() == b.tolist() and sa.nfe == sb.nfe, cfg.decoder


@pytest.mark.parametrize("engine", ["torch", pytest.param("onnx", marks=needs_onnx)])
def test_batched_scoring_matches_one_pass_per_fill(
    engines: dict[str, XLNetAnySubset], reference: XLNetAnySubset, engine: str
) -> None:
    """Retrieval's scoring of several lines in one pass (infill.decoding.score_many) on each exact engine: the
    full forward's log-probabilities of each line, to 2e-5."""
    g = torch.Generator().manual_seed(11)
    mask, V = reference.mask_id, reference.vocab_size
    ids = torch.randint(3, V, (30,), generator=g)
    masked = torch.arange(12, 22)
    ids[masked] = mask
    problem = FillProblem(ids, masked)
    fills = [torch.randint(3, V, (10,), generator=g) for _ in range(5)]
    lengths = [1, 4, 10, 6, 2]
    got = score_many(engines[engine], problem, fills, lengths)
    for tokens, m, batched in zip(fills, lengths, got, strict=True):
        assert (batched - score(reference, problem, tokens, m)).abs().max() < 2e-5


@needs_onnx
def test_an_interrupted_pass_raises_cancelled_and_leaves_the_cache_whole(
    folder: Path, reference: XLNetAnySubset
) -> None:
    """interrupt_passes (a server's cancel) stops the pass in flight with Cancelled; the pass after it computes
    the prompt afresh and gives the full forward's logits."""
    import threading
    import time

    from infill.progress import Cancelled

    model = XLNetAnySubset(reference.net, mask_id=reference.mask_id, device="cpu", engine="onnx")
    engine = model.cache.engine  # type: ignore[union-attr]
    assert isinstance(engine, onnx.OnnxPass)
    real = engine.session

    class Stalled:
        """A session whose pass runs until it is told to stop, as ONNX Runtime checks its RunOptions."""

        def run(self, names: Any, feeds: Any, options: Any) -> Any:
            deadline = time.monotonic() + 30
            while not options.terminate and time.monotonic() < deadline:
                time.sleep(0.001)
            raise RuntimeError("Exiting due to terminate flag being set to true.")

    mask = model.mask_id
    ids = torch.tensor([50, mask, mask, mask, 90, 120, mask, 70])
    masked = (ids == mask).nonzero().squeeze(-1)
    failed: list[BaseException] = []

    def fill() -> None:
        try:
            model.draft(ids, masked, 0, masked[:1])
        except BaseException as exc:  # noqa: BLE001 - what the pass raised is the test's subject
            failed.append(exc)

    engine.session = Stalled()  # type: ignore[assignment]
    worker = threading.Thread(target=fill)
    worker.start()
    while engine._running is None and worker.is_alive():
        time.sleep(0.001)
    onnx.interrupt_passes()
    worker.join(10)
    assert not worker.is_alive() and len(failed) == 1 and isinstance(failed[0], Cancelled)
    engine.session = real
    onnx.interrupt_passes()  # no pass in flight: nothing happens
    got = model.draft(ids, masked, 0, masked[:1])
    assert (got - reference.draft(ids, masked, 0, masked[:1]))[torch.isfinite(got)].abs().max() < 2e-5


@needs_onnx
def test_the_exported_graph_is_kept_and_keyed_by_the_weights(
    engines: dict[str, XLNetAnySubset], monkeypatch: pytest.MonkeyPatch
) -> None:
    import copy

    from infill.models.onnx import OnnxPass

    net = engines["torch"].net
    first = OnnxPass(net)
    assert first.path.is_file() and first.path.parent == onnx.cache_dir() / "onnx"

    def no_export(*_: object) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx, "export", no_export)
    assert OnnxPass(net).path == first.path  # the second load reads the file
    changed = copy.deepcopy(net)
    with torch.no_grad():
        changed.transformer.layer[0].ff.layer_1.bias[0] += 1.0
    assert onnx.fingerprint(changed) != onnx.fingerprint(net)  # new weights never reuse a stale graph
    assert not list(first.path.parent.glob(".*"))  # no temporary file left behind


@needs_onnx
def test_an_unwritable_cache_directory_still_runs(
    engines: dict[str, XLNetAnySubset], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infill.models.onnx import OnnxPass

    graph = OnnxPass(engines["torch"].net).path
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv(onnx.CACHE_ENV, str(blocker))  # mkdir under a file fails
    monkeypatch.setattr(onnx, "export", lambda _net, path: path.write_bytes(graph.read_bytes()))
    made = OnnxPass(engines["torch"].net)
    assert not made.path.is_relative_to(blocker) and made.path.is_file()


@needs_onnx
def test_a_graph_that_cannot_be_made_falls_back_only_under_auto(
    reference: XLNetAnySubset, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("the exporter broke\nwith a second line")

    monkeypatch.setattr(onnx, "OnnxPass", broken)
    monkeypatch.delenv("INFILL_ENGINE", raising=False)
    model = XLNetAnySubset(reference.net, mask_id=reference.mask_id, device="cpu", engine="auto")
    assert model.engine == "torch"
    err = capsys.readouterr().err
    assert "the exporter broke" in err and "second line" not in err and err.count("\n") == 1
    with pytest.raises(ModelError, match="the exporter broke"):
        XLNetAnySubset(reference.net, mask_id=reference.mask_id, device="cpu", engine="onnx")


def test_engine_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFILL_ENGINE", raising=False)
    assert resolve_engine("torch", "cpu") == "torch"
    assert resolve_engine("auto", "cuda") == "torch"
    assert resolve_engine("auto", "cpu") == ("onnx" if onnx.available() else "torch")
    with pytest.raises(InputError, match="runs on the CPU"):  # flags that do not go together: exit 2
        resolve_engine("onnx", "cuda")
    # the language server's default: int8 weights where auto would run the fp32 graph, else what auto runs
    assert resolve_engine("auto-int8", "cpu") == ("onnx-int8" if onnx.available() else "torch")
    assert resolve_engine("auto-int8", "cuda") == "torch"
    monkeypatch.setenv("INFILL_ENGINE", "torch")
    assert resolve_engine("auto", "cpu") == "torch"
    assert resolve_engine("auto-int8", "cpu") == "torch"  # an engine the user named wins over the preference
    monkeypatch.setenv("INFILL_ENGINE", "fast")
    with pytest.raises(InputError, match="INFILL_ENGINE"):  # the user's value: exit 2, as every variable's
        resolve_engine("auto", "cpu")
    monkeypatch.delenv("INFILL_ENGINE")
    monkeypatch.setattr(onnx, "PACKAGES", (*onnx.PACKAGES, "no_such_package_for_infill"))
    assert resolve_engine("auto", "cpu") == "torch"  # a partial install: the eager engine, silently
    with pytest.raises(InputError, match=r"pip install '\.\[onnx\]'"):  # the tests run in the clone; exit 2
        resolve_engine("onnx", "cpu")


def fill(*args: str) -> tuple[int, str, str]:
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", *args])
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("engine", ENGINES)
def test_fill_with_engine_through_the_cli(
    folder: Path, tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    if engine != "torch":
        request.getfixturevalue("made_elsewhere")  # the module's one export (the CLI loads its graph)
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    common = ["--span", "4:4", "--model", str(folder), "--tokens", "6", "--format", "json", "--allow-syntax-errors"]
    code, out, err = fill(str(p), *common, "--engine", engine)
    assert code == 0, err
    if engine == "onnx":  # exact: the same edit as the eager engine
        code, eager, err = fill(str(p), *common, "--engine", "torch")
        assert code == 0, err
        (a,), (b,) = json.loads(out)["edits"], json.loads(eager)["edits"]
        assert a["score"] == pytest.approx(b.pop("score"), abs=1e-4)  # float sums in another order
        assert {k: v for k, v in a.items() if k != "score"} == b
    assert p.read_text() == SOURCE


def test_unknown_engine_and_onnx_on_a_block_diffusion_model(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    code, _, err = fill(str(p), "--span", "4:4", "--engine", "fast")
    assert code == 2 and "--engine" in err
    code, _, err = fill(str(p), "--span", "4:4", "--model", "blockdiff", "--engine", "onnx-int8")
    assert code == ModelError.exit_code and "AS-ARM" in err
    assert p.read_text() == SOURCE


def test_auto_int8_is_auto_for_a_kind_without_int8_weights(tmp_path: Path) -> None:
    """The language server's default engine preference loads every kind: a block-diffusion model runs as with
    auto (its own engine), where naming onnx-int8 is refused."""
    p = tmp_path / "m.py"
    p.write_text(SOURCE)
    args = ["--span", "4:4", "--model", "blockdiff", "--tokens", "4", "--allow-syntax-errors", "--diff"]
    default = fill(str(p), *args)[:2]
    assert default[0] in (0, 1)  # 1: --diff shows a change
    assert [fill(str(p), *args, "--engine", engine)[:2] for engine in ("auto-int8", "auto")] == [default] * 2


@pytest.mark.parametrize(
    ("flags", "saturates"),
    [
        ({"avx2"}, True),
        ({"avx2", "avx512_vnni"}, False),
        ({"avx2", "avx_vnni"}, False),
        ({"asimd"}, False),
        (set(), False),
    ],
)
def test_unsigned_int8_weights_only_where_the_signed_kernel_saturates(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], saturates: bool
) -> None:
    from infill import hardware

    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(flags))
    assert hardware.int8_dot_saturates() is saturates


@needs_onnx
@pytest.mark.slow
def test_a_long_lived_process_fills_in_pytorch_while_the_graph_is_made_elsewhere(
    folder: Path,
    reference: XLNetAnySubset,
    made_elsewhere: tuple[XLNetAnySubset, list[Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`infill lsp` and the servers (onnx.Background): a missing graph is made by another process, the fills run
    on the eager engine meanwhile (the first answer does not wait ~30 s for the export; `made_elsewhere`), and the
    next fill after the graph is ready runs on ONNX Runtime, with the same logits. Without Background the graph is
    made in place (the negative control: a one-off `infill fill`)."""
    with monkeypatch.context() as patch:
        patch.setenv(onnx.CACHE_ENV, str(tmp_path / "cache"))  # a cache without the graph
        patch.delenv("INFILL_ENGINE", raising=False)
        exported: list[Path] = []

        def export_here(net: Any, path: Path) -> None:  # stands for the export, which fails here
            exported.append(path)
            raise RuntimeError("exported in this process")

        patch.setattr(onnx, "export", export_here)
        in_place = XLNetAnySubset(
            reference.net, mask_id=reference.mask_id, device="cpu", engine="auto", folder=str(folder)
        )
        assert exported and in_place.engine == "torch" and in_place._making is None  # made here (auto's fallback)
    model, eager = made_elsewhere
    model.adopt_made_engine()
    assert model.engine == "onnx" and model._making is None
    for (got, want), (was, _) in zip(walk(model, reference, seed=3), eager, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(got, was, atol=1e-4, rtol=1e-4)


def test_a_graph_made_elsewhere_is_reaped_when_its_process_ends(tmp_path: Path) -> None:
    """A long-lived process (the daemon) may never use that model again, so nothing polls the maker: the
    process must not stay a zombie (state Z) until the next process is spawned. The maker fails fast here (no
    model folder); it is waited for by a thread, and poll() still gives its exit status."""
    from infill.server.lifecycle import _process_state

    process = onnx.make_elsewhere(str(tmp_path / "no-model"), False)
    deadline = time.monotonic() + 30.0
    while _process_state(process.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _process_state(process.pid) is None, f"process {process.pid} is {_process_state(process.pid)!r}"
    assert process.poll() == 1


def test_an_onnx_engine_without_its_extra_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`--engine onnx` without the `onnx` extra exited 123 (a model error), where a missing llama.cpp or grammar extra
    exits 2: what is missing is an install, named in the one line, and the file is untouched."""
    monkeypatch.setattr(onnx, "PACKAGES", ("onnxruntime", "an_extra_package_that_is_not_installed"))
    p = tmp_path / "a.py"
    p.write_text("def f(x):\n    return x + 1\n")
    r = CliRunner().invoke(main, ["fill", str(p), "--span", "2", "--engine", "onnx", "--daemon", "off"])
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert r.stderr.splitlines() == [
        "error: the ONNX Runtime engine needs an_extra_package_that_is_not_installed: "
        + f"{install_hint('onnx')} (or --engine torch)"
    ]
    assert p.read_text() == "def f(x):\n    return x + 1\n"
