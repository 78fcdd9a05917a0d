"""The installed command's CI reports (docs/reports.md) and its merge of shards
(docs/scale-out.md): JUnit validated with junitparser, Markdown, `repro DIR`, and two
shards merged equal to the unsharded run (table, findings, exit code)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from test_package import command_path

ROOT = Path(__file__).resolve().parents[2]
# The legacy policy finds silently wrong conversions within a few hundred cases, so the
# reports have failures to carry; --no-isolate and one job keep it quick and exact.
CAMPAIGN = ["campaign", "--seed", "3", "--cases", "600", "--policy", "legacy", "--jobs", "1", "--no-isolate",
            "--quiet"]


def shardcheck(*args, cwd=None):
    return subprocess.run([str(command_path()), *map(str, args)], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def junitparser():
    return pytest.importorskip("junitparser", reason="junitparser validates the JUnit (pip install junitparser; "
                               "scripts/python-test.sh installs it)")


@pytest.fixture(scope="module")
def legacy_campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("campaign")
    run = shardcheck(*CAMPAIGN, "--out", out / "run", "--junit", out / "junit.xml", "--markdown", out / "summary.md")
    assert run.returncode == 1, run.stdout + run.stderr
    return out, run


def test_campaign_junit_validates_and_matches_the_report(legacy_campaign):
    jp = junitparser()
    out, _ = legacy_campaign
    report = json.loads((out / "run" / "report.json").read_text())
    xml = jp.JUnitXml.fromfile(str(out / "junit.xml"))
    suites = list(xml) if isinstance(xml, jp.JUnitXml) else [xml]
    assert len(suites) == 1
    suite = suites[0]
    cases = list(suite)
    assert suite.tests == len(cases)
    failed = [c for c in cases if not c.is_passed]
    assert suite.failures == len(failed)
    findings = [c for c in cases if c.classname.startswith("shardcheck.finding.")]
    assert sorted(c.name for c in findings) == sorted(f["signature"] for f in report["findings"])
    assert report["findings"], "the legacy campaign should find something"
    for case in findings:
        (failure,) = case.result
        assert isinstance(failure, jp.Failure)
        file = out / "run" / "findings" / [f["file"] for f in report["findings"] if f["signature"] == case.name][0][9:]
        assert str(file) in failure.text and f"shardcheck repro {file}" in failure.text
        assert file.is_file()
    rows = [c for c in cases if c.classname.startswith("shardcheck.table.")]
    by_corruption = {c.name: c for c in rows if c.classname == "shardcheck.table.corruption"}
    for name, tally in report["by_corruption"].items():
        assert by_corruption[name].is_passed == (tally["silently_wrong"] + tally["crashed"] + tally["target_faults"] == 0)
    assert {c.name for c in rows if c.classname == "shardcheck.table.constructor"} >= set(report["by_constructor"])


def test_campaign_markdown_summary(legacy_campaign):
    out, _ = legacy_campaign
    report = json.loads((out / "run" / "report.json").read_text())
    md = (out / "summary.md").read_text()
    assert md.startswith("## shardcheck campaign: FAIL\n")
    assert f"| **total** | {report['total']['cases']} |" in md
    for finding in report["findings"]:
        assert finding["signature"].replace("|", "/").replace("`", "/") in md


def test_repro_replays_a_folder_with_junit(legacy_campaign, tmp_path):
    jp = junitparser()
    out, _ = legacy_campaign
    folder = tmp_path / "corpus"
    shutil.copytree(out / "run" / "findings", folder / "found")
    shutil.copytree(ROOT / "corpus" / "regressions", folder / "regressions")
    (folder / "broken.json").write_text("{not json")
    run = shardcheck("repro", folder, "--junit", tmp_path / "repro.xml")
    assert run.returncode == 2, run.stdout + run.stderr  # broken.json cannot be replayed
    lines = run.stdout.splitlines()
    files = sorted(str(p) for p in folder.rglob("*.json"))
    assert [line.split(" ", 2)[1].rstrip(":") for line in lines[:-1]] == files
    assert re.fullmatch(r"\d+ case files: \d+ passed, \d+ failed, 1 could not be replayed", lines[-1]), lines[-1]
    xml = jp.JUnitXml.fromfile(str(tmp_path / "repro.xml"))
    suite = list(xml)[0]
    assert suite.tests == len(files) and suite.errors == 1
    # The campaign's findings fail until the bug is fixed: each replays as a failure.
    found = [c for c in suite if "/found/" in c._elem.get("file", "")]
    assert found and all(isinstance(c.result[0], jp.Failure) for c in found)
    assert all("shardcheck repro " in c.result[0].text for c in found)
    # The regression corpus passes with the strict policy it records, but for the cases of
    # the valid-but-different class: repro exits 1 for any wrong tensor, expected or not.
    regressions = [c for c in suite if "/regressions/" in c._elem.get("file", "")]
    different = {p.name for p in (ROOT / "corpus" / "regressions").glob("*.json")
                 if json.loads(p.read_text()).get("expect") == "wrong_valid_layout"}
    assert regressions and all(c.is_passed == (c.name not in different) for c in regressions), \
        [c.name for c in regressions if not c.is_passed]


def table_rows(text):
    # Everything but the timing line ("N cases in S s (R cases/s, J jobs) ...").
    return [line for line in text.splitlines() if " cases/s, " not in line]


def test_two_shards_merged_equal_the_unsharded_run(tmp_path, legacy_campaign):
    out, whole = legacy_campaign
    codes = []
    for index in (0, 1):
        run = shardcheck(*CAMPAIGN, "--shard", f"{index}/2", "--out", tmp_path / f"shard-{index}")
        codes.append(run.returncode)
        assert run.returncode in (0, 1), run.stderr
    merge = shardcheck("campaign", "merge", tmp_path / "shard-0", tmp_path / "shard-1", "--out", tmp_path / "merged",
                       "--junit", tmp_path / "merged.xml")
    assert merge.returncode == whole.returncode, merge.stdout + merge.stderr
    unsharded = json.loads((out / "run" / "report.json").read_text())
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    for key in ("cases", "total", "by_constructor", "by_corruption", "by_refusal_kind", "by_op", "findings", "failed",
                "shard", "seed", "complete"):
        assert merged[key] == unsharded[key], key
    assert table_rows((tmp_path / "merged" / "table.txt").read_text()) == table_rows((out / "run" / "table.txt").read_text())
    for finding in unsharded["findings"]:
        assert (tmp_path / "merged" / finding["file"]).read_text() == (out / "run" / finding["file"]).read_text()
    assert merge.stdout.splitlines()[-1].startswith("verdict: FAIL, exit 1")
    jp = pytest.importorskip("junitparser", reason="junitparser validates the merged JUnit")
    assert list(jp.JUnitXml.fromfile(str(tmp_path / "merged.xml")))[0].failures > 0


def test_merge_refuses_what_is_no_campaign(tmp_path):
    base = ["campaign", "--seed", "5", "--cases", "40", "--jobs", "1", "--no-isolate", "--quiet"]
    for name, extra in (("a", ["--shard", "0/2"]), ("b", ["--shard", "1/2"]), ("c", ["--shard", "1/2"]),
                        ("other", ["--shard", "1/2", "--max-elements", "64"]), ("three", ["--shard", "1/3"])):
        assert shardcheck(*base, *extra, "--out", tmp_path / name).returncode in (0, 1)

    def merge(*names):
        run = shardcheck("campaign", "merge", *(tmp_path / n for n in names), "--out", tmp_path / "merged")
        return run.returncode, run.stderr

    assert merge("a", "b")[0] == 0
    code, why = merge("a", "other")
    assert code == 2 and "different campaigns: max_elements 256 and 64" in why, why
    code, why = merge("a", "three")
    assert code == 2 and "different campaigns: shard_count 2 and 3" in why, why
    code, why = merge("a", "b", "c")
    assert code == 2 and "shard 1/2 is given twice" in why, why
    code, why = merge("a")
    assert code == 2 and "shard 1/2 is missing" in why, why
    code, why = merge("a", tmp_path / "nowhere")
    assert code == 2 and "not a campaign output directory" in why, why


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless Chromium (Debian: apt-get install chromium; scripts/python-test.sh installs it)")


def render(browser, page, tmp_path, *extra):
    """Chromium's headless run of `page`: its stderr (console messages logged there)."""
    run = subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={tmp_path / 'profile'}", *extra, page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stderr


def console_errors(log):
    # Chromium logs a page's console messages and uncaught exceptions as CONSOLE lines.
    return [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]


def test_report_html_is_self_contained(legacy_campaign):
    out, _ = legacy_campaign
    page = (out / "run" / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and 'src="' not in page
    assert page.count("<svg class=\"chart\"") >= 2
    assert "Outcomes per corruption kind" in page and "Outcomes per constructor" in page
    assert "Cases per second" in page and "Finding signatures found" in page
    report = json.loads((out / "run" / "report.json").read_text())
    for finding in report["findings"]:
        assert f'href="{finding["file"]}"' in page


def test_report_html_renders_in_headless_chromium(legacy_campaign, tmp_path):
    browser = chromium()
    # The check sees console errors: a page with one is caught.
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><title>x</title><script>console.error('planted'); undefined_call();</script>")
    assert console_errors(render(browser, broken, tmp_path, "--dump-dom")), "a planted console error went unseen"

    out, _ = legacy_campaign
    page = out / "run" / "report.html"
    shot = tmp_path / "report.png"
    log = render(browser, page, tmp_path, "--window-size=1200,2400", f"--screenshot={shot}")
    assert not console_errors(log), console_errors(log)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000, len(data)
    dom = subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout
    # The charts are in the rendered document, with their bars.
    assert dom.count("<svg") >= 4 and dom.count("<rect") > 50, dom[:500]
