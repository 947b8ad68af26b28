"""The ``teleo`` client commands against a real server process: output, filters, strict parsing, ingest errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import teleo_server
from teleo_server.pipeline_settings import DEFAULT_MATRICES
from tests._server import REPO, ServerProcess

pytestmark = pytest.mark.integration

_RECORDS = [
    {"content": "Deploys go out on Tuesdays after the change review.", "namespace": "filters", "memory_type": "procedural",
     "event_time": "2024-01-10T09:00:00Z", "metadata": {"team": "ops"}, "confidence": 0.9},
    {"content": "The deploy of March failed because the cache was cold.", "namespace": "filters", "memory_type": "episodic",
     "event_time": "2024-03-05T09:00:00Z", "metadata": {"team": "ops"}, "confidence": 0.4},
    {"content": "Deploy tokens rotate every 90 days.", "namespace": "filters-2", "memory_type": "semantic",
     "event_time": "2024-05-20T09:00:00Z", "metadata": {"team": "security"}, "confidence": 0.8},
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    """One server process for the module; each test works in namespaces of its own."""
    root = tmp_path_factory.mktemp("cli")
    server = ServerProcess(root / "data", root / "token").start()
    yield server
    server.kill()


def _env(srv: ServerProcess) -> dict[str, str]:
    return {**os.environ, "TELEO_ADDRESS": srv.address, "TELEO_DEV_TOKEN_FILE": str(srv.token_file)}


def _cli(srv: ServerProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teleo_server.cli", *args], env=_env(srv), cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=120)


def _ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _found(srv: ServerProcess, *args: str) -> list[str]:
    """The contents ``teleo query --json`` returns for ``args``, in rank order."""
    events = [json.loads(line) for line in _ok(_cli(srv, "query", *args, "--json")).splitlines()]
    return [e["result"]["memory"]["input"]["content"] for e in events if "result" in e]


def _no_traceback(r: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in r.stderr and "Exception iterating" not in r.stderr, r.stderr


def test_version():
    r = subprocess.run([sys.executable, "-m", "teleo_server.cli", "--version"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"teleo {teleo_server.__version__}"


def test_query_prints_full_ids_that_get_and_delete_accept(srv):
    memory_id = _ok(_cli(srv, "store", "The staging cluster runs in eu-west-1.", "--namespace", "ids")).split()[0]
    table = _ok(_cli(srv, "query", "which region is staging in", "--namespace", "ids"))
    assert table.splitlines()[0].split()[:4] == ["#", "SCORE", "REL", "ID"]
    row = next(line for line in table.splitlines() if "eu-west-1" in line)
    shown = row.split()[3]
    assert shown == memory_id and 0.0 < float(row.split()[2]) <= 1.0  # the calibrated relevance
    assert json.loads(_ok(_cli(srv, "get", shown)))["id"] == memory_id
    assert _ok(_cli(srv, "delete", shown)).strip() == "deleted 1"


def test_store_names_what_a_change_note_probably_updates_on_stderr(srv):
    first = _ok(_cli(srv, "store", "The staging cluster runs in eu-west-1.", "--namespace", "cli-hints")).strip()
    r = _cli(srv, "store", "We moved staging to us-east-2 in March.", "--namespace", "cli-hints")
    assert r.returncode == 0 and len(r.stdout.split()) == 1  # stdout: the new id alone
    assert f"may update {first} (" in r.stderr and "The staging cluster runs in eu-west-1." in r.stderr
    move = r.stdout.strip()
    for _ in range(2):  # naming it twice links it once
        linked = json.loads(_ok(_cli(srv, "update", move, "--supersedes", first)))
    links = linked["memory"]["input"]["links"]
    assert [(lk["targetId"], lk["type"]) for lk in links] == [(first, "LINK_TYPE_SUPERSEDES")], links
    found = _ok(_cli(srv, "query", "which region is staging in", "--namespace", "cli-hints", "--profile", "hipporag"))
    rows = [line for line in found.splitlines() if line[:3].strip().isdigit()]
    assert any(move in row for row in rows) and not any(first in row for row in rows)  # the replaced fact is hidden now
    assert f"superseded: {first} by {move} (hidden; --historical shows it)" in found.splitlines()


def test_query_filters(srv, tmp_path):
    _ok(_cli(srv, "ingest", str(_jsonl(tmp_path / "f.jsonl", _RECORDS))))
    both = ["--namespace", "filters", "--namespace", "filters-2"]
    assert len(_found(srv, "deploy", *both)) == 3
    assert _found(srv, "deploy", "--namespace", "filters-2") == [_RECORDS[2]["content"]]
    assert sorted(_found(srv, "deploy", *both, "--type", "episodic", "--type", "semantic")) == sorted(
        [_RECORDS[1]["content"], _RECORDS[2]["content"]])
    assert _found(srv, "deploy", *both, "--since", "2024-03-01T00:00:00Z", "--until", "2024-05-01T00:00:00+00:00") == [
        _RECORDS[1]["content"]]
    assert _found(srv, "deploy", *both, "--meta", "team=ops", "--min-confidence", "0.5") == [_RECORDS[0]["content"]]
    # the same filters page through List
    listed = _ok(_cli(srv, "list", *both, "--type", "procedural")).splitlines()
    assert [json.loads(line)["input"]["content"] for line in listed] == [_RECORDS[0]["content"]]
    bad = _cli(srv, "query", "deploy", "--since", "last tuesday")
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr and "2024-05-01" in bad.stderr
    assert "from 0 to 1" in _cli(srv, "query", "deploy", "--min-confidence", "2").stderr


def test_breakdown_in_the_table_and_every_event_as_json(srv):
    _ok(_cli(srv, "store", "Backups run nightly at 02:00 UTC.", "--namespace", "breakdown"))
    plain = _ok(_cli(srv, "query", "when do backups run", "--namespace", "breakdown"))
    assert "purpose" not in plain
    table = _ok(_cli(srv, "query", "when do backups run", "--namespace", "breakdown", "--breakdown"))
    scores = next(line for line in table.splitlines() if "purpose" in line).split()
    for component in ("content", "purpose", "goal", "late", "temporal"):
        assert 0.0 <= float(scores[scores.index(component) + 1]) <= 1.0
    spaces = next(line.split() for line in table.splitlines() if line.split()[:1] == ["spaces"])
    assert "E1_semantic" in spaces and float(spaces[spaces.index("E1_semantic") + 1]) > 0

    out = _ok(_cli(srv, "query", "when do backups run", "--namespace", "breakdown", "--breakdown", "--json"))
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "stage" and kinds[-1] == "summary" and kinds.count("summary") == 1
    assert kinds.index("result") > max(i for i, k in enumerate(kinds) if k == "stage")
    results = [e["result"] for e in events if "result" in e]
    assert len(results) == events[-1]["summary"]["returned"] >= 1
    assert "purposeAlignment" in results[0]["breakdown"] and isinstance(results[0]["memory"]["retrievedCount"], int)


def test_stats_table_and_json(srv):
    _ok(_cli(srv, "store", "Stats count this memory.", "--namespace", "stats"))
    table = _ok(_cli(srv, "stats", "--namespace", "stats"))
    assert table.splitlines()[0].split()[0] == "server" and "{" not in table
    row = next(line.split() for line in table.splitlines() if line.split()[:1] == ["stats"])
    assert row == ["stats", "1", "1"]
    assert any(line.split()[:2] == ["dense", "dense"] for line in table.splitlines())
    data = json.loads(_ok(_cli(srv, "stats", "--namespace", "stats", "--json")))
    assert data["memories"] == 1 and data["namespaces"] == [{"namespace": "stats", "memories": 1, "chunks": 1}]
    assert isinstance(data["goals"], int) and data["serverVersion"] == teleo_server.__version__


def test_compare_and_feedback(srv):
    a = _ok(_cli(srv, "store", "The staging cluster runs in eu-west-1.", "--namespace", "cmp")).split()[0]
    b = _ok(_cli(srv, "store", "Staging runs in the eu-west-1 region.", "--namespace", "cmp")).split()[0]
    table = _ok(_cli(srv, "compare", a, b))
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:] if line.startswith("E")}
    assert "E1_semantic" in rows and 0.0 <= float(rows["E1_semantic"]) <= 1.0
    assert "aggregate (weighted-average):" in table
    data = json.loads(_ok(_cli(srv, "compare", a, b, "--aggregation", "max", "--json")))
    assert data["aggregation"] == "AGGREGATION_MAX" and data["aggregate"] == pytest.approx(max(data["spaces"].values()))
    # a search matrix's weights: semantic_focused weighs E1 1, E13 0.5, E6 0.25, the rest 0
    data = json.loads(_ok(_cli(srv, "compare", a, b, "--matrix", "semantic_focused", "--json")))
    w = {"E1_semantic": 1.0, "E13_splade": 0.5, "E6_lexical": 0.25}
    want = sum(w.get(n, 0) * x for n, x in data["spaces"].items()) / sum(w.get(n, 0) for n in data["spaces"])
    assert data["aggregate"] == pytest.approx(want, rel=1e-5)

    assert _ok(_cli(srv, "feedback", a, "--used", "--helpful")).strip() == f"{a}: retrieved 0, used 1, helpful 1, misled 0"
    counters = json.loads(_ok(_cli(srv, "feedback", a, "--misled", "--json")))
    assert (counters["usedCount"], counters["misledCount"]) == (1, 1)
    nothing = _cli(srv, "feedback", a)
    assert nothing.returncode != 0 and "give --used, --helpful or --misled" in nothing.stderr
    both = _cli(srv, "feedback", a, "--helpful", "--misled")
    assert both.returncode == 2 and "--misled" in both.stderr


def test_unknown_and_abbreviated_options_are_errors(srv):
    typo = _cli(srv, "query", "--topk", "5", "x")
    assert typo.returncode == 2 and "unrecognized option --topk" in typo.stderr and "--top-k" in typo.stderr
    abbreviated = _cli(srv, "query", "--top", "5", "x")
    assert abbreviated.returncode == 2 and "unrecognized option --top;" in abbreviated.stderr
    serve = subprocess.run([sys.executable, "-m", "teleo_server.cli", "serve", "--prot", "1"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert serve.returncode == 2 and "--prot" in serve.stderr
    assert _ok(_cli(srv, "query", "x", "-k", "5", "--namespace", "strict")).startswith("  #")


@pytest.mark.parametrize("command", [
    ["store", "text"], ["query", "text"], ["update", "some-id"], ["list"], ["export"], ["delete-where", "--namespace", "x"],
])
def test_meta_without_equals_is_an_error_naming_the_fix(srv, command):
    r = _cli(srv, *command, "--meta", "foo")
    assert r.returncode == 2 and "--meta: 'foo' is not key=value" in r.stderr and "--meta KEY=VALUE" in r.stderr


def test_ingest_reports_bad_lines_by_number_and_stores_the_rest(srv, tmp_path):
    good = {"content": "a good line", "namespace": "ingest"}
    lines = [
        json.dumps(good),                                                          # 1
        json.dumps({"content": "unknown field", "namespace": "ingest", "bogus": 1}),  # 2
        json.dumps({"content": "wrong enum", "namespace": "ingest", "memoryType": "FOO"}),  # 3
        "[1, 2]",                                                                  # 4
        "",                                                                        # 5
        json.dumps({"content": "", "namespace": "ingest"}),                        # 6: the server rejects it
        json.dumps({"content": "short enum names work", "namespace": "ingest", "memory_type": "episodic"}),  # 7
        json.dumps({"content": "another good line", "namespace": "ingest"}),       # 8
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes("\n".join(lines).encode() + b'\n{"content": "caf\xe9", "namespace": "ingest"}\n')  # 9
    r = _cli(srv, "ingest", str(path), "--batch-size", "2")
    _no_traceback(r)
    assert r.returncode == 1 and r.stdout.startswith("stored 3, duplicates 0, failed 5"), r.stderr
    errors = [line for line in r.stderr.split("\n") if " line " in line]
    assert len(errors) == 5 and all(e.startswith(f"teleo: {path} line ") for e in errors), r.stderr  # none glued to progress
    by_line = {int(e.split(" line ")[1].split(":")[0]): e for e in errors}
    assert sorted(by_line) == [2, 3, 4, 6, 9]
    assert 'unknown field "bogus"' in by_line[2] and "use one of content" in by_line[2]
    assert 'field "memoryType": unknown value "FOO"' in by_line[3] and "episodic" in by_line[3]
    assert "got an array, expected an object" in by_line[4]
    assert "INVALID_ARGUMENT" in by_line[6] and "content" in by_line[6]
    assert "not UTF-8" in by_line[9] and "save the file as UTF-8" in by_line[9]
    listed = [json.loads(line)["input"] for line in _ok(_cli(srv, "list", "--namespace", "ingest")).splitlines()]
    assert [m["content"] for m in listed] == ["a good line", "short enum names work", "another good line"]
    assert listed[1]["memoryType"] == "MEMORY_TYPE_EPISODIC"

    typo = _cli(srv, "ingest", "-", stdin=json.dumps({"conent": "x"}) + "\n")
    assert typo.returncode == 1 and 'stdin line 1: unknown field "conent"; did you mean "content"?' in typo.stderr
    missing = _cli(srv, "ingest", str(tmp_path / "absent.jsonl"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "No such file" in missing.stderr
    _no_traceback(missing)


def test_interrupted_ingest_reports_acknowledged_batches(srv):
    args = [sys.executable, "-m", "teleo_server.cli", "ingest", "-", "--batch-size", "2", "--namespace", "interrupted"]
    err = bytearray()
    with subprocess.Popen(args, env=_env(srv), cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        reader = threading.Thread(target=lambda: [err.extend(c) for c in iter(lambda: proc.stderr.read1(4096), b"")])
        reader.start()
        proc.stdin.write(b"".join(json.dumps({"content": f"line {i}"}).encode() + b"\n" for i in range(5)))
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while b"\r4  " not in err and time.monotonic() < deadline:  # progress drawn once the 2nd batch is acknowledged
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # while it waits for line 6 on stdin
        out = proc.stdout.read().decode()
        assert proc.wait(60) == 130
        reader.join(10)
    stderr = err.decode()
    assert "Traceback" not in stderr
    assert "interrupted after 2 acknowledged batches (4 items, through line 4)" in stderr
    assert out.startswith("stored 4, duplicates 0, failed 0")


def test_health_of_an_unknown_component_names_the_valid_ones(srv):
    r = _cli(srv, "health", "bogus")
    assert r.returncode == 2
    assert r.stderr.strip() == ("teleo: no component 'bogus'; use one of '', teleo.v1.MemoryService, embedding, index, "
                                "store ('' is the whole server)")
    assert _ok(_cli(srv, "health", "index")).strip() == "index: SERVING"


def test_query_goal_and_johari_options_reach_the_server(srv):
    ns = "johari-cli"
    a = _ok(_cli(srv, "store", "The incident review found the cache was cold.", "--namespace", ns)).split()[0]
    _ok(_cli(srv, "store", "Cold caches slow the first deploy of the day.", "--namespace", ns))
    everything = _found(srv, "cache cold", "--namespace", ns)
    assert len(everything) == 2
    _ok(_cli(srv, "feedback", a, "--used"))  # surfaced now: open or hidden, no longer blind or unknown
    surfaced = _found(srv, "cache cold", "--namespace", ns, "--johari", "open", "--johari", "hidden")
    assert surfaced == ["The incident review found the cache was cold."]
    unknown = _cli(srv, "query", "cache cold", "--namespace", ns, "--goal", "no such goal label")
    assert unknown.returncode == 1 and "target_goals[0]: no goal you may see is named 'no such goal label'" in unknown.stderr
    bad = _cli(srv, "query", "x", "--johari", "purple")
    assert bad.returncode == 2 and "invalid choice: 'purple'" in bad.stderr


def test_keyword_only_and_openclaw_profiles_from_the_cli(srv):
    ns = "cli-multilingual"
    _ok(_cli(srv, "store", "東京の会議は毎週月曜日の午前十時に始まります", "--namespace", ns))
    _ok(_cli(srv, "store", "La reunión de presupuesto es en la estación central de Málaga", "--namespace", ns))
    assert _found(srv, "東京会議", "--namespace", ns, "--profile", "keywords") == ["東京の会議は毎週月曜日の午前十時に始まります"]
    found = _found(srv, "reunion estacion malaga", "--namespace", ns, "--profile", "openclaw")
    assert found[:1] == ["La reunión de presupuesto es en la estación central de Málaga"]


def test_query_reads_the_question_and_takes_a_matrix_and_a_language(srv, tmp_path):
    code = "```python\ndef rotate_tokens(days):\n    return schedule(days)\n```"
    records = [{"content": code, "namespace": "persp"},
               {"content": "The deploy failed because the cache was cold.", "namespace": "persp"}]
    _ok(_cli(srv, "ingest", str(_jsonl(tmp_path / "p.jsonl", records))))
    table = _ok(_cli(srv, "query", "why did the deploy fail?", "--namespace", "persp"))
    assert "query: causal; weights:" in table and "E5_causal 1" in table
    table = _ok(_cli(srv, "query", "rotate tokens", "--namespace", "persp", "--matrix", "code_focused"))
    matrix = DEFAULT_MATRICES["code_focused"]
    assert f"E7_code {matrix['E7_code']:g}" in table and f"E1_semantic {matrix['E1_semantic']:g}" in table
    # the perspectives: each result's spaces with the one that gave most starred, and how many results
    # each space's own list found, as the JSON events carry them
    events = [json.loads(line) for line in _ok(_cli(srv, "query", "rotate tokens", "--namespace", "persp", "--matrix",
                                                    "code_focused", "--json")).splitlines()]
    first = next(e["result"] for e in events if "result" in e)
    summary = next(e["summary"] for e in events if "summary" in e)
    row = next(line for line in table.splitlines() if first["memory"]["id"] in line)
    assert first["primarySpace"].split("_")[0] + "*" in row
    found = next(line for line in table.splitlines() if line.startswith("found by: "))
    assert all(f"{n.split('_')[0]} {c}" in found for n, c in summary["foundBySpace"].items())
    assert _found(srv, "rotate tokens", "--namespace", "persp", "--language", "python") == [code]
    assert _found(srv, "rotate tokens", "--namespace", "persp", "--language", "go") == []
    bad = _cli(srv, "query", "x", "--matrix", "nope")
    assert bad.returncode != 0 and "search matrix" in bad.stderr
    _no_traceback(bad)


def test_entry_points_and_goals(srv):
    ibm = _ok(_cli(srv, "store", "International Business Machines reported record revenue.", "--namespace", "entry")).split()[0]
    _ok(_cli(srv, "store", "The cafeteria serves soup on Fridays.", "--namespace", "entry"))
    lines = _ok(_cli(srv, "entry-points", "IBM", "--namespace", "entry", "--json")).splitlines()
    found = {e["space"]: e for e in map(json.loads, lines)}
    assert found["E11_entity"]["memory_id"] == ibm and 0 < found["E11_entity"]["similarity"] <= 1
    table = _ok(_cli(srv, "entry-points", "IBM", "--namespace", "entry"))
    assert table.splitlines()[0].split() == ["SPACE", "SIMILARITY", "SCORE", "BEST", "MATCH"] and ibm in table
    assert "E11_entity" not in _ok(_cli(srv, "entry-points", "IBM", "--namespace", "entry", "--min-similarity", "0.99"))
    for line in _ok(_cli(srv, "goals")).splitlines():
        goal = json.loads(line)
        assert goal["id"] and goal["history"][-1]["size"] == goal["size"]


def test_get_with_purpose_names_the_goal_a_memory_serves(srv, tmp_path):
    topics = {"garden": "tomato seedlings compost harvest garden bed", "billing": "invoice refund ledger payment billing"}
    records = [{"content": f"{words.split()[i % 5]} note {i}: {words}", "namespace": "purpose"}
               for words in topics.values() for i in range(8)]
    _ok(_cli(srv, "ingest", str(_jsonl(tmp_path / "g.jsonl", records))))
    deadline = time.monotonic() + 60
    while not any("purpose/" in line for line in _ok(_cli(srv, "goals")).splitlines()):
        assert time.monotonic() < deadline, "goals were never built"
        time.sleep(0.5)
    listed = [json.loads(line) for line in _ok(_cli(srv, "list", "--namespace", "purpose")).splitlines()]
    memory_id = next(m["id"] for m in listed if "tomato" in m["input"]["content"])
    got = json.loads(_ok(_cli(srv, "get", memory_id, "--purpose")))
    purpose = got["purpose"]
    assert purpose["goalId"].startswith("purpose/") and 0 < purpose["alignment"] <= 1
    assert purpose["alignment"] == pytest.approx(max(purpose["goalAlignment"].values()))
    assert "E1_semantic" in purpose["spaceAlignment"] and purpose["membersCompared"] > 0
    assert "purpose" not in json.loads(_ok(_cli(srv, "get", memory_id)))


def test_query_shows_what_was_replaced_and_reads_history_and_moments(srv, tmp_path):
    """A superseded note is hidden and the table says by which memory; ``--historical`` shows it,
    ``--as-of-event`` and ``--as-of-ingestion`` read the past; hipporag's route is printed."""
    old_text, new_text = "The staging cluster runs in eu-west-1.", "We moved staging to us-east-2 in March."
    records = [{"content": old_text, "namespace": "hist", "event_time": "2024-01-10T09:00:00Z"},
               {"content": new_text, "namespace": "hist", "event_time": "2024-03-05T09:00:00Z"}]
    _ok(_cli(srv, "ingest", str(_jsonl(tmp_path / "h.jsonl", records))))
    listed = [json.loads(line) for line in _ok(_cli(srv, "list", "--namespace", "hist", "--all")).splitlines()]
    ids = {m["input"]["content"]: m["id"] for m in listed}
    old, new = ids[old_text], ids[new_text]
    _ok(_cli(srv, "update", new, "--supersedes", old))
    ask = ("which region is staging in", "--namespace", "hist", "--profile", "hipporag")
    table = _ok(_cli(srv, "query", *ask))
    assert f"superseded: {old} by {new} (hidden; --historical shows it)" in table.splitlines()
    assert "route: simple" in table.splitlines()
    assert _found(srv, *ask) == [new_text]
    table = _ok(_cli(srv, "query", *ask, "--historical"))
    assert f"superseded: {old} by {new}" in table.splitlines()
    assert set(_found(srv, *ask, "--historical")) == {old_text, new_text}
    # before the move, the old note was the truth: nothing supersedes it yet at that moment
    assert _found(srv, *ask, "--as-of-event", "2024-02-01") == [old_text]
    assert "superseded:" not in _ok(_cli(srv, "query", *ask, "--as-of-event", "2024-02-01"))
    # both were stored just now: nothing had been stored a year ago
    assert _found(srv, *ask, "--as-of-ingestion", "2020-01-01T00:00:00Z") == []
    bad = _cli(srv, "query", *ask, "--as-of-event", "last tuesday")
    assert bad.returncode != 0 and "ISO 8601" in bad.stderr
    _no_traceback(bad)


def test_conflict_lines_name_each_kind_of_pair():
    from teleo_server.cli.client import _conflict_lines
    from teleo_server.client.types import ConflictPair

    pairs = (ConflictPair("a", "b", "contradicts", "recency", "b"), ConflictPair("c", "d", "contradicts", "unresolved", ""),
             ConflictPair("e", "f", "implied", "recency", "f"))
    assert _conflict_lines(pairs, historical=False) == [
        "contradicts: a / b: recency, kept b", "contradicts: c / d: unresolved, both kept",
        "implied update: f (newer) ranked above e"]
