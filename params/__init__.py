"""Public parameters every party shares: table schemas, vector layouts, parameter sets."""

from params.layout import MarginalLayout, MarginalSlot
from params.parameter_sets import PARAMETER_SETS, ParameterSet, get_parameter_set
from params.schema import CategoricalColumn, ContinuousColumn, Schema, SchemaError

__all__ = ["CategoricalColumn", "ContinuousColumn", "MarginalLayout", "MarginalSlot",
           "PARAMETER_SETS", "ParameterSet", "Schema", "SchemaError", "get_parameter_set"]
