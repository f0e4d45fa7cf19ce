// Pure: webhook requests as deliveries, replies as HTTP answers (docs/webhooks.md, docs/batch.md).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { EnvelopeError, batchAnswer, deliveriesFromBatch, deliveryFromRequest, isBatch, singleAnswer } from "../dist/envelope.js";
import { ack, backoff, dead, retry } from "../dist/index.js";

const SINGLE = [
  "Host", "127.0.0.1:8080",
  "content-type", "application/json",
  "ce-specversion", "1.0",
  "ce-id", "orders/2/42",
  "ce-time", "2026-11-23T10:00:00.000Z",
  "ce-subject", "customer-7",
  "webhook-id", "orders/2/42",
  "siding-attempt", "3",
  "siding-lane", "2",
  "siding-topic", "orders",
  "siding-partition", "2",
  "siding-offset", "42",
  "trace", "abc",
  "Trace", "def",
  "user-agent", "siding",
];

describe("one delivery per request", () => {
  it("reads siding's headers, keeps the Kafka headers in order, the body as the value", () => {
    const d = deliveryFromRequest(SINGLE, Buffer.from([0, 255]));
    assert.equal(d.id, "orders/2/42");
    assert.deepEqual([d.topic, d.partition, d.offset, d.attempt, d.lane], ["orders", 2, 42n, 3, 2]);
    assert.equal(d.timestampMs, Date.UTC(2026, 10, 23, 10));
    assert.deepEqual(d.key, Buffer.from("customer-7"));
    assert.deepEqual(d.value, Buffer.from([0, 255]));
    assert.deepEqual(
      d.headers.map((h) => [h.key, h.value.toString()]),
      [["trace", "abc"], ["Trace", "def"], ["content-type", "application/json"]],
    );
  });

  it("takes the key from siding-key (base64) when it is not printable, null when there is none", () => {
    const binary = deliveryFromRequest([...SINGLE, "siding-key", "AP8="], Buffer.alloc(0));
    assert.deepEqual(binary.key, Buffer.from([0, 255]));
    const none = deliveryFromRequest(SINGLE.filter((_, i) => SINGLE[i - (i % 2)] !== "ce-subject"), Buffer.alloc(0));
    assert.equal(none.key, null);
  });

  it("names the missing or bad header of a request that is not siding's", () => {
    const noTopic = SINGLE.filter((_, i) => SINGLE[i - (i % 2)] !== "siding-topic");
    assert.throws(() => deliveryFromRequest(noTopic, Buffer.alloc(0)), (e) => e instanceof EnvelopeError && /siding-topic/.test(e.message));
    const bad = SINGLE.map((x, i) => (SINGLE[i - 1] === "siding-offset" ? "4x" : x));
    assert.throws(() => deliveryFromRequest(bad, Buffer.alloc(0)), /siding-offset must be an integer/);
  });

  const answers = [
    [ack(), 204, {}, ""],
    [dead("bad currency"), 422, {}, "bad currency"],
    [retry({ reason: "busy", afterSeconds: 5 }), 500, {}, "busy"],
    [backoff({ reason: "db down", afterSeconds: 2.2 }), 429, { "retry-after": "3" }, "db down"],
    [backoff(), 429, {}, "back off"],
    [
      ack([{ topic: "out", key: "k", value: new Uint8Array([0, 255]), headers: [{ key: "h", value: Buffer.from([1]) }] }, { topic: "out", value: null }]),
      200,
      { "content-type": "application/json" },
      '{"outputs":[{"topic":"out","key_base64":"aw==","value_base64":"AP8=","headers":[{"key":"h","value_base64":"AQ=="}]},{"topic":"out"}]}',
    ],
  ];
  for (const [reply, status, extra, body] of answers) {
    it(`answers ${reply.verdict} with ${status}`, () => {
      const a = singleAnswer(reply);
      assert.equal(a.status, status);
      assert.equal(a.body, body);
      for (const [k, v] of Object.entries(extra)) assert.equal(a.headers[k], v);
      if (!("retry-after" in extra)) assert.equal(a.headers["retry-after"], undefined);
    });
  }
});

const EVENT = {
  specversion: "1.0",
  id: "orders/0/42",
  source: "kafka://orders",
  type: "dev.siding.delivery",
  time: "2026-11-23T10:00:00.000Z",
  subject: "customer-7",
  datacontenttype: "application/octet-stream",
  data_base64: "AAEC/w==",
  sidingkey: "Y3VzdG9tZXItNw==",
  sidingattempt: 1,
  sidinglane: 0,
  sidingtopic: "orders",
  sidingpartition: 0,
  sidingoffset: 42,
  sidingheaders: [{ key: "trace", value_base64: "YWJj" }, { key: "trace", value_base64: "AP8=" }],
};

describe("batch envelope", () => {
  it("recognises its content type", () => {
    assert.ok(isBatch("application/cloudevents-batch+json"));
    assert.ok(isBatch("Application/CloudEvents-Batch+JSON; charset=utf-8"));
    assert.ok(!isBatch("application/json"));
    assert.ok(!isBatch(undefined));
  });

  it("reads docs/batch.md's example exactly; a tombstone and a null key stay null", () => {
    const tombstone = { ...EVENT, id: "orders/0/43", sidingoffset: 43 };
    delete tombstone.data_base64;
    delete tombstone.sidingkey;
    const [d, t] = deliveriesFromBatch(Buffer.from(JSON.stringify([EVENT, tombstone])));
    assert.deepEqual([d.id, d.topic, d.partition, d.offset, d.attempt, d.lane], ["orders/0/42", "orders", 0, 42n, 1, 0]);
    assert.deepEqual(d.value, Buffer.from([0, 1, 2, 255]));
    assert.deepEqual(d.key, Buffer.from("customer-7"));
    assert.deepEqual(d.headers.map((h) => [h.key, [...h.value]]), [["trace", [...Buffer.from("abc")]], ["trace", [0, 255]]]);
    assert.equal(d.timestampMs, Date.UTC(2026, 10, 23, 10));
    assert.equal(t.value, null);
    assert.equal(t.key, null);
  });

  it("reads back exactly the deliveries of siding's own envelope (sdk/testdata)", () => {
    const text = readFileSync(new URL("../../testdata/batch-envelope.json", import.meta.url), "utf8");
    const vector = JSON.parse(text);
    const b64 = (s) => (s === null ? null : Buffer.from(s, "base64"));
    const got = deliveriesFromBatch(Buffer.from(vector.body));
    assert.equal(got.length, vector.deliveries.length);
    vector.deliveries.forEach((want, n) => {
      const d = got[n];
      assert.deepEqual([d.id, d.topic, d.partition, d.timestampMs, d.attempt, d.lane], [want.id, want.topic, want.partition, want.timestamp_ms, want.attempt, want.lane]);
      assert.equal(d.offset, BigInt(want.id.split("/").at(-1)), "exact past 2^53");
      assert.deepEqual(d.key, b64(want.key_base64));
      assert.deepEqual(d.value, b64(want.value_base64));
      assert.deepEqual(d.headers.map((h) => [h.key, h.value]), want.headers.map((h) => [h.key, b64(h.value_base64)]));
    });
  });

  it("names what is wrong with a bad batch", () => {
    const bad = (items) => () => deliveriesFromBatch(Buffer.from(typeof items === "string" ? items : JSON.stringify(items)));
    assert.throws(bad("[{"), /not JSON/);
    assert.throws(bad({}), /not a JSON array/);
    assert.throws(bad([EVENT, { ...EVENT, sidingoffset: "42" }]), /batch item 1: "sidingoffset" must be an integer/);
    assert.throws(bad([{ ...EVENT, data_base64: "***" }]), /batch item 0: "data_base64" must be base64/);
    assert.throws(bad([{ ...EVENT, sidingheaders: [{ value_base64: "" }] }]), /sidingheaders\[0\]: "key" must be a string/);
  });

  it("answers one result per delivery, per item", () => {
    const a = batchAnswer(
      ["a", "b", "c", "d", "e"],
      [ack(), retry({ afterSeconds: 30, reason: "rate limited" }), dead("XBT"), backoff({ afterSeconds: 4, reason: "db" }), ack([{ topic: "out", value: "v" }])],
    );
    assert.equal(a.status, 200);
    assert.equal(a.headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(a.body), {
      results: [
        { id: "a", verdict: "ack" },
        { id: "b", verdict: "retry", after: 30, reason: "rate limited" },
        { id: "c", verdict: "dead", reason: "XBT" },
        { id: "d", verdict: "retry", after: 4, reason: "db" },
        { id: "e", verdict: "ack", outputs: [{ topic: "out", value_base64: "dg==" }] },
      ],
    });
  });

  it("answers 429 with the longest Retry-After when every delivery backs off", () => {
    const a = batchAnswer(["a", "b"], [backoff({ afterSeconds: 1, reason: "db" }), backoff({ afterSeconds: 7.5 })]);
    assert.equal(a.status, 429);
    assert.equal(a.headers["retry-after"], "8");
    assert.equal(a.body, "db");
  });
});
