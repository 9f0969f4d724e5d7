"""The first check of every wrapper, numpy and torch alike: a required tensor argument given as None is a
TypeError naming it. Without it the wrapper reads the missing tensor's shape and raises an AttributeError
about ``NoneType`` that names no argument."""


def require_tensors(op, **tensors):
    """Raises TypeError for the first of ``tensors`` (name=value, in signature order) that is None; ``op`` is
    the C++ op's name, as in the library's own messages."""
    for name, t in tensors.items():
        if t is None:
            raise TypeError(f"flashgate: {op}: {name}: is required, got None")
