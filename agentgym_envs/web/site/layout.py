"""HTML building blocks: the page shell, navigation, form controls and money formatting.

Every page is a full HTML document with a ``<title>``, a nav bar (Home, Search,
Cart (n), Account), a ``<main>`` landmark and ``<body data-ready="1">``: the browser
waits for that flag instead of sleeping. Every form control gets a ``<label for>``
(never a wrapping label, whose text would absorb the control's value), so the
accessibility tree names each one. All text goes through :func:`esc`.
"""

from __future__ import annotations

import html
import sqlite3
from collections.abc import Sequence
from urllib.parse import urlencode

from agentgym_envs.web.site.request import Response

SHOP_NAME = "Trailhead Goods"
HTML_TYPE = ("Content-Type", "text/html; charset=utf-8")
# No caching: the page must always reflect the tenant's database as it is now.
NO_STORE = ("Cache-Control", "no-store")
STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#23395d;padding:.6rem 1rem}header a{color:#fff;margin-right:1.2rem}
main{max-width:60rem;margin:1rem auto;padding:0 1rem}
table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:.3rem .6rem;
text-align:left}.alert{border:2px solid #b00020;background:#fde7ea;padding:.2rem .8rem}
.notice{border:2px solid #2e7d32;background:#e8f5e9;padding:.2rem .8rem}
form.inline{display:inline}fieldset{margin:.6rem 0}label{margin-right:.4rem}
ul.products li{margin:.4rem 0}
"""


def esc(value: object) -> str:
    """``value`` as HTML-escaped text (quotes included, so it is safe in attributes)."""
    return html.escape(str(value), quote=True)


def money(cents: int) -> str:
    """Cents as dollars: ``8999`` -> ``$89.99``."""
    return f"${cents // 100:,}.{cents % 100:02d}"


def href(path: str, params: Sequence[tuple[str, str | int]] = ()) -> str:
    """``path`` with a query string built from the non-empty ``params``."""
    kept = [(k, str(v)) for k, v in params if str(v) != ""]
    return f"{path}?{urlencode(kept)}" if kept else path


def link(url: str, label: str) -> str:
    """An anchor whose text is ``label``."""
    return f'<a href="{esc(url)}">{esc(label)}</a>'


def alert(messages: Sequence[str]) -> str:
    """A ``role="alert"`` box listing validation errors; empty when there are none."""
    if not messages:
        return ""
    items = "".join(f"<p>{esc(m)}</p>" for m in messages)
    return f'<div role="alert" class="alert">{items}</div>'


def input_field(
    label: str, name: str, value: str | int = "", *, kind: str = "text", fid: str = "",
    attrs: str = "",
) -> str:  # fmt: skip
    """A labelled ``<input>``; ``fid`` overrides the element id (default ``f-<name>``)."""
    fid = fid or f"f-{name}"
    return (
        f'<p><label for="{esc(fid)}">{esc(label)}</label> <input type="{kind}" '
        f'id="{esc(fid)}" name="{esc(name)}" value="{esc(value)}"{attrs}></p>'
    )


def textarea(label: str, name: str, value: str = "", *, fid: str = "") -> str:
    """A labelled ``<textarea>``."""
    fid = fid or f"f-{name}"
    return (
        f'<p><label for="{esc(fid)}">{esc(label)}</label><br><textarea id="{esc(fid)}" '
        f'name="{esc(name)}" rows="5" cols="60">{esc(value)}</textarea></p>'
    )


def select(
    label: str, name: str, options: Sequence[tuple[str, str, bool]], selected: str = "",
    *, fid: str = "",
) -> str:  # fmt: skip
    """A labelled ``<select>``; each option is ``(value, text, disabled)``."""
    fid = fid or f"f-{name}"
    parts = []
    for value, label_text, disabled in options:
        flags = (" selected" if value == selected else "") + (" disabled" if disabled else "")
        parts.append(f'<option value="{esc(value)}"{flags}>{esc(label_text)}</option>')
    return (
        f'<p><label for="{esc(fid)}">{esc(label)}</label> <select id="{esc(fid)}" '
        f'name="{esc(name)}">{"".join(parts)}</select></p>'
    )


def radio_group(
    legend: str, name: str, options: Sequence[tuple[str, str]], checked: str = ""
) -> str:
    """A ``<fieldset>`` of labelled radio buttons; each option is ``(value, text)``."""
    rows = []
    for value, text in options:
        fid = f"f-{name}-{value}"
        flag = " checked" if value == checked else ""
        rows.append(
            f'<div><input type="radio" id="{esc(fid)}" name="{esc(name)}" '
            f'value="{esc(value)}"{flag}> <label for="{esc(fid)}">{esc(text)}</label></div>'
        )
    return f"<fieldset><legend>{esc(legend)}</legend>{''.join(rows)}</fieldset>"


def post_form(action: str, inner: str, button: str, *, aria: str = "", inline: bool = False) -> str:
    """A POST form ending in a submit button; ``aria`` names the button for screen readers
    when its visible text ("Remove") is ambiguous on the page."""
    label = f' aria-label="{esc(aria)}"' if aria else ""
    cls = ' class="inline"' if inline else ""
    return (
        f'<form method="post" action="{esc(action)}"{cls}>{inner}'
        f'<button type="submit"{label}>{esc(button)}</button></form>'
    )


def hidden(name: str, value: str | int) -> str:
    """A hidden input (needs no label: it is not shown)."""
    return f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">'


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], caption: str = "") -> str:
    """A table; ``rows`` hold ready-made HTML cells (escape text with :func:`esc`)."""
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def document(title: str, body: str, *, cart_count: int | None, area: str = "") -> str:
    """The full HTML page: head, nav bar, ``<main>`` with an ``<h1>`` and ``body``.

    Args:
        title: The page's subject, used for ``<title>`` and the ``<h1>``.
        body: HTML inside ``<main>`` after the heading.
        cart_count: Units in the cart shown in the nav, or None when unknown (no tenant).
        area: When set, a ``<meta name="agentgym-area">`` marks the page (``admin``,
            ``danger``) for the env's safety gates.
    """
    cart = "Cart" if cart_count is None else f"Cart ({cart_count})"
    meta = f'<meta name="agentgym-area" content="{esc(area)}">' if area else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} | {SHOP_NAME}</title>{meta}<style>{STYLE}</style></head>"
        '<body data-ready="1"><header><nav aria-label="Main">'
        f'<a href="/">Home</a><a href="/search">Search</a><a href="/cart">{cart}</a>'
        f'<a href="/account">Account</a></nav></header><main><h1>{esc(title)}</h1>{body}'
        "</main></body></html>"
    )


def cart_count(conn: sqlite3.Connection) -> int:
    """Units in the cart (the sum of line quantities)."""
    return int(conn.execute("SELECT COALESCE(SUM(qty), 0) FROM cart_items").fetchone()[0])


def render(
    conn: sqlite3.Connection | None, title: str, body: str, *, status: int = 200,
    area: str = "", headers: tuple[tuple[str, str], ...] = (),
) -> Response:  # fmt: skip
    """A full-page HTML response; ``conn`` supplies the cart count (None: no tenant)."""
    count = None if conn is None else cart_count(conn)
    page = document(title, body, cart_count=count, area=area)
    return Response(status, page.encode("utf-8"), (HTML_TYPE, NO_STORE, *headers))


def redirect(location: str) -> Response:
    """A 303 See Other, the redirect-after-POST that turns the next request into a GET."""
    body = f'<!DOCTYPE html><title>See other</title><a href="{esc(location)}">Continue</a>'
    return Response(303, body.encode("utf-8"), (("Location", location), HTML_TYPE, NO_STORE))
