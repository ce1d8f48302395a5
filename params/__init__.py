"""Public parameters every party shares: table schemas, vector layouts, parameter sets, the
session's modes."""

from params.layout import MarginalLayout, MarginalSlot
from params.modes import NoiseMode, SelectionMode
from params.parameter_sets import PARAMETER_SETS, ParameterSet, get_parameter_set
from params.schema import CategoricalColumn, ContinuousColumn, Schema, SchemaError

__all__ = ["CategoricalColumn", "ContinuousColumn", "MarginalLayout", "MarginalSlot",
           "NoiseMode", "PARAMETER_SETS", "ParameterSet", "Schema", "SchemaError",
           "SelectionMode", "get_parameter_set"]
