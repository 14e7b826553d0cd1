"""The fill core, shared by the CLI, the server, the language server, the docstring filler and `infill eval`:
plain requests in, results or InfillError out.

- infill.core.fill: one `infill fill` request (FillRequest, run_fill, fill_json);
- infill.core.pipeline: the fill itself (fill_text: text and spans -> edits, in named steps), which infill.api
  re-exports; its steps' parts: infill.core.plan (regions), infill.core.candidates (the check step),
  infill.core.ranking (rank, features, confidence), infill.core.edits (Edit, FillResult);
- infill.core.kinds (the model kinds, one module each, and their registry) and infill.core.backends (what a
  kind is), infill.core.tokens, infill.core.checks (the syntax rule), infill.core.monitor (monitors),
  infill.core.calibration: what a fill is made of; infill.core.cache (the loaded models) and infill.core.catalog
  (the models on this machine).

One `infill docstrings` run is infill.docstrings.run, a client of this
core. Nothing here imports torch or Click.
"""
