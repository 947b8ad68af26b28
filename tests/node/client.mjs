// Teleo client in Node.js, built from the .proto files alone (no generated code):
// checks health, stores a memory and reads a streamed Retrieve (the default profile, the same batched, then hipporag
// with its route and each result's provenance). Prints one JSON object.
//
// Environment: TELEO_ADDRESS (host:port), TELEO_TOKEN, TELEO_PROTOS (the protos/ folder).
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const protos = process.env.TELEO_PROTOS ?? path.join(here, "..", "..", "protos");
const address = process.env.TELEO_ADDRESS ?? "127.0.0.1:50051";
const token = process.env.TELEO_TOKEN ?? "";

const options = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [protos] };
const teleo = grpc.loadPackageDefinition(protoLoader.loadSync("teleo/v1/memory.proto", options)).teleo.v1;

// Health is the standard grpc.health.v1 service; its small proto is declared inline.
const healthProto = `syntax = "proto3"; package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse { enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; } ServingStatus status = 1; }
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }`;
const healthFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "teleo-health-")), "health.proto");
fs.writeFileSync(healthFile, healthProto);
const health = grpc.loadPackageDefinition(protoLoader.loadSync(healthFile, options)).grpc.health.v1;

const creds = grpc.credentials.createInsecure();
const client = new teleo.MemoryService(address, creds);
const healthClient = new health.Health(address, creds);
const meta = new grpc.Metadata();
if (token) meta.add("authorization", `Bearer ${token}`);
const deadline = () => new Date(Date.now() + 30000);

const unary = (c, method, req, md) =>
  new Promise((resolve, reject) =>
    c[method](req, md ?? new grpc.Metadata(), { deadline: deadline() }, (err, res) => (err ? reject(err) : resolve(res))),
  );

const out = {};
try {
  out.health = (await unary(healthClient, "Check", { service: "" })).status;
  const content = process.env.TELEO_CONTENT ?? "The Node.js client stored this memory about deploying the pipeline.";
  const stored = await unary(client, "Store", { memory: { content, namespace: "node", memory_type: "MEMORY_TYPE_EPISODIC" } }, meta);
  out.stored_id = stored.id;
  out.events = [];
  out.results = [];
  await new Promise((resolve, reject) => {
    const call = client.Retrieve({ text: process.env.TELEO_QUERY ?? "deploying the pipeline", top_k: 5, explain: true }, meta, { deadline: deadline() });
    call.on("data", (ev) => {
      out.events.push(ev.event);
      if (ev.event === "result") out.results.push({ rank: ev.result.rank, id: ev.result.memory.id, score: ev.result.score });
      if (ev.event === "summary") out.summary = { returned: ev.summary.returned, stages: ev.summary.stages.length };
    });
    call.on("error", reject);
    call.on("end", resolve);
  });
  // The same question batched: the results in `results` messages, the stages inside the summary.
  out.batched = { events: [], results: [] };
  await new Promise((resolve, reject) => {
    const call = client.Retrieve({ text: process.env.TELEO_QUERY ?? "deploying the pipeline", top_k: 5, explain: true, batched: true }, meta, { deadline: deadline() });
    call.on("data", (ev) => {
      out.batched.events.push(ev.event);
      if (ev.event === "results") for (const r of ev.results.results) out.batched.results.push({ rank: r.rank, id: r.memory.id, score: r.score });
      if (ev.event === "summary") out.batched.summary = { returned: ev.summary.returned, stages: ev.summary.stages.length };
    });
    call.on("error", reject);
    call.on("end", resolve);
  });
  // The hipporag profile: the summary names the router's route, and every result carries its provenance.
  out.hipporag = { results: [] };
  await new Promise((resolve, reject) => {
    const call = client.Retrieve({ text: process.env.TELEO_QUERY ?? "deploying the pipeline", top_k: 5, profile: "hipporag" }, meta, { deadline: deadline() });
    call.on("data", (ev) => {
      if (ev.event === "result") {
        const p = ev.result.provenance; // null when the server sent none
        out.hipporag.results.push({ id: ev.result.memory.id, citation: p?.citation ?? null, strategies: p?.strategies ?? null });
      }
      if (ev.event === "summary") {
        const s = ev.summary;
        Object.assign(out.hipporag, { profile: s.profile, route: s.route, returned: s.returned, conflicts: s.conflicts.length });
      }
    });
    call.on("error", reject);
    call.on("end", resolve);
  });
  // A change note about the same thing: the answer names the memory above as one it probably updates.
  const note = await unary(client, "Store", { memory: { content: "The Node.js client now deploys the pipeline with Argo instead.", namespace: "node" } }, meta);
  out.possible_updates = note.possible_updates.map((h) => ({ id: h.id, content: h.content, similarity: h.similarity }));
  try {
    await unary(client, "Stats", {}, new grpc.Metadata());
    out.unauthenticated = "accepted";
  } catch (err) {
    out.unauthenticated = grpc.status[err.code];
  }
  console.log(JSON.stringify(out));
  process.exit(0);
} catch (err) {
  console.error(`node client failed: ${err.code !== undefined ? grpc.status[err.code] : ""} ${err.details ?? err.message}`);
  process.exit(1);
}
