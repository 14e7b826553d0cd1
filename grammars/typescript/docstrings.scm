; Declarations that can carry a JSDoc / TSDoc comment (used by `infill docstrings`). Same captures as
; grammars/javascript/docstrings.scm; TypeScript names classes with type_identifier.

(function_declaration name: (identifier) @doc.name) @doc.function
(generator_function_declaration name: (identifier) @doc.name) @doc.function
(class_declaration name: (type_identifier) @doc.name) @doc.class
(abstract_class_declaration name: (type_identifier) @doc.name) @doc.class
(method_definition name: (_) @doc.name) @doc.method

(lexical_declaration
  (variable_declarator
    name: (identifier) @doc.name
    value: [(arrow_function) (function_expression) (generator_function)])) @doc.function
