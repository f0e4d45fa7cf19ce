// A consumer instance written in another language for tests/e2e/test_registration.py: the Node
// SDK's webhook server (sdk/node, built by `make setup`), which joins a siding route with the
// `join` option, renews its lease every lease/3 and leaves on SIGTERM (docs/registration.md).
//
//   node registered_consumer.mjs CONTROL_URL ROUTE TOKEN RECORD_FILE
//
// Each delivery is acked and recorded as "id,attempt,receive_time_s" in RECORD_FILE; every
// registration event but a join or a leave is printed as "registry <kind> <status>".
import { appendFileSync } from "node:fs";
import { WebhookServer, ack } from "../../../sdk/node/dist/index.js";

const [controlUrl, route, token, recordFile] = process.argv.slice(2);
const quiet = { info: () => {}, warn: () => {} };

const server = new WebhookServer(
  (delivery) => {
    appendFileSync(recordFile, `${delivery.id},${delivery.attempt},${(Date.now() / 1000).toFixed(6)}\n`);
    return ack();
  },
  {
    listen: "127.0.0.1:0",
    secret: null,
    logger: quiet,
    join: {
      controlUrl,
      route,
      token,
      capacity: 100,
      onEvent: (e) => {
        if (e.kind !== "joined" && e.kind !== "left") console.log(`registry ${e.kind} ${e.status}`);
      },
    },
  },
);

await server.start();
console.log(`ready port=${server.port} consumer=${server.registration?.consumer ?? null}`);

process.on("SIGTERM", async () => {
  await server.stop(); // leaves the route first
  process.exit(0);
});
