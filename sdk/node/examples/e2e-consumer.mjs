// The end-to-end consumer (tests/e2e): serves gRPC and/or signed HTTP webhooks with one handler,
// answers by the record's key and writes one JSON line per delivery to --record.
//
//   node examples/e2e-consumer.mjs --grpc 127.0.0.1:50051 --http 127.0.0.1:8080 \
//     --secret whsec_... --record out.jsonl
//
//   key "dead"  -> dead("dead on purpose")
//   key "retry" -> retry on attempt 1, ack from attempt 2
//   any other   -> ack
//
// A line: {"transport", "call", "id", "key", "attempt", "lane", "value_hex", "verdict"} (the
// protocol every SDK's e2e consumer shares, docs/sdks.md; "call" is how the delivery arrived). On SIGTERM it stops gracefully, prints what each server carried
// ("stats grpc={...} http={...}") and exits 0.
import { appendFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { ConsumerServer, WebhookServer, ack, dead, retry } from "siding-consumer";

const { values: args } = parseArgs({
  options: { grpc: { type: "string" }, http: { type: "string" }, secret: { type: "string" }, record: { type: "string" } },
});
if (args.record === undefined || (args.grpc === undefined && args.http === undefined)) {
  console.error("usage: e2e-consumer.mjs [--grpc HOST:PORT] [--http HOST:PORT] [--secret S] --record FILE");
  process.exit(2);
}

function answer(d) {
  const key = d.key?.toString("utf8");
  if (key === "dead") return dead("dead on purpose");
  if (key === "retry" && d.attempt === 1) return retry({ reason: "retry once" });
  return ack();
}

const handler = (transport) => (d, { call }) => {
  const reply = answer(d);
  const line = {
    transport,
    call,
    id: d.id,
    key: d.key?.toString("utf8") ?? "",
    attempt: d.attempt,
    lane: d.lane,
    value_hex: d.value?.toString("hex") ?? "",
    verdict: reply.verdict,
  };
  appendFileSync(args.record, `${JSON.stringify(line)}\n`);
  return reply;
};

const servers = {};
if (args.grpc !== undefined) {
  servers.grpc = await new ConsumerServer(handler("grpc"), { listen: args.grpc, graceSeconds: 5 }).start();
}
if (args.http !== undefined) {
  const secret = args.secret ?? null;
  servers.http = await new WebhookServer(handler("http"), { listen: args.http, secret, graceSeconds: 5 }).start();
}
console.log(`ready ${Object.keys(servers).join(" ")}`);

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.once(signal, async () => {
    await Promise.all(Object.values(servers).map((s) => s.stop()));
    const stats = Object.entries(servers).map(([name, s]) => `${name}=${JSON.stringify(s.stats())}`);
    console.log(`stats ${stats.join(" ")}`);
  });
}
