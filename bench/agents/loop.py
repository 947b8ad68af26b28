"""The Claude Code hooks in an agent loop, replayed from LoCoMo dev (no LLM).

Every turn of every LoCoMo dev conversation goes through ``Hooks.user_prompt_submit`` in order
(context is retrieved for it, then it is stored), against a real in-process server with one
namespace per conversation; ``Hooks.session_end`` (consolidation and an extractive summary) runs
at the end of each LoCoMo session, as for a live agent. Then every question (adversarial ones
skipped) goes through the same hook without storing, and the question counts as answerable at a
character budget as far as its evidence turns are inside the context the hook injects:

- evidence recall at each budget: the mean over questions of (evidence turns injected / evidence
  turns), with the fraction of questions whose evidence is all injected and the context length used;
- for ``top_k`` 8 and for ``top_k`` 128 (the hook's default), where only the budget limits the
  context; with the default relevance floor (0.01) and with none.

One retrieval per question and floor (``top_k`` 128, the largest budget) is rendered at every
budget and ``top_k`` with the hook's own ``render``. That this gives the hook's exact text is
checked against the real hook: for every question at the default settings, and for a sample at
every ``top_k`` and floor and two budgets. Latency is the wall clock of the in-process hook calls
(client and server share one process) and, end to end, of the ``teleo hooks UserPromptSubmit``
command run as a subprocess (Python start-up included).

    python -m bench.agents.loop --data ../shared/data [--out bench/results/agent_loop.json] [--quick]
        [--conversations N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.eval.datasets import Dataset, QueryItem, locomo
from bench.harness.env import REPO, environment
from teleo_server import logs
from teleo_server.agents.hooks import SUMMARY_KIND, HookSettings, Hooks, Outcome, render
from teleo_server.client import Client, Filters, Memory, SearchResponse, StoreResult
from teleo_server.config import Settings
from tests._server import InThreadServer

BUDGETS = (1000, 2000, 4000, 6000, 10000)
DEFAULTS = HookSettings()
# a handful of memories, and enough for the budget alone to bind (the hook's default, 128, since it
# was raised from 8); the default joins them should it change again
TOP_KS = tuple(sorted({8, 128, DEFAULTS.top_k}))
FLOORS = (DEFAULTS.min_relevance, 0.0)    # the hook's default relevance floor; none
SKIPPED_CATEGORIES = ("adversarial",)     # false premises: the right answer is that the conversation does not say
CHECK_BUDGETS = (1000, DEFAULTS.budget_chars)
QUICK_QUESTION_STRIDE = 4


@dataclass
class Conversation:
    """One LoCoMo conversation replayed into its own namespace."""

    name: str
    namespace: str
    turns: int = 0
    sessions: int = 0
    memory_of: dict[str, str] = field(default_factory=dict)    # dialog turn id -> the id its store returned
    merged_into: dict[str, str] = field(default_factory=dict)  # removed by consolidation -> the memory that absorbed it
    duplicate_turns: int = 0   # turns whose text was already stored: the store returned the existing memory
    merge_groups: int = 0      # consolidated memories
    merged: int = 0            # memories removed by consolidation
    unresolved: int = 0        # memories removed by consolidation that no consolidated memory supersedes
    summaries: int = 0

    def memory(self, turn: str) -> str:
        """The memory that holds ``turn`` now, following consolidation merges."""
        mid = self.memory_of[turn]
        while mid in self.merged_into:
            mid = self.merged_into[mid]
        return mid


@dataclass
class Asked:
    """One question put through UserPromptSubmit: the memories holding its evidence turns and, per
    relevance floor, the context's title and the ranked results of a ``max(TOP_KS)`` retrieval."""

    id: str
    category: str
    evidence: list[str]        # per evidence turn, the memory that holds it now
    merged_evidence: int       # evidence turns whose own memory consolidation merged into another
    title: dict[float, str] = field(default_factory=dict)
    results: dict[float, list[tuple[Memory, float]]] = field(default_factory=dict)

    def context(self, top_k: int, floor: float, budget: int) -> str:
        """The context the hook injects with these settings: its own ``render`` of the first ``top_k``."""
        return render(self.title[floor], self.results[floor][:top_k], budget)


class _Recording:
    """A client that keeps its last search response (so the results behind a hook's context can be
    rendered again at other budgets) and times its searches and stores."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self.last: SearchResponse | None = None
        self.seconds: dict[str, float] = {}

    def search(self, *args: Any, **kwargs: Any) -> SearchResponse:
        start = time.perf_counter()
        self.last = self._client.search(*args, **kwargs)
        self.seconds["search"] = time.perf_counter() - start
        return self.last

    def store(self, *args: Any, **kwargs: Any) -> StoreResult:
        start = time.perf_counter()
        stored = self._client.store(*args, **kwargs)
        self.seconds["store"] = time.perf_counter() - start
        return stored

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _context(outcome: Outcome) -> str:
    return outcome.output["hookSpecificOutput"]["additionalContext"] if outcome.output else ""


def _payload(session: str, event: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": session, "cwd": str(REPO), "hook_event_name": event, **fields}


def _question_payload(conv: Conversation, q: QueryItem) -> dict[str, Any]:
    return _payload(f"{conv.name}-questions", "UserPromptSubmit", prompt=q.text)


def _injected(mid: str, text: str) -> bool:
    """Whether the memory ``mid`` is one of the context's lines (the hook writes ``id <12 chars>]``)."""
    return f"id {mid[:12]}]" in text


class Phases:
    """Wall clock per phase, and the CPU other processes used meanwhile (in cores: 0 on a quiet
    machine, up to the core count when the benchmark shared every core), so that latency measured
    on a busy machine can be told from latency measured on a quiet one."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.other_cores: dict[str, float] = {}

    @staticmethod
    def _cpu() -> tuple[float, float]:
        """CPU seconds: busy on the whole machine (/proc/stat), used by this process and its children."""
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
        busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
        own = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                    resource.getrusage(resource.RUSAGE_CHILDREN)))
        return busy, own

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start, (busy, own) = time.perf_counter(), self._cpu()
        yield
        wall = time.perf_counter() - start
        busy_after, own_after = self._cpu()
        self.seconds[name] = round(wall, 1)
        self.other_cores[name] = round(max(0.0, (busy_after - busy) - (own_after - own)) / wall, 2)


def _ms(seconds: Sequence[float]) -> dict[str, float | int]:
    a = np.asarray(seconds, dtype=np.float64) * 1000.0
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size), "p50": round(float(np.percentile(a, 50)), 1), "p99": round(float(np.percentile(a, 99)), 1),
            "mean": round(float(a.mean()), 1), "max": round(float(a.max()), 1)}


# --- replay ---------------------------------------------------------------------------------------


def replay(client: Client, ds: Dataset, timings: Mapping[str, list[float]]) -> Conversation:
    """Every turn through UserPromptSubmit (retrieve, then store), SessionEnd after each session."""
    conv = Conversation(ds.name, f"locomo:{ds.name}")
    recording = _Recording(client)
    hooks = Hooks(recording, HookSettings(namespace=conv.namespace, store_prompts=True))
    seen: set[str] = set()
    for session, turns in itertools.groupby(ds.docs, key=lambda d: d.session):
        sid = session.replace("/", "-")
        for turn in turns:
            start = time.perf_counter()
            outcome = hooks.user_prompt_submit(_payload(sid, "UserPromptSubmit", prompt=turn.text))
            timings["user_prompt_submit"].append(time.perf_counter() - start)
            timings["user_prompt_submit.search"].append(recording.seconds["search"])
            timings["user_prompt_submit.store"].append(recording.seconds["store"])
            (mid,) = outcome.stored
            conv.duplicate_turns += mid in seen
            seen.add(mid)
            conv.memory_of[turn.id] = mid
            conv.turns += 1
        scope = Filters(namespaces=[conv.namespace], session_id=sid)
        before = {m.id for m in client.memories(scope)}
        start = time.perf_counter()
        hooks.session_end(_payload(sid, "SessionEnd", reason="other"))
        timings["session_end"].append(time.perf_counter() - start)
        after = list(client.memories(scope))
        removed = before - {m.id for m in after}
        for m in after:
            if m.metadata.get("kind") == "consolidated":
                absorbed = [link.target_id for link in m.links if link.type == "supersedes" and link.target_id in removed]
                conv.merged_into.update(dict.fromkeys(absorbed, m.id))
                conv.merge_groups += bool(absorbed)
            elif m.metadata.get("kind") == SUMMARY_KIND and m.id not in before:
                conv.summaries += 1
        conv.merged += len(removed)
        conv.unresolved += len(removed - conv.merged_into.keys())
        conv.sessions += 1
    return conv


# --- questions ------------------------------------------------------------------------------------


def ask(client: Client, conv: Conversation, questions: Sequence[QueryItem], warm: set[str],
        timings: Mapping[str, list[float]]) -> tuple[list[Asked], int]:
    """Each question through UserPromptSubmit (no store): first as configured by default, timed (its
    query embedding not cached yet unless its id is in ``warm``); then at ``max(TOP_KS)`` and the
    largest budget once per relevance floor, keeping the results rendered. Returns the questions and
    how many default contexts the re-rendering reproduces exactly."""
    recording = _Recording(client)
    default = Hooks(client, HookSettings(namespace=conv.namespace, store_prompts=False))
    wide = {floor: Hooks(recording, HookSettings(namespace=conv.namespace, store_prompts=False, top_k=max(TOP_KS),
                                                 min_relevance=floor, budget_chars=max(BUDGETS)))
            for floor in FLOORS}
    out, same = [], 0
    for q in questions:
        payload = _question_payload(conv, q)
        start = time.perf_counter()
        text = _context(default.user_prompt_submit(payload))
        if q.id not in warm:
            timings["question_default"].append(time.perf_counter() - start)
        mids = [conv.memory_of[t] for t in q.relevant]
        a = Asked(q.id, q.category, [conv.memory(t) for t in q.relevant],
                  sum(mid in conv.merged_into for mid in mids))
        for floor in FLOORS:
            start = time.perf_counter()
            full = _context(wide[floor].user_prompt_submit(payload))
            timings[f"question_top_k_{max(TOP_KS)}"].append(time.perf_counter() - start)
            assert recording.last is not None
            a.title[floor] = full.split("\n", 1)[0]
            a.results[floor] = [(r.memory, r.relevance) for r in recording.last.results]
        same += text == a.context(DEFAULTS.top_k, DEFAULTS.min_relevance, DEFAULTS.budget_chars)
        out.append(a)
    return out, same


def check(client: Client, conv: Conversation, sample: Sequence[tuple[QueryItem, Asked]]) -> tuple[int, int]:
    """The real hook against the re-rendered context for ``sample``, at every top_k and floor and
    ``CHECK_BUDGETS``: (identical, compared)."""
    same = compared = 0
    for q, a in sample:
        for top_k, floor, budget in itertools.product(TOP_KS, FLOORS, CHECK_BUDGETS):
            hooks = Hooks(client, HookSettings(namespace=conv.namespace, store_prompts=False, top_k=top_k,
                                               min_relevance=floor, budget_chars=budget))
            same += _context(hooks.user_prompt_submit(_question_payload(conv, q))) == a.context(top_k, floor, budget)
            compared += 1
    return same, compared


def recall_table(asked: Sequence[Asked]) -> list[dict[str, Any]]:
    """Per (top_k, floor, budget): evidence recall, all-evidence rate, context used."""
    rows = []
    for top_k, floor in itertools.product(TOP_KS, FLOORS):
        retrieved = np.mean([np.mean([any(m.id == mid for m, _ in a.results[floor][:top_k]) for mid in a.evidence])
                             for a in asked])
        for budget in BUDGETS:
            recall, complete, chars, lines, summaries = [], [], [], [], []
            for a in asked:
                text = a.context(top_k, floor, budget)
                hits = [_injected(mid, text) for mid in a.evidence]
                recall.append(np.mean(hits))
                complete.append(all(hits))
                chars.append(len(text))
                lines.append(text.count("\n- ["))
                summaries.append(sum(m.metadata.get("kind") == SUMMARY_KIND and _injected(m.id, text)
                                     for m, _ in a.results[floor][:top_k]))
            rows.append({"top_k": top_k, "min_relevance": floor, "budget_chars": budget,
                         "evidence_recall": round(float(np.mean(recall)), 4),
                         "all_evidence_injected": round(float(np.mean(complete)), 4),
                         "evidence_in_results": round(float(retrieved), 4),
                         "mean_context_chars": round(float(np.mean(chars)), 1),
                         "mean_memories_injected": round(float(np.mean(lines)), 2),
                         "mean_session_summaries_injected": round(float(np.mean(summaries)), 2),
                         "empty_context": round(float(np.mean([c == 0 for c in chars])), 4)})
    return rows


def by_category(asked: Sequence[Asked], budget: int) -> dict[str, dict[str, Any]]:
    """Evidence recall per question category at ``budget``, per (top_k, floor)."""
    out: dict[str, dict[str, Any]] = {}
    for category in sorted({a.category for a in asked}):
        group = [a for a in asked if a.category == category]
        out[category] = {"questions": len(group)}
        for top_k, floor in itertools.product(TOP_KS, FLOORS):
            recall = [np.mean([_injected(mid, a.context(top_k, floor, budget)) for mid in a.evidence]) for a in group]
            out[category][f"top_k={top_k},min_relevance={floor:g}"] = round(float(np.mean(recall)), 4)
    return out


# --- the command ----------------------------------------------------------------------------------


def command_latency(srv: InThreadServer, chosen: Sequence[tuple[Conversation, QueryItem]],
                    startup_runs: int) -> tuple[dict[str, Any], dict[str, str]]:
    """``python -m teleo_server.cli hooks UserPromptSubmit`` per question (default settings, no store),
    and with an empty prompt (start-up only, no RPC): latency, and each question's context by id."""
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_PROJECT_DIR", "TELEO_NAMESPACE")}
    env["TELEO_TOKEN"] = srv.token

    def run(namespace: str, payload: dict[str, Any]) -> tuple[float, str]:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "teleo_server.cli", "hooks", "UserPromptSubmit", "--address",
                               srv.address, "--no-store-prompts", "--namespace", namespace],
                              input=json.dumps(payload), capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0 or proc.stderr.strip():
            raise RuntimeError(f"teleo hooks exited {proc.returncode}: {proc.stderr.strip()}")
        return elapsed, json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"] if proc.stdout.strip() else ""

    timed, texts = [], {}
    for conv, q in chosen:
        elapsed, texts[q.id] = run(conv.namespace, _question_payload(conv, q))
        timed.append(elapsed)
    conv = chosen[0][0]
    startup = [run(conv.namespace, _payload(f"{conv.name}-questions", "UserPromptSubmit", prompt=""))[0]
               for _ in range(startup_runs)]
    return {"user_prompt_submit": _ms(timed), "empty_prompt_no_rpc": _ms(startup)}, texts


# --- main -----------------------------------------------------------------------------------------


def _markdown(result: dict[str, Any]) -> str:
    cols = list(itertools.product(TOP_KS, FLOORS))
    head = " | ".join(f"top_k {k}, floor {f:g}" for k, f in cols)
    lines = [f"| budget | {head} |", "|---:|" + "---:|" * len(cols)]
    rows = {(r["top_k"], r["min_relevance"], r["budget_chars"]): r for r in result["recall"]}
    for budget in BUDGETS:
        cells = []
        for k, f in cols:
            r = rows[k, f, budget]
            cells.append(f"{r['evidence_recall']:.3f} / {r['all_evidence_injected']:.3f} / {r['mean_context_chars']:.0f}")
        lines.append(f"| {budget} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("cells: evidence recall / all evidence injected / mean context chars")
    lat = result["latency_ms"]
    for name, v in (("UserPromptSubmit replay (retrieve + store)", lat["user_prompt_submit"]),
                    ("SessionEnd (consolidate + summary)", lat["session_end"]),
                    ("UserPromptSubmit question, defaults (no store)", lat["question_default"]),
                    ("teleo hooks UserPromptSubmit command", lat["command"]["user_prompt_submit"]),
                    ("command with an empty prompt (start-up, no RPC)", lat["command"]["empty_prompt_no_rpc"])):
        if v.get("n"):
            lines.append(f"- {name}: p50 {v['p50']:.0f} ms, p99 {v['p99']:.0f} ms (n={v['n']})")
    busy = ", ".join(f"{k} {v:.2f}" for k, v in result["other_processes_cpu_cores"].items())
    lines.append(f"- CPU cores used by other processes meanwhile: {busy}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="the data directory (locomo/locomo_dev.json)")
    ap.add_argument("--out", type=Path, help="the JSON result (default bench/results/agent_loop.json, "
                                             "agent_loop_quick.json with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke check: the first conversation and every {QUICK_QUESTION_STRIDE}th of its questions")
    ap.add_argument("--conversations", type=int, help="only the first N dev conversations (default all; 1 with --quick)")
    args = ap.parse_args(argv)
    out = args.out or REPO / "bench" / "results" / ("agent_loop_quick.json" if args.quick else "agent_loop.json")
    logs.configure(quiet=True)
    began = time.perf_counter()
    env = {**environment(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    datasets = locomo(args.data, slice(0, args.conversations or (1 if args.quick else None)))
    raw_qa = {s["sample_id"]: len(s["qa"])
              for s in json.loads((args.data / "locomo" / "locomo_dev.json").read_text(encoding="utf-8"))}
    check_stride, command_runs, startup_runs = (5, 10, 3) if args.quick else (20, 50, 10)
    timings: dict[str, list[float]] = defaultdict(list)
    phase = Phases()
    with tempfile.TemporaryDirectory(prefix="teleo-agent-loop-") as tmp, phase("total"):
        root = Path(tmp)
        srv = InThreadServer.start(Settings(port=0, data_dir=root / "data", dev_token_file=root / "token",
                                            embedding={"cache_dir": str(root / "embeddings")}))
        try:
            with Client(srv.address, token=srv.token) as client:
                convs = []
                with phase("replay"):
                    for ds in datasets:
                        convs.append(replay(client, ds, timings))
                        print(f"{ds.name}: replayed {convs[-1].turns} turns in {convs[-1].sessions} sessions "
                              f"({time.perf_counter() - began:.0f} s)", file=sys.stderr)

                plan = [(conv, [q for q in ds.queries["dev"] if q.category not in SKIPPED_CATEGORIES])
                        for conv, ds in zip(convs, datasets)]
                skipped = sum(len(ds.queries["dev"]) for ds in datasets) - sum(len(qs) for _, qs in plan)
                if args.quick:
                    plan = [(conv, qs[::QUICK_QUESTION_STRIDE]) for conv, qs in plan]
                pairs = [(conv, q) for conv, qs in plan for q in qs]

                with phase("command"):  # first, while no question's embedding is cached
                    command, command_texts = command_latency(
                        srv, pairs[:: max(1, len(pairs) // command_runs)][:command_runs], startup_runs)

                rounds: list[tuple[Conversation, list[QueryItem], list[Asked]]] = []
                default_same = 0
                with phase("questions"):
                    for conv, questions in plan:
                        answered, same = ask(client, conv, questions, set(command_texts), timings)
                        rounds.append((conv, questions, answered))
                        default_same += same
                        print(f"{conv.name}: asked {len(questions)} questions ({time.perf_counter() - began:.0f} s)",
                              file=sys.stderr)
                asked = [a for _, _, answered in rounds for a in answered]
                command_same = sum(
                    command_texts[q.id] == a.context(DEFAULTS.top_k, DEFAULTS.min_relevance, DEFAULTS.budget_chars)
                    for _, questions, answered in rounds for q, a in zip(questions, answered) if q.id in command_texts)
                command["identical_to_in_process"] = f"{command_same}/{len(command_texts)}"

                with phase("render_check"):
                    checked = [check(client, conv, list(zip(questions, answered))[::check_stride])
                               for conv, questions, answered in rounds]
                stats = client.stats()
        finally:
            srv.stop()

    merged_evidence = sum(a.merged_evidence for a in asked)
    result = {
        "benchmark": "agent_loop",
        "description": "LoCoMo dev replayed through the Claude Code hooks: evidence turns inside the "
                       "UserPromptSubmit context against the character budget; hook latency",
        "command": "python -m bench.agents.loop " + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": env,
        "server": {"profile": "default", "model_version": stats.model_version, "backend": stats.backend,
                   "embedder": stats.embedder, "memories_at_end": stats.memories},
        "settings": {
            "dataset": "LoCoMo dev (locomo_dev.json)", "quick": args.quick, "conversations": [ds.name for ds in datasets],
            "budgets_chars": list(BUDGETS), "top_k": list(TOP_KS), "min_relevance": list(FLOORS),
            "skipped_categories": list(SKIPPED_CATEGORIES), "hook_defaults": asdict(DEFAULTS),
            "replay": "each turn a UserPromptSubmit prompt '<speaker>: <text>' (photo captions appended) stored "
                      "with store_prompts=True; SessionEnd after each LoCoMo session; one namespace per conversation",
            "questions": f"UserPromptSubmit with store_prompts=False; one retrieval per floor at top_k {max(TOP_KS)}, "
                         "rendered at each budget and top_k with the hook's render(); an evidence turn is injected "
                         "when the line 'id <first 12 chars of its memory id>]' is in the context",
        },
        "counts": {
            "conversations": len(convs),
            "turns": sum(c.turns for c in convs),
            "sessions": sum(c.sessions for c in convs),
            "qa_items": sum(raw_qa[ds.name] for ds in datasets),
            "qa_without_resolvable_evidence": sum(raw_qa[ds.name] - len(ds.queries["dev"]) for ds in datasets),
            "skipped_adversarial": skipped,
            "questions_asked": len(asked),
            "evidence_turns": sum(len(a.evidence) for a in asked),
            "duplicate_turns": sum(c.duplicate_turns for c in convs),
        },
        "consolidation": {
            "merge_groups": sum(c.merge_groups for c in convs),
            "memories_merged_away": sum(c.merged for c in convs),
            "merged_away_without_supersedes_link": sum(c.unresolved for c in convs),
            "summaries_stored": sum(c.summaries for c in convs),
            "evidence_turns_merged_away": merged_evidence,
            "questions_with_merged_evidence": sum(a.merged_evidence > 0 for a in asked),
        },
        "recall": recall_table(asked),
        "recall_by_category_at_default_budget": by_category(asked, DEFAULTS.budget_chars),
        "render_check": {
            "defaults": {"identical": default_same, "compared": len(asked),
                         "settings": "the hook as configured by default, every question"},
            "sample": {"identical": sum(same for same, _ in checked), "compared": sum(n for _, n in checked),
                       "settings": f"top_k {list(TOP_KS)} x min_relevance {list(FLOORS)} x budget "
                                   f"{list(CHECK_BUDGETS)}, every {check_stride}th question"},
        },
        "latency_ms": {
            "user_prompt_submit": _ms(timings["user_prompt_submit"]),
            "user_prompt_submit.search": _ms(timings["user_prompt_submit.search"]),
            "user_prompt_submit.store": _ms(timings["user_prompt_submit.store"]),
            "session_end": _ms(timings["session_end"]),
            "question_default": _ms(timings["question_default"]),
            f"question_top_k_{max(TOP_KS)}": _ms(timings[f"question_top_k_{max(TOP_KS)}"]),
            "command": command,
            "notes": "in-process: Hooks method wall clock, client and in-thread server in one process (one GIL); "
                     "user_prompt_submit: during the replay (retrieve, then store the turn), with its search and "
                     "store calls; question_default: questions at the default settings, no store, query embedding "
                     f"not cached; question_top_k_{max(TOP_KS)}: the retrievals rendered at every budget (query "
                     "embedding cached by then); command: subprocess wall clock including Python start-up and "
                     "imports, run before any question was embedded",
        },
        "elapsed_s": phase.seconds,
        "other_processes_cpu_cores": phase.other_cores,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(_markdown(result))
    print(f"wrote {out} in {phase.seconds['total']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
