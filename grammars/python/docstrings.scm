; Definitions that can carry a docstring, and the docstrings that already exist (used by `infill docstrings`).
; Captures: @definition.function / @definition.class with @name and @body; @docstring for an existing docstring.

(function_definition
  name: (identifier) @name
  body: (block) @body) @definition.function

(class_definition
  name: (identifier) @name
  body: (block) @body) @definition.class

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
