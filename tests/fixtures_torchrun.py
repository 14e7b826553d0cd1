"""Several `infill` commands one after another in each process of one torchrun (`torchrun ... THIS_FILE ARGS`),
for tests that would otherwise launch one torchrun each: a launch starts three processes that import torch, most
of such a test's time. ARGS are the commands' arguments, each command's ended by NEXT; rank 0 prints DONE and the
command's exit code after each. Each command joins and leaves the process group itself (distributed.joined), as
it does when it is the process's only one; its rendezvous keys in torchrun's store get a prefix of their own (a
group started again would otherwise read the addresses its predecessor left there)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

NEXT = "--next-infill-command--"
DONE = "--infill-command-done--"


def split(args: list[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for arg in args:
        if arg == NEXT:
            commands.append([])
        else:
            commands[-1].append(arg)
    return [command for command in commands if command]


def _own_keys(number: int) -> None:
    """The next process group's rendezvous: torchrun's store under the prefix `command-NUMBER/`."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    def rendezvous(*args: Any, **kwargs: Any) -> Iterator[tuple[Any, int, int]]:
        for store, rank, size in dist.rendezvous(*args, **kwargs):
            yield dist.PrefixStore(f"command-{number}/", store), rank, size

    distributed_c10d.rendezvous = rendezvous  # type: ignore[assignment]


def _flushed(number: int) -> None:
    """Every process has written out what command NUMBER printed (a barrier on torchrun's store), so that each
    command's output, whichever rank printed it, comes before the DONE line that ends it."""
    import torch.distributed as dist

    sys.stdout.flush()
    sys.stderr.flush()
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    store.set(f"command-{number}-flushed-{os.environ['RANK']}", "1")
    store.wait([f"command-{number}-flushed-{rank}" for rank in range(int(os.environ["WORLD_SIZE"]))])


def main(args: list[str]) -> int:
    from infill.__main__ import run

    first_failure = 0
    for number, command in enumerate(split(args)):
        _own_keys(number)
        try:
            run(command)
            code = 0
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        _flushed(number)
        if os.environ.get("RANK") == "0":
            print(f"{DONE} {code}", flush=True)
        first_failure = first_failure or code
    return first_failure


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
