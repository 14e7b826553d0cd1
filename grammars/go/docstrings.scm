; Declarations that can carry a Go doc comment (used by `infill docstrings`).

(function_declaration name: (identifier) @doc.name) @doc.function
(method_declaration name: (field_identifier) @doc.name) @doc.method
(type_spec name: (type_identifier) @doc.name) @doc.type
