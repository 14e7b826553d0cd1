"""`infill lsp`: a language server for editors (inline completions, completions, code actions)."""

from __future__ import annotations

import click

from infill.clitypes import IntRange, value_option
from infill.server import protocol

HELP = """Serve editors over the Language Server Protocol (stdio, or --tcp on 127.0.0.1).

\b
Inline completions (ghost text, LSP 3.18 textDocument/inlineCompletion) and the same
fills as textDocument/completion; code actions "Fill selection with infill" and
"Add missing docstrings". The model is loaded once and kept. Settings (model,
threshold, tokens, decoder) come from initializationOptions and
workspace/didChangeConfiguration. Needs the lsp extra (pygls, lsprotocol): from a clone,
pip install '.[lsp]'.
Editor set-up: docs/editors.md.
"""


@click.command(help=HELP)
@click.option("--stdio", "use_stdio", is_flag=True, help="Serve on stdin/stdout (the default; editors often pass it).")
@click.option(
    "--tcp",
    "tcp_port",
    type=IntRange(1, 65535),
    metavar="PORT",
    help="Serve on 127.0.0.1:PORT instead (loopback only), one client at a time.",
)
@value_option(
    "--max-input-bytes",
    IntRange(min=0),
    protocol.DEFAULT_MAX_INPUT_BYTES,
    "Documents larger than this get no fills (0 = no limit).",
)
@click.option(
    "--model",
    metavar="NAME",
    help="The model while the client's settings name none (the `model` setting's default): a packaged name, a "
    "folder, a GGUF file, an Ollama name, a cached repo id or URL#MODEL.",
)
def lsp(use_stdio: bool, tcp_port: int | None, max_input_bytes: int, model: str | None) -> None:
    if use_stdio and tcp_port is not None:
        raise click.UsageError("give --stdio or --tcp PORT, not both")
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        from infill.extras import install_hint

        raise click.ClickException(f"infill lsp needs the lsp extra: {install_hint('lsp')}") from None
    from infill.errors import InputError
    from infill.lsp.features import serve
    from infill.lsp.fills import Settings
    from infill.models import onnx

    onnx.Background.enabled = True  # the first suggestion does not wait for the ONNX export
    if model is not None:
        try:
            Settings.parse({"model": model})
        except InputError as exc:
            raise click.BadParameter(str(exc), param_hint="--model") from None
    serve(max_input_bytes, tcp_port, model)
