; Definitions for `infill fill --function/--class/--node` (Rust). A "class" is a struct, enum, trait or impl.

(function_item
  name: (identifier) @function.name
  body: (block) @function.body) @function

(struct_item
  name: (type_identifier) @class.name
  body: (field_declaration_list) @class.body) @class

(enum_item
  name: (type_identifier) @class.name
  body: (enum_variant_list) @class.body) @class

(trait_item
  name: (type_identifier) @class.name
  body: (declaration_list) @class.body) @class

(impl_item
  type: (type_identifier) @class.name
  body: (declaration_list) @class.body) @class

[(line_comment) (block_comment)] @comment
