"""The judge commands' progress bars say when the first batch compiles: ``jaxdrive judge data`` sat at 0% for ~70 s
and ``jaxdrive judge run`` at 0/N for ~74 s on a 2-core CPU without a word, which reads as a hang."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def noting_first_compile(bar, items: Iterable[T], what: str) -> Iterator[T]:
    """``items`` (the bar itself when it wraps the batches), while ``bar`` (a tqdm) shows "compiling WHAT (first
    batch, ...)" as its postfix until the first item is done (the loop asks for the next one). Adds no device sync;
    a disabled bar prints nothing."""
    bar.set_postfix_str(f"compiling {what} (first batch, ~1 min on a 2-core CPU)")
    rest = iter(items)
    for item in rest:
        yield item
        break
    bar.set_postfix_str("")
    yield from rest
