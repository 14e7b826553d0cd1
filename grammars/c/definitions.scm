; Definitions for `infill fill --function/--class/--node` (C). A "class" is a struct, union or enum.

(function_definition
  declarator: (function_declarator declarator: (identifier) @function.name)
  body: (compound_statement) @function.body) @function

(function_definition
  declarator: (pointer_declarator
    declarator: (function_declarator declarator: (identifier) @function.name))
  body: (compound_statement) @function.body) @function

(struct_specifier
  name: (type_identifier) @class.name
  body: (field_declaration_list) @class.body) @class

(union_specifier
  name: (type_identifier) @class.name
  body: (field_declaration_list) @class.body) @class

(enum_specifier
  name: (type_identifier) @class.name
  body: (enumerator_list) @class.body) @class

(comment) @comment
