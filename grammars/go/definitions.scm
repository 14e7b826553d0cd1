; Definitions for `infill fill --function/--class/--node` (Go). A "class" is a named struct or interface type.

(function_declaration
  name: (identifier) @function.name
  body: (block) @function.body) @function

; a method is named after its receiver's type too (`--function Stack.Push`): @function.scope
(method_declaration
  receiver: (parameter_list
    (parameter_declaration
      type: [(type_identifier) @function.scope
             (pointer_type (type_identifier) @function.scope)
             (generic_type type: (type_identifier) @function.scope)
             (pointer_type (generic_type type: (type_identifier) @function.scope))]))
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
