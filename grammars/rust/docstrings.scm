; Items that can carry a `///` doc comment (used by `infill docstrings`).

(function_item name: (identifier) @doc.name) @doc.function
(function_signature_item name: (identifier) @doc.name) @doc.function
(struct_item name: (type_identifier) @doc.name) @doc.type
(enum_item name: (type_identifier) @doc.name) @doc.type
(trait_item name: (type_identifier) @doc.name) @doc.type
