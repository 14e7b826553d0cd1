; Definitions for `infill fill --function/--class/--node` (Rust). A "class" is a struct, enum, trait, impl or mod
; (`--function Stack.new` is a method of `impl<T> Stack<T>`, `--function util::helper` a function of `mod util`).
; An `impl Trait for Type` block's methods are `Type.method`, `Trait.method` and `Type.Trait.method` (@class.trait).
; The block itself is `--class Type`, `--class Trait` and `--class Type.Trait`, as a name several definitions share
; fills each: `--class Shape` is the trait's body and every impl of it, `--class Square` the struct and its impls.

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
  trait: [(type_identifier) (scoped_type_identifier) (generic_type)]? @class.trait
  type: [(type_identifier) @class.name
         (scoped_type_identifier name: (type_identifier) @class.name)
         (generic_type type: (type_identifier) @class.name)
         (generic_type type: (scoped_type_identifier name: (type_identifier) @class.name))]
  body: (declaration_list) @class.body) @class

(mod_item
  name: (identifier) @class.name
  body: (declaration_list) @class.body) @class

[(line_comment) (block_comment)] @comment
