"""A workflow's graph drawn as inline SVG on the server (rule 81 (svg-charts), as the charts):
each node a box coloured by its job's status and linked to its page, each edge a line from a
dependency to its dependent, and a cancelled edge (the dependency whose finish cancelled its
dependent, rule 112 (impossible-condition-cancels)) dashed with the reason written on it.

Columns left to right by depth (a node sits one column right of its deepest dependency), so
every edge points right. Colours come from the stylesheet's classes, never ``style``.
"""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext

from .group_figures import Graph, Node
from .svg import coord, joined, svg_figure

#: A node's box, and the room between columns and rows.
BOX_WIDTH, BOX_HEIGHT, COLUMN, ROW_HEIGHT, MARGIN = 150, 24, 200, 34, 8
#: Characters of a job's name shown in its box (the whole name is its tooltip).
NAME_CHARS = 16
#: Characters of a cancel's reason written on its edge.
REASON_CHARS = 30


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars - 1] + "…"


def _x(node: Node) -> float:
    return MARGIN + node.layer * COLUMN


def _y(node: Node) -> float:
    return MARGIN + node.row * ROW_HEIGHT


def _edge(dep: Node, node: Node) -> SafeString:
    """A line from ``dep``'s right side to ``node``'s left; labelled when ``dep`` cut it."""
    x1, y1 = _x(dep) + BOX_WIDTH, _y(dep) + BOX_HEIGHT / 2
    x2, y2 = _x(node), _y(node) + BOX_HEIGHT / 2
    if node.status != "cancelled" or node.cancelled_by != dep.id:
        return format_html('<line class="ultjobs-edge" x1="{}" y1="{}" x2="{}" y2="{}"/>',
                           coord(x1), coord(y1), coord(x2), coord(y2))
    reason = node.cancel_reason or gettext("cancelled")
    return format_html(
        '<g class="ultjobs-edge-cut"><title>{title}</title>'
        '<line class="ultjobs-edge ultjobs-edge-cancelled" x1="{x1}" y1="{y1}" x2="{x2}" '
        'y2="{y2}"/><text class="ultjobs-edge-reason" x="{tx}" y="{ty}" '
        'text-anchor="middle">{short}</text></g>',
        title=gettext("#%(dependent)s cancelled: %(reason)s") % {
            "dependent": node.id, "reason": reason},
        x1=coord(x1), y1=coord(y1), x2=coord(x2), y2=coord(y2), tx=coord((x1 + x2) / 2),
        ty=coord((y1 + y2) / 2 - 3), short=_short(reason, REASON_CHARS))


def _box(node: Node) -> SafeString:
    """A node: its box (stroke by status), a status dot, ``#id name``, linked to its page."""
    x, y = _x(node), _y(node)
    tooltip = f"#{node.id} {node.name}: {node.status}"
    if node.when:
        tooltip += " " + gettext("(runs when its dependencies %(when)s)") % {"when": node.when}
    return format_html(
        '<a href="{url}"><g><title>{tooltip}</title>'
        '<rect class="ultjobs-node ultjobs-node-{status}" x="{x}" y="{y}" width="{w}" '
        'height="{h}" rx="4"/><circle class="ultjobs-dot-{status}" cx="{cx}" cy="{cy}" r="5"/>'
        '<text class="ultjobs-label" x="{tx}" y="{ty}">#{id} {name}</text></g></a>',
        url=reverse("admin:django_ultjobs_job_change", args=[node.id]), tooltip=tooltip,
        status=node.status, x=coord(x), y=coord(y), w=BOX_WIDTH, h=BOX_HEIGHT, cx=coord(x + 11),
        cy=coord(y + BOX_HEIGHT / 2), tx=coord(x + 21), ty=coord(y + 16), id=node.id,
        name=_short(node.name, NAME_CHARS))


def graph_svg(graph: Graph, chart_id: str = "ultjobs-graph") -> SafeString:
    """Draw ``graph``: edges under boxes, one column per depth."""
    by_id = {node.id: node for node in graph.nodes}
    edges = [_edge(by_id[dep], node) for node in graph.nodes for dep in node.depends_on]
    boxes = [_box(node) for node in graph.nodes]
    columns = 1 + max((n.layer for n in graph.nodes), default=0)
    rows = 1 + max((n.row for n in graph.nodes), default=0)
    width = int(MARGIN * 2 + (columns - 1) * COLUMN + BOX_WIDTH)
    height = int(MARGIN * 2 + (rows - 1) * ROW_HEIGHT + BOX_HEIGHT)
    title = gettext("The workflow's jobs and what each waits for")
    desc = graph_desc(graph)
    return svg_figure(chart_id, height, title, desc, joined([*edges, *boxes]), width=width)


def graph_desc(graph: Graph) -> str:
    """One sentence: how many nodes are drawn, by status, and whether more are left out."""
    counts: dict[str, int] = {}
    for node in graph.nodes:
        counts[node.status] = counts.get(node.status, 0) + 1
    parts = ", ".join(f"{n:,} {status}" for status, n in counts.items())
    text = ngettext("%(count)s job drawn (%(parts)s)", "%(count)s jobs drawn (%(parts)s)",
                    len(graph.nodes)) % {"count": f"{len(graph.nodes):,}", "parts": parts}
    if graph.more:
        text += "; " + gettext("the workflow's later jobs are not drawn")
    return text + "."
