"""A public surface with gaps, for the reference's docstring check to find."""

from __future__ import annotations

__all__ = ["Documented", "Gaps", "bare"]


class Documented:
    """Said."""

    def said(self) -> None:
        """Said too."""

    def _private(self) -> None:
        pass


class Gaps:
    """The class is said, two of its members are not."""

    def unsaid(self) -> None:
        pass

    @property
    def unsaid_property(self) -> int:
        return 1

    def said(self) -> None:
        """Said."""


def bare() -> None:
    pass
