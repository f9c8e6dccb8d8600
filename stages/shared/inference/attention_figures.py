"""Attention maps as files people look at: one PNG heatmap per map and head, and one
self-contained HTML page (the PNGs inlined) with selectors for the map's kind, layer
and head, as the figures of the write-up this project follows show them."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from stages.shared.inference.attention import AttentionMap, SentenceAttention  # noqa: E402

TAG_COLOR = "#c0392b"


def png_name(attention_map: AttentionMap, head: int) -> str:
    kind = attention_map.kind.replace(" ", "_").replace("-", "_")
    return f"{kind}.layer{attention_map.layer + 1}.head{head + 1}.png"


def write_heatmaps(sentence: SentenceAttention, directory: Path) -> list[Path]:
    """One PNG per map and head; language tags (decoder-only) are marked in red."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for attention_map in sentence.maps:
        for head in range(attention_map.weights.size(0)):
            path = directory / png_name(attention_map, head)
            _heatmap(attention_map, head, sentence.tags, path)
            written.append(path)
    return written


def _heatmap(attention_map: AttentionMap, head: int, tags: tuple[str, ...], path: Path) -> None:
    weights = attention_map.weights[head].numpy()
    rows, columns = weights.shape
    size = max(3.5, 0.28 * max(rows, columns) + 1.5)
    figure, axes = plt.subplots(figsize=(size, size))
    axes.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(columns), attention_map.keys, rotation=90, fontsize=8)
    axes.set_yticks(range(rows), attention_map.queries, fontsize=8)
    for label in [*axes.get_xticklabels(), *axes.get_yticklabels()]:
        if label.get_text() in tags:
            label.set_color(TAG_COLOR)
            label.set_fontweight("bold")
    axes.set_xlabel("keys (attended to)")
    axes.set_ylabel("queries")
    axes.set_title(f"{attention_map.kind}, layer {attention_map.layer + 1}, head {head + 1}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_page(sentence: SentenceAttention, path: Path, source: str, model_name: str) -> None:
    """One HTML file that needs nothing beside it: the heatmaps ``write_heatmaps`` wrote
    into the same directory, inlined as data URIs, and selectors for kind, layer and head
    (ids ``kind``, ``layer``, ``head``)."""
    images: dict[str, dict[str, dict[str, str]]] = {}
    for attention_map in sentence.maps:
        for head in range(attention_map.weights.size(0)):
            png = path.parent / png_name(attention_map, head)
            uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
            images.setdefault(attention_map.kind, {}).setdefault(str(attention_map.layer + 1), {})[str(head + 1)] = uri
    tags = "".join(f"<li><span class='tag'>{html.escape(tag)}</span>: language tag</li>" for tag in sentence.tags)
    page = PAGE.format(title=html.escape(f"Attention of {model_name}"), source=html.escape(source),
                       translation=html.escape(sentence.translation.text), tags=tags,
                       images=json.dumps(images).replace("</", "<\\/"), tag_color=TAG_COLOR)
    path.write_text(page, encoding="utf-8")


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
label {{ margin-right: 1.5em; }}
.tag {{ color: {tag_color}; font-weight: bold; }}
img {{ display: block; margin-top: 1em; max-width: 95vw; }}
</style></head>
<body>
<h1>{title}</h1>
<p><b>Source:</b> {source}<br><b>Translation:</b> {translation}</p>
<ul>{tags}</ul>
<label>map <select id="kind"></select></label>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
<p id="caption"></p>
<img id="map" alt="attention map">
<script>
const images = {images};
const kind = document.getElementById("kind"), layer = document.getElementById("layer"),
      head = document.getElementById("head");
function fill(select, values) {{
  const keep = select.value;
  select.innerHTML = "";
  for (const value of values) {{ select.add(new Option(value, value)); }}
  if (values.includes(keep)) {{ select.value = keep; }}
}}
function show() {{
  fill(layer, Object.keys(images[kind.value]));
  fill(head, Object.keys(images[kind.value][layer.value]));
  document.getElementById("map").src = images[kind.value][layer.value][head.value];
  document.getElementById("caption").textContent =
    kind.value + ", layer " + layer.value + ", head " + head.value;
}}
fill(kind, Object.keys(images));
for (const select of [kind, layer, head]) {{ select.addEventListener("change", show); }}
show();
</script>
</body></html>
"""
