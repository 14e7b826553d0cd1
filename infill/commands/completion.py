"""`infill completion bash|zsh|fish`: print Click's shell completion script (no torch import).

The generated scripts are committed in completions/; tests/test_cli_completion.py fails when they drift.
"""

from __future__ import annotations

import click

PROG = "infill"
COMPLETE_VAR = "_INFILL_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def completion_script(shell: str, group: click.Command) -> str:
    """The completion script Click generates for `group` (the `infill` group) in `shell`."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    if cls is None:
        raise click.BadParameter(f"unsupported shell {shell!r}")
    return cls(group, {}, PROG, COMPLETE_VAR).source()


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(infill completion bash)"  (or save it in ~/.local/share/bash-completion/completions/)
    zsh:   infill completion zsh > "${fpath[1]}/_infill"
    fish:  infill completion fish > ~/.config/fish/completions/infill.fish
    """
    click.echo(completion_script(shell, ctx.find_root().command), nl=False)
