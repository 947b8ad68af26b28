"""Client commands of ``teleo``: talk to a running server over gRPC."""

from __future__ import annotations

import argparse
import difflib
import json
import re
import signal
import sys
import time
from datetime import datetime

from teleo_server.cli.common import client_for, connection_options
from teleo_server.client import convert
from teleo_server.client.connection import DEFAULT_ADDRESS, ClientError
from teleo_server.client.types import Filters, MemoryInput

MEMORY_TYPES = ("episodic", "semantic", "procedural", "working", "reflective")
AGGREGATIONS = ("weighted-average", "rrf", "max", "min", "geometric-mean")
HEALTH_COMPONENTS = ("", "teleo.v1.MemoryService", "embedding", "index", "store")
_INGEST_ALIASES = ("text", "client_ref")  # ingest-only keys: content under another name, the echoed reference


def _clip(text: str, width: int = 100) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _print_json(d: dict) -> None:
    print(json.dumps(d, ensure_ascii=False), flush=True)


# --- argument types ----------------------------------------------------------------------------


def _meta_item(text: str) -> tuple[str, str]:
    """``--meta KEY=VALUE`` as a pair; anything else is a usage error that names the fix."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not key=value; write it as --meta KEY=VALUE, e.g. --meta team=ops")
    return key, value


def _space_weight(text: str) -> tuple[str, float]:
    """``--space-weight SPACE=WEIGHT`` as a pair."""
    key, sep, value = text.partition("=")
    try:
        if sep and key:
            return key, float(value)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r} is not space=weight; write it as e.g. --space-weight E1_semantic=2")


def _moment(text: str) -> datetime:
    """An ISO 8601 date or date and time; without a UTC offset it is local time."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date or time; write e.g. 2024-05-01, 2024-05-01T13:30 or 2024-05-01T13:30:00Z"
        ) from None
    return moment if moment.tzinfo else moment.astimezone()


def _unit(text: str) -> float:
    """A number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1")
    return value


# --- filters -----------------------------------------------------------------------------------


def _filter_options(c: argparse.ArgumentParser, namespace_required: bool = False) -> None:
    """The hard filters of Retrieve, List, Export and DeleteWhere as options of ``c``."""
    what = "namespace to delete from" if namespace_required else "only this namespace"
    c.add_argument("--namespace", action="append", required=namespace_required, help=f"{what} (repeatable)")
    c.add_argument("--type", action="append", choices=MEMORY_TYPES, help="only this memory type (repeatable)")
    c.add_argument("--since", type=_moment, metavar="WHEN",
                   help="only memories whose event time is at or after WHEN (ISO 8601; local time without an offset)")
    c.add_argument("--until", type=_moment, metavar="WHEN", help="only memories whose event time is before WHEN")
    c.add_argument("--session", help="only this session")
    c.add_argument("--meta", action="append", type=_meta_item, metavar="KEY=VALUE",
                   help="metadata that must match (repeatable)")
    c.add_argument("--min-confidence", type=_unit, metavar="X", help="only memories with confidence at least X (0..1)")
    c.add_argument("--language", action="append", metavar="LANG",
                   help="only memories holding code in this language, e.g. python (repeatable)")


def _where(args: argparse.Namespace) -> Filters:
    """The filters of the options that ``_filter_options`` added."""
    return Filters(namespaces=args.namespace or [], memory_types=args.type or [], since=args.since, until=args.until,
                   min_confidence=args.min_confidence, session_id=args.session or "", metadata=_meta_pairs(args.meta),
                   languages=args.language or [])


def _meta_pairs(items: list[tuple[str, str]] | None) -> dict[str, str]:
    return dict(items or [])


# --- memories from JSON ------------------------------------------------------------------------


def _memory_input(d: dict, default_ns: str | None):
    """A MemoryInput from a JSON object; ValueError names the first bad field and the fix.

    Enum values may also be given by their short name in any case (``"episodic"``, ``"public"``).
    """
    from google.protobuf import json_format
    from teleo.v1 import memory_pb2 as pb

    msg = pb.MemoryInput()
    _check_fields(d, msg.DESCRIPTOR, "")
    fields = _fields(msg.DESCRIPTOR)
    for key, value in d.items():
        part = pb.MemoryInput()
        try:
            json_format.ParseDict({key: value}, part)
        except json_format.ParseError as exc:
            raise ValueError(_bad_value(key, value, fields[key], exc)) from None
        msg.MergeFrom(part)
    if default_ns and not msg.namespace:
        msg.namespace = default_ns
    return msg


def _check_fields(d: object, desc, where: str) -> None:
    """Raise ValueError for the first unknown field or enum value of the JSON object ``d`` (message
    ``desc``); short enum names are replaced by full ones in place."""
    if not isinstance(d, dict):
        raise ValueError(f'field "{where}": expected an object, got {_json_kind(d)}')
    fields = _fields(desc)
    for key, value in d.items():
        name = f"{where}.{key}" if where else key
        f = fields.get(key)
        if f is None:
            known = [f.name for f in desc.fields] + ([] if where else list(_INGEST_ALIASES))
            close = difflib.get_close_matches(key, known, n=1)
            fix = f'did you mean "{close[0]}"?' if close else f"use one of {', '.join(known)}"
            raise ValueError(f'unknown field "{name}"; {fix}')
        if f.enum_type is not None:
            d[key] = [_enum_name(v, f.enum_type, name) for v in value] if isinstance(value, list) \
                else _enum_name(value, f.enum_type, name)
        elif f.message_type is not None and not f.message_type.GetOptions().map_entry \
                and not f.message_type.full_name.startswith("google.protobuf."):
            if not f.is_repeated:
                _check_fields(value, f.message_type, name)
            elif not isinstance(value, list):
                raise ValueError(f'field "{name}": expected a list of objects, got {_shown(value)}')
            else:
                for i, item in enumerate(value):
                    _check_fields(item, f.message_type, f"{name}[{i}]")


def _shown(value: object) -> str:
    """A JSON value as quoted in an error line, cut at 40 characters."""
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 40 else shown[:39] + "…"


def _fields(desc) -> dict:
    """The fields of a message by both the names JSON may use: proto (snake_case) and camelCase."""
    return {**{f.name: f for f in desc.fields}, **{f.json_name: f for f in desc.fields}}


def _enum_name(value: object, enum, field: str) -> object:
    """The enum value's full name for a full or short name (any case), or the valid number itself."""
    prefix = enum.values[0].name.removesuffix("UNSPECIFIED")
    if isinstance(value, str):
        wanted = value.strip().upper().replace("-", "_")
        for name in (wanted, prefix + wanted):
            if name in enum.values_by_name:
                return name
    elif isinstance(value, int) and not isinstance(value, bool) and value in enum.values_by_number:
        return value
    valid = ", ".join(v.name.removeprefix(prefix).lower() for v in enum.values if v.number)
    raise ValueError(f'field "{field}": unknown value {json.dumps(value)}; use one of {valid}')


def _bad_value(key: str, value: object, f, exc: Exception) -> str:
    """One line for a value protobuf could not parse: the field, what it expects, what it got."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if f.message_type is not None and f.message_type.full_name == "google.protobuf.Timestamp":
        expected = 'an RFC 3339 time such as "2024-05-01T13:30:00Z"'
    elif f.message_type is not None and f.message_type.GetOptions().map_entry:
        expected = 'an object of string values such as {"team": "ops"}'
    elif f.message_type is not None:
        return f'field "{key}": {str(exc).splitlines()[0]}'
    else:
        expected = {F.CPPTYPE_STRING: "a string", F.CPPTYPE_BOOL: "true or false", F.CPPTYPE_FLOAT: "a number",
                    F.CPPTYPE_DOUBLE: "a number"}.get(f.cpp_type, "a whole number")
    return f'field "{key}": expected {expected}, got {_shown(value)}'


def _json_kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "true or false",
            type(None): "null"}.get(type(value), "a number")


def _batch_item(raw: bytes, number: int, default_ns: str | None) -> tuple[str, MemoryInput]:
    """The client reference and memory of one JSONL line; ValueError says what is wrong with it and
    how to fix it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                         "save the file as UTF-8") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno}); write one JSON object per line") from None
    if not isinstance(record, dict):
        raise ValueError(f'got {_json_kind(record)}, expected an object; write one JSON object per line, '
                         'e.g. {"content": "..."}')
    ref = record.pop("client_ref", number)
    if "text" in record and "content" not in record:
        record["content"] = record.pop("text")
    return str(ref), convert.memory_input_from_message(_memory_input(record, default_ns))


# --- commands ----------------------------------------------------------------------------------


def cmd_store(args: argparse.Namespace) -> int:
    content = args.content if args.content != "-" else sys.stdin.read()
    memory = MemoryInput(content=content, namespace=args.namespace or "", memory_type=args.type,
                         metadata=_meta_pairs(args.meta))
    with client_for(args) as client:
        resp = client.store(memory)
    print(f"{resp.id}{'  (duplicate)' if resp.duplicate else ''}")
    for hint in resp.possible_updates:
        # on stderr: scripts that read the new id from stdout keep reading one line
        print(f"may update {hint.id} ({hint.similarity:.2f}): {_clip(hint.content)}", file=sys.stderr)
    return 0


class _Progress:
    """A progress line on stderr, ended before any other line is written so that none is glued to it."""

    def __init__(self, total: int | None) -> None:
        self.total, self.t0, self.shown = total, time.perf_counter(), False
        self.tty = sys.stderr.isatty()

    def show(self, done: int) -> None:
        rate = done / max(time.perf_counter() - self.t0, 1e-9)
        if self.total:
            filled = int(30 * done / self.total)
            line = f"[{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total}  {rate:,.0f}/s"
        else:
            line = f"{done}  {rate:,.0f}/s"
        if self.shown:
            line = ("\r\033[K" if self.tty else "\r") + line
        sys.stderr.write(line)
        sys.stderr.flush()
        self.shown = True

    def end(self, keep: bool = True) -> None:
        """Finish the progress line (``keep``), or wipe it on a terminal, so the next line starts clean."""
        if self.shown:
            sys.stderr.write("\n" if keep or not self.tty else "\r\033[K")
            sys.stderr.flush()
            self.shown = False

    def note(self, text: str) -> None:
        """Write ``text`` as a line of its own; the next ``show`` draws the progress again."""
        self.end(keep=False)
        print(text, file=sys.stderr, flush=True)


class _Ingest:
    """One ``teleo ingest`` run: JSONL lines in batches of StoreBatch, counted and reported by line number."""

    def __init__(self, args: argparse.Namespace, total: int | None) -> None:
        self.args, self.client = args, client_for(args)
        self.name = "stdin" if args.file == "-" else args.file
        self.progress = _Progress(total)
        self.pending: list[tuple[int, str, MemoryInput]] = []  # (line number, client_ref, memory)
        self.read = self.stored = self.dups = self.failed = self.batches = self.committed = self.last_line = 0

    def add(self, number: int, raw: bytes) -> None:
        self.read += 1
        try:
            ref, memory = _batch_item(raw, number, self.args.namespace)
        except ValueError as exc:
            self.failed += 1
            self.progress.note(f"teleo: {self.name} line {number}: {exc}")
            return
        self.pending.append((number, ref, memory))
        if len(self.pending) >= self.args.batch_size:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        numbers = [n for n, _, _ in self.pending]
        resp = self.client.store_batch([m for _, _, m in self.pending], client_refs=[r for _, r, _ in self.pending])
        self.pending.clear()
        self.batches, self.committed, self.last_line = self.batches + 1, self.committed + len(numbers), numbers[-1]
        self.stored, self.dups = self.stored + resp.stored, self.dups + resp.duplicates
        self.failed += resp.failed
        for item in resp.items:
            if item.error:
                where = numbers[item.index] if 0 <= item.index < len(numbers) else "?"
                self.progress.note(f"teleo: {self.name} line {where}: {item.error_code}: {item.error}")
        self.progress.show(self.read)

    def acknowledged(self) -> str:
        """What the server has acknowledged so far, for a run cut short."""
        if not self.batches:
            return "no batch was acknowledged"
        batches = "1 acknowledged batch" if self.batches == 1 else f"{self.batches} acknowledged batches"
        return f"{batches} ({self.committed} items, through line {self.last_line})"

    def summary(self) -> str:
        elapsed = time.perf_counter() - self.progress.t0
        return f"stored {self.stored}, duplicates {self.dups}, failed {self.failed} in {elapsed:.1f}s"


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _interrupt_on_sigterm():
    """Make SIGTERM interrupt as Ctrl-C does; returns the handler it replaced (None off the main thread)."""
    try:
        return signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:
        return None


def _blank(raw: bytes) -> bool:
    return not raw.strip()


def cmd_ingest(args: argparse.Namespace) -> int:
    """Store every line of a JSONL file; a bad line is reported (by line number) and skipped."""
    try:
        stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
        total = None
        if args.file != "-":
            total = sum(1 for raw in stream if not _blank(raw))
            stream.seek(0)
    except OSError as exc:
        print(f"teleo: cannot read {args.file}: {exc.strerror or exc}; give the path of a JSONL file, or - for stdin",
              file=sys.stderr)
        return 2
    run = _Ingest(args, total)
    previous = _interrupt_on_sigterm()
    try:
        with stream:
            for number, raw in enumerate(stream, 1):
                raw = raw.removeprefix(b"\xef\xbb\xbf") if number == 1 else raw  # a UTF-8 byte order mark
                if not _blank(raw):
                    run.add(number, raw)
            run.flush()
    except KeyboardInterrupt:
        run.progress.end()
        print(f"teleo: interrupted after {run.acknowledged()}; later lines may not be stored. Run the command "
              "again to finish: memories already stored come back as duplicates.", file=sys.stderr)
        print(run.summary())
        return 130
    except ClientError as exc:
        run.progress.end()
        print(f"teleo: {exc} (stopped after {run.acknowledged()})", file=sys.stderr)
        print(run.summary())
        return 1
    finally:
        run.client.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    run.progress.end()
    print(run.summary())
    return 1 if run.failed else 0


def _space_key(name: str) -> tuple[int, str]:
    """Spaces in their numeric order: E1_semantic before E6_lexical before E13_splade."""
    m = re.match(r"E(\d+)_", name)
    return (int(m.group(1)) if m else 1 << 30, name)


def _short(space: str) -> str:
    """A space's number alone: E13 for E13_splade."""
    return space.split("_", 1)[0]


def _found_by(result) -> str:
    """The spaces that found a result, by their short names, the one that gave most to its score
    first and starred (E1*+E6+E13); "E9 only" when one space's own list alone found it."""
    if result.unique_contribution:
        return f"{_short(result.unique_contribution)} only"
    names = [_short(n) for n in result.found_by]
    primary = _short(result.primary_space) if result.primary_space else ""
    if primary in names:
        names.remove(primary)
        names.insert(0, primary + "*")
    return "+".join(names)[:18]


def _breakdown_lines(b) -> list[str]:
    """The per-result score breakdown as two lines: the components, then each space's score and rank."""
    parts = [f"content {b.content:.3f}", f"purpose {b.purpose_alignment:.3f}", f"goal {b.goal_alignment:.3f}",
             f"late {b.late_interaction:.3f}", f"temporal {b.temporal:.3f}"]
    spaces = [f"{name} {b.spaces[name]:.3f}" + (f" #{b.space_ranks[name]}" if name in b.space_ranks else "")
              for name in sorted(b.spaces, key=_space_key)]
    return ["  ".join(parts), "spaces " + ("  ".join(spaces) or "-")]


def _conflict_lines(conflicts, historical: bool) -> list[str]:
    """The summary's conflict pairs as lines a person reads: which memory replaced which (hidden
    unless ``--historical``), how a contradiction was resolved, which newer note was read as an
    update of an older one."""
    out = []
    for c in conflicts:
        if c.edge_type == "supersedes":
            out.append(f"superseded: {c.id_a} by {c.id_b}" + ("" if historical else " (hidden; --historical shows it)"))
        elif c.edge_type == "contradicts":
            kept = f"kept {c.winner}" if c.winner else "both kept"
            out.append(f"contradicts: {c.id_a} / {c.id_b}: {c.resolution}, {kept}")
        else:  # "implied": no link; the newer note is ranked first, nothing is hidden
            out.append(f"{c.edge_type} update: {c.id_b} (newer) ranked above {c.id_a}")
    return out


def cmd_query(args: argparse.Namespace) -> int:
    """Results as a table (with ``--breakdown``, each result's scores under it), or every event as JSON lines."""
    from teleo_server.client import Result, Summary

    with client_for(args) as client:
        overrides = {k: v for k, v in (("search_matrix", args.matrix), ("query_type", args.query_type)) if v}
        events = client.retrieve(args.text, top_k=args.top_k, profile=args.profile, filters=_where(args),
                                 explain=True, breakdown=args.breakdown, target_goals=args.goal or (),
                                 johari=args.johari or (), overrides=overrides or None,
                                 include_historical=args.historical, as_of_event=args.as_of_event,
                                 as_of_ingestion=args.as_of_ingestion,
                                 batched=not args.json)  # the table needs the results and the summary only
        if args.json:
            for ev in events:
                _print_json(convert.event_json(ev))
            return 0
        results, summary = [], None
        for ev in events:
            if isinstance(ev, Result):
                results.append(ev)
            elif isinstance(ev, Summary):
                summary = ev
    width, indent = 50, " " * 13
    print(f"{'#':>3}  {'SCORE':>6}  {'REL':>5}  {'ID':<32}  {'FOUND BY':<18}  CONTENT")
    for r in results:
        content = _clip(r.memory.content, width)
        print(f"{r.rank:>3}  {r.score:6.3f}  {r.relevance:5.3f}  {r.memory.id:<32}  {_found_by(r):<18}  {content}")
        if r.explanation:
            print(f"{indent}{r.explanation}")
        if r.breakdown is not None:
            for line in _breakdown_lines(r.breakdown):
                print(f"{indent}{line}")
    if summary is not None:
        timing = ", ".join(f"{s.stage} {s.elapsed_ms:.1f}ms ({s.candidates_out})" for s in summary.stages if not s.skipped)
        flag = f"  DEGRADED: {summary.degraded_reason}" if summary.degraded else ""
        print(f"\n{summary.returned} results in {summary.total_ms:.1f} ms [{summary.profile}] {timing}{flag}")
        if summary.query_types:
            weights = ", ".join(f"{n} {w:g}" for n, w in sorted(summary.space_weights.items()))
            print(f"query: {'+'.join(summary.query_types)}; weights: {weights}")
        if summary.found_by_space:  # perspective coverage: results each space's own list found
            found = ", ".join(f"{_short(n)} {c}" for n, c in sorted(summary.found_by_space.items(), key=lambda x: (-x[1], x[0])))
            only = ", ".join(f"{_short(n)} {c}" for n, c in sorted(summary.unique_by_space.items()) if c)
            print(f"found by: {found}" + (f"; by one space alone: {only}" if only else ""))
        if summary.route:
            route = f"route: {summary.route}" + (f" ({summary.skip_reason})" if summary.skip_reason else "")
            print(route + (f"; retries: {summary.retry_count}" if summary.retry_count else ""))
        for line in _conflict_lines(summary.conflicts, args.historical):
            print(line)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        for m in client.get(args.ids, purpose=args.purpose):
            _print_json(convert.memory_json(m))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        print(f"deleted {client.delete(args.ids)}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """One memory per line (JSON), oldest first; every page with --all, else the first."""
    cursor = ""
    with client_for(args) as client:
        while True:
            page = client.list(_where(args), page_size=args.page_size, cursor=cursor)
            for m in page.memories:
                _print_json(convert.memory_json(m))
            cursor = page.next_cursor
            if not cursor or not args.all:
                break
    if cursor:
        print("more memories follow; pass --all to read every page", file=sys.stderr)
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    """Change the given fields of one memory; prints it as stored (JSON)."""
    fields: dict = {}
    if args.content is not None:
        fields["content"] = args.content
    if args.meta is not None:
        fields["metadata"] = _meta_pairs(args.meta)
    if args.importance is not None:
        fields["importance"] = args.importance
    if not fields and not args.supersedes:
        raise SystemExit("teleo: nothing to change: give --content, --meta, --importance or --supersedes")
    with client_for(args) as client:
        # one Update: the fields, and the supersedes links added to the ones the memory has then
        out = client.update(args.id, keep_previous=args.keep_previous and bool(fields),
                            add_links=convert.with_links((), args.supersedes), **fields)
        _print_json(convert.update_json(out))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """One exported memory per line (JSON) on stdout, oldest first."""
    n = 0
    with client_for(args) as client:
        for item in client.export(_where(args), with_embeddings=args.with_embeddings):
            _print_json(convert.exported_json(item))
            n += 1
    print(f"exported {n}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Store the memories of an export file (new ids; links among them follow)."""
    items, numbers = [], []
    try:
        source = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    except OSError as exc:
        raise SystemExit(f"teleo: cannot read {args.file}: {exc.strerror}") from None
    with source as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise SystemExit(f"teleo: {args.file} line {number}: not UTF-8 text; an export file is "
                                 "written by `teleo export`") from None
            if line.strip():
                try:
                    items.append(convert.exported_from_json(line))
                except ValueError as exc:
                    raise SystemExit(f"teleo: {args.file} line {number}: {exc}") from None
                numbers.append(number)
    with client_for(args) as client:
        resp = client.import_(items)
    for item in resp.items:
        if item.error:
            where = numbers[item.index] if 0 <= item.index < len(numbers) else "?"
            print(f"teleo: {args.file} line {where}: {item.error_code}: {item.error}", file=sys.stderr)
    print(f"stored {resp.stored}, duplicates {resp.duplicates}, failed {resp.failed}, "
          f"vectors reused {resp.vectors_reused}")
    return 1 if resp.failed else 0


def cmd_delete_where(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        resp = client.delete_where(_where(args), dry_run=args.dry_run)
    print(f"matched {resp.matched}, deleted {resp.deleted}" + (" (dry run)" if args.dry_run else ""))
    return 0


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows) for i in range(len(header))]
    return ["  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)).rstrip()
            for row in cells]


def cmd_stats(args: argparse.Namespace) -> int:
    """Corpus and server facts as a table, or as JSON (``--json``) with integers as numbers."""
    with client_for(args) as client:
        resp = client.stats(args.namespace or [])
    if args.json:
        print(json.dumps(convert.message_json(convert.stats_message(resp)), indent=2, ensure_ascii=False))
        return 0
    ready = "ready" if resp.embedder_ready else "NOT READY: stores are refused, retrieval is lexical only"
    for label, value in [("server", resp.server_version), ("model", resp.model_version), ("backend", resp.backend),
                         ("embedder", f"{resp.embedder}, {ready}"), ("goals", resp.goals),
                         ("memories", resp.memories)]:
        print(f"{label:<10}{value}")
    print()
    namespaces = [[n.namespace, n.memories, n.chunks] for n in resp.namespaces]
    heads = [[h.name, h.kind, h.dimension, h.dtype] for h in resp.heads]
    print("\n".join(_table(["NAMESPACE", "MEMORIES", "CHUNKS"], namespaces)))
    print()
    print("\n".join(_table(["HEAD", "KIND", "DIMENSION", "DTYPE"], heads)))
    return 0


def cmd_entry_points(args: argparse.Namespace) -> int:
    """Each space's best match for a query, most similar first."""
    with client_for(args) as client:
        found = client.discover_entry_points(args.text, filters=_where(args), min_similarity=args.min_similarity)
    if args.json:
        for e in found:
            _print_json({"space": e.space, "memory_id": e.memory_id, "similarity": e.similarity, "score": e.score})
        return 0
    rows = [[e.space, f"{e.similarity:.3f}", f"{e.score:.4g}", e.memory_id] for e in found]
    print("\n".join(_table(["SPACE", "SIMILARITY", "SCORE", "BEST MATCH"], rows)))
    return 0


def cmd_goals(args: argparse.Namespace) -> int:
    """The emergent goals you may read, as JSON lines with their history."""
    with client_for(args) as client:
        goals = client.list_goals()
    for g in goals:
        _print_json({"id": g.id, "label": g.label, "size": g.size, "drift": g.drift,
                     "history": [{"time": h.time.isoformat() if h.time else None, "label": h.label, "size": h.size,
                                  "drift": h.drift} for h in g.history]})
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """How similar two memories are in each space, and those similarities aggregated."""
    with client_for(args) as client:
        resp = client.compare(args.id_a, args.id_b, aggregation=args.aggregation,
                              space_weights=dict(args.space_weight or []), search_matrix=args.matrix or "")
    if args.json:
        _print_json(convert.message_json(convert.comparison_message(resp)))
        return 0
    rows = [[name, f"{resp.spaces[name]:.3f}"] for name in sorted(resp.spaces, key=_space_key)]
    print("\n".join(_table(["SPACE", "SIMILARITY"], rows)))
    print(f"\naggregate ({resp.aggregation.replace('_', '-')}): {resp.aggregate:.3f}")
    if resp.purpose_similarity is not None:
        print(f"purpose vectors: {resp.purpose_similarity:.3f}")
    return 0


def cmd_feedback(args: argparse.Namespace) -> int:
    """Record that a memory was used, helped or misled; prints its counters afterwards."""
    if not (args.used or args.helpful is not None):
        raise SystemExit("teleo: nothing to record: give --used, --helpful or --misled")
    with client_for(args) as client:
        m = client.feedback(args.id, used=args.used, helpful=args.helpful, request_id=args.request_id or "")
    if args.json:
        _print_json(convert.memory_json(m))
        return 0
    print(f"{m.id}: retrieved {m.retrieved_count}, used {m.used_count}, helpful {m.helpful_count}, "
          f"misled {m.misled_count}")
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    """Exit 0 only when the server (or the named component) is SERVING: usable as a probe."""
    with client_for(args) as client:
        try:
            status = client.health(args.component, timeout=args.timeout)
        except ClientError as exc:
            if exc.code == "NOT_FOUND":
                valid = ", ".join(repr(c) if not c else c for c in HEALTH_COMPONENTS)
                print(f"teleo: no component {args.component!r}; use one of {valid} ('' is the whole server)",
                      file=sys.stderr)
            else:
                print(f"{args.component or 'server'}: {exc}", file=sys.stderr)
            return 2
    print(f"{args.component or 'server'}: {status}")
    return 0 if status == "SERVING" else 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``store``, ``ingest``, ``query``, ``get``, ``delete``, ``update``, ``list``, ``export``,
    ``import``, ``delete-where``, ``compare``, ``feedback``, ``stats`` and ``health``."""

    def client(name: str, help: str, fn) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help)
        connection_options(c)
        c.set_defaults(fn=fn)
        return c

    c = client("store", "store one memory", cmd_store)
    c.add_argument("content", help="text, or - for stdin")
    c.add_argument("--namespace")
    c.add_argument("--type", choices=MEMORY_TYPES)
    c.add_argument("--meta", action="append", type=_meta_item, metavar="KEY=VALUE", help="metadata (repeatable)")
    c = client("ingest", "bulk-store a JSONL file of MemoryInput objects", cmd_ingest)
    c.add_argument("file", help="JSONL path or -; each line {\"content\": ..., ...}")
    c.add_argument("--namespace")
    c.add_argument("--batch-size", type=int, default=256)
    c.set_defaults(timeout=600.0)
    c = client("query", "retrieve memories", cmd_query)
    c.add_argument("text")
    c.add_argument("-k", "--top-k", type=int, default=0, help="results (default: the profile's, 10; openclaw 6)")
    c.add_argument("--profile", default="teleological")
    _filter_options(c)
    c.add_argument("--goal", action="append", metavar="GOAL",
                   help="align with this goal (an id or label; repeatable; default: every emergent goal)")
    c.add_argument("--johari", action="append", choices=("open", "blind", "hidden", "unknown"),
                   help="keep only this Johari quadrant (repeatable)")
    c.add_argument("--matrix", metavar="NAME",
                   help="a search matrix's space weights: identity, semantic_focused, temporal_focused, causal_focused, "
                        "code_focused, hybrid_lexical")
    c.add_argument("--query-type", metavar="KIND",
                   help="the query analyzer's kind instead of the one it reads (general, causal, code, entity, intent, "
                        "keyword, graph; none turns it off)")
    c.add_argument("--historical", action="store_true",
                   help="keep memories that were superseded or lost a contradiction (hidden otherwise)")
    c.add_argument("--as-of-event", type=_moment, metavar="WHEN",
                   help="what was true at WHEN: memories whose event time is at or before it, and the latest "
                        "of each supersession chain among them (ISO 8601)")
    c.add_argument("--as-of-ingestion", type=_moment, metavar="WHEN",
                   help="what had been stored by WHEN (ISO 8601)")
    c.add_argument("--breakdown", action="store_true", help="show each result's component and per-space scores")
    c.add_argument("--json", action="store_true",
                   help="print every stream event (stages, results, summary) as a JSON line")
    c = client("get", "fetch memories by id", cmd_get)
    c.add_argument("ids", nargs="+")
    c.add_argument("--purpose", action="store_true",
                   help="also the goal each memory serves and its alignment to it in every space")
    c = client("delete", "delete memories by id", cmd_delete)
    c.add_argument("ids", nargs="+")
    c = client("update", "change fields of one memory (a new content is re-embedded)", cmd_update)
    c.add_argument("id")
    c.add_argument("--content", help="the new text")
    c.add_argument("--meta", action="append", type=_meta_item, metavar="KEY=VALUE",
                   help="replaces the metadata (repeatable)")
    c.add_argument("--importance", type=float)
    c.add_argument("--keep-previous", action="store_true", help="keep the old version; the new one supersedes it")
    c.add_argument("--supersedes", action="append", metavar="ID", default=[],
                   help="an earlier memory this one replaces, added to its links (repeatable; `store` names "
                        "candidates on stderr)")
    c = client("list", "list memories you may read, oldest first (JSON lines)", cmd_list)
    _filter_options(c)
    c.add_argument("--page-size", type=int, default=100)
    c.add_argument("--all", action="store_true", help="read every page")
    c = client("export", "write the memories you may read as JSON lines (a namespace's backup or move)", cmd_export)
    _filter_options(c)
    c.add_argument("--with-embeddings", action="store_true", help="include the vectors (no re-embedding on import)")
    c.set_defaults(timeout=600.0)
    c = client("import", "store the memories of an export file (new ids)", cmd_import)
    c.add_argument("file", help="file written by `teleo export`, or -")
    c.set_defaults(timeout=600.0)
    c = client("delete-where", "delete every memory of the named namespaces matching the filters", cmd_delete_where)
    _filter_options(c, namespace_required=True)
    c.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    c = client("entry-points", "each space's best match for a query, most similar first", cmd_entry_points)
    c.add_argument("text")
    c.add_argument("--min-similarity", type=_unit, default=0.0, metavar="X",
                   help="leave out spaces whose best match is less similar (0..1)")
    _filter_options(c)
    c.add_argument("--json", action="store_true")
    client("goals", "the emergent goals of the memories you may read, with their history (JSON lines)", cmd_goals)
    c = client("compare", "similarity of two memories in each space", cmd_compare)
    c.add_argument("id_a", metavar="ID_A")
    c.add_argument("id_b", metavar="ID_B")
    c.add_argument("--aggregation", choices=AGGREGATIONS, default="weighted-average",
                   help="how the per-space similarities are combined")
    c.add_argument("--space-weight", action="append", type=_space_weight, metavar="SPACE=WEIGHT",
                   help="weight of a space in the weighted average, 0..10 (repeatable)")
    c.add_argument("--matrix", metavar="NAME", help="a search matrix's weights (the --space-weight ones on top)")
    c.add_argument("--json", action="store_true")
    c = client("feedback", "record that a retrieved memory was used, helpful or misleading", cmd_feedback)
    c.add_argument("id")
    c.add_argument("--used", action="store_true", help="the agent used it")
    verdict = c.add_mutually_exclusive_group()
    verdict.add_argument("--helpful", dest="helpful", action="store_const", const=True, help="it helped")
    verdict.add_argument("--misled", dest="helpful", action="store_const", const=False, help="it misled")
    c.add_argument("--request-id", help="the request_id of the query it came from")
    c.add_argument("--json", action="store_true", help="print the memory with its counters as JSON")
    c = client("stats", "corpus statistics", cmd_stats)
    c.add_argument("--namespace", action="append", help="only this namespace (repeatable)")
    c.add_argument("--json", action="store_true", help="print the response as JSON (integers as numbers)")
    c = client("health", "exit 0 if SERVING (probe)", cmd_health)
    c.add_argument("component", nargs="?", default="",
                   help=f"one of {', '.join(repr(x) if not x else x for x in HEALTH_COMPONENTS)} ('' = the server)")
    c.set_defaults(timeout=5.0)


__all__ = [
    "AGGREGATIONS",
    "DEFAULT_ADDRESS",
    "HEALTH_COMPONENTS",
    "MEMORY_TYPES",
    "add_commands",
    "cmd_compare",
    "cmd_delete",
    "cmd_delete_where",
    "cmd_entry_points",
    "cmd_export",
    "cmd_feedback",
    "cmd_get",
    "cmd_goals",
    "cmd_health",
    "cmd_import",
    "cmd_ingest",
    "cmd_list",
    "cmd_query",
    "cmd_stats",
    "cmd_store",
    "cmd_update",
]
