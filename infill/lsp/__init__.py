"""`infill lsp`: a language server (pygls) with inline completions, completions and code actions, built on the
fill core (infill.api.fill_text) and the docstring filler. See docs/editors.md."""
