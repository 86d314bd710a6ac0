"""pydantic-core: a schema validator with a Python function validator (a callback from Rust)."""

from typing import Any

MODULES = ("pydantic_core",)


def hook(module: Any) -> list[Any]:
    from pydantic_core import core_schema

    schema = core_schema.typed_dict_schema({
        "n": core_schema.typed_dict_field(core_schema.int_schema()),
        "s": core_schema.typed_dict_field(
            core_schema.no_info_after_validator_function(lambda v: v.upper(), core_schema.str_schema())),
    })
    validator = module.SchemaValidator(schema)
    return [validator, validator.validate_python({"n": "3", "s": "x"})]
