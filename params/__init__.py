"""Public parameters every party shares: table schemas, vector layouts, parameter sets, the
session's modes."""

from feddpsyn.params.layout import MarginalLayout, MarginalSlot
from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.params.parameter_sets import PARAMETER_SETS, ParameterSet, get_parameter_set
from feddpsyn.params.schema import CategoricalColumn, ContinuousColumn, Schema, SchemaError

__all__ = ["CategoricalColumn", "ContinuousColumn", "MarginalLayout", "MarginalSlot",
           "NoiseMode", "PARAMETER_SETS", "ParameterSet", "Schema", "SchemaError",
           "SelectionMode", "get_parameter_set"]
