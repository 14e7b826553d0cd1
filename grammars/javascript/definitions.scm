; Definitions for `infill fill --function/--class/--node` (JavaScript).

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
(field_definition
  property: [(property_identifier) (private_property_identifier)] @function.name
  value: [(arrow_function body: (statement_block) @function.body)
          (function_expression body: (statement_block) @function.body)]) @function

(pair
  key: (property_identifier) @function.name
  value: [(arrow_function body: (statement_block) @function.body)
          (function_expression body: (statement_block) @function.body)]) @function

(class_declaration
  name: (identifier) @class.name
  body: (class_body) @class.body) @class

; an object held in a variable is a scope for its functions, named as they are called: `--function obj.m`
(variable_declarator
  name: (identifier) @object.name
  value: (object) @object.body) @object

(comment) @comment
