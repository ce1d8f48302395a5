"""Which column a classifier-based method predicts, from the schema alone.

Methods receive only (records, owner, schema, ...). A schema that declares its ``target``
(the benchmark's runner sets it from ``--target``) names it; otherwise the bundled data sets
name their target ``label`` (Adult) or ``target`` (Fed-Heart-Disease), as
``fedbench.runner.TARGETS`` does, and a schema without such a name uses its last column, the
usual place of a label.

>>> from feddpsyn.params.schema import Schema
>>> target_column(Schema.from_dict({"columns": [
...     {"name": "label", "type": "categorical", "i2s": ["a", "b"]},
...     {"name": "x", "type": "categorical", "i2s": ["a", "b"]}]}))
0
"""

from __future__ import annotations

from feddpsyn.params.schema import Schema

TARGET_NAMES = ("label", "target", "class", "income", "y")


def target_column(schema: Schema) -> int:
    if schema.target is not None:  # declared in the schema, or given as the bench's --target
        return schema.names.index(schema.target)
    for name in TARGET_NAMES:
        if name in schema.names:
            return schema.names.index(name)
    return len(schema.names) - 1
