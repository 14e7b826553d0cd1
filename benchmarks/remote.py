"""One model server for several editors (docs/server.md, "A server for a team"): N clients, each its own
`infill serve --stdio` process (the JSON server an editor plugin owns), share one llama-cpp-python server that serves
the tiny Qwen-layout GGUF model; every request must be answered. Reports the p50/p95 latency of a fill with one
client alone and with all N at once, and the remote engine's own time per fill beyond the server's (planning, the
prompt, JSON, the syntax check, retrieval's bookkeeping, ranking), measured in this process over the same server.

    python benchmarks/remote.py [--clients 8] [--requests 10]

llama-cpp-python's server (0.3.36) has no parallel slots: it runs one completion at a time, so N clients queue
there; llama.cpp's own `llama-server --parallel N` and vLLM batch them instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SOURCE = (
    "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n\n\n"
    "def spread(xs):\n    lo = min(xs)\n    hi = max(xs)\n    return hi - lo\n"
)


class Client:
    """One `infill serve --stdio` process: one request at a time, as an editor's plugin sends them."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "infill", "serve", "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
        )
        self.next_id = 0

    def request(self, params: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.next_id += 1
        line = json.dumps({"id": self.next_id, "method": "fill", "params": params}) + "\n"
        self.process.stdin.write(line.encode())
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        assert answer.get("id") == self.next_id, answer
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def timed_fills(client: Client, params: list[dict[str, Any]], out: list[float], errors: list[str]) -> None:
    for p in params:
        started = time.perf_counter()
        answer = client.request(p)
        out.append(time.perf_counter() - started)
        if "error" in answer:
            errors.append(answer["error"].get("message", "?"))


def overhead(url: str, fills: int) -> dict[str, float]:
    """The engine's time per fill beyond the time spent waiting on the server (every request: completions, echo
    scoring, tokenize), in this process, the model loaded once."""
    from infill import api
    from infill.config import TOOL_DECODE, ModelSpec
    from infill.spans import Selection, resolve

    loaded = api.load_model(ModelSpec(name=url))
    client = loaded.remote.client
    own, requests, totals = [], [], []
    for i in range(fills):
        span = ("2", "3", "7", "8", "9")[i % 5]
        spans = resolve(SOURCE.encode(), (Selection("span", span),), "python", "m.py")
        waited, sent = client.waited, client.requests
        started = time.perf_counter()
        api.fill_text(SOURCE, spans, language="python", model=loaded, decode=TOOL_DECODE)
        total = time.perf_counter() - started
        totals.append(total)
        own.append(total - (client.waited - waited))
        requests.append(client.requests - sent)
    return {
        "fill_ms_median": statistics.median(totals) * 1000,
        "engine_ms_median": statistics.median(own) * 1000,
        "engine_ms_p95": percentile(own, 0.95) * 1000,
        "requests_per_fill": statistics.mean(requests),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=10, help="fills per client")
    args = parser.parse_args()

    from fixtures_remote import LlamaServer

    from infill.models.tiny_gguf import tiny_gguf

    work = Path(tempfile.mkdtemp(prefix="infill-remote-bench-"))
    model = tiny_gguf(work / "qwen.gguf", "qwen")
    server = LlamaServer({"qwen": model})
    server.start(work / "server.log")
    url = f"{server.url}#qwen"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "INFILL_NO_DAEMON": "1", "PYTHONPATH": str(ROOT)}
    clients: list[Client] = []
    try:
        clients = [Client(env) for _ in range(args.clients)]
        spans = ("2", "3", "7", "8", "9")
        params = [
            {"text": SOURCE, "filename": "m.py", "span": spans[i % len(spans)], "model": url}
            for i in range(args.requests)
        ]
        for c in clients:  # each loads the model (a request to the server) once
            c.request(params[0])
        alone: list[float] = []
        errors: list[str] = []
        timed_fills(clients[0], params, alone, errors)
        together: list[list[float]] = [[] for _ in clients]
        threads = [
            threading.Thread(target=timed_fills, args=(c, params, together[i], errors)) for i, c in enumerate(clients)
        ]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        shared = [x for xs in together for x in xs]
        own = overhead(url, 3 * args.requests)
        report = {
            "clients": args.clients,
            "fills_per_client": args.requests,
            "answered": len(shared),
            "asked": args.clients * args.requests,
            "errors": len(errors),
            "alone_p50_ms": percentile(alone, 0.5) * 1000,
            "alone_p95_ms": percentile(alone, 0.95) * 1000,
            "shared_p50_ms": percentile(shared, 0.5) * 1000,
            "shared_p95_ms": percentile(shared, 0.95) * 1000,
            "shared_fills_per_s": len(shared) / wall,
            **own,
        }
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in report.items()}, indent=1))
        if errors or len(shared) != args.clients * args.requests:
            sys.exit(f"unanswered or failed requests: {errors[:3]}")
    finally:
        for c in clients:
            c.close()
        server.stop()


if __name__ == "__main__":
    main()
