"""The work behind the commands, shared by the CLI and the server: plain requests in, results or InfillError out.

- infill.core.fill: one `infill fill` request (FillRequest, run_fill, fill_json);
- infill.core.docstrings: one `infill docstrings` run (DocstringsRequest, run_docstrings).

The fill itself is infill.api.fill_text. Nothing here imports torch or Click.
"""
