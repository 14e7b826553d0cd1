; Declarations that can carry a JSDoc comment (used by `infill docstrings`).
; @doc.function / @doc.class / @doc.method with @doc.name. For `const f = () => ...` the
; captured node is the declaration; the function is its declarator's value.

(function_declaration name: (identifier) @doc.name) @doc.function
(generator_function_declaration name: (identifier) @doc.name) @doc.function
(class_declaration name: (identifier) @doc.name) @doc.class
(method_definition name: (_) @doc.name) @doc.method

(lexical_declaration
  (variable_declarator
    name: (identifier) @doc.name
    value: [(arrow_function) (function_expression) (generator_function)])) @doc.function

(variable_declaration
  (variable_declarator
    name: (identifier) @doc.name
    value: [(arrow_function) (function_expression) (generator_function)])) @doc.function
