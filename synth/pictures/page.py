"""Pictures in a page that opens (the run report, synth.pictures.report; the page
itself and its style are synth.html's).

    figure(data, fmt, href, ...)       a picture inlined as a data: URI, with a caption
    fit_pictures(pictures, room)       which version of each picture a page inlines

A page keeps to PAGE_LIMIT bytes whatever the run: fit_pictures shares what the text
leaves among the pictures, smallest first, each taking the most detailed version that
fits its share (a picture may offer coarser ones, made only when asked) or none; a
picture not inlined is linked, its full file beside the page.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Callable, Iterator

from synth.html import esc

PAGE_LIMIT = 5_000_000  # bytes: a page with every picture it inlines
MARKUP = 400  # bytes of HTML around an inlined picture (figure, link, caption)
MIME = {"svg": "image/svg+xml", "png": "image/png"}


def inlined_size(data: bytes) -> int:
    """Bytes a picture takes in a page: base64 and its markup."""
    return 4 * -(-len(data) // 3) + MARKUP


def figure(data: bytes | None, fmt: str, href: str, alt: str, caption: str,
           lazy: bool = False) -> str:
    """A picture inlined as a data: URI, linking to `href` (its full file beside the
    page); without data, the caption and the link alone."""
    link = f'<a href="{esc(href)}">{esc(href)}</a>'
    if data is None:
        return f'<figure><figcaption>{esc(caption)} ({link})</figcaption></figure>'
    uri = f"data:{MIME[fmt]};base64," + base64.b64encode(data).decode("ascii")
    load = ' loading="lazy"' if lazy else ""
    return (f'<figure><a href="{esc(href)}"><img src="{uri}" alt="{esc(alt)}"{load}></a>'
            f"<figcaption>{esc(caption)} ({link})</figcaption></figure>")


@dataclass
class Picture:
    """A picture for a page: its full version (the file beside the page) and, made only
    when asked, coarser versions, most detailed first, each with words for the caption.
    `coarser` is given the bytes a version may take, so that it can skip the versions
    it reckons bigger without making them."""
    full: bytes
    coarser: Callable[[int], Iterator[tuple[bytes, str]]] = field(
        default=lambda room: iter(()))


def fit_pictures(pictures: list[Picture], room: int) -> list[tuple[bytes, str] | None]:
    """For each picture, (the version a page inlines, words saying which) or None: the
    `room` bytes shared out smallest picture first, each picture taking the most
    detailed version whose inlined_size is within room left / pictures left, so that
    what a small one does not use goes to the bigger ones."""
    out: list[tuple[bytes, str] | None] = [None] * len(pictures)
    order = sorted(range(len(pictures)), key=lambda i: len(pictures[i].full))
    left = max(room, 0)
    for k, i in enumerate(order):
        share = left // (len(order) - k)
        versions = _versions(pictures[i], share)
        chosen = next((v for v in versions if inlined_size(v[0]) <= share), None)
        if chosen is not None:
            out[i] = chosen
            left -= inlined_size(chosen[0])
    return out


def _versions(picture: Picture, share: int) -> Iterator[tuple[bytes, str]]:
    yield picture.full, ""
    yield from picture.coarser(len(picture.full) * share // inlined_size(picture.full))
