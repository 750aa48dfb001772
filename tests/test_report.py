"""`arl report`: one self-contained HTML page per run, read back as a person and a browser would.

Real outputs are made here (a tiny `arl train pg` run, `arl reproduce ch15 --quick`, and
`reproduce problem all` over two quick problems), the recipes' runs come from the doctor's
fixtures (tests/fixtures/doctor), and TRL / verl logs are written in their formats. The page
is parsed with html.parser: no address outside the file, every panel with its title and
axis labels, each finding beside the panels it reads. The browser test opens the pages in
headless Chromium (tests/test_report_browser.py drives it).
"""

from __future__ import annotations

import base64
import functools
import json
import math
import os
import re
import shutil
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_report_browser import Chromium, find_browser

from arl.cli.main import main
from arl.doctor import diagnose, load_run
from arl.doctor.report import default_out, render, write_report
from arl.doctor.report_panels import lines, other_panels, present
from arl.doctor.report_run import _lr_value, placed, render_run
from arl.doctor.report_spec import PANELS, Axis, resolve
from arl.doctor.types import Finding, Run

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"
SHOTS = os.environ.get("ARL_REPORT_SHOTS")  # a folder to keep the browser's screenshots in


class Page(HTMLParser):
    """The parts of a report a test reads: panels (title, SVG text, findings), attributes
    that address something, images, scripts."""

    def __init__(self, text: str):
        super().__init__()
        self.panels: dict[str, dict] = {}
        self.addresses: list[str] = []  # every src / href / xlink:href value
        self.tags: list[str] = []
        self.images: list[str] = []
        self.ids: list[str] = []
        self._panel: str | None = None
        self._depth = 0  # open <section> elements inside the current panel
        self._where = "plot"
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        self.addresses += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "section" and "data-panel" in a:
            self._panel, self._depth, self._where = a["data-panel"], 1, "plot"
            self.panels[self._panel] = {"text": [], "svg": 0, "full": [], "ref": [], "title": ""}
        elif tag == "section" and self._panel:
            self._depth += 1
        if not self._panel:
            return
        p = self.panels[self._panel]
        if tag == "svg":
            p["svg"] += 1
        if tag == "aside":
            self._where = "aside"
        if tag == "div" and "finding" in a.get("class", "").split():
            p["ref" if "ref" in a["class"].split() else "full"].append(a["data-rule"])

    def handle_endtag(self, tag):
        if tag == "section" and self._panel:
            self._depth -= 1
            if not self._depth:
                self._panel = None

    def handle_data(self, data):
        if self._panel and self._where == "plot" and data.strip():
            p = self.panels[self._panel]
            p["title"] = p["title"] or data.strip()
            p["text"].append(data.strip())


def external(page: Page, text: str) -> list[str]:
    """Anything the page would fetch from outside the file."""
    found = [a for a in page.addresses if not a.startswith(("#", "data:"))]
    found += re.findall(r"url\((?!#|data:)[^)]*\)|@import", text)
    return found + [t for t in page.tags if t in ("script", "link", "iframe", "object")]


@pytest.fixture(scope="module")
def pg_run(tmp_path_factory):
    """A real `arl train pg` run: 2 steps of a tiny random TinyAgent, evaluated at 0 and 2."""
    from arl.bugfix import default_vocab
    from arl.model import TinyAgent, TinyAgentConfig
    from arl.train.checkpoint import save_checkpoint

    root = tmp_path_factory.mktemp("pg")
    config = TinyAgentConfig(
        vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2, block_size=256
    )
    init = save_checkpoint(TinyAgent(config), root / "init")
    sets = ("steps=2", "tasks_per_step=2", "group_size=2", "eval_every=2", "eval_samples=1")
    argv = ["train", "pg", "--init", str(init), "--quiet", "--set", f"out={root / 'run'}"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    return root / "run"


@pytest.fixture(scope="module")
def pg_page(pg_run):
    """`arl report RUN --out FILE` on the PG run: the page's path."""
    out = pg_run.parent / "pg.html"
    assert main(["report", str(pg_run), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def ch15_out(tmp_path_factory):
    """`arl reproduce ch15 --quick`'s folder (one seed): results.json and the PNG figures."""
    out = tmp_path_factory.mktemp("ch15") / "ch15"
    assert main(["reproduce", "ch15", "--quick", "--workers", "1", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def problems_out(tmp_path_factory):
    """`reproduce problem all --quick`'s folder, over the two quickest problems (1 and 17)."""
    from arl.experiments import problems

    out = tmp_path_factory.mktemp("problems") / "problems"
    mp = pytest.MonkeyPatch()
    mp.setattr(problems, "PROBLEMS", {n: problems.PROBLEMS[n] for n in (1, 17)})
    try:
        problems.run_all(0, 1, quick=True, out=out)  # seed 0: not a locked seed
    finally:
        mp.undo()
    return out


def test_pg_report_is_self_contained_with_every_panel(pg_run, pg_page):
    text = pg_page.read_text(encoding="utf-8")
    page = Page(text)
    assert not external(page, text)
    run = load_run(pg_run)
    logged = {p.key for p in PANELS if set(resolve(p, run).metrics) & set(run.series)}
    # a PG run logs every standing panel but the ones it has no metric for
    assert logged == set(page.panels) - {k for k in page.panels if k.startswith("other-")}
    assert {"pass", "entropy", "kl", "mismatch", "degenerate", "clip", "lengths"} <= logged
    assert {"malformed", "gap", "optim", "lr"} <= logged
    for panel in PANELS:
        if panel.key not in logged:
            continue
        seen = page.panels[panel.key]
        assert seen["title"] == panel.title and seen["svg"] == 1
        drawn = [a for a in panel.axes if set(m for m, _ in a.series) & set(run.series)]
        drawn += [a for a in panel.axes if panel.key == "lr"]  # lr comes from the config
        for axis in drawn:
            assert axis.ylabel in seen["text"], (panel.key, axis.ylabel)
        assert "optimizer step" in seen["text"]
    for f in diagnose(run):  # whatever the doctor says sits beside the panels it reads
        for key, p in page.panels.items():
            reads = bool(set(f.metrics) & set(resolve_metrics(key, run)))
            assert reads == (f.rule in p["full"] + p["ref"]), (f.rule, key)


def resolve_metrics(key: str, run: Run) -> tuple[str, ...]:
    """The metrics the page's panel `key` draws for this run."""
    spec = {p.key: resolve(p, run) for p in PANELS}
    if key in spec:
        return present(spec[key], run)
    others = {p.key: p for p in other_panels(run)[0]}
    return others[key].metrics


FINDINGS = (
    Finding(
        "collapse", 26, "entropy fell 80%", ("a", "b"), "check", ("entropy", "degenerate_frac")
    ),
    Finding("tail", 20, "p999 tripled", ("bf16",), "check", ("mismatch/p999",)),
    Finding("elsewhere", 11, "per family", (), "log pass/F", ("pass/init",)),
    Finding("healthy", 0, "nothing wrong", (), "", ()),
)


def small_run(**extra) -> Run:
    """A hand-made PG run of 4 steps: entropy falling, degenerate groups rising, a tail."""
    series = {
        "entropy": ((1, 0.5), (2, 0.3), (3, 0.1), (4, 0.1)),
        "degenerate_frac": ((1, 0.2), (2, 0.4), (3, 0.7), (4, 0.7)),
        "mismatch/mean": ((1, 0.01), (2, 0.01), (3, 0.01), (4, 0.01)),
        "mismatch/p999": ((1, 0.1), (2, 0.2), (3, 0.3), (4, 0.3)),
        "train_tokens": ((1, 100.0), (2, 90.0), (3, 80.0), (4, 70.0)),
        **extra,
    }
    return Run("/runs/small", "arl", "pg", series, {"lr": 3e-4, "seed": 0})


def full_run() -> Run:
    """A hand-made run of 20 steps that logs every standing panel's metrics (evaluations every
    5 steps), two task families among them: each panel has something to draw."""
    series = {}
    for i, panel in enumerate(PANELS):
        for j, metric in enumerate(m for a in panel.axes for m, _ in a.series):
            scale = 30.0 if metric.startswith("len_") else 1e-3 if metric == "lr" else 1.0
            steps = range(0, 21, 5) if metric.startswith("eval/") else range(1, 21)
            series[metric] = tuple(
                (s, scale * (0.1 + 0.7 * s / 20 * (j + 1) / (j + 2) + 0.04 * math.sin(s + i)))
                for s in steps
            )
    for k, family in enumerate(("init", "range")):
        series[f"pass/{family}"] = tuple((s, min(1.0, s / (10 + 20 * k))) for s in range(1, 21))
    return Run("/runs/every-panel", "arl", "pg", series, {"lr": 1e-3, "env": {"name": "bugfix"}})


def test_every_standing_panel_is_drawn_when_its_metrics_are_logged():
    page = Page(full_page())
    assert set(page.panels) == {p.key for p in PANELS}
    for panel in PANELS:
        assert page.panels[panel.key]["title"] == panel.title
        assert all(a.ylabel in page.panels[panel.key]["text"] for a in panel.axes), panel.key
    assert {"init", "range", "canary"} <= set(page.panels["families"]["text"])


def test_every_y_label_fits_its_axis():
    # an axis 2.9 inches high holds about 33 characters of 11-point text: longer ones are cut
    labels = [a.ylabel for p in PANELS for a in p.axes]
    assert max(map(len, labels)) <= 33, max(labels, key=len)


@functools.cache
def full_page() -> str:
    """The report of full_run with FINDINGS (rendered once)."""
    return render_run(full_run(), FINDINGS)


@functools.cache
def small_page() -> str:
    """The report of small_run with FINDINGS (rendered once for the tests that read it)."""
    return render_run(small_run(), FINDINGS)


def test_findings_sit_beside_the_panels_they_read():
    page = Page(small_page())
    assert page.panels["entropy"]["full"] == ["collapse"]  # its first metric's panel: in full
    assert page.panels["degenerate"]["ref"] == ["collapse"]  # the other one: a link to it
    assert page.panels["mismatch"]["full"] == ["tail"]
    assert not any(p["full"] + p["ref"] for k, p in page.panels.items() if k in ("lr", "other-1"))
    text = small_page()
    diagnosis = text[text.index('id="diagnosis"') : text.index("Standing panels")]
    assert 'data-rule="elsewhere"' in diagnosis and 'data-rule="healthy"' in diagnosis


def test_placed_by_hand():
    drawn = {"entropy": {"entropy"}, "degenerate": {"degenerate_frac"}, "mismatch": set()}
    beside = placed(FINDINGS, drawn)
    assert beside["entropy"] == [(FINDINGS[0], "entropy")]
    assert beside["degenerate"] == [(FINDINGS[0], "entropy")]
    assert beside["mismatch"] == []  # the panel draws no p999 here
    assert beside[""] == [(FINDINGS[1], ""), (FINDINGS[2], ""), (FINDINGS[3], "")]


def test_equal_series_are_drawn_once_with_both_names():
    same = ((1, 0.5), (2, 0.25))
    axis = Axis("y", (("a", "A"), ("b", "B"), ("c", "C"), ("missing", "M")))
    drawn = lines(axis, {"a": same, "b": same, "c": ((1, 0.5), (2, 0.26))})
    assert drawn == [(same, "A = B"), (((1, 0.5), (2, 0.26)), "C")]


def test_lr_from_the_config_only_without_a_schedule():
    assert _lr_value({"lr": 3e-4}) == 3e-4
    assert _lr_value({"settings": {"lr": 1e-3, "decay": "constant", "warmup_steps": 0}}) == 1e-3
    assert _lr_value({"lr": 1e-3, "warmup_steps": 5}) is None
    assert _lr_value({"lr": 1e-3, "decay": "cosine"}) is None
    assert _lr_value({"seed": 0}) is None


def test_a_nan_is_marked_where_it_was_logged():
    run = small_run(**{"loss": ((1, 0.5), (2, float("nan")), (3, 0.4), (4, float("inf")))})
    text = render_run(run, ())
    assert "loss (the recipe&#x27;s objective): NaN or infinite at step(s) 2, 4" in text
    assert "NaN or infinite" not in render_run(small_run(loss=((1, 0.5), (2, 0.4))), ())
    page = Page(render_run(small_run(loss=((1, float("nan")), (2, float("nan")))), ()))
    assert page.panels["optim"]["svg"] == 1  # NaN from the first step: the panel is there
    assert "loss (the recipe's objective): NaN or infinite at step(s) 1, 2" in " ".join(
        page.panels["optim"]["text"]
    )


def test_tick_labels_tell_every_tick_apart():
    from arl.doctor.report_panels import tick_formatter

    f = tick_formatter()
    assert f.format_ticks([4.578, 4.57802, 4.57804]) == ["4.578", "4.57802", "4.57804"]
    assert f.format_ticks([0, 0.25, 0.5]) == ["0", "0.25", "0.5"]
    assert f.format_ticks([0, 5e-5, 1e-4]) == ["0", "5.0e-05", "1.0e-04"]
    assert f.format_ticks([10_000, 20_000]) == ["10,000", "20,000"]


def test_svg_ids_are_unique_and_every_reference_resolves():
    text = small_page()
    page = Page(text)
    assert len(page.ids) == len(set(page.ids))
    refs = [a[1:] for a in page.addresses if a.startswith("#")]
    refs += re.findall(r"url\(#([^)]+)\)", text)
    assert refs and not set(refs) - set(page.ids)


def test_other_series_one_panel_per_family_and_unit_and_constants_apart():
    run = small_run(
        **{
            "family_share/init": ((1, 0.1), (2, 0.2)),
            "family_share/div": ((1, 0.3), (2, 0.2)),
            "hack_share": ((1, 0.0), (2, 0.5)),
            "hacks": ((1, 0.0), (2, 0.0)),
        }
    )
    panels, fixed = other_panels(run)
    assert [(p.title, p.axes[0].series) for p in panels] == [
        (
            "Other logged series: family_share/*, fraction",
            (("family_share/div", "div"), ("family_share/init", "init")),
        ),
        ("Other logged series: fraction", (("hack_share", "hack_share"),)),
        ("Other logged series: count", (("train_tokens", "train_tokens"),)),
    ]
    assert fixed == {"hacks": 0.0}


def test_a_log_axis_says_what_it_leaves_out():
    run = small_run(**{"mismatch/mean": ((1, 1e-14), (2, 0.01), (3, 0.01), (4, 0.01))})
    text = render_run(run, ())
    # top 0.3 (p999): the axis keeps 6 decades below it, 3e-7, rounded down to a whole decade,
    # 1e-7 (and up to 1); 1e-14 falls under it, the other 7 values are drawn
    note = "|log π − log μ| (nats per token): 1 value(s) below 1e-07 fall under the plot"
    assert note in text


@pytest.mark.parametrize(
    ("fixture", "recipe", "panels", "words"),
    [
        ("arl_sft", "sft", {"optim"}, ("optimizer step",)),
        ("arl_rft", "rft", set(), ("round (sample → filter → fine-tune)",)),
        ("arl_dpo", "dpo", {"optim"}, ("log-prob change vs ref. (nats)",)),
        ("arl_distill", "distill", {"teacher", "entropy"}, ("nats per policy token",)),
    ],
)
def test_each_recipe_s_run(fixture, recipe, panels, words):
    run = load_run(FIXTURES / fixture)
    assert run.recipe == recipe
    text = render(FIXTURES / fixture)
    page = Page(text)
    assert not external(page, text)
    assert panels <= set(page.panels) and all(p["svg"] == 1 for p in page.panels.values())
    for w in words:
        assert any(w in p["text"] for p in page.panels.values()), w


def trl_state(folder: Path) -> Path:
    """A TRL GRPO output_dir's trainer_state.json (log_history in TRL's names)."""
    rows = [
        {
            "step": s,
            "epoch": s / 8,
            "loss": 0.01 * s,
            "grad_norm": 1.0 + s,
            "learning_rate": 1e-6 * (8 - s),
            "reward": 0.1 * s,
            "reward_std": 0.3,
            "frac_reward_zero_std": 0.5,
            "entropy": 1.0 - 0.1 * s,
            "completions/mean_length": 40.0 + s,
            "completions/clipped_ratio": 0.25,
            "clip_ratio/region_mean": 0.0,
            "rewards/correct/mean": 0.1 * s,
        }
        for s in range(1, 5)
    ]
    folder.mkdir()
    path = folder / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 4, "log_history": rows}))
    return path


def test_trl_and_verl_runs_through_the_doctor_s_names(tmp_path):
    trl = Page(render(trl_state(tmp_path / "trl")))
    assert {"pass", "entropy", "degenerate", "lengths", "optim", "lr"} <= set(trl.panels)
    assert "kl" not in trl.panels and "mismatch" not in trl.panels
    text = render(tmp_path / "trl")
    assert "Panels this trl log cannot draw" in text and "rewards/correct/mean" in text
    assert "What the doctor could not check" in text
    verl = tmp_path / "verl.jsonl"
    rows = [
        {"step": s, "data": {"actor/entropy": 1.0 / s, "critic/score/mean": 0.2, "actor/lr": 1e-6}}
        for s in range(1, 5)
    ]
    verl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = Page(render(verl))
    assert {"pass", "entropy", "lr"} == set(page.panels)
    assert "source: verl" in render(verl)


def test_cli_writes_beside_the_run_refuses_to_overwrite_and_fails_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "arl_dpo", run)
    assert main(["report", str(run)]) == 0
    written = Path(capsys.readouterr().out.strip())
    assert written == default_out(run) == tmp_path / "run.report.html" and written.is_file()
    assert not (run / "run.report.html").exists()  # a run's folder holds only its own files
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists; pass --overwrite" in err
    assert main(["report", str(run), "--overwrite"]) == 0
    capsys.readouterr()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n{not json\n{"step": 3}\n')
    for bad in (run, tmp_path / "missing"):
        assert main(["report", str(bad), "--out", str(tmp_path / "x.html")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("arl: error:"), err
    assert main(["report", str(run), "--out", str(tmp_path)]) == 2  # a folder is not a file
    assert "is a folder" in capsys.readouterr().err


def test_ch15_report_holds_the_table_and_every_figure(ch15_out):
    results = json.loads((ch15_out / "results.json").read_text())
    text = write_report(ch15_out, ch15_out.parent / "ch15.html").read_text(encoding="utf-8")
    page = Page(text)
    assert not external(page, text)
    for row in results["table"]:
        assert f"<td>{escape(row['quantity'])}</td>" in text
    assert len(page.images) == len(results["figures"]) == 5
    for name, src in zip(results["figures"], page.images, strict=True):
        assert base64.b64decode(src.split(",", 1)[1]) == (ch15_out / name).read_bytes()
    assert "Quick settings" in text


def test_problems_summary_report(problems_out):
    summary = json.loads((problems_out / "summary.json").read_text())
    text = render(problems_out)
    page = Page(text)
    assert not external(page, text)
    assert sorted(set(r["problem"] for r in summary["rows"])) == [1, 17]  # a row per claim
    for r in summary["rows"]:
        assert f'id="problem-{r["problem"]}"' in text and r["measured"] in text
        assert f"<td>{r['status']}</td>" in text
    assert text.count('<section class="item"') == 2 and len(page.images) == 2
    assert text.count("NOT its locked seeds") == 2  # seed 0 is no problem's judged seed
    one = render(problems_out / "problem-17")  # one problem's folder on its own
    assert "arl report: problem 17" in one and len(Page(one).images) == 1
    results = json.loads((problems_out / "problem-17" / "results.json").read_text())
    assert results["rule"]["fingerprint"] in one
    from arl.doctor.report_html import esc

    assert all(esc(c["claim"]["text"]) in one for c in results["claims"])


PROBE = """(() => {
  const box = e => e.getBoundingClientRect();
  const panels = [...document.querySelectorAll('section.panel')];
  return {
    panels: panels.length,
    drawn: panels.filter(p => { const s = p.querySelector('svg'), b = s && box(s);
      return b && b.width > 300 && b.height > 100 && s.querySelectorAll('path').length > 5;
    }).length,
    images: document.images.length,
    loaded: [...document.images].filter(i => i.complete && i.naturalWidth > 100).length,
    width: document.documentElement.scrollWidth,
  };
})()"""


def test_reports_render_in_a_browser(pg_page, ch15_out, problems_out, tmp_path):
    browser = find_browser()
    if browser is None:
        pytest.skip("no Chromium here (apt-get install chromium): the browser test is skipped")
    pages = {
        "pg": pg_page.read_text(encoding="utf-8"),
        "ch15": render(ch15_out),
        "problems": render(problems_out),
        "all_panels": full_page(),
    }
    chromium = Chromium(browser)
    try:
        for name, text in pages.items():
            html = tmp_path / f"report_{name}.html"
            html.write_text(text, encoding="utf-8")
            visit = chromium.visit(html.as_uri(), PROBE)
            png = tmp_path / f"report_{name}.png"
            png.write_bytes(visit.screenshot)
            if SHOTS:
                Path(SHOTS).mkdir(parents=True, exist_ok=True)
                shutil.copy(png, Path(SHOTS) / png.name)
            p = visit.probe
            assert not visit.errors, (name, visit.errors)
            assert visit.requests[0] == html.as_uri()  # then only its own data: images
            assert all(u.startswith("data:image/png") for u in visit.requests[1:]), visit.requests
            assert p["drawn"] == p["panels"] == Page(text).panels.__len__(), (name, p)
            assert p["loaded"] == p["images"] == len(Page(text).images), (name, p)
            assert p["width"] <= 1400, (name, p)  # nothing wider than the window
            assert visit.screenshot.startswith(b"\x89PNG") and len(visit.screenshot) > 20_000
    finally:
        chromium.close()


def test_a_pg_run_s_episodes_are_shown_as_text_after_the_panels(pg_run, pg_page):
    """The run samples steps 1 and 2 (its evaluation and last step); the page shows each
    sample's header and text, after the standing panels."""
    text = pg_page.read_text(encoding="utf-8")
    rows = [json.loads(x) for x in (pg_run / "samples.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} == {1, 2}
    assert text.count('<div class="sample"') + text.count('<div class="sample pass"') == len(rows)
    assert text.index('id="samples"') > text.index('id="panel-pass"')
    for r in rows:
        assert escape(r["completion"], quote=True) in text
