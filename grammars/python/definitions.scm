; Definitions for `infill fill --function/--class/--node` (Python).
; Capture names are the selector vocabulary: @function, @function.name, @function.body, @class, ...
; A *.body capture is filled between its delimiters (here: the indented block; a leading docstring is kept).

(function_definition
  name: (identifier) @function.name
  body: (block) @function.body) @function

(class_definition
  name: (identifier) @class.name
  body: (block) @class.body) @class

(comment) @comment
