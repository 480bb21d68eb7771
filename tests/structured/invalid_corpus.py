"""Constraints that must each be refused with a 400 naming the field (used by backend and HTTP tests)."""

# (StructuredOutputs kwargs, why it is invalid)
INVALID_SCHEMAS = [
    ({"type": "integer", "minimum": 5, "maximum": 2}, "unsatisfiable bounds"),
    ({"type": "string", "minLength": 3, "maxLength": 1}, "unsatisfiable lengths"),
    ({"type": "array", "minItems": 3, "maxItems": 1}, "unsatisfiable item counts"),
    ({"type": "strin"}, "unknown type"),
    ({"type": 5}, "type is not a string (metaschema)"),
    ({"type": "string", "pattern": "[a-"}, "bad pattern"),
    ({"type": "object", "properties": {"a": {"type": "string", "maxLenght": 3}}}, "typo keyword"),
    ({"type": "object", "properties": {"a": {"type": "string", "nullable": True}}}, "OpenAPI keyword"),
    ({"type": "array", "uniqueItems": True}, "unenforced keyword"),
    ({"not": {"type": "string"}}, "unenforced keyword not"),
    ({"type": "string", "format": "no-such-format"}, "unknown format"),
    ({"$ref": "#/$defs/missing"}, "dangling $ref"),
    ({"type": "object", "properties": {}, "required": ["a"], "additionalProperties": False}, "required yet forbidden"),
    ({"type": "integer", "minimum": "1"}, "minimum is a string (metaschema)"),
    (False, "the false schema"),
]
INVALID_REGEXES = ["[a-", "(a", "a{2,1}", "*a", "[^\\x00-\\x{10FFFF}]"]
INVALID_GRAMMARS = [
    "start: x\nx: 'a' | y",          # undefined rule
    "start: \"a\" \"b",                # unterminated string
    "root ::= \"a\" missing",         # GBNF with an undefined rule
    "   ",                             # empty
    "start: /[a-/",                    # bad regex terminal
]
