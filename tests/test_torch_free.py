"""A fill with a model that runs outside torch (a model server) imports no torch, and draws what it drew when it
did: the seed sent to the server is the one torch.Generator gave (infill.decoding.seeded). The shipped model's fill,
in the same process, does import torch: the probe sees it when it is there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from fixtures_remote import fake, healthy

from infill import api
from infill.cli import main
from infill.config import ModelSpec
from infill.core import kinds
from infill.decoding.seeded import SERVER_SEED_BOUND, Seeded
from infill.errors import InputError
from infill.models import registry

ROOT = Path(__file__).resolve().parent.parent
SEEDS = [0, 1, 7, 2**31 - 1, 2**32 - 1, 2**32 + 5, 2**63, 2**64 - 1, -1, -2, -(2**63), 12345678901234]

PROBE = """
import sys, threading
sys.path.insert(0, "tests")
from click.testing import CliRunner
from fixtures_remote import FakeServer, healthy
from infill.cli import main

server = FakeServer(healthy)
threading.Thread(target=server.serve_forever, daemon=True).start()
seen = []
for model in (server.url + "#qwen-fake", None):
    args = ["fill", "-", "--stdin-filename", "m.py", "--span", "2", "--temperature", "0.5"]
    r = CliRunner().invoke(main, args + (["--model", model] if model else []), input="def f():\\n    pass\\n")
    assert r.exit_code == 0, (model, r.output)
    seen.append("torch" in sys.modules)
print(seen)
"""


def reference(seed: int, count: int) -> list[int]:
    """What the remote kind drew with torch before: torch.randint(0, 2**31 - 1) from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    return [int(torch.randint(0, SERVER_SEED_BOUND, (1,), generator=generator)) for _ in range(count)]


def test_a_server_fill_imports_no_torch_and_the_shipped_models_does() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[False, True]"  # after the server's fill, then after the shipped model's


@pytest.mark.parametrize("seed", SEEDS)
def test_server_seeds_are_the_draws_of_torchs_generator(seed: int) -> None:
    drawn = Seeded(seed)
    assert [drawn.server_seed() for _ in range(5)] == reference(seed, 5)


def test_server_seeds_past_the_twist_of_the_state() -> None:
    """700 draws take 1400 words: past the 624 of the first state, into the second."""
    drawn = Seeded(42)
    assert [drawn.server_seed() for _ in range(700)] == reference(42, 700)


def test_the_torch_generator_made_after_server_seeds_goes_on_from_them() -> None:
    drawn, plain = Seeded(9), torch.Generator().manual_seed(9)
    first = [drawn.server_seed() for _ in range(3)]
    assert first == [int(torch.randint(0, SERVER_SEED_BOUND, (1,), generator=plain)) for _ in range(3)]
    assert torch.equal(torch.rand(4, generator=drawn.torch), torch.rand(4, generator=plain))
    assert drawn.server_seed() == int(torch.randint(0, SERVER_SEED_BOUND, (1,), generator=plain))


def test_a_seeded_fill_sends_the_server_the_seeds_torch_drew() -> None:
    for server in fake(healthy):
        args = ["fill", "-", "--stdin-filename", "m.py", "--span", "2", "--temperature", "0.5", "-n", "3"]
        api.clear_model_cache()
        r = CliRunner().invoke(main, [*args, "--seed", "11", "--model", f"{server.url}#qwen-fake"], input="x\ny\n")
        assert r.exit_code == 0, r.output
        sent = [body["seed"] for _, path, _, body in server.seen if path.endswith("/completions") and body]
        assert len(sent) >= 3 and sent == reference(11, len(sent))


def test_torch_threads_are_set_for_a_kind_that_runs_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    monkeypatch.setenv("INFILL_THREADS", "3")
    registry.register("threads-probe", lambda spec: registry.LoadedModel("threads-probe", "asarm", None, None, {}))
    try:
        torch.set_num_threads(1)
        kinds.load(ModelSpec(name="threads-probe"))
        assert torch.get_num_threads() == 3
    finally:
        registry.unregister("threads-probe")
        torch.set_num_threads(before)


def test_a_junk_thread_count_is_refused_before_a_server_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFILL_THREADS", "many")
    for server in fake(healthy):
        with pytest.raises(InputError, match="INFILL_THREADS"):
            kinds.load(ModelSpec(name=f"{server.url}#qwen-fake"))
        assert server.seen == []
