// A siding-like gRPC client for the tests, built from the repository's own contract.
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

export const REPO_PROTO = fileURLToPath(new URL("../../../proto/siding/v1/consumer.proto", import.meta.url));
const HEALTH_PROTO = fileURLToPath(new URL("../proto/grpc/health/v1/health.proto", import.meta.url));

const definition = protoLoader.loadSync([REPO_PROTO, HEALTH_PROTO], {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const loaded = grpc.loadPackageDefinition(definition);

export function consumerClient(target) {
  return new loaded.siding.v1.Consumer(target, grpc.credentials.createInsecure());
}

export function healthClient(target) {
  return new loaded.grpc.health.v1.Health(target, grpc.credentials.createInsecure());
}

export function delivery(n, extra = {}) {
  return {
    id: `orders/0/${n}`,
    topic: "orders",
    partition: 0,
    offset: String(n),
    value: Buffer.from(`v${n}`),
    headers: [],
    timestampMs: "1700000000000",
    attempt: 1,
    lane: 0,
    ...extra,
  };
}

export function unary(client, message) {
  return new Promise((resolve, reject) => {
    client.Deliver(message, { deadline: Date.now() + 10_000 }, (error, result) => (error ? reject(error) : resolve(result)));
  });
}

/** Open a bidi call and collect what comes back until the server ends it. */
export function duplex(client, method) {
  const call = client[method]({ deadline: Date.now() + 20_000 });
  const received = [];
  const waiters = [];
  const ended = new Promise((resolve, reject) => {
    call.on("data", (message) => {
      received.push(message);
      for (const w of waiters.splice(0)) w();
    });
    call.on("end", () => resolve(received));
    call.on("error", reject);
  });
  const until = async (predicate) => {
    while (!predicate(received)) await new Promise((r) => waiters.push(r));
  };
  return { call, received, ended, until };
}

export function deferred() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

export const quiet = { info() {}, warn() {} };
