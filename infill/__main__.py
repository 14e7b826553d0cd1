"""The `infill` program (the console script and `python -m infill`): Ctrl-C and SIGTERM are taken over before the
CLI is imported (infill.commands.interrupts), so a signal at any moment after this line gets the documented answer,
never a traceback and never an empty buffer from the editor filter."""

from __future__ import annotations

import os

from infill.commands import interrupts


def _hold_closed_descriptors() -> None:
    """Point a closed stdin, stdout or stderr (`<&-`, `>&-`) at /dev/null, so no file this process opens later
    takes descriptor 0, 1 or 2 (where a stray write would land in it). sys.stdin / sys.stdout stay None: the
    commands that need a closed stream say so (one line, exit 2)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                opened = os.open(os.devnull, os.O_RDWR)
            except OSError:
                return
            if opened != fd:  # a lower descriptor was free first; this one stays closed
                os.close(opened)


def run(args: list[str] | None = None) -> None:
    """Run `infill ARGS` (default: the process's arguments) as the program: exits with its exit code."""
    interrupts.install()
    _hold_closed_descriptors()
    try:
        from infill.cli import main

        main(args, prog_name="infill")
    finally:
        interrupts.forget_answered_interrupts()


if __name__ == "__main__":
    run()
