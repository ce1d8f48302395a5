"""A joint noise shape as the public records state it, and back: one place for the fields,
so that the plan's record, the selection's, the release results and the reports carry the
whole shape (both widths) alike."""

from __future__ import annotations

from feddpsyn.common import wire
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape

__all__ = ["public_shape", "shape_of"]


def public_shape(shape: JointNoiseShape) -> wire.JointNoisePublic:
    """The record of ``shape``."""
    return wire.JointNoisePublic(uniforms=shape.uniforms, bits=shape.bits, wider=shape.wider)


def shape_of(public: wire.JointNoisePublic) -> JointNoiseShape:
    """The shape a record states."""
    return JointNoiseShape(public.uniforms, public.bits, public.wider)
