; Definitions for `infill fill --function/--class/--node` (C). A "class" is a struct, union or enum.

(function_definition
  declarator: (function_declarator declarator: (identifier) @function.name)
  body: (compound_statement) @function.body) @function

(function_definition
  declarator: (pointer_declarator
    declarator: (function_declarator declarator: (identifier) @function.name))
  body: (compound_statement) @function.body) @function

; `char **f(void)` and a function returning a function pointer, `int (*f(int kind))(int)`
(function_definition
  declarator: (pointer_declarator
    declarator: (pointer_declarator
      declarator: (function_declarator declarator: (identifier) @function.name)))
  body: (compound_statement) @function.body) @function

(function_definition
  declarator: (function_declarator
    declarator: (parenthesized_declarator
      (pointer_declarator
        declarator: (function_declarator declarator: (identifier) @function.name))))
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

; `typedef struct { ... } point;` is the class `point` (and a named struct keeps its own name too)
(type_definition
  type: [(struct_specifier body: (field_declaration_list) @class.body)
         (union_specifier body: (field_declaration_list) @class.body)
         (enum_specifier body: (enumerator_list) @class.body)]
  declarator: (type_identifier) @class.name) @class

(comment) @comment
