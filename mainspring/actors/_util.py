"""Small helpers shared by the kernel's modules."""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


class NoPublicConstructor(type):
    """Metaclass for runtime-made objects: ``Cls(...)`` raises, ``Cls._create(...)`` works.

    Users receive these objects (refs, systems) from the runtime; building one by hand would
    give an object wired to nothing, so the constructor is closed (STYLE.md, habit 2).
    """

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor; "
            "the runtime creates it for you"
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]
