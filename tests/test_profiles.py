"""Stages as a registry and profiles as data: a profile defined in configuration alone, a stage
added in one module, and clear errors for names that do not exist."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server.errors import InvalidArgument
from teleo_server.pipeline import PipelineSettings, make_retriever
from bench.harness import memories as syn
from teleo_server.pipeline.stages import stage, stages, unregister
from teleo_server.pipeline.types import Hit, Overrides, Query, StageReport
from tests._server import REPO

TOML = """
[pipeline]
default_profile = "lexical_fast"

[pipeline.profiles.lexical_fast]
stages = ["sparse_recall", "fusion", "finalize"]
settings = { fusion = "rrf", hdc_candidates = 0 }
description = "BM25 and SPLADE only"
"""


def _code(fn):
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code(), err.value.details()


def test_a_profile_defined_in_toml_runs_over_grpc_and_is_the_default(server_process, tmp_path):
    config = tmp_path / "teleo.toml"
    config.write_text(TOML)
    srv = server_process(env={"TELEO_CONFIG": str(config)})
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
    auth = [("authorization", f"Bearer {srv.token}")]
    for text in ("Saffron is the dried stigma of a crocus.", "Vanilla comes from an orchid's seed pod."):
        stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text)), metadata=auth, timeout=60)
    for profile in ("lexical_fast", ""):  # named, and as the configured default
        events = list(stub.Retrieve(pb.RetrieveRequest(text="saffron crocus", profile=profile, top_k=2), metadata=auth, timeout=60))
        assert [e.stage.stage for e in events if e.WhichOneof("event") == "stage"] == ["sparse_recall", "fusion", "finalize"]
        assert events[-1].summary.profile == "lexical_fast"
        assert "Saffron" in next(e.result for e in events if e.WhichOneof("event") == "result").memory.input.content
    # the built-in profiles are still there beside it
    events = list(stub.Retrieve(pb.RetrieveRequest(text="saffron", profile="teleological"), metadata=auth, timeout=60))
    assert "late_interaction" in [e.stage.stage for e in events if e.WhichOneof("event") == "stage"]
    code, details = _code(lambda: list(stub.Retrieve(pb.RetrieveRequest(text="x", profile="nope"), metadata=auth, timeout=30)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("profile: unknown profile 'nope'")
    assert "lexical_fast" in details


@pytest.mark.parametrize("toml, setting", [
    ('[pipeline.profiles.bad]\nstages = ["sparse_recall", "teleport", "finalize"]\n', "pipeline.profiles.bad.stages"),
    ('[pipeline.profiles.bad]\nstages = ["finalize"]\nsettings = { warp_factor = 9 }\n', "pipeline.profiles.bad.settings"),
    ('[pipeline]\ndefault_profile = "nope"\n', "pipeline.default_profile"),
    ('[pipeline.spaces.E9_hdc]\ndim_bits = 40\n', "pipeline.spaces.E9_hdc.dim_bits (env TELEO_PIPELINE__SPACES__E9_HDC__DIM_BITS)"),
    ('[pipeline]\nbm25_k1 = -1\n', "pipeline.spaces.E6_lexical.k1 (env TELEO_PIPELINE__SPACES__E6_LEXICAL__K1)"),
    ('[pipeline.spaces.E9_hdc]\nwarp = 1\n', "pipeline.spaces.E9_hdc.warp"),
    ('[pipeline.spaces.E77_nowhere]\nx = 1\n', "pipeline.spaces.E77_nowhere: no such space"),
    ('[pipeline.roles]\ndense = "E99_nothing"\n', "pipeline.roles.dense"),
], ids=["unknown-stage", "unknown-setting", "unknown-default", "bad-space-value", "bad-flat-value", "unknown-space-setting",
        "unknown-space", "unknown-role-space"])
def test_a_bad_profile_configuration_stops_start_up_with_a_message(tmp_path, toml, setting):
    """Profiles, roles and each space's own settings are checked at start-up, naming the setting."""
    config = tmp_path / "teleo.toml"
    config.write_text(toml)
    env = {**os.environ, "TELEO_CONFIG": str(config), "TELEO_DEV_TOKEN_FILE": str(tmp_path / "token")}
    proc = subprocess.run([sys.executable, "-m", "teleo_server", "--port", "0", "--data-dir", str(tmp_path / "data")],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert setting in proc.stderr


@pytest.mark.parametrize("names, field", [(["teleport"], "overrides.disable_stages[0]"),
                                          (["fusion", "finalize"], "overrides.disable_stages[1]")])
def test_disable_stages_refuses_names_it_cannot_honour(stub, auth, names, field):
    req = pb.RetrieveRequest(text="anything", overrides=pb.StageOverrides(disable_stages=names))
    code, details = _code(lambda: list(stub.Retrieve(req, metadata=auth, timeout=30)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field)


def test_a_stage_registered_in_one_module_runs_in_a_configured_profile():
    @stage("shout")
    def shout(state):  # a stage with a column of its own, kept through later stages' take()
        c = state.cands
        c.columns["loud"] = np.array([float(state.ctx.catalog.memory(r).content.isupper()) for r in c.rows])
        c.score = (c.score + c.columns["loud"]).astype(np.float32)
        return f"loud={int(c.columns['loud'].sum())}"

    try:
        assert "shout" in stages()
        settings = PipelineSettings(profiles={"loud": {"stages": ["sparse_recall", "fusion", "shout", "finalize"]}})
        r = make_retriever(settings, "numpy")
        for i, text in enumerate(["quiet garden note", "LOUD GARDEN NOTE", "another garden note"]):
            r.add(syn.memory(f"m{i}", text), syn.embedding())
        events = list(r.retrieve(Query(text="garden note", embedding=None, principal=syn.admin(), top_k=3, profile="loud")))
        reports = {e.stage: e for e in events if isinstance(e, StageReport)}
        assert reports["shout"].detail == "loud=1"
        assert [e.memory.id for e in events if isinstance(e, Hit)][0] == "m1"
        # a request may switch the new stage off like any other
        events = list(r.retrieve(Query(text="garden note", embedding=None, principal=syn.admin(), top_k=3, profile="loud",
                                       overrides=Overrides(disable_stages=("shout",)))))
        assert next(e for e in events if isinstance(e, StageReport) and e.stage == "shout").skipped
    finally:
        unregister("shout")


def test_a_profile_naming_an_unregistered_stage_is_refused_when_the_retriever_is_built():
    with pytest.raises(InvalidArgument, match=r"pipeline.profiles.odd.stages: unknown stage 'nowhere'"):
        make_retriever(PipelineSettings(profiles={"odd": {"stages": ["nowhere", "finalize"]}}), "numpy")


def test_roles_point_stages_at_spaces():
    """Pointing the lexical role at no space takes BM25 out of sparse recall (only SPLADE is left)."""
    words = {"m0": "orchid vanilla pod", "m1": "crocus saffron stigma"}
    seen = {}
    for roles in ({}, {"lexical": "E13_splade"}):
        r = make_retriever(PipelineSettings(roles=roles), "numpy")
        for mid, text in words.items():
            r.add(syn.memory(mid, text), syn.embedding(syn.chunk(np.ones(8), {7: 1.0} if mid == "m0" else {9: 1.0})))
        q = Query(text="saffron", embedding=syn.embedding(syn.chunk(np.ones(8), {7: 1.0})), principal=syn.admin(), top_k=2,
                  profile="hybrid", include_breakdown=True)
        seen[bool(roles)] = [(e.memory.id, sorted(e.found_by)) for e in r.retrieve(q) if isinstance(e, Hit)]
    assert any("E6_lexical" in f for _, f in seen[False])
    assert not any("E6_lexical" in f for _, f in seen[True])


def test_each_space_reads_its_own_settings_and_the_flat_keys_still_work():
    spaced = make_retriever({"spaces": {"E9_hdc": {"dim_bits": 12}, "E6_lexical": {"k1": 1.5}, "E2_recency": {"scale_days": 7}}})
    flat = make_retriever({"hdc_dim_bits": 12, "bm25_k1": 1.5, "recency_scale_days": 7, "merge_fraction": 0.3})
    for r in (spaced, flat):
        assert r.spaces["E9_hdc"].dim == 2**12 and r.spaces["E6_lexical"].config.k1 == 1.5
        assert r.spaces["E2_recency"].config.scale_days == 7
    assert {flat.spaces[n].config.merge_fraction for n in ("E6_lexical", "E9_hdc", "E13_splade")} == {0.3}
    # an update applied to existing settings goes through the same placement (never silently kept aside)
    assert make_retriever(PipelineSettings().updated({"late_interaction_dim": 64})).spaces["E12_late"].store.dim_out == 64
    with pytest.raises(InvalidArgument, match="pipeline.profiles.p.settings"):
        make_retriever({"profiles": {"p": {"stages": ["finalize"], "settings": {"spaces": {"E9_hdc": {"ngram": 4}}}}}})
