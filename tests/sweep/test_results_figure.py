"""Issue 48, item 5: the results figure answers "which knob value won?" and the page has a real table.

Runs recorded by hand (tests/sweep/test_results.py's fake sweep: micro-batch size x EP overlap, two repeats, a
GPU report, an OOM and a crash), then the figure's data, the Figure itself and the HTML page are checked;
tests/sweep/test_local_sweep.py opens the page of a real CPU sweep in headless Chromium."""
from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from moeforge.compiler.sweep import cost, plots, results
from tests.sweep.test_results import SWEEP, _run, megatron_report, train_report

pytest.importorskip("matplotlib")
GiB = 2 ** 30


@pytest.fixture
def top(proj, write_sweep, cli, capsys):
    write_sweep(proj, "fake", SWEEP.replace("name: fake", "name: fake\n    description: \"<b>mbs</b> & overlap\""))
    assert cli("sweep", "launch", "fake", "--target", "print") == 0
    capsys.readouterr()
    top = proj / "build" / "sweeps" / "fake"
    # p00 is slower per step but started fast; p01 is faster per step and spent long in start-up
    _run(top, "p00", 1, train_report(30.0, [60 * GiB, 62 * GiB]), 0, seconds=400.0)
    _run(top, "p00", 2, train_report(34.0, [61 * GiB, 60 * GiB]), 0, seconds=400.0)
    _run(top, "p01", 1, megatron_report(20.0, [50 * GiB] * 2), 0, seconds=2000.0)
    _run(top, "p01", 2, megatron_report(22.0, [51 * GiB] * 2), 0, seconds=2000.0)
    _run(top, "p02", 1, None, 1, log="runtime.train[rank 3]: out of memory: CUDA out of memory.\n")
    _run(top, "p03", 1, None, 1, log="Segmentation fault\n")
    return top


def test_knob_values_are_the_axis_and_the_second_knob_the_legend(top):
    doc = results.collect(top)
    data = plots.series(doc)
    axis = data["axis"]
    assert axis["x"] == "training.micro_batch_size" and axis["ticks"] == ["1", "2"]
    assert axis["groups"] == ["ep_comm = true", "ep_comm = false"]
    fig = plots.figure(doc, data)
    ticks = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
    assert ticks == ["1", "2"] and fig.axes[-1].get_xlabel() == "micro_batch_size"
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert set(legend) == {"ep_comm = true", "ep_comm = false", "estimate"}
    assert not any(t.startswith("p0") for t in ticks)


def test_one_knob_is_the_axis_alone(top):
    doc = results.collect(top)
    doc["sweep"]["swept"] = ["training.micro_batch_size"]
    for p in doc["points"]:
        p["values"] = {"training.micro_batch_size": p["values"]["training.micro_batch_size"] * 10 + int(p["id"][1:])}
    axis = plots.series(doc)["axis"]
    assert axis["ticks"] == ["10", "11", "22", "23"] and axis["groups"] == [None]


def test_memory_estimate_beside_the_measurement_only_when_both_are_the_allocators(top):
    doc = results.collect(top)
    mem = plots.series(doc)["panels"][2]
    assert [s["label"] for s in mem["series"]] == ["measured", "estimate (allocated)"]
    for p in doc["points"]:
        if p["measured"]:
            p["measured"]["memory_source"] = "process RSS (max over ranks)"
    mem = plots.series(doc)["panels"][2]
    assert [s["label"] for s in mem["series"]] == ["measured"] and "not comparable" in mem["note"]
    fig = plots.figure(doc)
    assert [c.get_label() for c in fig.axes[2].collections] == []  # no estimate markers on the memory panel


def test_cost_is_the_steady_state_step_with_start_up_apart(top):
    doc = results.collect(top)
    by = {p["id"]: p for p in doc["points"]}
    # 6 steps per run (2 warm-up), 2 runs, 16 ranks, at the median steady step
    assert cost.steady_gpu_hours(by["p00"]) == pytest.approx(32.0 * 12 * 16 / 3600)
    assert cost.steady_gpu_hours(by["p01"]) == pytest.approx(21.0 * 12 * 16 / 3600)
    assert cost.startup_gpu_hours(by["p01"]) == pytest.approx(4000 * 16 / 3600 - 21.0 * 12 * 16 / 3600)
    # the faster point is the cheaper one, though its wall-clock (start-up) was longer
    assert by["p01"]["gpu_hours"] > by["p00"]["gpu_hours"]
    assert cost.steady_gpu_hours(by["p01"]) < cost.steady_gpu_hours(by["p00"])
    panel = plots.series(doc)["panels"][1]
    assert [s["kind"] for s in panel["series"]] == ["bar", "label"]  # start-up beside the bar, not on it
    text = results.to_text(doc)
    assert "steady GPU-h" in text and "start-up GPU-h" in text


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.rows, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])

    def handle_data(self, data):
        if self.tags and self.tags[-1] in ("td", "th") and self.rows:
            self.rows[-1].append(data)
        self.text.append(data)

    def handle_endtag(self, tag):
        if self.tags and self.tags[-1] == tag:
            self.tags.pop()


def test_the_page_has_a_real_escaped_table_and_no_title_over_a_panel(top):
    doc = results.collect(top)
    fig = plots.figure(doc)
    text = plots.page(doc, fig, results.to_text(doc))
    assert "<pre>" not in text and "<table>" in text and "<b>mbs</b>" not in text and "&lt;b&gt;mbs" in text
    parser = _Cells()
    parser.feed(text[text.index("<table>"):])
    assert parser.rows[0][:4] == ["point", "micro_batch_size", "ep_comm", "status"]
    assert [r[0] for r in parser.rows[1:]] == ["p00", "p01", "p02", "p03"]
    assert len({len(r) for r in parser.rows}) == 1  # every row has every column
    fig.canvas.draw() if hasattr(fig.canvas, "draw") else None
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    first = fig.axes[0]
    for artist in (first.get_window_extent(renderer), first.title.get_window_extent(renderer)):
        assert not title.overlaps(artist), (title, artist)
    json.dumps(plots.series(doc))  # results.plot.json: the data is JSON
