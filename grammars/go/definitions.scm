; Definitions for `infill fill --function/--class/--node` (Go). A "class" is a named struct or interface type.

(function_declaration
  name: (identifier) @function.name
  body: (block) @function.body) @function

(method_declaration
  name: (field_identifier) @function.name
  body: (block) @function.body) @function

(type_declaration
  (type_spec
    name: (type_identifier) @class.name
    type: (struct_type (field_declaration_list) @class.body))) @class

(type_declaration
  (type_spec
    name: (type_identifier) @class.name
    type: (interface_type) @class.body)) @class

(comment) @comment
