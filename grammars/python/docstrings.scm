; Definitions that can carry a docstring, and the docstrings that already exist (used by `infill docstrings`).
; Captures (prefixed doc. so they stay apart from the --node vocabulary of definitions.scm): @doc.function,
; @doc.class with @doc.name and @doc.body; @docstring for an existing docstring.

(function_definition
  name: (identifier) @doc.name
  body: (block) @doc.body) @doc.function

(class_definition
  name: (identifier) @doc.name
  body: (block) @doc.body) @doc.class

; A docstring is a plain string that is the first statement of a module (after comments) or of a block.
(module
  .
  (comment)*
  .
  (expression_statement
    .
    [(string) (concatenated_string)] @docstring
    .))

(block
  .
  (expression_statement
    .
    [(string) (concatenated_string)] @docstring
    .))
