// The consumer tests/e2e runs against a real siding: gRPC and HTTP webhooks from one handler.
//
//   GRPC_LISTEN=127.0.0.1:0 HTTP_LISTEN=127.0.0.1:0 WEBHOOK_SECRET=whsec_... RECORD=out.jsonl \
//     node examples/e2e-consumer.mjs
//
// By key: "retry" is retried once (then acked from retry lane 1), "dead" is dead-lettered, any
// other key is acked. Every delivery is appended to RECORD as one JSON line. Prints
// "ready grpc=HOST:PORT http=URL" once serving; on SIGTERM it stops gracefully and prints what
// each transport carried ("stats grpc=... http=...").
import { appendFileSync } from "node:fs";
import { ConsumerServer, WebhookServer, ack, dead, retry } from "siding-consumer";

const record = process.env.RECORD ?? "/dev/null";

function handle(d) {
  const key = d.key === null ? null : d.key.toString("utf8");
  appendFileSync(
    record,
    `${JSON.stringify({
      id: d.id,
      topic: d.topic,
      offset: Number(d.offset),
      key,
      value_base64: d.value === null ? null : d.value.toString("base64"),
      attempt: d.attempt,
      lane: d.lane,
    })}\n`,
  );
  if (key === "dead") return dead("dead on purpose");
  if (key === "retry" && d.attempt === 1) return retry({ reason: "once more" });
  return ack();
}

const grpc = await new ConsumerServer(handle, { listen: process.env.GRPC_LISTEN ?? "127.0.0.1:0" }).start();
const http = await new WebhookServer(handle, {
  listen: process.env.HTTP_LISTEN ?? "127.0.0.1:0",
  secret: process.env.WEBHOOK_SECRET ?? null,
}).start();
console.log(`ready grpc=${grpc.target} http=${http.url}`);

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.once(signal, async () => {
    await Promise.all([grpc.stop(), http.stop()]);
    console.log(`stats grpc=${JSON.stringify(grpc.stats())} http=${JSON.stringify(http.stats())}`);
  });
}
