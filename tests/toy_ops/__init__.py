"""Ops defined outside normprops, registered through its public call (``normprops.ops.register``)."""
