; Definitions for `infill fill --function/--class/--node` (Java).

(method_declaration
  name: (identifier) @function.name
  body: (block) @function.body) @function

(constructor_declaration
  name: (identifier) @function.name
  body: (constructor_body) @function.body) @function

(class_declaration
  name: (identifier) @class.name
  body: (class_body) @class.body) @class

(record_declaration
  name: (identifier) @class.name
  body: (class_body) @class.body) @class

(compact_constructor_declaration
  name: (identifier) @function.name
  body: (block) @function.body) @function

(interface_declaration
  name: (identifier) @class.name
  body: (interface_body) @class.body) @class

(enum_declaration
  name: (identifier) @class.name
  body: (enum_body) @class.body) @class

[(line_comment) (block_comment)] @comment
