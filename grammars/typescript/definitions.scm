; Definitions for `infill fill --function/--class/--node` (TypeScript and TSX).

(function_declaration
  name: (identifier) @function.name
  body: (statement_block) @function.body) @function

(generator_function_declaration
  name: (identifier) @function.name
  body: (statement_block) @function.body) @function

(method_definition
  name: [(property_identifier) (private_property_identifier)] @function.name
  body: (statement_block) @function.body) @function

(variable_declarator
  name: (identifier) @function.name
  value: [(arrow_function body: (statement_block) @function.body)
          (function_expression body: (statement_block) @function.body)]) @function

; a class field or an object property holding a function: `handler = (e) => { ... }`, `{ f: function () { ... } }`
(public_field_definition
  name: [(property_identifier) (private_property_identifier)] @function.name
  value: [(arrow_function body: (statement_block) @function.body)
          (function_expression body: (statement_block) @function.body)]) @function

(pair
  key: (property_identifier) @function.name
  value: [(arrow_function body: (statement_block) @function.body)
          (function_expression body: (statement_block) @function.body)]) @function

(class_declaration
  name: (type_identifier) @class.name
  body: (class_body) @class.body) @class

(abstract_class_declaration
  name: (type_identifier) @class.name
  body: (class_body) @class.body) @class

; a namespace is a scope, as a C++ one is: `--function NS.f`
(internal_module
  name: [(identifier) (nested_identifier)] @class.name
  body: (statement_block) @class.body) @class

(interface_declaration
  name: (type_identifier) @class.name
  body: (interface_body) @class.body) @class

; an object held in a variable is a scope for its functions, named as they are called: `--function obj.m`
(variable_declarator
  name: (identifier) @object.name
  value: (object) @object.body) @object

(comment) @comment
