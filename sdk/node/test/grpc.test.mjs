// The gRPC server against a real client on loopback: Deliver, DeliverStream, DeliverBatches,
// health checking and the graceful stop.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { ConsumerServer, DeadLetter, ack, backoff, dead, retry } from "../dist/index.js";
import { consumerClient, deferred, delivery, duplex, healthClient, quiet, unary } from "./helpers.mjs";

// Given a handler that decides by the value's text
async function byValue(d) {
  const text = d.value === null ? "<null>" : d.value.toString("latin1");
  if (text.startsWith("dead")) return dead("bad record");
  if (text.startsWith("retry")) return retry({ afterSeconds: 2.5, reason: "busy" });
  if (text.startsWith("later")) return retry();
  if (text.startsWith("backoff")) return backoff({ afterSeconds: 3, reason: "db down" });
  if (text.startsWith("throw")) throw new Error("boom");
  if (text.startsWith("pill")) throw new DeadLetter("poison");
  if (text.startsWith("undefined")) return undefined;
  if (text.startsWith("output")) return ack([{ topic: "out", key: "k", value: new Uint8Array([1, 2]), headers: [{ key: "h", value: Buffer.from("x") }] }]);
  if (text.startsWith("slow")) await new Promise((r) => setTimeout(r, Number(text.slice(4))));
  return ack();
}

describe("Deliver (unary)", () => {
  let server;
  let client;
  before(async () => {
    server = await new ConsumerServer(byValue, { logger: quiet }).start();
    client = consumerClient(server.target);
  });
  after(async () => {
    client.close();
    await server.stop(1);
  });

  const cases = [
    ["ok", { verdict: "VERDICT_ACK", reason: "" }],
    ["dead", { verdict: "VERDICT_DEAD", reason: "bad record" }],
    ["retry", { verdict: "VERDICT_RETRY", reason: "busy", retryAfterSeconds: 2.5 }],
    ["later", { verdict: "VERDICT_RETRY", reason: "" }],
    ["throw", { verdict: "VERDICT_RETRY", reason: "boom" }],
    ["pill", { verdict: "VERDICT_DEAD", reason: "poison" }],
    ["undefined", { verdict: "VERDICT_RETRY", reason: "handler returned undefined, not a Reply" }],
  ];
  for (const [value, expected] of cases) {
    it(`answers ${value} with ${expected.verdict}`, async () => {
      const result = await unary(client, delivery(7, { value: Buffer.from(value) }));
      assert.equal(result.deliveryId, "orders/0/7");
      assert.equal(result.verdict, expected.verdict);
      assert.equal(result.reason, expected.reason);
      assert.equal(result.retryAfterSeconds, expected.retryAfterSeconds);
      assert.equal(result._retryAfterSeconds, expected.retryAfterSeconds === undefined ? undefined : "retryAfterSeconds");
    });
  }

  it("backs off with RESOURCE_EXHAUSTED, which siding takes as slow down, no attempt spent", async () => {
    await assert.rejects(unary(client, delivery(1, { value: Buffer.from("backoff") })), (error) => {
      assert.equal(error.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.equal(error.details, "db down");
      return true;
    });
  });

  it("takes a 6 MiB record (gRPC's own default limit is 4 MiB)", async () => {
    const big = Buffer.alloc(6 * 1024 * 1024, 7);
    let size = 0;
    const probe = await new ConsumerServer((d) => ((size = d.value.length), ack()), { logger: quiet }).start();
    const c = consumerClient(probe.target);
    assert.equal((await unary(c, delivery(1, { value: big }))).verdict, "VERDICT_ACK");
    assert.equal(size, big.length);
    c.close();
    await probe.stop(1);
  });

  it("carries outputs on an ack", async () => {
    const result = await unary(client, delivery(1, { value: Buffer.from("output") }));
    assert.equal(result.verdict, "VERDICT_ACK");
    assert.equal(result.outputs.length, 1);
    const [output] = result.outputs;
    assert.equal(output.topic, "out");
    assert.deepEqual([...output.key], [...Buffer.from("k")]);
    assert.deepEqual([...output.value], [1, 2]);
    assert.deepEqual(output.headers.map((h) => [h.key, h.value.toString()]), [["h", "x"]]);
  });

  it("hands the handler every field, bytes exact, null apart from empty", async () => {
    const seen = [];
    const probe = await new ConsumerServer((d) => (seen.push(d), ack()), { logger: quiet }).start();
    const c = consumerClient(probe.target);
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    await unary(c, {
      ...delivery(9007199254740993n.toString()),
      id: "t/3/9007199254740993",
      partition: 3,
      key: Buffer.alloc(0),
      value: all,
      headers: [
        { key: "a", value: Buffer.from([0, 255]) },
        { key: "a", value: Buffer.from("second") },
      ],
      attempt: 4,
      lane: 2,
    });
    await unary(c, { id: "t/0/1", topic: "t", offset: "1", headers: [] }); // no key, a tombstone
    c.close();
    await probe.stop(1);
    const [full, bare] = seen;
    assert.equal(full.offset, 9007199254740993n);
    assert.equal(full.partition, 3);
    assert.deepEqual(full.key, Buffer.alloc(0));
    assert.ok(full.value.equals(all));
    assert.deepEqual(
      full.headers.map((h) => [h.key, [...h.value]]),
      [
        ["a", [0, 255]],
        ["a", [...Buffer.from("second")]],
      ],
    );
    assert.equal(full.timestampMs, 1700000000000);
    assert.equal(full.attempt, 4);
    assert.equal(full.lane, 2);
    assert.equal(bare.key, null);
    assert.equal(bare.value, null);
  });
});

describe("DeliverStream", () => {
  it("answers each delivery as it finishes, out of order, matched by id", async () => {
    const server = await new ConsumerServer(byValue, { logger: quiet }).start();
    const client = consumerClient(server.target);
    const { call, received, ended, until } = duplex(client, "DeliverStream");
    call.write(delivery(1, { value: Buffer.from("slow300") }));
    call.write(delivery(2, { value: Buffer.from("dead") }));
    call.write(delivery(3, { value: Buffer.from("backoff") }));
    await until((r) => r.length === 2);
    assert.deepEqual(
      received.map((r) => r.deliveryId),
      ["orders/0/2", "orders/0/3"],
    );
    call.end();
    const all = await ended;
    assert.deepEqual(
      all.map((r) => [r.deliveryId, r.verdict, r.reason, r.retryAfterSeconds]),
      [
        ["orders/0/2", "VERDICT_DEAD", "bad record", undefined],
        // A stream cannot back off for one delivery: RETRY with the delay.
        ["orders/0/3", "VERDICT_RETRY", "db down", 3],
        ["orders/0/1", "VERDICT_ACK", "", undefined],
      ],
    );
    assert.deepEqual(server.stats(), { unary: 0, stream: 3, batches: 0, batchDeliveries: 0 });
    client.close();
    await server.stop(1);
  });
});

describe("DeliverBatches", () => {
  it("answers every delivery of a frame once, per item, in frames of any size", async () => {
    const server = await new ConsumerServer(byValue, { logger: quiet }).start();
    const client = consumerClient(server.target);
    const { call, ended } = duplex(client, "DeliverBatches");
    const values = ["ok", "dead", "retry", "slow200", "throw", "ok", "pill"];
    call.write({ deliveries: values.map((v, n) => delivery(n, { value: Buffer.from(v) })) });
    call.write({ deliveries: [delivery(100), delivery(101, { value: Buffer.from("dead") })] });
    call.end();
    const frames = await ended;
    const results = frames.flatMap((f) => f.results);
    const byId = Object.fromEntries(results.map((r) => [r.deliveryId, [r.verdict, r.reason]]));
    assert.equal(results.length, 9, "exactly one result per delivery");
    assert.deepEqual(byId, {
      "orders/0/0": ["VERDICT_ACK", ""],
      "orders/0/1": ["VERDICT_DEAD", "bad record"],
      "orders/0/2": ["VERDICT_RETRY", "busy"],
      "orders/0/3": ["VERDICT_ACK", ""],
      "orders/0/4": ["VERDICT_RETRY", "boom"],
      "orders/0/5": ["VERDICT_ACK", ""],
      "orders/0/6": ["VERDICT_DEAD", "poison"],
      "orders/0/100": ["VERDICT_ACK", ""],
      "orders/0/101": ["VERDICT_DEAD", "bad record"],
    });
    // The slow one came back in a later frame than the quick ones: frames are not the batches.
    assert.ok(frames.length >= 2, `frames: ${frames.length}`);
    assert.ok(frames[0].results.length > 1, "results finished together share a frame");
    assert.equal(frames.at(-1).results.at(-1).deliveryId, "orders/0/3");
    assert.deepEqual(server.stats(), { unary: 0, stream: 0, batches: 2, batchDeliveries: 9 });
    client.close();
    await server.stop(1);
  });
});

describe("the call a delivery came by", () => {
  it("is told to the handler: Deliver, DeliverStream, DeliverBatches", async () => {
    const server = await new ConsumerServer((d, info) => dead(info.call), { logger: quiet }).start();
    const client = consumerClient(server.target);
    const calls = [(await unary(client, delivery(1))).reason];
    const stream = duplex(client, "DeliverStream");
    stream.call.write(delivery(2));
    stream.call.end();
    calls.push(...(await stream.ended).map((r) => r.reason));
    const batches = duplex(client, "DeliverBatches");
    batches.call.write({ deliveries: [delivery(3), delivery(4)] });
    batches.call.end();
    calls.push(...(await batches.ended).flatMap((f) => f.results.map((r) => r.reason)));
    assert.deepEqual(calls, ["Deliver", "DeliverStream", "DeliverBatches", "DeliverBatches"]);
    client.close();
    await server.stop(1);
  });
});

describe("health and stopping", () => {
  it("answers SERVING, tells watchers NOT_SERVING once stop begins; in-flight deliveries finish", async () => {
    const release = deferred();
    const bothStarted = deferred();
    let started = 0;
    const server = await new ConsumerServer(
      async (d) => {
        if (d.value.toString() === "hold") {
          if (++started === 2) bothStarted.resolve();
          await release.promise;
        }
        return ack();
      },
      { logger: quiet },
    ).start();
    const health = healthClient(server.target);
    const check = (service) =>
      new Promise((resolve, reject) => health.Check({ service }, (e, r) => (e ? reject(e) : resolve(r.status))));
    assert.equal(await check(""), "SERVING");
    assert.equal(await check("siding.v1.Consumer"), "SERVING");
    await assert.rejects(check("nope"), (e) => e.code === grpc.status.NOT_FOUND);
    const watch = health.Watch({ service: "siding.v1.Consumer" });
    const statuses = [];
    const watchEnded = new Promise((resolve) => {
      watch.on("data", (r) => statuses.push(r.status));
      watch.on("end", resolve);
      watch.on("error", resolve);
    });

    const client = consumerClient(server.target);
    const stream = duplex(client, "DeliverStream");
    stream.call.write(delivery(1, { value: Buffer.from("hold") }));
    const held = unary(client, delivery(2, { value: Buffer.from("hold") }));
    await bothStarted.promise;
    const stopping = server.stop(10);
    await watchEnded;
    assert.deepEqual(statuses, ["SERVING", "NOT_SERVING"]);
    release.resolve();
    const [results, result] = await Promise.all([stream.ended, held]);
    assert.deepEqual(
      results.map((r) => [r.deliveryId, r.verdict]),
      [["orders/0/1", "VERDICT_ACK"]],
    );
    assert.equal(result.verdict, "VERDICT_ACK");
    await stopping;
    health.close();
    client.close();
  });

  it("cancels what is still running when the grace period is over", async () => {
    const server = await new ConsumerServer(() => new Promise(() => {}), { logger: quiet }).start();
    const client = consumerClient(server.target);
    const call = unary(client, delivery(1));
    await new Promise((r) => setTimeout(r, 100));
    const began = Date.now();
    await server.stop(0.3);
    assert.ok(Date.now() - began < 3000);
    await assert.rejects(call, (e) => e.code !== grpc.status.OK);
    client.close();
  });

  it("refuses a port already taken, naming it", async () => {
    const first = await new ConsumerServer(byValue, { logger: quiet }).start();
    const second = new ConsumerServer(byValue, { listen: first.target, logger: quiet });
    await assert.rejects(second.start(), new RegExp(`cannot listen on ${first.target}`));
    await first.stop(1);
  });
});
