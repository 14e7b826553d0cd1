; Definitions for `infill fill --function/--class/--node` (C++). `--function A::f` matches qualified names
; (template arguments are left out: `--function Box::get` is `Box<T>::get`).

(function_definition
  declarator: (function_declarator
    declarator: [(identifier) (field_identifier) (qualified_identifier) (destructor_name) (operator_name)]
      @function.name)
  body: (compound_statement) @function.body) @function

(function_definition
  declarator: (pointer_declarator
    declarator: (function_declarator
      declarator: [(identifier) (field_identifier) (qualified_identifier) (operator_name)] @function.name))
  body: (compound_statement) @function.body) @function

; `S& operator=(const S& o)`, `T& A::get()`
(function_definition
  declarator: (reference_declarator
    (function_declarator
      declarator: [(identifier) (field_identifier) (qualified_identifier) (operator_name)] @function.name))
  body: (compound_statement) @function.body) @function

; a conversion operator, `operator bool() const` (named `operator bool`), and `S::operator int() const`
(function_definition
  declarator: [(operator_cast) (qualified_identifier)] @function.name
  body: (compound_statement) @function.body) @function

; `char **f()`, `std::string **A::f()` and a function returning a function pointer, `int (*f(int kind))(int)`
(function_definition
  declarator: (pointer_declarator
    declarator: (pointer_declarator
      declarator: (function_declarator
        declarator: [(identifier) (field_identifier) (qualified_identifier)] @function.name)))
  body: (compound_statement) @function.body) @function

(function_definition
  declarator: (function_declarator
    declarator: (parenthesized_declarator
      (pointer_declarator
        declarator: (function_declarator
          declarator: [(identifier) (field_identifier) (qualified_identifier)] @function.name))))
  body: (compound_statement) @function.body) @function

(class_specifier
  name: (type_identifier) @class.name
  body: (field_declaration_list) @class.body) @class

(struct_specifier
  name: (type_identifier) @class.name
  body: (field_declaration_list) @class.body) @class

(namespace_definition
  name: (namespace_identifier) @class.name
  body: (declaration_list) @class.body) @class

(comment) @comment
